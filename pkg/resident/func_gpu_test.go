//go:build linux && gpu

package resident

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

//go:embed testdata/sum.ptx
var sumPTX []byte

// wordRing is a driver stream's ring in GPU memory with its consumer word
// in host memory mapped into the GPU, fed by a copy engine as the FPGA
// would: fill k's slot gets words k * 0x100000001 + i, then its result.
type wordRing struct {
	g              *cuda.Device
	nslots, size   int
	slots, results *cuda.Buffer
	word           *cuda.MappedBuffer
	s              *cuda.Stream
	src, res       *cuda.HostBuffer
	// A failed test stops its producers before the ring goes.
	quit      atomic.Bool
	producers sync.WaitGroup
}

func newWordRing(t *testing.T, g *cuda.Device, nslots, size int) *wordRing {
	t.Helper()
	w := &wordRing{g: g, nslots: nslots, size: size}
	var err error
	must := func(e error) {
		if e != nil {
			t.Fatal(e)
		}
	}
	w.slots, err = g.Alloc(uint64(nslots * size))
	must(err)
	w.results, err = g.Alloc(uint64(nslots * ResultSize))
	must(err)
	must(g.CopyHtoD(w.results.Ptr, make([]byte, nslots*ResultSize)))
	w.word, err = g.HostAllocMapped(uint64(ConsumerSize))
	must(err)
	w.s, err = g.NewNonBlockingStream()
	must(err)
	w.src, err = g.HostAlloc(uint64((nslots + 1) * size))
	must(err)
	w.res, err = g.HostAlloc(8)
	must(err)
	binary.LittleEndian.PutUint64(w.res.Bytes(), uint64(size)<<32|0x52b4<<16|1)
	// Freed once every consumer of the test has stopped: a free waits
	// for every kernel on the device.
	t.Cleanup(func() {
		w.quit.Store(true)
		w.producers.Wait()
		w.s.Sync()
		w.s.Close()
		for _, b := range []*cuda.Buffer{w.slots, w.results} {
			b.Free()
		}
		w.word.Free()
		w.src.Free()
		w.res.Free()
	})
	return w
}

func (w *wordRing) published() uint64 { return atomic.LoadUint64((*uint64)(w.word.Ptr(0))) }

func (w *wordRing) ring() StreamRing {
	return StreamRing{Slots: w.slots.Ptr, SlotSize: w.size, NSlots: w.nslots, Results: w.results.Ptr,
		Consumer: w.word.DevPtr, Published: w.published}
}

// produce makes fills [from, to), each once its slot is free, fill bad
// with one word wrong; it fails when the consumer makes no room by the
// deadline.
func (w *wordRing) produce(from, to uint64, bad uint64, deadline time.Time) error {
	for k := from; k < to; k++ {
		for k >= uint64(w.nslots) && w.published() < k-uint64(w.nslots)+1 {
			if time.Now().After(deadline) || w.quit.Load() {
				return fmt.Errorf("fill %d: %d published", k, w.published())
			}
		}
		off := (k % uint64(w.nslots+1)) * uint64(w.size)
		b := w.src.Bytes()[off : off+uint64(w.size)]
		for i := range uint64(w.size / 8) {
			binary.LittleEndian.PutUint64(b[8*i:], k*0x100000001+i)
		}
		if k == bad {
			b[100] ^= 1
		}
		if err := w.s.CopyHtoD(w.slots.Ptr+(k%uint64(w.nslots))*uint64(w.size), w.src, off, uint64(w.size)); err != nil {
			return err
		}
		if err := w.s.CopyHtoD(w.results.Ptr+(k%uint64(w.nslots))*uint64(ResultSize), w.res, 0, 8); err != nil {
			return err
		}
	}
	return w.s.Sync()
}

// goProduce runs produce on a goroutine of its own, its error to errs.
func (w *wordRing) goProduce(from, to, bad uint64, deadline time.Time, errs chan<- error) {
	w.producers.Add(1)
	go func() {
		defer w.producers.Done()
		errs <- w.produce(from, to, bad, deadline)
	}()
}

func sumOf(k uint64, size int) uint64 {
	var s uint64
	for i := range uint64(size / 8) {
		s += k*0x100000001 + i
	}
	return s
}

