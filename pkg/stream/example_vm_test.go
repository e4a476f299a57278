//go:build vmguest

package stream_test

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// ExampleStart needs CUDA, so it carries no "// Output:" comment: here its
// acquisition runs on the simulated GPU, whose memory the CPU reads, with
// the frames checked there, and what it prints is checked.
func TestExampleStart(t *testing.T) {
	r := setup(t, 64<<10-frame.HeaderSize, 0, 64)
	gpu := simgpu.StreamGPU{GPU: r.GPU, Pattern: simgpu.Fragmented}
	guest.CheckOutput(t, func() {
		if err := acquire(r.Dev, gpu, stream.CheckCPU); err != nil {
			t.Fatal(err)
		}
	}, "direct mode, at least 64 slots: true, gaps 0, duplicates 0, CRC failures 0, ended: <nil>")
}
