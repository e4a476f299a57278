// SPDX-License-Identifier: GPL-2.0
/*
 * gpufpga: peer DMA between an FPGA's Xilinx XDMA engine and NVIDIA GPU
 * memory. One misc device per FPGA (/dev/gpufpgaN); see uapi/gpufpga.h for
 * the ABI and gpufpga.h for the lock order.
 */
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/wait_bit.h>

#include "compat.h"
#include "gpufpga.h"

#define CREATE_TRACE_POINTS
#include "trace.h"

/* Read at probe: a device bound later (or rebound) takes the new value. */
static char *gpufpga_interrupts = "auto";
module_param_named(interrupts, gpufpga_interrupts, charp, 0644);
MODULE_PARM_DESC(interrupts, "interrupt kind to use: auto (MSI-X, else MSI, else INTx), msix, msi or intx");

static struct lock_class_key gpufpga_pending_key;

/* What INFO reports of the device's lifecycle (GPUFPGA_DEV_*). */
static u32 gpufpga_dev_state(struct gpufpga_dev *dev)
{
	if (READ_ONCE(dev->link_down) || READ_ONCE(dev->dead))
		return GPUFPGA_DEV_OFFLINE;
	if (READ_ONCE(dev->resetting))
		return GPUFPGA_DEV_RECOVERING;
	return GPUFPGA_DEV_READY;
}

static int gpufpga_ioctl_info(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_dev *dev = f->dev;
	struct gpufpga_info a = {};
	int dir, i;

	if (size < offsetofend(struct gpufpga_info, pin_kinds))
		return -EINVAL;
	a.abi_version = GPUFPGA_ABI_VERSION;
	a.ip_version = dev->ip_version;
	for (dir = 0; dir < 2; dir++) {
		for (i = 0; i < GPUFPGA_MAX_CHANNELS; i++) {
			struct gpufpga_chan *ch = &dev->chan[dir][i];
			u32 *flags = dir ? &a.c2h[i] : &a.h2c[i];

			if (ch->present)
				*flags = GPUFPGA_CHAN_PRESENT |
					 (ch->stream ? GPUFPGA_CHAN_STREAM : 0);
		}
	}
	a.pin_kinds = gpufpga_pin_kinds();
	a.max_desc_len = XDMA_DESC_SPLIT_LEN;
	a.card_mem_size = gpufpga_card_mem_size;
	a.max_descs = gpufpga_max_descs;
	a.max_segs = gpufpga_max_segs;
	a.max_pins = gpufpga_max_pins;
	a.default_timeout_ms = gpufpga_timeout_ms;
	a.max_pinned = gpufpga_max_pinned;
	a.max_pinned_total = gpufpga_max_pinned_total;
	a.pinned_total = atomic64_read(&dev->pinned_total);
	a.max_queued = gpufpga_max_queued;
	a.state = gpufpga_dev_state(dev);
	a.resets = READ_ONCE(dev->resets);
	a.errors = READ_ONCE(dev->errors);
	a.features = GPUFPGA_FEATURE_RESIDENT;
	return gpufpga_copy_out(arg, size, &a, sizeof(a));
}

