package simgpu

import (
	"sync"

	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Local is a simulated GPU in the process itself, for what runs without
// the rig (unit tests, benchmarks of the compat path): memory the CPU can
// read, at made-up 64 KiB-aligned addresses, and a copy engine that runs
// queued copies on its own goroutines, several at once, so a copy finishes
// some time after CopyIn returns, as a DMA engine's does.
type Local struct {
	mu   sync.Mutex
	next uint64
	// Engines is how many copies run at once (a GPU has one to a few
	// copy engines per direction); 0 means 2.
	Engines int
	sem     chan struct{}
	copies  uint64
}

// Copies returns how many copies the engines ran.
func (l *Local) Copies() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.copies
}

// Alloc implements stream.GPU.
func (l *Local) Alloc(size uint64) (stream.GPUBuffer, error) {
	size = (size + PageSize - 1) &^ (PageSize - 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sem == nil {
		l.sem = make(chan struct{}, max(l.Engines, 2))
		l.next = 0x7f0000000000
	}
	b := &localBuffer{l: l, addr: l.next, mem: make([]byte, size)}
	l.next += size + PageSize // a hole between buffers, as a real VA space has
	return b, nil
}

// RegisterHost implements stream.GPU.
func (*Local) RegisterHost([]byte) (func() error, error) { return func() error { return nil }, nil }

type localBuffer struct {
	l    *Local
	addr uint64
	mem  []byte
}

func (b *localBuffer) Addr() uint64  { return b.addr }
func (b *localBuffer) Size() uint64  { return uint64(len(b.mem)) }
func (b *localBuffer) Bytes() []byte { return b.mem }
func (b *localBuffer) Free() error   { return nil }

// CopyIn queues the copy on an engine.
func (b *localBuffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	if err := checkCopy(off, len(src), uint64(len(b.mem))); err != nil {
		return nil, err
	}
	c := make(localCopy)
	go func() {
		b.l.sem <- struct{}{}
		copy(b.mem[off:], src)
		b.l.mu.Lock()
		b.l.copies++
		b.l.mu.Unlock()
		<-b.l.sem
		close(c)
	}()
	return c, nil
}

type localCopy chan struct{}

func (c localCopy) Wait() error {
	<-c
	return nil
}
