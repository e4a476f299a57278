// What framestats.cu needs of CUDA's headers, for clang's CUDA device
// compilation without a CUDA installation (`make ptx`). With the CUDA
// toolkit, nvcc needs none of it: build with
//   nvcc -ptx -arch=sm_70 framestats.cu -o framestats.ptx
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
