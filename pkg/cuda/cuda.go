//go:build linux

// Package cuda is the part of the CUDA driver API gpufpga needs, loaded at
// run time from libcuda.so.1 so that every binary builds without cgo or the
// CUDA toolkit and runs, with GPU features off, where there is no GPU.
//
// # Contexts
//
// A Device from Driver.Device or OpenDevice holds its GPU's primary
// context. The driver API finds the context through the calling OS thread;
// this package never leaves that to the caller: every call that needs the
// context (Device.Alloc, HostAlloc, NewStream, the methods of Buffer,
// HostBuffer, Stream, Event, Module, Function, VMMBuffer and MemoryPool)
// wires its goroutine to its OS thread for the call, pushes the context of
// the Device the object came from, and pops it again, so whatever context
// the thread had is current again afterwards. Any goroutine may call any
// of them, with or without Device.Lock, and objects of several devices mix
// on one goroutine; the driver serialises what must be.
//
// A Device from Driver.DeviceAt holds no context: Name, Attribute,
// DmabufSupported, TotalMem, PCIBusID and BAR1 work, and every call that
// needs a context fails with ErrorInvalidContext without reaching the
// driver.
//
// Device.Lock (and Device.Do) is for code that calls the CUDA driver by
// other means on the same thread (a library that expects a current
// context): it wires the goroutine to its OS thread and makes the context
// current there until Unlock. It is not a mutex, and the methods of this
// package do not need it.
//
// # Releases
//
// Every Free, Close and Destroy releases its handle once: a second call
// returns nil and never reaches the driver, where the handle may by then
// name another allocation. A release the driver refuses may be retried.
package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoDriver reports that libcuda.so.1 could not be loaded.
var ErrNoDriver = errors.New("cuda: no CUDA driver (libcuda.so.1 not found): GPU features are off")

// Error is a failed driver call. It matches its Result with errors.Is:
// errors.Is(err, cuda.ErrorOutOfMemory).
type Error struct {
	Op   string
	Code int // the CUresult
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Msg, e.Code) }

// Is reports whether target is e's Result.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && int(r) == e.Code
}

// Result is a CUresult, usable as an errors.Is target.
type Result int

func (r Result) Error() string { return fmt.Sprintf("cuda: CUresult %d", int(r)) }

// Results a caller may want to tell apart (cuda.h, CUresult).
const (
	ErrorInvalidValue                Result = 1
	ErrorOutOfMemory                 Result = 2
	ErrorNotInitialized              Result = 3
	ErrorDeinitialized               Result = 4
	ErrorNoDevice                    Result = 100
	ErrorInvalidDevice               Result = 101
	ErrorInvalidImage                Result = 200
	ErrorInvalidContext              Result = 201
	ErrorNotSupported                Result = 801
	ErrorIllegalAddress              Result = 700
	ErrorLaunchFailed                Result = 719
	ErrorNotFound                    Result = 500
	ErrorNotReady                    Result = 600
	ErrorHostMemoryAlreadyRegistered Result = 712
	ErrorHostMemoryNotRegistered     Result = 713
	ErrorPeerAccessUnsupported       Result = 217
	ErrorPeerAccessAlreadyEnabled    Result = 704
	ErrorPeerAccessNotEnabled        Result = 705
)

// Device attributes the project reads (CUdevice_attribute).
const (
	AttrGPUDirectRDMASupported      = 116
	AttrGPUDirectRDMAFlushWrites    = 117
	AttrGPUDirectRDMAWritesOrdering = 118
	AttrDmaBufSupported             = 124
	AttrMultiprocessorCount         = 16
	AttrMaxSharedPerBlockOptin      = 97
)

const (
	pointerAttrSyncMemops = 6   // CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
	memRangeHandleDmaBuf  = 1   // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
	memHostAllocPortable  = 0x1 // CU_MEMHOSTALLOC_PORTABLE
	gpuPage               = 64 << 10
)

