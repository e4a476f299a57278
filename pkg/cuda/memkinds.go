//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Why a range of GPU memory cannot be pinned for a peer. CheckPeerRange's
// errors match one of them with errors.Is and say what to change.
var (
	ErrNotDeviceMemory  = errors.New("cuda: not device memory")
	ErrSpansAllocations = errors.New("cuda: range spans more than one allocation")
	ErrNotRDMACapable   = errors.New("cuda: memory is not GPUDirect RDMA capable")
)

// MemKind is how GPU memory was allocated.
type MemKind int

// Memory kinds.
const (
	MemAlloc MemKind = iota + 1 // cuMemAlloc (cudaMalloc)
	MemVMM                      // cuMemCreate mapped with cuMemMap
	MemPool                     // cuMemAllocAsync or cuMemAllocFromPoolAsync (cudaMallocAsync)
)

func (k MemKind) String() string {
	switch k {
	case MemAlloc:
		return "cuMemAlloc"
	case MemVMM:
		return "cuMemCreate"
	case MemPool:
		return "memory pool"
	}
	return fmt.Sprintf("MemKind(%d)", int(k))
}

const (
	pointerAttrMemoryType     = 2  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
	pointerAttrBufferID       = 7  // CU_POINTER_ATTRIBUTE_BUFFER_ID
	pointerAttrLegacyIPC      = 10 // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
	pointerAttrRangeStart     = 11 // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
	pointerAttrRangeSize      = 12 // CU_POINTER_ATTRIBUTE_RANGE_SIZE
	pointerAttrMapped         = 13 // CU_POINTER_ATTRIBUTE_MAPPED
	pointerAttrRDMACapable    = 15 // CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
	pointerAttrMempoolHandle  = 17 // CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
	pointerAttrMappingSize    = 18 // CU_POINTER_ATTRIBUTE_MAPPING_SIZE
	pointerAttrMappingBase    = 19 // CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR
	memoryTypeDevice          = 2  // CU_MEMORYTYPE_DEVICE
	memAllocationTypePinned   = 1  // CU_MEM_ALLOCATION_TYPE_PINNED
	memLocationTypeDevice     = 1  // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessFlagsReadWrite   = 3  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memAllocGranularityMinimm = 0  // CU_MEM_ALLOC_GRANULARITY_MINIMUM
)

// PeerRange is what CUDA says of memory a peer is to reach.
type PeerRange struct {
	Kind MemKind
	// Start and Size bound the allocation the range lies in; for pool
	// memory, the pool's chunk that holds it.
	Start, Size uint64
	RDMACapable bool
}

// pointerAttr reads one pointer attribute; every one the package reads
// fits in 8 bytes, and the narrower ones are little-endian integers.
func (g *Device) pointerAttr(attr int, ptr uint64) (uint64, error) {
	var v uint64
	err := g.call(cuPointerGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(ptr))
	return v, err
}

