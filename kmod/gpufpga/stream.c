// SPDX-License-Identifier: GPL-2.0
/*
 * Streams: a C2H stream channel runs a cyclic descriptor ring over slots of
 * pinned memory, in credit mode. A slot is one descriptor per bus-contiguous
 * run of its memory (one for a run of GPU pages, several for host pages).
 * The engine may only fetch a descriptor it holds a credit for; a slot's
 * credits are given back when user space has released it and every slot
 * filled before it, so the engine can never come round to a slot user space
 * still holds: it stops and waits instead, and the FPGA drops (and counts)
 * what it cannot send.
 *
 * Filled slots are reported from the hard IRQ handler, under ch->lock;
 * starting and ending a stream hold ch->mutex. Called with ch->lock held
 * unless noted; the lock order is gpufpga.h's.
 *
 * A GPU-resident stream reports no slot: the engine writes each slot's
 * result where a consumer on the GPU polls it, and the consumer publishes
 * how far it got in a word of host memory. Its credits follow that word,
 * read on the engine's interrupts, one every coalesce fills, and on a
 * timer while the engine has too few credits left to reach the next one.
 */
#include <linux/bitmap.h>
#include <linux/highmem.h>
#include <linux/hrtimer.h>
#include <linux/iommu.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "gpufpga.h"
#include "trace.h"
#include "uapi/gpufpga_resident.h"

/* Stream ids: never 0, never reused while the module is loaded. */
static atomic64_t gpufpga_stream_ids = ATOMIC64_INIT(0);

struct gpufpga_stream_state {
	struct gpufpga_file *file;
	struct gpufpga_chan *ch;
	u64 id;
	bool named;			/* started with an id: RELEASE and STOP name it */
	u32 nslots;
	u32 ndescs;
	u64 bytes;			/* of all slots */
	/* One reference per slot, then a resident stream's results and consumer. */
	struct gpufpga_mem **mems;
	u32 nmems;
	struct gpufpga_busseg *descs;	/* the ring's descriptors, slot by slot */
	u32 *first;			/* slot -> its first descriptor; [nslots] = ndescs */
	unsigned long *held;		/* filled, not yet released */
	unsigned long *released;	/* released, credit not yet given */
	u32 next_fill;			/* ring order */
	u32 fill_descs;			/* descriptors of next_fill completed */
	u64 fill_bytes;			/* and their bytes */
	u32 next_credit;
	u32 completed;			/* last completed count seen */
	u64 seq;
	struct gpufpga_event *end;	/* STREAM_END, made in advance */
	struct gpufpga_event_block *events;	/* slot -> its SLOT record */
	bool idle;			/* the slots' inflight counts dropped */

	/* GPU-resident: seq counts fills, and this is ch->lock's too. */
	bool resident;
	u32 coalesce;			/* fills per interrupt */
	dma_addr_t *result_bus;		/* slot -> its result */
	struct page *consumer_page;	/* of a host pin: struct gpufpga_consumer */
	unsigned int consumer_off;
	u64 consumed;			/* the consumer's count, last accepted */
	u64 granted;			/* credits given since the start */
	bool polling;			/* poll armed or running */
	unsigned int poll_idle;		/* polls in a row that granted nothing */
	ktime_t poll_period;
	struct hrtimer poll;
};

static u32 gpufpga_slot_descs(struct gpufpga_stream_state *st, u32 slot)
{
	return st->first[slot + 1] - st->first[slot];
}

/*
 * The slots' pins are no longer in use by the engine: UNPIN may take them.
 * Their references stay until gpufpga_stream_free, which may sleep.
 */
static void gpufpga_stream_idle_slots(struct gpufpga_stream_state *st)
{
	u32 i;

	for (i = 0; i < st->nmems; i++)
		atomic_dec(&st->mems[i]->inflight);
	st->idle = true;
}

/* Not under ch->lock: the poll takes it, and this waits for the poll. */
static void gpufpga_stream_free(struct gpufpga_stream_state *st)
{
	u32 i;

	if (st->resident)
		hrtimer_cancel(&st->poll);
	if (!st->idle)
		gpufpga_stream_idle_slots(st);
	for (i = 0; i < st->nmems; i++)
		gpufpga_mem_put(st->mems[i]);
	kvfree(st->result_bus);
	kfree(st->end);
	if (st->events)
		gpufpga_event_block_put(st->events);
	bitmap_free(st->held);
	bitmap_free(st->released);
	kvfree(st->descs);
	kvfree(st->first);
	kvfree(st->mems);
	kfree(st);
}

/* Takes a reference to m, and keeps UNPIN off it while the stream runs. */
static void gpufpga_stream_hold(struct gpufpga_stream_state *st, struct gpufpga_mem *m)
{
	kref_get(&m->ref);
	atomic_inc(&m->inflight);
	st->mems[st->nmems++] = m;
}

/* Whether m is host memory, which the CPU and a GPU reach by other paths. */
static bool gpufpga_in_host(const struct gpufpga_mem *m)
{
	return m->kind == GPUFPGA_PIN_HOST;
}

/* The PCI function one of whose BARs holds bus address addr, or NULL. */
static struct pci_dev *gpufpga_bar_owner(dma_addr_t addr)
{
	struct pci_dev *p = NULL;
	pci_bus_addr_t bus;
	int i;

	for_each_pci_dev(p) {
		for (i = 0; i < PCI_STD_NUM_BARS; i++) {
			bus = pci_bus_address(p, i);
			if (pci_resource_len(p, i) && addr >= bus &&
			    addr - bus < pci_resource_len(p, i))
				return p;	/* its reference is the caller's */
		}
	}
	return NULL;
}

/*
 * Whether two dma-bufs reach the engine through one PCI function's BARs:
 * the exporter's device is not the importer's to see, the BAR its bus
 * addresses fall in is. Unsure (an IOMMU translates, so the addresses are
 * not the BARs', or an address in no BAR) means no.
 */
