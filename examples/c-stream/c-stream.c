// SPDX-License-Identifier: MIT
/*
 * c-stream: consume a gpufpga C2H stream from C, with nothing but the uapi
 * header (<gpufpga/gpufpga.h>, package gpufpga-dev).
 *
 * It pins a ring of host memory, starts the stream, reads each filled
 * slot's record, processes the slot (here: counts its bytes and packets and
 * folds them into a checksum) and releases it, naming the stream by the id
 * STREAM_START wrote back. Ctrl-C (or -N slots) stops the stream; the slots
 * filled before the halt still arrive, then STREAM_END.
 *
 *   c-stream [-d /dev/gpufpga0] [-c channel] [-n slots] [-s slot-bytes] [-N slots-to-read]
 *
 * Host memory takes one descriptor per page: a slot of several pages must
 * be filled whole by one packet (make the FPGA's packets as long as a
 * slot), or the stream ends with EPROTO. GPU memory is pinned the same way
 * with GPUFPGA_PIN_DMABUF (a CUDA dma-buf fd) or GPUFPGA_PIN_GPU (a CUDA
 * device pointer): see README.md, "The ring from other processes".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gpufpga/gpufpga.h>

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static int fail(const char *what)
{
	fprintf(stderr, "c-stream: %s: %s\n", what, strerror(errno));
	return 1;
}

/* What the consumer does with a slot: here, a checksum of its bytes. */
static uint64_t process(const unsigned char *p, uint64_t n, uint64_t sum)
{
	for (uint64_t i = 0; i < n; i++)
		sum = sum * 31 + p[i];
	return sum;
}

int main(int argc, char **argv)
{
	const char *path = "/dev/gpufpga0";
	unsigned int channel = 1, nslots = 16;
	uint64_t slot_size = 64 << 10, limit = 0;
	int opt;

	while ((opt = getopt(argc, argv, "d:c:n:s:N:")) != -1) {
		switch (opt) {
		case 'd': path = optarg; break;
		case 'c': channel = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'n': nslots = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 's': slot_size = strtoull(optarg, NULL, 0); break;
		case 'N': limit = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-c channel] [-n slots] [-s slot-bytes] [-N slots-to-read]\n", argv[0]);
			return 2;
		}
	}
	if (!nslots || !slot_size || channel >= GPUFPGA_MAX_CHANNELS) {
		fprintf(stderr, "c-stream: -n and -s must be positive, -c below %d\n", GPUFPGA_MAX_CHANNELS);
		return 2;
	}

	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(path);

	/* The ABI this program was built against, and a stream channel. */
	struct gpufpga_info info;
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, GPUFPGA_IOC_INFO, &info))
		return fail("INFO (not a gpufpga device?)");
	if (info.abi_version != GPUFPGA_ABI_VERSION) {
		fprintf(stderr, "c-stream: the driver speaks ABI %u, this program %d\n", info.abi_version,
			GPUFPGA_ABI_VERSION);
		return 1;
	}
	const uint32_t want = GPUFPGA_CHAN_PRESENT | GPUFPGA_CHAN_STREAM;
	if ((info.c2h[channel] & want) != want) {
		fprintf(stderr, "c-stream: c2h%u is not a stream channel\n", channel);
		return 1;
	}

	/* The ring: host memory, page-aligned, pinned whole. */
	size_t ring_len = (size_t)nslots * slot_size;
	unsigned char *ring = mmap(NULL, ring_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ring == MAP_FAILED)
		return fail("mmap");
	struct gpufpga_pin pin;
	memset(&pin, 0, sizeof(pin));
	pin.kind = GPUFPGA_PIN_HOST;
	pin.addr = (uintptr_t)ring;
	pin.len = ring_len;
	pin.fd = -1;
	if (ioctl(fd, GPUFPGA_IOC_PIN, &pin))
		return fail("PIN (host memory: RLIMIT_MEMLOCK?)");

	struct gpufpga_seg *segs = calloc(nslots, sizeof(*segs));
	if (!segs)
		return fail("calloc");
	for (unsigned int i = 0; i < nslots; i++) {
		segs[i].handle = pin.handle;
		segs[i].offset = (uint64_t)i * slot_size;
		segs[i].len = slot_size;
	}
	struct gpufpga_stream st;
	memset(&st, 0, sizeof(st));
	st.channel = channel;
	st.nslots = nslots;
	st.slots = (uintptr_t)segs;
	if (ioctl(fd, GPUFPGA_IOC_STREAM_START, &st))
		return fail("STREAM_START");
	printf("c-stream: stream %llu on c2h%u: %u slots of %" PRIu64 " bytes in host memory\n", (unsigned long long)st.id,
	       channel, nslots, slot_size);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	struct gpufpga_completion recs[64];
	uint32_t done[64];
	uint64_t slots = 0, bytes = 0, packets = 0, sum = 0;
	int stopped = 0, ended = 0, status = 0;

	while (!ended) {
		if ((interrupted || (limit && slots >= limit)) && !stopped) {
			struct gpufpga_stream_stop stop = { .channel = channel, .stream = st.id };

			if (ioctl(fd, GPUFPGA_IOC_STREAM_STOP, &stop) && errno != ENOENT)
				return fail("STREAM_STOP");
			stopped = 1; /* ENOENT: it had ended; its STREAM_END is queued */
		}
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, 1000) < 0) {
			if (errno == EINTR)
				continue;
			return fail("poll");
		}
		if (!(p.revents & POLLIN))
			continue;
		ssize_t n = read(fd, recs, sizeof(recs));

		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return fail("read");
		}
		uint32_t ndone = 0;

		for (ssize_t i = 0; i < n / (ssize_t)sizeof(recs[0]); i++) {
			const struct gpufpga_completion *r = &recs[i];

			if (r->id != st.id)
				continue; /* another stream's or a transfer's record */
			if (r->kind == GPUFPGA_EVENT_STREAM_END) {
				if (r->error) {
					fprintf(stderr, "c-stream: stream ended: %s (status 0x%x)\n",
						strerror(-r->error), r->status);
					status = 1;
				}
				ended = 1;
				continue;
			}
			if (r->kind != GPUFPGA_EVENT_SLOT)
				continue;
			sum = process(ring + (uint64_t)r->slot * slot_size, r->bytes, sum);
			slots++;
			bytes += r->bytes;
			packets += !!(r->flags & GPUFPGA_SLOT_EOP);
			done[ndone++] = r->slot;
		}
		if (ndone && !ended) {
			struct gpufpga_release rel = {
				.channel = channel, .nslots = ndone, .slots = (uintptr_t)done, .stream = st.id,
			};

			/* ENOENT: the stream ended meanwhile; its slots went with it. */
			if (ioctl(fd, GPUFPGA_IOC_STREAM_RELEASE, &rel) && errno != ENOENT)
				return fail("STREAM_RELEASE");
		}
	}
	printf("c-stream: %" PRIu64 " slots, %" PRIu64 " bytes, %" PRIu64 " packets, checksum %016" PRIx64 "\n",
	       slots, bytes, packets, sum);

	struct gpufpga_unpin unpin = { .handle = pin.handle };

	if (ioctl(fd, GPUFPGA_IOC_UNPIN, &unpin))
		return fail("UNPIN");
	free(segs);
	munmap(ring, ring_len);
	close(fd);
	return status;
}
