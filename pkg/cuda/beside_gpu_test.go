//go:build linux && gpu

package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spinPTX is a persistent kernel: it stores 1 to *started and spins until
// the host stores non-zero to *stop (both host memory mapped into the GPU).
const spinPTX = `
.version 6.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 stop, .param .u64 started)
{
	.reg .u64 %rd<3>;
	.reg .u32 %r<2>;
	.reg .pred %p;
	ld.param.u64 %rd1, [stop];
	ld.param.u64 %rd2, [started];
	st.volatile.u32 [%rd2], 1;
	membar.sys;
L:
	ld.volatile.u32 %r1, [%rd1];
	setp.eq.u32 %p, %r1, 0;
	@%p bra L;
	ret;
}
`

// noLockDevice opens device 0 and leaves no context current on the test's
// thread: every call must bind its own.
func noLockDevice(t *testing.T) *Device {
	t.Helper()
	g, err := OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// Every call binds its device's context: none of them needs Lock, and a
// goroutine with no context current (the driver's answer then is 201,
// ErrorInvalidContext) makes each of them.
func TestCallsWithoutLock(t *testing.T) {
	g := noLockDevice(t)
	done := make(chan error, 1)
	go func() { done <- callEach(g) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the calls did not return in 60 s")
	}
}

func callEach(g *Device) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Nothing current on this thread: a call that skipped its push fails.
	if err := g.drv.call(cuCtxSetCurrent, 0); err != nil {
		return err
	}
	step := func(what string, e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("%s without Lock: %w", what, e)
		}
	}
	m, e := g.HostAllocMapped(4096)
	step("HostAllocMapped", e)
	if e != nil {
		return err
	}
	defer func() { step("MappedBuffer.Free", m.Free()) }()
	page, e := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if e != nil {
		return e
	}
	defer unix.Munmap(page)
	rm, e := g.HostRegisterMapped(page)
	step("HostRegisterMapped", e)
	if e != nil {
		return err
	}
	defer func() { step("registered MappedBuffer.Free", rm.Free()) }()
	b, e := g.Alloc(1 << 20)
	step("Alloc", e)
	if e != nil {
		return err
	}
	defer func() { step("Buffer.Free", b.Free()) }()
	h, e := g.HostAlloc(4096)
	step("HostAlloc", e)
	if e != nil {
		return err
	}
	defer func() { step("HostBuffer.Free", h.Free()) }()
	for _, s := range []func() (*Stream, error){g.NewStream, g.NewNonBlockingStream} {
		st, e := s()
		step("NewStream", e)
		if e != nil {
			return err
		}
		step("MemsetD8", st.MemsetD8(b.Ptr, 7, 4096))
		step("CopyDtoH", st.CopyDtoH(h, 0, b.Ptr, 4096))
		step("CopyHtoD", st.CopyHtoD(b.Ptr, h, 0, 4096))
		step("CopyDtoD", st.CopyDtoD(b.Ptr+4096, b.Ptr, 4096))
		ev, e := g.NewSyncEvent()
		step("NewSyncEvent", e)
		if e == nil {
			step("Event.Record", ev.Record(st))
			step("Event.Sync", ev.Sync())
			step("Event.Close", ev.Close())
		}
		step("Stream.Sync", st.Sync())
		_, e = st.Idle()
		step("Stream.Idle", e)
		step("Stream.Close", st.Close())
	}
	if h.Bytes()[4095] != 7 {
		err = errors.Join(err, fmt.Errorf("the copy back holds %d, want 7", h.Bytes()[4095]))
	}
	step("CopyHtoD", g.CopyHtoD(b.Ptr, make([]byte, 16)))
	step("CopyDtoH", g.CopyDtoH(make([]byte, 16), b.Ptr))
	mod, e := g.LoadPTX([]byte(spinPTX))
	step("LoadPTX", e)
	if e == nil {
		_, e = mod.Function("spin")
		step("Module.Function", e)
		step("Module.Close", mod.Close())
	}
	mod, e = g.Link(PTXInput{Name: "spin.ptx", PTX: []byte(spinPTX)})
	step("Link", e)
	if e == nil {
		step("linked Module.Close", mod.Close())
	}
	_, e = g.CheckPeerRange(b.Ptr, b.Size)
	step("CheckPeerRange", e)
	_, _, e = g.RDMAOrdering()
	step("RDMAOrdering", e)
	var cur uintptr
	if e := g.drv.call(cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur))); e == nil && cur != 0 {
		err = errors.Join(err, fmt.Errorf("a context (%#x) is current after the calls: a push was not popped", cur))
	}
	return err
}

// spinner runs spinPTX on a non-blocking stream of its own.
type spinner struct {
	g     *Device
	f     *Function
	s     *Stream
	flags *MappedBuffer // stop at 0, started at 64
}

func newSpinner(t *testing.T, g *Device) *spinner {
	t.Helper()
	mod, err := g.LoadPTX([]byte(spinPTX))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Close() })
	sp := &spinner{g: g}
	if sp.f, err = mod.Function("spin"); err != nil {
		t.Fatal(err)
	}
	if sp.s, err = g.NewNonBlockingStream(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.s.Close() })
	if sp.flags, err = g.HostAllocMapped(128); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.flags.Free() })
	return sp
}

