//go:build vmguest

package kmodtest

import (
	"bytes"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// withQuirks makes the simulated card show q until the test ends.
func withQuirks(t *testing.T, q xdmamodel.Quirk) {
	t.Helper()
	ctl := control(t)
	was, err := ctl.SetQuirks(q)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ctl.SetQuirks(was); err != nil {
			t.Error(err)
		}
	})
}

// TestStatusAcrossReads runs transfers on a card that reports a chain's
// end the ways PG195 allows besides the kindest: BUSY still set when the
// stop is read, and the completion and the stop in different reads. Every
// transfer completes with its data (none ends by the watchdog's timeout),
// and the status it reports holds every bit the engine logged.
func TestStatusAcrossReads(t *testing.T) {
	for _, q := range []xdmamodel.Quirk{
		xdmamodel.QuirkLateBusy,
		xdmamodel.QuirkSplitStatus,
		xdmamodel.QuirkLateBusy | xdmamodel.QuirkSplitStatus,
	} {
		t.Run(q.String(), func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			withQuirks(t, q)
			src := alloc(t, g, 1<<20, simgpu.Fragmented)
			dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
			srcMem, _ := src.Bytes()
			dstMem, _ := dst.Bytes()
			fill(srcMem, 7)
			ps := pinGPU(t, d, src.VA, src.Size)
			pd := pinGPU(t, d, dst.VA, dst.Size)
			want := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
			for i := range 8 {
				c := ctx(t)
				card := uint64(i) << 20
				res, err := d.Transfer(c, p2p.Transfer{Dir: p2p.H2C, CardAddr: card, Segments: []p2p.Segment{ps.Whole()}})
				if err != nil || res.Status&want != want {
					t.Fatalf("H2C %d: status %#x, %v", i, res.Status, err)
				}
				clear(dstMem)
				res, err = d.Transfer(c, p2p.Transfer{Dir: p2p.C2H, CardAddr: card, Segments: []p2p.Segment{pd.Whole()}})
				if err != nil || res.Status&want != want {
					t.Fatalf("C2H %d: status %#x, %v", i, res.Status, err)
				}
				if !bytes.Equal(dstMem, srcMem) {
					t.Fatalf("round trip %d changed the data", i)
				}
			}
		})
	}
}

// TestStreamWaitsWithoutBusy holds every slot of a stream on a card that
// reports idle while it waits for credits: the stream must wait, not end,
// and deliver every frame in order once the slots come back.
func TestStreamWaitsWithoutBusy(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	withQuirks(t, xdmamodel.QuirkIdleWithoutCredits|xdmamodel.QuirkLateBusy|xdmamodel.QuirkSplitStatus)
	ctl := control(t)
	const slot = 4096
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	_, _, mem, slots := ring(t, d, g, 8, slot)
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	for range 8 {
		select {
		case sl, ok := <-s.Slots():
			if !ok {
				t.Fatalf("stream ended while its slots were held: %v", s.Err())
			}
			held = append(held, sl.Index)
		case <-time.After(20 * time.Second):
			t.Fatal("the ring did not fill")
		}
	}
	// Long enough for the interrupt of the last slot, and a watchdog
	// period, to see the engine idle.
	time.Sleep(2500 * time.Millisecond)
	if err := s.Err(); err != nil {
		t.Fatalf("stream ended while it waited for credits: %v", err)
	}
	var chk frame.Checker
	check := func(i int, n uint64) {
		if _, err := chk.Check(mem[i*slot : i*slot+int(n)]); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	for _, i := range held {
		check(i, slot)
	}
	if err := s.Release(held...); err != nil {
		t.Fatal(err)
	}
	for chk.Frames < 64 {
		sl, ok := <-s.Slots()
		if !ok {
			t.Fatalf("stream ended after %d frames: %v", chk.Frames, s.Err())
		}
		check(sl.Index, sl.Bytes)
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if s.Err() != nil || chk.Gaps != 0 || chk.CRCFailures != 0 {
		t.Fatalf("stream ended %v: %+v", s.Err(), chk.Stats)
	}
}