static bool gpufpga_dmabuf_same_device(const struct gpufpga_mem *a, const struct gpufpga_mem *b)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(&a->dev->pdev->dev);
	struct pci_dev *pa, *pb;
	bool same;

	if (dom && dom->type != IOMMU_DOMAIN_IDENTITY)
		return false;
	pa = gpufpga_bar_owner(sg_dma_address(a->dmabuf.sgt->sgl));
	pb = gpufpga_bar_owner(sg_dma_address(b->dmabuf.sgt->sgl));
	same = pa && pa == pb;
	pci_dev_put(pa);
	pci_dev_put(pb);
	return same;
}

/*
 * Whether the engine's writes reach a and b by one path, so that a result
 * written after a slot's data is seen after it: the same kind of pin, and
 * for GPU pins the same GPU (a known UUID), for dma-bufs the same
 * exporter's BARs.
 */
static bool gpufpga_same_memory(const struct gpufpga_mem *a, const struct gpufpga_mem *b)
{
	if (a->kind != b->kind)
		return false;
	if (a->kind == GPUFPGA_PIN_GPU)
		return memchr_inv(a->nv.gpu_uuid, 0, sizeof(a->nv.gpu_uuid)) &&
		       !memcmp(a->nv.gpu_uuid, b->nv.gpu_uuid, sizeof(a->nv.gpu_uuid));
	if (a->kind == GPUFPGA_PIN_DMABUF)
		return gpufpga_dmabuf_same_device(a, b);
	return true;
}

static bool gpufpga_stream_uses(struct gpufpga_chan *ch, struct gpufpga_mem *m)
{
	u32 i;

	if (!ch->acq)
		return false;
	for (i = 0; i < ch->acq->nmems; i++)
		if (ch->acq->mems[i] == m)
			return true;
	return false;
}

static void gpufpga_fill_event(struct gpufpga_chan *ch, struct gpufpga_stream_state *st,
			       struct gpufpga_event *ev, u32 kind, u32 slot, u64 bytes,
			       u32 flags, int error, u32 status)
{
	struct gpufpga_file *f = st->file;
	u64 seq = st->seq;

	ev->rec.kind = kind;
	ev->rec.id = st->id;
	ev->rec.slot = slot;
	ev->rec.seq = seq;
	ev->rec.bytes = bytes;
	ev->rec.flags = flags;
	ev->rec.error = error;
	ev->rec.status = status;
	ev->rec.timestamp_ns = ktime_get_ns();
	ev->rec.dir = ch->dir;
	ev->rec.channel = ch->index;
	atomic_inc(&f->nevents);
	gpufpga_post_event(f, ev, NULL);
}

/*
 * Reports a filled slot with one of its two records, made when the stream
 * started: a client may read a slot's record lazily, a ring behind. One
 * that releases slots without reading them would let records pile up, so
 * the stream ends with -EOVERFLOW instead when both of the slot's records
 * are unread, or past max_queued unread records on the file. Under
 * ch->lock, maybe in hard IRQ.
 */
static int gpufpga_post_slot(struct gpufpga_chan *ch, u32 slot, u64 bytes, u32 flags)
{
	struct gpufpga_stream_state *st = ch->acq;
	struct gpufpga_event *ev = &st->events->ev[slot];

	lockdep_assert_held(&ch->lock);
	if (atomic_read(&st->file->nevents) >= gpufpga_max_queued)
		return -EOVERFLOW;
	/* Pairs with the release in gpufpga_event_free: ev is ours again. */
	if (smp_load_acquire(&ev->queued)) {
		ev = &st->events->ev[st->nslots + slot];
		/* As above, for the slot's second record. */
		if (smp_load_acquire(&ev->queued))
			return -EOVERFLOW;
	}
	WRITE_ONCE(ev->queued, true);
	kref_get(&st->events->ref);
	gpufpga_fill_event(ch, st, ev, GPUFPGA_EVENT_SLOT, slot, bytes, flags, 0, 0);
	return 0;
}

/*
 * Descriptors the engine completed since st->completed, from its 24-bit
 * count. Offline, the count reads 0: nothing is known to have filled.
 */
static u32 gpufpga_stream_completed(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	u32 count;

	if (READ_ONCE(ch->dev->offline))
		return 0;
	count = gpufpga_read(ch->dev, gpufpga_chan_reg(ch, XDMA_REG_COMPLETED));
	if (READ_ONCE(ch->dev->link_down))
		return 0;
	return (count - st->completed) & 0xffffff;
}

/*
 * Reports the slots the engine filled since the last look: a slot is filled
 * when its last descriptor completes. Returns -EPROTO when a packet ended
 * short inside a slot of several descriptors, which would leave a hole in
 * it, and -EOVERFLOW when the client lets records pile up unread. Returns
 * the number of slots reported otherwise. A descriptor is taken only once
 * its result is written (its magic), as Xilinx's driver does: PG195 does
 * not order the count after the results, nor the results after the count.
 */
