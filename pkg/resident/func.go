//go:build linux

package resident

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// FuncPTX is the persistent consumer that calls a user's function on
// every fill, as `make ptx` generated it from FuncSource: the header's
// kernel (gpufpga_resident_cuda.cuh), its function left for the linker.
//
//go:embed func.ptx
var FuncPTX []byte

// FuncSource is FuncPTX's CUDA C source, which says what the function
// receives.
//
//go:embed func.cu
var FuncSource []byte

// frm1PTX is the library of device functions LinkFunc links beside every
// function, which a user's function may call (frm1.cu):
//
//	extern "C" __device__ long long gpufpga_frm1_check(const unsigned char *slot,
//		unsigned long long len, unsigned long long frame_size,
//		unsigned long long *first_seq);
//
//go:embed frm1.ptx
var frm1PTX []byte

// FuncName is the function a user's PTX defines:
//
//	extern "C" __device__ int gpufpga_process(const unsigned char *slot,
//		unsigned long long len, unsigned long long k, void *state, void *out);
//
// Every thread of a worker block (256 threads) calls it once for fill k,
// whose len bytes are at slot, after the fill's result and before the
// fill is released: it may read the slot and nothing of the ring else,
// and returns non-zero for a bad fill (counted in Counters.Errors). A
// fill longer than its slot counts as bad: the function is not called,
// and its record reads as zeros. A function's own __shared__ variables,
// compiled by clang, are best volatile: LLVM may move their loads across
// __syncthreads(). state is FuncConfig.State's copy in GPU memory, out
// fill k's record of FuncConfig.OutSize bytes, which the host reads with
// FuncConsumer.Record once the fill is published. The function may call
// the library's gpufpga_frm1_check, which checks a fill's FRM1 frames
// (frm1.cu).
const FuncName = "gpufpga_process"

var definesFunc = regexp.MustCompile(`\.visible\s+\.func\s*(\([^)]*\))?\s*` + FuncName + `\s*\(`)

// Func is the persistent consumer linked with a user's function, loaded
// once: start a consumer for each ring with it, and close it once every
// one has stopped.
type Func struct {
	mod  *cuda.Module
	fn   *cuda.Function
	pool memPool
}

// LinkFunc links the user's PTX, which must define FuncName, into the
// consumer with the driver's JIT linker (no CUDA toolkit), beside the
// library's device functions, and loads it.
// Loading waits for every kernel running on the device, a persistent
// consumer's too: link every function before the first consumer starts.
// name names the PTX in errors.
func LinkFunc(g *cuda.Device, name string, ptx []byte) (*Func, error) {
	if !definesFunc.Match(ptx) {
		return nil, fmt.Errorf("%w: %s defines no extern \"C\" __device__ %s", ErrConfig, name, FuncName)
	}
	mod, err := g.Link(cuda.PTXInput{Name: "func.ptx", PTX: FuncPTX}, cuda.PTXInput{Name: "frm1.ptx", PTX: frm1PTX},
		cuda.PTXInput{Name: name, PTX: ptx})
	if err != nil {
		return nil, fmt.Errorf("resident: linking %s: %w", name, err)
	}
	fn, err := mod.Function("resident_func")
	if err != nil {
		mod.Close()
		return nil, err
	}
	return &Func{mod: mod, fn: fn}, nil
}

// Close frees the consumers' memory and unloads the module; both wait for
// every kernel running on the device.
func (f *Func) Close() error { return errors.Join(f.pool.free(), f.mod.Close()) }

// FuncConfig is a function consumer's configuration.
type FuncConfig struct {
	// Workers is the number of worker blocks (default 16, at most the
	// ring's slots); one more block publishes.
	Workers int
	// State is copied into GPU memory of the consumer's own before it
	// starts, its address passed to every call as state (0 if empty),
	// and copied back into State, from the consumer's thread, once the
	// kernel has stopped: what the function accumulated there. It is
	// left as it was when the kernel failed; touch it only once Stop has
	// returned. The memory is kept for later consumers of the same Func:
	// nothing is freed, so nothing waits for a running kernel.
	State []byte
	// OutSize and OutDepth: each fill has a record of OutSize bytes (a
	// multiple of 8) in host memory, of which OutDepth are kept: a worker
	// calls the function for fill k only once the host has read fill
	// k - OutDepth's (FuncConsumer.Advance). 0: no records.
	OutSize, OutDepth int
	// OnRecord, if not nil, receives every fill's record in fill order
	// once the fill is published, on a goroutine of the consumer's,
	// which then lets the consumer reuse its place (Advance): records
	// reach the host with no work of the caller's. It must not keep rec.
	OnRecord func(k uint64, rec []byte)
}

