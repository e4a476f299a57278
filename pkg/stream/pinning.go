//go:build linux

package stream

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Pinning says how a ring in GPU memory is pinned for the FPGA.
type Pinning int

// Pinnings.
const (
	// PinAuto pins through a dma-buf where the GPU exports them and the
	// driver imports them, and through nvidia_p2p otherwise.
	PinAuto Pinning = iota
	// PinDmabuf pins through a dma-buf of the GPU memory (CUDA's
	// cuMemGetHandleForAddressRange), the way NVIDIA recommends since it
	// deprecated nvidia_p2p.
	PinDmabuf
	// PinP2P pins through NVIDIA's nvidia_p2p API.
	PinP2P
)

func (p Pinning) String() string {
	switch p {
	case PinAuto:
		return "auto"
	case PinDmabuf:
		return "dma-buf"
	case PinP2P:
		return "nvidia-p2p"
	}
	return fmt.Sprintf("Pinning(%d)", int(p))
}

// ParsePinning is the inverse of Pinning.String; it also takes "p2p".
func ParsePinning(s string) (Pinning, error) {
	switch s {
	case "auto":
		return PinAuto, nil
	case "dma-buf", "dmabuf":
		return PinDmabuf, nil
	case "nvidia-p2p", "p2p":
		return PinP2P, nil
	}
	return 0, fmt.Errorf("%w: pinning %q: want auto, dma-buf or nvidia-p2p", ErrConfig, s)
}

// DmabufGPU is a GPU that can say whether it exports its memory as
// dma-bufs (CUDA: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED). A driver too old
// to know is a no, not an error.
type DmabufGPU interface {
	DmabufSupported() (bool, error)
}

// DmabufBuffer is a GPUBuffer that can export a range of itself as a
// dma-buf.
type DmabufBuffer interface {
	// ExportDmabuf returns a dma-buf of n bytes at offset off of the
	// buffer. The caller closes it; a pin holds its own reference.
	ExportDmabuf(off, n uint64) (*os.File, error)
}

// ChoosePinning resolves want for memory of g (nil: a GPU that exports no
// dma-bufs) on d: what PinAuto picks, or why a forced choice cannot work.
func ChoosePinning(d *p2p.Device, g DmabufGPU, want Pinning) (Pinning, error) {
	info, exports, err := pinningFacts(d, g)
	if err != nil {
		return 0, err
	}
	return choosePinning(info, exports, want)
}

// pinningFacts asks the driver what it pins and the GPU whether it
// exports dma-bufs (nil: it does not).
func pinningFacts(d *p2p.Device, g DmabufGPU) (p2p.Info, bool, error) {
	info, err := d.Info()
	if err != nil {
		return p2p.Info{}, false, err
	}
	exports := false
	if g != nil {
		if exports, err = g.DmabufSupported(); err != nil {
			return p2p.Info{}, false, err
		}
	}
	return info, exports, nil
}

func choosePinning(info p2p.Info, gpuExports bool, want Pinning) (Pinning, error) {
	dmabuf := gpuExports && info.Supports(p2p.KindDmabuf)
	switch want {
	case PinAuto:
		if dmabuf {
			return PinDmabuf, nil
		}
		return PinP2P, nil
	case PinDmabuf:
		if !gpuExports {
			return 0, fmt.Errorf("%w: pinning through a dma-buf: the GPU does not export them (that needs NVIDIA's open kernel modules, R515 or later, and a Turing or newer GPU)", ErrUnsupported)
		}
		if !dmabuf {
			return 0, fmt.Errorf("%w: pinning through a dma-buf: the gpufpga driver does not import them", ErrUnsupported)
		}
		return PinDmabuf, nil
	case PinP2P:
		return PinP2P, nil
	}
	return 0, fmt.Errorf("%w: %v", ErrConfig, want)
}

