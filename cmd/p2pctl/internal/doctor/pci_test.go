package doctor

import (
	"encoding/binary"
	"testing"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor/doctortest"
)

func TestConfigSpace(t *testing.T) {
	acs := uint16(0x1d)
	c := config(doctortest.ConfigSpace(doctortest.Device{MPS: 512, MPSCap: 1024, MRRS: 4096, ACS: &acs}))
	if got := c.pcie(); got != (pcie{MPS: 512, MPSCap: 1024, MRRS: 4096, Available: true}) {
		t.Errorf("pcie %+v", got)
	}
	if ctl, ok := c.acs(); !ok || ctl != acs || acsString(ctl) != "SrcValid+ReqRedir+CmpltRedir+UpstreamFwd" {
		t.Errorf("acs %#x %v", ctl, ok)
	}

	// Lists that loop or point into the header end the walk.
	c = config(doctortest.ConfigSpace(doctortest.Device{}))
	c[0x61] = 0x40 // PCIe capability -> power management -> PCIe ...
	if off := c.capability(0x05); off != 0 {
		t.Errorf("looping list: MSI at %#x", off)
	}
	c[0x34] = 0x10
	if c.pcie().Available {
		t.Error("capability pointer into the header followed")
	}
	binary.LittleEndian.PutUint32(c[0x100:], 0x0001|0x100<<20) // AER -> AER ...
	if _, ok := c.acs(); ok {
		t.Error("looping extended list: ACS found")
	}
	if _, ok := config(make([]byte, 256)).acs(); ok {
		t.Error("ACS in a 256-byte config space")
	}
}

func TestPassthrough(t *testing.T) {
	for cmdline, want := range map[string]bool{
		"":                                   false,
		"intel_iommu=on":                     false,
		"intel_iommu=on iommu=pt":            true,
		"iommu.passthrough=1":                true,
		"iommu=pt quiet iommu.passthrough=0": false,
	} {
		if got := passthrough(cmdline); got != want {
			t.Errorf("passthrough(%q) = %v", cmdline, got)
		}
	}
}
