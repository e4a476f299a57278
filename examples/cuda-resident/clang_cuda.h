// What consumer.cu needs of CUDA's headers, for clang's CUDA device
// compilation without a CUDA installation (`make ptx`; clang knows
// __syncthreads itself). nvcc needs none of it.
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

static __device__ inline int __syncthreads_or(int p) { return __nvvm_bar0_or(p); }