static int gpufpga_stream_collect(struct gpufpga_chan *ch)
{
	int slots = 0;
	int ret;
	struct gpufpga_stream_state *st = ch->acq;
	struct xdma_result *res = gpufpga_ring_results(&ch->rings[ch->cur]);
	u32 n, slot, d, status, len;

	lockdep_assert_held(&ch->lock);
	/*
	 * The count says how many descriptors completed, but a card's count
	 * may leave the last one out while the engine waits for credits: the
	 * results past it are taken too, up to every descriptor that holds
	 * a credit, so that a slot the client must release is reported.
	 */
	n = gpufpga_stream_completed(ch, st);
	rmb();	/* results written before the count moved */
	n = max(n, st->ndescs);
	for (; n; n--) {
		slot = st->next_fill;
		d = st->first[slot] + st->fill_descs;
		status = le32_to_cpu(res[d].status);
		len = le32_to_cpu(res[d].len);
		if (status >> 16 != XDMA_RESULT_MAGIC)
			break;	/* not written yet: the next look takes it */
		if (st->fill_descs + 1 < gpufpga_slot_descs(st, slot)) {
			if (len != st->descs[d].len) {
				dev_warn_ratelimited(&ch->dev->pdev->dev, "C2H channel %u: slot %u: a packet ended after %u of descriptor %u's %u bytes (status %#x)\n",
						     ch->index, slot, len, d, st->descs[d].len,
						     status);
				return -EPROTO;
			}
			res[d].status = 0;
			st->fill_descs++;
			st->fill_bytes += len;
			st->completed = (st->completed + 1) & 0xffffff;
			continue;
		}
		ret = gpufpga_post_slot(ch, slot, st->fill_bytes + len,
					status & XDMA_RESULT_EOP ? GPUFPGA_SLOT_EOP : 0);
		if (ret)
			return ret;	/* the stream ends with it: nothing unreported */
		trace_gpufpga_stream_slot(ch->dev->id, ch->index, slot, st->seq,
					  st->fill_bytes + len,
					  status & XDMA_RESULT_EOP ? GPUFPGA_SLOT_EOP : 0);
		res[d].status = 0;
		set_bit(slot, st->held);
		st->next_fill = (slot + 1) % st->nslots;
		st->seq++;
		st->completed = (st->completed + 1) & 0xffffff;
		ch->bytes += st->fill_bytes + len;
		ch->xfers++;
		st->fill_descs = 0;
		st->fill_bytes = 0;
		slots++;
	}
	return slots;
}

/*
 * Counts the fills the engine completed since the last look, in seq: a
 * GPU-resident stream reads no result, and reports none. Returns how many,
 * or -EIO for a count that moved past the credits granted: a card that
 * glitches, whose fills nobody can account for.
 */
static int gpufpga_resident_collect(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	u32 n = gpufpga_stream_completed(ch, st);

	if (n > st->granted - st->seq)
		return -EIO;
	st->completed = (st->completed + n) & 0xffffff;
	st->seq += n;
	ch->xfers += n;
	if (n)
		trace_gpufpga_stream_fills(ch->dev->id, ch->index, n, st->seq, st->consumed,
					   st->granted);
	return n;
}

/* Sets the consumer's count, before the stream starts. */
static void gpufpga_resident_set_consumed(struct gpufpga_stream_state *st, u64 consumed)
{
	struct gpufpga_consumer *c;
	void *page = kmap_local_page(st->consumer_page);

	c = page + st->consumer_off;
	WRITE_ONCE(c->consumed, consumed);
	kunmap_local(page);
}

/* The consumer's count: its word in a host pin, which only it writes. */
static u64 gpufpga_resident_consumed(struct gpufpga_stream_state *st)
{
	struct gpufpga_consumer *c;
	void *page = kmap_local_page(st->consumer_page);
	u64 consumed;

	c = page + st->consumer_off;
	consumed = READ_ONCE(c->consumed);
	kunmap_local(page);
	return consumed;
}

/*
 * The fills the engine has certainly made: those its count register
 * shows, those its poll-mode writeback (written at each completion) shows,
 * and those the consumer has published, for it saw their results. PG195
 * does not order the count register after the results, and a card's
 * register may lag them until its next completion. A writeback behind the
 * register (still on its way) tells nothing.
 */
static u64 gpufpga_resident_reached(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	u32 wb = (le32_to_cpu(READ_ONCE(*ch->wb)) - st->completed) & XDMA_WB_COUNT;

	if (wb > st->granted - st->seq)
		wb = 0;
	return max(st->seq + wb, st->consumed);
}

/*
 * The halted engine's last fills: its count may move a little after the
 * results it wrote (PG195 does not order them), so it is read until it
 * stands still; a consumer that saw more counts them too, for STREAM_END
 * to count every fill the consumer has seen. Called with ch->lock held.
 */
static int gpufpga_resident_drain(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	u64 consumed = gpufpga_resident_consumed(st), seq = st->seq;
	int n, reads = 0;

	lockdep_assert_held(&ch->lock);
	do {
		n = gpufpga_resident_collect(ch, st);
	} while (n > 0 && ++reads < 4);
	if (n < 0)
		return n;
	/* A count that went back or ran past the credits was refused already. */
	if (consumed - st->consumed <= st->granted - st->consumed)
		st->consumed = consumed;
	st->seq = gpufpga_resident_reached(ch, st);
	return st->seq - seq;
}

/*
 * Counts the fills, takes the consumer's count and grants the engine the
 * credits it freed. Returns the fills found, or -ERANGE for a count that
 * went back or passed what the engine was allowed to fill. A consumer
 * count past the fills the engine's count shows is taken: PG195 does not
 * say whether the engine moves its count before or after it writes a
 * result, which the consumer may have seen first. Sets *starved when the engine
 * has too few credits to reach its next interrupt (then only the poll
 * sees the consumer move on), and *granted when credits were given.
 */
static int gpufpga_resident_pass(struct gpufpga_chan *ch, struct gpufpga_stream_state *st,
				 bool *starved, bool *granted)
{
	u64 consumed = gpufpga_resident_consumed(st), used;
	u32 credits;
	int n;

	lockdep_assert_held(&ch->lock);
	*starved = false;
	*granted = false;
	rmb();	/* the count, read next, is no older than the consumer's */
	n = gpufpga_resident_collect(ch, st);
	if (READ_ONCE(ch->dev->offline) || READ_ONCE(ch->dev->link_down))
		return n;
	if (consumed - st->consumed > st->granted - st->consumed)
		return -ERANGE;
	/* Each fill consumed was made: its slot is free, counted or not. */
	st->consumed = consumed;
	credits = st->consumed + st->nslots - st->granted;
	/*
	 * The engine's credit counter is XDMA_MAX_CREDITS wide. Bound what
	 * it holds by the fills its own count shows, which a consumer count
	 * run ahead of the engine (a bug in user code) cannot move on.
	 */
	used = st->granted - st->seq;
	credits = min_t(u64, credits, used < XDMA_MAX_CREDITS ? XDMA_MAX_CREDITS - used : 0);
	if (credits) {
		gpufpga_chan_add_credits(ch, credits);
		st->granted += credits;
		*granted = true;
	}
	/*
	 * From where the engine certainly is, not from a count that may lag:
	 * starved when the credits may not reach the next interrupting fill
	 * (at most coalesce fills on).
	 */
	*starved = st->granted - gpufpga_resident_reached(ch, st) < st->coalesce;
	return n;
}

