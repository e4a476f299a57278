//go:build vmguest

package kmodtest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

const devPath = "/dev/gpufpga0"

var loadOnce sync.Once

// driverParams are gpufpga's parameters for the package's tests.
var driverParams = []string{"timeout_ms=2000", "card_mem_size=67108864"}

// setup loads nvp2p_sim, gpufpga and gpufpga_nv (which hands the simulated
// GPU's P2P API to gpufpga) once for the package; TestZZUnload takes them
// out at the end and checks that nothing leaked.
func setup(t *testing.T) {
	t.Helper()
	guest.Require(t)
	loadOnce.Do(func() {
		if err := guest.LoadModule("nvp2p_sim"); err != nil {
			t.Fatal(err)
		}
		if err := guest.LoadModule("gpufpga", driverParams...); err != nil {
			t.Fatal(err)
		}
		if err := guest.LoadModule("gpufpga_nv"); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(devPath); err != nil {
		t.Fatalf("%s: %v", devPath, err)
	}
}

func openDev(t *testing.T) *p2p.Device {
	t.Helper()
	setup(t)
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func openGPU(t *testing.T) *simgpu.GPU {
	t.Helper()
	setup(t)
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func control(t *testing.T) *rigctl.Control {
	t.Helper()
	c, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func alloc(t *testing.T, g *simgpu.GPU, size uint64, p simgpu.Pattern) *simgpu.Alloc {
	t.Helper()
	a, err := g.Alloc(size, p, 11)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func pinGPU(t *testing.T, d *p2p.Device, va, n uint64) *p2p.Pin {
	t.Helper()
	p, err := d.PinGPU(va, n, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) ^ byte(i>>11) ^ seed
	}
}

func counters(t *testing.T, g *simgpu.GPU) simgpu.Counters {
	t.Helper()
	c, err := g.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitInflight returns once a transfer over p is in flight; it fails the
// test if none is within 10 s (the transfer ended, or never started).
func waitInflight(t *testing.T, p *p2p.Pin) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		st, err := p.Query(false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Inflight == 1 {
			return
		}
	}
	t.Fatal("no transfer in flight over the pin within 10 s")
}
