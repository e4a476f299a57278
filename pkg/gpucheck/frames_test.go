//go:build linux

package gpucheck

import (
	"encoding/binary"

	"github.com/gpufpga/gpufpga/pkg/frame"
)

// frames lays out n frames of size bytes with the damage a link or a
// buggy source would do, and returns what the CPU checker makes of them.
func frames(n, size int) ([]byte, frame.Stats) {
	buf := make([]byte, n*size)
	seq := uint64(1000)
	for i := range n {
		switch {
		case i == 7 || i == 8: // two frames lost upstream
			seq += 3
		case i == 20: // a repeated frame
			seq -= 2
		}
		frame.Encode(buf[i*size:], seq, seq*10, size-frame.HeaderSize)
		seq++
	}
	buf[3*size+frame.HeaderSize+5] ^= 0x10                           // payload bit flip
	buf[4*size+16] ^= 1                                              // timestamp bit flip
	binary.LittleEndian.PutUint32(buf[5*size:], 0xdeadbeef)          // magic
	buf[(n-1)*size+size-1] ^= 0x80                                   // last byte of the last frame
	binary.LittleEndian.PutUint32(buf[(n-2)*size+24:], uint32(size)) // length
	var cpu frame.Checker
	for i := range n {
		cpu.Check(buf[i*size : (i+1)*size])
	}
	return buf, cpu.Stats
}