static long gpufpga_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gpufpga_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;
	unsigned int size = _IOC_SIZE(cmd);
	static const u32 dirs[] = {
		[_IOC_NR(GPUFPGA_IOC_INFO)] = _IOC_DIR(GPUFPGA_IOC_INFO),
		[_IOC_NR(GPUFPGA_IOC_PIN)] = _IOC_DIR(GPUFPGA_IOC_PIN),
		[_IOC_NR(GPUFPGA_IOC_UNPIN)] = _IOC_DIR(GPUFPGA_IOC_UNPIN),
		[_IOC_NR(GPUFPGA_IOC_QUERY)] = _IOC_DIR(GPUFPGA_IOC_QUERY),
		[_IOC_NR(GPUFPGA_IOC_XFER)] = _IOC_DIR(GPUFPGA_IOC_XFER),
		[_IOC_NR(GPUFPGA_IOC_CANCEL)] = _IOC_DIR(GPUFPGA_IOC_CANCEL),
		[_IOC_NR(GPUFPGA_IOC_STREAM_START)] = _IOC_DIR(GPUFPGA_IOC_STREAM_START),
		[_IOC_NR(GPUFPGA_IOC_STREAM_RELEASE)] = _IOC_DIR(GPUFPGA_IOC_STREAM_RELEASE),
		[_IOC_NR(GPUFPGA_IOC_STREAM_STOP)] = _IOC_DIR(GPUFPGA_IOC_STREAM_STOP),
		[_IOC_NR(GPUFPGA_IOC_USER_IRQ)] = _IOC_DIR(GPUFPGA_IOC_USER_IRQ),
	};

	long ret = -ENOTTY;

	/*
	 * Dispatch on the number; the size is the struct's version. ABI 1's
	 * first STREAM_START was _IOW: it starts a stream without an id.
	 */
	if (_IOC_TYPE(cmd) != GPUFPGA_IOC_MAGIC || _IOC_NR(cmd) >= ARRAY_SIZE(dirs) ||
	    (_IOC_DIR(cmd) != dirs[_IOC_NR(cmd)] &&
	     (_IOC_NR(cmd) != _IOC_NR(GPUFPGA_IOC_STREAM_START) || _IOC_DIR(cmd) != _IOC_WRITE)))
		return -ENOTTY;
	down_read(&f->dev->ioctl_rwsem);
	if (READ_ONCE(f->dev->dead)) {
		up_read(&f->dev->ioctl_rwsem);
		return -ENODEV;
	}
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(GPUFPGA_IOC_INFO):
		ret = gpufpga_ioctl_info(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_PIN):
		ret = gpufpga_ioctl_pin(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_UNPIN):
		ret = gpufpga_ioctl_unpin(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_QUERY):
		ret = gpufpga_ioctl_query(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_XFER):
		ret = gpufpga_ioctl_xfer(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_CANCEL):
		ret = gpufpga_ioctl_cancel(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_STREAM_START):
		ret = gpufpga_ioctl_stream_start(f, uarg, size, _IOC_DIR(cmd) & _IOC_READ);
		break;
	case _IOC_NR(GPUFPGA_IOC_STREAM_RELEASE):
		ret = gpufpga_ioctl_stream_release(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_STREAM_STOP):
		ret = gpufpga_ioctl_stream_stop(f, uarg, size);
		break;
	case _IOC_NR(GPUFPGA_IOC_USER_IRQ):
		ret = gpufpga_ioctl_user_irq(f, uarg, size);
		break;
	}
	up_read(&f->dev->ioctl_rwsem);
	return ret;
}

static int gpufpga_open(struct inode *inode, struct file *file)
{
	struct gpufpga_dev *dev = container_of(file->private_data, struct gpufpga_dev, misc);
	struct gpufpga_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL_ACCOUNT);
	if (!f)
		return -ENOMEM;
	kref_get(&dev->ref);
	f->dev = dev;
	gpufpga_user_open(f);
	/* Whoever opened the file, not whoever later calls its ioctls. */
	f->rawio = file_ns_capable(file, &init_user_ns, CAP_SYS_RAWIO);
	mutex_init(&f->lock);
	xa_init_flags(&f->pins, XA_FLAGS_ALLOC1);
	xa_init_flags(&f->pending, XA_FLAGS_LOCK_IRQ);
	/* Taken under ch->lock, in hard IRQ: not the class of f->pins's lock. */
	lockdep_set_class(&f->pending.xa_lock, &gpufpga_pending_key);
	spin_lock_init(&f->done_lock);
	INIT_LIST_HEAD(&f->done);
	init_waitqueue_head(&f->done_wq);
	mutex_lock(&dev->files_lock);
	list_add_tail(&f->node, &dev->files);
	mutex_unlock(&dev->files_lock);
	file->private_data = f;
	return nonseekable_open(inode, file);
}

/* Stops the file's transfers, then unpins its memory. */
static int gpufpga_release(struct inode *inode, struct file *file)
{
	struct gpufpga_file *f = file->private_data;
	struct gpufpga_dev *dev = f->dev;

	gpufpga_chan_stop_all(f->dev, f, NULL, -ECANCELED);
	gpufpga_drain_completions(f);
	gpufpga_unpin_all(f);
	mutex_lock(&dev->files_lock);
	list_del(&f->node);
	mutex_unlock(&dev->files_lock);
	xa_destroy(&f->pins);
	xa_destroy(&f->pending);
	kfree(f);
	kref_put(&dev->ref, gpufpga_dev_release);
	return 0;
}

