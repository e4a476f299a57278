// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs, per device under gpufpga/<name>/:
 *   channels		state and counters of every channel
 *   pins		every pin of every open file
 *   regs		the engine's registers, "offset value" a line (status
 *			is read without clearing it)
 *   chain-{h2c,c2h}N	the last descriptor chain the channel ran: a header
 *			(u64 bus address, u32 descriptors, u32 first adjacent
 *			count, little-endian) and the descriptors, byte for byte
 */
#include <linux/debugfs.h>
#include <linux/seq_file.h>

#include "gpufpga.h"

static struct dentry *gpufpga_debugfs_root;

static int channels_show(struct seq_file *s, void *unused)
{
	struct gpufpga_dev *dev = s->private;
	struct gpufpga_chan *ch;
	int ci;

	seq_puts(s, "channel kind   active queued xfers bytes errors timeouts revoked last_status\n");
	gpufpga_for_each_chan(dev, ch, ci) {
		spin_lock_irq(&ch->lock);
		seq_printf(s, "%s%d    %-6s %-6s %6zu %llu %llu %llu %llu %llu %#x\n",
			   ch->dir ? "c2h" : "h2c", ch->index, ch->stream ? "stream" : "mm",
			   ch->active ? "yes" : "no", list_count_nodes(&ch->queue),
			   ch->xfers, ch->bytes, ch->errors, ch->timeouts, ch->revoked,
			   ch->last_status);
		spin_unlock_irq(&ch->lock);
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(channels);

static const char *gpufpga_kind_name(u32 kind)
{
	static const char * const kinds[] = {
		[GPUFPGA_PIN_GPU] = "gpu",
		[GPUFPGA_PIN_HOST] = "host",
		[GPUFPGA_PIN_DMABUF] = "dmabuf",
	};

	return kind < ARRAY_SIZE(kinds) && kinds[kind] ? kinds[kind] : "?";
}

static int pins_show(struct seq_file *s, void *unused)
{
	struct gpufpga_dev *dev = s->private;
	struct gpufpga_file *f;
	struct gpufpga_mem *m;
	unsigned long handle;

	seq_puts(s, "file handle kind addr len pages runs state inflight\n");
	mutex_lock(&dev->files_lock);
	list_for_each_entry(f, &dev->files, node) {
		mutex_lock(&f->lock);
		xa_for_each(&f->pins, handle, m)
			seq_printf(s, "%p %lu %s %#llx %llu %u %u %s %d\n", f, handle,
				   gpufpga_kind_name(m->kind), m->addr, m->len, m->npages, m->nruns,
				   m->state == GPUFPGA_MEM_ACTIVE ? "active" : "revoked",
				   atomic_read(&m->inflight));
		mutex_unlock(&f->lock);
	}
	mutex_unlock(&dev->files_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pins);

static int regs_show(struct seq_file *s, void *unused)
{
	static const u32 chan_regs[] = {
		XDMA_REG_IDENTIFIER, XDMA_REG_CONTROL, XDMA_REG_STATUS, XDMA_REG_COMPLETED,
		XDMA_REG_ALIGNMENTS, XDMA_REG_INT_ENABLE,
	};
	static const u32 sgdma_regs[] = {
		XDMA_REG_IDENTIFIER, XDMA_REG_DESC_LO, XDMA_REG_DESC_HI, XDMA_REG_DESC_ADJ,
		XDMA_REG_DESC_CREDITS,
	};
	static const u32 block_regs[][2] = {
		{ XDMA_TARGET_IRQ, XDMA_REG_IDENTIFIER },
		{ XDMA_TARGET_IRQ, XDMA_REG_CHAN_INT_ENABLE },
		{ XDMA_TARGET_IRQ, XDMA_REG_CHAN_INT_REQUEST },
		{ XDMA_TARGET_IRQ, XDMA_REG_CHAN_INT_PENDING },
		{ XDMA_TARGET_IRQ, XDMA_REG_CHAN_VECTOR },
		{ XDMA_TARGET_IRQ, XDMA_REG_CHAN_VECTOR + 4 },
		{ XDMA_TARGET_CONFIG, XDMA_REG_IDENTIFIER },
		{ XDMA_TARGET_SGDMA_COMMON, XDMA_REG_IDENTIFIER },
		{ XDMA_TARGET_SGDMA_COMMON, XDMA_REG_DESC_HALT },
		{ XDMA_TARGET_SGDMA_COMMON, XDMA_REG_CREDIT_MODE },
	};
	struct gpufpga_dev *dev = s->private;
	struct gpufpga_chan *ch;
	int ci;
	u32 base, off;
	int i;

	gpufpga_for_each_chan(dev, ch, ci) {
		base = gpufpga_chan_reg(ch, 0);
		for (i = 0; i < ARRAY_SIZE(chan_regs); i++) {
			off = base + chan_regs[i];
			seq_printf(s, "%#06x %#010x\n", off, gpufpga_read(dev, off));
		}
		base = XDMA_BASE(ch->dir ? XDMA_TARGET_C2H_SGDMA : XDMA_TARGET_H2C_SGDMA,
				 ch->index);
		for (i = 0; i < ARRAY_SIZE(sgdma_regs); i++) {
			off = base + sgdma_regs[i];
			seq_printf(s, "%#06x %#010x\n", off, gpufpga_read(dev, off));
		}
	}
	for (i = 0; i < ARRAY_SIZE(block_regs); i++) {
		off = XDMA_BASE(block_regs[i][0], 0) + block_regs[i][1];
		seq_printf(s, "%#06x %#010x\n", off, gpufpga_read(dev, off));
	}
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(regs);

struct chain_header {
	__le64 addr;
	__le32 count;
	__le32 first_adj;
};

static ssize_t chain_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	struct gpufpga_chan *ch = file->private_data;
	struct gpufpga_ring *ring;
	struct chain_header h;
	void *snap;
	size_t len;
	ssize_t ret;

	snap = kvmalloc(sizeof(h) + (size_t)gpufpga_max_descs * XDMA_DESC_SIZE, GFP_KERNEL);
	if (!snap)
		return -ENOMEM;
	/*
	 * The ring last run changes only when a chain built in the spare one
	 * starts; while build_mutex is held nothing writes either ring (a
	 * chain rerun in place is built under it too).
	 */
	mutex_lock(&ch->build_mutex);
	spin_lock_irq(&ch->lock);
	ring = &ch->rings[ch->cur];
	spin_unlock_irq(&ch->lock);
	len = sizeof(h) + (size_t)ring->count * XDMA_DESC_SIZE;
	h.addr = cpu_to_le64(ring->bus);
	h.count = cpu_to_le32(ring->count);
	h.first_adj = cpu_to_le32(ring->first_adj);
	memcpy(snap, &h, sizeof(h));
	memcpy(snap + sizeof(h), ring->desc, len - sizeof(h));
	mutex_unlock(&ch->build_mutex);
	ret = simple_read_from_buffer(buf, count, ppos, snap, len);
	kvfree(snap);
	return ret;
}

static const struct file_operations chain_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = chain_read,
	.llseek = default_llseek,
};

/**
 * gpufpga_debugfs_init - the device's files under gpufpga/
 * @dev: the device, probed
 *
 * Context: process context.
 */
void gpufpga_debugfs_init(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci;
	char name[16];

	dev->debugfs = debugfs_create_dir(dev->name, gpufpga_debugfs_root);
	debugfs_create_file("channels", 0400, dev->debugfs, dev, &channels_fops);
	debugfs_create_file("pins", 0400, dev->debugfs, dev, &pins_fops);
	debugfs_create_file("regs", 0400, dev->debugfs, dev, &regs_fops);
	gpufpga_for_each_chan(dev, ch, ci) {
		snprintf(name, sizeof(name), "chain-%s%d", ch->dir ? "c2h" : "h2c", ch->index);
		debugfs_create_file(name, 0400, dev->debugfs, ch, &chain_fops);
	}
}

/**
 * gpufpga_debugfs_exit - remove the device's files
 * @dev: the device
 *
 * Returns once no reader is left in them: removal frees what they show.
 *
 * Context: process context, may sleep.
 */
void gpufpga_debugfs_exit(struct gpufpga_dev *dev)
{
	debugfs_remove_recursive(dev->debugfs);
}

void gpufpga_debugfs_module_init(void)
{
	gpufpga_debugfs_root = debugfs_create_dir("gpufpga", NULL);
}

void gpufpga_debugfs_module_exit(void)
{
	debugfs_remove_recursive(gpufpga_debugfs_root);
}
