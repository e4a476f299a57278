//go:build vmguest

package kmodtest

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// watchdogPeriod is the driver's timeout_ms, the period of a stream's
// watchdog.
func watchdogPeriod(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/sys/module/gpufpga/parameters/timeout_ms")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// withQuirks makes the simulated card show q until the test ends.
func withQuirks(t *testing.T, q xdmamodel.Quirk) {
	t.Helper()
	ctl := control(t)
	was, err := ctl.SetQuirks(q)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ctl.SetQuirks(was); err != nil {
			t.Error(err)
		}
	})
}

// TestStatusAcrossReads runs transfers on a card that reports a chain's
// end the ways PG195 allows besides the kindest: BUSY still set when the
// stop is read, the completion and the stop in different reads, and the
// interrupt late, after the status is there to read. Every
// transfer completes with its data (none ends by the watchdog's timeout),
// and the status it reports holds every bit the engine logged.
func TestStatusAcrossReads(t *testing.T) {
	for _, q := range []xdmamodel.Quirk{
		xdmamodel.QuirkLateBusy,
		xdmamodel.QuirkSplitStatus,
		xdmamodel.QuirkLateBusy | xdmamodel.QuirkSplitStatus,
		xdmamodel.QuirkLateInterrupt,
		xdmamodel.AllQuirks,
	} {
		t.Run(q.String(), func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			withQuirks(t, q)
			src := alloc(t, g, 1<<20, simgpu.Fragmented)
			dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
			srcMem, _ := src.Bytes()
			dstMem, _ := dst.Bytes()
			fill(srcMem, 7)
			ps := pinGPU(t, d, src.VA, src.Size)
			pd := pinGPU(t, d, dst.VA, dst.Size)
			want := uint32(xdma.StatDescStopped | xdma.StatDescCompleted)
			for i := range 8 {
				c := ctx(t)
				card := uint64(i) << 20
				res, err := d.Transfer(c, p2p.Transfer{Dir: p2p.H2C, CardAddr: card, Segments: []p2p.Segment{ps.Whole()}})
				if err != nil || res.Status&want != want {
					t.Fatalf("H2C %d: status %#x, %v", i, res.Status, err)
				}
				clear(dstMem)
				res, err = d.Transfer(c, p2p.Transfer{Dir: p2p.C2H, CardAddr: card, Segments: []p2p.Segment{pd.Whole()}})
				if err != nil || res.Status&want != want {
					t.Fatalf("C2H %d: status %#x, %v", i, res.Status, err)
				}
				if !bytes.Equal(dstMem, srcMem) {
					t.Fatalf("round trip %d changed the data", i)
				}
			}
		})
	}
}

