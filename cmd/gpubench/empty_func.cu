// A function that reads nothing and returns at once, linked into the
// resident consumer as a user's function is (gpubench -resident
// -peer-function empty): what the consumer costs on its own, its waits,
// barriers, releases and publishing, without the pattern check's reads of
// the slot.
//
// Regenerate the PTX with `make ptx`.
typedef unsigned long long u64;

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out)
{
	(void)slot;
	(void)len;
	(void)k;
	(void)state;
	(void)out;
	return 0;
}
