// SPDX-License-Identifier: GPL-2.0
/*
 * gpufpga-cost: the guest CPU cost of gpufpga's operations, as a C program
 * sees them (no language runtime's threads wake meanwhile). Run in a guest
 * whose clock counts instructions (QEMU -icount), busy time is
 * instructions: the monotonic clock less every CPU's idle time
 * (/proc/timer_list keeps it in ns).
 *
 *   gpufpga-cost all|xfer
 * prints one JSON object: per operation, "busy" (every context: the
 * caller, the interrupt handler, kernel threads) and "thread" (the caller's
 * CPU time), in ns, the least of three rounds.
 *
 * A GPU-resident stream's slot is consumed here by the CPU, as the GPU's
 * consumer would (gpufpga_resident.h), sleeping while no fill is ready:
 * its busy time is the driver's (interrupts every COALESCE fills, the
 * poll) plus this consumer's loads and stores, which a GPU does instead.
 *
 *   gpufpga-cost chains DESCS
 * queues IRQ_XFERS asynchronous transfers of DESCS descriptors each, back
 * to back, and waits for them: each completion's interrupt starts the next
 * chain. Its caller times the interrupt handler (icount's TestIRQWork).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../../../kmod/gpufpga/uapi/gpufpga.h"
#include "../../../../kmod/gpufpga/uapi/gpufpga_resident.h"

#define SLOT		4096
#define NSLOTS		64

struct cost {
	double busy;
	double thread;
};

static void die(const char *what)
{
	fprintf(stderr, "gpufpga-cost: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t idle_ns(void)
{
	FILE *f = fopen("/proc/timer_list", "r");
	char line[256];
	int64_t sum = 0, v;
	int found = 0;

	if (!f)
		die("/proc/timer_list");
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " .idle_sleeptime : %ld nsecs", &v) == 1 ||
		    sscanf(line, " .iowait_sleeptime : %ld nsecs", &v) == 1) {
			sum += v;
			found = 1;
		}
	}
	fclose(f);
	if (!found) {
		fprintf(stderr, "gpufpga-cost: no idle_sleeptime in /proc/timer_list\n");
		exit(1);
	}
	return sum;
}

static struct cost measure(int n, void (*op)(void))
{
	struct cost best = { 0, 0 };
	int r, i;

	for (i = 0; i < n / 10; i++)
		op();
	for (r = 0; r < 3; r++) {
		/* Reading timer_list falls outside the window at both ends. */
		int64_t i0 = idle_ns(), m0 = clock_ns(CLOCK_MONOTONIC);
		int64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		int64_t m1, t1;
		double busy, thread;

		for (i = 0; i < n; i++)
			op();
		t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		m1 = clock_ns(CLOCK_MONOTONIC);
		busy = (double)(m1 - m0 - (idle_ns() - i0)) / n;
		thread = (double)(t1 - t0) / n;
		if (!best.busy || busy < best.busy)
			best.busy = busy;
		if (!best.thread || thread < best.thread)
			best.thread = thread;
	}
	return best;
}

static int fd;
static struct gpufpga_xfer xfer;
static struct gpufpga_seg seg;
static __u32 xfer_flags;
static __u32 released;
static struct gpufpga_slot_result *results;
static struct gpufpga_consumer *consumer;
static __u64 consumed;
static __u64 stream_id;

static void op_null(void)
{
	if (ioctl(fd, _IO(GPUFPGA_IOC_MAGIC, 0x3f)) != -1 || errno != ENOTTY)
		die("null ioctl");
}

static void op_sleep(void)
{
	struct timespec ts = { 0, 100000 };

	nanosleep(&ts, NULL);
}

static void op_xfer(void)
{
	memset(&xfer, 0, sizeof(xfer));
	xfer.dir = GPUFPGA_H2C;
	xfer.flags = xfer_flags;
	xfer.nsegs = 1;
	xfer.segs = (uintptr_t)&seg;
	xfer.eventfd = -1;
	if (ioctl(fd, GPUFPGA_IOC_XFER, &xfer))
		die("transfer");
}

