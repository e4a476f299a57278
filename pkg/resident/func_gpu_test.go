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
	// long, if not 0, is k + 1 of the fill whose result claims 4 GiB
	// less a page: past its slot and far past the ring's end.
	long uint64
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
	w.res, err = g.HostAlloc(16)
	must(err)
	binary.LittleEndian.PutUint64(w.res.Bytes(), uint64(size)<<32|0x52b4<<16|1)
	binary.LittleEndian.PutUint64(w.res.Bytes()[8:], uint64(0xfffff000)<<32|0x52b4<<16|1)
	// Freed once every consumer of the test has stopped: a free waits
	// for every kernel on the device. A producer still held in the
	// driver after a failure leaves the ring unfreed, not the test hung.
	t.Cleanup(func() {
		w.quit.Store(true)
		if err := within(30*time.Second, "the ring's producers", func() error { w.producers.Wait(); return w.s.Sync() }); err != nil {
			t.Errorf("%v: the ring is left unfreed", err)
			return
		}
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
			binary.LittleEndian.PutUint64(b[8*i:], word(k, i, bad))
		}
		if err := w.s.CopyHtoD(w.slots.Ptr+(k%uint64(w.nslots))*uint64(w.size), w.src, off, uint64(w.size)); err != nil {
			return err
		}
		res := uint64(0)
		if k+1 == w.long {
			res = 8
		}
		if err := w.s.CopyHtoD(w.results.Ptr+(k%uint64(w.nslots))*uint64(ResultSize), w.res, res, 8); err != nil {
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

// word is word i of fill k as produce writes it: k * 0x100000001 + i,
// one bit flipped in word 12 of the bad fill.
func word(k, i, bad uint64) uint64 {
	v := k*0x100000001 + i
	if k == bad && i == 12 {
		v ^= 1 << 32
	}
	return v
}

// sumOf is the sum of fill k's words as produce writes them.
func sumOf(k uint64, size int, bad uint64) uint64 {
	var s uint64
	for i := range uint64(size / 8) {
		s += word(k, i, bad)
	}
	return s
}

// noBadFill is a bad fill that no test reaches.
const noBadFill = ^uint64(0)

// within runs f on a goroutine of its own and waits for it until d has
// passed: a call held in the driver (behind a kernel that does not end)
// fails the test with what it was where the test would hang. A call
// that never returns keeps its goroutine.
func within(d time.Duration, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("%s: no answer in %v", what, d)
	}
}

// stopWithin stops c once it has published fills (10 s for that); a
// Stop that has not returned 20 s on is an error.
func stopWithin(c *FuncConsumer, fills uint64) (Counters, error) {
	var cnt Counters
	err := within(20*time.Second, fmt.Sprintf("stopping a consumer at %d fills", fills), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		cnt, err = c.Stop(ctx, fills)
		return err
	})
	return cnt, err
}

// startWithin starts a consumer of f on r, which must not wait for the
// kernels running on the GPU: 20 s at most.
func startWithin(f *Func, g *cuda.Device, r StreamRing, cfg FuncConfig) (*FuncConsumer, error) {
	var c *FuncConsumer
	err := within(20*time.Second, "starting a consumer", func() error {
		var err error
		c, err = f.Start(g, r, cfg)
		return err
	})
	return c, err
}

// stopAll stops every consumer started (nil: not started), each within
// its deadline, before a failed test frees what they run on.
func stopAll(t *testing.T, cs ...*FuncConsumer) {
	t.Helper()
	for _, c := range cs {
		if c == nil {
			continue
		}
		if _, err := stopWithin(c, 0); err != nil && !errors.Is(err, ErrStalled) {
			t.Errorf("stopping after the failure: %v", err)
		}
	}
}

