//go:build vmguest

package p2p_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// modules are what the examples run on in the rig's guest: the driver and
// the simulated NVIDIA driver, loaded in this order and unloaded in the
// reverse one.
var modules = []string{"nvp2p_sim", "gpufpga", "gpufpga_nv"}

// TestMain readies the rig for the examples: the modules loaded and the
// FPGA's source sending one 64 KiB frame per packet.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		for i, name := range modules {
			if err := guest.LoadModule(name); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer func(name string) {
				if err := guest.UnloadModule(name); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}(modules[i])
		}
		ctl, err := rigctl.OpenControl()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := ctl.ConfigureSource(64<<10-frame.HeaderSize, 0, 64); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}
