//go:build linux

// Package stream runs continuous acquisition: an FPGA's C2H stream channel
// filling a ring of slots in GPU memory (direct mode) or in host memory
// whose slots are then copied to the GPU (compat mode), with every frame
// accounted for: frames parsed, sequence gaps, duplicates and CRC failures,
// checked on the GPU where they land or on the CPU.
//
// In compat mode the host ring and the GPU ring have the same slots: slot
// i is copied to GPU slot i as soon as it is filled, copies of successive
// slots overlapping each other and the FPGA's filling of the next, and the
// host slot goes back to the FPGA when the consumer releases the GPU one.
//
// A resident session (Config.Resident) hands the slots to no one on the
// CPU: a consumer on the GPU (a ResidentGPU's) takes each fill as the
// engine reports it in GPU memory, and publishes its progress in a word of
// host memory from which the driver gives the engine credits
// (kmod/gpufpga/uapi/gpufpga_resident.h), with no CPU work per slot. Its
// ring is in GPU memory (direct mode); Filled delivers nothing, Stats
// reports what the consumer took, and Stop lets it take every fill the
// engine made before it stops it.
package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Mode says where the ring lives.
type Mode int

// Modes.
const (
	Auto   Mode = iota // direct when the driver can pin GPU memory
	Direct             // the FPGA writes straight into GPU memory
	Compat             // the FPGA writes host memory; slots are copied to the GPU
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Direct:
		return "direct"
	case Compat:
		return "compat"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Check says where frames are verified.
type Check int

// Checks.
const (
	CheckNone Check = iota // count bytes and slots only
	CheckCPU               // parse every frame on the CPU (GPU memory the CPU can read, or compat mode's host slots)
	CheckGPU               // run the frame checker kernel on every slot in GPU memory (a GPUChecking GPU, fixed-size frames)
)

func (c Check) String() string {
	switch c {
	case CheckNone:
		return "none"
	case CheckCPU:
		return "cpu"
	case CheckGPU:
		return "gpu"
	}
	return fmt.Sprintf("Check(%d)", int(c))
}

// Config describes a session.
type Config struct {
	Device  *p2p.Device
	Channel int // a C2H stream channel
	// SlotSize is the bytes per slot. A slot takes a descriptor per
	// bus-contiguous run of its memory (64 KiB GPU pages, 4 KiB host
	// pages); all slots together at most 1023 of them. Where a slot has
	// several, the FPGA's packets must fill it whole (p2p.ErrSlotLayout
	// otherwise): make packets as long as slots.
	SlotSize uint64
	Slots    int
	Mode     Mode
	// Pinning says how a ring in GPU memory (direct mode) is pinned:
	// PinAuto prefers a dma-buf, and Stats says what was chosen.
	Pinning Pinning
	GPU     GPU // where slots end up, in either mode
	Check   Check
	// FrameSize is the size of every frame, for CheckGPU: slots hold
	// whole frames.
	FrameSize int
	// Resident runs a GPU-resident session: GPU must be a ResidentGPU,
	// whose consumer checks the frames as Check says, or runs
	// ResidentFunc on every fill, and each slot must be one
	// bus-contiguous run (one descriptor): a slot size that divides
	// 64 KiB, a GPU page, always is.
	Resident bool
	// ResidentFunc, in a resident session, is the user's code the
	// consumer runs on every fill in place of a frame check (Check
	// CheckNone): a device function linked into the GPU's persistent
	// consumer (see ResidentFunc).
	ResidentFunc *ResidentFunc
	// Coalesce is a resident session's fills per engine interrupt, 1 to
	// Slots; 0 lets the driver pick.
	Coalesce int
	// DrainTimeout bounds a resident session's end: how long its
	// consumer may go without taking a fill while fills remain
	// (ErrUnconsumed then). 0 means 5 s.
	DrainTimeout time.Duration
}

// Filled is a slot ready for the consumer, in GPU memory.
type Filled struct {
	Slot int
	Seq  uint64
	Addr uint64 // GPU virtual address of the slot's first byte
	Len  uint64 // bytes filled
	// Data is the slot's bytes as the CPU sees them, when the GPU's memory
	// is CPU-visible (the simulated GPU); nil on CUDA.
	Data  []byte
	EOP   bool
	Ready time.Time
}

// Stats describe a session so far.
type Stats struct {
	Mode        Mode
	Pinning     Pinning // direct mode's: PinDmabuf or PinP2P
	Check       Check
	Bytes       uint64
	Slots       uint64
	Elapsed     time.Duration // to now, or to the end of the session
	GBps        float64
	Held        int              // slots the consumer holds now
	MaxHeld     int              // most slots held at once
	SlotLatency time.Duration    // mean, driver seeing a slot to the consumer getting it
	Latency     LatencyHistogram // every slot's latency, as SlotLatency measures it
	Frames      frame.Stats
	// Resident: a GPU-resident session, whose Slots, Bytes and Frames are
	// what its consumer took (Held, MaxHeld, SlotLatency and Latency stay 0), and
	// Fills the fills the engine made, known once the session ended.
	Resident bool
	Fills    uint64
	// BadFills counts the fills a ResidentFunc found bad.
	BadFills uint64
}

// LatencyBuckets is how many buckets a LatencyHistogram has, the last
// unbounded.
const LatencyBuckets = 16

// LatencyHistogram counts slot latencies: Counts[i] those at most
// LatencyBound(i) and above LatencyBound(i-1), bounds from 10 µs to 500 ms
// in steps of 1, 2.5 and 5; the last bucket those above 500 ms.
type LatencyHistogram struct {
	Counts [LatencyBuckets]uint64
	Sum    time.Duration
}

// LatencyBound returns the upper bound of bucket i of a LatencyHistogram,
// for i below LatencyBuckets-1.
func LatencyBound(i int) time.Duration {
	steps := [3]time.Duration{10, 25, 50}
	d := steps[i%3] * time.Microsecond
	for range i / 3 {
		d *= 10
	}
	return d
}

func (h *LatencyHistogram) observe(d time.Duration) {
	i := 0
	for i < LatencyBuckets-1 && d > LatencyBound(i) {
		i++
	}
	h.Counts[i]++
	h.Sum += d
}

// Source fills a ring's slots in order and takes them back: the driver's
// C2H stream (*p2p.Stream, what Start uses) or an in-process model of the
// FPGA (Attach).
type Source interface {
	Slots() <-chan p2p.Slot
	Release(slots ...int) error
	Stop() error
	Err() error
}

// Session is a running acquisition.
type Session struct {
	cfg     Config
	mode    Mode
	gpu     GPUBuffer // the ring (direct) or where slots are copied (compat)
	gpuPin  *p2p.Pin  // direct mode
	host    *hostRing // compat mode, allocated by Start
	ring    []byte    // compat mode: the host ring the source fills
	cpuView []byte    // the GPU buffer as the CPU sees it, if it can
	// readBack copies compat mode's slots back from a GPU the CPU cannot
	// see, into scratch, for CheckCPU.
	readBack ReadBack
	scratch  []byte
	checker  FrameChecker
	cpuChk   frame.Checker
	src      Source
	inQueue  chan inflight
	filled   chan Filled
	mu       sync.Mutex
	stats    Stats
	started  time.Time
	ended    time.Time // when the last slot was delivered, once the session ended
	err      error
	done     chan struct{}
	once     sync.Once
	freeErr  error
	// releases holds ReleaseAfter's slots in the order given, for the
	// one goroutine that waits for their work (releaser); room for every
	// slot. Sent on and closed (by Close, which releasesClosed records)
	// under relMu, so that a ReleaseAfter racing Close never sends on
	// the closed channel. relMu is never held with mu: the releaser
	// takes mu and never relMu.
	relMu          sync.Mutex
	releases       chan pendingRelease
	releasesClosed bool
	releaserOnce   sync.Once
	releaserDone   chan struct{}
	res            *residentMem // resident mode
}

// pendingRelease is a slot to hand back once done's work is done.
type pendingRelease struct {
	slot int
	done Copy
}

type inflight struct {
	slot p2p.Slot
	copy Copy  // compat mode
	err  error // the copy could not start
}

// ErrConfig reports a configuration that cannot run.
var ErrConfig = errors.New("stream: bad configuration")

// ErrUnsupported reports a configuration that this host cannot run: the
// GPU, its driver or the gpufpga driver lacks what it needs. It matches
// ErrConfig too.
var ErrUnsupported = fmt.Errorf("%w: not supported here", ErrConfig)

// Start allocates the ring, starts the channel and delivers filled slots
// until ctx ends, Stop is called, or the stream fails. A resident session
// also allocates the results in GPU memory, pinned as the ring is, and the
// consumer's word in host memory, and starts the consumer before the
// stream.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Device == nil {
		return nil, fmt.Errorf("%w: need a device", ErrConfig)
	}
	mode, pinning, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	s, err := newSession(cfg, mode, pinning)
	if err != nil {
		return nil, err
	}
	if cfg.Resident {
		if err := s.startResident(ctx, pinning); err != nil {
			return nil, errors.Join(err, s.free())
		}
		return s, nil
	}
	pin := s.gpuPin
	if mode == Compat {
		if s.host, err = allocHostRing(cfg.Device, cfg.GPU, s.size()); err != nil {
			s.free()
			return nil, fmt.Errorf("stream: compat host ring of %d x %d bytes: %w", cfg.Slots, cfg.SlotSize, err)
		}
		s.ring, pin = s.host.mem, s.host.pin
	}
	st, err := cfg.Device.StartStream(cfg.Channel, s.segments(pin))
	if err != nil {
		s.free()
		return nil, err
	}
	s.run(ctx, st)
	return s, nil
}

