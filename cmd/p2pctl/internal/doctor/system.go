package doctor

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
)

const iommuHint = "CUDA's dma-bufs hand the FPGA raw BAR addresses that a translating IOMMU drops (open-gpu-kernel-modules #1324): boot with iommu=pt"

// iommu reports whether an IOMMU translates each FPGA's DMA. The group's
// type file (Linux 5.11 on) says so; older kernels leave the command line.
func (d *diagnosis) iommu(fpgas []pciDev) {
	units := d.iommuUnits()
	cmdline, _ := d.h.read("proc/cmdline")
	pt := passthrough(cmdline)
	if len(fpgas) == 0 {
		switch {
		case len(units) == 0:
			d.add("iommu.mode", "", OK, "no IOMMU enabled", "")
		case pt:
			d.add("iommu.mode", "", OK, fmt.Sprintf("IOMMU %s, passthrough by default (kernel command line)", strings.Join(units, " ")), "")
		default:
			d.add("iommu.mode", "", Warn, fmt.Sprintf("IOMMU %s, translating by default", strings.Join(units, " ")), iommuHint)
		}
		return
	}
	for _, p := range fpgas {
		group, err := d.h.linkBase(p.file("iommu_group"))
		if err != nil {
			if len(units) == 0 {
				d.add("iommu.mode", p.BDF, OK, "no IOMMU enabled", "")
			} else {
				d.add("iommu.mode", p.BDF, OK, fmt.Sprintf("not behind IOMMU %s", strings.Join(units, " ")), "")
			}
			continue
		}
		typ, _ := d.h.read(path.Join("sys/kernel/iommu_groups", group, "type"))
		where := "group " + group
		if typ == "" {
			typ = "DMA"
			if pt {
				typ = "identity"
			}
			where += ", assumed from the kernel command line"
		}
		switch typ {
		case "identity":
			d.add("iommu.mode", p.BDF, OK, fmt.Sprintf("passthrough (%s)", where), "")
		case "DMA", "DMA-FQ":
			d.add("iommu.mode", p.BDF, Warn, fmt.Sprintf("translated (%s domain, %s)", typ, where), iommuHint)
		case "unmanaged":
			d.add("iommu.mode", p.BDF, Warn, fmt.Sprintf("owned by user space (%s): VFIO or a virtual machine", where), "unbind it from vfio-pci and bind gpufpga")
		default:
			d.add("iommu.mode", p.BDF, Fail, fmt.Sprintf("%s domain (%s): DMA not allowed", typ, where), "the kernel blocks this device's DMA: see dmesg for the IOMMU's reason")
		}
	}
}

// iommuUnits lists the IOMMUs the kernel registered (dmar0, ivhd0, smmu...).
func (d *diagnosis) iommuUnits() []string {
	ents, err := fs.ReadDir(d.h.fsys, "sys/class/iommu")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// passthrough reports whether the command line makes identity domains the
// default.
func passthrough(cmdline string) bool {
	pt := false
	for _, arg := range strings.Fields(cmdline) {
		// Later arguments win, as the kernel parses them in order.
		switch arg {
		case "iommu=pt", "iommu.passthrough=1", "iommu.passthrough=on", "iommu.passthrough=y":
			pt = true
		case "iommu=nopt", "iommu.passthrough=0", "iommu.passthrough=off", "iommu.passthrough=n":
			pt = false
		}
	}
	return pt
}

// capIPCLock is CAP_IPC_LOCK's bit in the capability sets.
const capIPCLock = 14

// memlock checks RLIMIT_MEMLOCK against the ring: the driver accounts host
// pins (compat mode) as locked memory unless the process has CAP_IPC_LOCK.
// It reads proc/self, which is the process that runs Diagnose.
func (d *diagnosis) memlock() {
	ring := d.cfg.RingSize
	limit, unlimited, err := d.memlockLimit()
	if err != nil {
		d.add("memlock", "", Warn, fmt.Sprintf("RLIMIT_MEMLOCK not read: %v", err), "")
		return
	}
	if unlimited {
		d.add("memlock", "", OK, "unlimited", "")
		return
	}
	summary := fmt.Sprintf("%s, ring %s", units.Bytes(limit), units.Bytes(ring))
	switch {
	case limit >= ring:
		d.add("memlock", "", OK, summary, "")
	case d.capEff()&(1<<capIPCLock) != 0:
		d.add("memlock", "", OK, summary+": CAP_IPC_LOCK lifts the limit", "")
	default:
		d.add("memlock", "", Warn, summary+": host-memory pins of the ring would fail",
			"raise it (ulimit -l, memlock in /etc/security/limits.conf, LimitMEMLOCK= for a service) or grant CAP_IPC_LOCK")
	}
}

// memlockLimit parses the soft limit from proc/self/limits:
// "Max locked memory   8388608   8388608   bytes".
func (d *diagnosis) memlockLimit() (limit uint64, unlimited bool, err error) {
	s, err := d.h.read("proc/self/limits")
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(line, "Max locked memory")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		if f[0] == "unlimited" {
			return 0, true, nil
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("proc/self/limits: %w", err)
		}
		return v, false, nil
	}
	return 0, false, fmt.Errorf("proc/self/limits: no Max locked memory line")
}

// capEff returns the effective capabilities from proc/self/status; 0 when
// unreadable.
func (d *diagnosis) capEff() uint64 {
	s, err := d.h.read("proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return c
		}
	}
	return 0
}
