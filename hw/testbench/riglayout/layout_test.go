package riglayout

import (
	"testing"

	"github.com/gpufpga/gpufpga/internal/cdefs"
)

func TestLayoutMatchesHeader(t *testing.T) {
	diffs, err := cdefs.Diff("../../../kmod/gpufpga/gpufpga_rig.h", "RIG_", HeaderConstants)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
