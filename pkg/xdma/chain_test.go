package xdma_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

func randomSegments(r *rand.Rand, n int) []sgl.Segment {
	segs := make([]sgl.Segment, n)
	for i := range segs {
		segs[i] = sgl.Segment{Addr: uint64(r.Uint32()) << 4, Len: 1 + uint64(r.IntN(1<<20))}
	}
	return segs
}

func TestBuildChainWalks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const descBase = 0x10000
	for round := range 200 {
		n := 1 + r.IntN(300)
		// Start anywhere in a 4 KiB block so chains cross blocks at
		// every phase.
		addr := uint64(descBase + 32*r.IntN(128))
		mem := make([]byte, 64<<10)
		var m busmem.Map
		if err := m.Add("desc", descBase, mem); err != nil {
			t.Fatal(err)
		}
		segs := randomSegments(r, n)
		spec := xdma.ChainSpec{Dir: xdma.Direction(r.IntN(2)), CardAddr: uint64(r.Uint32()), Stream: r.IntN(2) == 0, Completed: xdma.CompletedPolicy(r.IntN(2)), EOP: xdma.EOPPolicy(r.IntN(3))}
		c, err := xdma.BuildChain(mem[addr-descBase:], addr, segs, spec)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if c.Count != n {
			t.Fatalf("Count %d, want %d", c.Count, n)
		}
		got, err := xdma.Walk(&m, c.Addr, c.FirstAdjacent, xdma.WalkLimits{Lo: descBase, Hi: descBase + uint64(len(mem))})
		if err != nil {
			t.Fatalf("round %d (n=%d addr=%#x): %v", round, n, addr, err)
		}
		if len(got) != n {
			t.Fatalf("walked %d descriptors, want %d", len(got), n)
		}
		card := spec.CardAddr
		var total uint64
		for i, w := range got {
			d := w.Descriptor
			s := segs[i]
			host, cardSide := d.Dst, d.Src
			if spec.Dir == xdma.H2C {
				host, cardSide = d.Src, d.Dst
			}
			if uint64(d.Len) != s.Len || host != s.Addr {
				t.Fatalf("descriptor %d = %v, want segment %+v", i, d, s)
			}
			if !spec.Stream && cardSide != card {
				t.Fatalf("descriptor %d card address %#x, want %#x", i, cardSide, card)
			}
			last := i == n-1
			if (d.Flags&xdma.FlagStop != 0) != last {
				t.Fatalf("descriptor %d STOP = %v", i, !last)
			}
			wantEOP := spec.Stream && (spec.EOP == xdma.EOPEach || spec.EOP == xdma.EOPLast && last)
			if (d.Flags&xdma.FlagEOP != 0) != wantEOP {
				t.Fatalf("descriptor %d EOP = %v, want %v", i, !wantEOP, wantEOP)
			}
			wantCompleted := last || spec.Completed == xdma.CompletedEach
			if (d.Flags&xdma.FlagCompleted != 0) != wantCompleted {
				t.Fatalf("descriptor %d COMPLETED = %v, want %v", i, !wantCompleted, wantCompleted)
			}
			card += s.Len
			total += s.Len
		}
		if c.Bytes != total {
			t.Fatalf("Bytes %d, want %d", c.Bytes, total)
		}
	}
}

