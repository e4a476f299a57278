//go:build linux

package p2p

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Slot is one filled slot of a stream. It belongs to the caller until
// released; the engine never refills it before.
type Slot struct {
	Index int           // into the slots the stream was started with
	Seq   uint64        // fill sequence number, from 0
	Bytes uint64        // bytes the engine wrote into it
	EOP   bool          // the packet (frame) ended in this slot
	Time  time.Duration // when the driver saw it filled, on SlotClock
}

// Stream is a C2H stream channel running continuously into a ring of
// slots. Read filled slots from Slots, hand them back with Release.
//
// The driver gives each stream an id (ID), never reused while the module
// is loaded, and Release and Stop name the stream by it: once this stream
// has ended they reach no other, even one started later on the same
// channel.
type Stream struct {
	d        *Device
	channel  int
	id       uint64
	nslots   int
	resident bool
	slots    chan Slot
	once     sync.Once
	err      error
	fills    uint64 // set before ended closes
	ended    chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// StartStream starts a C2H stream channel filling slots: each segment must
// be bus-contiguous (one run of pages) and is filled with one packet or up
// to its length.
func (d *Device) StartStream(channel int, slots []Segment) (*Stream, error) {
	return d.startStream(channel, slots, nil)
}

// Resident places a GPU-resident stream's results and its consumer's
// word (kmod/gpufpga/uapi/gpufpga_resident.h).
type Resident struct {
	// Results holds one 32-byte result per slot, 32-byte aligned, in
	// the same kind of memory as the slots (GPU memory for slots in GPU
	// memory). The consumer zeroes it before the stream starts: a status
	// left from an earlier stream would read as a fill.
	Results Segment
	// Consumer is the consumer's 64-byte word, 64-byte aligned, in a
	// host pin; the GPU sees the same memory mapped.
	Consumer Segment
	// Coalesce is the fills per engine interrupt, 1 to the slot count;
	// 0 lets the driver pick (a quarter of the ring, at most 64).
	Coalesce int
}

// StartResidentStream starts a GPU-resident stream: the engine writes each
// slot's result into r.Results, a consumer on the GPU (or anything that
// follows gpufpga_resident.h) consumes the slots and publishes its count
// in r.Consumer, and the driver gives the engine credits from that count,
// with no system call per slot. Each slot must be one bus-contiguous run.
// Slots delivers nothing and is closed when the stream ends; Release is
// refused; Fills says, once it ended, how many fills the engine made.
func (d *Device) StartResidentStream(channel int, slots []Segment, r Resident) (*Stream, error) {
	if r.Results.Pin == nil || r.Consumer.Pin == nil {
		return nil, &Error{Op: "stream", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "a resident stream needs results and a consumer word"}
	}
	if r.Coalesce < 0 || r.Coalesce > len(slots) {
		return nil, &Error{Op: "stream", Err: unix.EINVAL, Kind: ErrInvalid, Detail: fmt.Sprintf("coalescing %d fills of %d slots", r.Coalesce, len(slots))}
	}
	info, err := d.Info()
	if err != nil {
		return nil, err
	}
	if !info.ResidentStreams {
		return nil, &Error{Op: "stream", Err: unix.EOPNOTSUPP, Kind: ErrABI, Detail: "this gpufpga driver has no GPU-resident streams"}
	}
	return d.startStream(channel, slots, &r)
}

func (d *Device) startStream(channel int, slots []Segment, r *Resident) (*Stream, error) {
	if len(slots) == 0 {
		return nil, &Error{Op: "stream", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "no slots"}
	}
	a, err := streamArgs(channel, slots)
	if err != nil {
		return nil, err
	}
	if r != nil {
		a.Flags = streamFlagResident
		a.Results = segArg{Handle: r.Results.Pin.Handle, Offset: r.Results.Offset, Len: r.Results.Len}
		a.Consumer = segArg{Handle: r.Consumer.Pin.Handle, Offset: r.Consumer.Offset, Len: r.Consumer.Len}
		a.Coalesce = uint32(r.Coalesce)
	}
	st := &Stream{d: d, channel: channel, nslots: len(slots), resident: r != nil, slots: make(chan Slot, len(slots)+1), ended: make(chan struct{})}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startReader(); err != nil {
		return nil, err
	}
	if _, busy := d.streams[channel]; busy {
		return nil, &Error{Op: "stream", Err: unix.EBUSY, Kind: ErrBusy, Detail: fmt.Sprintf("c2h%d already streams", channel)}
	}
	if err := d.ioctl(iocStreamStart, unsafe.Pointer(&a)); err != nil {
		return nil, newError("stream", err, fmt.Sprintf("c2h%d, %d slots", channel, len(slots)))
	}
	st.id = a.Id
	d.streams[channel] = st
	return st, nil
}

// streamArgs builds the STREAM_START ioctl's argument; the slot array it
// points at lives as long as the argument does.
func streamArgs(channel int, slots []Segment) (streamPtrArg, error) {
	segs := make([]segArg, len(slots))
	for i, s := range slots {
		if s.Pin == nil {
			return streamPtrArg{}, &Error{Op: "stream", Err: unix.EINVAL, Kind: ErrInvalid, Detail: fmt.Sprintf("slot %d has no pin", i)}
		}
		segs[i] = segArg{Handle: s.Pin.Handle, Offset: s.Offset, Len: s.Len}
	}
	return streamPtrArg{Channel: uint32(channel), Nslots: uint32(len(segs)), Slots: slicePointer(segs)}, nil
}

// releaseArgs builds the STREAM_RELEASE ioctl's argument.
func releaseArgs(channel int, stream uint64, idx []int) releasePtrArg {
	v := make([]uint32, len(idx))
	for i, x := range idx {
		v[i] = uint32(x)
	}
	return releasePtrArg{Channel: uint32(channel), Nslots: uint32(len(v)), Slots: slicePointer(v), Stream: stream}
}

// streamEvent hands a slot or end-of-stream record to its stream: the one
// on the record's channel whose id the record carries.
func (d *Device) streamEvent(r record) {
	d.mu.Lock()
	st := d.streams[r.c.Channel]
	if st != nil && st.id != r.c.ID {
		st = nil // no stream of ours
	}
	if st != nil && r.kind == eventStreamEnd {
		delete(d.streams, r.c.Channel)
	}
	d.mu.Unlock()
	if st == nil {
		return
	}
	if r.kind == eventStreamEnd {
		st.fills = r.seq
		st.end(r.c.Err)
		return
	}
	// Never blocks: the driver reports at most nslots unreleased fills.
	st.slots <- Slot{Index: int(r.slot), Seq: r.seq, Bytes: r.c.Bytes, EOP: r.flags&slotEOP != 0, Time: r.time}
}

func (s *Stream) end(err error) {
	s.once.Do(func() {
		s.err = err
		// ended first: whoever sees Slots closed must find Err set.
		close(s.ended)
		close(s.slots)
	})
}

// Resident reports whether the stream is GPU-resident.
func (s *Stream) Resident() bool { return s.resident }

// Fills returns, once the stream has ended (Slots closed), how many fills
// the engine completed: for a resident stream, what its consumer had to
// consume. 0 before the end.
func (s *Stream) Fills() uint64 {
	select {
	case <-s.ended:
		return s.fills
	default:
		return 0
	}
}

// ID returns the stream's id, which its driver records carry.
func (s *Stream) ID() uint64 { return s.id }

// Channel returns the C2H channel the stream runs on.
func (s *Stream) Channel() int { return s.channel }

// Slots delivers filled slots in fill order. It is closed when the stream
// ends; Err then says why.
func (s *Stream) Slots() <-chan Slot { return s.slots }

// Err returns nil while the stream runs or after Stop, else why it ended
// (ErrRevoked, ErrHardware with the engine status, ErrDeviceGone, ...).
func (s *Stream) Err() error {
	select {
	case <-s.ended:
		return s.err
	default:
		return nil
	}
}

// Release hands slots back to the engine. After the stream ended (after
// Stop, or Close of its Device) it does nothing, even when another stream
// runs on the channel by then: the driver knows the stream by its id.
func (s *Stream) Release(idx ...int) error {
	if len(idx) == 0 {
		return nil
	}
	if s.resident {
		return &Error{Op: "release", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "a resident stream's consumer releases its slots"}
	}
	a := releaseArgs(s.channel, s.id, idx)
	if err := s.d.ioctl(iocStreamRelease, unsafe.Pointer(&a)); err != nil {
		e := newError("release", err, fmt.Sprintf("c2h%d slots %v", s.channel, idx))
		if errors.Is(e, ErrNotFound) || (errors.Is(e, os.ErrClosed) && s.Err() != nil) {
			// The stream ended: its slots went with it.
			return nil
		}
		return e
	}
	return nil
}

// Stop halts the stream and waits until it has ended; slots filled before
// the halt still arrive on Slots first. It may be called any number of
// times, from any goroutine: every call waits for the end, and only the
// first asks the driver. A stream that had ended already (an engine error,
// a revoked pin) stops with nil; Err says why it ended.
func (s *Stream) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	if s.stopErr != nil {
		return s.stopErr
	}
	<-s.ended
	return nil
}

func (s *Stream) stop() error {
	a := streamStopArg{Channel: uint32(s.channel), Stream: s.id}
	err := s.d.ioctl(iocStreamStop, unsafe.Pointer(&a))
	if err == nil {
		return nil
	}
	e := newError("stop", err, fmt.Sprintf("c2h%d", s.channel))
	switch {
	case errors.Is(e, ErrNotFound):
		// The driver ended the stream already: its STREAM_END is
		// queued, and the reader delivers it (or ends every stream
		// when it fails).
		return nil
	case errors.Is(e, os.ErrClosed):
		// Close ended it, or is ending it: the reader's end closes
		// ended.
		return nil
	}
	select {
	case <-s.ended:
		return nil // it had ended already
	default:
		return e
	}
}

// SlotClock reads the clock of Slot.Time: CLOCK_MONOTONIC, the driver's.
func SlotClock() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
