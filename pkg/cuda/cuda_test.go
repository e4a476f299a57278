package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/ebitengine/purego"
)

// Without a CUDA driver the package says so, plainly.
func TestNoDriver(t *testing.T) {
	_, err := openLib("libcuda-not-installed.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open without the library: %v, want ErrNoDriver", err)
	}
}

// Open either loads the driver, which then answers, or reports that there
// is none: no third outcome on any machine.
func TestOpen(t *testing.T) {
	d, err := Open()
	if err != nil {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Open: %v, want a driver or ErrNoDriver", err)
		}
		return
	}
	v, err := d.Version()
	if err != nil || v < 1000 {
		t.Fatalf("driver version %d, %v", v, err)
	}
}

func TestErrorMatchesResult(t *testing.T) {
	err := fmt.Errorf("allocating: %w", &Error{Op: "cuMemAlloc_v2", Code: 2, Msg: "out of memory"})
	if !errors.Is(err, ErrorOutOfMemory) {
		t.Fatalf("%v does not match ErrorOutOfMemory", err)
	}
	if errors.Is(err, ErrorInvalidValue) {
		t.Fatalf("%v matches ErrorInvalidValue", err)
	}
}

// A function the loaded driver lacks fails when called, with its name.
func TestMissingFunction(t *testing.T) {
	d := &Driver{}
	err := d.call(cuMemGetHandleForAddressRange)
	var e *Error
	if !errors.As(err, &e) || e.Op != "cuMemGetHandleForAddressRange" || !errors.Is(err, ErrorNotFound) {
		t.Fatalf("calling a missing function: %v", err)
	}
}

// noDriver is a device whose driver has no functions: a call that reaches
// it fails with ErrorNotFound, one refused before it with
// ErrorInvalidValue.
func noDriver() *Device { return &Device{drv: &Driver{}, ctx: 1} }

// Asynchronous copies take only the bytes of their page-locked buffer: a
// range outside it, however its end wraps, never reaches the driver.
func TestHostBufferRange(t *testing.T) {
	g := noDriver()
	s := &Stream{dev: g}
	h := &HostBuffer{b: make([]byte, 4096), dev: g, release: cuMemFreeHost}
	for _, tc := range []struct {
		off, n uint64
		want   error
	}{
		{0, 4096, ErrorNotFound},
		{4095, 1, ErrorNotFound},
		{0, 0, nil},
		{4096, 0, nil},
		{4096, 1, ErrorInvalidValue},
		{1, 4096, ErrorInvalidValue},
		{4097, 0, ErrorInvalidValue},
		{1, math.MaxUint64, ErrorInvalidValue},
		{math.MaxUint64, 2, ErrorInvalidValue},
	} {
		if err := s.CopyHtoD(0x10000, h, tc.off, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("CopyHtoD of %d bytes at %d of 4096: %v, want %v", tc.n, tc.off, err, tc.want)
		}
		if err := s.CopyDtoH(h, tc.off, 0x10000, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("CopyDtoH of %d bytes at %d of 4096: %v, want %v", tc.n, tc.off, err, tc.want)
		}
	}
}

// A freed buffer has no bytes, and neither copies nor a second Free take
// it.
func TestHostBufferFreed(t *testing.T) {
	g := noDriver()
	s := &Stream{dev: g}
	h := &HostBuffer{dev: g, release: cuMemHostUnregister}
	if h.Bytes() != nil {
		t.Fatal("a freed buffer has bytes")
	}
	if err := s.CopyHtoD(0x10000, h, 0, 1); !errors.Is(err, ErrorInvalidValue) {
		t.Errorf("CopyHtoD from a freed buffer: %v", err)
	}
	if err := s.CopyDtoH(h, 0, 0x10000, 1); !errors.Is(err, ErrorInvalidValue) {
		t.Errorf("CopyDtoH to a freed buffer: %v", err)
	}
	if err := h.Free(); err != nil {
		t.Errorf("second Free: %v, want nil", err)
	}
	// A Free the driver refuses leaves the buffer as it was.
	h = &HostBuffer{b: make([]byte, 16), dev: g, release: cuMemFreeHost}
	if err := h.Free(); !errors.Is(err, ErrorNotFound) || len(h.Bytes()) != 16 {
		t.Errorf("failed Free: %v, %d bytes left", err, len(h.Bytes()))
	}
}

