// A function for resident_func (func.cu), for the tests: fill k's slot
// should hold 64-bit words w[i] = k * 0x100000001 + i. The record gets
// k, the words' sum and the length; *state counts the calls (either may
// be absent: 0); a fill whose words differ is bad.
typedef unsigned long long u64;

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out)
{
	__shared__ volatile u64 part[256];
	const volatile u64 *w = (const volatile u64 *)slot;
	u64 s = 0, i;
	int bad = len % 8 != 0;

	for (i = threadIdx.x; i < len / 8; i += blockDim.x) {
		u64 v = w[i];

		s += v;
		bad |= v != k * 0x100000001ull + i;
	}
	part[threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		u64 t = 0;

		for (i = 0; i < blockDim.x; i++)
			t += part[i];
		if (out) {
			((u64 *)out)[0] = k;
			((u64 *)out)[1] = t;
			((u64 *)out)[2] = len;
		}
		if (state)
			atomicAdd((u64 *)state, 1ull);
	}
	// part is the next call's too.
	__syncthreads();
	return bad;
}
