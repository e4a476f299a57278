//go:build linux

package stream

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// HostMemory allocates pinned host memory for compat mode.
type HostMemory struct{}

// Alloc implements Memory.
func (HostMemory) Alloc(d *p2p.Device, size uint64) (Region, error) {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return Region{}, fmt.Errorf("host memory: %w", err)
	}
	pin, err := d.PinHost(mem)
	if err != nil {
		unix.Munmap(mem)
		return Region{}, err
	}
	return Region{Pin: pin, Bytes: mem, Free: func() error {
		err := pin.Unpin()
		unix.Munmap(mem)
		return err
	}}, nil
}
