//go:build linux

// Package stream runs continuous acquisition: an FPGA's C2H stream channel
// filling a ring of slots in GPU memory (direct mode) or in host memory
// whose slots are then copied to the GPU (compat mode), with every frame
// accounted for: frames parsed, sequence gaps, duplicates and CRC failures.
package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Region is pinned memory with a view the CPU can read.
type Region struct {
	Pin   *p2p.Pin
	Bytes []byte
	Free  func() error // unpins and frees
}

// Memory provides pinned memory: GPU memory (direct mode, and the
// destination of compat mode's copies) or host memory.
type Memory interface {
	Alloc(d *p2p.Device, size uint64) (Region, error)
}

// Mode says where the ring lives.
type Mode int

// Modes.
const (
	Auto   Mode = iota // direct when the driver can pin GPU memory
	Direct             // the FPGA writes straight into GPU memory
	Compat             // the FPGA writes host memory; slots are copied to the GPU
)

func (m Mode) String() string {
	return [...]string{"auto", "direct", "compat"}[m]
}

// Config describes a session.
type Config struct {
	Device  *p2p.Device
	Channel int // a C2H stream channel
	// SlotSize is the bytes per slot. A slot must be bus-contiguous: within
	// one 64 KiB GPU page (or a run of contiguous ones), or one 4 KiB page
	// of host memory in compat mode.
	SlotSize uint64
	Slots    int
	Mode     Mode
	GPU      Memory // GPU memory
	Host     Memory // host memory, for compat mode
	// Check parses the frames of every slot on the CPU and accounts for
	// them; without it only bytes and slots are counted.
	Check bool
}

// Filled is a slot ready for the consumer: Data is its bytes in GPU memory
// (direct) or in the GPU copy (compat), as the CPU sees them.
type Filled struct {
	Slot  int
	Seq   uint64
	Data  []byte
	EOP   bool
	Ready time.Time
}

// Stats describe a session so far.
type Stats struct {
	Mode        Mode
	Bytes       uint64
	Slots       uint64
	Elapsed     time.Duration
	GBps        float64
	Held        int           // slots the consumer holds now
	MaxHeld     int           // most slots held at once
	SlotLatency time.Duration // mean, driver seeing a slot to the consumer getting it
	Frames      frame.Stats
}

// Session is a running acquisition.
type Session struct {
	cfg     Config
	mode    Mode
	ring    Region
	gpu     Region // compat: where slots are copied
	st      *p2p.Stream
	filled  chan Filled
	mu      sync.Mutex
	stats   Stats
	checker frame.Checker
	started time.Time
	latency time.Duration
	err     error
	done    chan struct{}
	once    sync.Once
}

// ErrConfig reports a configuration that cannot run.
var ErrConfig = errors.New("stream: bad configuration")

