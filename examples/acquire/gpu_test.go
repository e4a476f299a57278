//go:build linux && gpu

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

func openGPU(t *testing.T) *cudamem.GPU {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	gpu, err := cudamem.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gpu.Close(); err != nil {
			t.Error(err)
		}
	})
	return gpu
}

// testSource plays the FPGA over a host ring: it writes frames (package
// frame, sequence numbers from 0) into slot k % slots for k = 0, 1, ...,
// slotCount-1, each once the consumer has handed the slot back, and
// reports it filled as the driver does.
type testSource struct {
	ring                       []byte
	slots, slotSize, frameSize int
	free                       []chan struct{} // a token while the slot may be written
	out                        chan p2p.Slot
	stop                       chan struct{}
	stopOnce                   sync.Once
	done                       chan struct{}
	mu                         sync.Mutex
	held                       []bool
	released                   int
}

var errNotHeld = errors.New("test source: slot not held")

func newTestSource(ring []byte, slots, slotSize, frameSize, slotCount int) *testSource {
	s := &testSource{ring: ring, slots: slots, slotSize: slotSize, frameSize: frameSize,
		free: make([]chan struct{}, slots), out: make(chan p2p.Slot, slots), stop: make(chan struct{}),
		done: make(chan struct{}), held: make([]bool, slots)}
	for i := range s.free {
		s.free[i] = make(chan struct{}, 1)
		s.free[i] <- struct{}{}
	}
	go s.run(slotCount)
	return s
}

func (s *testSource) run(slotCount int) {
	defer close(s.done)
	defer close(s.out)
	per := s.slotSize / s.frameSize
	for k := range slotCount {
		i := k % s.slots
		select {
		case <-s.stop:
			return
		case <-s.free[i]:
		}
		slot := s.ring[i*s.slotSize:][:s.slotSize]
		for j := range per {
			frame.Encode(slot[j*s.frameSize:], uint64(k*per+j), 0, s.frameSize-frame.HeaderSize)
		}
		s.mu.Lock()
		s.held[i] = true
		s.mu.Unlock()
		s.out <- p2p.Slot{Index: i, Seq: uint64(k), Bytes: uint64(s.slotSize), EOP: true, Time: p2p.SlotClock()}
	}
}

func (s *testSource) Slots() <-chan p2p.Slot { return s.out }

func (s *testSource) Release(slots ...int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range slots {
		if i < 0 || i >= s.slots || !s.held[i] {
			return fmt.Errorf("%w: %d", errNotHeld, i)
		}
		s.held[i] = false
		s.released++
		s.free[i] <- struct{}{}
	}
	return nil
}

func (s *testSource) Stop() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *testSource) Err() error { return nil }

