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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hugelgupf/vmtest/govmtest"
	"github.com/hugelgupf/vmtest/qemu"
	"github.com/u-root/mkuimage/uimage"

	"github.com/gpufpga/gpufpga/hw/testbench/devmodel"
)

// GuestModuleDir is where the project's modules sit in the guest. It is
// not /lib/modules: u-root's init would load every .ko found there.
const GuestModuleDir = "/gpufpga/modules"

// guestKernelModules are Debian's modules the guest needs for the 9p share
// that carries the tests, with their dependencies.
var guestKernelModules = []string{
	"kernel/drivers/virtio/virtio.ko",
	"kernel/drivers/virtio/virtio_ring.ko",
	"kernel/drivers/virtio/virtio_pci.ko",
	"kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
	"kernel/drivers/virtio/virtio_pci_modern_dev.ko",
	"kernel/net/9p/9pnet.ko",
	"kernel/net/9p/9pnet_virtio.ko",
	"kernel/fs/netfs/netfs.ko",
	"kernel/fs/fscache/fscache.ko",
	"kernel/fs/9p/9p.ko",
}

// Options configure a guest run. The zero value suits most tests.
type Options struct {
	Rig         devmodel.Config // Dir is filled in
	VMTimeout   time.Duration   // whole VM; default 4 minutes
	TestTimeout time.Duration   // each guest test binary; default 3 minutes
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

// Run boots a guest with the rig attached and runs the test packages in it.
func Run(t *testing.T, opts Options, pkgs ...string) {
	t.Helper()
	kver, err := KernelVersion()
	if err != nil {
		t.Fatal(err)
	}
	kernel := "/boot/vmlinuz-" + kver
	if _, err := os.Stat(kernel); err != nil {
		t.Fatalf("guest kernel %s missing: run `make deps` (apt-get install linux-image-amd64): %v", kernel, err)
	}
	qemuBin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal("qemu-system-x86_64 not found: run `make deps` (apt-get install qemu-system-x86)")
	}
	modDir, err := ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	files, err := initramfsFiles(t, kver, modDir)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("VMTEST_QEMU") == "" {
		// KVM hangs on these machines; TCG always works.
		t.Setenv("VMTEST_QEMU", qemuBin+" -accel tcg -cpu max -smp 1 -no-reboot")
	}
	t.Setenv("GOFLAGS", "-tags=vmguest")
	if opts.VMTimeout == 0 {
		opts.VMTimeout = 4 * time.Minute
	}
	if opts.TestTimeout == 0 {
		opts.TestTimeout = 3 * time.Minute
	}
	cfg := opts.Rig
	if cfg.GuestRAM == 0 {
		cfg.GuestRAM = 1 << 30
	}
	if cfg.VRAM == 0 {
		cfg.VRAM = 256 << 20
	}
	cfg.Dir, err = os.MkdirTemp("/dev/shm", "gpufpga-rig-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(cfg.Dir)
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
	govmtest.Run(t, "rig",
		govmtest.WithPackageToTest(pkgs...),
		govmtest.WithGoTestTimeout(opts.TestTimeout),
		govmtest.WithUimage(
			uimage.WithFiles(files...),
			// The example acquisition program, which the demo runs.
			uimage.WithBinaryCommands("github.com/gpufpga/gpufpga/examples/acquire"),
			// Binaries that can load the CUDA driver (pkg/cuda, through
			// purego) link libc for dlopen, as on any GPU host: the guest
			// gets the libraries (and u-root the loader at its ABI path).
			uimage.WithFiles(guestLibraries...),
		),
		govmtest.WithQEMUFn(
			qemu.WithKernel(kernel),
			qemu.WithAppendKernel("console=ttyS0", "slub_debug=FZPU", "panic=-1"),
			qemu.WithVMTimeout(opts.VMTimeout),
			qemu.WithSerialOutput(phases),
			qemu.WithTask(func(ctx context.Context, n *qemu.Notifications) error {
				phases.mark("initramfs")
				return nil
			}),
			func(_ *qemu.IDAllocator, o *qemu.Options) error {
				o.AppendQEMU(rig.QEMUArgs()...)
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
	t.Logf("phases: %s", phases)
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
// "host:guest" pairs for uimage.WithFiles.
func initramfsFiles(t *testing.T, kver, modDir string) ([]string, error) {
	root := "/lib/modules/" + kver
	var files []string
	for _, m := range guestKernelModules {
		files = append(files, filepath.Join(root, m)+":"+filepath.Join("lib/modules", kver, m))
	}
	for _, f := range []string{"modules.dep", "modules.builtin", "modules.order"} {
		files = append(files, filepath.Join(root, f)+":"+filepath.Join("lib/modules", kver, f))
	}
	conf := filepath.Join(t.TempDir(), "9p.conf")
	if err := os.WriteFile(conf, []byte("virtio_pci\n9pnet_virtio\n9p\n"), 0o644); err != nil {
		return nil, err
	}
	files = append(files, conf+":lib/modules-load.d/9p.conf")
	kos, _ := filepath.Glob(filepath.Join(modDir, "*.ko"))
	if len(kos) == 0 {
		return nil, fmt.Errorf("no modules in %s: run `make vmtest`", modDir)
	}
	for _, ko := range kos {
		files = append(files, ko+":"+strings.TrimPrefix(filepath.Join(GuestModuleDir, filepath.Base(ko)), "/"))
	}
	return files, nil
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
