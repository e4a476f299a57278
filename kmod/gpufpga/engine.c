// SPDX-License-Identifier: GPL-2.0
/*
 * The channel engine: one XDMA H2C or C2H channel's registers, its two
 * descriptor rings, its interrupt and watchdog, and its status accounting.
 * Transfers (xfer.c) and streams (stream.c) are its users: each gives a
 * struct gpufpga_chan_user, and the engine calls the one that runs it.
 * Every register a channel needs is written by gpufpga_chan_program; a
 * chain is built into the spare ring in process context and started with
 * a few register writes, so the hard IRQ handler's work does not grow with
 * the length of a chain that completes.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>

#include "gpufpga.h"

/**
 * gpufpga_chan_status - read and keep the channel's status bits
 * @ch: the channel
 *
 * Reads the read-to-clear status and keeps what it returns in
 * ch->status_seen for the running chain: a bit read is gone from the
 * engine, and a card may report a chain's stop before BUSY drops, or its
 * completion and its stop in different reads (PG195 promises no order).
 *
 * Context: any; ch->lock held, or ch->mutex with ch->halting set, or no
 * chain can run (probe, shutdown).
 * Return: every bit seen since the chain started, with this read's BUSY.
 */
u32 gpufpga_chan_status(struct gpufpga_chan *ch)
{
	u32 st = gpufpga_read(ch->dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS_RC));

	if (READ_ONCE(ch->dev->link_down))
		return st;
	ch->status_seen |= st & ~XDMA_STAT_BUSY;
	return ch->status_seen | (st & XDMA_STAT_BUSY);
}

static u32 gpufpga_common_bit(struct gpufpga_chan *ch)
{
	return ch->dir == GPUFPGA_C2H ? BIT(XDMA_COMMON_C2H_SHIFT + ch->index) : BIT(ch->index);
}

/**
 * gpufpga_dev_cut_bus - take the function's bus mastering away
 * @dev: the device
 *
 * No engine's DMA reaches memory once this returns (the configuration
 * write is not posted). The driver keeps this as its own state: the PCI
 * core's is_busmaster is not updated by pci_restore_state().
 *
 * Context: process context.
 */
void gpufpga_dev_cut_bus(struct gpufpga_dev *dev)
{
	pci_clear_master(dev->pdev);
	WRITE_ONCE(dev->bus_off, true);
}

/* Bus mastering on again, for an engine the driver has just programmed. */
static void gpufpga_dev_enable_bus(struct gpufpga_dev *dev)
{
	pci_set_master(dev->pdev);
	WRITE_ONCE(dev->bus_off, false);
}

/**
 * gpufpga_chan_halt - stop a channel's engine
 * @ch: the channel
 * @status: set to the final status, read-cleared (0 when not read)
 *
 * Clears RUN and waits, boundedly, for the engine to go idle; if it stays
 * busy, halts descriptor fetching too, and if it still does not stop, cuts
 * the function off the bus and gives up on the device.
 *
 * Context: process context, may sleep; ch->mutex held with ch->halting
 * set, or before the channel is in use.
 * Return: 0 when the engine was seen idle; -EBUSY when it did not stop
 * (bus mastering is off); -ENODEV when its registers could not be asked
 * (link down, offline, or the bus already cut): nothing is known of it,
 * and bus mastering is off too, in case the link comes back.
 */
