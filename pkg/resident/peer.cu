// A producer on a second GPU that writes a ring in the consumer GPU's
// memory as an FPGA does: peer_produce, launched on the producer GPU with
// peer access to the consumer GPU, writes each fill's data into its slot,
// fences at system scope, and then writes the slot's PG195 result record,
// for fills k = 0, 1, ..., taking credits from the consumer index as the
// engine does (fill k waits until consumed + depth > k). peer_ping and
// peer_pong are the bare round trip between the two GPUs, to compare.
//
// Blocks claim fills in order from a counter (ctl->next) and write them at
// once, each one fill at a time: the fence that orders a fill's data
// before its result waits for the peer's acknowledgement, so one block
// makes at most one fill per fence, and many blocks keep the link busy.
// One thread (block 0's, where fills take credits) alone reads the
// consumer index across the link, as an engine's one credit reader does,
// and passes it on to the writing blocks in this GPU's memory.
// Results are written in claim order but may land out of it by the time
// of a fence; the consumer takes the filled prefix of the results, as it
// does from the engine. Every claimed fill is written, so the fills are
// 0..fills-1 with no hole.
//
// A rate paces the fills: fill k is not begun before t0 + k * period
// (%globaltimer, ns; period in ps), t0 being the first block's start.
//
// Every wait is bounded by timeout_ns of %globaltimer: a block that runs
// out writes an error code, the fill and what it last saw into ctl, and
// every block leaves.
//
// Regenerate the PTX with `make ptx` (PTX ISA 6.0, target sm_70, as
// resident.cu).

// From uapi/gpufpga_resident.h (as resident.cu).
#define GPUFPGA_RESULT_MAGIC 0x52b4
#define GPUFPGA_RESULT_MAGIC_SHIFT 16
#define GPUFPGA_RESULT_EOP 0x1
#define RESULT_READY (GPUFPGA_RESULT_MAGIC << GPUFPGA_RESULT_MAGIC_SHIFT | GPUFPGA_RESULT_EOP)

#define THREADS 256
#define GOLDEN 0x9e3779b97f4a7c15ull

// Error codes in ctl->status (peerStatus in peer.go).
#define PEER_CREDITS 1 // waiting for credits: consumed + depth > k
#define PEER_ROUND_TRIP 2 // waiting for the consumer index to pass fill k
#define PEER_DRAIN 3 // waiting for every fill to be consumed
#define PEER_PING 4 // peer_ping waiting for the answer to ping k
#define PEER_PONG 5 // peer_pong waiting for ping k
#define PEER_BACKWARDS 6 // a count read below a value it held before: at, then seen

typedef unsigned long long u64;
typedef unsigned int u32;

// The run's state, in the producer GPU's memory, zero at launch.
struct peer_ctl {
	u64 next; // fills claimed
	u64 t0; // the first block's start, %globaltimer ns
	u64 t_end; // the last fill written (alone), or consumed
	u64 fills; // fills written, once every block has left
	u64 status; // 0, or PEER_*: the first failure
	u64 at; // the fill it failed at
	u64 seen; // the consumer index (or answer) it last saw
	u64 exited; // blocks that have left
	u64 abort; // set with status: every block leaves
	// One-block runs (round trips): %clock64 beside t0 and t_end, on
	// the same multiprocessor, to turn the round trips' cycles into ns.
	u64 c0;
	u64 c_end;
	u64 credit; // the consumer index, as the credit poller last saw it
};

#include "resident_ops.cuh"

// Records the first failure and tells every block to leave.
__device__ static void fail(struct peer_ctl *ctl, u64 code, u64 k, u64 seen)
{
	if (atomicCAS(&ctl->status, 0ull, code) == 0) {
		st_volatile64(&ctl->at, k);
		st_volatile64(&ctl->seen, seen);
	}
	st_volatile64(&ctl->abort, 1);
	fence_sys();
}

// Waits until *p >= want (acquire, system scope, or GPU scope where
// local), up to timeout_ns or another block's failure; returns whether it
// got there, the last value in *seen. *p only grows: *seen holds a value
// it had before (0 for none), and a read below it fails the run
// (PEER_BACKWARDS), the consumer's count having gone backwards.
__device__ static bool wait_at_least(const u64 *p, u64 want, bool local, u64 timeout_ns, struct peer_ctl *ctl,
				     u64 *seen)
{
	const u64 t = globaltimer();
	u64 v, last = *seen, spins = 0;

	for (;;) {
		v = local ? ld_acquire_gpu(p) : ld_acquire_sys(p);
		if (v < last) {
			fail(ctl, PEER_BACKWARDS, last, v);
			*seen = v;
			return false;
		}
		last = v;
		if (v >= want)
			break;
		if ((++spins & 63) == 0 && (globaltimer() - t > timeout_ns || ld_volatile64(&ctl->abort))) {
			*seen = v;
			return false;
		}
	}
	*seen = v;
	return true;
}

