// Frame checker: validates the FRM1 frames of package frame in GPU memory.
//
// A group of 2^group_log2 threads (1 to 1024) checks one frame. Each thread
// takes a contiguous chunk of the payload and computes that chunk's CRC32C
// (raw: no initial value or final xor) with slicing-by-4 tables; the chunk
// CRCs are then combined, each left part multiplied by x^(8 * bytes on its
// right) modulo the CRC polynomial (byte tables the host computes): by a
// shuffle tree inside a warp, then warp by warp through shared memory. To
// make every right part the same length the payload is thought of as
// left-padded with zeros to equal chunks: with a raw CRC, leading zeros
// change nothing. The host picks the group size: small frames share a
// warp, large ones spread over several.
//
// The tables live in shared memory, one copy per bank (32 words apart), so
// the 32 lanes of a warp never conflict whatever bytes they look up. That
// takes 128 KiB, so blocks are 1024 threads and the grid is one block per
// multiprocessor, looping over the frames.
//
// Regenerate the PTX with `make ptx` (needs nvcc).

#define POLY 0x82F63B78u /* CRC32C (Castagnoli), reflected */
#define LANES 32
#define BLOCK 1024
#define WARPS (BLOCK / LANES)
#define TABLES 4
#define HEADER 32
#define CRC_COVERED_HEADER 28
#define MAGIC 0x314D5246u

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
	MUL_LEVEL0 = 0,	/* x^(8 * chunk * 2^k), k = 0..4: the shuffle tree */
	MUL_WARP = 5,	/* x^(8 * chunk * 32): one warp's span */
	MUL_PAYLOAD = 6,	/* x^(8 * payload): shifts the header's CRC */
};

__device__ static unsigned int mul(const unsigned int *__restrict__ t, int which, unsigned int c)
{
	t += which * 1024;
	return __ldg(t + (c & 0xff)) ^ __ldg(t + 256 + ((c >> 8) & 0xff)) ^
	       __ldg(t + 512 + ((c >> 16) & 0xff)) ^ __ldg(t + 768 + (c >> 24));
}

__device__ static unsigned int crc_byte(unsigned int c)
{
	int k;

	for (k = 0; k < 8; k++)
		c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
	return c;
}

__device__ static void build_tables(unsigned int *tab)
{
	unsigned int b, t, k, l;

	for (b = threadIdx.x; b < 256; b += blockDim.x) {
		t = crc_byte(b);
		for (k = 0; k < TABLES; k++) {
			for (l = 0; l < LANES; l++)
				tab[(k * 256 + b) * LANES + l] = t;
			t = (t >> 8) ^ crc_byte(t & 0xff);
		}
	}
}

// One slicing-by-4 step: the raw CRC of what came before and the word w.
__device__ static unsigned int crc_word(const unsigned int *tab, unsigned int lane,
					 unsigned int c, unsigned int w)
{
	c ^= w;
	return tab[(3 * 256 + (c & 0xff)) * LANES + lane] ^
	       tab[(2 * 256 + ((c >> 8) & 0xff)) * LANES + lane] ^
	       tab[(1 * 256 + ((c >> 16) & 0xff)) * LANES + lane] ^
	       tab[(0 * 256 + (c >> 24)) * LANES + lane];
}

__device__ static unsigned int crc_uint4(const unsigned int *tab, unsigned int lane,
					  unsigned int c, uint4 v)
{
	c = crc_word(tab, lane, c, v.x);
	c = crc_word(tab, lane, c, v.y);
	c = crc_word(tab, lane, c, v.z);
	return crc_word(tab, lane, c, v.w);
}

// The raw CRC of payload bytes [start, end), both multiples of 16.
__device__ static unsigned int crc_chunk(const unsigned int *tab, unsigned int lane,
					  const uint4 *__restrict__ p, long long start,
					  long long end)
{
	unsigned int c = 0;
	long long i = start / 16, n = end / 16;
	uint4 v[4], next[4];
	int j;

	// Four loads in flight per lane (two whole 32-byte sectors), and the
	// next four issued before these are folded in, so memory latency
	// overlaps the table lookups.
	if (i + 4 <= n)
		for (j = 0; j < 4; j++)
			v[j] = __ldg(p + i + j);
	for (; i + 8 <= n; i += 4) {
		for (j = 0; j < 4; j++)
			next[j] = __ldg(p + i + 4 + j);
		for (j = 0; j < 4; j++)
			c = crc_uint4(tab, lane, c, v[j]);
		for (j = 0; j < 4; j++)
			v[j] = next[j];
	}
	if (i + 4 <= n) {
		for (j = 0; j < 4; j++)
			c = crc_uint4(tab, lane, c, v[j]);
		i += 4;
	}
	for (; i < n; i++)
		c = crc_uint4(tab, lane, c, __ldg(p + i));
	return c;
}

