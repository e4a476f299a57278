//go:build linux

package cudamem

import (
	"errors"
	"sync"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Compat mode's copies come only from registered, page-locked memory: the
// copy engines read the source after CopyIn returns. Anything else is
// refused before the device is touched.
func TestCopyInNeedsRegisteredMemory(t *testing.T) {
	b := &buffer{c: &GPU{}, b: &cuda.Buffer{Size: 1 << 20}}
	if _, err := b.CopyIn(0, make([]byte, 4096)); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("copy from unregistered memory: %v, want stream.ErrConfig", err)
	}
	if _, err := b.CopyIn(1<<20-16, make([]byte, 32)); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("copy past the end of the buffer: %v, want stream.ErrConfig", err)
	}
}

// Close is idempotent, as the rest of the project's Close methods are:
// the second returns nil, whatever the first did (here: the device was
// gone already).
func TestCloseTwice(t *testing.T) {
	g := &GPU{dev: new(cuda.Device)}
	var ce *cuda.Error
	if err := g.Close(); !errors.As(err, &ce) || ce.Code != int(cuda.ErrorInvalidContext) {
		t.Fatalf("Close of a GPU without a context: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
}

// countingPool counts the events given back to it.
type countingPool struct {
	mu       sync.Mutex
	syncs    int
	recycled []*cuda.Event
}

func (p *countingPool) sync(*cuda.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncs++
	return errEngine
}

func (p *countingPool) recycle(e *cuda.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recycled = append(p.recycled, e)
}

var errEngine = errors.New("copy engine fault")

// A Copy waited for twice, or by two goroutines, gives its event back
// once: twice, and two later copies would share one event, and a slot be
// released while a kernel still read it.
func TestCopyWaitOwnsItsEventOnce(t *testing.T) {
	pool := &countingPool{}
	e := new(cuda.Event)
	cp := &copyDone{pool: pool, e: e}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cp.Wait(); err != errEngine {
				t.Errorf("Wait: %v, want the first wait's error", err)
			}
		}()
	}
	wg.Wait()
	if err := cp.Wait(); err != errEngine {
		t.Errorf("a later Wait: %v", err)
	}
	if pool.syncs != 1 || len(pool.recycled) != 1 || pool.recycled[0] != e {
		t.Fatalf("%d waits for the event, %d returns to the pool; want 1 and 1", pool.syncs, len(pool.recycled))
	}
}
