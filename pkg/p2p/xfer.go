//go:build linux

package p2p

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transfer describes a DMA between pinned memory and the card.
type Transfer struct {
	Dir     Direction
	Channel int
	// CardAddr is the card (AXI) address of a memory-mapped channel; it
	// must be 0 on a stream channel.
	CardAddr uint64
	// Segments are moved in order, as one chain.
	Segments []Segment
	// Timeout overrides the driver's default (Info.DefaultTimeoutMS); 0
	// keeps it. The driver counts whole milliseconds: a timeout between
	// them is rounded up, so 1 ns waits 1 ms, never the default. A
	// negative one, or one past MaxTimeout, fails with ErrInvalid.
	Timeout time.Duration
	// Poll waits for the engine by spinning on its writeback word (the
	// driver's GPUFPGA_XFER_POLL) instead of sleeping until its
	// interrupt: the lowest latency, for one busy CPU. Only Transfer
	// takes it (Submit fails with ErrInvalid), and its context cannot
	// interrupt a polled transfer once started: Timeout bounds it.
	Poll bool
}

// MaxTimeout is the longest Transfer.Timeout the driver takes.
const MaxTimeout = time.Duration(math.MaxUint32) * time.Millisecond

// timeoutMS is t in the driver's milliseconds, rounded up.
func timeoutMS(t time.Duration) (uint32, error) {
	if t < 0 || t > MaxTimeout {
		return 0, &Error{Op: "transfer", Err: unix.EINVAL, Kind: ErrInvalid,
			Detail: fmt.Sprintf("timeout %v outside 0 to %v", t, MaxTimeout)}
	}
	return uint32((t + time.Millisecond - 1) / time.Millisecond), nil
}

func (t *Transfer) describe() string {
	var n uint64
	for _, s := range t.Segments {
		n += s.Len
	}
	return fmt.Sprintf("%v channel %d, %d bytes in %d segments", t.Dir, t.Channel, n, len(t.Segments))
}

// Completion reports a finished transfer.
type Completion struct {
	ID       uint64
	UserData uint64
	Dir      Direction
	Channel  int
	Bytes    uint64
	Status   uint32 // XDMA channel status at the end
	Duration time.Duration
	Err      error // nil, or an *Error
}

// Result is what a synchronous transfer did.
type Result struct {
	ID       uint64
	Bytes    uint64
	Status   uint32
	Duration time.Duration
}

// xferArgs builds the XFER ioctl's argument for t, asynchronous or (for
// Poll) synchronous; the segment array it points at lives as long as the
// argument does.
func xferArgs(t *Transfer, userData uint64) (xferPtrArg, error) {
	if len(t.Segments) == 0 {
		return xferPtrArg{}, &Error{Op: "transfer", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "no segments"}
	}
	ms, err := timeoutMS(t.Timeout)
	if err != nil {
		return xferPtrArg{}, err
	}
	flags := uint32(xferFlagAsync)
	if t.Poll {
		flags = xferFlagPoll
	}
	segs := make([]segArg, len(t.Segments))
	for i, s := range t.Segments {
		if s.Pin == nil {
			return xferPtrArg{}, &Error{Op: "transfer", Err: unix.EINVAL, Kind: ErrInvalid, Detail: fmt.Sprintf("segment %d has no pin", i)}
		}
		segs[i] = segArg{Handle: s.Pin.Handle, Offset: s.Offset, Len: s.Len}
	}
	return xferPtrArg{
		Dir: uint32(t.Dir), Channel: uint32(t.Channel), Flags: flags, Nsegs: uint32(len(segs)),
		Segs: slicePointer(segs), Card_addr: t.CardAddr,
		Timeout_ms: ms, Eventfd: -1, User_data: userData,
	}, nil
}

