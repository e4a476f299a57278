// SPDX-License-Identifier: GPL-2.0
/*
 * Transfers: user segments (handle, offset, length) are checked against
 * their pins and translated into the minimal list of bus segments, which
 * becomes an XDMA descriptor chain in the channel's coherent ring. A
 * channel runs one chain at a time and queues the rest. Completion comes
 * from the channel's interrupt, in the hard IRQ handler under ch->lock,
 * which also starts the next chain; a watchdog at the transfer's timeout
 * catches a lost interrupt or a hung engine. Every transfer ends exactly
 * once, in gpufpga_finish().
 */
#include <linux/delay.h>
#include <linux/eventfd.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "gpufpga.h"
#include "trace.h"

/*
 * Looks up and checks every user segment. A pin is held once however many
 * segments name it, so that what the completion does for the request's
 * pins (in the IRQ handler) does not grow with its segments. Called with
 * f->lock held.
 */
static int gpufpga_req_build(struct gpufpga_file *f, struct gpufpga_req *r,
			     const struct gpufpga_seg *us, u32 n)
{
	u64 stamp = ++f->builds;
	struct gpufpga_mem *m;
	u32 i;
	int ret;

	lockdep_assert_held(&f->lock);
	for (i = 0; i < n; i++) {
		m = xa_load(&f->pins, us[i].handle);
		if (!m)
			return -ENOENT;
		if (!gpufpga_mem_active(m))
			return -EKEYREVOKED;
		if (!us[i].len || us[i].offset >= m->len || us[i].len > m->len - us[i].offset)
			return -EINVAL;
		if (m->stamp != stamp) {
			m->stamp = stamp;
			kref_get(&m->ref);
			atomic_inc(&m->inflight);
			atomic_inc(&m->xfers[r->chan->dir][r->chan->index]);
			r->mems[r->nmems++] = m;
		}
		ret = gpufpga_append_window(r, m, m->offset + us[i].offset, us[i].len);
		if (ret)
			return ret;
		r->total += us[i].len;
	}
	return 0;
}

/*
 * Writes r's chain into ring: one descriptor per bus segment, laid out as
 * pkg/xdma's BuildChain lays it out, byte for byte. Process context, with
 * ch->build_mutex held: the ring is the spare one, or the idle channel's
 * last (gpufpga_chan_idle_ring); no chain runs from it. Maybe under
 * ch->lock (a short chain).
 */
static void gpufpga_build_chain(struct gpufpga_chan *ch, struct gpufpga_ring *ring,
				struct gpufpga_req *r)
{
	struct xdma_desc *d = ring->desc;
	dma_addr_t results = ring->bus + (size_t)gpufpga_max_descs * XDMA_DESC_SIZE;
	u64 card = r->card_addr;
	u32 i, n = r->nsegs;

	lockdep_assert_held(&ch->build_mutex);
	for (i = 0; i < n; i++, d++) {
		bool last = i == n - 1;
		u32 ctrl = XDMA_DESC_MAGIC << 16;
		dma_addr_t host = r->segs[i].addr;
		u64 src, dst, next = 0;

		if (!ch->stream && ch->dir == GPUFPGA_H2C) {
			src = host;
			dst = card;
		} else if (!ch->stream) {
			src = card;
			dst = host;
		} else if (ch->dir == GPUFPGA_H2C) {
			src = host;
			dst = 0;
		} else {
			src = results + (u64)i * XDMA_RESULT_SIZE;
			dst = host;
		}
		card += r->segs[i].len;
		if (last) {
			ctrl |= XDMA_DESC_STOP | XDMA_DESC_COMPLETED;
			if (ch->stream)
				ctrl |= XDMA_DESC_EOP;
		} else {
			next = ring->bus + (u64)(i + 1) * XDMA_DESC_SIZE;
			ctrl |= gpufpga_adjacent_after(next, n - i - 2) << 8;
		}
		d->control = cpu_to_le32(ctrl);
		d->len = cpu_to_le32(r->segs[i].len);
		d->src = cpu_to_le64(src);
		d->dst = cpu_to_le64(dst);
		d->next = cpu_to_le64(next);
	}
	if (ch->stream && ch->dir == GPUFPGA_C2H)
		memset(gpufpga_ring_results(ring), 0, (size_t)n * XDMA_RESULT_SIZE);
	ring->count = n;
	ring->first_adj = gpufpga_adjacent_after(ring->bus, n - 1);
}

static void gpufpga_req_signal(struct gpufpga_req *r)
{
	struct gpufpga_completion *c = &r->ev.rec;

	if (!r->async) {
		complete(&r->done);
		return;
	}
	/* Under ch->lock, with interrupts off: the plain xarray lock. */
	xa_lock(&r->file->pending);
	__xa_erase(&r->file->pending, r->id);
	xa_unlock(&r->file->pending);
	c->kind = GPUFPGA_EVENT_XFER;
	c->id = r->id;
	c->user_data = r->user_data;
	c->bytes = r->bytes;
	c->status = r->status;
	c->error = r->error;
	c->duration_ns = r->duration_ns;
	c->timestamp_ns = ktime_get_ns();
	c->dir = r->chan->dir;
	c->channel = r->chan->index;
	r->ev.req = r;		/* takes the ioctl's and the channel's references */
	gpufpga_post_event(r->file, &r->ev, r->efd);
}