// sym is a driver function, resolved once by Open.
type sym int

// The driver functions the package calls, named as libcuda exports them.
const (
	cuCtxSetCurrent sym = iota
	cuCtxPushCurrent_v2
	cuCtxPopCurrent_v2
	cuDeviceGet
	cuDeviceGetAttribute
	cuDeviceGetByPCIBusId
	cuDeviceGetCount
	cuDeviceGetName
	cuDeviceGetPCIBusId
	cuDevicePrimaryCtxRelease_v2
	cuDevicePrimaryCtxRetain
	cuDeviceTotalMem_v2
	cuDriverGetVersion
	cuEventCreate
	cuEventDestroy_v2
	cuEventElapsedTime
	cuEventRecord
	cuEventSynchronize
	cuFuncSetAttribute
	cuGetErrorString
	cuInit
	cuLaunchKernel
	cuMemAlloc_v2
	cuMemFreeHost
	cuMemFree_v2
	cuMemGetHandleForAddressRange
	cuMemHostAlloc
	cuMemHostRegister_v2
	cuMemHostUnregister
	cuMemcpyDtoDAsync_v2
	cuMemcpyDtoHAsync_v2
	cuMemcpyDtoH_v2
	cuMemcpyHtoDAsync_v2
	cuMemcpyHtoD_v2
	cuMemsetD8Async
	cuModuleGetFunction
	cuModuleLoadData
	cuModuleUnload
	cuPointerSetAttribute
	cuStreamCreate
	cuStreamDestroy_v2
	cuStreamQuery
	cuStreamSynchronize
	cuMemAddressFree
	cuMemAddressReserve
	cuMemAllocAsync
	cuMemAllocFromPoolAsync
	cuMemCreate
	cuMemFreeAsync
	cuMemGetAllocationGranularity
	cuMemMap
	cuMemPoolCreate
	cuMemPoolDestroy
	cuMemRelease
	cuMemSetAccess
	cuMemUnmap
	cuPointerGetAttribute
	cuMemHostGetDevicePointer_v2
	cuLinkCreate_v2
	cuLinkAddData_v2
	cuLinkComplete
	cuLinkDestroy
	cuCtxGetCurrent
	cuDeviceCanAccessPeer
	cuCtxEnablePeerAccess
	numSyms
)

