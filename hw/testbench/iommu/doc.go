// Package iommu holds the guest tests of gpufpga on a machine whose IOMMU
// (QEMU's intel-iommu, in DMA translation mode) translates the FPGA's
// DMA: the rig boots it separately, through vmtest's TestIOMMU.
package iommu
