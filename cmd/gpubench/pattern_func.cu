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
	const u64 src = k % st->nsrc, pairs = len / 16, stride = blockDim.x;
	bool bad = len != st->slot_size || len % 16 != 0;
	u64 p = threadIdx.x;

	(void)out;
	if (bad)
		return 1;
	// Four 16-byte loads in flight a thread, then their compares.
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
