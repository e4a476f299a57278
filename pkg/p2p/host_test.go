//go:build linux

package p2p

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// pinDriver answers PIN with consecutive handles and records UNPINs.
type pinDriver struct {
	mu       sync.Mutex
	next     uint64
	pins     map[uint64]pinArg
	unpinned chan uint64
}

func newPinDriver() *pinDriver {
	return &pinDriver{pins: make(map[uint64]pinArg), unpinned: make(chan uint64, 16)}
}

func (p *pinDriver) ioctl(req uintptr, arg unsafe.Pointer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch req {
	case iocPin:
		a := (*pinArg)(arg)
		p.next++
		a.Handle = p.next
		p.pins[a.Handle] = *a
	case iocUnpin:
		p.unpinned <- (*unpinArg)(arg).Handle
	}
	return nil
}

func TestPinHostTakesOnlyHostBuffers(t *testing.T) {
	drv := newPinDriver()
	d := fakeDevice(t, drv.ioctl)
	other := fakeDevice(t, drv.ioctl)
	h, err := d.AllocHost(3 << 12)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	foreign, err := other.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Free()
	for _, tc := range []struct {
		name string
		buf  []byte
		want string
	}{
		{"Go heap", make([]byte, 4096), "gpufpga pin host 4096 bytes not in a HostBuffer of this device (Device.AllocHost): invalid argument"},
		{"past the buffer's end", unsafe.Slice(&h.Bytes()[1<<12], 2<<12+1), "gpufpga pin host 8193 bytes not in a HostBuffer of this device (Device.AllocHost): invalid argument"},
		{"another device's buffer", foreign.Bytes(), "gpufpga pin host 4096 bytes not in a HostBuffer of this device (Device.AllocHost): invalid argument"},
		{"nothing", nil, "gpufpga pin empty host buffer: invalid argument"},
	} {
		if _, err := d.PinHost(tc.buf); !errors.Is(err, ErrInvalid) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if len(drv.pins) != 0 {
		t.Fatalf("refused memory reached the driver: %v", drv.pins)
	}
	b := h.Bytes()[100 : 2<<12]
	p, err := d.PinHost(b)
	if err != nil {
		t.Fatal(err)
	}
	if a := drv.pins[p.Handle]; a.Kind != pinKindHost || a.Addr != uint64(uintptr(unsafe.Pointer(&b[0]))) || a.Len != uint64(len(b)) {
		t.Fatalf("pinned %+v", a)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

func TestHostBufferFreeWaitsForItsPins(t *testing.T) {
	drv := newPinDriver()
	d := fakeDevice(t, drv.ioctl)
	h, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinHost(h.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(); !errors.Is(err, ErrBusy) || err.Error() != "gpufpga free host buffer with 1 pins: pin has transfers in flight" {
		t.Fatalf("Free of a pinned buffer: %v", err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatalf("second Unpin: %v", err)
	}
	if n := len(drv.unpinned); n != 1 {
		t.Fatalf("%d UNPIN ioctls, want 1", n)
	}
	if err := h.Free(); err != nil || h.Bytes() != nil || h.Len() != 0 {
		t.Fatalf("Free: %v", err)
	}
	if err := h.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
}

// Closing the device unpins its pins: their buffers can be freed then.
func TestHostBufferFreeAfterClose(t *testing.T) {
	d := fakeDevice(t, newPinDriver().ioctl)
	h, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinHost(h.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := h.Free(); err != nil {
		t.Fatalf("Free after Close: %v", err)
	}
	runtime.KeepAlive(p)
}

// A Pin dropped without Unpin is unpinned when it is collected, counted,
// and no longer holds its buffer.
func TestLeakedPinIsUnpinned(t *testing.T) {
	drv := newPinDriver()
	d := fakeDevice(t, drv.ioctl)
	h, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	handle := func() uint64 {
		p, err := d.PinHost(h.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		return p.Handle
	}()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case got := <-drv.unpinned:
			if got != handle {
				t.Fatalf("unpinned handle %d, want %d", got, handle)
			}
		case <-time.After(10 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("a leaked pin was never unpinned")
		}
		break
	}
	// The count follows the unpin in the cleanup.
	for d.LeakedPins() != 1 {
		select {
		case <-deadline:
			t.Fatalf("%d leaked pins counted, want 1", d.LeakedPins())
		case <-time.After(time.Millisecond):
		}
	}
	if err := h.Free(); err != nil {
		t.Fatalf("Free after the leaked pin went: %v", err)
	}
}

// handleDriver answers PIN with consecutive handles and everything else
// with success, without blocking.
type handleDriver struct{ next atomic.Uint64 }

func (h *handleDriver) ioctl(req uintptr, arg unsafe.Pointer) error {
	if req == iocPin {
		(*pinArg)(arg).Handle = h.next.Add(1)
	}
	return nil
}

// Freeing one host buffer while another goroutine pins another of the same
// device: two compat sessions starting and stopping at once. Free and
// PinHost must take the device's and the buffer's locks in one order, or
// both hang for good.
func TestHostFreeRacesPin(t *testing.T) {
	d := fakeDevice(t, (&handleDriver{}).ioctl)
	keep, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	var rounds atomic.Uint64
	// Deadlocked goroutines never see this; it stops the other one when
	// a round fails.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	go func() {
		for i := 0; i < n && ctx.Err() == nil; i++ {
			h, err := d.AllocHost(4096)
			if err != nil {
				errs <- err
				return
			}
			if err := h.Free(); err != nil {
				errs <- err
				return
			}
			rounds.Add(1)
		}
		errs <- nil
	}()
	go func() {
		for i := 0; i < n && ctx.Err() == nil; i++ {
			p, err := d.PinHost(keep.Bytes())
			if err != nil {
				errs <- err
				return
			}
			if err := p.Unpin(); err != nil {
				errs <- err
				return
			}
			rounds.Add(1)
		}
		errs <- nil
	}()
	// A deadlock is a round that never ends: fail when neither goroutine
	// has finished one for a minute. A slow guest (a debug kernel under
	// TCG) is slow, but never that still.
	const still = time.Minute
	for left, last, since := 2, rounds.Load(), time.Now(); left > 0; {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
			left--
		case <-time.After(time.Second):
			if n := rounds.Load(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) > still {
				// Nothing here may take the locks the goroutines hang
				// on: no Free of keep on the way out.
				buf := make([]byte, 1<<20)
				t.Fatalf("no pin or free ended in %v, deadlocked:\n%s", still, buf[:runtime.Stack(buf, true)])
			}
		}
	}
	if err := keep.Free(); err != nil {
		t.Fatal(err)
	}
}