/* r's pins are no longer in flight with it: ended, or never queued. */
static void gpufpga_req_let_go(struct gpufpga_req *r)
{
	struct gpufpga_chan *ch = r->chan;
	u32 i;

	for (i = 0; i < r->nmems; i++) {
		atomic_dec(&r->mems[i]->xfers[ch->dir][ch->index]);
		atomic_dec(&r->mems[i]->inflight);
	}
}

/*
 * Ends a request: records the result, lets its pins go, and tells whoever
 * waits. Called with ch->lock held, maybe in hard IRQ; r is off the queue
 * and not active. The channel's reference passes to the waiting ioctl or
 * to the completion record, whose owner drops it in process context:
 * freeing a request may sleep (its pins' last references).
 */
static void gpufpga_finish(struct gpufpga_chan *ch, struct gpufpga_req *r,
			   int error, u32 status, u64 bytes)
{
	lockdep_assert_held(&ch->lock);
	r->error = error;
	r->status = status;
	r->bytes = bytes;
	r->duration_ns = r->start_ns ? ktime_get_ns() - r->start_ns : 0;
	WRITE_ONCE(r->finished, true);
	gpufpga_req_let_go(r);
	ch->last_status = status;
	if (error) {
		ch->errors++;
		trace_gpufpga_error(ch->dev->id, "xfer", error, status);
	} else {
		ch->xfers++;
		ch->bytes += bytes;
	}
	trace_gpufpga_xfer_complete(ch->dev->id, r->id, ch->dir, ch->index, bytes,
				    r->duration_ns, status, error);
	gpufpga_req_signal(r);
}

/*
 * Bytes moved by the first completed descriptors of the chain: all of them
 * in a memory-mapped chain that completed, without a look at each (the IRQ
 * handler's work stays bounded); a C2H stream channel's packets say their
 * own lengths, which the engine wrote into the results.
 */
static u64 gpufpga_bytes_done(struct gpufpga_chan *ch, struct gpufpga_req *r, u32 completed)
{
	struct xdma_result *res = gpufpga_ring_results(&ch->rings[ch->cur]);
	u64 bytes = 0;
	u32 i;

	completed = min(completed, r->nsegs);
	if (completed == r->nsegs && !(ch->stream && ch->dir == GPUFPGA_C2H))
		return r->total;
	for (i = 0; i < completed; i++) {
		if (ch->stream && ch->dir == GPUFPGA_C2H) {
			u32 st = le32_to_cpu(res[i].status);

			if (st >> 16 != XDMA_RESULT_MAGIC)
				break;
			bytes += le32_to_cpu(res[i].len);
		} else {
			bytes += r->segs[i].len;
		}
	}
	return bytes;
}

/*
 * Runs r on the idle channel: its chain is in the spare ring, or, where
 * rerun is set, in the ring the engine ran last. Called with ch->lock held.
 */
static void gpufpga_start(struct gpufpga_chan *ch, struct gpufpga_req *r, bool rerun)
{
	struct gpufpga_dev *dev = ch->dev;
	u32 control;

	lockdep_assert_held(&ch->lock);
	if (READ_ONCE(dev->link_down) || READ_ONCE(dev->dead)) {
		gpufpga_finish(ch, r, -ENODEV, 0, 0);
		return;
	}
	if (r->poll != ch->quiet)
		gpufpga_chan_set_quiet(ch, r->poll);
	if (r->poll)
		WRITE_ONCE(*ch->wb, 0);
	r->start_ns = ktime_get_ns();
	ch->active = r;
	ch->deadline = jiffies + r->timeout;
	ch->stale_looks = 0;
	control = XDMA_CTRL_LOG_ALL | XDMA_CTRL_RUN | (r->poll ? XDMA_CTRL_POLL_MODE_WB : 0);
	if (rerun)
		gpufpga_chan_rerun(ch, control);
	else
		gpufpga_chan_run(ch, control, 0);
	trace_gpufpga_xfer_submit(dev->id, r->id, ch->dir, ch->index, r->total, r->nsegs);
	/*
	 * A watchdog armed no later than this deadline re-arms itself for it
	 * (gpufpga_xfer_watchdog): most starts leave the timer alone.
	 */
	if (!delayed_work_pending(&ch->work) ||
	    time_after(READ_ONCE(ch->work.timer.expires), ch->deadline))
		mod_delayed_work(gpufpga_wq, &ch->work, r->timeout);
}

/*
 * Starts the first queued request if the channel is idle and its chain is
 * built; if it is not, the build work builds it (and starts it), as it
 * builds the one after a chain that starts here. Bounded
 * work, whatever the chain's length: called from the hard IRQ handler.
 * Called with ch->lock held.
 */
static void gpufpga_start_next(struct gpufpga_chan *ch)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_req *r;

	lockdep_assert_held(&ch->lock);
	if (ch->stopping)
		return;	/* gpufpga_finish_queued walks the queue */
	if (!ch->active && !list_empty(&ch->queue) &&
	    (READ_ONCE(dev->link_down) || READ_ONCE(dev->dead))) {
		/* Nothing can start: the watchdog ends them, a batch at a time. */
		ch->deadline = jiffies;
		mod_delayed_work(gpufpga_wq, &ch->work, 0);
		return;
	}
	while (!ch->active && !list_empty(&ch->queue)) {
		r = list_first_entry(&ch->queue, struct gpufpga_req, chan_node);
		if (!r->ready) {
			queue_work(gpufpga_wq, &ch->build_work);
			return;
		}
		list_del(&r->chan_node);
		r->ready = false;
		gpufpga_start(ch, r, false);
	}
	/* The next one is built while this one runs. */
	if (ch->active && !list_empty(&ch->queue))
		queue_work(gpufpga_wq, &ch->build_work);
}

