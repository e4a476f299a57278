// Package guest helps tests that run inside the rig's QEMU guest: loading
// the project's modules, reading the kernel log, and finding PCI devices.
package guest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ModuleDir is where the rig's initramfs carries the project's modules.
const ModuleDir = "/gpufpga/modules"

// Require fails the test unless it runs in the rig's guest.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(ModuleDir); err != nil {
		t.Fatalf("not in the rig's guest (%v): run with `make vmtest`", err)
	}
}

// The simulated GPU's variants (hw/testbench/nvp2p_sim): like NVIDIA's
// proprietary driver, its open modules, or a proprietary driver from before
// the persistent API.
const (
	NVIDIAProprietary = "proprietary"
	NVIDIAOpen        = "open"
	NVIDIAOld         = "old"
)

// NVIDIAVariant is the simulated GPU's variant this guest runs with: the
// host's vmtest puts gpufpga_rig.nvidia= on the kernel command line.
func NVIDIAVariant() string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "gpufpga_rig.nvidia="); ok {
			return v
		}
	}
	return NVIDIAProprietary
}

// LoadModule loads ModuleDir/name.ko with the given parameters; the
// simulated GPU (nvp2p_sim) in the guest's variant.
func LoadModule(name string, params ...string) error {
	if name == "nvp2p_sim" {
		return LoadVariant(name, NVIDIAVariant(), params...)
	}
	return LoadVariant(name, "", params...)
}

// LoadVariant loads ModuleDir/variant/name.ko; the proprietary variant of
// the simulated GPU is the one at the top.
func LoadVariant(name, variant string, params ...string) error {
	if variant == NVIDIAProprietary {
		variant = ""
	}
	f, err := os.Open(filepath.Join(ModuleDir, variant, name+".ko"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), strings.Join(params, " "), 0); err != nil {
		return fmt.Errorf("load %s: %w", name, err)
	}
	return nil
}

// UnloadModule removes a module.
func UnloadModule(name string) error {
	if err := unix.DeleteModule(name, unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("unload %s: %w", name, err)
	}
	return nil
}

// MustLoad loads a module for the duration of the test.
func MustLoad(t testing.TB, name string, params ...string) {
	t.Helper()
	if err := LoadModule(name, params...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := UnloadModule(name); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// SetParam sets a loaded module's parameter until the test ends, and
// returns what restores it sooner.
func SetParam(t testing.TB, module, name, value string) (restore func()) {
	t.Helper()
	path := "/sys/module/" + module + "/parameters/" + name
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Reads end in a newline that a string parameter would keep if
	// written back.
	old = bytes.TrimSuffix(old, []byte("\n"))
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatal(err)
	}
	restore = func() {
		if err := os.WriteFile(path, old, 0); err != nil {
			t.Errorf("restoring %s: %v", path, err)
		}
	}
	t.Cleanup(restore)
	return restore
}

// Dmesg returns the kernel log buffer.
func Dmesg() (string, error) {
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	m, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:m]), nil
}

var kernelTrouble = regexp.MustCompile(`(?m)^.*(BUG:|WARNING:|Oops|general protection fault|Call Trace:|=============|slab corruption|Object padding|Redzone|kernel BUG).*$`)

// CheckDmesg fails the test if the kernel log shows a bug, warning, oops
// or slab corruption.
func CheckDmesg(t testing.TB) {
	t.Helper()
	log, err := Dmesg()
	if err != nil {
		t.Fatalf("dmesg: %v", err)
	}
	if m := kernelTrouble.FindAllString(log, 5); m != nil {
		t.Errorf("kernel log shows trouble:\n%s\n--- full log ---\n%s", strings.Join(m, "\n"), log)
	}
}

const kmemleak = "/sys/kernel/debug/kmemleak"

// DebugKernel reports whether the guest runs the rig's debug kernel
// (KASAN, lockdep, kmemleak, ...), which the host's vmtest marks on the
// command line.
func DebugKernel() bool {
	cmd, _ := os.ReadFile("/proc/cmdline")
	return strings.Contains(string(cmd), "kmemleak=on")
}