// FuncConsumer is a running function consumer.
type FuncConsumer struct {
	run     *residentRun
	m       *runMem
	cfg     FuncConfig
	publish func() uint64
	// The record reader, with OnRecord.
	readQuit, readDone chan struct{}
}

// Start launches the consumer on a driver stream's ring, on a
// non-blocking stream of its own, from a host thread that then sleeps
// until Stop. Start it before the stream, with
// the results zeroed. It allocates from the memory earlier consumers of
// f ran on, and loads nothing: it waits for no other kernel.
func (f *Func) Start(g *cuda.Device, r StreamRing, cfg FuncConfig) (*FuncConsumer, error) {
	switch {
	case r.NSlots < 1 || r.Published == nil:
		return nil, fmt.Errorf("%w: %d slots", ErrConfig, r.NSlots)
	case cfg.OutSize < 0 || cfg.OutDepth < 0 || cfg.OutSize%8 != 0 || (cfg.OutSize == 0) != (cfg.OutDepth == 0):
		return nil, fmt.Errorf("%w: %d records of %d bytes (both 0, or a depth and a multiple of 8)", ErrConfig, cfg.OutDepth, cfg.OutSize)
	}
	w := cfg.Workers
	if w <= 0 {
		w = 16
	}
	w = min(w, r.NSlots)
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	if w+1 > min(sms, maxBlocks) {
		return nil, fmt.Errorf("%w: %d worker blocks and a publisher on %d multiprocessors", ErrConfig, w, sms)
	}
	m, err := f.pool.take(g, memSize{state: uint64(8 * (r.NSlots + 1)), out: uint64(cfg.OutSize * cfg.OutDepth),
		user: uint64(len(cfg.State))})
	if err != nil {
		return nil, err
	}
	var state uint64
	if len(cfg.State) > 0 {
		// Staged in page-locked memory and copied on the consumer's
		// own stream, ahead of its launch there: a copy from Go
		// memory may still be under way when its call returns.
		copy(m.stage.Bytes(), cfg.State)
		if err := m.s.CopyHtoD(m.user.Ptr, m.stage, 0, uint64(len(cfg.State))); err != nil {
			f.pool.give(m)
			return nil, err
		}
		state = m.user.Ptr
	}
	clear(m.ctl.Bytes())
	var out uint64
	if m.out != nil {
		clear(m.out.Bytes())
		out = m.out.DevPtr
	}
	if err := m.s.MemsetD8(m.state.Ptr, 0, m.state.Size); err != nil {
		f.pool.give(m)
		return nil, err
	}
	launch := func() error {
		return f.fn.Launch(m.s, w+1, threads, 0, r.Slots, uint64(r.SlotSize), r.Results, uint64(r.NSlots), r.Consumer,
			m.state.Ptr, m.ctl.DevPtr, state, out, uint64(cfg.OutSize), uint64(cfg.OutDepth))
	}
	stop := (*uint32)(m.ctl.Ptr(0))
	t, err := startThread(g, launch, func(quit <-chan struct{}) (Counters, error) {
		var c Counters
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
				if idle, err := m.s.Idle(); (idle || err != nil) && (err != nil || atomic.LoadUint32(stop) == 0) {
					return c, fmt.Errorf("%w: resident_func ended by itself: %v", ErrStalled, err)
				}
			}
		}
		atomic.StoreUint32(stop, 1)
		if err := m.s.Sync(); err != nil {
			return c, fmt.Errorf("resident_func: %w", err)
		}
		if n := uint64(len(cfg.State)); n > 0 {
			if err := m.s.CopyDtoH(m.stage, 0, m.user.Ptr, n); err != nil {
				return c, err
			}
			if err := m.s.Sync(); err != nil {
				return c, err
			}
			copy(cfg.State, m.stage.Bytes())
		}
		cs := m.ctl.Bytes()[64:]
		c.Published = binary.LittleEndian.Uint64(cs)
		for b := 1; b <= w; b++ {
			rec := cs[b*countersSize:]
			c.Slots += binary.LittleEndian.Uint64(rec)
			c.Bytes += binary.LittleEndian.Uint64(rec[8:])
			c.Errors += binary.LittleEndian.Uint64(rec[16:])
			if fe := binary.LittleEndian.Uint64(rec[24:]); fe != 0 && (c.FirstError == 0 || fe < c.FirstError) {
				c.FirstError = fe
			}
			c.HeadPublished += binary.LittleEndian.Uint64(rec[32:])
		}
		return c, nil
	})
	if err != nil {
		f.pool.give(m)
		return nil, err
	}
	c := &FuncConsumer{run: &residentRun{t: t, ctl: m.ctl, cleanup: func() { f.pool.give(m) }}, m: m, cfg: cfg, publish: r.Published}
	if cfg.OnRecord != nil && cfg.OutDepth > 0 {
		c.readQuit, c.readDone = make(chan struct{}), make(chan struct{})
		go c.readRecords()
	}
	return c, nil
}