int gpufpga_chan_halt(struct gpufpga_chan *ch, u32 *status)
{
	struct gpufpga_dev *dev = ch->dev;
	u32 halt_bit = gpufpga_common_bit(ch);
	u32 st;
	int i;

	*status = 0;
	if (READ_ONCE(dev->bus_off) || READ_ONCE(dev->offline))
		return -ENODEV;	/* off the bus already */
	if (READ_ONCE(dev->link_down))
		goto unknown;
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_CONTROL_W1C), XDMA_CTRL_RUN);
	for (i = 0; i < 100; i++) {
		st = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS));
		if (READ_ONCE(dev->link_down) || !(st & XDMA_STAT_BUSY))
			break;
		usleep_range(500, 1000);
	}
	if (READ_ONCE(dev->link_down))
		goto unknown;
	if (st & XDMA_STAT_BUSY) {
		dev_err(&dev->pdev->dev, "%s channel %u stays busy after RUN cleared: halting descriptor fetch\n",
			ch->dir ? "C2H" : "H2C", ch->index);
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_DESC_HALT_W1S,
			      halt_bit);
		usleep_range(1000, 2000);
		st = gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS));
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0) + XDMA_REG_DESC_HALT_W1C,
			      halt_bit);
	}
	*status = gpufpga_chan_status(ch);
	if (READ_ONCE(dev->link_down))
		goto unknown;
	if (!(st & XDMA_STAT_BUSY))
		return 0;
	/*
	 * An engine that will not stop may still write into memory about to
	 * be freed: cut it off the bus before anyone returns, and give up on
	 * the device.
	 */
	dev_crit(&dev->pdev->dev, "%s channel %u does not halt: bus mastering off, device dead\n",
		 ch->dir ? "C2H" : "H2C", ch->index);
	gpufpga_dev_cut_bus(dev);
	WRITE_ONCE(dev->dead, true);
	wake_up_all(&dev->user_wq);	/* user interrupt waiters */
	return -EBUSY;

unknown:
	/*
	 * An engine that does not answer may run on if its link comes back,
	 * into memory let go meanwhile: only a reprogram lets it master again.
	 */
	gpufpga_dev_cut_bus(dev);
	return -ENODEV;
}

u8 gpufpga_adjacent_after(dma_addr_t addr, u32 remaining)
{
	u32 room = (XDMA_DESC_BLOCK - addr % XDMA_DESC_BLOCK) / XDMA_DESC_SIZE - 1;

	return min3(remaining, room, (u32)XDMA_DESC_MAX_ADJ);
}

static u32 gpufpga_sgdma_reg(struct gpufpga_chan *ch, u32 reg)
{
	return XDMA_BASE(ch->dir ? XDMA_TARGET_C2H_SGDMA : XDMA_TARGET_H2C_SGDMA, ch->index) + reg;
}

/*
 * The channel's interrupt, as the IRQ block routes it: on while the driver
 * owns the engine and its interrupt is set up, off while a halt runs.
 */
static void gpufpga_chan_mask(struct gpufpga_chan *ch, bool mask)
{
	struct gpufpga_dev *dev = ch->dev;

	if (!(dev->irq_enabled & BIT(ch->irq_bit)) || READ_ONCE(dev->link_down))
		return;
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) +
		      (mask ? XDMA_REG_CHAN_INT_ENABLE_W1C : XDMA_REG_CHAN_INT_ENABLE_W1S),
		      BIT(ch->irq_bit));
	/* The write is posted: read it back, so the mask holds from here on. */
	if (mask)
		gpufpga_read(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_INT_ENABLE);
}

/**
 * gpufpga_chan_program - write every register the channel's engine needs
 * @ch: the channel
 * @credits: what a stream's engine may fetch from here on
 *
 * From the driver's state: the ring it runs (descriptor address and first
 * adjacent count), the poll-mode writeback address, credit mode and the
 * credits granted, the channel's interrupt enables and its bit in the IRQ
 * block. RUN is not touched. Channel setup, a stream's start and end, and
 * gpufpga_dev_program() call it; the fast paths that start a chain
 * (gpufpga_chan_run(), gpufpga_chan_rerun()) rely on what it wrote.
 *
 * Context: any; ch->lock held, or no chain can run. The engine idle.
 */
