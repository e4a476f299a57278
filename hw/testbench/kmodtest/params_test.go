//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestParamsCheckedWhenSet writes out-of-range values to the parameters
// that can change at run time: each is refused with EINVAL and keeps its
// value (a zero timeout would spin the watchdog).
func TestParamsCheckedWhenSet(t *testing.T) {
	setup(t)
	for _, tc := range []struct{ name, bad string }{
		{"timeout_ms", "0"},
		{"timeout_ms", "3600001"},
		{"max_queued", "0"},
		{"max_queued", "1048577"},
	} {
		path := "/sys/module/gpufpga/parameters/" + tc.name
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tc.bad), 0); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s=%s: %v, want EINVAL", tc.name, tc.bad, err)
			// Taken: put the old value back for the tests after.
			if err := os.WriteFile(path, before, 0); err != nil {
				t.Fatal(err)
			}
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(after)) != strings.TrimSpace(string(before)) {
			t.Errorf("%s changed from %s to %s", tc.name, before, after)
		}
	}
}
