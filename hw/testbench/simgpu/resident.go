//go:build linux

package simgpu

import (
	"context"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/resident"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

var _ stream.ResidentGPU = StreamGPU{}

// StartConsumer implements stream.ResidentGPU with a Consumer on the
// simulated GPU's buffers, which checks every frame (stream.CheckCPU: the
// CPU reads the simulated GPU's memory as a kernel reads its own). A frame
// that fails its check ends the consumer with ErrResult, counted in its
// Frames.CRCFailures. The consumer's word needs no mapping here.
func (m StreamGPU) StartConsumer(r stream.ResidentRing) (stream.ResidentConsumer, error) {
	if r.Check != stream.CheckCPU {
		return nil, fmt.Errorf("%w: the simulated GPU's resident consumer checks every frame as the CPU does (check %v), not %v",
			stream.ErrConfig, stream.CheckCPU, r.Check)
	}
	ring, ok := r.Ring.(stream.CPUVisible)
	results, ok2 := r.Results.(stream.CPUVisible)
	if !ok || !ok2 {
		return nil, fmt.Errorf("%w: a resident consumer on the simulated GPU needs its own buffers", stream.ErrConfig)
	}
	res := results.Bytes()
	if n := r.Slots * resident.ResultSize; r.Slots > 0 && len(res) >= n {
		// A status left from an earlier stream would read as a fill.
		clear(res[:n])
	}
	c, err := NewConsumer(ring.Bytes(), int(r.SlotSize), r.Slots, res, r.Consumer)
	if err != nil {
		return nil, err
	}
	if m.Tune != nil {
		m.Tune(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &residentConsumer{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rc.done)
		rc.err = c.Run(ctx)
	}()
	return rc, nil
}

// residentConsumer is a Consumer running on a goroutine of its own.
type residentConsumer struct {
	c      *Consumer
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done is closed
}

func (r *residentConsumer) Stats() stream.ConsumerStats {
	st := r.c.Stats()
	return stream.ConsumerStats{Consumed: st.Consumed, Bytes: st.Bytes, Frames: st.Frames}
}

func (r *residentConsumer) Done() <-chan struct{} { return r.done }

// Stop cancels Run, which publishes what it consumed before it returns.
func (r *residentConsumer) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}
