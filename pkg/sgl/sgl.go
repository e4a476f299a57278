// Package sgl turns the page tables of pinned memory into scatter-gather lists.
//
// A pin describes a region by the bus address of each of its pages, in order
// (NVIDIA's P2P page tables use 64 KB pages; host pins 4 KB). A transfer names
// a byte window of that region. The segments produced here are the minimal
// list that covers the window exactly: pages that are contiguous on the bus
// are coalesced, and a segment is split only where a limit requires it.
//
// Iter walks one window without allocating; Builder concatenates the windows
// of several pins into one reusable list.
package sgl

import (
	"errors"
	"fmt"
	"math"
)

// Page sizes a page table may use, in bytes.
const (
	PageSize4K   = 4 << 10
	PageSize64K  = 64 << 10
	PageSize128K = 128 << 10
)

// Errors returned for malformed input. Each is wrapped with the values that
// caused it; compare with errors.Is.
var (
	ErrPageSize   = errors.New("sgl: unsupported page size")
	ErrEmptyTable = errors.New("sgl: page table has no pages")
	ErrZeroLength = errors.New("sgl: zero-length window")
	ErrRange      = errors.New("sgl: window outside the pinned region")
	ErrLimits     = errors.New("sgl: invalid limits")
	ErrAddress    = errors.New("sgl: page reaches the top of the bus address space")
)

// Segment is one physically contiguous piece of a transfer.
type Segment struct {
	Addr uint64 // bus address
	Len  uint64 // bytes
}

// End returns the bus address one past the segment.
func (s Segment) End() uint64 { return s.Addr + s.Len }

// PageTable describes a pinned region: Pages[i] is the bus address of the
// i-th page of PageSize bytes, counted from the region's aligned base.
type PageTable struct {
	PageSize uint64
	Pages    []uint64
}

// Size returns the number of bytes the table covers.
func (t *PageTable) Size() uint64 { return t.PageSize * uint64(len(t.Pages)) }

// Validate reports whether the table has a supported page size, at least
// one page, and no page whose end wraps through 2^64 (the last page of the
// address space would otherwise look contiguous with page 0).
func (t *PageTable) Validate() error {
	if err := t.validateShape(); err != nil {
		return err
	}
	return t.validatePages(0, len(t.Pages))
}

func (t *PageTable) validateShape() error {
	switch t.PageSize {
	case PageSize4K, PageSize64K, PageSize128K:
	default:
		return fmt.Errorf("%w: %d bytes (want 4 KiB, 64 KiB or 128 KiB)", ErrPageSize, t.PageSize)
	}
	if len(t.Pages) == 0 {
		return ErrEmptyTable
	}
	return nil
}

// validatePages checks pages [from, to) against the top of the address
// space: a page's one-past-the-end address must not wrap to 0.
func (t *PageTable) validatePages(from, to int) error {
	for i, p := range t.Pages[from:to] {
		if p > math.MaxUint64-t.PageSize {
			return fmt.Errorf("%w: page %d at %#x", ErrAddress, from+i, p)
		}
	}
	return nil
}

// Limits constrain the segments of a list. The zero value imposes none.
type Limits struct {
	// MaxSegment is the largest segment in bytes; 0 means unlimited.
	MaxSegment uint64
	// BusBoundary, a power of two, is a bus-address boundary no segment
	// crosses (for example 4 GiB for engines with 32-bit address counters);
	// 0 means none.
	BusBoundary uint64
	// Stride splits the concatenated windows every Stride bytes, so that each
	// frame of a fixed-size stream starts a new segment; 0 means never.
	Stride uint64
}

// Validate reports whether the limits are usable.
func (l Limits) Validate() error {
	if l.BusBoundary&(l.BusBoundary-1) != 0 {
		return fmt.Errorf("%w: bus boundary %#x is not a power of two", ErrLimits, l.BusBoundary)
	}
	return nil
}

// room returns how many bytes a segment starting at bus address addr and at
// byte logical of the concatenated windows may hold.
func (l Limits) room(addr, logical uint64) uint64 {
	n := ^uint64(0)
	if l.MaxSegment != 0 {
		n = l.MaxSegment
	}
	if l.BusBoundary != 0 {
		n = min(n, l.BusBoundary-addr&(l.BusBoundary-1))
	}
	if l.Stride != 0 {
		n = min(n, l.Stride-logical%l.Stride)
	}
	return n
}