var symNames = [numSyms]string{
	cuCtxSetCurrent:               "cuCtxSetCurrent",
	cuCtxPushCurrent_v2:           "cuCtxPushCurrent_v2",
	cuCtxPopCurrent_v2:            "cuCtxPopCurrent_v2",
	cuDeviceGet:                   "cuDeviceGet",
	cuDeviceGetAttribute:          "cuDeviceGetAttribute",
	cuDeviceGetByPCIBusId:         "cuDeviceGetByPCIBusId",
	cuDeviceGetCount:              "cuDeviceGetCount",
	cuDeviceGetName:               "cuDeviceGetName",
	cuDeviceGetPCIBusId:           "cuDeviceGetPCIBusId",
	cuDevicePrimaryCtxRelease_v2:  "cuDevicePrimaryCtxRelease_v2",
	cuDevicePrimaryCtxRetain:      "cuDevicePrimaryCtxRetain",
	cuDeviceTotalMem_v2:           "cuDeviceTotalMem_v2",
	cuDriverGetVersion:            "cuDriverGetVersion",
	cuEventCreate:                 "cuEventCreate",
	cuEventDestroy_v2:             "cuEventDestroy_v2",
	cuEventElapsedTime:            "cuEventElapsedTime",
	cuEventRecord:                 "cuEventRecord",
	cuEventSynchronize:            "cuEventSynchronize",
	cuFuncSetAttribute:            "cuFuncSetAttribute",
	cuGetErrorString:              "cuGetErrorString",
	cuInit:                        "cuInit",
	cuLaunchKernel:                "cuLaunchKernel",
	cuMemAlloc_v2:                 "cuMemAlloc_v2",
	cuMemFreeHost:                 "cuMemFreeHost",
	cuMemFree_v2:                  "cuMemFree_v2",
	cuMemGetHandleForAddressRange: "cuMemGetHandleForAddressRange",
	cuMemHostAlloc:                "cuMemHostAlloc",
	cuMemHostRegister_v2:          "cuMemHostRegister_v2",
	cuMemHostUnregister:           "cuMemHostUnregister",
	cuMemcpyDtoDAsync_v2:          "cuMemcpyDtoDAsync_v2",
	cuMemcpyDtoHAsync_v2:          "cuMemcpyDtoHAsync_v2",
	cuMemcpyDtoH_v2:               "cuMemcpyDtoH_v2",
	cuMemcpyHtoDAsync_v2:          "cuMemcpyHtoDAsync_v2",
	cuMemcpyHtoD_v2:               "cuMemcpyHtoD_v2",
	cuMemsetD8Async:               "cuMemsetD8Async",
	cuModuleGetFunction:           "cuModuleGetFunction",
	cuModuleLoadData:              "cuModuleLoadData",
	cuModuleUnload:                "cuModuleUnload",
	cuPointerSetAttribute:         "cuPointerSetAttribute",
	cuStreamCreate:                "cuStreamCreate",
	cuStreamDestroy_v2:            "cuStreamDestroy_v2",
	cuStreamQuery:                 "cuStreamQuery",
	cuStreamSynchronize:           "cuStreamSynchronize",
	cuMemAddressFree:              "cuMemAddressFree",
	cuMemAddressReserve:           "cuMemAddressReserve",
	cuMemAllocAsync:               "cuMemAllocAsync",
	cuMemAllocFromPoolAsync:       "cuMemAllocFromPoolAsync",
	cuMemCreate:                   "cuMemCreate",
	cuMemFreeAsync:                "cuMemFreeAsync",
	cuMemGetAllocationGranularity: "cuMemGetAllocationGranularity",
	cuMemMap:                      "cuMemMap",
	cuMemPoolCreate:               "cuMemPoolCreate",
	cuMemPoolDestroy:              "cuMemPoolDestroy",
	cuMemRelease:                  "cuMemRelease",
	cuMemSetAccess:                "cuMemSetAccess",
	cuMemUnmap:                    "cuMemUnmap",
	cuPointerGetAttribute:         "cuPointerGetAttribute",
	cuMemHostGetDevicePointer_v2:  "cuMemHostGetDevicePointer_v2",
	cuLinkCreate_v2:               "cuLinkCreate_v2",
	cuLinkAddData_v2:              "cuLinkAddData_v2",
	cuLinkComplete:                "cuLinkComplete",
	cuLinkDestroy:                 "cuLinkDestroy",
	cuCtxGetCurrent:               "cuCtxGetCurrent",
	cuDeviceCanAccessPeer:         "cuDeviceCanAccessPeer",
	cuCtxEnablePeerAccess:         "cuCtxEnablePeerAccess",
}

// Driver is the loaded libcuda, its functions bound at Open. It holds no
// lock: the table is read-only afterwards.
type Driver struct {
	lib uintptr
	fns [numSyms]uintptr // 0 for a function this driver lacks
}

// Open loads libcuda.so.1 and initialises it.
func Open() (*Driver, error) { return openLib("libcuda.so.1") }

// openLib loads the driver from the named library.
func openLib(name string) (*Driver, error) {
	lib, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d := &Driver{lib: lib}
	for i, name := range symNames {
		// Newer functions (cuMemGetHandleForAddressRange) may be
		// missing from an older driver: calling one fails then.
		d.fns[i], _ = purego.Dlsym(lib, name)
	}
	if err := d.call(cuInit, 0); err != nil {
		return nil, err
	}
	return d, nil
}

