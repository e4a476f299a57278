/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * GPU-resident streams: the layout a consumer on the GPU shares with the
 * engine and the driver, and the rules it follows. A persistent GPU kernel
 * (or any program that can read the slot ring and the result array and
 * write one word of host memory) consumes a stream with no CPU work per
 * slot.
 *
 * The ring: nslots slots, filled in order. The k-th fill (k from 0) lands
 * in slot k % nslots, and the engine writes its result into
 * results[k % nslots] after the slot's data (PG195's C2H stream writeback).
 *
 * The consumer, for k = 0, 1, 2, ...:
 *  1. waits until results[k % nslots].status holds GPUFPGA_RESULT_MAGIC in
 *     its top half, reading it with acquire semantics at system scope
 *     (ld.acquire.sys, or a volatile load followed by __threadfence_system());
 *     status and length come in one write: read them as one 64-bit load;
 *  2. reads .length bytes of the slot (GPUFPGA_RESULT_EOP: a packet ended in
 *     it), and processes them;
 *  3. stores 0 to .status, so that the next fill of the slot is told from
 *     this one;
 *  4. stores k + 1 to consumer->consumed with release semantics at system
 *     scope (st.release.sys, or __threadfence_system() before a volatile
 *     store). It may do so for several slots at once.
 *
 * The driver never lets the engine fill a slot the consumer has not
 * released: it grants the engine credits up to consumed + nslots, on the
 * engine's coalesced interrupts and on a timer, with no system call per
 * slot. What the FPGA cannot send for want of a free slot it drops and
 * counts, as in every stream. The driver sets consumed to 0 before the
 * stream starts; one that goes back, or passes what the engine was let
 * fill (consumed + nslots as last granted), ends the stream with -ERANGE.
 * The results must be zero before the start: a status left from an
 * earlier stream would read as a fill.
 *
 * GPUFPGA_IOC_STREAM_START with GPUFPGA_STREAM_RESIDENT starts such a
 * stream (gpufpga.h): each slot one descriptor, results and consumer in
 * pinned memory. The stream ends as every stream does, with a STREAM_END
 * record on read(); the consumer stops once user space tells it to.
 *
 * Ordering: the engine writes a slot's data before its result. A GPU sees
 * a peer's writes into its own memory in that order only where
 * CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING is at least
 * CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER (100); elsewhere GPU-resident
 * mode is refused. The results live where the slots do: in the same GPU's
 * memory for slots in GPU memory (a result in host memory takes another
 * path than the data, and may be seen first), in host memory only for
 * slots in host memory.
 */
#ifndef _UAPI_GPUFPGA_RESIDENT_H
#define _UAPI_GPUFPGA_RESIDENT_H

#include <linux/types.h>

#define GPUFPGA_RESULT_MAGIC		0x52b4
#define GPUFPGA_RESULT_MAGIC_SHIFT	16
#define GPUFPGA_RESULT_EOP		0x1

/* One slot's result: PG195's C2H stream writeback record. */
struct gpufpga_slot_result {
	__u32 status;		/* MAGIC << MAGIC_SHIFT | EOP; 0 once consumed */
	__u32 length;		/* bytes the engine wrote into the slot */
	__u32 reserved[6];
};

/* The consumer's progress, in host memory the driver reads. */
struct gpufpga_consumer {
	__u64 consumed;		/* slots consumed since the stream started */
	__u64 reserved[7];	/* a 64-byte line of its own */
};

#endif /* _UAPI_GPUFPGA_RESIDENT_H */
