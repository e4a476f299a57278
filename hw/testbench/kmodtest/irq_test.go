//go:build vmguest

package kmodtest

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// fpgaBDF returns the PCI address of the device behind gpufpga0.
func fpgaBDF(t *testing.T) string {
	t.Helper()
	link, err := os.Readlink("/sys/class/misc/gpufpga0/device")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(link)
}

// rebind unbinds the FPGA from the driver and binds it again, so that
// probe reads the parameters anew.
func rebind(t *testing.T, bdf string) {
	t.Helper()
	for _, op := range []string{"unbind", "bind"} {
		if err := os.WriteFile("/sys/bus/pci/drivers/gpufpga/"+op, []byte(bdf), 0); err != nil {
			t.Fatalf("%s %s: %v", op, bdf, err)
		}
	}
}

// interrupts sums, over every CPU and vector, the interrupts
// /proc/interrupts counts for gpufpga0.
func interrupts(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	cpus := len(strings.Fields(lines[0]))
	var n uint64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < cpus+3 || f[len(f)-1] != "gpufpga0" {
			continue
		}
		for _, c := range f[1 : 1+cpus] {
			v, err := strconv.ParseUint(c, 10, 64)
			if err != nil {
				t.Fatalf("/proc/interrupts: %q", l)
			}
			n += v
		}
	}
	return n
}

// irqMode says how the PCI function's interrupts are enabled: "msix" or
// "msi" (sysfs lists each vector's mode), else "intx".
func irqMode(t *testing.T, bdf string) string {
	t.Helper()
	modes, err := filepath.Glob("/sys/bus/pci/devices/" + bdf + "/msi_irqs/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(modes) == 0 {
		return "intx"
	}
	b, err := os.ReadFile(modes[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// kernelLog returns the kernel's log buffer.
func kernelLog(t *testing.T) string {
	t.Helper()
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	n, err = unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// TestInterruptModes binds the FPGA with each kind of interrupt the device
// offers, INTx, MSI and MSI-X, and in each runs memory-mapped transfers
// both ways, a stream and a user interrupt: every completion comes by that
// interrupt (the watchdog never has to step in), the data arrives intact,
// and the user line is told apart on a vector of its own or a shared one.
func TestInterruptModes(t *testing.T) {
	setup(t)
	bdf := fpgaBDF(t)
	t.Cleanup(func() { rebind(t, bdf) }) // back to auto, for the tests after
	logBefore := strings.Count(kernelLog(t), "without an interrupt")
	for _, mode := range []string{"intx", "msi", "msix"} {
		t.Run(mode, func(t *testing.T) {
			restore := setParam(t, "interrupts", mode)
			rebind(t, bdf)
			restore()
			if got := irqMode(t, bdf); got != mode {
				t.Fatalf("interrupts=%s: the function uses %s", mode, got)
			}
			before := interrupts(t)
			transfersAndStream(t)
			if after := interrupts(t); after <= before {
				t.Fatalf("no %s interrupts counted (%d before, %d after)", mode, before, after)
			}
		})
	}
	if n := strings.Count(kernelLog(t), "without an interrupt"); n != logBefore {
		t.Fatalf("the watchdog completed %d transfers or slots whose interrupt never came", n-logBefore)
	}
}

func transfersAndStream(t *testing.T) {
	t.Helper()
	d := openDev(t)
	g := openGPU(t)
	src := alloc(t, g, 1<<20, simgpu.Fragmented)
	dst := alloc(t, g, 1<<20, simgpu.RandomRuns)
	srcMem, _ := src.Bytes()
	dstMem, _ := dst.Bytes()
	fill(srcMem, 5)
	ps := pinGPU(t, d, src.VA, src.Size)
	pd := pinGPU(t, d, dst.VA, dst.Size)
	for i := range 8 {
		card := uint64(i) << 20
		if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, CardAddr: card, Segments: []p2p.Segment{ps.Whole()}}); err != nil {
			t.Fatalf("H2C %d: %v", i, err)
		}
		clear(dstMem)
		if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, CardAddr: card, Segments: []p2p.Segment{pd.Whole()}}); err != nil {
			t.Fatalf("C2H %d: %v", i, err)
		}
		if !bytes.Equal(dstMem, srcMem) {
			t.Fatalf("round trip %d changed the data", i)
		}
	}
	const slot = 64 << 10
	_, _, mem, slots := ring(t, d, g, 8, slot)
	streamFrames(t, d, mem, slots, 64)
	userInterruptOnce(t, d, 2)
}

// streamFrames runs a stream over slots (each Len bytes at Offset of mem's
// pin) with one frame per slot, checks n frames and stops it: every frame
// in order, intact, and the stream ends cleanly.
func streamFrames(t *testing.T, d *p2p.Device, mem []byte, slots []p2p.Segment, n uint64) {
	t.Helper()
	size := int(slots[0].Len)
	if err := control(t).ConfigureSource(size-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	s, err := d.StartStream(1, slots)
	if err != nil {
		t.Fatal(err)
	}
	var chk frame.Checker
	for sl := range s.Slots() {
		off := int(slots[sl.Index].Offset)
		if _, err := chk.Check(mem[off : off+int(sl.Bytes)]); err != nil {
			t.Fatalf("slot %d: %v", sl.Index, err)
		}
		if err := s.Release(sl.Index); err != nil {
			t.Fatal(err)
		}
		if chk.Frames == n {
			break
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
	}
	if s.Err() != nil || chk.Frames != n || chk.Gaps != 0 || chk.CRCFailures != 0 {
		t.Fatalf("stream ended %v: %+v", s.Err(), chk.Stats)
	}
}

// TestPollModeWriteback runs synchronous transfers with GPUFPGA_XFER_POLL:
// the caller spins on the engine's writeback word and completes the
// transfer itself. Data and results are those of an interrupt-driven
// transfer, and errors are reported the same way.
func TestPollModeWriteback(t *testing.T) {
	setup(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	mem, _ := a.Bytes()
	fill(mem, 3)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const xferPoll = 2
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: a.Size, fd: -1})
	le := binary.LittleEndian
	run := func(dir uint32, off, n uint64) (uint64, uint32, error) {
		segs := []uint64{h, off, n}
		b := rawXfer{dir: dir, flags: xferPoll, nsegs: 1, segs: segs, cardAddr: 8 << 20}.bytes()
		err := rawIoctl(f, ioc(iocRW, 4, sizeXfer), b)
		runtime.KeepAlive(segs)
		return le.Uint64(b[56:]), le.Uint32(b[64:]), err
	}
	if n, status, err := run(0, 0, 1<<19); err != nil || n != 1<<19 || status&2 == 0 {
		t.Fatalf("polled H2C: %d bytes, status %#x, %v", n, status, err)
	}
	if n, _, err := run(1, 1<<19, 1<<19); err != nil || n != 1<<19 {
		t.Fatalf("polled C2H: %d bytes, %v", n, err)
	}
	if !bytes.Equal(mem[:1<<19], mem[1<<19:]) {
		t.Fatal("polled round trip changed the data")
	}
	// An engine error reaches a polling caller as it does a sleeping one.
	ctl := control(t)
	if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultDataWrite); err != nil {
		t.Fatal(err)
	}
	if _, status, err := run(1, 0, 4096); err != unix.EIO || status&(0x1f<<14) == 0 {
		t.Fatalf("polled C2H with a write error: status %#x, %v, want EIO", status, err)
	}
}