/* Runs a pass from an interrupt or the watchdog; starts the poll if needed. */
static int gpufpga_resident_look(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	bool starved, granted;
	int ret = gpufpga_resident_pass(ch, st, &starved, &granted);

	if (ret >= 0 && starved && !st->polling) {
		st->polling = true;
		st->poll_idle = 0;
		hrtimer_start(&st->poll, st->poll_period, HRTIMER_MODE_REL);
	}
	return ret;
}

/* Takes the fills since the last look: slots reported, or credits granted. */
static int gpufpga_stream_look(struct gpufpga_chan *ch)
{
	struct gpufpga_stream_state *st = ch->acq;

	return st->resident ? gpufpga_resident_look(ch, st) : gpufpga_stream_collect(ch);
}

/**
 * gpufpga_resident_order - relaxed ordering off while resident streams run
 * @dev: the device
 * @start: a resident stream starts (true) or ends (false)
 *
 * With relaxed ordering a result may pass its slot's data. The first
 * resident stream turns it off, if it was on; the last one to end turns
 * it on again.
 *
 * Context: any; takes dev->devctl_lock, which serialises the driver's
 * read-modify-writes of Device Control.
 */
static void gpufpga_resident_order(struct gpufpga_dev *dev, bool start)
{
	unsigned long flags;
	u16 ctl;

	spin_lock_irqsave(&dev->devctl_lock, flags);
	/* Not on a function that does not answer: all ones is no register. */
	if (start && !dev->resident_streams++ &&
	    !pcie_capability_read_word(dev->pdev, PCI_EXP_DEVCTL, &ctl) &&
	    !PCI_POSSIBLE_ERROR(ctl) && ctl & PCI_EXP_DEVCTL_RELAX_EN) {
		pcie_capability_write_word(dev->pdev, PCI_EXP_DEVCTL,
					   ctl & ~PCI_EXP_DEVCTL_RELAX_EN);
		dev->relaxed_off = true;
	} else if (!start && !--dev->resident_streams && dev->relaxed_off) {
		dev->relaxed_off = false;
		if (!pcie_capability_read_word(dev->pdev, PCI_EXP_DEVCTL, &ctl) &&
		    !PCI_POSSIBLE_ERROR(ctl))
			pcie_capability_write_word(dev->pdev, PCI_EXP_DEVCTL,
						   ctl | PCI_EXP_DEVCTL_RELAX_EN);
	}
	spin_unlock_irqrestore(&dev->devctl_lock, flags);
}

/*
 * Ends the stream: halt, report what was filled, mark the slots' pins idle,
 * then STREAM_END, all under ch->lock: a client that unpins once it has
 * read STREAM_END finds them idle, and one whose release fails with
 * -ENOENT finds STREAM_END queued. Called with ch->mutex held and ch->lock
 * not held.
 */
static void gpufpga_stream_end(struct gpufpga_chan *ch, int error)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_stream_state *st;
	bool stopped;
	u32 status;
	int collected;

	lockdep_assert_held(&ch->mutex);
	if (!gpufpga_chan_own(ch, NULL, 0))
		return;
	stopped = !gpufpga_chan_halt(ch, &status);
	spin_lock_irq(&ch->lock);
	st = ch->acq;
	if (!READ_ONCE(dev->link_down)) {
		collected = st->resident ? gpufpga_resident_drain(ch, st) :
					  gpufpga_stream_collect(ch);
		if (collected < 0 && !error)
			error = collected;
	}
	/*
	 * Transfers get the engine back, programmed as they need it. Out of
	 * credit mode a cyclic ring runs free: only an engine seen idle is
	 * reprogrammed; one the halt could not reach keeps its registers
	 * until the reset or reprogramming that brings the function back.
	 */
	ch->credit_mode = false;
	ch->int_enable = XDMA_STAT_DESC_STOPPED | XDMA_STAT_ERRORS;
	if (stopped)
		gpufpga_chan_program(ch, 0);
	gpufpga_chan_detach(ch);
	/* What the IRQ handler found wrong is why the stream ended. */
	error = error ?: ch->acq_error;
	if (error)
		trace_gpufpga_error(dev->id, "stream", error, status);
	trace_gpufpga_stream_end(dev->id, ch->index, st->seq, error, status);
	if (st->resident)
		gpufpga_resident_order(dev, false);
	gpufpga_stream_idle_slots(st);
	gpufpga_fill_event(ch, st, st->end, GPUFPGA_EVENT_STREAM_END, 0, 0, 0, error, status);
	st->end = NULL;
	ch->last_status = status;
	ch->acq = NULL;
	ch->acq_error = 0;
	ch->stop_may_be_stale = true;	/* the halt's bits may still come */
	gpufpga_chan_release(ch);
	spin_unlock_irq(&ch->lock);
	gpufpga_stream_free(st);
}

/*
 * Ends the stream if f started it (f NULL: anyone) and it uses m (m NULL:
 * any memory), with error. Called with ch->mutex held.
 */
static void gpufpga_stream_stop(struct gpufpga_chan *ch, struct gpufpga_file *f,
				struct gpufpga_mem *m, int error, unsigned long until)
{
	lockdep_assert_held(&ch->mutex);
	if (!ch->acq || (f && ch->acq->file != f) || (m && !gpufpga_stream_uses(ch, m)))
		return;
	if (error == -EKEYREVOKED) {
		spin_lock_irq(&ch->lock);
		ch->revoked++;
		spin_unlock_irq(&ch->lock);
	}
	gpufpga_stream_end(ch, error);
}

