// What framecheck.cu needs of CUDA's headers, for clang's CUDA device
// compilation without a CUDA installation (`make ptx`): the NVPTX builtins
// behind each intrinsic.
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};
typedef unsigned int __u4 __attribute__((ext_vector_type(4)));

static __device__ inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w)
{
	uint4 v = {x, y, z, w};
	return v;
}
static __device__ inline uint4 __ldg(const uint4 *p)
{
	__u4 v = __nvvm_ldg_ui4((const __u4 *)p);
	return make_uint4(v[0], v[1], v[2], v[3]);
}
static __device__ inline unsigned int __ldg(const unsigned int *p) { return __nvvm_ldg_ui(p); }
static __device__ inline unsigned int __shfl_down_sync(unsigned int mask, unsigned int v, unsigned int d)
{
	return __nvvm_shfl_sync_down_i32(mask, v, d, 0x1f);
}
static __device__ inline unsigned int __shfl_xor_sync(unsigned int mask, unsigned int v, unsigned int m)
{
	return __nvvm_shfl_sync_bfly_i32(mask, v, m, 0x1f);
}
static __device__ inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s)
{
	return __nvvm_prmt(x, y, s);
}
static __device__ inline unsigned int atomicXor(unsigned int *p, unsigned int v)
{
	return __nvvm_atom_xor_gen_i((int *)p, v);
}
