//go:build vmguest

package kmodtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Card addresses the traffic uses: what the memory-mapped reads fetch
// (written before the traffic starts) and where its writes go.
const (
	trafficReadAddr  = 32 << 20
	trafficWriteAddr = 8 << 20
	trafficMMLen     = 1 << 20
	trafficMMDepth   = 16
	trafficSlot      = 4096
	trafficSlots     = 8
)

// trafficXfer is one transfer of the traffic and what its data must be.
type trafficXfer struct {
	name string
	tf   p2p.Transfer
	dst  []byte // C2H: where the data lands
	want []byte // C2H: what it must be; H2C 0: what the card must hold
	done bool
	err  error
}

// traffic is work on every channel for a lifecycle event to meet:
// memory-mapped transfers queued on H2C 0 and C2H 0, frames going out
// through H2C 1 into the checking sink, and a stream on C2H 1 whose slots
// a consumer checks and gives back. Its memory is pinned once; start
// submits its work again.
type traffic struct {
	d       *p2p.Device
	g       *simgpu.GPU
	work    []*trafficXfer
	xfers   map[uint64]*trafficXfer
	ring    []byte
	pin     *p2p.Pin // the stream's slots
	stream  *p2p.Stream
	slotsIn chan int // slots delivered, counted by the consumer
	// consumed is closed when the consumer ends, with the stream, leaving
	// its check's result in consumeErr.
	consumed   chan struct{}
	consumeErr error
}

// newTraffic pins the traffic's memory and writes what its reads fetch.
func newTraffic(t *testing.T, d *p2p.Device, g *simgpu.GPU) *traffic {
	t.Helper()
	ctl := control(t)
	// A steady source, slower than the engine: the stream's transfer is
	// in flight most of the time.
	if err := ctl.ConfigureSource(trafficSlot-frame.HeaderSize, 2000, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.ConfigureSource(trafficSlot-frame.HeaderSize, 0, 64) })
	tr := &traffic{d: d, g: g}

	pattern := alloc(t, g, trafficMMDepth*trafficMMLen, simgpu.Fragmented)
	want, _ := pattern.Bytes()
	fill(want, 41)
	pp := pinGPU(t, d, pattern.VA, pattern.Size)
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, CardAddr: trafficReadAddr, Segments: []p2p.Segment{pp.Whole()}}); err != nil {
		t.Fatalf("writing the card before the traffic: %v", err)
	}
	// The writes' source, which stays as it is.
	want = bytes.Clone(want)
	for k := range trafficMMDepth {
		off := uint64(k) * trafficMMLen
		dst := alloc(t, g, trafficMMLen, simgpu.RandomRuns)
		dmem, _ := dst.Bytes()
		pd := pinGPU(t, d, dst.VA, dst.Size)
		tr.work = append(tr.work,
			&trafficXfer{name: fmt.Sprintf("C2H 0 #%d", k), dst: dmem, want: want[off : off+trafficMMLen],
				tf: p2p.Transfer{Dir: p2p.C2H, CardAddr: trafficReadAddr + off, Segments: []p2p.Segment{pd.Whole()}}},
			&trafficXfer{name: fmt.Sprintf("H2C 0 #%d", k), want: want[off : off+trafficMMLen],
				tf: p2p.Transfer{Dir: p2p.H2C, CardAddr: trafficWriteAddr + off, Segments: []p2p.Segment{{Pin: pp, Offset: off, Len: trafficMMLen}}}})
	}
	out := alloc(t, g, 16*trafficSlot, simgpu.Contiguous)
	omem, _ := out.Bytes()
	for i := range 16 {
		frame.Encode(omem[i*trafficSlot:], uint64(i), 0, trafficSlot-frame.HeaderSize)
	}
	po := pinGPU(t, d, out.VA, out.Size)
	tr.work = append(tr.work, &trafficXfer{name: "H2C 1", tf: p2p.Transfer{Dir: p2p.H2C, Channel: 1, Segments: []p2p.Segment{po.Whole()}}})

	ring := alloc(t, g, trafficSlots*trafficSlot, simgpu.Fragmented)
	tr.ring, _ = ring.Bytes()
	tr.pin = pinGPU(t, d, ring.VA, ring.Size)
	return tr
}

