package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor"
	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor/doctortest"
)

// device answers the INFO ioctl with a fixed ABI.
type device struct {
	abi uint32
	err error
}

func (d device) ABI(context.Context, string) (uint32, error) { return d.abi, d.err }

// gpus answers for every GPU alike.
type gpus doctor.GPU

func (g gpus) GPU(context.Context, string) (doctor.GPU, error) { return doctor.GPU(g), nil }

var a100 = gpus{Name: "NVIDIA A100-PCIE-40GB", RDMASupported: true, DmaBuf: true, BAR1Free: 63 << 30, WritesOrdering: 100, FlushOptions: 1}

func diagnose(t *testing.T, h doctortest.Host, cfg doctor.Config) doctor.Report {
	t.Helper()
	dir := t.TempDir()
	if err := doctortest.Write(dir, h); err != nil {
		t.Fatal(err)
	}
	cfg.Root = os.DirFS(dir)
	if cfg.RingSize == 0 {
		cfg.RingSize = 256 << 20
	}
	cfg.ABI = 1
	r, err := doctor.Diagnose(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fixture(t *testing.T, name string) doctortest.Host {
	t.Helper()
	h, ok := doctortest.Fixture(name)
	if !ok {
		t.Fatalf("no fixture %q", name)
	}
	return h
}

// want is a check as "STATUS key subject".
func lines(r doctor.Report) []string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", c.Status, c.Key, c.Subject)))
	}
	return out
}

const pair = doctortest.FPGA + "->" + doctortest.GPU

// allOK is switch-shared's report; the other fixtures differ from it in
// the checks they name.
var allOK = []string{
	"OK driver.module gpufpga",
	"OK driver.nv gpufpga_nv",
	"OK driver.nodes /dev/gpufpga0",
	"OK driver.abi /dev/gpufpga0",
	"OK fpga.driver " + doctortest.FPGA,
	"OK fpga.link " + doctortest.FPGA,
	"OK fpga.payload " + doctortest.FPGA,
	"OK fpga.bars " + doctortest.FPGA,
	"OK fpga.irq " + doctortest.FPGA,
	"OK gpu.driver nvidia",
	"OK gpu.device " + doctortest.GPU,
	"OK gpu.bar1 " + doctortest.GPU,
	"OK gpu.rdma " + doctortest.GPU,
	"OK gpu.ordering " + doctortest.GPU,
	"OK path.route " + pair,
	"OK path.acs " + pair,
	"OK iommu.mode " + doctortest.FPGA,
	"OK memlock",
}

// with returns allOK with the checks of the same key and subject replaced,
// or, for a change whose status is "-", left out.
func with(changes ...string) []string {
	out := append([]string(nil), allOK...)
	for _, c := range changes {
		st, id, _ := strings.Cut(c, " ")
		for i, o := range out {
			if _, oid, _ := strings.Cut(o, " "); oid == id {
				out[i] = c
			}
		}
		if st == "-" {
			out = slices.DeleteFunc(out, func(o string) bool { return o == c })
		}
	}
	return out
}

