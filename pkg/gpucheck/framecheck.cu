// Frame checker: validates the FRM1 frames of package frame in GPU memory,
// and the read-only baseline it is measured against.
//
// A group of 2^group_log2 threads (1 to 1024) checks one frame. The
// payload, thought of as left-padded with zero words (with a raw CRC,
// leading zeros change nothing), is cut into rounds of group * run 16-byte
// words; in each round the thread of rank r takes the run of words
// [r * run, (r + 1) * run). So a warp reads neighbouring runs at once and
// memory sees a few compact regions instead of one stream per thread
// (rounds = 1 is the plain split into one contiguous chunk per thread).
// Each thread computes the raw CRC32C of its share as if the other
// threads' words in between were zeros: before each run after its first
// it multiplies its CRC by x^(8 * 16 * run * (group - 1)). The shares are
// then combined, each left one multiplied by x^(8 * bytes on its right)
// modulo the CRC polynomial: by a shuffle tree inside a warp, then warp by
// warp through shared memory. Multiplying by a constant takes four byte
// tables, which the host computes (gpucheck.combineTables).
//
// The CRC tables live in shared memory, one copy per bank, so the 32 lanes
// of a warp never conflict whatever bytes they look up. Two configurations:
//
//   framecheck        slicing-by-4: four tables, 128 KiB (needs more than the
//                     48 KiB every GPU gives a block). Tables 2k and 2k+1
//                     share a 64 KiB block, entry b of table t at byte
//                     (b << 8) | ((t & 1) << 7) | (lane << 2), so one byte
//                     permute (prmt) of the CRC makes the address.
//   framecheck_small  one byte table, 32 KiB, byte by byte (slicing-by-1):
//                     the same lookups per word, in a chain.
//
// Both add the multiplier of the gaps between runs (4 KiB, one copy) and
// run 1024 threads a block, one block per multiprocessor, looping over the
// frames.
//
// readsum reads every byte of a buffer and reduces it (xor), as fast as
// it can: the baseline the checker's throughput is reported against.
//
// Regenerate the PTX with `make ptx` (PTX ISA 6.0, target sm_70).

#define POLY 0x82F63B78u /* CRC32C (Castagnoli), reflected */
#define LANES 32
#define BLOCK 1024
#define WARPS (BLOCK / LANES)
#define HEADER 32
#define MAGIC 0x314D5246u
#define BIG_TABLES (4 * 256 * LANES * 4)   /* bytes */
#define SMALL_TABLES (256 * LANES * 4)     /* bytes */
#define GAP_TABLE (4 * 256 * 4)            /* bytes */
#define READ_BLOCK 512

enum status {
	FRAME_OK = 0,
	FRAME_BAD_MAGIC = 1,
	FRAME_BAD_VERSION = 2,
	FRAME_BAD_LENGTH = 3,
	FRAME_BAD_CRC = 4,
};

// What the host reads back for each frame (16 bytes).
struct record {
	unsigned long long seq;
	unsigned int payload_len;
	unsigned int status;
};

// Multipliers: tables of multiplying a CRC by a constant power of x, the
// host's (gpucheck.combineTables), four 256-entry byte tables each.
enum multiplier {
	MUL_LEVEL0 = 0,	/* x^(8 * 16 * run * 2^k), k = 0..4: the shuffle tree */
	MUL_WARP = 5,	/* x^(8 * 16 * run * 32): one warp's span */
	MUL_PAYLOAD = 6,	/* x^(8 * payload): shifts the header's CRC */
	MUL_GAP = 7,	/* x^(8 * 16 * run * (group - 1)): the others' runs */
};

extern __shared__ unsigned int tab[]; // the tables, then the gap multiplier
__shared__ unsigned int warp_crc[WARPS];

__device__ static unsigned int mul(const unsigned int *__restrict__ t, int which, unsigned int c)
{
	t += which * 1024;
	return __ldg(t + (c & 0xff)) ^ __ldg(t + 256 + ((c >> 8) & 0xff)) ^
	       __ldg(t + 512 + ((c >> 16) & 0xff)) ^ __ldg(t + 768 + (c >> 24));
}

// The same from the copy in shared memory.
__device__ static unsigned int mul_shared(const unsigned int *t, unsigned int c)
{
	return t[c & 0xff] ^ t[256 + ((c >> 8) & 0xff)] ^ t[512 + ((c >> 16) & 0xff)] ^ t[768 + (c >> 24)];
}

