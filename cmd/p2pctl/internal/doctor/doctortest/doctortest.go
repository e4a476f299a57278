// Package doctortest writes fixture hosts for doctor's tests: the sysfs,
// procfs and /dev files of real topologies, config spaces included, into a
// directory that stands for /.
package doctortest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Host is a machine as doctor reads it.
type Host struct {
	Devices []Device
	Modules []string // loaded modules: "gpufpga", "gpufpga_nv", "nvidia"
	Nodes   []string // device nodes under /dev, mode NodeMode, group gpufpga
	// NodeMode is the nodes' mode; 0 means the udev rule's 0660.
	NodeMode os.FileMode
	NVIDIA   string   // proc/driver/nvidia/version; "" when not loaded
	IOMMUs   []string // sys/class/iommu entries
	Cmdline  string
	CPU      string // model name
	Memlock  string // soft RLIMIT_MEMLOCK: "unlimited" or bytes
	CapEff   uint64
	// RevocablePins is gpufpga's nv_revocable_pins parameter: "N" by
	// default, "" for a driver without it.
	RevocablePins string
	// ShortConfig cuts config files at 64 bytes, as sysfs does for
	// users other than root.
	ShortConfig bool
}

// Device is a PCI function.
type Device struct {
	// Path is its place under sys/devices:
	// "pci0000:00/0000:00:01.0/0000:01:00.0".
	Path   string
	Vendor uint16
	ID     uint16
	Class  uint32
	Driver string
	// Override is the driver_override file: the one driver that may
	// bind the function; "" writes "(null)", as sysfs shows none.
	Override string
	Port     int // PCIe Device/Port Type: 0 endpoint, 4 root, 5 upstream, 6 downstream

	Speed, MaxSpeed string // "8.0 GT/s PCIe"; "" writes no link files
	Width, MaxWidth int

	MPS, MPSCap, MRRS int     // bytes; 0 writes 128
	ACS               *uint16 // ACS Control; nil: no ACS capability
	BARs              []BAR
	MSIX              int // MSI-X vectors allocated
	IRQ               int

	IOMMUGroup string // "" when not in one
	IOMMUType  string // the group's type file; "" writes none
}

// BAR is an assigned BAR.
type BAR struct {
	Index int
	Addr  uint64
	Size  uint64
	Flags uint64 // IORESOURCE_* flags
}

// Flags of a 64-bit prefetchable and a 32-bit memory BAR, as the resource
// file shows them.
const (
	Mem64Prefetch = 0x0014220c
	Mem32         = 0x00040200
)

// BDF returns the device's PCI address, the last element of its path.
func (d Device) BDF() string { return filepath.Base(d.Path) }

