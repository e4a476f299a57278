//go:build vmguest

package kmodtest

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// ring pins a fragmented allocation of n slots of size bytes each (a slot
// never spans two 64 KiB pages) and returns it with its CPU view.
func ring(t *testing.T, d *p2p.Device, g *simgpu.GPU, n int, size uint64) (*simgpu.Alloc, *p2p.Pin, []byte, []p2p.Segment) {
	t.Helper()
	a := alloc(t, g, uint64(n)*size, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	mem, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var slots []p2p.Segment
	for i := range n {
		slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) * size, Len: size})
	}
	return a, p, mem, slots
}

func TestStreamThroughFragmentedRing(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot = 64 << 10
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	_, p, mem, slots := ring(t, d, g, 16, slot)
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	const total = 64 << 20
	var chk frame.Checker
	var bytes uint64
	for sl := range s.Slots() {
		b := mem[sl.Index*slot : sl.Index*slot+int(sl.Bytes)]
		if _, err := chk.Check(b); err != nil {
			t.Fatalf("slot %d (fill %d): %v", sl.Index, sl.Seq, err)
		}
		if !sl.EOP || sl.Bytes != slot || sl.Seq != chk.Frames-1 || sl.Index != int(sl.Seq%16) {
			t.Fatalf("slot %+v after %d frames", sl, chk.Frames)
		}
		bytes += sl.Bytes
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
		if bytes >= total {
			break
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if s.Err() != nil || chk.Gaps != 0 || chk.Duplicates != 0 || chk.CRCFailures != 0 || bytes != total {
		t.Fatalf("stream ended %v after %d bytes: %+v", s.Err(), bytes, chk.Stats)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamSlowConsumerLosesUpstreamOnly(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot = 4096
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 2000, 16); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64)
	_, p, mem, slots := ring(t, d, g, 8, slot)
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64 // frame sequence numbers, in fill order
	held := map[int]uint64{}
	seqOf := func(i int) uint64 {
		h, err := frame.Parse(mem[i*slot : (i+1)*slot])
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		return h.Seq
	}
	// Take the whole ring and sit on it: the engine must stop, not wrap.
	for range 8 {
		sl := <-s.Slots()
		held[sl.Index] = seqOf(sl.Index)
		got = append(got, held[sl.Index])
	}
	time.Sleep(300 * time.Millisecond)
	for i, seq := range held {
		if now := seqOf(i); now != seq {
			t.Fatalf("slot %d held with frame %d was overwritten with frame %d", i, seq, now)
		}
	}
	select {
	case sl := <-s.Slots():
		t.Fatalf("slot %d filled while every slot was held", sl.Index)
	default:
	}
	for i := range held {
		if err := s.Release(i); err != nil {
			t.Fatal(err)
		}
	}
	for len(got) < 64 {
		sl := <-s.Slots()
		got = append(got, seqOf(sl.Index))
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for sl := range s.Slots() {
		got = append(got, seqOf(sl.Index))
	}
	st, err := ctl.SourceStats()
	if err != nil {
		t.Fatal(err)
	}
	// Every frame is accounted for: received, dropped upstream, or still
	// queued in the source.
	missing := uint64(0)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("frames out of order: %d after %d", got[i], got[i-1])
		}
		missing += got[i] - got[i-1] - 1
	}
	missing += got[0] + (st.Generated - 1 - got[len(got)-1])
	if st.Delivered != uint64(len(got)) || st.Dropped == 0 || missing != st.Dropped+st.Queued ||
		st.Generated != st.Delivered+st.Dropped+st.Queued {
		t.Fatalf("received %d, source %+v, %d missing sequence numbers", len(got), st, missing)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamEndsWhenMemoryIsFreed(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4064, 500, 16); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4064, 0, 64)
	a, p, _, slots := ring(t, d, g, 8, 4096)
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartStream(1, slots); !errors.Is(err, p2p.ErrBusy) {
		t.Fatalf("second stream on the channel: %v, want ErrBusy", err)
	}
	<-s.Slots()
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if !errors.Is(s.Err(), p2p.ErrRevoked) {
		t.Fatalf("stream over freed memory ended with %v, want ErrRevoked", s.Err())
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d late writes (%v)", late, err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestStreamEndFindsSlotsIdle: once a stream's STREAM_END is read, its
// slots' pin is idle and unpins at once. A stream that ends by itself
// (short packets in slots of several descriptors end it with EPROTO, from
// the channel's worker) is where a client reading STREAM_END on the other
// CPU could once race the worker still letting the slots go.
func TestStreamEndFindsSlotsIdle(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(2048-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64)
	for i := range 20 {
		a := alloc(t, g, 4*128<<10, simgpu.Fragmented)
		p := pinGPU(t, d, a.VA, a.Size)
		var slots []p2p.Segment
		for j := range 4 {
			slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(j) * 128 << 10, Len: 128 << 10})
		}
		s, err := d.StartStream(1, slots)
		if err != nil {
			t.Fatal(err)
		}
		for range s.Slots() {
			t.Fatal("a slot with a hole was delivered")
		}
		if !errors.Is(s.Err(), p2p.ErrSlotLayout) {
			t.Fatalf("round %d: stream ended %v, want ErrSlotLayout", i, s.Err())
		}
		if err := p.Unpin(); err != nil {
			t.Fatalf("round %d: unpin right after STREAM_END: %v", i, err)
		}
	}
}
