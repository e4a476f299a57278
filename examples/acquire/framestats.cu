// Per-frame statistics of acquisition frames where they landed in GPU
// memory, with a threshold trigger: the processing examples/acquire runs on
// every slot. Replace it with your own kernel (-ptx, -kernel) that keeps
// the same parameters and launch:
//
//   extern "C" __global__ void K(const unsigned char *slot,
//                                unsigned long long len,
//                                unsigned int frame_size, int threshold,
//                                unsigned long long *out);
//
// One block of 256 threads per frame (grid: len / frame_size); block b
// reads the frame at slot + b * frame_size and writes RECORD_WORDS 64-bit
// words at out + b * RECORD_WORDS, which the host copies back.
//
// A frame (package frame) is a 32-byte header, then the payload; the
// payload is taken as signed 16-bit little-endian samples. The record:
//
//   0 sequence number (header bytes 8-15)
//   1 samples (0 where the header is not a frame's)
//   2 sum of the samples (signed)
//   3 sum of their squares
//   4 smallest sample (signed)
//   5 largest sample (signed)
//   6 samples whose magnitude is at least threshold (none if threshold <= 0)
//   7 index of the first of them, or ~0 if none
//
// `make ptx` compiles it with clang (PTX ISA 6.0 for sm_70); nvcc -ptx
// -arch=sm_70 does as well.

#define BLOCK 256
#define RECORD_WORDS 8
#define HEADER 32
#define MAGIC 0x314D5246u

__device__ static inline void take(int x, int threshold, unsigned int i, long long *sum, unsigned long long *sq,
				   int *lo, int *hi, unsigned int *over, unsigned int *first)
{
	*sum += x;
	*sq += (unsigned long long)(x * x);
	*lo = x < *lo ? x : *lo;
	*hi = x > *hi ? x : *hi;
	int mag = x < 0 ? -x : x;
	if (threshold > 0 && mag >= threshold) {
		if (*over == 0)
			*first = i;
		(*over)++;
	}
}

// One frame's record, by every thread of a block of BLOCK threads (each
// calls it, in step: it synchronises them). Its loads are volatile: a
// persistent kernel reads a slot again after the FPGA rewrote it
// (framestats_func.cu), and must not take an earlier fill's line from
// the L1 cache.
__device__ static void frame_stats(const unsigned char *f, unsigned int frame_size, int threshold,
				   unsigned long long *rec)
{
	// volatile: where this is a function of its own (framestats_func.cu,
	// linked), LLVM takes __syncthreads() for a call that cannot touch
	// arrays only this function uses, and may read them before it.
	__shared__ volatile long long s_sum[BLOCK];
	__shared__ volatile unsigned long long s_sq[BLOCK];
	__shared__ volatile int s_lo[BLOCK], s_hi[BLOCK];
	__shared__ volatile unsigned int s_over[BLOCK], s_first[BLOCK];

	const unsigned int t = threadIdx.x;
	const volatile unsigned int *h = (const volatile unsigned int *)f;
	unsigned long long seq = (unsigned long long)h[3] << 32 | h[2];
	unsigned int n = 0; // samples
	if (h[0] == MAGIC && (h[1] >> 16) == HEADER) {
		unsigned int payload = h[6];
		if (payload > frame_size - HEADER)
			payload = frame_size - HEADER;
		n = payload / 2;
	}

	long long sum = 0;
	unsigned long long sq = 0;
	int lo = 32767, hi = -32768;
	unsigned int over = 0, first = 0xffffffffu;
	// Two samples to a 32-bit load, a block's loads side by side.
	const volatile unsigned int *w = (const volatile unsigned int *)(f + HEADER);
	for (unsigned int i = t; i < n / 2; i += BLOCK) {
		unsigned int v = w[i];
		take((short)(v & 0xffff), threshold, 2 * i, &sum, &sq, &lo, &hi, &over, &first);
		take((short)(v >> 16), threshold, 2 * i + 1, &sum, &sq, &lo, &hi, &over, &first);
	}
	if ((n & 1) && t == 0) {
		const volatile unsigned short *last = (const volatile unsigned short *)(f + HEADER) + (n - 1);
		take((short)*last, threshold, n - 1, &sum, &sq, &lo, &hi, &over, &first);
	}
	s_sum[t] = sum;
	s_sq[t] = sq;
	s_lo[t] = lo;
	s_hi[t] = hi;
	s_over[t] = over;
	s_first[t] = first;
	__syncthreads();
	for (unsigned int k = BLOCK / 2; k > 0; k /= 2) {
		if (t < k) {
			s_sum[t] += s_sum[t + k];
			s_sq[t] += s_sq[t + k];
			s_lo[t] = s_lo[t + k] < s_lo[t] ? s_lo[t + k] : s_lo[t];
			s_hi[t] = s_hi[t + k] > s_hi[t] ? s_hi[t + k] : s_hi[t];
			s_over[t] += s_over[t + k];
			s_first[t] = s_first[t + k] < s_first[t] ? s_first[t + k] : s_first[t];
		}
		__syncthreads();
	}
	if (t == 0) {
		rec[0] = seq;
		rec[1] = n;
		rec[2] = (unsigned long long)s_sum[0];
		rec[3] = s_sq[0];
		rec[4] = (unsigned long long)(long long)(n ? s_lo[0] : 0);
		rec[5] = (unsigned long long)(long long)(n ? s_hi[0] : 0);
		rec[6] = s_over[0];
		rec[7] = s_first[0] == 0xffffffffu ? ~0ull : s_first[0];
	}
	// The shared totals are the next frame's.
	__syncthreads();
}

extern "C" __global__ void __launch_bounds__(BLOCK)
	framestats(const unsigned char *slot, unsigned long long len, unsigned int frame_size, int threshold,
		   unsigned long long *out)
{
	frame_stats(slot + (unsigned long long)blockIdx.x * frame_size, frame_size, threshold,
		    out + (unsigned long long)blockIdx.x * RECORD_WORDS);
}
