//go:build vmguest

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
)

// TestCLIStreamResident: stream --resident runs the simulated GPU's
// consumer over the ring and reports what it took: every fill consumed,
// every frame in order.
func TestCLIStreamResident(t *testing.T) {
	guestrig.Load(t)
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ConfigureSource(64<<10-32, 0, 64); err != nil { // one frame a slot
		t.Fatal(err)
	}
	r := p2pctl(t, nil, "stream", "--mem", "sim", "--resident", "--coalesce", "4", "--bytes", "8MiB", "--slots", "16",
		"--slot-size", "64KiB", "--interval", "100ms", "--json")
	if r.code != 0 {
		t.Fatalf("stream --resident: exit %d: %s", r.code, r.stderr)
	}
	var lines []streamJSON
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var sl streamJSON
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatalf("stream --resident --json line %q: %v", l, err)
		}
		lines = append(lines, sl)
	}
	sum := lines[len(lines)-1]
	if !sum.Summary || !sum.Resident || sum.Mode != "direct" || sum.Bytes < 8<<20 || sum.Fills != sum.Slots ||
		sum.Bytes != sum.Slots*64<<10 || sum.Frames != sum.Slots || sum.Gaps+sum.Duplicates+sum.CRCFailures != 0 ||
		sum.Held != 0 || sum.Error != "" {
		t.Fatalf("stream --resident summary: %+v", sum)
	}
	// The engine's fills are known once the stream has ended: a line
	// printed after that (before the summary) may have them.
	for _, l := range lines[:len(lines)-1] {
		if !l.Resident || l.Summary || (l.Fills != 0 && l.Fills != sum.Fills) {
			t.Fatalf("stream --resident line: %+v", l)
		}
	}
	r = p2pctl(t, nil, "stream", "--mem", "sim", "--resident", "--bytes", "2MiB", "--slots", "16", "--slot-size", "64KiB")
	if r.code != 0 || !strings.Contains(r.stdout, "summary (resident direct mode pinned through") || !strings.Contains(r.stdout, "slots consumed of") {
		t.Fatalf("stream --resident: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The simulated GPU's consumer checks every frame: it cannot only count.
	r = p2pctl(t, nil, "stream", "--mem", "sim", "--resident", "--check", "none", "--bytes", "1MiB")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "resident consumer checks every frame") {
		t.Fatalf("stream --resident --check none: exit %d: %s", r.code, r.stderr)
	}
}
