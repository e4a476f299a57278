package sgl

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// reference builds the list one byte at a time from the limits' own
// definitions, sharing no code with the package: a byte starts a new
// segment unless it is the bus successor of the previous byte (without
// wrapping through 2^64), the segment is below MaxSegment, the byte is not
// on a BusBoundary, and it does not start a Stride. Slow and obviously
// right.
func reference(l Limits, windows []window) []Segment {
	var segs []Segment
	var logical uint64
	for _, w := range windows {
		ps := w.t.PageSize
		for i := w.off; i < w.off+w.len; i++ {
			addr := w.t.Pages[i/ps] + i%ps
			n := len(segs)
			join := n > 0 && addr != 0 && segs[n-1].Addr+segs[n-1].Len == addr &&
				(l.MaxSegment == 0 || segs[n-1].Len < l.MaxSegment) &&
				(l.BusBoundary == 0 || addr%l.BusBoundary != 0) &&
				(l.Stride == 0 || logical%l.Stride != 0)
			if join {
				segs[n-1].Len++
			} else {
				segs = append(segs, Segment{Addr: addr, Len: 1})
			}
			logical++
		}
	}
	return segs
}

type window struct {
	t        *PageTable
	off, len uint64
}

// randomTable returns a table whose pages come in runs of random length at
// random places, so that some neighbours are contiguous and some are not.
func randomTable(r *rand.Rand, ps uint64, pages int) *PageTable {
	t := &PageTable{PageSize: ps, Pages: make([]uint64, pages)}
	for i := 0; i < pages; {
		base := uint64(r.IntN(1<<12)) * ps
		run := 1 + r.IntN(4)
		for j := 0; j < run && i < pages; j++ {
			t.Pages[i] = base + uint64(j)*ps
			i++
		}
	}
	return t
}

func TestAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []uint64{PageSize4K, PageSize64K, PageSize128K}
	for round := range 300 {
		ps := sizes[r.IntN(len(sizes))]
		var l Limits
		if r.IntN(2) == 0 {
			l.MaxSegment = 1 + uint64(r.IntN(3*int(ps)))
		}
		if r.IntN(3) == 0 {
			l.BusBoundary = ps << r.IntN(3)
		}
		if r.IntN(3) == 0 {
			l.Stride = 1 + uint64(r.IntN(2*int(ps)))
		}
		var b Builder
		b.Limits = l
		var windows []window
		for range 1 + r.IntN(3) {
			tab := randomTable(r, ps, 1+r.IntN(6))
			size := tab.Size()
			off := uint64(r.Int64N(int64(size)))
			n := 1 + uint64(r.Int64N(int64(size-off)))
			windows = append(windows, window{tab, off, n})
			if err := b.Append(tab, off, n); err != nil {
				t.Fatalf("round %d: Append: %v", round, err)
			}
		}
		want := reference(l, windows)
		if got := b.Segments(); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: limits %+v\n got %v\nwant %v", round, l, got, want)
		}
		var total uint64
		for _, w := range windows {
			total += w.len
		}
		if b.Len() != total {
			t.Fatalf("round %d: Len %d, want %d", round, b.Len(), total)
		}
	}
}

func TestIterMatchesBuilder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		tab := randomTable(r, PageSize64K, 1+r.IntN(40))
		l := Limits{MaxSegment: 1 + uint64(r.IntN(1<<18))}
		it, err := NewIter(tab, 100, tab.Size()-100, l)
		if err != nil {
			t.Fatal(err)
		}
		var got []Segment
		for s, ok := it.Next(); ok; s, ok = it.Next() {
			got = append(got, s)
		}
		if it.Remaining() != 0 {
			t.Fatalf("Remaining %d after exhaustion", it.Remaining())
		}
		b := Builder{Limits: l}
		if err := b.Append(tab, 100, tab.Size()-100); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, b.Segments()) {
			t.Fatalf("iter %v != builder %v", got, b.Segments())
		}
	}
}

