# The rig's QEMU devices: the q35 machine, virtio 9p and rng for the test
# harness, ivshmem for the control port and the simulated GPU, PCIe root
# ports, and the Intel IOMMU (vmtest-iommu); xdma-model itself depends on
# PCI only.
CONFIG_Q35=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_9P=y
CONFIG_VIRTIO_RNG=y
CONFIG_IVSHMEM_DEVICE=y
CONFIG_PCIE_PORT=y
CONFIG_VTD=y
