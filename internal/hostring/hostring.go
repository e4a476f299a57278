//go:build linux

// Package hostring is an FPGA's frame source and C2H stream engine run in
// process over a ring of host memory: the stand-in for the card that
// cmd/gpubench measures the compat path with, and that tests of package
// stream consume, where there is no FPGA. Frames follow package frame.
package hostring

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Config configures a Ring.
type Config struct {
	Ring      []byte // Slots * SlotSize bytes
	Slots     int
	SlotSize  int
	FrameSize int // slots hold SlotSize/FrameSize whole frames
	Workers   int // slots encoded at once; 0 means 1
	// FIFO makes every worker build frames in a cached FIFO and copy
	// them out, even where it could stream them straight into the ring.
	FIFO bool
}

// ErrNotHeld reports a release of a slot the consumer does not hold.
var ErrNotHeld = errors.New("hostring: slot not held")

// Ring is the frame source and C2H stream engine run in process, for
// measuring what consumes a ring without QEMU: it writes
// frames into a host ring's slots in ring order and reports each filled
// slot as the driver does (a p2p.Slot), under the driver's credit rule: a
// slot is written again only once it and every slot before it were
// released. Workers encode successive slots at once, as an FPGA's frame
// generator is as wide as its link needs. It is unpaced: it fills a slot
// as soon as it holds the slot's credit, like a link faster than the host.
//
// Memory sees writes only, as it does from a DMA engine, not the reads
// that storing into uncached lines costs the CPU: on amd64 with AVX2, and
// payloads of whole 32-byte blocks, a worker writes each frame straight
// into the ring with streaming stores (its header from frame.Encoder, its
// payload pattern computed in registers); elsewhere, or with FIFO set, it
// builds frames in a FIFO of its own (a staging buffer that stays in
// cache) and writes them to the ring in bursts of at least 1 MiB, which
// Go's copy makes with streaming stores.
type Ring struct {
	cfg     Config
	enc     *frame.Encoder
	stream  bool      // frames go straight into the ring (streamFrame)
	vec     [8]uint64 // streamFrame's pattern: (i+1)*Phi, then 4*Phi
	credits chan struct{}
	jobs    chan ringJob
	order   chan ringJob
	slots   chan p2p.Slot
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
	start   time.Time

	mu         sync.Mutex
	held       []bool
	released   []bool
	nextCredit int
	generated  uint64
}

type ringJob struct {
	k    uint64 // fill sequence number; slot k % Slots
	done chan struct{}
}

// New starts the model.
func New(cfg Config) (*Ring, error) {
	if cfg.Slots < 1 || cfg.FrameSize < frame.HeaderSize || cfg.SlotSize < cfg.FrameSize ||
		cfg.SlotSize%cfg.FrameSize != 0 || len(cfg.Ring) < cfg.Slots*cfg.SlotSize {
		return nil, fmt.Errorf("hostring: host ring of %d bytes for %d slots of %d bytes of %d-byte frames",
			len(cfg.Ring), cfg.Slots, cfg.SlotSize, cfg.FrameSize)
	}
	cfg.Workers = max(cfg.Workers, 1)
	r := &Ring{
		cfg:      cfg,
		enc:      frame.NewEncoder(cfg.FrameSize - frame.HeaderSize),
		credits:  make(chan struct{}, cfg.Slots),
		jobs:     make(chan ringJob, cfg.Slots),
		order:    make(chan ringJob, cfg.Slots),
		slots:    make(chan p2p.Slot, cfg.Slots),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		held:     make([]bool, cfg.Slots),
		released: make([]bool, cfg.Slots),
		start:    time.Now(),
	}
	payload := cfg.FrameSize - frame.HeaderSize
	r.stream = !cfg.FIFO && canStream() && payload%32 == 0 && uintptr(unsafe.Pointer(&cfg.Ring[0]))%32 == 0
	var phi uint64 = frame.Phi
	for i := range 4 {
		r.vec[i] = uint64(i+1) * phi
		r.vec[4+i] = 4 * phi
	}
	for range cfg.Slots {
		r.credits <- struct{}{}
	}
	var workers sync.WaitGroup
	for range cfg.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			var fifo []byte
			if !r.stream {
				fifo = make([]byte, r.burst())
			}
			for j := range r.jobs {
				r.fill(j.k, fifo)
				close(j.done)
			}
		}()
	}
	go r.dispatch()
	go func() {
		r.emit()
		close(r.jobs)
		workers.Wait()
		close(r.done)
	}()
	return r, nil
}

