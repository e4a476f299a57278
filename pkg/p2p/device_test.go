//go:build linux

package p2p

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeDevice is a Device whose ioctls go to sys and whose completion
// reader reads a pipe that nothing writes: the driver's answers without
// the driver.
func fakeDevice(t *testing.T, sys ioctlFunc) *Device {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	d := newDevice(r, "/dev/gpufpga-fake", sys)
	t.Cleanup(func() { d.Close() })
	return d
}

func TestOpenRefusesOtherDevices(t *testing.T) {
	d, err := Open("/dev/null")
	if err == nil {
		d.Close()
		t.Fatal("Open(/dev/null) succeeded")
	}
	const want = "gpufpga open /dev/null: driver ABI not supported: not a gpufpga device (INFO ioctl: inappropriate ioctl for device)"
	var ae *ABIError
	if !errors.Is(err, ErrABI) || !errors.Is(err, unix.ENOTTY) || !errors.As(err, &ae) || ae.Version != 0 || err.Error() != want {
		t.Fatalf("Open(/dev/null): %v\nwant %s", err, want)
	}
	if ae.Hint() == "" {
		t.Error("no hint")
	}
}

func TestCheckABI(t *testing.T) {
	info := func(version uint32, errno unix.Errno) ioctlFunc {
		return func(req uintptr, arg unsafe.Pointer) error {
			if req != iocInfo {
				t.Fatalf("ioctl %#x, want INFO", req)
			}
			if errno != 0 {
				return errno
			}
			(*infoArg)(arg).Abi_version = version
			return nil
		}
	}
	if err := newDevice(nil, "n", info(ABIVersion, 0)).checkABI(); err != nil {
		t.Fatalf("ABI %d: %v", ABIVersion, err)
	}
	err := newDevice(nil, "n", info(ABIVersion+1, 0)).checkABI()
	var ae *ABIError
	if !errors.As(err, &ae) || ae.Version != ABIVersion+1 || !errors.Is(err, ErrABI) ||
		err.Error() != "gpufpga open n: driver ABI not supported: the driver speaks ABI 2, this program 1" {
		t.Fatalf("ABI %d: %v", ABIVersion+1, err)
	}
	// A gpufpga device that went away is not a wrong ABI.
	err = newDevice(nil, "n", info(0, unix.ENODEV)).checkABI()
	if !errors.Is(err, ErrDeviceGone) || errors.Is(err, ErrABI) {
		t.Fatalf("ENODEV: %v", err)
	}
}

func okIoctl(uintptr, unsafe.Pointer) error { return nil }

