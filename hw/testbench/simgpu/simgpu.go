// Package simgpu is the client of the rig's simulated GPU (/dev/nvp2p_sim):
// allocation and free of "GPU memory" as cudaMalloc and cudaFree would,
// CPU access to it through mmap, its page table, dma-buf export and the
// simulator's counters. It mirrors hw/testbench/nvp2p_sim/nvp2p_sim_uapi.h.
package simgpu

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/stream"
)

// DevicePath is the simulated GPU's control device.
const DevicePath = "/dev/nvp2p_sim"

// PageSize is the GPU page size the simulator hands out.
const PageSize = 64 << 10

// Pattern is how an allocation's pages are laid out in VRAM.
type Pattern uint32

// Layouts.
const (
	Contiguous Pattern = iota // one run
	Fragmented                // no two neighbours contiguous
	RandomRuns                // runs of 1-4 pages in random order
)

type allocArg struct {
	Size    uint64
	Pattern uint32
	Seed    uint32
	VA      uint64
	Pages   uint64
}

type tableArg struct {
	VA      uint64
	Entries uint64
	Addrs   uint64
}

// Counters are the simulator's live object counts.
type Counters struct {
	LiveAllocs     uint64
	LivePins       uint64
	CallbacksFired uint64
	FreePages      uint64
	TotalPages     uint64
	BAR            uint64
	LiveDmabufs    uint64
	Caps           uint64 // CapDmabuf
}

// CapDmabuf in Counters.Caps: the simulated driver exports dma-bufs
// (NVIDIA's open one does, the proprietary one does not).
const CapDmabuf = 1 << 0

type exportArg struct {
	VA    uint64
	Size  uint64
	FD    int32
	Flags uint32
}

func ioc(dir, nr, size uintptr) uintptr { return dir<<30 | size<<16 | 'N'<<8 | nr }

var (
	iocAlloc    = ioc(3, 0, unsafe.Sizeof(allocArg{}))
	iocFree     = ioc(1, 1, 8)
	iocTable    = ioc(3, 2, unsafe.Sizeof(tableArg{}))
	iocCounters = ioc(2, 3, unsafe.Sizeof(Counters{}))
	iocExport   = ioc(3, 4, unsafe.Sizeof(exportArg{}))
)

// GPU is an open simulated GPU. Its allocations die when it is closed.
type GPU struct {
	f      *os.File
	mapped []*Alloc // allocations with a CPU mapping to undo at Close
}

// Open opens the simulated GPU.
func Open() (*GPU, error) {
	f, err := os.OpenFile(DevicePath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("simgpu: %w", err)
	}
	return &GPU{f: f}, nil
}

// Close frees every allocation made through g, revoking their pins. CPU
// mappings hold the device open, so they go first.
func (g *GPU) Close() error {
	for _, a := range g.mapped {
		a.unmap()
	}
	g.mapped = nil
	return g.f.Close()
}

