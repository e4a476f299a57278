// SPDX-License-Identifier: GPL-2.0
/*
 * Aggregates gpufpga's trace events in the kernel: per-channel byte,
 * transfer, stream slot and error counters and log2 latency histograms in
 * maps, and discrete events (pin, unpin, revoke, failed transfer, error,
 * stream start and end, the card's resets, errors and sleeps) through a
 * ring buffer. Attached as raw tracepoints, whose arguments are the
 * events' TP_PROTO arguments in order (kmod/gpufpga/trace.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define NCHAN		8	/* 4 H2C, then 4 C2H */
#define NBUCKETS	64
#define OP_LEN		16

enum event_type {
	EVENT_PIN = 1,
	EVENT_UNPIN,
	EVENT_REVOKE,
	EVENT_XFER_FAILED,
	EVENT_ERROR,
	EVENT_STREAM_START,
	EVENT_STREAM_END,
	EVENT_LIFECYCLE,
};

struct event {
	__u64 ts_ns;
	__u64 handle_or_id;	/* streams: slots in the ring, or filled at the end */
	__u64 len_or_bytes;
	__u32 type;
	__s32 dev;
	__u32 kind_or_dir;
	__u32 chan;
	__u32 status;
	__s32 error;
	__u32 npages;		/* stream start: descriptors */
	__u32 nruns;
	char op[OP_LEN];
};

/* Puts struct event into BTF, for the generated Go type. */
const struct event *unused_event __attribute__((unused));

struct chan_stats {
	__u64 bytes;
	__u64 transfers;
	__u64 errors;
	__u64 submitted;
	__u64 busy_ns;
	__u64 slots;		/* stream slots filled; their bytes count in bytes (not a resident stream's) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCHAN);
	__type(key, __u32);
	__type(value, struct chan_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCHAN * NBUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} latency SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Events the ring buffer had no room for: reported, never hidden. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Only events of this device, or all when -1. */
volatile const __s32 want_dev = -1;

static __always_inline bool skip(__s32 dev)
{
	return want_dev >= 0 && dev != want_dev;
}

static __always_inline __u32 chan_index(__u32 dir, __u32 chan)
{
	return (dir ? 4 : 0) + (chan & 3);
}

/* floor(log2(v)), 0 for v < 2: six halvings, not a loop per bit. */
static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 b = 0;

	if (v >> 32) {
		v >>= 32;
		b += 32;
	}
	if (v >> 16) {
		v >>= 16;
		b += 16;
	}
	if (v >> 8) {
		v >>= 8;
		b += 8;
	}
	if (v >> 4) {
		v >>= 4;
		b += 4;
	}
	if (v >> 2) {
		v >>= 2;
		b += 2;
	}
	if (v >> 1)
		b += 1;
	return b;
}

/*
 * A ring-buffer event of type for the tracepoint's device (its first
 * argument), or NULL when the device is filtered out or the buffer is full.
 */
static __always_inline struct event *new_event(struct bpf_raw_tracepoint_args *ctx, __u32 type)
{
	struct event *e;

	if (skip((__s32)ctx->args[0]))
		return NULL;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);

		if (n)
			(*n)++;
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->dev = (__s32)ctx->args[0];
	return e;
}

