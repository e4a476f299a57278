// Package vmtest runs Go test packages inside a QEMU guest with the
// simulated rig attached: the device model of package devmodel on the host,
// Debian's kernel in the guest, and this project's kernel modules in the
// guest's initramfs under /gpufpga/modules.
//
// Guest test files carry the build tag vmguest, so a plain `go test ./...`
// on the host never sees them; Run compiles them with the tag, boots the
// guest and reports each guest test as part of the calling host test.
// Nothing here skips: a missing QEMU, kernel or module fails the test with
// what to install.
package vmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hugelgupf/vmtest/govmtest"
	"github.com/hugelgupf/vmtest/qemu"
	"github.com/u-root/mkuimage/uimage"

	"github.com/gpufpga/gpufpga/hw/testbench/devmodel"
	"github.com/gpufpga/gpufpga/hw/testbench/qmp"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
)

// GuestModuleDir is where the project's modules sit in the guest. It is
// not /lib/modules: u-root's init would load every .ko found there.
const GuestModuleDir = "/gpufpga/modules"

// guestKernelModules are what the guest needs for the 9p share that carries
// the tests, and the AER error injector of the lifecycle tests; their
// dependencies come from the kernel's modules.dep.
var guestKernelModules = []string{"virtio_pci", "9pnet_virtio", "9p", "aer_inject"}

// Options configure a guest run. The zero value suits most tests.
type Options struct {
	Rig         devmodel.Config // Dir is filled in
	VMTimeout   time.Duration   // whole VM; default 4 minutes
	TestTimeout time.Duration   // each guest test binary; default 3 minutes
	Append      []string        // more kernel command line
	// Files are more files for the guest, as "host:guest" pairs.
	Files []string
	// ICount runs one vCPU whose clock counts instructions (QEMU -icount,
	// 1 ns each; idle time passes in real time), so that guest CPU costs
	// do not depend on the host's load.
	ICount bool
	// Synchronised runs one vCPU whose clock counts instructions, 1 ns
	// each, and where idle time takes none (-icount sleep=off: the clock
	// jumps to the next timer): the guest's virtual clock, which a
	// synchronised user design's clock follows (devmodel.UserLogic.Clock),
	// is then a function of the guest's instructions and timers alone.
	Synchronised bool
}

// validate refuses options that cannot run as asked.
func (o Options) validate() error {
	clock := o.Rig.User != nil && o.Rig.User.Clock != nil
	switch {
	case o.ICount && o.Synchronised:
		return errors.New("vmtest: ICount and Synchronised both set: one instruction-counting guest, its idle time passing in real time or in none")
	case clock && !o.Synchronised:
		return errors.New("vmtest: a user design's clock tied to the guest's (devmodel.UserLogic.Clock) needs Synchronised: otherwise the guest's clock follows the host's")
	case o.Synchronised && !clock:
		return errors.New("vmtest: Synchronised without a user design's clock (devmodel.UserLogic.Clock): nothing follows the guest's clock")
	}
	return nil
}

// KernelVersion returns the Debian kernel release the rig boots: $KVER, or
// the newest installed linux-headers-*-amd64.
func KernelVersion() (string, error) {
	if v := os.Getenv("KVER"); v != "" {
		return v, nil
	}
	dirs, _ := filepath.Glob("/usr/src/linux-headers-*-amd64")
	if len(dirs) == 0 {
		return "", fmt.Errorf("no linux-headers-*-amd64 installed: run `make deps` (apt-get install linux-image-amd64 linux-headers-amd64)")
	}
	sort.Strings(dirs)
	return strings.TrimPrefix(filepath.Base(dirs[len(dirs)-1]), "linux-headers-"), nil
}

// ModuleDir returns where the project's built modules are: $GPUFPGA_MODULES,
// set by `make vmtest`.
func ModuleDir() (string, error) {
	d := os.Getenv("GPUFPGA_MODULES")
	if d == "" {
		return "", fmt.Errorf("GPUFPGA_MODULES is not set: run the VM tests with `make vmtest`, which builds the modules")
	}
	return d, nil
}