// segments are the ring's slots in pin.
func (s *Session) segments(pin *p2p.Pin) []p2p.Segment {
	segs := make([]p2p.Segment, s.cfg.Slots)
	for i := range segs {
		segs[i] = p2p.Segment{Pin: pin, Offset: uint64(i) * s.cfg.SlotSize, Len: s.cfg.SlotSize}
	}
	return segs
}

// Attach runs a compat-mode session on a source that fills host, a ring of
// cfg.Slots slots of cfg.SlotSize bytes, without the driver: the in-process
// device model that benchmarks and tests use. cfg.Device and cfg.Channel
// are unused.
func Attach(ctx context.Context, cfg Config, host []byte, src Source) (*Session, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if uint64(len(host)) < cfg.SlotSize*uint64(cfg.Slots) {
		return nil, fmt.Errorf("%w: host ring of %d bytes for %d x %d", ErrConfig, len(host), cfg.Slots, cfg.SlotSize)
	}
	if cfg.Pinning != PinAuto {
		return nil, fmt.Errorf("%w: pinning %v is for a ring in GPU memory, not an attached source's host ring", ErrConfig, cfg.Pinning)
	}
	if cfg.Resident {
		return nil, fmt.Errorf("%w: an attached source fills a host ring: no resident session", ErrConfig)
	}
	s, err := newSession(cfg, Compat, PinAuto)
	if err != nil {
		return nil, err
	}
	s.ring = host
	unregister, err := cfg.GPU.RegisterHost(host)
	if err != nil {
		s.free()
		return nil, err
	}
	s.host = &hostRing{unregister: unregister}
	s.run(ctx, src)
	return s, nil
}

