// SPDX-License-Identifier: GPL-2.0
/*
 * The FPGA's user interrupts: the XDMA IP's usr_irq_req lines, routed to
 * vectors, counted by the interrupt handler and waited for with
 * GPUFPGA_IOC_USER_IRQ. A line that fires is masked until a waiter arms it
 * again, as UIO does: the user logic is served in between, through its own
 * registers, so a level request cannot storm.
 */

#include <linux/bitops.h>
#include <linux/sched/signal.h>
#include <linux/wait.h>

#include "gpufpga.h"
#include "xdma_regs.h"

static u32 gpufpga_user_reg(u32 reg)
{
	return XDMA_BASE(XDMA_TARGET_IRQ, 0) + reg;
}

/**
 * gpufpga_user_init - set up the user interrupts' state
 * @dev: the device
 *
 * Context: probe, before the interrupts are requested.
 */
void gpufpga_user_init(struct gpufpga_dev *dev)
{
	spin_lock_init(&dev->user_lock);
	init_waitqueue_head(&dev->user_wq);
}

/**
 * gpufpga_user_program - route the user lines to their vectors, and enable
 * those armed
 * @dev: the device
 *
 * Context: process context, where gpufpga_dev_program runs: after probe's
 * vectors are set up, and after anything that reset the IRQ block.
 */
void gpufpga_user_program(struct gpufpga_dev *dev)
{
	u32 map;
	int reg, i;

	for (reg = 0; reg < GPUFPGA_USER_IRQS / 4; reg++) {
		map = 0;
		for (i = 0; i < 4; i++)
			map |= (u32)(dev->user_vec + (dev->user_own ? reg * 4 + i : 0)) << (i * 8);
		gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_VECTOR + reg * 4), map);
	}
	spin_lock_irq(&dev->user_lock);
	gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE), dev->user_armed);
	spin_unlock_irq(&dev->user_lock);
}

/**
 * gpufpga_user_mask - mask every user line in the IP until it is programmed
 * again, keeping those armed
 * @dev: the device
 *
 * Quiesce calls it, so that no line held high raises a level interrupt
 * nobody answers while the function is offline.
 *
 * Context: process context.
 */
void gpufpga_user_mask(struct gpufpga_dev *dev)
{
	gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE_W1C), ~0U);
	gpufpga_read(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE));
}

/**
 * gpufpga_user_disable - mask every user line in the IP
 * @dev: the device
 *
 * Context: process context, the vectors about to be freed.
 */
void gpufpga_user_disable(struct gpufpga_dev *dev)
{
	spin_lock_irq(&dev->user_lock);
	WRITE_ONCE(dev->user_armed, 0);
	if (!READ_ONCE(dev->link_down))
		gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE_W1C), ~0U);
	spin_unlock_irq(&dev->user_lock);
}

/**
 * gpufpga_user_irq - count the user interrupts a vector brings
 * @dev: the device
 * @index: the vector's index
 *
 * Masks each line that fired, counts it and wakes the waiters.
 *
 * Context: hard IRQ.
 * Return: whether a user line of ours fired.
 */
bool gpufpga_user_irq(struct gpufpga_dev *dev, int index)
{
	unsigned long fired;
	int line;

	if (!READ_ONCE(dev->user_armed) || READ_ONCE(dev->offline))
		return false;
	if (dev->user_own) {
		line = index - dev->user_vec;
		if (line < 0 || line >= GPUFPGA_USER_IRQS)
			return false;
		fired = BIT(line);
	} else if (index == dev->user_vec) {
		/* Shared: the request register says which lines are up. */
		fired = gpufpga_read(dev, gpufpga_user_reg(XDMA_REG_USER_INT_REQUEST));
		if (fired == GPUFPGA_DEAD)
			return false;
	} else {
		return false;
	}
	spin_lock(&dev->user_lock);
	fired &= dev->user_armed;
	if (fired) {
		gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE_W1C), fired);
		/* Posted: read back, so that a level interrupt drops now. */
		gpufpga_read(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE));
		WRITE_ONCE(dev->user_armed, dev->user_armed & ~fired);
		for_each_set_bit(line, &fired, GPUFPGA_USER_IRQS)
			dev->user_counts[line]++;
	}
	spin_unlock(&dev->user_lock);
	if (fired)
		wake_up_all(&dev->user_wq);
	return fired;
}

/**
 * gpufpga_user_open - start a file's count of user interrupts from now
 * @f: the file being opened
 *
 * Context: process context.
 */
