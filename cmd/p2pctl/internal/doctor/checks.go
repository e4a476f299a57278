package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
)

// The udev rule (kmod/gpufpga/99-gpufpga.rules) gives device nodes this
// group and mode.
const (
	nodeGroup = "gpufpga"
	nodeMode  = 0o660
)

// driver checks the modules, the device nodes and their ABI.
func (d *diagnosis) driver(ctx context.Context, fpgas []pciDev) error {
	if !d.h.exists("sys/module/gpufpga") {
		d.add("driver.module", "gpufpga", Fail, "gpufpga module not loaded",
			"modprobe gpufpga; if it is not installed, install the gpufpga-dkms package (README: On a real host)")
	} else {
		v, _ := d.h.read("sys/module/gpufpga/version")
		if v == "" {
			// Out-of-tree modules without MODULE_VERSION still
			// carry the checksum of their sources.
			if src, _ := d.h.read("sys/module/gpufpga/srcversion"); src != "" {
				v = "srcversion " + src
			}
		}
		summary := "loaded"
		if v != "" {
			summary += ", " + v
		}
		d.add("driver.module", "gpufpga", OK, summary, "")
	}
	if d.h.exists("sys/module/gpufpga_nv") {
		d.nvPins()
	} else {
		d.add("driver.nv", "gpufpga_nv", Warn, "gpufpga_nv module not loaded: no GPU pins through nvidia_p2p",
			"modprobe gpufpga_nv after nvidia (dma-buf pins do not need it)")
	}

	nodes, err := fs.Glob(d.h.fsys, "dev/gpufpga*")
	if err != nil {
		return fmt.Errorf("doctor: %w", err)
	}
	sort.Strings(nodes)
	if len(nodes) == 0 {
		st, hint := Warn, "load gpufpga with the FPGA present"
		for _, f := range fpgas {
			if f.Driver == driverName {
				// Bound, yet no node: udev or devtmpfs is missing.
				st, hint = Fail, "check that devtmpfs is mounted on /dev and udev runs"
			}
		}
		d.add("driver.nodes", "/dev/gpufpga*", st, "no device nodes", hint)
		return nil
	}
	groups := d.groups()
	for _, n := range nodes {
		d.node(n, groups)
		if err := d.abi(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// nvPins says which nvidia_p2p pins the device's users may make. A
// revocable one (not persistent) has a window in NVIDIA's API in which a
// cudaFree racing the pin corrupts kernel memory, so the driver keeps it
// for CAP_SYS_RAWIO unless nv_revocable_pins opens it; a driver without
// the parameter opens it to all.
func (d *diagnosis) nvPins() {
	const param = "sys/module/gpufpga/parameters/nv_revocable_pins"
	v, err := d.h.read(param)
	switch {
	case err == nil && v == "N":
		d.add("driver.nv", "gpufpga_nv", OK,
			"loaded: GPU pins through nvidia_p2p available; persistent ones open to the device's users, revocable ones to CAP_SYS_RAWIO", "")
	case err == nil && v == "Y":
		d.add("driver.nv", "gpufpga_nv", Warn,
			"loaded, with revocable GPU pins open to every user of the device: a cudaFree racing such a pin can corrupt kernel memory",
			"unless every user of /dev/gpufpga* is trusted: echo N > /"+param)
	default:
		d.add("driver.nv", "gpufpga_nv", Warn,
			"loaded; this gpufpga opens revocable GPU pins, whose race with cudaFree can corrupt kernel memory, to every user of the device",
			"upgrade gpufpga, which keeps them for CAP_SYS_RAWIO")
	}
}

// node checks a device node's mode and group against the udev rule's.
func (d *diagnosis) node(n string, groups map[uint32]string) {
	subject := "/" + n
	fi, err := fs.Stat(d.h.fsys, n)
	if err != nil {
		d.add("driver.nodes", subject, Fail, fmt.Sprintf("cannot stat: %v", err), "")
		return
	}
	perm := fi.Mode().Perm()
	group := "?"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		group = strconv.FormatUint(uint64(st.Gid), 10)
		if name, ok := groups[st.Gid]; ok {
			group = name
		}
	}
	summary := fmt.Sprintf("mode %04o, group %s", perm, group)
	const hint = "install kmod/gpufpga/99-gpufpga.rules in /etc/udev/rules.d, run udevadm trigger, and add users to group gpufpga"
	switch {
	case perm&0o006 != 0:
		d.add("driver.nodes", subject, Warn, summary+": open to every user", hint)
	case group != nodeGroup || perm&nodeMode != nodeMode:
		d.add("driver.nodes", subject, Warn, summary+fmt.Sprintf(", want %04o group %s", nodeMode, nodeGroup), hint)
	default:
		d.add("driver.nodes", subject, OK, summary, "")
	}
}

// groups reads etc/group, for the names of node groups.
func (d *diagnosis) groups() map[uint32]string {
	s, err := d.h.read("etc/group")
	if err != nil {
		return nil
	}
	m := make(map[uint32]string)
	for _, line := range strings.Split(s, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil {
			m[uint32(gid)] = f[0]
		}
	}
	return m
}

// abi asks a node for the driver's ABI.
func (d *diagnosis) abi(ctx context.Context, n string) error {
	if d.cfg.Device == nil {
		return nil
	}
	subject := "/" + n
	v, err := d.cfg.Device.ABI(ctx, n)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, fs.ErrPermission):
		d.add("driver.abi", subject, Warn, "cannot open: permission denied", "add yourself to group gpufpga (then log in again), or run as root")
	case err != nil:
		d.add("driver.abi", subject, Fail, fmt.Sprintf("INFO failed: %v", err), "check dmesg for gpufpga errors")
	case v != d.cfg.ABI:
		d.add("driver.abi", subject, Fail, fmt.Sprintf("driver ABI %d, p2pctl speaks %d", v, d.cfg.ABI),
			"install p2pctl and gpufpga-dkms of the same release")
	default:
		d.add("driver.abi", subject, OK, fmt.Sprintf("ABI %d", v), "")
	}
	return nil
}

