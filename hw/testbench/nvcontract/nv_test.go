//go:build vmguest

package nvcontract

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

const devPath = "/dev/gpufpga0"

// rig loads the simulated GPU in the given variant, gpufpga and its bridge,
// and opens the device and the simulated GPU.
func rig(t *testing.T, variant string) (*p2p.Device, *simgpu.GPU) {
	t.Helper()
	guest.Require(t)
	if variant != guest.NVIDIAOpen && guest.DebugKernel() {
		// Built only on 6.1 and 6.12, where this test runs: it could not
		// use lockdep's GPL-only entry points, and loading it would turn
		// lockdep off for the rest of the debug run.
		t.Skipf("no %s simulated driver on the debug kernel", variant)
	}
	if err := guest.LoadVariant("nvp2p_sim", variant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := guest.UnloadModule("nvp2p_sim"); err != nil {
			t.Error(err)
		}
	})
	guest.MustLoad(t, "gpufpga", "timeout_ms=2000", "card_mem_size=67108864")
	guest.MustLoad(t, "gpufpga_nv")
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return d, g
}

func alloc(t *testing.T, g *simgpu.GPU, size uint64) *simgpu.Alloc {
	t.Helper()
	a, err := g.Alloc(size, simgpu.Fragmented, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func counters(t *testing.T, g *simgpu.GPU) simgpu.Counters {
	t.Helper()
	c, err := g.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBridgeNextToProprietaryDriver loads the bridge next to a provider
// licensed as NVIDIA's proprietary driver is: the kernel refuses a module
// that imports from a proprietary one and uses any GPL-only symbol.
func TestBridgeNextToProprietaryDriver(t *testing.T) {
	d, g := rig(t, guest.NVIDIAProprietary)
	taint, err := os.ReadFile("/sys/module/nvp2p_sim/taint")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(taint), "P") {
		t.Fatalf("simulated GPU taint %q: not loaded as a proprietary module", taint)
	}
	a := alloc(t, g, 1<<20)
	for _, persistent := range []bool{false, true} {
		p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{Persistent: persistent})
		if err != nil {
			t.Fatalf("pin (persistent %v) next to a proprietary driver: %v", persistent, err)
		}
		if _, err := d.Transfer(context.Background(), p2p.Transfer{Dir: p2p.H2C, Segments: []p2p.Segment{p.Whole()}}); err != nil {
			t.Fatal(err)
		}
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	}
	// Like NVIDIA's proprietary driver, it exports no dma-bufs.
	if _, err := a.ExportDmabuf(a.VA, a.Size); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("dma-buf export from the proprietary driver: %v, want EOPNOTSUPP", err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
}

// TestPersistentFallsBackOnOldDrivers: where NVIDIA's driver predates the
// persistent API, a persistent pin becomes a callback pin, which a free
// revokes.
func TestPersistentFallsBackOnOldDrivers(t *testing.T) {
	d, g := rig(t, guest.NVIDIAOld)
	a := alloc(t, g, 1<<20)
	p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{Persistent: true})
	if err != nil {
		t.Fatalf("persistent pin without the persistent API: %v", err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	st, err := p.Query(false)
	if err != nil || !st.Revoked {
		t.Fatalf("pin after free: %+v, %v; want revoked", st, err)
	}
	if c := counters(t, g); c.CallbacksFired != 1 || c.LivePins != 0 {
		t.Fatalf("counters %+v", c)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestCallbackBeforeGetPagesReturns frees the memory between NVIDIA
// registering the callback and get_pages returning, in a loop: every pin
// fails as revoked, touches nothing NVIDIA freed, and leaves nothing.
func TestCallbackBeforeGetPagesReturns(t *testing.T) {
	for _, variant := range []string{guest.NVIDIAProprietary, guest.NVIDIAOpen} {
		t.Run(variant, func(t *testing.T) {
			d, g := rig(t, variant)
			const rounds = 50
			guest.SetParam(t, "nvp2p_sim", "free_in_get_pages", strconv.Itoa(rounds))
			for i := range rounds {
				a := alloc(t, g, uint64(1+i%4)<<16)
				p, err := d.PinGPU(a.VA+uint64(i), a.Size-uint64(i), p2p.PinOptions{})
				if !errors.Is(err, p2p.ErrRevoked) {
					t.Fatalf("round %d: pin of memory freed inside get_pages: %v (%v), want ErrRevoked", i, p, err)
				}
				// The allocation is gone with the free.
				if err := a.Free(); err == nil {
					t.Fatalf("round %d: allocation still live after the free inside get_pages", i)
				}
			}
			if c := counters(t, g); c.CallbacksFired != rounds || c.LivePins != 0 || c.LiveAllocs != 0 {
				t.Fatalf("counters %+v, want %d callbacks and nothing live", c, rounds)
			}
			info, err := d.Info()
			if err != nil || info.PinnedTotal != 0 {
				t.Fatalf("driver info %+v, %v: want nothing pinned", info, err)
			}
			guest.CheckDmesg(t)
		})
	}
}

// TestFreesUnderTransfersAndStreams frees GPU memory while transfers run
// on it and while a stream fills it, round after round: everything ends
// with ErrRevoked, nothing is written after the callback returns, and
// nothing is left.
func TestFreesUnderTransfersAndStreams(t *testing.T) {
	d, g := rig(t, guest.NVIDIAVariant())
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	// A slow source keeps stream slots and C2H transfers in flight.
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 300, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64)
	for round := range 10 {
		xa := alloc(t, g, 2<<20)
		xp, err := d.PinGPU(xa.VA, xa.Size, p2p.PinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sa := alloc(t, g, 8*4096+1<<16)
		sp, err := d.PinGPU(sa.VA, sa.Size, p2p.PinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slots := make([]p2p.Segment, 8)
		for i := range slots {
			slots[i] = p2p.Segment{Pin: sp, Offset: uint64(i) * 4096, Len: 4096}
		}
		s, err := d.StartStream(1, slots)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		for _, dir := range []p2p.Direction{p2p.H2C, p2p.C2H} {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var err error
				for err == nil {
					_, err = d.Transfer(ctx, p2p.Transfer{Dir: dir, Segments: []p2p.Segment{xp.Whole()}})
				}
				done <- err
			}()
		}
		<-s.Slots()
		if err := xa.Free(); err != nil {
			t.Fatal(err)
		}
		if err := sa.Free(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-done; !errors.Is(err, p2p.ErrRevoked) {
				t.Fatalf("round %d: transfers over freed memory ended with %v, want ErrRevoked", round, err)
			}
		}
		for range s.Slots() {
		}
		if !errors.Is(s.Err(), p2p.ErrRevoked) {
			t.Fatalf("round %d: stream over freed memory ended with %v, want ErrRevoked", round, s.Err())
		}
		if late, err := ctl.LateWrites(); err != nil || late != 0 {
			t.Fatalf("round %d: %d DMA writes landed in freed VRAM (%v)", round, late, err)
		}
		for _, p := range []*p2p.Pin{xp, sp} {
			if err := p.Unpin(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c := counters(t, g); c.LivePins != 0 || c.LiveAllocs != 0 {
		t.Fatalf("counters %+v: something left", c)
	}
	guest.CheckDmesg(t)
}

// TestCallbackAgainstEngineThatWillNotHalt frees GPU memory under a transfer
// on an engine that ignores every way of stopping it. The callback may not
// return while the engine could still write: it must cut the device off
// the bus, mark it dead, and return.
func TestCallbackAgainstEngineThatWillNotHalt(t *testing.T) {
	d, g := rig(t, guest.NVIDIAVariant())
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	a := alloc(t, g, 1<<20)
	p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := wedgedTransfer(t, d, ctl, p)
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("transfer over memory freed on a wedged engine: %v, want ErrRevoked", err)
	}
	if on, err := busMaster(pciAddr(t)); err != nil || on {
		t.Fatalf("bus mastering %v (%v) after the engine would not halt", on, err)
	}
	if _, err := d.Transfer(context.Background(), p2p.Transfer{Dir: p2p.H2C, Segments: []p2p.Segment{p.Whole()}}); !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("transfer on the dead device: %v, want ErrDeviceGone", err)
	}
	log, err := guest.Dmesg()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "C2H channel 0 does not halt: bus mastering off, device dead") {
		t.Fatalf("kernel log does not say the device was cut off:\n%s", log)
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes landed in freed VRAM (%v)", late, err)
	}
	// A dead device answers nothing; closing the file lets its pins go.
	if err := p.Unpin(); !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("unpin on the dead device: %v, want ErrDeviceGone", err)
	}
	d.Close()
	if c := counters(t, g); c.LivePins != 0 {
		t.Fatalf("counters %+v: pins left after close", c)
	}
}

// busMaster reads the bus-master enable bit of the PCI command register of
// device bdf.
func busMaster(bdf string) (bool, error) {
	cfg, err := os.ReadFile("/sys/bus/pci/devices/" + bdf + "/config")
	if err != nil {
		return false, err
	}
	if len(cfg) < 6 {
		return false, fmt.Errorf("config space of %d bytes", len(cfg))
	}
	return cfg[4]&0x4 != 0, nil
}

// pciAddr is the PCI address of /dev/gpufpga0.
func pciAddr(t *testing.T) string {
	t.Helper()
	dev, err := os.Readlink("/sys/class/misc/gpufpga0/device")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(dev)
}

// TestProbeLeavesARunningEngineOffTheBus unbinds the driver from an engine
// that will not stop, as a crashed kernel or driver can leave one, and
// binds it again: probe must not enable bus mastering under a running
// engine. Once the engine is reset, the device binds as usual.
func TestProbeLeavesARunningEngineOffTheBus(t *testing.T) {
	d, g := rig(t, guest.NVIDIAVariant())
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	bdf := pciAddr(t)
	a := alloc(t, g, 1<<20)
	p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Whatever fails, later tests get a bound device; registered first,
	// this runs after wedgedTransfer's reset of the engine.
	t.Cleanup(func() {
		if _, err := os.Stat("/sys/class/misc/gpufpga0"); err != nil {
			if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0); err != nil {
				t.Errorf("rebind %s: %v", bdf, err)
			}
		}
	})
	done := wedgedTransfer(t, d, ctl, p)
	bind := func(op string) {
		t.Helper()
		if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/"+op, []byte(bdf), 0); err != nil {
			t.Fatalf("%s %s: %v", op, bdf, err)
		}
	}
	bind("unbind")
	if err := <-done; !errors.Is(err, p2p.ErrDeviceGone) {
		t.Fatalf("transfer across unbind: %v, want ErrDeviceGone", err)
	}
	d.Close()
	// The engine is still running: probe stops short of bus mastering.
	err = os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0)
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("bind over a running engine: %v, want EIO", err)
	}
	if on, err := busMaster(bdf); err != nil || on {
		t.Fatalf("bus mastering on %v (%v) after a probe over a running engine", on, err)
	}
	log, err := guest.Dmesg()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "engines do not stop (-5): not enabling bus mastering") {
		t.Fatalf("kernel log does not say why the probe failed:\n%s", log)
	}
	if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultNone); err != nil {
		t.Fatal(err)
	}
	bind("bind")
	if on, err := busMaster(bdf); err != nil || !on {
		t.Fatalf("bus mastering %v (%v) after a probe over a reset engine", on, err)
	}
	d2, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes landed in freed VRAM (%v)", late, err)
	}
}

// wedgedTransfer wedges C2H channel 0 (reset again when the test ends,
// before the modules unload) and returns once a transfer into p runs on
// it; the transfer's result arrives on the channel.
func wedgedTransfer(t *testing.T, d *p2p.Device, ctl *rigctl.Control, p *p2p.Pin) <-chan error {
	t.Helper()
	if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultWedged); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultNone); err != nil {
			t.Error(err)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := d.Transfer(context.Background(), p2p.Transfer{Dir: p2p.C2H, Segments: []p2p.Segment{p.Whole()}, Timeout: time.Minute})
		done <- err
	}()
	waitInflight(t, p)
	// In flight is not yet running: on a slow guest the chain may still
	// wait to be built, and a revoke then ends it unstarted, no halt
	// needed. What follows needs the engine stuck on it.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		stalled, err := ctl.Stalled(xdma.C2H, 0)
		if err != nil {
			t.Fatal(err)
		}
		if stalled {
			return done
		}
		select {
		case err := <-done:
			t.Fatalf("transfer ended before the engine was stuck on it: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the engine never fetched the transfer")
	return nil
}

func waitInflight(t *testing.T, p *p2p.Pin) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := p.Query(false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Inflight > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the transfer never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
