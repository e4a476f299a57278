//go:build vmguest

package rtlguest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/resident"
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
	regCycles    = 0x3C
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

// The design's frames stream through the driver into simulated GPU
// memory and pass the frame checker: at a rate the guest sustains, with no
// gap; then, the consumer paused, the design drops whole frames while the
// IP's FIFO is full, and every frame it generated is accounted for
// exactly: consumed, or dropped and seen as a gap.
func TestRTLStream(t *testing.T) {
	r := guestrig.Open(t)
	bar := mapUserBAR(t)
	if id := bar.read(regID); id != 0x47465831 {
		t.Fatalf("user BAR ID register %#x: is the example design in the rig?", id)
	}
	size := uint64(frame.Size(int(bar.read(regPayload))))
	const n, slot = 16, 4096
	p, mem := pinGPU(t, r, n*slot, simgpu.Fragmented)
	var slots []p2p.Segment
	for i := range n {
		slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) * slot, Len: slot})
	}
	s, err := r.Dev.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	// Guest time: the design's clock is the guest's, and a second of it
	// costs the host tens.
	deadline := time.AfterFunc(3*time.Second, func() { s.Stop() })
	defer deadline.Stop()
	bar.write(regSnapshot, 1)
	gen0, sent0, dropped0 := bar.read64(regGenerated), bar.read64(regSent), bar.read64(regDropped)
	clock := designClock(t, r, bar)
	if clock == nil {
		t.Fatal("the design runs on the host's time, where no rate is the guest's to sustain: vmtest's TestRTL ties it to the guest's clock")
	}
	// A frame every 12 500 cycles: 50 µs of the guest's time at 250 MHz,
	// where the guest takes a frame in about 30.
	bar.write(regPeriod, 12500)
	var chk frame.Checker
	var latency []int64 // cycles; the estimate of now is within a quantum
	next := s.Slots()
	take := func() frame.Header {
		t.Helper()
		sl, ok := <-next
		if !ok {
			t.Fatalf("stream ended (%v) after %+v", s.Err(), chk.Stats)
		}
		b := mem[sl.Index*slot : sl.Index*slot+int(sl.Bytes)]
		if _, err := chk.Check(b); err != nil {
			t.Fatalf("slot %d (fill %d): %v", sl.Index, sl.Seq, err)
		}
		if !sl.EOP || sl.Bytes != size {
			t.Fatalf("slot %+v: want one frame of %d bytes", sl, size)
		}
		h, _ := frame.Parse(b)
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := take(); h.Seq != gen0 {
		t.Fatalf("the first frame is number %d; the design had generated %d before", h.Seq, gen0)
	}
	// More frames than the slots and the IP's FIFO hold: a consumer
	// slower than the design would have dropped some by then.
	for chk.Frames < 400 {
		h := take()
		latency = append(latency, int64(clock.now()-h.Timestamp))
	}
	if chk.Gaps != 0 {
		t.Fatalf("at a frame every 12 500 cycles the consumer missed frames: %+v", chk.Stats)
	}
	// The consumer pauses: the slots, then the IP's FIFO fill, and the
	// design drops whole frames.
	time.Sleep(20 * time.Millisecond)
	for chk.Gaps == 0 {
		take()
	}
	for range 50 {
		take()
	}
	// The generator stopped, the design sends what it holds; then every
	// frame it sent is taken, and each one it dropped is a gap (one
	// dropped last would be missing from the gaps, and fail here).
	gen, sent, dropped := drainDesign(t, bar)
	gen, sent, dropped = gen-gen0, sent-sent0, dropped-dropped0
	for chk.Frames < sent {
		take()
	}
	if chk.Gaps != dropped || chk.Frames != sent || gen != sent+dropped || chk.Duplicates != 0 || chk.CRCFailures != 0 {
		t.Fatalf("design: generated %d, sent %d, dropped %d; consumer %+v", gen, sent, dropped, chk.Stats)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range next {
	}
	t.Logf("design generated %d frames and dropped %d; the driver's stream consumed %d, %d gaps", gen, dropped, chk.Frames, chk.Gaps)
	slices.Sort(latency)
	t.Logf("FPGA-to-consumer latency at the sustained rate, the design's cycle when a frame was due to the guest's when it checked it: median %d cycles, max %d (%d frames)",
		latency[len(latency)/2], latency[len(latency)-1], len(latency))
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	guest.CheckDmesg(t)
}

// A GPU-resident stream fed by the design: the simulated GPU's persistent
// consumer (simgpu.Consumer, as a resident kernel following
// gpufpga_resident.h) takes each fill from its result record, checks its
// frame and hands the slot back through its word; no system call goes by
// per fill. Every frame the design generated is consumed, or dropped and
// one gap.
func TestRTLResidentStream(t *testing.T) {
	r := guestrig.Open(t)
	bar := mapUserBAR(t)
	const nslots, slot = 16, 4096
	ringPin, ring := pinGPU(t, r, nslots*slot, simgpu.Fragmented)
	resPin, results := pinGPU(t, r, uint64(nslots*resident.ResultSize), simgpu.Contiguous)
	host, err := r.Dev.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	wordPin, err := r.Dev.PinHost(host.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := simgpu.NewConsumer(ring, slot, nslots, results, host.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan error, 1)
	go func() { consumed <- cons.Run(ctx) }()
	stopConsumer := sync.OnceValue(func() error { cancel(); return <-consumed })
	t.Cleanup(func() { stopConsumer() })
	var slots []p2p.Segment
	for i := range nslots {
		slots = append(slots, p2p.Segment{Pin: ringPin, Offset: uint64(i) * slot, Len: slot})
	}
	s, err := r.Dev.StartResidentStream(1, slots, p2p.Resident{
		Results:  p2p.Segment{Pin: resPin, Len: uint64(nslots * resident.ResultSize)},
		Consumer: p2p.Segment{Pin: wordPin, Len: uint64(resident.ConsumerSize)},
		Coalesce: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	bar.write(regSnapshot, 1)
	gen0, sent0, dropped0 := bar.read64(regGenerated), bar.read64(regSent), bar.read64(regDropped)
	bar.write(regPeriod, 12500)
	waitFrames := func(what string, done func(frame.Stats) bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); !done(cons.Stats().Frames); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) || s.Err() != nil {
				t.Fatalf("%s: consumer %+v, stream %v", what, cons.Stats(), s.Err())
			}
		}
	}
	waitFrames("200 frames", func(f frame.Stats) bool { return f.Frames >= 200 })
	gen, sent, dropped := drainDesign(t, bar)
	gen, sent, dropped = gen-gen0, sent-sent0, dropped-dropped0
	waitFrames("every frame sent", func(f frame.Stats) bool { return f.Frames >= sent })
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
		t.Fatal("a resident stream reported a slot")
	}
	if err := stopConsumer(); err != nil {
		t.Fatal(err)
	}
	// A consumer on the GPU keeps up with a frame every 12 500 cycles:
	// nothing is dropped.
	st := cons.Stats()
	if f := st.Frames; dropped != 0 || gen != sent || f.Frames != sent || f.Gaps != 0 || f.Duplicates != 0 || f.CRCFailures != 0 || st.Consumed != s.Fills() {
		t.Fatalf("design: generated %d, sent %d, dropped %d; engine: %d fills; consumer %+v", gen, sent, dropped, s.Fills(), st)
	}
	t.Logf("design generated %d frames and dropped %d; the resident consumer took %d fills, %d frames, %d gaps",
		gen, dropped, st.Consumed, st.Frames.Frames, st.Frames.Gaps)
	for _, p := range []*p2p.Pin{ringPin, resPin, wordPin} {
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.Free(); err != nil {
		t.Fatal(err)
	}
	guest.CheckDmesg(t)
}

// pinGPU allocates size bytes of simulated GPU memory laid out as p,
// zeroed, and pins them.
func pinGPU(t *testing.T, r *guestrig.Rig, size uint64, p simgpu.Pattern) (*p2p.Pin, []byte) {
	t.Helper()
	a, err := r.GPU.Alloc(size, p, 11)
	if err != nil {
		t.Fatal(err)
	}
	pin, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	return pin, b
}

// drainDesign stops the design's generator, waits until it has sent
// every frame it holds, and returns its generated, sent and dropped
// counts.
func drainDesign(t *testing.T, bar userBAR) (gen, sent, dropped uint64) {
	t.Helper()
	bar.write(regPeriod, 0)
	for until := time.Now().Add(time.Second); ; time.Sleep(100 * time.Microsecond) {
		bar.write(regSnapshot, 1)
		if q := bar.read(regQueued); q == 0 {
			break
		} else if time.Now().After(until) {
			t.Fatalf("the design still holds %d frames a second after its generator stopped", q)
		}
	}
	return bar.read64(regGenerated), bar.read64(regSent), bar.read64(regDropped)
}

// cycleClock reads the design's cycle from the guest's clock: a design
// synchronised to it runs cycleNS of the guest's time per cycle from the
// cycle at ref.
type cycleClock struct {
	cycle   uint64
	ref     time.Time
	cycleNS uint64
}

func (c *cycleClock) now() uint64 {
	return c.cycle + uint64(time.Since(c.ref).Nanoseconds())/c.cycleNS
}

// designClock samples the design's cycle counter against the guest's
// clock; nil where the design runs on the host's time.
func designClock(t *testing.T, r *guestrig.Rig, bar userBAR) *cycleClock {
	t.Helper()
	ns, quantum, err := r.Ctl.UserClock()
	if err != nil {
		t.Fatal(err)
	}
	if ns == 0 {
		return nil
	}
	// Each AXI-Lite transaction before this ran the design a quantum
	// ahead of the guest's time; once that many quanta have passed the
	// ticks have caught up, and the sample is within a quantum.
	time.Sleep(time.Duration(16 * quantum * ns))
	now := time.Now()
	bar.write(regSnapshot, 1)
	return &cycleClock{cycle: bar.read64(regCycles), ref: now, cycleNS: ns}
}

// Synchronised (vmtest's TestRTL), the design's clock is the guest's
// instruction-counted one: a cycle per cycleNS of the guest's time,
// within a quantum, and ahead by the quanta an AXI-Lite transaction holds
// it (the CPU waits on an MMIO read; the card's clock runs on).
func TestRTLClockFollowsGuest(t *testing.T) {
	r := guestrig.Open(t)
	ns, quantum, err := r.Ctl.UserClock()
	if err != nil {
		t.Fatal(err)
	}
	if ns == 0 {
		t.Fatal("the design runs on the host's time: vmtest's TestRTL ties it to the guest's clock (devmodel.UserLogic.Clock)")
	}
	bar := mapUserBAR(t)
	c0 := designClock(t, r, bar)
	time.Sleep(10 * time.Millisecond)
	c1 := designClock(t, r, bar)
	want := uint64(c1.ref.Sub(c0.ref).Nanoseconds()) / ns
	got := c1.cycle - c0.cycle
	// Each sample is within a quantum of the guest's time.
	slack := 2 * quantum
	if got+slack < want || got > want+slack {
		t.Fatalf("the design ran %d cycles in %v of the guest's time, want %d ± %d (%d ns a cycle)", got, c1.ref.Sub(c0.ref), want, slack, ns)
	}
	t.Logf("the design ran %d cycles in %v of the guest's time: %d expected, %d ns a cycle", got, c1.ref.Sub(c0.ref), want, ns)
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
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
		for deadline := time.Now().Add(3 * time.Second); bar.read(reg) != want; time.Sleep(time.Millisecond) {
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
	for deadline := time.Now().Add(3 * time.Second); bar.read(regH2CGood)+bar.read(regH2CBad) != good+bad+1; time.Sleep(time.Millisecond) {
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
	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	t.Cleanup(cancel)
	return c
}