const noFPGA = "no XDMA device found"

const noFPGAHint = "no PCI function is bound to gpufpga or has Xilinx's vendor ID 10ee: check the card is seated, its bitstream loaded, then rescan (lspci -d 10ee:)"

// fpga checks each FPGA's binding, link, payload sizes, BARs and interrupts.
func (d *diagnosis) fpga(fpgas []pciDev) {
	if len(fpgas) == 0 {
		d.add("fpga.device", "", Warn, noFPGA, noFPGAHint)
		return
	}
	for _, p := range fpgas {
		d.fpgaDriver(p)
		d.fpgaLink(p)
		d.fpgaPayload(p)
		d.fpgaBARs(p)
		d.fpgaIRQ(p)
	}
}

// fpgaDriver says which driver holds p, whether gpufpga's ID table claims
// it, and, where gpufpga does not hold it, why and the commands that hand
// it over. Xilinx's xdma.ko and vfio-pci users claim the same
// reference-design IDs, so on a shared host the answer is often another
// driver, or a driver_override that keeps the function for one.
func (d *diagnosis) fpgaDriver(p pciDev) {
	id := fmt.Sprintf("%04x:%04x", p.Vendor, p.Device)
	claimed := claims(p.Vendor, p.Device)
	holder := p.Driver
	if holder == "" {
		holder = "no driver"
	}
	claim := "an ID gpufpga claims"
	if !claimed {
		claim = "an ID gpufpga does not claim"
	}
	summary := fmt.Sprintf("%s held by %s, %s", id, holder, claim)
	if p.Driver == driverName {
		if !claimed {
			summary += " (bound through driver_override or new_id)"
		}
		d.add("fpga.driver", p.BDF, OK, summary, "")
		return
	}
	// sysfs shows "(null)" for no override; kernels before 3.16 have no
	// file.
	override, _ := d.h.read(p.file("driver_override"))
	if override == "(null)" {
		override = ""
	}
	loaded := d.h.exists("sys/module/" + driverName)
	var why []string
	if p.Driver != "" {
		why = append(why, p.Driver+" holds it")
	}
	switch {
	case override == driverName && p.Driver != "":
		why = append(why, "driver_override names gpufpga, for the next probe")
	case override != "" && override != driverName:
		why = append(why, "driver_override reserves it for "+override)
	}
	if !loaded {
		why = append(why, "gpufpga is not loaded")
	}
	if !claimed && override != driverName {
		why = append(why, "the ID is not in its table")
	}
	// Loaded, free to bind and matching, yet unbound: gpufpga tried.
	probeFailed := len(why) == 0
	if probeFailed {
		why = append(why, "its probe failed, or the function was unbound")
	}
	summary += "; gpufpga did not bind it: " + strings.Join(why, ", ")
	d.add("fpga.driver", p.BDF, Warn, summary, bindHint(p, override, claimed, loaded, probeFailed))
}

// bindHint returns the commands that hand p to gpufpga, in order.
func bindHint(p pciDev, override string, claimed, loaded, probeFailed bool) string {
	dev := "/sys/bus/pci/devices/" + p.BDF
	var steps []string
	if !loaded {
		steps = append(steps, "modprobe gpufpga")
	}
	// Another driver, an override for another, or an ID outside the
	// table: only driver_override makes the next probe gpufpga's (the PCI
	// core binds a function to the driver its override names whatever
	// the ID, and tries no other).
	pin := override != driverName && (p.Driver != "" || override != "" || !claimed)
	if pin {
		steps = append(steps, "echo gpufpga > "+dev+"/driver_override")
	}
	if p.Driver != "" {
		steps = append(steps, fmt.Sprintf("echo %s > /sys/bus/pci/drivers/%s/unbind", p.BDF, p.Driver))
	}
	// Loading the module binds a free matching function itself.
	if pin || p.Driver != "" || loaded {
		steps = append(steps, fmt.Sprintf("echo %s > /sys/bus/pci/drivers_probe", p.BDF))
	}
	hint := strings.Join(steps, "; ")
	if probeFailed {
		hint += "; if it stays unbound, dmesg says why gpufpga's probe failed"
	}
	if pin {
		hint += fmt.Sprintf(" (driverctl set-override %s gpufpga does this and keeps it across reboots)", p.BDF)
	}
	if !claimed {
		hint = "if it is the XDMA card: " + hint
	}
	return hint
}