// A user's function, linked into the consumer by the driver's JIT
// linker, runs on every fill: every record reaches the host, in order,
// with the fill's sum (the bad fill's with its flipped bit); the bad
// fill is counted; the calls are counted in the user's state; no record
// is overwritten before the host read it (depth 4 of 16 slots). A fill
// whose result claims 4 GiB is counted bad and its record zeroed, and the
// function, which reads every word it is given, never sees it: it would
// read past the ring's end, and the fault would end the kernel.
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
	const nslots, size, fills, bad, long = 16, 64 << 10, 2000, 777, 1500
	w := newWordRing(t, g, nslots, size)
	w.long = long + 1
	state := binary.LittleEndian.AppendUint64(nil, 5) // the calls, counted from 5
	if _, err := f.Start(g, w.ring(), FuncConfig{OutSize: 12, OutDepth: 4}); !errors.Is(err, ErrConfig) ||
		err.Error() != "resident: invalid configuration: 4 records of 12 bytes (both 0, or a depth and a multiple of 8)" {
		t.Fatalf("records of 12 bytes: %v", err)
	}
	c, err := startWithin(f, g, w.ring(), FuncConfig{Workers: 8, State: state, OutSize: 24, OutDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		stopAll(t, c)
		t.Fatalf(format, args...)
	}
	deadline := time.Now().Add(60 * time.Second)
	prod := make(chan error, 1)
	w.goProduce(0, fills, bad, deadline, prod)
	for k := uint64(0); k < fills; k++ {
		for c.Published() <= k {
			if time.Now().After(deadline) {
				fail("record %d: %d published", k, c.Published())
			}
		}
		r := c.Record(k)
		got := [3]uint64{binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[8:]), binary.LittleEndian.Uint64(r[16:])}
		want := [3]uint64{k, sumOf(k, size, bad), size}
		if k == long {
			want = [3]uint64{}
		}
		if got != want {
			fail("record %d: %v, want %v", k, got, want)
		}
		c.Advance(k + 1)
	}
	select {
	case err := <-prod:
		if err != nil {
			fail("the producer: %v", err)
		}
	case <-time.After(time.Until(deadline) + 10*time.Second):
		fail("the producer has not returned 10 s after its deadline")
	}
	cnt, err := stopWithin(c, fills)
	if err != nil {
		t.Fatal(err)
	}
	if cnt.Published != fills || cnt.Slots != fills || cnt.Bytes != (fills-1)*size || cnt.Errors != 2 || cnt.FirstError != bad+1 {
		t.Fatalf("counters %+v, want %d fills, errors at %d and %d, the bytes of all but the long one", cnt, fills, bad, long)
	}
	// Stop copied the state back.
	if n := binary.LittleEndian.Uint64(state); n != 5+fills-1 {
		t.Fatalf("state counted %d calls from 5, want %d: every fill's but the long one's", n, 5+fills-1)
	}
}

