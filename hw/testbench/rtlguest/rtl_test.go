//go:build vmguest

package rtlguest

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// The example design's registers (hw/rtl/example/gpufpga_example.sv).
const (
	regID        = 0x00
	regPeriod    = 0x0C
	regPayload   = 0x10
	regSnapshot  = 0x14
	regGenerated = 0x20
	regSent      = 0x28
	regDropped   = 0x30
	regQueued    = 0x38
)

// userBAR maps the FPGA's user BAR through sysfs: PCI BAR0, where PG195
// puts the AXI-Lite master's BAR (the DMA BAR follows). Each access is an
// AXI-Lite transaction on the design.
type userBAR []byte

func mapUserBAR(t *testing.T) userBAR {
	t.Helper()
	link, err := os.Readlink("/sys/class/misc/gpufpga0/device")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join("/sys/bus/pci/devices", filepath.Base(link), "resource0"), os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func (b userBAR) read(off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off]))) }
func (b userBAR) write(off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}
func (b userBAR) read64(off int) uint64 { return uint64(b.read(off)) | uint64(b.read(off+4))<<32 }

// The design's frames stream through the driver into simulated GPU memory
// and pass the frame checker; every frame the design generated was
// consumed, dropped (each drop a gap at most) or is queued.
func TestRTLStream(t *testing.T) {
	r := guestrig.Open(t)
	bar := mapUserBAR(t)
	if id := bar.read(regID); id != 0x47465831 {
		t.Fatalf("user BAR ID register %#x: is the example design in the rig?", id)
	}
	size := uint64(frame.Size(int(bar.read(regPayload))))
	const n, slot = 16, 4096
	a, err := r.GPU.Alloc(n*slot, simgpu.Fragmented, 11)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var slots []p2p.Segment
	for i := range n {
		slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) * slot, Len: slot})
	}
	s, err := r.Dev.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	bar.write(regPeriod, 5000) // a frame every 5000 cycles
	deadline := time.AfterFunc(2*time.Minute, func() { s.Stop() })
	defer deadline.Stop()
	const want = 200
	var chk frame.Checker
	for sl := range s.Slots() {
		b := mem[sl.Index*slot : sl.Index*slot+int(sl.Bytes)]
		if _, err := chk.Check(b); err != nil {
			t.Fatalf("slot %d (fill %d): %v", sl.Index, sl.Seq, err)
		}
		if !sl.EOP || sl.Bytes != size {
			t.Fatalf("slot %+v: want one frame of %d bytes", sl, size)
		}
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
		if chk.Frames == want {
			break
		}
	}
	bar.write(regPeriod, 0)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if chk.Frames != want || chk.Duplicates != 0 || chk.CRCFailures != 0 {
		t.Fatalf("stream ended (%v) with %+v, want %d frames", s.Err(), chk.Stats, want)
	}
	bar.write(regSnapshot, 1)
	gen, sent, dropped, queued := bar.read64(regGenerated), bar.read64(regSent), bar.read64(regDropped), uint64(bar.read(regQueued))
	if gen != sent+dropped+queued || sent < chk.Frames || chk.Gaps > dropped {
		t.Fatalf("design: generated %d, sent %d, dropped %d, queued %d; consumer %+v", gen, sent, dropped, queued, chk.Stats)
	}
	t.Logf("design generated %d frames, sent %d, dropped %d; the driver's stream consumed %d with %d gaps", gen, sent, dropped, chk.Frames, chk.Gaps)
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	guest.CheckDmesg(t)
}