/*
 * The IRQ handler, or the poll, found the stream must end: the watchdog
 * ends it. Under ch->lock.
 */
static void gpufpga_stream_fail(struct gpufpga_chan *ch, int error)
{
	lockdep_assert_held(&ch->lock);
	ch->errors++;
	if (!ch->acq_error)
		ch->acq_error = error;
	mod_delayed_work(gpufpga_wq, &ch->work, 0);
}

/*
 * The poll: while the engine is short of credits, passes until the
 * consumer has freed enough for the engine to reach its next interrupt.
 * A consumer that stands still is read less and less often, down to one
 * read every 64 periods. Hard IRQ (soft on PREEMPT_RT). Ends when the
 * stream does: it stops rearming once ch->acq is another, and the
 * stream's end waits for it.
 */
static enum hrtimer_restart gpufpga_resident_poll(struct hrtimer *timer)
{
	struct gpufpga_stream_state *st = container_of(timer, struct gpufpga_stream_state, poll);
	struct gpufpga_chan *ch = st->ch;
	bool starved = false, granted = false;
	unsigned long flags;
	int ret;

	spin_lock_irqsave(&ch->lock, flags);
	if (ch->acq == st && !ch->acq_error && !ch->halting && !READ_ONCE(ch->dev->offline)) {
		ret = gpufpga_resident_pass(ch, st, &starved, &granted);
		if (ret < 0)
			gpufpga_stream_fail(ch, ret);
	}
	st->polling = starved;
	st->poll_idle = granted ? 0 : min(st->poll_idle + 1, 6U);
	spin_unlock_irqrestore(&ch->lock, flags);
	if (!starved)
		return HRTIMER_NORESTART;
	hrtimer_forward_now(timer, st->poll_period << st->poll_idle);
	return HRTIMER_RESTART;
}

/*
 * Whether the status bits seen tell that the engine left the ring: an
 * error, a stop (no descriptor of the ring asks for one) or RUN cleared
 * under it. BUSY tells nothing here: an engine that has used every credit
 * waits, and PG195 does not say whether BUSY stays set while it does.
 */
static bool gpufpga_stream_stopped(u32 seen)
{
	return seen & (XDMA_STAT_ERRORS | XDMA_STAT_DESC_STOPPED | XDMA_STAT_IDLE_STOPPED);
}

/*
 * A slot filled, or the engine stopped: status is every bit seen since the
 * stream started. Hard IRQ, ch->lock held.
 */
static void gpufpga_stream_irq(struct gpufpga_chan *ch, u32 status)
{
	struct gpufpga_dev *dev = ch->dev;
	int ret;

	lockdep_assert_held(&ch->lock);
	if (ch->acq_error)
		return;		/* ending already */
	if (READ_ONCE(dev->link_down)) {
		gpufpga_stream_fail(ch, -ENODEV);
		return;
	}
	ret = gpufpga_stream_look(ch);
	if (ret < 0)
		gpufpga_stream_fail(ch, ret);
	else if (gpufpga_stream_stopped(status))
		gpufpga_stream_fail(ch, -EIO);
}

/*
 * The stream's watchdog, every timeout period: ends a stream the IRQ
 * handler failed, and reports slots whose interrupt never came. Called with
 * ch->mutex held.
 */
static void gpufpga_stream_watchdog(struct gpufpga_chan *ch)
{
	struct gpufpga_dev *dev = ch->dev;
	int error, found;
	u32 status;

	lockdep_assert_held(&ch->mutex);
	spin_lock_irq(&ch->lock);
	error = ch->acq_error;
	if (!error && !ch->halting) {
		/* As the IRQ handler would have: its stop may be what was lost. */
		status = gpufpga_chan_status(ch);
		found = gpufpga_stream_look(ch);
		if (found > 0 && !ch->acq->resident)
			dev_warn_ratelimited(&dev->pdev->dev, "C2H channel %u: %d stream slots filled without an interrupt\n",
					     ch->index, found);
		if (READ_ONCE(dev->link_down))
			error = -ENODEV;
		else if (found < 0)
			error = found;
		else if (gpufpga_stream_stopped(status))
			error = -EIO;
		if (error)
			ch->errors++;
		else
			queue_delayed_work(gpufpga_wq, &ch->work,
					   msecs_to_jiffies(gpufpga_timeout_ms));
	}
	spin_unlock_irq(&ch->lock);
	if (error)
		gpufpga_stream_end(ch, error);
}

/*
 * Lays out the cyclic ring in ring: none stops, and the last descriptor of
 * each slot asks for the completion interrupt; a GPU-resident stream's
 * slot is one descriptor, whose result goes to the consumer, and only
 * every coalesce'th asks. Called with ch->build_mutex held: the ring is
 * the spare one.
 */
static void gpufpga_stream_load(struct gpufpga_ring *ring, struct gpufpga_stream_state *st)
{
	dma_addr_t results = ring->bus + (size_t)gpufpga_max_descs * XDMA_DESC_SIZE;
	struct xdma_desc *d = ring->desc;
	u32 i, slot = 0, n = st->ndescs;

	lockdep_assert_held(&st->ch->build_mutex);
	for (i = 0; i < n; i++, d++) {
		u32 next = (i + 1) % n;
		dma_addr_t next_addr = ring->bus + (u64)next * XDMA_DESC_SIZE;
		u32 control = XDMA_DESC_MAGIC << 16 |
			      gpufpga_adjacent_after(next_addr, n - next - 1) << 8;
		dma_addr_t result = results + (u64)i * XDMA_RESULT_SIZE;

		if (st->resident) {
			result = st->result_bus[i];
			if ((i + 1) % st->coalesce == 0 || i + 1 == n)
				control |= XDMA_DESC_COMPLETED;
		} else if (i + 1 == st->first[slot + 1]) {
			control |= XDMA_DESC_COMPLETED;
			slot++;
		}
		d->control = cpu_to_le32(control);
		d->len = cpu_to_le32(st->descs[i].len);
		d->src = cpu_to_le64(result);
		d->dst = cpu_to_le64(st->descs[i].addr);
		d->next = cpu_to_le64(next_addr);
	}
	memset(gpufpga_ring_results(ring), 0, (size_t)n * XDMA_RESULT_SIZE);
	ring->count = n;
	ring->first_adj = gpufpga_adjacent_after(ring->bus, n - 1);
}