// TestStreamWaitsWithoutBusy holds every slot of a stream on a card that
// reports idle while it waits for credits: the stream must wait, not end,
// and deliver every frame in order once the slots come back.
func TestStreamWaitsWithoutBusy(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	withQuirks(t, xdmamodel.QuirkIdleWithoutCredits|xdmamodel.QuirkLateBusy|xdmamodel.QuirkSplitStatus)
	ctl := control(t)
	const slot = 4096
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	_, _, mem, slots := ring(t, d, g, 8, slot)
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	for range 8 {
		select {
		case sl, ok := <-s.Slots():
			if !ok {
				t.Fatalf("stream ended while its slots were held: %v", s.Err())
			}
			held = append(held, sl.Index)
		case <-time.After(20 * time.Second):
			t.Fatal("the ring did not fill")
		}
	}
	// Long enough for the interrupt of the last slot, and a watchdog
	// period, to see the engine idle.
	time.Sleep(watchdogPeriod(t) * 3 / 2)
	if err := s.Err(); err != nil {
		t.Fatalf("stream ended while it waited for credits: %v", err)
	}
	var chk frame.Checker
	check := func(i int, n uint64) {
		if _, err := chk.Check(mem[i*slot : i*slot+int(n)]); err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
	}
	for _, i := range held {
		check(i, slot)
	}
	if err := s.Release(held...); err != nil {
		t.Fatal(err)
	}
	for chk.Frames < 64 {
		sl, ok := <-s.Slots()
		if !ok {
			t.Fatalf("stream ended after %d frames: %v", chk.Frames, s.Err())
		}
		check(sl.Index, sl.Bytes)
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if s.Err() != nil || chk.Gaps != 0 || chk.CRCFailures != 0 {
		t.Fatalf("stream ended %v: %+v", s.Err(), chk.Stats)
	}
}

// TestAlignments binds the FPGA as builds that report other ALIGNMENTS
// (PG195: address alignment, length granularity, address bits) and runs
// transfers and a stream: aligned work moves its data, misaligned work is
// refused with EINVAL before it reaches the engine, and the engine (which
// fails any descriptor its alignments forbid and counts it) counts none.
func TestAlignments(t *testing.T) {
	setup(t)
	bdf := fpgaBDF(t)
	ctl := control(t)
	for _, a := range []xdma.Alignments{
		{Addr: 1, Len: 1, Bits: 64},
		{Addr: 64, Len: 64, Bits: 64},
		{Addr: 8, Len: 8, Bits: 64},
		{Addr: 64, Len: 64, Bits: 32},
	} {
		t.Run(a.String(), func(t *testing.T) {
			before, err := ctl.Violations()
			if err != nil {
				t.Fatal(err)
			}
			was, err := ctl.SetAlignments(a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := ctl.SetAlignments(was); err != nil {
					t.Error(err)
				}
				rebind(t, bdf)
			})
			rebind(t, bdf)
			alignedWork(t, a)
			if n, err := ctl.Violations(); err != nil || n != before {
				t.Fatalf("the engine was handed %d descriptors its alignments forbid (%v)", n-before, err)
			}
		})
	}
}

func alignedWork(t *testing.T, a xdma.Alignments) {
	t.Helper()
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g := openGPU(t)
	src := alloc(t, g, 1<<20, simgpu.Fragmented)
	dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
	srcMem, _ := src.Bytes()
	dstMem, _ := dst.Bytes()
	fill(srcMem, 9)
	ps := pinGPU(t, d, src.VA, src.Size)
	pd := pinGPU(t, d, dst.VA, dst.Size)
	xfer := func(dir p2p.Direction, card uint64, seg p2p.Segment) error {
		_, err := d.Transfer(ctx(t), p2p.Transfer{Dir: dir, CardAddr: card, Segments: []p2p.Segment{seg}})
		return err
	}
	// Aligned: a whole run, and a window at an aligned offset.
	if err := xfer(p2p.H2C, 0, ps.Whole()); err != nil {
		t.Fatalf("aligned H2C: %v", err)
	}
	if err := xfer(p2p.C2H, 0, pd.Whole()); err != nil {
		t.Fatalf("aligned C2H: %v", err)
	}
	if !bytes.Equal(dstMem, srcMem) {
		t.Fatal("aligned round trip changed the data")
	}
	off, n := uint64(3*int(a.Addr)), uint64(1000*int(a.Len))
	if err := xfer(p2p.C2H, off, p2p.Segment{Pin: pd, Offset: off, Len: n}); err != nil {
		t.Fatalf("aligned window: %v", err)
	}
	if !bytes.Equal(dstMem[off:off+n], srcMem[off:off+n]) {
		t.Fatal("aligned window changed the data")
	}
	if a.Addr > 1 {
		for _, tc := range []struct {
			name string
			card uint64
			seg  p2p.Segment
		}{
			{"bus address", 0, p2p.Segment{Pin: pd, Offset: 1, Len: uint64(a.Len) * 4}},
			{"card address", 1, p2p.Segment{Pin: pd, Offset: 0, Len: uint64(a.Len) * 4}},
			{"length", 0, p2p.Segment{Pin: pd, Offset: 0, Len: uint64(a.Len)*4 + 1}},
		} {
			if tc.name == "length" && a.Len == 1 {
				continue
			}
			err := xfer(p2p.C2H, tc.card, tc.seg)
			var e *p2p.Error
			if !errors.As(err, &e) || e.Err != unix.EINVAL {
				t.Errorf("misaligned %s: %v, want EINVAL", tc.name, err)
			}
		}
		// A stream's slot, at an offset the engine cannot write to.
		_, err := d.StartStream(1, []p2p.Segment{{Pin: pd, Offset: 1, Len: 4096}})
		var e *p2p.Error
		if !errors.As(err, &e) || e.Err != unix.EINVAL {
			t.Errorf("misaligned stream slot: %v, want EINVAL", err)
		}
	}
	// A stream of aligned slots runs.
	const slot = 4096
	var slots []p2p.Segment
	for i := range 8 {
		slots = append(slots, p2p.Segment{Pin: pd, Offset: uint64(i) * slot, Len: slot})
	}
	streamFrames(t, d, dstMem, slots, 32)
}

