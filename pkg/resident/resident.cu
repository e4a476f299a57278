// GPU-resident consumer of a slot ring, following
// kmod/gpufpga/uapi/gpufpga_resident.h, and the kernels it is measured
// against.
//
// resident_consume is a persistent kernel of 1 + W blocks. Block 0's
// first warp, the dispatcher, alone reads the results, 32 fills at a
// time, each lane one result with ld.acquire.sys (the header's step 1),
// and hands each filled slot, in order, to a worker through GPU memory
// (ready[k % nslots] = k + 1, with its length). Worker block w (1..W) takes
// fills k = w - 1, w - 1 + W, ...: it waits for ready[] in GPU memory,
// verifies the slot's bytes (step 2) and marks it done in done[k % nslots].
// Block 0's second warp, the publisher, walks done[] in order, 32 fills
// at a time, each lane one fill: it stores 0 to each done fill's status
// (step 3) and stores how far every fill is done to consumer->consumed
// with st.release.sys (step 4), once for the done fills of each round. So
// one warp polls what the producer writes and another publishes what the
// driver reads, neither waiting behind the other's reads; the workers touch
// no memory outside the GPU but the slots, and need no system-scope fence
// per slot.
//
// A fill is polled only once its slot's previous fill is published, whose
// status the publisher cleared before that release: the dispatcher never
// takes the previous fill's result for this one's. Workers run at most nslots
// fills ahead of the publisher, so ready[] and done[] never hold two fills
// of a slot at once.
//
// Verification: the benchmark's pattern. Fill k of a slot of L bytes holds 64-bit words w[0] = k,
// w[1] = k % nsrc and w[i] = ((k % nsrc) + 1) * GOLDEN ^ i (i >= 2), with
// nsrc > nslots: the fill before it in the same slot (k - nslots) differs
// in every word, so data read before the result landed is caught wherever
// it lies. A slot whose length is not the ring's slot size, or whose words
// differ, counts as an error (the first one's k + 1 is kept), once for
// each chunk that finds it where several workers share a slot. Data is read
// with ld.global.cv (no L1, no stale line). FRM1 frames are checked by
// the built-in frame checker, a linked function (frames_func.cu).
//
// Stop: the host sets *stop once everything produced is consumed; the
// dispatcher, once nothing is in flight, tells the publisher how many
// fills there were and, once they are published, the workers (a flag in
// GPU memory); it waits for them to leave and leaves. Each block writes its
// counters (struct counters) back when it leaves; block 0's are the
// fills it published.
//
// check_slot is the CPU-driven path's per-slot kernel (the same
// verification, a grid per slot); pingpong answers the host's stores one
// by one (the bare CPU <-> GPU round trip); null_kernel is an empty launch.
//
// Regenerate the PTX with `make ptx` (PTX ISA 6.0, target sm_70: ld.acquire,
// st.release and their scopes need both).

// From uapi/gpufpga_resident.h (kept equal by TestCudaSourceFollowsHeader).
#define GPUFPGA_RESULT_MAGIC 0x52b4
#define GPUFPGA_RESULT_MAGIC_SHIFT 16
#define GPUFPGA_RESULT_EOP 0x1

#define THREADS 256
#define GOLDEN 0x9e3779b97f4a7c15ull

typedef unsigned long long u64;
typedef unsigned int u32;

// struct gpufpga_slot_result: status in the low half of the first 8 bytes.
struct slot_result {
	u32 status;
	u32 length;
	u32 reserved[6];
};

// One block's counters, in host memory mapped into the GPU (64 bytes).
struct counters {
	u64 slots;
	u64 bytes;
	u64 errors;
	u64 first_error; // k + 1 of the first bad fill, 0 for none
	u64 reserved[4];
};

#include "resident_ops.cuh"

__shared__ u64 s_length;
__shared__ int s_stop;

// GPU memory the blocks share, zero at launch.
struct state {
	u32 exited; // workers that have left
	u32 quit;   // set by block 0: leave
	u64 pad[7];
	// then u64 ready[nslots], done[nslots], length[nslots], chunks_done[nslots]
};