func TestFixtures(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
		// summary holds words that the named check's summary or hint
		// must contain.
		summary map[string]string
	}{
		{"switch-shared", allOK, map[string]string{
			"path.route":   "0000:03:00.0 > 0000:02:08.0 > [0000:01:00.0] > 0000:02:10.0 > 0000:04:00.0: under one switch",
			"path.acs":     "0000:02:08.0 off, 0000:02:10.0 off",
			"fpga.link":    "8.0 GT/s x8",
			"fpga.bars":    "BAR0 1 MiB, BAR1 64 KiB",
			"fpga.irq":     "MSI-X, 4 vectors",
			"gpu.bar1":     "BAR1 64 GiB (63 GiB free), ring 256 MiB",
			"gpu.driver":   "570.86.15, open kernel module",
			"gpu.device":   "NVIDIA A100-PCIE-40GB, 10de:20b5 3D controller, driver nvidia",
			"fpga.payload": "MPS 256 B (supports 512 B), MRRS 512 B",
			"fpga.driver":  "10ee:9038 held by gpufpga, an ID gpufpga claims",
		}},
		{"root-complex", with("WARN path.route " + pair), map[string]string{
			"path.route": "0000:03:00.0 > 0000:00:06.0 > [pci0000:00] > 0000:00:01.0 > 0000:04:00.0: crosses the root complex; hint: 13th Gen Intel(R) Core(TM) i9-13900K is an Intel client part",
			"path.acs":   "no switch ports",
		}},
		{"acs-on", with("WARN path.acs " + pair), map[string]string{
			"path.acs": "at 0000:02:08.0 SrcValid+ReqRedir+CmpltRedir+UpstreamFwd; hint: boot with pci=disable_acs_redir=0000:02:08.0",
		}},
		{"iommu-on", with("WARN iommu.mode " + doctortest.FPGA), map[string]string{
			"iommu.mode": "translated (DMA-FQ domain, group 12); hint: CUDA's dma-bufs",
		}},
		{"revocable-open", with("WARN driver.nv gpufpga_nv"), map[string]string{
			"driver.nv": "revocable GPU pins open to every user of the device",
		}},
		{"revocable-old", with("WARN driver.nv gpufpga_nv"), map[string]string{
			"driver.nv": "hint: upgrade gpufpga, which keeps them for CAP_SYS_RAWIO",
		}},
		{"downtrained", with("WARN fpga.link " + doctortest.FPGA), map[string]string{
			"fpga.link": "link down-trained: 2.5 GT/s x4, capable of 8.0 GT/s x8",
		}},
		{"no-fpga", []string{
			"OK driver.module gpufpga",
			"OK driver.nv gpufpga_nv",
			"WARN driver.nodes /dev/gpufpga*",
			"WARN fpga.device",
			"OK gpu.driver nvidia",
			"OK gpu.device " + doctortest.GPU,
			"OK gpu.bar1 " + doctortest.GPU,
			"OK gpu.rdma " + doctortest.GPU,
			"OK gpu.ordering " + doctortest.GPU,
			"WARN path.route",
			"OK iommu.mode",
			"OK memlock",
		}, map[string]string{
			"fpga.device": "no XDMA device found",
			"path.route":  "no XDMA device found",
		}},
		{"no-driver", []string{
			"FAIL driver.module gpufpga",
			"WARN driver.nv gpufpga_nv",
			"WARN driver.nodes /dev/gpufpga*",
			"WARN fpga.driver " + doctortest.FPGA,
			"OK fpga.link " + doctortest.FPGA,
			"OK fpga.payload " + doctortest.FPGA,
			"OK fpga.bars " + doctortest.FPGA,
			"WARN fpga.irq " + doctortest.FPGA,
			"WARN gpu.driver nvidia",
			"OK gpu.device " + doctortest.GPU,
			"OK gpu.bar1 " + doctortest.GPU,
			"OK gpu.rdma " + doctortest.GPU,
			"OK gpu.ordering " + doctortest.GPU,
			"OK path.route " + pair,
			"OK path.acs " + pair,
			"OK iommu.mode " + doctortest.FPGA,
			"WARN memlock",
		}, map[string]string{
			"gpu.driver":  "535.183.01, proprietary kernel module",
			"memlock":     "8 MiB, ring 256 MiB: host-memory pins of the ring would fail",
			"fpga.driver": "10ee:9038 held by no driver, an ID gpufpga claims; gpufpga did not bind it: gpufpga is not loaded; hint: modprobe gpufpga",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := diagnose(t, fixture(t, tc.name), doctor.Config{Device: device{abi: 1}, CUDA: a100})
			got := lines(r)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for key, words := range tc.summary {
				found := false
				for _, c := range r.Checks {
					if c.Key == key {
						found = true
						if text := c.Summary + "; hint: " + c.Hint; !strings.Contains(text, words) {
							t.Errorf("%s: %q lacks %q", key, text, words)
						}
					}
				}
				if !found {
					t.Errorf("no %s check", key)
				}
			}
			for _, c := range r.Checks {
				if c.Status != doctor.OK && c.Hint == "" {
					t.Errorf("%s %s %s has no hint", c.Status, c.Key, c.Subject)
				}
				if c.Status == doctor.OK && c.Hint != "" {
					t.Errorf("OK %s has a hint: %q", c.Key, c.Hint)
				}
			}
		})
	}
}