static ssize_t gpufpga_fop_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	return gpufpga_read_completions(file->private_data, buf, count,
					file->f_flags & O_NONBLOCK);
}

static __poll_t gpufpga_poll(struct file *file, poll_table *wait)
{
	struct gpufpga_file *f = file->private_data;
	__poll_t mask = 0;

	poll_wait(file, &f->done_wq, wait);
	spin_lock_irq(&f->done_lock);
	if (!list_empty(&f->done))
		mask |= EPOLLIN | EPOLLRDNORM;
	spin_unlock_irq(&f->done_lock);
	if (READ_ONCE(f->dev->dead))
		mask |= EPOLLERR;
	if (READ_ONCE(f->dev->gone))
		mask |= EPOLLHUP;
	return mask;
}

static const struct file_operations gpufpga_fops = {
	.owner = THIS_MODULE,
	.open = gpufpga_open,
	.release = gpufpga_release,
	.read = gpufpga_fop_read,
	.poll = gpufpga_poll,
	.unlocked_ioctl = gpufpga_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

/*
 * Which BAR is the engine's (sysfs dma_bar): the AXI-Lite master's BAR,
 * where the user's registers are, is BAR0 when the DMA BAR is not (PG195),
 * and user space maps it through the PCI device's resource file.
 */
static ssize_t dma_bar_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct miscdevice *misc = dev_get_drvdata(d);
	struct gpufpga_dev *dev = container_of(misc, struct gpufpga_dev, misc);

	return sysfs_emit(buf, "%d\n", dev->bar_index);
}
static DEVICE_ATTR_RO(dma_bar);

static struct attribute *gpufpga_attrs[] = {
	&dev_attr_dma_bar.attr,
	NULL,
};
ATTRIBUTE_GROUPS(gpufpga);

/*
 * Each vector's cookie says which vector it is: IRQ numbers of MSI-X
 * vectors need not be contiguous, and pci_irq_vector() may sleep. A shared
 * legacy line first asks the engine whether any channel of ours is
 * pending.
 */
static irqreturn_t gpufpga_irq(int irq, void *data)
{
	struct gpufpga_vec *vec = data;
	struct gpufpga_dev *dev = vec->dev;
	struct gpufpga_chan *ch;
	u32 pending = ~0U;
	bool user;
	int ci;

	user = gpufpga_user_irq(dev, vec->index);
	if (dev->intx) {
		pending = gpufpga_read(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) +
				       XDMA_REG_CHAN_INT_PENDING);
		if (!pending || pending == ~0U)
			return user ? IRQ_HANDLED : IRQ_NONE;
	}
	gpufpga_for_each_chan(dev, ch, ci) {
		if ((int)(ch->irq_bit % dev->chan_nvecs) != vec->index ||
		    !(pending & BIT(ch->irq_bit)))
			continue;
		spin_lock(&ch->lock);
		gpufpga_chan_irq(ch);
		spin_unlock(&ch->lock);
	}
	return IRQ_HANDLED;
}

static unsigned int gpufpga_irq_types(struct device *dev)
{
	unsigned int types = PCI_IRQ_MSIX | PCI_IRQ_MSI | PCI_IRQ_INTX;

	/* Written through sysfs, the value may end in a newline. */
	kernel_param_lock(THIS_MODULE);
	if (sysfs_streq(gpufpga_interrupts, "msix"))
		types = PCI_IRQ_MSIX;
	else if (sysfs_streq(gpufpga_interrupts, "msi"))
		types = PCI_IRQ_MSI;
	else if (sysfs_streq(gpufpga_interrupts, "intx"))
		types = PCI_IRQ_INTX;
	else if (!sysfs_streq(gpufpga_interrupts, "auto"))
		dev_warn(dev, "interrupts=%s: want auto, msix, msi or intx; using auto\n",
			 gpufpga_interrupts);
	kernel_param_unlock(THIS_MODULE);
	return types;
}