// call invokes a driver function returning CUresult. Callers pass
// pointers as uintptr(unsafe.Pointer(&x)); uintptrescapes moves x to the
// heap and keeps it alive through the call, so a stack that grows on the
// way (the symbol lookup may grow it) cannot leave the driver writing to
// the old copy.
//
//go:uintptrescapes
func (d *Driver) call(f sym, args ...uintptr) error {
	fn := d.fns[f]
	if fn == 0 {
		return &Error{Op: symNames[f], Code: int(ErrorNotFound), Msg: "not in this driver (too old?)"}
	}
	r, _, _ := purego.SyscallN(fn, args...)
	if code := int(int32(r)); code != 0 {
		return &Error{Op: symNames[f], Code: code, Msg: d.errorString(code)}
	}
	return nil
}

func (d *Driver) errorString(code int) string {
	fn := d.fns[cuGetErrorString]
	if fn == 0 {
		return "unknown error"
	}
	var s *byte
	purego.SyscallN(fn, uintptr(code), uintptr(unsafe.Pointer(&s)))
	if s == nil {
		return "unknown error"
	}
	var b []byte
	for p := unsafe.Pointer(s); *(*byte)(p) != 0; p = unsafe.Add(p, 1) {
		b = append(b, *(*byte)(p))
	}
	return string(b)
}

// Version returns the CUDA version the driver supports, as 1000*major +
// 10*minor (13000 is CUDA 13.0).
func (d *Driver) Version() (int, error) {
	var v int32
	err := d.call(cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// DeviceCount returns the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	err := d.call(cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// Driver returns the driver the device belongs to.
func (g *Device) Driver() *Driver { return g.drv }

// Device is a CUDA device with its primary context, or, from DeviceAt,
// without one: then only its name, attributes, PCI address and BAR1 may
// be read.
type Device struct {
	drv     *Driver
	ordinal int32
	dev     int32
	ctx     uintptr
	release releaseOnce // of the primary context
}

// Device retains device n's primary context.
func (d *Driver) Device(n int) (*Device, error) {
	g := &Device{drv: d, ordinal: int32(n)}
	if err := d.call(cuDeviceGet, uintptr(unsafe.Pointer(&g.dev)), uintptr(n)); err != nil {
		return nil, err
	}
	if err := d.call(cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&g.ctx)), uintptr(g.dev)); err != nil {
		return nil, err
	}
	return g, nil
}

// DeviceAt finds the device at PCI address bdf ("0000:65:00.0") without
// retaining its primary context, which would take memory on the GPU and
// fail on one in exclusive use: its name, attributes, address and BAR1
// can be read, and nothing run on it (Lock fails).
func (d *Driver) DeviceAt(bdf string) (*Device, error) {
	g := &Device{drv: d, ordinal: -1}
	id := append([]byte(bdf), 0)
	if err := d.call(cuDeviceGetByPCIBusId, uintptr(unsafe.Pointer(&g.dev)), uintptr(unsafe.Pointer(&id[0]))); err != nil {
		return nil, err
	}
	return g, nil
}

// OpenDevice loads the driver and retains device ordinal's primary
// context: Open and Device in one.
func OpenDevice(ordinal int) (*Device, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	return d.Device(ordinal)
}

