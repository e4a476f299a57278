// Package guestrig sets up the whole rig for a test inside the guest: the
// simulated GPU, gpufpga and its NVIDIA bridge loaded (and unloaded when
// the test ends), and the device, the simulated GPU and the control port
// open.
package guestrig

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// DevicePath is the rig's FPGA.
const DevicePath = "/dev/gpufpga0"

// Rig is the open rig.
type Rig struct {
	Dev *p2p.Device
	GPU *simgpu.GPU
	Ctl *rigctl.Control
}

// Load loads nvp2p_sim, gpufpga (with params) and gpufpga_nv for the
// test; they unload in reverse order when it ends.
func Load(t testing.TB, params ...string) {
	t.Helper()
	guest.Require(t)
	guest.MustLoad(t, "nvp2p_sim")
	guest.MustLoad(t, "gpufpga", params...)
	guest.MustLoad(t, "gpufpga_nv")
}

// Open loads the modules and opens the device, the simulated GPU and the
// control port, closing them when the test ends.
func Open(t testing.TB, params ...string) *Rig {
	t.Helper()
	Load(t, params...)
	r := &Rig{}
	var err error
	if r.Dev, err = p2p.Open(DevicePath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Dev.Close() })
	if r.GPU, err = simgpu.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.GPU.Close() })
	if r.Ctl, err = rigctl.OpenControl(); err != nil {
		t.Fatal(err)
	}
	return r
}
