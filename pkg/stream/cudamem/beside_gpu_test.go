//go:build linux && gpu

package cudamem_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/internal/hostring"
	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// frameRing is a resident stream's ring and results in CUDA memory, its
// word from the GPU, fed frames by a copy engine as the FPGA would.
type frameRing struct {
	ring, results       stream.GPUBuffer
	word                []byte
	release             func()
	s                   *cuda.Stream
	src, res            *cuda.HostBuffer
	nslots, size, fsize uint64
	// A failed test stops its feeders before the ring goes.
	quit    atomic.Bool
	feeders sync.WaitGroup
}

func newFrameRing(t *testing.T, gpu *cudamem.GPU, nslots, size, fsize uint64) *frameRing {
	t.Helper()
	g := gpu.Device()
	r := &frameRing{nslots: nslots, size: size, fsize: fsize}
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	r.ring, err = gpu.Alloc(nslots * size)
	must(err)
	r.results, err = gpu.Alloc(nslots * 32)
	must(err)
	r.word, r.release, err = gpu.ResidentWord()
	must(err)
	r.s, err = g.NewNonBlockingStream()
	must(err)
	r.src, err = g.HostAlloc((nslots + 1) * size)
	must(err)
	r.res, err = g.HostAlloc(8)
	must(err)
	binary.LittleEndian.PutUint64(r.res.Bytes(), size<<32|0x52b4<<16|1)
	t.Cleanup(func() {
		r.quit.Store(true)
		r.feeders.Wait()
		r.s.Sync()
		errs := errors.Join(r.s.Close(), r.src.Free(), r.res.Free(), r.ring.Free(), r.results.Free())
		r.release()
		if errs != nil {
			t.Error(errs)
		}
	})
	return r
}

func (r *frameRing) resident() stream.ResidentRing {
	return stream.ResidentRing{Ring: r.ring, SlotSize: r.size, Slots: int(r.nslots), Results: r.results,
		Consumer: r.word[:64], Check: stream.CheckGPU, FrameSize: int(r.fsize)}
}

func (r *frameRing) published() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.word[0])))
}

// feed makes fills [from, to) of consecutive frames, each once its slot
// is free, and waits until they are consumed, or fails at the deadline.
func (r *frameRing) feed(from, to uint64, deadline time.Time) error {
	fps := r.size / r.fsize
	for k := from; k < to; k++ {
		for k >= r.nslots && r.published() < k-r.nslots+1 {
			if time.Now().After(deadline) || r.quit.Load() {
				return fmt.Errorf("fill %d: %d consumed", k, r.published())
			}
		}
		off := (k % (r.nslots + 1)) * r.size
		for f := range fps {
			frame.Encode(r.src.Bytes()[off+f*r.fsize:], k*fps+f, k, int(r.fsize)-frame.HeaderSize)
		}
		if err := r.s.CopyHtoD(r.ring.Addr()+(k%r.nslots)*r.size, r.src, off, r.size); err != nil {
			return err
		}
		if err := r.s.CopyHtoD(r.results.Addr()+(k%r.nslots)*32, r.res, 0, 8); err != nil {
			return err
		}
	}
	for r.published() < to {
		if time.Now().After(deadline) || r.quit.Load() {
			return fmt.Errorf("%d of %d consumed", r.published(), to)
		}
	}
	return nil
}

// goFeed runs feed on a goroutine of its own, its error to errs.
func (r *frameRing) goFeed(from, to uint64, deadline time.Time, errs chan<- error) {
	r.feeders.Add(1)
	go func() {
		defer r.feeders.Done()
		errs <- r.feed(from, to, deadline)
	}()
}