/*
 * Builds the chain of the first queued request into the spare ring, then
 * starts it if the channel is idle, or marks it ready for the IRQ handler
 * to start. Only the first one waits in the spare ring: requests leave the
 * queue from its head, so a ready request is the head or gone. Process
 * context, no lock held.
 */
static void gpufpga_build_next(struct gpufpga_chan *ch)
{
	struct gpufpga_req *r;

	mutex_lock(&ch->build_mutex);
	spin_lock_irq(&ch->lock);
	r = list_first_entry_or_null(&ch->queue, struct gpufpga_req, chan_node);
	if (!r || r->ready || ch->acq) {
		spin_unlock_irq(&ch->lock);
		mutex_unlock(&ch->build_mutex);
		return;
	}
	kref_get(&r->ref);
	spin_unlock_irq(&ch->lock);
	gpufpga_build_chain(ch, gpufpga_chan_spare(ch), r);
	spin_lock_irq(&ch->lock);
	/* Still queued, so still first: only the first leaves unfinished. */
	if (!r->finished)
		r->ready = true;
	/* Else the next one, if any, is built by the work this queues. */
	gpufpga_start_next(ch);
	spin_unlock_irq(&ch->lock);
	mutex_unlock(&ch->build_mutex);
	gpufpga_req_put(r);
}

static void gpufpga_build_work(struct work_struct *work)
{
	gpufpga_build_next(container_of(work, struct gpufpga_chan, build_work));
}

/*
 * Whether the active chain has ended, by every status bit read since it
 * started (seen, with the last read's BUSY): with an error, or with its
 * stop, which only its last descriptor carries. BUSY does not decide a
 * stop: a card may report it for a while after one. After a polled chain,
 * whose stop nobody read, a stop may be that chain's, reported late: then
 * the completed count decides. A stop with fewer descriptors completed
 * than the chain has is the late one if the engine runs (BUSY: it is
 * dropped), else a count that lags the stop on an idle engine (the
 * watchdog looks again in a jiffy). Under ch->lock.
 */
static bool gpufpga_chain_ended(struct gpufpga_chan *ch, u32 seen)
{
	u32 completed;

	lockdep_assert_held(&ch->lock);
	if (seen & XDMA_STAT_ERRORS)
		return true;
	if (!(seen & XDMA_STAT_DESC_STOPPED))
		return false;
	if (!ch->stop_may_be_stale)
		return true;
	completed = gpufpga_read(ch->dev, gpufpga_chan_reg(ch, XDMA_REG_COMPLETED));
	if (completed >= ch->active->nsegs)
		return true;
	if (seen & XDMA_STAT_BUSY) {
		ch->status_seen &= ~XDMA_STAT_DESC_STOPPED;
	} else {
		/* Looks further apart each time: 1, 2, 4 ... 64 jiffies. */
		mod_delayed_work(gpufpga_wq, &ch->work, 1UL << ch->stale_looks);
		if (ch->stale_looks < GPUFPGA_STALE_LOOKS)
			ch->stale_looks++;
	}
	return false;
}

/*
 * An error ends a chain, but PG195 does not say that an engine reporting
 * one has drained: while BUSY is still set, the watchdog halts it, waiting
 * for idle, rather than the chain ending (and its memory being let go)
 * here. Under ch->lock.
 */
static bool gpufpga_failed_busy(struct gpufpga_chan *ch, u32 seen)
{
	lockdep_assert_held(&ch->lock);
	if (!(seen & XDMA_STAT_ERRORS) || !(seen & XDMA_STAT_BUSY))
		return false;
	ch->deadline = jiffies;
	mod_delayed_work(gpufpga_wq, &ch->work, 0);
	return true;
}

/*
 * The chain ended: collect the active request's result, given every
 * status bit seen since it started. Only the last descriptor stops the
 * engine: a chain that stopped without an error completed all of its
 * descriptors, and only a failed one needs its count read. Under ch->lock.
 */
static void gpufpga_complete_active(struct gpufpga_chan *ch, u32 status)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_req *r = ch->active;
	u32 completed = r->nsegs;
	int error = 0;

	lockdep_assert_held(&ch->lock);
	if (READ_ONCE(dev->link_down))
		error = -ENODEV;
	else if (status & XDMA_STAT_ERRORS || !(status & XDMA_STAT_DESC_STOPPED))
		error = -EIO;
	if (error == -EIO)
		completed = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_COMPLETED));
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_CONTROL_W1C), XDMA_CTRL_RUN);
	/* Read the results the engine wrote before it stopped. */
	rmb();
	ch->active = NULL;
	/* A stop not read with this chain's end may show in the next one. */
	ch->stop_may_be_stale = r->poll || !(status & XDMA_STAT_DESC_STOPPED);
	/* The chain ended: a BUSY read with its end is the card's lag. */
	status &= ~XDMA_STAT_BUSY;
	gpufpga_finish(ch, r, error, status, gpufpga_bytes_done(ch, r, completed));
}

