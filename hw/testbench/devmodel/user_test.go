package devmodel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/rtlbridge"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// barRegs is the DMA BAR as QEMU's side of the rig reaches it.
type barRegs struct {
	t *testing.T
	q *fakeQEMU
}

func (b barRegs) ReadReg(off uint32) uint32 { return b.q.read(b.t, pciBarDMA, uint64(off)) }
func (b barRegs) WriteReg(off, v uint32)    { b.q.write(b.t, pciBarDMA, uint64(off), v) }

// With the user's RTL in the rig (the example design, free-running), the
// user BAR reaches its AXI-Lite registers and the stream channel takes its
// frames into guest RAM, every one accounted for by the design's counters.
func TestUserLogic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := rtlbridge.Start(ctx, rtlbridge.Options{Binary: buildExample(ctx, t), Width: 64, Mode: rtlbridge.FreeRunning})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rig, err := New(Config{Dir: t.TempDir(), GuestRAM: 16 << 20, VRAM: 1 << 20, CardMem: 1 << 20,
		User: &UserLogic{C2H: b.C2H(), H2C: b.H2C(), Regs: b, Interrupts: b, Reset: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	_, q := connect(ctx, t, rig)
	if id := q.read(t, pciBarUser, 0); id != 0x47465831 {
		t.Fatalf("user BAR ID register %#x", id)
	}
	// Slots of one frame each in guest RAM, then frames.
	c := frameSlots(t, rig)
	regs := barRegs{t, q}
	q.send(t, pciOpMaster, 0, 0, 1) // bus mastering on, as the driver's probe does
	xdma.Start(regs, xdma.C2H, 1, c, xdma.ControlDefault)
	q.write(t, pciBarUser, 0x0C, 2000) // PERIOD
	if v := q.read(t, pciBarUser, 0x0C); v != 2000 {
		t.Fatalf("PERIOD reads %d after writing 2000", v)
	}
	status := xdma.Base(xdma.TargetC2H, 1) + xdma.RegStatus
	for deadline := time.Now().Add(time.Minute); regs.ReadReg(status)&xdma.CtrlRun != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the chain did not finish: %s", xdma.DecodeStatus(xdma.C2H, 1, regs.ReadReg(status)))
		}
	}
	q.write(t, pciBarUser, 0x0C, 0)
	var checker frame.Checker
	for i := range slots {
		res := rig.ram[resAddr+i*xdma.ResultSize:]
		n := binary.LittleEndian.Uint32(res[4:])
		if _, err := checker.Check(rig.ram[slotAddr+i*slotSize : slotAddr+i*slotSize+int(n)]); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	q.write(t, pciBarUser, 0x14, 1) // SNAPSHOT
	r64 := func(a uint64) uint64 {
		return uint64(q.read(t, pciBarUser, a)) | uint64(q.read(t, pciBarUser, a+4))<<32
	}
	gen, sent, dropped, queued := r64(0x20), r64(0x28), r64(0x30), uint64(q.read(t, pciBarUser, 0x38))
	if gen != sent+dropped+queued || checker.Frames != slots || checker.Gaps > dropped || sent < slots {
		t.Fatalf("design: generated %d, sent %d, dropped %d, queued %d; consumer %+v", gen, sent, dropped, queued, checker.Stats)
	}

	// A corrupt frame sent over H2C makes the design raise its user
	// interrupt 0: an edge on the vector the IRQ block maps it to and the
	// legacy line, until the engine's acknowledgement drops the request.
	q.send(t, pciOpMode, 0, 0, uint64(xdmamodel.InterruptMSIX))
	irq := xdma.Base(xdma.TargetIRQ, 0)
	regs.WriteReg(irq+xdma.RegUserVector, 5)
	regs.WriteReg(irq+xdma.RegUserIntEnableW1S, 1)
	q.write(t, pciBarUser, 0x58, 1) // the design's IRQ_ENABLE
	frame.Encode(rig.ram[h2cData:], 0, 0, 1000)
	rig.ram[h2cData+500] ^= 1
	xdma.Start(regs, xdma.H2C, 1, h2cFrame(t, rig), xdma.ControlDefault)
	if k, v := q.interrupt(t); k != pciIRQEdge || v != 5 {
		t.Fatalf("interrupt message %d %d, want an edge on vector 5", k, v)
	}
	if k, v := q.interrupt(t); k != pciIRQLevel || v != 1 {
		t.Fatalf("interrupt message %d %d, want INTx asserted", k, v)
	}
	if k, v := q.interrupt(t); k != pciIRQLevel || v != 0 {
		t.Fatalf("interrupt message %d %d, want INTx deasserted once acknowledged", k, v)
	}
	if bad := q.read(t, pciBarUser, 0x4C); bad != 1 {
		t.Fatalf("the design counted %d bad H2C frames, want 1", bad)
	}
	// A function reset resets the design with the engine.
	q.write(t, pciBarUser, 0x0C, 2000)
	q.send(t, pciOpReset, 0, 0, 0)
	if p, bad := q.read(t, pciBarUser, 0x0C), q.read(t, pciBarUser, 0x4C); p != 0 || bad != 0 {
		t.Fatalf("after a function reset the design's PERIOD is %d and bad-frame count %d, want 0 and 0", p, bad)
	}
	if err := rig.Err(); err != nil {
		t.Fatal(err)
	}
}

// Where the tests' chains and data sit in guest RAM: a C2H chain of
// slots of one frame each, with their results, and an H2C chain of one
// frame.
const (
	descAddr, resAddr, slotAddr, slots, slotSize = 0x10000, 0x18000, 0x100000, 16, 2048
	h2cDesc, h2cData                             = 0x20000, 0x200000
)

// frameSlots builds the C2H chain of slots.
func frameSlots(t *testing.T, rig *Rig) xdma.Chain {
	t.Helper()
	var segs []sgl.Segment
	for i := range slots {
		segs = append(segs, sgl.Segment{Addr: slotAddr + uint64(i)*slotSize, Len: slotSize})
	}
	c, err := xdma.BuildChain(rig.ram[descAddr:resAddr], descAddr, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resAddr, Completed: xdma.CompletedEach})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// h2cFrame builds the H2C chain of the one frame at h2cData.
func h2cFrame(t *testing.T, rig *Rig) xdma.Chain {
	t.Helper()
	c, err := xdma.BuildChain(rig.ram[h2cDesc:h2cDesc+0x1000], h2cDesc, []sgl.Segment{{Addr: h2cData, Len: uint64(frame.Size(1000))}},
		xdma.ChainSpec{Dir: xdma.H2C, Stream: true, EOP: xdma.EOPEach})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildExample builds the example design at 64 bits.
func buildExample(ctx context.Context, t *testing.T) string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	ex := filepath.Join(root, "hw", "rtl", "example")
	bin, err := rtlbridge.Build(ctx, rtlbridge.Design{
		Top: "gpufpga_example", Files: []string{filepath.Join(ex, "gpufpga_example.sv")}, IncDirs: []string{ex},
		Params: map[string]string{"DATA_WIDTH": "64", "PAYLOAD_BYTES": "1000"},
	}, rtlbridge.Dir(root))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// tick is QEMU's device ticking the model at ns of the guest's virtual
// clock; it returns the model's answer: the ns to the next tick it needs,
// 0 for tick-ns.
func (q *fakeQEMU) tick(t *testing.T, ns uint64) uint64 {
	t.Helper()
	q.send(t, pciOpTick, 0, 0, ns)
	var v [8]byte
	if _, err := io.ReadFull(q.req, v[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(v[:])
}

// pending returns the interrupt messages already received, without
// waiting for more.
func (q *fakeQEMU) pending(t *testing.T) []string {
	t.Helper()
	raw, err := q.irq.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var m [8]byte
	for {
		var n int
		var rerr error
		if err := raw.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), m[:], unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return out
		}
		if rerr != nil || n != len(m) {
			t.Fatalf("interrupt connection: %d bytes, %v", n, rerr)
		}
		out = append(out, fmt.Sprintf("kind %d value %d", m[0], binary.LittleEndian.Uint32(m[4:])))
	}
}

// Synchronised to the guest's clock (UserLogic.Clock), the design runs
// only when QEMU's device ticks the model, a quantum of its cycles per
// quantum of virtual time, and the engine moves its frames and raises
// its interrupts then, before the tick's answer. The same ticks and
// accesses give the same trace: the frames with their cycle stamps, the
// engine's progress and the interrupts, tick by tick.
func TestUserClockTicks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildExample(ctx, t)
	const cycleNS, quantum = 4, 256
	run := func() (trace []string, frames []byte) {
		b, err := rtlbridge.Start(ctx, rtlbridge.Options{Binary: bin, Width: 64, Mode: rtlbridge.Synchronised, Quantum: quantum})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		rig, err := New(Config{Dir: t.TempDir(), GuestRAM: 16 << 20, VRAM: 1 << 20, CardMem: 1 << 20,
			User: &UserLogic{C2H: b.C2H(), H2C: b.H2C(), Regs: b, Interrupts: b, Reset: b, Clock: b, CycleNS: cycleNS}})
		if err != nil {
			t.Fatal(err)
		}
		defer rig.Close()
		if args := strings.Join(rig.QEMUArgs(), ","); !slices.Contains(strings.Split(args, ","), "tick-ns=1024") {
			t.Fatalf("QEMU's device is not told to tick every quantum of 1024 ns: %s", args)
		}
		_, q := connect(ctx, t, rig)
		// Until the card's BARs are first reached (the driver's probe),
		// the guest's boot ticks by, a millisecond at a time, and the
		// design's clock waits.
		var ns uint64
		for range 10 {
			ns += quantum * cycleNS
			if next := q.tick(t, ns); next != heldTickNS {
				t.Fatalf("a held clock asks for the next tick in %d ns, want %d", next, heldTickNS)
			}
		}
		if c := b.Cycle(); c != 0 {
			t.Fatalf("the design ran %d cycles before any access to the card", c)
		}
		start := ns / cycleNS
		c := frameSlots(t, rig)
		regs := barRegs{t, q}
		q.send(t, pciOpMaster, 0, 0, 1)
		// Every channel's interrupt on, vector 0: each completed
		// descriptor raises it (INTx and MSI-X messages both).
		regs.WriteReg(xdma.Base(xdma.TargetIRQ, 0)+xdma.RegChanIntEnableW1S, 0xFFFFFFFF)
		regs.WriteReg(xdma.Base(xdma.TargetC2H, 1)+xdma.RegIntEnable, xdma.ControlDefault)
		xdma.Start(regs, xdma.C2H, 1, c, xdma.ControlDefault)
		// A frame to the design's H2C side, which the IP's H2C FIFO has
		// room for: an engine running on the host's time would move it
		// at once.
		frame.Encode(rig.ram[h2cData:], 0, 0, 1000)
		xdma.Start(regs, xdma.H2C, 1, h2cFrame(t, rig), xdma.ControlDefault)
		q.write(t, pciBarUser, 0x0C, 2000) // PERIOD: a frame every 2000 cycles
		// The write's AXI-Lite transaction ran the design ahead of the
		// guest's time (a read answered after it says it is done);
		// nothing runs on the host's time after it.
		completed := xdma.Base(xdma.TargetC2H, 1) + xdma.RegCompletedCount
		h2cCompleted := xdma.Base(xdma.TargetH2C, 1) + xdma.RegCompletedCount
		regs.ReadReg(completed)
		ahead := b.Cycle()
		time.Sleep(100 * time.Millisecond)
		if n, h := regs.ReadReg(completed), regs.ReadReg(h2cCompleted); n != 0 || h != 0 || b.Cycle() != ahead {
			t.Fatalf("untouched for 100 ms, the design ran from cycle %d to %d and the engine completed %d C2H and %d H2C descriptors", ahead, b.Cycle(), n, h)
		}
		for i := 0; i < 200; i++ {
			ns += quantum * cycleNS
			if next := q.tick(t, ns); next != 0 {
				t.Fatalf("tick %d: a running clock asks for the next tick in %d ns, want every tick-ns", i, next)
			}
			cyc := b.Cycle()
			if want := ns/cycleNS - start; cyc > max(want, ahead) || cyc+quantum <= want {
				t.Fatalf("tick %d at %d ns: the design is at cycle %d, want within a quantum below %d", i, ns, cyc, want)
			}
			trace = append(trace, fmt.Sprintf("tick %d: cycle %d, completed %d, interrupts %v", i, cyc, regs.ReadReg(completed), q.pending(t)))
		}
		if n, h := regs.ReadReg(completed), regs.ReadReg(h2cCompleted); n != slots || h != 1 {
			t.Fatalf("the engine completed %d C2H and %d H2C descriptors after 200 ticks, want %d and 1", n, h, slots)
		}
		if good := q.read(t, pciBarUser, 0x48); good != 1 {
			t.Fatalf("the design took %d good H2C frames, want 1", good)
		}
		if err := rig.Err(); err != nil {
			t.Fatal(err)
		}
		return trace, append([]byte(nil), rig.ram[slotAddr:slotAddr+slots*slotSize]...)
	}
	traceA, framesA := run()
	traceB, framesB := run()
	for i := range traceA {
		if traceA[i] != traceB[i] {
			t.Fatalf("two runs differ at %s / %s", traceA[i], traceB[i])
		}
	}
	if !bytes.Equal(framesA, framesB) {
		t.Fatal("two runs wrote different frames")
	}
	var chk frame.Checker
	for i := range slots {
		if _, err := chk.Check(framesA[i*slotSize : i*slotSize+frame.Size(1000)]); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	irqs := 0
	for _, l := range traceA {
		if !strings.HasSuffix(l, "[]") {
			irqs++
			t.Log(l)
		}
	}
	if irqs == 0 {
		t.Fatalf("no interrupt reached QEMU's side with a tick's answer:\n%s", strings.Join(traceA, "\n"))
	}
	t.Logf("%d ticks, %d with interrupts; the last: %s", len(traceA), irqs, traceA[len(traceA)-1])
}
