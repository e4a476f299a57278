package xdma

import (
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/sgl"
)

// EOPPolicy says which descriptors of a stream chain carry EOP.
type EOPPolicy int

// EOP policies.
const (
	EOPLast EOPPolicy = iota // the chain is one packet
	EOPNone                  // the packet continues in a later chain
	EOPEach                  // every descriptor is a packet (e.g. a frame)
)

// CompletedPolicy says which descriptors report completion.
type CompletedPolicy int

// Completion policies.
const (
	CompletedLast CompletedPolicy = iota // one report for the chain
	CompletedEach                        // a report per descriptor (rings)
)

// ChainSpec describes the transfer a chain performs.
type ChainSpec struct {
	Dir Direction
	// CardAddr is the AXI address of the first byte on the card for a
	// memory-mapped channel; it advances with each segment.
	CardAddr uint64
	// Stream selects an AXI4-Stream channel; CardAddr is then unused.
	Stream bool
	// Results is the bus address of an array of ResultSize-byte writeback
	// records, one per descriptor, for C2H stream chains; 0 for none.
	Results   uint64
	EOP       EOPPolicy
	Completed CompletedPolicy
}

// Chain is the result of BuildChain: what to program into the SGDMA
// registers to run it.
type Chain struct {
	Addr          uint64 // bus address of the first descriptor
	FirstAdjacent uint8  // value for RegDescAdjacent
	Count         int    // descriptors written
	Bytes         uint64 // bytes the chain moves
}

// BuildChain writes one descriptor per segment into buf, which the engine
// sees at bus address addr, and links them: next pointers, next-adjacent
// counts that stay inside 4 KiB blocks and never exceed 63, STOP on the last
// descriptor, EOP and COMPLETED as spec says. Segments longer than MaxDescLen
// are an error: build the list with sgl.Limits{MaxSegment: MaxDescLen}.
func BuildChain(buf []byte, addr uint64, segs []sgl.Segment, spec ChainSpec) (Chain, error) {
	n := len(segs)
	switch {
	case n == 0:
		return Chain{}, ErrNoSegments
	case addr%DescAlign != 0:
		return Chain{}, fmt.Errorf("%w: %#x", ErrMisaligned, addr)
	case len(buf) < n*DescSize:
		return Chain{}, fmt.Errorf("%w: %d descriptors need %d bytes, have %d", ErrShortBuffer, n, n*DescSize, len(buf))
	case wraps(addr, uint64(n)*DescSize):
		return Chain{}, fmt.Errorf("%w: %d descriptors at %#x", ErrWrap, n, addr)
	case spec.Stream && spec.Dir == C2H && spec.Results != 0 && wraps(spec.Results, uint64(n)*ResultSize):
		return Chain{}, fmt.Errorf("%w: %d writeback records at %#x", ErrWrap, n, spec.Results)
	}
	card := spec.CardAddr
	var total uint64
	for i, s := range segs {
		if s.Len == 0 || s.Len > MaxDescLen {
			return Chain{}, fmt.Errorf("%w: segment %d is %d bytes", ErrBadLength, i, s.Len)
		}
		if wraps(s.Addr, s.Len) {
			return Chain{}, fmt.Errorf("%w: segment %d, %d bytes at %#x", ErrWrap, i, s.Len, s.Addr)
		}
		if !spec.Stream && wraps(card, s.Len) {
			return Chain{}, fmt.Errorf("%w: segment %d, %d bytes at card address %#x", ErrWrap, i, s.Len, card)
		}
		d := Descriptor{Magic: DescMagic, Len: uint32(s.Len)}
		host := s.Addr
		switch {
		case !spec.Stream && spec.Dir == H2C:
			d.Src, d.Dst = host, card
		case !spec.Stream:
			d.Src, d.Dst = card, host
		case spec.Dir == H2C:
			d.Src = host
		default:
			d.Dst = host
			if spec.Results != 0 {
				d.Src = spec.Results + uint64(i)*ResultSize
			}
		}
		card += s.Len
		total += s.Len
		last := i == n-1
		if spec.Stream && (spec.EOP == EOPEach || spec.EOP == EOPLast && last) {
			d.Flags |= FlagEOP
		}
		if spec.Completed == CompletedEach || last {
			d.Flags |= FlagCompleted
		}
		if last {
			d.Flags |= FlagStop
		} else {
			d.Next = addr + uint64(i+1)*DescSize
			d.NextAdjacent = adjacentAfter(d.Next, n-i-2)
		}
		d.Marshal(buf[i*DescSize:])
	}
	return Chain{Addr: addr, FirstAdjacent: adjacentAfter(addr, n-1), Count: n, Bytes: total}, nil
}