// The header's verdict, its raw CRC over bytes 0-27, and the stored CRC.
__device__ static unsigned int check_header(const unsigned int *tab, unsigned int lane,
					    const uint4 *__restrict__ f,
					    unsigned long long payload, struct record *r,
					    unsigned int *raw)
{
	uint4 h0 = __ldg(f), h1 = __ldg(f + 1);
	unsigned int c = 0;

	r->seq = (unsigned long long)h0.z | (unsigned long long)h0.w << 32;
	r->payload_len = h1.z;
	c = crc_word(tab, lane, c, h0.x);
	c = crc_word(tab, lane, c, h0.y);
	c = crc_word(tab, lane, c, h0.z);
	c = crc_word(tab, lane, c, h0.w);
	c = crc_word(tab, lane, c, h1.x);
	c = crc_word(tab, lane, c, h1.y);
	*raw = crc_word(tab, lane, c, h1.z);
	if (h0.x != MAGIC)
		return FRAME_BAD_MAGIC;
	if (h0.y != (1u | HEADER << 16))
		return FRAME_BAD_VERSION;
	if (h1.z != payload)
		return FRAME_BAD_LENGTH;
	return FRAME_OK;
}

// framecheck checks nframes frames of frame_size bytes laid end to end at
// buf (16-byte aligned, frame_size a multiple of 16 and at least 48) and
// writes one record per frame to out. Blocks are BLOCK threads; a frame's
// group is 2^group_log2 of them. mult holds the multipliers for this frame
// size and group; init_fix is what the CRC's initial value and final xor
// add to a raw CRC of the covered bytes.
extern "C" __global__ void __launch_bounds__(BLOCK, 1)
framecheck(const uint4 *__restrict__ buf, unsigned long long nframes,
	   unsigned long long frame_size, struct record *out, unsigned int group_log2,
	   const unsigned int *__restrict__ mult, unsigned int init_fix)
{
	extern __shared__ unsigned int tab[]; // TABLES * 256 * LANES words
	__shared__ unsigned int warp_crc[WARPS];
	const unsigned int group = 1u << group_log2;
	const unsigned int rank = threadIdx.x & (group - 1); // in the group
	const unsigned int lane = threadIdx.x % LANES;
	const unsigned int warp = threadIdx.x / LANES;
	const unsigned int levels = group_log2 < 5 ? group_log2 : 5;
	const unsigned long long per_block = BLOCK >> group_log2;
	const unsigned long long payload = frame_size - HEADER;
	// Chunks of whole 16-byte words, group of them covering the payload.
	const unsigned long long chunk = ((payload + group * 16ull - 1) / (group * 16ull)) * 16;
	const long long pad = (long long)(group * chunk - payload);
	const long long start = (long long)rank * chunk - pad;
	unsigned long long base;

	build_tables(tab);
	__syncthreads();

	// Every thread runs every iteration: the block synchronises inside.
	for (base = blockIdx.x * per_block; base < nframes; base += gridDim.x * per_block) {
		const unsigned long long i = base + (threadIdx.x >> group_log2);
		const uint4 *f = buf + i * (frame_size / 16);
		unsigned int c = 0, other, hdr = 0, status;
		struct record r;
		unsigned int k, w;

		if (i < nframes && start + (long long)chunk > 0)
			c = crc_chunk(tab, lane, f + HEADER / 16, start > 0 ? start : 0, start + chunk);
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
			status = check_header(tab, lane, f, payload, &r, &hdr);
			c = mul(mult, MUL_PAYLOAD, hdr) ^ c ^ init_fix;
			if (status == FRAME_OK && c != __ldg(f + 1).w)
				status = FRAME_BAD_CRC;
			r.status = status;
			out[i] = r;
		}
	}
}