func (c *Config) validate() error {
	if c.Slots < 1 || c.SlotSize == 0 || c.GPU == nil {
		return fmt.Errorf("%w: need slots, a slot size and a GPU", ErrConfig)
	}
	if c.Check == CheckGPU {
		// A resident session's consumer checks frames itself.
		if _, ok := c.GPU.(GPUChecking); !ok && !c.Resident {
			return fmt.Errorf("%w: this GPU cannot check frames (CUDA can)", ErrUnsupported)
		}
		if c.FrameSize <= 0 || c.SlotSize%uint64(c.FrameSize) != 0 {
			return fmt.Errorf("%w: checking on the GPU needs slots of whole frames: %d-byte slots, %d-byte frames",
				ErrConfig, c.SlotSize, c.FrameSize)
		}
	}
	return c.validateResident()
}

// Resolve returns the mode and, in direct mode, the pinning Start picks
// for c on c.Device with c.GPU: SelectMode over what they report. A
// resident session is direct.
func (c *Config) Resolve() (Mode, Pinning, error) {
	if c.Device == nil || c.GPU == nil {
		return 0, 0, fmt.Errorf("%w: need a device and a GPU", ErrConfig)
	}
	mode := c.Mode
	if c.Resident {
		if mode == Compat {
			return 0, 0, errResidentCompat
		}
		mode = Direct
	}
	if mode == Compat {
		// Asks neither: compat mode pins host memory.
		return SelectMode(p2p.Info{}, false, Compat, c.Pinning)
	}
	dg, _ := c.GPU.(DmabufGPU)
	info, exports, err := pinningFacts(c.Device, dg)
	if err != nil {
		return 0, 0, err
	}
	return SelectMode(info, exports, mode, c.Pinning)
}

