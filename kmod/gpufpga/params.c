// SPDX-License-Identifier: GPL-2.0
/*
 * Module parameters, each checked when set: what every file reads of them
 * is in range.
 */
#include <linux/module.h>

#include "gpufpga.h"

/*
 * A channel's two rings hold max_descs descriptors and results each: 65,536
 * make 4 MiB, the most one coherent allocation gives.
 */
#define GPUFPGA_MAX_DESCS	65536

static int gpufpga_set_max_descs(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, GPUFPGA_MAX_DESCS);
}

static const struct kernel_param_ops gpufpga_max_descs_ops = {
	.set = gpufpga_set_max_descs,
	.get = param_get_uint,
};

unsigned int gpufpga_max_descs = 4096;
module_param_cb(max_descs, &gpufpga_max_descs_ops, &gpufpga_max_descs, 0444);
MODULE_PARM_DESC(max_descs, "descriptors per transfer and per channel ring (1 to 65536)");

bool gpufpga_nv_revocable_pins;
module_param_named(nv_revocable_pins, gpufpga_nv_revocable_pins, bool, 0644);
MODULE_PARM_DESC(nv_revocable_pins, "let users without CAP_SYS_RAWIO pin GPU memory revocably through NVIDIA's P2P API, whose window lets a cudaFree racing the pin corrupt kernel memory (default: no; persistent and dma-buf pins are open to all)");

unsigned int gpufpga_max_segs = 1024;
module_param_named(max_segs, gpufpga_max_segs, uint, 0644);
MODULE_PARM_DESC(max_segs, "segments per transfer");

unsigned int gpufpga_max_pins = 4096;
module_param_named(max_pins, gpufpga_max_pins, uint, 0644);
MODULE_PARM_DESC(max_pins, "pins per open file");

unsigned long gpufpga_max_pinned = 64UL << 30;
module_param_named(max_pinned, gpufpga_max_pinned, ulong, 0644);
MODULE_PARM_DESC(max_pinned, "pinned bytes per open file");

unsigned long gpufpga_max_pinned_total = 256UL << 30;
module_param_named(max_pinned_total, gpufpga_max_pinned_total, ulong, 0644);
MODULE_PARM_DESC(max_pinned_total, "pinned bytes per device");

/*
 * Parameters writable at run time are checked when set: a zero timeout
 * would spin the channel's watchdog, a zero queue refuse every record.
 */
#define GPUFPGA_MAX_TIMEOUT_MS	(3600U * 1000)
#define GPUFPGA_MAX_QUEUED	BIT(20)

static int gpufpga_set_max_queued(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, GPUFPGA_MAX_QUEUED);
}

static const struct kernel_param_ops gpufpga_max_queued_ops = {
	.set = gpufpga_set_max_queued,
	.get = param_get_uint,
};

unsigned int gpufpga_max_queued = 1024;
module_param_cb(max_queued, &gpufpga_max_queued_ops, &gpufpga_max_queued, 0644);
MODULE_PARM_DESC(max_queued, "asynchronous transfers per open file, queued or finished but not yet read (1 to 1048576)");

static int gpufpga_set_timeout_ms(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 1, GPUFPGA_MAX_TIMEOUT_MS);
}

static const struct kernel_param_ops gpufpga_timeout_ms_ops = {
	.set = gpufpga_set_timeout_ms,
	.get = param_get_uint,
};

unsigned int gpufpga_timeout_ms = 5000;
module_param_cb(timeout_ms, &gpufpga_timeout_ms_ops, &gpufpga_timeout_ms, 0644);
MODULE_PARM_DESC(timeout_ms, "default transfer timeout (1 to 3600000)");

/* NVIDIA's free callback waits this long with NVIDIA's locks held: bounded. */
#define GPUFPGA_MAX_REVOKE_WAIT_MS	100

static int gpufpga_set_revoke_wait_ms(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 0, GPUFPGA_MAX_REVOKE_WAIT_MS);
}

static const struct kernel_param_ops gpufpga_revoke_wait_ms_ops = {
	.set = gpufpga_set_revoke_wait_ms,
	.get = param_get_uint,
};

unsigned int gpufpga_revoke_wait_ms = 20;
module_param_cb(revoke_wait_ms, &gpufpga_revoke_wait_ms_ops, &gpufpga_revoke_wait_ms, 0444);
MODULE_PARM_DESC(revoke_wait_ms, "how long a revoked pin's running transfer may finish before its channel is halted (at most 100)");

static int gpufpga_set_resident_poll_us(const char *val, const struct kernel_param *kp)
{
	return param_set_uint_minmax(val, kp, 10, 1000000);
}

static const struct kernel_param_ops gpufpga_resident_poll_us_ops = {
	.set = gpufpga_set_resident_poll_us,
	.get = param_get_uint,
};

/* Read at a stream's start. */
unsigned int gpufpga_resident_poll_us = 100;
module_param_cb(resident_poll_us, &gpufpga_resident_poll_us_ops, &gpufpga_resident_poll_us, 0644);
MODULE_PARM_DESC(resident_poll_us, "how often a GPU-resident stream whose engine is short of credits reads its consumer's count (10 to 1000000)");

unsigned long gpufpga_card_mem_size;
module_param_named(card_mem_size, gpufpga_card_mem_size, ulong, 0444);
MODULE_PARM_DESC(card_mem_size, "end of the card (AXI) address window of memory-mapped channels, which starts at 0: reported by INFO, and transfers past it are refused (0: memory-mapped transfers refused)");