// TestProbeClearsLeftoverState binds the FPGA after something else (a
// previous driver, firmware, a kexec'd kernel) left credit mode and the
// descriptor halt set on every channel: probe clears both, and transfers
// and a stream work.
func TestProbeClearsLeftoverState(t *testing.T) {
	setup(t)
	bdf := fpgaBDF(t)
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/unbind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	regs, err := rigctl.OpenRegisters()
	if err != nil {
		t.Fatal(err)
	}
	common := xdma.Base(xdma.TargetSGDMACommon, 0)
	regs.WriteReg(common+xdma.RegCreditModeW1S, 0x000F000F)
	regs.WriteReg(common+xdma.RegDescHaltW1S, 0x000F000F)
	if v := regs.ReadReg(common + xdma.RegDescHalt); v != 0x000F000F {
		t.Fatalf("descriptor halt %#x before probe", v)
	}
	// Binding claims the BAR, which revokes this mapping: no access after.
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	// Halted descriptor fetch or credit mode without credits would leave
	// every transfer to time out.
	transfersAndStream(t)
}

// TestQueuedChains queues transfers of several descriptors each, back to
// back, so that each completion starts the next chain from the ring it
// was built into beforehand, on the kindest card and on one with every
// quirk. Every transfer completes with its bytes, and each lands where it
// was sent.
func TestQueuedChains(t *testing.T) {
	const n, size = 24, 192 << 10
	for _, q := range []xdmamodel.Quirk{0, xdmamodel.AllQuirks} {
		t.Run(q.String(), func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			withQuirks(t, q)
			src := alloc(t, g, 4<<20, simgpu.Fragmented)
			dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
			srcMem, _ := src.Bytes()
			dstMem, _ := dst.Bytes()
			fill(srcMem, 11)
			ps := pinGPU(t, d, src.VA, src.Size)
			pd := pinGPU(t, d, dst.VA, dst.Size)
			offset := func(i int) uint64 { return uint64(i) * (size + 4096) % (src.Size - size) }
			for i := range n {
				seg := p2p.Segment{Pin: ps, Offset: offset(i), Len: size}
				if _, err := d.Submit(p2p.Transfer{Dir: p2p.H2C, CardAddr: uint64(i) << 20, Segments: []p2p.Segment{seg}}, uint64(i)); err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
			}
			c := ctx(t)
			for range n {
				select {
				case done := <-d.Completions():
					if done.Err != nil || done.Bytes != size {
						t.Fatalf("transfer %d: %d bytes, %v", done.UserData, done.Bytes, done.Err)
					}
				case <-c.Done():
					t.Fatal("transfers did not complete")
				}
			}
			for i := range n {
				clear(dstMem)
				seg := p2p.Segment{Pin: pd, Len: size}
				if _, err := d.Transfer(c, p2p.Transfer{Dir: p2p.C2H, CardAddr: uint64(i) << 20, Segments: []p2p.Segment{seg}}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dstMem[:size], srcMem[offset(i):offset(i)+size]) {
					t.Fatalf("transfer %d: the card holds other data", i)
				}
			}
		})
	}
}
