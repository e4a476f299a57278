//go:build linux

package p2p

import (
	"unsafe"
)

// pointer is an address the kernel reads during an ioctl, held where the
// garbage collector can see it (cilium/ebpf's sys.Pointer): an integer
// address would let the collector free the array before the kernel copied
// it. It has the size of the uapi's __u64 on 64-bit platforms, the only
// ones the driver supports.
type pointer struct {
	ptr unsafe.Pointer
}

// The uapi's pointer fields are __u64; a 32-bit build would need padding.
var _ [unsafe.Sizeof(pointer{}) - 8]struct{}
var _ [8 - unsafe.Sizeof(pointer{})]struct{}

// slicePointer points at s's first element, or is nil for an empty slice.
func slicePointer[T any](s []T) pointer {
	if len(s) == 0 {
		return pointer{}
	}
	return pointer{unsafe.Pointer(&s[0])}
}

// The argument structs below mirror the generated ones in ztypes_linux.go
// field for field, with the __u64 address fields as pointers;
// TestPointerArgsMatchGenerated holds them to the generated layouts.

// xferPtrArg is xferArg with Segs as a pointer.
type xferPtrArg struct {
	Dir         uint32
	Channel     uint32
	Flags       uint32
	Nsegs       uint32
	Segs        pointer
	Card_addr   uint64
	Timeout_ms  uint32
	Eventfd     int32
	User_data   uint64
	Id          uint64
	Bytes       uint64
	Status      uint32
	Error       int32
	Duration_ns uint64
	Descs       uint32
	Pad         uint32
	Reserved    [2]uint64
}

// streamPtrArg is streamArg with Slots as a pointer.
type streamPtrArg struct {
	Channel  uint32
	Nslots   uint32
	Slots    pointer
	Flags    uint32
	Pad      uint32
	Id       uint64
	Reserved uint64
	Results  segArg
	Consumer segArg
	Coalesce uint32
	Pad2     uint32
}

// releasePtrArg is releaseArg with Slots as a pointer.
type releasePtrArg struct {
	Channel uint32
	Nslots  uint32
	Slots   pointer
	Stream  uint64
}

// queryPtrArg is queryArg with Pages as a pointer.
type queryPtrArg struct {
	Handle      uint64
	Pages       pointer
	Max_pages   uint32
	Flags       uint32
	Kind        uint32
	State       uint32
	Addr        uint64
	Len         uint64
	Offset      uint64
	Page_size   uint32
	Npages      uint32
	Nruns       uint32
	Largest_run uint32
	Inflight    uint32
	Pad         uint32
	Reserved    [2]uint64
}
