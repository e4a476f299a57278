//go:build linux

package p2p

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HostBuffer is host memory for host pins (the compat path): page-aligned
// anonymous memory that a Device maps, populates and unmaps, and the only
// memory its PinHost takes. Memory the Go runtime manages cannot be
// pinned: the collector could hand it to other objects while the FPGA
// still wrote it. Free unmaps the buffer only once no pin holds it.
type HostBuffer struct {
	d *Device
	// mu guards mem and pins. Taken after d.hostMu, never before: see
	// Device.hostMu.
	mu  sync.Mutex
	mem []byte // nil once freed
	// pins are the buffer's live pins, by device and handle: not the
	// *Pin, which must stay collectable so that a leaked one is found.
	pins map[pinKey]struct{}
}

type pinKey struct {
	d      *Device
	handle uint64
}

// AllocHost maps size bytes (rounded up to whole pages) of zeroed host
// memory for PinHost. The Device keeps it until Free, even past Close.
func (d *Device) AllocHost(size uint64) (*HostBuffer, error) {
	if size == 0 {
		return nil, &Error{Op: "alloc", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "empty host buffer"}
	}
	if size > uint64(^uint(0)>>1) {
		return nil, &Error{Op: "alloc", Err: unix.EINVAL, Kind: ErrInvalid, Detail: fmt.Sprintf("host buffer of %d bytes", size)}
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("gpufpga alloc: host buffer of %d bytes: %w", size, err)
	}
	h := &HostBuffer{d: d, mem: mem, pins: make(map[pinKey]struct{})}
	d.hostMu.Lock()
	d.hosts[h] = struct{}{}
	d.hostMu.Unlock()
	return h, nil
}

// Bytes returns the buffer's memory; nil once freed. The slice must not
// be used after Free.
func (h *HostBuffer) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mem
}

// Len returns the buffer's size in bytes; 0 once freed.
func (h *HostBuffer) Len() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return uint64(len(h.mem))
}

// Free unmaps the buffer. It fails with ErrBusy while a pin of an open
// Device holds it: unpin first. Freeing a freed buffer does nothing.
func (h *HostBuffer) Free() error {
	// hostMu first: see Device.hostMu.
	h.d.hostMu.Lock()
	defer h.d.hostMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mem == nil {
		return nil
	}
	for k := range h.pins {
		if k.d.shut.Load() {
			delete(h.pins, k) // its Device's Close unpinned it
		}
	}
	if n := len(h.pins); n > 0 {
		return &Error{Op: "free", Err: unix.EBUSY, Kind: ErrBusy, Detail: fmt.Sprintf("host buffer with %d pins", n)}
	}
	delete(h.d.hosts, h)
	err := unix.Munmap(h.mem)
	h.mem = nil
	if err != nil {
		return fmt.Errorf("gpufpga free: host buffer: %w", err)
	}
	return nil
}

// hostBuffer finds the HostBuffer of d that b lies in, whole, and b's
// offset there.
func (d *Device) hostBuffer(b []byte) (*HostBuffer, uint64, error) {
	if len(b) == 0 {
		return nil, 0, &Error{Op: "pin", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "empty host buffer"}
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	for h := range d.hosts {
		h.mu.Lock()
		base, size := uintptr(unsafe.Pointer(unsafe.SliceData(h.mem))), uintptr(len(h.mem))
		h.mu.Unlock()
		if p >= base && p-base < size && uintptr(len(b)) <= size-(p-base) {
			return h, uint64(p - base), nil
		}
	}
	return nil, 0, &Error{Op: "pin", Err: unix.EINVAL, Kind: ErrInvalid,
		Detail: fmt.Sprintf("host %d bytes not in a HostBuffer of this device (Device.AllocHost)", len(b))}
}

func (h *HostBuffer) addPin(k pinKey) {
	h.mu.Lock()
	h.pins[k] = struct{}{}
	h.mu.Unlock()
}

func (h *HostBuffer) dropPin(k pinKey) {
	h.mu.Lock()
	delete(h.pins, k)
	h.mu.Unlock()
}