/*
 * Allocates the vectors, one per channel and one per user interrupt line
 * where it can, and routes channel interrupts to them; with fewer, the
 * channels share them and the user lines share the first. Every
 * completion comes by interrupt: a device without one is refused.
 */
static int gpufpga_setup_irqs(struct gpufpga_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;
	int i, ret, nchan = dev->nchan[0] + dev->nchan[1];
	u32 bit;
	struct gpufpga_chan *ch;
	int ci;

	ret = pci_alloc_irq_vectors(pdev, 1, nchan + GPUFPGA_USER_IRQS,
				    gpufpga_irq_types(&pdev->dev));
	if (ret < 0) {
		dev_err(&pdev->dev, "no interrupt (%d)\n", ret);
		return ret;
	}
	dev->nvecs = ret;
	dev->chan_nvecs = min(ret, nchan);
	dev->user_own = ret >= nchan + GPUFPGA_USER_IRQS;
	/* Short of one each, the lines share a vector: a spare one if any. */
	dev->user_vec = ret > nchan ? nchan : 0;
	dev->intx = !pdev->msix_enabled && !pdev->msi_enabled;
	dev->irq_kind = pdev->msix_enabled ? "MSI-X" : pdev->msi_enabled ? "MSI" : "INTx";
	for (i = 0; i < dev->nvecs; i++) {
		dev->vecs[i].dev = dev;
		dev->vecs[i].index = i;
		ret = request_irq(pci_irq_vector(pdev, i), gpufpga_irq, dev->intx ? IRQF_SHARED : 0,
				  dev->name, &dev->vecs[i]);
		if (ret) {
			dev_err(&pdev->dev, "%s vector %d: %d\n", dev->irq_kind, i, ret);
			while (i--)
				free_irq(pci_irq_vector(pdev, i), &dev->vecs[i]);
			pci_free_irq_vectors(pdev);
			return ret;
		}
	}
	gpufpga_for_each_chan(dev, ch, ci) {
		bit = ch->irq_bit;
		dev->chan_vectors[bit / 4] |= (bit % dev->chan_nvecs) << (bit % 4 * 8);
		dev->irq_enabled |= BIT(bit);
	}
	/* No chain runs yet: each channel's interrupt goes on with the rest. */
	gpufpga_dev_program(dev);
	return 0;
}

static void gpufpga_teardown_irqs(struct gpufpga_dev *dev)
{
	int i;

	if (!READ_ONCE(dev->link_down))
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_INT_ENABLE_W1C,
			      ~0U);
	gpufpga_user_disable(dev);
	dev->irq_enabled = 0;
	dev->chan_vectors[0] = 0;
	dev->chan_vectors[1] = 0;
	for (i = 0; i < dev->nvecs; i++)
		free_irq(pci_irq_vector(dev->pdev, i), &dev->vecs[i]);
	pci_free_irq_vectors(dev->pdev);
	dev->nvecs = 0;
}

static void gpufpga_fini_channels(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci;

	gpufpga_for_each_chan(dev, ch, ci)
		gpufpga_chan_fini(ch);
}

static int gpufpga_init_channels(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch, *failed;
	int ci;
	int ret;

	gpufpga_for_each_chan(dev, ch, ci) {
		ret = gpufpga_xfer_chan_init(ch);
		if (ret) {
			failed = ch;
			goto err;
		}
	}
	return 0;
err:
	/* The channels before the one that failed; those after never began. */
	gpufpga_for_each_chan(dev, ch, ci) {
		if (ch == failed)
			break;
		gpufpga_chan_fini(ch);
	}
	return ret;
}

/*
 * Stops every engine and its interrupts, whatever state a driver or an
 * earlier kernel left it in, waits for each to go idle, and clears credit
 * mode and the descriptor halt. Called before
 * bus mastering is enabled and at shutdown. An engine that will not stop
 * leaves bus mastering off and the device dead: -EIO.
 */
