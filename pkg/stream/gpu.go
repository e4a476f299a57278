//go:build linux

package stream

import (
	"errors"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// GPU is GPU memory a peer can write, and the copies into it that compat
// mode makes: CUDA on real GPUs (package stream/cudamem), the rig's
// simulated GPU in tests (hw/testbench/simgpu). A session behaves the same
// on either.
type GPU interface {
	// Alloc allocates size bytes of device memory, 64 KiB aligned, that
	// a peer may write.
	Alloc(size uint64) (GPUBuffer, error)
	// RegisterHost prepares host memory to be the source of asynchronous
	// copies (CUDA page-locks it for its copy engines); the returned
	// function undoes it.
	RegisterHost(b []byte) (unregister func() error, err error)
}

// GPUBuffer is one allocation of GPU memory.
type GPUBuffer interface {
	// Addr is the buffer's GPU virtual address: what p2p.Device.PinGPU
	// takes.
	Addr() uint64
	Size() uint64
	// CopyIn starts copying src to offset off of the buffer. src lies in
	// memory given to the GPU's RegisterHost, and must stay untouched
	// until the copy's Wait returns.
	CopyIn(off uint64, src []byte) (Copy, error)
	Free() error
}

// Copy is a copy in flight.
type Copy interface {
	Wait() error
}

// CPUVisible is a GPUBuffer the CPU can read (the simulated GPU's, through
// its BAR): sessions hand its bytes to the consumer and can check frames on
// the CPU.
type CPUVisible interface {
	Bytes() []byte
}

// ReadBack is a GPUBuffer whose bytes the CPU can copy out (cudamem's): in
// compat mode, CheckCPU checks what reached the GPU through it, not the
// host slot it was copied from.
type ReadBack interface {
	// CopyOut copies len(dst) bytes at offset off of the buffer to dst,
	// and returns when they are there.
	CopyOut(dst []byte, off uint64) error
}

// FrameChecker checks frames where they landed in GPU memory.
type FrameChecker interface {
	// Check verifies the frames in [off, off+n) of b, in order, and
	// accounts for them; it returns when they are checked.
	Check(b GPUBuffer, off, n uint64) error
	Stats() frame.Stats
	Close() error
}

// GPUChecking is a GPU that can check frames in its memory (cudamem, with
// package gpucheck's kernel).
type GPUChecking interface {
	NewFrameChecker(frameSize, maxFrames int) (FrameChecker, error)
}

// hostRing is page-aligned host memory for compat mode, pinned for the
// FPGA and registered with the GPU for copies; with Attach, only the
// registration of the caller's memory.
type hostRing struct {
	buf        *p2p.HostBuffer
	mem        []byte
	pin        *p2p.Pin
	unregister func() error
}

func allocHostRing(d *p2p.Device, g GPU, size uint64) (*hostRing, error) {
	buf, err := d.AllocHost(size)
	if err != nil {
		return nil, fmt.Errorf("host ring: %w", err)
	}
	h := &hostRing{buf: buf, mem: buf.Bytes()}
	if h.pin, err = d.PinHost(h.mem); err != nil {
		h.free()
		return nil, err
	}
	if h.unregister, err = g.RegisterHost(h.mem); err != nil {
		h.free()
		return nil, err
	}
	return h, nil
}

func (h *hostRing) free() error {
	var errs []error
	if h.unregister != nil {
		errs = append(errs, h.unregister())
	}
	if h.pin != nil {
		errs = append(errs, h.pin.Unpin())
	}
	if h.buf != nil {
		errs = append(errs, h.buf.Free())
	}
	return errors.Join(errs...)
}