// CheckKmemleak fails the test if kmemleak finds unreferenced kernel
// memory; on a kernel without kmemleak (not the debug kernel) it checks
// nothing. Guest packages call it last, once their modules are unloaded:
// the guest runs packages in path order, so pkg/trace's call is the final
// scan of the whole suite. kmemleak reports an object only once it has
// stayed unreferenced across scans, so it scans a few times.
func CheckKmemleak(t testing.TB) {
	t.Helper()
	if !DebugKernel() {
		t.Log("not the debug kernel: no kmemleak scan")
		return
	}
	// An object is reported once it is 5 s old and stayed unreferenced
	// across two scans: let what the test just freed age, scan twice,
	// report, and clear what was reported so the next package starts
	// afresh.
	time.Sleep(6 * time.Second)
	var leaks []byte
	var err error
	for range 2 {
		if err = os.WriteFile(kmemleak, []byte("scan"), 0); err != nil {
			t.Fatalf("kmemleak scan: %v", err)
		}
	}
	if leaks, err = os.ReadFile(kmemleak); err != nil {
		t.Fatal(err)
	}
	if len(leaks) > 0 {
		t.Errorf("kmemleak:\n%s", leaks)
	}
	if err := os.WriteFile(kmemleak, []byte("clear"), 0); err != nil {
		t.Fatalf("kmemleak clear: %v", err)
	}
}

// PCIDevice is a device in sysfs.
type PCIDevice struct {
	Path string // /sys/bus/pci/devices/DDDD:BB:DD.F
}

// FindPCI returns the devices with the given vendor and device IDs.
func FindPCI(vendor, device uint16) ([]PCIDevice, error) {
	dirs, err := filepath.Glob("/sys/bus/pci/devices/*")
	if err != nil {
		return nil, err
	}
	var out []PCIDevice
	for _, d := range dirs {
		v, err1 := readHex(filepath.Join(d, "vendor"))
		p, err2 := readHex(filepath.Join(d, "device"))
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if v == uint64(vendor) && p == uint64(device) {
			out = append(out, PCIDevice{d})
		}
	}
	return out, nil
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var v uint64
	_, err = fmt.Sscanf(strings.TrimSpace(string(b)), "0x%x", &v)
	return v, err
}

// MapBAR maps n bytes of BAR bar of the device through sysfs.
func (d PCIDevice) MapBAR(bar, n int) ([]byte, error) {
	f, err := os.OpenFile(filepath.Join(d.Path, fmt.Sprintf("resource%d", bar)), os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s BAR%d: %w", d.Path, bar, err)
	}
	return b, nil
}

// Driver returns the name of the driver bound to the device, or "".
func (d PCIDevice) Driver() string {
	l, err := os.Readlink(filepath.Join(d.Path, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// DMABuffer is locked user memory with the bus address of each 4 KiB page,
// for tests that program the simulated engine from user space (the guest
// has no IOMMU, so bus addresses are physical addresses).
type DMABuffer struct {
	Mem  []byte
	Phys []uint64
}

// NewDMABuffer allocates and locks n bytes (rounded up to 4 KiB).
func NewDMABuffer(n int) (*DMABuffer, error) {
	const page = 4096
	n = (n + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_LOCKED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("dma buffer: %w", err)
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	defer f.Close()
	b := &DMABuffer{Mem: mem}
	var e [8]byte
	for off := 0; off < n; off += page {
		mem[off] = 0 // fault it in
		va := uint64(uintptr(unsafe.Pointer(&mem[off])))
		if _, err := f.ReadAt(e[:], int64(va/page*8)); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("pagemap: %w", err)
		}
		v := binary.LittleEndian.Uint64(e[:])
		if v&(1<<63) == 0 || v&(1<<55-1) == 0 {
			unix.Munmap(mem)
			return nil, fmt.Errorf("pagemap: page at %#x not present (need root)", va)
		}
		b.Phys = append(b.Phys, (v&(1<<55-1))*page)
	}
	return b, nil
}

// Close unmaps the buffer.
func (b *DMABuffer) Close() error { return unix.Munmap(b.Mem) }
