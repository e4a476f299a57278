package devmodel

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	rl "github.com/gpufpga/gpufpga/hw/testbench/riglayout"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// fakeQEMU plays QEMU's side of the rig in-process: the xdma-model
// device's two connections, and the ivshmem protocol of the control port.
type fakeQEMU struct {
	req, irq net.Conn
}

func dialDevice(t *testing.T, sock string) *fakeQEMU {
	t.Helper()
	q := &fakeQEMU{}
	for role, c := range []*net.Conn{&q.req, &q.irq} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := conn.Write(append([]byte(pciHello), byte(role))); err != nil {
			t.Fatal(err)
		}
		*c = conn
	}
	return q
}

func (q *fakeQEMU) send(t *testing.T, op, bar byte, addr, data uint64) {
	t.Helper()
	var m [pciReqSize]byte
	m[0], m[1], m[2] = op, bar, 4
	binary.LittleEndian.PutUint64(m[8:], addr)
	binary.LittleEndian.PutUint64(m[16:], data)
	if _, err := q.req.Write(m[:]); err != nil {
		t.Fatal(err)
	}
}

func (q *fakeQEMU) read(t *testing.T, bar byte, addr uint64) uint32 {
	t.Helper()
	q.send(t, pciOpRead, bar, addr, 0)
	var v [8]byte
	if _, err := io.ReadFull(q.req, v[:]); err != nil {
		t.Fatal(err)
	}
	return uint32(binary.LittleEndian.Uint64(v[:]))
}

func (q *fakeQEMU) write(t *testing.T, bar byte, addr uint64, v uint32) {
	t.Helper()
	q.send(t, pciOpWrite, bar, addr, uint64(v))
}

// interrupt reads the next interrupt message.
func (q *fakeQEMU) interrupt(t *testing.T) (kind byte, value uint32) {
	t.Helper()
	var m [8]byte
	q.irq.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(q.irq, m[:]); err != nil {
		t.Fatal(err)
	}
	return m[0], binary.LittleEndian.Uint32(m[4:])
}

// connect serves rig as QEMU connects to it: the control port and the
// device, in either order (the rig accepts both at once).
func connect(ctx context.Context, t *testing.T, rig *Rig) (*fakeCtl, *fakeQEMU) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- rig.Serve(ctx) }()
	c := dialCtl(t, rig.ctl.sock)
	q := dialDevice(t, rig.fpga.sock)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	return c, q
}

type fakeCtl struct {
	mbox    []byte
	hostFds []int // the host's doorbell eventfds
	seq     uint32
}

func dialCtl(t *testing.T, sock string) *fakeCtl {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	q := &fakeCtl{}
	oob := make([]byte, 64)
	var b [8]byte
	for i := range 3 + 2 {
		_, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		v := int64(binary.LittleEndian.Uint64(b[:]))
		var fd = -1
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			fds, _ := unix.ParseUnixRights(&msgs[0])
			fd = fds[0]
		}
		switch {
		case i == 0 && v != 0, i == 1 && v != 1:
			t.Fatalf("message %d = %d", i, v)
		case i == 2:
			q.mbox, err = unix.Mmap(fd, 0, rl.MboxSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
		case v == 0 && fd >= 0:
			q.hostFds = append(q.hostFds, fd)
		}
	}
	return q
}

