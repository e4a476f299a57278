// SPDX-License-Identifier: MIT
/*
 * c-resident: a GPU-resident stream's consumer, written in C against the
 * uapi headers alone (<gpufpga/gpufpga.h>, <gpufpga/gpufpga_resident.h>,
 * package gpufpga-dev), with the CPU in the GPU's place.
 *
 * The ring, its results and the consumer's word are host memory here, so
 * that it runs anywhere; on a GPU they are a ring and results in GPU
 * memory and the word in host memory mapped into the GPU, and the loop
 * below is the persistent kernel's (the header's four steps: C11 atomics
 * here, ld.acquire.sys and st.release.sys in CUDA). No system call, no
 * record and no wake-up goes by per slot: the driver reads the word on
 * the engine's coalesced interrupts and gives the engine its credits.
 *
 *   c-resident [-d /dev/gpufpga0] [-c channel] [-n slots] [-k coalesce] [-N fills]
 *
 * Each slot is one 4 KiB page (a slot must be one descriptor). It stops
 * after -N fills (or Ctrl-C), then takes the fills the engine made before
 * the halt, which STREAM_END's seq counts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <gpufpga/gpufpga.h>
#include <gpufpga/gpufpga_resident.h>

#define SLOT 4096

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int fail(const char *what)
{
	fprintf(stderr, "c-resident: %s: %s\n", what, strerror(errno));
	return 1;
}

/* What the consumer does with a slot: here, a checksum of its bytes. */
static uint64_t process(const unsigned char *p, uint64_t n, uint64_t sum)
{
	for (uint64_t i = 0; i < n; i++)
		sum = sum * 31 + p[i];
	return sum;
}

/*
 * Step 1: the result's status and length, as one 64-bit acquire load.
 * (The device writes plain memory; gcc and clang lay _Atomic uint64_t out
 * as uint64_t, and on x86-64 and arm64 such a load is one access.)
 */
static uint64_t result_word(struct gpufpga_slot_result *r)
{
	return atomic_load_explicit((_Atomic uint64_t *)(void *)r, memory_order_acquire);
}

/*
 * The stream's STREAM_END, if it has come (wait: block until it does):
 * 1 and *end filled in, 0 if not yet, -1 on a failure.
 */
static int stream_end(int fd, uint64_t id, int wait, struct gpufpga_completion *end)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, wait ? -1 : 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		ssize_t got = read(fd, end, sizeof(*end));

		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got != (ssize_t)sizeof(*end)) {
			if (got >= 0)
				errno = EIO;
			return -1;
		}
		if (end->kind == GPUFPGA_EVENT_STREAM_END && end->id == id)
			return 1;
	}
}

static int filled(uint64_t w)
{
	return (uint32_t)w >> GPUFPGA_RESULT_MAGIC_SHIFT == GPUFPGA_RESULT_MAGIC;
}

