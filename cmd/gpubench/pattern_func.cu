// The benchmark's pattern check as a function the resident consumer runs
// on every fill, linked as a user's function is (gpubench -resident
// -peer-consumer function): every word of fill k's slot must hold
// pkg/resident.Word's, as resident.cu's workers check it, so that the
// consumer a user links their own code into is measured doing the same
// work per byte.
//
// state: struct pattern_state in GPU memory.
//
// Regenerate the PTX with `make ptx`.
typedef unsigned long long u64;
typedef unsigned int u32;

#define GOLDEN 0x9e3779b97f4a7c15ull
#include "../../pkg/resident/resident_ops.cuh"

struct pattern_state {
	u64 nsrc;      // the pattern's period (> nslots)
	u64 slot_size; // every fill is that long
};

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out)
{
	const struct pattern_state *st = (const struct pattern_state *)state;

	(void)out;
	if (len != st->slot_size || len % 16 != 0)
		return 1;
	return verify(slot, 0, len / 16, k, st->nsrc, threadIdx.x, blockDim.x);
}
