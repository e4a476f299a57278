// SPDX-License-Identifier: MIT
// cuda-resident: a GPU-resident stream's persistent consumer written with
// <gpufpga/gpufpga_resident_cuda.cuh> alone: 1 + W blocks of 256
// threads, block 0 publishing, each worker block taking every W-th fill
// and checking it with all its warps.
//
// What it checks: fill k's slot holds 64-bit words w[i] = k * 0x100000001 + i
// (the test's producer writes them with a copy engine, as the FPGA
// would); a fill whose words or length differ counts as an error. Each
// worker block counts its fills, bytes and errors into counters[block]
// (host memory mapped into the GPU), written once it leaves.
//
// Build (committed as consumer.ptx; `make ptx`):
//   clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 \
//     -Xclang -target-feature -Xclang +ptx60 -O3 -S -include clang_cuda.h \
//     -I build/include consumer.cu -o consumer.ptx
// or with the CUDA toolkit: nvcc -ptx -arch=sm_70 -I/usr/include consumer.cu
#include <gpufpga/gpufpga_resident_cuda.cuh>

#define THREADS 256

struct counters {
	unsigned long long fills, bytes, errors, reserved[5];
};

extern "C" __global__ void __launch_bounds__(THREADS)
consume(unsigned char *slots, unsigned long long slot_size, struct gpufpga_slot_result *results,
	unsigned long long nslots, struct gpufpga_consumer *consumer, unsigned long long *done,
	unsigned long long *published, const unsigned int *stop, struct counters *counters)
{
	struct gpufpga_dev_ring r = {slots, slot_size, results, nslots, consumer, done, published, stop};
	unsigned long long k, len, fills = 0, bytes = 0, errors = 0;

	if (blockIdx.x == 0) {
		if (threadIdx.x < 32) {
			const unsigned long long fills = gpufpga_warp_publisher(&r);

			if (threadIdx.x == 0)
				counters[0].fills = fills;
		}
		return;
	}
	for (k = blockIdx.x - 1; gpufpga_block_claim(&r, k, &len); k += gridDim.x - 1) {
		const unsigned long long *w = (const unsigned long long *)gpufpga_slot(&r, k);
		int bad = len != slot_size || len % 8 != 0;
		unsigned long long i;

		// Every warp reads its own words: volatile, so that no line
		// of an earlier fill of the slot is read from a cache.
		for (i = threadIdx.x; !bad && i < len / 8; i += THREADS)
			bad |= ((const volatile unsigned long long *)w)[i] != k * 0x100000001ull + i;
		bad = __syncthreads_or(bad);
		fills++;
		bytes += len;
		errors += bad != 0;
		gpufpga_block_release(&r, k);
	}
	if (threadIdx.x == 0) {
		counters[blockIdx.x].fills = fills;
		counters[blockIdx.x].bytes = bytes;
		counters[blockIdx.x].errors = errors;
	}
}