/* gpufpga_pin(int dev, u64 handle, u32 kind, u64 len, u32 npages, u32 nruns) */
SEC("raw_tracepoint/gpufpga_pin")
int on_pin(struct bpf_raw_tracepoint_args *ctx)
{
	struct event *e;

	e = new_event(ctx, EVENT_PIN);
	if (!e)
		return 0;
	e->handle_or_id = ctx->args[1];
	e->kind_or_dir = (__u32)ctx->args[2];
	e->len_or_bytes = ctx->args[3];
	e->npages = (__u32)ctx->args[4];
	e->nruns = (__u32)ctx->args[5];
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* gpufpga_unpin and gpufpga_revoke(int dev, u64 handle, u32 kind, u64 len) */
static __always_inline int mem_event(struct bpf_raw_tracepoint_args *ctx, __u32 type)
{
	struct event *e;

	e = new_event(ctx, type);
	if (!e)
		return 0;
	e->handle_or_id = ctx->args[1];
	e->kind_or_dir = (__u32)ctx->args[2];
	e->len_or_bytes = ctx->args[3];
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("raw_tracepoint/gpufpga_unpin")
int on_unpin(struct bpf_raw_tracepoint_args *ctx)
{
	return mem_event(ctx, EVENT_UNPIN);
}

SEC("raw_tracepoint/gpufpga_revoke")
int on_revoke(struct bpf_raw_tracepoint_args *ctx)
{
	return mem_event(ctx, EVENT_REVOKE);
}

/* gpufpga_xfer_submit(int dev, u64 id, u32 dir, u32 chan, u64 bytes, u32 descs) */
SEC("raw_tracepoint/gpufpga_xfer_submit")
int on_submit(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 key;
	struct chan_stats *s;

	if (skip((__s32)ctx->args[0]))
		return 0;
	key = chan_index((__u32)ctx->args[2], (__u32)ctx->args[3]);
	s = bpf_map_lookup_elem(&stats, &key);
	if (s)
		s->submitted++;
	return 0;
}

/*
 * gpufpga_xfer_complete(int dev, u64 id, u32 dir, u32 chan, u64 bytes,
 *			 u64 duration_ns, u32 status, int error)
 */
SEC("raw_tracepoint/gpufpga_xfer_complete")
int on_complete(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 dir = (__u32)ctx->args[2], chan = (__u32)ctx->args[3];
	__u64 bytes = ctx->args[4], ns = ctx->args[5];
	__s32 error = (__s32)ctx->args[7];
	__u32 key = chan_index(dir, chan), bucket;
	struct chan_stats *s;
	struct event *e;
	__u64 *h;

	if (skip((__s32)ctx->args[0]))
		return 0;
	s = bpf_map_lookup_elem(&stats, &key);
	if (s) {
		s->bytes += bytes;
		s->transfers++;
		s->busy_ns += ns;
		if (error)
			s->errors++;
	}
	bucket = key * NBUCKETS + log2_bucket(ns);
	h = bpf_map_lookup_elem(&latency, &bucket);
	if (h)
		(*h)++;
	if (!error)
		return 0;
	e = new_event(ctx, EVENT_XFER_FAILED);
	if (!e)
		return 0;
	e->handle_or_id = ctx->args[1];
	e->kind_or_dir = dir;
	e->chan = chan;
	e->len_or_bytes = bytes;
	e->status = (__u32)ctx->args[6];
	e->error = error;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* gpufpga_error(int dev, const char *op, int error, u32 status) */
SEC("raw_tracepoint/gpufpga_error")
int on_error(struct bpf_raw_tracepoint_args *ctx)
{
	struct event *e;

	e = new_event(ctx, EVENT_ERROR);
	if (!e)
		return 0;
	bpf_probe_read_kernel_str(e->op, sizeof(e->op), (const char *)ctx->args[1]);
	e->error = (__s32)ctx->args[2];
	e->status = (__u32)ctx->args[3];
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* gpufpga_stream_start(int dev, u32 chan, u32 nslots, u32 ndescs, u64 bytes) */
SEC("raw_tracepoint/gpufpga_stream_start")
int on_stream_start(struct bpf_raw_tracepoint_args *ctx)
{
	struct event *e;

	e = new_event(ctx, EVENT_STREAM_START);
	if (!e)
		return 0;
	e->kind_or_dir = 1;
	e->chan = (__u32)ctx->args[1];
	e->handle_or_id = (__u32)ctx->args[2];
	e->npages = (__u32)ctx->args[3];
	e->len_or_bytes = ctx->args[4];
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* gpufpga_stream_slot(int dev, u32 chan, u32 slot, u64 seq, u64 bytes, u32 flags) */
SEC("raw_tracepoint/gpufpga_stream_slot")
int on_stream_slot(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 key = chan_index(1, (__u32)ctx->args[1]);
	struct chan_stats *s;

	if (skip((__s32)ctx->args[0]))
		return 0;
	s = bpf_map_lookup_elem(&stats, &key);
	if (s) {
		s->slots++;
		s->bytes += ctx->args[4];
	}
	return 0;
}

/*
 * gpufpga_stream_fills(int dev, u32 chan, u32 fills, u64 seq, u64 consumed,
 * u64 granted): a GPU-resident stream's fills, a batch at a time; their
 * bytes are the consumer's to count.
 */
SEC("raw_tracepoint/gpufpga_stream_fills")
int on_stream_fills(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 key = chan_index(1, (__u32)ctx->args[1]);
	struct chan_stats *s;

	if (skip((__s32)ctx->args[0]))
		return 0;
	s = bpf_map_lookup_elem(&stats, &key);
	if (s)
		s->slots += (__u32)ctx->args[2];
	return 0;
}

/* gpufpga_stream_end(int dev, u32 chan, u64 slots, int error, u32 status) */
SEC("raw_tracepoint/gpufpga_stream_end")
int on_stream_end(struct bpf_raw_tracepoint_args *ctx)
{
	struct event *e;

	e = new_event(ctx, EVENT_STREAM_END);
	if (!e)
		return 0;
	e->kind_or_dir = 1;
	e->chan = (__u32)ctx->args[1];
	e->handle_or_id = ctx->args[2];
	e->error = (__s32)ctx->args[3];
	e->status = (__u32)ctx->args[4];
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * gpufpga_lifecycle(int dev, const char *event, int arg): arg is an errno
 * where negative, else the event's detail (error_detected: the PCI
 * channel state).
 */
SEC("raw_tracepoint/gpufpga_lifecycle")
int on_lifecycle(struct bpf_raw_tracepoint_args *ctx)
{
	struct event *e;
	__s32 arg;

	e = new_event(ctx, EVENT_LIFECYCLE);
	if (!e)
		return 0;
	bpf_probe_read_kernel_str(e->op, sizeof(e->op), (const char *)ctx->args[1]);
	arg = (__s32)ctx->args[2];
	if (arg < 0)
		e->error = arg;
	else
		e->status = arg;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
