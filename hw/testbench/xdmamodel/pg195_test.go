package xdmamodel_test

import (
	"encoding/binary"
	"testing"

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
