// SPDX-License-Identifier: GPL-2.0
/*
 * Register access. On hardware the XDMA registers are MMIO in the DMA BAR.
 * On the test rig the FPGA is simulated by a host process, and the QEMU
 * ivshmem device that stands for it cannot trap MMIO: each access becomes a
 * request in a mailbox in the device's BAR2, announced through its doorbell
 * and answered synchronously (kmod/gpufpga/gpufpga_rig.h). Nothing
 * else in the driver knows which transport it runs on.
 */
#include <linux/delay.h>
#include <linux/io.h>
#include <linux/ktime.h>

#include "gpufpga.h"
#include "gpufpga_rig.h"

#define GPUFPGA_RIG_TIMEOUT_US	(2 * USEC_PER_SEC)
#define GPUFPGA_DEAD		0xffffffff

static u32 mmio_read(struct gpufpga_dev *dev, u32 off)
{
	return ioread32(dev->bar + off);
}

static void mmio_write(struct gpufpga_dev *dev, u32 off, u32 val)
{
	iowrite32(val, dev->bar + off);
}

static const struct gpufpga_regs_ops mmio_ops = {
	.read = mmio_read,
	.write = mmio_write,
};

/*
 * One mailbox round trip. A device model that does not answer reads as a
 * device that fell off the bus: all ones.
 */
static u32 rig_call(struct gpufpga_dev *dev, u32 op, u32 off, u32 val)
{
	void __iomem *mb = dev->mbox + RIG_REG_MBOX;
	ktime_t deadline;
	u32 seq, ret;

	mutex_lock(&dev->regs_lock);
	seq = ++dev->mbox_seq;
	writel(op, mb + RIG_REQ_OP);
	writel(off, mb + RIG_REQ_ARG0);
	writel(val, mb + RIG_REQ_ARG1);
	wmb();	/* the request before its sequence number */
	writel(seq, mb + RIG_REQ_SEQ);
	writel(RIG_HOST_PEER << 16 | RIG_VEC_MBOX, dev->doorbell);
	deadline = ktime_add_us(ktime_get(), GPUFPGA_RIG_TIMEOUT_US);
	while (readl(mb + RIG_RSP_SEQ) != seq) {
		if (ktime_after(ktime_get(), deadline)) {
			dev_err_ratelimited(&dev->pdev->dev, "device model did not answer register op %u at %#x\n",
					    op, off);
			mutex_unlock(&dev->regs_lock);
			return GPUFPGA_DEAD;
		}
		cpu_relax();
	}
	rmb();	/* the answer after its sequence number */
	ret = readl(mb + RIG_RSP_STATUS) ? GPUFPGA_DEAD : readl(mb + RIG_RSP_VAL0);
	mutex_unlock(&dev->regs_lock);
	return ret;
}

static u32 rig_read(struct gpufpga_dev *dev, u32 off)
{
	return rig_call(dev, RIG_OP_READ32, off, 0);
}

static void rig_write(struct gpufpga_dev *dev, u32 off, u32 val)
{
	rig_call(dev, RIG_OP_WRITE32, off, val);
}

static const struct gpufpga_regs_ops rig_ops = {
	.read = rig_read,
	.write = rig_write,
};

/*
 * A read that a device off the bus answers with all ones is confirmed before
 * the link is declared down: a count register can hold all ones, but the
 * config block's identifier never does, and a device that is gone fails
 * its config-space read too.
 */
static bool gpufpga_link_lost(struct gpufpga_dev *dev)
{
	u32 id = dev->regs_ops->read(dev, XDMA_BASE(XDMA_TARGET_CONFIG, 0) + XDMA_REG_IDENTIFIER);

	return id == GPUFPGA_DEAD || !pci_device_is_present(dev->pdev);
}

/* May sleep on the rig. */
u32 gpufpga_read(struct gpufpga_dev *dev, u32 off)
{
	u32 v = dev->regs_ops->read(dev, off);

	if (unlikely(v == GPUFPGA_DEAD) && !dev->link_down && gpufpga_link_lost(dev)) {
		dev->link_down = true;
		dev_err(&dev->pdev->dev, "register %#x reads all ones: link down\n", off);
	}
	return v;
}

void gpufpga_write(struct gpufpga_dev *dev, u32 off, u32 val)
{
	dev->regs_ops->write(dev, off, val);
}

