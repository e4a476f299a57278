/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The bridge between gpufpga and NVIDIA's P2P API.
 *
 * gpufpga.ko never references NVIDIA's symbols, so it loads on any machine.
 * gpufpga_nv.ko links against them (and so loads only after nvidia.ko, or a
 * module standing in for it) and registers them here; until it does, GPU pins
 * report -EOPNOTSUPP. Kernels since 6.6 (and their stable backports) refuse
 * symbol_get() of NVIDIA's non-GPL exports, which rules out resolving them
 * from gpufpga.ko itself.
 */
#ifndef GPUFPGA_NV_OPS_H
#define GPUFPGA_NV_OPS_H

#include <linux/module.h>

#include "gpufpga_nv_p2p.h"

struct gpufpga_nv_ops {
	struct module *owner;
	typeof(&nvidia_p2p_get_pages) get_pages;
	typeof(&nvidia_p2p_put_pages) put_pages;
	typeof(&nvidia_p2p_get_pages_persistent) get_pages_persistent;
	typeof(&nvidia_p2p_put_pages_persistent) put_pages_persistent;
	typeof(&nvidia_p2p_dma_map_pages) dma_map_pages;
	typeof(&nvidia_p2p_dma_unmap_pages) dma_unmap_pages;
};

int gpufpga_register_nv(const struct gpufpga_nv_ops *ops);
void gpufpga_unregister_nv(const struct gpufpga_nv_ops *ops);

#endif /* GPUFPGA_NV_OPS_H */
