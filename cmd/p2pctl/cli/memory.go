package cli

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// Memory kinds p2pctl allocates and pins by itself.
const (
	memHost = "host" // host RAM: the compat path
	memCUDA = "cuda" // GPU memory from the CUDA driver
)

// Memory is a kind of memory p2pctl can allocate and pin besides host and
// CUDA memory, named on --mem. The test rig adds its simulated GPU this
// way (hw/testbench/simgpu.Memory), so p2pctl itself links no rig code.
type Memory interface {
	// Pin allocates size bytes, pins them on d as via says (resolved
	// with stream.ChoosePinning) and returns the pin, the memory as the
	// CPU sees it, and a function that frees the memory once the pin is
	// gone. seed varies the allocation's layout.
	Pin(d *p2p.Device, size uint64, seed uint32, via stream.Pinning) (pin *p2p.Pin, mem []byte, free func() error, err error)
	// StreamGPU opens the memory as the GPU of a stream's slots.
	StreamGPU() (gpu stream.GPU, closeGPU func() error, err error)
}

// Options extend p2pctl. The zero value is p2pctl as shipped.
type Options struct {
	// Memory adds --mem kinds by name.
	Memory map[string]Memory

	doctor *doctorEnv // tests' stand-ins for the driver and CUDA
}

// memKinds lists the --mem kinds, for messages.
func (o *Options) memKinds() string {
	kinds := []string{memCUDA, memHost}
	for k := range o.Memory {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds[2:])
	return strings.Join(kinds, ", ")
}

// checkMem validates --mem before anything is opened; "" picks the default:
// cuda where a CUDA driver loads, host otherwise.
func (o *Options) checkMem(kind string) (string, error) {
	switch kind {
	case "":
		if _, err := cuda.Open(); err == nil {
			return memCUDA, nil
		}
		return memHost, nil
	case memHost, memCUDA:
		return kind, nil
	}
	if _, ok := o.Memory[kind]; ok {
		return kind, nil
	}
	return "", usageErr("--mem %q: want %s", kind, o.memKinds())
}

// buffer is memory p2pctl allocated and pinned.
type buffer struct {
	kind string
	mem  []byte       // as the CPU sees it; nil for CUDA memory
	gpu  *cuda.Buffer // CUDA memory, of dev
	dev  *cuda.Device
	pin  *p2p.Pin
	free func() error
}

func (b *buffer) close() error {
	var errs []error
	if b.pin != nil {
		errs = append(errs, b.pin.Unpin())
	}
	if b.free != nil {
		errs = append(errs, b.free())
	}
	return errors.Join(errs...)
}

// write copies p to the start of the buffer.
func (b *buffer) write(p []byte) error {
	if b.gpu != nil {
		return b.dev.Do(func() error { return b.dev.CopyHtoD(b.gpu.Ptr, p) })
	}
	copy(b.mem, p)
	return nil
}

// read copies the start of the buffer to p.
func (b *buffer) read(p []byte) error {
	if b.gpu != nil {
		return b.dev.Do(func() error { return b.dev.CopyDtoH(p, b.gpu.Ptr) })
	}
	copy(p, b.mem)
	return nil
}

// allocPinned allocates size bytes of the given kind and pins them; GPU
// memory as via says.
func (o *Options) allocPinned(d *p2p.Device, kind string, size uint64, seed uint32, via stream.Pinning) (*buffer, error) {
	b := &buffer{kind: kind}
	var err error
	switch kind {
	case memHost:
		var hb *p2p.HostBuffer
		if hb, err = d.AllocHost(size); err != nil {
			return nil, fmt.Errorf("allocate %s of host memory: %w", units.Bytes(size), err)
		}
		b.mem = hb.Bytes()
		b.free = hb.Free
		b.pin, err = d.PinHost(b.mem)
	case memCUDA:
		var g *cuda.Device
		if g, err = cuda.OpenDevice(0); err != nil {
			return nil, cudaOpenErr(err)
		}
		b.dev = g
		if err := g.Do(func() error {
			var err error
			b.gpu, err = g.Alloc(size)
			return err
		}); err != nil {
			g.Close()
			return nil, &exitError{ExitDevice, fmt.Errorf("allocate %s of CUDA memory: %w", units.Bytes(size), err)}
		}
		b.free = func() error {
			return errors.Join(g.Do(b.gpu.Free), g.Close())
		}
		b.pin, _, err = cudamem.Pin(d, g, b.gpu.Ptr, size, via)
	default:
		m, ok := o.Memory[kind]
		if !ok {
			return nil, usageErr("--mem %q: want %s", kind, o.memKinds())
		}
		pin, mem, free, err := m.Pin(d, size, seed, via)
		if err != nil {
			return nil, &exitError{ExitDevice, err}
		}
		b.pin, b.mem, b.free = pin, mem, free
		return b, nil
	}
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// openStreamGPU opens the GPU memory a stream's slots end up in.
func (o *Options) openStreamGPU(kind string) (stream.GPU, func() error, error) {
	if kind == memCUDA {
		c, err := cudamem.Open(0)
		if err != nil {
			return nil, nil, cudaOpenErr(err)
		}
		return c, c.Close, nil
	}
	m, ok := o.Memory[kind]
	if !ok {
		return nil, nil, usageErr("--mem %q: a stream needs GPU memory: want %s", kind, o.streamKinds())
	}
	g, closeGPU, err := m.StreamGPU()
	if err != nil {
		return nil, nil, &exitError{ExitDevice, err}
	}
	return g, closeGPU, nil
}

// streamKinds lists the --mem kinds a stream takes: GPU memory, not host.
func (o *Options) streamKinds() string {
	kinds := strings.Split(o.memKinds(), ", ")
	return strings.Join(slices.DeleteFunc(kinds, func(k string) bool { return k == memHost }), ", ")
}

// memHelp describes --mem.
func memHelp(o *Options) string {
	return "memory: " + o.memKinds() + " (default: cuda where a CUDA driver is present, else host)"
}

// pinningFlag is --pin: how GPU memory is pinned.
type pinningFlag struct{ p stream.Pinning }

func (f *pinningFlag) String() string { return f.p.String() }
func (f *pinningFlag) Type() string   { return "pinning" }

func (f *pinningFlag) Set(s string) error {
	p, err := stream.ParsePinning(s)
	if err != nil {
		return errors.New("want auto, dma-buf or nvidia-p2p")
	}
	f.p = p
	return nil
}

const pinHelp = "how GPU memory is pinned: auto (a dma-buf where the GPU exports them, else nvidia_p2p), dma-buf or nvidia-p2p"

// cudaOpenErr is the exit a failure to open CUDA device 0 takes: a host
// without a CUDA driver lacks a capability (ExitUnsupported); a driver
// that failed is a device error.
func cudaOpenErr(err error) error {
	if errors.Is(err, cuda.ErrNoDriver) {
		return &exitError{ExitUnsupported, err}
	}
	return &exitError{ExitDevice, err}
}
