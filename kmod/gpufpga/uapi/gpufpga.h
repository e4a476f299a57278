/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * gpufpga: FPGA (Xilinx XDMA) <-> GPU peer DMA. The user-space ABI of
 * /dev/gpufpgaN.
 *
 * Conventions:
 *  - Every struct is fixed-size and explicitly padded; addresses, lengths
 *    and handles are __u64.
 *  - The ABI grows by appending fields; the size travels in the ioctl
 *    number. The kernel accepts a struct shorter than its own down to a
 *    per-call minimum, the fields of ABI 1's first release (the missing
 *    tail reads as zero, and output past the caller's size is not written):
 *    INFO 44 bytes (through @pin_kinds), PIN 32 (through @pad), QUERY 24
 *    (through @flags), XFER 48 (through @user_data), STREAM_START 24
 *    (through @pad), STREAM_STOP 8 (through @flags); UNPIN, CANCEL and
 *    STREAM_RELEASE only whole. Shorter than that is -EINVAL. A longer struct's extra tail must
 *    be zero, else -E2BIG; INFO fills a longer one's tail with zeros.
 *  - Unknown flags, and reserved or padding fields that are not zero, are
 *    rejected with -EINVAL.
 *  - User space never supplies a bus address: transfers name pinned memory
 *    by handle and byte offset, and the kernel checks and translates.
 *  - Pins and transfers belong to the file descriptor that made them. Closing
 *    it stops its transfers and unpins everything.
 *
 * Each call's "Errors:" list names every errno it returns besides these,
 * common to all ioctls: -EFAULT (bad user pointer), -ENODEV (the device
 * was removed), -ENOTTY (unknown ioctl, or wrong direction bits), -EINVAL
 * (struct below the call's minimum size), -E2BIG (longer struct with a
 * non-zero tail). hw/testbench/kmodtest holds the driver to these lists.
 */
#ifndef _UAPI_LINUX_GPUFPGA_H
#define _UAPI_LINUX_GPUFPGA_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUFPGA_ABI_VERSION	1

#define GPUFPGA_MAX_CHANNELS	4	/* per direction */

/* Directions. */
#define GPUFPGA_H2C		0	/* host/GPU memory -> card */
#define GPUFPGA_C2H		1	/* card -> host/GPU memory */

/*
 * Device states in gpufpga_info.state. RECOVERING: a reset, an AER
 * recovery or a system sleep is under way, and work fails with
 * -ECONNRESET until it ends. OFFLINE: the function does not answer on the
 * bus, and work fails with -ENODEV until a reset or rebind brings it back.
 */
#define GPUFPGA_DEV_READY	0
#define GPUFPGA_DEV_RECOVERING	1
#define GPUFPGA_DEV_OFFLINE	2

/* Channel flags in gpufpga_info.h2c/c2h. */
#define GPUFPGA_CHAN_PRESENT	(1U << 0)
#define GPUFPGA_CHAN_STREAM	(1U << 1)	/* AXI4-Stream, else memory mapped */

/*
 * Pin kinds, also the bits of gpufpga_info.pin_kinds. 0 is no kind, so a
 * zeroed struct gpufpga_pin pins nothing.
 */
#define GPUFPGA_PIN_GPU		1	/* NVIDIA GPU virtual range (nvidia_p2p_get_pages) */
#define GPUFPGA_PIN_HOST	2	/* host virtual range (pin_user_pages) */
#define GPUFPGA_PIN_DMABUF	3	/* dma-buf fd, peer-to-peer attach */