// The credit poller (block 0's thread 0 where fills wait for credits):
// the one reader of the consumer index across the link, as an engine has
// one, copying it into ctl->credit for the writing blocks, until they
// have all left. Without it every writing block would poll the
// consumer's line across the link at once.
__device__ static void poll_credits(const u64 *consumer, struct peer_ctl *ctl)
{
	u64 last = 0;

	while (ld_volatile64(&ctl->exited) < gridDim.x - 1 && !ld_volatile64(&ctl->abort)) {
		const u64 v = ld_acquire_sys(consumer);

		if (v < last) {
			fail(ctl, PEER_BACKWARDS, last, v);
			return;
		}
		// The release passes on what the acquire saw: the
		// consumer's clear of each status before its index.
		if (v != last) {
			st_release_gpu(&ctl->credit, v);
			last = v;
		}
	}
}

__shared__ u64 s_k, s_t0;
__shared__ int s_go;

// One writing block's fills: claim, pace, take credits, write the data,
// fence, write the result; with rtt, wait for the consumer index to pass
// each fill.
__device__ static void write_fills(unsigned char *slots, u64 slot_size, u64 *results, u64 nslots, const u64 *consumer,
				   u64 nsrc, u64 max_fills, u64 duration_ns, u64 period_ps, u64 depth, u64 alone,
				   u64 *rtt, u64 timeout_ns, struct peer_ctl *ctl, bool poll)
{
	const u64 pairs = slot_size / 16;
	u64 credit = 0; // the consumer index last seen (thread 0)

	for (;;) {
		u64 k, src, p;
		unsigned char *slot;

		if (threadIdx.x == 0) {
			const u64 t0 = s_t0;
			int go = 0;

			k = 0;
			if (!ld_volatile64(&ctl->abort) && (duration_ns == 0 || globaltimer() - t0 < duration_ns)) {
				k = atomicAdd(&ctl->next, 1ull);
				go = k < max_fills;
			}
			if (go && period_ps) {
				const u64 at = t0 + k * period_ps / 1000;

				while (globaltimer() < at)
					;
			}
			if (go && !alone && credit + depth <= k &&
			    !wait_at_least(poll ? &ctl->credit : consumer, k + 1 - depth, poll, timeout_ns, ctl, &credit)) {
				fail(ctl, PEER_CREDITS, k, credit);
				go = 0;
			}
			s_k = k;
			s_go = go;
		}
		__syncthreads();
		if (!s_go)
			return;
		k = s_k;
		src = k % nsrc;
		slot = slots + (k % nslots) * slot_size;
		for (p = threadIdx.x; p < pairs; p += THREADS)
			st_v2(slot + p * 16, word(k, src, 2 * p), word(k, src, 2 * p + 1));
		// Each thread's data reaches the peer before the result that
		// the barrier lets thread 0 write.
		fence_sys();
		__syncthreads();
		if (threadIdx.x == 0) {
			const u64 t = globaltimer(), c = clock64();

			// The status and length in one store, as the engine's
			// writeback: a consumer that sees one sees both.
			st_volatile64(&results[(k % nslots) * 4], slot_size << 32 | RESULT_READY);
			if (rtt) {
				if (!wait_at_least(consumer, k + 1, false, timeout_ns, ctl, &credit)) {
					fail(ctl, PEER_ROUND_TRIP, k, credit);
				} else {
					const u64 c1 = clock64();

					rtt[2 * k] = globaltimer() - t;
					rtt[2 * k + 1] = c1 - c;
				}
			}
		}
	}
}

