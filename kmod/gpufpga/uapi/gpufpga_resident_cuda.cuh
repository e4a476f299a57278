/* SPDX-License-Identifier: MIT */
/*
 * A GPU-resident stream's consumer, written in CUDA: the device side of
 * gpufpga_resident.h, for a persistent kernel of one's own (nvcc, or
 * clang's CUDA mode). Installed as <gpufpga/gpufpga_resident_cuda.cuh>.
 *
 * The kernel: a grid of 1-D blocks, 1 + W of them, all resident at once
 * (W + 1 at most the GPU's multiprocessors). Block 0's first warp
 * publishes (gpufpga_warp_publisher, all 32 lanes), and a worker whose
 * fill is the next to publish publishes it itself; worker block
 * w (1..W) takes fills k = w - 1, w - 1 + W, w - 1 + 2W, ...:
 *
 *	__global__ void my_consumer(struct gpufpga_dev_ring r)
 *	{
 *		unsigned long long k, len;
 *
 *		if (blockIdx.x == 0) {
 *			if (threadIdx.x < 32)
 *				gpufpga_warp_publisher(&r);
 *			return;
 *		}
 *		for (k = blockIdx.x - 1; gpufpga_block_claim(&r, k, &len); k += gridDim.x - 1) {
 *			... every thread reads its part of gpufpga_slot(&r, k), len bytes ...
 *			gpufpga_block_release(&r, k);
 *		}
 *	}
 *
 * The host side: the ring, results and consumer word of a resident
 * stream (gpufpga.h's GPUFPGA_STREAM_RESIDENT); done[] and published in
 * GPU memory, zero at launch, for the header's functions alone (a fill
 * its worker published never appears in done[]: publish with the
 * header's publishers); stop a word of host memory mapped into the
 * GPU, zero at launch. Launch the kernel on a non-blocking stream
 * (cuStreamCreate with CU_STREAM_NON_BLOCKING) before the stream starts;
 * once the stream has ended and consumer->consumed has reached the fills
 * it made (STREAM_END's seq), store 1 to stop and wait for the kernel.
 * While the kernel runs, the CUDA calls that wait for the whole device
 * (cuMemFree, cuMemFreeHost, cuMemHostUnregister, cuModuleLoadData,
 * cuModuleUnload, cuCtxSynchronize) wait for it: allocate, load and free
 * before it starts or after it stopped.
 *
 * The memory-ordering rules, each where it applies below:
 *  - a result is read with acquire semantics at system scope
 *    (ld.acquire.sys), status and length in one 64-bit load, and the slot
 *    only after it: never read a slot, nor poll its result, ahead of the
 *    fill's result (gpufpga_wait_fill);
 *  - a slot's result is polled only once the fill before it in the same
 *    slot (k - nslots) is published, whose status was cleared before that:
 *    otherwise the old fill's status reads as the new one's;
 *  - the status is cleared before the fill is published, and the fill is
 *    published (a release at system scope, in order, never backwards)
 *    only once every read of its slot is done: the driver then lets the
 *    engine write the slot again (gpufpga_block_release, the publisher);
 *  - a fill's length is the engine's: check it against slot_size
 *    before reading that many bytes of the slot.
 * Requires sm_70 and PTX ISA 6.0 (ld.acquire, st.release and scopes).
 */
#ifndef _GPUFPGA_RESIDENT_CUDA_CUH
#define _GPUFPGA_RESIDENT_CUDA_CUH

#include "gpufpga_resident.h"

/* A resident stream's ring as the kernel sees it: pass it by value. */
struct gpufpga_dev_ring {
	unsigned char *slots;			/* slot 0; slot i at i * slot_size */
	unsigned long long slot_size;
	struct gpufpga_slot_result *results;	/* nslots results */
	unsigned long long nslots;
	struct gpufpga_consumer *consumer;	/* host memory mapped into the GPU */
	unsigned long long *done;		/* nslots words, GPU memory, zero at launch */
	unsigned long long *published;		/* one word, GPU memory, zero at launch */
	const unsigned int *stop;		/* host memory mapped into the GPU */
};

