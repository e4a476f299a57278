//go:build vmguest

package kmodtest

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestUnbindAfterEvents unbinds the driver while a stream runs into GPU
// memory and transfers are queued, after each event that takes the
// function away and gives it back: a fatal AER error (whose frozen quiesce
// cut bus mastering, which the slot reset's restore turned on again behind
// the PCI core's back), a non-fatal one, a function-level reset and
// D3hot. The engines must be stopped before the driver lets a pin or a
// ring go: the card model counts every DMA into GPU memory no peer has
// mapped any longer, and with an engine left running on a cyclic ring,
// out of credit mode, the unpinned slots take its writes.
func TestUnbindAfterEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(t *testing.T)
	}{
		{"fatal", func(t *testing.T) { injectAER(t, control(t), rigctl.AERFatal) }},
		{"nonfatal", func(t *testing.T) { injectAER(t, control(t), rigctl.AERNonFatal) }},
		{"flr", func(t *testing.T) { resetFunction(t, "flr") }},
		{"pm", func(t *testing.T) { resetFunction(t, "pm") }},
	} {
		t.Run(tc.name, func(t *testing.T) { unbindAfter(t, tc.event) })
	}
}

func unbindAfter(t *testing.T, event func(t *testing.T)) {
	bdf := fpgaBDF(t)
	t.Cleanup(func() { // the tests after need the device, even if this one failed
		if _, err := os.Stat(devPath); err != nil {
			os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0)
		}
	})
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	before, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	event(t)
	waitReady(t, d, func(i p2p.Info) bool { return i.Resets > before.Resets })
	unmapped, err := ctl.Unmapped()
	if err != nil {
		t.Fatal(err)
	}
	tr := newTraffic(t, d, g)
	// As fast as the engine takes frames: an engine left running writes
	// into the slots all the time.
	if err := ctl.ConfigureSource(trafficSlot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	tr.start(t)
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/unbind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	// Long enough for a running engine's writes to reach the model.
	time.Sleep(100 * time.Millisecond)
	if n, err := ctl.Unmapped(); err != nil || n != unmapped {
		t.Fatalf("%d DMA accesses reached GPU memory the driver had unpinned (%v)", n-unmapped, err)
	}
	d.Close()
	if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/bind", []byte(bdf), 0); err != nil {
		t.Fatal(err)
	}
	d = openDev(t)
	afterEvent(t, d, openGPU(t))
}

// TestFailedRecoveryComesBack fails a fatal error's recovery: the card's
// registers stop answering and stay so through the reset of its slot, so
// the slot reset reports it disconnected. Before 6.18 (and the stable
// kernels that took its fix) AER then calls no handler; with it, the
// driver hears of a permanent failure. Either way a sysfs reset later,
// which the card comes back from, brings the device back READY with
// working DMA and bus mastering.
func TestFailedRecoveryComesBack(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	before, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.FailResets(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.FailResets(false) })
	injectAER(t, ctl, rigctl.AERFatal)
	waitKernelLog(t, "device recovery failed")
	if info, err := d.Info(); err != nil || info.State == p2p.DeviceReady {
		t.Fatalf("after a failed recovery: %+v, %v; want not ready", info, err)
	}
	if err := ctl.FailResets(false); err != nil {
		t.Fatal(err)
	}
	resetFunction(t, "flr")
	after := waitReady(t, d, func(i p2p.Info) bool { return i.Resets > before.Resets })
	t.Logf("after the reset: %d resets, %d errors", after.Resets, after.Errors)
	afterEvent(t, d, g)
	// A later recovery comes back with bus mastering: the state saved
	// after the reset has it.
	tr := startTraffic(t, d, g)
	injectAER(t, ctl, rigctl.AERFatal)
	t.Logf("%d of %d transfers ended by a second error", tr.finish(t, true), len(tr.xfers))
	waitReady(t, d, func(i p2p.Info) bool { return i.Resets > after.Resets })
	afterEvent(t, d, g)
}

// waitKernelLog waits until the kernel log holds msg.
func waitKernelLog(t *testing.T, msg string) {
	t.Helper()
	c := ctx(t)
	buf := make([]byte, 1<<20)
	for {
		n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf[:n], []byte(msg)) {
			return
		}
		select {
		case <-c.Done():
			t.Logf("the kernel log's end:\n%s", buf[max(0, n-4000):n])
			logBlockedTasks(t)
			t.Fatalf("the kernel log never said %q", msg)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logBlockedTasks logs the kernel stacks of tasks in uninterruptible sleep.
func logBlockedTasks(t *testing.T) {
	t.Helper()
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || !bytes.Contains(st, []byte(") D ")) {
			continue
		}
		stack, _ := os.ReadFile("/proc/" + e.Name() + "/stack")
		t.Logf("blocked %s:\n%s", st[:min(len(st), 60)], stack)
	}
}