// The producer. Parameters (all 64-bit):
//   slots        the ring's first slot (the consumer GPU's memory)
//   slot_size    bytes from one slot to the next; every fill is that long
//   results      struct gpufpga_slot_result[nslots] (consumer GPU)
//   nslots       slots in the ring
//   consumer     the consumer index (struct gpufpga_consumer)
//   nsrc         the data pattern's period (> nslots)
//   max_fills    fills to write at most (~0: no bound)
//   duration_ns  claim no fill after t0 + duration_ns (0: no bound)
//   period_ps    fill k begins at t0 + k * period_ps / 1000 ns (0: unpaced)
//   depth        fills that may wait for the consumer at once (credits)
//   alone        nonzero: no consumer, no credits, no drain
//   rtt          depth 1: rtt[2k], rtt[2k + 1] = %globaltimer ns and
//                %clock64 cycles from fill k's result written to the
//                consumer index seen past it; 0 for none (one block)
//   timeout_ns   bound of every wait
//   ctl          struct peer_ctl (producer GPU), zero at launch
// With credits and no rtt, block 0 polls the credits and the other
// blocks write (at least two blocks); otherwise every block writes, and
// each waits for the consumer index itself.
extern "C" __global__ void __launch_bounds__(THREADS)
peer_produce(unsigned char *slots, u64 slot_size, u64 *results, u64 nslots, const u64 *consumer, u64 nsrc,
	     u64 max_fills, u64 duration_ns, u64 period_ps, u64 depth, u64 alone, u64 *rtt, u64 timeout_ns,
	     struct peer_ctl *ctl)
{
	const bool poll = !alone && !rtt;

	if (threadIdx.x == 0) {
		const u64 now = globaltimer();
		const u64 was = atomicCAS(&ctl->t0, 0ull, now);

		s_t0 = was ? was : now;
		if (rtt)
			st_volatile64(&ctl->c0, clock64());
	}
	__syncthreads();
	if (poll && blockIdx.x == 0) {
		if (threadIdx.x == 0)
			poll_credits(consumer, ctl);
	} else {
		write_fills(slots, slot_size, results, nslots, consumer, nsrc, max_fills, duration_ns, period_ps, depth,
			    alone, rtt, timeout_ns, ctl, poll);
	}
	if (threadIdx.x != 0)
		return;
	fence_sys();
	if (atomicAdd(&ctl->exited, 1ull) == gridDim.x - 1) {
		// The last block to leave: every claimed fill is written.
		const u64 claimed = atomicAdd(&ctl->next, 0ull);
		const u64 fills = claimed < max_fills ? claimed : max_fills;
		u64 seen = 0;

		if (!alone && !ld_volatile64(&ctl->abort) &&
		    !wait_at_least(consumer, fills, false, timeout_ns, ctl, &seen))
			fail(ctl, PEER_DRAIN, fills, seen);
		st_volatile64(&ctl->c_end, clock64());
		st_volatile64(&ctl->t_end, globaltimer());
		st_volatile64(&ctl->fills, fills);
		fence_sys();
	}
}

// The bare round trip from the producer GPU: for i = 1..n, store i to
// *ping (the consumer GPU's memory, release, system scope), wait until
// *pong (this GPU's memory) reaches i; rtt[2(i - 1)] and rtt[2(i - 1) + 1]
// are the %globaltimer ns and %clock64 cycles between.
extern "C" __global__ void peer_ping(u64 *ping, const u64 *pong, u64 n, u64 *rtt, u64 timeout_ns,
				     struct peer_ctl *ctl)
{
	u64 i, seen = 0;

	if (threadIdx.x != 0 || blockIdx.x != 0)
		return;
	st_volatile64(&ctl->c0, clock64());
	st_volatile64(&ctl->t0, globaltimer());
	for (i = 1; i <= n; i++) {
		const u64 t = globaltimer(), c = clock64();
		u64 c1;

		st_release_sys(ping, i);
		if (!wait_at_least(pong, i, false, timeout_ns, ctl, &seen)) {
			fail(ctl, PEER_PING, i, seen);
			break;
		}
		c1 = clock64();
		rtt[2 * (i - 1)] = globaltimer() - t;
		rtt[2 * (i - 1) + 1] = c1 - c;
	}
	st_volatile64(&ctl->c_end, clock64());
	st_volatile64(&ctl->t_end, globaltimer());
	st_volatile64(&ctl->fills, i - 1);
	fence_sys();
}

// Its other end, on the consumer GPU: for i = 1..n, wait until *ping (this
// GPU's memory) reaches i, then store i to *pong (the producer GPU's).
extern "C" __global__ void peer_pong(const u64 *ping, u64 *pong, u64 n, u64 timeout_ns, struct peer_ctl *ctl)
{
	u64 i, seen = 0;

	if (threadIdx.x != 0 || blockIdx.x != 0)
		return;
	for (i = 1; i <= n; i++) {
		if (!wait_at_least(ping, i, false, timeout_ns, ctl, &seen)) {
			fail(ctl, PEER_PONG, i, seen);
			break;
		}
		st_release_sys(pong, i);
	}
	st_volatile64(&ctl->fills, i - 1);
	fence_sys();
}
