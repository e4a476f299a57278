// Runs framecheck.cu on the CPU, for tests on machines without a GPU: each
// CUDA thread of a block is a host thread; blocks run one after another;
// __syncthreads and the warp shuffles are barriers. Compiled as C++20 with
// `-include emu.h`; emu_main.cc includes the kernels.
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct alignas(16) uint4 {
	unsigned int x, y, z, w;
};
struct emu_dim {
	unsigned int x;
};

extern thread_local emu_dim threadIdx;
extern emu_dim blockIdx, blockDim, gridDim;
extern std::barrier<> *emu_block_barrier;
extern std::barrier<> *emu_warp_barrier[32];
extern unsigned int emu_lanes[32][32];

inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }
template <typename T> inline T __ldg(const T *p) { return *p; }
inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

// Every lane of the warp takes part, as in the kernels.
inline unsigned int emu_shfl(unsigned int v, unsigned int src_lane, bool in_range)
{
	unsigned int lane = threadIdx.x % 32, w = threadIdx.x / 32;
	emu_lanes[w][lane] = v;
	emu_warp_barrier[w]->arrive_and_wait();
	unsigned int r = in_range ? emu_lanes[w][src_lane] : v;
	emu_warp_barrier[w]->arrive_and_wait();
	return r;
}
inline unsigned int __shfl_down_sync(unsigned int, unsigned int v, unsigned int d)
{
	unsigned int lane = threadIdx.x % 32;
	return emu_shfl(v, lane + d, lane + d < 32);
}
inline unsigned int __shfl_xor_sync(unsigned int, unsigned int v, unsigned int m)
{
	return emu_shfl(v, (threadIdx.x % 32) ^ m, true);
}
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s)
{
	uint64_t in = (uint64_t)y << 32 | x;
	unsigned int r = 0;
	for (int i = 0; i < 4; i++)
		r |= (unsigned int)(in >> (8 * ((s >> (4 * i)) & 7)) & 0xff) << (8 * i);
	return r;
}
inline unsigned int atomicXor(unsigned int *p, unsigned int v)
{
	return std::atomic_ref<unsigned int>(*p).fetch_xor(v);
}