static int gpufpga_stop_engines(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci, ret = 0;

	if (READ_ONCE(dev->link_down))
		return -ENODEV;
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_INT_ENABLE_W1C, ~0U);
	/* User lines an earlier owner enabled: none may hold INTx up. */
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_USER_INT_ENABLE_W1C, ~0U);
	/* All stop at once; then each is waited for, and cut off if it must. */
	gpufpga_for_each_chan(dev, ch, ci) {
		gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_INT_ENABLE), 0);
		gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_CONTROL_W1C), XDMA_CTRL_RUN);
	}
	gpufpga_for_each_chan(dev, ch, ci) {
		u32 status;

		if (gpufpga_chan_halt(ch, &status) == -EBUSY)
			ret = -EIO;
	}
	/* Credits and a descriptor halt left over would stall the next user. */
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_CREDIT_MODE_W1C,
		      XDMA_COMMON_ALL);
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_DESC_HALT_W1C,
		      XDMA_COMMON_ALL);
	return READ_ONCE(dev->link_down) ? -ENODEV : ret;
}

static bool gpufpga_has_mm_channel(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci;

	gpufpga_for_each_chan(dev, ch, ci) {
		if (!ch->stream)
			return true;
	}
	return false;
}

static int gpufpga_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct gpufpga_dev *dev;
	int ret;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	kref_init(&dev->ref);
	dev->pdev = pci_dev_get(pdev);
	mutex_init(&dev->files_lock);
	INIT_LIST_HEAD(&dev->files);
	init_rwsem(&dev->ioctl_rwsem);
	gpufpga_user_init(dev);
	mutex_init(&dev->lifecycle_lock);
	spin_lock_init(&dev->devctl_lock);
	dev->id = ida_alloc(&gpufpga_ida, GFP_KERNEL);
	if (dev->id < 0) {
		ret = dev->id;
		pci_dev_put(pdev);
		kfree(dev);
		return ret;
	}
	snprintf(dev->name, sizeof(dev->name), "gpufpga%d", dev->id);

	ret = gpufpga_regs_init(dev);
	if (ret)
		goto err_put;
	ret = gpufpga_discover_channels(dev);
	if (ret) {
		dev_err(&pdev->dev, "no XDMA channels found\n");
		goto err_put;
	}
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(dev->addr_bits));
	if (ret)
		goto err_put;
	/* Chains split segments at the descriptor limit themselves. */
	dma_set_max_seg_size(&pdev->dev, UINT_MAX);
	/*
	 * An earlier kernel (kexec), driver or firmware may have left engines
	 * running, with bus mastering on: off until they are stopped, so that
	 * none writes into memory this kernel owns. An engine that cannot
	 * drain without it is declared dead and the probe fails: a reset of
	 * the function (sysfs reset, or a reboot) brings it back.
	 */
	pci_clear_master(pdev);
	ret = gpufpga_stop_engines(dev);
	if (ret) {
		dev_err(&pdev->dev, "engines do not stop (%d): not enabling bus mastering\n", ret);
		goto err_put;
	}
	pci_set_master(pdev);
	ret = gpufpga_init_channels(dev);
	if (ret)
		goto err_put;
	ret = gpufpga_setup_irqs(dev);
	if (ret)
		goto err_channels;

	dev->misc.minor = MISC_DYNAMIC_MINOR;
	dev->misc.name = dev->name;
	dev->misc.groups = gpufpga_groups;
	dev->misc.fops = &gpufpga_fops;
	dev->misc.mode = 0660;
	dev->misc.parent = &pdev->dev;
	ret = misc_register(&dev->misc);
	if (ret)
		goto err_irqs;
	pci_set_drvdata(pdev, dev);
	/* What a slot reset in error recovery restores. */
	pci_save_state(pdev);
	gpufpga_enable_error_reporting(pdev);
	gpufpga_debugfs_init(dev);
	dev_notice(&pdev->dev, "%s: XDMA IP version %u, %d H2C and %d C2H channels, %d %s vectors\n",
		   dev->name, dev->ip_version, dev->nchan[0], dev->nchan[1], dev->nvecs,
		   dev->irq_kind);
	if (!gpufpga_card_mem_size && gpufpga_has_mm_channel(dev))
		dev_notice(&pdev->dev, "%s: card_mem_size is not set: memory-mapped transfers are refused\n",
			   dev->name);
	return 0;

err_irqs:
	gpufpga_teardown_irqs(dev);
err_channels:
	gpufpga_fini_channels(dev);