func (d *Device) submit(t *Transfer, userData uint64) (uint64, error) {
	if t.Poll {
		return 0, &Error{Op: "transfer", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "a polled transfer is synchronous: use Transfer"}
	}
	a, err := xferArgs(t, userData)
	if err != nil {
		return 0, err
	}
	if err := d.ioctl(iocXfer, unsafe.Pointer(&a)); err != nil {
		return 0, newError("transfer", err, t.describe())
	}
	return a.Id, nil
}

// Transfer runs t and waits for it. Cancelling ctx stops the transfer in
// the driver (the channel is halted) and returns an error matching
// ErrCanceled and ctx.Err(); a polled one (t.Poll) only checks ctx before
// it starts.
func (d *Device) Transfer(ctx context.Context, t Transfer) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if t.Poll {
		return d.transferPolled(&t)
	}
	done := make(chan Completion, 1)
	d.mu.Lock()
	if err := d.startReader(); err != nil {
		d.mu.Unlock()
		return Result{}, err
	}
	// Registered under the lock the reader dispatches under, so the
	// completion cannot arrive unclaimed.
	id, err := d.submit(&t, 0)
	if err == nil {
		d.waiters[id] = done
	}
	d.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	var c Completion
	select {
	case c = <-done:
	case <-ctx.Done():
		_ = d.Cancel(id) // it may have finished meanwhile
		c = <-done
		if c.Err != nil {
			return Result{ID: id, Bytes: c.Bytes, Status: c.Status}, fmt.Errorf("%w: %w", c.Err, ctx.Err())
		}
	}
	r := Result{ID: id, Bytes: c.Bytes, Status: c.Status, Duration: c.Duration}
	if c.Err != nil {
		if e, ok := c.Err.(*Error); ok {
			e.Detail = t.describe()
		}
		return r, c.Err
	}
	return r, nil
}

// transferPolled runs t synchronously in the driver, which spins on the
// engine's writeback until it is done or times out.
func (d *Device) transferPolled(t *Transfer) (Result, error) {
	a, err := xferArgs(t, 0)
	if err != nil {
		return Result{}, err
	}
	err = d.ioctl(iocXfer, unsafe.Pointer(&a))
	r := Result{ID: a.Id, Bytes: a.Bytes, Status: a.Status, Duration: time.Duration(a.Duration_ns)}
	if err != nil {
		err = newError("transfer", err, t.describe())
		if e, ok := err.(*Error); ok && a.Error != 0 {
			e.Status, e.Dir, e.Chan, e.HasHW = a.Status, t.Dir, t.Channel, true
		}
		return r, err
	}
	return r, nil
}

// Submit starts t and returns its id at once; its Completion arrives on
// Completions, carrying userData. At most MaxUnread of them are in flight
// or unread at once: beyond that Submit fails with ErrLimit until
// completions are received. An unread Completions channel delays nothing
// else.
func (d *Device) Submit(t Transfer, userData uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startReader(); err != nil {
		return 0, err
	}
	// Completions only shrinks concurrently, so the reservation holds.
	if unread := len(d.submitted) + len(d.async); unread >= cap(d.async) {
		return 0, &Error{Op: "transfer", Err: unix.EAGAIN, Kind: ErrLimit,
			Detail: fmt.Sprintf("%d submitted transfers in flight or unread on Completions", unread)}
	}
	id, err := d.submit(&t, userData)
	if err != nil {
		return 0, err
	}
	d.submitted[id] = userData
	return id, nil
}

// Completions delivers the completions of Submit, one for each. It is
// closed by Close, or when the device fails (the completions of
// transfers then in flight carry ErrDeviceGone).
func (d *Device) Completions() <-chan Completion { return d.async }

// Cancel stops a submitted transfer; it completes with ErrCanceled.
func (d *Device) Cancel(id uint64) error {
	a := cancelArg{Id: id}
	if err := d.ioctl(iocCancel, unsafe.Pointer(&a)); err != nil {
		return newError("cancel", err, fmt.Sprintf("transfer %d", id))
	}
	return nil
}

