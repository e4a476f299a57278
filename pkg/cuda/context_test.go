package cuda

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// driverCall is one call a recording driver saw.
type driverCall struct {
	fn  sym
	arg uintptr // the first argument
	tid int     // the OS thread it ran on
}

// recorder is a driver whose context and allocation functions record
// their calls and succeed; cuMemAlloc_v2 hands out 0x10000.
type recorder struct {
	mu    sync.Mutex
	calls []driverCall
}

func (r *recorder) add(f sym, arg uintptr) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, driverCall{f, arg, unix.Gettid()})
	return 0
}

func (r *recorder) take() []driverCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func recordingDriver(t *testing.T) (*Driver, *recorder) {
	t.Helper()
	r := &recorder{}
	d := &Driver{}
	one := func(f sym) uintptr {
		return purego.NewCallback(func(a uintptr) uintptr { return r.add(f, a) })
	}
	d.fns[cuCtxPushCurrent_v2] = one(cuCtxPushCurrent_v2)
	d.fns[cuCtxPopCurrent_v2] = one(cuCtxPopCurrent_v2)
	d.fns[cuMemAlloc_v2] = purego.NewCallback(func(p unsafe.Pointer, size uintptr) uintptr {
		*(*uint64)(p) = 0x10000
		return r.add(cuMemAlloc_v2, size)
	})
	d.fns[cuPointerSetAttribute] = purego.NewCallback(func(v, attr, ptr uintptr) uintptr { return r.add(cuPointerSetAttribute, attr) })
	d.fns[cuMemFree_v2] = one(cuMemFree_v2)
	return d, r
}

// A call that needs the context pushes its Device's context, on the
// thread the call runs on, and pops it after: no Lock by the caller, and
// two devices' objects mix on one goroutine.
func TestCallsBindTheirContext(t *testing.T) {
	d, r := recordingDriver(t)
	g1, g2 := &Device{drv: d, ctx: 0x1111}, &Device{drv: d, ctx: 0x2222}
	b1, err := g1.Alloc(1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := g2.Alloc(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Free(); err != nil {
		t.Fatal(err)
	}
	calls := r.take()
	var got []sym
	for _, c := range calls {
		got = append(got, c.fn)
	}
	push, pop := cuCtxPushCurrent_v2, cuCtxPopCurrent_v2
	want := []sym{push, cuMemAlloc_v2, pop, push, cuPointerSetAttribute, pop,
		push, cuMemAlloc_v2, pop, push, cuPointerSetAttribute, pop,
		push, cuMemFree_v2, pop}
	if !slices.Equal(got, want) {
		t.Fatalf("driver calls %v, want %v", got, want)
	}
	ctxs := []uintptr{0x1111, 0x1111, 0x2222, 0x2222, 0x1111}
	for i := 0; i < len(calls); i += 3 {
		if calls[i].arg != ctxs[i/3] {
			t.Errorf("call %d pushed context %#x, want %#x", i/3, calls[i].arg, ctxs[i/3])
		}
		if calls[i].tid != calls[i+1].tid || calls[i+1].tid != calls[i+2].tid {
			t.Errorf("call %d: push, call and pop on threads %d, %d, %d", i/3, calls[i].tid, calls[i+1].tid, calls[i+2].tid)
		}
	}
	if b2.Ptr != 0x10000 {
		t.Errorf("allocation at %#x", b2.Ptr)
	}
}

// A device found by DeviceAt holds no context: what needs one fails with
// ErrorInvalidContext, and the driver never sees the call.
func TestNoContextNoCall(t *testing.T) {
	d, r := recordingDriver(t)
	at := &Device{drv: d}
	if _, err := at.Alloc(1); !errors.Is(err, ErrorInvalidContext) {
		t.Errorf("Alloc on a device without a context: %v", err)
	}
	if _, err := at.NewStream(); !errors.Is(err, ErrorInvalidContext) {
		t.Errorf("NewStream on a device without a context: %v", err)
	}
	if err := at.Lock(); !errors.Is(err, ErrorInvalidContext) {
		t.Errorf("Lock on a device without a context: %v", err)
	}
	if c := r.take(); len(c) != 0 {
		t.Errorf("the driver saw %v", c)
	}
}

// A failed push reaches neither the call nor a pop.
func TestFailedPushCallsNothing(t *testing.T) {
	d, r := recordingDriver(t)
	d.fns[cuCtxPushCurrent_v2] = purego.NewCallback(func(a uintptr) uintptr { r.add(cuCtxPushCurrent_v2, a); return uintptr(ErrorInvalidContext) })
	g := &Device{drv: d, ctx: 1}
	if _, err := g.Alloc(1); !errors.Is(err, ErrorInvalidContext) {
		t.Fatalf("Alloc with a failing push: %v", err)
	}
	if c := r.take(); len(c) != 1 || c[0].fn != cuCtxPushCurrent_v2 {
		t.Fatalf("the driver saw %v", c)
	}
}

// The mapped-memory calls bind their context as every other call does:
// HostAllocMapped and HostRegisterMapped push the device's context for
// each driver call and pop it after, so neither needs Lock.
func TestMappedCallsBindTheirContext(t *testing.T) {
	d, r := recordingDriver(t)
	host := make([]byte, 4096)
	d.fns[cuMemHostAlloc] = purego.NewCallback(func(p unsafe.Pointer, size, flags uintptr) uintptr {
		*(*unsafe.Pointer)(p) = unsafe.Pointer(&host[0])
		return r.add(cuMemHostAlloc, size)
	})
	d.fns[cuMemHostRegister_v2] = purego.NewCallback(func(p, size, flags uintptr) uintptr { return r.add(cuMemHostRegister_v2, size) })
	d.fns[cuMemHostGetDevicePointer_v2] = purego.NewCallback(func(p unsafe.Pointer, host, flags uintptr) uintptr {
		*(*uint64)(p) = 0x20000
		return r.add(cuMemHostGetDevicePointer_v2, host)
	})
	g := &Device{drv: d, ctx: 0x3333}
	m, err := g.HostAllocMapped(4096)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := g.HostRegisterMapped(make([]byte, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if m.DevPtr != 0x20000 || reg.DevPtr != 0x20000 {
		t.Fatalf("device pointers %#x, %#x", m.DevPtr, reg.DevPtr)
	}
	calls := r.take()
	var got []sym
	for _, c := range calls {
		got = append(got, c.fn)
	}
	push, pop := cuCtxPushCurrent_v2, cuCtxPopCurrent_v2
	want := []sym{push, cuMemHostAlloc, pop, push, cuMemHostGetDevicePointer_v2, pop,
		push, cuMemHostRegister_v2, pop, push, cuMemHostGetDevicePointer_v2, pop}
	if !slices.Equal(got, want) {
		t.Fatalf("driver calls %v, want %v", got, want)
	}
	for i := 0; i < len(calls); i += 3 {
		if calls[i].arg != 0x3333 || calls[i].tid != calls[i+1].tid || calls[i+1].tid != calls[i+2].tid {
			t.Errorf("call %d: pushed %#x on threads %d, %d, %d", i/3, calls[i].arg, calls[i].tid, calls[i+1].tid, calls[i+2].tid)
		}
	}
}
