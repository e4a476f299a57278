//go:build vmguest

package kmodtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Raw ioctl numbers and struct layouts of uapi/gpufpga.h, written out here
// so the tests can send what pkg/p2p never would.
const (
	sizeInfo    = 128
	sizePin     = 80
	sizeUnpin   = 16
	sizeQuery   = 96
	sizeXfer    = 104
	sizeCancel  = 16
	sizeStream  = 40
	sizeRelease = 24
	sizeStop    = 8

	sizeCompletion = 112
)

func ioc(dir, nr, size uintptr) uintptr { return dir<<30 | size<<16 | 0xD6<<8 | nr }

// Pin kinds; 0 is none.
const (
	kindGPU    = 1
	kindHost   = 2
	kindDmabuf = 3
)

const (
	iocR  = 2
	iocW  = 1
	iocRW = 3
)

func rawIoctl(f *os.File, cmd uintptr, b []byte) error {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), cmd, uintptr(p))
	if e != 0 {
		return e
	}
	return nil
}

type rawPin struct {
	kind, flags uint32
	addr, len   uint64
	fd          int32
	pad         uint32
	reserved    uint64
}

func (p rawPin) bytes(size int) []byte {
	b := make([]byte, max(size, sizePin))
	le := binary.LittleEndian
	le.PutUint32(b[0:], p.kind)
	le.PutUint32(b[4:], p.flags)
	le.PutUint64(b[8:], p.addr)
	le.PutUint64(b[16:], p.len)
	le.PutUint32(b[24:], uint32(p.fd))
	le.PutUint32(b[28:], p.pad)
	le.PutUint64(b[64:], p.reserved)
	return b[:size]
}

type rawXfer struct {
	dir, channel, flags, nsegs uint32
	segs                       []uint64 // handle, offset, len triples
	segsPtr                    uint64   // overrides segs when set
	cardAddr                   uint64
	eventfd                    int32
	eventfdSet                 bool // else -1, none
	pad                        uint32
	reserved                   uint64
}

func (x rawXfer) bytes() []byte {
	b := make([]byte, sizeXfer)
	le := binary.LittleEndian
	le.PutUint32(b[0:], x.dir)
	le.PutUint32(b[4:], x.channel)
	le.PutUint32(b[8:], x.flags)
	le.PutUint32(b[12:], x.nsegs)
	ptr := x.segsPtr
	if ptr == 0 && len(x.segs) > 0 {
		ptr = uint64(uintptr(unsafe.Pointer(&x.segs[0])))
	}
	le.PutUint64(b[16:], ptr)
	le.PutUint64(b[24:], x.cardAddr)
	efd := int32(-1)
	if x.eventfdSet {
		efd = x.eventfd
	}
	le.PutUint32(b[36:], uint32(efd))
	le.PutUint32(b[84:], x.pad)
	le.PutUint64(b[88:], x.reserved)
	return b
}

type rawStream struct {
	channel, nslots uint32
	slots           []uint64 // handle, offset, len triples
	slotsPtr        uint64   // overrides slots when set
	flags, pad      uint32
	reserved        uint64
}

func (s rawStream) bytes() []byte {
	b := make([]byte, sizeStream)
	le := binary.LittleEndian
	le.PutUint32(b[0:], s.channel)
	le.PutUint32(b[4:], s.nslots)
	ptr := s.slotsPtr
	if ptr == 0 && len(s.slots) > 0 {
		ptr = uint64(uintptr(unsafe.Pointer(&s.slots[0])))
	}
	le.PutUint64(b[8:], ptr)
	le.PutUint32(b[16:], s.flags)
	le.PutUint32(b[20:], s.pad)
	le.PutUint64(b[32:], s.reserved)
	return b
}

type rawRelease struct {
	channel, nslots uint32
	slots           []uint32
	stream          uint64
}

func (r rawRelease) bytes() []byte {
	b := make([]byte, sizeRelease)
	le := binary.LittleEndian
	le.PutUint32(b[0:], r.channel)
	le.PutUint32(b[4:], r.nslots)
	if len(r.slots) > 0 {
		le.PutUint64(b[8:], uint64(uintptr(unsafe.Pointer(&r.slots[0]))))
	}
	le.PutUint64(b[16:], r.stream)
	return b
}

