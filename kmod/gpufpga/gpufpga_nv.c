// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * gpufpga_nv: hands NVIDIA's P2P entry points to gpufpga (see nv_ops.h).
 *
 * NVIDIA's proprietary nvidia.ko is not GPL: the kernel refuses a module
 * that imports its symbols and uses any GPL-only one. This module uses
 * none, under a dual licence, as gdrdrv does.
 */
#include <linux/module.h>

#include "nv_ops.h"

/* Drivers before the persistent API lack these: then they resolve to NULL. */
extern typeof(nvidia_p2p_get_pages_persistent) nvidia_p2p_get_pages_persistent __weak;
extern typeof(nvidia_p2p_put_pages_persistent) nvidia_p2p_put_pages_persistent __weak;

static struct gpufpga_nv_ops gpufpga_nv_ops = {
	.owner = THIS_MODULE,
	.get_pages = nvidia_p2p_get_pages,
	.put_pages = nvidia_p2p_put_pages,
	.dma_map_pages = nvidia_p2p_dma_map_pages,
	.dma_unmap_pages = nvidia_p2p_dma_unmap_pages,
};

static int __init gpufpga_nv_init(void)
{
	if (nvidia_p2p_get_pages_persistent && nvidia_p2p_put_pages_persistent) {
		gpufpga_nv_ops.get_pages_persistent = nvidia_p2p_get_pages_persistent;
		gpufpga_nv_ops.put_pages_persistent = nvidia_p2p_put_pages_persistent;
	}
	return gpufpga_register_nv(&gpufpga_nv_ops);
}

static void __exit gpufpga_nv_exit(void)
{
	gpufpga_unregister_nv(&gpufpga_nv_ops);
}

module_init(gpufpga_nv_init);
module_exit(gpufpga_nv_exit);

MODULE_DESCRIPTION("NVIDIA P2P bridge for gpufpga");
MODULE_LICENSE("Dual MIT/GPL");
