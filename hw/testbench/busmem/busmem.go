// Package busmem is a bus address space made of byte-slice regions: the
// view a PCIe device has of host RAM and peer BARs. Accesses outside every
// region fail as an unsupported request, as they would on PCIe.
package busmem

import (
	"fmt"
	"slices"

	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Region is one window of the address space.
type Region struct {
	Name string
	Base uint64
	Data []byte
}

// End returns the bus address one past r.
func (r Region) End() uint64 { return r.Base + uint64(len(r.Data)) }

// Map is an address space. Add regions before sharing it between goroutines;
// afterwards it is read-only and safe for concurrent use (concurrent accesses
// to the same bytes race as DMA does).
type Map struct {
	regions []Region // sorted by Base
}

// Add maps data at bus address base.
func (m *Map) Add(name string, base uint64, data []byte) error {
	r := Region{Name: name, Base: base, Data: data}
	if len(data) == 0 || r.End() < base {
		return fmt.Errorf("busmem: region %s at %#x has a bad size %d", name, base, len(data))
	}
	for _, o := range m.regions {
		if base < o.End() && o.Base < r.End() {
			return fmt.Errorf("busmem: region %s [%#x, %#x) overlaps %s", name, base, r.End(), o.Name)
		}
	}
	m.regions = append(m.regions, r)
	slices.SortFunc(m.regions, func(a, b Region) int {
		switch {
		case a.Base < b.Base:
			return -1
		case a.Base > b.Base:
			return 1
		}
		return 0
	})
	return nil
}

// Regions returns the regions in address order.
func (m *Map) Regions() []Region { return m.regions }

// Slice returns the bytes behind [addr, addr+n), which must lie in one
// region.
func (m *Map) Slice(addr uint64, n int) ([]byte, error) {
	i, _ := slices.BinarySearchFunc(m.regions, addr, func(r Region, a uint64) int {
		switch {
		case r.End() <= a:
			return -1
		case r.Base > a:
			return 1
		}
		return 0
	})
	if i < len(m.regions) {
		r := m.regions[i]
		if addr >= r.Base && uint64(n) <= r.End()-addr {
			off := addr - r.Base
			return r.Data[off : off+uint64(n)], nil
		}
	}
	return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
}

// Read copies bus memory at addr into p.
func (m *Map) Read(addr uint64, p []byte) error {
	b, err := m.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// Write copies p to bus memory at addr.
func (m *Map) Write(addr uint64, p []byte) error {
	b, err := m.Slice(addr, len(p))
	if err != nil {
		return err
	}
	copy(b, p)
	return nil
}
