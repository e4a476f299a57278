//go:build linux

package simgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/resident"
)

// Consumer plays a GPU-resident stream's consumer on the simulated GPU,
// as a persistent kernel does on a real one (gpufpga_resident.h): it
// polls the k-th result with one 64-bit load, checks the slot's frames,
// clears the status, and publishes k + 1 in the consumer word with a
// store the driver's next read sees whole. The simulated GPU's memory is
// the guest's, so a CPU load is what a GPU load is there.
type Consumer struct {
	ring     []byte // slots, slotSize apart
	slotSize int
	results  []byte // one resident.SlotResult per slot
	word     *uint64
	nslots   int

	// Publish is how many slots the consumer consumes before it
	// publishes; it always publishes before it waits. 0 means 1.
	Publish int
	// Delay, if set, is how long the consumer takes over fill k: a slow
	// consumer.
	Delay func(k uint64) time.Duration
	// Poll is how long it sleeps when it finds no fill. 0 means 20 µs.
	Poll time.Duration

	limit atomic.Uint64 // consumes fills below it: a stalled consumer

	mu       sync.Mutex
	consumed uint64
	bytes    uint64
	eops     uint64
	chk      frame.Checker
}

// ErrResult is a result the consumer cannot take.
var ErrResult = errors.New("simgpu: bad resident result")

// NewConsumer consumes ring's nslots slots of slotSize bytes through
// results (nslots * resident.ResultSize bytes) and word (the consumer's
// resident.ConsumerSize bytes, 8-byte aligned), all as the CPU maps them.
func NewConsumer(ring []byte, slotSize, nslots int, results, word []byte) (*Consumer, error) {
	switch {
	case nslots < 1 || slotSize < 1 || len(ring) < nslots*slotSize:
		return nil, fmt.Errorf("simgpu: consumer ring of %d bytes for %d x %d", len(ring), nslots, slotSize)
	case len(results) < nslots*resident.ResultSize:
		return nil, fmt.Errorf("simgpu: %d bytes of results for %d slots", len(results), nslots)
	case len(word) < resident.ConsumerSize || uintptr(unsafe.Pointer(&word[0]))%8 != 0:
		return nil, fmt.Errorf("simgpu: consumer word of %d bytes", len(word))
	}
	c := &Consumer{ring: ring, slotSize: slotSize, results: results, nslots: nslots,
		word: (*uint64)(unsafe.Pointer(&word[0]))}
	c.limit.Store(math.MaxUint64)
	return c, nil
}

// Stall makes the consumer stop before fill k (it consumes fills below
// k); Resume lets it go on.
func (c *Consumer) Stall(k uint64) { c.limit.Store(k) }

// Resume undoes Stall.
func (c *Consumer) Resume() { c.limit.Store(math.MaxUint64) }

// ConsumerStats is what the consumer has seen.
type ConsumerStats struct {
	Consumed uint64 // fills consumed (and published)
	Bytes    uint64 // their lengths, summed
	EOPs     uint64 // fills that ended a packet
	Frames   frame.Stats
}

// Stats returns what the consumer has seen so far.
func (c *Consumer) Stats() ConsumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConsumerStats{Consumed: c.consumed, Bytes: c.bytes, EOPs: c.eops, Frames: c.chk.Stats}
}

func (c *Consumer) result(i int) *uint64 {
	return (*uint64)(unsafe.Pointer(&c.results[i*resident.ResultSize]))
}

// Run consumes until ctx ends, or a result is bad (ErrResult). It
// publishes what it consumed before it returns.
func (c *Consumer) Run(ctx context.Context) error {
	publish := max(c.Publish, 1)
	poll := c.Poll
	if poll == 0 {
		poll = 20 * time.Microsecond
	}
	k := c.Stats().Consumed
	unpublished := 0
	defer func() { atomic.StoreUint64(c.word, k) }()
	for {
		i := int(k % uint64(c.nslots))
		w := atomic.LoadUint64(c.result(i))
		if k >= c.limit.Load() || !resident.Ready(uint32(w)) {
			if unpublished > 0 {
				atomic.StoreUint64(c.word, k)
				unpublished = 0
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(poll):
			}
			continue
		}
		if err := c.take(k, i, w); err != nil {
			return err
		}
		if c.Delay != nil {
			time.Sleep(c.Delay(k))
		}
		// The status goes before the count: the engine may refill the
		// slot once the driver reads the count.
		atomic.StoreUint32((*uint32)(unsafe.Pointer(c.result(i))), 0)
		k++
		if unpublished++; unpublished >= publish {
			atomic.StoreUint64(c.word, k)
			unpublished = 0
		}
	}
}

// take checks fill k in slot i, whose result word is w.
func (c *Consumer) take(k uint64, i int, w uint64) error {
	length := int(w >> 32)
	if length == 0 || length > c.slotSize {
		return fmt.Errorf("%w: fill %d in slot %d has %d bytes", ErrResult, k, i, length)
	}
	data := c.ring[i*c.slotSize : i*c.slotSize+length]
	c.mu.Lock()
	defer c.mu.Unlock()
	for off := 0; off < len(data); {
		n, err := c.chk.Check(data[off:])
		if err != nil {
			return fmt.Errorf("%w: fill %d in slot %d at byte %d: %v", ErrResult, k, i, off, err)
		}
		off += n
	}
	c.consumed = k + 1
	c.bytes += uint64(length)
	if uint32(w)&resident.ResultEOP != 0 {
		c.eops++
	}
	return nil
}
