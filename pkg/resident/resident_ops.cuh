// Memory and clock operations the resident consumer (resident.cu) and the
// peer producer (peer.cu) share, with the fill pattern both must agree on
// and its check (gpubench's pattern_func.cu checks it too).
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

__device__ static inline u32 ld_volatile32(const void *p)
{
	u32 v;
	asm volatile("ld.volatile.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void st_volatile32(void *p, u32 v)
{
	asm volatile("st.volatile.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static inline void fence_gpu(void)
{
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ static inline void ld_cv2(const void *p, u64 *a, u64 *b)
{
	asm volatile("ld.global.cv.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}

__device__ static inline u64 globaltimer(void)
{
	u64 v;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
	return v;
}

__device__ static inline u64 ld_volatile64(const void *p)
{
	u64 v;
	asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void st_v2(void *p, u64 a, u64 b)
{
	asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
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

// Whether the 16-byte pairs [lo + first, hi) of the slot, stepping by
// stride, all hold fill k's words.
__device__ static bool verify(const unsigned char *slot, u64 lo, u64 hi, u64 k, u64 nsrc, u64 first, u64 stride)
{
	const u64 src = k % nsrc;
	bool bad = false;
	u64 p = lo + first;

	for (; p + 3 * stride < hi; p += 4 * stride) {
		u64 a[4], b[4];
		int j;

		for (j = 0; j < 4; j++)
			ld_cv2(slot + (p + j * stride) * 16, &a[j], &b[j]);
		for (j = 0; j < 4; j++) {
			u64 i = 2 * (p + j * stride);

			bad |= a[j] != word(k, src, i) || b[j] != word(k, src, i + 1);
		}
	}
	for (; p < hi; p += stride) {
		u64 a, b;

		ld_cv2(slot + p * 16, &a, &b);
		bad |= a != word(k, src, 2 * p) || b != word(k, src, 2 * p + 1);
	}
	return bad;
}

#endif