// start starts the traffic's stream and, once it delivered a slot,
// submits its transfers: the event that comes next finds every channel
// busy, the memory-mapped ones with most of their queue still to run.
func (tr *traffic) start(t *testing.T) {
	t.Helper()
	var slots []p2p.Segment
	for i := range trafficSlots {
		slots = append(slots, p2p.Segment{Pin: tr.pin, Offset: uint64(i) * trafficSlot, Len: trafficSlot})
	}
	s, err := tr.d.StartStream(1, slots)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	tr.stream = s
	tr.slotsIn = make(chan int, 1)
	tr.consumed = make(chan struct{})
	go tr.consume()
	// Before the ring's memory goes (cleanups run last first).
	t.Cleanup(func() {
		s.Stop()
		<-tr.consumed
	})
	select {
	case <-tr.slotsIn:
	case <-ctx(t).Done():
		t.Fatal("the stream delivered no slot")
	}
	tr.xfers = map[uint64]*trafficXfer{}
	for _, x := range tr.work {
		x.done, x.err = false, nil
		if x.dst != nil {
			clear(x.dst)
		}
		tf := x.tf
		tf.Timeout = time.Minute
		id, err := tr.d.Submit(tf, 0)
		if err != nil {
			t.Fatalf("%s: %v", x.name, err)
		}
		tr.xfers[id] = x
	}
}

// startTraffic pins the traffic's memory and starts it.
func startTraffic(t *testing.T, d *p2p.Device, g *simgpu.GPU) *traffic {
	t.Helper()
	tr := newTraffic(t, d, g)
	tr.start(t)
	return tr
}

// consume checks each slot's frame and gives the slot back, until the
// stream ends. A fill the driver did not deliver (a gap in the fill
// sequence), a duplicate or corrupt frame is an error; a gap in the frames
// is not (the source drops what the stream cannot take).
func (tr *traffic) consume() {
	ring := tr.ring
	var chk frame.Checker
	var err error
	var fill uint64
	for sl := range tr.stream.Slots() {
		if err == nil && sl.Seq != fill {
			err = fmt.Errorf("slot %d: fill %d delivered after fill %d", sl.Index, sl.Seq, fill-1)
		}
		fill = sl.Seq + 1
		if err == nil {
			if _, e := chk.Check(ring[sl.Index*trafficSlot : (sl.Index+1)*trafficSlot]); e != nil {
				err = fmt.Errorf("slot %d (fill %d): %w", sl.Index, sl.Seq, e)
			} else if chk.Duplicates != 0 {
				err = fmt.Errorf("slot %d (fill %d): duplicate frame", sl.Index, sl.Seq)
			}
		}
		select {
		case tr.slotsIn <- sl.Index:
		default:
		}
		if e := tr.stream.Release(sl.Index); e != nil && err == nil && !errors.Is(e, p2p.ErrReset) {
			err = fmt.Errorf("release slot %d: %w", sl.Index, e)
		}
	}
	tr.consumeErr = err
	close(tr.consumed)
}

