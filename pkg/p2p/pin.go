//go:build linux

package p2p

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/sgl"
)

// Pin is pinned memory, named by its handle. It stays pinned until Unpin or
// until its Device is closed.
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

	dev  *Device
	host []byte // a host pin's memory, which the device writes until Unpin
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
	return d.pin(&a, fmt.Sprintf("GPU %#x+%d", va, length))
}

// PinHost pins host memory for the compat path. buf must stay allocated
// (and must not move) until the pin is gone: use memory from mmap.
func (d *Device) PinHost(buf []byte) (*Pin, error) {
	if len(buf) == 0 {
		return nil, &Error{Op: "pin", Err: unix.EINVAL, Kind: ErrInvalid, Detail: "empty host buffer"}
	}
	a := pinArg{Kind: pinKindHost, Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), Len: uint64(len(buf)), Fd: -1}
	p, err := d.pin(&a, fmt.Sprintf("host %d bytes", len(buf)))
	if err != nil {
		return nil, err
	}
	p.host = buf
	return p, nil
}

// PinDmabuf pins len bytes at offset off of the dma-buf fd.
func (d *Device) PinDmabuf(fd int, off, length uint64) (*Pin, error) {
	a := pinArg{Kind: pinKindDmabuf, Addr: off, Len: length, Fd: int32(fd)}
	return d.pin(&a, fmt.Sprintf("dma-buf fd %d %#x+%d", fd, off, length))
}

func (d *Device) pin(a *pinArg, detail string) (*Pin, error) {
	addr, length := a.Addr, a.Len
	if err := d.ioctl(iocPin, unsafe.Pointer(a)); err != nil {
		return nil, pinError(a.Kind, err, detail)
	}
	return &Pin{
		Handle: a.Handle, Kind: PinKind(a.Kind), Addr: addr, Len: length, Offset: a.Offset,
		PageSize: uint64(a.Page_size), Pages: int(a.Npages), Runs: int(a.Nruns), LargestRun: int(a.Largest_run),
		dev: d,
	}, nil
}

// Unpin releases the pin. It fails with ErrBusy while transfers use it.
func (p *Pin) Unpin() error {
	a := unpinArg{Handle: p.Handle}
	if err := p.dev.ioctl(iocUnpin, unsafe.Pointer(&a)); err != nil {
		return newError("unpin", err, fmt.Sprintf("handle %d", p.Handle))
	}
	p.host = nil
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
