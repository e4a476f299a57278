//go:build linux

package cudamem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/resident"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

var (
	_ stream.ResidentGPU   = (*GPU)(nil)
	_ stream.ResidentWords = (*GPU)(nil)
)

// residents is what a GPU keeps for its resident consumers. A persistent
// kernel holds up every CUDA call that waits for the whole device
// (cuMemFree, cuMemFreeHost, cuMemHostUnregister, cuModuleLoadData,
// cuModuleUnload; TestBesideAPersistentKernel in package cuda), so the
// kernels are loaded once per GPU (and function), the consumers' memory
// and words are kept for the next consumer, and what the GPU frees while
// a consumer runs (a buffer, a checker, a registration) is freed once the
// last one has stopped, or at Close.
type residents struct {
	mu       sync.Mutex
	frames   *resident.Frames
	funcs    map[[32]byte]*resident.Func
	words    []*word // idle
	allWords []*word
	running  int
	deferred []func() error
}

// word is a page mapped into the GPU for a consumer word.
type word struct {
	page []byte
	m    *cuda.MappedBuffer
}

// later runs free now if no consumer runs, else once the last has
// stopped (or at Close).
func (c *GPU) later(free func() error) error {
	c.res.mu.Lock()
	if c.res.running > 0 {
		c.res.deferred = append(c.res.deferred, free)
		c.res.mu.Unlock()
		return nil
	}
	c.res.mu.Unlock()
	return free()
}

// consumerStopped counts a consumer out and, after the last, runs what
// was deferred.
func (c *GPU) consumerStopped() error {
	c.res.mu.Lock()
	defer c.res.mu.Unlock()
	c.res.running--
	if c.res.running > 0 {
		return nil
	}
	return c.runDeferred()
}

// runDeferred runs the deferred frees; c.res.mu is held.
func (c *GPU) runDeferred() error {
	var errs []error
	for _, f := range c.res.deferred {
		errs = append(errs, f())
	}
	c.res.deferred = nil
	return errors.Join(errs...)
}

// closeResidents frees what the consumers kept: none may run.
func (c *GPU) closeResidents() error {
	c.res.mu.Lock()
	defer c.res.mu.Unlock()
	errs := []error{c.runDeferred()}
	for _, w := range c.res.allWords {
		errs = append(errs, w.m.Free(), unix.Munmap(w.page))
	}
	c.res.words, c.res.allWords = nil, nil
	if c.res.frames != nil {
		errs = append(errs, c.res.frames.Close())
		c.res.frames = nil
	}
	for _, f := range c.res.funcs {
		errs = append(errs, f.Close())
	}
	c.res.funcs = nil
	return errors.Join(errs...)
}

// ResidentWord implements stream.ResidentWords: a page of host memory
// mapped into the GPU, kept mapped until Close and reused by the next
// session once release is called.
func (c *GPU) ResidentWord() ([]byte, func(), error) {
	c.res.mu.Lock()
	defer c.res.mu.Unlock()
	var w *word
	if n := len(c.res.words); n > 0 {
		w, c.res.words = c.res.words[n-1], c.res.words[:n-1]
	} else {
		page, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, nil, err
		}
		m, err := c.dev.HostRegisterMapped(page)
		if err != nil {
			unix.Munmap(page)
			return nil, nil, err
		}
		w = &word{page: page, m: m}
		c.res.allWords = append(c.res.allWords, w)
	}
	clear(w.page)
	var once sync.Once
	return w.page, func() {
		once.Do(func() {
			c.res.mu.Lock()
			c.res.words = append(c.res.words, w)
			c.res.mu.Unlock()
		})
	}, nil
}

// mappedWord returns the device address of the consumer word b: a
// ResidentWord's, or b registered now, with the function that undoes it.
// c.res.mu is held.
func (c *GPU) mappedWord(b []byte) (uint64, func() error, error) {
	p := uintptr(unsafe.Pointer(&b[0]))
	for _, w := range c.res.allWords {
		base := uintptr(unsafe.Pointer(&w.page[0]))
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(w.page)) {
			return w.m.DevPtr + uint64(p-base), func() error { return nil }, nil
		}
	}
	m, err := c.dev.HostRegisterMapped(b)
	if err != nil {
		return 0, nil, err
	}
	return m.DevPtr, m.Free, nil
}

