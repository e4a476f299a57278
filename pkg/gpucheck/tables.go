package gpucheck

import "github.com/gpufpga/gpufpga/pkg/frame"

// Multipliers in the kernel's table, in this order (enum multiplier in
// framecheck.cu).
const (
	mulLevels  = 5 // 16 * run * 2^k bytes, k = 0..4: the shuffle tree
	mulWarp    = 5 // 32 runs: warp to warp
	mulPayload = 6 // the payload: shifts the header's CRC
	mulGap     = 7 // the other threads' runs between two of a thread's
	// multipliers is how many tables the allocation holds; a bare name
	// here would repeat mulGap's value.
	multipliers = mulGap + 1
)

// layout is how a frame's payload is shared among its group of threads:
// the payload, left-padded with zero words, is cut into rounds of group
// runs of run 16-byte words; thread r of the group takes run r of each
// round. A thread's rounds * run words are a multiple of 4 (its batches
// of loads).
type layout struct {
	groupLog2 uint   // 2^groupLog2 threads check a frame
	run       uint32 // words per run
	rounds    uint32
}

// newLayout shares frames of frameSize bytes among 2^groupLog2 threads in
// runs of run words (1, 2, or rounded up to a multiple of 4: a batch of
// loads is four words of one run, or of whole runs); run 0, or a group of
// one, gives each thread one contiguous chunk.
func newLayout(frameSize int, groupLog2 uint, run int) layout {
	words := uint64(frameSize-frame.HeaderSize) / 16
	group := uint64(1) << groupLog2
	if run <= 0 || group == 1 {
		r := ((words+group-1)/group + 3) / 4 * 4
		return layout{groupLog2: groupLog2, run: uint32(r), rounds: 1}
	}
	r := uint64(run)
	if r > 2 {
		r = (r + 3) / 4 * 4
	}
	rounds := (words + group*r - 1) / (group * r)
	m := uint64(4) // rounds a multiple of m makes rounds * r one of 4
	switch {
	case r%4 == 0:
		m = 1
	case r%2 == 0:
		m = 2
	}
	return layout{groupLog2: groupLog2, run: uint32(r), rounds: uint32((rounds + m - 1) / m * m)}
}

// combineTables returns the kernel's multiplier tables for frames of
// frameSize bytes shared as l says, and the constant the 0xFFFFFFFF
// initial value and the final xor add to the raw CRC of the covered
// bytes.
func combineTables(frameSize int, l layout) ([]uint32, uint32) {
	payload := uint64(frameSize - frame.HeaderSize)
	group := uint64(1) << l.groupLog2
	run := 16 * uint64(l.run) // bytes
	t := make([]uint32, 0, multipliers*1024)
	for k := range mulLevels {
		t = frame.MulTable(t, frame.X8N(run<<k))
	}
	t = frame.MulTable(t, frame.X8N(run*32))
	t = frame.MulTable(t, frame.X8N(payload))
	t = frame.MulTable(t, frame.X8N(run*(group-1)))
	return t, frame.InitFix(frame.CRCCovered + payload)
}
