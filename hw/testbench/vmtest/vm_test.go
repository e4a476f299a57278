//go:build vmtest

package vmtest

import (
	"testing"
	"time"
)

func TestRig(t *testing.T) {
	Run(t, Options{TestTimeout: 100 * time.Second, VMTimeout: 8 * time.Minute},
		"github.com/gpufpga/gpufpga/hw/testbench/rigtest",
		"github.com/gpufpga/gpufpga/kmod/gpufpga/kmodtest",
		"github.com/gpufpga/gpufpga/cmd/p2pctl/cli",
		"github.com/gpufpga/gpufpga/pkg/trace",
		"github.com/gpufpga/gpufpga/pkg/stream",
		"github.com/gpufpga/gpufpga/hw/testbench/demo",
		"github.com/gpufpga/gpufpga/hw/testbench/nvcontract",
		"github.com/gpufpga/gpufpga/hw/testbench/abifuzz",
		// Last: leaks show once everything has been unloaded.
		"github.com/gpufpga/gpufpga/hw/testbench/kleak",
	)
}

// TestDemo boots the rig for `make demo` alone.
func TestDemo(t *testing.T) {
	Run(t, Options{TestTimeout: 100 * time.Second}, "github.com/gpufpga/gpufpga/hw/testbench/demo")
}
