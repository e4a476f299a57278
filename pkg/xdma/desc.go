package xdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Descriptor format constants (PG195, "Descriptors").
const (
	DescSize   = 32     // bytes
	DescAlign  = 32     // descriptors sit on 32-byte boundaries
	DescMagic  = 0xAD4B // bits 31:16 of the control word
	MaxDescLen = 1<<28 - 1
	// MaxSegmentLen is the longest descriptor the driver makes, where a
	// longer run is split: a 64 KiB multiple, so that the pieces stay as
	// aligned as the run's start whatever the ALIGNMENTS register says.
	MaxSegmentLen   = 1<<28 - 1<<16
	MaxNextAdjacent = 63
	// AdjacentBlock is the block that adjacent descriptors never cross.
	AdjacentBlock = 4096

	// ResultSize is the size of one C2H stream writeback record.
	ResultSize = 32
	// ResultMagic is in bits 31:16 of a C2H stream writeback status word.
	ResultMagic = 0x52B4
	resultEOP   = 1 << 0
)

// Flags of a descriptor's control word.
type Flags uint8

// Descriptor control flags.
const (
	FlagStop      Flags = 1 << 0 // stop after this descriptor
	FlagCompleted Flags = 1 << 1 // report completion (status bit, interrupt)
	FlagEOP       Flags = 1 << 4 // end of packet on a stream
	flagsMask           = FlagStop | FlagCompleted | FlagEOP
)

func (f Flags) String() string {
	s := ""
	for _, n := range []struct {
		f    Flags
		name string
	}{{FlagStop, "STOP"}, {FlagCompleted, "COMPLETED"}, {FlagEOP, "EOP"}} {
		if f&n.f != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
		}
	}
	if s == "" {
		return "-"
	}
	return s
}

// Descriptor is one SGDMA descriptor.
type Descriptor struct {
	Magic uint16 // DescMagic in a valid descriptor
	// NextAdjacent counts the descriptors that follow the one at Next
	// contiguously and may be fetched with it.
	NextAdjacent uint8
	Flags        Flags
	Len          uint32
	Src          uint64
	Dst          uint64
	Next         uint64
}

// Errors from descriptor and chain checks. Each is wrapped with detail.
var (
	ErrBadMagic     = errors.New("xdma: bad descriptor magic")
	ErrBadLength    = errors.New("xdma: bad descriptor length")
	ErrBadAdjacent  = errors.New("xdma: bad next-adjacent count")
	ErrMisaligned   = errors.New("xdma: descriptor address not 32-byte aligned")
	ErrOutOfRange   = errors.New("xdma: descriptor pointer outside descriptor memory")
	ErrCycle        = errors.New("xdma: descriptor chain has a cycle")
	ErrChainTooLong = errors.New("xdma: descriptor chain too long")
	ErrShortBuffer  = errors.New("xdma: buffer too small for the chain")
	ErrNoSegments   = errors.New("xdma: no segments")
	ErrWrap         = errors.New("xdma: address range wraps through 2^64")
)

// Marshal writes d in the 32-byte little-endian wire format to b.
func (d *Descriptor) Marshal(b []byte) {
	_ = b[DescSize-1]
	ctrl := uint32(d.Magic)<<16 | uint32(d.NextAdjacent&0x3F)<<8 | uint32(d.Flags&flagsMask)
	binary.LittleEndian.PutUint32(b[0:], ctrl)
	binary.LittleEndian.PutUint32(b[4:], d.Len&MaxDescLen)
	binary.LittleEndian.PutUint64(b[8:], d.Src)
	binary.LittleEndian.PutUint64(b[16:], d.Dst)
	binary.LittleEndian.PutUint64(b[24:], d.Next)
}

// Unmarshal decodes the 32-byte wire format in b. It does not validate.
func (d *Descriptor) Unmarshal(b []byte) {
	_ = b[DescSize-1]
	ctrl := binary.LittleEndian.Uint32(b[0:])
	d.Magic = uint16(ctrl >> 16)
	d.NextAdjacent = uint8(ctrl >> 8 & 0x3F)
	d.Flags = Flags(ctrl) & flagsMask
	d.Len = binary.LittleEndian.Uint32(b[4:]) & MaxDescLen
	d.Src = binary.LittleEndian.Uint64(b[8:])
	d.Dst = binary.LittleEndian.Uint64(b[16:])
	d.Next = binary.LittleEndian.Uint64(b[24:])
}

// Validate checks what the engine checks when it fetches d: the magic, a
// non-zero length, and a next pointer it can fetch from.
func (d *Descriptor) Validate() error {
	if d.Magic != DescMagic {
		return fmt.Errorf("%w: %#04x", ErrBadMagic, d.Magic)
	}
	if d.Len == 0 || d.Len > MaxDescLen {
		return fmt.Errorf("%w: %d", ErrBadLength, d.Len)
	}
	if d.Flags&FlagStop == 0 && d.Next%DescAlign != 0 {
		return fmt.Errorf("%w: next %#x", ErrMisaligned, d.Next)
	}
	if d.NextAdjacent > MaxNextAdjacent {
		return fmt.Errorf("%w: %d", ErrBadAdjacent, d.NextAdjacent)
	}
	if wraps(d.Src, uint64(d.Len)) || wraps(d.Dst, uint64(d.Len)) {
		return fmt.Errorf("%w: %d bytes from %#x to %#x", ErrWrap, d.Len, d.Src, d.Dst)
	}
	if d.Flags&FlagStop == 0 && d.NextAdjacent > 0 && !adjacentFits(d.Next, int(d.NextAdjacent)) {
		return fmt.Errorf("%w: %d after %#x crosses a 4 KiB block", ErrBadAdjacent, d.NextAdjacent, d.Next)
	}
	return nil
}

func (d Descriptor) String() string {
	return fmt.Sprintf("len %d src %#x dst %#x next %#x adj %d %v", d.Len, d.Src, d.Dst, d.Next, d.NextAdjacent, d.Flags)
}

// wraps reports whether n bytes from addr run past 2^64 (ending exactly
// there counts: the address one past the range would be 0).
func wraps(addr, n uint64) bool { return n != 0 && addr > math.MaxUint64-n }

// adjacentFits reports whether extra descriptors after the one at addr stay
// inside addr's 4 KiB block.
func adjacentFits(addr uint64, extra int) bool {
	return addr%AdjacentBlock+uint64(extra+1)*DescSize <= AdjacentBlock
}

// adjacentAfter returns the next-adjacent count for a descriptor at addr
// followed contiguously by remaining more descriptors.
func adjacentAfter(addr uint64, remaining int) uint8 {
	room := int((AdjacentBlock-addr%AdjacentBlock)/DescSize) - 1
	return uint8(min(remaining, room, MaxNextAdjacent))
}