__device__ static unsigned int crc_byte(unsigned int c)
{
	int k;

	for (k = 0; k < 8; k++)
		c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
	return c;
}

// The word at byte offset off of shared memory s.
__device__ static unsigned int lds(const unsigned char *s, unsigned int off)
{
	return *(const unsigned int *)(s + off);
}

__device__ static void store(unsigned char *s, unsigned int off, unsigned int v)
{
	*(unsigned int *)(s + off) = v;
}

// Fills the tables (layouts above) and copies the gap multiplier.
template <bool SMALL>
__device__ static void build_tables(unsigned char *s, const unsigned int *__restrict__ mult)
{
	unsigned int *gap = (unsigned int *)(s + (SMALL ? SMALL_TABLES : BIG_TABLES));
	unsigned int i, b, t, k, l;

	for (i = threadIdx.x; i < (SMALL ? 256u : 1024u); i += blockDim.x) {
		k = i >> 8; // table: the byte followed by k zero bytes
		b = i & 0xff;
		t = crc_byte(b);
		for (l = 0; l < k; l++)
			t = (t >> 8) ^ crc_byte(t & 0xff);
		for (l = 0; l < LANES; l++) {
			if (SMALL)
				store(s, b << 7 | l << 2, t);
			else
				store(s, (k >> 1) << 16 | b << 8 | (k & 1) << 7 | l << 2, t);
		}
	}
	for (i = threadIdx.x; i < 1024; i += blockDim.x)
		gap[i] = __ldg(mult + MUL_GAP * 1024 + i);
}

// One word: the raw CRC of what came before (c) and the word w. lo is
// lane << 2, the lane's column in the tables.
template <bool SMALL>
__device__ static unsigned int crc_word(const unsigned char *s, unsigned int lo, unsigned int c,
					 unsigned int w)
{
	c ^= w;
	if (SMALL) {
		c = lds(s, ((c << 7) & 0x7f80u) | lo) ^ (c >> 8);
		c = lds(s, ((c << 7) & 0x7f80u) | lo) ^ (c >> 8);
		c = lds(s, ((c << 7) & 0x7f80u) | lo) ^ (c >> 8);
		return lds(s, ((c << 7) & 0x7f80u) | lo) ^ (c >> 8);
	}
	// Byte j of c goes to bits 8-15, the lane (and table parity) below.
	return lds(s + 65536, __byte_perm(c, lo | 0x80, 0x5504)) ^ // table 3, byte 0
	       lds(s + 65536, __byte_perm(c, lo, 0x5514)) ^        // table 2, byte 1
	       lds(s, __byte_perm(c, lo | 0x80, 0x5524)) ^         // table 1, byte 2
	       lds(s, __byte_perm(c, lo, 0x5534));                 // table 0, byte 3
}

template <bool SMALL>
__device__ static unsigned int crc_uint4(const unsigned char *s, unsigned int lo, unsigned int c, uint4 v)
{
	c = crc_word<SMALL>(s, lo, c, v.x);
	c = crc_word<SMALL>(s, lo, c, v.y);
	c = crc_word<SMALL>(s, lo, c, v.z);
	return crc_word<SMALL>(s, lo, c, v.w);
}

