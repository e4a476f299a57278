// The pattern check as a function the resident consumer runs on every
// fill, linked as a user's function is (PatternFuncPTX; gpubench
// -resident -peer-consumer function): every word of fill k's slot must
// hold Word's, as resident.cu's workers check it, so that the consumer a
// user links their own code into is measured doing the same work per
// byte, and the peer producer's fills are checked through it.
//
// state: struct pattern_state in GPU memory (PatternState).
//
// Regenerate the PTX with `make ptx`.
typedef unsigned long long u64;
typedef unsigned int u32;

#define GOLDEN 0x9e3779b97f4a7c15ull
#include "resident_ops.cuh"

struct pattern_state {
	u64 nsrc;      // the pattern's period (> nslots)
	u64 slot_size; // every fill is that long
};

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out)
{
	const struct pattern_state *st = (const struct pattern_state *)state;
	const u64 pairs = len / 16, p = threadIdx.x;
	u64 a = 0, b = 0, src;

	(void)out;
	// The thread's first pair is loaded before the state, which it does
	// not need for the load: the state's load would otherwise add a
	// round trip to GPU memory to every fill's latency. len is at most
	// the slot's (the consumer checks it before the call).
	if (p < pairs)
		ld_cv2(slot + p * 16, &a, &b);
	if (len != st->slot_size || len % 16 != 0)
		return 1;
	src = k % st->nsrc;
	if (p < pairs && (a != word(k, src, 2 * p) || b != word(k, src, 2 * p + 1)))
		return 1;
	return verify(slot, 0, pairs, k, st->nsrc, p + blockDim.x, blockDim.x);
}
