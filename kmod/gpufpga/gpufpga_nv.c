// SPDX-License-Identifier: GPL-2.0
/*
 * gpufpga_nv: hands NVIDIA's P2P entry points to gpufpga (see gpufpga_nv.h).
 */
#include <linux/module.h>

#include "gpufpga_nv.h"

static const struct gpufpga_nv_ops gpufpga_nv_ops = {
	.owner = THIS_MODULE,
	.get_pages = nvidia_p2p_get_pages,
	.put_pages = nvidia_p2p_put_pages,
	.get_pages_persistent = nvidia_p2p_get_pages_persistent,
	.put_pages_persistent = nvidia_p2p_put_pages_persistent,
	.dma_map_pages = nvidia_p2p_dma_map_pages,
	.dma_unmap_pages = nvidia_p2p_dma_unmap_pages,
};

static int __init gpufpga_nv_init(void)
{
	return gpufpga_register_nv(&gpufpga_nv_ops);
}

static void __exit gpufpga_nv_exit(void)
{
	gpufpga_unregister_nv(&gpufpga_nv_ops);
}

module_init(gpufpga_nv_init);
module_exit(gpufpga_nv_exit);

MODULE_DESCRIPTION("NVIDIA P2P bridge for gpufpga");
MODULE_LICENSE("GPL");
