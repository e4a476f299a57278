// framestats.cu as a function the GPU-resident consumer runs on every
// fill (acquire -resident): package resident links it into its
// persistent kernel with the driver's JIT linker, so no kernel is
// launched per slot. It is an
//
//   extern "C" __device__ int gpufpga_process(const unsigned char *slot,
//	unsigned long long len, unsigned long long k, void *state, void *out);
//
// state: struct framestats_state in GPU memory; out: fill k's record in
// host memory: the number of frames, the first frame's sequence number,
// the frames that passed their check (0 for a bad fill, or unchecked),
// then each frame's RECORD_WORDS words, as framestats writes them.
//
// With check set, the fill's frames are first checked word by word where
// they landed by the library's gpufpga_frm1_check (package resident links
// it beside every function); a bad fill returns non-zero (counted by the
// consumer) and the host counts gaps in fill order from the records.
#include "framestats.cu"

struct framestats_state {
	unsigned int frame_size;
	int threshold;
	unsigned int check;
	unsigned int reserved;
};

extern "C" __device__ long long gpufpga_frm1_check(const unsigned char *slot, unsigned long long len,
						 unsigned long long frame_size, unsigned long long *first_seq);

extern "C" __device__ int gpufpga_process(const unsigned char *slot, unsigned long long len, unsigned long long k,
					  void *state, void *out)
{
	const struct framestats_state *st = (const struct framestats_state *)state;
	const unsigned int frame_size = st->frame_size;
	const unsigned long long n = len / frame_size;
	unsigned long long *rec = (unsigned long long *)out, first = 0;
	long long checked = 0;

	(void)k;
	if (st->check)
		checked = gpufpga_frm1_check(slot, len, frame_size, &first);
	if (threadIdx.x == 0) {
		rec[0] = n;
		rec[1] = first;
		rec[2] = checked < 0 ? 0 : checked;
	}
	for (unsigned long long f = 0; f < n; f++)
		frame_stats(slot + f * frame_size, frame_size, st->threshold, rec + 3 + f * RECORD_WORDS);
	return checked < 0;
}