void gpufpga_user_open(struct gpufpga_file *f)
{
	struct gpufpga_dev *dev = f->dev;

	spin_lock_irq(&dev->user_lock);
	memcpy(f->user_seen, dev->user_counts, sizeof(f->user_seen));
	spin_unlock_irq(&dev->user_lock);
}

/**
 * gpufpga_user_wake - wake every waiter, the card being gone
 * @dev: the device
 *
 * Context: any.
 */
void gpufpga_user_wake(struct gpufpga_dev *dev)
{
	wake_up_all(&dev->user_wq);
}

/* Enables the lines not yet enabled. */
static void gpufpga_user_arm(struct gpufpga_dev *dev, u32 lines)
{
	spin_lock_irq(&dev->user_lock);
	lines &= ~dev->user_armed;
	if (lines) {
		WRITE_ONCE(dev->user_armed, dev->user_armed | lines);
		gpufpga_write(dev, gpufpga_user_reg(XDMA_REG_USER_INT_ENABLE_W1S), lines);
	}
	spin_unlock_irq(&dev->user_lock);
}

/* Why a wait must end without a fire: 0 if it need not. */
static int gpufpga_user_ended(struct gpufpga_dev *dev)
{
	if (READ_ONCE(dev->gone) || READ_ONCE(dev->link_down) || READ_ONCE(dev->dead))
		return -ENODEV;
	if (READ_ONCE(dev->resetting))
		return -ECONNRESET;
	return 0;
}

/*
 * The lines of @lines that fired since f last took them. Fills @counts,
 * when given, with every line's count.
 */
static u32 gpufpga_user_fired(struct gpufpga_file *f, u32 lines, u64 *counts)
{
	struct gpufpga_dev *dev = f->dev;
	unsigned long want = lines;
	u32 fired = 0;
	int line;

	spin_lock_irq(&dev->user_lock);
	for_each_set_bit(line, &want, GPUFPGA_USER_IRQS)
		if (dev->user_counts[line] != f->user_seen[line])
			fired |= BIT(line);
	if (counts)
		memcpy(counts, dev->user_counts, sizeof(dev->user_counts));
	spin_unlock_irq(&dev->user_lock);
	return fired;
}

/*
 * f has been told of @fired up to @counts: what fires later is new. Only
 * forward: another thread's call on f may have told it of later ones.
 */
static void gpufpga_user_take(struct gpufpga_file *f, u32 fired, const u64 *counts)
{
	unsigned long told = fired;
	int line;

	spin_lock_irq(&f->dev->user_lock);
	for_each_set_bit(line, &told, GPUFPGA_USER_IRQS)
		if (counts[line] > f->user_seen[line])
			f->user_seen[line] = counts[line];
	spin_unlock_irq(&f->dev->user_lock);
}

/**
 * gpufpga_ioctl_user_irq - GPUFPGA_IOC_USER_IRQ
 * @f: the file
 * @arg: the user's struct gpufpga_user_irq
 * @size: its size, from the command
 *
 * Context: process context, may sleep.
 * Return: 0, or the errors the uapi lists.
 */
int gpufpga_ioctl_user_irq(struct gpufpga_file *f, void __user *arg, unsigned int size)
{
	struct gpufpga_dev *dev = f->dev;
	struct gpufpga_user_irq a;
	long left;
	int ret;

	ret = gpufpga_copy_in(&a, sizeof(a), arg, size, sizeof(a));
	if (ret)
		return ret;
	if (!a.lines || a.lines & ~GENMASK(GPUFPGA_USER_IRQS - 1, 0) || a.pad)
		return -EINVAL;
	ret = gpufpga_user_ended(dev);
	if (ret)
		return ret;
	gpufpga_user_arm(dev, a.lines);
	if (a.msecs) {
		left = wait_event_interruptible_timeout(dev->user_wq,
							gpufpga_user_fired(f, a.lines, NULL) ||
							gpufpga_user_ended(dev),
							msecs_to_jiffies(a.msecs));
		if (left < 0)
			return left;	/* -ERESTARTSYS: a signal */
	}
	ret = gpufpga_user_ended(dev);
	if (ret)
		return ret;
	a.fired = gpufpga_user_fired(f, a.lines, a.counts);
	if (!a.fired)
		return a.msecs ? -ETIMEDOUT : -EAGAIN;
	ret = gpufpga_copy_out(arg, size, &a, sizeof(a));
	if (!ret)
		gpufpga_user_take(f, a.fired, a.counts);	/* told: nothing lost */
	return ret;
}