/**
 * struct gpufpga_info - GPUFPGA_IOC_INFO: what the device and driver offer.
 * @abi_version:	GPUFPGA_ABI_VERSION of the driver.
 * @ip_version:		XDMA IP version code from the identifier registers.
 * @h2c:		per H2C channel, GPUFPGA_CHAN_* flags.
 * @c2h:		per C2H channel, GPUFPGA_CHAN_* flags.
 * @pin_kinds:		bit (1 << GPUFPGA_PIN_*) for each kind that works now;
 *			GPU pins need nvidia.ko (or a stand-in for it).
 * @card_mem_size:	end of the card (AXI) address window of memory-mapped
 *			channels, which starts at 0 (module parameter
 *			card_mem_size); 0 when not set, and memory-mapped
 *			transfers are then refused.
 * @max_desc_len:	largest descriptor the driver builds, bytes.
 * @max_descs:		descriptors per transfer (module parameter).
 * @max_segs:		segments per transfer.
 * @max_pins:		pins per file descriptor (module parameter).
 * @max_pinned:		pinned bytes per file descriptor (module parameter).
 * @max_pinned_total:	pinned bytes for the whole device (module parameter).
 * @pinned_total:	bytes pinned on the device now.
 * @default_timeout_ms:	timeout of a transfer that names none.
 * @max_queued:		asynchronous transfers per file, queued or unread.
 * @state:		GPUFPGA_DEV_*: whether the device takes work now.
 * @resets:		times the driver programmed the engine again after a
 *			function or bus reset, an AER recovery or a system
 *			sleep; what ran then ended with -ECONNRESET.
 * @errors:		uncorrectable PCIe (AER) errors reported to the driver.
 * @features:		GPUFPGA_FEATURE_*: what this driver does beyond ABI 1's
 *			first release (0 from a driver older than them).
 */
#define GPUFPGA_FEATURE_RESIDENT	(1U << 0)	/* GPUFPGA_STREAM_RESIDENT */

struct gpufpga_info {
	__u32 abi_version;
	__u32 ip_version;
	__u32 h2c[GPUFPGA_MAX_CHANNELS];
	__u32 c2h[GPUFPGA_MAX_CHANNELS];
	__u32 pin_kinds;
	__u32 max_desc_len;
	__u64 card_mem_size;
	__u32 max_descs;
	__u32 max_segs;
	__u32 max_pins;
	__u32 default_timeout_ms;
	__u64 max_pinned;
	__u64 max_pinned_total;
	__u64 pinned_total;
	__u32 max_queued;
	__u32 state;
	__u32 resets;
	__u32 errors;
	__u32 features;
	__u32 pad;
	__u64 reserved;
};

/* Pin flags. */
#define GPUFPGA_PIN_PERSISTENT	(1U << 0)	/* GPU: nvidia_p2p_get_pages_persistent, never revoked */
#define GPUFPGA_PIN_FLAGS	GPUFPGA_PIN_PERSISTENT

/**
 * struct gpufpga_pin - GPUFPGA_IOC_PIN: pin memory for DMA.
 * @kind:	in: GPUFPGA_PIN_*.
 * @flags:	in: GPUFPGA_PIN_* flags allowed for the kind.
 * @addr:	in: GPU or host virtual address; for a dma-buf, the byte offset
 *		into the buffer. Need not be aligned: the driver pins whole pages
 *		and remembers the offset.
 * @len:	in: bytes, > 0.
 * @fd:		in: the dma-buf, for GPUFPGA_PIN_DMABUF; else -1 (0 is a
 *		file descriptor like any other).
 * @pad:	must be 0.
 * @handle:	out: names the pin in later calls; never reused by this file.
 * @offset:	out: byte offset of @addr in the first pinned page.
 * @page_size:	out: bytes per page of the pin (65536 for NVIDIA GPUs).
 * @npages:	out: pages pinned.
 * @nruns:	out: runs of bus-contiguous pages.
 * @largest_run: out: pages in the longest run.
 *
 * Errors: -EINVAL (bad kind, flags, length or fd, a file that is not a
 * dma-buf, a range past the dma-buf's end, or a range NVIDIA refuses: the
 * kernel log names the reason), -EBADF (@fd is not open), -EOPNOTSUPP
 * (this pin kind is not available: no nvidia.ko, a dma-buf exporter that
 * refuses peer-to-peer, or host memory that DMA reaches only through
 * bounce buffers or cache maintenance, as under swiotlb=force, host
 * memory that cannot be pinned long-term such as fsdax, or GPU or dma-buf
 * memory at bus addresses past the engine's address bits), -EXDEV (a
 * dma-buf whose addresses the IOMMU translating for the FPGA does not map:
 * its exporter handed over raw PCIe addresses), -EKEYREVOKED (the GPU
 * memory was freed while it was being pinned), -EPERM (a revocable GPU
 * pin, that is GPUFPGA_PIN_GPU without GPUFPGA_PIN_PERSISTENT, by a caller
 * without CAP_SYS_RAWIO, unless the nv_revocable_pins parameter allows
 * it: NVIDIA's API lets a cudaFree racing such a pin corrupt kernel
 * memory), -ENOSPC (a pin limit would
 * be exceeded), -ENOMEM (also a host pin over RLIMIT_MEMLOCK without
 * CAP_IPC_LOCK), -EFAULT (host range
 * not mapped, not writable or not long-term pinnable; or the result could
 * not be written back, and the pin then lives until close), -EIO (NVIDIA or
 * the dma-buf exporter failed otherwise: the kernel log has its error),
 * -EINTR (a fatal signal).
 */
