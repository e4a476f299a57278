package xdmamodel_test

import (
	"encoding/binary"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// startC2H runs a two-page chain on C2H channel 0 to its end with the stop
// and error interrupts on vector 7.
func (r *rig) startC2H(t *testing.T) uint32 {
	t.Helper()
	irq := xdma.Base(xdma.TargetIRQ, 0)
	r.e.WriteReg(irq+xdma.RegChanVector, 7<<16)
	r.e.WriteReg(irq+xdma.RegChanIntEnableW1S, 1<<2)
	ch := xdma.Base(xdma.TargetC2H, 0)
	r.e.WriteReg(ch+xdma.RegIntEnable, xdma.StatDescStopped|xdma.StatErrorMask)
	segs := r.segments(t, 0, 2*sgl.PageSize64K, sgl.Limits{})
	c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H})
	must(t, err)
	xdma.Start(r.e, xdma.C2H, 0, c, xdma.ControlDefault)
	r.e.RunUntilIdle()
	return ch
}

func TestQuirkLateBusy(t *testing.T) {
	r := newRig(t, 2)
	must(t, r.e.SetQuirks(xdmamodel.QuirkLateBusy))
	ch := r.startC2H(t)
	if r.e.Busy() {
		t.Fatal("the engine still moves data")
	}
	end := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
	want := []uint32{xdma.CtrlRun | end}
	for range xdmamodel.LateBusyReads - 1 {
		want = append(want, xdma.CtrlRun)
	}
	want = append(want, 0)
	for i, w := range want {
		if st := r.e.ReadReg(ch + xdma.RegStatusRC); st != w {
			t.Fatalf("read %d: %s, want %s", i, xdma.DecodeStatus(xdma.C2H, 0, st), xdma.DecodeStatus(xdma.C2H, 0, w))
		}
	}
}

