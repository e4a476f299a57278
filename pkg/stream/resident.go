//go:build linux

package stream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// The records a resident stream shares with its consumer
// (kmod/gpufpga/uapi/gpufpga_resident.h): kept here rather than taken from
// package resident, which links CUDA.
const (
	resultSize   = 32 // struct gpufpga_slot_result
	consumerSize = 64 // struct gpufpga_consumer
)

// defaultDrainTimeout is Config.DrainTimeout's 0.
const defaultDrainTimeout = 5 * time.Second

// ErrUnconsumed reports a resident session that ended with fills its
// consumer did not take: it stopped making progress, or ended early.
var ErrUnconsumed = errors.New("stream: the resident consumer left fills unconsumed")

// ResidentGPU is a GPU that runs a GPU-resident stream's consumer, which
// follows kmod/gpufpga/uapi/gpufpga_resident.h on memory the session
// allocated from the GPU: CUDA's (cudamem, package resident's persistent
// kernel checking frames) and the rig's simulated GPU (hw/testbench/simgpu).
type ResidentGPU interface {
	// StartConsumer clears r.Results, starts a consumer that takes fills
	// k = 0, 1, ... and publishes its count in r.Consumer, and returns
	// once it runs. Where the GPU sees the peer's writes out of order
	// (CUDA's GPUDirect RDMA writes ordering below "owner"), it refuses.
	StartConsumer(r ResidentRing) (ResidentConsumer, error)
}

// ResidentRing is the memory a resident consumer works on.
type ResidentRing struct {
	Ring     GPUBuffer // Slots slots of SlotSize bytes from offset 0
	SlotSize uint64
	Slots    int
	// Results holds Slots 32-byte results (struct gpufpga_slot_result)
	// from offset 0, where the engine writes them.
	Results GPUBuffer
	// Consumer is the consumer's 64-byte word (struct gpufpga_consumer),
	// host memory pinned for the driver. The consumer maps it into the
	// GPU where the GPU needs that (CUDA: cuMemHostRegister with
	// DEVICEMAP) and undoes it when it stops.
	Consumer []byte
	// Check and FrameSize are the session's: what the consumer verifies
	// of the frames; it refuses a check it cannot make.
	Check     Check
	FrameSize int
	// Func, if not nil, is the user's code to run on every fill in
	// place of Check; a GPU that cannot run it refuses.
	Func *ResidentFunc
}

// ResidentFunc is the user's code a resident consumer runs on every
// fill: PTX (ISA 6.0 or later, sm_70 or later) that defines
//
//	extern "C" __device__ int gpufpga_process(const unsigned char *slot,
//		unsigned long long len, unsigned long long k, void *state, void *out);
//
// which cudamem links into package resident's persistent consumer with
// the driver's JIT linker (no CUDA toolkit; resident.FuncName says what
// the function may do). Every thread of a 256-thread worker block calls
// it once for fill k; a non-zero return counts the fill in
// Stats.BadFills. While the consumer runs, what waits for every kernel
// on the GPU (freeing memory, loading modules) waits for it: cudamem
// loads the linked consumer once per GPU and function, and defers its
// own frees until no consumer runs.
type ResidentFunc struct {
	Name string // names the PTX in errors
	PTX  []byte
	// State, if not empty, is copied to GPU memory that every call gets
	// as state (parameters, running totals); it lives as long as the
	// consumer.
	State []byte
	// OutSize and OutDepth: each fill's out is a record of OutSize bytes
	// (a multiple of 8) in host memory; OnRecord gets fill k's, in fill
	// order, once the fill is published, on a goroutine of the
	// consumer's, and OutDepth of them may wait for it (the consumer
	// holds fill k until fill k - OutDepth's was handed over). 0: none.
	OutSize, OutDepth int
	// OnRecord receives each record; it must not keep rec after it
	// returns. Records still unread when the consumer stops are handed
	// over before Stop returns.
	OnRecord func(k uint64, rec []byte)
}

// ResidentWords is a ResidentGPU that supplies the consumer's word
// itself: memory it mapped into the GPU once and keeps, so that no
// mapping is undone while a consumer runs (CUDA's unregistration waits
// for every kernel on the GPU). The session pins the word it gets, and
// calls release once it has unpinned it.
type ResidentWords interface {
	ResidentWord() (word []byte, release func(), err error)
}

