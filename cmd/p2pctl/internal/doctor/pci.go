package doctor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// host reads the machine's files through an fs.FS rooted at its /. Paths
// are fs.FS paths: "sys/bus/pci/devices", without a leading slash.
type host struct{ fsys fs.FS }

// read returns a file's contents, trimmed.
func (h host) read(name string) (string, error) {
	b, err := fs.ReadFile(h.fsys, name)
	return strings.TrimSpace(string(b)), err
}

func (h host) exists(name string) bool {
	_, err := fs.Stat(h.fsys, name)
	return err == nil
}

// resolve follows the link name to the path it names, relative targets
// (all sysfs uses) taken from the link's directory.
func (h host) resolve(name string) (string, error) {
	target, err := fs.ReadLink(h.fsys, name)
	if err != nil {
		return "", err
	}
	if path.IsAbs(target) {
		return strings.TrimPrefix(path.Clean(target), "/"), nil
	}
	p := path.Join(path.Dir(name), target)
	if !fs.ValidPath(p) {
		return "", fmt.Errorf("%s: link %q leaves the root", name, target)
	}
	return p, nil
}

// linkBase returns the last element of the path the link name points to:
// a device's driver or IOMMU group.
func (h host) linkBase(name string) (string, error) {
	p, err := h.resolve(name)
	if err != nil {
		return "", err
	}
	return path.Base(p), nil
}

const (
	pciDevicesDir = "sys/bus/pci/devices"

	vendorXilinx = 0x10ee
	vendorNVIDIA = 0x10de
	driverName   = "gpufpga"
)