func stop(channel, flags uint32) []byte {
	b := make([]byte, sizeStop)
	binary.LittleEndian.PutUint32(b[0:], channel)
	binary.LittleEndian.PutUint32(b[4:], flags)
	return b
}

func TestBadInputGetsExactErrors(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	mine := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: a.Size, fd: -1})
	stale := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: -1})
	if err := rawIoctl(f, ioc(iocW, 2, sizeUnpin), u64s(stale, 0)); err != nil {
		t.Fatal(err)
	}
	// Handles are per file: the other file's is one this file never had.
	var foreign *p2p.Pin
	for range 5 {
		if foreign, err = other.PinGPU(a.VA, 4096, p2p.PinOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nullFile, _ := os.Open("/dev/null")
	defer nullFile.Close()
	ringBuf := make([]byte, sizeCompletion)

	tests := []struct {
		name string
		cmd  uintptr
		arg  []byte
		want unix.Errno
	}{
		{"info: wrong direction", ioc(iocW, 0, sizeInfo), make([]byte, sizeInfo), unix.ENOTTY},
		{"info: too short", ioc(iocR, 0, 8), make([]byte, 8), unix.EINVAL},
		{"unknown ioctl number", ioc(iocRW, 0x10, 16), make([]byte, 16), unix.ENOTTY},
		{"foreign ioctl type", 'H'<<8 | 1, nil, unix.ENOTTY},
		{"pin: unknown kind", ioc(iocRW, 1, sizePin), rawPin{kind: 7, addr: a.VA, len: 4096, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: no kind (a zeroed struct)", ioc(iocRW, 1, sizePin), rawPin{addr: a.VA, len: 4096, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: fd 0 on a host pin", ioc(iocRW, 1, sizePin), rawPin{kind: kindHost, addr: uint64(uintptr(unsafe.Pointer(&ringBuf[0]))), len: 64}.bytes(sizePin), unix.EINVAL},
		{"pin: unknown flag", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, flags: 4, addr: a.VA, len: 4096, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: persistent host", ioc(iocRW, 1, sizePin), rawPin{kind: kindHost, flags: 1, addr: 4096, len: 4096, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: padding set", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: -1, pad: 1}.bytes(sizePin), unix.EINVAL},
		{"pin: reserved set", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: -1, reserved: 1}.bytes(sizePin), unix.EINVAL},
		{"pin: zero length", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: a.VA, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: address wraps", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: ^uint64(0) - 10, len: 100, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: GPU range not allocated", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: 0x100000000, len: 4096, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: GPU range past allocation", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: a.VA, len: a.Size + 1, fd: -1}.bytes(sizePin), unix.EINVAL},
		{"pin: host range unmapped", ioc(iocRW, 1, sizePin), rawPin{kind: kindHost, addr: 0x1000, len: 4096, fd: -1}.bytes(sizePin), unix.EFAULT},
		{"pin: fd on a GPU pin", ioc(iocRW, 1, sizePin), rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: 3}.bytes(sizePin), unix.EINVAL},
		{"pin: not a dma-buf", ioc(iocRW, 1, sizePin), rawPin{kind: kindDmabuf, len: 4096, fd: int32(nullFile.Fd())}.bytes(sizePin), unix.EINVAL},
		{"pin: bad fd", ioc(iocRW, 1, sizePin), rawPin{kind: kindDmabuf, len: 4096, fd: 999}.bytes(sizePin), unix.EBADF},
		{"pin: struct too short", ioc(iocRW, 1, 24), rawPin{kind: kindGPU, addr: a.VA, len: 4096}.bytes(24), unix.EINVAL},
		{"pin: longer struct with a non-zero tail", ioc(iocRW, 1, sizePin+8), append(rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: -1}.bytes(sizePin), 1, 0, 0, 0, 0, 0, 0, 0), unix.E2BIG},
		{"unpin: unknown handle", ioc(iocW, 2, sizeUnpin), u64s(999, 0), unix.ENOENT},
		{"unpin: stale handle", ioc(iocW, 2, sizeUnpin), u64s(stale, 0), unix.ENOENT},
		{"unpin: another file's handle", ioc(iocW, 2, sizeUnpin), u64s(foreign.Handle, 0), unix.ENOENT},
		{"unpin: flags set", ioc(iocW, 2, sizeUnpin), u64s(mine, 1), unix.EINVAL},
		{"query: unknown handle", ioc(iocRW, 3, sizeQuery), append(u64s(999, 0), make([]byte, sizeQuery-16)...), unix.ENOENT},
		{"query: flags set", ioc(iocRW, 3, sizeQuery), append(u64s(mine, 0), append([]byte{0, 0, 0, 0, 1, 0, 0, 0}, make([]byte, sizeQuery-24)...)...), unix.EINVAL},
		{"cancel: unknown id", ioc(iocW, 5, sizeCancel), u64s(12345, 0), unix.ENOENT},
		{"cancel: flags set", ioc(iocW, 5, sizeCancel), u64s(1, 1), unix.EINVAL},
	}
	xfers := []struct {
		name string
		x    rawXfer
		want unix.Errno
	}{
		{"xfer: bad direction", rawXfer{dir: 2, nsegs: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: absent channel", rawXfer{channel: 3, nsegs: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: channel out of range", rawXfer{channel: 99, nsegs: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: unknown flag", rawXfer{flags: 4, nsegs: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: poll mode asynchronously", rawXfer{flags: 3, nsegs: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: no segments", rawXfer{nsegs: 0}, unix.EINVAL},
		{"xfer: too many segments", rawXfer{nsegs: 100000, segs: []uint64{mine, 0, 10}}, unix.E2BIG},
		{"xfer: card address on a stream channel", rawXfer{channel: 1, nsegs: 1, cardAddr: 64, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: padding set", rawXfer{nsegs: 1, pad: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: reserved set", rawXfer{nsegs: 1, reserved: 1, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: eventfd on a synchronous transfer", rawXfer{nsegs: 1, eventfd: 5, eventfdSet: true, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: eventfd 0 on a synchronous transfer", rawXfer{nsegs: 1, eventfdSet: true, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: eventfd below -1", rawXfer{flags: 1, nsegs: 1, eventfd: -2, eventfdSet: true, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: eventfd not an eventfd", rawXfer{flags: 1, nsegs: 1, eventfd: int32(nullFile.Fd()), eventfdSet: true, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
		{"xfer: segments unreadable", rawXfer{nsegs: 1, segsPtr: 0x1000}, unix.EFAULT},
		{"xfer: zero-length segment", rawXfer{nsegs: 1, segs: []uint64{mine, 0, 0}}, unix.EINVAL},
		{"xfer: segment past the pin", rawXfer{nsegs: 1, segs: []uint64{mine, a.Size - 10, 11}}, unix.EINVAL},
		{"xfer: offset past the pin", rawXfer{nsegs: 1, segs: []uint64{mine, a.Size, 1}}, unix.EINVAL},
		{"xfer: offset+length overflows", rawXfer{nsegs: 1, segs: []uint64{mine, 16, ^uint64(0) - 8}}, unix.EINVAL},
		{"xfer: unknown handle", rawXfer{nsegs: 1, segs: []uint64{999, 0, 10}}, unix.ENOENT},
		{"xfer: stale handle", rawXfer{nsegs: 1, segs: []uint64{stale, 0, 10}}, unix.ENOENT},
		{"xfer: another file's handle", rawXfer{nsegs: 1, segs: []uint64{foreign.Handle, 0, 10}}, unix.ENOENT},
		{"xfer: card address wraps", rawXfer{nsegs: 1, cardAddr: ^uint64(0) - 4, segs: []uint64{mine, 0, 10}}, unix.EINVAL},
	}
	// 64 slots over a 16-page fragmented allocation: 1024 descriptors,
	// one more than the credit counter holds.
	var tooManyDescs []uint64
	for range 64 {
		tooManyDescs = append(tooManyDescs, mine, 0, a.Size)
	}
	slot := []uint64{mine, 0, 4096}
	streams := []struct {
		name string
		s    rawStream
		want unix.Errno
	}{
		{"stream: unknown flag", rawStream{channel: 1, nslots: 1, slots: slot, flags: 2}, unix.EINVAL},
		{"stream: resident without results", rawStream{channel: 1, nslots: 1, slots: slot, flags: 1}, unix.EINVAL},
		{"stream: padding set", rawStream{channel: 1, nslots: 1, slots: slot, pad: 1}, unix.EINVAL},
		{"stream: reserved set", rawStream{channel: 1, nslots: 1, slots: slot, reserved: 1}, unix.EINVAL},
		{"stream: no slots", rawStream{channel: 1, slots: slot}, unix.EINVAL},
		{"stream: channel out of range", rawStream{channel: 99, nslots: 1, slots: slot}, unix.EINVAL},
		{"stream: absent channel", rawStream{channel: 3, nslots: 1, slots: slot}, unix.EINVAL},
		{"stream: memory-mapped channel", rawStream{channel: 0, nslots: 1, slots: slot}, unix.EINVAL},
		{"stream: too many slots", rawStream{channel: 1, nslots: 1024, slots: slot}, unix.E2BIG},
		{"stream: slots unreadable", rawStream{channel: 1, nslots: 1, slotsPtr: 0x1000}, unix.EFAULT},
		{"stream: unknown handle", rawStream{channel: 1, nslots: 1, slots: []uint64{999, 0, 4096}}, unix.ENOENT},
		{"stream: stale handle", rawStream{channel: 1, nslots: 1, slots: []uint64{stale, 0, 4096}}, unix.ENOENT},
		{"stream: another file's handle", rawStream{channel: 1, nslots: 1, slots: []uint64{foreign.Handle, 0, 4096}}, unix.ENOENT},
		{"stream: zero-length slot", rawStream{channel: 1, nslots: 1, slots: []uint64{mine, 0, 0}}, unix.EINVAL},
		{"stream: slot past the pin", rawStream{channel: 1, nslots: 1, slots: []uint64{mine, a.Size - 4096, 4097}}, unix.EINVAL},
		{"stream: offset+length overflows", rawStream{channel: 1, nslots: 1, slots: []uint64{mine, 16, ^uint64(0) - 8}}, unix.EINVAL},
		{"stream: too many descriptors", rawStream{channel: 1, nslots: 64, slots: tooManyDescs}, unix.E2BIG},
	}
	for _, x := range streams {
		tests = append(tests, struct {
			name string
			cmd  uintptr
			arg  []byte
			want unix.Errno
		}{x.name, ioc(iocW, 6, sizeStream), x.s.bytes(), x.want})
	}
	one := []uint32{0}
	tests = append(tests, []struct {
		name string
		cmd  uintptr
		arg  []byte
		want unix.Errno
	}{
		{"release: no stream", ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, nslots: 1, slots: one}.bytes(), unix.ENOENT},
		{"release: no slots", ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, slots: one}.bytes(), unix.EINVAL},
		{"release: a stream id, no stream", ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, nslots: 1, slots: one, stream: 1}.bytes(), unix.ENOENT},
		{"release: channel out of range", ioc(iocW, 7, sizeRelease), rawRelease{channel: 99, nslots: 1, slots: one}.bytes(), unix.EINVAL},
		{"stop: no stream", ioc(iocW, 8, sizeStop), stop(1, 0), unix.ENOENT},
		{"stop: flags set", ioc(iocW, 8, sizeStop), stop(1, 1), unix.EINVAL},
		{"stop: a stream id, no stream", ioc(iocW, 8, sizeStopID), stopID(1, 1), unix.ENOENT},
		{"stop: struct too short", ioc(iocW, 8, 4), stop(1, 0)[:4], unix.EINVAL},
		{"stop: longer struct with a non-zero tail", ioc(iocW, 8, sizeStopID+8), append(stopID(1, 1), 1, 0, 0, 0, 0, 0, 0, 0), unix.E2BIG},
		{"stream: read-write number, struct too short", ioc(iocRW, 6, 16), make([]byte, 16), unix.EINVAL},
		{"stream: read-only number", ioc(iocR, 6, sizeStream), make([]byte, sizeStream), unix.ENOTTY},
		{"release: read-write number", ioc(iocRW, 7, sizeRelease), make([]byte, sizeRelease), unix.ENOTTY},
		{"stop: channel out of range", ioc(iocW, 8, sizeStop), stop(99, 0), unix.EINVAL},
		// Channels the device lacks, or that are not streams, have no
		// stream state (nor, when absent, a lock) to look at.
		{"release: absent channel", ioc(iocW, 7, sizeRelease), rawRelease{channel: 2, nslots: 1, slots: one}.bytes(), unix.EINVAL},
		{"release: memory-mapped channel", ioc(iocW, 7, sizeRelease), rawRelease{channel: 0, nslots: 1, slots: one}.bytes(), unix.EINVAL},
		{"stop: absent channel", ioc(iocW, 8, sizeStop), stop(3, 0), unix.EINVAL},
		{"stop: memory-mapped channel", ioc(iocW, 8, sizeStop), stop(0, 0), unix.EINVAL},
	}...)
	for _, x := range xfers {
		tests = append(tests, struct {
			name string
			cmd  uintptr
			arg  []byte
			want unix.Errno
		}{x.name, ioc(iocRW, 4, sizeXfer), x.x.bytes(), x.want})
	}
	for _, tc := range tests {
		if err := rawIoctl(f, tc.cmd, tc.arg); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if call := ioctlCall(tc.cmd); !documented(call, tc.want) {
			t.Errorf("%s: %v is not in the header's list for %s", tc.name, tc.want, call)
		}
	}
	// The structs hold the addresses of these arrays as integers.
	runtime.KeepAlive(xfers)
	runtime.KeepAlive(streams)
	runtime.KeepAlive(one)
	// A longer struct with a zero tail is a newer caller: accepted.
	long := append(rawPin{kind: kindGPU, addr: a.VA, len: 4096, fd: -1}.bytes(sizePin), make([]byte, 16)...)
	if err := rawIoctl(f, ioc(iocRW, 1, sizePin+16), long); err != nil {
		t.Errorf("longer pin struct with zero tail: %v", err)
	}
	// Reads of completions, on a descriptor of our own (not Go's poller).
	fd, err := unix.Open(devPath, unix.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	readErr := func(n int) error {
		done := make(chan error, 1)
		go func() {
			_, err := unix.Read(fd, ringBuf[:n])
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return errors.New("read blocked")
		}
	}
	if err := readErr(8); err != unix.EINVAL {
		t.Errorf("read smaller than a completion: %v, want EINVAL", err)
	}
	if err := readErr(sizeCompletion); err != unix.EAGAIN {
		t.Errorf("non-blocking read with nothing done: %v, want EAGAIN", err)
	}
	_ = d
}

func rawPinOK(t *testing.T, f *os.File, p rawPin) uint64 {
	t.Helper()
	b := p.bytes(sizePin)
	if err := rawIoctl(f, ioc(iocRW, 1, sizePin), b); err != nil {
		t.Fatalf("pin %+v: %v", p, err)
	}
	return binary.LittleEndian.Uint64(b[32:])
}

func u64s(a, b uint64) []byte {
	out := make([]byte, 16)
	binary.LittleEndian.PutUint64(out, a)
	binary.LittleEndian.PutUint64(out[8:], b)
	return out
}

// setParam sets a gpufpga parameter and returns what restores it.
func setParam(t *testing.T, name, value string) func() {
	t.Helper()
	return guest.SetParam(t, "gpufpga", name, value)
}

func TestLimits(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	restore := setParam(t, "max_pins", "2")
	p1 := pinGPU(t, d, a.VA, 4096)
	p2 := pinGPU(t, d, a.VA, 4096)
	if _, err := d.PinGPU(a.VA, 4096, p2p.PinOptions{}); !errors.Is(err, p2p.ErrLimit) {
		t.Fatalf("third pin over max_pins=2: %v, want ErrLimit", err)
	}
	p1.Unpin()
	p2.Unpin()
	restore()
	restore = setParam(t, "max_pinned", "131072")
	if _, err := d.PinGPU(a.VA, 3<<16, p2p.PinOptions{}); !errors.Is(err, p2p.ErrLimit) {
		t.Fatalf("pin over max_pinned: %v, want ErrLimit", err)
	}
	restore()
	// More descriptors than a chain may hold: one-byte segments that never
	// coalesce.
	setParam(t, "max_segs", "8192")
	p := pinGPU(t, d, a.VA, a.Size)
	var segs []p2p.Segment
	for i := range 5000 {
		segs = append(segs, p2p.Segment{Pin: p, Offset: uint64(2 * i), Len: 1})
	}
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Segments: segs}); !errors.Is(err, p2p.ErrLimit) {
		t.Fatalf("5000 descriptors: %v, want ErrLimit", err)
	}
	if st, _ := p.Query(false); st.Inflight != 0 {
		t.Fatalf("a refused transfer left %d in flight", st.Inflight)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

func TestUnpinBusyWhileTransferInFlight(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	// Two frames a second: the transfer is in flight for seconds.
	if err := ctl.ConfigureSource(4064, 2, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4064, 0, 64)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	id, err := d.Submit(p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: time.Minute}, 42)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unpin(); !errors.Is(err, p2p.ErrBusy) {
		t.Fatalf("unpin during a transfer: %v, want ErrBusy", err)
	}
	if err := d.Cancel(id); err != nil {
		t.Fatal(err)
	}
	c := <-d.Completions()
	if c.ID != id || c.UserData != 42 || !errors.Is(c.Err, p2p.ErrCanceled) {
		t.Fatalf("completion %+v, want canceled", c)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestIoctlFuzz throws 100000 random ioctls at the device: random numbers,
// sizes and contents, biased towards the real commands and live handles.
func TestIoctlFuzz(t *testing.T) {
	setup(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.RandomRuns)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	buf := make([]byte, 512)
	segs := make([]uint64, 3*8)
	nrs := []uintptr{0, 1, 2, 3, 4, 5}
	counts := map[unix.Errno]int{}
	for i := range 100000 {
		for j := range buf {
			buf[j] = 0
		}
		nr := nrs[rng.IntN(len(nrs))]
		if rng.IntN(20) == 0 {
			nr = uintptr(rng.IntN(64))
		}
		size := []uintptr{sizeInfo, sizePin, sizeUnpin, sizeQuery, sizeXfer, sizeCancel}[nr%6]
		if rng.IntN(10) == 0 {
			size = uintptr(rng.IntN(len(buf)))
		}
		dir := uintptr(rng.IntN(4))
		if rng.IntN(4) != 0 {
			dir = []uintptr{iocR, iocRW, iocW, iocRW, iocRW, iocW}[nr%6]
		}
		// Mostly-plausible fields, then random damage.
		le := binary.LittleEndian
		switch nr {
		case 1:
			le.PutUint32(buf[0:], uint32(rng.IntN(4)))
			le.PutUint64(buf[8:], a.VA+uint64(rng.IntN(1<<21)))
			le.PutUint64(buf[16:], uint64(rng.IntN(1<<21)))
			le.PutUint32(buf[24:], uint32(rng.IntN(8))-1)
		case 2, 3, 5:
			le.PutUint64(buf[0:], uint64(rng.IntN(40)))
		case 4:
			le.PutUint32(buf[0:], uint32(rng.IntN(3)))
			le.PutUint32(buf[4:], uint32(rng.IntN(3)))
			le.PutUint32(buf[8:], uint32(rng.IntN(3)))
			le.PutUint32(buf[12:], uint32(rng.IntN(9)))
			for k := range segs {
				segs[k] = uint64(rng.IntN(1 << 20))
				if k%3 == 0 {
					segs[k] = uint64(rng.IntN(40))
				}
			}
			le.PutUint64(buf[16:], uint64(uintptr(unsafe.Pointer(&segs[0]))))
			le.PutUint64(buf[24:], uint64(rng.IntN(1<<26)))
			le.PutUint32(buf[32:], 50)
			le.PutUint32(buf[36:], ^uint32(0))
		}
		for range rng.IntN(3) {
			buf[rng.IntN(int(max(size, 1)))] ^= byte(1 << rng.IntN(8))
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioc(dir, nr, size), uintptr(unsafe.Pointer(&buf[0])))
		counts[e]++
		if i%20000 == 0 {
			t.Logf("%d calls", i)
		}
	}
	t.Logf("errno counts: %v", counts)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if c := counters(t, g); c.LivePins != 0 {
		t.Fatalf("%d pins live after the fuzzer's file closed", c.LivePins)
	}
	pins, err := os.ReadFile("/sys/kernel/debug/gpufpga/gpufpga0/pins")
	if err != nil {
		t.Fatal(err)
	}
	if lines := len(splitLines(pins)); lines != 1 {
		t.Fatalf("debugfs still lists pins:\n%s", pins)
	}
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

// TestRawSyncAndEventfd drives the ABI directly: a blocking transfer, and an
// asynchronous one that signals an eventfd and leaves its completion for
// read().
func TestRawSyncAndEventfd(t *testing.T) {
	setup(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA + 10, len: 200000, fd: -1})
	segs := []uint64{h, 0, 200000}
	b := rawXfer{nsegs: 1, segs: segs, cardAddr: 4096}.bytes()
	if err := rawIoctl(f, ioc(iocRW, 4, sizeXfer), b); err != nil {
		t.Fatalf("synchronous transfer: %v", err)
	}
	runtime.KeepAlive(segs) // b holds their address as an integer
	le := binary.LittleEndian
	if bytes, status, e, descs := le.Uint64(b[56:]), le.Uint32(b[64:]), int32(le.Uint32(b[68:])), le.Uint32(b[80:]); bytes != 200000 || status&2 == 0 || e != 0 || descs < 2 {
		t.Fatalf("sync result: %d bytes, status %#x, error %d, %d descriptors", bytes, status, e, descs)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	segs = []uint64{h, 100, 5000}
	b = rawXfer{dir: 1, flags: 1, eventfd: int32(efd), eventfdSet: true, nsegs: 1, segs: segs}.bytes()
	le.PutUint64(b[40:], 77) // user_data
	if err := rawIoctl(f, ioc(iocRW, 4, sizeXfer), b); err != nil {
		t.Fatalf("asynchronous transfer: %v", err)
	}
	runtime.KeepAlive(segs)
	id := le.Uint64(b[48:])
	var one [8]byte
	if _, err := unix.Read(efd, one[:]); err != nil || le.Uint64(one[:]) != 1 {
		t.Fatalf("eventfd: %v %x", err, one)
	}
	var c [sizeCompletion]byte
	if n, err := f.Read(c[:]); err != nil || n != sizeCompletion {
		t.Fatalf("completion read: %d, %v", n, err)
	}
	// kind XFER, no flags, C2H channel 0, the id, user_data 77, no
	// stream fields, 5000 bytes, no error, a time, nothing reserved.
	if le.Uint32(c[0:]) != 1 || le.Uint32(c[4:]) != 0 || le.Uint32(c[8:]) != 1 || le.Uint32(c[12:]) != 0 ||
		le.Uint64(c[16:]) != id || le.Uint64(c[24:]) != 77 || le.Uint64(c[32:]) != 0 || le.Uint32(c[40:]) != 0 ||
		le.Uint64(c[48:]) != 5000 || le.Uint32(c[56:]) != 0 || le.Uint64(c[72:]) == 0 ||
		!bytes.Equal(c[80:], make([]byte, 32)) {
		t.Fatalf("completion %x", c)
	}
}

// TestSyncTransferSurvivesSignals keeps signalling the thread blocked in a
// synchronous transfer, as a profiler's SIGPROF or Go's own preemption
// signal would: the transfer must run to its end, not be cancelled.
func TestSyncTransferSurvivesSignals(t *testing.T) {
	setup(t)
	g := openGPU(t)
	a := alloc(t, g, 8<<20, simgpu.Fragmented)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 8 << 20
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: n, fd: -1})
	le := binary.LittleEndian
	for round := range 5 {
		runtime.LockOSThread()
		tid := unix.Gettid()
		stop := make(chan struct{})
		sent := make(chan int)
		go func() {
			k := 0
			for {
				select {
				case <-stop:
					sent <- k
					return
				default:
				}
				if unix.Tgkill(unix.Getpid(), tid, unix.SIGURG) == nil {
					k++
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
		segs := []uint64{h, 0, n}
		b := rawXfer{dir: 1, nsegs: 1, segs: segs}.bytes()
		err := rawIoctl(f, ioc(iocRW, 4, sizeXfer), b)
		runtime.KeepAlive(segs)
		close(stop)
		signals := <-sent
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("round %d: transfer under %d signals: %v", round, signals, err)
		}
		if got := le.Uint64(b[56:]); got != n {
			t.Fatalf("round %d: %d of %d bytes under %d signals", round, got, n, signals)
		}
		t.Logf("round %d: %d signals during the transfer", round, signals)
	}
}
