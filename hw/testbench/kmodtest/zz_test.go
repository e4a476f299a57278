//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestZXUnbind removes the device under an open file with a transfer in
// flight, as a hot unplug would: the transfer ends with ErrDeviceGone, the
// file's calls fail the same way, its pins are released at once, and the
// device comes back on rebind.
func TestZXUnbind(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	// Two frames a second: the transfer below (a frame per 64 KiB page,
	// 16 pages) is still in flight at the unbind however slow the guest.
	if err := ctl.ConfigureSource(4064, 2, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4064, 0, 64)
	bdf := fpgaBDF(t)
	t.Cleanup(func() { // the tests after need the device, even if this one failed
		if _, err := os.Stat(devPath); err != nil {
			os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0)
		}
	})
	// A reader blocked on a file of its own learns that the device left.
	raw, err := unix.Open(devPath, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	rawOpen := true
	closeRaw := func() {
		if rawOpen {
			unix.Close(raw)
			rawOpen = false
		}
	}
	defer closeRaw()
	readErr := make(chan error, 1)
	go func() {
		_, err := unix.Read(raw, make([]byte, sizeCompletion))
		readErr <- err
	}()
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	id, err := d.Submit(p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: time.Minute}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/unbind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	c := <-d.Completions()
	if c.ID != id || !errors.Is(c.Err, p2p.ErrDeviceGone) {
		t.Fatalf("in-flight transfer at unbind: %+v", c)
	}
	select {
	case err := <-readErr:
		if err != unix.ENODEV {
			t.Fatalf("blocked read at unbind: %v, want ENODEV", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read blocked on a removed device did not return")
	}
	fds := []unix.PollFd{{Fd: int32(raw), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n != 1 || fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != unix.POLLERR|unix.POLLHUP {
		t.Fatalf("poll of a removed device: %d %#x %v, want POLLERR|POLLHUP", n, fds[0].Revents, err)
	}
	closeRaw() // the device's name is free again once its last file closes
	if _, err := d.Info(); !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("info after unbind: %v", err)
	}
	// The file is still open, but its mappings of the unbound device are
	// gone: nothing may map memory for a device without a driver.
	if c := counters(t, g); c.LivePins != 0 {
		t.Fatalf("%d pins live after unbind while the file is open", c.LivePins)
	}
	d.Close()
	if c := counters(t, g); c.LivePins != 0 {
		t.Fatalf("%d pins live after closing the orphaned file", c.LivePins)
	}
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(devPath); err != nil {
		t.Fatalf("after rebind: %v", err)
	}
}

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
	guest.CheckKmemleak(t)
}

// TestZZZPageTableV1 runs the driver against a GPU that hands out page
// tables of major version 1, as NVIDIA drivers before 580.65.06 do.
func TestZZZPageTableV1(t *testing.T) {
	guest.Require(t)
	for _, m := range [][]string{{"nvp2p_sim", "pt_major=1"}, {"gpufpga", "card_mem_size=67108864"}, {"gpufpga_nv"}} {
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