struct gpufpga_pin {
	__u32 kind;
	__u32 flags;
	__u64 addr;
	__u64 len;
	__s32 fd;
	__u32 pad;
	__u64 handle;
	__u64 offset;
	__u32 page_size;
	__u32 npages;
	__u32 nruns;
	__u32 largest_run;
	__u64 reserved[2];
};

/**
 * struct gpufpga_unpin - GPUFPGA_IOC_UNPIN.
 * @handle:	the pin.
 * @flags:	must be 0.
 * @pad:	must be 0.
 *
 * Errors: -EINVAL (@flags or @pad not 0), -ENOENT (no such handle in this
 * file), -EBUSY (transfers or a running stream use the pin). Unpinning a
 * revoked pin succeeds.
 */
struct gpufpga_unpin {
	__u64 handle;
	__u32 flags;
	__u32 pad;
};

/* Pin states. */
#define GPUFPGA_PIN_ACTIVE	0
#define GPUFPGA_PIN_REVOKED	1	/* the GPU memory was freed under the pin */

/**
 * struct gpufpga_query - GPUFPGA_IOC_QUERY: describe a pin.
 * @handle:	in: the pin.
 * @pages:	in: user pointer to __u64[@max_pages] for the bus address of
 *		each page, or 0. Needs CAP_SYS_ADMIN (-EPERM otherwise).
 * @max_pages:	in: room at @pages.
 * @flags:	in: must be 0.
 * @kind, @state, @addr, @len, @offset, @page_size, @npages, @nruns,
 * @largest_run: out, as at pin time; @state is GPUFPGA_PIN_*.
 * @inflight:	out: transfers queued or running on the pin.
 *
 * Errors: -EINVAL (@flags or reserved not 0), -EPERM (@pages without
 * CAP_SYS_ADMIN, checked before the handle), -ENOENT (no such handle in
 * this file).
 */
struct gpufpga_query {
	__u64 handle;
	__u64 pages;
	__u32 max_pages;
	__u32 flags;
	__u32 kind;
	__u32 state;
	__u64 addr;
	__u64 len;
	__u64 offset;
	__u32 page_size;
	__u32 npages;
	__u32 nruns;
	__u32 largest_run;
	__u32 inflight;
	__u32 pad;
	__u64 reserved[2];
};

/**
 * struct gpufpga_seg - one piece of a transfer: @len bytes at byte @offset
 * of the pinned range @handle (offset 0 is the pinned address itself).
 */
struct gpufpga_seg {
	__u64 handle;
	__u64 offset;
	__u64 len;
};

/* Transfer flags. */
#define GPUFPGA_XFER_ASYNC	(1U << 0)	/* return at once; complete through read() */
#define GPUFPGA_XFER_POLL	(1U << 1)	/* sync: spin on the engine's writeback */
#define GPUFPGA_XFER_FLAGS	(GPUFPGA_XFER_ASYNC | GPUFPGA_XFER_POLL)