// A user's function, linked into the consumer by the driver's JIT
// linker, runs on every fill: every record reaches the host, in order,
// with the fill's sum; the bad fill is counted; the calls are counted in
// the user's state; no record is overwritten before the host read it
// (depth 4 of 16 slots).
func TestLinkedFunction(t *testing.T) {
	g := device(t)
	if _, err := LinkFunc(g, "empty.ptx", []byte(".version 6.0\n.target sm_70\n.address_size 64\n")); !errors.Is(err, ErrConfig) ||
		err.Error() != `resident: invalid configuration: empty.ptx defines no extern "C" __device__ gpufpga_process` {
		t.Fatalf("PTX without the function: %v", err)
	}
	f, err := LinkFunc(g, "sum.ptx", sumPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	const nslots, size, fills, bad = 16, 64 << 10, 2000, 777
	w := newWordRing(t, g, nslots, size)
	state, err := g.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Free()
	if err := g.CopyHtoD(state.Ptr, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(g, w.ring(), FuncConfig{OutSize: 12, OutDepth: 4}); !errors.Is(err, ErrConfig) {
		t.Fatalf("records of 12 bytes: %v", err)
	}
	c, err := f.Start(g, w.ring(), FuncConfig{Workers: 8, State: state.Ptr, OutSize: 24, OutDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	prod := make(chan error, 1)
	w.goProduce(0, fills, bad, deadline, prod)
	for k := uint64(0); k < fills; k++ {
		for c.Published() <= k {
			if time.Now().After(deadline) {
				c.Stop(context.Background(), 0)
				t.Fatalf("record %d: %d published", k, c.Published())
			}
		}
		r := c.Record(k)
		got := [3]uint64{binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[8:]), binary.LittleEndian.Uint64(r[16:])}
		if want := [3]uint64{k, sumOf(k, size), size}; got != want {
			c.Stop(context.Background(), 0)
			t.Fatalf("record %d: %v, want %v", k, got, want)
		}
		c.Advance(k + 1)
	}
	if err := <-prod; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cnt, err := c.Stop(ctx, fills)
	if err != nil {
		t.Fatal(err)
	}
	if cnt.Published != fills || cnt.Slots != fills || cnt.Bytes != fills*size || cnt.Errors != 1 || cnt.FirstError != bad+1 {
		t.Fatalf("counters %+v, want %d fills, one error at %d", cnt, fills, bad)
	}
	calls := make([]byte, 8)
	if err := g.CopyDtoH(calls, state.Ptr); err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(calls); n != fills {
		t.Fatalf("state counted %d calls, want %d", n, fills)
	}
}

// Two consumers on one GPU, one function linked once: both consume their
// rings at once; the first stops while the second runs (its memory goes
// back to the pool, nothing is freed or unloaded, so nothing waits for
// the other kernel); a cuMemFree of the user's made meanwhile waits for
// the running kernel, as the driver does, while the consumer goes on
// consuming, and returns once it stopped. Every wait has a deadline.
func TestConsumersBesideEachOther(t *testing.T) {
	g := device(t)
	f, err := LinkFunc(g, "sum.ptx", sumPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	const nslots, size, fills = 8, 16 << 10, 1000
	// Allocated before any consumer runs: what the test frees waits for
	// every kernel.
	a, b, a2 := newWordRing(t, g, nslots, size), newWordRing(t, g, nslots, size), newWordRing(t, g, nslots, size)
	spare, err := g.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := f.Start(g, a.ring(), FuncConfig{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := f.Start(g, b.ring(), FuncConfig{Workers: 4})
	if err != nil {
		ca.Stop(context.Background(), 0)
		t.Fatal(err)
	}
	stopAll := func() {
		ca.Stop(context.Background(), 0)
		cb.Stop(context.Background(), 0)
	}
	deadline := time.Now().Add(60 * time.Second)
	errs := make(chan error, 2)
	a.goProduce(0, fills, ^uint64(0), deadline, errs)
	b.goProduce(0, fills, ^uint64(0), deadline, errs)
	for range 2 {
		if err := <-errs; err != nil {
			stopAll()
			t.Fatalf("two consumers at once: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cnt, err := ca.Stop(ctx, fills)
	if err != nil || cnt.Slots != fills || cnt.Errors != 0 {
		stopAll()
		t.Fatalf("the first consumer, stopped beside the second: %+v, %v", cnt, err)
	}
	// A consumer started beside a running one takes the first's memory
	// and loads nothing.
	ca2, err := f.Start(g, a2.ring(), FuncConfig{Workers: 4})
	if err != nil {
		stopAll()
		t.Fatal(err)
	}
	if err := a2.produce(0, fills, ^uint64(0), deadline); err != nil {
		stopAll()
		ca2.Stop(context.Background(), 0)
		t.Fatal(err)
	}
	if cnt, err := ca2.Stop(ctx, fills); err != nil || cnt.Slots != fills {
		stopAll()
		t.Fatalf("a consumer started beside a running one: %+v, %v", cnt, err)
	}

	freed := make(chan error, 1)
	go func() { freed <- spare.Free() }()
	if err := b.produce(fills, 2*fills, ^uint64(0), deadline); err != nil {
		stopAll()
		t.Fatalf("the consumer beside a pending cuMemFree: %v", err)
	}
	select {
	case err := <-freed:
		t.Logf("cuMemFree beside a running consumer returned at once (%v)", err)
	default:
		t.Logf("cuMemFree beside a running consumer waits for it, as the package documentation says")
	}
	if cnt, err := cb.Stop(ctx, 2*fills); err != nil || cnt.Slots != 2*fills || cnt.Errors != 0 {
		t.Fatalf("the second consumer: %+v, %v", cnt, err)
	}
	select {
	case err := <-freed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cuMemFree still waits 10 s after the last consumer stopped")
	}
}
