//go:build linux

package p2p

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UserLines is the number of user interrupt lines (usr_irq_req) the XDMA
// IP carries from the FPGA's logic.
const UserLines = userIRQs

// UserInterrupts is what WaitUserInterrupt saw.
type UserInterrupts struct {
	// Fired has bit n set for each line n asked for that fired since
	// this Device last reported it (or was opened).
	Fired uint16
	// Counts is each line's interrupts since the driver bound the card.
	Counts [UserLines]uint64
}

// userWaitSlice bounds one wait in the driver, so that ctx is looked at
// between them: an ioctl cannot be cancelled.
const userWaitSlice = 100 * time.Millisecond

// WaitUserInterrupt enables the user interrupt lines in lines (bit n for
// line n) and waits until one of them fires or ctx ends. A line that fires
// is masked by the driver until the next call enables it again: serve the
// user logic (through its registers) before waiting again, or a request it
// holds high fires at once. Lines that fired before the call, since the
// Device last reported them, are reported at once. Reports are per
// Device: wait for a line from one goroutine.
//
// It returns ctx's error (wrapped) within about 100 ms of ctx ending, and
// ErrInvalid, ErrReset (the card is being reset or recovers: wait again
// once it is back), ErrDeviceGone or os.ErrClosed.
func (d *Device) WaitUserInterrupt(ctx context.Context, lines uint16) (UserInterrupts, error) {
	if lines == 0 {
		return UserInterrupts{}, &Error{Op: "user interrupt", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "no line asked for"}
	}
	for {
		if err := ctx.Err(); err != nil {
			return UserInterrupts{}, fmt.Errorf("gpufpga user interrupt: lines %#x: %w", lines, err)
		}
		a := userIRQArg{Lines: uint32(lines), Msecs: uint32(userWaitSlice / time.Millisecond)}
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < userWaitSlice {
				a.Msecs = uint32(max(left, time.Millisecond) / time.Millisecond)
			}
		}
		err := d.ioctl(iocUserIRQ, unsafe.Pointer(&a))
		switch {
		case err == nil:
			u := UserInterrupts{Fired: uint16(a.Fired)}
			copy(u.Counts[:], a.Counts[:])
			return u, nil
		case errors.Is(err, unix.ETIMEDOUT), errors.Is(err, unix.EINTR):
			// A slice ended: look at ctx again.
		default:
			return UserInterrupts{}, newError("user interrupt", err, fmt.Sprintf("lines %#x", lines))
		}
	}
}