// finish collects every transfer's end and checks it: completed with its
// data, or, where ended is set, failed with ErrReset. The stream ends with
// ErrReset where ended is set, else runs on and is stopped here. Returns
// how many transfers the event ended.
func (tr *traffic) finish(t *testing.T, ended bool) int {
	t.Helper()
	c := ctx(t)
	for left := len(tr.xfers); left > 0; left-- {
		select {
		case comp := <-tr.d.Completions():
			x := tr.xfers[comp.ID]
			if x == nil || x.done {
				t.Fatalf("completion of unknown or finished transfer %d", comp.ID)
			}
			x.done, x.err = true, comp.Err
		case <-c.Done():
			for _, x := range tr.xfers {
				if !x.done {
					t.Errorf("%s never completed", x.name)
				}
			}
			t.FailNow()
		}
	}
	resets := 0
	for _, x := range tr.xfers {
		switch {
		case x.err == nil:
			if x.dst != nil && !bytes.Equal(x.dst, x.want) {
				t.Errorf("%s completed with the wrong data", x.name)
			}
		case ended && errors.Is(x.err, p2p.ErrReset):
			resets++
		default:
			t.Errorf("%s: %v", x.name, x.err)
		}
	}
	if ended {
		select {
		case <-tr.consumed:
			if tr.consumeErr != nil {
				t.Error(tr.consumeErr)
			}
		case <-c.Done():
			logErrorRegisters(t)
			t.Fatal("the stream did not end")
		}
		if err := tr.stream.Err(); !errors.Is(err, p2p.ErrReset) {
			t.Errorf("the stream ended with %v, want ErrReset", err)
		}
	} else {
		// Still running: more slots come.
		for range 2 {
			select {
			case <-tr.slotsIn:
			case <-c.Done():
				t.Fatal("the stream stopped delivering after the event")
			}
		}
		if err := tr.stream.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		<-tr.consumed
		if tr.consumeErr != nil {
			t.Error(tr.consumeErr)
		}
	}
	if _, err := tr.pin.Query(false); err != nil {
		t.Errorf("the stream's pin did not outlive the event: %v", err)
	}
	return resets
}

// checkWrites reads back what each completed H2C 0 transfer wrote; the
// device must take work again.
func (tr *traffic) checkWrites(t *testing.T) {
	t.Helper()
	for _, x := range tr.xfers {
		if x.dst != nil || x.want == nil || x.err != nil {
			continue
		}
		addr := x.tf.CardAddr
		back := alloc(t, tr.g, trafficMMLen, simgpu.Contiguous)
		pb := pinGPU(t, tr.d, back.VA, back.Size)
		if _, err := tr.d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, CardAddr: addr, Segments: []p2p.Segment{pb.Whole()}}); err != nil {
			t.Fatalf("reading back %s: %v", x.name, err)
		}
		got, _ := back.Bytes()
		if !bytes.Equal(got, x.want) {
			t.Errorf("%s completed, but the card does not hold its data", x.name)
		}
		pb.Unpin()
		back.Free()
	}
}

// waitReady waits until the device takes work again and until done
// says the event has been counted, and returns its info.
func waitReady(t *testing.T, d *p2p.Device, done func(p2p.Info) bool) p2p.Info {
	t.Helper()
	c := ctx(t)
	for {
		info, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.State == p2p.DeviceReady && done(info) {
			return info
		}
		select {
		case <-c.Done():
			logErrorRegisters(t)
			t.Fatalf("the device did not recover: %v, %d resets, %d errors", info.State, info.Resets, info.Errors)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// afterEvent checks that the device works as new: a round trip with its
// data, and a stream that delivers; and that the engine never went to an
// address the driver had not programmed since the event.
func afterEvent(t *testing.T, d *p2p.Device, g *simgpu.GPU) {
	t.Helper()
	roundTrip(t, d, g)
	ring := alloc(t, g, 4*trafficSlot, simgpu.Fragmented)
	p := pinGPU(t, d, ring.VA, ring.Size)
	var slots []p2p.Segment
	for i := range 4 {
		slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) * trafficSlot, Len: trafficSlot})
	}
	if err := control(t).ConfigureSource(trafficSlot-frame.HeaderSize, 2000, 64); err != nil {
		t.Fatal(err)
	}
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatalf("a new stream: %v", err)
	}
	select {
	case <-s.Slots():
	case <-ctx(t).Done():
		t.Fatal("a new stream delivered nothing")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	noViolations(t)
}

// aerCount reads how many error messages of a kind (cor, nonfatal,
// fatal) the FPGA's root port has received: the AER driver's count, which
// also takes the fatal errors whose source it cannot read.
func aerCount(t *testing.T, kind string) uint64 {
	t.Helper()
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/bus/pci/devices", fpgaBDF(t)))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(link), "aer_rootport_total_err_"+kind)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", file, b)
	}
	return n
}

