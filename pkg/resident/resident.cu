// GPU-resident consumer of a slot ring, following
// kmod/gpufpga/uapi/gpufpga_resident.h, and the kernels it is measured
// against.
//
// resident_consume is a persistent kernel of W + 1 blocks. Worker block b
// (b < W) consumes fills k = b, b + W, b + 2W, ...: its thread 0 waits for
// results[k % nslots].status to hold the magic, reading it with
// ld.acquire.sys (the header's step 1); the block verifies the slot's
// bytes (step 2); thread 0 stores 0 to the status (step 3), fences at
// system scope and marks the fill done in done[k % nslots] (k + 1, GPU
// memory). The last block publishes: one thread walks done[] in order and
// stores how far every fill is done to consumer->consumed with
// st.release.sys (step 4), once for as many slots as are done by then, so
// that under load one store covers several slots and at one slot in flight
// none waits. Workers run ahead of the publisher by at most nslots fills
// (the producer fills no slot the publisher has not released), so done[]
// never holds two fills of a slot at once.
//
// Verification: fill k of a slot of L bytes holds 64-bit words w[0] = k,
// w[1] = k % nsrc and w[i] = ((k % nsrc) + 1) * GOLDEN ^ i (i >= 2), with
// nsrc > nslots: the fill before it in the same slot (k - nslots) differs
// in every word, so data read before the result landed is caught wherever
// it lies. A slot whose length is not the ring's slot size, or whose words
// differ, counts as an error (the first one's k + 1 is kept). Data is read
// with ld.global.cv (no L1, no stale line).
//
// Stop: the host sets *stop once everything produced is consumed; workers
// leave while waiting for a result, the publisher once every worker has
// left and nothing more is done. Each block writes its counters (struct
// counters) back when it leaves.
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