/* One stream slot: its record, then its release. */
static void op_slot(void)
{
	struct gpufpga_completion c;
	struct gpufpga_release rel = { .channel = 1, .nslots = 1, .stream = stream_id };

	do {
		if (read(fd, &c, sizeof(c)) != sizeof(c))
			die("read");
	} while (c.kind != GPUFPGA_EVENT_SLOT);
	released = c.slot;
	rel.slots = (uintptr_t)&released;
	if (ioctl(fd, GPUFPGA_IOC_STREAM_RELEASE, &rel))
		die("release");
}

/* One GPU-resident slot: wait for its result, take it, publish. */
static void op_resident_slot(void)
{
	struct gpufpga_slot_result *r = &results[consumed % NSLOTS];
	struct timespec ts = { 0, 20000 };

	while (__atomic_load_n(&r->status, __ATOMIC_ACQUIRE) >> GPUFPGA_RESULT_MAGIC_SHIFT !=
	       GPUFPGA_RESULT_MAGIC)
		nanosleep(&ts, NULL);
	if (r->length != SLOT) {
		fprintf(stderr, "gpufpga-cost: fill %llu of %u bytes\n",
			(unsigned long long)consumed, r->length);
		exit(1);
	}
	__atomic_store_n(&r->status, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&consumer->consumed, ++consumed, __ATOMIC_RELEASE);
}

static __u64 pin_host(void *p, size_t n)
{
	struct gpufpga_pin pin = {
		.kind = GPUFPGA_PIN_HOST, .addr = (uintptr_t)p, .len = n, .fd = -1,
	};

	if (ioctl(fd, GPUFPGA_IOC_PIN, &pin))
		die("pin");
	return pin.handle;
}

static void print(const char *name, struct cost c, const char *sep)
{
	printf("\"%s\":{\"busy_ns\":%.1f,\"thread_ns\":%.1f}%s", name, c.busy, c.thread, sep);
}

static struct cost stream_slot(void)
{
	static struct gpufpga_seg slots[NSLOTS];
	struct gpufpga_stream st = { .channel = 1, .nslots = NSLOTS };
	struct gpufpga_stream_stop stop = { .channel = 1 };
	struct cost c;
	__u64 h;
	void *ring;
	int i;

