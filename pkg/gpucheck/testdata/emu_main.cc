// emu KERNEL GRID BLOCK SHARED ARGFILE BUFFILE OUTFILE: runs a kernel of
// framecheck.cu on the CPU (emu.h). ARGFILE holds the kernel's arguments
// as 8-byte little-endian words, pointers given as offsets: into BUFFILE's
// contents for the frames or data, and into the output for out; the
// checker's multipliers follow the frames in BUFFILE. The output (records,
// or readsum's four words) is written to OUTFILE.
#include "../framecheck.cu"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

thread_local emu_dim threadIdx;
emu_dim blockIdx, blockDim, gridDim;
std::barrier<> *emu_block_barrier;
std::barrier<> *emu_warp_barrier[32];
unsigned int emu_lanes[32][32];
alignas(16) unsigned int tab[(160 << 10) / 4];

static std::vector<char> slurp(const char *path)
{
	std::ifstream f(path, std::ios::binary);
	return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: emu KERNEL GRID BLOCK SHARED ARGFILE BUFFILE OUTFILE\n");
		return 2;
	}
	std::string kernel = argv[1];
	unsigned int grid = atoi(argv[2]), block = atoi(argv[3]);
	std::vector<char> argb = slurp(argv[5]), buf = slurp(argv[6]);
	std::vector<uint64_t> a(argb.size() / 8);
	memcpy(a.data(), argb.data(), a.size() * 8);
	std::vector<char> out(1 << 24);
	char *b = buf.data(), *o = out.data();
	size_t outlen;

	gridDim.x = grid;
	blockDim.x = block;
	for (unsigned int bl = 0; bl < grid; bl++) {
		blockIdx.x = bl;
		std::barrier<> bb(block);
		emu_block_barrier = &bb;
		std::vector<std::barrier<> *> wb;
		for (unsigned int w = 0; w < (block + 31) / 32; w++)
			emu_warp_barrier[w] = new std::barrier<>(32);
		std::vector<std::thread> th;
		for (unsigned int t = 0; t < block; t++)
			th.emplace_back([&, t] {
				threadIdx.x = t;
				if (kernel == "readsum")
					readsum((const uint4 *)(b + a[0]), a[1], (unsigned int *)(o + a[2]));
				else if (kernel == "framecheck")
					framecheck((const uint4 *)(b + a[0]), a[1], a[2], (struct record *)(o + a[3]),
						   a[4], a[5], a[6], (const unsigned int *)(b + a[7]), a[8]);
				else
					framecheck_small((const uint4 *)(b + a[0]), a[1], a[2],
							 (struct record *)(o + a[3]), a[4], a[5], a[6],
							 (const unsigned int *)(b + a[7]), a[8]);
			});
		for (auto &t : th)
			t.join();
		for (unsigned int w = 0; w < (block + 31) / 32; w++)
			delete emu_warp_barrier[w];
	}
	outlen = kernel == "readsum" ? 16 : a[1] * 16;
	std::ofstream(argv[7], std::ios::binary).write(o, outlen);
	return 0;
}
