// framestats.cu as a function the GPU-resident consumer runs on every
// fill (acquire -resident): package resident links it into its
// persistent kernel with the driver's JIT linker, so no kernel is
// launched per slot. It is an
//
//   extern "C" __device__ int gpufpga_process(const unsigned char *slot,
//	unsigned long long len, unsigned long long k, void *state, void *out);
//
// state: struct framestats_state in GPU memory; out: fill k's record in
// host memory: the number of frames, then each frame's RECORD_WORDS
// words, as framestats writes them.
#include "framestats.cu"

struct framestats_state {
	unsigned int frame_size;
	int threshold;
};

extern "C" __device__ int gpufpga_process(const unsigned char *slot, unsigned long long len, unsigned long long k,
					  void *state, void *out)
{
	const struct framestats_state *st = (const struct framestats_state *)state;
	const unsigned int frame_size = st->frame_size;
	const unsigned long long n = len / frame_size;
	unsigned long long *rec = (unsigned long long *)out;

	(void)k;
	if (threadIdx.x == 0)
		rec[0] = n;
	for (unsigned long long f = 0; f < n; f++)
		frame_stats(slot + f * frame_size, frame_size, st->threshold, rec + 1 + f * RECORD_WORDS);
	return 0;
}
