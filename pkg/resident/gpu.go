//go:build linux

package resident

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// PTX is the kernels, as `make ptx` generated them from Source.
//
//go:embed resident.ptx
var PTX []byte

// Source is the kernels' CUDA C source.
//
//go:embed resident.cu
var Source []byte

const (
	threads      = 256 // THREADS in resident.cu
	countersSize = 64  // struct counters
)

// Kernels is the loaded module, and the memory its persistent consumers
// ran on, kept for the next (memPool): nothing is freed until Close.
type Kernels struct {
	mod                                    *cuda.Module
	consume, checkSlot, pingpong, nullKern *cuda.Function
	pool                                   memPool
}

// LoadKernels JIT-compiles the PTX for g. Loading waits for every kernel
// running on the device, a persistent consumer's too: load once, before
// the first consumer starts, and start every consumer from it.
func LoadKernels(g *cuda.Device) (*Kernels, error) {
	mod, err := g.LoadPTX(PTX)
	if err != nil {
		return nil, fmt.Errorf("resident: loading the kernels: %w", err)
	}
	k := &Kernels{mod: mod}
	for _, f := range []struct {
		fn   **cuda.Function
		name string
	}{{&k.consume, "resident_consume"}, {&k.checkSlot, "check_slot"}, {&k.pingpong, "pingpong"}, {&k.nullKern, "null_kernel"}} {
		if *f.fn, err = mod.Function(f.name); err != nil {
			mod.Close()
			return nil, err
		}
	}
	return k, nil
}

// Close frees the consumers' memory and unloads the module. Both wait
// for every kernel running on the device: close the kernels once every
// consumer of the process has stopped.
func (k *Kernels) Close() error { return errors.Join(k.pool.free(), k.mod.Close()) }

// Placement is where a ring's slots are.
type Placement int

const (
	// SlotsHost: host memory mapped into the GPU, written by CPU stores.
	SlotsHost Placement = iota + 1
	// SlotsGPU: GPU memory, written by a copy engine.
	SlotsGPU
)

// GPURing is a ring the GPU consumes: the consumer word in host memory
// mapped into the GPU (GPU memory for NewPeerRing), the slots in host memory mapped into it
// (SlotsHost) or in GPU memory (SlotsGPU), and the results in host memory
// mapped into the GPU, or in GPU memory where resultsInGPU (the placement
// GPU-resident mode prefers: the GPU polls its own memory; only a copy
// engine or a peer writes them there, and the host cannot watch them).
// Its memory stays allocated and locked until Free, which must come after
// every kernel and copy that uses it has finished.
type GPURing struct {
	*Ring
	dev        *cuda.Device
	results    *cuda.MappedBuffer
	gpuResults *cuda.Buffer
	consumer   *cuda.MappedBuffer
	gpuCons    *cuda.Buffer // the consumer word in GPU memory (NewPeerRing)
	hostSlot   *cuda.MappedBuffer
	gpuSlot    *cuda.Buffer
	// SlotsDev, ResultsDev and ConsumerDev are the addresses kernels use.
	SlotsDev, ResultsDev, ConsumerDev uint64
}

// NewGPURing allocates a ring of nslots slots of size bytes. The context
// must be current.
func NewGPURing(g *cuda.Device, nslots, size int, where Placement, resultsInGPU bool) (*GPURing, error) {
	return newGPURing(g, nslots, size, where, resultsInGPU, nil)
}

// NewPeerRing allocates a ring a peer GPU writes as an FPGA does: its
// slots and its results in g's memory, which the peer's kernels reach by
// g's addresses once it has peer access to g
// (cuda.Device.EnablePeerAccess), and its consumer word in word's memory:
// g's, where the producer reads it across the link, or the producer's,
// where g's consumer writes it across the link as it would an FPGA's
// doorbell (then g needs peer access to word). The host reaches none of
// it: ConsumedIndex reads the consumer word by a copy.
func NewPeerRing(g, word *cuda.Device, nslots, size int) (*GPURing, error) {
	return newGPURing(g, nslots, size, SlotsGPU, true, word)
}

