//go:build vmguest

package kleak

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
)

const kmemleak = "/sys/kernel/debug/kmemleak"

// TestKmemleakFindsNothing scans for leaks after every other guest test has
// run and unloaded its modules. kmemleak reports an object only once it has
// stayed unreferenced across scans, so it scans a few times.
func TestKmemleakFindsNothing(t *testing.T) {
	guest.Require(t)
	cmd, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmd), "kmemleak=on") {
		t.Skip("not the debug kernel: no kmemleak")
	}
	if _, err := os.Stat(kmemleak); err != nil {
		t.Fatalf("the debug kernel has no kmemleak: %v", err)
	}
	var leaks string
	for range 3 {
		if err := os.WriteFile(kmemleak, []byte("scan"), 0); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(kmemleak)
		if err != nil {
			t.Fatal(err)
		}
		leaks = string(b)
		time.Sleep(time.Second)
	}
	if leaks != "" {
		t.Fatalf("kmemleak:\n%s", leaks)
	}
}
