//go:build vmguest

package rigtest

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	rl "github.com/gpufpga/gpufpga/hw/testbench/riglayout"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// must fails the test on a call's error, so that no check passes on a
// value that could not be read.
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func openGPU(t *testing.T) *simgpu.GPU {
	t.Helper()
	guest.Require(t)
	guest.MustLoad(t, "nvp2p_sim")
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func TestDevicesEnumerate(t *testing.T) {
	guest.Require(t)
	devs, err := guest.FindPCI(0x1af4, 0x1110)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 {
		t.Fatalf("%d ivshmem devices, want 2 (control port, GPU)", len(devs))
	}
	fpga, err := guest.FindPCI(rl.FPGAVendor, rl.FPGADevice)
	if err != nil {
		t.Fatal(err)
	}
	if len(fpga) != 1 {
		t.Fatalf("%d FPGAs %04x:%04x, want 1", len(fpga), rl.FPGAVendor, rl.FPGADevice)
	}
	if _, err := rigctl.OpenControl(); err != nil {
		t.Fatal(err)
	}
	if _, err := rigctl.OpenRegisters(); err != nil {
		t.Fatal(err)
	}
}

func TestSimulatedGPUPageTables(t *testing.T) {
	g := openGPU(t)
	c, err := g.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.TotalPages != 256<<20/simgpu.PageSize-1 || c.FreePages != c.TotalPages || c.BAR == 0 {
		t.Fatalf("counters %+v", c)
	}
	for _, tc := range []struct {
		pattern    simgpu.Pattern
		contiguous func(runs int) bool
	}{
		{simgpu.Contiguous, func(runs int) bool { return runs == 1 }},
		{simgpu.Fragmented, func(runs int) bool { return runs == 64 }},
		{simgpu.RandomRuns, func(runs int) bool { return runs > 1 && runs < 64 }},
	} {
		a, err := g.Alloc(4<<20-100, tc.pattern, 7)
		if err != nil {
			t.Fatal(err)
		}
		if a.Pages != 64 || a.VA%(2<<20) != 0 {
			t.Fatalf("pattern %d: %d pages at %#x", tc.pattern, a.Pages, a.VA)
		}
		table, err := a.Table()
		if err != nil {
			t.Fatal(err)
		}
		runs, seen := 1, map[uint64]bool{}
		for i, p := range table {
			if p < c.BAR+simgpu.PageSize || p >= c.BAR+256<<20 || p%simgpu.PageSize != 0 || seen[p] {
				t.Fatalf("pattern %d: page %d at %#x", tc.pattern, i, p)
			}
			seen[p] = true
			if i > 0 && p != table[i-1]+simgpu.PageSize {
				runs++
			}
		}
		if !tc.contiguous(runs) {
			t.Errorf("pattern %d: %d contiguous runs", tc.pattern, runs)
		}
	}
	if c := must[simgpu.Counters](t)(g.Counters()); c.LiveAllocs != 3 || c.FreePages != c.TotalPages-3*64 {
		t.Fatalf("after three allocations: %+v", c)
	}
}

func TestCPUAccessAndDmabuf(t *testing.T) {
	g := openGPU(t)
	a, err := g.Alloc(1<<20, simgpu.Fragmented, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := a.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	buf, err := a.ExportDmabuf(a.VA+simgpu.PageSize, 2*simgpu.PageSize)
	if guest.NVIDIAVariant() == guest.NVIDIAProprietary {
		// NVIDIA's proprietary driver exports no dma-bufs.
		if !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatalf("dma-buf export from the proprietary driver: %v, want EOPNOTSUPP", err)
		}
		if err := a.Free(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	// The dma-buf keeps the pages; they return when it closes.
	c := must[simgpu.Counters](t)(g.Counters())
	if c.LiveDmabufs != 1 || c.LiveAllocs != 1 {
		t.Fatalf("after free with an export: %+v", c)
	}
	buf.Close()
	if c := must[simgpu.Counters](t)(g.Counters()); c.LiveDmabufs != 0 || c.LiveAllocs != 0 || c.FreePages != c.TotalPages {
		t.Fatalf("after closing the export: %+v", c)
	}
	if _, err := a.ExportDmabuf(a.VA, simgpu.PageSize); err == nil {
		t.Fatal("export of a freed allocation succeeded")
	}
}

// engine drives the simulated XDMA from user space.
type engine struct {
	t     *testing.T
	regs  *rigctl.Registers
	descs *guest.DMABuffer
}

func newEngine(t *testing.T) *engine {
	regs, err := rigctl.OpenRegisters()
	if err != nil {
		t.Fatal(err)
	}
	descs, err := guest.NewDMABuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { descs.Close() })
	return &engine{t, regs, descs}
}

// run builds a chain for segs in one locked page, runs it and returns the
// read-cleared status.
func (e *engine) run(dir xdma.Direction, ch int, segs []sgl.Segment, spec xdma.ChainSpec) uint32 {
	e.t.Helper()
	spec.Dir = dir
	c, err := xdma.BuildChain(e.descs.Mem, e.descs.Phys[0], segs, spec)
	if err != nil {
		e.t.Fatal(err)
	}
	xdma.Start(e.regs, dir, ch, c, xdma.ControlDefault)
	status := xdma.Base(dir.ChannelTarget(), ch) + xdma.RegStatus
	for i := 0; e.regs.ReadReg(status)&xdma.CtrlRun != 0; i++ {
		if i > 100000 {
			e.t.Fatalf("%s after %d polls", xdma.DecodeStatus(dir, ch, e.regs.ReadReg(status)), i)
		}
	}
	return xdma.Halt(e.regs, dir, ch)
}

func segments(t *testing.T, table []uint64, n uint64) []sgl.Segment {
	var b sgl.Builder
	if err := b.Append(&sgl.PageTable{PageSize: simgpu.PageSize, Pages: table}, 0, n); err != nil {
		t.Fatal(err)
	}
	return b.Segments()
}

func TestEngineMovesDataToVRAMAndRAM(t *testing.T) {
	g := openGPU(t)
	e := newEngine(t)
	for ch, want := range []bool{false, true} {
		for _, dir := range []xdma.Direction{xdma.H2C, xdma.C2H} {
			id, ok := xdma.DecodeIdentifier(e.regs.ReadReg(xdma.Base(dir.ChannelTarget(), ch)))
			if !ok || id.Stream != want || id.Channel != ch {
				t.Fatalf("%v channel %d: identifier %+v %v", dir, ch, id, ok)
			}
		}
	}
	const n = 1 << 20
	src := must[*simgpu.Alloc](t)(g.Alloc(n, simgpu.Fragmented, 0))
	dst := must[*simgpu.Alloc](t)(g.Alloc(n, simgpu.RandomRuns, 3))
	srcMem, err := src.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for i := range srcMem {
		srcMem[i] = byte(i*13 + i>>9)
	}
	srcTable := must[[]uint64](t)(src.Table())
	dstTable := must[[]uint64](t)(dst.Table())
	done := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
	if st := e.run(xdma.H2C, 0, segments(t, srcTable, n), xdma.ChainSpec{CardAddr: 0x100000}); st != done {
		t.Fatalf("H2C VRAM -> card: %s", xdma.DecodeStatus(xdma.H2C, 0, st))
	}
	if st := e.run(xdma.C2H, 0, segments(t, dstTable, n), xdma.ChainSpec{CardAddr: 0x100000}); st != done {
		t.Fatalf("C2H card -> VRAM: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	dstMem := must[[]byte](t)(dst.Bytes())
	if !bytes.Equal(dstMem, srcMem) {
		t.Fatal("VRAM -> card -> VRAM changed the data")
	}
	ram, err := guest.NewDMABuffer(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer ram.Close()
	var segs []sgl.Segment
	for _, p := range ram.Phys {
		segs = append(segs, sgl.Segment{Addr: p, Len: 4096})
	}
	if st := e.run(xdma.C2H, 0, segs, xdma.ChainSpec{CardAddr: 0x100000}); st != done {
		t.Fatalf("C2H card -> RAM: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	if !bytes.Equal(ram.Mem, srcMem[:len(ram.Mem)]) {
		t.Fatal("card -> guest RAM: data differs")
	}
	// The stream channel: frames from the acquisition source.
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	if st := e.run(xdma.C2H, 1, segs, xdma.ChainSpec{Stream: true, EOP: xdma.EOPEach}); st != done {
		t.Fatalf("C2H stream -> RAM: %s", xdma.DecodeStatus(xdma.C2H, 1, st))
	}
	var chk frame.Checker
	for off := 0; off < len(ram.Mem); off += 4096 {
		if _, err := chk.Check(ram.Mem[off : off+4096]); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ctl.SourceStats()
	if err != nil {
		t.Fatal(err)
	}
	if chk.Frames != 16 || chk.Gaps != 0 || st.Delivered != 16 || st.Dropped != 0 {
		t.Fatalf("frames %+v, source %+v", chk.Stats, st)
	}
	if late := must[uint64](t)(ctl.LateWrites()); late != 0 {
		t.Fatalf("%d late writes", late)
	}
}

func TestInjectedFaults(t *testing.T) {
	g := openGPU(t)
	e := newEngine(t)
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	a := must[*simgpu.Alloc](t)(g.Alloc(256<<10, simgpu.Fragmented, 0))
	table := must[[]uint64](t)(a.Table())
	segs := segments(t, table, 256<<10)
	for _, tc := range []struct {
		fault xdmamodel.Fault
		want  uint32
	}{
		{xdmamodel.FaultBadMagic, xdma.StatMagicStopped},
		{xdmamodel.FaultDescRead, xdma.ErrCodeUnsupportedRequest << 19},
		{xdmamodel.FaultDataRead, xdma.ErrCodeCompleterAbort << 9},
		{xdmamodel.FaultDataWrite, xdma.ErrCodeCompleterAbort << 14},
	} {
		if err := ctl.InjectFault(xdma.C2H, 0, tc.fault); err != nil {
			t.Fatal(err)
		}
		if st := e.run(xdma.C2H, 0, segs, xdma.ChainSpec{}); st != tc.want {
			t.Errorf("%v: %s, want %s", tc.fault, xdma.DecodeStatus(xdma.C2H, 0, st), xdma.DecodeStatus(xdma.C2H, 0, tc.want))
		}
	}
	// A stall keeps the channel busy until software halts it.
	if err := ctl.InjectFault(xdma.H2C, 0, xdmamodel.FaultStall); err != nil {
		t.Fatal(err)
	}
	c := must[xdma.Chain](t)(xdma.BuildChain(e.descs.Mem, e.descs.Phys[0], segs, xdma.ChainSpec{Dir: xdma.H2C}))
	xdma.Start(e.regs, xdma.H2C, 0, c, xdma.ControlDefault)
	for range 100 {
		if st := e.regs.ReadReg(xdma.Base(xdma.TargetH2C, 0) + xdma.RegStatus); st != xdma.CtrlRun {
			t.Fatalf("stalled channel: %s", xdma.DecodeStatus(xdma.H2C, 0, st))
		}
	}
	// Halted, it ends idle-stopped; a card may show that, and BUSY going,
	// over several reads (the suite may run with xdmamodel's quirks).
	st := xdma.Halt(e.regs, xdma.H2C, 0)
	for i := 0; st&xdma.CtrlRun != 0 && i < 10; i++ {
		st = st&^xdma.CtrlRun | e.regs.ReadReg(xdma.Base(xdma.TargetH2C, 0)+xdma.RegStatusRC)
	}
	if st != xdma.StatIdleStopped {
		t.Fatalf("halted stall: %s", xdma.DecodeStatus(xdma.H2C, 0, st))
	}
	// Link down: every register reads all ones until it comes back.
	if err := ctl.SetLinkDown(true); err != nil {
		t.Fatal(err)
	}
	if v := e.regs.ReadReg(xdma.Base(xdma.TargetH2C, 0)); !xdma.LinkDown(v) {
		t.Fatalf("link down: identifier reads %#x", v)
	}
	if err := ctl.SetLinkDown(false); err != nil {
		t.Fatal(err)
	}
	if st := e.run(xdma.C2H, 0, segs, xdma.ChainSpec{}); st&xdma.StatErrorMask != 0 {
		t.Fatalf("after the faults: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
}

func TestKernelLogClean(t *testing.T) {
	guest.Require(t)
	guest.CheckDmesg(t)
	if _, err := os.Stat("/dev/nvp2p_sim"); err == nil {
		t.Error("nvp2p_sim still loaded after its tests")
	}
}