// TestAERUnderTraffic has the FPGA report uncorrectable PCIe errors while
// every channel has work. A non-fatal one ends what ran with ErrReset and
// the device recovers without a reset of the function; a fatal one, with
// the slot's secondary bus reset. Either way the driver programs the
// engine again once. Every transfer ends either with its data or with
// ErrReset, the pins stay, and the device works afterwards without DMA to
// an address it was not given. (Correctable errors: TestZYCorrectableAER.)
func TestAERUnderTraffic(t *testing.T) {
	for _, tc := range []struct {
		class  rigctl.AERClass
		kind   string
		resets uint32
	}{
		{rigctl.AERNonFatal, "nonfatal", 1},
		{rigctl.AERFatal, "fatal", 1},
	} {
		t.Run(tc.class.String(), func(t *testing.T) {
			aerUnderTraffic(t, tc.class, tc.kind, true, 1, tc.resets)
		})
	}
}

// aerUnderTraffic meets the traffic with an error of class, which ends
// what runs or not, and is counted in the driver's errors and resets, and
// in the AER driver's sysfs counter.
func aerUnderTraffic(t *testing.T, class rigctl.AERClass, kind string, ended bool, errs, resets uint32) {
	t.Helper()
	d := openDev(t)
	g := openGPU(t)
	before, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	seen := aerCount(t, kind)
	tr := startTraffic(t, d, g)
	injectAER(t, control(t), class)
	t.Logf("%d of %d transfers ended by the error", tr.finish(t, ended), len(tr.xfers))
	after := waitReady(t, d, func(i p2p.Info) bool { return i.Errors >= before.Errors+errs })
	tr.checkWrites(t)
	if after.Errors != before.Errors+errs || after.Resets != before.Resets+resets {
		t.Fatalf("after a %v error: %d errors and %d resets, from %d and %d", class,
			after.Errors, after.Resets, before.Errors, before.Resets)
	}
	if n := aerCount(t, kind); n != seen+1 {
		t.Fatalf("the AER driver counted %d %v errors, from %d", n, class, seen)
	}
	afterEvent(t, d, g)
}

// sleepFunction runs the PCI core's system sleep callbacks for the FPGA
// alone (rigpm, in hw/testbench), in transition's order, staying asleep
// for a while: long enough for the driver's watchdogs to fire there if it
// left any armed.
func sleepFunction(t *testing.T, transition string) {
	t.Helper()
	cmd := fmt.Sprintf("%s %s 300", fpgaBDF(t), transition)
	if err := os.WriteFile("/sys/kernel/debug/rigpm", []byte(cmd), 0); err != nil {
		t.Fatalf("%s: %v", transition, err)
	}
}

// TestSleepUnderTraffic takes the card through a system suspend,
// hibernation's freeze and thaw, and a whole hibernation as the restored
// kernel sees it (frozen, power lost, restored), while every channel has
// work: what ran ends with ErrReset or completes with its
// data, the slots filled before were delivered, and afterwards the device
// works as new.
func TestSleepUnderTraffic(t *testing.T) {
	guest.MustLoad(t, "rigpm")
	for _, transition := range []string{"suspend", "freeze", "hibernate"} {
		t.Run(transition, func(t *testing.T) {
			d := openDev(t)
			g := openGPU(t)
			before, err := d.Info()
			if err != nil {
				t.Fatal(err)
			}
			tr := startTraffic(t, d, g)
			sleepFunction(t, transition)
			t.Logf("%d of %d transfers ended by the sleep", tr.finish(t, true), len(tr.xfers))
			after := waitReady(t, d, func(i p2p.Info) bool { return i.Resets > before.Resets })
			tr.checkWrites(t)
			if after.Resets != before.Resets+1 || after.Errors != before.Errors {
				t.Fatalf("after %s: %d resets and %d errors, from %d and %d", transition,
					after.Resets, after.Errors, before.Resets, before.Errors)
			}
			afterEvent(t, d, g)
		})
	}
}

