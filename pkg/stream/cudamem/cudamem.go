//go:build linux

// Package cudamem is GPU memory from the CUDA driver for package stream:
// the ring's device memory, compat mode's asynchronous copies into it, and
// frame checking there with package gpucheck's kernel. It lives apart from
// stream so that programs which stream into other memory link neither the
// CUDA loader nor the checker.
package cudamem

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/gpucheck"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// GPU is a CUDA device's memory as a stream.GPU. Compat mode's copies go
// round robin over a few CUDA streams, so consecutive slots copy
// concurrently (double or triple buffering) while the FPGA fills the next.
type GPU struct {
	dev     *cuda.Device
	owned   bool // opened by Open: Close releases it
	streams []*cuda.Stream
	mu      sync.Mutex
	next    int
	events  []*cuda.Event // idle completion events
	// host is the memory RegisterHost page-locked: the only memory
	// CopyIn copies from, since the copy engines read it after CopyIn
	// returns.
	host   []*cuda.HostBuffer
	closed bool // under mu: Close ran
	// checkers are idle frame checkers, kept for the next session of
	// their frame size: loading one's kernel waits for a running
	// resident consumer, freeing its memory too.
	checkers []*checker
	res      residents
}

var (
	_ stream.GPU         = (*GPU)(nil)
	_ stream.GPUChecking = (*GPU)(nil)
	_ stream.DmabufGPU   = (*GPU)(nil)
)

// New returns g's memory with copies spread over copyStreams streams (at
// least one; three keeps a copy engine busy).
func New(g *cuda.Device, copyStreams int) (*GPU, error) {
	c := &GPU{dev: g}
	if err := g.Lock(); err != nil {
		return nil, err
	}
	defer g.Unlock()
	for range max(copyStreams, 1) {
		s, err := g.NewStream()
		if err != nil {
			// The context is current already: no Close, which would lock again.
			for _, s := range c.streams {
				s.Close()
			}
			return nil, err
		}
		c.streams = append(c.streams, s)
	}
	return c, nil
}

// CopyStreams is how many CUDA streams Open's copies go round: with 64 MiB
// slots, two left the copy engine idle between slots on the H200 (compat
// path 0.908 and 0.919 of the copy peak, medians of 5), four brought it to
// 0.934 and 0.957, against 0.971 for copies beside the source alone
// (gpubench, results/2026-11-27-compat-sweep-h200/).
const CopyStreams = 4