/**
 * struct gpufpga_xfer - GPUFPGA_IOC_XFER: move data between pinned memory
 * and the card.
 * @dir:	in: GPUFPGA_H2C or GPUFPGA_C2H.
 * @channel:	in: channel number in that direction.
 * @flags:	in: GPUFPGA_XFER_*.
 * @nsegs:	in: entries at @segs, 1 to gpufpga_info.max_segs.
 * @segs:	in: user pointer to struct gpufpga_seg[@nsegs]; the transfer
 *		moves their bytes in order.
 * @card_addr:	in: card (AXI) address for a memory-mapped channel; the
 *		transfer must end inside gpufpga_info.card_mem_size. Must be 0
 *		for a stream channel.
 * @timeout_ms:	in: 0 for the default.
 * @eventfd:	in: with GPUFPGA_XFER_ASYNC, an eventfd signalled at completion,
 *		or -1 for none; -1 for a synchronous transfer.
 * @user_data:	in: returned with the completion.
 * @id:		out: the transfer's id (async), unique in this file.
 * @bytes:	out (sync): bytes moved.
 * @status:	out (sync): the channel's XDMA status register at the end.
 * @error:	out (sync): 0 or a negative errno, as returned.
 * @duration_ns: out (sync): from start on the engine to completion.
 * @descs:	out: descriptors the transfer used.
 *
 * A synchronous transfer returns when it is done, failed or timed out; of
 * signals only a fatal one ends the wait (the channel is halted first). With
 * GPUFPGA_XFER_POLL it waits by spinning on the engine's poll-mode
 * writeback word (PG195) instead of sleeping until the interrupt: the
 * lowest latency, for a busy CPU. Not with GPUFPGA_XFER_ASYNC. An asynchronous
 * one fails with -EAGAIN while gpufpga_info.max_queued of the file's
 * transfers are queued or finished but unread: read completions first.
 * Errors: -EINVAL (bad direction, channel, flags or their combination,
 * eventfd, a card address that is not 0 on a stream channel or that runs
 * past gpufpga_info.card_mem_size, a segment outside its pin, zero-length
 * or overflowing, or an address or length the channel's ALIGNMENTS
 * refuse), -ENXIO (a memory-mapped channel while
 * gpufpga_info.card_mem_size is 0), -EBADF (@eventfd is not open), -ENOENT
 * (unknown handle), -EBUSY (a stream runs on the channel), -EAGAIN (async:
 * gpufpga_info.max_queued unread), -ENOMEM, -EKEYREVOKED (a pin was
 * revoked, before or during the transfer), -E2BIG (more descriptors or
 * segments than the limits), -ETIMEDOUT (the engine stalled; it was halted
 * and @status says why), -EIO (the engine reported an error in @status),
 * -ENODEV (link down), -EINTR (a fatal signal: the caller is being killed),
 * -ECONNRESET (the card was reset, recovered from a PCIe error or went to
 * sleep while the transfer was queued or ran, or is being reset now: its
 * engine state was lost; submit it again).
 *
 * @status is every bit the channel's status register reported while the
 * transfer ran (a bit may come in any of several reads), without a BUSY
 * that lingered after the stop; a halted transfer's has the halt's BUSY.
 */
struct gpufpga_xfer {
	__u32 dir;
	__u32 channel;
	__u32 flags;
	__u32 nsegs;
	__u64 segs;
	__u64 card_addr;
	__u32 timeout_ms;
	__s32 eventfd;
	__u64 user_data;
	__u64 id;
	__u64 bytes;
	__u32 status;
	__s32 error;
	__u64 duration_ns;
	__u32 descs;
	__u32 pad;
	__u64 reserved[2];
};

/**
 * struct gpufpga_cancel - GPUFPGA_IOC_CANCEL: stop an async transfer. It
 * completes with -ECANCELED (unless it already completed).
 * Errors: -EINVAL (@flags or @pad not 0), -ENOENT (no such transfer
 * pending: unknown, or finished even if its record is unread).
 */
struct gpufpga_cancel {
	__u64 id;
	__u32 flags;
	__u32 pad;
};

/* Kinds of gpufpga_completion records; 0 is none. */
#define GPUFPGA_EVENT_XFER	1	/* an asynchronous transfer finished */
#define GPUFPGA_EVENT_SLOT	2	/* a stream slot was filled */
#define GPUFPGA_EVENT_STREAM_END 3	/* a stream stopped; error says why */

/* gpufpga_completion.flags of a slot. */
#define GPUFPGA_SLOT_EOP	(1U << 0)	/* the packet (frame) ended in it */

