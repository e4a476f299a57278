extern "C" __device__ unsigned long long user_fn(unsigned char *slot, unsigned long long len, unsigned long long k, void *state)
{
	return len * 1000 + k;
}