func newSession(cfg Config, mode Mode, pinning Pinning) (*Session, error) {
	s := &Session{cfg: cfg, mode: mode, inQueue: make(chan inflight, cfg.Slots), filled: make(chan Filled, cfg.Slots),
		done: make(chan struct{}), releases: make(chan pendingRelease, cfg.Slots), releaserDone: make(chan struct{})}
	var err error
	if s.gpu, err = cfg.GPU.Alloc(s.size()); err != nil {
		return nil, fmt.Errorf("stream: %v ring of %d x %d bytes: %w", mode, cfg.Slots, cfg.SlotSize, err)
	}
	if v, ok := s.gpu.(CPUVisible); ok {
		s.cpuView = v.Bytes()
	}
	if cfg.Check == CheckCPU && s.cpuView == nil && !cfg.Resident {
		rb, ok := s.gpu.(ReadBack)
		if !ok || mode == Direct {
			// Direct mode: copying every slot back would halve the
			// bandwidth the checker is there to prove.
			s.free()
			return nil, fmt.Errorf("%w: the CPU cannot read this GPU's memory: check on the GPU", ErrUnsupported)
		}
		s.readBack, s.scratch = rb, make([]byte, cfg.SlotSize)
	}
	if cfg.Check == CheckGPU && !cfg.Resident {
		if s.checker, err = cfg.GPU.(GPUChecking).NewFrameChecker(cfg.FrameSize, int(cfg.SlotSize)/cfg.FrameSize); err != nil {
			s.free()
			return nil, err
		}
	}
	if mode == Direct {
		if s.gpuPin, err = PinGPU(cfg.Device, s.gpu, s.size(), pinning); err != nil {
			s.free()
			return nil, fmt.Errorf("stream: direct ring of %d x %d bytes, pinned through %v: %w", cfg.Slots, cfg.SlotSize, pinning, err)
		}
		// What the driver pinned, not what was asked for.
		s.stats.Pinning = PinP2P
		if s.gpuPin.Kind == p2p.KindDmabuf {
			s.stats.Pinning = PinDmabuf
		}
	}
	return s, nil
}

func (s *Session) size() uint64 { return s.cfg.SlotSize * uint64(s.cfg.Slots) }

// free releases what the session holds and reports every failure.
func (s *Session) free() error {
	var errs []error
	if s.checker != nil {
		errs = append(errs, s.checker.Close())
	}
	if s.gpuPin != nil {
		errs = append(errs, s.gpuPin.Unpin())
	}
	if s.res != nil {
		errs = append(errs, s.res.free())
	}
	if s.host != nil {
		errs = append(errs, s.host.free())
	}
	if s.gpu != nil {
		errs = append(errs, s.gpu.Free())
	}
	return errors.Join(errs...)
}

func (s *Session) run(ctx context.Context, src Source) {
	s.src = src
	s.started = time.Now()
	s.stats.Mode = s.mode
	s.stats.Check = s.cfg.Check
	go s.collect(ctx)
	go s.deliver()
}