__device__ static inline unsigned long long gpufpga_ld_acquire_sys(const void *p)
{
	unsigned long long v;

	asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline unsigned long long gpufpga_ld_acquire_gpu(const void *p)
{
	unsigned long long v;

	asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline unsigned long long gpufpga_ld_relaxed_gpu(const void *p)
{
	unsigned long long v;

	asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void gpufpga_st_release_sys(void *p, unsigned long long v)
{
	asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void gpufpga_st_release_gpu(void *p, unsigned long long v)
{
	asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * A barrier for the whole block that threads may reach apart: thread 0
 * spins on the ring while the other threads of its warp wait here. The
 * barrier __syncthreads() compiles to (bar.sync, barrier.sync.aligned)
 * must be reached by a warp's threads together; one reached while a lane
 * still spins lets the others through early, on stale shared memory.
 */
__device__ static inline void gpufpga_block_barrier(void)
{
	asm volatile("barrier.sync 0;" ::: "memory");
}

__device__ static inline void gpufpga_st_relaxed_sys32(void *p, unsigned int v)
{
	asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static inline void gpufpga_st_relaxed_sys(void *p, unsigned long long v)
{
	asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * Whether the host has asked the kernel to stop: a read of host memory
 * across PCIe. Every spinning thread reading the one word at once makes
 * each read wait behind the others', tens of microseconds on a busy
 * link: spinners look at it only every GPUFPGA_STOP_POLLS polls that
 * found nothing. Stop is not an abort: store it only once the stream has
 * ended and everything it produced is published, and the kernel leaves
 * within that many polls.
 */
#ifndef GPUFPGA_STOP_POLLS
#define GPUFPGA_STOP_POLLS 1024
#endif
#if GPUFPGA_STOP_POLLS < 1
#error "GPUFPGA_STOP_POLLS must be at least 1"
#endif

__device__ static inline int gpufpga_stopping(const struct gpufpga_dev_ring *r)
{
	unsigned int v;

	asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(r->stop) : "memory");
	return v != 0;
}

/* Fill k's slot. Read it only after gpufpga_wait_fill(k) returned 1. */
__device__ static inline const unsigned char *gpufpga_slot(const struct gpufpga_dev_ring *r, unsigned long long k)
{
	return r->slots + (k % r->nslots) * r->slot_size;
}

/*
 * gpufpga_wait_fill, also giving in *head (if not NULL) a value this
 * ring's published held while the result was polled, for
 * gpufpga_release_head. Read beside every poll of the result, it adds
 * nothing to the fill's latency.
 */
__device__ static inline int gpufpga_wait_fill_head(const struct gpufpga_dev_ring *r, unsigned long long k,
						    unsigned long long *len, unsigned int *status,
						    unsigned long long *head)
{
	const struct gpufpga_slot_result *res = &r->results[k % r->nslots];
	unsigned long long v, h = 0;
	unsigned int polls = 0;

	while (k >= r->nslots && gpufpga_ld_acquire_gpu(r->published) < k - r->nslots + 1)
		if (++polls % GPUFPGA_STOP_POLLS == 0 && gpufpga_stopping(r))
			return 0;
	for (;;) {
		/* Before the acquire, which would hold it back. */
		if (head)
			h = gpufpga_ld_relaxed_gpu(r->published);
		v = gpufpga_ld_acquire_sys(res);
		if ((unsigned int)v >> GPUFPGA_RESULT_MAGIC_SHIFT == GPUFPGA_RESULT_MAGIC)
			break;
		if (++polls % GPUFPGA_STOP_POLLS == 0 && gpufpga_stopping(r))
			return 0;
	}
	*len = v >> 32;
	if (status)
		*status = (unsigned int)v;
	if (head)
		*head = h;
	return 1;
}

/*
 * One thread waits for fill k: first until the fill before it in the
 * slot is published (its status cleared), then for the result, with
 * ld.acquire.sys: the slot's data is visible once it returns 1, with
 * the fill's length in *len and its status (GPUFPGA_RESULT_EOP) in
 * *status if not NULL. Returns 0 if the host asked the kernel to stop
 * first.
 */
__device__ static inline int gpufpga_wait_fill(const struct gpufpga_dev_ring *r, unsigned long long k,
					       unsigned long long *len, unsigned int *status)
{
	return gpufpga_wait_fill_head(r, k, len, status, 0);
}

/*
 * One thread marks fill k consumed, once every read of its slot that
 * this thread made or synchronised with is done; head is a value this
 * ring's published held, read by this thread before the call (relaxed
 * will do: the fence below makes it an acquire). Any such value works,
 * since published cannot pass k until fill k is released; a value from
 * anywhere else could publish fills not yet consumed.
 *
 * The status is cleared first. Then, if head is k, every fill before k
 * is published and nothing after k can be until k is: this thread is
 * the only one that may move the count, and publishes k + 1 itself, to
 * the driver and then to the workers, without the hop through done[] to
 * the publisher. Its fence orders the reads of the slot and the clear
 * before the count, and makes the read of head an acquire of the store
 * that published k, so the driver's count never goes backwards.
 * Otherwise done[k] tells the publisher (release at GPU scope: the
 * publisher's release at system scope is cumulative over it). Returns
 * whether it published the fill itself.
 */
__device__ static inline int gpufpga_release_head(const struct gpufpga_dev_ring *r, unsigned long long k,
						  unsigned long long head)
{
	gpufpga_st_relaxed_sys32(&r->results[k % r->nslots].status, 0);
	if (head != k) {
		gpufpga_st_release_gpu(&r->done[k % r->nslots], k + 1);
		return 0;
	}
	asm volatile("fence.acq_rel.sys;" ::: "memory");
	gpufpga_st_relaxed_sys(&r->consumer->consumed, k + 1);
	gpufpga_st_release_gpu(r->published, k + 1);
	return 1;
}

/* gpufpga_release_head, reading published itself. */
__device__ static inline int gpufpga_release(const struct gpufpga_dev_ring *r, unsigned long long k)
{
	return gpufpga_release_head(r, k, gpufpga_ld_relaxed_gpu(r->published));
}

/*
 * What published held while thread 0 waited for the block's last claim,
 * and whose published it was: a kernel may claim on several rings, or
 * several fills, before it releases. Any value a ring's published held
 * before fill k's release will do for it (it cannot pass k until then);
 * another ring's will not. Claim and release in the same translation
 * unit: each has its own.
 */
static __shared__ struct {
	const unsigned long long *published;
	unsigned long long head;
} gpufpga_s_claim;

/*
 * gpufpga_wait_fill for a whole block: thread 0 waits, every thread gets
 * the length. Every thread of the block must call it. Returns 0 once
 * the host asked the kernel to stop. A block that waits for anything
 * else with one thread ends that wait with gpufpga_block_barrier(), not
 * __syncthreads().
 */
__device__ static inline int gpufpga_block_claim(const struct gpufpga_dev_ring *r, unsigned long long k,
						 unsigned long long *len)
{
	__shared__ unsigned long long s_len;
	__shared__ int s_ok;

	int ok;

	if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
		s_ok = gpufpga_wait_fill_head(r, k, &s_len, 0, &gpufpga_s_claim.head);
		/* A claim that found stop read no head of this ring. */
		gpufpga_s_claim.published = s_ok ? r->published : 0;
	}
	gpufpga_block_barrier();
	*len = s_len;
	ok = s_ok;
	/*
	 * s_len and s_ok are the next claim's: every thread has read them
	 * before thread 0 can write them again.
	 */
	gpufpga_block_barrier();
	return ok;
}

/*
 * gpufpga_release for a whole block: once every thread is done reading
 * (the barrier), thread 0 releases, publishing the fill itself where
 * every fill before it was published while it waited for the claim.
 * Every thread of the block must call it, after gpufpga_block_claim(k).
 * Returns, in thread 0, whether it published the fill itself (0 in the
 * other threads).
 */
__device__ static inline int gpufpga_block_release(const struct gpufpga_dev_ring *r, unsigned long long k)
{
	/* The barrier orders the block's reads before thread 0's release. */
	gpufpga_block_barrier();
	if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0)
		return 0;
	if (gpufpga_s_claim.published != r->published)
		return gpufpga_release(r, k);
	return gpufpga_release_head(r, k, gpufpga_s_claim.head);
}

/*
 * The publisher, the first warp of a 1-D block that takes no fills, all 32
 * lanes together (it votes and shuffles with a full mask): walks done[]
 * in fill order, 32 fills a round (lane i looks at fill pub + i), and
 * publishes how far every fill is done, to the driver
 * (consumer->consumed, st.release.sys) and to the workers (published),
 * once a round. One thread walking fill by fill makes a dependent load
 * per fill (gpufpga_publisher), and small slots wait on it. A worker
 * that finds its fill at the head publishes it itself
 * (gpufpga_release_head): each round also reads published and goes on
 * from there. It returns, in every lane, the count published, once the
 * host asked the kernel to stop and nothing more is done: store stop
 * only once everything produced has been published.
 */
__device__ static inline unsigned long long gpufpga_warp_publisher(const struct gpufpga_dev_ring *r)
{
	const unsigned int lane = threadIdx.x % 32;
	unsigned long long pub = 0;
	unsigned int idle = 0;	/* rounds that found nothing done */
	int from_worker = 0;	/* pub last came from a worker's publishing */

	for (;;) {
		const unsigned long long k = pub + lane;
		unsigned long long head = 0;
		unsigned int done, count;
		unsigned int stopping = 0;

		/*
		 * Read before done[]: a stop seen with nothing more done
		 * means everything produced is published.
		 */
		if (lane == 0 && idle % GPUFPGA_STOP_POLLS == GPUFPGA_STOP_POLLS - 1)
			stopping = gpufpga_stopping(r);
		/* Before the acquires below, not to wait for them. */
		if (lane == 0)
			head = gpufpga_ld_relaxed_gpu(r->published);
		/*
		 * Each lane's acquire synchronises with its fill's worker;
		 * lanes from nslots on would look at a slot twice.
		 */
		done = __ballot_sync(0xffffffff,
				     lane < r->nslots && gpufpga_ld_acquire_gpu(&r->done[k % r->nslots]) == k + 1);
		head = __shfl_sync(0xffffffff, head, 0);
		if (head > pub) {
			/*
			 * Workers published from pub on: nothing at pub is
			 * in done[], look again from head.
			 */
			pub = head;
			from_worker = 1;
			idle = 0;
			continue;
		}
		count = ~done ? __ffs(~done) - 1 : 32;	/* the done prefix */
		idle = count ? 0 : idle + 1;
		if (count) {
			pub += count;
			/*
			 * bar.warp.sync orders every lane's acquire before
			 * lane 0's releases, which are cumulative over it.
			 */
			__syncwarp();
			if (lane == 0) {
				/*
				 * Makes the read of a worker's count an
				 * acquire: its store to consumed lands first.
				 */
				if (from_worker)
					asm volatile("fence.acq_rel.gpu;" ::: "memory");
				gpufpga_st_release_sys(&r->consumer->consumed, pub);
				gpufpga_st_release_gpu(r->published, pub);
			}
			from_worker = 0;
		} else if (__shfl_sync(0xffffffff, stopping, 0)) {
			/*
			 * A worker's last count may reach published after
			 * consumed, which the host saw before it stopped.
			 */
			unsigned long long seen = 0;

			if (lane == 0)
				seen = gpufpga_ld_acquire_sys(&r->consumer->consumed);
			seen = __shfl_sync(0xffffffff, seen, 0);
			return seen > pub ? seen : pub;
		}
	}
}

/*
 * The publisher in exactly one thread of a block that takes no fills
 * (more would publish out of order): as
 * gpufpga_warp_publisher, fill by fill, a dependent load each, which
 * bounds the fills a second (about 2 M on an H200). For a kernel whose
 * block 0 cannot give a whole warp.
 */
__device__ static inline unsigned long long gpufpga_publisher(const struct gpufpga_dev_ring *r)
{
	unsigned long long pub = 0, head;
	unsigned int idle = 0;

	for (;;) {
		unsigned long long was = pub;
		int stopping = idle % GPUFPGA_STOP_POLLS == GPUFPGA_STOP_POLLS - 1 && gpufpga_stopping(r);

		/* Workers publish fills they find at the head: from there. */
		head = gpufpga_ld_acquire_gpu(r->published);
		if (head > pub)
			pub = head;
		while (gpufpga_ld_acquire_gpu(&r->done[pub % r->nslots]) == pub + 1)
			pub++;
		if (pub != was) {
			idle = 0;
			if (pub != head) {
				gpufpga_st_release_sys(&r->consumer->consumed, pub);
				gpufpga_st_release_gpu(r->published, pub);
			}
		} else if (stopping) {
			/* What the host saw: see gpufpga_warp_publisher. */
			const unsigned long long seen = gpufpga_ld_acquire_sys(&r->consumer->consumed);

			return seen > pub ? seen : pub;
		} else {
			idle++;
		}
	}
}

#endif /* _GPUFPGA_RESIDENT_CUDA_CUH */
