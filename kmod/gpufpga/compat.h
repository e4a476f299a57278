/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel interfaces that changed between the series gpufpga supports
 * (6.1 to current), chosen by the kernel's own version number.
 */
#ifndef GPUFPGA_COMPAT_H
#define GPUFPGA_COMPAT_H

#include <linux/eventfd.h>
#include <linux/hrtimer.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/version.h>

/* 6.8 dropped eventfd_signal()'s count: it always adds one. */
/*
 * Since 6.5 the PCI core enables AER reporting for every device. Where AER
 * is not the OS's to drive, enabling it fails, and nothing is lost.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0)
static inline void gpufpga_enable_error_reporting(struct pci_dev *pdev)
{
}
#else
#include <linux/aer.h>
static inline void gpufpga_enable_error_reporting(struct pci_dev *pdev)
{
	pci_enable_pcie_error_reporting(pdev);
}
#endif

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
#define gpufpga_eventfd_signal(ctx)	eventfd_signal(ctx)
#else
#define gpufpga_eventfd_signal(ctx)	eventfd_signal(ctx, 1)
#endif

/* 6.10: __assign_str() takes the source from the __string() field. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
#define gpufpga_assign_str(field, src)	__assign_str(field)
#else
#define gpufpga_assign_str(field, src)	__assign_str(field, src)
#endif

/* 6.13: symbol namespaces are strings. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
#define GPUFPGA_IMPORT_DMA_BUF_NS()	MODULE_IMPORT_NS("DMA_BUF")
#else
#define GPUFPGA_IMPORT_DMA_BUF_NS()	MODULE_IMPORT_NS(DMA_BUF)
#endif

/* 6.3: vm_flags may only change through vm_flags_set(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

/* 6.8: the legacy interrupt's flag is PCI_IRQ_INTX. */
#ifndef PCI_IRQ_INTX
#define PCI_IRQ_INTX	PCI_IRQ_LEGACY
#endif

/* 6.13: hrtimer_setup() sets up a timer with its function. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
static inline void gpufpga_hrtimer_setup(struct hrtimer *timer,
					 enum hrtimer_restart (*fn)(struct hrtimer *))
{
	hrtimer_setup(timer, fn, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
}
#else
static inline void gpufpga_hrtimer_setup(struct hrtimer *timer,
					 enum hrtimer_restart (*fn)(struct hrtimer *))
{
	hrtimer_init(timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	timer->function = fn;
}
#endif

#endif /* GPUFPGA_COMPAT_H */