// compatSession runs an ordinary session (compat mode, frames checked on
// the GPU) for fills slots and closes it.
func compatSession(gpu *cudamem.GPU, fills uint64) error {
	const slots, slotSize, frameSize = 8, 1 << 20, 64 << 10
	host, err := unix.Mmap(-1, 0, slots*slotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(host)
	src, err := hostring.New(hostring.Config{Ring: host, Slots: slots, SlotSize: slotSize, FrameSize: frameSize, Workers: 2})
	if err != nil {
		return err
	}
	s, err := stream.Attach(context.Background(), stream.Config{SlotSize: slotSize, Slots: slots, GPU: gpu,
		Check: stream.CheckGPU, FrameSize: frameSize}, host, src)
	if err != nil {
		return err
	}
	for f := range s.Filled() {
		if err := s.Release(f.Slot); err != nil {
			return errors.Join(err, s.Close())
		}
		if f.Seq == fills-1 {
			s.Stop()
		}
	}
	st := s.Stats()
	err = errors.Join(s.Err(), s.Close())
	if err == nil && (st.Frames.Frames == 0 || st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0) {
		err = fmt.Errorf("compat session: %+v", st.Frames)
	}
	return err
}

// within runs f, failing the test if it takes longer than d: nothing in
// it may wait for a persistent kernel that only the test can stop.
func within(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
	}
}

// Resident consumers beside each other and beside the rest of the
// process, on one GPU: two resident channels consume at once and stop
// one after the other; an ordinary session (compat mode, frames checked
// on the GPU, its checker kept from an earlier one) starts, runs, and
// closes beside them, its frees deferred until the last consumer stops;
// a third consumer starts beside a running one. None of it waits for a
// running consumer, each step with a deadline.
func TestResidentBesideTheRest(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	gpu, err := cudamem.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	// Last, after the rings' cleanups: they free into the GPU.
	t.Cleanup(func() {
		if err := gpu.Close(); err != nil {
			t.Error(err)
		}
	})
	// The checker's kernel is loaded here, before any consumer runs.
	within(t, 60*time.Second, "an ordinary session alone", func() error { return compatSession(gpu, 20) })
	const nslots, size, fsize, fills = 16, 64 << 10, 4096, 2000
	a, b, c := newFrameRing(t, gpu, nslots, size, fsize), newFrameRing(t, gpu, nslots, size, fsize), newFrameRing(t, gpu, nslots, size, fsize)
	ca, err := gpu.StartConsumer(a.resident())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Stop()
	var cb stream.ResidentConsumer
	within(t, 10*time.Second, "a second consumer beside the first", func() (err error) { cb, err = gpu.StartConsumer(b.resident()); return err })
	defer cb.Stop()
	deadline := time.Now().Add(60 * time.Second)
	errs := make(chan error, 2)
	a.goFeed(0, fills, deadline, errs)
	b.goFeed(0, fills, deadline, errs)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("two resident channels at once: %v", err)
		}
	}
	within(t, 60*time.Second, "an ordinary session beside two consumers", func() error { return compatSession(gpu, 50) })
	within(t, 10*time.Second, "stopping a consumer beside another", ca.Stop)
	want := frame.Stats{Frames: fills * size / fsize, Bytes: fills * size}
	if st := ca.Stats(); st.Consumed != fills || st.Frames != want {
		t.Fatalf("first consumer %+v, want %d fills, %+v", st, fills, want)
	}
	var cc stream.ResidentConsumer
	within(t, 10*time.Second, "a third consumer beside the second", func() (err error) { cc, err = gpu.StartConsumer(c.resident()); return err })
	defer cc.Stop()
	b.goFeed(fills, 2*fills, deadline, errs)
	c.goFeed(0, fills, deadline, errs)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("the second and third consumers: %v", err)
		}
	}
	within(t, 10*time.Second, "stopping the second", cb.Stop)
	within(t, 10*time.Second, "stopping the third, the last: the deferred frees run", cc.Stop)
	if st := cb.Stats(); st.Consumed != 2*fills || st.Frames.Frames != 2*want.Frames || st.Frames.Gaps+st.Frames.CRCFailures != 0 {
		t.Fatalf("second consumer %+v", st)
	}
	if st := cc.Stats(); st.Consumed != fills || st.Frames != want {
		t.Fatalf("third consumer %+v", st)
	}
}
