//go:build linux && gpu

package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
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
	if err := reg.Free(); err != nil {
		t.Fatalf("second Free: %v, want nil: a freed buffer frees once", err)
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

// checkExport exports [ptr, ptr+size) as a dma-buf where the GPU exports
// them, and reports what CUDA said.
func checkExport(t *testing.T, g *Device, what string, ptr, size uint64) error {
	t.Helper()
	if v, err := g.Attribute(AttrDmaBufSupported); err != nil || v == 0 {
		return errors.New("no dma-buf support")
	}
	fd, err := g.ExportDmabufRange(ptr, size)
	if err == nil {
		unix.Close(fd)
	}
	t.Logf("%s: dma-buf export of %d bytes: %v", what, size, err)
	return err
}

// Each kind of CUDA memory gets a clear answer before anything is pinned:
// cuMemAlloc and RDMA-capable VMM memory are pinnable, VMM memory created
// without gpuDirectRDMACapable and a range running into a second
// allocation are refused with what to change, and pool memory is
// pinnable exactly when CUDA says the pool's memory is RDMA capable.
func TestPeerMemoryKinds(t *testing.T) {
	g := device(t)
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	b, err := g.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	r, err := g.CheckPeerRange(b.Ptr+64<<10, 1<<20)
	if err != nil || r.Kind != MemAlloc || !r.RDMACapable || r.Start != b.Ptr || r.Size != b.Size {
		t.Fatalf("cuMemAlloc: %+v, %v", r, err)
	}
	if err := checkExport(t, g, "cuMemAlloc", b.Ptr, b.Size); err != nil {
		t.Errorf("cuMemAlloc memory does not export: %v", err)
	}
	// A range past the end of the allocation: into the next one or into
	// nothing, refused either way.
	b2, err := g.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Free()
	if _, err := g.CheckPeerRange(b.Ptr, b.Size+64<<10); !errors.Is(err, ErrSpansAllocations) {
		t.Errorf("range past a cuMemAlloc allocation: %v, want ErrSpansAllocations", err)
	} else {
		t.Logf("two allocations: %v", err)
	}

	for _, rdma := range []bool{true, false} {
		v, err := g.AllocVMM(2<<20, rdma)
		if err != nil {
			t.Fatalf("cuMemCreate (gpuDirectRDMACapable %v): %v", rdma, err)
		}
		r, err := g.CheckPeerRange(v.Ptr, v.Size)
		if rdma && (err != nil || r.Kind != MemVMM || !r.RDMACapable) {
			t.Errorf("RDMA-capable VMM memory: %+v, %v", r, err)
		}
		if !rdma && (!errors.Is(err, ErrNotRDMACapable) || r.Kind != MemVMM || !strings.Contains(err.Error(), "gpuDirectRDMACapable = 1")) {
			t.Errorf("VMM memory without gpuDirectRDMACapable: %+v, %v; want ErrNotRDMACapable saying what to set", r, err)
		} else if !rdma {
			t.Logf("VMM without gpuDirectRDMACapable: %v", err)
		}
		exportErr := checkExport(t, g, fmt.Sprintf("VMM (gpuDirectRDMACapable %v)", rdma), v.Ptr, v.Size)
		if rdma && exportErr != nil {
			t.Errorf("RDMA-capable VMM memory does not export: %v", exportErr)
		}
		if err := v.Free(); err != nil {
			t.Fatal(err)
		}
	}

	// Allocations from the default pool share a chunk of it, and its
	// range: a range from one past its end, into the next or into free
	// pool memory, is refused all the same.
	p1, err := g.AllocAsync(4<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := g.AllocAsync(4<<20, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	_, err = g.CheckPeerRange(p1, 4<<20+64<<10)
	t.Logf("pool allocations at %#x and %#x: a range from the first into the second: %v", p1, p2, err)
	if !errors.Is(err, ErrSpansAllocations) {
		t.Errorf("range past a pool allocation: %v, want ErrSpansAllocations", err)
	}
	for _, p := range []uint64{p1, p2} {
		if err := g.FreeAsync(p, s); err != nil {
			t.Fatal(err)
		}
	}

	pools := []struct {
		name string
		new  func() (*MemoryPool, error)
	}{
		{"the default pool (cudaMallocAsync)", func() (*MemoryPool, error) { return nil, nil }},
		{"a pool without gpuDirectRDMACapable", func() (*MemoryPool, error) { return g.NewMemoryPool(false) }},
		{"a pool with gpuDirectRDMACapable", func() (*MemoryPool, error) { return g.NewMemoryPool(true) }},
	}
	for _, pc := range pools {
		pool, err := pc.new()
		if err != nil {
			// Drivers before CUDA 13 have no such pool property.
			if !errors.Is(err, ErrorInvalidValue) {
				t.Errorf("%s: %v", pc.name, err)
			}
			t.Logf("%s: this driver cannot create it: %v", pc.name, err)
			continue
		}
		var ptr uint64
		if pool == nil {
			ptr, err = g.AllocAsync(4<<20, s)
		} else {
			ptr, err = pool.AllocAsync(4<<20, s)
		}
		if err != nil {
			t.Fatalf("%s: %v", pc.name, err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		r, err := g.CheckPeerRange(ptr, 4<<20)
		switch {
		case r.Kind != MemPool:
			t.Errorf("%s: kind %v, want a pool", pc.name, r.Kind)
		case err == nil && !r.RDMACapable, err != nil && !errors.Is(err, ErrNotRDMACapable):
			t.Errorf("%s: %+v, %v; want pinnable or ErrNotRDMACapable", pc.name, r, err)
		case err != nil && !strings.Contains(err.Error(), "CUmemPoolProps.gpuDirectRDMACapable"):
			t.Errorf("%s: %v does not say what to change", pc.name, err)
		case pc.name == pools[2].name && err != nil:
			t.Errorf("%s: %v", pc.name, err)
		}
		t.Logf("%s: %+v, %v", pc.name, r, err)
		checkExport(t, g, pc.name, ptr, 4<<20)
		if err := g.FreeAsync(ptr, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if pool != nil {
			if err := pool.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// DeviceAt finds a device by its PCI address without a context: its name
// and attributes read as through the context, and nothing runs on it.
func TestDeviceAt(t *testing.T) {
	g := device(t)
	bdf, err := g.PCIBusID()
	if err != nil {
		t.Fatal(err)
	}
	at, err := g.Driver().DeviceAt(bdf)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	name, _ := g.Name()
	if got, err := at.Name(); err != nil || got != name {
		t.Errorf("DeviceAt(%s): %q, %v; want %q", bdf, got, err, name)
	}
	if err := at.Lock(); !errors.Is(err, ErrorInvalidContext) {
		t.Errorf("Lock of a device without a context: %v", err)
	}
	if _, err := g.Driver().DeviceAt("0000:ff:1f.7"); err == nil {
		t.Error("DeviceAt of an address with no GPU succeeded")
	} else {
		t.Logf("no GPU at 0000:ff:1f.7: %v", err)
	}
}
