//go:build linux

// Package p2p is the Go client of the gpufpga driver: open a device, pin GPU,
// host or dma-buf memory, and move data between pinned memory and the FPGA's
// XDMA channels, synchronously (with a context) or asynchronously.
//
// Errors are *Error values that match this package's sentinels with
// errors.Is and carry the decoded engine status where there is one.
package p2p

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direction of a transfer.
type Direction int

// Directions.
const (
	H2C Direction = dirH2C // pinned memory -> card
	C2H Direction = dirC2H // card -> pinned memory
)

func (d Direction) String() string {
	if d == C2H {
		return "c2h"
	}
	return "h2c"
}

// ABIVersion is the driver ABI this package speaks (GPUFPGA_ABI_VERSION):
// a driver reporting another in Info is not one it can drive.
const ABIVersion = abiVersion

// DevicePattern matches the driver's device nodes.
const DevicePattern = "/dev/gpufpga*"

// Devices lists the gpufpga device nodes present, in order.
func Devices() ([]string, error) {
	paths, err := filepath.Glob(DevicePattern)
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	return paths, nil
}

// Device is an open gpufpga device. Its pins and transfers belong to it and
// end when it is closed. A Device is safe for concurrent use.
type Device struct {
	f    *os.File
	path string

	mu      sync.Mutex
	waiters map[uint64]chan Completion // sync transfers waiting for their id
	streams map[int]*Stream            // running streams by C2H channel
	// submitted holds the user data of Submit's transfers in flight. Each
	// has a place reserved in async, so the reader never blocks on it.
	submitted   map[uint64]uint64
	async       chan Completion // completions of Submit
	asyncClosed bool
	readerErr   error
	reading     bool
	readerDone  chan struct{} // closed when the running reader returns
	closed      bool
}

// MaxUnread is how many of Submit's transfers a Device holds, in flight or
// completed and not yet received from Completions. Submit fails with
// ErrLimit beyond it, so that an unread Completions channel never stalls
// the reader that synchronous transfers and streams depend on.
const MaxUnread = 256

// Open opens a device node, e.g. /dev/gpufpga0.
func Open(path string) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("%w: %s does not exist (is the gpufpga module loaded?)", ErrNoDevice, path)
		case errors.Is(err, os.ErrPermission):
			return nil, &Error{Op: "open", Err: unix.EACCES, Kind: ErrPermission, Detail: path}
		}
		return nil, fmt.Errorf("gpufpga open: %w", err)
	}
	return &Device{
		f:         f,
		path:      path,
		waiters:   make(map[uint64]chan Completion),
		streams:   make(map[int]*Stream),
		submitted: make(map[uint64]uint64),
		async:     make(chan Completion, MaxUnread),
	}, nil
}

// Path returns the device node the Device was opened from.
func (d *Device) Path() string { return d.path }

// Close stops the device's transfers and unpins all its memory. It waits
// for the completion reader to end: transfers still in flight complete
// with ErrDeviceGone, running streams end, and Completions is closed once
// what it holds has been received.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return &Error{Op: "close", Err: unix.EBADF, Kind: ErrDeviceGone, Detail: "device closed"}
	}
	d.closed = true
	reading, done := d.reading, d.readerDone
	d.mu.Unlock()
	// Closing the file wakes the reader's read (the driver polls).
	err := d.f.Close()
	if reading {
		<-done
	}
	d.mu.Lock()
	d.closeAsync()
	d.mu.Unlock()
	return err
}

// closeAsync closes Completions once. Called with d.mu held.
func (d *Device) closeAsync() {
	if !d.asyncClosed {
		d.asyncClosed = true
		close(d.async)
	}
}

func (d *Device) ioctl(req uintptr, arg unsafe.Pointer) error {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); cerr != nil {
		return cerr
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// Channel describes one XDMA channel.
type Channel struct {
	Dir    Direction
	Index  int
	Stream bool // AXI4-Stream; otherwise memory mapped
}

// PinKind is the kind of memory a pin holds.
type PinKind uint32

// Pin kinds.
const (
	KindGPU    PinKind = pinKindGPU
	KindHost   PinKind = pinKindHost
	KindDmabuf PinKind = pinKindDmabuf
)

func (k PinKind) String() string {
	switch k {
	case KindGPU:
		return "gpu"
	case KindHost:
		return "host"
	case KindDmabuf:
		return "dmabuf"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Info describes a device and its driver.
type Info struct {
	ABIVersion       uint32
	IPVersion        uint32
	Channels         []Channel
	PinKinds         []PinKind
	CardMemSize      uint64
	MaxDescLen       uint32
	MaxDescs         uint32
	MaxSegs          uint32
	MaxPins          uint32
	MaxPinned        uint64
	MaxPinnedTotal   uint64
	PinnedTotal      uint64
	DefaultTimeoutMS uint32
	MaxQueued        uint32
}

// Supports reports whether pins of kind k are available.
func (i Info) Supports(k PinKind) bool {
	for _, x := range i.PinKinds {
		if x == k {
			return true
		}
	}
	return false
}

// Channel returns the channel of dir and index, and whether it exists.
func (i Info) Channel(dir Direction, index int) (Channel, bool) {
	for _, c := range i.Channels {
		if c.Dir == dir && c.Index == index {
			return c, true
		}
	}
	return Channel{}, false
}

// Info queries the device.
func (d *Device) Info() (Info, error) {
	var a infoArg
	if err := d.ioctl(iocInfo, unsafe.Pointer(&a)); err != nil {
		return Info{}, newError("info", err, "")
	}
	info := Info{
		ABIVersion: a.Abi_version, IPVersion: a.Ip_version, CardMemSize: a.Card_mem_size,
		MaxDescLen: a.Max_desc_len, MaxDescs: a.Max_descs, MaxSegs: a.Max_segs, MaxPins: a.Max_pins,
		MaxPinned: a.Max_pinned, MaxPinnedTotal: a.Max_pinned_total, PinnedTotal: a.Pinned_total,
		DefaultTimeoutMS: a.Default_timeout_ms, MaxQueued: a.Max_queued,
	}
	for dir, flags := range [2][maxChannels]uint32{a.H2c, a.C2h} {
		for i, f := range flags {
			if f&chanPresent != 0 {
				info.Channels = append(info.Channels, Channel{Dir: Direction(dir), Index: i, Stream: f&chanStream != 0})
			}
		}
	}
	for _, k := range []PinKind{KindGPU, KindHost, KindDmabuf} {
		if a.Pin_kinds&(1<<k) != 0 {
			info.PinKinds = append(info.PinKinds, k)
		}
	}
	return info, nil
}
