//go:build linux

// Package trace observes gpufpga live through its trace events with eBPF:
// per-channel throughput, transfer and stream slot counts and latency
// histograms aggregated in the kernel, and discrete events (pins, unpins,
// revocations, failed transfers, errors, streams starting and ending)
// streamed through a ring buffer. Events the ring buffer
// had to drop are counted and reported, never hidden.
package trace

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Errors from Start.
var (
	ErrNotRoot         = errors.New("tracing needs root (CAP_BPF and CAP_PERFMON)")
	ErrModuleNotLoaded = errors.New("the gpufpga module is not loaded")
	ErrNoTraceSupport  = errors.New("the kernel cannot attach BPF to raw tracepoints")
	errSessionClosed   = errors.New("trace: session closed")
)

const (
	numChannels         = 8 // 4 H2C, then 4 C2H, as the BPF maps index them
	numBuckets          = 64
	eventBufferCapacity = 1024
)

var channelNames = [numChannels]string{"h2c0", "h2c1", "h2c2", "h2c3", "c2h0", "c2h1", "c2h2", "c2h3"}

// Options select what to trace.
type Options struct {
	// Device limits tracing to /dev/gpufpga<Device>; -1 traces all.
	Device int
}

// Channel is what one channel did since tracing started.
type Channel struct {
	Name      string
	Bytes     uint64
	Transfers uint64 // completed, failed ones included
	Errors    uint64
	Submitted uint64
	Busy      time.Duration // summed engine time of completed transfers
	Slots     uint64        // stream slots filled (their bytes are in Bytes, but for a GPU-resident stream's)
	// Latency counts transfers by engine time: bucket b holds those that
	// took [2^b, 2^(b+1)) ns.
	Latency [64]uint64
}

// Quantile returns the upper bound of the latency bucket holding quantile q
// (0 < q <= 1) of the transfers, or 0 when there were none.
func (c *Channel) Quantile(q float64) time.Duration {
	var total uint64
	for _, n := range c.Latency {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for b, n := range c.Latency {
		seen += n
		if seen >= want {
			return time.Duration(uint64(1) << (b + 1))
		}
	}
	return time.Duration(math.MaxInt64)
}

// Sub returns what happened between an earlier reading and c.
func (c Channel) Sub(earlier Channel) Channel {
	d := Channel{Name: c.Name, Bytes: c.Bytes - earlier.Bytes, Transfers: c.Transfers - earlier.Transfers,
		Errors: c.Errors - earlier.Errors, Submitted: c.Submitted - earlier.Submitted, Busy: c.Busy - earlier.Busy,
		Slots: c.Slots - earlier.Slots}
	for i := range d.Latency {
		d.Latency[i] = c.Latency[i] - earlier.Latency[i]
	}
	return d
}

// Snapshot is the aggregated state at one moment.
type Snapshot struct {
	Time     time.Time
	Channels []Channel // the 8 possible channels, H2C first
	// Lost counts events that never reached Events: those the kernel's
	// ring buffer had no room for, and those that arrived while Events
	// was full.
	Lost uint64
}

// EventType says what an Event reports.
type EventType uint32

// Event types.
const (
	EventPin EventType = iota + 1
	EventUnpin
	EventRevoke
	EventTransferFailed
	EventError
	EventStreamStart
	EventStreamEnd
	// EventLifecycle is a reset, PCIe error or sleep of the card, named
	// by Op (reset_prepare, reset_done, error_detected, slot_reset,
	// error_resume, pm_suspend, pm_resume); Status is error_detected's
	// PCI channel state (1 non-fatal, 2 fatal, 3 permanent failure), Err
	// a failed restart's.
	EventLifecycle
)

func (t EventType) String() string {
	switch t {
	case EventPin:
		return "pin"
	case EventUnpin:
		return "unpin"
	case EventRevoke:
		return "revoke"
	case EventTransferFailed:
		return "transfer-failed"
	case EventError:
		return "error"
	case EventStreamStart:
		return "stream-start"
	case EventStreamEnd:
		return "stream-end"
	case EventLifecycle:
		return "lifecycle"
	}
	return fmt.Sprintf("event(%d)", uint32(t))
}

// Event is one discrete event.
type Event struct {
	Type    EventType
	Time    time.Duration // kernel monotonic clock
	Device  int
	Handle  uint64 // pins; the transfer id for EventTransferFailed
	Len     uint64 // pinned bytes, bytes moved before the failure, or a stream ring's bytes
	Kind    uint32 // pin kind (pins), direction (transfers, streams)
	Channel int
	Slots   uint64 // streams: slots in the ring (start), slots filled (end)
	Pages   int    // pins; a stream ring's descriptors
	Runs    int
	Status  uint32     // XDMA status of a failed transfer or error
	Err     unix.Errno // for failures
	Op      string     // EventError: what failed; EventLifecycle: the event
}

// Session is tracing in progress.
type Session struct {
	objs   gpufpgaObjects
	links  []link.Link
	rd     *ringbuf.Reader
	events chan Event
	// dropped counts events the reader found Events full for; the
	// kernel's lost map counts only its own, so the two never race.
	dropped atomic.Uint64
	done    chan struct{}
	once    sync.Once
}

// Start loads the BPF programs and attaches them to gpufpga's trace events.
// Cancelling ctx detaches them, as Close does.
func Start(ctx context.Context, opts Options) (*Session, error) {
	if _, err := os.Stat("/sys/module/gpufpga"); err != nil {
		return nil, ErrModuleNotLoaded
	}
	if err := rlimit.RemoveMemlock(); err != nil && errors.Is(err, unix.EPERM) {
		return nil, ErrNotRoot
	}
	spec, err := loadGpufpga()
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := spec.Variables["want_dev"].Set(int32(opts.Device)); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	s := &Session{events: make(chan Event, eventBufferCapacity), done: make(chan struct{})}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, ErrNotRoot
		}
		return nil, fmt.Errorf("trace: load BPF programs: %w", err)
	}
	for name, prog := range map[string]*ebpf.Program{
		"gpufpga_pin": s.objs.OnPin, "gpufpga_unpin": s.objs.OnUnpin, "gpufpga_revoke": s.objs.OnRevoke,
		"gpufpga_xfer_submit": s.objs.OnSubmit, "gpufpga_xfer_complete": s.objs.OnComplete, "gpufpga_error": s.objs.OnError,
		"gpufpga_stream_start": s.objs.OnStreamStart, "gpufpga_stream_slot": s.objs.OnStreamSlot, "gpufpga_stream_fills": s.objs.OnStreamFills,
		"gpufpga_stream_end": s.objs.OnStreamEnd, "gpufpga_lifecycle": s.objs.OnLifecycle,
	} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		if err != nil && name == "gpufpga_stream_fills" && errors.Is(err, unix.ENOENT) {
			// A module from before GPU-resident streams: none to count.
			continue
		}
		if err != nil {
			s.Close()
			if errors.Is(err, unix.ENOENT) {
				return nil, fmt.Errorf("%w (no tracepoint %s)", ErrModuleNotLoaded, name)
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrNoTraceSupport, name, err)
		}
		s.links = append(s.links, l)
	}
	if s.rd, err = ringbuf.NewReader(s.objs.Events); err != nil {
		s.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	go s.read()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// Events delivers discrete events until the session closes. If the
// consumer falls behind by more than 1024 events, the newest are counted
// as lost in Snapshot.Lost.
func (s *Session) Events() <-chan Event { return s.events }

func (s *Session) read() {
	defer close(s.events)
	var raw gpufpgaEvent
	for {
		rec, err := s.rd.Read()
		if err != nil {
			return
		}
		if len(rec.RawSample) < binarySize(raw) {
			continue
		}
		decode(rec.RawSample, &raw)
		e := Event{
			Type: EventType(raw.Type), Time: time.Duration(raw.TsNs), Device: int(raw.Dev), Handle: raw.HandleOrId,
			Len: raw.LenOrBytes, Kind: raw.KindOrDir, Channel: int(raw.Chan), Pages: int(raw.Npages), Runs: int(raw.Nruns),
			Status: raw.Status, Err: unix.Errno(-raw.Error), Op: cString(raw.Op[:]),
		}
		if e.Type == EventStreamStart || e.Type == EventStreamEnd {
			e.Slots, e.Handle = e.Handle, 0
		}
		select {
		case s.events <- e:
		default:
			s.dropped.Add(1)
		}
	}
}

// perCPUArray reads entries [0, n) of a per-CPU array map in batches and
// returns each entry's values for every possible CPU, entry by entry.
func perCPUArray[T any](m *ebpf.Map, n int) ([]T, int, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, 0, err
	}
	keys := make([]uint32, n)
	vals := make([]T, n*ncpu)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		k, err := m.BatchLookup(&cursor, keys[got:], vals[got*ncpu:], nil)
		got += k
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if got != n {
		return nil, 0, fmt.Errorf("%d of %d entries", got, n)
	}
	for i, k := range keys {
		if k != uint32(i) {
			return nil, 0, fmt.Errorf("entry %d came back as key %d", i, k)
		}
	}
	return vals, ncpu, nil
}

