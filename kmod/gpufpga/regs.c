// SPDX-License-Identifier: GPL-2.0
/*
 * Register access: plain MMIO in the DMA BAR. Nothing here sleeps, so
 * registers may be read and written under spinlocks and in hard IRQ.
 */
#include <linux/io.h>

#include "gpufpga.h"

/*
 * A read that a device off the bus answers with all ones is confirmed before
 * the link is declared down: a count register can hold all ones, but the
 * config block's identifier never does, and a device that is gone fails
 * its config-space read too.
 */
static bool gpufpga_link_lost(struct gpufpga_dev *dev)
{
	u32 id = ioread32(dev->bar + XDMA_BASE(XDMA_TARGET_CONFIG, 0) + XDMA_REG_IDENTIFIER);

	return id == GPUFPGA_DEAD || !pci_device_is_present(dev->pdev);
}

/**
 * gpufpga_read - read a register of the DMA BAR
 * @dev: the device
 * @off: the register's offset
 *
 * All ones from a device off the bus marks its link down, once confirmed.
 *
 * Context: any.
 * Return: the register's value; 0 where the function is offline: nothing
 * happened there.
 */
u32 gpufpga_read(struct gpufpga_dev *dev, u32 off)
{
	u32 v;

	if (READ_ONCE(dev->offline))
		return 0;
	v = ioread32(dev->bar + off);

	if (unlikely(v == GPUFPGA_DEAD) && !READ_ONCE(dev->link_down) && gpufpga_link_lost(dev)) {
		WRITE_ONCE(dev->link_down, true);
		dev_err(&dev->pdev->dev, "register %#x reads all ones: link down\n", off);
		wake_up_all(&dev->user_wq);	/* user interrupt waiters */
	}
	return v;
}

/**
 * gpufpga_write - write a register of the DMA BAR, unless the function is offline
 * @dev: the device
 * @off: the register's offset
 * @val: its new value
 *
 * Context: any.
 */
void gpufpga_write(struct gpufpga_dev *dev, u32 off, u32 val)
{
	if (!READ_ONCE(dev->offline))
		iowrite32(val, dev->bar + off);
}

/* The address of register reg in ch's channel block. */
u32 gpufpga_chan_reg(struct gpufpga_chan *ch, u32 reg)
{
	return XDMA_BASE(ch->dir == GPUFPGA_H2C ? XDMA_TARGET_H2C : XDMA_TARGET_C2H,
			 ch->index) + reg;
}

/* Whether the BAR answers with the XDMA identifier, offline or not. */
bool gpufpga_answers(struct gpufpga_dev *dev)
{
	return ioread32(dev->bar + XDMA_BASE(XDMA_TARGET_CONFIG, 0)) >> 20 == XDMA_ID_SUBSYSTEM;
}

/**
 * gpufpga_regs_init - find and map the DMA BAR
 * @dev: the device
 *
 * The BAR whose config block carries the XDMA identifier.
 *
 * Context: process context (probe).
 * Return: 0, or -ENODEV where no BAR does.
 */
int gpufpga_regs_init(struct gpufpga_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;
	void __iomem *bar;
	int i;

	for (i = 0; i < PCI_STD_NUM_BARS; i++) {
		if (!(pci_resource_flags(pdev, i) & IORESOURCE_MEM) ||
		    pci_resource_len(pdev, i) < XDMA_REG_SPACE)
			continue;
		/* Claimed, so that nothing else maps the engine's registers. */
		if (pcim_iomap_regions(pdev, BIT(i), KBUILD_MODNAME))
			continue;
		bar = pcim_iomap_table(pdev)[i];
		if (ioread32(bar + XDMA_BASE(XDMA_TARGET_CONFIG, 0)) >> 20 == XDMA_ID_SUBSYSTEM) {
			dev->bar = bar;
			dev->bar_index = i;
			return 0;
		}
		pcim_iounmap_regions(pdev, BIT(i));
	}
	return -ENODEV;
}

/* PG195's ALIGNMENTS: address alignment, length granularity, address bits. */
static void gpufpga_read_alignments(struct gpufpga_dev *dev, struct gpufpga_chan *ch)
{
	u32 v = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_ALIGNMENTS));
	u32 bits = v & 0xff;

	ch->addr_align = max_t(u32, (v >> 16) & 0xff, 1);
	ch->len_gran = max_t(u32, (v >> 8) & 0xff, 1);
	if (bits < 32 || bits > 64)
		bits = 64;
	dev->addr_bits = dev->addr_bits ? min(dev->addr_bits, bits) : bits;
}

/**
 * gpufpga_discover_channels - find which channels exist, and their kind
 * @dev: the device
 *
 * From the identifier and ALIGNMENTS registers.
 *
 * Context: process context (probe).
 * Return: 0, or -ENODEV where there is none or the link is down.
 */
int gpufpga_discover_channels(struct gpufpga_dev *dev)
{
	static const u32 targets[2] = { XDMA_TARGET_H2C, XDMA_TARGET_C2H };
	int dir, i, bits = 0;
	u32 id;

	for (dir = 0; dir < 2; dir++) {
		for (i = 0; i < GPUFPGA_MAX_CHANNELS; i++) {
			struct gpufpga_chan *ch = &dev->chan[dir][i];

			ch->dev = dev;
			ch->dir = dir;
			ch->index = i;
			id = gpufpga_read(dev, XDMA_BASE(targets[dir], i) + XDMA_REG_IDENTIFIER);
			if (READ_ONCE(dev->link_down))
				return -ENODEV;
			if (id >> 20 != XDMA_ID_SUBSYSTEM || (id >> 16 & 0xf) != targets[dir] ||
			    (id >> 8 & 0xf) != i)
				continue;
			ch->present = true;
			ch->stream = id & XDMA_ID_STREAM;
			gpufpga_read_alignments(dev, ch);
			dev->nchan[dir]++;
			dev->ip_version = id & 0xff;
		}
	}
	/* Interrupt bits: H2C channels first, then C2H (PG195). */
	for (dir = 0; dir < 2; dir++)
		for (i = 0; i < GPUFPGA_MAX_CHANNELS; i++)
			if (dev->chan[dir][i].present)
				dev->chan[dir][i].irq_bit = dir ? dev->nchan[0] + i : i;
	bits = dev->nchan[0] + dev->nchan[1];
	return bits ? 0 : -ENODEV;
}