func (d *diagnosis) fpgaLink(p pciDev) {
	l, err := d.h.link(p)
	if err != nil {
		d.add("fpga.link", p.BDF, Warn, fmt.Sprintf("link not reported: %v", err), "a PCIe function reports its link in sysfs: is this conventional PCI or a virtual machine's bus?")
		return
	}
	cur := fmt.Sprintf("%.1f GT/s x%d", l.Speed, l.Width)
	capable := fmt.Sprintf("%.1f GT/s x%d", l.MaxSpeed, l.MaxWidth)
	if l.Speed < l.MaxSpeed || l.Width < l.MaxWidth {
		d.add("fpga.link", p.BDF, Warn, fmt.Sprintf("link down-trained: %s, capable of %s", cur, capable),
			"reseat the card in a slot wired for its width, check the slot's speed setting in the BIOS and the riser; the upstream port may be the slower end")
		return
	}
	d.add("fpga.link", p.BDF, OK, cur, "")
}

func (d *diagnosis) fpgaPayload(p pciDev) {
	c, err := d.h.config(p)
	if err != nil {
		d.add("fpga.payload", p.BDF, Warn, fmt.Sprintf("MPS and MRRS not read: %v", err), configHint(err))
		return
	}
	e := c.pcie()
	if !e.Available {
		d.add("fpga.payload", p.BDF, Warn, "no PCIe capability", "conventional PCI cannot carry peer DMA at speed")
		return
	}
	d.add("fpga.payload", p.BDF, OK, fmt.Sprintf("MPS %d B (supports %d B), MRRS %d B", e.MPS, e.MPSCap, e.MRRS), "")
}

func configHint(err error) string {
	if errors.Is(err, errConfigShort) {
		return "run p2pctl doctor as root to read MPS, MRRS and ACS"
	}
	return ""
}

func (d *diagnosis) fpgaBARs(p pciDev) {
	bars, err := d.h.bars(p)
	if err != nil {
		d.add("fpga.bars", p.BDF, Fail, fmt.Sprintf("BARs not read: %v", err), "")
		return
	}
	var parts []string
	mem := 0
	for _, b := range bars {
		if b.Flags&ioresourceMem == 0 {
			parts = append(parts, fmt.Sprintf("BAR%d %s I/O", b.Index, units.Bytes(b.Size)))
			continue
		}
		mem++
		s := fmt.Sprintf("BAR%d %s", b.Index, units.Bytes(b.Size))
		if b.Mem64 {
			s += " 64-bit"
		}
		if b.Prefetch {
			s += " prefetchable"
		}
		parts = append(parts, s)
	}
	if mem == 0 {
		d.add("fpga.bars", p.BDF, Fail, "no memory BAR assigned",
			"enable Above 4G Decoding in the BIOS, or boot with pci=realloc")
		return
	}
	d.add("fpga.bars", p.BDF, OK, strings.Join(parts, ", "), "")
}

func (d *diagnosis) fpgaIRQ(p pciDev) {
	ents, err := fs.ReadDir(d.h.fsys, p.file("msi_irqs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.add("fpga.irq", p.BDF, Warn, fmt.Sprintf("interrupts not read: %v", err), "")
		return
	}
	modes := map[string]int{}
	for _, e := range ents {
		m, _ := d.h.read(path.Join(p.file("msi_irqs"), e.Name()))
		modes[m]++
	}
	switch {
	case modes["msix"] > 0:
		d.add("fpga.irq", p.BDF, OK, fmt.Sprintf("MSI-X, %d vectors", modes["msix"]), "")
	case modes["msi"] > 0:
		d.add("fpga.irq", p.BDF, OK, fmt.Sprintf("MSI, %d vectors", modes["msi"]), "")
	case p.Driver != driverName:
		d.add("fpga.irq", p.BDF, Warn, "no MSI or MSI-X vectors: not bound to gpufpga", "bind gpufpga, which allocates them")
	default:
		irq, _ := d.h.read(p.file("irq"))
		d.add("fpga.irq", p.BDF, Warn, fmt.Sprintf("no MSI or MSI-X vectors (legacy irq %s): gpufpga polls for completions", irq),
			"enable MSI-X or MSI in the XDMA IP, and boot without pci=nomsi")
	}
}