/*
 * Ends the active request and up to GPUFPGA_FINISH_BATCH queued ones of a
 * channel whose device is gone: nothing can move. Under ch->lock, with
 * interrupts off: the batch bounds the work done there. Returns whether
 * requests are left.
 */
static bool gpufpga_chan_drop_some(struct gpufpga_chan *ch, int error)
{
	struct gpufpga_req *r, *tmp;
	unsigned int n = 0;

	lockdep_assert_held(&ch->lock);
	r = ch->active;
	if (r) {
		ch->active = NULL;
		gpufpga_finish(ch, r, error, 0, 0);
	}
	list_for_each_entry_safe(r, tmp, &ch->queue, chan_node) {
		if (n++ == GPUFPGA_FINISH_BATCH)
			return true;
		list_del(&r->chan_node);
		gpufpga_finish(ch, r, error, 0, 0);
	}
	return false;
}

/*
 * Ends everything on a channel whose device is gone, a batch per hold of
 * ch->lock. Process context, ch->lock not held.
 */
static void gpufpga_chan_drop_all(struct gpufpga_chan *ch, int error)
{
	bool more;

	do {
		spin_lock_irq(&ch->lock);
		more = gpufpga_chan_drop_some(ch, error);
		spin_unlock_irq(&ch->lock);
		cond_resched();
	} while (more);
}

/*
 * The channel's interrupt, or a poller: seen is every status bit read
 * since the chain started. Hard IRQ, ch->lock held.
 */
static void gpufpga_xfer_irq(struct gpufpga_chan *ch, u32 seen)
{
	lockdep_assert_held(&ch->lock);
	if (!ch->active)
		return;
	if (READ_ONCE(ch->dev->link_down)) {
		/* Ending every queued request is the watchdog's, not ours. */
		ch->deadline = jiffies;
		mod_delayed_work(gpufpga_wq, &ch->work, 0);
		return;
	}
	/* A shared vector, a stale edge, or part of the end: wait for more. */
	if (!gpufpga_chain_ended(ch, seen) || gpufpga_failed_busy(ch, seen))
		return;
	gpufpga_complete_active(ch, seen);
	gpufpga_start_next(ch);
}

/*
 * Halts the engine under the active request r, its run'th chain, and ends
 * r with error; then the next request starts. Called with ch->mutex held
 * and ch->lock not held. Returns false if r was no longer running.
 */
static bool gpufpga_halt_active(struct gpufpga_chan *ch, struct gpufpga_req *r, u64 run,
				int error, u32 *halted)
{
	u32 status, completed;

	lockdep_assert_held(&ch->mutex);
	if (!gpufpga_chan_own(ch, r, run))
		return false;
	gpufpga_chan_halt(ch, &status);
	completed = gpufpga_read(ch->dev, gpufpga_chan_reg(ch, XDMA_REG_COMPLETED));
	spin_lock_irq(&ch->lock);
	ch->active = NULL;
	ch->stop_may_be_stale = true;	/* halted: its stop, if any, unread */
	if (error == -EKEYREVOKED)
		ch->revoked++;
	if (error == -ETIMEDOUT)
		ch->timeouts++;
	gpufpga_finish(ch, r, error, status, gpufpga_bytes_done(ch, r, completed));
	gpufpga_start_next(ch);
	gpufpga_chan_release(ch);
	spin_unlock_irq(&ch->lock);
	if (halted)
		*halted = status;
	return true;
}

/* The watchdog of a running transfer. Called with ch->mutex held. */
static void gpufpga_xfer_watchdog(struct gpufpga_chan *ch)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_req *r;
	bool ended;
	u64 id, run;
	u32 status;
	int error;

	lockdep_assert_held(&ch->mutex);
	spin_lock_irq(&ch->lock);
	r = ch->active;
	run = ch->runs;
	if (ch->halting)
		goto out;
	if (!r) {
		/* Queued behind a device that is gone: gpufpga_start_next. */
		if (list_empty(&ch->queue) || (!READ_ONCE(dev->link_down) && !READ_ONCE(dev->dead)))
			goto out;
		spin_unlock_irq(&ch->lock);
		gpufpga_chan_drop_all(ch, -ENODEV);
		return;
	}
	/* A read that finds the link down says so: ask it after. */
	status = gpufpga_chan_status(ch);
	if (READ_ONCE(dev->link_down)) {
		spin_unlock_irq(&ch->lock);
		/*
		 * The engine cannot be asked whether it stopped: keep it off
		 * the bus, in case the link comes back, before its pins go.
		 */
		gpufpga_dev_cut_bus(dev);
		gpufpga_chan_drop_all(ch, -ENODEV);
		return;
	}
	ended = gpufpga_chain_ended(ch, status);
	if (ended && !(status & XDMA_STAT_ERRORS && status & XDMA_STAT_BUSY)) {
		if (!r->poll && !time_before(jiffies, ch->deadline))
			dev_warn_ratelimited(&dev->pdev->dev, "%s channel %u: transfer %llu ended without an interrupt\n",
					     ch->dir ? "C2H" : "H2C", ch->index, r->id);
		gpufpga_complete_active(ch, status);
		gpufpga_start_next(ch);
		goto out;
	}
	if (!ended && time_before(jiffies, ch->deadline)) {
		queue_delayed_work(gpufpga_wq, &ch->work, ch->deadline - jiffies);
		goto out;
	}
	/* Timed out, or failed with the engine still busy: halt it first. */
	error = ended ? -EIO : -ETIMEDOUT;
	id = r->id;
	spin_unlock_irq(&ch->lock);
	if (gpufpga_halt_active(ch, r, run, error, &status))
		dev_warn_ratelimited(&dev->pdev->dev, "%s channel %u: transfer %llu %s, halted (status %#x)\n",
				     ch->dir ? "C2H" : "H2C", ch->index, id,
				     error == -EIO ? "failed" : "timed out", status);
	return;