// Kernel returns the guest kernel image: $GPUFPGA_KERNEL, or Debian's
// /boot/vmlinuz-$KVER.
func Kernel(kver string) string {
	if k := os.Getenv("GPUFPGA_KERNEL"); k != "" {
		return k
	}
	return "/boot/vmlinuz-" + kver
}

// GuestModuleTree returns where the kernel's own modules are: $GPUFPGA_GUEST_KMODS
// when set ("" for a kernel with virtio and 9p built in), else
// /lib/modules/$KVER.
func GuestModuleTree(kver string) string {
	if d, ok := os.LookupEnv("GPUFPGA_GUEST_KMODS"); ok {
		return d
	}
	return "/lib/modules/" + kver
}

// DebugKernel reports whether the guest runs the debug kernel, where the
// checkers (KASAN, lockdep, kmemleak, ...) are on.
func DebugKernel() bool { return os.Getenv("GPUFPGA_DEBUG_KERNEL") == "1" }

// GuestCPUs is the number of vCPUs: several, so that races can happen.
const GuestCPUs = 2

// Run boots a guest with the rig attached and runs the test packages in it.
// Any kernel report on the guest's console (a KASAN, UBSAN or lockdep
// report, a WARNING or BUG, ...) fails the test, naming the guest test that
// was running.
func Run(t *testing.T, opts Options, pkgs ...string) {
	t.Helper()
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	kver, err := KernelVersion()
	if err != nil {
		t.Fatal(err)
	}
	kernel := Kernel(kver)
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("guest kernel %s missing: run `make deps` (apt-get install linux-image-amd64): %v", kernel, err)
	}
	// The rig's QEMU, with the xdma-model device (hw/testbench/qemu).
	qemuBin := os.Getenv("GPUFPGA_QEMU")
	if qemuBin == "" {
		t.Fatal("GPUFPGA_QEMU is not set: run through make, which builds the rig's QEMU (hw/testbench/qemu/build-qemu.sh)")
	}
	if _, err := os.Stat(qemuBin); err != nil {
		t.Fatalf("the rig's QEMU: %v", err)
	}
	modDir, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	files, err := initramfsFiles(t, kver, GuestModuleTree(kver), modDir)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, opts.Files...)
	if (opts.ICount || opts.Synchronised) && os.Getenv("VMTEST_QEMU") != "" {
		t.Fatal("VMTEST_QEMU is set: it would replace the instruction-counting guest this run needs")
	}
	if os.Getenv("VMTEST_QEMU") == "" {
		// KVM hangs on these machines; TCG always works.
		// The rig's QEMU has only the devices the rig uses: no default
		// VGA, NIC or parallel port.
		cpus := fmt.Sprintf("-accel tcg,thread=multi -cpu max -smp %d", GuestCPUs)
		switch {
		case opts.ICount:
			cpus = "-accel tcg,thread=single -icount shift=0 -cpu max -smp 1"
		case opts.Synchronised:
			cpus = "-accel tcg,thread=single -icount shift=0,sleep=off -cpu max -smp 1"
		}
		t.Setenv("VMTEST_QEMU", fmt.Sprintf("%s %s -no-reboot -vga none -net none -parallel none", qemuBin, cpus))
	}
	t.Setenv("GOFLAGS", "-tags=vmguest")
	if opts.VMTimeout == 0 {
		opts.VMTimeout = 4 * time.Minute
	}
	if opts.TestTimeout == 0 {
		opts.TestTimeout = 3 * time.Minute
	}
	// A guest that fails before its first test starts is booted once
	// more: QEMU 7.2's multi-threaded TCG has been seen to hang at boot,
	// and to run stale code after the kernel patched its own text ("Oops:
	// int3"), about once in twenty boots. Nothing of ours has run by then;
	// a failure once tests run is never retried.
	first := &attempt{TB: t}
	started := make(chan bool, 1)
	go func() {
		defer close(started)
		started <- boot(first, opts, files, kernel, pkgs)
	}()
	testsRan := <-started
	if !first.Failed() {
		return
	}
	if testsRan {
		first.replay(t)
		return
	}
	t.Logf("the guest failed before its first test; booting it again. It said:\n%s", strings.Join(first.messages(), "\n"))
	boot(t, opts, files, kernel, pkgs)
}

