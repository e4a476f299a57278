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
	"sync/atomic"
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
	sys  ioctlFunc // issues the driver's ioctls on f

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
	shut        atomic.Bool // closed, for ioctl, which may run under mu
	leaked      atomic.Uint64

	// hostMu guards hosts. Lock order: hostMu before any
	// HostBuffer.mu, never the other way round (PinHost holds hostMu
	// while it reads each buffer's range, Free holds both). hostMu and
	// mu are never held together.
	hostMu sync.Mutex
	hosts  map[*HostBuffer]struct{} // from AllocHost, until their Free
}

// MaxUnread is how many of Submit's transfers a Device holds, in flight or
// completed and not yet received from Completions. Submit fails with
// ErrLimit beyond it, so that an unread Completions channel never stalls
// the reader that synchronous transfers and streams depend on.
const MaxUnread = 256

// Open opens a device node, e.g. /dev/gpufpga0, and checks that the
// driver behind it speaks ABIVersion (the INFO ioctl): a node of another
// driver, or of a gpufpga driver of another ABI, fails with an *ABIError
// matching ErrABI.
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
	d := newDevice(f, path, fileIoctl(f))
	if err := d.checkABI(); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

func newDevice(f *os.File, path string, sys ioctlFunc) *Device {
	return &Device{
		f:         f,
		path:      path,
		sys:       sys,
		waiters:   make(map[uint64]chan Completion),
		streams:   make(map[int]*Stream),
		submitted: make(map[uint64]uint64),
		async:     make(chan Completion, MaxUnread),
		hosts:     make(map[*HostBuffer]struct{}),
	}
}

// checkABI asks the driver for its ABI version.
func (d *Device) checkABI() error {
	var a infoArg
	err := d.ioctl(iocInfo, unsafe.Pointer(&a))
	var errno unix.Errno
	switch {
	case errors.As(err, &errno) && (errno == unix.ENOTTY || errno == unix.EINVAL):
		// No driver of ours: it does not know INFO, or not its size.
		return &ABIError{Path: d.path, Err: errno}
	case err != nil:
		return newError("open", err, d.path)
	case a.Abi_version != ABIVersion:
		return &ABIError{Path: d.path, Version: a.Abi_version}
	}
	return nil
}

// ABIError is a device node whose driver does not speak ABIVersion. It
// matches ErrABI.
type ABIError struct {
	Path string
	// Version is the ABI the driver reported; 0 when the node did not
	// answer the INFO ioctl at all (not a gpufpga device).
	Version uint32
	Err     error // the INFO ioctl's failure, when Version is 0
}

func (e *ABIError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("gpufpga open %s: %v: not a gpufpga device (INFO ioctl: %v)", e.Path, ErrABI, e.Err)
	}
	return fmt.Sprintf("gpufpga open %s: %v: the driver speaks ABI %d, this program %d", e.Path, ErrABI, e.Version, ABIVersion)
}

// Is matches ErrABI.
func (e *ABIError) Is(target error) bool { return target == ErrABI }

func (e *ABIError) Unwrap() error { return e.Err }

// Hint says what a person can do about it.
func (e *ABIError) Hint() string { return hints[ErrABI] }

// Path returns the device node the Device was opened from.
func (d *Device) Path() string { return d.path }

// Close stops the device's transfers and unpins all its memory. It waits
// for the completion reader to end: transfers still in flight complete
// with ErrDeviceGone (which also matches os.ErrClosed), running streams
// end, and Completions is closed once what it holds has been received.
// Every later call on the device, its pins and its streams fails with an
// error matching os.ErrClosed. Closing a closed Device does nothing and
// returns nil.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.shut.Store(true)
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

// ioctlFunc issues one ioctl on a device's file; it returns a unix.Errno
// for the driver's refusals.
type ioctlFunc func(req uintptr, arg unsafe.Pointer) error

// fileIoctl issues ioctls on f. A closed f fails with os.ErrClosed.
func fileIoctl(f *os.File) ioctlFunc {
	return func(req uintptr, arg unsafe.Pointer) error {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		var errno unix.Errno
		if cerr := rc.Control(func(fd uintptr) {
			_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
		}); cerr != nil {
			// The file was closed: the raw connection says so in the
			// poller's own words, not os.ErrClosed.
			return os.ErrClosed
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// ioctl issues an ioctl; after Close it fails with os.ErrClosed.
func (d *Device) ioctl(req uintptr, arg unsafe.Pointer) error {
	if d.shut.Load() {
		return os.ErrClosed
	}
	return d.sys(req, arg)
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
		return "dma-buf"
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
	// State is whether the device takes work now.
	State DeviceState
	// Resets counts the times the driver programmed the engine again since
	// it bound the card, after a function or bus reset, an AER recovery or
	// a system sleep; what ran then failed with ErrReset. Errors counts
	// the uncorrectable PCIe (AER) errors reported to the driver.
	Resets, Errors uint32
	// ResidentStreams says whether the driver runs GPU-resident streams
	// (StartResidentStream).
	ResidentStreams bool
}

// DeviceState is where the device is in its lifecycle.
type DeviceState uint32

const (
	// DeviceReady takes work.
	DeviceReady DeviceState = devReady
	// DeviceRecovering is being reset, recovered from a PCIe error or
	// put to sleep; work fails with ErrReset until it is ready again.
	DeviceRecovering DeviceState = devRecovering
	// DeviceOffline does not answer on the bus; work fails with
	// ErrDeviceGone until a reset or a rebind brings it back.
	DeviceOffline DeviceState = devOffline
)

func (s DeviceState) String() string {
	switch s {
	case DeviceReady:
		return "ready"
	case DeviceRecovering:
		return "recovering"
	case DeviceOffline:
		return "offline"
	}
	return fmt.Sprintf("DeviceState(%d)", uint32(s))
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
		State: DeviceState(a.State), Resets: a.Resets, Errors: a.Errors, ResidentStreams: a.Features&featureResident != 0,
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
