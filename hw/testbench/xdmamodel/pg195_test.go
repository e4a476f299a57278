package xdmamodel_test

import (
	"encoding/binary"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// TestStatusWriteOneToClear: the status register at 0x40 is RW1C (PG195):
// a write clears the bits written as ones and no others.
func TestStatusWriteOneToClear(t *testing.T) {
	r := newRig(t, 2)
	ch := r.startC2H(t)
	end := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
	if st := r.e.ReadReg(ch + xdma.RegStatus); st != end {
		t.Fatalf("status %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	r.e.WriteReg(ch+xdma.RegStatus, xdma.StatDescCompleted)
	if st := r.e.ReadReg(ch + xdma.RegStatus); st != xdma.StatDescStopped {
		t.Fatalf("after clearing the completion: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
}

// TestChannelInterruptEnableHoldsChannels: the channel interrupt enable
// has one bit per channel the engine has; the rig has four.
func TestChannelInterruptEnableHoldsChannels(t *testing.T) {
	r := newRig(t, 1)
	irq := xdma.Base(xdma.TargetIRQ, 0)
	r.e.WriteReg(irq+xdma.RegChanIntEnableW1S, 0xFFFFFFFF)
	if v := r.e.ReadReg(irq + xdma.RegChanIntEnable); v != 0xF {
		t.Fatalf("enable %#x, want 0xf", v)
	}
	r.e.WriteReg(irq+xdma.RegChanIntEnable, 0xFFFFFFF1)
	if v := r.e.ReadReg(irq + xdma.RegChanIntEnable); v != 0x1 {
		t.Fatalf("enable %#x, want 0x1", v)
	}
}

// TestPollWritebackNeedsCompletionEnable: the poll-mode writeback is
// written on a descriptor's completion, which control bit 2 enables.
func TestPollWritebackNeedsCompletionEnable(t *testing.T) {
	for _, tc := range []struct {
		control uint32
		written bool
	}{
		{xdma.ControlDefault | xdma.CtrlPollModeWB, true},
		{(xdma.ControlDefault | xdma.CtrlPollModeWB) &^ xdma.StatDescCompleted, false},
	} {
		r := newRig(t, 2)
		ch := xdma.Base(xdma.TargetC2H, 0)
		r.e.WriteReg(ch+xdma.RegPollWBLo, wbAddr)
		binary.LittleEndian.PutUint32(r.desc[wbAddr-descBase:], 0xDEAD)
		segs := r.segments(t, 0, 2*sgl.PageSize64K, sgl.Limits{})
		c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H})
		must(t, err)
		xdma.Start(r.e, xdma.C2H, 0, c, tc.control)
		r.e.RunUntilIdle()
		wb := binary.LittleEndian.Uint32(r.desc[wbAddr-descBase:])
		if written := wb != 0xDEAD; written != tc.written {
			t.Errorf("control %#x: writeback %#x, written %v, want %v", tc.control, wb, written, tc.written)
		}
	}
}

// TestAlignmentViolations: under a build's ALIGNMENTS every descriptor
// whose addresses or length break them fails its chain with the status
// PG195 gives and counts as a violation, on each kind of channel; aligned
// work counts none.
func TestAlignmentViolations(t *testing.T) {
	const mismatch = xdma.StatAlignMismatch
	const unreachable = xdma.ErrCodeUnsupportedRequest << 19 // descriptor error field
	aligned := xdma.Alignments{Addr: 64, Len: 64, Bits: 64}
	narrow := xdma.Alignments{Addr: 64, Len: 64, Bits: 32}
	for _, tc := range []struct {
		name   string
		align  xdma.Alignments
		dir    xdma.Direction
		ch     int
		bus    uint64 // offset into VRAM
		card   uint64
		n      uint64
		status uint32 // 0: the chain completes
	}{
		{"H2C mm aligned", aligned, xdma.H2C, 0, 64, 128, 256, 0},
		{"H2C mm bus", aligned, xdma.H2C, 0, 1, 128, 256, mismatch},
		{"H2C mm card", aligned, xdma.H2C, 0, 64, 129, 256, mismatch},
		{"H2C mm length", aligned, xdma.H2C, 0, 64, 128, 257, mismatch},
		{"C2H mm aligned", aligned, xdma.C2H, 0, 64, 128, 256, 0},
		{"C2H mm bus", aligned, xdma.C2H, 0, 8, 128, 256, mismatch},
		{"C2H mm card", aligned, xdma.C2H, 0, 64, 8, 256, mismatch},
		{"H2C stream bus", aligned, xdma.H2C, 1, 32, 0, 256, mismatch},
		{"C2H stream bus", aligned, xdma.C2H, 1, 32, 0, 256, mismatch},
		{"C2H mm past the address bits", narrow, xdma.C2H, 0, 64, 128, 256, unreachable},
		{"H2C stream past the address bits", narrow, xdma.H2C, 1, 64, 0, 256, unreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 2)
			must(t, r.e.SetAlignments(tc.align))
			if got := xdma.DecodeAlignments(r.e.ReadReg(xdma.Base(tc.dir.ChannelTarget(), tc.ch) + xdma.RegAlignments)); got != tc.align {
				t.Fatalf("ALIGNMENTS reads %v, want %v", got, tc.align)
			}
			segs := []sgl.Segment{{Addr: vramBase + tc.bus, Len: tc.n}}
			spec := xdma.ChainSpec{CardAddr: tc.card, Stream: tc.ch == 1}
			if tc.ch == 1 && tc.dir == xdma.C2H {
				spec.Results = resBase
			}
			st := r.run(t, tc.dir, tc.ch, segs, spec, xdma.ControlDefault)
			want := uint32(0)
			if tc.status != 0 {
				want = 1
			}
			if st&(xdma.StatErrorMask) != tc.status || uint64(want) != r.e.Violations() {
				t.Fatalf("status %s, %d violations; want errors %#x", xdma.DecodeStatus(tc.dir, tc.ch, st), r.e.Violations(), tc.status)
			}
		})
	}
	// A descriptor fetch past the address bits is one too.
	r := newRig(t, 1)
	must(t, r.e.SetAlignments(narrow))
	xdma.Start(r.e, xdma.H2C, 0, xdma.Chain{Addr: 1 << 32}, xdma.ControlDefault)
	r.e.RunUntilIdle()
	st := r.e.ReadReg(xdma.Base(xdma.TargetH2C, 0) + xdma.RegStatusRC)
	if st&xdma.StatErrorMask != unreachable || r.e.Violations() != 1 {
		t.Fatalf("fetch past the address bits: %s, %d violations", xdma.DecodeStatus(xdma.H2C, 0, st), r.e.Violations())
	}
	if err := r.e.SetAlignments(xdma.Alignments{Addr: 3, Len: 1, Bits: 64}); err == nil {
		t.Error("an alignment that is not a power of two was accepted")
	}
}

// TestPerfCounters: PG195's performance monitor counts a channel's cycles
// and data beats while it runs (Auto) or from Run on, holds them once the
// channel stops, and Clear zeroes them.
func TestPerfCounters(t *testing.T) {
	r := newRig(t, 2)
	ch := xdma.Base(xdma.TargetC2H, 0)
	read := func() (cycles, beats uint64) {
		cycles = uint64(r.e.ReadReg(ch+xdma.RegPerfCycleHi)&0x3ff)<<32 | uint64(r.e.ReadReg(ch+xdma.RegPerfCycleLo))
		beats = uint64(r.e.ReadReg(ch+xdma.RegPerfDataHi)&0x3ff)<<32 | uint64(r.e.ReadReg(ch+xdma.RegPerfDataLo))
		return
	}
	r.startC2H(t)
	if c, b := read(); c != 0 || b != 0 {
		t.Fatalf("counted %d cycles and %d beats with the monitor off", c, b)
	}
	r.e.WriteReg(ch+xdma.RegPerfControl, xdma.PerfAuto)
	r.e.WriteReg(ch+xdma.RegControlW1C, xdma.CtrlRun)
	r.startC2H(t)
	const beats = 2 * sgl.PageSize64K / xdmamodel.PerfBeatBytes
	c, b := read()
	if b != beats || c < b {
		t.Fatalf("%d cycles and %d beats for two 64 KiB pages, want %d beats and at least as many cycles", c, b, beats)
	}
	r.e.Step()
	if c2, b2 := read(); c2 != c || b2 != b {
		t.Fatalf("counters moved to %d and %d on a stopped channel", c2, b2)
	}
	if got := r.e.ReadReg(ch + xdma.RegPerfControl); got != xdma.PerfAuto {
		t.Fatalf("control reads %#x, want %#x", got, xdma.PerfAuto)
	}
	r.e.WriteReg(ch+xdma.RegPerfControl, xdma.PerfClear)
	if c, b := read(); c != 0 || b != 0 {
		t.Fatalf("%d cycles and %d beats after Clear", c, b)
	}
}

// TestResetForgetsAddresses: after a reset (FLR, or D3hot to D0 without
// No_Soft_Reset) the engine's address registers hold their reset values;
// a chain started before the driver programs them again is a violation
// and touches no memory.
func TestResetForgetsAddresses(t *testing.T) {
	r := newRig(t, 2)
	r.startC2H(t)
	if v := r.e.Violations(); v != 0 {
		t.Fatalf("%d violations before the reset", v)
	}
	r.e.Reset()
	ch := xdma.Base(xdma.TargetC2H, 0)
	r.e.WriteReg(ch+xdma.RegControl, xdma.ControlDefault|xdma.CtrlRun)
	r.e.RunUntilIdle()
	if v := r.e.Violations(); v != 1 {
		t.Fatalf("%d violations for a chain started at the reset address, want 1", v)
	}
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st&xdma.StatErrorMask == 0 {
		t.Fatalf("status %#x: the chain did not fail", st)
	}
}