func TestBuildChainAdjacency(t *testing.T) {
	// 200 descriptors from a block start: the first fetch takes the 63
	// allowed extra, and every count stays within 63 and its block.
	buf := make([]byte, 200*xdma.DescSize)
	c, err := xdma.BuildChain(buf, 0x4000, randomSegments(rand.New(rand.NewPCG(1, 1)), 200), xdma.ChainSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if c.FirstAdjacent != 63 {
		t.Fatalf("FirstAdjacent = %d, want 63", c.FirstAdjacent)
	}
	// From 0x4FE0 only one descriptor is left in the block.
	c, err = xdma.BuildChain(buf, 0x4FE0, randomSegments(rand.New(rand.NewPCG(1, 1)), 4), xdma.ChainSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if c.FirstAdjacent != 0 {
		t.Fatalf("FirstAdjacent at block end = %d, want 0", c.FirstAdjacent)
	}
	var d xdma.Descriptor
	d.Unmarshal(buf)
	if d.Next != 0x5000 || d.NextAdjacent != 2 {
		t.Fatalf("first descriptor %v, want next 0x5000 adj 2", d)
	}
}

func TestBuildChainErrors(t *testing.T) {
	buf := make([]byte, 4*xdma.DescSize)
	seg := []sgl.Segment{{Addr: 0x1000, Len: 16}}
	tests := []struct {
		name string
		buf  []byte
		addr uint64
		segs []sgl.Segment
		err  error
	}{
		{"no segments", buf, 0, nil, xdma.ErrNoSegments},
		{"misaligned", buf, 0x10, seg, xdma.ErrMisaligned},
		{"short buffer", buf[:31], 0, seg, xdma.ErrShortBuffer},
		{"zero-length segment", buf, 0, []sgl.Segment{{Addr: 1, Len: 0}}, xdma.ErrBadLength},
		{"too long segment", buf, 0, []sgl.Segment{{Addr: 1, Len: xdma.MaxDescLen + 1}}, xdma.ErrBadLength},
		{"descriptors wrap", buf, math.MaxUint64 - 63, []sgl.Segment{seg[0], seg[0]}, xdma.ErrWrap},
		{"descriptors end at 2^64", buf, math.MaxUint64 - 31, seg, xdma.ErrWrap},
		{"segment wraps", buf, 0, []sgl.Segment{{Addr: math.MaxUint64 - 7, Len: 16}}, xdma.ErrWrap},
		{"segment ends at 2^64", buf, 0, []sgl.Segment{{Addr: math.MaxUint64 - 15, Len: 16}}, xdma.ErrWrap},
	}
	for _, tc := range tests {
		if _, err := xdma.BuildChain(tc.buf, tc.addr, tc.segs, xdma.ChainSpec{}); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	two := []sgl.Segment{seg[0], {Addr: 0x2000, Len: 16}}
	for _, tc := range []struct {
		name string
		spec xdma.ChainSpec
		segs []sgl.Segment
		err  error
	}{
		{"card range wraps", xdma.ChainSpec{Dir: xdma.H2C, CardAddr: math.MaxUint64 - 7}, seg, xdma.ErrWrap},
		{"card range ends at 2^64", xdma.ChainSpec{Dir: xdma.H2C, CardAddr: math.MaxUint64 - 15}, seg, xdma.ErrWrap},
		{"card range fits", xdma.ChainSpec{Dir: xdma.H2C, CardAddr: math.MaxUint64 - 16}, seg, nil},
		{"card range of C2H wraps", xdma.ChainSpec{Dir: xdma.C2H, CardAddr: math.MaxUint64 - 7}, seg, xdma.ErrWrap},
		// The first segment fits; the card address it leaves the second
		// reaches 2^64.
		{"card range of a later segment wraps", xdma.ChainSpec{Dir: xdma.H2C, CardAddr: math.MaxUint64 - 31}, two, xdma.ErrWrap},
		{"stream ignores the card address", xdma.ChainSpec{Dir: xdma.H2C, Stream: true, CardAddr: math.MaxUint64}, seg, nil},
		{"writeback records wrap", xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: math.MaxUint64 - 31}, seg, xdma.ErrWrap},
		{"later writeback record ends at 2^64", xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: math.MaxUint64 - 63}, two, xdma.ErrWrap},
		{"writeback records fit", xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: math.MaxUint64 - 64}, two, nil},
		{"H2C streams write back nothing", xdma.ChainSpec{Dir: xdma.H2C, Stream: true, Results: math.MaxUint64}, seg, nil},
	} {
		if _, err := xdma.BuildChain(buf, 0, tc.segs, tc.spec); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	d := xdma.Descriptor{Magic: xdma.DescMagic, Len: 64, Src: math.MaxUint64 - 31, Flags: xdma.FlagStop}
	if err := d.Validate(); !errors.Is(err, xdma.ErrWrap) {
		t.Errorf("descriptor with a wrapping source: %v, want ErrWrap", err)
	}
}

// writeDescs lays descriptors out by hand for the walker's negative tests.
func writeDescs(t *testing.T, descs map[uint64]xdma.Descriptor) *busmem.Map {
	t.Helper()
	mem := make([]byte, 16<<10)
	var m busmem.Map
	if err := m.Add("desc", 0, mem); err != nil {
		t.Fatal(err)
	}
	for addr, d := range descs {
		d.Marshal(mem[addr:])
	}
	return &m
}

func TestWalkFindsProblems(t *testing.T) {
	ok := func(next uint64) xdma.Descriptor { return xdma.Descriptor{Magic: xdma.DescMagic, Len: 64, Next: next} }
	stop := xdma.Descriptor{Magic: xdma.DescMagic, Len: 64, Flags: xdma.FlagStop}
	tests := []struct {
		name     string
		descs    map[uint64]xdma.Descriptor
		start    uint64
		firstAdj uint8
		lim      xdma.WalkLimits
		err      error
		index    int
	}{
		{"cycle", map[uint64]xdma.Descriptor{0: ok(0x100), 0x100: ok(0)}, 0, 0, xdma.WalkLimits{}, xdma.ErrCycle, 2},
		{"bad magic", map[uint64]xdma.Descriptor{0: ok(0x100), 0x100: {Magic: 0x1234, Len: 1, Flags: xdma.FlagStop}}, 0, 0, xdma.WalkLimits{}, xdma.ErrBadMagic, 1},
		{"zero length", map[uint64]xdma.Descriptor{0: {Magic: xdma.DescMagic, Flags: xdma.FlagStop}}, 0, 0, xdma.WalkLimits{}, xdma.ErrBadLength, 0},
		{"pointer out of range", map[uint64]xdma.Descriptor{0: ok(0x2000)}, 0, 0, xdma.WalkLimits{Hi: 0x1000}, xdma.ErrOutOfRange, 1},
		{"misaligned next", map[uint64]xdma.Descriptor{0: ok(0x108)}, 0, 0, xdma.WalkLimits{}, xdma.ErrMisaligned, 0},
		{"adjacency lies", map[uint64]xdma.Descriptor{0: ok(0x100), 0x100: stop}, 0, 1, xdma.WalkLimits{}, xdma.ErrBadAdjacent, 0},
		{"adjacency past stop", map[uint64]xdma.Descriptor{0: stop}, 0, 1, xdma.WalkLimits{}, xdma.ErrBadAdjacent, 0},
		{"too long", map[uint64]xdma.Descriptor{0: ok(0x20), 0x20: ok(0x40), 0x40: stop}, 0, 0, xdma.WalkLimits{MaxDescriptors: 2}, xdma.ErrChainTooLong, 2},
		{"unmapped", map[uint64]xdma.Descriptor{0: ok(0x100000)}, 0, 0, xdma.WalkLimits{}, nil, 1},
		// addr+32 wraps to a small number, inside the limits if unchecked.
		{"next at the top", map[uint64]xdma.Descriptor{0: ok(math.MaxUint64 - 31)}, 0, 0, xdma.WalkLimits{Hi: 0x1000}, xdma.ErrWrap, 1},
		{"next just below the top", map[uint64]xdma.Descriptor{0: ok(math.MaxUint64 - 63)}, 0, 0, xdma.WalkLimits{Hi: 0x1000}, xdma.ErrOutOfRange, 1},
		{"start at the top", nil, math.MaxUint64 - 31, 0, xdma.WalkLimits{}, xdma.ErrWrap, 0},
		{"limits below one descriptor", map[uint64]xdma.Descriptor{0: stop}, 0, 0, xdma.WalkLimits{Hi: 16}, xdma.ErrOutOfRange, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := writeDescs(t, tc.descs)
			_, err := xdma.Walk(m, tc.start, tc.firstAdj, tc.lim)
			var we *xdma.WalkError
			if !errors.As(err, &we) {
				t.Fatalf("err = %v, want a *WalkError", err)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			var be *xdma.BusError
			if tc.err == nil && !errors.As(err, &be) {
				t.Fatalf("err = %v, want a bus error", err)
			}
			if we.Index != tc.index {
				t.Fatalf("error at descriptor %d, want %d", we.Index, tc.index)
			}
		})
	}
}