// Without root, sysfs shows 64 bytes of config space: MPS, MRRS and ACS
// cannot be read, which the report says instead of guessing.
func TestUnprivileged(t *testing.T) {
	h := fixture(t, "switch-shared")
	h.ShortConfig = true
	r := diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	want := with("WARN fpga.payload "+doctortest.FPGA, "WARN path.acs "+pair)
	if got := lines(r); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range r.Checks {
		if c.Status == doctor.Warn && !strings.Contains(c.Hint, "as root") {
			t.Errorf("%s: hint %q does not say to run as root", c.Key, c.Hint)
		}
	}
}

// What comes from outside sysfs: the ABI, CUDA's answers, the ring size.
func TestDeviceAndCUDA(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  doctor.Config
		want []string
	}{
		{"abi-mismatch", doctor.Config{Device: device{abi: 2}, CUDA: a100},
			with("FAIL driver.abi /dev/gpufpga0")},
		{"no-permission", doctor.Config{Device: device{err: fmt.Errorf("open: %w", fs.ErrPermission)}, CUDA: a100},
			with("WARN driver.abi /dev/gpufpga0")},
		{"no-cuda", doctor.Config{Device: device{abi: 1}, CUDAErr: errors.New("cuda: no CUDA driver")},
			with("WARN gpu.rdma "+doctortest.GPU, "- gpu.ordering "+doctortest.GPU)},
		{"geforce", doctor.Config{Device: device{abi: 1}, CUDA: gpus{Name: "NVIDIA GeForce RTX 4090"}},
			with("FAIL gpu.rdma "+doctortest.GPU, "- gpu.ordering "+doctortest.GPU)},
		{"no-dmabuf", doctor.Config{Device: device{abi: 1}, CUDA: gpus{RDMASupported: true, WritesOrdering: 100}},
			with("WARN gpu.rdma " + doctortest.GPU)},
		{"unordered", doctor.Config{Device: device{abi: 1}, CUDA: gpus{RDMASupported: true, DmaBuf: true, BAR1Free: 63 << 30}},
			with("WARN gpu.ordering " + doctortest.GPU)},
		{"ring-over-bar1", doctor.Config{Device: device{abi: 1}, CUDA: a100, RingSize: 128 << 30},
			with("WARN gpu.bar1 "+doctortest.GPU, "WARN memlock")},
		{"ring-over-free", doctor.Config{Device: device{abi: 1}, CUDA: gpus{RDMASupported: true, DmaBuf: true, BAR1Free: 1 << 20, WritesOrdering: 200}},
			with("WARN gpu.bar1 " + doctortest.GPU)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := diagnose(t, fixture(t, "switch-shared"), tc.cfg)
			if got := lines(r); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("checks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// BAR1 is the second memory BAR: register 2 behind a 64-bit BAR0, as an
// H200 shows it (its resource file, read on one).
func TestBAR1Behind64BitBAR0(t *testing.T) {
	h := fixture(t, "switch-shared")
	for i := range h.Devices {
		if h.Devices[i].BDF() == doctortest.GPU {
			h.Devices[i].BARs = []doctortest.BAR{
				{Index: 0, Addr: 0x104002000000, Size: 16 << 20, Flags: 0x0014220c},
				{Index: 2, Addr: 0x100000000000, Size: 256 << 30, Flags: 0x0014220c},
				{Index: 4, Addr: 0x104000000000, Size: 32 << 20, Flags: 0x0014220c},
			}
		}
	}
	r := diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	found := false
	for _, c := range r.Checks {
		if c.Key == "gpu.bar1" {
			found = true
			if c.Status != doctor.OK || !strings.HasPrefix(c.Summary, "BAR1 256 GiB") {
				t.Fatalf("gpu.bar1: %s %s", c.Status, c.Summary)
			}
		}
	}
	if !found {
		t.Fatal("no gpu.bar1 check")
	}
}

// A BAR the kernel could not place (Above 4G Decoding off) keeps its size
// in the resource file, at address 0 and marked unset: it is not assigned.
func TestUnplacedBAR1(t *testing.T) {
	h := fixture(t, "switch-shared")
	for i := range h.Devices {
		if h.Devices[i].BDF() == doctortest.GPU {
			h.Devices[i].BARs = []doctortest.BAR{
				{Index: 0, Addr: 0xf8000000, Size: 16 << 20, Flags: doctortest.Mem32},
				{Index: 1, Addr: 0, Size: 64 << 30, Flags: doctortest.Mem64Prefetch | 0x20000000},
			}
		}
	}
	r := diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	for _, c := range r.Checks {
		if c.Key == "gpu.bar1" {
			if c.Status != doctor.Fail {
				t.Fatalf("gpu.bar1 of an unplaced BAR: %s %s", c.Status, c.Summary)
			}
			return
		}
	}
	t.Fatal("no gpu.bar1 check")
}

func TestCapIPCLock(t *testing.T) {
	h := fixture(t, "switch-shared")
	h.Memlock, h.CapEff = "65536", 1<<14
	r := diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	if got := lines(r); strings.Join(got, "\n") != strings.Join(allOK, "\n") {
		t.Fatalf("checks:\n%s", strings.Join(got, "\n"))
	}
}

func TestReportOutput(t *testing.T) {
	r := diagnose(t, fixture(t, "acs-on"), doctor.Config{Device: device{abi: 1}, CUDA: a100})
	if r.Counts != (doctor.Counts{OK: 17, Warn: 1}) {
		t.Errorf("counts %+v", r.Counts)
	}

	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(text) != len(r.Checks)+1 || text[len(text)-1] != "17 OK, 1 WARN, 0 FAIL" {
		t.Fatalf("text:\n%s", b.String())
	}
	// Aligned: every check's key starts in the same column.
	col := strings.Index(text[0], "driver.module")
	for i, c := range r.Checks {
		if strings.Index(text[i], c.Key) != col || !strings.HasPrefix(text[i], c.Status.String()) {
			t.Errorf("line %q: key not at column %d", text[i], col)
		}
	}

	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		RingSize uint64 `json:"ring_size"`
		Checks   []map[string]any
		Counts   map[string]int
	}
	if err := json.Unmarshal(js, &shape); err != nil {
		t.Fatal(err)
	}
	if shape.RingSize != 256<<20 || len(shape.Checks) != 18 || shape.Counts["ok"] != 17 || shape.Counts["warn"] != 1 || shape.Counts["fail"] != 0 {
		t.Errorf("JSON: %s", js)
	}
	acs := shape.Checks[15]
	if acs["key"] != "path.acs" || acs["status"] != "WARN" || acs["subject"] != pair || acs["summary"] == "" || acs["hint"] == "" {
		t.Errorf("path.acs in JSON: %v", acs)
	}
	if _, ok := shape.Checks[len(shape.Checks)-1]["subject"]; ok {
		t.Errorf("memlock has a subject: %v", shape.Checks[len(shape.Checks)-1])
	}
	var back doctor.Report
	if err := json.Unmarshal(js, &back); err != nil || back.Checks[15].Status != doctor.Warn {
		t.Errorf("round trip: %v, %+v", err, back.Checks[15])
	}
}

// bindingLines returns r's fpga.driver checks as doctor prints them.
func bindingLines(t *testing.T, r doctor.Report) []string {
	t.Helper()
	var b doctor.Report
	for _, c := range r.Checks {
		if c.Key == "fpga.driver" {
			b.Checks = append(b.Checks, c)
		}
	}
	var out bytes.Buffer
	if err := b.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	return lines[:len(lines)-1] // the tally
}

// xilinxFunction is the fixture's FPGA at another address, with another
// device ID, driver and driver_override.
func xilinxFunction(h doctortest.Host, bdf string, id uint16, driver, override string) doctortest.Device {
	var d doctortest.Device
	for _, dev := range h.Devices {
		if dev.BDF() == doctortest.FPGA {
			d = dev
		}
	}
	d.Path, d.ID, d.Driver, d.Override = "pci0000:00/"+bdf, id, driver, override
	return d
}

// A host where Xilinx's xdma.ko, vfio-pci and other drivers hold Xilinx
// functions beside gpufpga: doctor names each one's driver, whether
// gpufpga claims its ID, why gpufpga did not bind it, and the commands
// that hand it over.
func TestXilinxBinding(t *testing.T) {
	h := fixture(t, "switch-shared")
	h.Devices = append(h.Devices,
		xilinxFunction(h, "0000:05:00.0", 0x9034, "xdma", ""),
		xilinxFunction(h, "0000:06:00.0", 0x9038, "vfio-pci", "vfio-pci"),
		xilinxFunction(h, "0000:07:00.0", 0x9024, "", "vfio-pci"),
		xilinxFunction(h, "0000:08:00.0", 0x9021, "", ""),
		xilinxFunction(h, "0000:09:00.0", 0x7777, "", ""),
		xilinxFunction(h, "0000:0a:00.0", 0x5000, "xclmgmt", ""),
		xilinxFunction(h, "0000:0b:00.0", 0x7777, "gpufpga", "gpufpga"),
		xilinxFunction(h, "0000:0c:00.0", 0x9038, "xdma", "gpufpga"),
	)
	r := diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	want := []string{
		"OK    fpga.driver  0000:03:00.0  10ee:9038 held by gpufpga, an ID gpufpga claims",
		"WARN  fpga.driver  0000:05:00.0  10ee:9034 held by xdma, an ID gpufpga claims; gpufpga did not bind it: xdma holds it; " +
			"hint: echo gpufpga > /sys/bus/pci/devices/0000:05:00.0/driver_override; echo 0000:05:00.0 > /sys/bus/pci/drivers/xdma/unbind; " +
			"echo 0000:05:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:05:00.0 gpufpga does this and keeps it across reboots)",
		"WARN  fpga.driver  0000:06:00.0  10ee:9038 held by vfio-pci, an ID gpufpga claims; gpufpga did not bind it: vfio-pci holds it, driver_override reserves it for vfio-pci; " +
			"hint: echo gpufpga > /sys/bus/pci/devices/0000:06:00.0/driver_override; echo 0000:06:00.0 > /sys/bus/pci/drivers/vfio-pci/unbind; " +
			"echo 0000:06:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:06:00.0 gpufpga does this and keeps it across reboots)",
		"WARN  fpga.driver  0000:07:00.0  10ee:9024 held by no driver, an ID gpufpga claims; gpufpga did not bind it: driver_override reserves it for vfio-pci; " +
			"hint: echo gpufpga > /sys/bus/pci/devices/0000:07:00.0/driver_override; " +
			"echo 0000:07:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:07:00.0 gpufpga does this and keeps it across reboots)",
		"WARN  fpga.driver  0000:08:00.0  10ee:9021 held by no driver, an ID gpufpga claims; gpufpga did not bind it: its probe failed, or the function was unbound; " +
			"hint: echo 0000:08:00.0 > /sys/bus/pci/drivers_probe; if it stays unbound, dmesg says why gpufpga's probe failed",
		"WARN  fpga.driver  0000:09:00.0  10ee:7777 held by no driver, an ID gpufpga does not claim; gpufpga did not bind it: the ID is not in its table; " +
			"hint: if it is the XDMA card: echo gpufpga > /sys/bus/pci/devices/0000:09:00.0/driver_override; " +
			"echo 0000:09:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:09:00.0 gpufpga does this and keeps it across reboots)",
		"WARN  fpga.driver  0000:0a:00.0  10ee:5000 held by xclmgmt, an ID gpufpga does not claim; gpufpga did not bind it: xclmgmt holds it, the ID is not in its table; " +
			"hint: if it is the XDMA card: echo gpufpga > /sys/bus/pci/devices/0000:0a:00.0/driver_override; echo 0000:0a:00.0 > /sys/bus/pci/drivers/xclmgmt/unbind; " +
			"echo 0000:0a:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:0a:00.0 gpufpga does this and keeps it across reboots)",
		"OK    fpga.driver  0000:0b:00.0  10ee:7777 held by gpufpga, an ID gpufpga does not claim (bound through driver_override or new_id)",
		"WARN  fpga.driver  0000:0c:00.0  10ee:9038 held by xdma, an ID gpufpga claims; gpufpga did not bind it: xdma holds it, driver_override names gpufpga, for the next probe; " +
			"hint: echo 0000:0c:00.0 > /sys/bus/pci/drivers/xdma/unbind; echo 0000:0c:00.0 > /sys/bus/pci/drivers_probe",
	}
	if got := bindingLines(t, r); !slices.Equal(got, want) {
		t.Errorf("fpga.driver lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Without the module: loading it comes first, and binds a free
	// function gpufpga claims by itself.
	h.Modules = []string{"nvidia"}
	h.Devices = []doctortest.Device{
		xilinxFunction(h, "0000:05:00.0", 0x9034, "xdma", ""),
		xilinxFunction(h, "0000:08:00.0", 0x9021, "", ""),
		xilinxFunction(h, "0000:09:00.0", 0x7777, "", ""),
	}
	r = diagnose(t, h, doctor.Config{Device: device{abi: 1}, CUDA: a100})
	want = []string{
		"WARN  fpga.driver  0000:05:00.0  10ee:9034 held by xdma, an ID gpufpga claims; gpufpga did not bind it: xdma holds it, gpufpga is not loaded; " +
			"hint: modprobe gpufpga; echo gpufpga > /sys/bus/pci/devices/0000:05:00.0/driver_override; echo 0000:05:00.0 > /sys/bus/pci/drivers/xdma/unbind; " +
			"echo 0000:05:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:05:00.0 gpufpga does this and keeps it across reboots)",
		"WARN  fpga.driver  0000:08:00.0  10ee:9021 held by no driver, an ID gpufpga claims; gpufpga did not bind it: gpufpga is not loaded; hint: modprobe gpufpga",
		"WARN  fpga.driver  0000:09:00.0  10ee:7777 held by no driver, an ID gpufpga does not claim; gpufpga did not bind it: gpufpga is not loaded, the ID is not in its table; " +
			"hint: if it is the XDMA card: modprobe gpufpga; echo gpufpga > /sys/bus/pci/devices/0000:09:00.0/driver_override; " +
			"echo 0000:09:00.0 > /sys/bus/pci/drivers_probe (driverctl set-override 0000:09:00.0 gpufpga does this and keeps it across reboots)",
	}
	if got := bindingLines(t, r); !slices.Equal(got, want) {
		t.Errorf("without the module, fpga.driver lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCancelled(t *testing.T) {
	dir := t.TempDir()
	if err := doctortest.Write(dir, fixture(t, "switch-shared")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := doctor.Diagnose(ctx, doctor.Config{Root: os.DirFS(dir)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
