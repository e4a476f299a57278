//go:build vmguest

package kmodtest

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestRevocablePinsNeedRawIO: a revocable NVIDIA pin, whose API lets a
// cudaFree racing the pin corrupt kernel memory, is refused to a caller
// without CAP_SYS_RAWIO with EPERM, unless nv_revocable_pins opens it;
// persistent pins, which have no such window, stay open to all.
func TestRevocablePinsNeedRawIO(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	// The opener's capability counts, not the caller's: a file opened
	// without it pins revocably nowhere, one opened with it everywhere.
	withoutCapability(t, unix.CAP_SYS_RAWIO, func() {
		p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{})
		if err != nil {
			t.Fatalf("revocable pin on a file opened with CAP_SYS_RAWIO: %v", err)
		}
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
		u, err := p2p.Open(devPath)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		p, err = u.PinGPU(a.VA, a.Size, p2p.PinOptions{})
		if !errors.Is(err, p2p.ErrPermission) || !errors.Is(err, unix.EPERM) {
			if err == nil {
				p.Unpin()
			}
			t.Fatalf("revocable pin without CAP_SYS_RAWIO: %v, want EPERM", err)
		}
		p, err = u.PinGPU(a.VA, a.Size, p2p.PinOptions{Persistent: true})
		if err != nil {
			t.Fatalf("persistent pin without CAP_SYS_RAWIO: %v", err)
		}
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	})
	restore := setParam(t, "nv_revocable_pins", "1")
	defer restore()
	withoutCapability(t, unix.CAP_SYS_RAWIO, func() {
		u, err := p2p.Open(devPath)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		p, err := u.PinGPU(a.VA, a.Size, p2p.PinOptions{})
		if err != nil {
			t.Fatalf("revocable pin with nv_revocable_pins=1: %v", err)
		}
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	})
}