void gpufpga_chan_program(struct gpufpga_chan *ch, u32 credits)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_ring *ring = &ch->rings[ch->cur];
	u32 common = XDMA_BASE(XDMA_TARGET_SGDMA_COMMON, 0);

	gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_LO), lower_32_bits(ring->bus));
	gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_HI), upper_32_bits(ring->bus));
	gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_ADJ), ring->first_adj);
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_POLL_WB_LO), lower_32_bits(ch->wb_bus));
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_POLL_WB_HI), upper_32_bits(ch->wb_bus));
	/* Off, then on: no credit left over from an earlier user counts. */
	gpufpga_write(dev, common + XDMA_REG_CREDIT_MODE_W1C, gpufpga_common_bit(ch));
	if (ch->credit_mode) {
		gpufpga_write(dev, common + XDMA_REG_CREDIT_MODE_W1S, gpufpga_common_bit(ch));
		gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_CREDITS), credits);
	}
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_INT_ENABLE),
		      ch->quiet ? 0 : ch->int_enable);
	gpufpga_chan_mask(ch, ch->halting);
}

/**
 * gpufpga_dev_program - program the device's engine
 * @dev: the device
 *
 * The IRQ block's routing of each channel to its vector (dev->chan_vectors,
 * set up with the vectors), then every channel (gpufpga_chan_program(), no
 * credits). Probe calls it once the interrupts are set up; so must anything
 * after which the engine holds its reset values, with no chain running.
 *
 * Context: process context; takes each channel's ch->lock.
 */
void gpufpga_dev_program(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci;

	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_VECTOR,
		      dev->chan_vectors[0]);
	gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_VECTOR + 4,
		      dev->chan_vectors[1]);
	gpufpga_user_program(dev);
	gpufpga_for_each_chan(dev, ch, ci) {
		spin_lock_irq(&ch->lock);
		gpufpga_chan_program(ch, 0);
		spin_unlock_irq(&ch->lock);
	}
}

/**
 * gpufpga_dev_sync - wait out what still runs on the function's behalf
 * @dev: the device
 *
 * Every interrupt handler running on another CPU, every chain being
 * built and every watchdog: none of them touches the registers once this
 * returns, until the function is reprogrammed.
 *
 * Context: process context, no channel lock held.
 */
static void gpufpga_dev_sync(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci, i;

	for (i = 0; i < dev->nvecs; i++)
		synchronize_irq(pci_irq_vector(dev->pdev, i));
	gpufpga_for_each_chan(dev, ch, ci) {
		flush_work(&ch->build_work);
		flush_delayed_work(&ch->work);
	}
}

/**
 * gpufpga_dev_quiesce - stop using a function about to lose its engine's state
 * @dev: the device
 * @frozen: an error may have cut the link: the engines are not halted
 *
 * A reset, an AER recovery or a system sleep: new work is refused, and
 * whatever is queued, running or streaming ends with -ECONNRESET, halted
 * first where the registers answer. From then on the registers are left
 * alone, until gpufpga_dev_restart(). Pins stay valid.
 *
 * Context: process context, may sleep; no lock held.
 */
void gpufpga_dev_quiesce(struct gpufpga_dev *dev, bool frozen)
{
	struct gpufpga_chan *ch;
	int ci;

	mutex_lock(&dev->lifecycle_lock);
	dev->quiesced++;
	WRITE_ONCE(dev->resetting, true);
	mutex_unlock(&dev->lifecycle_lock);
	if (frozen) {
		/*
		 * The link may still be up until the core resets the slot:
		 * with the engines not halted, nothing they do may reach
		 * memory that is let go below. Restoring the saved state
		 * turns bus mastering on again.
		 */
		gpufpga_dev_cut_bus(dev);
		WRITE_ONCE(dev->offline, true);
	}
	/* Submitters check resetting under ch->lock, which this takes after. */
	gpufpga_chan_stop_all(dev, NULL, NULL, -ECONNRESET);
	if (!READ_ONCE(dev->offline) && !READ_ONCE(dev->link_down)) {
		/* A halt's late status must not hold a level interrupt up. */
		gpufpga_write(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_INT_ENABLE_W1C,
			      ~0U);
		gpufpga_read(dev, XDMA_BASE(XDMA_TARGET_IRQ, 0) + XDMA_REG_CHAN_INT_ENABLE);
		gpufpga_user_mask(dev);
		gpufpga_for_each_chan(dev, ch, ci)
			gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS_RC));
	}
	WRITE_ONCE(dev->offline, true);
	gpufpga_dev_sync(dev);
	gpufpga_user_wake(dev);	/* waiters learn of the reset */
}