/**
 * struct gpufpga_completion - read() from the device returns whole records
 * of this; poll() reports POLLIN while any are waiting. A read with room
 * for none fails with -EINVAL; with none waiting it blocks, or fails with
 * -EAGAIN under O_NONBLOCK, or -EINTR when a signal interrupts it; a
 * record that cannot be copied out stays queued (-EFAULT). Once the device
 * is removed, the records queued before are still read, then read fails
 * with -ENODEV and poll() reports POLLERR | POLLHUP. Each field
 * means one thing; a field that does not apply to a kind is 0. The record
 * is 112 bytes in ABI 1 and grows only into @reserved.
 * @kind:	GPUFPGA_EVENT_*.
 * @flags:	SLOT: GPUFPGA_SLOT_*.
 * @dir:	the channel's direction.
 * @channel:	the channel.
 * @id:		XFER: the transfer's id. SLOT and STREAM_END: the stream's id
 *		(gpufpga_stream.id), which RELEASE and STOP name it by.
 * @user_data:	XFER: as submitted.
 * @seq:	SLOT and STREAM_END: the stream's fills reported before this
 *		record, so a slot's fill sequence number, from 0.
 * @slot:	SLOT: the slot's index.
 * @status:	XFER: as gpufpga_xfer.status. STREAM_END: every bit the
 *		channel's XDMA status register reported while the stream ran,
 *		with its halt's. SLOT: 0.
 * @bytes:	XFER: bytes moved (before the failure, if one). SLOT: bytes
 *		in the slot. STREAM_END: 0.
 * @error:	0 or a negative errno (a STREAM_END after a failure says why).
 * @pad:	0.
 * @duration_ns: XFER: from start on the engine to completion.
 * @timestamp_ns: when the driver saw it complete (CLOCK_MONOTONIC).
 * @reserved:	0; room to grow.
 */
struct gpufpga_completion {
	__u32 kind;
	__u32 flags;
	__u32 dir;
	__u32 channel;
	__u64 id;
	__u64 user_data;
	__u64 seq;
	__u32 slot;
	__u32 status;
	__u64 bytes;
	__s32 error;
	__u32 pad;
	__u64 duration_ns;
	__u64 timestamp_ns;
	__u64 reserved[4];
};