// Lock wires the calling goroutine to its OS thread and makes the device's
// context current there, for code that reaches the CUDA driver by other
// means; Unlock after (only when Lock succeeded: on an error the thread is
// not wired). It excludes no other goroutine, and this package's own
// methods do not need it.
func (g *Device) Lock() error {
	if g.ctx == 0 {
		return &Error{Op: "Lock", Code: int(ErrorInvalidContext), Msg: "a device found by DeviceAt has no context"}
	}
	if g.release.isDone() {
		return &Error{Op: "Lock", Code: int(ErrorInvalidContext), Msg: "device closed"}
	}
	runtime.LockOSThread()
	if err := g.drv.call(cuCtxSetCurrent, g.ctx); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// call runs a driver function with g's context current on the calling
// goroutine's thread, and the thread's previous context current again
// after it. A device without a context (DeviceAt) fails without reaching
// the driver.
//
//go:uintptrescapes
func (g *Device) call(f sym, args ...uintptr) error {
	if g.ctx == 0 {
		return &Error{Op: symNames[f], Code: int(ErrorInvalidContext), Msg: "a device found by DeviceAt has no context"}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.drv.call(cuCtxPushCurrent_v2, g.ctx); err != nil {
		return err
	}
	err := g.drv.call(f, args...)
	var prev uintptr
	if perr := g.drv.call(cuCtxPopCurrent_v2, uintptr(unsafe.Pointer(&prev))); err == nil {
		err = perr
	}
	return err
}

// Unlock releases the goroutine's OS thread.
func (g *Device) Unlock() { runtime.UnlockOSThread() }

// Do runs f with the device's context current on the calling goroutine's
// thread: Lock, f, Unlock.
func (g *Device) Do(f func() error) error {
	if err := g.Lock(); err != nil {
		return err
	}
	defer g.Unlock()
	return f()
}

// Close releases the primary context, if the device holds it, once.
func (g *Device) Close() error {
	if g.ctx == 0 {
		return nil
	}
	return g.release.do(func() error { return g.drv.call(cuDevicePrimaryCtxRelease_v2, uintptr(g.dev)) })
}

// releaseOnce runs a handle's release until it succeeds once; later calls
// do nothing.
type releaseOnce struct {
	mu   sync.Mutex
	done bool
}

func (o *releaseOnce) do(f func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	if err := f(); err != nil {
		return err
	}
	o.done = true
	return nil
}

func (o *releaseOnce) isDone() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

// Name returns the device's name.
func (g *Device) Name() (string, error) {
	b := make([]byte, 256)
	if err := g.drv.call(cuDeviceGetName, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(g.dev)); err != nil {
		return "", err
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), nil
		}
	}
	return string(b), nil
}

// Attribute reads a device attribute.
func (g *Device) Attribute(attr int) (int, error) {
	var v int32
	err := g.drv.call(cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(g.dev))
	return int(v), err
}

// DmabufSupported reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: whether
// the device exports its memory as dma-bufs. Drivers before CUDA 11.7 do
// not know the attribute, which means no.
func (g *Device) DmabufSupported() (bool, error) {
	v, err := g.Attribute(AttrDmaBufSupported)
	if errors.Is(err, ErrorInvalidValue) {
		return false, nil
	}
	return v != 0, err
}

// TotalMem returns the device memory in bytes.
func (g *Device) TotalMem() (uint64, error) {
	var n uint64
	err := g.drv.call(cuDeviceTotalMem_v2, uintptr(unsafe.Pointer(&n)), uintptr(g.dev))
	return n, err
}

// Buffer is device memory, rounded to whole 64 KiB pages so that a peer can
// pin it; Ptr is 64 KiB aligned.
type Buffer struct {
	Ptr     uint64
	Size    uint64
	dev     *Device
	release releaseOnce
}

