//go:build linux

package p2p

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestWaitUserInterrupt(t *testing.T) {
	// The driver's answers, one per call: slices that end with nothing,
	// then line 2.
	var calls atomic.Int32
	d := fakeDevice(t, func(req uintptr, arg unsafe.Pointer) error {
		if req != iocUserIRQ {
			return nil
		}
		a := (*userIRQArg)(arg)
		if a.Lines != 1<<2|1<<5 || a.Msecs == 0 || a.Msecs > 100 {
			t.Errorf("USER_IRQ lines %#x msecs %d", a.Lines, a.Msecs)
		}
		if calls.Add(1) < 3 {
			return unix.ETIMEDOUT
		}
		a.Fired = 1 << 2
		a.Counts[2] = 7
		return nil
	})
	u, err := d.WaitUserInterrupt(context.Background(), 1<<2|1<<5)
	if err != nil || u.Fired != 1<<2 || u.Counts[2] != 7 || calls.Load() != 3 {
		t.Fatalf("WaitUserInterrupt = %+v, %v after %d calls", u, err, calls.Load())
	}
}

func TestWaitUserInterruptEnds(t *testing.T) {
	var calls atomic.Int32
	answer := unix.ETIMEDOUT
	d := fakeDevice(t, func(req uintptr, arg unsafe.Pointer) error {
		calls.Add(1)
		if a := (*userIRQArg)(arg); a.Msecs > 100 {
			t.Errorf("a wait of %d ms, past the slice", a.Msecs)
		}
		return answer
	})
	// A context ended before the call: no ioctl at all.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.WaitUserInterrupt(ctx, 1); !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Fatalf("cancelled context: %v after %d calls, want context.Canceled and none", err, calls.Load())
	}
	// A deadline: slices no longer than what is left, then its error.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := d.WaitUserInterrupt(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v, want context.DeadlineExceeded", err)
	}
	for _, tc := range []struct {
		errno unix.Errno
		kind  error
	}{{unix.ECONNRESET, ErrReset}, {unix.ENODEV, ErrDeviceGone}, {unix.EINVAL, ErrInvalid}} {
		answer = tc.errno
		if _, err := d.WaitUserInterrupt(context.Background(), 1); !errors.Is(err, tc.kind) || !errors.Is(err, tc.errno) {
			t.Errorf("driver answers %v: %v, want %v", tc.errno, err, tc.kind)
		}
	}
	if _, err := d.WaitUserInterrupt(context.Background(), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("no line: %v, want ErrInvalid", err)
	}
	d.Close()
	if _, err := d.WaitUserInterrupt(context.Background(), 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("closed Device: %v, want os.ErrClosed", err)
	}
}