// boot runs the guest once and reports whether any guest test started.
func boot(t testing.TB, opts Options, files []string, kernel string, pkgs []string) bool {
	var err error
	cfg := opts.Rig
	if cfg.GuestRAM == 0 {
		cfg.GuestRAM = 1 << 30
	}
	if cfg.VRAM == 0 {
		cfg.VRAM = 256 << 20
	}
	// The card's behaviour where PG195 leaves it open (xdmamodel.Quirk).
	if q := os.Getenv("GPUFPGA_QUIRKS"); q != "" && cfg.Quirks == 0 {
		if cfg.Quirks, err = xdmamodel.ParseQuirks(q); err != nil {
			t.Fatalf("GPUFPGA_QUIRKS: %v", err)
		}
	}
	t.Logf("card quirks: %v", cfg.Quirks)
	cfg.Dir, err = os.MkdirTemp("/dev/shm", "gpufpga-rig-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(cfg.Dir)
	cfg.QMP = filepath.Join(cfg.Dir, "qmp.sock")
	rig, err := devmodel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rig.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- rig.Serve(ctx) }()

	phases := newPhaseClock()
	reports := newReportScanner()
	bootLimit := 2 * time.Minute
	appendArgs := append([]string{"console=ttyS0", "panic=-1"}, opts.Append...)
	// Slab debugging catches corruption, at tens of thousands of
	// instructions per allocation: not where costs are measured.
	if !opts.ICount {
		appendArgs = append(appendArgs, "slub_debug=FZPU")
	}
	if opts.Synchronised {
		// The vCPU waits on the design's clock at every tick.
		bootLimit *= 3
	}
	if DebugKernel() {
		// Every KASAN report, not only the first; the guest's tests read
		// kmemleak at the end.
		// no5lvl: with 5-level paging, an interrupt taken in early boot
		// under TCG can hit KASAN shadow not yet mapped for it.
		appendArgs = append(appendArgs, "kasan_multi_shot", "kmemleak=on", "no5lvl")
		// The checkers slow the guest several times over, and the fuzzer
		// runs 100 000 operations there.
		opts.TestTimeout *= 10
		opts.VMTimeout *= 6
		bootLimit *= 3
	}
	// Which NVIDIA driver the simulated GPU plays (hw/testbench/guest).
	if v := os.Getenv("GPUFPGA_NVIDIA"); v != "" {
		appendArgs = append(appendArgs, "gpufpga_rig.nvidia="+v)
	}
	// The ABI fuzzer's settings (hw/testbench/abifuzz).
	for _, v := range []struct{ env, arg string }{{"GPUFPGA_FUZZ_OPS", "ops"}, {"GPUFPGA_FUZZ_SEED", "seed"}} {
		if n := os.Getenv(v.env); n != "" {
			appendArgs = append(appendArgs, "gpufpga_fuzz."+v.arg+"="+n)
		}
	}
	govmtest.Run(t, "rig",
		govmtest.WithPackageToTest(pkgs...),
		govmtest.WithGoTestTimeout(opts.TestTimeout),
		govmtest.WithUimage(
			uimage.WithFiles(files...),
			// The rig's acquisition program, which the demo runs.
			uimage.WithBinaryCommands("github.com/gpufpga/gpufpga/hw/testbench/cmd/acquire-sim"),
			// Binaries that can load the CUDA driver (pkg/cuda, through
			// purego) link libc for dlopen, as on any GPU host: the guest
			// gets the libraries (and u-root the loader at its ABI path).
			uimage.WithFiles(guestLibraries...),
		),
		govmtest.WithQEMUFn(
			qemu.WithKernel(kernel),
			qemu.WithAppendKernel(appendArgs...),
			qemu.WithVMTimeout(opts.VMTimeout),
			qemu.WithSerialOutput(phases),
			qemu.WithSerialOutput(reports),
			qemu.WithTask(func(ctx context.Context, n *qemu.Notifications) error {
				phases.mark("initramfs")
				return watchBoot(ctx, phases, bootLimit, cfg.QMP)
			}),
			func(_ *qemu.IDAllocator, o *qemu.Options) error {
				o.AppendQEMU(rig.QEMUArgs()...)
				o.AppendQEMU("-qmp", "unix:"+cfg.QMP+",server=on,wait=off")
				return nil
			},
		),
	)
	phases.mark("tests")
	cancel()
	if err := <-served; err != nil && ctx.Err() == nil {
		t.Errorf("device model: %v", err)
	}
	if err := rig.Err(); err != nil {
		t.Errorf("device model: %v", err)
	}
	for _, r := range reports.Reports() {
		t.Errorf("kernel report during %s:\n%s", r.Test, r.Text)
	}
	t.Logf("phases: %s", phases)
	return reports.started()
}

