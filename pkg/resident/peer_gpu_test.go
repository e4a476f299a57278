//go:build linux && gpu

package resident

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// peers returns GPU 0 (current) and GPU 1, each with access to the
// other's memory, and the peer kernels loaded on both; a machine without
// two GPUs that are peers has nothing here to test.
func peers(t *testing.T) (g0, g1 *cuda.Device, pk *PeerKernels) {
	t.Helper()
	g0 = device(t)
	n, err := g0.Driver().DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Skipf("%d GPU: a peer producer needs two", n)
	}
	if g1, err = g0.Driver().Device(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g1.Close() })
	a, err := g1.CanAccessPeer(g0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g0.CanAccessPeer(g1)
	if err != nil {
		t.Fatal(err)
	}
	if !a || !b {
		t.Skipf("GPU 1 to GPU 0 %v, GPU 0 to GPU 1 %v: not peers", a, b)
	}
	if err := g1.EnablePeerAccess(g0); err != nil {
		t.Fatal(err)
	}
	if err := g0.EnablePeerAccess(g1); err != nil {
		t.Fatal(err)
	}
	if pk, err = LoadPeer(g1, g0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pk.Close() })
	return g0, g1, pk
}

func peerRing(t *testing.T, g0 *cuda.Device, nslots, size int) *GPURing {
	t.Helper()
	r, err := NewPeerRing(g0, g0, nslots, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Free() })
	return r
}

// The peer producer alone writes each slot's fill as Verify expects it,
// and its result as the consumer reads it.
func TestPeerProducerWritesPattern(t *testing.T) {
	g0, _, pk := peers(t)
	r := peerRing(t, g0, 8, 4096)
	out, err := pk.Produce(context.Background(), r, PeerRun{Fills: 8, Alone: true})
	if err != nil || out.Fills != 8 {
		t.Fatalf("%+v %v", out, err)
	}
	b := make([]byte, r.NSlots*r.SlotSize)
	if err := g0.CopyDtoH(b, r.SlotsDev); err != nil {
		t.Fatal(err)
	}
	for i := range r.NSlots {
		if err := Verify(b[i*r.SlotSize:(i+1)*r.SlotSize], uint64(i), r.NSrc); err != nil {
			t.Errorf("slot %d: %v", i, err)
		}
	}
	st, err := r.Statuses()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range st {
		if s != ResultReady {
			t.Errorf("slot %d's status %#x, want %#x", i, s, ResultReady)
		}
	}
}

// The production consumer on GPU 0 takes every fill GPU 1 writes, in
// order, with no error, at full rate, paced, and one at a time.
func TestPeerProducerConsumed(t *testing.T) {
	g0, _, pk := peers(t)
	k := kernels(t, g0)
	r := peerRing(t, g0, 16, 4096)
	for _, run := range []PeerRun{{Fills: 20000}, {Fills: 2000, Rate: 1e6}, {Fills: 200, Depth1: true}} {
		if err := r.Reset(); err != nil {
			t.Fatal(err)
		}
		c, err := k.StartResident(g0, r, Resident{Workers: 4})
		if err != nil {
			t.Fatal(err)
		}
		out, perr := pk.Produce(context.Background(), r, run)
		cnt, cerr := c.Stop()
		if err := errors.Join(perr, cerr); err != nil {
			t.Fatalf("%+v: %v", run, err)
		}
		consumed, err := r.ConsumedIndex()
		if err != nil {
			t.Fatal(err)
		}
		if out.Fills != run.Fills || cnt.Slots != run.Fills || consumed != run.Fills || cnt.Errors != 0 {
			t.Errorf("%+v: %d fills, %d consumed, index %d, %d errors (first %d)", run, out.Fills, cnt.Slots, consumed, cnt.Errors, cnt.FirstError)
		}
		// Paced: fill n - 1 began no sooner than (n - 1) periods in.
		if run.Rate > 0 && out.Elapsed < time.Duration(float64(run.Fills-1)/run.Rate*float64(time.Second)) {
			t.Errorf("%d fills at %g/s in %v", run.Fills, run.Rate, out.Elapsed)
		}
		if run.Depth1 && (len(out.RoundTrips) != int(run.Fills) || len(out.RoundTripsClock) != int(run.Fills)) {
			t.Errorf("%d round trips, %d by the clock, for %d fills", len(out.RoundTrips), len(out.RoundTripsClock), run.Fills)
		}
		for i, d := range out.RoundTripsClock {
			if d <= 0 {
				t.Errorf("round trip %d: %v", i, d)
			}
		}
		t.Logf("%+v: %d fills in %v; round trips %v", run, out.Fills, out.Elapsed, Summarize(out.RoundTripsClock))
	}
}

