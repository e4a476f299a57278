//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/resident"
)

// The records' sizes are gpufpga_resident.h's, as package resident has them.
func TestResidentLayout(t *testing.T) {
	if resultSize != resident.ResultSize || consumerSize != resident.ConsumerSize {
		t.Fatalf("result %d and consumer %d bytes, want %d and %d", resultSize, consumerSize, resident.ResultSize, resident.ConsumerSize)
	}
}

// fakeConsumer consumes what its test says.
type fakeConsumer struct {
	consumed atomic.Uint64
	done     chan struct{}
	once     sync.Once
}

func newFakeConsumer() *fakeConsumer { return &fakeConsumer{done: make(chan struct{})} }

func (f *fakeConsumer) Stats() ConsumerStats  { return ConsumerStats{Consumed: f.consumed.Load()} }
func (f *fakeConsumer) Done() <-chan struct{} { return f.done }
func (f *fakeConsumer) Stop() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

// The end of a resident session waits for a consumer that makes progress,
// however slowly, and not for one that stalls or has ended.
func TestResidentDrain(t *testing.T) {
	// Slow: each fill well within the timeout, all of them well beyond it.
	s := &Session{cfg: Config{DrainTimeout: time.Second}}
	c := newFakeConsumer()
	go func() {
		for range 15 {
			time.Sleep(50 * time.Millisecond)
			c.consumed.Add(1)
		}
	}()
	if err := s.drain(c, 15); err != nil || c.consumed.Load() != 15 {
		t.Fatalf("a slow consumer: %v after %d fills", err, c.consumed.Load())
	}

	s = &Session{cfg: Config{DrainTimeout: 100 * time.Millisecond}}
	c = newFakeConsumer()
	c.consumed.Store(5)
	t0 := time.Now()
	err := s.drain(c, 8)
	if !errors.Is(err, ErrUnconsumed) || time.Since(t0) > 10*time.Second {
		t.Fatalf("a stalled consumer: %v after %v", err, time.Since(t0))
	}

	c = newFakeConsumer()
	c.Stop()
	if err := s.drain(c, 8); !errors.Is(err, ErrUnconsumed) {
		t.Fatalf("a consumer that ended: %v", err)
	}
	if err := s.drain(c, 0); err != nil {
		t.Fatalf("nothing to consume: %v", err)
	}
}

// A resident session's end keeps every error it met, not the first.
func TestResidentEndErrJoinsAll(t *testing.T) {
	errStream, errCons := errors.New("stream failed"), errors.New("kernel trapped")
	drain := fmt.Errorf("%w: 3 of 8 fills consumed", ErrUnconsumed)
	err := residentEndErr(errStream, errCons, drain, context.Canceled)
	for _, want := range []error{errStream, errCons, ErrUnconsumed, context.Canceled} {
		if !errors.Is(err, want) {
			t.Errorf("%v: does not match %v", err, want)
		}
	}
	const msg = "stream failed\nstream: resident consumer: kernel trapped\nstream: the resident consumer left fills unconsumed: 3 of 8 fills consumed\ncontext canceled"
	if err.Error() != msg {
		t.Errorf("%q, want %q", err, msg)
	}
	if err := residentEndErr(nil, nil, nil, nil); err != nil {
		t.Errorf("a clean end: %v", err)
	}
}

// Latencies fall in the bucket whose bound is the first at or above them;
// those above every bound in the last.
func TestLatencyHistogram(t *testing.T) {
	if LatencyBound(0) != 10*time.Microsecond || LatencyBound(4) != 250*time.Microsecond || LatencyBound(LatencyBuckets-2) != 500*time.Millisecond {
		t.Fatalf("bounds %v %v %v", LatencyBound(0), LatencyBound(4), LatencyBound(LatencyBuckets-2))
	}
	var h LatencyHistogram
	for _, d := range []time.Duration{0, 10 * time.Microsecond, 10*time.Microsecond + 1, 300 * time.Microsecond, time.Hour} {
		h.observe(d)
	}
	want := [LatencyBuckets]uint64{0: 2, 1: 1, 5: 1, LatencyBuckets - 1: 1}
	if h.Counts != want || h.Sum != 320*time.Microsecond+1+time.Hour {
		t.Fatalf("counts %v sum %v, want %v", h.Counts, h.Sum, want)
	}
}