err_put:
	kref_put(&dev->ref, gpufpga_dev_release);
	return ret;
}

static void gpufpga_fail_channels(struct gpufpga_dev *dev)
{
	gpufpga_chan_stop_all(dev, NULL, NULL, -ENODEV);
}

/* Readers and pollers of a device that is gone learn it at once. */
static void gpufpga_wake_files(struct gpufpga_dev *dev)
{
	struct gpufpga_file *f;

	mutex_lock(&dev->files_lock);
	list_for_each_entry(f, &dev->files, node)
		wake_up_interruptible_all(&f->done_wq);
	mutex_unlock(&dev->files_lock);
}

/*
 * Open files outlive the device; their DMA mappings of it must not. A
 * close() may be unpinning a pin it already took out of its table: wait
 * for that too. No pin can be made meanwhile: the device is dead.
 */
static void gpufpga_unpin_files(struct gpufpga_dev *dev)
{
	struct gpufpga_file *f;

	mutex_lock(&dev->files_lock);
	list_for_each_entry(f, &dev->files, node)
		gpufpga_unpin_all(f);
	mutex_unlock(&dev->files_lock);
	wait_var_event(&dev->pinned_total, !atomic64_read(&dev->pinned_total));
}

/*
 * The device goes away: stop all DMA; open files see -ENODEV. Failing the
 * transfers first wakes blocked ioctls, so taking the rwsem waits only for
 * calls already under way, whose transfers are then failed too. Every
 * engine is stopped and the function cut off the bus before a pin is let
 * go or a ring freed, whatever an earlier reset or error left behind: an
 * engine the halts could not reach (offline, or a recovery that failed)
 * may still be running.
 */
static void gpufpga_remove(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);

	gpufpga_debugfs_exit(dev);
	misc_deregister(&dev->misc);
	WRITE_ONCE(dev->dead, true);
	gpufpga_user_wake(dev);
	gpufpga_fail_channels(dev);
	down_write(&dev->ioctl_rwsem);
	up_write(&dev->ioctl_rwsem);
	gpufpga_fail_channels(dev);
	if (!READ_ONCE(dev->bus_off) && !READ_ONCE(dev->offline))
		gpufpga_stop_engines(dev);
	gpufpga_dev_cut_bus(dev);
	/* Every record the device posts is queued by now. */
	WRITE_ONCE(dev->gone, true);
	gpufpga_wake_files(dev);
	gpufpga_unpin_files(dev);
	gpufpga_teardown_irqs(dev);
	gpufpga_fini_channels(dev);
	kref_put(&dev->ref, gpufpga_dev_release);
}

/*
 * A function-level or bus reset, from the PCI core (sysfs reset, a
 * hypervisor, a driver's recovery), under the device lock: everything
 * running ends with -ECONNRESET before, the engine is programmed again
 * after.
 */
static void gpufpga_reset_prepare(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);

	device_lock_assert(&pdev->dev);
	trace_gpufpga_lifecycle(dev->id, "reset_prepare", dev->aer_held);
	/*
	 * An AER recovery still holding the function has failed, or will end
	 * without it: before 6.18 AER calls no handler after a failed
	 * recovery. This reset supersedes it, and its restart programs the
	 * function; a later resume of that recovery finds nothing to undo.
	 */
	if (dev->aer_held) {
		dev->aer_held = false;
		gpufpga_dev_abandon(dev);
	}
	gpufpga_dev_quiesce(dev, false);
}

static void gpufpga_reset_done(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);
	bool programmed;
	int ret = gpufpga_dev_restart(dev, &programmed);

	trace_gpufpga_lifecycle(dev->id, "reset_done", ret);
	if (ret)
		dev_err(&pdev->dev, "does not answer after a reset (%d)\n", ret);
	else if (programmed)
		pci_save_state(pdev);	/* the restore used up the saved state */
}

/*
 * AER: an uncorrectable error. A non-fatal one leaves the link up (the
 * registers answer, so the engines are halted); a fatal one freezes it
 * until the slot is reset. Either way what ran ends with -ECONNRESET: its
 * data cannot be trusted.
 */
