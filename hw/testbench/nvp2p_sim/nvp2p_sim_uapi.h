/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * /dev/nvp2p_sim: the simulated GPU's stand-in for cudaMalloc/cudaFree.
 * Allocations belong to the file descriptor that made them and are freed,
 * revoking live P2P pins, when it is closed.
 */
#ifndef NVP2P_SIM_UAPI_H
#define NVP2P_SIM_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* How an allocation's pages are laid out in VRAM. */
#define NVP2P_SIM_CONTIGUOUS	0	/* one run, first fit */
#define NVP2P_SIM_FRAGMENTED	1	/* no two neighbours contiguous */
#define NVP2P_SIM_RANDOM_RUNS	2	/* runs of 1-4 pages in random order */

struct nvp2p_sim_alloc {
	__u64 size;	/* in: bytes, rounded up to 64 KiB */
	__u32 pattern;	/* in: NVP2P_SIM_* */
	__u32 seed;	/* in: for NVP2P_SIM_RANDOM_RUNS */
	__u64 va;	/* out: GPU virtual address, 2 MiB aligned */
	__u64 pages;	/* out: 64 KiB pages */
};

struct nvp2p_sim_free {
	__u64 va;
};

/* The bus address of every page of an allocation. */
struct nvp2p_sim_table {
	__u64 va;
	__u64 entries;	/* in: room in addrs; out: pages */
	__u64 addrs;	/* user pointer to __u64[entries] */
};

struct nvp2p_sim_counters {
	__u64 live_allocs;
	__u64 live_pins;
	__u64 callbacks_fired;
	__u64 free_pages;
	__u64 total_pages;	/* allocatable: VRAM pages less the header */
	__u64 bar;		/* bus address of VRAM */
	__u64 live_dmabufs;
	__u64 caps;		/* NVP2P_SIM_CAP_* */
};

/* In nvp2p_sim_counters.caps: dma-buf export (the open driver's). */
#define NVP2P_SIM_CAP_DMABUF	(1ULL << 0)

/*
 * Export flags. NVP2P_SIM_EXPORT_PCIE is CUDA's
 * CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE: the importer gets BAR
 * addresses, not mapped through an IOMMU that translates for it.
 * NVP2P_SIM_EXPORT_DYNAMIC is no CUDA export: a dynamic exporter whose
 * exports are revoked through move_notify when the allocation is freed
 * (CUDA's keep the memory until released); only dynamic importers may
 * attach.
 */
#define NVP2P_SIM_EXPORT_PCIE		(1U << 0)
#define NVP2P_SIM_EXPORT_DYNAMIC	(1U << 1)

struct nvp2p_sim_export {
	__u64 va;	/* 64 KiB aligned, inside one allocation */
	__u64 size;	/* 64 KiB multiple */
	__s32 fd;	/* out */
	__u32 flags;	/* NVP2P_SIM_EXPORT_* */
};

#define NVP2P_SIM_ALLOC		_IOWR('N', 0x00, struct nvp2p_sim_alloc)
#define NVP2P_SIM_FREE		_IOW('N', 0x01, struct nvp2p_sim_free)
#define NVP2P_SIM_TABLE		_IOWR('N', 0x02, struct nvp2p_sim_table)
#define NVP2P_SIM_COUNTERS	_IOR('N', 0x03, struct nvp2p_sim_counters)
#define NVP2P_SIM_EXPORT_DMABUF	_IOWR('N', 0x04, struct nvp2p_sim_export)

#endif /* NVP2P_SIM_UAPI_H */
