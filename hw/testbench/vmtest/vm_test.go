//go:build vmtest

package vmtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/devmodel"
	"github.com/gpufpga/gpufpga/hw/testbench/rtlbridge"
)

func TestRig(t *testing.T) {
	pkgs := rigPackages
	// GPUFPGA_VMTEST_ONLY=pkg,pkg runs just those, to iterate on one.
	if only := os.Getenv("GPUFPGA_VMTEST_ONLY"); only != "" {
		pkgs = nil
		for _, p := range strings.Split(only, ",") {
			pkgs = append(pkgs, "github.com/gpufpga/gpufpga/"+strings.TrimPrefix(p, "./"))
		}
	}
	Run(t, Options{TestTimeout: 300 * time.Second, VMTimeout: 15 * time.Minute}, pkgs...)
}

// rigPackages are the guest test packages of the rig, run in path order.
var rigPackages = []string{
	"github.com/gpufpga/gpufpga/hw/testbench/rigtest",
	"github.com/gpufpga/gpufpga/hw/testbench/kmodtest",
	"github.com/gpufpga/gpufpga/cmd/p2pctl/cli",
	"github.com/gpufpga/gpufpga/pkg/p2p",
	"github.com/gpufpga/gpufpga/pkg/trace",
	"github.com/gpufpga/gpufpga/pkg/stream",
	"github.com/gpufpga/gpufpga/hw/testbench/demo",
	"github.com/gpufpga/gpufpga/hw/testbench/nvcontract",
	"github.com/gpufpga/gpufpga/hw/testbench/abifuzz",
}

// TestBounceBuffers boots a guest whose DMA goes through SWIOTLB bounce
// buffers, where long-lived host pins cannot work.
func TestBounceBuffers(t *testing.T) {
	Run(t, Options{Append: []string{"swiotlb=force"}}, "github.com/gpufpga/gpufpga/hw/testbench/bounce")
}

// TestIOMMU boots a guest whose IOMMU translates the FPGA's DMA (QEMU's
// intel-iommu, strict DMA mode), where a dma-buf's raw BAR addresses must
// be refused.
func TestIOMMU(t *testing.T) {
	Run(t, Options{Rig: devmodel.Config{IOMMU: true}, Append: []string{"intel_iommu=on", "iommu.passthrough=0", "iommu.strict=1"}},
		"github.com/gpufpga/gpufpga/hw/testbench/iommu")
}

// TestRTL boots the rig with the example user design (hw/rtl/example,
// 256 bits), built with Verilator and co-simulated at the IP's user ports
// (hw/testbench/rtlbridge), in place of the Go source: the shipped driver
// streams its frames and the guest reaches its registers through the user
// BAR. The design is synchronised to the guest's instruction-counted
// clock, a 250 MHz user clock: what it drops depends on the guest's
// instructions, not on this host's load.
func TestRTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := filepath.Join("..", "..", "..")
	ex := filepath.Join(root, "hw", "rtl", "example")
	bin, err := rtlbridge.Build(ctx, rtlbridge.Design{
		Top: "gpufpga_example", Files: []string{filepath.Join(ex, "gpufpga_example.sv")}, IncDirs: []string{ex},
		Params: map[string]string{"DATA_WIDTH": "256", "PAYLOAD_BYTES": "1000"},
	}, rtlbridge.Dir(root))
	if err != nil {
		t.Fatal(err)
	}
	// Quanta of 4096 cycles, 16 µs of the guest's time: a tick from
	// QEMU costs more than the design's cycles in shorter ones.
	b, err := rtlbridge.Start(ctx, rtlbridge.Options{Binary: bin, Width: 256, Mode: rtlbridge.Synchronised,
		Quantum: 4096, C2HDepth: 4096, StallCycles: 1 << 40, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The guest's limits are in its own time, a second of which costs
	// this host tens: 10 s of it fit the VM's limit with the boot.
	Run(t, Options{Synchronised: true, TestTimeout: 10 * time.Second, VMTimeout: 25 * time.Minute, Rig: devmodel.Config{User: &devmodel.UserLogic{
		C2H: b.C2H(), H2C: b.H2C(), Regs: b, Interrupts: b, Reset: b, Clock: b, CycleNS: 4}}},
		"github.com/gpufpga/gpufpga/hw/testbench/rtlguest")
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the design ran %d cycles", b.Cycle())
}

// TestDemo boots the rig for `make demo` alone.
func TestDemo(t *testing.T) {
	Run(t, Options{TestTimeout: 100 * time.Second}, "github.com/gpufpga/gpufpga/hw/testbench/demo")
}

// TestICount boots a guest whose clock counts instructions and measures
// the driver's guest CPU cost per operation (hw/testbench/icount), for
// `make bench-icount`.
func TestICount(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpufpga-cost")
	cc := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-static", "-o", bin, "../icount/cost/gpufpga-cost.c")
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	Run(t, Options{ICount: true, TestTimeout: 15 * time.Minute, VMTimeout: 20 * time.Minute,
		Files: []string{bin + ":usr/bin/gpufpga-cost"}},
		"github.com/gpufpga/gpufpga/hw/testbench/icount")
}