/**
 * struct gpufpga_stream - GPUFPGA_IOC_STREAM_START: run a C2H stream channel
 * continuously into a ring of slots. Each slot is one segment of pinned
 * memory, taking one descriptor per bus-contiguous run of it (at most
 * gpufpga_info.max_desc_len bytes each); the engine fills the slots in
 * order, and each fill arrives as a SLOT record on read(). A slot of one
 * descriptor takes one packet or slot-full; a slot of several must be
 * filled whole, so a packet (TLAST) that ends short of a descriptor's end
 * before the slot's last descriptor ends the stream with -EPROTO rather
 * than leave a hole in the slot: make packets as long as slots there. A
 * filled slot belongs to user space until released: the engine stops at
 * it rather than overwrite it, and data the FPGA cannot deliver
 * meanwhile is lost upstream, where the FPGA counts it. The stream ends
 * (a STREAM_END record) on STOP, on close, when a pin is revoked, or on an
 * engine error. It ends with -EOVERFLOW when a slot fills while its last
 * two SLOT records are still unread, or past gpufpga_info.max_queued
 * unread records on the file: read records before releasing their slots.
 *
 * Each stream has an id, never 0 and never reused while the module is
 * loaded, which its SLOT and STREAM_END records carry and which
 * STREAM_RELEASE and STREAM_STOP must name: a release or stop meant for a
 * stream that has ended fails with -ENOENT, even when another stream
 * (of the same file, on the same channel) runs by then. ABI 1's first
 * release numbered this call _IOW(GPUFPGA_IOC_MAGIC, 0x06, ...), and wrote
 * nothing back; that number is still taken, and only a stream it starts
 * may be released and stopped with an id of 0, meaning the file's stream
 * on the channel.
 * GPU-resident streams (GPUFPGA_STREAM_RESIDENT): no SLOT records. The
 * engine writes each fill's result (PG195's C2H writeback) into
 * @results, one struct gpufpga_slot_result per slot, where a consumer on
 * the GPU polls it, and the consumer publishes how many fills it has
 * consumed in a struct gpufpga_consumer at @consumer, which the driver
 * reads on the engine's interrupts, one every @coalesce fills, and on a
 * timer (module parameter resident_poll_us) while the engine is short of
 * credits: it grants credits up to consumed + @nslots. gpufpga_resident.h
 * holds the layout and the consumer's rules. Each slot must be a single
 * descriptor: one bus-contiguous run. The results live where the slots
 * do, so that the engine's writes reach both by one path: pins of the
 * same kind, for GPU pins of the same GPU (by a known UUID), for dma-bufs
 * of one exporter whose bus addresses fall in one PCI function's BARs
 * (where an IOMMU translates, the driver cannot tell, and refuses). Once
 * every check has passed, the driver sets consumer->consumed to 0 and
 * turns the function's relaxed ordering off (PCIe Device Control) while
 * resident streams run: a result must not pass its data. A consumer that
 * publishes more than the engine was let fill, or goes back, ends the
 * stream with -ERANGE; an engine count that moves past the credits
 * granted, with -EIO. STREAM_END's @seq is the fills the engine has
 * certainly made: those its count register, its poll-mode writeback or
 * the consumer's count shows. The kernel cannot see the GPU's ordering of
 * peer writes (CUDA's GPU_DIRECT_RDMA_WRITES_ORDERING): user space must
 * refuse this mode below CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER, as
 * pkg/stream's CUDA memory does. INFO's @features has
 * GPUFPGA_FEATURE_RESIDENT where the driver runs such streams.
 *
 * @channel:	a C2H stream channel with nothing queued or running.
 * @nslots:	1 to min(max_descs, 1023) (the engine's credit counter), which
 *		also bounds the descriptors of all slots together.
 * @slots:	user pointer to struct gpufpga_seg[@nslots].
 * @flags:	0 or GPUFPGA_STREAM_RESIDENT.
 * @pad:	must be 0.
 * @id:		out: the stream's id. Its value on input is ignored.
 * @reserved:	must be 0.
 * @results:	RESIDENT: @nslots results, 32-byte aligned, in one pin
 *		(@results.len at least @nslots * 32). Else all 0.
 * @consumer:	RESIDENT: a struct gpufpga_consumer, 64-byte aligned, in a
 *		host pin (@consumer.len at least 64). Else all 0.
 * @coalesce:	RESIDENT: fills per interrupt, 1 to @nslots; 0 picks
 *		@nslots / 4, between 1 and 64. Else 0.
 * @pad2:	must be 0.
 *
 * Errors: -EINVAL (not a C2H stream channel, unknown @flags, @pad, @pad2
 * or reserved not 0, @nslots 0, a slot outside its pin or zero-length, or
 * one the channel's ALIGNMENTS refuse; RESIDENT: a slot of several
 * descriptors, slots in different memories, @results or @consumer
 * misaligned, too short or in other memory than they must be, @coalesce
 * over @nslots; without RESIDENT, any of
 * @results, @consumer or @coalesce set), -EBUSY (a stream
 * of any file, or transfers queued or running, on the channel), -ENOENT
 * (unknown slot handle), -EKEYREVOKED (a slot's pin was revoked), -E2BIG
 * (too many slots or descriptors), -ENOMEM, -ENODEV (link down),
 * -ECONNRESET (the card is being reset). -ENOENT also names an unknown
 * @results or @consumer handle, -EKEYREVOKED a revoked one. A running
 * stream that a reset,
 * PCIe error recovery or system sleep interrupts ends with a STREAM_END
 * record whose error is -ECONNRESET: the slots filled before it were
 * reported, and user space starts the stream again.
 */
#define GPUFPGA_STREAM_RESIDENT	(1U << 0)	/* consumed on the GPU: see above */
#define GPUFPGA_STREAM_FLAGS	GPUFPGA_STREAM_RESIDENT

struct gpufpga_stream {
	__u32 channel;
	__u32 nslots;
	__u64 slots;
	__u32 flags;
	__u32 pad;
	__u64 id;
	__u64 reserved;
	struct gpufpga_seg results;
	struct gpufpga_seg consumer;
	__u32 coalesce;
	__u32 pad2;
};

/**
 * struct gpufpga_release - GPUFPGA_IOC_STREAM_RELEASE: hand filled slots
 * back to the engine.
 * @channel:	the stream's channel.
 * @nslots:	entries at @slots.
 * @slots:	user pointer to __u32 slot indices, each filled and not yet
 *		released (-EINVAL otherwise; nothing is released then).
 * @stream:	the stream's id (gpufpga_stream.id, or a SLOT record's @id).
 *
 * Errors: -EINVAL (not a C2H stream channel, @nslots 0 or over 1023, a bad
 * or repeated index, @stream 0 for a stream started with an id, a
 * GPU-resident stream, whose consumer releases through its count), -ENOENT
 * (no stream of this file with that id on the channel: it ended, as after
 * its STREAM_END, or another runs there now), -ENOMEM.
 */