/* Programs the function again, as gpufpga_dev_restart says. */
static int gpufpga_dev_reprogram(struct gpufpga_dev *dev)
{
	struct gpufpga_chan *ch;
	int ci;

	lockdep_assert_held(&dev->lifecycle_lock);
	if (READ_ONCE(dev->dead))
		return -ENODEV;
	if (!gpufpga_answers(dev)) {
		WRITE_ONCE(dev->link_down, true);
		return -ENODEV;
	}
	WRITE_ONCE(dev->link_down, false);
	WRITE_ONCE(dev->offline, false);
	/* Whatever the event did to PCI_COMMAND, the engines may master. */
	gpufpga_dev_enable_bus(dev);
	gpufpga_for_each_chan(dev, ch, ci) {
		spin_lock_irq(&ch->lock);
		ch->quiet = false;
		ch->status_seen = 0;
		ch->stop_may_be_stale = true;	/* what the reset left */
		spin_unlock_irq(&ch->lock);
	}
	gpufpga_dev_program(dev);
	WRITE_ONCE(dev->resets, dev->resets + 1);
	WRITE_ONCE(dev->resetting, false);
	return 0;
}

/**
 * gpufpga_dev_restart - bring the function back after an event quiesced it
 * @dev: the device
 * @programmed: set when this call programmed the function
 *
 * The function is back, its engine at its reset values (or, after an
 * error that needed no reset, as the halts left it): once every event that
 * quiesced it has ended, bus mastering is enabled and every register is
 * programmed again, as at probe, and new work is taken. Every chain the
 * engine runs from here on starts at an address programmed here. An event
 * that did not quiesce the function (none under way) changes nothing.
 * Only when *@programmed is set does the configuration hold what the
 * driver wants saved (pci_save_state()).
 *
 * Context: process context; takes dev->lifecycle_lock.
 * Return: 0, or -ENODEV where the function does not answer or was given up on.
 */
int gpufpga_dev_restart(struct gpufpga_dev *dev, bool *programmed)
{
	int ret = 0;

	*programmed = false;
	mutex_lock(&dev->lifecycle_lock);
	if (dev->quiesced > 0 && !--dev->quiesced) {
		ret = gpufpga_dev_reprogram(dev);
		*programmed = !ret;
	}
	mutex_unlock(&dev->lifecycle_lock);
	return ret;
}

/**
 * gpufpga_dev_abandon - an event that quiesced the function ends unfinished
 * @dev: the device
 *
 * An AER recovery that failed, or that a reset superseded: the function
 * stays offline until a later event's restart, or a rebind, programs it.
 *
 * Context: process context; takes dev->lifecycle_lock.
 */
void gpufpga_dev_abandon(struct gpufpga_dev *dev)
{
	mutex_lock(&dev->lifecycle_lock);
	if (dev->quiesced > 0)
		dev->quiesced--;
	mutex_unlock(&dev->lifecycle_lock);
}

/**
 * gpufpga_chan_set_quiet - turn the channel's interrupt off for polled chains
 * @ch: the channel
 * @quiet: off (true), or on again
 *
 * Poll mode keeps the channel's interrupt off (a quiet channel), so that
 * polled chains raise none; leaving it, the status the polled chains left
 * is cleared before their stop could raise one.
 *
 * Context: ch->lock held, the channel idle.
 */
void gpufpga_chan_set_quiet(struct gpufpga_chan *ch, bool quiet)
{
	struct gpufpga_dev *dev = ch->dev;

	lockdep_assert_held(&ch->lock);
	if (!quiet)
		gpufpga_read(dev, gpufpga_chan_reg(ch, XDMA_REG_STATUS_RC));
	gpufpga_write(dev, gpufpga_chan_reg(ch, XDMA_REG_INT_ENABLE), quiet ? 0 : ch->int_enable);
	ch->quiet = quiet;
}

