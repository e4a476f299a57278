// What consumer.cu and gpufpga_resident_cuda.cuh need of CUDA's headers, for clang's CUDA device
// compilation without a CUDA installation (`make ptx`; clang knows
// __syncthreads itself). nvcc needs none of it.
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

static __device__ inline int __syncthreads_or(int p) { return __nvvm_bar0_or(p); }
static __device__ inline unsigned int __shfl_sync(unsigned int mask, unsigned int v, int src)
{
	return __nvvm_shfl_sync_idx_i32(mask, v, src, 0x1f);
}
static __device__ inline unsigned int __ballot_sync(unsigned int mask, int p) { return __nvvm_vote_ballot_sync(mask, p); }
static __device__ inline int __ffs(unsigned int x) { return x ? __builtin_ctz(x) + 1 : 0; }
static __device__ inline void __syncwarp(unsigned int mask = 0xffffffff) { __nvvm_bar_warp_sync(mask); }