out:
	spin_unlock_irq(&ch->lock);
}

/*
 * Stops r wherever it is and ends it with error. Called with ch->mutex
 * held and ch->lock not held.
 */
static void gpufpga_stop_req(struct gpufpga_chan *ch, struct gpufpga_req *r, int error)
{
	lockdep_assert_held(&ch->mutex);
	spin_lock_irq(&ch->lock);
	if (r->finished) {
		spin_unlock_irq(&ch->lock);
		return;
	}
	if (ch->active == r) {
		u64 run = ch->runs;

		spin_unlock_irq(&ch->lock);
		gpufpga_halt_active(ch, r, run, error, NULL);
		return;
	}
	list_del(&r->chan_node);
	if (error == -EKEYREVOKED)
		ch->revoked++;
	gpufpga_finish(ch, r, error, 0, 0);
	/* r may have been first: the next one must not wait for it. */
	gpufpga_start_next(ch);
	spin_unlock_irq(&ch->lock);
}

static bool gpufpga_req_uses(struct gpufpga_req *r, struct gpufpga_mem *m)
{
	u32 i;

	for (i = 0; i < r->nmems; i++)
		if (r->mems[i] == m)
			return true;
	return false;
}

/*
 * Ends the queued requests that match. Interrupts are off for a bounded
 * time however long the queue: at most GPUFPGA_FINISH_BATCH requests are
 * looked at per hold of ch->lock, and the walk goes on from where it
 * stopped. While it runs, ch->stopping keeps every request in the queue
 * (gpufpga_start_next starts none), and ch->mutex keeps CANCEL out, so
 * the cursor stays in the queue; new requests only join at its tail.
 * Called with ch->mutex held, ch->lock not held.
 */
static void gpufpga_finish_queued(struct gpufpga_chan *ch, struct gpufpga_file *f,
				  struct gpufpga_mem *m, int error)
{
	struct gpufpga_req *r, *next;
	unsigned int n;

	lockdep_assert_held(&ch->mutex);
	spin_lock_irq(&ch->lock);
	ch->stopping = true;
	r = list_first_entry_or_null(&ch->queue, struct gpufpga_req, chan_node);
	while (r) {
		for (n = 0; r && n < GPUFPGA_FINISH_BATCH; n++) {
			next = list_is_last(&r->chan_node, &ch->queue) ? NULL :
			       list_next_entry(r, chan_node);
			if ((!f || r->file == f) && (!m || gpufpga_req_uses(r, m))) {
				list_del(&r->chan_node);
				if (error == -EKEYREVOKED)
					ch->revoked++;
				gpufpga_finish(ch, r, error, 0, 0);
			}
			r = next;
		}
		if (!r)
			break;
		spin_unlock_irq(&ch->lock);
		cond_resched();
		spin_lock_irq(&ch->lock);
	}
	ch->stopping = false;
	spin_unlock_irq(&ch->lock);
}

/*
 * Waits, up to until, for the active request r to end by itself; if it
 * does not, halts it. r is only compared, never dereferenced, once
 * ch->lock is dropped: the IRQ handler may end and free it meanwhile.
 * Called with ch->mutex held.
 */
static void gpufpga_revoke_active(struct gpufpga_chan *ch, struct gpufpga_req *r, u64 run,
				  unsigned long until)
{
	struct gpufpga_dev *dev = ch->dev;
	u32 status;

	lockdep_assert_held(&ch->mutex);
	for (;;) {
		spin_lock_irq(&ch->lock);
		if (ch->active != r || ch->runs != run || ch->halting) {
			spin_unlock_irq(&ch->lock);
			return;
		}
		status = READ_ONCE(dev->link_down) ? 0 : gpufpga_chan_status(ch);
		if (!READ_ONCE(dev->link_down) && gpufpga_chain_ended(ch, status) &&
		    !(status & XDMA_STAT_ERRORS && status & XDMA_STAT_BUSY)) {
			gpufpga_complete_active(ch, status);
			gpufpga_start_next(ch);
			spin_unlock_irq(&ch->lock);
			return;
		}
		spin_unlock_irq(&ch->lock);
		if (READ_ONCE(dev->link_down) || !time_before(jiffies, until)) {
			gpufpga_halt_active(ch, r, run, -EKEYREVOKED, NULL);
			return;
		}
		usleep_range(200, 500);
	}
}

/*
 * Whether a transfer built for ch uses m, queued or running: a count, not a
 * walk of the queue, as it is asked with interrupts off.
 */
static bool gpufpga_xfer_uses(struct gpufpga_chan *ch, struct gpufpga_mem *m)
{
	return atomic_read(&m->xfers[ch->dir][ch->index]) != 0;
}

