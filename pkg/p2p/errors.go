package p2p

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Errors a caller can test for with errors.Is. Every error this package
// returns for a failed driver call is an *Error that matches one of these
// (or the raw errno). A call on a closed Device, or on its pins and
// streams, fails with an *Error matching os.ErrClosed.
var (
	ErrRevoked        = errors.New("pinned memory was revoked (freed by its owner)")
	ErrTimeout        = errors.New("transfer timed out")
	ErrP2PUnavailable = errors.New("peer-to-peer pinning unavailable")
	ErrLimit          = errors.New("limit exceeded")
	ErrDeviceGone     = errors.New("device gone")
	ErrInvalid        = errors.New("invalid argument")
	ErrNotFound       = errors.New("no such pin or transfer")
	ErrBusy           = errors.New("pin has transfers in flight")
	ErrHardware       = errors.New("DMA engine reported an error")
	ErrCanceled       = errors.New("transfer canceled")
	ErrPermission     = errors.New("permission denied")
	ErrNoDevice       = errors.New("no gpufpga device")
	ErrSlotLayout     = errors.New("a packet ended inside a slot of several descriptors")
	ErrNoCardMemory   = errors.New("card memory size not configured")
	ErrBounceBuffers  = errors.New("DMA to this host memory needs bounce buffers or cache maintenance")
	ErrIOMMUBypass    = errors.New("dma-buf addresses are not mapped by the IOMMU that translates for the FPGA")
	// ErrABI is a device node whose driver is not gpufpga of the ABI this
	// package speaks (Open's *ABIError).
	ErrABI = errors.New("driver ABI not supported")
	// ErrReset: the card was reset (a function or bus reset, AER error
	// recovery) or went to sleep, and what ran on it ended; pins stay
	// valid, and the work can be submitted again once it is back.
	ErrReset = errors.New("card reset: its engine state was lost")
	// ErrConsumer: a GPU-resident stream's consumer published a count
	// the engine had not reached, or one that went back.
	ErrConsumer = errors.New("the resident consumer's count is out of range")
)

var errnoKinds = map[unix.Errno]error{
	unix.EKEYREVOKED: ErrRevoked,
	unix.ETIMEDOUT:   ErrTimeout,
	unix.EOPNOTSUPP:  ErrP2PUnavailable,
	unix.ENOSPC:      ErrLimit,
	unix.E2BIG:       ErrLimit,
	unix.EAGAIN:      ErrLimit,
	unix.ENODEV:      ErrDeviceGone,
	unix.EINVAL:      ErrInvalid,
	unix.ENOENT:      ErrNotFound,
	unix.EBUSY:       ErrBusy,
	unix.EIO:         ErrHardware,
	unix.ECANCELED:   ErrCanceled,
	unix.EINTR:       ErrCanceled,
	unix.EPERM:       ErrPermission,
	unix.EACCES:      ErrPermission,
	unix.EPROTO:      ErrSlotLayout,
	unix.ENXIO:       ErrNoCardMemory,
	unix.ECONNRESET:  ErrReset,
	unix.ERANGE:      ErrConsumer,
}

