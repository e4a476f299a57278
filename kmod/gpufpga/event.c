// SPDX-License-Identifier: GPL-2.0
/*
 * Records for read(): finished asynchronous transfers and stream events,
 * queued on the file's done list by whoever posts them (the hard IRQ
 * handler too) and handed out, or dropped, in process context.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "gpufpga.h"

/**
 * gpufpga_post_event - queue a record for read()
 * @f: the file
 * @ev: the record
 * @efd: signalled too, if not NULL
 *
 * Both happen under f->done_lock, which read() takes to dequeue: the
 * record, and what it points to, outlive the signal.
 *
 * Context: any, hard IRQ too; takes f->done_lock.
 */
void gpufpga_post_event(struct gpufpga_file *f, struct gpufpga_event *ev,
			struct eventfd_ctx *efd)
{
	unsigned long flags;

	spin_lock_irqsave(&f->done_lock, flags);
	list_add_tail(&ev->node, &f->done);
	if (efd)
		gpufpga_eventfd_signal(efd);
	spin_unlock_irqrestore(&f->done_lock, flags);
	wake_up_interruptible(&f->done_wq);
}

/**
 * gpufpga_event_block_alloc - a stream's slot records, one per slot
 * @n: the stream's slots
 *
 * Context: process context, may sleep.
 * Return: the block, holding the stream's reference, or NULL.
 */
struct gpufpga_event_block *gpufpga_event_block_alloc(u32 n)
{
	struct gpufpga_event_block *b;
	u32 i;

	b = kvzalloc(struct_size(b, ev, n), GFP_KERNEL_ACCOUNT);
	if (!b)
		return NULL;
	kref_init(&b->ref);
	b->n = n;
	for (i = 0; i < n; i++)
		b->ev[i].block = b;
	return b;
}

static void gpufpga_event_block_release(struct kref *ref)
{
	kvfree(container_of(ref, struct gpufpga_event_block, ref));
}

/**
 * gpufpga_event_block_put - drop a reference to a stream's slot records
 * @b: the block
 *
 * Context: process context (the last put frees), may sleep.
 */
void gpufpga_event_block_put(struct gpufpga_event_block *b)
{
	might_sleep();
	kref_put(&b->ref, gpufpga_event_block_release);
}

static void gpufpga_event_free(struct gpufpga_file *f, struct gpufpga_event *ev)
{
	if (ev->req) {
		gpufpga_req_put(ev->req);	/* the channel's */
		gpufpga_req_put(ev->req);	/* the ioctl's */
		atomic_dec(&f->nasync);
	} else if (ev->block) {
		struct gpufpga_event_block *b = ev->block;

		atomic_dec(&f->nevents);
		/* The slot may fill again, and ev be posted, from here on. */
		smp_store_release(&ev->queued, false);
		gpufpga_event_block_put(b);
	} else {
		atomic_dec(&f->nevents);
		kfree(ev);
	}
}

/**
 * gpufpga_drain_completions - drop the records nobody read
 * @f: the file, being closed
 *
 * Context: process context, may sleep; takes f->done_lock.
 */
void gpufpga_drain_completions(struct gpufpga_file *f)
{
	struct gpufpga_event *ev, *tmp;
	LIST_HEAD(done);

	spin_lock_irq(&f->done_lock);
	list_splice_init(&f->done, &done);
	spin_unlock_irq(&f->done_lock);
	list_for_each_entry_safe(ev, tmp, &done, node)
		gpufpga_event_free(f, ev);
}

/**
 * gpufpga_read_completions - read(): hand out whole records
 * @f: the file
 * @buf: the caller's buffer
 * @count: its size, at least one record's
 * @nonblock: return -EAGAIN rather than wait for a first record
 *
 * A record that cannot be copied goes back to the head of the queue.
 *
 * Context: process context, may sleep; takes f->done_lock.
 * Return: the bytes read; -ENODEV once the device is gone and every
 * record is read; or a negative errno.
 */
ssize_t gpufpga_read_completions(struct gpufpga_file *f, char __user *buf,
				 size_t count, bool nonblock)
{
	struct gpufpga_event *ev;
	size_t done = 0;
	int ret;

	if (count < sizeof(ev->rec))
		return -EINVAL;
	while (done + sizeof(ev->rec) <= count) {
		spin_lock_irq(&f->done_lock);
		ev = list_first_entry_or_null(&f->done, struct gpufpga_event, node);
		if (ev)
			list_del(&ev->node);
		spin_unlock_irq(&f->done_lock);
		if (!ev) {
			if (done)
				break;
			/* Records queued before removal are still read. */
			if (READ_ONCE(f->dev->gone))
				return -ENODEV;
			if (nonblock)
				return -EAGAIN;
			ret = wait_event_interruptible(f->done_wq, !list_empty(&f->done) ||
						       READ_ONCE(f->dev->gone));
			if (ret)
				return ret;
			continue;
		}
		if (copy_to_user(buf + done, &ev->rec, sizeof(ev->rec))) {
			/* Put it back: nothing is lost. */
			spin_lock_irq(&f->done_lock);
			list_add(&ev->node, &f->done);
			spin_unlock_irq(&f->done_lock);
			return done ? done : -EFAULT;
		}
		gpufpga_event_free(f, ev);
		done += sizeof(ev->rec);
	}
	return done;
}