var bdfRE = regexp.MustCompile(`^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// pciDev is a PCI function as sysfs shows it.
type pciDev struct {
	BDF    string
	Dir    string // under sys/devices, links resolved
	Vendor uint16
	Device uint16
	Class  uint32
	Driver string // "" when unbound
}

func (p pciDev) isFPGA() bool { return p.Driver == driverName || p.Vendor == vendorXilinx }

func (p pciDev) isNVIDIAGPU() bool { return p.Vendor == vendorNVIDIA && p.Class>>16 == 0x03 }

func (p pciDev) file(name string) string { return path.Join(p.Dir, name) }

// pciDevices lists the PCI functions, by address.
func (h host) pciDevices() ([]pciDev, error) {
	ents, err := fs.ReadDir(h.fsys, pciDevicesDir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var devs []pciDev
	for _, e := range ents {
		p, err := h.pciDevice(e.Name())
		if err != nil {
			// A function that vanished (hot unplug) or a stray
			// entry: the rest are still worth checking.
			continue
		}
		devs = append(devs, p)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].BDF < devs[j].BDF })
	return devs, nil
}

func (h host) pciDevice(bdf string) (pciDev, error) {
	if !bdfRE.MatchString(bdf) {
		return pciDev{}, fmt.Errorf("%q is not a PCI address", bdf)
	}
	dir, err := h.resolve(path.Join(pciDevicesDir, bdf))
	if err != nil {
		return pciDev{}, fmt.Errorf("PCI device %s: %w", bdf, err)
	}
	p := pciDev{BDF: bdf, Dir: dir}
	for _, f := range []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"vendor", 16, func(v uint64) { p.Vendor = uint16(v) }},
		{"device", 16, func(v uint64) { p.Device = uint16(v) }},
		{"class", 24, func(v uint64) { p.Class = uint32(v) }},
	} {
		s, err := h.read(p.file(f.name))
		if err != nil {
			return pciDev{}, fmt.Errorf("PCI device %s: %w", bdf, err)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, f.bits)
		if err != nil {
			return pciDev{}, fmt.Errorf("PCI device %s: %s: %w", bdf, f.name, err)
		}
		f.set(v)
	}
	if drv, err := h.linkBase(p.file("driver")); err == nil {
		p.Driver = drv
	}
	return p, nil
}

// upstream returns the bridges above p, root port first, and the host
// bridge they hang from ("pci0000:00"), from p's place in sys/devices.
func (p pciDev) upstream() (bridges []string, hostBridge string) {
	for _, e := range strings.Split(p.Dir, "/") {
		switch {
		case bdfRE.MatchString(e):
			if e != p.BDF {
				bridges = append(bridges, e)
			}
		case strings.HasPrefix(e, "pci") && len(bridges) == 0:
			hostBridge = e
		}
	}
	return bridges, hostBridge
}

// link is a function's PCIe link, as sysfs reports it.
type link struct {
	Speed, MaxSpeed float64 // GT/s; 0 when unknown
	Width, MaxWidth int
}

func (h host) link(p pciDev) (link, error) {
	var l link
	var err error
	if l.Speed, err = h.speed(p.file("current_link_speed")); err != nil {
		return l, err
	}
	if l.MaxSpeed, err = h.speed(p.file("max_link_speed")); err != nil {
		return l, err
	}
	if l.Width, err = h.width(p.file("current_link_width")); err != nil {
		return l, err
	}
	l.MaxWidth, err = h.width(p.file("max_link_width"))
	return l, err
}

// speed reads "8.0 GT/s PCIe" (older kernels: "8 GT/s"); "Unknown" is 0.
func (h host) speed(name string) (float64, error) {
	s, err := h.read(name)
	if err != nil {
		return 0, err
	}
	f, _, _ := strings.Cut(s, " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0, nil
	}
	return v, nil
}

func (h host) width(name string) (int, error) {
	s, err := h.read(name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimPrefix(s, "x"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// bar is one assigned region from a function's resource file.
type bar struct {
	Index    int
	Size     uint64
	Flags    uint64
	Mem64    bool
	Prefetch bool
}

// IORESOURCE_* flags (include/linux/ioport.h).
const (
	ioresourceMem      = 0x00000200
	ioresourcePrefetch = 0x00002000
	ioresourceMem64    = 0x00100000
	ioresourceDisabled = 0x10000000
	ioresourceUnset    = 0x20000000
)

// bars parses the resource file: one "start end flags" line per region,
// BARs 0-5 first. Unassigned regions are all zero and left out.
func (h host) bars(p pciDev) ([]bar, error) {
	s, err := h.read(p.file("resource"))
	if err != nil {
		return nil, err
	}
	var bars []bar
	for i, line := range strings.Split(s, "\n") {
		if i > 5 {
			break // the ROM and bridge windows follow
		}
		var start, end, flags uint64
		if _, err := fmt.Sscanf(line, "0x%x 0x%x 0x%x", &start, &end, &flags); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", p.file("resource"), i+1, err)
		}
		// A BAR the kernel could not place keeps its size but no address.
		if end == 0 || end < start || start == 0 || flags&(ioresourceUnset|ioresourceDisabled) != 0 {
			continue
		}
		bars = append(bars, bar{
			Index: i, Size: end - start + 1, Flags: flags,
			Mem64: flags&ioresourceMem64 != 0, Prefetch: flags&ioresourcePrefetch != 0,
		})
	}
	return bars, nil
}

// memoryBARs are the assigned memory BARs in register order; a 64-bit
// BAR takes two registers and appears once.
func memoryBARs(bars []bar) []bar {
	var mem []bar
	for _, b := range bars {
		if b.Flags&ioresourceMem != 0 {
			mem = append(mem, b)
		}
	}
	return mem
}

// errConfigShort reports a config space cut at 64 bytes: sysfs shows the
// rest to root only.
var errConfigShort = errors.New("config space past the header is readable by root only")

// config is a function's PCI config space.
type config []byte

func (h host) config(p pciDev) (config, error) {
	b, err := fs.ReadFile(h.fsys, p.file("config"))
	if err != nil {
		return nil, err
	}
	if len(b) <= 64 {
		return nil, errConfigShort
	}
	return config(b), nil
}

func (c config) u16(off int) uint16 {
	if off < 0 || off+2 > len(c) {
		return 0
	}
	return binary.LittleEndian.Uint16(c[off:])
}

func (c config) u32(off int) uint32 {
	if off < 0 || off+4 > len(c) {
		return 0
	}
	return binary.LittleEndian.Uint32(c[off:])
}

// Capability IDs (PCI Local Bus and PCIe Base specifications).
const (
	capPCIe    = 0x10
	extCapACS  = 0x000d
	statusCaps = 1 << 4 // Status: capabilities list present
)

// capability returns the offset of the capability id, or 0.
func (c config) capability(id byte) int {
	if c.u16(0x06)&statusCaps == 0 {
		return 0
	}
	off := int(c[0x34] &^ 3)
	// 48 capabilities fit in 192 bytes: more is a loop.
	for range 48 {
		if off < 0x40 || off+2 > len(c) {
			return 0
		}
		if c[off] == id {
			return off
		}
		off = int(c[off+1] &^ 3)
	}
	return 0
}

// extCapability returns the offset of the extended capability id, or 0.
func (c config) extCapability(id uint16) int {
	off := 0x100
	for range (4096 - 0x100) / 4 {
		if off < 0x100 || off+4 > len(c) {
			return 0
		}
		hdr := c.u32(off)
		if hdr == 0 || hdr == 0xffffffff {
			return 0
		}
		if uint16(hdr) == id {
			return off
		}
		off = int(hdr>>20) &^ 3
	}
	return 0
}

// pcie is what the PCIe capability says.
type pcie struct {
	MPS       int // bytes
	MPSCap    int
	MRRS      int
	Available bool
}

func (c config) pcie() pcie {
	off := c.capability(capPCIe)
	if off == 0 {
		return pcie{}
	}
	devCap, devCtl := c.u32(off+4), c.u16(off+8)
	return pcie{
		MPSCap:    128 << (devCap & 7),
		MPS:       128 << ((devCtl >> 5) & 7),
		MRRS:      128 << ((devCtl >> 12) & 7),
		Available: true,
	}
}

// ACS Control bits (PCIe Base 7.7.8.3).
const (
	acsSV = 1 << 0 // Source Validation
	acsRR = 1 << 2 // P2P Request Redirect
	acsCR = 1 << 3 // P2P Completion Redirect
	acsUF = 1 << 4 // Upstream Forwarding
)

// acs returns the ACS Control register and whether the capability exists.
func (c config) acs() (uint16, bool) {
	off := c.extCapability(extCapACS)
	if off == 0 {
		return 0, false
	}
	return c.u16(off + 6), true
}

// acsString names the control bits that matter to peer traffic.
func acsString(ctl uint16) string {
	var on []string
	for _, b := range []struct {
		bit  uint16
		name string
	}{{acsSV, "SrcValid"}, {acsRR, "ReqRedir"}, {acsCR, "CmpltRedir"}, {acsUF, "UpstreamFwd"}} {
		if ctl&b.bit != 0 {
			on = append(on, b.name)
		}
	}
	if len(on) == 0 {
		return "off"
	}
	return strings.Join(on, "+")
}