func (s *testSource) releases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// The example's processing path end to end on the GPU, with frames the
// test writes where the FPGA would: a session copies each slot to CUDA
// memory and checks its frames there, Consume runs framestats on it and
// hands it back through ReleaseAfter, and every frame's record equals the
// CPU's computation of the same frame. Every slot comes back.
func TestConsumeMatchesCPU(t *testing.T) {
	gpu := openGPU(t)
	const slots, slotSize, frameSize, slotCount, threshold = 8, 1 << 20, 16 << 10, 96, 32760
	ring, err := unix.Mmap(-1, 0, slots*slotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ring)
	src := newTestSource(ring, slots, slotSize, frameSize, slotCount)
	defer src.Stop()
	s, err := stream.Attach(context.Background(), stream.Config{SlotSize: slotSize, Slots: slots, GPU: gpu,
		Check: stream.CheckGPU, FrameSize: frameSize}, ring, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := NewPipeline(gpu, slotSize, KernelConfig{FrameSize: frameSize, Threshold: threshold, Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got []Record
	if err := Consume(s, p, 0, func(r Record) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const frames = slotCount * slotSize / frameSize
	if len(got) != frames {
		t.Fatalf("%d records for %d frames", len(got), frames)
	}
	f := make([]byte, frameSize)
	triggered := 0
	for i, r := range got {
		frame.Encode(f, uint64(i), 0, frameSize-frame.HeaderSize)
		if want := cpuRecord(f, frameSize, threshold); r != want {
			t.Fatalf("frame %d: the GPU's %+v, the CPU's %+v", i, r, want)
		}
		if r.Triggered() {
			triggered++
		}
	}
	st := s.Stats()
	if st.Frames.Frames != frames || st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 || st.Held != 0 || src.releases() != slotCount {
		t.Fatalf("session %+v; %d of %d slots released", st, src.releases(), slotCount)
	}
	if triggered == 0 || triggered == frames {
		t.Errorf("%d of %d frames triggered at %d: the test's frames should exercise both outcomes", triggered, frames, threshold)
	}
	t.Logf("%d frames in %d slots: GPU records equal the CPU's; %d triggered; %s", frames, slotCount, triggered, got[0])
}

// Frames worked out by hand, in GPU memory the test writes: the kernel
// loaded from a PTX file, as -ptx loads it, gives the CPU's records,
// extremes, odd payloads, a payload longer than its frame and a
// non-frame included; a partial last frame is left alone.
func TestKernelFromFile(t *testing.T) {
	gpu := openGPU(t)
	g := gpu.Device()
	const frameSize, perSlot = 4096, 8
	var frames [][]byte
	samples := make([]int16, (frameSize-frame.HeaderSize)/2)
	for i := range samples {
		samples[i] = int16(i*7919 - 20000)
	}
	frames = append(frames, rawFrame(frameSize, 0, samples...))
	frames = append(frames, rawFrame(frameSize, 1, -32768, 32767, -32767, 0, 1))
	frames = append(frames, rawFrame(frameSize, 2))
	long := rawFrame(frameSize, 3, 5, -6)
	long[24] = 0xff // a payload longer than the frame
	frames = append(frames, long)
	notFrame := rawFrame(frameSize, 4, 1, 2, 3)
	notFrame[6] = 16 // header size
	frames = append(frames, notFrame)
	frames = append(frames, rawFrame(frameSize, 5, samples[:1001]...))
	frames = append(frames, rawFrame(frameSize, 6, samples[:1000]...))
	var slot []byte
	for _, f := range frames {
		slot = append(slot, f...)
	}
	slot = append(slot, rawFrame(frameSize, 7, 1, 2, 3)[:frameSize/2]...) // not whole: no record

	path := filepath.Join(t.TempDir(), "mine.ptx")
	if err := os.WriteFile(path, framestatsPTX, 0o644); err != nil {
		t.Fatal(err)
	}
	ptx, err := LoadPTXFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPipeline(gpu, perSlot*frameSize, KernelConfig{PTX: ptx, Name: "nosuchkernel", FrameSize: frameSize}); !errors.Is(err, ErrKernel) {
		t.Fatalf("a missing entry: %v", err)
	}
	if _, err := NewPipeline(gpu, perSlot*frameSize, KernelConfig{PTX: []byte("not PTX"), FrameSize: frameSize}); !errors.Is(err, ErrKernel) {
		t.Fatalf("text that is not PTX: %v", err)
	}
	if _, err := NewPipeline(gpu, perSlot*frameSize, KernelConfig{FrameSize: 1000}); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("slots of partial frames: %v", err)
	}
	for _, threshold := range []int{0, 1, 20000, 32767, 32768} {
		p, err := NewPipeline(gpu, perSlot*frameSize, KernelConfig{PTX: ptx, Name: "framestats", FrameSize: frameSize, Threshold: threshold, Depth: 2})
		if err != nil {
			t.Fatal(err)
		}
		var buf *cuda.Buffer
		err = g.Do(func() error {
			var err error
			if buf, err = g.Alloc(perSlot * frameSize); err != nil {
				return err
			}
			return g.CopyHtoD(buf.Ptr, slot)
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []Record
		for range 2 { // twice over the same slot: both regions
			if _, err := p.Submit(buf.Ptr, uint64(len(slot))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Submit(buf.Ptr, uint64(len(slot))); !errors.Is(err, stream.ErrConfig) {
			t.Fatalf("a third slot's work with room for two: %v", err)
		}
		if err := p.Retire(0, func(r Record) { got = append(got, r) }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2*len(frames) {
			t.Fatalf("threshold %d: %d records for %d whole frames twice", threshold, len(got), len(frames))
		}
		for i, r := range got {
			if want := cpuRecord(frames[i%len(frames)], frameSize, threshold); r != want {
				t.Errorf("threshold %d, frame %d: the GPU's %+v, the CPU's %+v", threshold, i, r, want)
			}
		}
		if err := errors.Join(p.Close(), g.Do(buf.Free)); err != nil {
			t.Fatal(err)
		}
	}
}

// Cancelling the session's context, as Ctrl-C does, ends Consume with
// every delivered slot processed in order and handed back: the session
// ends with the context's error, and no slot stays held after Close.
func TestCancelEndsCleanly(t *testing.T) {
	gpu := openGPU(t)
	const slots, slotSize, frameSize, threshold = 8, 256 << 10, 64 << 10, 32000
	ring, err := unix.Mmap(-1, 0, slots*slotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(ring)
	src := newTestSource(ring, slots, slotSize, frameSize, 1<<30)
	defer src.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := stream.Attach(ctx, stream.Config{SlotSize: slotSize, Slots: slots, GPU: gpu,
		Check: stream.CheckGPU, FrameSize: frameSize}, ring, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := NewPipeline(gpu, slotSize, KernelConfig{FrameSize: frameSize, Threshold: threshold, Depth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var got []Record
	err = Consume(s, p, 0, func(r Record) {
		got = append(got, r)
		if len(got) == 1000 {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("session ended with %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if len(got) < 1000 || uint64(len(got)) != st.Slots*slotSize/frameSize || st.Held != 0 || uint64(src.releases()) != st.Slots {
		t.Fatalf("%d records; session %+v; %d slots released", len(got), st, src.releases())
	}
	f := make([]byte, frameSize)
	for i, r := range got {
		frame.Encode(f, uint64(i), 0, frameSize-frame.HeaderSize)
		if want := cpuRecord(f, frameSize, threshold); r != want {
			t.Fatalf("frame %d: the GPU's %+v, the CPU's %+v", i, r, want)
		}
	}
	t.Logf("cancelled after %d slots, %d frames, all handed back", st.Slots, len(got))
}