// TestQuirkLateBusyEndsWithNewChain: a chain started while BUSY still
// lingers from the last one shows its own state, not the leftover.
func TestQuirkLateBusyEndsWithNewChain(t *testing.T) {
	r := newRig(t, 2)
	must(t, r.e.SetQuirks(xdmamodel.QuirkLateBusy))
	ch := r.startC2H(t)
	r.e.ReadReg(ch + xdma.RegStatusRC) // BUSY lingers for the reads after
	// Stalled, the next chain stays busy: BUSY is its own.
	must(t, r.e.InjectFault(xdma.C2H, 0, xdmamodel.FaultStall))
	r.e.WriteReg(ch+xdma.RegControlW1C, xdma.CtrlRun)
	r.startC2H(t)
	for i := range xdmamodel.LateBusyReads + 1 {
		if st := r.e.ReadReg(ch + xdma.RegStatus); st != xdma.CtrlRun {
			t.Fatalf("read %d of a running chain: %s", i, xdma.DecodeStatus(xdma.C2H, 0, st))
		}
	}
	// Stopped by RUN, it is idle once the lag has passed, and only then.
	r.e.WriteReg(ch+xdma.RegControlW1C, xdma.CtrlRun)
	for range xdmamodel.LateBusyReads {
		if st := r.e.ReadReg(ch + xdma.RegStatus); st&xdma.CtrlRun == 0 {
			t.Fatalf("BUSY cleared at once after the stop: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
		}
	}
	if st := r.e.ReadReg(ch + xdma.RegStatus); st&xdma.CtrlRun != 0 {
		t.Fatalf("BUSY past the lag: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
}

func TestQuirkSplitStatus(t *testing.T) {
	r := newRig(t, 2)
	must(t, r.e.SetQuirks(xdmamodel.QuirkSplitStatus))
	ch := r.startC2H(t)
	// The completion is logged but not enabled: no interrupt yet.
	if len(r.raised) != 0 {
		t.Fatalf("raised %v before the stop showed", r.raised)
	}
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st != xdma.StatDescCompleted {
		t.Fatalf("first read: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	// The stop arrives with that read, and raises its interrupt.
	if len(r.raised) != 1 || r.raised[0] != 7 {
		t.Fatalf("raised %v, want [7]", r.raised)
	}
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st != xdma.StatDescStopped {
		t.Fatalf("second read: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st != 0 {
		t.Fatalf("third read: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
}

func TestQuirkIdleWithoutCredits(t *testing.T) {
	for _, q := range []xdmamodel.Quirk{0, xdmamodel.QuirkIdleWithoutCredits} {
		t.Run(q.String(), func(t *testing.T) {
			r := newRig(t, 4)
			must(t, r.e.SetQuirks(q))
			common := xdma.Base(xdma.TargetSGDMACommon, 0)
			r.e.WriteReg(common+xdma.RegCreditModeW1S, 1<<16)
			segs := r.segments(t, 0, 4*sgl.PageSize64K, sgl.Limits{})
			c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H})
			must(t, err)
			xdma.Start(r.e, xdma.C2H, 0, c, xdma.ControlDefault)
			r.e.WriteReg(xdma.Base(xdma.TargetC2HSGDMA, 0)+xdma.RegDescCredits, 2)
			r.e.RunUntilIdle()
			st := r.e.ReadReg(xdma.Base(xdma.TargetC2H, 0) + xdma.RegStatus)
			if busy := st&xdma.CtrlRun != 0; busy != (q == 0) {
				t.Fatalf("waiting for credits: %s", xdma.DecodeStatus(xdma.C2H, 0, st))
			}
			r.e.WriteReg(xdma.Base(xdma.TargetC2HSGDMA, 0)+xdma.RegDescCredits, 2)
			r.e.RunUntilIdle()
			if n := r.e.ReadReg(xdma.Base(xdma.TargetC2H, 0) + xdma.RegCompletedCount); n != 4 {
				t.Fatalf("%d descriptors completed, want 4", n)
			}
		})
	}
}

func TestParseQuirks(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want xdmamodel.Quirk
		err  bool
	}{
		{"", 0, false},
		{"none", 0, false},
		{"late-busy,split-status", xdmamodel.QuirkLateBusy | xdmamodel.QuirkSplitStatus, false},
		{"all", xdmamodel.AllQuirks, false},
		{"late-busy,bogus", 0, true},
	} {
		q, err := xdmamodel.ParseQuirks(tc.in)
		if (err != nil) != tc.err || q != tc.want {
			t.Errorf("ParseQuirks(%q) = %v, %v; want %v, error %v", tc.in, q, err, tc.want, tc.err)
		}
		if err == nil {
			if back, _ := xdmamodel.ParseQuirks(q.String()); back != q {
				t.Errorf("%v does not parse back: %v", q, back)
			}
		}
	}
	r := newRig(t, 1)
	if err := r.e.SetQuirks(xdmamodel.AllQuirks << 1); err == nil {
		t.Error("an unknown quirk bit was accepted")
	}
}

// TestQuirkSplitStatusUnread: the stop shows by itself, with its
// interrupt, when nothing reads the status in between.
func TestQuirkSplitStatusUnread(t *testing.T) {
	r := newRig(t, 2)
	must(t, r.e.SetQuirks(xdmamodel.QuirkSplitStatus))
	ch := r.startC2H(t) // RunUntilIdle's last, idle step counts one
	if !r.e.Busy() || len(r.raised) != 0 {
		t.Fatalf("the stop showed before its time: busy %v, raised %v", r.e.Busy(), r.raised)
	}
	for range xdmamodel.SplitSteps - 2 {
		r.e.Step()
	}
	if len(r.raised) != 0 {
		t.Fatalf("the stop showed a step early: raised %v", r.raised)
	}
	r.e.Step()
	if len(r.raised) != 1 || r.raised[0] != 7 {
		t.Fatalf("raised %v, want [7]", r.raised)
	}
	end := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st != end {
		t.Fatalf("status %s", xdma.DecodeStatus(xdma.C2H, 0, st))
	}
	if r.e.Busy() {
		t.Fatal("busy after the stop showed")
	}
}

// TestQuirkLateInterrupt: the message comes LateIRQSteps steps after the
// chain's end, with the data and the status already there; a status read
// meanwhile drops the request but not the message.
func TestQuirkLateInterrupt(t *testing.T) {
	r := newRig(t, 2)
	must(t, r.e.SetQuirks(xdmamodel.QuirkLateInterrupt))
	r.e.SetInterruptMode(xdmamodel.InterruptMSIX)
	ch := r.startC2H(t)
	if len(r.raised) != 0 {
		t.Fatalf("raised %v at the chain's end, want none yet", r.raised)
	}
	if !r.e.Busy() {
		t.Fatal("Busy is false with a message still to send: nobody would step the engine")
	}
	if st := r.e.ReadReg(ch + xdma.RegStatusRC); st&xdma.StatDescStopped == 0 {
		t.Fatalf("status %#x before the interrupt, want the stop", st)
	}
	for range xdmamodel.LateIRQSteps {
		r.e.Step()
	}
	if len(r.raised) != 1 || r.raised[0] != 7 {
		t.Fatalf("raised %v, want one message on vector 7", r.raised)
	}
	if r.e.Busy() {
		t.Fatal("Busy with nothing left to send")
	}
}

// TestQuirkLateCount: a stream descriptor's result is in memory before
// the completed count has it, however long the engine idles; one read of
// the count misses it, the next (or after a status read) sees it.
func TestQuirkLateCount(t *testing.T) {
	for _, catchUp := range []string{"count", "status"} {
		t.Run(catchUp, func(t *testing.T) {
			r := newRig(t, 1)
			must(t, r.e.SetQuirks(xdmamodel.QuirkLateCount))
			r.source.packets = append(r.source.packets, make([]byte, 4096))
			segs := r.segments(t, 0, 4096, sgl.Limits{})
			c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resBase})
			must(t, err)
			xdma.Start(r.e, xdma.C2H, 1, c, xdma.ControlDefault)
			result := r.desc[resBase-descBase:]
			for steps := 0; binary.LittleEndian.Uint32(result) == 0; steps++ {
				if steps > 100 || !r.e.Step() {
					t.Fatal("no result written")
				}
			}
			ch := xdma.Base(xdma.TargetC2H, 1)
			r.e.RunUntilIdle() // steps alone leave it out
			switch catchUp {
			case "count":
				if n := r.e.ReadReg(ch + xdma.RegCompletedCount); n != 0 {
					t.Fatalf("the count has the descriptor with its result: %d", n)
				}
			case "status":
				r.e.ReadReg(ch + xdma.RegStatus)
			}
			if n := r.e.ReadReg(ch + xdma.RegCompletedCount); n != 1 {
				t.Fatalf("after a %s: count %d, want 1", catchUp, n)
			}
		})
	}
}

// TestQuirkStickyCount: the count leaves the last completion out whatever
// is read, until the next descriptor completes or the channel stops.
func TestQuirkStickyCount(t *testing.T) {
	r := newRig(t, 1)
	must(t, r.e.SetQuirks(xdmamodel.QuirkStickyCount))
	r.source.packets = append(r.source.packets, make([]byte, 4096), make([]byte, 4096))
	segs := r.segments(t, 0, 8192, sgl.Limits{MaxSegment: 4096})
	c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resBase})
	must(t, err)
	xdma.Start(r.e, xdma.C2H, 1, c, xdma.ControlDefault)
	ch := xdma.Base(xdma.TargetC2H, 1)
	written := func(i int) bool {
		return binary.LittleEndian.Uint32(r.desc[resBase-descBase+i*xdma.ResultSize:])>>16 == xdma.ResultMagic
	}
	for steps := 0; !written(0); steps++ {
		if steps > 100 || !r.e.Step() {
			t.Fatal("no result written")
		}
	}
	for i := 0; i < 3; i++ {
		r.e.ReadReg(ch + xdma.RegStatus)
		if n := r.e.ReadReg(ch + xdma.RegCompletedCount); n != 0 {
			t.Fatalf("read %d: count %d with only the first result written, want 0", i, n)
		}
	}
	for steps := 0; !written(1); steps++ {
		if steps > 100 || !r.e.Step() {
			t.Fatal("no second result written")
		}
	}
	r.e.RunUntilIdle() // the chain stops
	if n := r.e.ReadReg(ch + xdma.RegCompletedCount); n != 2 {
		t.Fatalf("a stopped channel's count %d, want 2", n)
	}
}
