//go:build linux && !vmguest

// The host runs these (make unit); the guest runs vm_test.go.

package stream_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/internal/hostring"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

const (
	slots     = 8
	slotSize  = 256 << 10
	frameSize = 4 << 10
)

// attach runs compat mode on the in-process device model and a simulated
// GPU, as the benchmark does on a real one.
func attach(t *testing.T, ctx context.Context, gpu stream.GPU, check stream.Check) (*stream.Session, *hostring.Ring) {
	t.Helper()
	host := make([]byte, slots*slotSize)
	src, err := hostring.New(hostring.Config{Ring: host, Slots: slots, SlotSize: slotSize, FrameSize: frameSize, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, err := stream.Attach(ctx, stream.Config{SlotSize: slotSize, Slots: slots, GPU: gpu, Check: check, FrameSize: frameSize}, host, src)
	if err != nil {
		src.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, src
}

// checkSlot verifies that a delivered slot holds the frames of fill k, in
// GPU memory.
func checkSlot(t *testing.T, f stream.Filled) {
	t.Helper()
	if f.Len != slotSize || uint64(len(f.Data)) != f.Len {
		t.Fatalf("slot %d: %d bytes, %d visible", f.Slot, f.Len, len(f.Data))
	}
	for i := 0; i < slotSize/frameSize; i++ {
		h, err := frame.Parse(f.Data[i*frameSize:])
		if err != nil {
			t.Fatalf("slot %d (fill %d) frame %d: %v", f.Slot, f.Seq, i, err)
		}
		if want := f.Seq*slotSize/frameSize + uint64(i); h.Seq != want {
			t.Fatalf("slot %d (fill %d) frame %d has sequence %d, want %d", f.Slot, f.Seq, i, h.Seq, want)
		}
	}
}

// Slots go through asynchronous copies to the GPU in order, every frame
// lands there intact, and the counts reconcile with what the model wrote.
func TestCompatPipeline(t *testing.T) {
	gpu := &simgpu.Local{Engines: 3}
	s, src := attach(t, context.Background(), gpu, stream.CheckCPU)
	const total = 64 << 20
	next := uint64(0)
	for f := range s.Filled() {
		if f.Seq != next || f.Slot != int(next%slots) {
			t.Fatalf("got fill %d in slot %d, want fill %d", f.Seq, f.Slot, next)
		}
		next++
		checkSlot(t, f)
		if err := s.Release(f.Slot); err != nil {
			t.Fatal(err)
		}
		if s.Stats().Bytes >= total {
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := s.Stats()
	if s.Err() != nil || st.Mode != stream.Compat || st.Bytes < total || st.Frames.Frames != st.Bytes/frameSize ||
		st.Frames.Gaps != 0 || st.Frames.Duplicates != 0 || st.Frames.CRCFailures != 0 || st.MaxHeld > slots {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
	if gpu.Copies() != st.Slots || src.Generated() != st.Frames.Frames {
		t.Fatalf("%d copies and %d frames generated for %d slots, %d frames", gpu.Copies(), src.Generated(), st.Slots, st.Frames.Frames)
	}
}

// A consumer holding every slot stops the model at the ring's end: no
// further slot arrives and the held slots' GPU copies stay as they were.
func TestCompatSlowConsumer(t *testing.T) {
	s, _ := attach(t, context.Background(), &simgpu.Local{}, stream.CheckCPU)
	var held []stream.Filled
	for len(held) < slots {
		held = append(held, <-s.Filled())
	}
	select {
	case f := <-s.Filled():
		t.Fatalf("slot %d (fill %d) delivered while the consumer held the whole ring", f.Slot, f.Seq)
	case <-time.After(200 * time.Millisecond):
	}
	for _, f := range held {
		checkSlot(t, f)
		if err := s.Release(f.Slot); err != nil {
			t.Fatal(err)
		}
	}
	for f := range s.Filled() {
		checkSlot(t, f)
		s.Release(f.Slot)
		if f.Seq == 3*slots {
			s.Stop()
		}
	}
	if st := s.Stats(); s.Err() != nil || st.MaxHeld != slots || st.Frames.Gaps != 0 || st.Frames.Duplicates != 0 {
		t.Fatalf("ended %v with %+v", s.Err(), st)
	}
	if err := s.Release(0); !errors.Is(err, hostring.ErrNotHeld) {
		t.Fatalf("releasing a slot not held: %v, want ErrNotHeld", err)
	}
}

// Cancelling the context ends the session with the context's error.
func TestCompatCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, _ := attach(t, ctx, &simgpu.Local{}, stream.CheckNone)
	f := <-s.Filled()
	s.Release(f.Slot)
	cancel()
	for f := range s.Filled() {
		s.Release(f.Slot)
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("after cancel: %v", s.Err())
	}
}

var errCopyEngine = errors.New("copy engine fault")

// failingGPU fails the copy after a few.
type failingGPU struct {
	simgpu.Local
	left int
}

func (g *failingGPU) Alloc(size uint64) (stream.GPUBuffer, error) {
	b, err := g.Local.Alloc(size)
	return &failingBuffer{b, g}, err
}

type failingBuffer struct {
	stream.GPUBuffer
	g *failingGPU
}

func (b *failingBuffer) Bytes() []byte { return b.GPUBuffer.(stream.CPUVisible).Bytes() }

func (b *failingBuffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	if b.g.left == 0 {
		return nil, errCopyEngine
	}
	b.g.left--
	return b.GPUBuffer.CopyIn(off, src)
}

// A failed copy ends the session with that error; what was copied before
// it is delivered.
func TestCompatCopyFailure(t *testing.T) {
	s, _ := attach(t, context.Background(), &failingGPU{left: 5}, stream.CheckCPU)
	n := 0
	for f := range s.Filled() {
		checkSlot(t, f)
		s.Release(f.Slot)
		n++
	}
	if !errors.Is(s.Err(), errCopyEngine) || n != 5 {
		t.Fatalf("%d slots, then %v; want 5, then the copy error", n, s.Err())
	}
}

// waitFailGPU's copy number fail reports an error from Wait, once the
// copy after it has been started: so a later slot is queued behind the
// failure.
type waitFailGPU struct {
	simgpu.Local
	fail  int
	n     int
	later chan struct{}
}

func (g *waitFailGPU) Alloc(size uint64) (stream.GPUBuffer, error) {
	b, err := g.Local.Alloc(size)
	return &waitFailBuffer{b, g}, err
}

type waitFailBuffer struct {
	stream.GPUBuffer
	g *waitFailGPU
}

func (b *waitFailBuffer) Bytes() []byte { return b.GPUBuffer.(stream.CPUVisible).Bytes() }

type failedCopy struct{ later chan struct{} }

func (c failedCopy) Wait() error {
	<-c.later
	return errCopyEngine
}

// CopyIn runs on collect's goroutine only, so n needs no lock.
func (b *waitFailBuffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	b.g.n++
	switch {
	case b.g.n == b.g.fail:
		return failedCopy{b.g.later}, nil
	case b.g.n == b.g.fail+2: // the one after fail+1, which is queued now
		close(b.g.later)
	}
	return b.GPUBuffer.CopyIn(off, src)
}

// After a copy fails, the slots queued behind it are not delivered.
func TestCompatNothingAfterAFailedCopy(t *testing.T) {
	s, _ := attach(t, context.Background(), &waitFailGPU{fail: 6, later: make(chan struct{})}, stream.CheckCPU)
	n := 0
	for f := range s.Filled() {
		checkSlot(t, f)
		s.Release(f.Slot)
		n++
	}
	if !errors.Is(s.Err(), errCopyEngine) || n != 5 {
		t.Fatalf("%d slots, then %v; want 5, then the copy error", n, s.Err())
	}
}

func TestModeAndCheckStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{stream.Direct.String(), "direct"}, {stream.Mode(7).String(), "Mode(7)"}, {stream.Mode(-1).String(), "Mode(-1)"},
		{stream.CheckGPU.String(), "gpu"}, {stream.Check(3).String(), "Check(3)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

// Configurations that cannot run are refused with ErrConfig.
func TestConfigErrors(t *testing.T) {
	host := make([]byte, slots*slotSize)
	for _, tc := range []struct {
		name string
		cfg  stream.Config
		host []byte
	}{
		{"no slots", stream.Config{SlotSize: slotSize, GPU: &simgpu.Local{}}, host},
		{"no GPU", stream.Config{SlotSize: slotSize, Slots: slots}, host},
		{"small host ring", stream.Config{SlotSize: slotSize, Slots: slots, GPU: &simgpu.Local{}}, host[:slotSize]},
		{"GPU check without CUDA", stream.Config{SlotSize: slotSize, Slots: slots, GPU: &simgpu.Local{}, Check: stream.CheckGPU, FrameSize: frameSize}, host},
		{"GPU pinning of a host ring", stream.Config{SlotSize: slotSize, Slots: slots, GPU: &simgpu.Local{}, Pinning: stream.PinDmabuf}, host},
	} {
		if _, err := stream.Attach(context.Background(), tc.cfg, tc.host, nil); !errors.Is(err, stream.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
	if _, err := stream.Start(context.Background(), stream.Config{SlotSize: slotSize, Slots: slots, GPU: &simgpu.Local{}}); !errors.Is(err, stream.ErrConfig) {
		t.Errorf("Start without a device: %v, want ErrConfig", err)
	}
}

// orderSource is a Source whose one slot the test fills; Release records
// whether the work on the slot had finished when it came.
type orderSource struct {
	slots    chan p2p.Slot
	stop     sync.Once
	workDone atomic.Bool
	released chan bool // workDone at each release
}

func (o *orderSource) Slots() <-chan p2p.Slot { return o.slots }
func (o *orderSource) Err() error             { return nil }
func (o *orderSource) Stop() error {
	o.stop.Do(func() { close(o.slots) })
	return nil
}
func (o *orderSource) Release(...int) error {
	o.released <- o.workDone.Load()
	return nil
}

// work finishes when open is closed, with err.
type work struct {
	src  *orderSource
	open chan struct{}
	err  error
}

func (w work) Wait() error {
	<-w.open
	w.src.workDone.Store(true)
	return w.err
}

func attachOrder(t *testing.T) (*stream.Session, *orderSource) {
	src := &orderSource{slots: make(chan p2p.Slot, 1), released: make(chan bool, 1)}
	s, err := stream.Attach(context.Background(), stream.Config{SlotSize: 4096, Slots: 1, GPU: &simgpu.Local{}}, make([]byte, 4096), src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	src.slots <- p2p.Slot{Index: 0, Bytes: 4096}
	within(t, s.Filled())
	return s, src
}

// within returns what ch delivers, failing t if nothing comes in 10 s.
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing arrived within 10 s")
	}
	var zero T
	return zero
}

// ReleaseAfter hands the slot back only after the work reading it is done.
func TestReleaseAfterWaitsForTheWork(t *testing.T) {
	s, src := attachOrder(t)
	w := work{src: src, open: make(chan struct{})}
	s.ReleaseAfter(0, w)
	close(w.open)
	if done := within(t, src.released); !done {
		t.Fatal("slot released while the work on it still ran")
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// Work that fails ends the session with its error; the slot stays held.
func TestReleaseAfterFailure(t *testing.T) {
	s, src := attachOrder(t)
	w := work{src: src, open: make(chan struct{}), err: errCopyEngine}
	close(w.open)
	s.ReleaseAfter(0, w)
	for range s.Filled() {
	}
	if !errors.Is(s.Err(), errCopyEngine) {
		t.Fatalf("session ended with %v, want the work's error", s.Err())
	}
	select {
	case <-src.released:
		t.Fatal("slot released after its work failed")
	default:
	}
}

// hiddenGPU's memory is not CPU-visible, as CUDA's is not; it can be
// copied back, and its first copy in flips a bit on the way, silently.
type hiddenGPU struct{ simgpu.Local }

func (g *hiddenGPU) Alloc(size uint64) (stream.GPUBuffer, error) {
	b, err := g.Local.Alloc(size)
	return &hiddenBuffer{b: b}, err
}

type hiddenBuffer struct {
	b         stream.GPUBuffer
	corrupted bool
}

func (h *hiddenBuffer) Addr() uint64 { return h.b.Addr() }
func (h *hiddenBuffer) Size() uint64 { return h.b.Size() }
func (h *hiddenBuffer) Free() error  { return h.b.Free() }

// CopyIn runs on collect's goroutine only.
func (h *hiddenBuffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	if !h.corrupted {
		h.corrupted = true
		src = append([]byte(nil), src...)
		src[len(src)/2+100] ^= 0x10 // a payload byte
	}
	return h.b.CopyIn(off, src)
}

func (h *hiddenBuffer) CopyOut(dst []byte, off uint64) error {
	copy(dst, h.b.(stream.CPUVisible).Bytes()[off:])
	return nil
}

// In compat mode CheckCPU checks what reached the GPU: a bit flipped in
// the copy is a CRC failure although the host slot is intact.
func TestCompatCheckCPUReadsTheGPU(t *testing.T) {
	s, _ := attach(t, context.Background(), &hiddenGPU{}, stream.CheckCPU)
	for f := range s.Filled() {
		if f.Data != nil {
			t.Fatal("hidden GPU memory handed to the CPU")
		}
		s.Release(f.Slot)
		if f.Seq == 2*slots {
			s.Stop()
		}
	}
	if st := s.Stats(); st.Frames.CRCFailures != 1 || st.Frames.Frames < 2*slots*slotSize/frameSize {
		t.Fatalf("frames %+v: want one CRC failure", st.Frames)
	}
}

// gatedWork is work that finishes when gate is closed; most records the
// most Waits that ever ran at once.
type gatedWork struct {
	gate          chan struct{}
	running, most *atomic.Int32
}

func (w gatedWork) Wait() error {
	n := w.running.Add(1)
	defer w.running.Add(-1)
	for m := w.most.Load(); n > m && !w.most.CompareAndSwap(m, n); m = w.most.Load() {
	}
	<-w.gate
	return nil
}

// However many slots wait for their work, one goroutine waits: a CUDA
// event wait spins a CPU, and one per slot would spin as many.
func TestReleaseAfterOneWaiter(t *testing.T) {
	const n = 6
	src := &orderSource{slots: make(chan p2p.Slot, n), released: make(chan bool, n)}
	s, err := stream.Attach(context.Background(), stream.Config{SlotSize: 4096, Slots: n, GPU: &simgpu.Local{}}, make([]byte, n*4096), src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		src.slots <- p2p.Slot{Index: i, Bytes: 4096}
	}
	var running, most atomic.Int32
	w := gatedWork{gate: make(chan struct{}), running: &running, most: &most}
	for range n {
		f := within(t, s.Filled())
		s.ReleaseAfter(f.Slot, w)
	}
	// Time for waiters to pile up, had each slot its own.
	time.Sleep(50 * time.Millisecond)
	close(w.gate)
	for range n {
		within(t, src.released)
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d waits ran at once, want 1", m)
	}
	if st := s.Stats(); st.Held != 0 {
		t.Fatalf("%d slots held after their releases", st.Held)
	}
}

// doneWork is work that has finished.
type doneWork struct{}

func (doneWork) Wait() error { return nil }

// ReleaseAfter racing Close (a consumer handing its last slot back while
// a signal closes the session) neither panics nor releases after the
// free: the slot is released, or its work only waited for.
func TestReleaseAfterRacingClose(t *testing.T) {
	for range 200 {
		src := &orderSource{slots: make(chan p2p.Slot, 1), released: make(chan bool, 1)}
		s, err := stream.Attach(context.Background(), stream.Config{SlotSize: 4096, Slots: 1, GPU: &simgpu.Local{}}, make([]byte, 4096), src)
		if err != nil {
			t.Fatal(err)
		}
		src.slots <- p2p.Slot{Index: 0, Bytes: 4096}
		f := within(t, s.Filled())
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			s.ReleaseAfter(f.Slot, doneWork{})
		}()
		go func() {
			defer wg.Done()
			<-start
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		}()
		close(start)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ReleaseAfter and Close still running after 10 s")
		}
	}
}