// newGPURing puts the consumer word in consumerOn's memory, or in host
// memory mapped into g where consumerOn is nil.
func newGPURing(g *cuda.Device, nslots, size int, where Placement, resultsInGPU bool, consumerOn *cuda.Device) (_ *GPURing, err error) {
	if nslots < 1 || size < 16 || size%16 != 0 {
		return nil, fmt.Errorf("%w: %d slots of %d bytes", ErrConfig, nslots, size)
	}
	gr := &GPURing{dev: g}
	defer func() {
		if err != nil {
			gr.Free()
		}
	}()
	var results []byte
	if resultsInGPU {
		if gr.gpuResults, err = g.Alloc(uint64(nslots * ResultSize)); err != nil {
			return nil, err
		}
		gr.ResultsDev = gr.gpuResults.Ptr
	} else {
		if gr.results, err = g.HostAllocMapped(uint64(nslots * ResultSize)); err != nil {
			return nil, err
		}
		results, gr.ResultsDev = gr.results.Bytes(), gr.results.DevPtr
	}
	var consumer []byte
	if consumerOn != nil {
		if gr.gpuCons, err = consumerOn.Alloc(uint64(ConsumerSize)); err != nil {
			return nil, err
		}
		gr.ConsumerDev = gr.gpuCons.Ptr
	} else {
		if gr.consumer, err = g.HostAllocMapped(uint64(ConsumerSize)); err != nil {
			return nil, err
		}
		consumer, gr.ConsumerDev = gr.consumer.Bytes(), gr.consumer.DevPtr
	}
	var slots []byte
	switch where {
	case SlotsHost:
		if gr.hostSlot, err = g.HostAllocMapped(uint64(nslots * size)); err != nil {
			return nil, err
		}
		slots, gr.SlotsDev = gr.hostSlot.Bytes(), gr.hostSlot.DevPtr
	case SlotsGPU:
		if gr.gpuSlot, err = g.Alloc(uint64(nslots * size)); err != nil {
			return nil, err
		}
		gr.SlotsDev = gr.gpuSlot.Ptr
	default:
		return nil, fmt.Errorf("%w: placement %d", ErrConfig, where)
	}
	if gr.Ring, err = NewRing(nslots, size, slots, results, consumer); err != nil {
		return nil, err
	}
	return gr, gr.Reset()
}

// Reset clears every result and the consumer index, with the context
// current; nothing may use the ring meanwhile, and no kernel may run (it
// may copy on the legacy default stream).
func (gr *GPURing) Reset() error {
	gr.Ring.Reset()
	if gr.gpuResults != nil {
		if err := gr.dev.CopyHtoD(gr.gpuResults.Ptr, make([]byte, gr.NSlots*ResultSize)); err != nil {
			return err
		}
	}
	if gr.gpuCons != nil {
		return gr.dev.CopyHtoD(gr.gpuCons.Ptr, make([]byte, ConsumerSize))
	}
	return nil
}

// ConsumedIndex reads the consumer index wherever it is, with a copy where
// it is GPU memory (NewPeerRing).
func (gr *GPURing) ConsumedIndex() (uint64, error) {
	if gr.gpuCons == nil {
		return gr.Consumed(), nil
	}
	b := make([]byte, 8)
	if err := gr.dev.CopyDtoH(b, gr.gpuCons.Ptr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// Statuses returns every slot's status word, with the context current.
func (gr *GPURing) Statuses() ([]uint32, error) {
	b := gr.Results
	if gr.gpuResults != nil {
		b = make([]byte, gr.NSlots*ResultSize)
		if err := gr.dev.CopyDtoH(b, gr.gpuResults.Ptr); err != nil {
			return nil, err
		}
	}
	out := make([]uint32, gr.NSlots)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[i*ResultSize:])
	}
	return out, nil
}

// Free releases the ring's memory, with the context current.
func (gr *GPURing) Free() error {
	var errs []error
	for _, m := range []*cuda.MappedBuffer{gr.results, gr.consumer, gr.hostSlot} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	for _, b := range []*cuda.Buffer{gr.gpuSlot, gr.gpuResults, gr.gpuCons} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	return errors.Join(errs...)
}