// Block 0's shared view of the control warps' progress.
__shared__ volatile u64 s_pub;   // published, by the publisher (release, cta)
__shared__ volatile u64 s_final; // fills dispatched in all, once stopping
__shared__ volatile int s_stopping, s_pub_done;

// s_pub with release and acquire semantics within the block: the
// publisher's clears of the statuses happen before the dispatcher's reads
// of the same results. Without them, a clear still on its way to host
// memory lost to the dispatcher's next read, and the previous fill's
// status was taken for the new one's.
__device__ static inline void st_release_cta(volatile u64 *p, u64 v)
{
	asm volatile("st.release.cta.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline u64 ld_acquire_cta(const volatile u64 *p)
{
	u64 v;

	asm volatile("ld.acquire.cta.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

// The dispatcher (warp 0): reads results 32 at a time, hands filled slots
// to the workers in order; once nothing is in flight and *stop is set, it
// tells the publisher how many fills there were.
__device__ static void dispatch(struct slot_result *results, u64 nslots, const u32 *stop, u64 *ready,
				u64 *length)
{
	const u32 lane = threadIdx.x;
	u64 disp = 0;

	for (;;) {
		const u64 pub = ld_acquire_cta(&s_pub);
		u64 n = pub + nslots - disp, v = 0;
		u32 mask, count;

		if (n > 32)
			n = 32;
		if (lane < n)
			v = ld_acquire_sys(&results[(disp + lane) % nslots]);
		mask = __ballot_sync(0xffffffff, lane < n && (u32)v >> GPUFPGA_RESULT_MAGIC_SHIFT == GPUFPGA_RESULT_MAGIC);
		count = ~mask ? __ffs(~mask) - 1 : 32; // the filled prefix
		if (lane < count) {
			u64 k = disp + lane;

			length[k % nslots] = v >> 32;
			st_release_gpu(&ready[k % nslots], k + 1);
		}
		disp += count;
		if (count == 0 && pub == disp) {
			u32 s = 0;

			if (lane == 0)
				s = ld_volatile32(stop);
			if (__shfl_sync(0xffffffff, s, 0))
				break;
		}
	}
	if (lane == 0) {
		s_final = disp;
		s_stopping = 1;
	}
}

// bar.warp.sync: the warp's lanes meet, and their memory accesses before
// it are ordered before those after it (as __syncwarp).
__device__ static inline void warp_sync(void)
{
	asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}

// The sum of v over the warp's 32 lanes, in every lane.
__device__ static inline u64 warp_sum(u64 v)
{
	int i;

	for (i = 16; i; i >>= 1) {
		u32 lo, hi;

		asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(lo) : "r"((u32)v), "r"(i));
		asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
			     : "=r"(hi)
			     : "r"((u32)(v >> 32)), "r"(i));
		v += (u64)hi << 32 | lo;
	}
	return v;
}

// The publisher (warp 1, all 32 lanes): walks done[] in order, 32 fills a
// round, lane i fill pub + i; clears each done fill's status and publishes
// how far every fill is done; it never waits behind the dispatcher's reads
// of the results. Every lane keeps pub and the stop decision alike (both
// come from ballots and shuffles), so the warp
// never diverges at a collective; each lane sums its own fills' bytes.
__device__ static void publish(struct slot_result *results, u64 nslots, u64 *consumer, u64 *done,
			       const u64 *length, struct counters *out)
{
	const u32 lane = threadIdx.x % 32;
	u64 pub = 0, at = 0, bytes = 0; // at: pub % nslots

	for (;;) {
		const u64 k = pub + lane, s = at + lane < nslots ? at + lane : at + lane - nslots;
		u32 mask, count;
		int leave = 0;

		// Each lane's acquire orders its own fill's loads below after
		// the worker's release of done. Lanes from nslots on would
		// read slots twice (and s is k % nslots only below that); their
		// fills are not dispatched before pub's is published anyway.
		mask = __ballot_sync(0xffffffff, lane < nslots && ld_acquire_gpu(&done[s]) == k + 1);
		count = ~mask ? __ffs(~mask) - 1 : 32; // the done prefix, at most nslots
		if (lane < count) {
			bytes += length[s];
			st_volatile32(&results[s].status, 0);
		}
		if (count) {
			const u64 was = pub;

			pub += count;
			at = at + count < nslots ? at + count : at + count - nslots;
			// The host reads how many bytes while the kernel runs:
			// every 64 fills, not to add a PCIe write to each batch.
			if (pub >> 6 != was >> 6) {
				const u64 sum = warp_sum(bytes);

				if (lane == 0)
					st_volatile64(&out->bytes, sum);
			}
			// The barrier orders every lane's clears before lane 0's
			// release, which orders them before the index, and before
			// s_pub lets the dispatcher read the slots again.
			warp_sync();
			if (lane == 0) {
				st_release_sys(consumer, pub);
				st_release_cta(&s_pub, pub);
			}
			continue;
		}
		if (lane == 0)
			leave = s_stopping && pub == s_final;
		if (__shfl_sync(0xffffffff, (u32)leave, 0))
			break;
	}
	bytes = warp_sum(bytes);
	if (lane == 0) {
		st_volatile64(&out->bytes, bytes);
		s_pub_done = 1;
	}
}

// Block 0: the dispatcher and the publisher; then, once both are done,
// the workers are told to leave and waited for.
__device__ static void control(struct slot_result *results, u64 nslots, u64 *consumer, const u32 *stop,
			       struct state *st, u64 *ready, u64 *done, u64 *length, u32 workers,
			       struct counters *out)
{
	if (threadIdx.x == 0) {
		s_pub = 0;
		s_final = 0;
		s_stopping = 0;
		s_pub_done = 0;
	}
	__syncthreads();
	if (threadIdx.x < 32) {
		dispatch(results, nslots, stop, ready, length);
	} else {
		if (threadIdx.x < 64)
			publish(results, nslots, consumer, done, length, out);
		return;
	}
	if (threadIdx.x == 0) {
		while (!s_pub_done)
			;
		st_volatile32(&st->quit, 1);
		while (ld_volatile32(&st->exited) != workers)
			;
		st_volatile64(&out->slots, s_pub);
		fence_sys();
	}
}

// The persistent consumer. Parameters (all 64-bit):
//   slots        the ring's first slot (GPU memory, or host memory mapped
//                into the GPU)
//   slot_size    bytes from one slot to the next; every fill is that long
//   results      struct gpufpga_slot_result[nslots] (host memory mapped
//                into the GPU, or GPU memory)
//   nslots       slots in the ring
//   consumer     struct gpufpga_consumer (host memory mapped into the GPU)
//   stop         a u32 the host sets to end the kernel (host memory)
//   state        struct state and its arrays, GPU memory, zero at launch
//   counters     struct counters[gridDim.x] (host memory)
//   nsrc         the data pattern's period (> nslots)
//   delay        cycles each worker holds each slot before reading it (a
//                slow consumer, for tests); 0 for none
//   chunks       workers that share each slot (1 to W): large slots are
//                read by several blocks at once
extern "C" __global__ void __launch_bounds__(THREADS)
resident_consume(unsigned char *slots, u64 slot_size, struct slot_result *results, u64 nslots,
		 u64 *consumer, u32 *stop, struct state *st, struct counters *counters, u64 nsrc, u64 delay,
		 u64 chunks)
{
	const u32 workers = gridDim.x - 1;
	u64 *ready = (u64 *)(st + 1), *done = ready + nslots, *length = done + nslots;
	u64 *chunks_done = length + nslots;
	struct counters c = {0, 0, 0, 0, {0, 0, 0, 0}};
	u64 j;

	if (blockIdx.x == 0) {
		control(results, nslots, consumer, stop, st, ready, done, length, workers, &counters[0]);
		return;
	}
	// Work item j is chunk j % chunks of fill j / chunks.
	for (j = blockIdx.x - 1;; j += workers) {
		const u64 k = j / chunks, ch = j % chunks;
		const unsigned char *slot = slots + (k % nslots) * slot_size;
		u64 len, lo, hi;
		int bad;

		if (threadIdx.x == 0) {
			int stopped = 0;

			while (ld_acquire_gpu(&ready[k % nslots]) != k + 1) {
				if (ld_volatile32(&st->quit)) {
					stopped = 1;
					break;
				}
			}
			s_stop = stopped;
			s_length = stopped ? 0 : length[k % nslots];
			if (delay && !stopped) {
				// A slow consumer: the slot is held before it is
				// read, so a producer that overran it would be seen.
				u64 t = clock64();

				while (clock64() - t < delay)
					;
			}
		}
		__syncthreads();
		if (s_stop)
			break;
		len = s_length;
		lo = len / 16 * ch / chunks;
		hi = len / 16 * (ch + 1) / chunks;
		bad = len != slot_size || len % 16 != 0;
		if (!bad)
			bad = verify(slot, lo, hi, k, nsrc, threadIdx.x, THREADS);
		bad = __syncthreads_or(bad);
		if (threadIdx.x == 0) {
			c.slots += ch == 0;
			c.bytes += (hi - lo) * 16 + (ch == 0 ? len % 16 : 0);
			if (bad) {
				if (c.errors == 0)
					c.first_error = k + 1;
				c.errors++;
			}
			// The fill is done when its last chunk is: every
			// chunk fences before its count, the last one after,
			// and the release of done orders them (one chunk: the
			// release alone does).
			if (chunks == 1) {
				st_release_gpu(&done[k % nslots], k + 1);
			} else {
				fence_gpu();
				if (atomicAdd(&chunks_done[k % nslots], 1ull) == chunks - 1) {
					fence_gpu();
					chunks_done[k % nslots] = 0;
					st_release_gpu(&done[k % nslots], k + 1);
				}
			}
		}
	}
	if (threadIdx.x == 0) {
		st_volatile64(&counters[blockIdx.x].slots, c.slots);
		st_volatile64(&counters[blockIdx.x].bytes, c.bytes);
		st_volatile64(&counters[blockIdx.x].errors, c.errors);
		st_volatile64(&counters[blockIdx.x].first_error, c.first_error);
		fence_sys();
		atomicAdd(&st->exited, 1);
	}
}

// The CPU-driven path's work for one slot: fill k's verification over the
// whole grid. Counters (GPU memory, struct counters) gain the slot from
// block 0 and an error from each block that finds one.
extern "C" __global__ void __launch_bounds__(THREADS)
check_slot(const unsigned char *slot, u64 len, u64 k, u64 nsrc, u64 slot_size, struct counters *c)
{
	int bad = len != slot_size || len % 16 != 0;

	if (!bad)
		bad = verify(slot, 0, len / 16, k, nsrc, (u64)blockIdx.x * THREADS + threadIdx.x, (u64)gridDim.x * THREADS);
	bad = __syncthreads_or(bad);
	if (threadIdx.x != 0)
		return;
	if (blockIdx.x == 0) {
		c->slots++;
		c->bytes += len;
	}
	if (bad) {
		atomicAdd(&c->errors, 1ull);
		atomicCAS(&c->first_error, 0ull, k + 1);
	}
}

// The bare round trip: for i = 1..n, wait until *ping >= i (acquire,
// system scope), then store i to *pong (release, system scope).
extern "C" __global__ void pingpong(const u64 *ping, u64 *pong, u64 n)
{
	u64 i;

	if (threadIdx.x != 0 || blockIdx.x != 0)
		return;
	for (i = 1; i <= n; i++) {
		while (ld_acquire_sys(ping) < i)
			;
		st_release_sys(pong, i);
	}
}

extern "C" __global__ void null_kernel(void)
{
}
