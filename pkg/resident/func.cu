// The persistent consumer that runs a function of the user's on every
// fill: the header's kernel (kmod/gpufpga/uapi/gpufpga_resident_cuda.cuh),
// linked with the user's PTX by the driver's JIT linker (resident.LinkFunc).
//
// The user's PTX defines
//
//   extern "C" __device__ int gpufpga_process(const unsigned char *slot,
//	unsigned long long len, unsigned long long k, void *state, void *out);
//
// Every thread of a worker block (256 threads, blockDim.x) calls it once
// for fill k, whose len bytes are at slot: it shares the slot's work by
// threadIdx.x, may use __syncthreads (every thread calls it), and returns
// non-zero for a fill it finds bad (counted as an error). A fill longer
// than its slot is counted bad, the function not called and the record
// zeroed. state is the
// user's device memory, the same for every fill (0 if none); out is fill
// k's record of out_size bytes in host memory mapped into the GPU (0 if
// none), which the host reads once fill k is published: the worker waits
// until the host has read fill k - out_depth's (ctl->out_read) before it
// calls the function for fill k, so no record is overwritten unread.
//
// Parameters, all 64-bit: slots, slot_size, results, nslots, consumer as
// the header's ring; done: nslots + 1 words of GPU memory, zero at launch
// (the header's done[] and published); ctl: struct ctl, host memory
// mapped into the GPU; state, out, out_size, out_depth.
//
// Regenerate the PTX with `make ptx`.
#include "../../kmod/gpufpga/uapi/gpufpga_resident_cuda.cuh"

#define THREADS 256

typedef unsigned long long u64;
typedef unsigned int u32;

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out);

// One block's counters (64 bytes), as resident.cu's.
struct counters {
	u64 slots;
	u64 bytes;
	u64 errors;
	u64 first_error; // k + 1 of the first bad fill, 0 for none
	u64 heads;       // fills the block published itself, at the head
	u64 reserved[3];
};

struct ctl {
	u32 stop;     // the host: leave
	u32 pad;
	u64 out_read; // the host: records of fills below this are read
	u64 reserved[6];
	struct counters c[]; // one per block; block 0's slots: fills published
};

__device__ static inline void st_volatile64(void *p, u64 v)
{
	asm volatile("st.volatile.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS)
resident_func(unsigned char *slots, u64 slot_size, struct gpufpga_slot_result *results, u64 nslots,
	      struct gpufpga_consumer *consumer, u64 *done, struct ctl *ctl, void *state, unsigned char *out,
	      u64 out_size, u64 out_depth)
{
	struct gpufpga_dev_ring r = {slots, slot_size, results, nslots, consumer, done, done + nslots, &ctl->stop};
	struct counters c = {0, 0, 0, 0, 0, {0, 0, 0}};
	__shared__ int s_go;
	u64 k, len, i, out_read = 0; // out_read: thread 0's

	if (blockIdx.x == 0) {
		if (threadIdx.x < 32) {
			const u64 published = gpufpga_warp_publisher(&r);

			if (threadIdx.x == 0) {
				st_volatile64(&ctl->c[0].slots, published);
				asm volatile("fence.sc.sys;" ::: "memory");
			}
		}
		return;
	}
	for (k = blockIdx.x - 1; gpufpga_block_claim(&r, k, &len); k += gridDim.x - 1) {
		unsigned char *rec;
		int bad;

		if (threadIdx.x == 0) {
			// Fill k's record is free once the host has read
			// fill k - out_depth's. What the host had read is
			// kept: a read of host memory per fill would add a
			// PCIe round trip to each.
			unsigned int polls = 0;

			s_go = 1;
			while (out_depth && out_read + out_depth < k + 1) {
				out_read = gpufpga_ld_acquire_sys(&ctl->out_read);
				if (out_read + out_depth < k + 1 && ++polls % GPUFPGA_STOP_POLLS == 0 &&
				    gpufpga_stopping(&r)) {
					s_go = 0;
					break;
				}
			}
		}
		// Thread 0 may have spun: a barrier its warp reaches apart.
		gpufpga_block_barrier();
		if (!s_go)
			break;
		rec = out_depth ? out + (k % out_depth) * out_size : 0;
		if (len > slot_size) {
			// The engine's or the driver's fault: the fill is
			// bad, no function reads past its slot, and its
			// record reads as zeros.
			for (i = threadIdx.x; rec && i < out_size / 8; i += blockDim.x)
				((u64 *)rec)[i] = 0;
			bad = 1;
		} else {
			bad = gpufpga_process(gpufpga_slot(&r, k), len, k, state, rec);
		}
		bad = __syncthreads_or(bad);
		if (threadIdx.x == 0) {
			c.slots++;
			c.bytes += len > slot_size ? 0 : len;
			// The host reads the bytes while the kernel runs:
			// every 16 fills, not to add a PCIe write to each.
			if (c.slots % 16 == 0)
				st_volatile64(&ctl->c[blockIdx.x].bytes, c.bytes);
			if (bad) {
				if (c.errors == 0)
					c.first_error = k + 1;
				c.errors++;
			}
			// The record, written by any thread of the block (the
			// barrier above), is in host memory the host reads once
			// the fill is published: fenced at system scope first.
			if (out_depth)
				asm volatile("fence.acq_rel.sys;" ::: "memory");
		}
		c.heads += gpufpga_block_release(&r, k);
	}
	if (threadIdx.x == 0) {
		st_volatile64(&ctl->c[blockIdx.x].slots, c.slots);
		st_volatile64(&ctl->c[blockIdx.x].bytes, c.bytes);
		st_volatile64(&ctl->c[blockIdx.x].errors, c.errors);
		st_volatile64(&ctl->c[blockIdx.x].first_error, c.first_error);
		st_volatile64(&ctl->c[blockIdx.x].heads, c.heads);
		asm volatile("fence.sc.sys;" ::: "memory");
	}
}