// CopyProducer writes with a copy engine, as the FPGA writes through
// PCIe: each fill's data from one of NSrc prepared patterns in pinned
// host memory (its sequence word stamped by the CPU first) into the slot,
// then the result word from pinned memory into the result, both on one
// stream, so the result lands after the data. A pattern is stamped again
// only once its previous fill is consumed: NSrc > NSlots, and a fill waits
// for credits.
type CopyProducer struct {
	r      *GPURing
	s      *cuda.Stream
	src    *cuda.HostBuffer
	result *cuda.HostBuffer
}

// NewCopyProducer prepares the patterns and a stream. The context must be
// current, on every call of the producer too.
func NewCopyProducer(g *cuda.Device, r *GPURing) (_ *CopyProducer, err error) {
	p := &CopyProducer{r: r}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.s, err = g.NewStream(); err != nil {
		return nil, err
	}
	if p.src, err = g.HostAlloc(r.NSrc * uint64(r.SlotSize)); err != nil {
		return nil, err
	}
	for s, b := range Patterns(r.NSrc, r.SlotSize) {
		copy(p.src.Bytes()[s*r.SlotSize:], b)
	}
	if p.result, err = g.HostAlloc(8); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(p.result.Bytes(), resultWord(uint32(r.SlotSize)))
	return p, nil
}

// Data implements Producer.
func (p *CopyProducer) Data(k uint64) error {
	off := (k % p.r.NSrc) * uint64(p.r.SlotSize)
	binary.LittleEndian.PutUint64(p.src.Bytes()[off:], k)
	dst := p.r.SlotsDev + (k%uint64(p.r.NSlots))*uint64(p.r.SlotSize)
	return p.s.CopyHtoD(dst, p.src, off, uint64(p.r.SlotSize))
}

// Result implements Producer.
func (p *CopyProducer) Result(k uint64) error {
	return p.s.CopyHtoD(p.r.ResultsDev+(k%uint64(p.r.NSlots))*uint64(ResultSize), p.result, 0, 8)
}

// Flush implements Producer.
func (p *CopyProducer) Flush() error { return p.s.Sync() }

// Close waits for the stream and frees the producer's memory.
func (p *CopyProducer) Close() error {
	var errs []error
	if p.s != nil {
		errs = append(errs, p.s.Sync(), p.s.Close())
	}
	for _, b := range []*cuda.HostBuffer{p.src, p.result} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	return errors.Join(errs...)
}

// Counters are what a consumer counted.
type Counters struct {
	Slots  uint64 `json:"slots"`
	Bytes  uint64 `json:"bytes"`
	Errors uint64 `json:"errors"`
	// FirstError is the first bad fill's k + 1 (0: none). Errors counts
	// bad fills, once for each part of one read by a worker of its own
	// (the resident consumer's chunks, the CPU-driven one's blocks).
	FirstError uint64 `json:"first_error"`
	// Published is how far the consumer published (resident only).
	Published uint64 `json:"published,omitempty"`
	// HeadPublished is how many fills their worker published itself,
	// every fill before them having been published when it was claimed
	// (the function consumer only); the publisher published the rest.
	HeadPublished uint64 `json:"head_published,omitempty"`
	// Frames, Gaps and Duplicates count FRM1 frames (Frames.Start):
	// frames checked, frames missing between fills, frames at or behind
	// the last one seen.
	Frames     uint64 `json:"frames,omitempty"`
	Gaps       uint64 `json:"gaps,omitempty"`
	Duplicates uint64 `json:"duplicates,omitempty"`
	// CPU is the consumer's host thread's CPU time (user + system) from
	// its start to its stop.
	CPU time.Duration `json:"cpu_ns"`
}

// RingConsumer is a running consumer of a ring.
type RingConsumer interface {
	// Stop ends the consumer once every fill produced is consumed (the
	// producer's run has drained) and returns its counters.
	Stop() (Counters, error)
}