// TestResetSoak meets the traffic with 100 events, function-level and
// D3hot resets and non-fatal and fatal AER errors in turn: each time, every
// transfer ends with its data or ErrReset, no filled slot goes undelivered,
// and the device comes back; the counts add up, and the engine never
// touched an address not programmed since the event before.
func TestResetSoak(t *testing.T) {
	const rounds = 100
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	before, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	events := []struct {
		name         string
		run          func(t *testing.T)
		resets, errs uint32
	}{
		{"flr", func(t *testing.T) { resetFunction(t, "flr") }, 1, 0},
		{"non-fatal", func(t *testing.T) { injectAER(t, ctl, rigctl.AERNonFatal) }, 1, 1},
		{"pm", func(t *testing.T) { resetFunction(t, "pm") }, 1, 0},
		{"fatal", func(t *testing.T) { injectAER(t, ctl, rigctl.AERFatal) }, 1, 1},
	}
	tr := newTraffic(t, d, g)
	want := before
	ended := 0
	for i := range rounds {
		ev := events[i%len(events)]
		tr.start(t)
		ev.run(t)
		ended += tr.finish(t, true)
		want.Resets += ev.resets
		want.Errors += ev.errs
		got := waitReady(t, d, func(i p2p.Info) bool { return i.Resets >= want.Resets && i.Errors >= want.Errors })
		tr.checkWrites(t)
		if got.Resets != want.Resets || got.Errors != want.Errors {
			t.Fatalf("round %d (%s): %d resets and %d errors, want %d and %d", i, ev.name,
				got.Resets, got.Errors, want.Resets, want.Errors)
		}
		if t.Failed() {
			t.Fatalf("round %d (%s) failed", i, ev.name)
		}
		noViolations(t)
	}
	t.Logf("%d rounds: %d transfers of %d ended by the events", rounds, ended, rounds*len(tr.work))
	afterEvent(t, d, g)
}

// injectAER has the FPGA report a PCIe error of class. Uncorrectable ones
// go through QEMU's AER model (rigctl.InjectAER), the errors' status in
// the card's AER registers; QEMU 7.2 drops correctable messages on their
// way up, so those come from the kernel's aer_inject instead, which the
// AER driver takes the same way. aer_inject keeps its stand-ins for the
// AER registers of the card and its root port until it is unloaded (and
// it is built into the debug kernel): after it, the kernel no longer sees
// the card's own, which is why the one test that uses it runs last.
func injectAER(t *testing.T, ctl *rigctl.Control, class rigctl.AERClass) {
	t.Helper()
	if class == rigctl.AERCorrectable {
		aerInjectCorrectable(t)
		return
	}
	enableSERR(t)
	if err := ctl.InjectAER(class); err != nil {
		t.Fatal(err)
	}
}