// collect takes filled slots from the source and, in compat mode, starts
// their copies to the GPU; deliver waits for them in order. Copies of
// successive slots overlap one another and the FPGA filling the next ones.
func (s *Session) collect(ctx context.Context) {
	defer close(s.inQueue)
	stop := context.AfterFunc(ctx, func() { s.src.Stop() })
	defer stop()
	size := s.cfg.SlotSize
	for sl := range s.src.Slots() {
		in := inflight{slot: sl}
		if s.mode == Compat {
			off := uint64(sl.Index) * size
			cp, err := s.gpu.CopyIn(off, s.ring[off:off+sl.Bytes])
			if err != nil {
				// In order: the slots queued before it are delivered.
				in.err = fmt.Errorf("stream: copying slot %d to the GPU: %w", sl.Index, err)
				s.src.Stop()
			}
			in.copy = cp
		}
		s.inQueue <- in // room for every slot: the ring bounds what is out
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = s.src.Err()
	}
	if s.err == nil && ctx.Err() != nil {
		s.err = ctx.Err()
	}
	s.mu.Unlock()
}

func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *Session) deliver() {
	defer close(s.done)
	defer close(s.filled)
	defer func() {
		s.mu.Lock()
		s.ended = time.Now()
		s.mu.Unlock()
	}()
	size := s.cfg.SlotSize
	failed := false
	for in := range s.inQueue {
		sl := in.slot
		off := uint64(sl.Index) * size
		if failed {
			// Once a copy or check failed, later slots are not
			// delivered: the session's data has a hole. Their copies
			// are waited for, so nothing writes the GPU buffer after
			// Close.
			if in.copy != nil {
				in.copy.Wait()
			}
			continue
		}
		err := in.err
		if err == nil && in.copy != nil {
			if err = in.copy.Wait(); err != nil {
				err = fmt.Errorf("stream: copying slot %d to the GPU: %w", sl.Index, err)
			}
		}
		if err == nil {
			err = s.check(off, sl.Bytes)
		}
		if err != nil {
			s.fail(err)
			s.src.Stop()
			failed = true
			continue
		}
		f := Filled{Slot: sl.Index, Seq: sl.Seq, Addr: s.gpu.Addr() + off, Len: sl.Bytes, EOP: sl.EOP}
		if s.cpuView != nil {
			f.Data = s.cpuView[off : off+sl.Bytes]
		}
		s.mu.Lock()
		s.stats.Frames = s.cpuChk.Stats
		if s.checker != nil {
			s.stats.Frames = s.checker.Stats()
		}
		s.stats.Bytes += sl.Bytes
		s.stats.Slots++
		s.stats.Held++
		s.stats.MaxHeld = max(s.stats.MaxHeld, s.stats.Held)
		s.stats.Latency.observe(p2p.SlotClock() - sl.Time)
		s.stats.SlotLatency = s.stats.Latency.Sum / time.Duration(s.stats.Slots)
		s.mu.Unlock()
		f.Ready = time.Now()
		s.filled <- f
	}
}

// check verifies the frames of a slot where the configuration says. Only
// deliver calls it; the counts reach Stats under mu afterwards.
func (s *Session) check(off, n uint64) error {
	switch s.cfg.Check {
	case CheckGPU:
		if err := s.checker.Check(s.gpu, off, n); err != nil {
			return fmt.Errorf("stream: checking frames on the GPU: %w", err)
		}
	case CheckCPU:
		// What reached the GPU, not the host slot it came from.
		var b []byte
		if s.cpuView != nil {
			b = s.cpuView[off : off+n]
		} else {
			b = s.scratch[:n]
			if err := s.readBack.CopyOut(b, off); err != nil {
				return fmt.Errorf("stream: reading slot back from the GPU to check it: %w", err)
			}
		}
		for len(b) > 0 {
			k, err := s.cpuChk.Check(b)
			if err != nil {
				break // counted as a CRC failure
			}
			b = b[k:]
		}
	}
	return nil
}

// Filled delivers slots in fill order; it is closed when the session ends.
// A slot's Data stays valid until it is released, and its memory until
// Close. A resident session delivers none: its consumer is on the GPU.
func (s *Session) Filled() <-chan Filled { return s.filled }