// The raw CRC of one thread's share of a payload at p: rounds runs of run
// words (run 1, 2 or a multiple of 4; rounds * run a multiple of 4), the
// first at word index first (negative inside the padding, whose words are
// zeros), each next one stride words further, the others' words in
// between counted as zeros.
template <bool SMALL>
__device__ static unsigned int crc_share(const unsigned char *s, unsigned int lo, const unsigned int *gap,
					  const uint4 *__restrict__ p, long long first, long long stride,
					  unsigned int run, unsigned int rounds)
{
	const unsigned int batches = rounds * run / 4;
	// A batch is four words: of one run (run >= 4), or of 4 / run runs.
	const long long o1 = run >= 4 ? 1 : run == 2 ? 1 : stride;
	const long long o2 = run >= 4 ? 2 : run == 2 ? stride : 2 * stride;
	const long long o3 = run >= 4 ? 3 : run == 2 ? stride + 1 : 3 * stride;
	const long long step = run >= 4 ? 4 : run == 2 ? 2 * stride : 4 * stride;
	const unsigned int per_run = run >= 4 ? run / 4 : 0; // batches in a run
	unsigned int c = 0, b, j, todo = 0, left = per_run;
	long long a = first; // the batch being loaded
	uint4 v[4], next[4];

	// Four loads in flight per thread, and the next four issued before
	// these are folded in, so memory latency overlaps the table lookups.
	for (b = 0; b <= batches; b++) {
		if (b < batches) {
			if (a >= 0) { // offsets only grow: no padding here
				next[0] = __ldg(p + a);
				next[1] = __ldg(p + a + o1);
				next[2] = __ldg(p + a + o2);
				next[3] = __ldg(p + a + o3);
			} else {
				next[0] = make_uint4(0, 0, 0, 0);
				next[1] = a + o1 >= 0 ? __ldg(p + a + o1) : next[0];
				next[2] = a + o2 >= 0 ? __ldg(p + a + o2) : next[0];
				next[3] = a + o3 >= 0 ? __ldg(p + a + o3) : next[0];
			}
			a += step;
			if (per_run && --left == 0) { // the run ends: on to this thread's next
				a += stride - run;
				left = per_run;
			}
		}
		if (b > 0) {
#pragma unroll
			for (j = 0; j < 4; j++) {
				if (todo == 0) { // a run begins: skip the others' words
					if (b > 1 || j > 0)
						c = mul_shared(gap, c);
					todo = run;
				}
				todo--;
				c = crc_uint4<SMALL>(s, lo, c, v[j]);
			}
		}
#pragma unroll
		for (j = 0; j < 4; j++)
			v[j] = next[j];
	}
	return c;
}

// The header's verdict, its raw CRC over bytes 0-27, and the stored CRC.
template <bool SMALL>
__device__ static unsigned int check_header(const unsigned char *s, unsigned int lo,
					    const uint4 *__restrict__ f, unsigned long long payload,
					    struct record *r, unsigned int *raw)
{
	uint4 h0 = __ldg(f), h1 = __ldg(f + 1);
	unsigned int c = 0;

	r->seq = (unsigned long long)h0.z | (unsigned long long)h0.w << 32;
	r->payload_len = h1.z;
	c = crc_word<SMALL>(s, lo, c, h0.x);
	c = crc_word<SMALL>(s, lo, c, h0.y);
	c = crc_word<SMALL>(s, lo, c, h0.z);
	c = crc_word<SMALL>(s, lo, c, h0.w);
	c = crc_word<SMALL>(s, lo, c, h1.x);
	c = crc_word<SMALL>(s, lo, c, h1.y);
	*raw = crc_word<SMALL>(s, lo, c, h1.z);
	if (h0.x != MAGIC)
		return FRAME_BAD_MAGIC;
	if (h0.y != (1u | HEADER << 16))
		return FRAME_BAD_VERSION;
	if (h1.z != payload)
		return FRAME_BAD_LENGTH;
	return FRAME_OK;
}