// ResidentConsumer is a running resident consumer.
type ResidentConsumer interface {
	Stats() ConsumerStats
	// Done is closed when the consumer has ended: stopped, or failed.
	Done() <-chan struct{}
	// Stop ends the consumer where it is, waits until nothing of it
	// reads the ring or writes the word any more, and returns why it
	// failed (nil if it ran until stopped). Every call returns the same.
	Stop() error
}

// ConsumerStats is what a resident consumer has taken.
type ConsumerStats struct {
	Consumed uint64 // fills consumed and published
	Bytes    uint64 // their lengths, summed
	Frames   frame.Stats
	Bad      uint64 // fills a ResidentFunc found bad
}

// residentMem is what a resident session holds beside the ring.
type residentMem struct {
	results    GPUBuffer
	resultsPin *p2p.Pin
	word       *p2p.HostBuffer
	wordMem    []byte // the consumer's word: word's, or the GPU's
	wordFree   func() // gives the GPU's word back
	wordPin    *p2p.Pin
	cons       ResidentConsumer
	final      *ConsumerStats // once the session ended
	fills      uint64
}

func (r *residentMem) free() error {
	var errs []error
	for _, p := range []*p2p.Pin{r.resultsPin, r.wordPin} {
		if p != nil {
			errs = append(errs, p.Unpin())
		}
	}
	if r.word != nil {
		errs = append(errs, r.word.Free())
	}
	if r.wordFree != nil {
		r.wordFree()
	}
	if r.results != nil {
		errs = append(errs, r.results.Free())
	}
	return errors.Join(errs...)
}

func (c *Config) validateResident() error {
	if !c.Resident {
		if c.Coalesce != 0 {
			return fmt.Errorf("%w: coalescing is for resident sessions", ErrConfig)
		}
		if c.ResidentFunc != nil {
			return fmt.Errorf("%w: a resident function is for resident sessions", ErrConfig)
		}
		return nil
	}
	if c.Mode == Compat {
		return errResidentCompat
	}
	if _, ok := c.GPU.(ResidentGPU); !ok {
		return fmt.Errorf("%w: this GPU cannot run a resident consumer", ErrUnsupported)
	}
	if c.Coalesce < 0 || c.Coalesce > c.Slots {
		return fmt.Errorf("%w: coalescing %d fills of %d slots: want 0 (the driver picks) to %d", ErrConfig, c.Coalesce, c.Slots, c.Slots)
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("%w: drain timeout %v", ErrConfig, c.DrainTimeout)
	}
	if f := c.ResidentFunc; f != nil {
		switch {
		case c.Check != CheckNone:
			return fmt.Errorf("%w: a resident function is the consumer's check: check %v, not %v", ErrConfig, CheckNone, c.Check)
		case len(f.PTX) == 0:
			return fmt.Errorf("%w: resident function %q has no PTX", ErrConfig, f.Name)
		case f.OutSize < 0 || f.OutDepth < 0 || f.OutSize%8 != 0 || (f.OutSize == 0) != (f.OutDepth == 0) || (f.OutSize > 0) != (f.OnRecord != nil):
			return fmt.Errorf("%w: resident function %q: %d records of %d bytes: none, or a depth, a multiple of 8 and OnRecord", ErrConfig, f.Name, f.OutDepth, f.OutSize)
		}
	}
	return nil
}

var errResidentCompat = fmt.Errorf("%w: a resident session's ring is in GPU memory, where its consumer runs: not compat mode", ErrConfig)

