//go:build vmtest

package vmtest

import "testing"

func TestRig(t *testing.T) {
	Run(t, Options{},
		"github.com/gpufpga/gpufpga/hw/testbench/rigtest",
		"github.com/gpufpga/gpufpga/kmod/gpufpga/kmodtest",
	)
}