/**
 * gpufpga_chan_spare - the ring no chain runs from
 * @ch: the channel
 *
 * For the caller to build the next chain into.
 *
 * Context: ch->build_mutex held: no other writer, and cur stays.
 * Return: the spare ring.
 */
struct gpufpga_ring *gpufpga_chan_spare(struct gpufpga_chan *ch)
{
	lockdep_assert_held(&ch->build_mutex);
	return &ch->rings[ch->cur ^ 1];
}

/**
 * gpufpga_chan_idle_ring - the ring the idle channel's engine ran last
 * @ch: the channel
 *
 * For the caller to build the next chain into while the channel is idle:
 * then nothing reads it, and restarting it (gpufpga_chan_rerun()) costs no
 * ring switch.
 *
 * Context: ch->build_mutex and ch->lock held, no chain running.
 * Return: the ring.
 */
struct gpufpga_ring *gpufpga_chan_idle_ring(struct gpufpga_chan *ch)
{
	lockdep_assert_held(&ch->build_mutex);
	lockdep_assert_held(&ch->lock);
	return &ch->rings[ch->cur];
}

/* Sets RUN on the chain the descriptor registers name. Under ch->lock. */
static void gpufpga_chan_go(struct gpufpga_chan *ch, u32 control)
{
	lockdep_assert_held(&ch->lock);
	ch->status_seen = 0;
	ch->runs++;
	/* The chain is in coherent memory; order it before RUN. */
	wmb();
	gpufpga_write(ch->dev, gpufpga_chan_reg(ch, XDMA_REG_CONTROL), control);
}

/**
 * gpufpga_chan_rerun - start the chain built into the ring the engine ran last
 * @ch: the channel
 * @control: the control register's value, RUN set
 *
 * The descriptor address stands, so two register writes.
 *
 * Context: ch->lock held, the engine idle.
 */
void gpufpga_chan_rerun(struct gpufpga_chan *ch, u32 control)
{
	lockdep_assert_held(&ch->lock);
	gpufpga_write(ch->dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_ADJ),
		      ch->rings[ch->cur].first_adj);
	gpufpga_chan_go(ch, control);
}

/**
 * gpufpga_chan_run - start the chain built into the spare ring
 * @ch: the channel
 * @control: the control register's value, RUN set
 * @credits: granted in credit mode
 *
 * The spare ring becomes the one the engine runs. A constant number of
 * register writes whatever its length; in credit mode every register is
 * programmed, with credits granted.
 *
 * Context: ch->lock held, the engine idle.
 */
void gpufpga_chan_run(struct gpufpga_chan *ch, u32 control, u32 credits)
{
	struct gpufpga_dev *dev = ch->dev;
	struct gpufpga_ring *ring = &ch->rings[ch->cur ^ 1];
	struct gpufpga_ring *prev = &ch->rings[ch->cur];

	lockdep_assert_held(&ch->lock);
	ch->cur ^= 1;
	if (ch->credit_mode) {
		gpufpga_chan_program(ch, credits);
	} else {
		gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_LO),
			      lower_32_bits(ring->bus));
		if (upper_32_bits(ring->bus) != upper_32_bits(prev->bus))
			gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_HI),
				      upper_32_bits(ring->bus));
		gpufpga_write(dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_ADJ), ring->first_adj);
	}
	gpufpga_chan_go(ch, control);
}

/**
 * gpufpga_chan_add_credits - grant a stream more descriptors
 * @ch: the channel
 * @n: descriptors the engine may fetch on top of those granted
 *
 * Context: ch->lock held.
 */
void gpufpga_chan_add_credits(struct gpufpga_chan *ch, u32 n)
{
	lockdep_assert_held(&ch->lock);
	gpufpga_write(ch->dev, gpufpga_sgdma_reg(ch, XDMA_REG_DESC_CREDITS), n);
}

/**
 * gpufpga_chan_attach - a stream takes the engine
 * @ch: the channel
 * @user: runs the engine from here on
 *
 * Context: ch->mutex and ch->lock held.
 */
