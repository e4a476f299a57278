//go:build linux

package trace

import (
	"bytes"
	"encoding/binary"
)

func binarySize(v gpufpgaEvent) int { return binary.Size(v) }

func decode(b []byte, v *gpufpgaEvent) {
	_, _ = binary.Decode(b, binary.LittleEndian, v)
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(bytes.TrimSpace(out))
}