// Alloc allocates size bytes (rounded up to 64 KiB) and sets SYNC_MEMOPS on
// them, as memory a peer writes needs.
func (g *Device) Alloc(size uint64) (*Buffer, error) {
	size = (size + gpuPage - 1) &^ (gpuPage - 1)
	b := &Buffer{Size: size, dev: g}
	if err := g.call(cuMemAlloc_v2, uintptr(unsafe.Pointer(&b.Ptr)), uintptr(size)); err != nil {
		return nil, err
	}
	if b.Ptr%gpuPage != 0 {
		b.Free()
		return nil, fmt.Errorf("cuda: allocation at %#x is not 64 KiB aligned", b.Ptr)
	}
	one := uint32(1)
	if err := g.call(cuPointerSetAttribute, uintptr(unsafe.Pointer(&one)), pointerAttrSyncMemops, uintptr(b.Ptr)); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// Free frees the buffer, once.
func (b *Buffer) Free() error {
	return b.release.do(func() error { return b.dev.call(cuMemFree_v2, uintptr(b.Ptr)) })
}

// ExportDmabuf returns a dma-buf file descriptor for [off, off+size) of b.
func (b *Buffer) ExportDmabuf(off, size uint64) (int, error) {
	return b.dev.ExportDmabufRange(b.Ptr+off, size)
}

// HostBuffer is page-locked host memory, the only host memory that
// asynchronous copies take: a copy engine reads or writes it after the
// call that queued the copy has returned, so it must stay allocated and
// locked until the copy completes, which a []byte the Go runtime manages
// does not promise. Free it only once the copies that use it are done.
type HostBuffer struct {
	b       []byte // nil once freed
	dev     *Device
	release sym // cuMemFreeHost (HostAlloc) or cuMemHostUnregister (HostRegister)
}

// HostAlloc allocates size bytes of page-locked host memory
// (cuMemHostAlloc), usable from every context.
func (g *Device) HostAlloc(size uint64) (*HostBuffer, error) {
	if size == 0 {
		return nil, invalid(cuMemHostAlloc, "zero bytes")
	}
	var p unsafe.Pointer
	if err := g.call(cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), memHostAllocPortable); err != nil {
		return nil, err
	}
	return &HostBuffer{b: unsafe.Slice((*byte)(p), size), dev: g, release: cuMemFreeHost}, nil
}

const hostRegisterPortable = 0x1 // CU_MEMHOSTREGISTER_PORTABLE

// HostRegister page-locks existing host memory for asynchronous copies
// (cuMemHostRegister), usually memory from unix.Mmap. The buffer refers to
// b until Free, which unregisters it; b must stay mapped until then.
func (g *Device) HostRegister(b []byte) (*HostBuffer, error) {
	if len(b) == 0 {
		return nil, invalid(cuMemHostRegister_v2, "zero bytes")
	}
	if err := g.call(cuMemHostRegister_v2, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), hostRegisterPortable); err != nil {
		return nil, err
	}
	return &HostBuffer{b: b, dev: g, release: cuMemHostUnregister}, nil
}

// Bytes returns the buffer's memory; nil once freed.
func (h *HostBuffer) Bytes() []byte { return h.b }

