/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gpufpga trace events: the stable observability contract that tools
 * (pkg/trace, p2pctl trace) attach to. Fields are only ever added.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM gpufpga

#if !defined(GPUFPGA_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define GPUFPGA_TRACE_H

#include <linux/tracepoint.h>

#include "compat.h"

DECLARE_EVENT_CLASS(gpufpga_mem_event,
	TP_PROTO(int dev, u64 handle, u32 kind, u64 len),
	TP_ARGS(dev, handle, kind, len),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, kind)
		__field(u64, handle)
		__field(u64, len)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->kind = kind;
		__entry->handle = handle;
		__entry->len = len;
	),
	TP_printk("dev=%d handle=%llu kind=%u len=%llu",
		  __entry->dev, __entry->handle, __entry->kind, __entry->len)
);

DEFINE_EVENT(gpufpga_mem_event, gpufpga_unpin,
	TP_PROTO(int dev, u64 handle, u32 kind, u64 len),
	TP_ARGS(dev, handle, kind, len));

DEFINE_EVENT(gpufpga_mem_event, gpufpga_revoke,
	TP_PROTO(int dev, u64 handle, u32 kind, u64 len),
	TP_ARGS(dev, handle, kind, len));

TRACE_EVENT(gpufpga_pin,
	TP_PROTO(int dev, u64 handle, u32 kind, u64 len, u32 npages, u32 nruns),
	TP_ARGS(dev, handle, kind, len, npages, nruns),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, kind)
		__field(u64, handle)
		__field(u64, len)
		__field(u32, npages)
		__field(u32, nruns)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->kind = kind;
		__entry->handle = handle;
		__entry->len = len;
		__entry->npages = npages;
		__entry->nruns = nruns;
	),
	TP_printk("dev=%d handle=%llu kind=%u len=%llu npages=%u nruns=%u",
		  __entry->dev, __entry->handle, __entry->kind, __entry->len,
		  __entry->npages, __entry->nruns)
);

TRACE_EVENT(gpufpga_xfer_submit,
	TP_PROTO(int dev, u64 id, u32 dir, u32 chan, u64 bytes, u32 descs),
	TP_ARGS(dev, id, dir, chan, bytes, descs),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, dir)
		__field(u64, id)
		__field(u64, bytes)
		__field(u32, chan)
		__field(u32, descs)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->dir = dir;
		__entry->id = id;
		__entry->bytes = bytes;
		__entry->chan = chan;
		__entry->descs = descs;
	),
	TP_printk("dev=%d id=%llu dir=%s chan=%u bytes=%llu descs=%u",
		  __entry->dev, __entry->id, __entry->dir ? "c2h" : "h2c",
		  __entry->chan, __entry->bytes, __entry->descs)
);

TRACE_EVENT(gpufpga_xfer_complete,
	TP_PROTO(int dev, u64 id, u32 dir, u32 chan, u64 bytes, u64 duration_ns,
		 u32 status, int error),
	TP_ARGS(dev, id, dir, chan, bytes, duration_ns, status, error),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, dir)
		__field(u64, id)
		__field(u64, bytes)
		__field(u64, duration_ns)
		__field(u32, chan)
		__field(u32, status)
		__field(int, error)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->dir = dir;
		__entry->id = id;
		__entry->bytes = bytes;
		__entry->duration_ns = duration_ns;
		__entry->chan = chan;
		__entry->status = status;
		__entry->error = error;
	),
	TP_printk("dev=%d id=%llu dir=%s chan=%u bytes=%llu duration_ns=%llu status=%#x error=%d",
		  __entry->dev, __entry->id, __entry->dir ? "c2h" : "h2c",
		  __entry->chan, __entry->bytes, __entry->duration_ns,
		  __entry->status, __entry->error)
);

TRACE_EVENT(gpufpga_error,
	TP_PROTO(int dev, const char *op, int error, u32 status),
	TP_ARGS(dev, op, error, status),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(int, error)
		__field(u32, status)
		__string(op, op)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->error = error;
		__entry->status = status;
		gpufpga_assign_str(op, op);
	),
	TP_printk("dev=%d op=%s error=%d status=%#x",
		  __entry->dev, __get_str(op), __entry->error, __entry->status)
);

