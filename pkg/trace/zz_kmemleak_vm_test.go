//go:build vmguest

package trace

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
)

// TestZZKmemleak runs last in the last guest package: the whole suite's
// final leak scan on the debug kernel.
func TestZZKmemleak(t *testing.T) { guest.CheckKmemleak(t) }
