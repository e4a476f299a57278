//go:build vmguest

package kmodtest

import (
	"errors"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestZYLinkDown takes the FPGA off the bus: transfers fail with
// ErrDeviceGone and the driver stops the device. It runs next to last.
func TestZYLinkDown(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	if err := ctl.SetLinkDown(true); err != nil {
		t.Fatal(err)
	}
	defer ctl.SetLinkDown(false)
	_, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: []p2p.Segment{p.Whole()}})
	if !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("transfer with the link down: %v, want ErrDeviceGone", err)
	}
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Channel: 0, Segments: []p2p.Segment{p.Whole()}}); !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("the next transfer: %v, want ErrDeviceGone", err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

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

// TestZZZPageTableV1 runs the driver against a GPU that hands out page
// tables of major version 1, as NVIDIA drivers before 580.65.06 do.
func TestZZZPageTableV1(t *testing.T) {
	guest.Require(t)
	for _, m := range [][]string{{"nvp2p_sim", "pt_major=1"}, {"gpufpga"}, {"gpufpga_nv"}} {
		if err := guest.LoadModule(m[0], m[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, m := range []string{"gpufpga_nv", "gpufpga", "nvp2p_sim"} {
			if err := guest.UnloadModule(m); err != nil {
				t.Error(err)
			}
		}
		guest.CheckDmesg(t)
	}()
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := g.Alloc(1<<20, simgpu.RandomRuns, 5)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatalf("pin with a v1 page table: %v", err)
	}
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Segments: []p2p.Segment{p.Whole()}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}
