package resident

import (
	"encoding/binary"
	"fmt"
)

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