func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// consumerThread runs body on a goroutine wired to its own thread with
// g's context current, measuring the thread's CPU time, until stop is
// closed; body returns the counters.
type consumerThread struct {
	stop chan struct{}
	once sync.Once
	done chan struct{}
	c    Counters
	err  error
}

// begin, if not nil, runs first on the thread: its failure is Start's.
func startThread(g *cuda.Device, begin func() error, body func(stop <-chan struct{}) (Counters, error)) (*consumerThread, error) {
	t := &consumerThread{stop: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(t.done)
		if err := g.Lock(); err != nil {
			started <- err
			return
		}
		defer g.Unlock()
		if begin != nil {
			if err := begin(); err != nil {
				started <- err
				return
			}
		}
		started <- nil
		cpu0 := threadCPU()
		t.c, t.err = body(t.stop)
		t.c.CPU = threadCPU() - cpu0
	}()
	if err := <-started; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

func (t *consumerThread) Stop() (Counters, error) {
	t.once.Do(func() { close(t.stop) })
	<-t.done
	return t.c, t.err
}

// Resident is the persistent consumer kernel's configuration.
type Resident struct {
	// Workers is the number of worker blocks (default 16, at most the
	// ring's slots); one more block publishes.
	Workers int
	// Delay holds each slot this many GPU clock cycles (a slow consumer,
	// for tests).
	Delay uint64
	// ChunkBytes is how much of a slot one worker reads (default 64 KiB):
	// a larger slot is shared by up to Workers workers at once, so that
	// its round trip is not one block's read of all of it.
	ChunkBytes int
}

// chunks is how many workers share a slot of size bytes.
func (cfg Resident) chunks(size, workers int) int {
	cb := cfg.ChunkBytes
	if cb <= 0 {
		cb = 64 << 10
	}
	return min(max(size/cb, 1), workers)
}

// StartResident launches resident_consume on r, on a non-blocking stream,
// from a host thread of its own that then sleeps until Stop: no CPU work
// per slot. The ring must be reset (GPURing.Reset). While it runs, what
// waits for every kernel on the device (cuMemFree, cuMemFreeHost,
// cuMemHostUnregister, module loads and unloads) waits for it; the
// consumer's own memory comes from k and goes back to it, and is freed
// by Close.
func (k *Kernels) StartResident(g *cuda.Device, r *GPURing, cfg Resident) (RingConsumer, error) {
	return k.start(g, consumeArgs{slots: r.SlotsDev, slotSize: r.SlotSize, results: r.ResultsDev, nslots: r.NSlots,
		consumer: r.ConsumerDev, nsrc: r.NSrc}, cfg)
}

// StreamRing is a driver stream's ring as its GPU-resident consumer sees
// it (uapi/gpufpga_resident.h): the slots and their results in the GPU's
// memory, where the FPGA writes them, and the consumer word in host
// memory mapped into the GPU, which the driver reads.
type StreamRing struct {
	Slots    uint64 // device address of slot 0
	SlotSize int    // bytes from one slot to the next
	NSlots   int
	Results  uint64 // device address of the results, zero before the stream starts
	Consumer uint64 // device address of the consumer word
	// Published reads the consumer word's count on the host.
	Published func() uint64
}

// waitPublished waits until published() reaches fills, the kernel ends
// (done) or ctx ends: ErrStalled for either.
func waitPublished(ctx context.Context, published func() uint64, done <-chan struct{}, fills uint64) error {
	if published() >= fills {
		return nil
	}
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for published() < fills {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %d of %d fills consumed: %w", ErrStalled, published(), fills, ctx.Err())
		case <-done:
			if published() < fills {
				return fmt.Errorf("%w: %d of %d fills consumed when the kernel ended", ErrStalled, published(), fills)
			}
		case <-tick.C:
		}
	}
	return nil
}

// consumeArgs are resident_consume's ring parameters.
type consumeArgs struct {
	slots, results, consumer uint64
	slotSize, nslots         int
	nsrc                     uint64 // the pattern's period
}