static const struct gpufpga_chan_user gpufpga_stream_user = {
	.irq = gpufpga_stream_irq,
	.watchdog = gpufpga_stream_watchdog,
	.uses = gpufpga_stream_uses,
	.stop = gpufpga_stream_stop,
};

/*
 * Runs the ring loaded into the spare ring, in credit mode with a credit
 * for every descriptor. Called with ch->mutex, ch->build_mutex and
 * ch->lock held, the channel idle.
 */
static void gpufpga_stream_run(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	struct gpufpga_dev *dev = ch->dev;

	lockdep_assert_held(&ch->mutex);
	lockdep_assert_held(&ch->build_mutex);
	lockdep_assert_held(&ch->lock);
	st->completed = 0;	/* RUN's rising edge clears the count */
	st->granted = st->ndescs;
	gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS_RC));
	ch->credit_mode = true;
	ch->int_enable = XDMA_STAT_DESC_COMPLETED | XDMA_STAT_DESC_STOPPED | XDMA_STAT_ERRORS;
	ch->quiet = false;
	ch->acq = st;
	gpufpga_chan_attach(ch, &gpufpga_stream_user);
	/*
	 * Only now, every check passed: a start that fails leaves a consumer
	 * word another stream may share, and the ordering, as they were.
	 * The writeback is the resident stream's position (gpufpga_resident_reached).
	 */
	if (st->resident) {
		gpufpga_resident_set_consumed(st, 0);
		gpufpga_resident_order(dev, true);
		WRITE_ONCE(*ch->wb, 0);
	}
	gpufpga_chan_run(ch, XDMA_CTRL_LOG_ALL | XDMA_CTRL_RUN |
			 (st->resident ? XDMA_CTRL_POLL_MODE_WB : 0), st->ndescs);
	trace_gpufpga_stream_start(dev->id, ch->index, st->nslots, st->ndescs, st->bytes);
	mod_delayed_work(gpufpga_wq, &ch->work, msecs_to_jiffies(gpufpga_timeout_ms));
}

/* The ring's descriptor limit: the channel's ring and the credit counter. */
static u32 gpufpga_stream_max_descs(void)
{
	return min_t(unsigned int, gpufpga_max_descs, XDMA_MAX_CREDITS);
}

/*
 * Looks up and checks the slots and lays out their descriptors. Called with
 * f->lock held.
 */
static int gpufpga_stream_slots(struct gpufpga_file *f, struct gpufpga_chan *ch,
				struct gpufpga_stream_state *st, const struct gpufpga_seg *us)
{
	const u32 max = gpufpga_stream_max_descs();
	struct gpufpga_req probe = {};
	struct gpufpga_mem *m;
	u32 i;
	int ret;

	lockdep_assert_held(&f->lock);
	for (i = 0; i < st->nslots; i++) {
		m = xa_load(&f->pins, us[i].handle);
		if (!m)
			return -ENOENT;
		if (!gpufpga_mem_active(m))
			return -EKEYREVOKED;
		if (!us[i].len || us[i].offset >= m->len || us[i].len > m->len - us[i].offset)
			return -EINVAL;
		/* A slot's descriptors are its own: none merges with the last slot's. */
		probe.segs = st->descs + st->ndescs;
		probe.nsegs = 0;
		ret = gpufpga_append_window_limited(&probe, m, m->offset + us[i].offset, us[i].len,
						    max - st->ndescs);
		if (!ret)
			ret = gpufpga_check_alignment(ch, probe.segs, probe.nsegs, 0);
		if (ret)
			return ret;
		/* A resident slot has one result: one descriptor, in one memory. */
		if (st->resident && (probe.nsegs != 1 || !gpufpga_same_memory(m, st->mems[0] ?: m)))
			return -EINVAL;
		st->first[i] = st->ndescs;
		st->ndescs += probe.nsegs;
		st->bytes += us[i].len;
		gpufpga_stream_hold(st, m);
	}
	st->first[st->nslots] = st->ndescs;
	return 0;
}

/*
 * Looks up a resident stream's results or consumer: at least need bytes,
 * aligned to align, in the memory of like (a host pin if like is NULL).
 */
static struct gpufpga_mem *gpufpga_resident_mem(struct gpufpga_file *f,
						const struct gpufpga_seg *us, u64 need,
						u32 align, const struct gpufpga_mem *like)
{
	struct gpufpga_mem *m = xa_load(&f->pins, us->handle);

	if (!m)
		return ERR_PTR(-ENOENT);
	if (!gpufpga_mem_active(m))
		return ERR_PTR(-EKEYREVOKED);
	if (us->len < need || us->offset >= m->len || us->len > m->len - us->offset ||
	    (m->offset + us->offset) % align ||
	    (like ? !gpufpga_same_memory(m, like) : !gpufpga_in_host(m)))
		return ERR_PTR(-EINVAL);
	return m;
}

/*
 * Takes a resident stream's results (where the slots are) and consumer (a
 * host pin), and finds each slot's result on the bus. Called with f->lock
 * held, after gpufpga_stream_slots.
 */