// Release hands a slot back to the engine, which may refill it at once:
// call it only when nothing reads the slot any more. GPU work is
// asynchronous: a kernel launched on the slot is still reading it when
// the launch returns, so either synchronise with that work first or use
// ReleaseAfter.
func (s *Session) Release(slot int) error {
	if s.res != nil {
		return s.src.Release(slot) // refused: p2p.ErrInvalid
	}
	// Counted first: the engine may refill the slot before the call returns.
	s.mu.Lock()
	s.stats.Held--
	s.mu.Unlock()
	if err := s.src.Release(slot); err != nil {
		s.mu.Lock()
		s.stats.Held++
		s.mu.Unlock()
		return err
	}
	return nil
}

// ReleaseAfter hands a slot back once done reports that the work reading
// it has finished: a CUDA event recorded after the kernels that read the
// slot (cudamem.GPU.Done). It returns at once. One goroutine of the
// session waits for the work of every slot given, in the order given,
// and releases each in turn: at most one thread waits, however many
// slots are out. If done or the release fails, the session ends with that
// error, and the later slots' work is still waited for but not released.
// Close waits for the releases handed over before it; one that comes
// after Close, or loses a race with it, waits for done and releases
// nothing (the session's memory is gone).
func (s *Session) ReleaseAfter(slot int, done Copy) {
	s.releaserOnce.Do(func() { go s.releaser() })
	s.relMu.Lock()
	if s.releasesClosed {
		s.relMu.Unlock()
		done.Wait()
		return
	}
	// Never blocks while the consumer hands back only slots it holds:
	// there is room for all of them.
	s.releases <- pendingRelease{slot: slot, done: done}
	s.relMu.Unlock()
}

// releaser waits for the work of ReleaseAfter's slots and releases them.
func (s *Session) releaser() {
	defer close(s.releaserDone)
	failed := false
	for r := range s.releases {
		err := r.done.Wait()
		if failed {
			continue // waited for, so that nothing reads the slot after Close
		}
		if err == nil {
			err = s.Release(r.slot)
		} else {
			err = fmt.Errorf("stream: waiting to release slot %d: %w", r.slot, err)
		}
		if err != nil {
			failed = true
			s.fail(err)
			s.src.Stop()
		}
	}
}

// Stop ends the session and waits until its slots are delivered. A
// resident session's end waits until the consumer has consumed every fill
// the engine made, then stops it; a consumer that stalls for
// DrainTimeout ends it with ErrUnconsumed (Err).
func (s *Session) Stop() error {
	err := s.src.Stop()
	<-s.done
	return err
}

// Close stops the session if it runs and frees its memory, returning
// what failed in unpinning, unregistering and freeing it. Call it once no
// Filled.Data is in use any more.
func (s *Session) Close() error {
	select {
	case <-s.done:
	default:
		s.Stop()
	}
	// No release may follow the free: the releaser finishes the ones
	// handed to it first.
	s.relMu.Lock()
	if !s.releasesClosed {
		s.releasesClosed = true
		close(s.releases)
	}
	s.relMu.Unlock()
	s.releaserOnce.Do(func() { close(s.releaserDone) })
	<-s.releaserDone
	s.once.Do(func() { s.freeErr = s.free() })
	return s.freeErr
}

// Err is why the session ended: nil after Stop, the context's error after
// cancellation, or the stream's failure (p2p.ErrRevoked, ErrHardware, ...).
// A resident session's may also be its consumer's (p2p.ErrConsumer from
// the driver for a count out of range, the consumer's own failure, or
// ErrUnconsumed).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats returns the session's counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if s.res != nil {
		s.residentStats(&st)
	}
	st.Elapsed = time.Since(s.started)
	if !s.ended.IsZero() {
		st.Elapsed = s.ended.Sub(s.started)
	}
	if st.Elapsed > 0 {
		st.GBps = float64(st.Bytes) / st.Elapsed.Seconds() / 1e9
	}
	return st
}
