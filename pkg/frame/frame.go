// Package frame defines the acquisition frame format: what the simulated
// FPGA source emits, and what the CPU and GPU checkers verify.
//
// A frame is a 32-byte header followed by a payload, all little-endian:
//
//	offset size field
//	     0    4 magic       0x314D5246 ("FRM1")
//	     4    2 version     1
//	     6    2 header size 32
//	     8    8 sequence    0, 1, 2, ... per source, never reused
//	    16    8 timestamp   nanoseconds since the source started
//	    24    4 payload length in bytes
//	    28    4 CRC32C (Castagnoli) of bytes 0-27 and the payload
//
// The payload is a pattern derived from the sequence number (see
// FillPayload), so a checker can tell a frame's bytes from another's
// even when the CRC happens to match. Frames are laid end to end; a frame
// never spans two DMA slots unless the slot is smaller than the frame.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Format constants.
const (
	Magic      = 0x314D5246
	Version    = 1
	HeaderSize = 32
	crcOffset  = 28
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors from Parse.
var (
	ErrShort   = errors.New("frame: shorter than its header says")
	ErrMagic   = errors.New("frame: bad magic")
	ErrVersion = errors.New("frame: unsupported version or header size")
	ErrCRC     = errors.New("frame: CRC mismatch")
)

// Header is a decoded frame header.
type Header struct {
	Seq        uint64
	Timestamp  uint64
	PayloadLen uint32
	CRC        uint32
}

// Size returns the bytes of a frame with a payload of n bytes.
func Size(n int) int { return HeaderSize + n }

// Encode writes a complete frame into dst, which must hold Size(payloadLen)
// bytes, and returns its length.
func Encode(dst []byte, seq, timestamp uint64, payloadLen int) int {
	n := Size(payloadLen)
	b := dst[:n]
	binary.LittleEndian.PutUint32(b[0:], Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], HeaderSize)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], timestamp)
	binary.LittleEndian.PutUint32(b[24:], uint32(payloadLen))
	FillPayload(b[HeaderSize:], seq)
	binary.LittleEndian.PutUint32(b[crcOffset:], checksum(b))
	return n
}

func checksum(frame []byte) uint32 {
	c := crc32.Update(0, castagnoli, frame[:crcOffset])
	return crc32.Update(c, castagnoli, frame[HeaderSize:])
}

// FillPayload writes the payload pattern of frame seq into p: word i is
// (k + i*phi) * m with k derived from seq, so every frame and every word
// differ, and a source can produce it at memory speed (no serial
// dependency from word to word).
func FillPayload(p []byte, seq uint64) {
	const m = 0xBF58476D1CE4E5B9
	var phi uint64 = 0x9E3779B97F4A7C15
	x := (seq + 1) * 0xD1B54A32D192ED03
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := p[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(q[0:], x*m)
		binary.LittleEndian.PutUint64(q[8:], (x+phi)*m)
		binary.LittleEndian.PutUint64(q[16:], (x+2*phi)*m)
		binary.LittleEndian.PutUint64(q[24:], (x+3*phi)*m)
		x += 4 * phi
	}
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:i+8], x*m)
		x += phi
	}
	if i < len(p) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], x*m)
		copy(p[i:], tail[:])
	}
}

// Parse decodes and verifies the frame at the start of b and returns its
// header; the frame occupies Size(int(h.PayloadLen)) bytes of b.
func Parse(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if m := binary.LittleEndian.Uint32(b); m != Magic {
		return Header{}, fmt.Errorf("%w: %#08x", ErrMagic, m)
	}
	if v, hs := binary.LittleEndian.Uint16(b[4:]), binary.LittleEndian.Uint16(b[6:]); v != Version || hs != HeaderSize {
		return Header{}, fmt.Errorf("%w: version %d, header %d bytes", ErrVersion, v, hs)
	}
	h := Header{
		Seq:        binary.LittleEndian.Uint64(b[8:]),
		Timestamp:  binary.LittleEndian.Uint64(b[16:]),
		PayloadLen: binary.LittleEndian.Uint32(b[24:]),
		CRC:        binary.LittleEndian.Uint32(b[crcOffset:]),
	}
	if uint64(len(b)-HeaderSize) < uint64(h.PayloadLen) {
		return h, fmt.Errorf("%w: payload %d bytes, %d present", ErrShort, h.PayloadLen, len(b)-HeaderSize)
	}
	if c := checksum(b[:Size(int(h.PayloadLen))]); c != h.CRC {
		return h, fmt.Errorf("%w: frame %d has %#08x, computed %#08x", ErrCRC, h.Seq, h.CRC, c)
	}
	return h, nil
}

// Stats counts what a Checker saw.
type Stats struct {
	Frames      uint64 // well-formed frames
	Bytes       uint64 // bytes of well-formed frames
	Gaps        uint64 // frames missing between consecutive sequence numbers
	Duplicates  uint64 // frames at or behind the last sequence number seen
	CRCFailures uint64 // frames that failed to parse
}

// Checker verifies a sequence of frames in order.
type Checker struct {
	Stats
	next    uint64
	started bool
}

// Check parses one frame and accounts for its sequence number. It returns
// the frame's size so the caller can step to the next.
func (c *Checker) Check(b []byte) (int, error) {
	h, err := Parse(b)
	if err != nil {
		c.CRCFailures++
		return 0, err
	}
	n := Size(int(h.PayloadLen))
	c.Account(h.Seq, n)
	return n, nil
}

// Account counts a well-formed frame of size bytes with sequence number
// seq that was verified elsewhere (by the GPU checker).
func (c *Checker) Account(seq uint64, size int) {
	switch {
	case !c.started || seq == c.next:
	case seq > c.next:
		c.Gaps += seq - c.next
	default:
		c.Duplicates++
		return
	}
	c.started = true
	c.next = seq + 1
	c.Frames++
	c.Bytes += uint64(size)
}

// Next returns the sequence number the checker expects next.
func (c *Checker) Next() uint64 { return c.next }
