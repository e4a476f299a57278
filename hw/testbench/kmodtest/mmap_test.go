//go:build vmguest

package kmodtest

import "github.com/gpufpga/gpufpga/pkg/p2p"

// hostMem maps n bytes of host memory that d hands out for PinHost; the
// Device keeps it for the test process's life.
func hostMem(d *p2p.Device, n int) ([]byte, error) {
	h, err := d.AllocHost(uint64(n))
	if err != nil {
		return nil, err
	}
	return h.Bytes(), nil
}
