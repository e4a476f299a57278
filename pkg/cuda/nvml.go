//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoNVML reports that libnvidia-ml.so.1, which comes with the driver,
// could not be loaded.
var ErrNoNVML = errors.New("cuda: no NVML (libnvidia-ml.so.1 not found)")

// BAR1 reports the device's BAR1 aperture: the window through which peers
// (the FPGA) reach GPU memory, which bounds what can be pinned for peer
// DMA at once. The driver API does not report it; NVML, part of the
// driver, does.
type BAR1 struct {
	Total uint64
	Free  uint64
}

// BAR1 reads the device's BAR1 aperture from NVML, finding the device by
// its PCI address (NVML and CUDA may number devices differently).
func (g *Device) BAR1() (BAR1, error) {
	bus, err := g.pciBusID()
	if err != nil {
		return BAR1{}, err
	}
	lib, err := purego.Dlopen("libnvidia-ml.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return BAR1{}, fmt.Errorf("%w: %v", ErrNoNVML, err)
	}
	defer purego.Dlclose(lib)
	l := nvmlLib(lib)
	if err := l.call("nvmlInit_v2"); err != nil {
		return BAR1{}, err
	}
	defer l.call("nvmlShutdown")
	var dev uintptr
	if err := l.call("nvmlDeviceGetHandleByPciBusId_v2", uintptr(unsafe.Pointer(&bus[0])), uintptr(unsafe.Pointer(&dev))); err != nil {
		return BAR1{}, err
	}
	var mem struct{ total, free, used uint64 } // nvmlBAR1Memory_t
	if err := l.call("nvmlDeviceGetBAR1MemoryInfo", dev, uintptr(unsafe.Pointer(&mem))); err != nil {
		return BAR1{}, err
	}
	return BAR1{Total: mem.total, Free: mem.free}, nil
}

// PCIBusID returns the device's PCI address as the driver writes it:
// "0000:65:00.0".
func (g *Device) PCIBusID() (string, error) {
	bus, err := g.pciBusID()
	if err != nil {
		return "", err
	}
	n := 0
	for n < len(bus) && bus[n] != 0 {
		n++
	}
	return string(bus[:n]), nil
}

// pciBusID returns the address NUL-terminated, as NVML takes it.
func (g *Device) pciBusID() ([]byte, error) {
	bus := make([]byte, 32)
	if err := g.drv.call(cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&bus[0])), uintptr(len(bus)), uintptr(g.dev)); err != nil {
		return nil, err
	}
	return bus, nil
}

type nvmlLib uintptr

// call invokes an NVML function returning nvmlReturn_t; pointers are
// passed as in Driver.call, kept on the heap for the call.
//
//go:uintptrescapes
func (l nvmlLib) call(name string, args ...uintptr) error {
	fn, err := purego.Dlsym(uintptr(l), name)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoNVML, name, err)
	}
	if r, _, _ := purego.SyscallN(fn, args...); int32(r) != 0 {
		return fmt.Errorf("cuda: %s: NVML error %d", name, int32(r))
	}
	return nil
}
