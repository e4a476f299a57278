package rtlbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

//go:embed harness/harness.cpp
var harnessSource []byte

// Design names a user's top level and the files Verilator builds it from.
type Design struct {
	Top     string            // the top module: the logic across from the XDMA IP
	Files   []string          // Verilog/SystemVerilog sources, top included
	IncDirs []string          // `include directories
	Params  map[string]string // top-level parameters (-G)
	// Jobs is make's -j for the C++ build; 0 means 2.
	Jobs int
}

// portsRequired are the ports the harness drives or reads (the XDMA IP's
// names for its user side, channel 0).
var portsRequired = []string{
	"axi_aclk", "axi_aresetn",
	"s_axis_c2h_tdata_0", "s_axis_c2h_tkeep_0", "s_axis_c2h_tlast_0", "s_axis_c2h_tvalid_0", "s_axis_c2h_tready_0",
	"m_axis_h2c_tdata_0", "m_axis_h2c_tkeep_0", "m_axis_h2c_tlast_0", "m_axis_h2c_tvalid_0", "m_axis_h2c_tready_0",
	"m_axil_awaddr", "m_axil_awvalid", "m_axil_awready", "m_axil_wdata", "m_axil_wstrb", "m_axil_wvalid",
	"m_axil_wready", "m_axil_bresp", "m_axil_bvalid", "m_axil_bready", "m_axil_araddr", "m_axil_arvalid",
	"m_axil_arready", "m_axil_rdata", "m_axil_rresp", "m_axil_rvalid", "m_axil_rready",
	"usr_irq_req", "usr_irq_ack",
}

// Build compiles d with the harness into a binary under cacheDir and
// returns its path. The binary is cached by its inputs (the sources, the
// parameters, the harness and verilator's version): a second Build of the
// same inputs returns at once.
func Build(ctx context.Context, d Design, cacheDir string) (string, error) {
	if d.Top == "" || len(d.Files) == 0 {
		return "", fmt.Errorf("%w: a design needs a top module and its files", ErrVerilator)
	}
	verilator, err := exec.LookPath("verilator")
	if err != nil {
		return "", fmt.Errorf("%w: not installed (Debian's verilator: run make deps): %w", ErrVerilator, err)
	}
	version, err := exec.CommandContext(ctx, verilator, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%w: --version: %w", ErrVerilator, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", version, d.Top)
	h.Write(harnessSource)
	var files []string
	for _, f := range d.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%w: reading the design: %w", ErrVerilator, err)
		}
		abs, _ := filepath.Abs(f)
		files = append(files, abs)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(b))
		h.Write(b)
	}
	var incs []string
	for _, dir := range d.IncDirs {
		abs, _ := filepath.Abs(dir)
		incs = append(incs, "-I"+abs)
		// Included files are inputs too.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && !e.IsDir() {
				fmt.Fprintf(h, "inc %s\x00%d\x00", e.Name(), len(b))
				h.Write(b)
			}
		}
	}
	var params []string
	for k, v := range d.Params {
		params = append(params, "-G"+k+"="+v)
	}
	slices.Sort(params)
	fmt.Fprintf(h, "%q", params)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(cacheDir, d.Top+"-"+key)
	bin := filepath.Join(dir, "Vrtl")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	defer os.RemoveAll(tmp)
	harness := filepath.Join(tmp, "harness.cpp")
	if err := os.WriteFile(harness, harnessSource, 0o644); err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	obj := filepath.Join(tmp, "obj")
	args := []string{"--cc", "--exe", "--top-module", d.Top, "--prefix", "Vrtl", "-Mdir", obj, "-o", "Vrtl",
		"-O3", "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal", "-Wno-lint", "-Wno-style",
		"-CFLAGS", "-O2 -I" + obj}
	args = append(args, incs...)
	args = append(args, params...)
	args = append(args, files...)
	args = append(args, harness)
	if out, err := exec.CommandContext(ctx, verilator, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s failed: %w\n%s", ErrVerilator, d.Top, err, out)
	}
	c2h, h2c, err := portWidths(filepath.Join(obj, "Vrtl.h"))
	if err != nil {
		return "", err
	}
	top := fmt.Sprintf("#include \"Vrtl.h\"\n#define RTL_TOP Vrtl\n#define RTL_C2H_BITS %d\n#define RTL_H2C_BITS %d\n", c2h, h2c)
	if err := os.WriteFile(filepath.Join(obj, "rtl_top.h"), []byte(top), 0o644); err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	jobs := d.Jobs
	if jobs <= 0 {
		jobs = 2
	}
	mk := exec.CommandContext(ctx, "make", "-s", "-C", obj, "-f", "Vrtl.mk", "-j", strconv.Itoa(jobs), "OPT_FAST=-O2", "OPT_SLOW=-O1")
	if out, err := mk.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: compiling %s: %w\n%s", ErrVerilator, d.Top, err, out)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "out"), 0o755); err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	if err := os.Rename(filepath.Join(obj, "Vrtl"), filepath.Join(tmp, "out", "Vrtl")); err != nil {
		return "", fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	// Another build of the same inputs may have won: either is good.
	if err := os.Rename(filepath.Join(tmp, "out"), dir); err != nil {
		if _, serr := os.Stat(bin); serr != nil {
			return "", fmt.Errorf("%w: %w", ErrVerilator, err)
		}
	}
	return bin, nil
}

var portDecl = regexp.MustCompile(`VL_(?:IN|OUT)(?:8|16|64|W)?\(&(\w+),(\d+),(\d+)`)

// portWidths checks the generated model's ports and returns the widths of
// the C2H and H2C tdata.
func portWidths(header string) (c2h, h2c int, err error) {
	b, err := os.ReadFile(header)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrVerilator, err)
	}
	widths := map[string]int{}
	for _, m := range portDecl.FindAllSubmatch(b, -1) {
		msb, _ := strconv.Atoi(string(m[2]))
		lsb, _ := strconv.Atoi(string(m[3]))
		widths[string(m[1])] = msb - lsb + 1
	}
	var missing []string
	for _, p := range portsRequired {
		if _, ok := widths[p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return 0, 0, fmt.Errorf("%w: missing %s", ErrPorts, strings.Join(missing, ", "))
	}
	c2h, h2c = widths["s_axis_c2h_tdata_0"], widths["m_axis_h2c_tdata_0"]
	for _, p := range []struct {
		name  string
		bits  int
		keep  string
		kbits int
	}{{"s_axis_c2h_tdata_0", c2h, "s_axis_c2h_tkeep_0", widths["s_axis_c2h_tkeep_0"]}, {"m_axis_h2c_tdata_0", h2c, "m_axis_h2c_tkeep_0", widths["m_axis_h2c_tkeep_0"]}} {
		if p.bits%64 != 0 || p.bits > 512 {
			return 0, 0, fmt.Errorf("%w: %s is %d bits: the XDMA IP's streams are 64, 128, 256 or 512", ErrWidth, p.name, p.bits)
		}
		if p.kbits*8 != p.bits {
			return 0, 0, fmt.Errorf("%w: %s is %d bits for a %d-bit %s", ErrWidth, p.keep, p.kbits, p.bits, p.name)
		}
	}
	if bytes.Contains(b, []byte("usr_irq_req")) && widths["usr_irq_req"] > 16 {
		return 0, 0, fmt.Errorf("%w: usr_irq_req is %d bits; the IP has at most 16", ErrPorts, widths["usr_irq_req"])
	}
	return c2h, h2c, nil
}
