extern "C" __device__ unsigned long long user_fn(unsigned char *slot, unsigned long long len, unsigned long long k, void *state);
extern "C" __global__ void caller(unsigned char *slot, unsigned long long *out)
{
	out[threadIdx.x] = user_fn(slot, 16, threadIdx.x, out);
}
