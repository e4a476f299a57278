package devmodel

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

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
	root := filepath.Join("..", "..", "..")
	ex := filepath.Join(root, "hw", "rtl", "example")
	bin, err := rtlbridge.Build(ctx, rtlbridge.Design{
		Top: "gpufpga_example", Files: []string{filepath.Join(ex, "gpufpga_example.sv")}, IncDirs: []string{ex},
		Params: map[string]string{"DATA_WIDTH": "64", "PAYLOAD_BYTES": "1000"},
	}, rtlbridge.Dir(root))
	if err != nil {
		t.Fatal(err)
	}
	b, err := rtlbridge.Start(ctx, rtlbridge.Options{Binary: bin, Width: 64, Mode: rtlbridge.FreeRunning})
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
	served := make(chan error, 1)
	go func() { served <- rig.Serve(ctx) }()
	dialCtl(t, rig.ctl.sock)
	q := dialDevice(t, rig.fpga.sock)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if id := q.read(t, pciBarUser, 0); id != 0x47465831 {
		t.Fatalf("user BAR ID register %#x", id)
	}
	// Slots of one frame each in guest RAM, then frames.
	const descAddr, resAddr, slotAddr, slots, slotSize = 0x10000, 0x18000, 0x100000, 16, 2048
	var segs []sgl.Segment
	for i := range slots {
		segs = append(segs, sgl.Segment{Addr: slotAddr + uint64(i)*slotSize, Len: slotSize})
	}
	c, err := xdma.BuildChain(rig.ram[descAddr:resAddr], descAddr, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resAddr, Completed: xdma.CompletedEach})
	if err != nil {
		t.Fatal(err)
	}
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
	const h2cDesc, h2cData = 0x20000, 0x200000
	frame.Encode(rig.ram[h2cData:], 0, 0, 1000)
	rig.ram[h2cData+500] ^= 1
	hc, err := xdma.BuildChain(rig.ram[h2cDesc:h2cDesc+0x1000], h2cDesc, []sgl.Segment{{Addr: h2cData, Len: uint64(frame.Size(1000))}},
		xdma.ChainSpec{Dir: xdma.H2C, Stream: true, EOP: xdma.EOPEach})
	if err != nil {
		t.Fatal(err)
	}
	xdma.Start(regs, xdma.H2C, 1, hc, xdma.ControlDefault)
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