static int gpufpga_resident_pins(struct gpufpga_file *f, struct gpufpga_stream_state *st,
				 const struct gpufpga_stream *a)
{
	const u64 size = sizeof(struct gpufpga_slot_result);
	struct gpufpga_busseg seg;
	struct gpufpga_req probe = { .segs = &seg };
	struct gpufpga_mem *m;
	u64 off;
	u32 i;
	int ret;

	lockdep_assert_held(&f->lock);
	m = gpufpga_resident_mem(f, &a->results, st->nslots * size, size, st->mems[0]);
	if (IS_ERR(m))
		return PTR_ERR(m);
	gpufpga_stream_hold(st, m);
	for (i = 0; i < st->nslots; i++) {
		probe.nsegs = 0;
		ret = gpufpga_append_window_limited(&probe, m, m->offset + a->results.offset +
						    i * size, size, 1);
		if (ret)
			return ret;
		if (seg.addr % size)
			return -EINVAL;
		st->result_bus[i] = seg.addr;
	}
	m = gpufpga_resident_mem(f, &a->consumer, sizeof(struct gpufpga_consumer),
				 sizeof(struct gpufpga_consumer), NULL);
	if (IS_ERR(m))
		return PTR_ERR(m);
	gpufpga_stream_hold(st, m);
	off = m->offset + a->consumer.offset;
	st->consumer_page = m->host.pages[off >> PAGE_SHIFT];
	st->consumer_off = offset_in_page(off);
	return 0;
}

/* A stream channel of the device; absent channels have no lock to take. */
static struct gpufpga_chan *gpufpga_stream_chan(struct gpufpga_file *f, u32 channel)
{
	struct gpufpga_chan *ch;

	if (channel >= GPUFPGA_MAX_CHANNELS)
		return NULL;
	ch = &f->dev->chan[GPUFPGA_C2H][channel];
	return ch->present && ch->stream ? ch : NULL;
}

/*
 * Whether st may start on ch: idle, and every slot's pin still active.
 * Under ch->lock.
 */
static int gpufpga_stream_can_run(struct gpufpga_chan *ch, struct gpufpga_stream_state *st)
{
	u32 i;

	lockdep_assert_held(&ch->lock);
	if (READ_ONCE(ch->dev->resetting))
		return -ECONNRESET;
	if (ch->acq || ch->active || !list_empty(&ch->queue))
		return -EBUSY;
	/* As for transfers: a revocation since the lookup wins. */
	for (i = 0; i < st->nmems; i++)
		if (!gpufpga_mem_active(st->mems[i]))
			return -EKEYREVOKED;
	return 0;
}

/*
 * Whether id names f's stream st (ch->acq): -ENOENT when f runs no stream
 * there or another one, -EINVAL when the stream was started with an id and
 * id is 0. Called with ch->lock or ch->mutex held.
 */
static int gpufpga_stream_named(struct gpufpga_stream_state *st, struct gpufpga_file *f, u64 id)
{
	if (!st || st->file != f)
		return -ENOENT;
	if (!id)
		return st->named ? -EINVAL : 0;
	return id == st->id ? 0 : -ENOENT;
}

/*
 * Checks a start's GPU-resident fields, and picks the default coalescing:
 * a quarter of the ring, so that credits come back before the engine
 * runs dry, and at most 64 fills per interrupt.
 */
static int gpufpga_resident_args(struct gpufpga_stream *a)
{
	if (!(a->flags & GPUFPGA_STREAM_RESIDENT))
		return a->results.handle || a->results.offset || a->results.len ||
		       a->consumer.handle || a->consumer.offset || a->consumer.len ||
		       a->coalesce ? -EINVAL : 0;
	if (!a->results.len || !a->consumer.len || a->coalesce > a->nslots)
		return -EINVAL;
	if (!a->coalesce)
		a->coalesce = clamp(a->nslots / 4, 1U, 64U);
	return 0;
}

/**
 * gpufpga_ioctl_stream_start - GPUFPGA_IOC_STREAM_START: run a stream over pinned slots
 * @f: the file
 * @arg: the caller's struct gpufpga_stream
 * @size: its size
 * @named: the caller's number reads the struct back (ABI 1's first release
 *	wrote nothing back): its struct holds @id, which is written before the
 *	stream starts, so that a fault leaves nothing running
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes
 * f->lock, then ch->mutex, ch->build_mutex and ch->lock.
 * Return: 0, or a negative errno: -EBUSY where the channel is in use.
 */