// The peer producer feeds the consumer a user's function is linked into
// (the header's kernel, with the pattern check as the function): every
// fill checked, none lost, none bad, at full rate, paced, and one at a
// time, where each fill is at the head while its worker waits for it and
// the worker publishes it itself (most of them: the count it reads may
// lag by a fill). The consumer index never goes backwards, as the
// producer (ErrCountBackwards) and the host see it: a worker's
// publishing racing the publisher's would show.
func TestPeerProducerLinkedConsumer(t *testing.T) {
	g0, _, pk := peers(t)
	f, err := LinkFunc(g0, "pattern_func.ptx", PatternFuncPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r := peerRing(t, g0, 16, 4096)
	for _, workers := range []int{4, 15} {
		for _, run := range []PeerRun{{Fills: 50000}, {Fills: 2000, Rate: 1e6}, {Fills: 200, Depth1: true}} {
			if err := r.Reset(); err != nil {
				t.Fatal(err)
			}
			var (
				mu      sync.Mutex
				last    uint64
				readErr error
			)
			published := func() uint64 {
				n, err := r.ConsumedIndex()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && readErr == nil:
					readErr = err
				case err == nil && n < last && readErr == nil:
					readErr = fmt.Errorf("the host read the consumer index at %d after %d", n, last)
				}
				last = max(last, n)
				return n
			}
			c, err := startWithin(f, g0, StreamRing{Slots: r.SlotsDev, SlotSize: r.SlotSize, NSlots: r.NSlots,
				Results: r.ResultsDev, Consumer: r.ConsumerDev, Published: published},
				FuncConfig{Workers: workers, State: PatternState(r.NSrc, r.SlotSize)})
			if err != nil {
				t.Fatal(err)
			}
			out, perr := pk.Produce(context.Background(), r, run)
			cnt, cerr := stopWithin(c, run.Fills)
			mu.Lock()
			err = errors.Join(perr, cerr, readErr)
			mu.Unlock()
			if err != nil {
				t.Fatalf("%d workers, %+v: %v", workers, run, err)
			}
			consumed, err := r.ConsumedIndex()
			if err != nil {
				t.Fatal(err)
			}
			if out.Fills != run.Fills || cnt.Slots != run.Fills || cnt.Published != run.Fills || consumed != run.Fills || cnt.Errors != 0 {
				t.Errorf("%d workers, %+v: %d fills, %d consumed, %d published, index %d, %d errors (first %d)",
					workers, run, out.Fills, cnt.Slots, cnt.Published, consumed, cnt.Errors, cnt.FirstError)
			}
			if run.Depth1 && cnt.HeadPublished <= run.Fills/2 {
				t.Errorf("%d workers, one fill at a time: %d of %d fills published by their worker", workers, cnt.HeadPublished, run.Fills)
			}
			t.Logf("%d workers, %+v: %d fills in %v, %d published by their worker; round trips %v", workers, run, out.Fills, out.Elapsed,
				cnt.HeadPublished, Summarize(out.RoundTripsClock))
		}
	}
}

// With no consumer, the producer runs out of credits, says so and where,
// and ends by itself.
func TestPeerProducerNoCredits(t *testing.T) {
	g0, _, pk := peers(t)
	r := peerRing(t, g0, 16, 4096)
	_, err := pk.Produce(context.Background(), r, PeerRun{Fills: 100, Timeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "waited for credits") || !strings.Contains(err.Error(), "the consumer index stood at 0") {
		t.Fatalf("no consumer: %v", err)
	}
}

func TestPeerPingPong(t *testing.T) {
	_, _, pk := peers(t)
	ns, clock, err := pk.PingPong(context.Background(), 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1000 || len(clock) != 1000 {
		t.Fatalf("%d and %d round trips", len(ns), len(clock))
	}
	for i, d := range clock {
		if d <= 0 {
			t.Errorf("round trip %d: %v", i, d)
		}
	}
	t.Logf("globaltimer %v; clock %v", Summarize(ns), Summarize(clock))
}
