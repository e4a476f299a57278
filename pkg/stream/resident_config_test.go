//go:build linux && !vmguest

package stream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// residentLocal is an in-process GPU that claims a resident consumer; no
// test gets as far as starting one.
type residentLocal struct{ simgpu.Local }

func (*residentLocal) StartConsumer(stream.ResidentRing) (stream.ResidentConsumer, error) {
	return nil, errors.New("not started in unit tests")
}

// Resident configurations are checked before anything is opened: those
// that pass fail only for want of a device.
func TestResidentConfig(t *testing.T) {
	fn := func() *stream.ResidentFunc { return &stream.ResidentFunc{Name: "f.ptx", PTX: []byte(".version 6.0")} }
	ok := func() stream.Config {
		return stream.Config{SlotSize: 64 << 10, Slots: 8, GPU: &residentLocal{}, Check: stream.CheckCPU, Resident: true}
	}
	for _, tc := range []struct {
		name string
		edit func(*stream.Config)
		want string
	}{
		{"resident", func(*stream.Config) {}, "need a device"},
		{"direct", func(c *stream.Config) { c.Mode = stream.Direct }, "need a device"},
		{"coalesce", func(c *stream.Config) { c.Coalesce = 8 }, "need a device"},
		// The consumer checks frames itself: no GPUChecking needed.
		{"check on the GPU", func(c *stream.Config) { c.Check, c.FrameSize = stream.CheckGPU, 4096 }, "need a device"},
		{"compat", func(c *stream.Config) { c.Mode = stream.Compat },
			"a resident session's ring is in GPU memory, where its consumer runs: not compat mode"},
		{"no consumer", func(c *stream.Config) { c.GPU = &simgpu.Local{} }, "this GPU cannot run a resident consumer"},
		{"coalesce over", func(c *stream.Config) { c.Coalesce = 9 }, "coalescing 9 fills of 8 slots: want 0 (the driver picks) to 8"},
		{"coalesce negative", func(c *stream.Config) { c.Coalesce = -1 }, "coalescing -1 fills of 8 slots"},
		{"coalesce not resident", func(c *stream.Config) { c.Resident, c.Coalesce = false, 4 }, "coalescing is for resident sessions"},
		{"drain timeout", func(c *stream.Config) { c.DrainTimeout = -1 }, "drain timeout -1ns"},
		{"function", func(c *stream.Config) { c.Check, c.ResidentFunc = stream.CheckNone, fn() }, "need a device"},
		{"function with records", func(c *stream.Config) {
			c.Check, c.ResidentFunc = stream.CheckNone, fn()
			c.ResidentFunc.OutSize, c.ResidentFunc.OutDepth, c.ResidentFunc.OnRecord = 64, 4, func(uint64, []byte) {}
		}, "need a device"},
		{"function and a check", func(c *stream.Config) { c.ResidentFunc = fn() },
			"a resident function is the consumer's check: check none, not cpu"},
		{"function not resident", func(c *stream.Config) { c.Resident, c.Check, c.ResidentFunc = false, stream.CheckNone, fn() },
			"a resident function is for resident sessions"},
		{"function without PTX", func(c *stream.Config) {
			c.Check, c.ResidentFunc = stream.CheckNone, fn()
			c.ResidentFunc.PTX = nil
		}, `resident function "f.ptx" has no PTX`},
		{"records without OnRecord", func(c *stream.Config) {
			c.Check, c.ResidentFunc = stream.CheckNone, fn()
			c.ResidentFunc.OutSize, c.ResidentFunc.OutDepth = 64, 4
		}, `resident function "f.ptx": 4 records of 64 bytes: none, or a depth, a multiple of 8 and OnRecord`},
		{"records of odd size", func(c *stream.Config) {
			c.Check, c.ResidentFunc = stream.CheckNone, fn()
			c.ResidentFunc.OutSize, c.ResidentFunc.OutDepth, c.ResidentFunc.OnRecord = 12, 4, func(uint64, []byte) {}
		}, `resident function "f.ptx": 4 records of 12 bytes`},
	} {
		cfg := ok()
		tc.edit(&cfg)
		_, err := stream.Start(context.Background(), cfg)
		if !errors.Is(err, stream.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrConfig saying %q", tc.name, err, tc.want)
		}
	}
	// An attached source fills a host ring, which nothing on a GPU consumes.
	cfg := ok()
	if _, err := stream.Attach(context.Background(), cfg, make([]byte, 8*64<<10), nil); !errors.Is(err, stream.ErrConfig) {
		t.Errorf("attached resident session: %v, want ErrConfig", err)
	}
}