// CheckPeerRange says whether [ptr, ptr+size) can be pinned for a peer's
// DMA, through nvidia_p2p or a dma-buf: device memory, in one allocation,
// GPUDirect RDMA capable.
func (g *Device) CheckPeerRange(ptr, size uint64) (PeerRange, error) {
	var r PeerRange
	if size == 0 || ptr+size < ptr {
		return r, &Error{Op: "CheckPeerRange", Code: int(ErrorInvalidValue), Msg: fmt.Sprintf("range %#x+%d", ptr, size)}
	}
	typ, err := g.pointerAttr(pointerAttrMemoryType, ptr)
	if errors.Is(err, ErrorInvalidValue) {
		return r, fmt.Errorf("%w: CUDA knows no memory at %#x: %w", ErrNotDeviceMemory, ptr, err)
	}
	if err != nil {
		return r, err
	}
	if uint32(typ) != memoryTypeDevice {
		return r, fmt.Errorf("%w: %#x is CUDA memory of type %d (host or managed memory): peers write device memory", ErrNotDeviceMemory, ptr, uint32(typ))
	}
	if r.Start, err = g.pointerAttr(pointerAttrRangeStart, ptr); err != nil {
		return r, err
	}
	if r.Size, err = g.pointerAttr(pointerAttrRangeSize, ptr); err != nil {
		return r, err
	}
	// A VMM range may hold several mappings: the one at ptr bounds it.
	if base, err := g.pointerAttr(pointerAttrMappingBase, ptr); err == nil {
		if n, err := g.pointerAttr(pointerAttrMappingSize, ptr); err == nil && base >= r.Start && n > 0 {
			r.Start, r.Size = base, n
		}
	}
	pool, err := g.pointerAttr(pointerAttrMempoolHandle, ptr)
	if err != nil {
		return r, err
	}
	legacy, err := g.pointerAttr(pointerAttrLegacyIPC, ptr)
	if err != nil {
		return r, err
	}
	switch {
	case pool != 0:
		r.Kind = MemPool
	case uint32(legacy) != 0:
		r.Kind = MemAlloc
	default:
		r.Kind = MemVMM
	}
	end := ptr + size - 1
	// Pool allocations share their range (the pool's chunk): the buffer
	// ID tells them apart.
	if ptr+size <= r.Start+r.Size {
		if id, err := g.pointerAttr(pointerAttrBufferID, ptr); err == nil {
			endID, err := g.pointerAttr(pointerAttrBufferID, end)
			switch {
			case err != nil:
				return r, fmt.Errorf("%w: %#x+%d runs from a %s allocation into unallocated memory: %w",
					ErrSpansAllocations, ptr, size, r.Kind, err)
			case endID != id:
				return r, fmt.Errorf("%w: %#x+%d runs from one %s allocation into another: pin each allocation on its own",
					ErrSpansAllocations, ptr, size, r.Kind)
			}
		}
	}
	if ptr+size > r.Start+r.Size {
		what := "unmapped address space"
		if mapped, err := g.pointerAttr(pointerAttrMapped, end); err == nil && uint32(mapped) != 0 {
			what = "another allocation"
		}
		return r, fmt.Errorf("%w: %#x+%d runs %d bytes past its %s of %d bytes at %#x into %s: pin each allocation on its own",
			ErrSpansAllocations, ptr, size, ptr+size-(r.Start+r.Size), r.Kind, r.Size, r.Start, what)
	}
	rdma, err := g.pointerAttr(pointerAttrRDMACapable, ptr)
	if err != nil {
		return r, err
	}
	r.RDMACapable = uint32(rdma) != 0
	if !r.RDMACapable {
		return r, fmt.Errorf("%w: %s memory at %#x: %s", ErrNotRDMACapable, r.Kind, r.Start, rdmaHint[r.Kind])
	}
	return r, nil
}

var rdmaHint = map[MemKind]string{
	MemAlloc: "GPUDirect RDMA is off on this GPU or driver",
	MemVMM:   "create it with CUmemAllocationProp.allocFlags.gpuDirectRDMACapable = 1",
	MemPool:  "allocate from a pool created with CUmemPoolProps.gpuDirectRDMACapable = 1 where the driver has it (R580 refuses it), or with cuMemAlloc",
}

// memAllocationProp is CUmemAllocationProp.
type memAllocationProp struct {
	typ, requestedHandleTypes uint32
	locType                   uint32
	locID                     int32
	win32HandleMetaData       uintptr
	compressionType           uint8
	gpuDirectRDMACapable      uint8
	usage                     uint16
	_                         [4]uint8
}

// memPoolProps is CUmemPoolProps (88 bytes; gpuDirectRDMACapable is
// reserved, and must be zero, in older headers).
type memPoolProps struct {
	allocType, handleTypes  uint32
	locType                 uint32
	locID                   int32
	win32SecurityAttributes uintptr
	maxSize                 uint64
	usage                   uint16
	gpuDirectRDMACapable    uint8
	_                       [53]uint8
}

