//go:build linux && gpu

package cuda

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func device(t *testing.T) *Device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	g, err := OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := g.Lock(); err != nil {
		t.Fatal(err)
	}
	return g
}

// Allocations are whole 64 KiB pages at 64 KiB-aligned addresses, and a
// dma-buf export of a range has that range's size.
func TestAllocAndExport(t *testing.T) {
	g := device(t)
	b, err := g.Alloc(3<<20 + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if b.Ptr%(64<<10) != 0 || b.Size != 3<<20+64<<10 {
		t.Fatalf("allocation at %#x of %d bytes", b.Ptr, b.Size)
	}
	supported, err := g.Attribute(AttrDmaBufSupported)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := b.ExportDmabuf(64<<10, 2<<20)
	if supported == 0 {
		if err == nil {
			t.Fatal("dma-buf export worked on a GPU that says it has no dma-buf support")
		}
		return // and the export fails, as it must
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if n, err := unix.Seek(fd, 0, 2); err != nil || n != 2<<20 {
		t.Fatalf("dma-buf of %d bytes (%v), want 2 MiB", n, err)
	}
}

// Bytes make the round trip: from registered host memory by an async copy,
// through a kernel-free device copy and a memset, back into allocated
// page-locked memory by an async copy, and once more synchronously into Go
// memory.
func TestCopies(t *testing.T) {
	g := device(t)
	const n = 8 << 20
	host, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(host)
	for i := range host {
		host[i] = byte(i * 7)
	}
	reg, err := g.HostRegister(host)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Free()
	back, err := g.HostAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Free()
	a, _ := g.Alloc(n)
	b, _ := g.Alloc(n)
	defer a.Free()
	defer b.Free()
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := g.NewSyncEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := s.CopyHtoD(a.Ptr, reg, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoD(b.Ptr, a.Ptr, n); err != nil {
		t.Fatal(err)
	}
	if err := s.MemsetD8(b.Ptr, 0xAB, 16); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoH(back, 0, b.Ptr, n); err != nil {
		t.Fatal(err)
	}
	if err := e.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := g.CopyDtoH(got, b.Ptr); err != nil {
		t.Fatal(err)
	}
	copy(host[:16], bytes.Repeat([]byte{0xAB}, 16))
	if !bytes.Equal(got, host) {
		t.Fatal("the device copy differs from the host bytes")
	}
	if !bytes.Equal(back.Bytes(), host) {
		t.Fatal("the asynchronous copy back differs from the host bytes")
	}
}

// Unregistered memory is the caller's again: no copy takes it.
func TestHostUnregister(t *testing.T) {
	g := device(t)
	host, err := unix.Mmap(-1, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(host)
	reg, err := g.HostRegister(host)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Free(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Free(); !errors.Is(err, ErrorInvalidValue) {
		t.Fatalf("second Free: %v, want ErrorInvalidValue", err)
	}
	// Registering again works only if the first Free unregistered.
	reg, err = g.HostRegister(host)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Free(); err != nil {
		t.Fatal(err)
	}
}

// Driver errors carry the call, the code and the driver's message.
func TestErrors(t *testing.T) {
	g := device(t)
	if _, err := g.LoadPTX([]byte("this is not PTX")); err == nil {
		t.Fatal("loading garbage as PTX succeeded")
	} else if e := (*Error)(nil); !errors.As(err, &e) || e.Op != "cuModuleLoadData" || e.Code == 0 {
		t.Fatalf("LoadPTX(garbage): %v", err)
	}
	if _, err := g.Alloc(1 << 62); err == nil {
		t.Fatal("allocating 4 EiB succeeded")
	}
}

// NVML finds the CUDA device by its PCI address and reports a BAR1
// aperture: at least 256 MiB, the least any GPU exposes, with free <= total.
func TestBAR1(t *testing.T) {
	g := device(t)
	bar, err := g.BAR1()
	if err != nil {
		t.Fatal(err)
	}
	if bar.Total < 256<<20 || bar.Free > bar.Total {
		t.Fatalf("BAR1 %+v", bar)
	}
	t.Logf("BAR1: %d MiB, %d MiB free", bar.Total>>20, bar.Free>>20)
}
