// What resident.cu needs of CUDA's headers, for clang's CUDA device
// compilation without a CUDA installation (`make ptx`): the NVPTX builtins
// behind each intrinsic.
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

static __device__ inline int __syncthreads_or(int p) { return __nvvm_bar0_or(p); }
static __device__ inline unsigned int atomicAdd(unsigned int *p, unsigned int v)
{
	return __nvvm_atom_add_gen_i((int *)p, v);
}
static __device__ inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
	return __nvvm_atom_add_gen_ll((long long *)p, v);
}
static __device__ inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp,
						      unsigned long long v)
{
	return __nvvm_atom_cas_gen_ll((long long *)p, cmp, v);
}
static __device__ inline unsigned int __shfl_sync(unsigned int mask, unsigned int v, int src)
{
	return __nvvm_shfl_sync_idx_i32(mask, v, src, 0x1f);
}
static __device__ inline unsigned long long __shfl_sync(unsigned int mask, unsigned long long v, int src)
{
	unsigned int lo = __shfl_sync(mask, (unsigned int)v, src), hi = __shfl_sync(mask, (unsigned int)(v >> 32), src);

	return (unsigned long long)hi << 32 | lo;
}
static __device__ inline unsigned int __ballot_sync(unsigned int mask, int p) { return __nvvm_vote_ballot_sync(mask, p); }
static __device__ inline int __ffs(unsigned int x) { return x ? __builtin_ctz(x) + 1 : 0; }
static __device__ inline void __syncwarp(unsigned int mask = 0xffffffff) { __nvvm_bar_warp_sync(mask); }