// memAccessDesc is CUmemAccessDesc.
type memAccessDesc struct {
	locType uint32
	locID   int32
	flags   uint32
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// VMMBuffer is memory from CUDA's virtual memory management API: one
// physical allocation (cuMemCreate) mapped read-write at a reserved range.
type VMMBuffer struct {
	Ptr     uint64
	Size    uint64
	handle  uint64
	dev     *Device
	release releaseOnce
}

// AllocVMM allocates size bytes (rounded up to the allocation
// granularity) with cuMemCreate, GPUDirect RDMA capable if rdma, and maps
// them.
func (g *Device) AllocVMM(size uint64, rdma bool) (*VMMBuffer, error) {
	prop := memAllocationProp{typ: memAllocationTypePinned, locType: memLocationTypeDevice, locID: g.dev,
		gpuDirectRDMACapable: boolByte(rdma)}
	var gran uint64
	if err := g.call(cuMemGetAllocationGranularity, uintptr(unsafe.Pointer(&gran)), uintptr(unsafe.Pointer(&prop)), memAllocGranularityMinimm); err != nil {
		return nil, err
	}
	size = (size + gran - 1) / gran * gran
	b := &VMMBuffer{Size: size, dev: g}
	if err := g.call(cuMemCreate, uintptr(unsafe.Pointer(&b.handle)), uintptr(size), uintptr(unsafe.Pointer(&prop)), 0); err != nil {
		return nil, err
	}
	if err := g.call(cuMemAddressReserve, uintptr(unsafe.Pointer(&b.Ptr)), uintptr(size), uintptr(gran), 0, 0); err != nil {
		g.call(cuMemRelease, uintptr(b.handle))
		return nil, err
	}
	if err := g.call(cuMemMap, uintptr(b.Ptr), uintptr(size), 0, uintptr(b.handle), 0); err != nil {
		g.call(cuMemAddressFree, uintptr(b.Ptr), uintptr(size))
		g.call(cuMemRelease, uintptr(b.handle))
		return nil, err
	}
	access := memAccessDesc{locType: memLocationTypeDevice, locID: g.dev, flags: memAccessFlagsReadWrite}
	if err := g.call(cuMemSetAccess, uintptr(b.Ptr), uintptr(size), uintptr(unsafe.Pointer(&access)), 1); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// Free unmaps and releases the memory, once.
func (b *VMMBuffer) Free() error {
	d := b.dev.drv
	return b.release.do(func() error {
		return errors.Join(d.call(cuMemUnmap, uintptr(b.Ptr), uintptr(b.Size)),
			d.call(cuMemAddressFree, uintptr(b.Ptr), uintptr(b.Size)),
			d.call(cuMemRelease, uintptr(b.handle)))
	})
}

// ExportDmabufRange returns a dma-buf file descriptor for [ptr, ptr+size)
// of device memory of any kind.
func (g *Device) ExportDmabufRange(ptr, size uint64) (int, error) {
	var fd int32
	err := g.call(cuMemGetHandleForAddressRange, uintptr(unsafe.Pointer(&fd)), uintptr(ptr),
		uintptr(size), memRangeHandleDmaBuf, 0)
	return int(fd), err
}

// MemoryPool is a CUDA memory pool (cuMemPoolCreate), the memory
// cudaMallocAsync hands out.
type MemoryPool struct {
	h       uintptr
	dev     *Device
	release releaseOnce
}

// NewMemoryPool creates a pool of the device's memory whose allocations
// are GPUDirect RDMA capable if rdma: drivers without that property (R580
// among them) refuse it with ErrorInvalidValue.
func (g *Device) NewMemoryPool(rdma bool) (*MemoryPool, error) {
	props := memPoolProps{allocType: memAllocationTypePinned, locType: memLocationTypeDevice, locID: g.dev,
		gpuDirectRDMACapable: boolByte(rdma)}
	p := &MemoryPool{dev: g}
	if err := g.call(cuMemPoolCreate, uintptr(unsafe.Pointer(&p.h)), uintptr(unsafe.Pointer(&props))); err != nil {
		return nil, err
	}
	return p, nil
}

// Destroy destroys the pool, once; its allocations must be freed first.
func (p *MemoryPool) Destroy() error {
	return p.release.do(func() error { return p.dev.call(cuMemPoolDestroy, p.h) })
}

// AllocAsync allocates size bytes from the pool, ordered on s.
func (p *MemoryPool) AllocAsync(size uint64, s *Stream) (uint64, error) {
	var ptr uint64
	err := p.dev.call(cuMemAllocFromPoolAsync, uintptr(unsafe.Pointer(&ptr)), uintptr(size), p.h, s.s)
	return ptr, err
}

// AllocAsync allocates size bytes from the device's current pool, ordered
// on s, as cudaMallocAsync does.
func (g *Device) AllocAsync(size uint64, s *Stream) (uint64, error) {
	var ptr uint64
	err := g.call(cuMemAllocAsync, uintptr(unsafe.Pointer(&ptr)), uintptr(size), s.s)
	return ptr, err
}

// FreeAsync frees pool memory, ordered on s.
func (g *Device) FreeAsync(ptr uint64, s *Stream) error {
	return g.call(cuMemFreeAsync, uintptr(ptr), s.s)
}