// watchBoot quits the guest through QEMU's QMP socket when its kernel has
// not started init within limit: a guest hung at boot would otherwise hold
// the run for the whole VM timeout before it is booted again.
func watchBoot(ctx context.Context, phases *phaseClock, limit time.Duration, qmp string) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if phases.has("boot") {
				return nil
			}
		case <-deadline.C:
			if err := qmpQuit(qmp); err != nil {
				return fmt.Errorf("guest did not boot within %v; quitting QEMU: %w", limit, err)
			}
			return fmt.Errorf("guest did not boot within %v", limit)
		}
	}
}

// qmpQuit asks QEMU to quit over QMP.
func qmpQuit(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := qmp.Dial(ctx, path)
	if err != nil {
		return err
	}
	defer q.Close()
	return q.Quit(ctx)
}

// attempt is the testing.TB of a first boot: it keeps failures to itself,
// to replay them or to boot again.
type attempt struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msgs   []string
}

func (a *attempt) record(msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed = true
	if msg != "" {
		a.msgs = append(a.msgs, msg)
	}
}

func (a *attempt) Error(args ...any)                 { a.record(fmt.Sprint(args...)) }
func (a *attempt) Errorf(format string, args ...any) { a.record(fmt.Sprintf(format, args...)) }
func (a *attempt) Fail()                             { a.record("") }
func (a *attempt) Fatal(args ...any)                 { a.record(fmt.Sprint(args...)); runtime.Goexit() }
func (a *attempt) Fatalf(format string, args ...any) {
	a.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (a *attempt) FailNow() { a.record(""); runtime.Goexit() }

func (a *attempt) Failed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failed
}

func (a *attempt) messages() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.msgs...)
}

// replay fails t with the attempt's failures.
func (a *attempt) replay(t testing.TB) {
	t.Helper()
	msgs := a.messages()
	if len(msgs) == 0 {
		t.Fail()
	}
	for _, m := range msgs {
		t.Error(m)
	}
}

// libDir holds what `ldd bin/p2pctl` lists, in Debian's multiarch layout.
const libDir = "lib/x86_64-linux-gnu"

var guestLibraries = []string{
	"/" + libDir + "/ld-linux-x86-64.so.2:" + libDir + "/ld-linux-x86-64.so.2",
	"/" + libDir + "/libc.so.6:" + libDir + "/libc.so.6",
	"/" + libDir + "/libdl.so.2:" + libDir + "/libdl.so.2",
	"/" + libDir + "/libpthread.so.0:" + libDir + "/libpthread.so.0",
}