func TestEdgeCases(t *testing.T) {
	frag := &PageTable{PageSize: PageSize64K, Pages: []uint64{0x30000, 0x10000, 0x20000, 0x50000}}
	contig := &PageTable{PageSize: PageSize64K, Pages: []uint64{0x100000, 0x110000, 0x120000, 0x130000}}
	top := &PageTable{PageSize: PageSize64K, Pages: []uint64{^uint64(0) - PageSize64K + 1, 0}}
	tests := []struct {
		name     string
		table    *PageTable
		off, len uint64
		limits   Limits
		want     []Segment
		err      error
	}{
		{"whole fragmented", frag, 0, 4 << 16, Limits{}, []Segment{{0x30000, 0x10000}, {0x10000, 0x20000}, {0x50000, 0x10000}}, nil},
		{"whole contiguous", contig, 0, 4 << 16, Limits{}, []Segment{{0x100000, 0x40000}}, nil},
		{"unaligned inside one page", frag, 5, 7, Limits{}, []Segment{{0x30005, 7}}, nil},
		{"unaligned across pages", frag, 0xfff0, 0x20, Limits{}, []Segment{{0x3fff0, 0x10}, {0x10000, 0x10}}, nil},
		{"ends one byte short", contig, 1, 4<<16 - 2, Limits{}, []Segment{{0x100001, 4<<16 - 2}}, nil},
		{"max segment", contig, 0, 0x30000, Limits{MaxSegment: 0x14000}, []Segment{{0x100000, 0x14000}, {0x114000, 0x14000}, {0x128000, 0x8000}}, nil},
		{"bus boundary", contig, 0x8000, 0x20000, Limits{BusBoundary: 0x20000}, []Segment{{0x108000, 0x18000}, {0x120000, 0x8000}}, nil},
		{"stride", contig, 0x100, 0x300, Limits{Stride: 0x100}, []Segment{{0x100100, 0x100}, {0x100200, 0x100}, {0x100300, 0x100}}, nil},
		{"last byte", contig, 4<<16 - 1, 1, Limits{}, []Segment{{0x13ffff, 1}}, nil},
		{"zero length", contig, 0, 0, Limits{}, nil, ErrZeroLength},
		{"past the end", contig, 0x30000, 0x10001, Limits{}, nil, ErrRange},
		{"offset at the end", contig, 4 << 16, 1, Limits{}, nil, ErrRange},
		{"offset+length overflows", contig, 8, ^uint64(0) - 4, Limits{}, nil, ErrRange},
		{"unknown page size", &PageTable{PageSize: 8192, Pages: []uint64{0}}, 0, 1, Limits{}, nil, ErrPageSize},
		{"no pages", &PageTable{PageSize: PageSize64K}, 0, 1, Limits{}, nil, ErrEmptyTable},
		{"boundary not a power of two", contig, 0, 1, Limits{BusBoundary: 3 << 20}, nil, ErrLimits},
		// The top page would end at 2^64, which is 0: it must not join page 0.
		{"top page then page 0", top, 0, 2 << 16, Limits{}, nil, ErrAddress},
		{"window on page 0 of a table with a top page", top, 1 << 16, 10, Limits{}, []Segment{{0, 10}}, nil},
		{"page past the top", &PageTable{PageSize: PageSize4K, Pages: []uint64{^uint64(0) - 100}}, 0, 1, Limits{}, nil, ErrAddress},
		{"highest page that fits", &PageTable{PageSize: PageSize4K, Pages: []uint64{^uint64(0) - 2*PageSize4K + 1}}, 0, PageSize4K, Limits{}, []Segment{{^uint64(0) - 2*PageSize4K + 1, PageSize4K}}, nil},
		{"window inside the top page", top, 100, 10, Limits{}, nil, ErrAddress},
		{"top page of 128 KiB", &PageTable{PageSize: PageSize128K, Pages: []uint64{0, ^uint64(0) - PageSize128K + 1}}, 0, 2 * PageSize128K, Limits{}, nil, ErrAddress},
		// Ending 4 KiB below 2^64, the highest page is not followed by page 0.
		{"highest page that fits, then page 0", &PageTable{PageSize: PageSize4K, Pages: []uint64{^uint64(0) - 2*PageSize4K + 1, 0}}, 0, 2 * PageSize4K, Limits{},
			[]Segment{{^uint64(0) - 2*PageSize4K + 1, PageSize4K}, {0, PageSize4K}}, nil},
		{"offset+length wraps to exactly 2^64", contig, 1 << 16, ^uint64(0) - 1<<16 + 1, Limits{}, nil, ErrRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewIter(tc.table, tc.off, tc.len, tc.limits); !errors.Is(err, tc.err) {
				t.Fatalf("NewIter: err = %v, want %v", err, tc.err)
			}
			b := Builder{Limits: tc.limits}
			err := b.Append(tc.table, tc.off, tc.len)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				if len(b.Segments()) != 0 {
					t.Fatalf("failed Append changed the list: %v", b.Segments())
				}
				return
			}
			if !reflect.DeepEqual(b.Segments(), tc.want) {
				t.Fatalf("got %v, want %v", b.Segments(), tc.want)
			}
		})
	}
}

