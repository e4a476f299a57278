//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// errnoENOTSUPP is the kernel's ENOTSUPP (524), which NVIDIA's exporter
// returns and user space has no name for.
const errnoENOTSUPP = unix.Errno(524)

// export exports a's whole allocation, or returns nil where the simulated
// GPU plays NVIDIA's proprietary driver, which exports no dma-bufs (and
// checks that it says so).
func export(t *testing.T, a *simgpu.Alloc, flags simgpu.ExportFlags) *os.File {
	t.Helper()
	f, err := a.ExportDmabufWith(a.VA, a.Size, flags)
	if guest.NVIDIAVariant() == guest.NVIDIAProprietary {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatalf("dma-buf export from the proprietary driver: %v, want EOPNOTSUPP", err)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// streamInto fills p from C2H stream channel 1.
func streamInto(t *testing.T, d *p2p.Device, p *p2p.Pin) error {
	_, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: 20e9})
	return err
}

// TestDmabufExportIsNVIDIAs: CUDA's exports cannot be mapped by the CPU,
// and keep their memory until released: freeing the allocation under a
// dma-buf pin revokes nothing, and DMA into it still lands in memory that
// is not handed out again.
func TestDmabufExportIsNVIDIAs(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	a := alloc(t, g, 1<<20, simgpu.RandomRuns)
	f := export(t, a, 0)
	if f == nil {
		a.Free()
		return
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ, unix.MAP_SHARED); err != errnoENOTSUPP {
		t.Fatalf("mmap of the export: %v, want ENOTSUPP (524) as NVIDIA's", err)
	}
	p, err := d.PinDmabuf(int(f.Fd()), 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	before := counters(t, g)
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Query(false); err != nil || st.Revoked {
		t.Fatalf("pin of a static export after the free: %+v, %v; want active", st, err)
	}
	if err := streamInto(t, d, p); err != nil {
		t.Fatalf("DMA into a static export after the free: %v", err)
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes landed in freed VRAM (%v)", late, err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if c := counters(t, g); c.LiveDmabufs != before.LiveDmabufs-1 || c.LiveAllocs != before.LiveAllocs-1 {
		t.Fatalf("after unpin and close: %+v (before %+v)", c, before)
	}
}

// TestDmabufMoveNotifyRevokes: a dynamic exporter revokes its exports
// through move_notify when the memory goes. The transfer in
// flight ends with ErrRevoked before the exporter hands the pages out
// again, and the revoked dma-buf cannot be pinned again.
func TestDmabufMoveNotifyRevokes(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	before := counters(t, g)
	a := alloc(t, g, 4<<20, simgpu.Fragmented)
	f := export(t, a, simgpu.ExportDynamic)
	if f == nil {
		a.Free()
		return
	}
	p, err := d.PinDmabuf(int(f.Fd()), 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	// A slow source keeps the stream transfer in flight.
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 200, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64)
	done := make(chan error, 1)
	go func() { done <- streamInto(t, d, p) }()
	waitInflight(t, p)
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("transfer over a revoked dma-buf: %v, want ErrRevoked", err)
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes landed in freed VRAM (%v)", late, err)
	}
	// The exporter gave the pages back at once, with the export still open.
	if c := counters(t, g); c.LiveAllocs != before.LiveAllocs || c.FreePages != before.FreePages || c.LiveDmabufs != before.LiveDmabufs+1 {
		t.Fatalf("after the revocation: %+v (before %+v)", c, before)
	}
	if st, err := p.Query(false); err != nil || !st.Revoked {
		t.Fatalf("pin state %+v, %v; want revoked", st, err)
	}
	if _, err := d.PinDmabuf(int(f.Fd()), 0, 1<<16); !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("pin of a revoked dma-buf: %v, want ErrRevoked", err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatalf("unpin of a revoked dma-buf pin: %v", err)
	}
	f.Close()
	if c := counters(t, g); c.LiveDmabufs != before.LiveDmabufs {
		t.Fatalf("after close: %+v (before %+v)", c, before)
	}
}

// TestDmabufRefusedAttachmentIsEOPNOTSUPP: NVIDIA's exporter refuses an
// attachment (a PCI topology it does not support) with the kernel's
// internal ENOTSUPP (524); the pin reports EOPNOTSUPP, which user space
// can name, and pins nothing.
func TestDmabufRefusedAttachmentIsEOPNOTSUPP(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	defer a.Free()
	f := export(t, a, 0)
	if f == nil {
		return
	}
	guest.SetParam(t, "nvp2p_sim", "dmabuf_topology_ok", "N")
	p, err := d.PinDmabuf(int(f.Fd()), 0, a.Size)
	if err == nil {
		p.Unpin()
	}
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrP2PUnavailable) || !errors.As(err, &e) || e.Err != unix.EOPNOTSUPP {
		t.Fatalf("pin of a dma-buf whose exporter refuses the attachment: %v, want EOPNOTSUPP", err)
	}
	if info, err := d.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("after the refused pin: %d bytes pinned (%v)", info.PinnedTotal, err)
	}
}

// TestDmabufPCIeMappingWithoutIOMMU: with no IOMMU translating for the
// FPGA, the PCIe mapping type's BAR addresses are the bus addresses, and
// the pin takes them.
func TestDmabufPCIeMappingWithoutIOMMU(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.RandomRuns)
	defer a.Free()
	f := export(t, a, simgpu.ExportPCIe)
	if f == nil {
		return
	}
	table, err := a.Table()
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinDmabuf(int(f.Fd()), 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	st, err := p.Query(true)
	if err != nil {
		t.Fatal(err)
	}
	for i, bus := range st.Table.Pages {
		off := uint64(i) * 4096
		if want := table[off/simgpu.PageSize] + off%simgpu.PageSize; bus != want {
			t.Fatalf("page %d at %#x, want the BAR address %#x", i, bus, want)
		}
	}
}