/*
 * Ends the transfers f started (f NULL: anyone's) or that use m, with
 * error: queued ones never start; a running one is halted, or, if m is
 * being revoked, gets until to finish by itself first. Called with
 * ch->mutex held and ch->lock not held.
 *
 * A revoke runs under NVIDIA's lock (or the exporter's reservation lock).
 * For each channel that uses m, its worst-case wait is: ch->mutex, whose
 * holders only halt the engine (gpufpga_chan_halt: at most 100 polls of
 * 0.5-1 ms, then 1-2 ms with descriptors halted, about 102 ms; a stop of
 * every transfer halts twice) or revoke another pin (as here, about
 * 202 ms) or start a stream (which may wait for build_mutex: a build of
 * up to max_descs descriptors, or a debugfs copy of a ring, milliseconds);
 * then revoke_wait_ms (at most 100 ms) for the running chain to
 * end by itself, and one halt: about 400 ms per channel at worst, 8
 * channels at most. Nothing waits on user space or an interrupt.
 */
static void gpufpga_xfer_stop(struct gpufpga_chan *ch, struct gpufpga_file *f,
			      struct gpufpga_mem *m, int error, unsigned long until)
{
	struct gpufpga_req *r;
	u64 run;

	lockdep_assert_held(&ch->mutex);
	gpufpga_finish_queued(ch, f, m, error);
	spin_lock_irq(&ch->lock);
	gpufpga_start_next(ch);	/* what is left, if the first went */
	r = ch->active;
	run = ch->runs;
	if (r && ((f && r->file != f) || (m && !gpufpga_req_uses(r, m))))
		r = NULL;
	spin_unlock_irq(&ch->lock);
	if (r && m)
		gpufpga_revoke_active(ch, r, run, until);
	else if (r)
		gpufpga_halt_active(ch, r, run, error, NULL);
}

static void gpufpga_cancel_req(struct gpufpga_req *r, int error)
{
	struct gpufpga_chan *ch = r->chan;

	mutex_lock(&ch->mutex);
	gpufpga_stop_req(ch, r, error);
	mutex_unlock(&ch->mutex);
}

static int gpufpga_check_xfer_arg(struct gpufpga_dev *dev, const struct gpufpga_xfer *a)
{
	const struct gpufpga_chan *ch;

	if (a->dir > GPUFPGA_C2H || a->channel >= GPUFPGA_MAX_CHANNELS ||
	    a->flags & ~GPUFPGA_XFER_FLAGS || a->pad || a->reserved[0] || a->reserved[1])
		return -EINVAL;
	ch = &dev->chan[a->dir][a->channel];
	if (!ch->present || (ch->stream && a->card_addr))
		return -EINVAL;
	if (!a->nsegs)
		return -EINVAL;
	if (a->nsegs > gpufpga_max_segs)
		return -E2BIG;
	if (a->eventfd < -1 || (!(a->flags & GPUFPGA_XFER_ASYNC) && a->eventfd != -1))
		return -EINVAL;
	if ((a->flags & GPUFPGA_XFER_ASYNC) && (a->flags & GPUFPGA_XFER_POLL))
		return -EINVAL;
	if (!ch->stream && !gpufpga_card_mem_size)
		return -ENXIO;
	return 0;
}

static struct gpufpga_req *gpufpga_req_new(struct gpufpga_file *f, const struct gpufpga_xfer *a)
{
	struct gpufpga_req *r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);

	if (!r)
		return NULL;
	kref_init(&r->ref);
	init_completion(&r->done);
	INIT_LIST_HEAD(&r->chan_node);
	INIT_LIST_HEAD(&r->ev.node);
	r->file = f;
	r->chan = &f->dev->chan[a->dir][a->channel];
	r->async = a->flags & GPUFPGA_XFER_ASYNC;
	r->poll = a->flags & GPUFPGA_XFER_POLL;
	r->user_data = a->user_data;
	r->card_addr = a->card_addr;
	r->timeout = msecs_to_jiffies(a->timeout_ms ?: gpufpga_timeout_ms);
	r->segs = r->seg_inline;
	r->mems = r->mem_inline;
	if (a->nsegs > ARRAY_SIZE(r->mem_inline)) {
		r->mems = kcalloc(a->nsegs, sizeof(*r->mems), GFP_KERNEL_ACCOUNT);
		if (!r->mems) {
			r->mems = r->mem_inline;
			gpufpga_req_put(r);
			return NULL;
		}
	}
	return r;
}

/* Keeps only the segments the chain uses: requests can sit in queues. */
static int gpufpga_req_shrink(struct gpufpga_req *r)
{
	struct gpufpga_busseg *segs;

	if (r->segs == r->seg_inline)
		return 0;
	segs = kvmalloc_array(r->nsegs, sizeof(*segs), GFP_KERNEL_ACCOUNT);
	if (!segs)
		return -ENOMEM;
	memcpy(segs, r->segs, r->nsegs * sizeof(*segs));
	kvfree(r->segs);
	r->segs = segs;
	return 0;
}

/*
 * Queues r on its channel, unless a pin was revoked meanwhile. An
 * asynchronous request enters f->pending here, under ch->lock, once it is
 * queued: CANCEL finds only requests the channel owns, and the completion,
 * which erases the entry under the same lock, cannot come first. Its slot
 * is reserved beforehand, as nothing under ch->lock may sleep.
 *
 * A short chain queued first is built here, under the lock it starts
 * under, with build_mutex held (so that nothing else writes the spare
 * ring, which no ready request holds: none is queued): on an idle channel
 * into the ring it ran last, and started. Any other is built outside the
 * lock, by gpufpga_build_next.
 */
