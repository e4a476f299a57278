//go:build linux

package p2p

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/sgl"
)

// Pin is pinned memory, named by its handle. It stays pinned until Unpin or
// until its Device is closed. A Pin that becomes unreachable while pinned
// is a leak: the collector unpins it and Device.LeakedPins counts it.
type Pin struct {
	Handle     uint64
	Kind       PinKind
	Addr       uint64 // as pinned: GPU or host virtual address, or dma-buf offset
	Len        uint64
	Offset     uint64 // of Addr in the first page
	PageSize   uint64
	Pages      int
	Runs       int // runs of bus-contiguous pages
	LargestRun int // pages

	dev      *Device
	host     *HostBuffer // a host pin's memory, which the device writes until Unpin
	cleanup  runtime.Cleanup
	mu       sync.Mutex
	unpinned bool
}

// PinOptions modify a pin.
type PinOptions struct {
	// Persistent pins GPU memory with nvidia_p2p_get_pages_persistent: it
	// is never revoked, and its free waits for the unpin.
	Persistent bool
}

// PinGPU pins len bytes of GPU memory at virtual address va (from
// cudaMalloc, or the rig's simulated GPU). Neither need be aligned.
func (d *Device) PinGPU(va, length uint64, opts PinOptions) (*Pin, error) {
	a := pinArg{Kind: pinKindGPU, Addr: va, Len: length, Fd: -1}
	if opts.Persistent {
		a.Flags = pinFlagPersistent
	}
	return d.pin(&a, fmt.Sprintf("GPU %#x+%d", va, length), nil)
}

// PinHost pins host memory for the compat path: buf must lie in a
// HostBuffer of d (Device.AllocHost), which cannot be freed while the pin
// holds it. Any other memory, the Go heap's above all, fails with
// ErrInvalid.
func (d *Device) PinHost(buf []byte) (*Pin, error) {
	h, _, err := d.hostBuffer(buf)
	if err != nil {
		return nil, err
	}
	a := pinArg{Kind: pinKindHost, Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), Len: uint64(len(buf)), Fd: -1}
	// A Free racing with PinHost is the caller's misuse of h; the kernel
	// holds the pages it pinned whatever then happens to the mapping.
	return d.pin(&a, fmt.Sprintf("host %d bytes", len(buf)), h)
}

// PinDmabuf pins len bytes at offset off of the dma-buf fd.
func (d *Device) PinDmabuf(fd int, off, length uint64) (*Pin, error) {
	a := pinArg{Kind: pinKindDmabuf, Addr: off, Len: length, Fd: int32(fd)}
	return d.pin(&a, fmt.Sprintf("dma-buf fd %d %#x+%d", fd, off, length), nil)
}

func (d *Device) pin(a *pinArg, detail string, host *HostBuffer) (*Pin, error) {
	addr, length := a.Addr, a.Len
	if err := d.ioctl(iocPin, unsafe.Pointer(a)); err != nil {
		return nil, pinError(a.Kind, err, detail)
	}
	p := &Pin{
		Handle: a.Handle, Kind: PinKind(a.Kind), Addr: addr, Len: length, Offset: a.Offset,
		PageSize: uint64(a.Page_size), Pages: int(a.Npages), Runs: int(a.Nruns), LargestRun: int(a.Largest_run),
		dev: d, host: host,
	}
	if host != nil {
		host.addPin(pinKey{d, p.Handle})
	}
	// The cleanup's argument keeps the host buffer mapped until the
	// leaked pin is unpinned.
	p.cleanup = runtime.AddCleanup(p, unpinLeaked, leakedPin{d: d, handle: p.Handle, host: host})
	return p, nil
}

// leakedPin is what unpinning a collected Pin needs; never the Pin.
type leakedPin struct {
	d      *Device
	handle uint64
	host   *HostBuffer
}

// unpinLeaked unpins a Pin collected without Unpin, and counts it, unless
// its Device's Close unpinned it already.
func unpinLeaked(l leakedPin) {
	a := unpinArg{Handle: l.handle}
	if err := l.d.ioctl(iocUnpin, unsafe.Pointer(&a)); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return
		}
		// Busy (a stream or transfer still uses it) or gone: the
		// pin stays until Close, and its host buffer mapped.
		l.d.leaked.Add(1)
		return
	}
	if l.host != nil {
		l.host.dropPin(pinKey{l.d, l.handle})
	}
	l.d.leaked.Add(1)
}

// LeakedPins counts the pins that became unreachable without Unpin while
// the Device was open: the collector unpinned them (or, when they were
// busy, left them to Close). A program that unpins what it pins reads 0.
func (d *Device) LeakedPins() uint64 { return d.leaked.Load() }

// Unpin releases the pin. It fails with ErrBusy while transfers use it.
// Unpinning an unpinned Pin does nothing.
func (p *Pin) Unpin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unpinned {
		return nil
	}
	a := unpinArg{Handle: p.Handle}
	if err := p.dev.ioctl(iocUnpin, unsafe.Pointer(&a)); err != nil {
		return newError("unpin", err, fmt.Sprintf("handle %d", p.Handle))
	}
	p.unpinned = true
	p.cleanup.Stop()
	if p.host != nil {
		p.host.dropPin(pinKey{p.dev, p.Handle})
		p.host = nil
	}
	return nil
}

// PinState is a pin as the driver sees it now.
type PinState struct {
	Revoked  bool
	Inflight int
	// Table holds the bus address of every page; only with CAP_SYS_ADMIN
	// and when asked for.
	Table *sgl.PageTable
}

// Query returns the pin's state; withTable asks for its bus addresses too.
func (p *Pin) Query(withTable bool) (PinState, error) {
	a := queryPtrArg{Handle: p.Handle}
	var pages []uint64
	if withTable {
		pages = make([]uint64, p.Pages)
		a.Pages = slicePointer(pages)
		a.Max_pages = uint32(len(pages))
	}
	if err := p.dev.ioctl(iocQuery, unsafe.Pointer(&a)); err != nil {
		return PinState{}, newError("query", err, fmt.Sprintf("handle %d", p.Handle))
	}
	st := PinState{Revoked: a.State == pinStateRevoked, Inflight: int(a.Inflight)}
	if withTable {
		st.Table = &sgl.PageTable{PageSize: uint64(a.Page_size), Pages: pages}
	}
	return st, nil
}

// Segment is Len bytes at byte Offset of a pin (offset 0 is the pinned
// address itself).
type Segment struct {
	Pin    *Pin
	Offset uint64
	Len    uint64
}

// Whole returns a segment covering all of p.
func (p *Pin) Whole() Segment { return Segment{Pin: p, Offset: 0, Len: p.Len} }
