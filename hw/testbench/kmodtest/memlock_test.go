//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestHostPinsChargeMemlock pins host memory as a user without
// CAP_IPC_LOCK: long-term pins count against RLIMIT_MEMLOCK, as RDMA and
// VFIO pins do, and a pin past it fails with ENOMEM.
func TestHostPinsChargeMemlock(t *testing.T) {
	if os.Getenv("GPUFPGA_MEMLOCK_CHILD") != "" {
		memlockChild(t)
		return
	}
	setup(t)
	fi, err := os.Stat(devPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(devPath, 0o666); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(devPath, fi.Mode().Perm())
	// The test binary, where an unprivileged user can run it.
	dir, err := os.MkdirTemp("/", "memlock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "kmodtest.test")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	// The initramfs's root is private to root: open a path, as the CLI's
	// unprivileged tests do.
	for _, d := range []string{"/", dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe, "-test.run=^TestHostPinsChargeMemlock$", "-test.v")
	cmd.Env = append(os.Environ(), "GPUFPGA_MEMLOCK_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func memlockChild(t *testing.T) {
	const limit = 64 << 10
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf, err := hostMem(d, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PinHost(buf); !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("pin of 1 MiB under a 64 KiB RLIMIT_MEMLOCK: %v, want ENOMEM", err)
	}
	a, err := d.PinHost(buf[:limit/2])
	if err != nil {
		t.Fatalf("pin of 32 KiB: %v", err)
	}
	b, err := d.PinHost(buf[limit/2 : limit])
	if err != nil {
		t.Fatalf("second pin of 32 KiB: %v", err)
	}
	if _, err := d.PinHost(buf[limit : limit+4096]); !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("pin past the limit: %v, want ENOMEM", err)
	}
	// Unpinning gives the charge back.
	if err := a.Unpin(); err != nil {
		t.Fatal(err)
	}
	if c, err := d.PinHost(buf[limit : limit+4096]); err != nil {
		t.Fatalf("pin after an unpin: %v", err)
	} else if err := c.Unpin(); err != nil {
		t.Fatal(err)
	}
	if err := b.Unpin(); err != nil {
		t.Fatal(err)
	}
}
