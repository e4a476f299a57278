package sgl

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzBuilder decodes a page table and a window from the fuzzer's bytes and
// checks the builder against the byte-by-byte reference.
func FuzzBuilder(f *testing.F) {
	f.Add([]byte{0, 3, 1, 2, 1, 0}, uint16(10), uint16(60000), uint32(0), uint32(0), uint8(0))
	f.Add([]byte{1, 0, 1, 2, 3}, uint16(0), uint16(65535), uint32(4096), uint32(0), uint8(3))
	f.Add([]byte{2, 7, 7, 8, 9}, uint16(1), uint16(1), uint32(0), uint32(1000), uint8(9))
	f.Add([]byte{1, 0, 1, 2, 3, 4, 5, 6, 7}, uint16(100), uint16(65535), uint32(0), uint32(0), uint8(7))
	f.Fuzz(func(t *testing.T, layout []byte, off, length uint16, maxSeg, stride uint32, boundary uint8) {
		if len(layout) < 2 || len(layout) > 64 {
			return
		}
		sizes := []uint64{PageSize4K, PageSize64K, PageSize128K}
		tab := &PageTable{PageSize: sizes[int(layout[0])%3]}
		for _, slot := range layout[1:] {
			tab.Pages = append(tab.Pages, uint64(slot%16)*tab.PageSize)
		}
		l := Limits{MaxSegment: uint64(maxSeg % (1 << 20)), Stride: uint64(stride % (1 << 20))}
		// A power of two from 512 B to 1 MiB, or none.
		if boundary%16 != 0 {
			l.BusBoundary = 256 << (boundary % 16 % 12)
		}
		// Scale the window into the table so most inputs are valid.
		o := uint64(off) * tab.Size() >> 16
		n := uint64(length)*(tab.Size()-o)>>16 + 1
		b := Builder{Limits: l}
		err := b.Append(tab, o, n)
		if err != nil {
			if !errors.Is(err, ErrRange) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		want := reference(l, []window{{tab, o, n}})
		if !reflect.DeepEqual(b.Segments(), want) {
			t.Fatalf("got %v, want %v", b.Segments(), want)
		}
		checkBoundary(t, b.Segments(), l.BusBoundary)
	})
}

func FuzzNewIter(f *testing.F) {
	f.Add(uint64(65536), uint64(0), uint64(1), uint64(0))
	f.Add(uint64(4096), uint64(1<<63), uint64(1<<63), uint64(3))
	f.Fuzz(func(t *testing.T, ps, off, length, boundary uint64) {
		tab := &PageTable{PageSize: ps, Pages: []uint64{0, ps, 4 * ps}}
		it, err := NewIter(tab, off, length, Limits{BusBoundary: boundary})
		if err != nil {
			return
		}
		var sum uint64
		var segs []Segment
		for s, ok := it.Next(); ok; s, ok = it.Next() {
			if s.Len == 0 {
				t.Fatal("empty segment")
			}
			sum += s.Len
			segs = append(segs, s)
		}
		checkBoundary(t, segs, boundary)
		if sum != length {
			t.Fatalf("segments cover %d bytes, want %d", sum, length)
		}
	})
}

// checkBoundary fails if a segment crosses a multiple of boundary.
func checkBoundary(t *testing.T, segs []Segment, boundary uint64) {
	t.Helper()
	if boundary == 0 {
		return
	}
	for _, s := range segs {
		if s.Addr/boundary != (s.Addr+s.Len-1)/boundary {
			t.Fatalf("segment %#x+%#x crosses a %#x boundary", s.Addr, s.Len, boundary)
		}
	}
}