func TestCallsAfterClose(t *testing.T) {
	d := fakeDevice(t, okIoctl)
	p := &Pin{Handle: 1, Len: 4096, dev: d}
	st, err := d.StartStream(0, []Segment{p.Whole()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	_, infoErr := d.Info()
	_, xferErr := d.Transfer(context.Background(), Transfer{Segments: []Segment{p.Whole()}})
	_, submitErr := d.Submit(Transfer{Segments: []Segment{p.Whole()}}, 0)
	_, pinErr := d.PinGPU(1<<16, 1<<16, PinOptions{})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{infoErr, "gpufpga info: device closed"},
		{xferErr, "gpufpga transfer: device closed"},
		{submitErr, "gpufpga transfer: device closed"},
		{pinErr, "gpufpga pin GPU 0x10000+65536: device closed"},
		{p.Unpin(), "gpufpga unpin handle 1: device closed"},
	} {
		if !errors.Is(tc.err, os.ErrClosed) || tc.err.Error() != tc.want {
			t.Errorf("after Close: %v, want %q matching os.ErrClosed", tc.err, tc.want)
		}
	}
	// The stream ended with the device; stopping and releasing it is
	// no error.
	if err := st.Stop(); err != nil {
		t.Errorf("Stop after Close: %v", err)
	}
	if err := st.Release(0); err != nil {
		t.Errorf("Release after Close: %v", err)
	}
	if err := st.Err(); !errors.Is(err, ErrDeviceGone) || !errors.Is(err, os.ErrClosed) {
		t.Errorf("stream ended with %v, want ErrDeviceGone and os.ErrClosed", err)
	}
}

// A file closed under an ioctl fails it with os.ErrClosed, not the
// poller's private error.
func TestFileIoctlClosed(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	sys := fileIoctl(f)
	var a infoArg
	if err := sys(iocInfo, unsafe.Pointer(&a)); err != unix.ENOTTY {
		t.Fatalf("INFO on /dev/null: %v", err)
	}
	f.Close()
	if err := sys(iocInfo, unsafe.Pointer(&a)); err != os.ErrClosed {
		t.Fatalf("INFO on a closed file: %v", err)
	}
}

// stopDriver answers STREAM_STOP as the driver does: the first stop
// succeeds and its STREAM_END record comes later; a stop after that finds
// no stream (ENOENT). end delivers the record.
type stopDriver struct {
	mu    sync.Mutex
	stops int
	again chan struct{} // closed at the second STOP
}

func (s *stopDriver) ioctl(req uintptr, _ unsafe.Pointer) error {
	if req != iocStreamStop {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops++
	if s.stops == 1 {
		return nil
	}
	if s.stops == 2 {
		close(s.again)
	}
	return unix.ENOENT
}

// end delivers the channel's STREAM_END once a second STOP reached the
// driver, or after a while.
func end(d *Device, channel int, after <-chan struct{}) {
	select {
	case <-after:
	case <-time.After(100 * time.Millisecond):
	}
	d.streamEvent(record{kind: eventStreamEnd, c: Completion{Channel: channel}})
}

// Two Stops racing: the second must not fail with the ENOENT the driver
// answers once the first has ended the stream but before its STREAM_END
// was read.
func TestStopRace(t *testing.T) {
	drv := &stopDriver{again: make(chan struct{})}
	d := fakeDevice(t, drv.ioctl)
	st, err := d.StartStream(1, []Segment{{Pin: &Pin{Handle: 1}, Len: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- st.Stop() }()
	}
	go end(d, 1, drv.again)
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
	select {
	case <-st.ended:
	default:
		t.Error("Stop returned before the stream ended")
	}
	if drv.stops != 1 {
		t.Errorf("%d STOP ioctls, want 1", drv.stops)
	}
}

// A stream the driver ended by itself (an engine error) answers STOP with
// ENOENT before its STREAM_END is read: Stop waits for it and returns nil.
func TestStopEndedStream(t *testing.T) {
	d := fakeDevice(t, func(req uintptr, _ unsafe.Pointer) error {
		if req == iocStreamStop {
			return unix.ENOENT
		}
		return nil
	})
	st, err := d.StartStream(1, []Segment{{Pin: &Pin{Handle: 1}, Len: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		d.streamEvent(record{kind: eventStreamEnd, c: Completion{Channel: 1, Err: &Error{Op: "transfer", Err: unix.EIO, Kind: ErrHardware}}})
	}()
	if err := st.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !errors.Is(st.Err(), ErrHardware) {
		t.Fatalf("Err: %v", st.Err())
	}
}

func TestTimeoutMilliseconds(t *testing.T) {
	pin := &Pin{Handle: 1}
	for _, tc := range []struct {
		timeout time.Duration
		ms      uint32
	}{
		{0, 0}, // the driver's default
		{time.Nanosecond, 1},
		{500 * time.Microsecond, 1},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{5 * time.Second, 5000},
		{MaxTimeout, 1<<32 - 1},
	} {
		a, err := xferArgs(&Transfer{Segments: []Segment{{Pin: pin, Len: 1}}, Timeout: tc.timeout}, 0)
		if err != nil || a.Timeout_ms != tc.ms {
			t.Errorf("timeout %v: %d ms, %v; want %d ms", tc.timeout, a.Timeout_ms, err, tc.ms)
		}
	}
	for _, tc := range []struct {
		timeout time.Duration
		want    string
	}{
		{-time.Nanosecond, "gpufpga transfer timeout -1ns outside 0 to 1193h2m47.295s: invalid argument"},
		{MaxTimeout + time.Nanosecond, "gpufpga transfer timeout 1193h2m47.295000001s outside 0 to 1193h2m47.295s: invalid argument"},
	} {
		_, err := xferArgs(&Transfer{Segments: []Segment{{Pin: pin, Len: 1}}, Timeout: tc.timeout}, 0)
		if !errors.Is(err, ErrInvalid) || err.Error() != tc.want {
			t.Errorf("timeout %v: %v, want %q", tc.timeout, err, tc.want)
		}
	}
}

func TestPolledTransfer(t *testing.T) {
	var flags []uint32
	fail := false
	d := fakeDevice(t, func(req uintptr, arg unsafe.Pointer) error {
		if req != iocXfer {
			return nil
		}
		a := (*xferPtrArg)(arg)
		flags = append(flags, a.Flags)
		a.Id, a.Bytes, a.Duration_ns = 9, 4096, 1000
		if fail {
			a.Status, a.Error = 0x10, -int32(unix.EIO)
			return unix.EIO
		}
		return nil
	})
	pin := &Pin{Handle: 1, Len: 4096, dev: d}
	tr := Transfer{Dir: C2H, Channel: 1, Segments: []Segment{pin.Whole()}, Poll: true}
	r, err := d.Transfer(context.Background(), tr)
	if err != nil || r != (Result{ID: 9, Bytes: 4096, Duration: time.Microsecond}) {
		t.Fatalf("polled transfer: %+v, %v", r, err)
	}
	fail = true
	_, err = d.Transfer(context.Background(), tr)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrHardware) || !e.HasHW || e.Status != 0x10 || e.Chan != 1 || e.Dir != C2H {
		t.Fatalf("failed polled transfer: %#v", err)
	}
	if len(flags) != 2 || flags[0] != xferFlagPoll || flags[1] != xferFlagPoll {
		t.Fatalf("XFER flags %v, want GPUFPGA_XFER_POLL alone", flags)
	}
	_, err = d.Submit(tr, 0)
	if !errors.Is(err, ErrInvalid) || err.Error() != "gpufpga transfer a polled transfer is synchronous: use Transfer: invalid argument" {
		t.Fatalf("Submit of a polled transfer: %v", err)
	}
}
