//go:build vmguest

package kmodtest

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

const sizeUserIRQ = 16 + 16*8

// rawUserIRQ is struct gpufpga_user_irq.
func rawUserIRQ(lines, msecs, pad uint32) []byte {
	b := make([]byte, sizeUserIRQ)
	binary.LittleEndian.PutUint32(b[0:], lines)
	binary.LittleEndian.PutUint32(b[4:], msecs)
	binary.LittleEndian.PutUint32(b[12:], pad)
	return b
}

// TestUserInterruptErrors: every bad argument of USER_IRQ gets its errno,
// and a wait for a line that does not fire ends as the header says.
func TestUserInterruptErrors(t *testing.T) {
	setup(t)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := ioc(iocRW, 9, sizeUserIRQ)
	expectErrno(t, f, "user irq: no line", cmd, rawUserIRQ(0, 0, 0), unix.EINVAL)
	expectErrno(t, f, "user irq: line 16", cmd, rawUserIRQ(1<<16, 0, 0), unix.EINVAL)
	expectErrno(t, f, "user irq: pad", cmd, rawUserIRQ(1, 0, 1), unix.EINVAL)
	expectErrno(t, f, "user irq: none fired, no wait", cmd, rawUserIRQ(1<<15, 0, 0), unix.EAGAIN)
	expectErrno(t, f, "user irq: none fired in 20 ms", cmd, rawUserIRQ(1<<15, 20, 0), unix.ETIMEDOUT)
	expectErrno(t, f, "user irq: short argument", ioc(iocRW, 9, 8), make([]byte, 8), unix.EINVAL)

	d := openDev(t)
	if _, err := d.WaitUserInterrupt(context.Background(), 0); !errors.Is(err, p2p.ErrInvalid) {
		t.Fatalf("WaitUserInterrupt of no line: %v, want ErrInvalid", err)
	}
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := d.WaitUserInterrupt(c, 1<<14); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitUserInterrupt of a quiet line: %v, want context.DeadlineExceeded", err)
	}
}

// raise drives usr_irq_req to lines, as the card's user logic would.
func raise(t *testing.T, ctl *rigctl.Control, lines uint16) {
	t.Helper()
	if _, err := ctl.SetUserIRQ(lines); err != nil {
		t.Fatal(err)
	}
}

// TestUserInterrupts raises user interrupt lines from the card and waits
// for them through the driver: each rising request is one interrupt,
// counted on its line; a line is masked once it fires until the next wait
// enables it, so a request held high is not lost and does not storm; a
// request raised while its line is masked fires when it is enabled; each
// file counts from its open.
func TestUserInterrupts(t *testing.T) {
	d := openDev(t)
	ctl := control(t)
	t.Cleanup(func() { ctl.SetUserIRQ(0) })
	wait := func(d *p2p.Device, lines uint16) p2p.UserInterrupts {
		t.Helper()
		u, err := d.WaitUserInterrupt(ctx(t), lines)
		if err != nil {
			t.Fatalf("waiting for lines %#x: %v", lines, err)
		}
		return u
	}
	// Line 3 rises after the wait enabled it.
	got := make(chan p2p.UserInterrupts, 1)
	go func() {
		u, err := d.WaitUserInterrupt(ctx(t), 1<<3)
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	// The waiter enables the line before it sleeps; a request raised
	// before that is still sent when the line is enabled.
	raise(t, ctl, 1<<3)
	u := <-got
	if u.Fired != 1<<3 || u.Counts[3] == 0 {
		t.Fatalf("line 3 raised: %+v, want line 3 fired", u)
	}
	first := u.Counts[3]
	// Held high, it does not fire again: it was sent once, and is masked.
	if _, err := d.WaitUserInterrupt(shortCtx(t), 1<<3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("line 3 held high: %v, want no second interrupt", err)
	}
	// Dropped and raised again, it fires again: one more on its count.
	raise(t, ctl, 0)
	raise(t, ctl, 1<<3)
	if u = wait(d, 1<<3); u.Fired != 1<<3 || u.Counts[3] != first+1 {
		t.Fatalf("line 3 raised again: %+v, want count %d", u, first+1)
	}
	raise(t, ctl, 0)

	// A file opened now counts from here: line 3's past is not news.
	d2 := openDev(t)
	if _, err := d2.WaitUserInterrupt(shortCtx(t), 1<<3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a new file sees line 3's past: %v", err)
	}
	// Two lines at once: both reported to both files, counted once each.
	raise(t, ctl, 1<<3|1<<9)
	u = wait(d, 1<<3|1<<9)
	for u.Fired != 1<<3|1<<9 {
		u2 := wait(d, (1<<3|1<<9)&^u.Fired)
		u.Fired |= u2.Fired
		u.Counts = u2.Counts
	}
	if u.Counts[3] != first+2 || u.Counts[9] == 0 {
		t.Fatalf("lines 3 and 9 raised: %+v", u)
	}
	if u2 := wait(d2, 1<<3|1<<9); u2.Fired&(1<<3) == 0 {
		t.Fatalf("the second file missed line 3: %+v", u2)
	}
	raise(t, ctl, 0)
}

// shortCtx is a context that ends soon: for waits that must not return.
func shortCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return c
}

// userInterruptOnce raises user interrupt line, held until the driver has
// reported it, and checks that d is told of that line alone.
func userInterruptOnce(t *testing.T, d *p2p.Device, line uint) {
	t.Helper()
	ctl := control(t)
	raise(t, ctl, 1<<line)
	defer raise(t, ctl, 0)
	u, err := d.WaitUserInterrupt(ctx(t), 0xFFFF)
	if err != nil {
		t.Fatalf("user interrupt line %d: %v", line, err)
	}
	if u.Fired != 1<<line {
		t.Fatalf("user interrupt line %d raised: lines %#x reported", line, u.Fired)
	}
}
