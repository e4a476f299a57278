package resident

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Ring is the host's view of a slot ring: the results and the consumer
// word, and the slots themselves where the host writes them. Its memory
// belongs to whoever made it (host memory mapped into the GPU, or Go
// memory in tests) and must outlive every consumer and producer of it.
type Ring struct {
	NSlots   int
	SlotSize int
	// NSrc is the data pattern's period (Word), NSlots + 1.
	NSrc uint64
	// Slots is the slots' memory where the host can write it; nil when
	// they are GPU memory only a copy engine reaches.
	Slots    []byte
	Results  []byte // NSlots records of ResultSize bytes; nil where the host does not reach them
	Consumer []byte // ConsumerSize bytes; nil where the host does not reach it
}

// NewRing checks the geometry and wraps the memory; slots, results and
// consumer may be nil (memory the host does not reach: then Status and
// Release, or Publish and Consumed, must not be called). Results and
// consumer must be 8-byte aligned.
func NewRing(nslots, slotSize int, slots, results, consumer []byte) (*Ring, error) {
	switch {
	case nslots < 1 || slotSize < 16 || slotSize%16 != 0:
		return nil, fmt.Errorf("%w: %d slots of %d bytes (at least one slot, a multiple of 16 bytes)", ErrConfig, nslots, slotSize)
	case slots != nil && len(slots) < nslots*slotSize:
		return nil, fmt.Errorf("%w: %d bytes of slots for %d of %d bytes", ErrConfig, len(slots), nslots, slotSize)
	case results != nil && len(results) < nslots*ResultSize || consumer != nil && len(consumer) < ConsumerSize:
		return nil, fmt.Errorf("%w: %d bytes of results and %d of consumer word for %d slots", ErrConfig, len(results), len(consumer), nslots)
	case results != nil && uintptr(unsafe.Pointer(&results[0]))%8 != 0 || consumer != nil && uintptr(unsafe.Pointer(&consumer[0]))%8 != 0:
		return nil, fmt.Errorf("%w: results and consumer word must be 8-byte aligned", ErrConfig)
	}
	return &Ring{NSlots: nslots, SlotSize: slotSize, NSrc: uint64(nslots) + 1, Slots: slots, Results: results, Consumer: consumer}, nil
}

// resultWord points at the first 8 bytes of slot i's result.
func (r *Ring) resultWord(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&r.Results[i*ResultSize]))
}

// Status reads slot i's result: status and length.
func (r *Ring) Status(i int) (status, length uint32) {
	w := atomic.LoadUint64(r.resultWord(i))
	return uint32(w), uint32(w >> 32)
}

// Release marks slot i consumed (status 0), as the consumer does.
func (r *Ring) Release(i int) { atomic.StoreUint32((*uint32)(unsafe.Pointer(r.resultWord(i))), 0) }

// Publish stores the consumer index, as the consumer does.
func (r *Ring) Publish(consumed uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.Consumer[0])), consumed)
}

// Consumed reads the consumer index.
func (r *Ring) Consumed() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.Consumer[0])))
}

// Reset clears every result and the consumer index the host reaches;
// nothing may use the ring meanwhile.
func (r *Ring) Reset() {
	for i := 0; r.Results != nil && i < r.NSlots; i++ {
		atomic.StoreUint64(r.resultWord(i), 0)
	}
	if r.Consumer != nil {
		r.Publish(0)
	}
}

// Slot returns slot i's bytes where the host can write them.
func (r *Ring) Slot(i int) []byte {
	if r.Slots == nil {
		return nil
	}
	return r.Slots[i*r.SlotSize : (i+1)*r.SlotSize]
}

// A Producer plays the engine: it writes fill k's data into slot
// k % NSlots, then its result, in that order as the consumer sees them.
type Producer interface {
	Data(k uint64) error
	Result(k uint64) error
	// Flush waits until everything written so far is where the consumer
	// reads it (a copy engine's queue); a no-op for CPU stores.
	Flush() error
}

// HostProducer writes with CPU stores: each fill's data copied from one
// of NSrc prepared patterns with its sequence word stamped, then the
// result word in one 8-byte store (x86-64 and arm64 keep the data's stores
// before it: Go's atomic store is a release).
type HostProducer struct {
	r   *Ring
	src [][]byte
}

// NewHostProducer prepares the patterns; the ring's slots must be host
// memory.
func NewHostProducer(r *Ring) (*HostProducer, error) {
	if r.Slots == nil {
		return nil, fmt.Errorf("%w: the CPU producer needs slots in host memory", ErrConfig)
	}
	return &HostProducer{r: r, src: Patterns(r.NSrc, r.SlotSize)}, nil
}