// Open loads the CUDA driver and returns GPU ordinal's memory with
// CopyStreams copy streams; cuda.ErrNoDriver where there is no driver.
func Open(ordinal int) (*GPU, error) {
	g, err := cuda.OpenDevice(ordinal)
	if err != nil {
		return nil, err
	}
	c, err := New(g, CopyStreams)
	if err != nil {
		g.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}

// Device returns the CUDA device.
func (c *GPU) Device() *cuda.Device { return c.dev }

// Close frees what resident consumers and frame checkers kept, destroys
// the copy streams and events, and releases the device if Open opened it.
// No resident consumer may run: the frees would wait for it. A second
// Close does nothing: after the first, failed or not, nothing of the GPU
// is left to release.
func (c *GPU) Close() error {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if closed {
		return nil
	}
	if err := c.dev.Lock(); err != nil {
		return err
	}
	defer c.dev.Unlock()
	errs := []error{c.closeResidents()}
	for _, k := range c.checkers {
		errs = append(errs, k.s.Close(), k.chk.Close())
	}
	c.checkers = nil
	for _, s := range c.streams {
		errs = append(errs, s.Close())
	}
	for _, e := range c.events {
		errs = append(errs, e.Close())
	}
	if c.owned {
		errs = append(errs, c.dev.Close())
	}
	return errors.Join(errs...)
}

// DmabufSupported implements stream.DmabufGPU: the device's
// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED.
func (c *GPU) DmabufSupported() (bool, error) { return c.dev.DmabufSupported() }

// Alloc implements stream.GPU: cuMemAlloc rounded to 64 KiB, SYNC_MEMOPS
// set.
func (c *GPU) Alloc(size uint64) (stream.GPUBuffer, error) {
	if err := c.dev.Lock(); err != nil {
		return nil, err
	}
	defer c.dev.Unlock()
	b, err := c.dev.Alloc(size)
	if err != nil {
		return nil, err
	}
	return &buffer{c: c, b: b}, nil
}

// RegisterHost implements stream.GPU: cuMemHostRegister, so copies from
// the ring run on the copy engines without staging.
func (c *GPU) RegisterHost(b []byte) (func() error, error) {
	if err := c.dev.Lock(); err != nil {
		return nil, err
	}
	defer c.dev.Unlock()
	h, err := c.dev.HostRegister(b)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.host = append(c.host, h)
	c.mu.Unlock()
	return func() error {
		c.mu.Lock()
		c.host = slices.DeleteFunc(c.host, func(x *cuda.HostBuffer) bool { return x == h })
		c.mu.Unlock()
		// Unregistering waits for a running resident consumer.
		return c.later(h.Free)
	}, nil
}

// registered returns the registered memory src lies in, and src's offset
// there.
func (c *GPU) registered(src []byte) (*cuda.HostBuffer, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.host {
		if off, ok := h.Offset(src); ok {
			return h, off, true
		}
	}
	return nil, 0, false
}

func (c *GPU) event() (*cuda.Event, *cuda.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[c.next]
	c.next = (c.next + 1) % len(c.streams)
	if n := len(c.events); n > 0 {
		e := c.events[n-1]
		c.events = c.events[:n-1]
		return e, s, nil
	}
	e, err := c.dev.NewSyncEvent()
	return e, s, err
}

func (c *GPU) recycle(e *cuda.Event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
}

// Done records an event on s, after the work queued there so far (the
// kernels that read a slot), for stream.Session.ReleaseAfter.
func (c *GPU) Done(s *cuda.Stream) (stream.Copy, error) {
	if err := c.dev.Lock(); err != nil {
		return nil, err
	}
	defer c.dev.Unlock()
	c.mu.Lock()
	var e *cuda.Event
	if n := len(c.events); n > 0 {
		e, c.events = c.events[n-1], c.events[:n-1]
	}
	c.mu.Unlock()
	if e == nil {
		var err error
		if e, err = c.dev.NewSyncEvent(); err != nil {
			return nil, err
		}
	}
	if err := e.Record(s); err != nil {
		c.recycle(e)
		return nil, err
	}
	return &copyDone{pool: c, e: e}, nil
}

type buffer struct {
	c *GPU
	b *cuda.Buffer
}

var (
	_ stream.GPUBuffer    = (*buffer)(nil)
	_ stream.ReadBack     = (*buffer)(nil)
	_ stream.DmabufBuffer = (*buffer)(nil)
)

func (b *buffer) Addr() uint64 { return b.b.Ptr }
func (b *buffer) Size() uint64 { return b.b.Size }

// Free frees the buffer, once no resident consumer runs on the GPU
// (cuMemFree would wait for it): at once, or when the last one stops.
func (b *buffer) Free() error { return b.c.later(b.b.Free) }

// ExportDmabuf implements stream.DmabufBuffer with
// cuMemGetHandleForAddressRange.
func (b *buffer) ExportDmabuf(off, n uint64) (*os.File, error) {
	if err := b.c.dev.Lock(); err != nil {
		return nil, err
	}
	defer b.c.dev.Unlock()
	fd, err := b.b.ExportDmabuf(off, n)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "cuda-dmabuf"), nil
}

// CopyIn queues an asynchronous host-to-device copy and an event after it.
// src must lie in memory given to RegisterHost.
func (b *buffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	if off > b.b.Size || uint64(len(src)) > b.b.Size-off {
		return nil, fmt.Errorf("%w: copy of %d bytes to offset %d of a %d-byte buffer", stream.ErrConfig, len(src), off, b.b.Size)
	}
	h, hoff, ok := b.c.registered(src)
	if !ok {
		return nil, fmt.Errorf("%w: copy of %d bytes from host memory not given to RegisterHost", stream.ErrConfig, len(src))
	}
	if err := b.c.dev.Lock(); err != nil {
		return nil, err
	}
	defer b.c.dev.Unlock()
	e, s, err := b.c.event()
	if err != nil {
		return nil, err
	}
	if err := s.CopyHtoD(b.b.Ptr+off, h, hoff, uint64(len(src))); err != nil {
		b.c.recycle(e)
		return nil, err
	}
	if err := e.Record(s); err != nil {
		b.c.recycle(e)
		return nil, err
	}
	return &copyDone{pool: b.c, e: e}, nil
}

// CopyOut implements stream.ReadBack with a synchronous device-to-host
// copy.
func (b *buffer) CopyOut(dst []byte, off uint64) error {
	if off > b.b.Size || uint64(len(dst)) > b.b.Size-off {
		return fmt.Errorf("%w: copy of %d bytes from offset %d of a %d-byte buffer", stream.ErrConfig, len(dst), off, b.b.Size)
	}
	if len(dst) == 0 {
		return nil
	}
	if err := b.c.dev.Lock(); err != nil {
		return err
	}
	defer b.c.dev.Unlock()
	return b.c.dev.CopyDtoH(dst, b.b.Ptr+off)
}