// Empty buffers are refused before the driver sees them.
func TestHostBufferEmpty(t *testing.T) {
	g := noDriver()
	if _, err := g.HostAlloc(0); !errors.Is(err, ErrorInvalidValue) {
		t.Errorf("HostAlloc(0): %v", err)
	}
	if _, err := g.HostAlloc(1); !errors.Is(err, ErrorNotFound) {
		t.Errorf("HostAlloc(1) did not reach the driver: %v", err)
	}
	if _, err := g.HostRegister(nil); !errors.Is(err, ErrorInvalidValue) {
		t.Errorf("HostRegister(nil): %v", err)
	}
	if err := g.CopyHtoD(0x10000, nil); err != nil {
		t.Errorf("synchronous copy of nothing to the device: %v", err)
	}
	if err := g.CopyDtoH(nil, 0x10000); err != nil {
		t.Errorf("synchronous copy of nothing from the device: %v", err)
	}
}

func TestHostBufferOffset(t *testing.T) {
	mem := make([]byte, 8192)
	h := &HostBuffer{b: mem[1024:5120]}
	for _, tc := range []struct {
		name string
		b    []byte
		off  uint64
		ok   bool
	}{
		{"all of it", mem[1024:5120], 0, true},
		{"inside", mem[2000:3000], 976, true},
		{"empty, at the end", mem[5120:5120], 4096, true},
		{"before it", mem[1000:1100], 0, false},
		{"across its end", mem[5000:5200], 0, false},
		{"after it", mem[5121:5121], 0, false},
		{"elsewhere", make([]byte, 16), 0, false},
		{"nil", nil, 0, false},
	} {
		if off, ok := h.Offset(tc.b); off != tc.off || ok != tc.ok {
			t.Errorf("%s: offset %d, %v; want %d, %v", tc.name, off, ok, tc.off, tc.ok)
		}
	}
	if _, ok := (&HostBuffer{}).Offset(mem); ok {
		t.Error("a freed buffer holds memory")
	}
}

// succeeding returns a driver whose functions fns succeed (libc's
// sched_yield, which takes no arguments and returns 0) and whose others
// are missing.
func succeeding(t *testing.T, fns ...sym) *Driver {
	t.Helper()
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skip(err)
	}
	yield, err := purego.Dlsym(libc, "sched_yield")
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{}
	for _, f := range append(fns, cuCtxPushCurrent_v2, cuCtxPopCurrent_v2) {
		d.fns[f] = yield
	}
	return d
}

// Every release reaches the driver once: after the first succeeded, a
// second call returns nil without a driver call, which could free an
// allocation made since at the same address. Here the driver loses its
// release functions after the first call, so a second call that reached
// it would fail with ErrorNotFound.
func TestReleasesOnce(t *testing.T) {
	releases := []sym{cuDevicePrimaryCtxRelease_v2, cuMemFree_v2, cuStreamDestroy_v2, cuEventDestroy_v2,
		cuModuleUnload, cuMemUnmap, cuMemAddressFree, cuMemRelease, cuMemPoolDestroy, cuMemFreeHost}
	d := succeeding(t, releases...)
	g := &Device{drv: d, ctx: 1}
	h := &HostBuffer{b: make([]byte, 16), dev: g, release: cuMemFreeHost}
	objs := map[string]func() error{
		"Device.Close":       g.Close,
		"Buffer.Free":        (&Buffer{Ptr: 0x10000, dev: g}).Free,
		"Stream.Close":       (&Stream{s: 1, dev: g}).Close,
		"Event.Close":        (&Event{e: 1, dev: g}).Close,
		"Module.Close":       (&Module{m: 1, dev: g}).Close,
		"VMMBuffer.Free":     (&VMMBuffer{Ptr: 0x10000, Size: 1 << 21, dev: g}).Free,
		"MemoryPool.Destroy": (&MemoryPool{h: 1, dev: g}).Destroy,
		"HostBuffer.Free":    h.Free,
	}
	for name, release := range objs {
		if err := release(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, f := range releases {
		d.fns[f] = 0
	}
	for name, release := range objs {
		if err := release(); err != nil {
			t.Errorf("second %s: %v, want nil", name, err)
		}
	}
	if err := g.Lock(); !errors.Is(err, ErrorInvalidContext) || err.Error() != "cuda: Lock: device closed (201)" {
		t.Errorf("Lock after Close: %v", err)
	}
}

// A release the driver refuses releases nothing, and may be retried.
func TestFailedReleaseRetries(t *testing.T) {
	d := succeeding(t)
	b := &Buffer{Ptr: 0x10000, dev: &Device{drv: d, ctx: 1}}
	if err := b.Free(); !errors.Is(err, ErrorNotFound) {
		t.Fatalf("Free without cuMemFree: %v", err)
	}
	d = succeeding(t, cuMemFree_v2)
	b.dev.drv = d
	if err := b.Free(); err != nil {
		t.Fatalf("retried Free: %v", err)
	}
}