void gpufpga_chan_attach(struct gpufpga_chan *ch, const struct gpufpga_chan_user *user)
{
	lockdep_assert_held(&ch->mutex);
	lockdep_assert_held(&ch->lock);
	ch->user = user;
}

/**
 * gpufpga_chan_detach - a stream gives the engine back to transfers
 * @ch: the channel
 *
 * Context: ch->mutex and ch->lock held.
 */
void gpufpga_chan_detach(struct gpufpga_chan *ch)
{
	lockdep_assert_held(&ch->mutex);
	lockdep_assert_held(&ch->lock);
	ch->user = ch->idle_user;
}

/**
 * gpufpga_chan_irq - the channel's interrupt fired, or a vector it shares did
 * @ch: the channel
 *
 * The status is read to clear, which drops the channel's request: the next
 * completion raises a fresh edge, and a level interrupt deasserts. Its bits
 * are kept for the running chain, and its user decides.
 *
 * Context: hard IRQ, ch->lock held.
 */
void gpufpga_chan_irq(struct gpufpga_chan *ch)
{
	lockdep_assert_held(&ch->lock);
	if (ch->halting || READ_ONCE(ch->dev->offline))
		return;		/* the mutex holder owns the engine, or a reset */
	ch->user->irq(ch, gpufpga_chan_status(ch));
}

/**
 * gpufpga_chan_own - take the engine from the IRQ handler, to halt it
 * @ch: the channel
 * @r: the request it should run, or NULL for the stream
 * @run: which chain of the channel's r should be
 *
 * r is only compared: it may have ended and been freed, and run tells a
 * new request at the same address apart. The interrupt is masked before
 * the lock is dropped, so that a level one cannot fire at a handler that
 * leaves the channel alone. gpufpga_chan_release() gives the engine back.
 *
 * Context: process context; ch->mutex held, ch->lock not held.
 * Return: false if the channel is already halting, or no longer runs r as
 * its run'th chain.
 */
bool gpufpga_chan_own(struct gpufpga_chan *ch, struct gpufpga_req *r, u64 run)
{
	bool own;

	lockdep_assert_held(&ch->mutex);
	spin_lock_irq(&ch->lock);
	own = !ch->halting && (r ? ch->active == r && ch->runs == run : !!ch->acq);
	if (own) {
		ch->halting = true;
		gpufpga_chan_mask(ch, true);
	}
	spin_unlock_irq(&ch->lock);
	return own;
}

/**
 * gpufpga_chan_release - give the engine back to the IRQ handler
 * @ch: the channel
 *
 * Context: ch->lock held, and ch->mutex that gpufpga_chan_own() took it under.
 */
void gpufpga_chan_release(struct gpufpga_chan *ch)
{
	lockdep_assert_held(&ch->mutex);
	lockdep_assert_held(&ch->lock);
	ch->halting = false;
	gpufpga_chan_mask(ch, false);
}

/*
 * The channel's watchdog: armed at a transfer's timeout, and every timeout
 * period while a stream runs; kicked at once when the IRQ handler finds
 * work that must end. Not a poll: interrupts complete everything.
 */
static void gpufpga_chan_work(struct work_struct *work)
{
	struct gpufpga_chan *ch = container_of(to_delayed_work(work), struct gpufpga_chan, work);

	mutex_lock(&ch->mutex);
	ch->user->watchdog(ch);
	mutex_unlock(&ch->mutex);
}

/**
 * gpufpga_chan_stop_all - end work on every channel
 * @dev: the device
 * @f: the file whose work ends, or NULL for anyone's
 * @m: the pin whose work ends, or NULL for any
 * @error: what the work ends with
 *
 * A revoke (m) runs under NVIDIA's lock or the exporter's reservation
 * lock, so it takes the mutex only of the channels whose work uses m;
 * gpufpga_xfer_stop says how long it may wait. m is marked revoking
 * before, so work queued on a channel after its check here sees the mark
 * (under ch->lock) and never starts.
 *
 * Context: process context, may sleep; takes ch->mutex of each channel.
 */