// Offset reports where b lies in the buffer: its offset in Bytes, and
// whether all of b lies there.
func (h *HostBuffer) Offset(b []byte) (uint64, bool) {
	if h.b == nil || b == nil {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(h.b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	size := uintptr(len(h.b))
	if p < base || p-base > size || uintptr(len(b)) > size-(p-base) {
		return 0, false
	}
	return uint64(p - base), true
}

// Free frees memory from HostAlloc, or unregisters memory from
// HostRegister, which then belongs to the caller alone again. Freeing a
// freed buffer does nothing.
func (h *HostBuffer) Free() error {
	if h.b == nil {
		return nil
	}
	if err := h.dev.call(h.release, uintptr(unsafe.Pointer(&h.b[0]))); err != nil {
		return err
	}
	h.b = nil
	return nil
}

// span returns the address of the n bytes at offset off of h, for the
// asynchronous copy op; nil when n is 0.
func (h *HostBuffer) span(op sym, off, n uint64) (unsafe.Pointer, error) {
	if h.b == nil {
		return nil, invalid(op, "host buffer freed")
	}
	if size := uint64(len(h.b)); off > size || n > size-off {
		return nil, invalid(op, fmt.Sprintf("%d bytes at offset %d of a %d-byte host buffer", n, off, size))
	}
	if n == 0 {
		return nil, nil
	}
	return unsafe.Pointer(&h.b[off]), nil
}

// invalid is a call refused before it reaches the driver, as the driver
// would refuse it: errors.Is(err, ErrorInvalidValue).
func invalid(op sym, msg string) error {
	return &Error{Op: symNames[op], Code: int(ErrorInvalidValue), Msg: msg}
}

// Stream is a CUDA stream.
type Stream struct {
	s       uintptr
	dev     *Device
	release releaseOnce
}

// NewStream creates a stream, which synchronises with the legacy
// default stream: work there waits for it, and it for work there.
func (g *Device) NewStream() (*Stream, error) { return g.newStream(0) }

const streamNonBlocking = 0x1 // CU_STREAM_NON_BLOCKING

// NewNonBlockingStream creates a stream that does not synchronise with
// the legacy default stream (CU_STREAM_NON_BLOCKING): a persistent kernel
// launched on it does not hold up the synchronous copies and memsets of
// the rest of the process, nor do they wait for it. Calls that wait for
// the whole device (cuMemFree, cuModuleLoadData, cuCtxSynchronize) still
// wait for it, and while one of them waits, other threads' calls may
// wait behind it (an asynchronous copy did, on an H200 with driver 580).
func (g *Device) NewNonBlockingStream() (*Stream, error) { return g.newStream(streamNonBlocking) }

func (g *Device) newStream(flags uintptr) (*Stream, error) {
	s := &Stream{dev: g}
	if err := g.call(cuStreamCreate, uintptr(unsafe.Pointer(&s.s)), flags); err != nil {
		return nil, err
	}
	return s, nil
}

// Close destroys the stream, once.
func (s *Stream) Close() error {
	return s.release.do(func() error { return s.dev.call(cuStreamDestroy_v2, s.s) })
}

// Sync waits for the stream's work.
func (s *Stream) Sync() error { return s.dev.call(cuStreamSynchronize, s.s) }

// Idle reports whether everything queued on the stream has finished
// (cuStreamQuery), without waiting: a failure of that work is returned.
func (s *Stream) Idle() (bool, error) {
	err := s.dev.call(cuStreamQuery, s.s)
	if errors.Is(err, ErrorNotReady) {
		return false, nil
	}
	return err == nil, err
}

// CopyHtoD queues a copy of the n bytes at offset off of src to device
// address dst.
func (s *Stream) CopyHtoD(dst uint64, src *HostBuffer, off, n uint64) error {
	p, err := src.span(cuMemcpyHtoDAsync_v2, off, n)
	if err != nil || p == nil {
		return err
	}
	return s.dev.call(cuMemcpyHtoDAsync_v2, uintptr(dst), uintptr(p), uintptr(n), s.s)
}

// CopyDtoD queues a device-to-device copy.
func (s *Stream) CopyDtoD(dst, src, n uint64) error {
	return s.dev.call(cuMemcpyDtoDAsync_v2, uintptr(dst), uintptr(src), uintptr(n), s.s)
}

// CopyHtoD copies src to device address dst. src may be any memory: the
// driver is done with it when the call returns.
func (g *Device) CopyHtoD(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.call(cuMemcpyHtoD_v2, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)))
}

// CopyDtoH copies device memory to dst, and returns when it is there.
func (g *Device) CopyDtoH(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return g.call(cuMemcpyDtoH_v2, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)))
}

// Event is a CUDA event for timing.
type Event struct {
	e       uintptr
	dev     *Device
	release releaseOnce
}

// NewEvent creates an event for timing.
func (g *Device) NewEvent() (*Event, error) { return g.newEvent(0) }

// NewSyncEvent creates an event for ordering and completion only, cheaper
// to record than a timing event. Waiting on it spins, as the context does
// by default: a waiter that slept instead (CU_EVENT_BLOCKING_SYNC) cost
// the compat path 10-20 % of its throughput on an H200.
func (g *Device) NewSyncEvent() (*Event, error) { return g.newEvent(eventDisableTiming) }

const eventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING

func (g *Device) newEvent(flags uintptr) (*Event, error) {
	e := &Event{dev: g}
	if err := g.call(cuEventCreate, uintptr(unsafe.Pointer(&e.e)), flags); err != nil {
		return nil, err
	}
	return e, nil
}