static int gpufpga_submit(struct gpufpga_req *r)
{
	struct gpufpga_chan *ch = r->chan;
	struct xarray *pending = &r->file->pending;
	bool short_chain = r->nsegs <= GPUFPGA_INLINE_SEGS;
	int ret = 0;
	u32 i;

	if (r->async) {
		ret = xa_reserve_irq(pending, r->id, GFP_KERNEL_ACCOUNT);
		if (ret)
			return ret;
	}
	if (short_chain)
		mutex_lock(&ch->build_mutex);
	spin_lock_irq(&ch->lock);
	if (READ_ONCE(ch->dev->resetting)) {
		ret = -ECONNRESET;
		goto out;
	}
	if (ch->acq) {
		ret = -EBUSY;
		goto out;
	}
	/*
	 * A free callback marks the pin before it scans the channels, so
	 * either it sees r queued here or r sees the mark.
	 */
	for (i = 0; i < r->nmems; i++) {
		if (!gpufpga_mem_active(r->mems[i])) {
			ret = -EKEYREVOKED;
			goto out;
		}
	}
	if (r->async) {
		xa_lock(pending);
		ret = xa_err(__xa_store(pending, r->id, r, GFP_NOWAIT));
		xa_unlock(pending);
		if (ret)
			goto out;
	}
	kref_get(&r->ref);	/* the channel's */
	list_add_tail(&r->chan_node, &ch->queue);
	if (short_chain && list_is_first(&r->chan_node, &ch->queue)) {
		if (!ch->active && !ch->stop_may_be_stale && !ch->stopping &&
		    !READ_ONCE(ch->dev->dead) && !READ_ONCE(ch->dev->link_down)) {
			/*
			 * The last chain's stop was read with it: the engine
			 * fetches nothing more from its ring, which is rerun.
			 */
			gpufpga_build_chain(ch, gpufpga_chan_idle_ring(ch), r);
			list_del(&r->chan_node);
			gpufpga_start(ch, r, true);
		} else {
			gpufpga_build_chain(ch, gpufpga_chan_spare(ch), r);
			r->ready = true;
			gpufpga_start_next(ch);
		}
	}
out:
	spin_unlock_irq(&ch->lock);
	if (short_chain)
		mutex_unlock(&ch->build_mutex);
	if (ret && r->async)
		xa_erase_irq(pending, r->id);
	else if (!ret && !short_chain)
		gpufpga_build_next(ch);
	return ret;
}

/* A polled chain's status: the register is read only when it failed. */
static u32 gpufpga_wb_status(struct gpufpga_chan *ch, u32 wb)
{
	if (!(wb & XDMA_WB_ERROR))
		return XDMA_STAT_DESC_STOPPED;
	return gpufpga_chan_status(ch);
}

/*
 * Poll mode: spins on the engine's writeback word until r's last
 * descriptor completes or the engine reports an error, and completes r
 * here, without waiting for the interrupt. The word is r's only while r is
 * active: a hit for another request sends us back to spinning. Gives up,
 * leaving r to the interrupt and the watchdog, at r's timeout or on a fatal
 * signal.
 */
static void gpufpga_poll_done(struct gpufpga_req *r)
{
	struct gpufpga_chan *ch = r->chan;
	unsigned long until = jiffies + r->timeout;
	u32 wb;

	while (!READ_ONCE(r->finished)) {
		wb = le32_to_cpu(READ_ONCE(*ch->wb));
		if (wb & XDMA_WB_ERROR || (wb & XDMA_WB_COUNT) >= r->nsegs) {
			spin_lock_irq(&ch->lock);
			/*
			 * The word read unlocked may be the last chain's: r
			 * started since zeroed it, under this lock. Read again.
			 */
			wb = le32_to_cpu(READ_ONCE(*ch->wb));
			if (ch->active == r && !ch->halting &&
			    (wb & XDMA_WB_ERROR || (wb & XDMA_WB_COUNT) >= r->nsegs)) {
				u32 status = gpufpga_wb_status(ch, wb);

				if (!gpufpga_failed_busy(ch, status)) {
					gpufpga_complete_active(ch, status);
					gpufpga_start_next(ch);
				}
			}
			spin_unlock_irq(&ch->lock);
		}
		if (fatal_signal_pending(current) || time_after(jiffies, until))
			return;
		cond_resched();
		cpu_relax();
	}
}

/**
 * gpufpga_ioctl_xfer - GPUFPGA_IOC_XFER: run a transfer, or queue it
 * @f: the file
 * @arg: the caller's struct gpufpga_xfer
 * @size: its size
 *
 * A synchronous transfer waits for its end, which only a fatal signal
 * cuts short; an asynchronous one is queued, and its record read().
 *
 * Context: process context, dev->ioctl_rwsem held for reading.
 * Return: 0, or a negative errno: the transfer's own error where it ran.
 */
