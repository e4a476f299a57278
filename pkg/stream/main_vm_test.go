//go:build vmguest

package stream_test

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// exampleModules are the modules simulatedGPU loaded for the examples,
// which run after the tests (whose modules go with each test), and
// exampleGPU the simulated GPU it opened; TestMain closes and unloads
// them.
var (
	exampleModules []string
	exampleGPU     *simgpu.GPU
)

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleGPU != nil {
		exampleGPU.Close()
	}
	for _, name := range slices.Backward(exampleModules) {
		if err := guest.UnloadModule(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// simulatedGPU readies the rig for an example (the driver and the
// simulated NVIDIA driver loaded, the FPGA's source sending 64 KiB
// frames) and returns the simulated GPU's memory for streams: what
// cudamem.Open returns on a machine with CUDA.
func simulatedGPU() stream.GPU {
	fail := func(err error) stream.GPU {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
		return nil
	}
	for _, name := range []string{"nvp2p_sim", "gpufpga", "gpufpga_nv"} {
		if err := guest.LoadModule(name); err != nil {
			return fail(err)
		}
		exampleModules = append(exampleModules, name)
	}
	ctl, err := rigctl.OpenControl()
	if err != nil {
		return fail(err)
	}
	if err := ctl.ConfigureSource(64<<10-frame.HeaderSize, 0, 64); err != nil {
		return fail(err)
	}
	if exampleGPU, err = simgpu.Open(); err != nil {
		return fail(err)
	}
	return simgpu.StreamGPU{GPU: exampleGPU, Pattern: simgpu.Fragmented}
}
