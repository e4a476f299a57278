package doctor

import (
	"errors"
	"fmt"
	"strings"
)

// path checks the PCIe path from each FPGA to each GPU: where it turns,
// and whether ACS on its switch ports sends peer traffic up anyway.
func (d *diagnosis) path(fpgas, gpus []pciDev) {
	switch {
	case len(fpgas) == 0:
		d.add("path.route", "", Warn, noFPGA, "nothing to route: see fpga.device")
		return
	case len(gpus) == 0:
		d.add("path.route", "", Warn, "no NVIDIA GPU found", "nothing to route to")
		return
	}
	for _, f := range fpgas {
		for _, g := range gpus {
			d.route(f, g)
		}
	}
}

func (d *diagnosis) route(f, g pciDev) {
	subject := f.BDF + "->" + g.BDF
	fb, fh := f.upstream()
	gb, gh := g.upstream()
	n := 0
	for n < len(fb) && n < len(gb) && fb[n] == gb[n] {
		n++
	}
	// The path as the FPGA's writes travel: up to where it turns, then
	// down to the GPU.
	turn := "[" + fh + "]"
	if n > 0 {
		turn = "[" + fb[n-1] + "]"
	}
	hops := []string{f.BDF}
	for i := len(fb) - 1; i >= n; i-- {
		hops = append(hops, fb[i])
	}
	if fh != gh {
		hops = append(hops, "["+fh+"]", "["+gh+"]")
	} else {
		hops = append(hops, turn)
	}
	hops = append(hops, gb[n:]...)
	hops = append(hops, g.BDF)
	route := strings.Join(hops, " > ")

	switch {
	case fh != gh:
		d.add("path.route", subject, Warn, route+": crosses host bridges (another root complex or socket)",
			"peer traffic between root complexes or sockets is often dropped or slow: put FPGA and GPU under one PCIe switch")
	case n >= 2:
		// Below the root port: the switch turns the traffic.
		d.add("path.route", subject, OK, route+": under one switch", "")
	default:
		d.add("path.route", subject, Warn, route+": crosses the root complex", d.rootComplexHint())
	}
	d.acs(subject, append(below(fb, n), below(gb, n)...))
}

// below returns the switch ports of bridges under the turning point n: root
// ports (index 0) are left out, as their ACS is the root complex's policy
// and the traffic reaches it anyway.
func below(bridges []string, n int) []string {
	var out []string
	for i := max(n, 1); i < len(bridges); i++ {
		out = append(out, bridges[i])
	}
	return out
}

// rootComplexHint says what routing through the root complex means on the
// CPU at hand.
func (d *diagnosis) rootComplexHint() string {
	model := d.cpuModel()
	const best = "put FPGA and GPU under one PCIe switch"
	switch {
	case model == "":
		return "peer writes cross the CPU's root complex, which many CPUs (Intel client parts in particular) forward slowly or not at all: " + best
	case strings.Contains(model, "Intel") && !strings.Contains(model, "Xeon"):
		return model + " is an Intel client part: its root complex forwards peer writes between root ports poorly, and peer reads not at all: " + best
	}
	return "peer writes cross the root complex of " + model + ": check that it forwards them (most server parts do), or " + best
}

// cpuModel returns the first model name in proc/cpuinfo.
func (d *diagnosis) cpuModel() string {
	s, err := d.h.read("proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// acs checks ACS on the switch ports of a path: P2P Request or Completion
// Redirect sends peer traffic up to the root complex (and through the
// IOMMU) instead of across the switch.
func (d *diagnosis) acs(subject string, ports []string) {
	if len(ports) == 0 {
		d.add("path.acs", subject, OK, "no switch ports in the path", "")
		return
	}
	var states, redirect, unread []string
	var readErr error
	for _, bdf := range ports {
		p, err := d.h.pciDevice(bdf)
		var c config
		if err == nil {
			c, err = d.h.config(p)
		}
		if err != nil {
			unread, readErr = append(unread, bdf), err
			continue
		}
		ctl, ok := c.acs()
		switch {
		case !ok:
			states = append(states, bdf+" no ACS")
		case ctl&(acsRR|acsCR) != 0:
			redirect = append(redirect, bdf+" "+acsString(ctl))
		default:
			states = append(states, bdf+" "+acsString(ctl))
		}
	}
	switch {
	case len(redirect) > 0:
		d.add("path.acs", subject, Warn, "ACS redirects peer traffic to the root complex at "+strings.Join(redirect, ", "),
			"boot with pci=disable_acs_redir="+strings.Join(firstWords(redirect), ";")+" (or clear it with setpci), giving up IOMMU isolation between those ports")
	case len(unread) > 0:
		hint := configHint(readErr)
		if !errors.Is(readErr, errConfigShort) {
			hint = ""
		}
		d.add("path.acs", subject, Warn, fmt.Sprintf("ACS not read at %s: %v", strings.Join(unread, ", "), readErr), hint)
	default:
		d.add("path.acs", subject, OK, "ACS redirect off: "+strings.Join(states, ", "), "")
	}
}

func firstWords(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i], _, _ = strings.Cut(x, " ")
	}
	return out
}