// linkFrames returns the frame checker, linked on first use. c.res.mu
// is held.
func (c *GPU) linkFrames() (*resident.Frames, error) {
	if c.res.frames == nil {
		fr, err := resident.LinkFrames(c.dev)
		if err != nil {
			return nil, err
		}
		c.res.frames = fr
	}
	return c.res.frames, nil
}

// LinkResidentFunc links fn into the resident consumer, once per GPU and
// function: StartConsumer links a session's function on its first use,
// which waits for every kernel running on the GPU; linking every
// function before the first consumer starts waits for none.
func (c *GPU) LinkResidentFunc(fn *stream.ResidentFunc) error {
	c.res.mu.Lock()
	defer c.res.mu.Unlock()
	_, err := c.linkFunc(fn)
	return err
}

// linkFunc: c.res.mu is held.
func (c *GPU) linkFunc(fn *stream.ResidentFunc) (*resident.Func, error) {
	key := sha256.Sum256(fn.PTX)
	if f := c.res.funcs[key]; f != nil {
		return f, nil
	}
	f, err := resident.LinkFunc(c.dev, fn.Name, fn.PTX)
	if err != nil {
		return nil, err
	}
	if c.res.funcs == nil {
		c.res.funcs = map[[32]byte]*resident.Func{}
	}
	c.res.funcs[key] = f
	return f, nil
}