	ring = mmap(NULL, SLOT * NSLOTS, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (ring == MAP_FAILED)
		die("mmap");
	h = pin_host(ring, SLOT * NSLOTS);
	for (i = 0; i < NSLOTS; i++)
		slots[i] = (struct gpufpga_seg){ h, (__u64)i * SLOT, SLOT };
	st.slots = (uintptr_t)slots;
	if (ioctl(fd, GPUFPGA_IOC_STREAM_START, &st))
		die("stream start");
	stream_id = st.id;
	c = measure(4000, op_slot);
	stop.stream = st.id;
	if (ioctl(fd, GPUFPGA_IOC_STREAM_STOP, &stop))
		die("stream stop");
	return c;
}

static void *map(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

#define COALESCE	16

static struct cost resident_slot(void)
{
	static struct gpufpga_seg slots[NSLOTS];
	struct gpufpga_stream st = {
		.channel = 1, .nslots = NSLOTS, .flags = GPUFPGA_STREAM_RESIDENT,
		.coalesce = COALESCE,
	};
	struct gpufpga_stream_stop stop = { .channel = 1 };
	void *ring = map(SLOT * NSLOTS), *page = map(2 * 4096);
	struct cost c;
	__u64 h;
	int i;

	h = pin_host(ring, SLOT * NSLOTS);
	for (i = 0; i < NSLOTS; i++)
		slots[i] = (struct gpufpga_seg){ h, (__u64)i * SLOT, SLOT };
	results = page;
	consumer = (struct gpufpga_consumer *)((char *)page + 4096);
	h = pin_host(page, 2 * 4096);
	st.slots = (uintptr_t)slots;
	st.results = (struct gpufpga_seg){ h, 0, NSLOTS * sizeof(*results) };
	st.consumer = (struct gpufpga_seg){ h, 4096, sizeof(*consumer) };
	if (ioctl(fd, GPUFPGA_IOC_STREAM_START, &st))
		die("resident stream start");
	c = measure(4000, op_resident_slot);
	stop.stream = st.id;
	if (ioctl(fd, GPUFPGA_IOC_STREAM_STOP, &stop))
		die("resident stream stop");
	return c;
}

#define IRQ_XFERS	16
#define IRQ_SEG		64	/* bytes a descriptor moves */
#define IRQ_STRIDE	128	/* apart: no two segments merge */

/* Transfers of descs descriptors each, queued at once, then reaped. */
static void chains(unsigned int descs)
{
	struct gpufpga_completion c;
	struct gpufpga_seg *segs;
	unsigned int i, got = 0;
	void *mem;
	__u64 h;

	mem = mmap(NULL, (size_t)descs * IRQ_STRIDE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	segs = calloc(descs, sizeof(*segs));
	if (mem == MAP_FAILED || !segs)
		die("memory");
	h = pin_host(mem, (size_t)descs * IRQ_STRIDE);
	for (i = 0; i < descs; i++)
		segs[i] = (struct gpufpga_seg){ h, (__u64)i * IRQ_STRIDE, IRQ_SEG };
	for (i = 0; i < IRQ_XFERS; i++) {
		memset(&xfer, 0, sizeof(xfer));
		xfer.dir = GPUFPGA_H2C;
		xfer.flags = GPUFPGA_XFER_ASYNC;
		xfer.nsegs = descs;
		xfer.segs = (uintptr_t)segs;
		xfer.eventfd = -1;
		if (ioctl(fd, GPUFPGA_IOC_XFER, &xfer))
			die("transfer");
		if (xfer.descs != descs) {
			fprintf(stderr, "gpufpga-cost: %u descriptors, want %u\n", xfer.descs, descs);
			exit(1);
		}
	}
	while (got < IRQ_XFERS) {
		if (read(fd, &c, sizeof(c)) != sizeof(c))
			die("read");
		if (c.kind != GPUFPGA_EVENT_XFER)
			continue;
		if (c.error || c.bytes != (__u64)descs * IRQ_SEG) {
			fprintf(stderr, "gpufpga-cost: transfer %llu: error %d, %llu bytes\n",
				(unsigned long long)c.id, c.error, (unsigned long long)c.bytes);
			exit(1);
		}
		got++;
	}
	printf("{\"descs\":%u,\"transfers\":%u}\n", descs, got);
}

int main(int argc, char **argv)
{
	int all = argc > 1 && !strcmp(argv[1], "all");
	void *buf;

	/* Busy time is the clock less idle time: of one CPU. */
	if (sysconf(_SC_NPROCESSORS_ONLN) != 1) {
		fprintf(stderr, "gpufpga-cost: needs a guest with one CPU\n");
		return 1;
	}
	fd = open("/dev/gpufpga0", O_RDWR);
	if (fd < 0)
		die("/dev/gpufpga0");
	if (argc > 2 && !strcmp(argv[1], "chains")) {
		chains(strtoul(argv[2], NULL, 0));
		return 0;
	}
	buf = mmap(NULL, SLOT, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap");
	seg = (struct gpufpga_seg){ pin_host(buf, SLOT), 0, SLOT };
	printf("{");
	print("xfer_4k", measure(2000, op_xfer), all ? "," : "");
	if (all) {
		print("null_ioctl", measure(20000, op_null), ",");
		print("sleep_100us", measure(2000, op_sleep), ",");
#ifdef GPUFPGA_XFER_POLL
		xfer_flags = GPUFPGA_XFER_POLL;
		print("xfer_4k_poll", measure(2000, op_xfer), ",");
#endif
		print("stream_slot", stream_slot(), ",");
		print("resident_slot", resident_slot(), "");
	}
	printf("}\n");
	return 0;
}