func (g *GPU) ioctl(req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, g.f.Fd(), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// Alloc is an allocation of simulated GPU memory.
type Alloc struct {
	VA    uint64
	Size  uint64
	Pages int
	gpu   *GPU
	mem   []byte
}

// Alloc allocates size bytes (rounded up to 64 KiB) laid out by pattern.
func (g *GPU) Alloc(size uint64, p Pattern, seed uint32) (*Alloc, error) {
	a := allocArg{Size: size, Pattern: uint32(p), Seed: seed}
	if err := g.ioctl(iocAlloc, unsafe.Pointer(&a)); err != nil {
		return nil, fmt.Errorf("simgpu: alloc %d bytes: %w", size, err)
	}
	return &Alloc{VA: a.VA, Size: a.Pages * PageSize, Pages: int(a.Pages), gpu: g}, nil
}

// Free frees the allocation, revoking its pins.
func (a *Alloc) Free() error {
	a.unmap()
	va := a.VA
	if err := a.gpu.ioctl(iocFree, unsafe.Pointer(&va)); err != nil {
		return fmt.Errorf("simgpu: free %#x: %w", a.VA, err)
	}
	return nil
}

// Bytes maps the allocation for the CPU (write-combined, as BAR1 is).
func (a *Alloc) Bytes() ([]byte, error) {
	if a.mem != nil {
		return a.mem, nil
	}
	m, err := unix.Mmap(int(a.gpu.f.Fd()), int64(a.VA), int(a.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("simgpu: map %#x: %w", a.VA, err)
	}
	a.mem = m
	a.gpu.mapped = append(a.gpu.mapped, a)
	return m, nil
}

func (a *Alloc) unmap() {
	if a.mem != nil {
		unix.Munmap(a.mem)
		a.mem = nil
	}
}

// Table returns the bus address of each page.
func (a *Alloc) Table() ([]uint64, error) {
	addrs := make([]uint64, a.Pages)
	t := tableArg{VA: a.VA, Entries: uint64(len(addrs)), Addrs: uint64(uintptr(unsafe.Pointer(&addrs[0])))}
	if err := a.gpu.ioctl(iocTable, unsafe.Pointer(&t)); err != nil {
		return nil, fmt.Errorf("simgpu: table %#x: %w", a.VA, err)
	}
	return addrs, nil
}

// ExportFlags choose how a dma-buf is exported (nvp2p_sim_uapi.h).
type ExportFlags uint32

// Export flags.
const (
	// ExportPCIe is CUDA's PCIe mapping type: the importer gets the BAR's
	// addresses even where an IOMMU translates for it.
	ExportPCIe ExportFlags = 1 << 0
	// ExportDynamic is a dynamic exporter that revokes: freeing the
	// allocation revokes the export through move_notify.
	ExportDynamic ExportFlags = 1 << 1
)

// ExportDmabuf exports size bytes at va (inside the allocation) as a
// dma-buf, as CUDA does (static, mapped for the importer), and returns its
// file.
func (a *Alloc) ExportDmabuf(va, size uint64) (*os.File, error) {
	return a.ExportDmabufWith(va, size, 0)
}

// ExportDmabufWith is ExportDmabuf with flags.
func (a *Alloc) ExportDmabufWith(va, size uint64, flags ExportFlags) (*os.File, error) {
	e := exportArg{VA: va, Size: size, Flags: uint32(flags)}
	if err := a.gpu.ioctl(iocExport, unsafe.Pointer(&e)); err != nil {
		return nil, fmt.Errorf("simgpu: export %#x+%d: %w", va, size, err)
	}
	return os.NewFile(uintptr(e.FD), "dmabuf"), nil
}

// Counters returns the simulator's counters.
func (g *GPU) Counters() (Counters, error) {
	var c Counters
	err := g.ioctl(iocCounters, unsafe.Pointer(&c))
	if err != nil {
		return c, fmt.Errorf("simgpu: counters: %w", err)
	}
	return c, nil
}

// StreamGPU is the simulated GPU as pkg/stream's GPU: allocations laid
// out by Pattern, CPU-visible, filled in compat mode by CPU copies, and
// consumed in resident sessions by a Consumer (StartConsumer).
type StreamGPU struct {
	GPU     *GPU
	Pattern Pattern
	// Tune, if set, sees each resident session's Consumer before it
	// runs: to make it slow or stall it.
	Tune func(*Consumer)
}

// Alloc implements stream.GPU.
func (m StreamGPU) Alloc(size uint64) (stream.GPUBuffer, error) {
	a, err := m.GPU.Alloc(size, m.Pattern, 1)
	if err != nil {
		return nil, err
	}
	if _, err := a.Bytes(); err != nil {
		a.Free()
		return nil, err
	}
	return streamBuffer{a}, nil
}

// RegisterHost implements stream.GPU: CPU copies need nothing.
func (StreamGPU) RegisterHost([]byte) (func() error, error) { return func() error { return nil }, nil }

// DmabufSupported implements stream.DmabufGPU, as CUDA's
// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED would answer.
func (m StreamGPU) DmabufSupported() (bool, error) {
	c, err := m.GPU.Counters()
	return c.Caps&CapDmabuf != 0, err
}

type streamBuffer struct{ a *Alloc }

// ExportDmabuf implements stream.DmabufBuffer.
func (b streamBuffer) ExportDmabuf(off, n uint64) (*os.File, error) {
	return b.a.ExportDmabuf(b.a.VA+off, n)
}

func (b streamBuffer) Addr() uint64  { return b.a.VA }
func (b streamBuffer) Size() uint64  { return b.a.Size }
func (b streamBuffer) Bytes() []byte { return b.a.mem }
func (b streamBuffer) Free() error   { return b.a.Free() }

// CopyIn copies at once, as the CPU writing through BAR1 would.
func (b streamBuffer) CopyIn(off uint64, src []byte) (stream.Copy, error) {
	if b.a.mem == nil {
		return nil, fmt.Errorf("simgpu: %#x is no longer mapped", b.a.VA)
	}
	if err := checkCopy(off, len(src), b.a.Size); err != nil {
		return nil, err
	}
	copy(b.a.mem[off:], src)
	return doneCopy{}, nil
}

// checkCopy refuses a copy of n bytes to offset off that does not fit in
// size bytes.
func checkCopy(off uint64, n int, size uint64) error {
	if off > size || uint64(n) > size-off {
		return fmt.Errorf("simgpu: copy of %d bytes to offset %d of %d", n, off, size)
	}
	return nil
}

type doneCopy struct{}

func (doneCopy) Wait() error { return nil }