// readRecords hands each published fill's record to OnRecord, in order,
// until told to quit, and then the rest published by then.
func (c *FuncConsumer) readRecords() {
	defer close(c.readDone)
	out := c.m.out.Bytes()
	var next uint64
	idle := 0
	for {
		quit := false
		select {
		case <-c.readQuit:
			quit = true
		default:
		}
		pub := c.publish()
		if next < pub {
			for ; next < pub; next++ {
				off := int(next%uint64(c.cfg.OutDepth)) * c.cfg.OutSize
				c.cfg.OnRecord(next, out[off:off+c.cfg.OutSize])
			}
			// Their places are free for the fills OutDepth on: one
			// store a batch, which the workers read only when they
			// run out of places.
			atomic.StoreUint64((*uint64)(c.m.ctl.Ptr(8)), next)
			idle = 0
		}
		if quit {
			return
		}
		// Spin a little, then sleep: records come as fast as fills.
		if idle++; idle > 64 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// Done is closed once the kernel has ended: stopped, or failed (Stop
// says why).
func (c *FuncConsumer) Done() <-chan struct{} { return c.run.t.done }

// Published is how many fills the consumer has published.
func (c *FuncConsumer) Published() uint64 { return c.publish() }

// Bytes returns the bytes of the fills the workers have taken, as of each
// worker's last 16 fills (published or about to be); 0 once stopped.
func (c *FuncConsumer) Bytes() uint64 {
	c.run.mu.Lock()
	defer c.run.mu.Unlock()
	if c.run.freed {
		return 0
	}
	var n uint64
	for b := 1; b < maxBlocks; b++ {
		n += atomic.LoadUint64((*uint64)(c.m.ctl.Ptr(uint64(64 + b*countersSize + 8))))
	}
	return n
}

// Record returns fill k's record, which the host may read once
// Published() > k and until it calls Advance past k; nil without
// records or once stopped.
func (c *FuncConsumer) Record(k uint64) []byte {
	c.run.mu.Lock()
	defer c.run.mu.Unlock()
	if c.run.freed || c.cfg.OutDepth == 0 {
		return nil
	}
	off := int(k%uint64(c.cfg.OutDepth)) * c.cfg.OutSize
	return c.m.out.Bytes()[off : off+c.cfg.OutSize]
}

// Advance tells the consumer that the records of the fills below n are
// read: their places may take later fills'. Without OnRecord only.
func (c *FuncConsumer) Advance(n uint64) {
	c.run.mu.Lock()
	defer c.run.mu.Unlock()
	if !c.run.freed {
		atomic.StoreUint64((*uint64)(c.m.ctl.Ptr(8)), n)
	}
}

// Stop ends the consumer once it has published fills (a stream's
// p2p.Stream.Fills, once it has ended), or when ctx ends first
// (ErrStalled), hands the records published by then to OnRecord, and
// returns its counters. Its memory goes back to f for the next consumer.
// It stores the kernel's stop word itself, so the kernel leaves even
// while another thread's cuMemFree waits for it.
func (c *FuncConsumer) Stop(ctx context.Context, fills uint64) (Counters, error) {
	waitErr := waitPublished(ctx, c.publish, c.Done(), fills)
	c.run.halt()
	cnt, err := c.run.t.Stop()
	if c.readQuit != nil {
		c.run.mu.Lock()
		select {
		case <-c.readQuit:
		default:
			close(c.readQuit)
		}
		c.run.mu.Unlock()
		<-c.readDone
	}
	c.run.mu.Lock()
	defer c.run.mu.Unlock()
	if !c.run.freed {
		c.run.cleanup()
		c.run.freed = true
	}
	return cnt, errors.Join(waitErr, err)
}