int gpufpga_ioctl_xfer(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_seg us_inline[GPUFPGA_INLINE_SEGS];
	struct gpufpga_dev *dev = f->dev;
	struct gpufpga_seg *us = us_inline;
	struct gpufpga_xfer a;
	struct gpufpga_req *r;
	int ret;

	lockdep_assert_held(&dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size,
			      offsetofend(struct gpufpga_xfer, user_data));
	if (ret)
		return ret;
	ret = gpufpga_check_xfer_arg(dev, &a);
	if (ret)
		return ret;
	if (READ_ONCE(dev->dead) || READ_ONCE(dev->link_down))
		return -ENODEV;
	if (a.nsegs > ARRAY_SIZE(us_inline))
		us = vmemdup_user(u64_to_user_ptr(a.segs), (size_t)a.nsegs * sizeof(*us));
	else if (copy_from_user(us, u64_to_user_ptr(a.segs), (size_t)a.nsegs * sizeof(*us)))
		us = ERR_PTR(-EFAULT);
	if (IS_ERR(us))
		return PTR_ERR(us);
	r = gpufpga_req_new(f, &a);
	if (!r) {
		ret = -ENOMEM;
		goto out_segs;
	}
	if (r->async && a.eventfd >= 0) {
		r->efd = eventfd_ctx_fdget(a.eventfd);
		if (IS_ERR(r->efd)) {
			ret = PTR_ERR(r->efd);
			r->efd = NULL;
			goto out;
		}
	}
	mutex_lock(&f->lock);
	ret = gpufpga_req_build(f, r, us, a.nsegs);
	r->id = ++f->next_id;
	mutex_unlock(&f->lock);
	if (ret)
		goto out;
	ret = gpufpga_req_shrink(r);
	if (ret)
		goto out;
	ret = gpufpga_check_alignment(r->chan, r->segs, r->nsegs, r->card_addr);
	if (ret)
		goto out;
	if (!r->chan->stream && (r->card_addr + r->total < r->card_addr ||
				 r->card_addr + r->total > gpufpga_card_mem_size)) {
		ret = -EINVAL;
		goto out;
	}
	/* Queued and finished-but-unread transfers hold memory: bound them. */
	if (r->async && atomic_inc_return(&f->nasync) > gpufpga_max_queued) {
		atomic_dec(&f->nasync);
		ret = -EAGAIN;
		goto out;
	}
	/*
	 * Once queued, an asynchronous request belongs to its channel and then
	 * to the completion queue, and read() may free it at any time: take
	 * what the caller is told first.
	 */
	a.id = r->id;
	a.descs = r->nsegs;
	if (r->async) {
		ret = gpufpga_submit(r);
		if (ret) {
			atomic_dec(&f->nasync);
			goto out;
		}
		if (us != us_inline)
			kvfree(us);
		/* The ioctl's reference now belongs to the completion queue. */
		return gpufpga_copy_out(arg, size, &a, sizeof(a));
	}
	ret = gpufpga_submit(r);
	if (ret)
		goto out;
	if (r->poll)
		gpufpga_poll_done(r);
	/*
	 * Only a fatal signal ends the wait: any other (a profiler's SIGPROF,
	 * Go's preemption signal) must not cancel a transfer the engine runs.
	 * The channel's deadline bounds the wait.
	 */
	if (wait_for_completion_killable(&r->done)) {
		gpufpga_cancel_req(r, -EINTR);
		wait_for_completion(&r->done);
	}
	gpufpga_req_put(r);	/* the channel's, handed over at completion */
	a.bytes = r->bytes;
	a.status = r->status;
	a.error = r->error;
	a.duration_ns = r->duration_ns;
	ret = gpufpga_copy_out(arg, size, &a, sizeof(a)) ?: r->error;
out:
	if (ret && !r->finished) {
		/* Never queued: its pins are still counted as in flight. */
		gpufpga_req_let_go(r);
		trace_gpufpga_error(dev->id, "xfer", ret, 0);
	}
	gpufpga_req_put(r);
out_segs:
	if (us != us_inline)
		kvfree(us);
	return ret;
}

/**
 * gpufpga_ioctl_cancel - GPUFPGA_IOC_CANCEL: end a queued or running async transfer
 * @f: the file
 * @arg: the caller's struct gpufpga_cancel
 * @size: its size
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes ch->mutex.
 * Return: 0, or -ENOENT where f has no such transfer unfinished.
 */
int gpufpga_ioctl_cancel(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_cancel a;
	struct gpufpga_req *r;
	int ret;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, sizeof(a));
	if (ret)
		return ret;
	if (a.flags || a.pad)
		return -EINVAL;
	xa_lock_irq(&f->pending);
	r = xa_load(&f->pending, a.id);
	if (r)
		kref_get(&r->ref);
	xa_unlock_irq(&f->pending);
	if (!r)
		return -ENOENT;
	gpufpga_cancel_req(r, -ECANCELED);
	gpufpga_req_put(r);
	return 0;
}

static const struct gpufpga_chan_user gpufpga_xfer_user = {
	.irq = gpufpga_xfer_irq,
	.watchdog = gpufpga_xfer_watchdog,
	.uses = gpufpga_xfer_uses,
	.stop = gpufpga_xfer_stop,
};

/**
 * gpufpga_xfer_chan_init - set the channel's engine up for transfers
 * @ch: the channel
 *
 * Transfers run it until a stream starts.
 *
 * Context: process context (probe).
 * Return: 0, or -ENOMEM.
 */
int gpufpga_xfer_chan_init(struct gpufpga_chan *ch)
{
	return gpufpga_chan_init(ch, &gpufpga_xfer_user, gpufpga_build_work);
}
