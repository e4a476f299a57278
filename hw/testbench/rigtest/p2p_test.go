//go:build vmguest

package rigtest

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// gcPressure collects garbage as often as the runtime can (GOGC=1) while a
// goroutine allocates and scribbles on what it gets, so an array the
// kernel is about to read is freed and overwritten if nothing the
// collector sees holds it.
func gcPressure(t *testing.T) {
	old := debug.SetGCPercent(1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		keep := make([][]byte, 64) // so the buffers live on the heap
		for i := 0; ctx.Err() == nil; i++ {
			b := make([]byte, 4096)
			for j := range b {
				b[j] = 0xa5
			}
			keep[i%len(keep)] = b
			runtime.Gosched()
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		debug.SetGCPercent(old)
	})
}

// TestIoctlArraysUnderGCPressure runs the ioctls that pass arrays by
// address (transfer segments, stream slots, released slots, page tables)
// while the collector runs all the time, and checks that the kernel saw
// exactly the arrays Go built.
func TestIoctlArraysUnderGCPressure(t *testing.T) {
	r := guestrig.Open(t, "card_mem_size=67108864")
	const page, n = simgpu.PageSize, 16
	src, err := r.GPU.Alloc(n*page, simgpu.Fragmented, 1)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := r.GPU.Alloc(n*page, simgpu.RandomRuns, 2)
	if err != nil {
		t.Fatal(err)
	}
	srcMem := must[[]byte](t)(src.Bytes())
	dstMem := must[[]byte](t)(dst.Bytes())
	for i := range srcMem {
		srcMem[i] = byte(i/page*37 + i*7)
	}
	ps, err := r.Dev.PinGPU(src.VA, src.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := r.Dev.PinGPU(dst.VA, dst.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantTable := must[[]uint64](t)(dst.Table())
	gcPressure(t)
	ctx := context.Background()
	// Pages to the card in order, back in reverse, one segment per page:
	// a segment list the kernel read wrongly moves the wrong pages.
	var fwd, rev []p2p.Segment
	for i := range n {
		fwd = append(fwd, p2p.Segment{Pin: ps, Offset: uint64(i) * page, Len: page})
		rev = append(rev, p2p.Segment{Pin: pd, Offset: uint64(n-1-i) * page, Len: page})
	}
	for iter := range 50 {
		clear(dstMem)
		if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.H2C, Channel: 0, Segments: fwd}); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: rev}); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		for i := range n {
			if !bytes.Equal(dstMem[(n-1-i)*page:(n-i)*page], srcMem[i*page:(i+1)*page]) {
				t.Fatalf("iteration %d: page %d landed wrong", iter, i)
			}
		}
		st, err := pd.Query(true)
		if err != nil {
			t.Fatal(err)
		}
		if st.Table == nil || !slicesEqual(st.Table.Pages, wantTable) {
			t.Fatalf("iteration %d: page table %v, want %v", iter, st.Table, wantTable)
		}
	}
	// A stream: slot arrays at start, one release array per slot.
	const slot = 64 << 10
	if err := r.Ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	var slots []p2p.Segment
	for i := range n {
		slots = append(slots, p2p.Segment{Pin: pd, Offset: uint64(i) * slot, Len: slot})
	}
	s, err := r.Dev.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	var chk frame.Checker
	for sl := range s.Slots() {
		if _, err := chk.Check(dstMem[sl.Index*slot : sl.Index*slot+int(sl.Bytes)]); err != nil {
			t.Fatalf("slot %d: %v", sl.Index, err)
		}
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
		if chk.Frames == 4*n {
			break
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if s.Err() != nil || chk.Gaps+chk.Duplicates+chk.CRCFailures != 0 {
		t.Fatalf("stream: %v, %+v", s.Err(), chk.Stats)
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUnreadCompletionsStallNothing fills Completions and leaves it
// unread: Submit then refuses more with ErrLimit, while synchronous
// transfers and a stream on the same Device go on, and every completion is
// still there to read afterwards.
func TestUnreadCompletionsStallNothing(t *testing.T) {
	r := guestrig.Open(t, "card_mem_size=67108864")
	a, err := r.GPU.Alloc(1<<20, simgpu.Fragmented, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	small := p2p.Transfer{Dir: p2p.H2C, Channel: 0, Segments: []p2p.Segment{{Pin: p, Len: 4096}}}
	for i := range p2p.MaxUnread {
		if _, err := r.Dev.Submit(small, uint64(i)); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if _, err := r.Dev.Submit(small, 0); !errors.Is(err, p2p.ErrLimit) {
		t.Fatalf("submit %d with none read: %v, want ErrLimit", p2p.MaxUnread+1, err)
	}
	// A stalled reader would hold these up forever; the deadline only
	// turns such a hang into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for range 8 {
			if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: []p2p.Segment{p.Whole()}}); err != nil {
				done <- err
				return
			}
		}
		if err := r.Ctl.ConfigureSource(64<<10-frame.HeaderSize, 0, 64); err != nil {
			done <- err
			return
		}
		var slots []p2p.Segment
		for i := range 8 {
			slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) << 16, Len: 64 << 10})
		}
		s, err := r.Dev.StartStream(1, slots)
		if err != nil {
			done <- err
			return
		}
		n := 0
		for sl := range s.Slots() {
			if err := s.Release(sl.Index); err != nil {
				done <- err
				return
			}
			if n++; n == 32 {
				break
			}
		}
		if err := s.Stop(); err != nil {
			done <- err
			return
		}
		for range s.Slots() {
		}
		done <- s.Err()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("with Completions unread: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("synchronous transfers and a stream stalled behind unread completions")
	}
	seen := make(map[uint64]bool)
	for range p2p.MaxUnread {
		c := <-r.Dev.Completions()
		if c.Err != nil || c.Bytes != 4096 || seen[c.UserData] || c.UserData >= p2p.MaxUnread {
			t.Fatalf("completion %+v", c)
		}
		seen[c.UserData] = true
	}
	if _, err := r.Dev.Submit(small, 7); err != nil {
		t.Fatalf("submit after reading: %v", err)
	}
	if err := r.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waits for the reader: the last completion, or its
	// ErrDeviceGone, is there, and then the channel is closed.
	c, ok := <-r.Dev.Completions()
	if !ok || c.UserData != 7 {
		t.Fatalf("after Close: %+v, %v", c, ok)
	}
	if _, ok := <-r.Dev.Completions(); ok {
		t.Fatal("Completions still open after Close")
	}
}
