// SPDX-License-Identifier: GPL-2.0
/*
 * What the driver's files share of its devices: the device numbers, a
 * device's last reference, and the workqueue that builds chains and runs
 * channel watchdogs.
 */
#include <linux/idr.h>
#include <linux/slab.h>

#include "gpufpga.h"

struct workqueue_struct *gpufpga_wq;
DEFINE_IDA(gpufpga_ida);

/**
 * gpufpga_dev_release - free a device once its last reference is gone
 * @ref: the device's
 *
 * Removal, every open file and every pin hold one.
 *
 * Context: process context.
 */
void gpufpga_dev_release(struct kref *ref)
{
	struct gpufpga_dev *dev = container_of(ref, struct gpufpga_dev, ref);

	ida_free(&gpufpga_ida, dev->id);
	pci_dev_put(dev->pdev);
	kfree(dev);
}
