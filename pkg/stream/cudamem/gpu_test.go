//go:build linux && gpu

package cudamem_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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

// A GPU-resident stream's consumer on a real GPU: the persistent kernel
// takes frames that a copy engine writes, as the FPGA would, into a ring
// and results in CUDA memory, and publishes its count in host memory the
// producer reads for credits; the counts come back exact.
func TestResidentConsumerOnCUDA(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	gpu, err := cudamem.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	const nslots, slotSize, frameSize, fills = 16, 64 << 10, 4096, 3000
	ring, err := gpu.Alloc(nslots * slotSize)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Free()
	results, err := gpu.Alloc(nslots * 32)
	if err != nil {
		t.Fatal(err)
	}
	defer results.Free()
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	if _, err := gpu.StartConsumer(stream.ResidentRing{Ring: ring, SlotSize: slotSize, Slots: nslots, Results: results,
		Consumer: page[:64], Check: stream.CheckCPU, FrameSize: frameSize}); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("a CPU check on the GPU: %v", err)
	}
	c, err := gpu.StartConsumer(stream.ResidentRing{Ring: ring, SlotSize: slotSize, Slots: nslots, Results: results,
		Consumer: page[:64], Check: stream.CheckGPU, FrameSize: frameSize})
	if err != nil {
		t.Fatal(err)
	}
	word := (*uint64)(unsafe.Pointer(&page[0]))
	g := gpu.Device()
	if err := g.Lock(); err != nil {
		t.Fatal(err)
	}
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	src, err := g.HostAlloc((nslots + 1) * slotSize)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.HostAlloc(8)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(res.Bytes(), uint64(slotSize)<<32|0x52b4<<16|1)
	const fps = slotSize / frameSize
	deadline := time.Now().Add(30 * time.Second)
	for k := uint64(0); k < fills; k++ {
		for k >= nslots && atomic.LoadUint64(word) < k-nslots+1 {
			if time.Now().After(deadline) {
				t.Fatalf("fill %d: consumed %d", k, atomic.LoadUint64(word))
			}
		}
		off := (k % (nslots + 1)) * slotSize
		for f := range uint64(fps) {
			frame.Encode(src.Bytes()[off+f*frameSize:], k*fps+f, k, frameSize-frame.HeaderSize)
		}
		if err := s.CopyHtoD(ring.Addr()+(k%nslots)*slotSize, src, off, slotSize); err != nil {
			t.Fatal(err)
		}
		if err := s.CopyHtoD(results.Addr()+(k%nslots)*32, res, 0, 8); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	g.Unlock()
	for atomic.LoadUint64(word) < fills {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d", atomic.LoadUint64(word), fills)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	want := frame.Stats{Frames: fills * fps, Bytes: fills * slotSize}
	if st.Consumed != fills || st.Bytes != fills*slotSize || st.Frames != want {
		t.Fatalf("consumer %+v, want %d fills and %+v", st, fills, want)
	}
	g.Do(func() error { return errors.Join(s.Close(), src.Free(), res.Free()) })
}