int gpufpga_ioctl_stream_start(struct gpufpga_file *f, void __user *arg, unsigned int size,
			       bool named)
{
	struct gpufpga_stream __user *ua = arg;
	struct gpufpga_stream_state *st;
	struct gpufpga_stream a;
	struct gpufpga_chan *ch;
	struct gpufpga_seg *us;
	int ret;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, offsetofend(struct gpufpga_stream, pad));
	if (ret)
		return ret;
	ch = gpufpga_stream_chan(f, a.channel);
	if (!ch || (a.flags & ~GPUFPGA_STREAM_FLAGS) || a.pad || a.reserved || a.pad2 || !a.nslots)
		return -EINVAL;
	if (a.nslots > gpufpga_stream_max_descs())
		return -E2BIG;
	ret = gpufpga_resident_args(&a);
	if (ret)
		return ret;
	if (READ_ONCE(f->dev->link_down))
		return -ENODEV;
	named = named && size >= offsetofend(struct gpufpga_stream, id);
	a.id = atomic64_inc_return(&gpufpga_stream_ids);
	if (named && put_user(a.id, &ua->id))
		return -EFAULT;
	us = vmemdup_user(u64_to_user_ptr(a.slots), (size_t)a.nslots * sizeof(*us));
	if (IS_ERR(us))
		return PTR_ERR(us);
	st = kzalloc(sizeof(*st), GFP_KERNEL_ACCOUNT);
	if (!st) {
		kvfree(us);
		return -ENOMEM;
	}
	st->file = f;
	st->ch = ch;
	st->id = a.id;
	st->named = named;
	st->nslots = a.nslots;
	st->resident = a.flags & GPUFPGA_STREAM_RESIDENT;
	st->coalesce = a.coalesce;
	st->poll_period = ns_to_ktime((u64)READ_ONCE(gpufpga_resident_poll_us) * NSEC_PER_USEC);
	gpufpga_hrtimer_setup(&st->poll, gpufpga_resident_poll);
	st->mems = kvcalloc(a.nslots + 2, sizeof(*st->mems), GFP_KERNEL_ACCOUNT);
	if (st->resident)
		st->result_bus = kvcalloc(a.nslots, sizeof(*st->result_bus), GFP_KERNEL_ACCOUNT);
	st->first = kvcalloc(a.nslots + 1, sizeof(*st->first), GFP_KERNEL_ACCOUNT);
	st->descs = kvcalloc(gpufpga_stream_max_descs(), sizeof(*st->descs), GFP_KERNEL_ACCOUNT);
	st->end = kzalloc(sizeof(*st->end), GFP_KERNEL_ACCOUNT);
	if (!st->resident)
		st->events = gpufpga_event_block_alloc(2 * a.nslots);
	st->held = bitmap_zalloc(a.nslots, GFP_KERNEL_ACCOUNT);
	st->released = bitmap_zalloc(a.nslots, GFP_KERNEL_ACCOUNT);
	if (!st->mems || !st->first || !st->descs || !st->end || !st->held || !st->released ||
	    (st->resident ? !st->result_bus : !st->events)) {
		ret = -ENOMEM;
		goto err;
	}
	mutex_lock(&f->lock);
	ret = gpufpga_stream_slots(f, ch, st, us);
	if (!ret && st->resident)
		ret = gpufpga_resident_pins(f, st, &a);
	mutex_unlock(&f->lock);
	if (ret)
		goto err;

	mutex_lock(&ch->mutex);
	mutex_lock(&ch->build_mutex);
	spin_lock_irq(&ch->lock);
	ret = gpufpga_stream_can_run(ch, st);
	spin_unlock_irq(&ch->lock);
	if (ret)
		goto unlock;
	/* Built outside ch->lock: a long ring with interrupts on. */
	gpufpga_stream_load(gpufpga_chan_spare(ch), st);
	spin_lock_irq(&ch->lock);
	/* A transfer may have been queued meanwhile, or a pin revoked. */
	ret = gpufpga_stream_can_run(ch, st);
	if (!ret)
		gpufpga_stream_run(ch, st);
	spin_unlock_irq(&ch->lock);
unlock:
	mutex_unlock(&ch->build_mutex);
	mutex_unlock(&ch->mutex);
	if (ret)
		goto err;
	kvfree(us);
	return 0;

err:
	gpufpga_stream_free(st);
	kvfree(us);
	return ret;
}

/**
 * gpufpga_ioctl_stream_release - GPUFPGA_IOC_STREAM_RELEASE: give filled slots back
 * @f: the file
 * @arg: the caller's struct gpufpga_release
 * @size: its size
 *
 * All or nothing: the engine gets the credits of every slot released
 * in ring order.
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes ch->lock.
 * Return: 0; -EINVAL for a slot not filled or not held; -ENOENT where f
 * runs no such stream.
 */
int gpufpga_ioctl_stream_release(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_stream_state *st;
	struct gpufpga_release a;
	struct gpufpga_chan *ch;
	u32 *slots, i, credits = 0;
	int ret = 0;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, sizeof(a));
	if (ret)
		return ret;
	ch = gpufpga_stream_chan(f, a.channel);
	if (!ch || !a.nslots || a.nslots > XDMA_MAX_CREDITS)
		return -EINVAL;
	slots = memdup_user(u64_to_user_ptr(a.slots), (size_t)a.nslots * sizeof(*slots));
	if (IS_ERR(slots))
		return PTR_ERR(slots);
	spin_lock_irq(&ch->lock);
	st = ch->acq;
	ret = gpufpga_stream_named(st, f, a.stream);
	if (ret) {
		st = NULL;	/* nothing to undo */
		goto out;
	}
	/* All or nothing: check every index before releasing any. */
	for (i = 0; i < a.nslots; i++) {
		if (slots[i] >= st->nslots || !test_bit(slots[i], st->held)) {
			ret = -EINVAL;
			goto out;
		}
		clear_bit(slots[i], st->held);
		set_bit(slots[i], st->released);
	}
	while (test_bit(st->next_credit, st->released)) {
		clear_bit(st->next_credit, st->released);
		credits += gpufpga_slot_descs(st, st->next_credit);
		st->next_credit = (st->next_credit + 1) % st->nslots;
	}
	if (credits)
		gpufpga_chan_add_credits(ch, credits);
out:
	if (ret == -EINVAL && st)	/* undo a partial pass */
		while (i--) {
			clear_bit(slots[i], st->released);
			set_bit(slots[i], st->held);
		}
	spin_unlock_irq(&ch->lock);
	kfree(slots);
	return ret;
}

/**
 * gpufpga_ioctl_stream_stop - GPUFPGA_IOC_STREAM_STOP: end f's stream
 * @f: the file
 * @arg: the caller's struct gpufpga_stream_stop
 * @size: its size
 *
 * Context: process context, dev->ioctl_rwsem held for reading; takes ch->mutex.
 * Return: 0, or -ENOENT where f runs no such stream.
 */
int gpufpga_ioctl_stream_stop(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_stream_stop a;
	struct gpufpga_chan *ch;
	int ret;

	lockdep_assert_held(&f->dev->ioctl_rwsem);
	ret = gpufpga_copy_in(&a, sizeof(a), arg, size,
			      offsetofend(struct gpufpga_stream_stop, flags));
	if (ret)
		return ret;
	ch = gpufpga_stream_chan(f, a.channel);
	if (!ch || a.flags)
		return -EINVAL;
	mutex_lock(&ch->mutex);
	ret = gpufpga_stream_named(ch->acq, f, a.stream);
	if (!ret)
		gpufpga_stream_end(ch, 0);
	mutex_unlock(&ch->mutex);
	return ret;
}