// Write creates h's files under dir.
func Write(dir string, h Host) error {
	w := writer{dir: dir}
	for _, d := range h.Devices {
		w.device(d, h.ShortConfig)
	}
	for _, m := range h.Modules {
		w.mkdir("sys/module/" + m)
		if m == "gpufpga" {
			w.file("sys/module/gpufpga/srcversion", "0123456789ABCDEF0123456")
			if h.RevocablePins != "" {
				w.mkdir("sys/module/gpufpga/parameters")
				w.file("sys/module/gpufpga/parameters/nv_revocable_pins", h.RevocablePins)
			}
		}
	}
	w.mkdir("dev")
	mode := h.NodeMode
	if mode == 0 {
		mode = 0o660
	}
	gid := -1
	for _, n := range h.Nodes {
		p := w.file("dev/"+n, "")
		if w.err == nil {
			w.err = os.Chmod(p, mode)
		}
		if fi, err := os.Stat(p); err == nil {
			// Nodes belong to the test's group: name it gpufpga.
			gid = int(fi.Sys().(*syscall.Stat_t).Gid)
		}
	}
	if gid >= 0 {
		w.file("etc/group", fmt.Sprintf("root:x:0:\ngpufpga:x:%d:\n", gid))
	}
	if h.NVIDIA != "" {
		w.file("proc/driver/nvidia/version", h.NVIDIA+"\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
	}
	for _, u := range h.IOMMUs {
		w.mkdir("sys/class/iommu/" + u)
	}
	w.file("proc/cmdline", h.Cmdline+"\n")
	if h.CPU != "" {
		w.file("proc/cpuinfo", fmt.Sprintf("processor\t: 0\nvendor_id\t: x\nmodel name\t: %s\n\nprocessor\t: 1\nmodel name\t: %s\n", h.CPU, h.CPU))
	}
	if h.Memlock != "" {
		w.file("proc/self/limits", fmt.Sprintf("Limit                     Soft Limit           Hard Limit           Units     \n"+
			"Max open files            1024                 524288               files     \n"+
			"Max locked memory         %-20s %-20s bytes     \n", h.Memlock, h.Memlock))
	}
	w.file("proc/self/status", fmt.Sprintf("Name:\tp2pctl\nCapInh:\t0000000000000000\nCapEff:\t%016x\n", h.CapEff))
	return w.err
}

// writer keeps the first error, so Write reads as a list of files.
type writer struct {
	dir string
	err error
}

func (w *writer) mkdir(rel string) string {
	p := filepath.Join(w.dir, rel)
	if w.err == nil {
		w.err = os.MkdirAll(p, 0o755)
	}
	return p
}

func (w *writer) file(rel, content string) string {
	w.mkdir(filepath.Dir(rel))
	p := filepath.Join(w.dir, rel)
	if w.err == nil {
		w.err = os.WriteFile(p, []byte(content), 0o644)
	}
	return p
}

// link makes rel a relative link to target, both relative to the root, as
// sysfs does.
func (w *writer) link(rel, target string) {
	w.mkdir(filepath.Dir(rel))
	if w.err != nil {
		return
	}
	t, err := filepath.Rel(filepath.Dir(filepath.Join(w.dir, rel)), filepath.Join(w.dir, target))
	if err != nil {
		w.err = err
		return
	}
	w.err = os.Symlink(t, filepath.Join(w.dir, rel))
}

func (w *writer) device(d Device, short bool) {
	dir := "sys/devices/" + d.Path
	bdf := d.BDF()
	w.mkdir(dir)
	w.link("sys/bus/pci/devices/"+bdf, dir)
	w.file(dir+"/vendor", fmt.Sprintf("0x%04x\n", d.Vendor))
	w.file(dir+"/device", fmt.Sprintf("0x%04x\n", d.ID))
	w.file(dir+"/class", fmt.Sprintf("0x%06x\n", d.Class))
	override := d.Override
	if override == "" {
		override = "(null)"
	}
	w.file(dir+"/driver_override", override+"\n")
	if d.Driver != "" {
		w.mkdir("sys/bus/pci/drivers/" + d.Driver)
		w.link(dir+"/driver", "sys/bus/pci/drivers/"+d.Driver)
		w.link("sys/bus/pci/drivers/"+d.Driver+"/"+bdf, dir)
	}
	if d.Speed != "" {
		w.file(dir+"/current_link_speed", d.Speed+"\n")
		w.file(dir+"/max_link_speed", d.MaxSpeed+"\n")
		w.file(dir+"/current_link_width", strconv.Itoa(d.Width)+"\n")
		w.file(dir+"/max_link_width", strconv.Itoa(d.MaxWidth)+"\n")
	}
	cfg := ConfigSpace(d)
	if short {
		cfg = cfg[:64]
	}
	w.file(dir+"/config", string(cfg))
	w.file(dir+"/resource", resource(d.BARs))
	w.file(dir+"/irq", strconv.Itoa(d.IRQ)+"\n")
	if d.MSIX > 0 {
		for i := range d.MSIX {
			w.file(fmt.Sprintf("%s/msi_irqs/%d", dir, 120+i), "msix\n")
		}
	}
	if d.IOMMUGroup != "" {
		g := "sys/kernel/iommu_groups/" + d.IOMMUGroup
		w.mkdir(g + "/devices")
		if d.IOMMUType != "" {
			w.file(g+"/type", d.IOMMUType+"\n")
		}
		w.link(dir+"/iommu_group", g)
		w.link(g+"/devices/"+bdf, dir)
	}
}

// resource writes the resource file: 6 BARs, the ROM, then 6 more lines
// (bridge windows or SR-IOV BARs), as sysfs always shows 13 lines.
func resource(bars []BAR) string {
	lines := make([]string, 13)
	for i := range lines {
		lines[i] = fmt.Sprintf("0x%016x 0x%016x 0x%016x", 0, 0, 0)
	}
	for _, b := range bars {
		lines[b.Index] = fmt.Sprintf("0x%016x 0x%016x 0x%016x", b.Addr, b.Addr+b.Size-1, b.Flags)
	}
	return strings.Join(lines, "\n") + "\n"
}

// ConfigSpace returns d's 4 KiB config space: a power management
// capability that links to the PCIe capability (so the list is walked), and
// AER then, when d.ACS is set, ACS in extended space.
func ConfigSpace(d Device) []byte {
	c := make([]byte, 4096)
	le := binary.LittleEndian
	le.PutUint16(c[0x00:], d.Vendor)
	le.PutUint16(c[0x02:], d.ID)
	le.PutUint16(c[0x06:], 1<<4) // capabilities list
	le.PutUint32(c[0x08:], d.Class<<8)
	if d.Port == 4 || d.Port == 5 || d.Port == 6 {
		c[0x0e] = 1 // type 1 header: a bridge
	}
	c[0x34] = 0x40
	// Power management, pointing on.
	c[0x40], c[0x41] = 0x01, 0x60
	// PCIe: version 2, the port type; MPS supported, MPS and MRRS set.
	c[0x60], c[0x61] = 0x10, 0x00
	le.PutUint16(c[0x62:], uint16(d.Port)<<4|2)
	le.PutUint32(c[0x64:], uint32(enc(d.MPSCap)))
	le.PutUint16(c[0x68:], uint16(enc(d.MPS))<<5|uint16(enc(d.MRRS))<<12)
	// AER, then ACS.
	next := uint32(0)
	if d.ACS != nil {
		next = 0x148
		le.PutUint32(c[0x148:], 0x000d|1<<16)
		le.PutUint16(c[0x14c:], 0x5f) // capabilities: all but egress control
		le.PutUint16(c[0x14e:], *d.ACS)
	}
	le.PutUint32(c[0x100:], 0x0001|2<<16|next<<20)
	return c
}

// enc encodes a payload size as the 3-bit field 128 << n.
func enc(size int) int {
	n := 0
	for size > 128<<n && n < 5 {
		n++
	}
	return n
}

// Fixture returns the named fixture host: one of Names.
func Fixture(name string) (Host, bool) {
	f, ok := fixtures[name]
	if !ok {
		return Host{}, false
	}
	return f(), true
}

// Names lists the fixtures.
func Names() []string {
	var n []string
	for k := range fixtures {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// PCI addresses in the fixtures.
const (
	FPGA = "0000:03:00.0"
	GPU  = "0000:04:00.0"
)

const openDriver = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Jan 16 00:00:00 UTC 2025"

func u16(v uint16) *uint16 { return &v }

// ACS Control values.
const (
	acsOff   = 0
	acsRedir = 0x1d // Source Validation, Request and Completion Redirect, Upstream Forwarding
)

func rootPort(path string) Device {
	return Device{Path: path, Vendor: 0x8086, ID: 0x347a, Class: 0x060400, Driver: "pcieport", Port: 4,
		Speed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", Width: 16, MaxWidth: 16, MPS: 256, MPSCap: 256, MRRS: 512, ACS: u16(acsRedir)}
}

func switchPort(path string, port int, acs uint16) Device {
	return Device{Path: path, Vendor: 0x10b5, ID: 0x8747, Class: 0x060400, Driver: "pcieport", Port: port,
		Speed: "8.0 GT/s PCIe", MaxSpeed: "8.0 GT/s PCIe", Width: 16, MaxWidth: 16, MPS: 256, MPSCap: 2048, MRRS: 512, ACS: u16(acs)}
}

func fpga(path string) Device {
	return Device{Path: path, Vendor: 0x10ee, ID: 0x9038, Class: 0x058000, Driver: "gpufpga",
		Speed: "8.0 GT/s PCIe", MaxSpeed: "8.0 GT/s PCIe", Width: 8, MaxWidth: 8, MPS: 256, MPSCap: 512, MRRS: 512,
		BARs: []BAR{{0, 0xf7000000, 1 << 20, Mem32}, {1, 0xf7100000, 64 << 10, Mem32}}, MSIX: 4, IRQ: 16}
}

func gpu(path string) Device {
	return Device{Path: path, Vendor: 0x10de, ID: 0x20b5, Class: 0x030200, Driver: "nvidia",
		Speed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", Width: 16, MaxWidth: 16, MPS: 256, MPSCap: 256, MRRS: 512,
		BARs: []BAR{{0, 0xf8000000, 16 << 20, Mem32}, {1, 0x38000000000, 64 << 30, Mem64Prefetch}, {3, 0x39000000000, 32 << 20, Mem64Prefetch}},
		IRQ:  17}
}

// switchShared is FPGA and GPU below one PLX switch, ACS off on its
// downstream ports, no IOMMU: everything OK.
func switchShared() Host {
	const rp, us = "pci0000:00/0000:00:01.0", "pci0000:00/0000:00:01.0/0000:01:00.0"
	return Host{
		Devices: []Device{
			rootPort(rp),
			switchPort(us, 5, acsOff),
			switchPort(us+"/0000:02:08.0", 6, acsOff),
			switchPort(us+"/0000:02:10.0", 6, acsOff),
			fpga(us + "/0000:02:08.0/" + FPGA),
			gpu(us + "/0000:02:10.0/" + GPU),
		},
		Modules:       []string{"gpufpga", "gpufpga_nv", "nvidia"},
		Nodes:         []string{"gpufpga0"},
		RevocablePins: "N",
		NVIDIA:        openDriver,
		Cmdline:       "BOOT_IMAGE=/vmlinuz-6.12.0 root=/dev/sda1 ro quiet",
		CPU:           "AMD EPYC 7313 16-Core Processor",
		Memlock:       strconv.Itoa(1 << 30),
	}
}

var fixtures = map[string]func() Host{
	"switch-shared": switchShared,
	// FPGA and GPU on two root ports of an Intel client CPU.
	"root-complex": func() Host {
		h := switchShared()
		h.Devices = []Device{
			rootPort("pci0000:00/0000:00:01.0"),
			rootPort("pci0000:00/0000:00:06.0"),
			fpga("pci0000:00/0000:00:06.0/" + FPGA),
			gpu("pci0000:00/0000:00:01.0/" + GPU),
		}
		h.CPU = "13th Gen Intel(R) Core(TM) i9-13900K"
		return h
	},
	// The switch's downstream port above the FPGA redirects peer requests.
	"acs-on": func() Host {
		h := switchShared()
		h.Devices[2].ACS = u16(acsRedir)
		return h
	},
	// VT-d translating for both, as intel_iommu=on does by default.
	"iommu-on": func() Host {
		h := switchShared()
		h.IOMMUs = []string{"dmar0", "dmar1"}
		h.Cmdline += " intel_iommu=on"
		for i, g := range map[int]string{4: "12", 5: "13"} {
			h.Devices[i].IOMMUGroup, h.Devices[i].IOMMUType = g, "DMA-FQ"
		}
		return h
	},
	// The GPU machine: the module loaded, no FPGA.
	"no-fpga": func() Host {
		h := switchShared()
		h.Devices = []Device{rootPort("pci0000:00/0000:00:01.0"), gpu("pci0000:00/0000:00:01.0/" + GPU)}
		h.Nodes = nil
		return h
	},
	// The administrator opened revocable NVIDIA pins to every user.
	"revocable-open": func() Host {
		h := switchShared()
		h.RevocablePins = "Y"
		return h
	},
	// A gpufpga from before nv_revocable_pins.
	"revocable-old": func() Host {
		h := switchShared()
		h.RevocablePins = ""
		return h
	},
	// The FPGA's x8 Gen3 link trained at x4 Gen1.
	"downtrained": func() Host {
		h := switchShared()
		h.Devices[4].Speed, h.Devices[4].Width = "2.5 GT/s PCIe", 4
		return h
	},
	// Nothing installed: no module, the FPGA unbound, the proprietary
	// GPU driver, and the user's default memlock limit.
	"no-driver": func() Host {
		h := switchShared()
		h.Modules = []string{"nvidia"}
		h.Nodes = nil
		h.Devices[4].Driver, h.Devices[4].MSIX = "", 0
		h.NVIDIA = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024"
		h.Memlock = "8388608"
		return h
	},
}
