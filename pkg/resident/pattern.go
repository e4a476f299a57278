package resident

import (
	_ "embed" // PatternFuncPTX
	"encoding/binary"
	"fmt"
)

// PatternFuncPTX is a function for LinkFunc (pattern_func.cu, as `make
// ptx` compiled it) that finds fill k bad unless every word of its slot
// holds Word's and it fills the slot; its state is PatternState's.
//
//go:embed pattern_func.ptx
var PatternFuncPTX []byte

// PatternState is PatternFuncPTX's state (FuncConfig.State) for fills of
// slotSize bytes with nsrc source patterns.
func PatternState(nsrc uint64, slotSize int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, nsrc)
	return binary.LittleEndian.AppendUint64(b, uint64(slotSize))
}

// golden is the pattern's multiplier (GOLDEN in resident.cu).
const golden = 0x9e3779b97f4a7c15

// Word is 64-bit word i of fill k of a slot, with nsrc source patterns:
// w[0] = k, w[1] = k % nsrc, then ((k % nsrc) + 1) * golden ^ i. With
// nsrc > nslots, the previous fill of a slot (k - nslots) differs from
// fill k in every word, so a consumer that read a slot before its data
// landed finds out wherever it looked.
func Word(k, nsrc, i uint64) uint64 {
	src := k % nsrc
	switch i {
	case 0:
		return k
	case 1:
		return src
	}
	return (src+1)*golden ^ i
}

// Fill writes fill k's words into b (a multiple of 16 bytes).
func Fill(b []byte, k, nsrc uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], Word(k, nsrc, uint64(i/8)))
	}
}

// Verify checks that b holds fill k, as the GPU consumer does.
func Verify(b []byte, k, nsrc uint64) error {
	if len(b)%16 != 0 {
		return fmt.Errorf("%w: fill %d: %d bytes, not a multiple of 16", ErrData, k, len(b))
	}
	for i := 0; i+8 <= len(b); i += 8 {
		if got, want := binary.LittleEndian.Uint64(b[i:]), Word(k, nsrc, uint64(i/8)); got != want {
			return fmt.Errorf("%w: fill %d: word %d is %#x, want %#x", ErrData, k, i/8, got, want)
		}
	}
	return nil
}
