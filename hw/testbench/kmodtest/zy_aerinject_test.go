//go:build vmguest

package kmodtest

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
)

// TestZYCorrectableAER has the FPGA report a correctable error (a
// receiver error) while every channel has work: the AER driver counts it,
// the driver is not told, and nothing ends. It runs after every test that
// injects errors through QEMU: the kernel's aer_inject, which this one
// needs, hides the card's AER registers from then on (see injectAER).
func TestZYCorrectableAER(t *testing.T) {
	aerUnderTraffic(t, rigctl.AERCorrectable, "cor", false, 0, 0)
}
