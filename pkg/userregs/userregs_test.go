//go:build linux

package userregs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSysfs builds the sysfs entries Open reads, with a plain file as the
// BAR's resource: it maps as the real one does.
func fakeSysfs(t *testing.T, dmaBar string, bar []byte) string {
	t.Helper()
	root := t.TempDir()
	misc := filepath.Join(root, "class/misc/gpufpga0")
	pci := filepath.Join(root, "bus/pci/devices/0000:01:00.0")
	for _, d := range []string{misc, pci} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(misc, "dma_bar"), []byte(dmaBar), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../bus/pci/devices/0000:01:00.0", filepath.Join(misc, "device")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pci, "resource0"), bar, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestReadWrite(t *testing.T) {
	bar := make([]byte, 4096)
	binary.LittleEndian.PutUint32(bar[0:], 0x47465831)
	root := fakeSysfs(t, "1\n", bar)
	r, err := openAt(root, "/dev/gpufpga0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Len() != 4096 {
		t.Fatalf("Len %d, want 4096", r.Len())
	}
	if v, err := r.Read32(0); err != nil || v != 0x47465831 {
		t.Fatalf("Read32(0) = %#x, %v", v, err)
	}
	if err := r.Write32(0x58, 7); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Read32(0x58); err != nil || v != 7 {
		t.Fatalf("Read32(0x58) after a write of 7 = %#x, %v", v, err)
	}
	// What was written reached the resource.
	b, err := os.ReadFile(filepath.Join(root, "bus/pci/devices/0000:01:00.0/resource0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(b[0x58:]); got != 7 {
		t.Fatalf("resource word 0x58 = %d, want 7", got)
	}
	for _, off := range []uint32{2, 4093, 4096, 0xFFFFFFFC} {
		if _, err := r.Read32(off); !errors.Is(err, ErrOffset) {
			t.Errorf("Read32(%#x): %v, want ErrOffset", off, err)
		}
		if err := r.Write32(off, 1); !errors.Is(err, ErrOffset) {
			t.Errorf("Write32(%#x): %v, want ErrOffset", off, err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Read32(0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Read32 after Close: %v, want os.ErrClosed", err)
	}
	if err := r.Write32(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write32 after Close: %v, want os.ErrClosed", err)
	}
	if r.Len() != 0 {
		t.Fatalf("Len after Close: %d", r.Len())
	}
}

func TestBadDMABar(t *testing.T) {
	for _, v := range []string{"x", "-1", "6", ""} {
		root := fakeSysfs(t, v, make([]byte, 4096))
		_, err := openAt(root, "/dev/gpufpga0")
		if err == nil || !strings.Contains(err.Error(), "is not a BAR number") {
			t.Errorf("dma_bar %q: %v, want \"is not a BAR number\"", v, err)
		}
	}
}

func TestNoUserBAR(t *testing.T) {
	root := fakeSysfs(t, "0\n", make([]byte, 4096))
	if _, err := openAt(root, "/dev/gpufpga0"); !errors.Is(err, ErrNoUserBAR) {
		t.Fatalf("DMA BAR at BAR0: %v, want ErrNoUserBAR", err)
	}
}

func TestOldDriver(t *testing.T) {
	root := fakeSysfs(t, "1", make([]byte, 4096))
	if err := os.Remove(filepath.Join(root, "class/misc/gpufpga0/dma_bar")); err != nil {
		t.Fatal(err)
	}
	if _, err := openAt(root, "/dev/gpufpga0"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no dma_bar: %v, want os.ErrNotExist", err)
	}
}