// StartConsumer implements stream.ResidentGPU with package resident's
// persistent kernel, on a non-blocking stream of its own: checking the
// FPGA's frames word by word where they land (stream.CheckGPU,
// fixed-size frames), or running r.Func on every fill. It refuses a GPU
// that does not promise to show its own kernels a peer's writes in order
// (GPUDirect RDMA writes ordering below owner): its kernel could read a
// result before the slot's data.
//
// Several consumers run on one GPU at once, each on its ring. The first
// consumer (or the first with a function) loads its kernel, which waits
// for every kernel already running on the GPU; later ones load nothing,
// and allocate and free nothing that waits for a running kernel.
func (c *GPU) StartConsumer(r stream.ResidentRing) (stream.ResidentConsumer, error) {
	if r.Func == nil && (r.Check != stream.CheckGPU || r.FrameSize <= 0) {
		return nil, fmt.Errorf("%w: a resident consumer on a CUDA GPU checks frames there (check %v with a frame size) or runs a function, not check %v",
			stream.ErrConfig, stream.CheckGPU, r.Check)
	}
	if len(r.Consumer) < resident.ConsumerSize || uintptr(unsafe.Pointer(&r.Consumer[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: consumer word of %d bytes", stream.ErrConfig, len(r.Consumer))
	}
	ord, _, err := c.dev.RDMAOrdering()
	if err != nil {
		return nil, err
	}
	if ord < cuda.RDMAOrderingOwner {
		return nil, fmt.Errorf("%w: the GPU's GPUDirect RDMA writes ordering is %v: its kernels may see a slot's result before its data (p2pctl doctor: gpu.ordering)",
			stream.ErrUnsupported, ord)
	}
	rc := &residentConsumer{gpu: c, word: (*uint64)(unsafe.Pointer(&r.Consumer[0])), frameSize: uint64(r.FrameSize)}
	c.res.mu.Lock()
	defer c.res.mu.Unlock()
	var fr *resident.Frames
	var f *resident.Func
	if r.Func != nil {
		f, err = c.linkFunc(r.Func)
	} else {
		fr, err = c.linkFrames()
	}
	if err != nil {
		return nil, err
	}
	// A status left from an earlier stream would read as a fill: zeroed
	// on a copy stream, which a running consumer's does not hold up.
	s := c.streams[0]
	if err := s.MemsetD8(r.Results.Addr(), 0, uint64(r.Slots*resident.ResultSize)); err != nil {
		return nil, err
	}
	if err := s.Sync(); err != nil {
		return nil, err
	}
	dev, unmap, err := c.mappedWord(r.Consumer)
	if err != nil {
		return nil, err
	}
	rc.unmap = unmap
	ring := resident.StreamRing{Slots: r.Ring.Addr(), SlotSize: int(r.SlotSize), NSlots: r.Slots, Results: r.Results.Addr(),
		Consumer: dev, Published: rc.published}
	if f != nil {
		// A copy: the consumer writes it back when it stops, and a
		// function may serve several sessions at once.
		fc := resident.FuncConfig{State: bytes.Clone(r.Func.State), OutSize: r.Func.OutSize, OutDepth: r.Func.OutDepth,
			OnRecord: r.Func.OnRecord}
		fcons, err := f.Start(c.dev, ring, fc)
		if err != nil {
			rc.release()
			return nil, err
		}
		rc.stop, rc.done, rc.bytes, rc.isFunc = fcons.Stop, fcons.Done(), fcons.Bytes, true
	} else {
		fcons, err := fr.Start(c.dev, ring, 0, r.FrameSize)
		if err != nil {
			rc.release()
			return nil, err
		}
		rc.stop, rc.done, rc.bytes = fcons.Stop, fcons.Done(), fcons.Bytes
	}
	c.res.running++
	return rc, nil
}

// residentConsumer is a persistent consumer running on a driver stream's
// ring.
type residentConsumer struct {
	gpu       *GPU
	stop      func(context.Context, uint64) (resident.Counters, error)
	done      <-chan struct{}
	bytes     func() uint64
	unmap     func() error // the word's registration, if its own
	isFunc    bool         // a function runs, not the frame check
	word      *uint64
	frameSize uint64

	once  sync.Once
	mu    sync.Mutex // final and done
	final resident.Counters
	ended bool // stopped: final holds the kernel's counts
	err   error
}

func (rc *residentConsumer) published() uint64 { return atomic.LoadUint64(rc.word) }

// Stats reports the fills and bytes consumed while the kernel runs,
// which writes its other counts back only when it stops. CRCFailures
// counts the fills whose frames
// failed their check; Bad, the fills a function found bad.
func (rc *residentConsumer) Stats() stream.ConsumerStats {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.ended {
		return stream.ConsumerStats{Consumed: rc.published(), Bytes: rc.bytes()}
	}
	c := rc.final
	st := stream.ConsumerStats{Consumed: c.Published, Bytes: c.Bytes}
	if rc.isFunc {
		st.Bad = c.Errors
	} else {
		st.Frames = frame.Stats{Frames: c.Frames, Bytes: c.Frames * rc.frameSize, Gaps: c.Gaps, Duplicates: c.Duplicates, CRCFailures: c.Errors}
	}
	return st
}

// Done is closed once the kernel has ended: stopped, or failed.
func (rc *residentConsumer) Done() <-chan struct{} { return rc.done }

// Stop stops the kernel where it is: it leaves once every fill it has
// seen is published. What the consumer used is freed once no consumer
// runs on the GPU.
func (rc *residentConsumer) Stop() error {
	rc.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		final, err := rc.stop(ctx, 0)
		rc.gpu.res.mu.Lock()
		err = errors.Join(err, rc.release())
		rc.gpu.res.mu.Unlock()
		err = errors.Join(err, rc.gpu.consumerStopped())
		rc.mu.Lock()
		rc.final, rc.err, rc.ended = final, err, true
		rc.mu.Unlock()
	})
	return rc.err
}

// release frees, or defers, the word's registration: c.res.mu is held.
func (rc *residentConsumer) release() error {
	if rc.unmap != nil {
		rc.gpu.res.deferred = append(rc.gpu.res.deferred, rc.unmap)
	}
	if rc.gpu.res.running == 0 {
		return rc.gpu.runDeferred()
	}
	return nil
}
