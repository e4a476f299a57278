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
//	    16    8 timestamp   the source's clock: nanoseconds since the Go source
//	                        started; an RTL source's user-clock cycle count
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
	// CRCCovered is the header bytes the CRC covers, before the payload.
	CRCCovered = crcOffset
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
	putHeader(b, seq, timestamp, payloadLen)
	FillPayload(b[HeaderSize:], seq)
	binary.LittleEndian.PutUint32(b[crcOffset:], checksum(b))
	return n
}

func putHeader(b []byte, seq, timestamp uint64, payloadLen int) {
	binary.LittleEndian.PutUint32(b[0:], Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], HeaderSize)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], timestamp)
	binary.LittleEndian.PutUint32(b[24:], uint32(payloadLen))
}

func checksum(frame []byte) uint32 {
	c := crc32.Update(0, castagnoli, frame[:crcOffset])
	return crc32.Update(c, castagnoli, frame[HeaderSize:])
}

// FillPayload writes the payload pattern of frame seq into p: word i (8
// bytes, little-endian) is (i+1)*phi ^ key(seq), a position pattern under
// a key that mixes the sequence number, so every frame and every word
// differ. It has no serial dependency from word to word, so a source
// produces it at memory speed, and the key enters the CRC linearly, so
// Encoder computes the CRC without reading the payload back.
func FillPayload(p []byte, seq uint64) {
	key := payloadKey(seq)
	var phi uint64 = Phi
	w := phi // word 0: (0+1)*phi
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := p[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(q[0:], w^key)
		binary.LittleEndian.PutUint64(q[8:], (w+phi)^key)
		binary.LittleEndian.PutUint64(q[16:], (w+2*phi)^key)
		binary.LittleEndian.PutUint64(q[24:], (w+3*phi)^key)
		w += 4 * phi
	}
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:i+8], w^key)
		w += phi
	}
	if i < len(p) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], w^key)
		copy(p[i:], tail[:])
	}
}

// Phi is the payload pattern's step (FillPayload).
const Phi = 0x9E3779B97F4A7C15

// payloadKey is splitmix64's finaliser of seq.
func payloadKey(seq uint64) uint64 {
	z := seq + 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// Encoder encodes frames of one payload length, computing their CRCs
// from tables instead of a pass over the payload: the payload is a fixed
// pattern xored with a repeated 8-byte key, and a raw CRC is linear. An
// in-process source uses it to produce frames at memory speed. Its frames
// are Encode's, byte for byte.
type Encoder struct {
	payloadLen int
	baseCRC    uint32         // raw CRC of the payload with key 0
	keyCRC     [8][256]uint32 // raw CRC of the repeated key, by key byte
	shift      []uint32       // multiplies by x^(8*payloadLen): appends the payload to the header
	fix        uint32         // InitFix of the covered bytes
}

// NewEncoder prepares an Encoder for payloads of payloadLen bytes.
func NewEncoder(payloadLen int) *Encoder {
	e := &Encoder{payloadLen: payloadLen}
	p := make([]byte, payloadLen)
	fillKey(p, 0, Phi)
	e.baseCRC = RawCRC(p)
	var col [64]uint32
	for j := range col {
		fillKey(p, uint64(1)<<j, 0)
		col[j] = RawCRC(p)
	}
	for b := range 8 {
		for v := range 256 {
			var c uint32
			for bit := range 8 {
				if v&(1<<bit) != 0 {
					c ^= col[8*b+bit]
				}
			}
			e.keyCRC[b][v] = c
		}
	}
	e.shift = MulTable(nil, X8N(uint64(payloadLen)))
	e.fix = InitFix(uint64(CRCCovered + payloadLen))
	return e
}

// fillKey writes the words (i+1)*phi ^ key (phi 0: the key alone).
func fillKey(p []byte, key, phi uint64) {
	w := phi
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], w^key)
		w += phi
	}
	if i < len(p) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], w^key)
		copy(p[i:], tail[:])
	}
}

// Encode writes frame seq into dst, as the package's Encode does, and
// returns its length.
func (e *Encoder) Encode(dst []byte, seq, timestamp uint64) int {
	n := Size(e.payloadLen)
	b := dst[:n]
	e.Header(b, seq, timestamp)
	FillPayload(b[HeaderSize:], seq)
	return n
}

// Header writes frame seq's header, its CRC included, into dst[:HeaderSize]
// and returns the key of its payload: word i of the payload (8 bytes,
// little-endian) is (i+1)*Phi ^ key, as FillPayload writes it. A source
// that writes the payload itself (with streaming stores, say) uses it.
func (e *Encoder) Header(dst []byte, seq, timestamp uint64) (key uint64) {
	b := dst[:HeaderSize]
	putHeader(b, seq, timestamp, e.payloadLen)
	key = payloadKey(seq)
	c := e.baseCRC
	for i := range 8 {
		c ^= e.keyCRC[i][byte(key>>(8*i))]
	}
	h := RawCRC(b[:crcOffset])
	h = e.shift[h&0xff] ^ e.shift[256+(h>>8&0xff)] ^ e.shift[512+(h>>16&0xff)] ^ e.shift[768+h>>24]
	binary.LittleEndian.PutUint32(b[crcOffset:], h^c^e.fix)
	return key
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
