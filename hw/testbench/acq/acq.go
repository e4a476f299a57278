// Package acq models the acquisition logic of the FPGA: a frame source that
// feeds a C2H stream channel at a set rate and counts what it must drop when
// the host falls behind, and a sink that checks the frames an H2C stream
// channel delivers. Frames follow package frame.
package acq

import (
	"sync"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
)

// SourceConfig configures a Source.
type SourceConfig struct {
	PayloadLen int     // payload bytes per frame
	Rate       float64 // frames per second; 0 produces a frame whenever one is read
	FIFO       int     // frames buffered before the source drops; 0 means 64
	// Now returns the time since the source started; nil uses the
	// monotonic clock. Tests supply their own.
	Now func() time.Duration
}

// SourceStats accounts for every frame the source generated:
// Generated = Delivered + Dropped + Queued.
type SourceStats struct {
	Generated uint64 // sequence numbers handed out
	Delivered uint64 // frames whose last byte went to the stream
	Dropped   uint64 // frames lost because the FIFO was full
	Queued    uint64 // frames generated, not yet delivered
	Bytes     uint64 // bytes delivered
}

type pending struct{ seq, ts uint64 }

// Source is an xdmamodel.Source producing frames.
type Source struct {
	mu       sync.Mutex
	cfg      SourceConfig
	fifo     []pending
	cur      []byte // frame being delivered
	off      int
	curValid bool
	stats    SourceStats
	start    time.Time
}

// NewSource returns a source; it starts its clock now.
func NewSource(cfg SourceConfig) *Source {
	if cfg.FIFO <= 0 {
		cfg.FIFO = 64
	}
	s := &Source{cfg: cfg, start: time.Now(), cur: make([]byte, frame.Size(cfg.PayloadLen))}
	if s.cfg.Now == nil {
		s.cfg.Now = func() time.Duration { return time.Since(s.start) }
	}
	return s
}

// FrameSize returns the bytes of one frame.
func (s *Source) FrameSize() int { return frame.Size(s.cfg.PayloadLen) }

// Stats returns the source's counters.
func (s *Source) Stats() SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.generate()
	st := s.stats
	st.Queued = uint64(len(s.fifo))
	if s.curValid {
		st.Queued++
	}
	return st
}

// generate produces the frames due by now, dropping those that find the
// FIFO full.
func (s *Source) generate() {
	if s.cfg.Rate <= 0 {
		return
	}
	now := s.cfg.Now()
	due := uint64(now.Seconds() * s.cfg.Rate)
	for s.stats.Generated < due {
		seq := s.stats.Generated
		s.stats.Generated++
		if len(s.fifo) >= s.cfg.FIFO {
			s.stats.Dropped++
			continue
		}
		ts := uint64(float64(seq) / s.cfg.Rate * 1e9)
		s.fifo = append(s.fifo, pending{seq, ts})
	}
}

// Read implements xdmamodel.Source: it returns the next bytes of the current
// frame, with eop at each frame's end, or nothing when no frame is due.
func (s *Source) Read(p []byte) (int, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.curValid {
		s.generate()
		var next pending
		switch {
		case len(s.fifo) > 0:
			next = s.fifo[0]
			s.fifo = s.fifo[1:]
		case s.cfg.Rate <= 0:
			next = pending{s.stats.Generated, uint64(s.cfg.Now())}
			s.stats.Generated++
		default:
			return 0, false, nil
		}
		frame.Encode(s.cur, next.seq, next.ts, s.cfg.PayloadLen)
		s.off = 0
		s.curValid = true
	}
	n := copy(p, s.cur[s.off:])
	s.off += n
	s.stats.Bytes += uint64(n)
	if s.off < len(s.cur) {
		return n, false, nil
	}
	s.curValid = false
	s.stats.Delivered++
	return n, true, nil
}

// Sink is an xdmamodel.Sink that checks frames: each packet must hold whole
// frames.
type Sink struct {
	mu      sync.Mutex
	packet  []byte
	checker frame.Checker
	packets uint64
}

// Write implements xdmamodel.Sink.
func (k *Sink) Write(p []byte, eop bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.packet = append(k.packet, p...)
	if !eop {
		return nil
	}
	k.packets++
	b := k.packet
	for len(b) > 0 {
		n, err := k.checker.Check(b)
		if err != nil {
			break
		}
		b = b[n:]
	}
	k.packet = k.packet[:0]
	return nil
}

// Stats returns the frames the sink checked and the packets it received.
func (k *Sink) Stats() (frame.Stats, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checker.Stats, k.packets
}
