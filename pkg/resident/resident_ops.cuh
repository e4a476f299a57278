// Memory and clock operations the resident consumer (resident.cu) and the
// peer producer (peer.cu) share, with the fill pattern both must agree on.
// Included after each defines u64, u32 and GOLDEN.

#ifndef GPUFPGA_RESIDENT_OPS_CUH
#define GPUFPGA_RESIDENT_OPS_CUH

__device__ static inline u64 ld_acquire_sys(const void *p)
{
	u64 v;
	asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline u64 ld_acquire_gpu(const void *p)
{
	u64 v;
	asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void st_release_sys(void *p, u64 v)
{
	asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void st_release_gpu(void *p, u64 v)
{
	asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void st_volatile64(void *p, u64 v)
{
	asm volatile("st.volatile.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ static inline void fence_sys(void)
{
	asm volatile("fence.sc.sys;" ::: "memory");
}

__device__ static inline u64 clock64(void)
{
	u64 v;
	asm volatile("mov.u64 %0, %%clock64;" : "=l"(v));
	return v;
}

// Word i of fill k (pkg/resident.Word).
__device__ static inline u64 word(u64 k, u64 src, u64 i)
{
	if (i == 0)
		return k;
	if (i == 1)
		return src;
	return (src + 1) * GOLDEN ^ i;
}

#endif