/*
 * The card's lifecycle: event is reset_prepare, reset_done, error_detected
 * (arg: the pci_channel_state), slot_reset, suspend or resume (arg: the
 * restart's result, 0 or a negative errno).
 */
TRACE_EVENT(gpufpga_lifecycle,
	TP_PROTO(int dev, const char *event, int arg),
	TP_ARGS(dev, event, arg),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(int, arg)
		__string(event, event)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->arg = arg;
		gpufpga_assign_str(event, event);
	),
	TP_printk("dev=%d event=%s arg=%d", __entry->dev, __get_str(event), __entry->arg)
);

TRACE_EVENT(gpufpga_stream_start,
	TP_PROTO(int dev, u32 chan, u32 nslots, u32 ndescs, u64 bytes),
	TP_ARGS(dev, chan, nslots, ndescs, bytes),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, chan)
		__field(u32, nslots)
		__field(u32, ndescs)
		__field(u64, bytes)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->chan = chan;
		__entry->nslots = nslots;
		__entry->ndescs = ndescs;
		__entry->bytes = bytes;
	),
	TP_printk("dev=%d c2h%u nslots=%u ndescs=%u bytes=%llu",
		  __entry->dev, __entry->chan, __entry->nslots, __entry->ndescs, __entry->bytes)
);

TRACE_EVENT(gpufpga_stream_slot,
	TP_PROTO(int dev, u32 chan, u32 slot, u64 seq, u64 bytes, u32 flags),
	TP_ARGS(dev, chan, slot, seq, bytes, flags),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, chan)
		__field(u32, slot)
		__field(u32, flags)
		__field(u64, seq)
		__field(u64, bytes)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->chan = chan;
		__entry->slot = slot;
		__entry->flags = flags;
		__entry->seq = seq;
		__entry->bytes = bytes;
	),
	TP_printk("dev=%d c2h%u slot=%u seq=%llu bytes=%llu flags=%#x",
		  __entry->dev, __entry->chan, __entry->slot, __entry->seq, __entry->bytes,
		  __entry->flags)
);

/*
 * A GPU-resident stream's fills, counted from the engine's count on an
 * interrupt, the poll or the end: no event per slot; consumed and
 * granted are the consumer's count and the credits given as the pass
 * that counted them began.
 */
TRACE_EVENT(gpufpga_stream_fills,
	TP_PROTO(int dev, u32 chan, u32 fills, u64 seq, u64 consumed, u64 granted),
	TP_ARGS(dev, chan, fills, seq, consumed, granted),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, chan)
		__field(u32, fills)
		__field(u64, seq)
		__field(u64, consumed)
		__field(u64, granted)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->chan = chan;
		__entry->fills = fills;
		__entry->seq = seq;
		__entry->consumed = consumed;
		__entry->granted = granted;
	),
	TP_printk("dev=%d c2h%u fills=%u seq=%llu consumed=%llu granted=%llu",
		  __entry->dev, __entry->chan, __entry->fills, __entry->seq, __entry->consumed,
		  __entry->granted)
);

TRACE_EVENT(gpufpga_stream_end,
	TP_PROTO(int dev, u32 chan, u64 slots, int error, u32 status),
	TP_ARGS(dev, chan, slots, error, status),
	TP_STRUCT__entry(
		__field(int, dev)
		__field(u32, chan)
		__field(int, error)
		__field(u32, status)
		__field(u64, slots)
	),
	TP_fast_assign(
		__entry->dev = dev;
		__entry->chan = chan;
		__entry->error = error;
		__entry->status = status;
		__entry->slots = slots;
	),
	TP_printk("dev=%d c2h%u slots=%llu error=%d status=%#x",
		  __entry->dev, __entry->chan, __entry->slots, __entry->error, __entry->status)
);

#endif /* GPUFPGA_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE trace
#include <trace/define_trace.h>