static pci_ers_result_t gpufpga_error_detected(struct pci_dev *pdev, pci_channel_state_t state)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);
	bool frozen = state != pci_channel_io_normal;

	device_lock_assert(&pdev->dev);
	trace_gpufpga_lifecycle(dev->id, "error_detected", (__force int)state);
	/* A recovery that failed reports its error again as permanent. */
	if (!dev->aer_held) {
		WRITE_ONCE(dev->errors, dev->errors + 1);
		dev_warn(&pdev->dev, "PCIe error (%s): transfers and streams end\n",
			 !frozen ? "non-fatal" :
			 state == pci_channel_io_frozen ? "fatal" : "permanent");
		gpufpga_dev_quiesce(dev, frozen);
		dev->aer_held = true;
	}
	if (state == pci_channel_io_perm_failure) {
		WRITE_ONCE(dev->link_down, true);
		dev->aer_held = false;
		gpufpga_dev_abandon(dev);
		dev_err(&pdev->dev, "gave up on after a PCIe error: a reset or rebind brings it back\n");
		return PCI_ERS_RESULT_DISCONNECT;
	}
	return frozen ? PCI_ERS_RESULT_NEED_RESET : PCI_ERS_RESULT_CAN_RECOVER;
}

static pci_ers_result_t gpufpga_mmio_enabled(struct pci_dev *pdev)
{
	return PCI_ERS_RESULT_RECOVERED;
}

/* The slot was reset: the configuration saved at probe comes back. */
static pci_ers_result_t gpufpga_slot_reset(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);

	device_lock_assert(&pdev->dev);
	pci_restore_state(pdev);
	/*
	 * Bus mastering stays off until the driver has programmed the
	 * engine (gpufpga_dev_restart): the restore turned it on.
	 */
	pci_clear_master(pdev);
	pci_save_state(pdev);
	/*
	 * A reset that came inside this recovery (a sysfs reset between
	 * error_detected and here) took it over and programmed the function,
	 * which this reset has undone: resume programs it again.
	 */
	if (!dev->aer_held) {
		gpufpga_dev_quiesce(dev, true);
		dev->aer_held = true;
	}
	trace_gpufpga_lifecycle(dev->id, "slot_reset", 0);
	if (!gpufpga_answers(dev))
		return PCI_ERS_RESULT_DISCONNECT;
	return PCI_ERS_RESULT_RECOVERED;
}

static void gpufpga_error_resume(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);
	bool programmed = false;
	int ret = 0;

	device_lock_assert(&pdev->dev);
	/* Bound during the recovery, or superseded by a reset: nothing to undo. */
	if (dev->aer_held) {
		dev->aer_held = false;
		ret = gpufpga_dev_restart(dev, &programmed);
	}
	trace_gpufpga_lifecycle(dev->id, "error_resume", ret);
	if (ret)
		dev_err(&pdev->dev, "does not answer after error recovery (%d)\n", ret);
	else if (programmed)
		pci_save_state(pdev);
}

static const struct pci_error_handlers gpufpga_err_handlers = {
	.error_detected = gpufpga_error_detected,
	.mmio_enabled = gpufpga_mmio_enabled,
	.slot_reset = gpufpga_slot_reset,
	.resume = gpufpga_error_resume,
	.reset_prepare = gpufpga_reset_prepare,
	.reset_done = gpufpga_reset_done,
};

/*
 * System sleep (suspend, hibernation's freeze, thaw, poweroff, restore):
 * D3hot loses the engine's registers (No_Soft_Reset is clear on XDMA
 * cards), so streams and transfers end with -ECONNRESET before, and the
 * engine is programmed again after, as after a reset. User space starts
 * its streams again.
 */
static int gpufpga_suspend(struct device *d)
{
	struct gpufpga_dev *dev = dev_get_drvdata(d);

	trace_gpufpga_lifecycle(dev->id, "pm_suspend", 0);
	gpufpga_dev_quiesce(dev, false);
	return 0;
}

static int gpufpga_resume(struct device *d)
{
	struct gpufpga_dev *dev = dev_get_drvdata(d);
	bool programmed;
	int ret = gpufpga_dev_restart(dev, &programmed);

	trace_gpufpga_lifecycle(dev->id, "pm_resume", ret);
	if (programmed)
		pci_save_state(to_pci_dev(d));	/* for a later error recovery */
	return ret;
}

