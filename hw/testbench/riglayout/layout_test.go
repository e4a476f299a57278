package riglayout

import (
	"testing"

	"github.com/gpufpga/gpufpga/internal/cdefs"
)

func TestLayoutMatchesHeader(t *testing.T) {
	diffs, err := cdefs.Diff("../nvp2p_sim/rig_layout.h", "RIG_", HeaderConstants)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