__device__ static inline u64 ld_acquire_sys(const void *p)
{
	u64 v;
	asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline u64 ld_acquire_gpu(const void *p)
{
	u64 v;
	asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline u32 ld_volatile32(const void *p)
{
	u32 v;
	asm volatile("ld.volatile.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void st_release_sys(void *p, u64 v)
{
	asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void st_release_gpu(void *p, u64 v)
{
	asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void st_volatile32(void *p, u32 v)
{
	asm volatile("st.volatile.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static inline void st_volatile64(void *p, u64 v)
{
	asm volatile("st.volatile.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void fence_sys(void)
{
	asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ static inline void ld_cv2(const void *p, u64 *a, u64 *b)
{
	asm volatile("ld.global.cv.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}

__device__ static inline u64 clock64(void)
{
	u64 v;
	asm volatile("mov.u64 %0, %%clock64;" : "=l"(v));
	return v;
}

// Expected word i of fill k.
__device__ static inline u64 word(u64 k, u64 src, u64 i)
{
	if (i == 0)
		return k;
	if (i == 1)
		return src;
	return (src + 1) * GOLDEN ^ i;
}

// Whether the 16-byte pairs [first, len / 16) of the slot, stepping by
// stride, all hold fill k's words. len is a multiple of 16.
__device__ static bool verify(const unsigned char *slot, u64 len, u64 k, u64 nsrc, u64 first, u64 stride)
{
	const u64 src = k % nsrc;
	const u64 pairs = len / 16;
	bool bad = false;
	u64 p = first;

	for (; p + 3 * stride < pairs; p += 4 * stride) {
		u64 a[4], b[4];
		int j;

		for (j = 0; j < 4; j++)
			ld_cv2(slot + (p + j * stride) * 16, &a[j], &b[j]);
		for (j = 0; j < 4; j++) {
			u64 i = 2 * (p + j * stride);

			bad |= a[j] != word(k, src, i) || b[j] != word(k, src, i + 1);
		}
	}
	for (; p < pairs; p += stride) {
		u64 a, b;

		ld_cv2(slot + p * 16, &a, &b);
		bad |= a != word(k, src, 2 * p) || b != word(k, src, 2 * p + 1);
	}
	return bad;
}

__shared__ u64 s_length;
__shared__ int s_stop;

// The persistent consumer. Parameters (all 64-bit):
//   slots        the ring's first slot (GPU memory, or host memory mapped
//                into the GPU)
//   slot_size    bytes from one slot to the next; every fill is that long
//   results      struct gpufpga_slot_result[nslots]
//   nslots       slots in the ring
//   consumer     struct gpufpga_consumer (host memory mapped into the GPU)
//   stop         a u32 the host sets to end the kernel (host memory)
//   done         u64[nslots] of GPU memory, zero at launch
//   exited       a u32 of GPU memory, zero at launch
//   counters     struct counters[gridDim.x] (host memory)
//   nsrc         the data pattern's period (> nslots)
//   delay        cycles each worker holds each slot before reading it (a
//                slow consumer, for tests); 0 for none
extern "C" __global__ void __launch_bounds__(THREADS)
resident_consume(unsigned char *slots, u64 slot_size, struct slot_result *results, u64 nslots,
		 u64 *consumer, u32 *stop, u64 *done, u32 *exited, struct counters *counters, u64 nsrc,
		 u64 delay)
{
	const u32 workers = gridDim.x - 1;
	struct counters c = {0, 0, 0, 0, {0, 0, 0, 0}};
	u64 k;

	if (blockIdx.x == workers) {
		// The publisher: one thread.
		u64 pub = 0;

		if (threadIdx.x != 0)
			return;
		for (;;) {
			u64 was = pub;

			while (ld_acquire_gpu(&done[pub % nslots]) == pub + 1)
				pub++;
			if (pub != was) {
				st_release_sys(consumer, pub);
				continue;
			}
			if (ld_volatile32(stop) && ld_volatile32(exited) == workers) {
				fence_sys();
				while (ld_acquire_gpu(&done[pub % nslots]) == pub + 1)
					pub++;
				if (pub != was)
					st_release_sys(consumer, pub);
				break;
			}
		}
		c.slots = pub;
		st_volatile64(&counters[blockIdx.x].slots, c.slots);
		fence_sys();
		return;
	}

	for (k = blockIdx.x;; k += workers) {
		struct slot_result *r = &results[k % nslots];
		const unsigned char *slot = slots + (k % nslots) * slot_size;
		u64 len;
		int bad;

		if (threadIdx.x == 0) {
			u64 v;
			int stopped = 0;

			for (;;) {
				v = ld_acquire_sys(r);
				if ((u32)v >> GPUFPGA_RESULT_MAGIC_SHIFT == GPUFPGA_RESULT_MAGIC)
					break;
				if (ld_volatile32(stop)) {
					stopped = 1;
					break;
				}
			}
			s_stop = stopped;
			s_length = v >> 32;
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
		bad = len != slot_size || len % 16 != 0;
		if (!bad)
			bad = verify(slot, len, k, nsrc, threadIdx.x, THREADS);
		bad = __syncthreads_or(bad);
		if (threadIdx.x == 0) {
			c.slots++;
			c.bytes += len;
			if (bad) {
				if (c.errors == 0)
					c.first_error = k + 1;
				c.errors++;
			}
			st_volatile32(&r->status, 0);
			fence_sys();
			st_release_gpu(&done[k % nslots], k + 1);
		}
	}
	if (threadIdx.x == 0) {
		st_volatile64(&counters[blockIdx.x].slots, c.slots);
		st_volatile64(&counters[blockIdx.x].bytes, c.bytes);
		st_volatile64(&counters[blockIdx.x].errors, c.errors);
		st_volatile64(&counters[blockIdx.x].first_error, c.first_error);
		fence_sys();
		atomicAdd(exited, 1);
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
		bad = verify(slot, len, k, nsrc, (u64)blockIdx.x * THREADS + threadIdx.x, (u64)gridDim.x * THREADS);
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
