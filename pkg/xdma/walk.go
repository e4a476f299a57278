package xdma

import (
	"fmt"
)

// Memory is an address space the engine reads and writes: the host's bus
// addresses, or the card's AXI memory. An error makes the engine report a
// read or write error; return a *BusError to choose its code.
type Memory interface {
	Read(addr uint64, p []byte) error
	Write(addr uint64, p []byte) error
}

// BusError is a failed bus access with the error code the engine reports
// for it (one of the ErrCode constants).
type BusError struct {
	Addr uint64
	Len  int
	Code uint32
}

func (e *BusError) Error() string {
	return fmt.Sprintf("xdma: bus error %#x at %#x+%d", e.Code, e.Addr, e.Len)
}

// WalkLimits bound a chain walk.
type WalkLimits struct {
	// Lo and Hi bound descriptor memory: every descriptor must lie in
	// [Lo, Hi). Hi == 0 allows any address.
	Lo, Hi uint64
	// MaxDescriptors ends the walk with ErrChainTooLong; 0 means 65536.
	MaxDescriptors int
}

// WalkError locates a problem found by Walk.
type WalkError struct {
	Index int    // position in the chain, 0 for the first descriptor
	Addr  uint64 // bus address of the descriptor
	Err   error
}

func (e *WalkError) Error() string {
	return fmt.Sprintf("descriptor %d at %#x: %v", e.Index, e.Addr, e.Err)
}

func (e *WalkError) Unwrap() error { return e.Err }

// Walked is one descriptor of a walked chain.
type Walked struct {
	Addr uint64
	Descriptor
}

// Walk reads the chain that starts at addr, with firstAdjacent as programmed
// into RegDescAdjacent, and returns its descriptors in order. It follows next
// pointers as software would and checks everything the engine depends on:
// alignment, magic, lengths, that every adjacency claim matches the chain's
// actual layout inside one 4 KiB block, that pointers stay inside the limits,
// and that the chain ends without a cycle. It returns what it read up to the
// first problem, and a *WalkError.
func Walk(mem Memory, addr uint64, firstAdjacent uint8, lim WalkLimits) ([]Walked, error) {
	maxN := lim.MaxDescriptors
	if maxN == 0 {
		maxN = 1 << 16
	}
	var out []Walked
	seen := make(map[uint64]bool)
	// promised counts descriptors that an earlier adjacency claim says
	// follow contiguously.
	promised := int(firstAdjacent)
	if firstAdjacent > MaxNextAdjacent || !adjacentFits(addr, promised) {
		return nil, &WalkError{0, addr, fmt.Errorf("%w: first adjacent %d", ErrBadAdjacent, firstAdjacent)}
	}
	var buf [DescSize]byte
	for i := 0; ; i++ {
		fail := func(err error) ([]Walked, error) { return out, &WalkError{i, addr, err} }
		switch {
		case i >= maxN:
			return fail(fmt.Errorf("%w: more than %d descriptors", ErrChainTooLong, maxN))
		case addr%DescAlign != 0:
			return fail(fmt.Errorf("%w: %#x", ErrMisaligned, addr))
		case wraps(addr, DescSize):
			return fail(fmt.Errorf("%w: descriptor at %#x", ErrWrap, addr))
		case lim.Hi != 0 && (addr < lim.Lo || lim.Hi < DescSize || addr > lim.Hi-DescSize):
			return fail(fmt.Errorf("%w: %#x not in [%#x, %#x)", ErrOutOfRange, addr, lim.Lo, lim.Hi))
		case seen[addr]:
			return fail(ErrCycle)
		}
		seen[addr] = true
		if err := mem.Read(addr, buf[:]); err != nil {
			return fail(err)
		}
		var d Descriptor
		d.Unmarshal(buf[:])
		out = append(out, Walked{addr, d})
		if err := d.Validate(); err != nil {
			return fail(err)
		}
		if d.Flags&FlagStop != 0 {
			if promised > 0 {
				return fail(fmt.Errorf("%w: %d more descriptors promised after STOP", ErrBadAdjacent, promised))
			}
			return out, nil
		}
		// Inside a block the engine takes the next descriptor from the
		// following 32 bytes; the next pointer must agree with it.
		if promised > 0 {
			if d.Next != addr+DescSize {
				return fail(fmt.Errorf("%w: next %#x, but an adjacency claim promised %#x", ErrBadAdjacent, d.Next, addr+DescSize))
			}
			promised--
		} else {
			// The last descriptor of a fetched block names the next block.
			promised = int(d.NextAdjacent)
		}
		addr = d.Next
	}
}