// Two consumers on one GPU, one function linked once: both consume their
// rings at once; the first stops while the second runs (its memory goes
// back to the pool, nothing is freed or unloaded, so nothing waits for
// the other kernel) and a third starts beside the second on that memory.
// Then a cuMemFree of the user's is made while the second consumer holds
// fills whose records the host has not taken: once they are taken it
// consumes them with the free still pending where the driver makes it
// wait (and with no CUDA call of the host's meanwhile: an FPGA makes
// none, and a call made behind a pending cuMemFree may wait for it too);
// Stop ends the kernel from the caller's goroutine, and the free
// returns. Every wait has a deadline.
func TestConsumersBesideEachOther(t *testing.T) {
	g := device(t)
	f, err := LinkFunc(g, "sum.ptx", sumPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	const nslots, size, fills, depth = 8, 16 << 10, 1000, 4
	// Allocated before any consumer runs: what the test frees waits for
	// every kernel.
	a, b, a2 := newWordRing(t, g, nslots, size), newWordRing(t, g, nslots, size), newWordRing(t, g, nslots, size)
	spare, err := g.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	// The second consumer's records, checked in order; the first of the
	// last fills is held until release.
	release := make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	var recMu sync.Mutex
	var recErr error
	onRecord := func(k uint64, rec []byte) {
		got := [3]uint64{binary.LittleEndian.Uint64(rec), binary.LittleEndian.Uint64(rec[8:]), binary.LittleEndian.Uint64(rec[16:])}
		if want := [3]uint64{k, sumOf(k, size, noBadFill), size}; got != want {
			recMu.Lock()
			recErr = errors.Join(recErr, fmt.Errorf("record %d: %v, want %v", k, got, want))
			recMu.Unlock()
		}
		if k == fills {
			select {
			case <-release:
			case <-time.After(60 * time.Second):
			}
		}
	}
	var ca, cb, ca2 *FuncConsumer
	fail := func(format string, args ...any) {
		t.Helper()
		letGo()
		stopAll(t, ca, cb, ca2)
		t.Fatalf(format, args...)
	}
	if ca, err = startWithin(f, g, a.ring(), FuncConfig{Workers: 4}); err != nil {
		fail("%v", err)
	}
	if cb, err = startWithin(f, g, b.ring(), FuncConfig{Workers: 4, OutSize: 24, OutDepth: depth, OnRecord: onRecord}); err != nil {
		fail("the second consumer beside the first: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	errs := make(chan error, 2)
	a.goProduce(0, fills, noBadFill, deadline, errs)
	b.goProduce(0, fills, noBadFill, deadline, errs)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				fail("two consumers at once: %v", err)
			}
		case <-time.After(time.Until(deadline) + 10*time.Second):
			fail("two consumers at once: a producer has not returned 10 s after its deadline")
		}
	}
	cnt, err := stopWithin(ca, fills)
	if err != nil || cnt.Slots != fills || cnt.Errors != 0 {
		fail("the first consumer, stopped beside the second: %+v, %v", cnt, err)
	}
	// A consumer started beside a running one takes the first's memory
	// and loads nothing.
	if ca2, err = startWithin(f, g, a2.ring(), FuncConfig{Workers: 4}); err != nil {
		fail("a consumer started beside a running one: %v", err)
	}
	if err := within(70*time.Second, "the third consumer's fills", func() error { return a2.produce(0, fills, noBadFill, deadline) }); err != nil {
		fail("%v", err)
	}
	if cnt, err := stopWithin(ca2, fills); err != nil || cnt.Slots != fills {
		fail("a consumer started beside a running one: %+v, %v", cnt, err)
	}

	// nslots more fills for the second consumer, of which it takes
	// depth and holds the rest: fill `fills`'s record is not taken.
	if err := within(70*time.Second, "the last fills", func() error { return b.produce(fills, fills+nslots, noBadFill, deadline) }); err != nil {
		fail("%v", err)
	}
	for cb.Published() < fills+depth {
		if time.Now().After(deadline) {
			fail("the second consumer published %d of %d fills before the held record", cb.Published(), fills+depth)
		}
	}
	if p := cb.Published(); p != fills+depth {
		fail("the second consumer published %d fills with record %d held, at most %d", p, fills, fills+depth)
	}
	freed := make(chan error, 1)
	go func() { freed <- spare.Free() }()
	pending := false
	select {
	case err := <-freed:
		if err != nil {
			fail("cuMemFree beside a running consumer: %v", err)
		}
		t.Logf("cuMemFree beside a running consumer returned at once")
	case <-time.After(time.Second):
		pending = true
	}
	letGo()
	for cb.Published() < fills+nslots {
		if time.Now().After(deadline) {
			fail("the second consumer published %d of %d fills, a cuMemFree pending: %v", cb.Published(), fills+nslots, pending)
		}
	}
	if pending {
		select {
		case err := <-freed:
			if err != nil {
				fail("cuMemFree beside a running consumer: %v", err)
			}
			pending = false
			t.Logf("cuMemFree beside a running consumer returned before it stopped, in more than a second")
		default:
			t.Logf("cuMemFree beside a running consumer waits for it, as the package documentation says; the consumer went on meanwhile")
		}
	}
	cnt, err = stopWithin(cb, fills+nslots)
	if err != nil || cnt.Slots != fills+nslots || cnt.Errors != 0 {
		fail("the second consumer: %+v, %v", cnt, err)
	}
	recMu.Lock()
	if recErr != nil {
		t.Error(recErr)
	}
	recMu.Unlock()
	if pending {
		select {
		case err := <-freed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("cuMemFree still waits 10 s after the last consumer stopped")
		}
	}
}