// Record records the event on s.
func (e *Event) Record(s *Stream) error { return e.dev.call(cuEventRecord, e.e, s.s) }

// Since waits for e and returns the milliseconds from start to e.
func (e *Event) Since(start *Event) (float32, error) {
	if err := e.dev.call(cuEventSynchronize, e.e); err != nil {
		return 0, err
	}
	var ms float32
	err := e.dev.call(cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.e, e.e)
	return ms, err
}

// Close destroys the event, once.
func (e *Event) Close() error {
	return e.release.do(func() error { return e.dev.call(cuEventDestroy_v2, e.e) })
}

// Sync waits until the work before the event's last Record is done.
func (e *Event) Sync() error { return e.dev.call(cuEventSynchronize, e.e) }

// CopyDtoH queues a copy of the n bytes at device address src to offset
// off of dst.
func (s *Stream) CopyDtoH(dst *HostBuffer, off, src, n uint64) error {
	p, err := dst.span(cuMemcpyDtoHAsync_v2, off, n)
	if err != nil || p == nil {
		return err
	}
	return s.dev.call(cuMemcpyDtoHAsync_v2, uintptr(p), uintptr(src), uintptr(n), s.s)
}

// MemsetD8 queues setting n bytes at dst to v.
func (s *Stream) MemsetD8(dst uint64, v byte, n uint64) error {
	return s.dev.call(cuMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), s.s)
}

// Module is loaded GPU code.
type Module struct {
	m       uintptr
	dev     *Device
	release releaseOnce
}

// LoadPTX JIT-compiles PTX text for the device and loads it.
func (g *Device) LoadPTX(ptx []byte) (*Module, error) {
	text := make([]byte, len(ptx)+1) // the driver reads up to a NUL
	copy(text, ptx)
	m := &Module{dev: g}
	if err := g.call(cuModuleLoadData, uintptr(unsafe.Pointer(&m.m)), uintptr(unsafe.Pointer(&text[0]))); err != nil {
		return nil, err
	}
	return m, nil
}

// Close unloads the module, once.
func (m *Module) Close() error {
	return m.release.do(func() error { return m.dev.call(cuModuleUnload, m.m) })
}

// Function is a kernel of a loaded module.
type Function struct {
	f    uintptr
	name string
	dev  *Device
}

// Function looks up a kernel by its (extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	cname := append([]byte(name), 0)
	f := &Function{name: name, dev: m.dev}
	if err := m.dev.call(cuModuleGetFunction, uintptr(unsafe.Pointer(&f.f)), m.m, uintptr(unsafe.Pointer(&cname[0]))); err != nil {
		return nil, err
	}
	return f, nil
}

const funcAttrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

// SetMaxDynamicShared allows launches with up to n bytes of dynamic shared
// memory, above the default 48 KiB where the device allows it.
func (f *Function) SetMaxDynamicShared(n int) error {
	return f.dev.call(cuFuncSetAttribute, f.f, funcAttrMaxDynamicShared, uintptr(n))
}

// Launch queues the kernel on s with a one-dimensional grid and block.
// Each argument is passed as 8 little-endian bytes: pointers and 64-bit
// parameters as they are, 32-bit parameters in the low half.
func (f *Function) Launch(s *Stream, grid, block, shared int, args ...uint64) error {
	// The driver reads the arguments through this array during the call;
	// pin both so the collector cannot move or free them meanwhile.
	vals := make([]uint64, len(args)+1)
	copy(vals, args)
	ptrs := make([]unsafe.Pointer, len(args)+1)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&vals[0])
	pin.Pin(&ptrs[0])
	for i := range args {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	err := f.dev.call(cuLaunchKernel, f.f, uintptr(grid), 1, 1, uintptr(block), 1, 1, uintptr(shared), s.s,
		uintptr(unsafe.Pointer(&ptrs[0])), 0)
	if err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	return nil
}