// startResident allocates and pins the results and the consumer's word,
// starts the consumer and then the stream. On failure the caller frees
// the session.
func (s *Session) startResident(ctx context.Context, pinning Pinning) error {
	r := &residentMem{}
	s.res = r
	d := s.cfg.Device
	n := uint64(s.cfg.Slots) * resultSize
	var err error
	if r.results, err = s.cfg.GPU.Alloc(n); err != nil {
		return fmt.Errorf("stream: resident results of %d bytes: %w", n, err)
	}
	// Pinned as the ring is: the engine writes a result after its slot's
	// data, and the GPU sees them in that order only in its own memory.
	if r.resultsPin, err = PinGPU(d, r.results, n, pinning); err != nil {
		return fmt.Errorf("stream: resident results of %d bytes, pinned through %v: %w", n, pinning, err)
	}
	if w, ok := s.cfg.GPU.(ResidentWords); ok {
		if r.wordMem, r.wordFree, err = w.ResidentWord(); err != nil {
			return fmt.Errorf("stream: resident consumer word: %w", err)
		}
	} else {
		if r.word, err = d.AllocHost(uint64(os.Getpagesize())); err != nil {
			return fmt.Errorf("stream: resident consumer word: %w", err)
		}
		r.wordMem = r.word.Bytes()
	}
	word := r.wordMem[:consumerSize]
	if r.wordPin, err = d.PinHost(r.wordMem); err != nil {
		return fmt.Errorf("stream: resident consumer word: %w", err)
	}
	if r.cons, err = s.cfg.GPU.(ResidentGPU).StartConsumer(ResidentRing{
		Ring: s.gpu, SlotSize: s.cfg.SlotSize, Slots: s.cfg.Slots, Results: r.results,
		Consumer: word, Check: s.cfg.Check, FrameSize: s.cfg.FrameSize, Func: s.cfg.ResidentFunc,
	}); err != nil {
		return fmt.Errorf("stream: starting the resident consumer: %w", err)
	}
	st, err := d.StartResidentStream(s.cfg.Channel, s.segments(s.gpuPin), p2p.Resident{
		Results:  p2p.Segment{Pin: r.resultsPin, Len: n},
		Consumer: p2p.Segment{Pin: r.wordPin, Len: consumerSize},
		Coalesce: s.cfg.Coalesce,
	})
	if err != nil {
		return errors.Join(err, r.cons.Stop())
	}
	s.src = st
	s.started = time.Now()
	s.stats.Mode = s.mode
	s.stats.Check = s.cfg.Check
	s.stats.Resident = true
	go s.endResident(ctx, st)
	return nil
}

// endResident waits for the stream to end (Stop, ctx, a failure of the
// stream or of the consumer), lets the consumer take every fill the
// engine made, stops it, and ends the session. It does nothing per slot.
func (s *Session) endResident(ctx context.Context, st *p2p.Stream) {
	defer close(s.done)
	defer close(s.filled)
	stop := context.AfterFunc(ctx, func() { st.Stop() })
	defer stop()
	cons := s.res.cons
	slots, consDone := st.Slots(), cons.Done()
	for slots != nil {
		select {
		case _, ok := <-slots: // none come: it closes at the end
			if !ok {
				slots = nil
			}
		case <-consDone:
			// Nothing gives the engine credits any more.
			consDone = nil
			st.Stop()
		}
	}
	fills := st.Fills()
	drainErr := s.drain(cons, fills)
	consErr := cons.Stop()
	final := cons.Stats()
	err := residentEndErr(st.Err(), consErr, drainErr, ctx.Err())
	s.mu.Lock()
	s.res.fills, s.res.final = fills, &final
	if s.err == nil {
		s.err = err
	}
	s.ended = time.Now()
	s.mu.Unlock()
}

// residentEndErr is why a resident session ended: every one of the
// stream's, the consumer's, the drain's and the context's errors there
// were, joined.
func residentEndErr(streamErr, consErr, drainErr, ctxErr error) error {
	if consErr != nil {
		consErr = fmt.Errorf("stream: resident consumer: %w", consErr)
	}
	return errors.Join(streamErr, consErr, drainErr, ctxErr)
}

// drain waits until the consumer has consumed fills, ends, or makes no
// progress for the drain timeout.
func (s *Session) drain(cons ResidentConsumer, fills uint64) error {
	stall := s.cfg.DrainTimeout
	if stall == 0 {
		stall = defaultDrainTimeout
	}
	last, since := cons.Stats().Consumed, time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for last < fills {
		select {
		case <-cons.Done():
			if c := cons.Stats().Consumed; c < fills {
				return fmt.Errorf("%w: it ended having consumed %d of %d fills", ErrUnconsumed, c, fills)
			}
			return nil
		case now := <-tick.C:
			if c := cons.Stats().Consumed; c != last {
				last, since = c, now
			} else if now.Sub(since) > stall {
				return fmt.Errorf("%w: %d of %d fills consumed, none more for %v", ErrUnconsumed, c, fills, stall)
			}
		}
	}
	return nil
}

// residentStats fills in what the consumer took; s.mu is held.
func (s *Session) residentStats(st *Stats) {
	cs := s.res.final
	if cs == nil {
		live := s.res.cons.Stats()
		cs = &live
	}
	st.Slots, st.Bytes, st.Frames, st.BadFills = cs.Consumed, cs.Bytes, cs.Frames, cs.Bad
	st.Fills = s.res.fills
}