// dispatch hands out a slot for each credit, in ring order.
func (r *Ring) dispatch() {
	defer close(r.order)
	for k := uint64(0); ; k++ {
		select {
		case <-r.stop:
			return
		case <-r.credits:
		}
		j := ringJob{k: k, done: make(chan struct{})}
		r.jobs <- j
		r.order <- j
	}
}

// emit reports slots in fill order as their workers finish.
func (r *Ring) emit() {
	defer close(r.slots)
	for j := range r.order {
		<-j.done
		idx := int(j.k % uint64(r.cfg.Slots))
		r.mu.Lock()
		r.held[idx] = true
		r.generated += uint64(r.cfg.SlotSize / r.cfg.FrameSize)
		r.mu.Unlock()
		r.slots <- p2p.Slot{Index: idx, Seq: j.k, Bytes: uint64(r.cfg.SlotSize), EOP: true, Time: p2p.SlotClock()}
	}
}

// burst is the bytes a worker writes at once: whole frames, at least the
// 1 MiB from which Go's memmove streams, at most a slot.
func (r *Ring) burst() int {
	const streaming = 1 << 20
	frames := (streaming + r.cfg.FrameSize - 1) / r.cfg.FrameSize
	return min(frames*r.cfg.FrameSize, r.cfg.SlotSize)
}

func (r *Ring) fill(k uint64, fifo []byte) {
	per := r.cfg.SlotSize / r.cfg.FrameSize
	slot := r.cfg.Ring[int(k%uint64(r.cfg.Slots))*r.cfg.SlotSize:][:r.cfg.SlotSize]
	ts := uint64(time.Since(r.start))
	seq := k * uint64(per)
	if r.stream {
		var hdr [frame.HeaderSize]byte
		blocks := (r.cfg.FrameSize - frame.HeaderSize) / 32
		for i := range per {
			key := r.enc.Header(hdr[:], seq, ts)
			streamFrame(&slot[i*r.cfg.FrameSize], &hdr, blocks, &r.vec, key)
			seq++
		}
		return
	}
	for off := 0; off < len(slot); off += len(fifo) {
		b := fifo[:min(len(fifo), len(slot)-off)]
		for i := 0; i < len(b); i += r.cfg.FrameSize {
			r.enc.Encode(b[i:], seq, ts)
			seq++
		}
		copy(slot[off:], b)
	}
}

// Streaming reports whether frames go straight into the ring with
// streaming stores, rather than through a FIFO.
func (r *Ring) Streaming() bool { return r.stream }

// Slots delivers filled slots in fill order; closed after Stop.
func (r *Ring) Slots() <-chan p2p.Slot { return r.slots }

// Release returns slots; credits go back in ring order, as the driver's.
func (r *Ring) Release(slots ...int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range slots {
		if s < 0 || s >= r.cfg.Slots || !r.held[s] {
			return fmt.Errorf("%w: %d", ErrNotHeld, s)
		}
	}
	for _, s := range slots {
		r.held[s] = false
		r.released[s] = true
	}
	for r.released[r.nextCredit] {
		r.released[r.nextCredit] = false
		r.nextCredit = (r.nextCredit + 1) % r.cfg.Slots
		r.credits <- struct{}{}
	}
	return nil
}

// Stop ends the model: slots being filled are still delivered.
func (r *Ring) Stop() error {
	r.stopped.Do(func() { close(r.stop) })
	<-r.done // never long: the slots channel has room for every slot
	return nil
}

// Err is always nil: the model does not fail.
func (r *Ring) Err() error { return nil }

// Generated returns the frames written into slots so far.
func (r *Ring) Generated() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.generated
}