void gpufpga_chan_stop_all(struct gpufpga_dev *dev, struct gpufpga_file *f,
			   struct gpufpga_mem *m, int error)
{
	unsigned long until = jiffies + msecs_to_jiffies(gpufpga_revoke_wait_ms);
	struct gpufpga_chan *ch;
	bool uses;
	int ci;

	gpufpga_for_each_chan(dev, ch, ci) {
		if (m) {
			spin_lock_irq(&ch->lock);
			uses = ch->user->uses(ch, m);
			spin_unlock_irq(&ch->lock);
			if (!uses)
				continue;
		}
		mutex_lock(&ch->mutex);
		ch->user->stop(ch, f, m, error, until);
		mutex_unlock(&ch->mutex);
	}
}

static void gpufpga_chan_free_rings(struct gpufpga_chan *ch)
{
	struct device *dev = &ch->dev->pdev->dev;
	int i;

	for (i = 0; i < 2; i++) {
		if (ch->rings[i].desc)
			dma_free_coherent(dev, ch->ring_size, ch->rings[i].desc, ch->rings[i].bus);
		ch->rings[i].desc = NULL;
	}
	if (ch->wb)
		dma_free_coherent(dev, SMP_CACHE_BYTES, ch->wb, ch->wb_bus);
	ch->wb = NULL;
}

/**
 * gpufpga_chan_init - set up the channel's engine
 * @ch: the channel
 * @user: runs the engine from here on, and whenever no stream does
 * @build: the work that builds a queued chain outside the IRQ handler
 *
 * Two rings of max_descs descriptors (and their stream results), each its
 * own coherent buffer (65,536 descriptors make one of 4 MiB, the most one
 * allocation gives), and the writeback word; the registers programmed.
 *
 * Context: process context (probe).
 * Return: 0, or -ENOMEM.
 */
int gpufpga_chan_init(struct gpufpga_chan *ch, const struct gpufpga_chan_user *user,
		      work_func_t build)
{
	struct device *dev = &ch->dev->pdev->dev;
	int i;

	mutex_init(&ch->mutex);
	mutex_init(&ch->build_mutex);
	spin_lock_init(&ch->lock);
	INIT_LIST_HEAD(&ch->queue);
	INIT_DELAYED_WORK(&ch->work, gpufpga_chan_work);
	INIT_WORK(&ch->build_work, build);
	ch->user = user;
	ch->idle_user = user;
	ch->stop_may_be_stale = true;	/* whatever ran before the driver */
	ch->int_enable = XDMA_STAT_DESC_STOPPED | XDMA_STAT_ERRORS;
	ch->ring_size = PAGE_ALIGN((size_t)gpufpga_max_descs * (XDMA_DESC_SIZE + XDMA_RESULT_SIZE));
	for (i = 0; i < 2; i++) {
		ch->rings[i].desc = dma_alloc_coherent(dev, ch->ring_size, &ch->rings[i].bus,
						       GFP_KERNEL);
		if (!ch->rings[i].desc)
			goto err;
	}
	ch->wb = dma_alloc_coherent(dev, SMP_CACHE_BYTES, &ch->wb_bus, GFP_KERNEL);
	if (!ch->wb)
		goto err;
	gpufpga_chan_program(ch, 0);
	return 0;
err:
	gpufpga_chan_free_rings(ch);
	return -ENOMEM;
}

/**
 * gpufpga_chan_fini - free the channel's engine
 * @ch: the channel, with no work left (the device is dead)
 *
 * The build work and the watchdog, which may each queue the other, are
 * cancelled in turn.
 *
 * Context: process context, may sleep.
 */
void gpufpga_chan_fini(struct gpufpga_chan *ch)
{
	WARN_ON_ONCE(ch->active || !list_empty(&ch->queue));
	cancel_work_sync(&ch->build_work);
	cancel_delayed_work_sync(&ch->work);
	cancel_work_sync(&ch->build_work);
	gpufpga_chan_free_rings(ch);
}