// start launches resident_consume, from a host thread of its own that then
// sleeps until Stop.
func (k *Kernels) start(g *cuda.Device, a consumeArgs, cfg Resident) (*residentRun, error) {
	w := cfg.Workers
	if w <= 0 {
		w = 16
	}
	w = min(w, a.nslots)
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	if w+1 > min(sms, maxBlocks) || w < 1 {
		// Every block must be resident at once.
		return nil, fmt.Errorf("%w: %d worker blocks and a publisher on %d multiprocessors", ErrConfig, w, sms)
	}
	// The memory the kernel runs on comes from the pool, zeroed on the
	// kernel's own stream: nothing here waits for another consumer's
	// kernel running on the GPU.
	m, err := k.pool.take(g, memSize{state: uint64(64 + 4*8*a.nslots)})
	if err != nil {
		return nil, err
	}
	ctl, state, s := m.ctl, m.state, m.s
	cleanup := func() { k.pool.give(m) }
	clear(ctl.Bytes())
	if err := s.MemsetD8(state.Ptr, 0, state.Size); err != nil {
		cleanup()
		return nil, err
	}
	chunks := cfg.chunks(a.slotSize, w)
	stop := (*uint32)(ctl.Ptr(0))
	launch := func() error {
		return k.consume.Launch(s, w+1, threads, 0, a.slots, uint64(a.slotSize), a.results, uint64(a.nslots),
			a.consumer, ctl.DevPtr, state.Ptr, ctl.DevPtr+64, a.nsrc, cfg.Delay, uint64(chunks))
	}
	t, err := startThread(g, launch, func(quit <-chan struct{}) (Counters, error) {
		var c Counters
		// The kernel leaves only when told: one that ends first failed.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-quit:
				break wait
			case <-tick.C:
				// Stop stores the stop word before it tells this
				// thread: a kernel that ended then was told to.
				if idle, err := s.Idle(); (idle || err != nil) && (err != nil || atomic.LoadUint32(stop) == 0) {
					return c, fmt.Errorf("%w: resident_consume ended by itself: %v", ErrStalled, err)
				}
			}
		}
		atomic.StoreUint32(stop, 1)
		if err := s.Sync(); err != nil {
			return c, fmt.Errorf("resident_consume: %w", err)
		}
		cs := ctl.Bytes()[64:]
		c.Published = binary.LittleEndian.Uint64(cs)
		for b := 1; b <= w; b++ {
			rec := cs[b*countersSize:]
			c.Slots += binary.LittleEndian.Uint64(rec)
			c.Bytes += binary.LittleEndian.Uint64(rec[8:])
			c.Errors += binary.LittleEndian.Uint64(rec[16:])
			if fe := binary.LittleEndian.Uint64(rec[24:]); fe != 0 && (c.FirstError == 0 || fe < c.FirstError) {
				c.FirstError = fe
			}
		}
		return c, nil
	})
	if err != nil {
		cleanup()
		return nil, err
	}
	return &residentRun{t: t, ctl: ctl, cleanup: cleanup}, nil
}

type residentRun struct {
	t       *consumerThread
	ctl     *cuda.MappedBuffer // the stop word, then the counters
	cleanup func()
	mu      sync.Mutex // freed, and cleanup's run
	freed   bool
}

// halt stores the kernel's stop word from the caller's goroutine, not
// the consumer's thread: that thread may be held in a CUDA call
// (cuStreamQuery) behind another thread's cuMemFree, which waits for
// the kernel, and the kernel would then never be told to leave.
func (r *residentRun) halt() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.freed {
		atomic.StoreUint32((*uint32)(r.ctl.Ptr(0)), 1)
	}
}

func (r *residentRun) Stop() (Counters, error) {
	r.halt()
	c, err := r.t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.freed {
		r.cleanup()
		r.freed = true
	}
	return c, err
}

