// Package doctor diagnoses the host a gpufpga user runs on: the driver, the
// FPGA's and the GPUs' PCIe functions, the path between them, the IOMMU and
// the memlock limit. Each check ends OK, WARN or FAIL with a one-line hint.
//
// Everything is read through an fs.FS rooted at the host's /, so that tests
// run against fixture trees; what needs more than files (the driver's INFO
// ioctl, the CUDA driver) comes in through small interfaces, so the package
// links neither the driver's client nor libcuda.
package doctor

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
)

// Status is a check's verdict.
type Status int

// Statuses, in increasing severity.
const (
	OK Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Warn:
		return "WARN"
	case Fail:
		return "FAIL"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText writes s as OK, WARN or FAIL.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads OK, WARN or FAIL.
func (s *Status) UnmarshalText(b []byte) error {
	for _, v := range []Status{OK, Warn, Fail} {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("doctor: unknown status %q", b)
}

// Check is one finding.
type Check struct {
	// Key names the check, stable across releases: "fpga.link".
	Key string `json:"key"`
	// Subject is what was checked: a PCI address, a device node, a
	// module, an FPGA->GPU pair; empty for the host as a whole.
	Subject string `json:"subject,omitempty"`
	Status  Status `json:"status"`
	// Summary says what was found.
	Summary string `json:"summary"`
	// Hint says what to do about a WARN or FAIL.
	Hint string `json:"hint,omitempty"`
}

// Report is the outcome of Diagnose.
type Report struct {
	RingSize uint64  `json:"ring_size"`
	Checks   []Check `json:"checks"`
	Counts   Counts  `json:"counts"`
}

// Counts tallies a report's checks by status.
type Counts struct {
	OK   int `json:"ok"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
}

// Device asks a gpufpga device node for the driver's ABI version (the
// INFO ioctl).
type Device interface {
	// ABI opens node, a path relative to the host's root ("dev/gpufpga0"),
	// and returns the ABI version its driver speaks.
	ABI(ctx context.Context, node string) (uint32, error)
}

// GPU is what the CUDA driver says about one GPU.
type GPU struct {
	Name          string
	RDMASupported bool // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
	DmaBuf        bool // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
	// WritesOrdering is CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING
	// (0 none, 100 the GPU's own kernels see a peer's writes in order, 200
	// every device does); FlushOptions is
	// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS (bit 0 the
	// host's flush, bit 1 a stream memory operation's).
	WritesOrdering int
	FlushOptions   int
	// BAR1Free is the BAR1 space not yet mapped, from NVML; 0 when
	// unknown.
	BAR1Free uint64
}

// CUDA looks GPUs up in the CUDA driver.
type CUDA interface {
	// GPU describes the GPU at PCI address bdf ("0000:65:00.0").
	GPU(ctx context.Context, bdf string) (GPU, error)
}

// Config is what Diagnose examines.
type Config struct {
	// Root is the host's file system from /: os.DirFS("/"), or a
	// fixture. It must implement fs.ReadLinkFS to follow sysfs links.
	Root fs.FS
	// RingSize is the GPU memory the user means to pin, checked
	// against BAR1 and the memlock limit.
	RingSize uint64
	// ABI is the driver ABI the caller speaks, checked against each
	// device's.
	ABI uint32
	// Device reads a node's ABI; nil skips the check.
	Device Device
	// CUDA reads GPU attributes; nil means no CUDA driver loaded, and
	// CUDAErr says why.
	CUDA    CUDA
	CUDAErr error
}

// Diagnose runs every check. It fails only when ctx ends or cfg is
// unusable: what it cannot read becomes a check's WARN or FAIL.
func Diagnose(ctx context.Context, cfg Config) (Report, error) {
	if _, ok := cfg.Root.(fs.ReadLinkFS); !ok {
		return Report{}, fmt.Errorf("doctor: root %T cannot read links", cfg.Root)
	}
	d := &diagnosis{cfg: cfg, h: host{cfg.Root}}
	if err := d.run(ctx); err != nil {
		return Report{}, err
	}
	r := Report{RingSize: cfg.RingSize, Checks: d.checks}
	for _, c := range r.Checks {
		switch c.Status {
		case OK:
			r.Counts.OK++
		case Warn:
			r.Counts.Warn++
		case Fail:
			r.Counts.Fail++
		}
	}
	return r, nil
}

// WriteText writes the report for people: one aligned line per check, the
// hint after the summary, and the tally.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		line := c.Summary
		if c.Hint != "" {
			line += "; hint: " + c.Hint
		}
		subject := c.Subject
		if subject == "" {
			subject = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Status, c.Key, subject, strings.ReplaceAll(line, "\n", " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d OK, %d WARN, %d FAIL\n", r.Counts.OK, r.Counts.Warn, r.Counts.Fail)
	return err
}

// diagnosis collects the checks of one Diagnose call.
type diagnosis struct {
	cfg    Config
	h      host
	checks []Check
}

func (d *diagnosis) add(key, subject string, s Status, summary, hint string) {
	d.checks = append(d.checks, Check{Key: key, Subject: subject, Status: s, Summary: summary, Hint: hint})
}

func (d *diagnosis) run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	devs, err := d.h.pciDevices()
	if err != nil {
		// No PCI in sysfs at all (a container without /sys): report
		// what can be, with no devices.
		d.add("pci", "", Warn, fmt.Sprintf("PCI devices not readable: %v", err), "run on the host, with /sys mounted")
	}
	var fpgas, gpus []pciDev
	for _, p := range devs {
		switch {
		case p.isFPGA():
			fpgas = append(fpgas, p)
		case p.isNVIDIAGPU():
			gpus = append(gpus, p)
		}
	}
	if err := d.driver(ctx, fpgas); err != nil {
		return err
	}
	d.fpga(fpgas)
	if err := d.gpu(ctx, gpus); err != nil {
		return err
	}
	d.path(fpgas, gpus)
	d.iommu(fpgas)
	d.memlock()
	return nil
}
