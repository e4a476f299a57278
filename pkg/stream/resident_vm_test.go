//go:build vmguest

package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

func (r rig) residentConfig(slots int, size uint64, coalesce int) stream.Config {
	cfg := r.config(stream.Auto, slots, size)
	cfg.Resident, cfg.Coalesce = true, coalesce
	return cfg
}

// waitConsumed waits until the session's consumer has taken total bytes.
func waitConsumed(t *testing.T, s *stream.Session, total uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for s.Stats().Bytes < total {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %+v in 60 s, ended %v", s.Stats(), s.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// released checks that a closed session left nothing pinned, and as many
// simulated GPU allocations and pins live as before it started.
func (r rig) released(t *testing.T, before simgpu.Counters) {
	t.Helper()
	if info, err := r.Dev.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("%d bytes still pinned (%v)", info.PinnedTotal, err)
	}
	c, err := r.GPU.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.LiveAllocs != before.LiveAllocs || c.LivePins != before.LivePins {
		t.Fatalf("%d allocations and %d pins live, %d and %d before", c.LiveAllocs, c.LivePins, before.LiveAllocs, before.LivePins)
	}
}

// residentExact checks the statistics of a resident session that ended
// with every fill consumed, one frame a slot.
func residentExact(t *testing.T, s *stream.Session, slot uint64) stream.Stats {
	t.Helper()
	st := s.Stats()
	f := st.Frames
	if !st.Resident || st.Mode != stream.Direct || st.Slots == 0 || st.Fills != st.Slots || st.Bytes != st.Slots*slot ||
		f.Frames != st.Slots || f.Bytes != st.Bytes || f.Gaps+f.Duplicates+f.CRCFailures != 0 ||
		st.Held != 0 || st.MaxHeld != 0 {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
	if again := s.Stats(); again != st {
		t.Fatalf("statistics moved after the end: %+v, then %+v", st, again)
	}
	return st
}

// A resident session on the rig: the simulated GPU's consumer takes every
// fill and checks its frame, no slot reaches the CPU, Stop lets the
// consumer take the last fills, and Close leaves nothing pinned.
func TestResidentSession(t *testing.T) {
	r := setup(t, 64<<10-frame.HeaderSize, 0, 64)
	for _, tc := range []struct {
		slot            uint64
		slots, coalesce int
		total           uint64
	}{
		{64 << 10, 16, 0, 64 << 20},
		{4096, 64, 8, 8 << 20},
		{4096, 8, 1, 2 << 20},
	} {
		t.Run(fmt.Sprintf("%dx%d/coalesce%d", tc.slots, tc.slot, tc.coalesce), func(t *testing.T) {
			if err := r.Ctl.ConfigureSource(int(tc.slot)-frame.HeaderSize, 0, 64); err != nil {
				t.Fatal(err)
			}
			before, err := r.GPU.Counters()
			if err != nil {
				t.Fatal(err)
			}
			s, err := stream.Start(context.Background(), r.residentConfig(tc.slots, tc.slot, tc.coalesce))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(0); !errors.Is(err, p2p.ErrInvalid) {
				t.Fatalf("release in a resident session: %v, want ErrInvalid", err)
			}
			t0 := time.Now()
			waitConsumed(t, s, tc.total)
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			for f := range s.Filled() {
				t.Fatalf("a resident session delivered slot %d", f.Slot)
			}
			if s.Err() != nil {
				t.Fatalf("after Stop: %v", s.Err())
			}
			st := residentExact(t, s, tc.slot)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			r.released(t, before)
			t.Logf("%d fills in %v: %.3f GB/s", st.Fills, time.Since(t0).Round(time.Millisecond), st.GBps)
		})
	}
}

// Cancelling the context ends a resident session with the context's
// error, once its consumer has taken every fill.
func TestResidentCancel(t *testing.T) {
	const slot = 4096
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	before, err := r.GPU.Counters()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := stream.Start(ctx, r.residentConfig(8, slot, 2))
	if err != nil {
		t.Fatal(err)
	}
	waitConsumed(t, s, 64*slot)
	cancel()
	for range s.Filled() {
		t.Fatal("a resident session delivered a slot")
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("after cancel: %v", s.Err())
	}
	residentExact(t, s, slot)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.released(t, before)
}

// A consumer that stops consuming cannot hang the end: Stop returns once
// it has made no progress for DrainTimeout, the session ends with
// ErrUnconsumed, and the engine overwrote nothing (it made at most a
// ring's worth of fills more than were consumed).
func TestResidentStalledConsumer(t *testing.T) {
	const slot, slots, stallAt = 4096, 8, 20
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	before, err := r.GPU.Counters()
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.residentConfig(slots, slot, 0)
	cfg.GPU = simgpu.StreamGPU{GPU: r.GPU, Pattern: simgpu.Fragmented, Tune: func(c *simgpu.Consumer) { c.Stall(stallAt) }}
	cfg.DrainTimeout = 300 * time.Millisecond
	s, err := stream.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitConsumed(t, s, stallAt*slot)
	time.Sleep(100 * time.Millisecond) // the engine fills the ring and waits
	t0 := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("Stop took %v", d)
	}
	st := s.Stats()
	if !errors.Is(s.Err(), stream.ErrUnconsumed) || st.Slots != stallAt || st.Fills <= st.Slots || st.Fills > st.Slots+slots ||
		st.Frames.Frames != stallAt || st.Frames.Gaps+st.Frames.CRCFailures != 0 {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.released(t, before)
}

// What a resident session cannot run is refused, and a refusal after the
// results were pinned leaves nothing behind.
func TestResidentRefusals(t *testing.T) {
	const slot = 64 << 10
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	before, err := r.GPU.Counters()
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.residentConfig(8, slot, 0)
	cfg.Mode = stream.Compat
	if _, err := stream.Start(context.Background(), cfg); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("resident in compat mode: %v, want ErrConfig", err)
	}
	// The simulated GPU's consumer always checks frames: it refuses to
	// only count them, once the ring, results and word are pinned.
	cfg = r.residentConfig(8, slot, 0)
	cfg.Check = stream.CheckNone
	if _, err := stream.Start(context.Background(), cfg); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("resident without a frame check on the simulated GPU: %v, want ErrConfig", err)
	}
	r.released(t, before)
	// A resident session resolves to direct mode.
	cfg = r.residentConfig(8, slot, 0)
	if mode, _, err := cfg.Resolve(); err != nil || mode != stream.Direct {
		t.Fatalf("resolved %v, %v; want direct", mode, err)
	}
}
