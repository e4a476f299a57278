//go:build vmguest

package kmodtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// resetFunction resets the FPGA's function through sysfs with the PCI
// core's method (flr: the PCIe capability's function-level reset; pm: D3hot
// and back to D0, which resets an XDMA function, No_Soft_Reset clear). The
// driver's reset_prepare and reset_done run around it.
func resetFunction(t *testing.T, method string) {
	t.Helper()
	dir := filepath.Join("/sys/bus/pci/devices", fpgaBDF(t))
	if err := os.WriteFile(filepath.Join(dir, "reset_method"), []byte(method), 0); err != nil {
		t.Fatalf("reset method %s: %v", method, err)
	}
	defer os.WriteFile(filepath.Join(dir, "reset_method"), []byte("default"), 0)
	if err := os.WriteFile(filepath.Join(dir, "reset"), []byte("1"), 0); err != nil {
		t.Fatalf("%s reset: %v", method, err)
	}
}

// noViolations fails the test if the card model saw the engine fetch a
// descriptor or write back at an address the driver had not programmed
// since the last reset (or break its alignments).
func noViolations(t *testing.T) {
	t.Helper()
	v, err := control(t).Violations()
	if err != nil {
		t.Fatal(err)
	}
	if v != 0 {
		t.Fatalf("the engine saw %d violations: DMA at an address not programmed since the reset", v)
	}
}

// roundTrip moves 1 MiB to the card and back and compares it.
func roundTrip(t *testing.T, d *p2p.Device, g *simgpu.GPU) {
	t.Helper()
	src := alloc(t, g, 1<<20, simgpu.Fragmented)
	dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
	srcMem, _ := src.Bytes()
	dstMem, _ := dst.Bytes()
	fill(srcMem, 23)
	ps := pinGPU(t, d, src.VA, src.Size)
	pd := pinGPU(t, d, dst.VA, dst.Size)
	c := ctx(t)
	if _, err := d.Transfer(c, p2p.Transfer{Dir: p2p.H2C, Segments: []p2p.Segment{ps.Whole()}}); err != nil {
		t.Fatalf("H2C after the reset: %v", err)
	}
	// Polled, so that the writeback address is used too.
	if _, err := d.Transfer(c, p2p.Transfer{Dir: p2p.C2H, Segments: []p2p.Segment{pd.Whole()}, Poll: true}); err != nil {
		t.Fatalf("C2H after the reset: %v", err)
	}
	if !bytes.Equal(dstMem, srcMem) {
		t.Fatal("the round trip after the reset changed the data")
	}
}

// TestFunctionReset resets the card by FLR and by D3hot, first idle, then
// while every channel has work: what ran ends with ErrReset or completes
// with its data, its pins stay, the count of resets moves, and afterwards
// transfers and streams work, the engine never touching an address the
// driver did not program after the reset.
func TestFunctionReset(t *testing.T) {
	for _, method := range []string{"flr", "pm"} {
		t.Run(method, func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			before, err := d.Info()
			if err != nil {
				t.Fatal(err)
			}
			resetFunction(t, method)
			waitReady(t, d, func(i p2p.Info) bool { return i.Resets == before.Resets+1 })
			afterEvent(t, d, g)

			tr := startTraffic(t, d, g)
			resetFunction(t, method)
			t.Logf("%d of %d transfers ended by the reset", tr.finish(t, true), len(tr.xfers))
			after := waitReady(t, d, func(i p2p.Info) bool { return i.Resets >= before.Resets+2 })
			tr.checkWrites(t)
			if after.Resets != before.Resets+2 || after.Errors != before.Errors {
				t.Fatalf("%d resets and %d errors after two resets, from %d and %d",
					after.Resets, after.Errors, before.Resets, before.Errors)
			}
			afterEvent(t, d, g)
		})
	}
}