// startReader starts the goroutine that reads completions. Called with
// d.mu held.
func (d *Device) startReader() error {
	if d.closed {
		return closedError("transfer", "")
	}
	if d.readerErr != nil {
		return d.readerErr
	}
	if !d.reading {
		d.reading = true
		d.readerDone = make(chan struct{})
		go d.readCompletions(d.readerDone)
	}
	return nil
}

const completionSize = int(unsafe.Sizeof(completionArg{}))

// record is one read() record: a transfer's completion or a stream event.
type record struct {
	kind  uint32
	flags uint32
	slot  uint32
	seq   uint64
	time  time.Duration // when the driver saw it complete (CLOCK_MONOTONIC)
	c     Completion
}

// decodeRecord reads the record at b, as the kernel wrote it: in the
// host's byte order, with the generated struct's layout.
func decodeRecord(b []byte) record {
	var a completionArg
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&a)), completionSize), b)
	r := record{
		kind: a.Kind, flags: a.Flags, slot: a.Slot, seq: a.Seq, time: time.Duration(a.Timestamp_ns),
		c: Completion{
			ID:       a.Id,
			UserData: a.User_data,
			Bytes:    a.Bytes,
			Status:   a.Status,
			Duration: time.Duration(a.Duration_ns),
			Dir:      Direction(a.Dir),
			Channel:  int(a.Channel),
		},
	}
	if a.Error != 0 {
		e := newError("transfer", unix.Errno(-a.Error), "").(*Error)
		e.Status, e.Dir, e.Chan, e.HasHW = a.Status, r.c.Dir, r.c.Channel, true
		r.c.Err = e
	}
	return r
}

// readCompletions reads the driver's records until the file fails or is
// closed. It never blocks on a consumer: a sync waiter's channel has room
// for its one completion, Submit reserved room in async for each of its
// transfers, and a stream's channel has room for every slot.
func (d *Device) readCompletions(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 64*completionSize)
	for {
		n, err := d.f.Read(buf)
		if err != nil {
			d.mu.Lock()
			switch {
			case errors.Is(err, io.EOF) || d.closed:
				err = &Error{Op: "transfer", Err: unix.EBADF, Kind: ErrDeviceGone, Detail: "device closed", closed: d.closed}
			default:
				// A removed device fails poll with EPOLLERR, which the
				// runtime reports as "not pollable", not ENODEV.
				err = &Error{Op: "transfer", Err: unix.ENODEV, Kind: ErrDeviceGone, Detail: err.Error()}
			}
			d.readerErr = fmt.Errorf("gpufpga completions: %w", err)
			for id, w := range d.waiters {
				w <- Completion{ID: id, Err: d.readerErr}
				delete(d.waiters, id)
			}
			for id, ud := range d.submitted {
				d.async <- Completion{ID: id, UserData: ud, Err: d.readerErr}
				delete(d.submitted, id)
			}
			d.closeAsync()
			for ch, s := range d.streams {
				s.end(d.readerErr)
				delete(d.streams, ch)
			}
			d.reading = false
			d.mu.Unlock()
			return
		}
		for off := 0; off+completionSize <= n; off += completionSize {
			r := decodeRecord(buf[off:])
			switch r.kind {
			case eventXfer:
				d.deliver(r.c)
			case eventSlot, eventStreamEnd:
				d.streamEvent(r)
			}
			// Kinds a newer driver may add are not ours to read.
		}
	}
}

// deliver hands a transfer's completion to its waiter or to Completions.
func (d *Device) deliver(c Completion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.waiters[c.ID]; ok {
		delete(d.waiters, c.ID)
		w <- c
		return
	}
	if _, ok := d.submitted[c.ID]; ok {
		delete(d.submitted, c.ID)
		d.async <- c
	}
	// Anything else is no transfer of ours: both maps are filled under
	// d.mu before the reader can see the id.
}