// Snapshot reads the in-kernel aggregates.
func (s *Session) Snapshot() (Snapshot, error) {
	select {
	case <-s.done:
		return Snapshot{}, errSessionClosed
	default:
	}
	snap := Snapshot{Time: time.Now(), Channels: make([]Channel, numChannels)}
	// One batch per map, not a lookup per entry.
	stats, ncpu, err := perCPUArray[gpufpgaChanStats](s.objs.Stats, numChannels)
	if err != nil {
		return snap, fmt.Errorf("trace: read stats: %w", err)
	}
	latency, _, err := perCPUArray[uint64](s.objs.Latency, numChannels*numBuckets)
	if err != nil {
		return snap, fmt.Errorf("trace: read latency: %w", err)
	}
	for i := range numChannels {
		c := &snap.Channels[i]
		c.Name = channelNames[i]
		for _, p := range stats[i*ncpu : (i+1)*ncpu] {
			c.Bytes += p.Bytes
			c.Transfers += p.Transfers
			c.Errors += p.Errors
			c.Submitted += p.Submitted
			c.Busy += time.Duration(p.BusyNs)
			c.Slots += p.Slots
		}
		for b := range numBuckets {
			k := i*numBuckets + b
			for _, n := range latency[k*ncpu : (k+1)*ncpu] {
				c.Latency[b] += n
			}
		}
	}
	var lost []uint64
	if err := s.objs.Lost.Lookup(uint32(0), &lost); err != nil {
		return snap, fmt.Errorf("trace: read lost events: %w", err)
	}
	for _, n := range lost {
		snap.Lost += n
	}
	snap.Lost += s.dropped.Load()
	return snap, nil
}

// Close detaches the programs and frees their maps.
func (s *Session) Close() error {
	s.once.Do(func() {
		close(s.done)
		for _, l := range s.links {
			l.Close()
		}
		if s.rd != nil {
			s.rd.Close()
		}
		s.objs.Close()
	})
	return nil
}
