//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Host memory mapped into the GPU, and what the device says of the order
// in which it sees a peer's writes: what a GPU-resident consumer needs.

const memHostAllocDeviceMap = 0x2 // CU_MEMHOSTALLOC_DEVICEMAP

// RDMAWritesOrdering is CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING:
// which peers' writes into the device's memory its own kernels see in
// the order they were made.
type RDMAWritesOrdering int

// CUGPUDirectRDMAWritesOrdering.
const (
	RDMAOrderingNone       RDMAWritesOrdering = 0   // no order promised
	RDMAOrderingOwner      RDMAWritesOrdering = 100 // the device's own kernels see them in order
	RDMAOrderingAllDevices RDMAWritesOrdering = 200 // every device does
)

func (o RDMAWritesOrdering) String() string {
	switch o {
	case RDMAOrderingNone:
		return "none"
	case RDMAOrderingOwner:
		return "owner"
	case RDMAOrderingAllDevices:
		return "all devices"
	}
	return fmt.Sprintf("RDMAWritesOrdering(%d)", int(o))
}

// RDMAFlushOptions is CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS:
// the ways cuFlushGPUDirectRDMAWrites can be asked to make earlier peer
// writes visible (a bit mask of CUflushGPUDirectRDMAWritesOptions).
type RDMAFlushOptions int

// CUflushGPUDirectRDMAWritesOptions.
const (
	RDMAFlushHost   RDMAFlushOptions = 1 << 0 // cuFlushGPUDirectRDMAWrites from the host
	RDMAFlushMemOps RDMAFlushOptions = 1 << 1 // a stream memory operation's flush
)

// RDMAOrdering reads both attributes. A driver that does not know them
// (before CUDA 11.3) promises nothing: none and no options, no error.
func (g *Device) RDMAOrdering() (RDMAWritesOrdering, RDMAFlushOptions, error) {
	o, err := g.Attribute(AttrGPUDirectRDMAWritesOrdering)
	if isInvalidValue(err) {
		return RDMAOrderingNone, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	f, err := g.Attribute(AttrGPUDirectRDMAFlushWrites)
	if isInvalidValue(err) {
		f, err = 0, nil
	}
	return RDMAWritesOrdering(o), RDMAFlushOptions(f), err
}

func isInvalidValue(err error) bool { return errors.Is(err, ErrorInvalidValue) }

// MappedBuffer is page-locked host memory mapped into the device's
// address space (cuMemHostAlloc with DEVICEMAP and PORTABLE): the host
// reads and writes Bytes, kernels the same bytes at DevPtr. It stays
// allocated and locked until Free, which must come after every kernel and
// copy that uses it has finished.
type MappedBuffer struct {
	*HostBuffer
	DevPtr uint64
}

// HostAllocMapped allocates size bytes of page-locked host memory mapped
// into the device, zeroed. Like every call of the package, it binds the
// device's context itself.
func (g *Device) HostAllocMapped(size uint64) (*MappedBuffer, error) {
	if size == 0 {
		return nil, invalid(cuMemHostAlloc, "zero bytes")
	}
	var p unsafe.Pointer
	if err := g.call(cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), memHostAllocPortable|memHostAllocDeviceMap); err != nil {
		return nil, err
	}
	h := &HostBuffer{b: unsafe.Slice((*byte)(p), size), dev: g, release: cuMemFreeHost}
	clear(h.b)
	m := &MappedBuffer{HostBuffer: h}
	if err := g.call(cuMemHostGetDevicePointer_v2, uintptr(unsafe.Pointer(&m.DevPtr)), uintptr(p), 0); err != nil {
		h.Free()
		return nil, err
	}
	return m, nil
}

const hostRegisterDeviceMap = 0x2 // CU_MEMHOSTREGISTER_DEVICEMAP

// HostRegisterMapped page-locks existing host memory and maps it into the
// device (cuMemHostRegister with DEVICEMAP): memory another driver reads
// too, such as a GPU-resident stream's consumer word, which gpufpga pins.
// Free unregisters it; b must stay mapped until then. It binds the
// device's context itself.
func (g *Device) HostRegisterMapped(b []byte) (*MappedBuffer, error) {
	if len(b) == 0 {
		return nil, invalid(cuMemHostRegister_v2, "zero bytes")
	}
	p := unsafe.Pointer(&b[0])
	if err := g.call(cuMemHostRegister_v2, uintptr(p), uintptr(len(b)), hostRegisterPortable|hostRegisterDeviceMap); err != nil {
		return nil, err
	}
	m := &MappedBuffer{HostBuffer: &HostBuffer{b: b, dev: g, release: cuMemHostUnregister}}
	if err := g.call(cuMemHostGetDevicePointer_v2, uintptr(unsafe.Pointer(&m.DevPtr)), uintptr(p), 0); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// Ptr returns the host address of byte off of the buffer, for atomic
// loads and stores the kernels see; nil once freed or out of range.
func (m *MappedBuffer) Ptr(off uint64) unsafe.Pointer {
	if m.b == nil || off >= uint64(len(m.b)) {
		return nil
	}
	return unsafe.Pointer(&m.b[off])
}