// SelectMode is the one choice of mode and pinning that Start (through
// Config.Resolve) and p2pctl make, from what the driver offers (info), whether
// the GPU exports dma-bufs, and what was asked for. Auto is direct mode
// when the ring in GPU memory can be pinned at all: through a dma-buf
// where both sides can, else through nvidia_p2p where the driver has it;
// compat mode otherwise. Direct mode keeps the pinning asked for (PinAuto
// resolved as ChoosePinning does); compat mode takes no pinning.
func SelectMode(info p2p.Info, gpuExports bool, mode Mode, want Pinning) (Mode, Pinning, error) {
	switch mode {
	case Compat:
		if want != PinAuto {
			return 0, 0, fmt.Errorf("%w: pinning %v is for a ring in GPU memory, not compat mode's", ErrConfig, want)
		}
		return Compat, PinAuto, nil
	case Auto, Direct:
	default:
		return 0, 0, fmt.Errorf("%w: %v", ErrConfig, mode)
	}
	p, err := choosePinning(info, gpuExports, want)
	if err != nil {
		return 0, 0, err
	}
	if mode == Direct || p == PinDmabuf || info.Supports(p2p.KindGPU) {
		return Direct, p, nil
	}
	return Compat, PinAuto, nil
}

// PinNVP2P pins n bytes of GPU memory at va through nvidia_p2p: revocably
// where the driver lets the caller (a cudaFree then ends what uses the
// pin), else persistently (the free waits for the unpin).
func PinNVP2P(d *p2p.Device, va, n uint64) (*p2p.Pin, error) {
	return pinNVP2P(d.PinGPU, va, n)
}

// pinNVP2P is PinNVP2P through pin: Device.PinGPU, or a test's.
func pinNVP2P(pin func(va, n uint64, o p2p.PinOptions) (*p2p.Pin, error), va, n uint64) (*p2p.Pin, error) {
	p, err := pin(va, n, p2p.PinOptions{})
	if !errors.Is(err, p2p.ErrPermission) {
		return p, err
	}
	// Revocable pins are the driver's to grant (CAP_SYS_RAWIO or
	// gpufpga's nv_revocable_pins); a persistent one is open to every
	// user of the device, where the NVIDIA driver has persistent pins.
	p, err = pin(va, n, p2p.PinOptions{Persistent: true})
	if errors.Is(err, p2p.ErrPermission) {
		return nil, &gpuPinPermError{err}
	}
	return p, err
}

// gpuPinPermError is a GPU pin refused both ways: its hint names the
// cause, where p2p's names the device node's permissions.
type gpuPinPermError struct{ err error }

func (e *gpuPinPermError) Error() string { return e.err.Error() }
func (e *gpuPinPermError) Unwrap() error { return e.err }

// Hint says what lets the pin through.
func (e *gpuPinPermError) Hint() string {
	return "a revocable GPU pin needs CAP_SYS_RAWIO or gpufpga's nv_revocable_pins=1, and this NVIDIA driver has no persistent pins: " +
		"grant either, or pin through a dma-buf (NVIDIA's open kernel modules)"
}

// PinGPU pins the first n bytes of b on d as p says (PinDmabuf or
// PinP2P, as PinNVP2P does).
func PinGPU(d *p2p.Device, b GPUBuffer, n uint64, p Pinning) (*p2p.Pin, error) {
	if p == PinP2P {
		return PinNVP2P(d, b.Addr(), n)
	}
	exp, ok := b.(DmabufBuffer)
	if !ok {
		return nil, fmt.Errorf("%w: this GPU's buffers cannot be exported as dma-bufs", ErrUnsupported)
	}
	// The whole buffer: exporters take whole GPU pages.
	f, err := exp.ExportDmabuf(0, b.Size())
	if err != nil {
		return nil, fmt.Errorf("dma-buf export: %w", err)
	}
	defer f.Close()
	return d.PinDmabuf(int(f.Fd()), 0, n)
}