// check checks nframes frames of frame_size bytes laid end to end at buf
// (16-byte aligned, frame_size a multiple of 16 and at least 48) and
// writes one record per frame to out. Blocks are BLOCK threads; a frame's
// group is 2^group_log2 of them, each taking rounds runs of run words
// (run 1, 2 or a multiple of 4, rounds * run a multiple of 4, rounds *
// run * group at least the payload's words). mult holds the multipliers for
// this frame size, group and run; init_fix is what the CRC's initial
// value and final xor add to a raw CRC of the covered bytes.
template <bool SMALL>
__device__ static void check(const uint4 *__restrict__ buf, unsigned long long nframes,
			     unsigned long long frame_size, struct record *out, unsigned int group_log2,
			     unsigned int run, unsigned int rounds, const unsigned int *__restrict__ mult,
			     unsigned int init_fix)
{
	unsigned char *s = (unsigned char *)tab;
	const unsigned int *gap = (const unsigned int *)(s + (SMALL ? SMALL_TABLES : BIG_TABLES));
	const unsigned int group = 1u << group_log2;
	const unsigned int rank = threadIdx.x & (group - 1); // in the group
	const unsigned int lane = threadIdx.x % LANES;
	const unsigned int warp = threadIdx.x / LANES;
	const unsigned int lo = lane << 2;
	const unsigned int levels = group_log2 < 5 ? group_log2 : 5;
	const unsigned long long per_block = BLOCK >> group_log2;
	const unsigned long long payload = frame_size - HEADER;
	const long long stride = (long long)run << group_log2;
	const long long pad = (long long)rounds * stride - (long long)(payload / 16);
	const long long first = (long long)rank * run - pad;
	unsigned long long base;

	build_tables<SMALL>(s, mult);
	__syncthreads();

	// Every thread runs every iteration: the block synchronises inside.
	for (base = blockIdx.x * per_block; base < nframes; base += gridDim.x * per_block) {
		const unsigned long long i = base + (threadIdx.x >> group_log2);
		const uint4 *f = buf + i * (frame_size / 16);
		unsigned int c = 0, other, hdr = 0, status;
		struct record r;
		unsigned int k, w;

		if (i < nframes)
			c = crc_share<SMALL>(s, lo, gap, f + HEADER / 16, first, stride, run, rounds);
		for (k = 0; k < levels; k++) {
			other = __shfl_down_sync(0xffffffffu, c, 1 << k);
			if ((lane & ((2u << k) - 1)) == 0)
				c = mul(mult, MUL_LEVEL0 + k, c) ^ other;
		}
		if (group > LANES) {
			// Lane 0 of each warp holds its warp's CRC; the group's first
			// thread chains them.
			if (lane == 0)
				warp_crc[warp] = c;
			__syncthreads();
			if (rank == 0)
				for (w = 1; w < group / LANES; w++)
					c = mul(mult, MUL_WARP, c) ^ warp_crc[warp + w];
			__syncthreads();
		}
		if (rank == 0 && i < nframes) {
			status = check_header<SMALL>(s, lo, f, payload, &r, &hdr);
			c = mul(mult, MUL_PAYLOAD, hdr) ^ c ^ init_fix;
			if (status == FRAME_OK && c != __ldg(f + 1).w)
				status = FRAME_BAD_CRC;
			r.status = status;
			out[i] = r;
		}
	}
}

// The kernels: BIG_TABLES + GAP_TABLE, or SMALL_TABLES + GAP_TABLE, bytes
// of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(BLOCK, 1)
framecheck(const uint4 *__restrict__ buf, unsigned long long nframes, unsigned long long frame_size,
	   struct record *out, unsigned int group_log2, unsigned int run, unsigned int rounds,
	   const unsigned int *__restrict__ mult, unsigned int init_fix)
{
	check<false>(buf, nframes, frame_size, out, group_log2, run, rounds, mult, init_fix);
}

extern "C" __global__ void __launch_bounds__(BLOCK, 1)
framecheck_small(const uint4 *__restrict__ buf, unsigned long long nframes,
		 unsigned long long frame_size, struct record *out, unsigned int group_log2,
		 unsigned int run, unsigned int rounds, const unsigned int *__restrict__ mult,
		 unsigned int init_fix)
{
	check<true>(buf, nframes, frame_size, out, group_log2, run, rounds, mult, init_fix);
}

__device__ static void xor4(uint4 *a, uint4 v)
{
	a->x ^= v.x;
	a->y ^= v.y;
	a->z ^= v.z;
	a->w ^= v.w;
}

// readsum xors the n 16-byte words at buf into out[0..3]: every byte read
// once, four loads in flight per thread, blocks of READ_BLOCK threads.
extern "C" __global__ void __launch_bounds__(READ_BLOCK)
readsum(const uint4 *__restrict__ buf, unsigned long long n, unsigned int *out)
{
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	uint4 a = make_uint4(0, 0, 0, 0), v0, v1, v2, v3;
	int k;

	for (; i + 3 * stride < n; i += 4 * stride) {
		v0 = __ldg(buf + i);
		v1 = __ldg(buf + i + stride);
		v2 = __ldg(buf + i + 2 * stride);
		v3 = __ldg(buf + i + 3 * stride);
		xor4(&a, v0);
		xor4(&a, v1);
		xor4(&a, v2);
		xor4(&a, v3);
	}
	for (; i < n; i += stride)
		xor4(&a, __ldg(buf + i));
	for (k = LANES / 2; k > 0; k /= 2) {
		a.x ^= __shfl_xor_sync(0xffffffffu, a.x, k);
		a.y ^= __shfl_xor_sync(0xffffffffu, a.y, k);
		a.z ^= __shfl_xor_sync(0xffffffffu, a.z, k);
		a.w ^= __shfl_xor_sync(0xffffffffu, a.w, k);
	}
	if (threadIdx.x % LANES == 0) {
		atomicXor(out, a.x);
		atomicXor(out + 1, a.y);
		atomicXor(out + 2, a.z);
		atomicXor(out + 3, a.w);
	}
}
