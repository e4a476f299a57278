package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// build is what the binary knows of the source it was built from.
type build struct {
	Revision  string `json:"revision"`   // git commit; "unknown" where the build had no VCS
	Dirty     bool   `json:"dirty"`      // the work tree had changes
	Time      string `json:"vcs_time"`   // the commit's time
	GoVersion string `json:"go_version"` // the toolchain
}

// Set by `make gpubin` (-ldflags -X), where Go's VCS stamping is off.
var revision, dirty string

func buildInfo() build {
	b := build{Revision: "unknown", GoVersion: runtime.Version()}
	if revision != "" {
		b.Revision, b.Dirty = revision, dirty == "true"
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Dirty = s.Value == "true"
		case "vcs.time":
			b.Time = s.Value
		}
	}
	return b
}

// shortRev is the revision as a file name carries it: 12 hex digits, and
// "-dirty" where the tree had changes.
func (b build) shortRev() string {
	r := b.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if b.Dirty {
		r += "-dirty"
	}
	return r
}

// flags returns every flag's value, defaults included.
func flags(fs *flag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

// gpuState is the GPU's clocks and state as nvidia-smi reports them (MHz,
// W, °C), empty where it is missing.
type gpuState struct {
	Query map[string]string `json:"nvidia_smi,omitempty"`
	Error string            `json:"error,omitempty"`
}

var smiFields = []string{"name", "driver_version", "pci.bus_id", "vbios_version", "pstate", "clocks.sm", "clocks.mem",
	"clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics", "power.draw", "power.limit",
	"temperature.gpu", "pcie.link.gen.current", "pcie.link.width.current", "persistence_mode", "compute_mode",
	"mig.mode.current", "ecc.mode.current"}

func nvidiaSMI() gpuState {
	out, err := exec.Command("nvidia-smi", "--query-gpu="+strings.Join(smiFields, ","),
		"--format=csv,noheader,nounits", "--id=0").Output()
	if err != nil {
		return gpuState{Error: err.Error()}
	}
	vals := strings.Split(strings.TrimSpace(string(out)), ", ")
	if len(vals) != len(smiFields) {
		return gpuState{Error: fmt.Sprintf("nvidia-smi: %d values for %d fields: %q", len(vals), len(smiFields), out)}
	}
	m := map[string]string{}
	for i, f := range smiFields {
		m[f] = strings.TrimSpace(vals[i])
	}
	return gpuState{Query: m}
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// slug turns a GPU's name into a file name's part: "NVIDIA H100 80GB
// HBM3" is "h100-80gb-hbm3".
func slug(name string) string {
	name = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(name)), "nvidia ")
	var b strings.Builder
	dash := false
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimSuffix(b.String(), "-")
	if s == "" {
		return "gpu"
	}
	return s
}

// createResult creates a new file in dir for a run started at t on gpu
// from revision rev: DATE-TIME-GPU-REV.json, or with -2, -3, ... before
// .json where that name is taken. It never opens an existing file.
func createResult(dir string, t time.Time, gpu, rev string) (*os.File, error) {
	base := fmt.Sprintf("%s-%s-%s", t.UTC().Format("2006-01-02T1504Z"), slug(gpu), rev)
	for i := 1; i < 1000; i++ {
		name := base + ".json"
		if i > 1 {
			name = fmt.Sprintf("%s-%d.json", base, i)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("gpubench: no free result name for %s in %s", base, dir)
}
