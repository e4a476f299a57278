package simgpu

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Memory is the simulated GPU's memory as a p2pctl --mem kind
// (cli.Memory): each Pin opens the simulated GPU, allocates with
// RandomRuns, and pins the allocation as p2pctl's --pin says: through a
// dma-buf export where the simulated driver exports them, as CUDA's
// memory would be, or through nvidia_p2p.
type Memory struct{}

// Pin allocates size bytes and pins them on d.
func (m Memory) Pin(d *p2p.Device, size uint64, seed uint32, via stream.Pinning) (*p2p.Pin, []byte, func() error, error) {
	if _, err := os.Stat(DevicePath); err != nil {
		return nil, nil, nil, fmt.Errorf("the rig's simulated GPU (%s): %w", DevicePath, err)
	}
	g, err := Open()
	if err != nil {
		return nil, nil, nil, err
	}
	via, err = stream.ChoosePinning(d, StreamGPU{GPU: g}, via)
	if err != nil {
		return nil, nil, nil, errors.Join(err, g.Close())
	}
	a, err := g.Alloc(size, RandomRuns, seed)
	if err != nil {
		g.Close()
		return nil, nil, nil, fmt.Errorf("%w (the simulated GPU has 256 MiB less one page)", err)
	}
	mem, err := a.Bytes()
	if err != nil {
		g.Close()
		return nil, nil, nil, err
	}
	pin, err := stream.PinGPU(d, streamBuffer{a}, size, via)
	if err != nil {
		return nil, nil, nil, errors.Join(err, g.Close())
	}
	return pin, mem[:size], g.Close, nil
}

// StreamGPU opens the simulated GPU for a stream's slots, fragmented.
func (Memory) StreamGPU() (stream.GPU, func() error, error) {
	g, err := Open()
	if err != nil {
		return nil, nil, err
	}
	return StreamGPU{GPU: g, Pattern: Fragmented}, g.Close, nil
}
