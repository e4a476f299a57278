package gpucheck

import "github.com/gpufpga/gpufpga/pkg/frame"

// Multipliers in the kernel's table, in this order (enum multiplier in
// framecheck.cu).
const (
	mulLevels   = 5              // chunk * 2^k bytes, k = 0..4: the shuffle tree
	mulWarp     = 5              // 32 chunks: warp to warp
	mulPayload  = 6              // the payload: shifts the header's CRC
	multipliers = mulPayload + 1 // tables in all: the allocation holds this many
)

// combineTables returns the kernel's multiplier tables for frames of
// frameSize bytes checked by 2^groupLog2 threads each, and the constant
// the 0xFFFFFFFF initial value and the final xor add to the raw CRC of
// the covered bytes.
func combineTables(frameSize int, groupLog2 uint) ([]uint32, uint32) {
	payload := uint64(frameSize - frame.HeaderSize)
	group := uint64(1) << groupLog2
	chunk := (payload + group*16 - 1) / (group * 16) * 16
	t := make([]uint32, 0, multipliers*1024)
	for k := range mulLevels {
		t = frame.MulTable(t, frame.X8N(chunk<<k))
	}
	t = frame.MulTable(t, frame.X8N(chunk*32))
	t = frame.MulTable(t, frame.X8N(payload))
	return t, frame.InitFix(frame.CRCCovered + payload)
}
