//go:build vmguest

package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

type rig struct{ *guestrig.Rig }

func setup(t *testing.T, payload int, rate uint32, fifo int) rig {
	t.Helper()
	r := rig{guestrig.Open(t)}
	if err := r.Ctl.ConfigureSource(payload, rate, fifo); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r rig) config(mode stream.Mode, slots int, size uint64) stream.Config {
	return stream.Config{Device: r.Dev, Channel: 1, SlotSize: size, Slots: slots, Mode: mode,
		GPU: simgpu.StreamGPU{GPU: r.GPU, Pattern: simgpu.Fragmented}, Check: stream.CheckCPU}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// consume releases every slot until total bytes have arrived, then stops.
func consume(t *testing.T, s *stream.Session, total uint64) {
	t.Helper()
	for f := range s.Filled() {
		if err := s.Release(f.Slot); err != nil {
			t.Fatal(err)
		}
		if s.Stats().Bytes >= total {
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// 1 GiB through slots of four fragmented GPU pages (four descriptors
// each), every frame checked.
func TestGiBThroughFragmentedGPURing(t *testing.T) {
	const slot = 256 << 10
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	s, err := stream.Start(context.Background(), r.config(stream.Direct, 32, slot))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cpu0 := cpuTime()
	consume(t, s, 1<<30)
	cpu := cpuTime() - cpu0
	st := s.Stats()
	// Slots filled while the stop took effect arrive too: at least 1 GiB.
	if s.Err() != nil || st.Mode != stream.Direct || st.Bytes < 1<<30 || st.Frames.Frames != st.Bytes/slot ||
		st.Frames.Gaps != 0 || st.Frames.Duplicates != 0 || st.Frames.CRCFailures != 0 || st.Frames.Bytes != st.Bytes ||
		st.MaxHeld > 32 {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
	t.Logf("1 GiB in %v: %.0f slots/s, %.1f µs CPU per slot (checking every frame), %.3f GB/s, mean slot latency %v, at most %d held",
		st.Elapsed.Round(time.Millisecond), float64(st.Slots)/st.Elapsed.Seconds(), float64(cpu.Microseconds())/float64(st.Slots),
		st.GBps, st.SlotLatency, st.MaxHeld)
}

// Compat mode with host slots of 64 KiB: sixteen 4 KiB pages, so several
// descriptors each, filled by frames as long as a slot.
func TestCompatModeCopiesToTheGPU(t *testing.T) {
	const slot = 64 << 10
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	s, err := stream.Start(context.Background(), r.config(stream.Compat, 16, slot))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for f := range s.Filled() {
		// Data is the GPU copy: it must hold the frame.
		if _, err := frame.Parse(f.Data); err != nil || f.Len != slot {
			t.Fatalf("slot %d, %d bytes: %v", f.Slot, f.Len, err)
		}
		if err := s.Release(f.Slot); err != nil {
			t.Fatal(err)
		}
		if s.Stats().Bytes >= 32<<20 {
			s.Stop()
		}
	}
	if st := s.Stats(); s.Err() != nil || st.Mode != stream.Compat || st.Frames.Gaps != 0 || st.Frames.Frames < 512 ||
		st.Frames.CRCFailures != 0 || st.Frames.Frames != st.Bytes/slot {
		t.Fatalf("compat: %v, %+v", s.Err(), st)
	}
}

// Slots of four fragmented GPU pages take four descriptors each; frames as
// long as a slot fill them whole.
func TestMultiDescriptorSlots(t *testing.T) {
	const slot = 256 << 10
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	s, err := stream.Start(context.Background(), r.config(stream.Direct, 8, slot))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	consume(t, s, 32<<20)
	if st := s.Stats(); s.Err() != nil || st.Frames.Frames != st.Bytes/slot || st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
}

// Packets shorter than a slot of several descriptors would leave holes in
// it: the stream ends with ErrSlotLayout instead, and nothing stays pinned.
func TestShortPacketsInMultiDescriptorSlots(t *testing.T) {
	r := setup(t, 2048-frame.HeaderSize, 0, 64)
	s, err := stream.Start(context.Background(), r.config(stream.Direct, 4, 128<<10))
	if err != nil {
		t.Fatal(err)
	}
	for range s.Filled() {
		t.Fatal("a slot with a hole was delivered")
	}
	if !errors.Is(s.Err(), p2p.ErrSlotLayout) {
		t.Fatalf("ended with %v, want ErrSlotLayout", s.Err())
	}
	s.Close()
	if info, err := r.Dev.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("%d bytes still pinned (%v)", info.PinnedTotal, err)
	}
}

func TestEndings(t *testing.T) {
	r := setup(t, 4064, 400, 16)
	// Cancelling the context ends the session with the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	s, err := stream.Start(ctx, r.config(stream.Direct, 8, 4096))
	if err != nil {
		t.Fatal(err)
	}
	f := <-s.Filled()
	s.Release(f.Slot)
	cancel()
	for f := range s.Filled() {
		s.Release(f.Slot)
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("after cancel: %v", s.Err())
	}
	s.Close()
	// Freeing the GPU memory under a ring pinned through nvidia_p2p ends
	// it with ErrRevoked. The freed memory is no longer readable, so
	// nothing checks frames. (A dma-buf keeps its memory until released,
	// as CUDA's do: kmodtest's TestDmabufExportIsNVIDIAs.)
	cfg := r.config(stream.Direct, 8, 4096)
	cfg.Check = stream.CheckNone
	cfg.Pinning = stream.PinP2P
	s, err = stream.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-s.Filled()
	r.GPU.Close() // as a process exiting would: every allocation freed
	for range s.Filled() {
	}
	if !errors.Is(s.Err(), p2p.ErrRevoked) {
		t.Fatalf("after the GPU memory was freed: %v", s.Err())
	}
	s.Close()
	if late, err := r.Ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d late writes (%v)", late, err)
	}
	info, err := r.Dev.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.PinnedTotal != 0 {
		t.Fatalf("%d bytes still pinned", info.PinnedTotal)
	}
	if r.GPU, err = simgpu.Open(); err != nil {
		t.Fatal(err)
	}
	// A stop mid-stream ends it cleanly.
	s, err = stream.Start(context.Background(), r.config(stream.Compat, 8, 4096))
	if err != nil {
		t.Fatal(err)
	}
	<-s.Filled()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Filled() {
	}
	if s.Err() != nil {
		t.Fatalf("after Stop: %v", s.Err())
	}
	s.Close()
}

// TestDirectRingPinning: a direct ring is pinned through a dma-buf where
// the GPU exports them (NVIDIA's open driver) and through nvidia_p2p
// otherwise, each can be forced, and the session says which it used.
func TestDirectRingPinning(t *testing.T) {
	const slot = 64 << 10
	r := setup(t, slot-frame.HeaderSize, 0, 64)
	exports := guest.NVIDIAVariant() != guest.NVIDIAProprietary
	auto := stream.PinP2P
	if exports {
		auto = stream.PinDmabuf
	}
	for _, tc := range []struct{ want, got stream.Pinning }{
		{stream.PinAuto, auto}, {stream.PinP2P, stream.PinP2P}, {stream.PinDmabuf, stream.PinDmabuf},
	} {
		cfg := r.config(stream.Direct, 8, slot)
		cfg.Pinning = tc.want
		s, err := stream.Start(context.Background(), cfg)
		if tc.got == stream.PinDmabuf && !exports {
			if !errors.Is(err, stream.ErrConfig) {
				t.Fatalf("forced dma-buf where the GPU exports none: %v, want ErrConfig", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.want, err)
		}
		consume(t, s, 4<<20)
		st := s.Stats()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s.Err() != nil || st.Pinning != tc.got || st.Frames.Frames != st.Bytes/slot || st.Frames.Gaps != 0 {
			t.Fatalf("%v: ended %v with %+v, want pinned through %v", tc.want, s.Err(), st, tc.got)
		}
	}
	// Compat mode pins host memory: a GPU pinning there is a mistake.
	cfg := r.config(stream.Compat, 8, slot)
	cfg.Pinning = stream.PinDmabuf
	if _, err := stream.Start(context.Background(), cfg); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("compat mode with a GPU pinning: %v, want ErrConfig", err)
	}
}