func (q *fakeCtl) call(t *testing.T, op, a0, a1, a2 uint32) (uint32, uint32, uint32) {
	t.Helper()
	w := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.mbox[rl.CtlMbox+off])) }
	q.seq++
	atomic.StoreUint32(w(rl.ReqOp), op)
	atomic.StoreUint32(w(rl.ReqArg0), a0)
	atomic.StoreUint32(w(rl.ReqArg1), a1)
	atomic.StoreUint32(w(rl.ReqArg2), a2)
	atomic.StoreUint32(w(rl.ReqSeq), q.seq)
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(q.hostFds[rl.VecMbox], one[:]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32(w(rl.RspSeq)) != q.seq {
		if time.Now().After(deadline) {
			t.Fatalf("no answer to op %d", op)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return atomic.LoadUint32(w(rl.RspStatus)), atomic.LoadUint32(w(rl.RspVal0)), atomic.LoadUint32(w(rl.RspVal1))
}

func TestDeviceAndControlPort(t *testing.T) {
	rig, err := New(Config{Dir: t.TempDir(), GuestRAM: 16 << 20, VRAM: 1 << 20, CardMem: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, q := connect(ctx, t, rig)
	if m := binary.LittleEndian.Uint32(c.mbox); m != rl.CtlMagic {
		t.Fatalf("control port magic %#x", m)
	}
	v := q.read(t, pciBarDMA, uint64(xdma.Base(xdma.TargetC2H, 1)+xdma.RegIdentifier))
	if id, ok := xdma.DecodeIdentifier(v); !ok || !id.Stream || id.Channel != 1 {
		t.Fatalf("C2H 1 identifier %#x", v)
	}
	ctl := uint64(xdma.Base(xdma.TargetH2C, 0) + xdma.RegControl)
	q.write(t, pciBarDMA, ctl, 0x1E)
	if v := q.read(t, pciBarDMA, ctl); v != 0x1E {
		t.Fatalf("control reads %#x after writing 0x1e", v)
	}
	// The config block reports the interrupt mode QEMU announces.
	msiEnable := uint64(xdma.Base(xdma.TargetConfig, 0) + xdma.RegConfigMSIEnable)
	q.send(t, pciOpMode, 0, 0, uint64(xdmamodel.InterruptMSIX))
	if v := q.read(t, pciBarDMA, msiEnable); v != 2 {
		t.Fatalf("MSI enable register %#x in MSI-X mode, want 2", v)
	}
	// The user BAR is plain registers.
	q.write(t, pciBarUser, 0x40, 0xC0FFEE)
	if v := q.read(t, pciBarUser, 0x40); v != 0xC0FFEE {
		t.Fatalf("user register reads %#x", v)
	}
	// A channel interrupt that becomes pending is an edge on its vector
	// and asserts the legacy line; read-clearing the status drops it.
	irq := uint64(xdma.Base(xdma.TargetIRQ, 0))
	q.write(t, pciBarDMA, irq+xdma.RegChanVector, 3) // H2C 0 on vector 3
	q.write(t, pciBarDMA, uint64(xdma.Base(xdma.TargetH2C, 0)+xdma.RegIntEnable), xdma.StatDescStopped|xdma.StatErrorMask)
	q.write(t, pciBarDMA, irq+xdma.RegChanIntEnableW1S, 1)
	q.write(t, pciBarDMA, uint64(xdma.Base(xdma.TargetH2CSGDMA, 0)+xdma.RegDescLo), 0)
	q.write(t, pciBarDMA, ctl, xdma.CtrlRun) // zeroed memory at 0: a bad magic stops it
	q.read(t, pciBarDMA, ctl)                // the writes are posted; this one is not
	rig.engine.RunUntilIdle()
	if k, v := q.interrupt(t); k != pciIRQEdge || v != 3 {
		t.Fatalf("interrupt message %d %d, want an edge on vector 3", k, v)
	}
	if k, v := q.interrupt(t); k != pciIRQLevel || v != 1 {
		t.Fatalf("interrupt message %d %d, want INTx asserted", k, v)
	}
	q.read(t, pciBarDMA, uint64(xdma.Base(xdma.TargetH2C, 0)+xdma.RegStatusRC))
	if k, v := q.interrupt(t); k != pciIRQLevel || v != 0 {
		t.Fatalf("interrupt message %d %d, want INTx deasserted", k, v)
	}
	// A reset stops the engine and forgets its settings.
	q.send(t, pciOpReset, 0, 0, 0)
	if v := q.read(t, pciBarDMA, ctl); v != 0 {
		t.Fatalf("control reads %#x after reset", v)
	}
	// The control mailbox: link down makes registers read all ones.
	if st, _, _ := c.call(t, rl.CtlLink, 1, 0, 0); st != 0 {
		t.Fatalf("link down: status %d", st)
	}
	if v := q.read(t, pciBarDMA, ctl); v != 0xFFFFFFFF {
		t.Fatalf("register reads %#x with the link down", v)
	}
	if st, _, _ := c.call(t, rl.CtlFault, 1, 7, uint32(xdmamodel.FaultStall)); st != uint32(unix.ENODEV) {
		t.Fatalf("fault on a missing channel: status %d", st)
	}
	if st, _, _ := c.call(t, 99, 0, 0, 0); st != uint32(unix.EINVAL) {
		t.Fatalf("unknown op: status %d", st)
	}
	if err := rig.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestGuestBusLateWrites(t *testing.T) {
	rig, err := New(Config{Dir: t.TempDir(), GuestRAM: 1 << 20, VRAM: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	bus := &guestBus{rig}
	const bar = 0x80_0000_0000
	if err := bus.Read(0, make([]byte, 4)); err == nil {
		t.Fatal("DMA read with bus mastering off succeeded")
	}
	rig.setBusMaster(true)
	if err := bus.Write(bar+rl.VramPage, []byte{1}); err == nil {
		t.Fatal("VRAM reachable before the GPU announced its BAR")
	}
	binary.LittleEndian.PutUint64(rig.vram[rl.VramOffBar:], bar)
	rig.vram[rl.VramOffState+2] = 1 // page 2 allocated and mapped
	rig.vram[rl.VramOffPeers+2] = 1
	if err := bus.Write(bar+2*rl.VramPage+10, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rig.LateWrites(); n != 0 {
		t.Fatalf("%d late writes into an allocated page", n)
	}
	if n, _ := rig.Unmapped(); n != 0 {
		t.Fatalf("%d unmapped accesses to a mapped page", n)
	}
	rig.vram[rl.VramOffPeers+2] = rl.VramPeersReleased // unpinned: the GPU still holds it
	if err := bus.Read(bar+2*rl.VramPage, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if n, addrs := rig.Unmapped(); n != 1 || addrs[0] != 2*rl.VramPage {
		t.Fatalf("unmapped accesses %d at %#x, want 1 at page 2", n, addrs)
	}
	rig.setBusMaster(false)
	if err := bus.Write(bar+3*rl.VramPage, []byte{1}); err != nil || rig.masterOffWrites.Load() != 1 {
		t.Fatalf("a write with bus mastering off: %v, %d held back, want nil and 1", err, rig.masterOffWrites.Load())
	}
	rig.setBusMaster(true)
	if err := bus.Write(bar+3*rl.VramPage, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if n, addrs := rig.LateWrites(); n != 1 || addrs[0] != 3*rl.VramPage {
		t.Fatalf("late writes %d at %#x, want 1 at page 3", n, addrs)
	}
	if err := bus.Read(bar, make([]byte, 4)); err == nil {
		t.Fatal("the VRAM header page is reachable by DMA")
	}
	if err := bus.Read(1<<20-2, make([]byte, 4)); err == nil {
		t.Fatal("read across the end of guest RAM succeeded")
	}
}

// TestCardMemoryOutOfRangeIsDecodeError: an AXI access past the card's
// memory finds no slave, which AXI answers with DECERR.
func TestCardMemoryOutOfRangeIsDecodeError(t *testing.T) {
	c := cardMemory(make([]byte, 4096))
	var be *xdma.BusError
	err := c.Read(4000, make([]byte, 100))
	if !errors.As(err, &be) || be.Code != xdma.ErrCodeAXIDecode {
		t.Fatalf("read past the end: %v, want DECERR", err)
	}
	if err := c.Read(0, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
}