// start launches the kernel and returns once it runs.
func (sp *spinner) start(t *testing.T) {
	t.Helper()
	atomic.StoreUint32((*uint32)(sp.flags.Ptr(0)), 0)
	atomic.StoreUint32((*uint32)(sp.flags.Ptr(64)), 0)
	if err := sp.f.Launch(sp.s, 1, 32, 0, sp.flags.DevPtr, sp.flags.DevPtr+64); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32((*uint32)(sp.flags.Ptr(64))) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the spinning kernel did not start in 10 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// stop tells the kernel to leave and waits for it.
func (sp *spinner) stop(t *testing.T) {
	t.Helper()
	atomic.StoreUint32((*uint32)(sp.flags.Ptr(0)), 1)
	if err := sp.s.Sync(); err != nil {
		t.Fatal(err)
	}
}

// What waits for a persistent kernel on a non-blocking stream, and what
// does not: each call is made while the kernel spins and given a second;
// one still running then is let go by stopping the kernel, and must
// return at once after. The test asserts what the resident consumer
// relies on (asynchronous work on other non-blocking streams, another
// kernel beside it, synchronous copies on the legacy stream, mapped host
// memory) and records the driver's answer for the rest, which the
// package documentation states.
func TestBesideAPersistentKernel(t *testing.T) {
	g := noLockDevice(t)
	sp := newSpinner(t, g)
	other := newSpinner(t, g)
	spare, err := g.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Free()
	s2, err := g.NewNonBlockingStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	type op struct {
		name     string
		mustPass bool // the consumer relies on it not waiting
		f        func() error
	}
	var b *Buffer
	var mod *Module
	var reg, hm *MappedBuffer
	var ns *Stream
	ops := []op{
		{"memset and sync on another non-blocking stream", true, func() error {
			return errors.Join(s2.MemsetD8(spare.Ptr, 1, 4096), s2.Sync())
		}},
		{"a second persistent kernel on another non-blocking stream", true, func() error {
			atomic.StoreUint32((*uint32)(other.flags.Ptr(0)), 0)
			atomic.StoreUint32((*uint32)(other.flags.Ptr(64)), 0)
			if err := other.f.Launch(other.s, 1, 32, 0, other.flags.DevPtr, other.flags.DevPtr+64); err != nil {
				return err
			}
			for atomic.LoadUint32((*uint32)(other.flags.Ptr(64))) == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			atomic.StoreUint32((*uint32)(other.flags.Ptr(0)), 1)
			return other.s.Sync()
		}},
		{"synchronous copy on the legacy stream", true, func() error { return g.CopyHtoD(spare.Ptr, make([]byte, 4096)) }},
		{"HostAllocMapped", false, func() (err error) { hm, err = g.HostAllocMapped(4096); return err }},
		{"cuMemFreeHost", false, func() error { return hm.Free() }},
		{"NewNonBlockingStream", false, func() (err error) { ns, err = g.NewNonBlockingStream(); return err }},
		{"cuStreamDestroy", false, func() error { return ns.Close() }},
		{"HostRegisterMapped", true, func() (err error) { reg, err = g.HostRegisterMapped(page); return err }},
		{"its unregistration", false, func() error { return reg.Free() }},
		{"AllocAsync and FreeAsync on a non-blocking stream", false, func() error {
			p, err := g.AllocAsync(1<<20, s2)
			if err != nil {
				return err
			}
			return errors.Join(g.FreeAsync(p, s2), s2.Sync())
		}},
		{"cuMemAlloc", false, func() (err error) { b, err = g.Alloc(1 << 20); return err }},
		{"cuMemFree", false, func() error { return b.Free() }},
		{"cuModuleLoadData", false, func() (err error) { mod, err = g.LoadPTX([]byte(spinPTX)); return err }},
		{"cuModuleUnload", false, func() error { return mod.Close() }},
		{"JIT link and load", false, func() error {
			m, err := g.Link(PTXInput{Name: "spin.ptx", PTX: []byte(spinPTX)})
			if err != nil {
				return err
			}
			mod = m
			return nil
		}},
		{"unloading the linked module", false, func() error { return mod.Close() }},
	}
	for _, o := range ops {
		sp.start(t)
		done := make(chan error, 1)
		go func() { done <- o.f() }()
		waited := false
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", o.name, err)
			}
		case <-time.After(time.Second):
			waited = true
		}
		sp.stop(t)
		if waited {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s, after the kernel stopped: %v", o.name, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still waits 10 s after the kernel stopped", o.name)
			}
		}
		if waited && o.mustPass {
			t.Errorf("%s waited for the persistent kernel", o.name)
		}
		t.Logf("beside a persistent kernel: %-60s %s", o.name, map[bool]string{true: "WAITS for it", false: "does not wait"}[waited])
	}
}

// The JIT linker joins a kernel that calls an extern function with the PTX
// that defines it (testdata/link_*.cu, compiled as `make ptx` compiles);
// the kernel without it is refused with the driver's log.
func TestLinkExternFunction(t *testing.T) {
	g := noLockDevice(t)
	caller, err := os.ReadFile("testdata/link_caller.ptx")
	if err != nil {
		t.Fatal(err)
	}
	user, err := os.ReadFile("testdata/link_user.ptx")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Link(PTXInput{Name: "link_caller.ptx", PTX: caller}); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), "user_fn") {
		t.Fatalf("a link without the function: %v, want ErrLink naming user_fn", err)
	}
	mod, err := g.Link(PTXInput{Name: "link_caller.ptx", PTX: caller}, PTXInput{Name: "link_user.ptx", PTX: user})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close()
	f, err := mod.Function("caller")
	if err != nil {
		t.Fatal(err)
	}
	out, err := g.HostAllocMapped(32 * 8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	s, err := g.NewNonBlockingStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := f.Launch(s, 1, 32, 0, out.DevPtr, out.DevPtr); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if v := *(*uint64)(out.Ptr(uint64(8 * i))); v != uint64(16000+i) {
			t.Fatalf("thread %d wrote %d, want %d", i, v, 16000+i)
		}
	}
}
