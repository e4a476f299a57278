// The built-in frame checker, as a function the resident consumer runs
// on every fill (resident.LinkFrames), linked as a user's function is:
// gpufpga_frm1_check (frm1.cu) checks the fill's FRM1 frames, and fill
// k's record tells the host where its frames start and how many passed,
// so that the host counts gaps and duplicates in fill order
// (resident.FrameOrder), as frame.Checker does.
//
// state: struct frames_state in GPU memory; out: struct frames_record.
//
// Regenerate the PTX with `make ptx`.
typedef unsigned long long u64;

extern "C" __device__ long long gpufpga_frm1_check(const unsigned char *slot, u64 len, u64 frame_size,
						 u64 *first_seq);

struct frames_state {
	u64 frame_size;
};

struct frames_record {
	u64 first_seq; // the fill's first frame's sequence number
	u64 frames;    // frames checked, 0 for a bad fill: its frames are missing
};

extern "C" __device__ int gpufpga_process(const unsigned char *slot, u64 len, u64 k, void *state, void *out)
{
	const struct frames_state *st = (const struct frames_state *)state;
	struct frames_record *rec = (struct frames_record *)out;
	u64 first;
	long long n = gpufpga_frm1_check(slot, len, st->frame_size, &first);

	(void)k;
	if (threadIdx.x == 0) {
		rec->first_seq = first;
		rec->frames = n < 0 ? 0 : n;
	}
	return n < 0;
}