// enableSERR sets SERR# Enable in the command registers of the FPGA and
// its root port, as platform firmware does: QEMU sends an uncorrectable
// error message up only through functions that have it (PCIe lets the
// Device Control register's reporting enables do it alone), and Linux
// leaves it as firmware set it. A slot reset restores the command the
// driver saved, without it.
func enableSERR(t *testing.T) {
	t.Helper()
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/bus/pci/devices", fpgaBDF(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{link, filepath.Dir(link)} {
		f, err := os.OpenFile(filepath.Join(dir, "config"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var cmd [2]byte
		if _, err := f.ReadAt(cmd[:], pciCommand); err != nil {
			t.Fatal(err)
		}
		cmd[1] |= pciCommandSERR >> 8
		if _, err := f.WriteAt(cmd[:], pciCommand); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

const (
	pciCommand     = 0x04
	pciCommandSERR = 0x100
	pciErrCorRcvr  = 0x1 // AER correctable status: receiver error
)

// aerInjectCorrectable reports a receiver error from the FPGA through
// the kernel's AER error injector (/dev/aer_inject: its struct
// aer_error_inj).
func aerInjectCorrectable(t *testing.T) {
	t.Helper()
	var bus, dev, fn, domain uint32
	if _, err := fmt.Sscanf(fpgaBDF(t), "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		t.Fatal(err)
	}
	var inj [32]byte
	inj[0], inj[1], inj[2] = byte(bus), byte(dev), byte(fn)
	binary.LittleEndian.PutUint32(inj[8:], pciErrCorRcvr)
	binary.LittleEndian.PutUint32(inj[28:], domain)
	if err := os.WriteFile("/dev/aer_inject", inj[:], 0); err != nil {
		t.Fatalf("aer_inject: %v", err)
	}
}

// logErrorRegisters logs, for the FPGA and its root port, the registers
// that decide whether an error message goes up: Command, Bridge Control,
// Device Control and Status, and AER's status, mask and root registers.
func logErrorRegisters(t *testing.T) {
	t.Helper()
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/bus/pci/devices", fpgaBDF(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{link, filepath.Dir(link)} {
		cfg, err := os.ReadFile(filepath.Join(dir, "config"))
		if err != nil || len(cfg) < 0x200 {
			t.Logf("%s: config: %v (%d bytes)", dir, err, len(cfg))
			continue
		}
		w16 := func(o int) uint16 { return binary.LittleEndian.Uint16(cfg[o:]) }
		w32 := func(o int) uint32 { return binary.LittleEndian.Uint32(cfg[o:]) }
		line := fmt.Sprintf("%s: command %#x status %#x bridge control %#x", filepath.Base(dir), w16(4), w16(6), w16(0x3e))
		for o := int(cfg[0x34]); o != 0 && o < 0x100; o = int(cfg[o+1]) {
			if cfg[o] == 0x10 {
				line += fmt.Sprintf(" devctl %#x devsta %#x lnkcap %#x lnksta %#x", w16(o+8), w16(o+10), w32(o+12), w16(o+0x12))
			}
		}
		for o := 0x100; o != 0 && o+0x38 <= len(cfg); o = int(w32(o) >> 20) {
			if w32(o)&0xffff == 1 {
				line += fmt.Sprintf(" aer: uncor %#x mask %#x sev %#x cor %#x root cmd %#x status %#x",
					w32(o+4), w32(o+8), w32(o+12), w32(o+16), w32(o+0x2c), w32(o+0x30))
			}
			if w32(o)>>20 == 0 {
				break
			}
		}
		t.Log(line)
	}
	buf := make([]byte, 1<<20)
	if n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf); err == nil {
		for _, l := range strings.Split(string(buf[:n]), "\n") {
			if strings.Contains(l, "AER") || strings.Contains(l, "pcieport") || strings.Contains(l, "01:00.0") {
				t.Log(l)
			}
		}
	}
}

// TestRebindAndReloadDuringResets resets the card again and again while
// the driver is unbound and bound, then unloaded and loaded: the PCI core
// serialises each reset with the driver's probe and remove under the
// device lock, so nothing is used after it is freed, nothing waits without
// bound, and the device works afterwards.
func TestRebindAndReloadDuringResets(t *testing.T) {
	setup(t)
	bdf := fpgaBDF(t)
	dir := filepath.Join("/sys/bus/pci/devices", bdf)
	if err := os.WriteFile(filepath.Join(dir, "reset_method"), []byte("flr"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(filepath.Join(dir, "reset_method"), []byte("default"), 0)
	stop := make(chan struct{})
	resets := make(chan int)
	stopped := false
	stopResets := func() int {
		if stopped {
			return 0
		}
		stopped = true
		close(stop)
		return <-resets
	}
	// The tests after need a card no longer reset under them.
	t.Cleanup(func() { stopResets() })
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				resets <- n
				return
			default:
			}
			if os.WriteFile(filepath.Join(dir, "reset"), []byte("1"), 0) == nil {
				n++
			}
		}
	}()
	for range 10 {
		rebind(t, bdf)
	}
	for _, m := range []string{"gpufpga_nv", "gpufpga"} {
		if err := guest.UnloadModule(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []struct {
		name   string
		params []string
	}{{"gpufpga", driverParams}, {"gpufpga_nv", nil}} {
		if err := guest.LoadModule(m.name, m.params...); err != nil {
			t.Fatal(err)
		}
	}
	if n := stopResets(); n == 0 {
		t.Fatal("no reset went through meanwhile")
	} else {
		t.Logf("%d resets during 10 rebinds and a reload", n)
	}
	d := openDev(t)
	roundTrip(t, d, openGPU(t))
	noViolations(t)
}