int main(int argc, char **argv)
{
	const char *path = "/dev/gpufpga0";
	unsigned int channel = 1, nslots = 16, coalesce = 0;
	uint64_t limit = 1024;
	int opt;

	while ((opt = getopt(argc, argv, "d:c:n:k:N:")) != -1) {
		switch (opt) {
		case 'd': path = optarg; break;
		case 'c': channel = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'n': nslots = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'k': coalesce = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'N': limit = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-c channel] [-n slots] [-k coalesce] [-N fills]\n", argv[0]);
			return 2;
		}
	}
	if (!nslots || nslots > 1023 || channel >= GPUFPGA_MAX_CHANNELS) {
		fprintf(stderr, "c-resident: -n from 1 to 1023, -c below %d\n", GPUFPGA_MAX_CHANNELS);
		return 2;
	}

	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(path);
	struct gpufpga_info info;
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, GPUFPGA_IOC_INFO, &info))
		return fail("INFO (not a gpufpga device?)");
	if (!(info.features & GPUFPGA_FEATURE_RESIDENT)) {
		fprintf(stderr, "c-resident: this driver has no GPU-resident streams\n");
		return 1;
	}

	/*
	 * One pin: the slots, then the results (32 bytes a slot) and, 64-byte
	 * aligned after them, the consumer's word.
	 */
	size_t ring_len = (size_t)nslots * SLOT;
	size_t results_len = (size_t)nslots * sizeof(struct gpufpga_slot_result);
	size_t word_off = ring_len + ((results_len + 63) & ~(size_t)63);
	size_t len = (word_off + sizeof(struct gpufpga_consumer) + 4095) & ~(size_t)4095;
	unsigned char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		return fail("mmap");
	struct gpufpga_slot_result *results = (void *)(mem + ring_len);
	struct gpufpga_consumer *consumer = (void *)(mem + word_off);
	struct gpufpga_pin pin;
	memset(&pin, 0, sizeof(pin));
	pin.kind = GPUFPGA_PIN_HOST;
	pin.addr = (uintptr_t)mem;
	pin.len = len;
	pin.fd = -1;
	if (ioctl(fd, GPUFPGA_IOC_PIN, &pin))
		return fail("PIN (host memory: RLIMIT_MEMLOCK?)");

	struct gpufpga_seg *segs = calloc(nslots, sizeof(*segs));
	if (!segs)
		return fail("calloc");
	for (unsigned int i = 0; i < nslots; i++)
		segs[i] = (struct gpufpga_seg){ pin.handle, (uint64_t)i * SLOT, SLOT };
	struct gpufpga_stream st;
	memset(&st, 0, sizeof(st));
	st.channel = channel;
	st.nslots = nslots;
	st.slots = (uintptr_t)segs;
	st.flags = GPUFPGA_STREAM_RESIDENT;
	st.results = (struct gpufpga_seg){ pin.handle, ring_len, results_len };
	st.consumer = (struct gpufpga_seg){ pin.handle, word_off, sizeof(*consumer) };
	st.coalesce = coalesce;
	/* The results start at zero (mmap's); the driver zeroes the word. */
	if (ioctl(fd, GPUFPGA_IOC_STREAM_START, &st))
		return fail("STREAM_START");
	printf("c-resident: stream %llu on c2h%u: %u slots of %d bytes, results and consumer in host memory\n",
	       (unsigned long long)st.id, channel, nslots, SLOT);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	uint64_t k = 0, bytes = 0, packets = 0, sum = 0, fills = UINT64_MAX;
	int status = 0, idle = 0;
	const struct timespec nap = { 0, 20000 };
	struct gpufpga_completion end;

	while (k < fills) {
		int ended = 0;

		if ((interrupted || k >= limit) && fills == UINT64_MAX) {
			/* Stop, then read how many fills the engine made. */
			struct gpufpga_stream_stop stop = { .channel = channel, .stream = st.id };

			/* ENOENT: it had ended; its STREAM_END is queued. */
			if (ioctl(fd, GPUFPGA_IOC_STREAM_STOP, &stop) && errno != ENOENT)
				return fail("STREAM_STOP");
			ended = stream_end(fd, st.id, 1, &end);
		}
		struct gpufpga_slot_result *r = &results[k % nslots];
		uint64_t w = result_word(r);

		if (!ended && !filled(w)) {
			if (status)
				break; /* it failed: its last fill may have no result */
			/* Waiting, now and then: it may end without a stop (an error, a reset). */
			if (fills == UINT64_MAX && ++idle % 64 == 0)
				ended = stream_end(fd, st.id, 0, &end);
			if (!ended) {
				nanosleep(&nap, NULL);
				continue;
			}
		}
		if (ended < 0)
			return fail("read");
		if (ended) {
			if (end.error) {
				fprintf(stderr, "c-resident: stream ended: %s\n", strerror(-end.error));
				status = 1;
			}
			fills = end.seq;
			continue;
		}
		/* Step 2: the slot's data, after its result. */
		uint32_t length = (uint32_t)(w >> 32);

		if (length > SLOT) {
			fprintf(stderr, "c-resident: fill %" PRIu64 " of %u bytes in a %d-byte slot\n", k, length, SLOT);
			return 1;
		}
		sum = process(mem + (k % nslots) * SLOT, length, sum);
		bytes += length;
		packets += !!((uint32_t)w & GPUFPGA_RESULT_EOP);
		/* Step 3: clear the status, so the slot's next fill is told apart. */
		atomic_store_explicit((_Atomic uint32_t *)(void *)&r->status, 0, memory_order_relaxed);
		/* Step 4: publish, with release: the driver grants the slot back. */
		atomic_store_explicit((_Atomic uint64_t *)(void *)&consumer->consumed, ++k, memory_order_release);
	}
	printf("c-resident: %" PRIu64 " fills consumed of %" PRIu64 " the engine made, %" PRIu64 " bytes, %" PRIu64
	       " packets, checksum %016" PRIx64 "\n", k, fills, bytes, packets, sum);
	if (k != fills)
		status = 1;

	struct gpufpga_unpin unpin = { .handle = pin.handle };

	if (ioctl(fd, GPUFPGA_IOC_UNPIN, &unpin))
		return fail("UNPIN");
	free(segs);
	munmap(mem, len);
	close(fd);
	return status;
}
