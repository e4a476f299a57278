//go:build linux && gpu

package cudamem_test

import (
	"context"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/internal/hostring"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// Compat mode on a real GPU: the device model fills a host ring, slots are
// copied to CUDA memory and checked there by the frame checker kernel, and
// a slot read back from the GPU holds exactly the frames written.
func TestCompatOnCUDA(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	gpu, err := cudamem.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	const slots, slotSize, frameSize = 8, 4 << 20, 64 << 10
	host, err := unix.Mmap(-1, 0, slots*slotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(host)
	src, err := hostring.New(hostring.Config{Ring: host, Slots: slots, SlotSize: slotSize, FrameSize: frameSize, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	s, err := stream.Attach(context.Background(), stream.Config{SlotSize: slotSize, Slots: slots, GPU: gpu,
		Check: stream.CheckGPU, FrameSize: frameSize}, host, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := gpu.Device()
	back := make([]byte, slotSize)
	for f := range s.Filled() {
		if f.Data != nil || f.Len != slotSize {
			t.Fatalf("slot %d: %d bytes, CPU view %v", f.Slot, f.Len, f.Data != nil)
		}
		if f.Seq == 5 {
			if err := g.Lock(); err != nil {
				t.Fatal(err)
			}
			err := g.CopyDtoH(back, f.Addr)
			g.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < slotSize/frameSize; i++ {
				h, err := frame.Parse(back[i*frameSize:])
				if err != nil || h.Seq != 5*slotSize/frameSize+uint64(i) {
					t.Fatalf("slot read back from the GPU, frame %d: %+v, %v", i, h, err)
				}
			}
		}
		if err := s.Release(f.Slot); err != nil {
			t.Fatal(err)
		}
		if f.Seq == 200 {
			s.Stop()
		}
	}
	st := s.Stats()
	if s.Err() != nil || st.Frames.Frames != src.Generated() || st.Frames.Frames != st.Bytes/frameSize ||
		st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 || st.Check != stream.CheckGPU {
		t.Fatalf("ended %v with %+v, %d frames generated", s.Err(), st, src.Generated())
	}
	t.Logf("%d slots, %.1f GB/s, frames %+v", st.Slots, st.GBps, st.Frames)
}
