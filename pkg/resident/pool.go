//go:build linux

package resident

import (
	"errors"
	"sync"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// runMem is what one persistent consumer runs on: its stop word and
// counters (host memory mapped into the GPU), its state (GPU memory),
// records for the host (host memory mapped into the GPU, Func's), a
// function's state (GPU memory, copied from page-locked host memory on
// the consumer's stream) and a non-blocking stream, which the rest of the
// process's CUDA work on the legacy stream does not wait for.
type runMem struct {
	ctl   *cuda.MappedBuffer
	state *cuda.Buffer
	out   *cuda.MappedBuffer // nil: none
	user  *cuda.Buffer       // nil: none
	stage *cuda.HostBuffer   // user's source
	s     *cuda.Stream
}

// memSize is what a consumer asks of the pool.
type memSize struct {
	state, out, user uint64
}

// fits reports whether m has room for sz.
func (m *runMem) fits(sz memSize) bool {
	return m.state.Size >= sz.state &&
		(sz.out == 0 || m.out != nil && uint64(len(m.out.Bytes())) >= sz.out) &&
		(sz.user == 0 || m.user != nil && m.user.Size >= sz.user)
}

// maxBlocks bounds a consumer's grid: no GPU has more multiprocessors,
// and every block must be resident at once.
const maxBlocks = 256

// memPool keeps consumers' memory for the next consumer: freeing device
// or page-locked memory (cuMemFree, cuMemFreeHost) waits for every kernel
// running on the device, another consumer's too, and allocating does not.
type memPool struct {
	mu   sync.Mutex
	idle []*runMem
	all  []*runMem
}

// take returns idle memory of at least sz, or new memory.
func (p *memPool) take(g *cuda.Device, sz memSize) (*runMem, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range p.idle {
		if m.fits(sz) {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return m, nil
		}
	}
	m := &runMem{}
	var err error
	if m.ctl, err = g.HostAllocMapped(uint64(64 + maxBlocks*countersSize)); err != nil {
		return nil, err
	}
	p.all = append(p.all, m)
	if m.state, err = g.Alloc(sz.state); err != nil {
		return nil, err
	}
	if sz.out > 0 {
		if m.out, err = g.HostAllocMapped(sz.out); err != nil {
			return nil, err
		}
	}
	if sz.user > 0 {
		if m.user, err = g.Alloc(sz.user); err != nil {
			return nil, err
		}
		if m.stage, err = g.HostAlloc(sz.user); err != nil {
			return nil, err
		}
	}
	if m.s, err = g.NewNonBlockingStream(); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *memPool) give(m *runMem) {
	p.mu.Lock()
	p.idle = append(p.idle, m)
	p.mu.Unlock()
}

// free frees every consumer's memory: no consumer may run.
func (p *memPool) free() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, m := range p.all {
		if m.s != nil {
			errs = append(errs, m.s.Close())
		}
		if m.state != nil {
			errs = append(errs, m.state.Free())
		}
		if m.out != nil {
			errs = append(errs, m.out.Free())
		}
		if m.user != nil {
			errs = append(errs, m.user.Free())
		}
		if m.stage != nil {
			errs = append(errs, m.stage.Free())
		}
		errs = append(errs, m.ctl.Free())
	}
	p.all, p.idle = nil, nil
	return errors.Join(errs...)
}
