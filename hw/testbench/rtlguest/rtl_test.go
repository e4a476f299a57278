//go:build vmguest

package rtlguest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/userregs"
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
	regH2CGood   = 0x48
	regH2CBad    = 0x4C
	regIRQStatus = 0x54
	regIRQEnable = 0x58
)

// userBAR is the FPGA's user BAR, through pkg/userregs: each access is an
// AXI-Lite transaction on the design.
type userBAR struct {
	t *testing.T
	r *userregs.Registers
}

func mapUserBAR(t *testing.T) userBAR {
	t.Helper()
	r, err := userregs.Open(guestrig.DevicePath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return userBAR{t, r}
}

func (b userBAR) read(off int) uint32 {
	b.t.Helper()
	v, err := b.r.Read32(uint32(off))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

func (b userBAR) write(off int, v uint32) {
	b.t.Helper()
	if err := b.r.Write32(uint32(off), v); err != nil {
		b.t.Fatal(err)
	}
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

// Frames sent by H2C through the driver reach the design's checker; a
// corrupt one makes the design raise its user interrupt (usr_irq_req 0),
// which the driver delivers to WaitUserInterrupt, and the design's
// sequence check goes on after it.
func TestRTLH2CErrorRaisesUserInterrupt(t *testing.T) {
	r := guestrig.Open(t)
	bar := mapUserBAR(t)
	if id := bar.read(regID); id != 0x47465831 {
		t.Fatalf("user BAR ID register %#x: is the example design in the rig?", id)
	}
	payload := int(bar.read(regPayload))
	size := frame.Size(payload)
	h, err := r.Dev.AllocHost(uint64(size))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	p, err := r.Dev.PinHost(h.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good, bad := bar.read(regH2CGood), bar.read(regH2CBad)
	send := func(seq uint64, corrupt bool) {
		t.Helper()
		frame.Encode(h.Bytes(), seq, 0, payload)
		if corrupt {
			h.Bytes()[size-1] ^= 0xFF // the payload's last byte: the CRC fails
		}
		if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.H2C, Channel: 1, Segments: []p2p.Segment{p.Whole()}}); err != nil {
			t.Fatalf("H2C frame %d: %v", seq, err)
		}
	}
	// The design counts a frame once its last beat is in: wait for it.
	counted := func(reg int, want uint32) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); bar.read(reg) != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("design register %#x reads %d, want %d", reg, bar.read(reg), want)
			}
		}
	}
	// A first frame sets the sequence the design expects from here on
	// (good, or bad after frames of an earlier test), with the interrupt
	// still off.
	seq := uint64(1000)
	send(seq, false)
	seq++
	for deadline := time.Now().Add(time.Minute); bar.read(regH2CGood)+bar.read(regH2CBad) != good+bad+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the design never counted the first H2C frame")
		}
	}
	good, bad = bar.read(regH2CGood), bar.read(regH2CBad)
	bar.write(regIRQStatus, 1)
	bar.write(regIRQEnable, 1)
	defer bar.write(regIRQEnable, 0)
	for range 2 {
		send(seq, false)
		seq++
	}
	counted(regH2CGood, good+2)
	if u, err := r.Dev.WaitUserInterrupt(shortCtx(t), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("user interrupt after good frames: %+v, %v", u, err)
	}
	send(seq, true)
	seq++
	counted(regH2CBad, bad+1)
	u, err := r.Dev.WaitUserInterrupt(ctx, 1)
	if err != nil {
		t.Fatalf("waiting for the design's interrupt: %v", err)
	}
	if u.Fired != 1 || u.Counts[0] == 0 {
		t.Fatalf("the design's error: %+v, want line 0 fired", u)
	}
	if st := bar.read(regIRQStatus); st != 1 {
		t.Fatalf("design IRQ_STATUS %d after a bad frame, want 1", st)
	}
	bar.write(regIRQStatus, 1) // served
	send(seq, false)
	counted(regH2CGood, good+3)
	if b := bar.read(regH2CBad); b != bad+1 {
		t.Fatalf("design counted %d bad frames, want %d", b-bad, 1)
	}
	guest.CheckDmesg(t)
}

// shortCtx is a context that ends soon: for waits that must not return.
func shortCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return c
}
