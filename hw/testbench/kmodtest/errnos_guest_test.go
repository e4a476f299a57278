//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// ioctlCall names the call of an ioctl number, as callErrnos does.
func ioctlCall(cmd uintptr) string {
	if cmd>>8&0xFF != 0xD6 {
		return "foreign"
	}
	names := []string{"INFO", "PIN", "UNPIN", "QUERY", "XFER", "CANCEL", "STREAM_START", "STREAM_RELEASE", "STREAM_STOP", "USER_IRQ"}
	if nr := cmd & 0xFF; nr < uintptr(len(names)) {
		return names[nr]
	}
	return "unknown"
}

// expectErrno runs one ioctl and checks its errno, and that the header
// lists it for the call.
func expectErrno(t *testing.T, f *os.File, what string, cmd uintptr, arg []byte, want unix.Errno) {
	t.Helper()
	if err := rawIoctl(f, cmd, arg); err != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
	if call := ioctlCall(cmd); !documented(call, want) {
		t.Errorf("%s: %v is not in the header's list for %s", what, want, call)
	}
}

// TestErrnosOfBusyChannelsAndQueues: the errnos that need a running
// stream, a full queue or a missing capability, which
// TestBadInputGetsExactErrors cannot reach with one bad argument.
func TestErrnosOfBusyChannelsAndQueues(t *testing.T) {
	setup(t)
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	ringPin := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: 1 << 16, fd: -1})
	other := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA + 1<<16, len: 1 << 16, fd: -1})
	slots := []uint64{ringPin, 0, 4096, ringPin, 4096, 4096}
	start := rawStream{channel: 1, nslots: 2, slots: slots}
	if err := rawIoctl(f, ioc(iocW, 6, sizeStream), start.bytes()); err != nil {
		t.Fatal(err)
	}
	expectErrno(t, f, "stream: a second on a running channel", ioc(iocW, 6, sizeStream), start.bytes(), unix.EBUSY)
	xfer := rawXfer{dir: 1, channel: 1, nsegs: 1, segs: []uint64{other, 0, 4096}}
	expectErrno(t, f, "xfer: on a channel a stream runs on", ioc(iocRW, 4, sizeXfer), xfer.bytes(), unix.EBUSY)
	expectErrno(t, f, "unpin: a running stream's slots", ioc(iocW, 2, sizeUnpin), u64s(ringPin, 0), unix.EBUSY)
	expectErrno(t, f, "release: an index past the ring", ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, nslots: 1, slots: []uint32{9999}}.bytes(), unix.EINVAL)
	if err := rawIoctl(f, ioc(iocW, 8, sizeStop), stop(1, 0)); err != nil {
		t.Fatal(err)
	}
	expectErrno(t, f, "release: after the stream ended", ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, nslots: 1, slots: []uint32{0}}.bytes(), unix.ENOENT)
	runtime.KeepAlive(slots)

	// One unread asynchronous transfer fills a queue of one.
	restore := setParam(t, "max_queued", "1")
	async := rawXfer{flags: 1, nsegs: 1, eventfd: -1, eventfdSet: true, segs: []uint64{other, 0, 4096}}
	if err := rawIoctl(f, ioc(iocRW, 4, sizeXfer), async.bytes()); err != nil {
		t.Fatal(err)
	}
	expectErrno(t, f, "xfer: async past max_queued", ioc(iocRW, 4, sizeXfer), async.bytes(), unix.EAGAIN)
	restore()
	drain(t, f)

	// QUERY's page addresses need CAP_SYS_ADMIN, checked before the handle.
	q := append(u64s(999, 0x1000), make([]byte, sizeQuery-16)...)
	withoutCapability(t, unix.CAP_SYS_ADMIN, func() {
		expectErrno(t, f, "query: pages without CAP_SYS_ADMIN", ioc(iocRW, 3, sizeQuery), q, unix.EPERM)
	})
	expectErrno(t, f, "query: pages of an unknown handle", ioc(iocRW, 3, sizeQuery), q, unix.ENOENT)
}

// drain reads f's completion records until none comes for a while.
func drain(t *testing.T, f *os.File) {
	t.Helper()
	buf := make([]byte, sizeCompletion)
	fd := int(f.Fd())
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((2 * time.Second).Milliseconds()))
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if _, err := unix.Read(fd, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// withoutCapability runs fn on this OS thread with capability c dropped
// from its effective set (capabilities are per thread), then restores it.
func withoutCapability(t *testing.T, c int, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	saved := data
	data[c/32].Effective &^= 1 << (c % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			t.Fatal(err)
		}
	}()
	fn()
}

// documented reports whether call may return errno by the header.
func documented(call string, errno unix.Errno) bool {
	if call != "read" {
		for _, e := range commonErrnos {
			if e == errno {
				return true
			}
		}
	}
	for _, e := range callErrnos[call] {
		if e == errno {
			return true
		}
	}
	return false
}
