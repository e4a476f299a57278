//go:build vmguest

package p2p_test

import (
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// hostRing pins a ring of n 64 KiB slots of host memory.
func hostRing(t *testing.T, d *p2p.Device, n int) []p2p.Segment {
	t.Helper()
	const size = 64 << 10
	buf, err := d.AllocHost(uint64(n) * size)
	if err != nil {
		t.Fatal(err)
	}
	pin, err := d.PinHost(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pin.Unpin(); err != nil {
			t.Error(err)
		}
		if err := buf.Free(); err != nil {
			t.Error(err)
		}
	})
	var segs []p2p.Segment
	for i := range n {
		segs = append(segs, p2p.Segment{Pin: pin, Offset: uint64(i) * size, Len: size})
	}
	return segs
}

func nextSlot(t *testing.T, s *p2p.Stream, within time.Duration) (p2p.Slot, bool) {
	t.Helper()
	select {
	case sl, ok := <-s.Slots():
		if !ok {
			t.Fatalf("stream %d ended: %v", s.ID(), s.Err())
		}
		return sl, true
	case <-time.After(within):
		return p2p.Slot{}, false
	}
}

// A Release of a stream that has ended reaches no stream started after it
// on the same channel: with a ring of one slot, a release that reached the
// new stream would let the engine fill its slot again.
func TestStaleReleaseMissesTheNextStream(t *testing.T) {
	d, err := p2p.Open("/dev/gpufpga0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // after hostRing's cleanup
	ring := hostRing(t, d, 1)
	old, err := d.StartStream(1, ring)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nextSlot(t, old, 20*time.Second); !ok {
		t.Fatal("the first stream filled nothing")
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	for range old.Slots() {
	}
	cur, err := d.StartStream(1, ring)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Stop()
	if cur.ID() == old.ID() || cur.ID() == 0 {
		t.Fatalf("stream ids %d then %d", old.ID(), cur.ID())
	}
	if _, ok := nextSlot(t, cur, 20*time.Second); !ok {
		t.Fatal("the second stream filled nothing")
	}
	if err := old.Release(0); err != nil {
		t.Fatalf("release by the ended stream: %v, want nil", err)
	}
	if sl, ok := nextSlot(t, cur, time.Second); ok {
		t.Fatalf("the ended stream's release refilled the new stream's slot: %+v", sl)
	}
	if err := cur.Release(0); err != nil {
		t.Fatal(err)
	}
	if _, ok := nextSlot(t, cur, 20*time.Second); !ok {
		t.Fatal("the new stream's own release did not let its slot fill again")
	}
}
