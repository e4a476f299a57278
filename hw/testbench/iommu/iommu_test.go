//go:build vmguest

package iommu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

const cardMem = "card_mem_size=67108864"

// requireTranslation fails unless an IOMMU translates for the FPGA.
func requireTranslation(t *testing.T) {
	t.Helper()
	devs, _ := filepath.Glob("/sys/bus/pci/drivers/gpufpga/0000:*")
	if len(devs) != 1 {
		t.Fatalf("FPGA bound to gpufpga: %v", devs)
	}
	typ, err := os.ReadFile(filepath.Join(devs[0], "iommu_group", "type"))
	if err != nil || !strings.HasPrefix(string(typ), "DMA") {
		t.Fatalf("needs a guest whose IOMMU translates for the FPGA (vmtest's TestIOMMU): IOMMU group type %q, %v", typ, err)
	}
}

// gpuAlloc allocates 1 MiB of simulated GPU memory, freed when the test
// ends, and returns it with its CPU mapping.
func gpuAlloc(t *testing.T, r *guestrig.Rig, pattern simgpu.Pattern) (*simgpu.Alloc, []byte) {
	t.Helper()
	a, err := r.GPU.Alloc(1<<20, pattern, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Free() })
	mem, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return a, mem
}

// hostPin pins 1 MiB of host memory until the test ends.
func hostPin(t *testing.T, r *guestrig.Rig) (*p2p.Pin, []byte) {
	t.Helper()
	buf, err := r.Dev.AllocHost(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := r.Dev.PinHost(buf.Bytes())
	if err != nil {
		buf.Free()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hp.Unpin()
		buf.Free()
	})
	return hp, buf.Bytes()
}

// noneDropped fails the test if the IOMMU dropped DMA writes.
func noneDropped(t *testing.T, r *guestrig.Rig) {
	t.Helper()
	if n, err := r.Ctl.IOMMUFaults(); err != nil || n != 0 {
		t.Fatalf("%d DMA writes dropped by the IOMMU (%v)", n, err)
	}
}

// roundTrip moves a pattern from src through card memory into dst and
// checks it arrived, reading both through the CPU.
func roundTrip(t *testing.T, r *guestrig.Rig, src, dst *p2p.Pin, srcMem, dstMem []byte) {
	t.Helper()
	for i := range srcMem {
		srcMem[i] = byte(i*13) ^ byte(i>>12)
	}
	clear(dstMem)
	for _, x := range []p2p.Transfer{
		{Dir: p2p.H2C, Segments: []p2p.Segment{src.Whole()}},
		{Dir: p2p.C2H, Segments: []p2p.Segment{dst.Whole()}},
	} {
		if _, err := r.Dev.Transfer(context.Background(), x); err != nil {
			t.Fatalf("%v: %v", x.Dir, err)
		}
	}
	if !bytes.Equal(srcMem, dstMem) {
		t.Fatal("the data did not arrive")
	}
}

// Host and nvidia_p2p pins work through the IOMMU: the bus addresses the
// FPGA gets are IOVAs the IOMMU maps, not the BAR's addresses.
func TestPinsThroughIOMMU(t *testing.T) {
	r := guestrig.Open(t, cardMem)
	requireTranslation(t)
	a, gpuMem := gpuAlloc(t, r, simgpu.RandomRuns)
	gp, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Unpin()
	hp, host := hostPin(t, r)
	table, err := a.Table()
	if err != nil {
		t.Fatal(err)
	}
	st, err := gp.Query(true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Table.Pages[0] == table[0] {
		t.Fatalf("GPU pin's first page at the BAR address %#x: not translated", table[0])
	}
	roundTrip(t, r, hp, gp, host, gpuMem)
	roundTrip(t, r, gp, hp, gpuMem, host)
	noneDropped(t, r)
}

// A dma-buf exported the default way is mapped for the FPGA through its
// IOMMU, and DMA into it lands.
func TestDmabufThroughIOMMU(t *testing.T) {
	r := guestrig.Open(t, cardMem)
	requireTranslation(t)
	a, gpuMem := gpuAlloc(t, r, simgpu.Fragmented)
	f, err := a.ExportDmabuf(a.VA, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dp, err := r.Dev.PinDmabuf(int(f.Fd()), 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Unpin()
	hp, host := hostPin(t, r)
	roundTrip(t, r, hp, dp, host, gpuMem)
	noneDropped(t, r)
}

// A dma-buf exported with CUDA's PCIe mapping type hands over the BAR's
// addresses, which the IOMMU does not map for the FPGA: the pin is refused
// with the reason, and nothing stays pinned.
func TestDmabufPCIeMappingRefused(t *testing.T) {
	r := guestrig.Open(t, cardMem)
	requireTranslation(t)
	a, _ := gpuAlloc(t, r, simgpu.Fragmented)
	f, err := a.ExportDmabufWith(a.VA, a.Size, simgpu.ExportPCIe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = r.Dev.PinDmabuf(int(f.Fd()), 0, a.Size)
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrIOMMUBypass) || !errors.As(err, &e) || e.Err != unix.EXDEV || !strings.Contains(e.Hint(), "iommu=pt") {
		t.Fatalf("pin of a PCIe-mapped dma-buf under a translating IOMMU: %v, want ErrIOMMUBypass (EXDEV) with a hint", err)
	}
	if info, err := r.Dev.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("after the refused pin: %d bytes pinned (%v)", info.PinnedTotal, err)
	}
	log, err := guest.Dmesg()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "not mapped by the IOMMU that translates for this device") {
		t.Fatalf("the kernel log does not say why:\n%s", log)
	}
}

// The rig's IOMMU is as unforgiving as hardware: DMA writes to addresses
// it does not map are dropped without an error, so a transfer "succeeds"
// and the data is lost. That is what the dma-buf check above prevents.
func TestUnmappedWritesAreLostSilently(t *testing.T) {
	r := guestrig.Open(t, cardMem)
	requireTranslation(t)
	a, gpuMem := gpuAlloc(t, r, simgpu.Fragmented)
	// nvidia_p2p mappings moved off what the IOMMU maps.
	defer guest.SetParam(t, "nvp2p_sim", "dma_offset", "1099511627776")()
	p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	before, err := r.Ctl.IOMMUFaults()
	if err != nil {
		t.Fatal(err)
	}
	clear(gpuMem)
	if _, err := r.Dev.Transfer(context.Background(), p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}}); err != nil {
		t.Fatalf("a C2H transfer into unmapped addresses: %v; the engine cannot know", err)
	}
	after, err := r.Ctl.IOMMUFaults()
	if err != nil {
		t.Fatal(err)
	}
	if after == before || !bytes.Equal(gpuMem, make([]byte, len(gpuMem))) {
		t.Fatalf("IOMMU faults %d -> %d; want the writes dropped and the memory untouched", before, after)
	}
}