/* Finds the BAR whose config block carries the XDMA identifier. */
static int gpufpga_find_dma_bar(struct gpufpga_dev *dev)
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
			return 0;
		}
		pcim_iounmap_regions(pdev, BIT(i));
	}
	return -ENODEV;
}

static int gpufpga_rig_init(struct gpufpga_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;

	if (pci_resource_len(pdev, 2) < RIG_MBOX_SIZE || pci_resource_len(pdev, 0) < 16)
		return -ENODEV;
	if (pcim_iomap_regions(pdev, BIT(2), KBUILD_MODNAME))
		return -EBUSY;
	dev->mbox = pcim_iomap_table(pdev)[2];
	/* Every rig device is 1af4:1110: only the FPGA's mailbox is ours. */
	if (readl(dev->mbox + RIG_MBOX_OFF_MAGIC) != RIG_MBOX_MAGIC) {
		pcim_iounmap_regions(pdev, BIT(2));
		dev->mbox = NULL;
		return -ENODEV;
	}
	if (readl(dev->mbox + RIG_MBOX_OFF_VERSION) != RIG_MBOX_VERSION) {
		dev_err(&pdev->dev, "rig mailbox version %u, want %u\n",
			readl(dev->mbox + RIG_MBOX_OFF_VERSION), RIG_MBOX_VERSION);
		return -ENODEV;
	}
	if (pcim_iomap_regions(pdev, BIT(0), KBUILD_MODNAME))
		return -EBUSY;
	dev->doorbell = pcim_iomap_table(pdev)[0];
	dev->doorbell += RIG_DOORBELL;
	dev->mbox_seq = readl(dev->mbox + RIG_REG_MBOX + RIG_RSP_SEQ);
	return 0;
}

int gpufpga_regs_init(struct gpufpga_dev *dev)
{
	int ret;

	mutex_init(&dev->regs_lock);
	if (dev->pdev->vendor == PCI_VENDOR_ID_REDHAT_QUMRANET) {
		ret = gpufpga_rig_init(dev);
		dev->regs_ops = &rig_ops;
	} else {
		ret = gpufpga_find_dma_bar(dev);
		dev->regs_ops = &mmio_ops;
	}
	return ret;
}

u32 gpufpga_chan_reg(struct gpufpga_chan *ch, u32 reg)
{
	return XDMA_BASE(ch->dir == GPUFPGA_H2C ? XDMA_TARGET_H2C : XDMA_TARGET_C2H,
			 ch->index) + reg;
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

/* Reads the identifier registers: which channels exist, and their kind. */
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
			if (dev->link_down)
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

/*
 * Clears RUN and waits, boundedly, for the engine to go idle; if it stays
 * busy, halts descriptor fetching too. Returns the final status, read-
 * cleared. Called with ch->lock held, or before the channel is in use.
 */
u32 gpufpga_chan_halt(struct gpufpga_chan *ch)
{
	struct gpufpga_dev *dev = ch->dev;
	u32 halt_bit = ch->dir == GPUFPGA_C2H ? BIT(XDMA_COMMON_C2H_SHIFT + ch->index) :
						BIT(ch->index);
	u32 status;
	int i;

	if (dev->dead && !dev->pdev->is_busmaster)
		return 0;	/* cut off the bus already: nothing can move */
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_CONTROL_W1C), XDMA_CTRL_RUN);
	for (i = 0; i < 100; i++) {
		status = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS));
		if (dev->link_down || !(status & XDMA_STAT_BUSY))
			break;
		usleep_range(500, 1000);
	}
	if (!dev->link_down && (status & XDMA_STAT_BUSY)) {
		dev_err(&dev->pdev->dev, "%s channel %u stays busy after RUN cleared: halting descriptor fetch\n",
			ch->dir ? "C2H" : "H2C", ch->index);
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_DESC_HALT_W1S,
			      halt_bit);
		usleep_range(1000, 2000);
		status = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS));
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_DESC_HALT_W1C,
			      halt_bit);
	}
	/*
	 * An engine that will not stop may still write into memory about to
	 * be freed: cut it off the bus before anyone returns, and give up on
	 * the device.
	 */
	if (!dev->link_down && (status & XDMA_STAT_BUSY)) {
		dev_crit(&dev->pdev->dev, "%s channel %u does not halt: bus mastering off, device dead\n",
			 ch->dir ? "C2H" : "H2C", ch->index);
		pci_clear_master(dev->pdev);
		dev->dead = true;
	}
	return gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS_RC));
}