// checkWindow validates a window of t: only the window's pages, so that
// small windows of large tables stay cheap.
func checkWindow(t *PageTable, off, length uint64) error {
	if err := t.validateShape(); err != nil {
		return err
	}
	if length == 0 {
		return ErrZeroLength
	}
	size := t.Size()
	if off >= size || length > size-off {
		return fmt.Errorf("%w: offset %d + length %d exceeds %d bytes", ErrRange, off, length, size)
	}
	return t.validatePages(int(off/t.PageSize), int((off+length-1)/t.PageSize)+1)
}

// Iter walks the segments of one window of a page table. The zero Iter is
// exhausted; make one with NewIter. It does not allocate.
type Iter struct {
	table   *PageTable
	limits  Limits
	pos     uint64 // next byte of the region to emit
	end     uint64 // one past the window
	logical uint64 // bytes of the concatenated windows emitted so far
}

// NewIter returns an iterator over length bytes starting at byte off of the
// region t describes.
func NewIter(t *PageTable, off, length uint64, l Limits) (Iter, error) {
	if err := l.Validate(); err != nil {
		return Iter{}, err
	}
	if err := checkWindow(t, off, length); err != nil {
		return Iter{}, err
	}
	return Iter{table: t, limits: l, pos: off, end: off + length}, nil
}

// Next returns the next segment, or false when the window is exhausted.
func (it *Iter) Next() (Segment, bool) {
	if it.pos >= it.end {
		return Segment{}, false
	}
	addr := it.addr()
	return it.take(it.limits.room(addr, it.logical)), true
}

// Remaining returns the bytes of the window not yet returned.
func (it *Iter) Remaining() uint64 { return it.end - it.pos }

func (it *Iter) addr() uint64 {
	ps := it.table.PageSize
	return it.table.Pages[it.pos/ps] + it.pos%ps
}

// take emits the segment at the current position: bus-contiguous, inside the
// window and at most limit bytes long.
func (it *Iter) take(limit uint64) Segment {
	ps := it.table.PageSize
	pages := it.table.Pages
	limit = min(limit, it.end-it.pos)
	page := it.pos / ps
	start := pages[page] + it.pos%ps
	n := ps - it.pos%ps
	for n < limit && pages[page+1] == pages[page]+ps {
		page++
		n += ps
	}
	n = min(n, limit)
	it.pos += n
	it.logical += n
	return Segment{Addr: start, Len: n}
}

// Builder concatenates windows of one or more pins into a single list,
// coalescing across window boundaries where the bus addresses allow. Reuse
// one Builder (Reset between lists) to avoid allocating.
type Builder struct {
	Limits Limits
	segs   []Segment
	total  uint64
	// lastLogical is the logical offset at which the last segment starts.
	lastLogical uint64
}

// Reset empties the list, keeping its storage.
func (b *Builder) Reset() {
	b.segs = b.segs[:0]
	b.total = 0
	b.lastLogical = 0
}

// Append adds length bytes from byte off of the region t describes. On error
// the list is unchanged.
func (b *Builder) Append(t *PageTable, off, length uint64) error {
	it, err := NewIter(t, off, length, b.Limits)
	if err != nil {
		return err
	}
	it.logical = b.total
	if n := len(b.segs); n > 0 {
		last := &b.segs[n-1]
		if last.End() == it.addr() {
			if room := b.Limits.room(last.Addr, b.lastLogical); room > last.Len {
				last.Len += it.take(room - last.Len).Len
			}
		}
	}
	for {
		logical := it.logical
		s, ok := it.Next()
		if !ok {
			break
		}
		b.segs = append(b.segs, s)
		b.lastLogical = logical
	}
	b.total = it.logical
	return nil
}

// Segments returns the list. It is valid until the next Append or Reset.
func (b *Builder) Segments() []Segment { return b.segs }

// Len returns the bytes the list covers.
func (b *Builder) Len() uint64 { return b.total }