// Start allocates the ring, starts the channel and delivers filled slots
// until ctx ends, Stop is called, or the stream fails.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	if cfg.Device == nil || cfg.Slots < 1 || cfg.SlotSize == 0 || cfg.GPU == nil {
		return nil, fmt.Errorf("%w: need a device, slots, a slot size and GPU memory", ErrConfig)
	}
	mode := cfg.Mode
	if mode == Auto {
		info, err := cfg.Device.Info()
		if err != nil {
			return nil, err
		}
		mode = Compat
		if info.Supports(p2p.KindGPU) {
			mode = Direct
		}
	}
	if mode == Compat && cfg.Host == nil {
		return nil, fmt.Errorf("%w: compat mode needs host memory", ErrConfig)
	}
	s := &Session{cfg: cfg, mode: mode, filled: make(chan Filled, cfg.Slots), done: make(chan struct{})}
	size := cfg.SlotSize * uint64(cfg.Slots)
	var err error
	if mode == Direct {
		s.ring, err = cfg.GPU.Alloc(cfg.Device, size)
	} else {
		if s.ring, err = cfg.Host.Alloc(cfg.Device, size); err == nil {
			if s.gpu, err = cfg.GPU.Alloc(cfg.Device, size); err != nil {
				s.ring.Free()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream: %v ring of %d x %d bytes: %w", mode, cfg.Slots, cfg.SlotSize, err)
	}
	segs := make([]p2p.Segment, cfg.Slots)
	for i := range segs {
		segs[i] = p2p.Segment{Pin: s.ring.Pin, Offset: uint64(i) * cfg.SlotSize, Len: cfg.SlotSize}
	}
	if s.st, err = cfg.Device.StartStream(cfg.Channel, segs); err != nil {
		s.free()
		return nil, err
	}
	s.started = time.Now()
	s.stats.Mode = mode
	go s.run(ctx)
	return s, nil
}

func (s *Session) free() {
	if s.ring.Free != nil {
		s.ring.Free()
	}
	if s.gpu.Free != nil {
		s.gpu.Free()
	}
}

func (s *Session) run(ctx context.Context) {
	defer close(s.filled)
	defer close(s.done)
	stop := context.AfterFunc(ctx, func() { s.st.Stop() })
	defer stop()
	size := s.cfg.SlotSize
	for sl := range s.st.Slots() {
		data := s.ring.Bytes[uint64(sl.Index)*size : uint64(sl.Index)*size+sl.Bytes]
		if s.mode == Compat {
			// The copy to the GPU; with CUDA this is an async H2D copy.
			dst := s.gpu.Bytes[uint64(sl.Index)*size:]
			copy(dst, data)
			data = dst[:sl.Bytes]
		}
		s.mu.Lock()
		s.stats.Bytes += sl.Bytes
		s.stats.Slots++
		s.stats.Held++
		s.stats.MaxHeld = max(s.stats.MaxHeld, s.stats.Held)
		if s.cfg.Check {
			for b := data; len(b) > 0; {
				n, err := s.checker.Check(b)
				if err != nil {
					break // counted as a CRC failure
				}
				b = b[n:]
			}
		}
		s.latency += monotonic() - sl.Time
		s.stats.SlotLatency = s.latency / time.Duration(s.stats.Slots)
		s.mu.Unlock()
		f := Filled{Slot: sl.Index, Seq: sl.Seq, Data: data, EOP: sl.EOP, Ready: time.Now()}
		s.filled <- f // room for every slot: the ring bounds what is out
	}
	s.mu.Lock()
	s.err = s.st.Err()
	if s.err == nil && ctx.Err() != nil {
		s.err = ctx.Err()
	}
	s.mu.Unlock()
}

// monotonic reads CLOCK_MONOTONIC, the driver's clock for slot times.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Filled delivers slots in fill order; it is closed when the session ends.
// A slot's Data stays valid until it is released, and its memory until
// Close.
func (s *Session) Filled() <-chan Filled { return s.filled }

// Release hands a slot back to the engine.
func (s *Session) Release(slot int) error {
	// Counted first: the engine may refill the slot before the call returns.
	s.mu.Lock()
	s.stats.Held--
	s.mu.Unlock()
	if err := s.st.Release(slot); err != nil {
		s.mu.Lock()
		s.stats.Held++
		s.mu.Unlock()
		return err
	}
	return nil
}

// Stop ends the session and waits until its slots are delivered.
func (s *Session) Stop() error {
	err := s.st.Stop()
	<-s.done
	return err
}

// Close stops the session if it runs and frees its memory. Call it once no
// Filled.Data is in use any more.
func (s *Session) Close() error {
	select {
	case <-s.done:
	default:
		s.Stop()
	}
	s.once.Do(s.free)
	return nil
}

// Err is why the session ended: nil after Stop, the context's error after
// cancellation, or the stream's failure (p2p.ErrRevoked, ErrHardware, ...).
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
	st.Elapsed = time.Since(s.started)
	if st.Elapsed > 0 {
		st.GBps = float64(st.Bytes) / st.Elapsed.Seconds() / 1e9
	}
	st.Frames = s.checker.Stats
	return st
}