// StartCPUDriven starts the CPU-driven consumer: a host thread that spins
// on each slot's result in order, launches check_slot for it, waits on an
// event for the kernel, clears the result and publishes the consumer
// index: the per-slot CPU chain of today's stream, without its interrupt
// and system calls (so a bound it cannot beat).
func (k *Kernels) StartCPUDriven(g *cuda.Device, r *GPURing) (RingConsumer, error) {
	if r.Results == nil {
		return nil, fmt.Errorf("%w: the CPU-driven consumer needs the results in host memory", ErrConfig)
	}
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	grid := min(max(r.SlotSize/(threads*16*4), 1), sms)
	var quit atomic.Bool
	t, err := startThread(g, nil, func(stopc <-chan struct{}) (Counters, error) {
		var c Counters
		s, err := g.NewStream()
		if err != nil {
			return c, err
		}
		defer s.Close()
		ev, err := g.NewSyncEvent()
		if err != nil {
			return c, err
		}
		defer ev.Close()
		cnt, err := g.Alloc(countersSize)
		if err != nil {
			return c, err
		}
		defer cnt.Free()
		if err := g.CopyHtoD(cnt.Ptr, make([]byte, countersSize)); err != nil {
			return c, err
		}
		go func() { <-stopc; quit.Store(true) }()
		var loopErr error
	fills:
		for n := uint64(0); ; n++ {
			i := int(n % uint64(r.NSlots))
			var length uint32
			for spins := 0; ; spins++ {
				st, l := r.Status(i)
				if Ready(st) {
					length = l
					break
				}
				if spins&255 == 0 && quit.Load() {
					break fills
				}
			}
			dst := r.SlotsDev + uint64(i)*uint64(r.SlotSize)
			if loopErr = k.checkSlot.Launch(s, grid, threads, 0, dst, uint64(length), n, r.NSrc, uint64(r.SlotSize), cnt.Ptr); loopErr != nil {
				break
			}
			if loopErr = ev.Record(s); loopErr != nil {
				break
			}
			if loopErr = ev.Sync(); loopErr != nil {
				break
			}
			r.Release(i)
			r.Publish(n + 1)
		}
		if err := s.Sync(); err != nil {
			return c, errors.Join(loopErr, err)
		}
		b := make([]byte, countersSize)
		if err := g.CopyDtoH(b, cnt.Ptr); err != nil {
			return c, errors.Join(loopErr, err)
		}
		c.Slots, c.Bytes = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		c.Errors, c.FirstError = binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
		return c, loopErr
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// PingPong measures n bare round trips: the CPU stores i into pinned host
// memory mapped into the GPU, a polling kernel (one thread) sees it and
// stores i back into another line, which the CPU polls. The context must
// be current. An answer that takes over 5 s, or ctx's end, stops it.
func (k *Kernels) PingPong(ctx context.Context, g *cuda.Device, n int) ([]time.Duration, error) {
	m, err := g.HostAllocMapped(128)
	if err != nil {
		return nil, err
	}
	defer m.Free()
	s, err := g.NewStream()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ping, pong := (*uint64)(m.Ptr(0)), (*uint64)(m.Ptr(64))
	if err := k.pingpong.Launch(s, 1, 32, 0, m.DevPtr, m.DevPtr+64, uint64(n)); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out := make([]time.Duration, 0, n)
	for i := uint64(1); i <= uint64(n); i++ {
		t0 := time.Now()
		atomic.StoreUint64(ping, i)
		for spins := 0; atomic.LoadUint64(pong) < i; spins++ {
			if spins&(1<<16-1) != 0 {
				continue
			}
			var err error
			if time.Since(t0) > 5*time.Second {
				err = fmt.Errorf("%w: no answer to ping %d", ErrStalled, i)
			} else if ctx.Err() != nil {
				err = ctx.Err()
			}
			if err != nil {
				atomic.StoreUint64(ping, uint64(n)) // let the kernel finish
				return out, errors.Join(err, s.Sync())
			}
		}
		out = append(out, time.Since(t0))
	}
	return out, s.Sync()
}

// LaunchSync measures n launches of an empty kernel, each followed by a
// stream synchronize. The context must be current.
func (k *Kernels) LaunchSync(g *cuda.Device, n int) ([]time.Duration, error) {
	s, err := g.NewStream()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := k.nullKern.Launch(s, 1, 32, 0); err != nil {
			return out, err
		}
		if err := s.Sync(); err != nil {
			return out, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