static DEFINE_SIMPLE_DEV_PM_OPS(gpufpga_pm_ops, gpufpga_suspend, gpufpga_resume);

/* Reboot or kexec: no engine may write into memory the next kernel owns. */
static void gpufpga_shutdown(struct pci_dev *pdev)
{
	struct gpufpga_dev *dev = pci_get_drvdata(pdev);

	WRITE_ONCE(dev->dead, true);	/* nothing new starts */
	gpufpga_fail_channels(dev);	/* what runs halts, under its channel's lock */
	if (!READ_ONCE(dev->bus_off) && !READ_ONCE(dev->offline))
		gpufpga_stop_engines(dev);
	gpufpga_dev_cut_bus(dev);
}

/* Xilinx XDMA reference designs (Gen1-4, x1-x16). */
#define XDMA_DEVICE(id) { PCI_DEVICE(PCI_VENDOR_ID_XILINX, id) }
static const struct pci_device_id gpufpga_ids[] = {
	XDMA_DEVICE(0x9011), XDMA_DEVICE(0x9012), XDMA_DEVICE(0x9014), XDMA_DEVICE(0x9018),
	XDMA_DEVICE(0x901f), XDMA_DEVICE(0x9021), XDMA_DEVICE(0x9022), XDMA_DEVICE(0x9024),
	XDMA_DEVICE(0x9028), XDMA_DEVICE(0x902f), XDMA_DEVICE(0x9031), XDMA_DEVICE(0x9032),
	XDMA_DEVICE(0x9034), XDMA_DEVICE(0x9038), XDMA_DEVICE(0x903f), XDMA_DEVICE(0x9041),
	XDMA_DEVICE(0x9042), XDMA_DEVICE(0x9044), XDMA_DEVICE(0x9048), XDMA_DEVICE(0x8011),
	XDMA_DEVICE(0x8012), XDMA_DEVICE(0x8014), XDMA_DEVICE(0x8018), XDMA_DEVICE(0x8021),
	XDMA_DEVICE(0x8022), XDMA_DEVICE(0x8024), XDMA_DEVICE(0x8028), XDMA_DEVICE(0x8031),
	XDMA_DEVICE(0x8032), XDMA_DEVICE(0x8034), XDMA_DEVICE(0x8038), XDMA_DEVICE(0x7011),
	XDMA_DEVICE(0x7012), XDMA_DEVICE(0x7014), XDMA_DEVICE(0x7018), XDMA_DEVICE(0x7021),
	XDMA_DEVICE(0x7022), XDMA_DEVICE(0x7024), XDMA_DEVICE(0x7028), XDMA_DEVICE(0x7031),
	XDMA_DEVICE(0x7032), XDMA_DEVICE(0x7034), XDMA_DEVICE(0x7038),
	{ }
};
MODULE_DEVICE_TABLE(pci, gpufpga_ids);

static struct pci_driver gpufpga_driver = {
	.name = "gpufpga",
	.id_table = gpufpga_ids,
	.probe = gpufpga_probe,
	.remove = gpufpga_remove,
	.shutdown = gpufpga_shutdown,
	.err_handler = &gpufpga_err_handlers,
	.driver.pm = pm_sleep_ptr(&gpufpga_pm_ops),
};

static int __init gpufpga_init(void)
{
	int ret;

	gpufpga_wq = alloc_workqueue("gpufpga", WQ_UNBOUND | WQ_HIGHPRI, 0);
	if (!gpufpga_wq)
		return -ENOMEM;
	gpufpga_debugfs_module_init();
	ret = pci_register_driver(&gpufpga_driver);
	if (ret) {
		gpufpga_debugfs_module_exit();
		destroy_workqueue(gpufpga_wq);
	}
	return ret;
}

static void __exit gpufpga_exit(void)
{
	pci_unregister_driver(&gpufpga_driver);
	gpufpga_debugfs_module_exit();
	destroy_workqueue(gpufpga_wq);
}

module_init(gpufpga_init);
module_exit(gpufpga_exit);

MODULE_DESCRIPTION("Peer DMA between Xilinx XDMA FPGAs and NVIDIA GPU memory");
MODULE_LICENSE("GPL");
