//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Two GPUs of one host as peers: one's kernels reading and writing the
// other's memory by its own addresses (unified addressing), over NVLink or
// PCIe, as an FPGA writes a GPU's memory.

// DeviceInfo returns device n without retaining its primary context, as
// DeviceAt does: its name, attributes, PCI address and BAR1 can be read,
// and nothing run on it.
func (d *Driver) DeviceInfo(n int) (*Device, error) {
	g := &Device{drv: d, ordinal: -1}
	if err := d.call(cuDeviceGet, uintptr(unsafe.Pointer(&g.dev)), uintptr(n)); err != nil {
		return nil, err
	}
	return g, nil
}

// CanAccessPeer reports whether g's kernels can reach peer's memory
// (cuDeviceCanAccessPeer); EnablePeerAccess turns that on.
func (g *Device) CanAccessPeer(peer *Device) (bool, error) {
	var v int32
	if err := g.drv.call(cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&v)), uintptr(g.dev), uintptr(peer.dev)); err != nil {
		return false, err
	}
	return v != 0, nil
}

// EnablePeerAccess maps peer's memory, what is allocated now and later,
// into g's context (cuCtxEnablePeerAccess with g's context current): g's
// kernels then read and write peer's device memory by peer's own
// addresses. Access already enabled is no error; it goes one way only.
func (g *Device) EnablePeerAccess(peer *Device) error {
	if peer.ctx == 0 {
		return &Error{Op: symNames[cuCtxEnablePeerAccess], Code: int(ErrorInvalidContext), Msg: "the peer has no context (DeviceAt, DeviceInfo)"}
	}
	err := g.call(cuCtxEnablePeerAccess, peer.ctx, 0)
	if errors.Is(err, ErrorPeerAccessAlreadyEnabled) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cuda: peer access from device %d to device %d: %w", g.ordinal, peer.ordinal, err)
	}
	return nil
}

// Ordinal is the device's number as Driver.Device took it; -1 for one
// found by DeviceAt or DeviceInfo.
func (g *Device) Ordinal() int { return int(g.ordinal) }
