package cli

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// Memory kinds p2pctl can allocate and pin by itself.
const (
	memHost = "host" // host RAM: the compat path
	memSim  = "sim"  // the test rig's simulated GPU (nvp2p_sim)
	memCUDA = "cuda" // GPU memory from the CUDA driver
	// memSimDmabuf is the simulated GPU's memory exported as a dma-buf and
	// pinned through it, as NVIDIA's dma-buf route does.
	memSimDmabuf = "sim-dmabuf"
)

// buffer is memory p2pctl allocated, pinned, and can read and write.
type buffer struct {
	kind string
	mem  []byte
	pin  *p2p.Pin
	va   uint64
	free func()
}

func (b *buffer) close() {
	if b.pin != nil {
		b.pin.Unpin()
	}
	if b.free != nil {
		b.free()
	}
}

// allocPinned allocates size bytes of the given kind and pins them.
func allocPinned(d *p2p.Device, kind string, size uint64, seed uint32) (*buffer, error) {
	if size == 0 {
		return nil, usageErr("--size must be more than 0")
	}
	b := &buffer{kind: kind}
	switch kind {
	case memHost:
		mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("allocate %s of host memory: %w", fmtBytes(size), err)
		}
		b.mem = mem
		b.va = 0
		b.free = func() { unix.Munmap(mem) }
		if b.pin, err = d.PinHost(mem); err != nil {
			b.close()
			return nil, err
		}
	case memSim, memSimDmabuf:
		if _, err := os.Stat(simgpu.DevicePath); err != nil {
			return nil, fmt.Errorf("--mem sim needs the rig's simulated GPU (%s): %w", simgpu.DevicePath, err)
		}
		g, err := simgpu.Open()
		if err != nil {
			return nil, err
		}
		a, err := g.Alloc(size, simgpu.RandomRuns, seed)
		if err != nil {
			g.Close()
			return nil, &exitError{ExitDevice, fmt.Errorf("%w (the simulated GPU has 256 MiB less one page)", err)}
		}
		b.free = func() { g.Close() }
		b.va = a.VA
		if b.mem, err = a.Bytes(); err != nil {
			b.close()
			return nil, err
		}
		b.mem = b.mem[:size]
		if kind == memSim {
			b.pin, err = d.PinGPU(a.VA, size, p2p.PinOptions{})
		} else {
			var f *os.File
			if f, err = a.ExportDmabuf(a.VA, a.Size); err == nil {
				b.pin, err = d.PinDmabuf(int(f.Fd()), 0, size)
				f.Close() // the pin holds the dma-buf
			}
		}
		if err != nil {
			b.close()
			return nil, err
		}
	default:
		return nil, usageErr("--mem %q: want %s, %s or %s", kind, memHost, memSim, memSimDmabuf)
	}
	return b, nil
}