var hints = map[error]string{
	ErrP2PUnavailable: "nvidia.ko is not loaded or the buffer cannot be pinned for peer DMA: pin host memory (the compat path) or load the NVIDIA driver",
	ErrRevoked:        "the GPU memory was freed while pinned: unpin the handle and pin the new buffer",
	ErrTimeout:        "the engine stalled and was halted: check the FPGA design's AXI side; the status says where it stopped",
	ErrLimit:          "read completions before submitting more, or raise the gpufpga module parameters (max_pins, max_pinned, max_descs, max_segs, max_queued)",
	ErrDeviceGone:     "the FPGA's PCIe link is down or the driver was unbound: reload gpufpga after the link is back",
	ErrPermission:     "add the user to the gpufpga group (udev rule 99-gpufpga.rules), or run as root for bus addresses",
	ErrBusy:           "wait for the pin's transfers to complete before unpinning",
	ErrHardware:       "the engine stopped on an error: the decoded status names it",
	ErrBounceBuffers:  "host pins need direct DMA: boot without swiotlb=force, put the FPGA in IOMMU passthrough (iommu=pt), or pin GPU memory",
	ErrNoCardMemory:   "load gpufpga with card_mem_size=<bytes of card memory behind the memory-mapped channels>, so that card addresses can be checked",
	ErrIOMMUBypass:    "the exporter handed over raw PCIe addresses (CUDA's PCIe mapping type, or NVreg_DmaRemapPeerMmio=0): export with the default mapping type, or put the FPGA's IOMMU group in passthrough (iommu=pt)",
	ErrABI:            "install p2pctl and the gpufpga module from one release, or check that the node is a gpufpga device (/dev/gpufpga*)",
	ErrReset:          "submit the work again, or start the stream again: the card is programmed anew once it is back (p2pctl info counts resets)",
	ErrConsumer:       "the consumer publishes in consumer->consumed how many fills it consumed, counting from 0 at the start, never more than it saw filled (gpufpga_resident.h)",
	ErrSlotLayout:     "make the FPGA's packets (TLAST) as long as a slot, or use slots that are bus-contiguous (GPU memory, or host slots of one page)",
}

// Error is a failed driver call.
type Error struct {
	Op     string     // "pin", "transfer", ...
	Err    unix.Errno // what the driver returned
	Status uint32     // XDMA channel status, for transfers
	Dir    Direction  // for transfers
	Chan   int        // for transfers
	Kind   error      // the sentinel the failure matches, or nil
	HasHW  bool       // Status, Dir and Chan are meaningful
	Detail string     // what the caller asked for, briefly
	// closed: the Device was closed under the call, which then also
	// matches os.ErrClosed.
	closed bool
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("gpufpga %s", e.Op)
	if e.Detail != "" {
		msg += " " + e.Detail
	}
	what := e.Err.Error()
	switch {
	case e.Kind == os.ErrClosed:
		what = "device closed"
	case e.Kind != nil:
		what = e.Kind.Error()
	}
	msg += ": " + what
	if e.HasHW && e.Status != 0 {
		msg += " (" + xdma.DecodeStatus(xdma.Direction(e.Dir), e.Chan, e.Status) + ")"
	}
	return msg
}

// Hint says what a person can do about the error, or "".
func (e *Error) Hint() string {
	if e.closed {
		return ""
	}
	return hints[e.Kind]
}

// Is matches the sentinel kinds and the errno.
func (e *Error) Is(target error) bool {
	return target == e.Kind || (e.closed && target == os.ErrClosed)
}

func (e *Error) Unwrap() error { return e.Err }

// pinError is newError for a pin of kind: for host memory, "not
// available" (EOPNOTSUPP) means the platform would bounce or cache-maintain
// every DMA, which long-lived pins cannot have, not that peer-to-peer is
// missing; for a dma-buf, EXDEV means its addresses bypass the IOMMU.
func pinError(kind uint32, err error, detail string) error {
	err = newError("pin", err, detail)
	if e, ok := err.(*Error); ok {
		switch {
		case kind == pinKindHost && e.Err == unix.EOPNOTSUPP:
			e.Kind = ErrBounceBuffers
		case kind == pinKindDmabuf && e.Err == unix.EXDEV:
			e.Kind = ErrIOMMUBypass
		}
	}
	return err
}

func newError(op string, err error, detail string) error {
	if errors.Is(err, os.ErrClosed) {
		return closedError(op, detail)
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("gpufpga %s: %w", op, err)
	}
	return &Error{Op: op, Err: errno, Kind: errnoKinds[errno], Detail: detail}
}

// closedError is a call on a closed Device.
func closedError(op, detail string) *Error {
	return &Error{Op: op, Err: unix.EBADF, Kind: os.ErrClosed, Detail: detail}
}
