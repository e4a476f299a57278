//go:build vmguest

package kmodtest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// TestFunctionReset resets the card under a transfer in flight, then under
// a running stream, by FLR and by D3hot: each ends with ErrReset, its pins
// stay, the count of resets moves, and afterwards transfers and streams
// work with their data, the engine never touching an address the driver
// did not program after the reset.
func TestFunctionReset(t *testing.T) {
	for _, method := range []string{"flr", "pm"} {
		t.Run(method, func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			ctl := control(t)
			// Two frames a second: a 16-page stream transfer stays in flight.
			if err := ctl.ConfigureSource(4064, 2, 64); err != nil {
				t.Fatal(err)
			}
			defer ctl.ConfigureSource(4064, 0, 64)
			before, err := d.Info()
			if err != nil {
				t.Fatal(err)
			}
			a := alloc(t, g, 1<<20, simgpu.Fragmented)
			p := pinGPU(t, d, a.VA, a.Size)
			id, err := d.Submit(p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: time.Minute}, 0)
			if err != nil {
				t.Fatal(err)
			}
			resetFunction(t, method)
			select {
			case c := <-d.Completions():
				if c.ID != id || !errors.Is(c.Err, p2p.ErrReset) {
					t.Fatalf("transfer in flight at the reset: %+v, want ErrReset", c)
				}
			case <-ctx(t).Done():
				t.Fatal("the transfer in flight at the reset never completed")
			}

			// A stream running at the next reset ends with it.
			if err := ctl.ConfigureSource(4064, 200, 64); err != nil {
				t.Fatal(err)
			}
			var slots []p2p.Segment
			for i := range 8 {
				slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) << 16, Len: 4096})
			}
			s, err := d.StartStream(1, slots)
			if err != nil {
				t.Fatalf("stream after the reset: %v", err)
			}
			select {
			case <-s.Slots():
			case <-ctx(t).Done():
				t.Fatal("no slot filled after the reset")
			}
			resetFunction(t, method)
			for range s.Slots() {
			}
			if err := s.Err(); !errors.Is(err, p2p.ErrReset) {
				t.Fatalf("stream at the reset ended with %v, want ErrReset", err)
			}
			if _, err := p.Query(false); err != nil {
				t.Fatalf("the pin did not outlive the reset: %v", err)
			}
			after, err := d.Info()
			if err != nil {
				t.Fatal(err)
			}
			if after.Resets != before.Resets+2 {
				t.Fatalf("resets %d after two, from %d", after.Resets, before.Resets)
			}
			roundTrip(t, d, g)
			noViolations(t)
		})
	}
}
