// Frame checker: validates the FRM1 frames of package frame in GPU memory.
//
// One warp checks one frame. Its 32 lanes each take a contiguous chunk of
// the payload and compute that chunk's CRC32C (raw: no initial value or
// final xor) with slicing-by-4 tables; a shuffle tree then combines the
// chunk CRCs, multiplying each left half by x^(8 * bytes on its right)
// modulo the CRC polynomial. To make every right half the same length the
// payload is thought of as left-padded with zeros to 32 equal chunks: with
// a raw CRC, leading zeros change nothing.
//
// The tables live in shared memory, one copy per bank (32 words apart), so
// the 32 lanes of a warp never conflict whatever bytes they look up. That
// takes 128 KiB, so blocks are 1024 threads (32 frames at a time) and the
// grid is one block per multiprocessor, looping over the frames.
//
// Regenerate the PTX with `make ptx` (needs nvcc).

#define POLY 0x82F63B78u /* CRC32C (Castagnoli), reflected */
#define LANES 32
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

// Per-launch constants, computed once per block.
struct powers {
	unsigned int level[5];  // x^(8 * chunk * 2^k): combine at tree level k
	unsigned int payload;   // x^(8 * payload bytes): shifts the header's CRC
	unsigned int init_fix;  // what the 0xFFFFFFFF initial value adds, and the final xor
};

// a * b modulo POLY, both reflected polynomials (a must not be 0).
__device__ static unsigned int multmodp(unsigned int a, unsigned int b)
{
	unsigned int m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

// x^(8n) modulo POLY: the operator that appends n zero bytes.
__device__ static unsigned int x8nmodp(unsigned long long n)
{
	unsigned int sq = 1u << 30; // x^1, squared at each step
	unsigned int p = 1u << 31;  // x^0
	int k;

	for (k = 0; k < 3; k++)
		sq = multmodp(sq, sq); // x^8
	while (n) {
		if (n & 1)
			p = multmodp(sq, p);
		sq = multmodp(sq, sq);
		n >>= 1;
	}
	return p;
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
	uint4 v[4];
	int j;

	// Four loads in flight per lane: two whole 32-byte sectors.
	for (; i + 4 <= n; i += 4) {
		for (j = 0; j < 4; j++)
			v[j] = __ldg(p + i + j);
		for (j = 0; j < 4; j++)
			c = crc_uint4(tab, lane, c, v[j]);
	}
	for (; i < n; i++)
		c = crc_uint4(tab, lane, c, __ldg(p + i));
	return c;
}

__device__ static void setup_powers(struct powers *pw, unsigned long long payload,
				    unsigned long long chunk)
{
	int k;

	for (k = 0; k < 5; k++)
		pw->level[k] = x8nmodp(chunk << k);
	pw->payload = x8nmodp(payload);
	// Initial 0xFFFFFFFF carried over the covered bytes, then the final xor.
	pw->init_fix = multmodp(x8nmodp(CRC_COVERED_HEADER + payload), 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
}

// The header's verdict, its raw CRC over bytes 0-27, and the stored CRC.
__device__ static unsigned int check_header(const unsigned int *tab, const uint4 *__restrict__ f,
					    unsigned long long payload, struct record *r,
					    unsigned int *raw)
{
	uint4 h0 = __ldg(f), h1 = __ldg(f + 1);
	unsigned int c = 0;

	r->seq = (unsigned long long)h0.z | (unsigned long long)h0.w << 32;
	r->payload_len = h1.z;
	c = crc_word(tab, 0, c, h0.x);
	c = crc_word(tab, 0, c, h0.y);
	c = crc_word(tab, 0, c, h0.z);
	c = crc_word(tab, 0, c, h0.w);
	c = crc_word(tab, 0, c, h1.x);
	c = crc_word(tab, 0, c, h1.y);
	*raw = crc_word(tab, 0, c, h1.z);
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
// writes one record per frame to out.
extern "C" __global__ void __launch_bounds__(1024, 1)
framecheck(const uint4 *__restrict__ buf, unsigned long long nframes,
	   unsigned long long frame_size, struct record *out)
{
	extern __shared__ unsigned int tab[]; // TABLES * 256 * LANES words
	__shared__ struct powers pw;
	const unsigned int lane = threadIdx.x % LANES;
	const unsigned long long warps = blockDim.x / LANES;
	const unsigned long long payload = frame_size - HEADER;
	// Chunks of whole 16-byte words, 32 of them covering the payload.
	const unsigned long long chunk = ((payload + LANES * 16 - 1) / (LANES * 16)) * 16;
	const long long pad = LANES * chunk - payload;
	const long long start = (long long)lane * chunk - pad;
	unsigned long long i;

	build_tables(tab);
	if (threadIdx.x == 0)
		setup_powers(&pw, payload, chunk);
	__syncthreads();

	for (i = blockIdx.x * warps + threadIdx.x / LANES; i < nframes; i += gridDim.x * warps) {
		const uint4 *f = buf + i * (frame_size / 16);
		unsigned int c = 0, other, hdr = 0, status = FRAME_OK;
		struct record r;
		int k;

		if (start + (long long)chunk > 0)
			c = crc_chunk(tab, lane, f + HEADER / 16, start > 0 ? start : 0, start + chunk);
		for (k = 0; k < 5; k++) {
			other = __shfl_down_sync(0xffffffffu, c, 1 << k);
			if ((lane & ((2u << k) - 1)) == 0)
				c = multmodp(pw.level[k], c) ^ other;
		}
		if (lane == 0) {
			status = check_header(tab, f, payload, &r, &hdr);
			c = multmodp(pw.payload, hdr) ^ c ^ pw.init_fix;
			if (status == FRAME_OK && c != __ldg(f + 1).w)
				status = FRAME_BAD_CRC;
			r.status = status;
			out[i] = r;
		}
	}
}
