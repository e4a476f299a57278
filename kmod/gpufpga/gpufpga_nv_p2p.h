/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * NVIDIA's third-party P2P kernel ABI (nv-p2p.h), declared from NVIDIA's
 * documentation so the module builds without the NVIDIA source tree. When
 * built with NVIDIA_SRC=<tree>, NVIDIA's own header is used instead and
 * these declarations must agree with it (the compiler checks).
 *
 * The symbols are resolved at run time (symbol_get), never linked, so the
 * module loads without nvidia.ko. A stand-in for nvidia.ko
 * (hw/testbench/nvp2p_sim) exports the same symbols from this header.
 */
#ifndef GPUFPGA_NV_P2P_H
#define GPUFPGA_NV_P2P_H

#include <linux/types.h>

#ifdef GPUFPGA_NVIDIA_HEADER
#include GPUFPGA_NVIDIA_HEADER
#else

#define NVIDIA_P2P_MAJOR_VERSION(v)	(((v) & 0xffff0000) >> 16)
#define NVIDIA_P2P_MINOR_VERSION(v)	((v) & 0x0000ffff)

/* Major 2 (driver 580.65.06 on) added flags to the page table. */
#define NVIDIA_P2P_PAGE_TABLE_VERSION		0x00020000
#define NVIDIA_P2P_PAGE_TABLE_VERSION_V1	0x00010002
#define NVIDIA_P2P_DMA_MAPPING_VERSION		0x00020003

#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE	0x1

#define NVIDIA_P2P_FLAGS_DEFAULT		0
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING	1

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB,
	NVIDIA_P2P_PAGE_SIZE_128KB,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

struct nvidia_p2p_page {
	uint64_t physical_address;
	union nvidia_p2p_request_registers {
		struct {
			uint32_t wreqmb_h;
			uint32_t rreqmb_h;
			uint32_t rreqmb_0;
			uint32_t reserved[3];
		} fermi;
	} registers;
};

struct nvidia_p2p_page_table {
	uint32_t version;
	uint32_t page_size;	/* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	uint32_t entries;
	uint8_t *gpu_uuid;
	uint32_t flags;		/* major 2 only */
};

struct pci_dev;

struct nvidia_p2p_dma_mapping {
	uint32_t version;
	enum nvidia_p2p_page_size_type page_size_type;
	uint32_t entries;
	uint64_t *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address, uint64_t length,
			 struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space,
			 uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table,
				    uint32_t flags);
int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    uint32_t flags);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

#endif /* GPUFPGA_NVIDIA_HEADER */

/* Page tables we accept: majors 1 and 2. */
static inline bool gpufpga_nv_page_table_ok(const struct nvidia_p2p_page_table *pt)
{
	u32 major = NVIDIA_P2P_MAJOR_VERSION(pt->version);

	return major == 1 || major == 2;
}

#endif /* GPUFPGA_NV_P2P_H */