// eventPool waits for the GPU's completion events and takes them back.
type eventPool interface {
	sync(e *cuda.Event) error
	recycle(e *cuda.Event)
}

// sync waits for e with the context current.
func (c *GPU) sync(e *cuda.Event) error {
	if err := c.dev.Lock(); err != nil {
		return err
	}
	defer c.dev.Unlock()
	return e.Sync()
}

// copyDone is an event recorded after queued work: a copy or a consumer's
// kernels. The first Wait waits for the event and gives it back to the
// pool, once: every Wait, at once or later, returns that Wait's result.
type copyDone struct {
	pool eventPool
	e    *cuda.Event
	once sync.Once
	err  error
}

func (cp *copyDone) Wait() error {
	cp.once.Do(func() {
		cp.err = cp.pool.sync(cp.e)
		// Back to the pool only once waited for: a second owner would
		// record it again while a waiter of this one still relied on it.
		cp.pool.recycle(cp.e)
		cp.e = nil
	})
	return cp.err
}

// NewFrameChecker implements stream.GPUChecking with package gpucheck's
// kernel. A checker closed before is taken again for its frame size:
// loading the kernel waits for a running resident consumer, and so
// would freeing its memory.
func (c *GPU) NewFrameChecker(frameSize, maxFrames int) (stream.FrameChecker, error) {
	c.mu.Lock()
	for i, k := range c.checkers {
		if k.chk.FrameSize() == frameSize && k.maxFrames == maxFrames {
			c.checkers = slices.Delete(c.checkers, i, i+1)
			k.idle = false
			c.mu.Unlock()
			k.chk.ResetStats()
			return k, nil
		}
	}
	c.mu.Unlock()
	if err := c.dev.Lock(); err != nil {
		return nil, err
	}
	defer c.dev.Unlock()
	chk, err := gpucheck.New(c.dev, frameSize, maxFrames)
	if err != nil {
		return nil, err
	}
	s, err := c.dev.NewStream()
	if err != nil {
		chk.Close()
		return nil, err
	}
	return &checker{c: c, chk: chk, s: s, maxFrames: maxFrames}, nil
}

type checker struct {
	c         *GPU
	chk       *gpucheck.Checker
	s         *cuda.Stream
	maxFrames int
	idle      bool // in c.checkers; c.mu guards it
}

func (k *checker) Check(b stream.GPUBuffer, off, n uint64) error {
	if err := k.c.dev.Lock(); err != nil {
		return err
	}
	defer k.c.dev.Unlock()
	if err := k.chk.Launch(k.s, b.Addr()+off, n); err != nil {
		return err
	}
	return k.chk.Collect(k.s)
}

func (k *checker) Stats() frame.Stats { return k.chk.Stats() }

// Close keeps the checker for the next session of its frame size; the
// GPU's Close frees it.
func (k *checker) Close() error {
	k.c.mu.Lock()
	if !k.idle {
		k.idle = true
		k.c.checkers = append(k.c.checkers, k)
	}
	k.c.mu.Unlock()
	return nil
}

// Pin pins [ptr, ptr+size) of g's memory, allocated any way CUDA allows,
// on d: after cuda.CheckPeerRange has found it pinnable (one allocation,
// GPUDirect RDMA capable: its errors say what to change), through a
// dma-buf or nvidia_p2p as via resolves (stream.ChoosePinning), which it
// returns; through nvidia_p2p persistently where the caller may not pin
// revocably (stream.PinNVP2P). g's context must not be current on another thread.
func Pin(d *p2p.Device, g *cuda.Device, ptr, size uint64, via stream.Pinning) (*p2p.Pin, stream.Pinning, error) {
	if err := g.Lock(); err != nil {
		return nil, 0, err
	}
	defer g.Unlock()
	r, err := g.CheckPeerRange(ptr, size)
	if err != nil {
		return nil, 0, err
	}
	via, err = stream.ChoosePinning(d, g, via)
	if err != nil {
		return nil, 0, err
	}
	if via == stream.PinP2P {
		p, err := stream.PinNVP2P(d, ptr, size) // persistently where revocable pins are refused
		return p, via, err
	}
	// Exports are of whole GPU pages, which allocations are made of.
	const page = 64 << 10
	start := max(ptr&^(page-1), r.Start)
	end := min((ptr+size+page-1)&^(page-1), r.Start+r.Size)
	fd, err := g.ExportDmabufRange(start, end-start)
	if err != nil {
		return nil, 0, fmt.Errorf("dma-buf export of %#x+%d: %w", start, end-start, err)
	}
	defer unix.Close(fd) // the pin holds the dma-buf
	p, err := d.PinDmabuf(fd, ptr-start, size)
	return p, via, err
}