// initramfsFiles lists the host files the guest needs, as
// "host:guest" pairs for uimage.WithFiles. tree is the kernel's module
// tree, or "" when what the guest needs is built in.
func initramfsFiles(t *testing.T, kver, tree, modDir string) ([]string, error) {
	var files []string
	if tree != "" {
		mods, err := moduleClosure(tree, guestKernelModules)
		if err != nil {
			return nil, err
		}
		for _, m := range mods {
			files = append(files, filepath.Join(tree, m)+":"+filepath.Join("lib/modules", kver, m))
		}
		for _, f := range []string{"modules.dep", "modules.builtin", "modules.order"} {
			files = append(files, filepath.Join(tree, f)+":"+filepath.Join("lib/modules", kver, f))
		}
		conf := filepath.Join(t.TempDir(), "9p.conf")
		if err := os.WriteFile(conf, []byte(strings.Join(guestKernelModules, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		files = append(files, conf+":lib/modules-load.d/9p.conf")
	}
	kos, _ := filepath.Glob(filepath.Join(modDir, "*.ko"))
	if len(kos) == 0 {
		return nil, fmt.Errorf("no modules in %s: run `make vmtest`", modDir)
	}
	// The simulated GPU's other variants, in subdirectories.
	variants, _ := filepath.Glob(filepath.Join(modDir, "*", "*.ko"))
	for _, ko := range append(kos, variants...) {
		rel, err := filepath.Rel(modDir, ko)
		if err != nil {
			return nil, err
		}
		files = append(files, ko+":"+strings.TrimPrefix(filepath.Join(GuestModuleDir, rel), "/"))
	}
	return files, nil
}

// moduleClosure returns the paths (relative to tree) of the named modules
// and everything they depend on, from tree/modules.dep.
func moduleClosure(tree string, names []string) ([]string, error) {
	dep, err := os.ReadFile(filepath.Join(tree, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w (run `make deps`)", err)
	}
	deps := map[string][]string{} // path -> its dependencies
	byName := map[string]string{} // module name -> path
	for _, line := range strings.Split(string(dep), "\n") {
		path, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[path] = strings.Fields(rest)
		base, _, ok := strings.Cut(filepath.Base(path), ".ko")
		if !ok {
			continue
		}
		byName[strings.ReplaceAll(base, "-", "_")] = path
	}
	seen := map[string]bool{}
	var out []string
	var add func(string)
	add = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		out = append(out, path)
		for _, d := range deps[path] {
			add(d)
		}
	}
	for _, n := range names {
		path, ok := byName[n]
		if !ok {
			// Built into this kernel.
			continue
		}
		add(path)
	}
	return out, nil
}

// phaseClock times the phases of a run: building the initramfs and test
// binaries, booting to init, and the tests. It watches the serial console
// for the kernel starting init.
type phaseClock struct {
	mu    sync.Mutex
	last  time.Time
	names []string
	times []time.Duration
	line  []byte
}

func newPhaseClock() *phaseClock { return &phaseClock{last: time.Now()} }

func (p *phaseClock) mark(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.names = append(p.names, name)
	p.times = append(p.times, now.Sub(p.last))
	p.last = now
}

func (p *phaseClock) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.line = append(p.line, b...)
	booted := strings.Contains(string(p.line), "as init process")
	if i := strings.LastIndexByte(string(p.line), '\n'); i >= 0 {
		p.line = p.line[i+1:]
	}
	p.mu.Unlock()
	if booted && !p.has("boot") {
		p.mark("boot")
	}
	return len(b), nil
}

func (p *phaseClock) has(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.names {
		if n == name {
			return true
		}
	}
	return false
}

func (p *phaseClock) Close() error { return nil }

func (p *phaseClock) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for i, n := range p.names {
		parts = append(parts, fmt.Sprintf("%s %.1fs", n, p.times[i].Seconds()))
	}
	return strings.Join(parts, ", ")
}