// Validate checks every page of a table, the ones no window has used yet
// included.
func TestPageTableValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table PageTable
		err   error
	}{
		{"ordinary", PageTable{PageSize: PageSize64K, Pages: []uint64{0x10000, 0}}, nil},
		{"top page ends at 2^64", PageTable{PageSize: PageSize64K, Pages: []uint64{0, ^uint64(0) - PageSize64K + 1}}, ErrAddress},
		{"page past the top", PageTable{PageSize: PageSize4K, Pages: []uint64{0, ^uint64(0)}}, ErrAddress},
		{"highest page that fits", PageTable{PageSize: PageSize128K, Pages: []uint64{^uint64(0) - 2*PageSize128K + 1}}, nil},
		{"no pages", PageTable{PageSize: PageSize4K}, ErrEmptyTable},
		{"unknown page size", PageTable{PageSize: 8192, Pages: []uint64{0}}, ErrPageSize},
	} {
		if err := tc.table.Validate(); !errors.Is(err, tc.err) {
			t.Errorf("%s: Validate = %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestConcatenateCoalescesAcrossPins(t *testing.T) {
	a := &PageTable{PageSize: PageSize64K, Pages: []uint64{0x10000, 0x20000}}
	c := &PageTable{PageSize: PageSize64K, Pages: []uint64{0x30000}}
	b := Builder{Limits: Limits{MaxSegment: 0x28000}}
	if err := b.Append(a, 0x10000, 0x10000); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(c, 0, 0x10000); err != nil {
		t.Fatal(err)
	}
	want := []Segment{{0x20000, 0x20000}}
	if !reflect.DeepEqual(b.Segments(), want) {
		t.Fatalf("got %v, want %v", b.Segments(), want)
	}
	if err := b.Append(c, 0, 0x10000); err != nil {
		t.Fatal(err)
	}
	want = []Segment{{0x20000, 0x20000}, {0x30000, 0x10000}}
	if !reflect.DeepEqual(b.Segments(), want) {
		t.Fatalf("got %v, want %v", b.Segments(), want)
	}
	b.Reset()
	if len(b.Segments()) != 0 || b.Len() != 0 {
		t.Fatal("Reset left segments behind")
	}
}

func TestBuilderReuseDoesNotAllocate(t *testing.T) {
	tab := fragmented(1024)
	var b Builder
	allocs := testing.AllocsPerRun(20, func() {
		b.Reset()
		if err := b.Append(tab, 0, tab.Size()); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per reused build, want 0", allocs)
	}
}

// fragmented returns a table in which no two neighbouring pages are
// contiguous: page i sits at slot 2*(n-1-i).
func fragmented(n int) *PageTable {
	t := &PageTable{PageSize: PageSize64K, Pages: make([]uint64, n)}
	for i := range t.Pages {
		t.Pages[i] = 1<<32 + uint64(2*(n-1-i))*PageSize64K
	}
	return t
}

func contiguous(n int) *PageTable {
	t := &PageTable{PageSize: PageSize64K, Pages: make([]uint64, n)}
	for i := range t.Pages {
		t.Pages[i] = 1<<32 + uint64(i)*PageSize64K
	}
	return t
}
