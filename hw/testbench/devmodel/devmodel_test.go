package devmodel

import (
	"context"
	"encoding/binary"
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

// fakeQEMU is the guest side of the ivshmem protocol, played in-process.
type fakeQEMU struct {
	mbox    []byte
	hostFds []int // the host's doorbell eventfds
	seq     uint32
}

func dialRig(t *testing.T, sock string, vectors int) *fakeQEMU {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	q := &fakeQEMU{}
	oob := make([]byte, 64)
	var b [8]byte
	for i := range 3 + 2*vectors {
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

func (q *fakeQEMU) call(t *testing.T, base int, op, a0, a1, a2 uint32) (uint32, uint32, uint32) {
	t.Helper()
	w := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.mbox[base+off])) }
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

func TestMailboxes(t *testing.T) {
	rig, err := New(Config{Dir: t.TempDir(), GuestRAM: 16 << 20, VRAM: 1 << 20, CardMem: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- rig.Serve(ctx) }()
	q := dialRig(t, rig.fpga.sock, rl.GuestVectors)
	c := dialRig(t, rig.ctl.sock, 1)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if m := binary.LittleEndian.Uint32(q.mbox); m != rl.MboxMagic {
		t.Fatalf("FPGA mailbox magic %#x", m)
	}
	if m := binary.LittleEndian.Uint32(c.mbox); m != rl.CtlMagic {
		t.Fatalf("control port magic %#x", m)
	}
	st, v, _ := q.call(t, rl.RegMbox, rl.OpRead32, xdma.Base(xdma.TargetC2H, 1)+xdma.RegIdentifier, 0, 0)
	if id, ok := xdma.DecodeIdentifier(v); st != 0 || !ok || !id.Stream || id.Channel != 1 {
		t.Fatalf("C2H 1 identifier: status %d value %#x", st, v)
	}
	ctl := xdma.Base(xdma.TargetH2C, 0) + xdma.RegControl
	q.call(t, rl.RegMbox, rl.OpWrite32, ctl, 0x1E, 0)
	if _, v, _ := q.call(t, rl.RegMbox, rl.OpRead32, ctl, 0, 0); v != 0x1E {
		t.Fatalf("control reads %#x after writing 0x1e", v)
	}
	// The control mailbox: link down makes registers read all ones.
	if st, _, _ := c.call(t, rl.CtlMbox, rl.CtlLink, 1, 0, 0); st != 0 {
		t.Fatalf("link down: status %d", st)
	}
	if _, v, _ := q.call(t, rl.RegMbox, rl.OpRead32, ctl, 0, 0); v != 0xFFFFFFFF {
		t.Fatalf("register reads %#x with the link down", v)
	}
	if st, _, _ := c.call(t, rl.CtlMbox, rl.CtlFault, 1, 7, uint32(xdmamodel.FaultStall)); st != uint32(unix.ENODEV) {
		t.Fatalf("fault on a missing channel: status %d", st)
	}
	if st, _, _ := q.call(t, rl.RegMbox, 99, 0, 0, 0); st != uint32(unix.EINVAL) {
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
	if err := bus.Write(bar+rl.VramPage, []byte{1}); err == nil {
		t.Fatal("VRAM reachable before the GPU announced its BAR")
	}
	binary.LittleEndian.PutUint64(rig.vram[rl.VramOffBar:], bar)
	rig.vram[rl.VramOffState+2] = 1 // page 2 allocated
	if err := bus.Write(bar+2*rl.VramPage+10, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rig.LateWrites(); n != 0 {
		t.Fatalf("%d late writes into an allocated page", n)
	}
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
