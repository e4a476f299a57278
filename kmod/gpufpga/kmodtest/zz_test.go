//go:build vmguest

package kmodtest

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
)

// TestZZUnload runs last: with every file closed the modules unload, the
// simulated GPU reports nothing live, and the kernel log is clean.
func TestZZUnload(t *testing.T) {
	setup(t)
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Counters()
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c.LivePins != 0 || c.LiveAllocs != 0 || c.LiveDmabufs != 0 {
		t.Errorf("live objects at the end: %+v", c)
	}
	for _, m := range []string{"gpufpga_nv", "gpufpga"} {
		if err := guest.UnloadModule(m); err != nil {
			t.Error(err)
		}
	}
	if err := guest.UnloadModule("nvp2p_sim"); err != nil {
		t.Error(err)
	}
	guest.CheckDmesg(t)
}
