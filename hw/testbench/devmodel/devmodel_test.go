package devmodel

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/xdma"
)

func TestLayoutMatchesHeader(t *testing.T) {
	f, err := os.Open("../include/gpufpga_rig.h")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	def := regexp.MustCompile(`^#define\s+(RIG_\w+)\s+(0x[0-9a-fA-F]+|\d+)(U|ULL)?\b`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := def.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := headerConstants[m[1]]
		if !ok {
			t.Errorf("%s = %#x has no Go mirror", m[1], v)
			continue
		}
		if v != want {
			t.Errorf("%s: header %#x, Go %#x", m[1], v, want)
		}
		seen[m[1]] = true
	}
	for name := range headerConstants {
		if !seen[name] {
			t.Errorf("Go mirror %s has no #define", name)
		}
	}
}

// fakeQEMU is the guest side of the ivshmem protocol, played in-process.
type fakeQEMU struct {
	mbox    []byte
	hostFds []int // the host's doorbell eventfds
	seq     uint32
}

func dialRig(t *testing.T, sock string) *fakeQEMU {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	q := &fakeQEMU{}
	oob := make([]byte, 64)
	var b [8]byte
	for i := range 3 + 2*guestVectors {
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
			q.mbox, err = unix.Mmap(fd, 0, mboxSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
		case v == 0 && fd >= 0:
			q.hostFds = append(q.hostFds, fd)
		}
	}
	return q
}

func (q *fakeQEMU) call(t *testing.T, base, vec int, op, a0, a1, a2 uint32) (uint32, uint32, uint32) {
	t.Helper()
	w := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.mbox[base+off])) }
	q.seq++
	atomic.StoreUint32(w(reqOp), op)
	atomic.StoreUint32(w(reqArg0), a0)
	atomic.StoreUint32(w(reqArg1), a1)
	atomic.StoreUint32(w(reqArg2), a2)
	atomic.StoreUint32(w(reqSeq), q.seq)
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(q.hostFds[vec], one[:]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32(w(rspSeq)) != q.seq {
		if time.Now().After(deadline) {
			t.Fatalf("no answer to op %d", op)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return atomic.LoadUint32(w(rspStatus)), atomic.LoadUint32(w(rspVal0)), atomic.LoadUint32(w(rspVal1))
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
	q := dialRig(t, rig.sockPath)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if m := binary.LittleEndian.Uint32(q.mbox); m != mboxMagic {
		t.Fatalf("mailbox magic %#x", m)
	}
	st, v, _ := q.call(t, regMbox, vecReg, opRead32, xdma.Base(xdma.TargetC2H, 1)+xdma.RegIdentifier, 0, 0)
	if id, ok := xdma.DecodeIdentifier(v); st != 0 || !ok || !id.Stream || id.Channel != 1 {
		t.Fatalf("C2H 1 identifier: status %d value %#x", st, v)
	}
	ctl := xdma.Base(xdma.TargetH2C, 0) + xdma.RegControl
	q.call(t, regMbox, vecReg, opWrite32, ctl, 0x1E, 0)
	if _, v, _ := q.call(t, regMbox, vecReg, opRead32, ctl, 0, 0); v != 0x1E {
		t.Fatalf("control reads %#x after writing 0x1e", v)
	}
	// The control mailbox: link down makes registers read all ones.
	if st, _, _ := q.call(t, ctlMbox, vecCtl, ctlLink, 1, 0, 0); st != 0 {
		t.Fatalf("link down: status %d", st)
	}
	if _, v, _ := q.call(t, regMbox, vecReg, opRead32, ctl, 0, 0); v != 0xFFFFFFFF {
		t.Fatalf("register reads %#x with the link down", v)
	}
	if st, _, _ := q.call(t, ctlMbox, vecCtl, ctlFault, 1, 7, uint32(xdma.FaultStall)); st != uint32(unix.ENODEV) {
		t.Fatalf("fault on a missing channel: status %d", st)
	}
	if st, _, _ := q.call(t, regMbox, vecReg, 99, 0, 0, 0); st != uint32(unix.EINVAL) {
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
	if err := bus.Write(bar+vramPage, []byte{1}); err == nil {
		t.Fatal("VRAM reachable before the GPU announced its BAR")
	}
	binary.LittleEndian.PutUint64(rig.vram[vramOffBar:], bar)
	rig.vram[vramOffState+2] = 1 // page 2 allocated
	if err := bus.Write(bar+2*vramPage+10, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rig.LateWrites(); n != 0 {
		t.Fatalf("%d late writes into an allocated page", n)
	}
	if err := bus.Write(bar+3*vramPage, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if n, addrs := rig.LateWrites(); n != 1 || addrs[0] != 3*vramPage {
		t.Fatalf("late writes %d at %#x, want 1 at page 3", n, addrs)
	}
	if err := bus.Read(bar, make([]byte, 4)); err == nil {
		t.Fatal("the VRAM header page is reachable by DMA")
	}
	if err := bus.Read(1<<20-2, make([]byte, 4)); err == nil {
		t.Fatal("read across the end of guest RAM succeeded")
	}
}
