//go:build vmguest

package kmodtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
)

// TestCStreamExample runs examples/c-stream, the C consumer built against
// the uapi header alone (the guest suite's make target builds it into
// testdata), on the rig: it pins host memory, starts a stream, releases
// every slot by the stream's id and stops after 256 slots.
func TestCStreamExample(t *testing.T) {
	setup(t)
	ctl := control(t)
	const slot = 64 << 10
	// Host slots take a descriptor per page: one packet fills a slot.
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	// The share that carries testdata/ drops the execute bit: run a copy.
	b, err := os.ReadFile("testdata/c-stream")
	if err != nil {
		t.Fatalf("%v (the vmtest targets build it: make vmtest-6.1)", err)
	}
	bin := filepath.Join(t.TempDir(), "c-stream")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-d", devPath, "-c", "1", "-n", "16", "-s", fmt.Sprint(slot), "-N", "256").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("c-stream: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var id, ch, slots, bytes, packets uint64
	var n, size uint64
	if _, err := fmt.Sscanf(lines[0], "c-stream: stream %d on c2h%d: %d slots of %d bytes in host memory", &id, &ch, &n, &size); err != nil || id == 0 || ch != 1 || n != 16 || size != slot {
		t.Fatalf("first line %q: %v", lines[0], err)
	}
	var sum string
	if _, err := fmt.Sscanf(lines[len(lines)-1], "c-stream: %d slots, %d bytes, %d packets, checksum %s", &slots, &bytes, &packets, &sum); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	// It stops once it has read 256, which a read of up to 16 records (as
	// many as can be filled at once) takes it past by at most 15; then it
	// reads what the engine filled before the halt, at most 16 more.
	if slots < 256 || slots > 256+15+16 || bytes != slots*slot || packets != slots {
		t.Fatalf("%d slots, %d bytes, %d packets", slots, bytes, packets)
	}
}

// TestCResidentExample runs examples/c-resident, a GPU-resident stream's
// consumer in C with the CPU in the GPU's place: it consumes 1024 fills
// with no system call per slot, stops, and then takes every fill the
// engine made before the halt.
func TestCResidentExample(t *testing.T) {
	setup(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/c-resident")
	if err != nil {
		t.Fatalf("%v (the vmtest targets build it: make vmtest-6.1)", err)
	}
	bin := filepath.Join(t.TempDir(), "c-resident")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, bin, "-d", devPath, "-c", "1", "-n", "16", "-k", "4", "-N", "1024")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("c-resident: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var id, ch, n uint64
	if _, err := fmt.Sscanf(lines[0], "c-resident: stream %d on c2h%d: %d slots", &id, &ch, &n); err != nil || id == 0 || ch != 1 || n != 16 {
		t.Fatalf("first line %q: %v", lines[0], err)
	}
	var consumed, fills, bytes, packets uint64
	var sum string
	if _, err := fmt.Sscanf(lines[len(lines)-1], "c-resident: %d fills consumed of %d the engine made, %d bytes, %d packets, checksum %s",
		&consumed, &fills, &bytes, &packets, &sum); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	// It stops at 1024, when the engine can have made at most 16 more.
	if consumed != fills || fills < 1024 || fills > 1024+16 || bytes != fills*4096 || packets != fills {
		t.Fatalf("%d fills consumed of %d, %d bytes, %d packets", consumed, fills, bytes, packets)
	}
}