// Patterns returns the nsrc prepared fills of size bytes: pattern s is
// fill s (Fill), whose sequence word a producer overwrites with k.
func Patterns(nsrc uint64, size int) [][]byte {
	out := make([][]byte, nsrc)
	for s := range out {
		out[s] = make([]byte, size)
		Fill(out[s], uint64(s), nsrc)
	}
	return out
}

// Data implements Producer.
func (p *HostProducer) Data(k uint64) error {
	b := p.r.Slot(int(k % uint64(p.r.NSlots)))
	copy(b, p.src[k%p.r.NSrc])
	binary.LittleEndian.PutUint64(b, k)
	return nil
}

// Result implements Producer.
func (p *HostProducer) Result(k uint64) error {
	atomic.StoreUint64(p.r.resultWord(int(k%uint64(p.r.NSlots))), resultWord(uint32(p.r.SlotSize)))
	return nil
}

// Flush implements Producer.
func (p *HostProducer) Flush() error { return nil }

// Run says how a producer runs.
type Run struct {
	// Duration bounds the run's producing; Fills bounds its fills. The
	// first reached ends it (0: no bound; one of them must be set).
	Duration time.Duration
	Fills    uint64
	// Depth is how many fills may wait for the consumer at once: 0 for
	// the ring's NSlots (credits), 1 for one at a time, when each round
	// trip is measured: result written to consumer index seen.
	Depth int
	// Alone runs the producer with no consumer: no credits, no drain.
	Alone bool
	// Stall is how long the consumer index may stand still while fills
	// wait before the run fails with ErrStalled (default 5 s).
	Stall time.Duration
}

// Produced is what a run did.
type Produced struct {
	Fills   uint64
	Elapsed time.Duration // from the first fill until the last is consumed (flushed, alone)
	// RoundTrips are the depth-1 runs' round trips.
	RoundTrips []time.Duration
}

// Produce runs p over r on the calling goroutine, which it wires to its
// thread: it fills slots in order while the consumer index grants
// credits (a fill k waits until consumed + NSlots > k), then waits until
// every fill is consumed. The consumer index must start at 0.
func Produce(ctx context.Context, r *Ring, p Producer, run Run) (Produced, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out Produced
	if run.Duration <= 0 && run.Fills == 0 {
		return out, fmt.Errorf("%w: a run needs a duration or a number of fills", ErrConfig)
	}
	depth := uint64(run.Depth)
	if depth == 0 || depth > uint64(r.NSlots) {
		depth = uint64(r.NSlots)
	}
	stall := run.Stall
	if stall <= 0 {
		stall = 5 * time.Second
	}
	waitFor := func(k uint64) error { // until consumed >= k
		var spins int
		var since time.Time
		last := r.Consumed()
		for c := last; c < k; c = r.Consumed() {
			if spins++; spins&4095 != 0 {
				continue
			}
			now := time.Now()
			switch {
			case c != last || since.IsZero():
				last, since = c, now
			case now.Sub(since) > stall:
				return fmt.Errorf("%w: consumer index %d for %v, waiting for %d", ErrStalled, c, stall, k)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	start := time.Now()
	deadline := start.Add(run.Duration)
	for k := uint64(0); ; k++ {
		if run.Fills != 0 && k >= run.Fills || run.Duration > 0 && k&63 == 0 && time.Now().After(deadline) {
			out.Fills = k
			break
		}
		if !run.Alone && k >= depth {
			if err := waitFor(k - depth + 1); err != nil {
				out.Fills = k
				return out, fmt.Errorf("fill %d: %w", k, err)
			}
		}
		if err := p.Data(k); err != nil {
			return out, fmt.Errorf("fill %d: data: %w", k, err)
		}
		t0 := time.Now()
		if err := p.Result(k); err != nil {
			return out, fmt.Errorf("fill %d: result: %w", k, err)
		}
		if !run.Alone && depth == 1 {
			if err := waitFor(k + 1); err != nil {
				out.Fills = k + 1
				return out, fmt.Errorf("fill %d: %w", k, err)
			}
			out.RoundTrips = append(out.RoundTrips, time.Since(t0))
		}
	}
	if err := p.Flush(); err != nil {
		return out, err
	}
	if !run.Alone {
		if err := waitFor(out.Fills); err != nil {
			return out, fmt.Errorf("draining: %w", err)
		}
	}
	out.Elapsed = time.Since(start)
	return out, nil
}