struct gpufpga_release {
	__u32 channel;
	__u32 nslots;
	__u64 slots;
	__u64 stream;
};

/**
 * struct gpufpga_stream_stop - GPUFPGA_IOC_STREAM_STOP: halt the stream;
 * fills the engine finished first are reported, then STREAM_END.
 * @channel:	the stream's channel.
 * @flags:	must be 0.
 * @stream:	the stream's id, as for STREAM_RELEASE.
 *
 * Errors: -EINVAL (not a C2H stream channel, @flags not 0, @stream 0 for a
 * stream started with an id), -ENOENT (no stream of this file with that id
 * on the channel).
 */
struct gpufpga_stream_stop {
	__u32 channel;
	__u32 flags;
	__u64 stream;
};

/*
 * The FPGA's user interrupts: the XDMA IP's usr_irq_req lines, raised by the
 * user logic.
 */
#define GPUFPGA_USER_IRQS	16

/**
 * struct gpufpga_user_irq - GPUFPGA_IOC_USER_IRQ: arm and wait for the FPGA's user
 * interrupts.
 * @lines:	in: the usr_irq_req lines (bit n for line n, n < 16) to
 *		enable and wait for; not 0.
 * @msecs:	in: how long to wait for one of them; 0 does not wait.
 * @fired:	out: the lines of @lines that fired since this file last
 *		asked for them (the first call counts from the file's open).
 * @pad:	must be 0.
 * @counts:	out: each line's interrupts since the driver bound the card.
 *
 * Each call enables @lines in the IP. The interrupt handler masks a line
 * when it fires, as UIO does, so that a request held high cannot storm: the
 * next call enables it again, once the caller has served the user logic
 * (through its registers in the user BAR). Every fire is counted. With one MSI-X vector per line (the driver asks for them), the
 * vector says which line fired; where the lines share a vector (MSI, INTx,
 * too few vectors), the IP's request register does, so the user logic
 * must hold usr_irq_req high until the host serves it.
 *
 * Errors: -EINVAL (@lines 0 or past line 15, @pad not 0), -EAGAIN (none
 * fired, @msecs 0), -ETIMEDOUT (none fired in @msecs), -EINTR
 * (a signal), -ENODEV (the card is gone or its link is down),
 * -ECONNRESET (the card is being reset, or recovers from an error: wait
 * again once it is back).
 */
struct gpufpga_user_irq {
	__u32 lines;
	__u32 msecs;
	__u32 fired;
	__u32 pad;
	__u64 counts[GPUFPGA_USER_IRQS];
};

/* Unassigned in Documentation/userspace-api/ioctl/ioctl-number.rst. */
#define GPUFPGA_IOC_MAGIC	0xD6
#define GPUFPGA_IOC_INFO	_IOR(GPUFPGA_IOC_MAGIC, 0x00, struct gpufpga_info)
#define GPUFPGA_IOC_PIN		_IOWR(GPUFPGA_IOC_MAGIC, 0x01, struct gpufpga_pin)
#define GPUFPGA_IOC_UNPIN	_IOW(GPUFPGA_IOC_MAGIC, 0x02, struct gpufpga_unpin)
#define GPUFPGA_IOC_QUERY	_IOWR(GPUFPGA_IOC_MAGIC, 0x03, struct gpufpga_query)
#define GPUFPGA_IOC_XFER	_IOWR(GPUFPGA_IOC_MAGIC, 0x04, struct gpufpga_xfer)
#define GPUFPGA_IOC_CANCEL	_IOW(GPUFPGA_IOC_MAGIC, 0x05, struct gpufpga_cancel)
#define GPUFPGA_IOC_STREAM_START _IOWR(GPUFPGA_IOC_MAGIC, 0x06, struct gpufpga_stream)
#define GPUFPGA_IOC_STREAM_RELEASE _IOW(GPUFPGA_IOC_MAGIC, 0x07, struct gpufpga_release)
#define GPUFPGA_IOC_STREAM_STOP	_IOW(GPUFPGA_IOC_MAGIC, 0x08, struct gpufpga_stream_stop)
#define GPUFPGA_IOC_USER_IRQ	_IOWR(GPUFPGA_IOC_MAGIC, 0x09, struct gpufpga_user_irq)

#endif /* _UAPI_LINUX_GPUFPGA_H */
