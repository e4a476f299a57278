//go:build vmguest

package p2p_test

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// The examples need the device, so they carry no "// Output:" comment
// (go test compiles them everywhere and runs them nowhere): here they run
// on the rig, and what they print is checked.
func TestExamples(t *testing.T) {
	// A stopped stream leaves the rest of its packet in the FPGA's FIFO:
	// the tests after start on a whole one, as TestMain set it.
	t.Cleanup(func() {
		ctl, err := rigctl.OpenControl()
		if err == nil {
			err = ctl.ConfigureSource(64<<10-frame.HeaderSize, 0, 64)
		}
		if err != nil {
			t.Error(err)
		}
	})
	for _, tc := range []struct {
		name    string
		example func()
		want    string
	}{
		{"Device.StartStream", ExampleDevice_StartStream,
			"32 slots, 2097152 bytes, 32 packets; the stream ended: <nil>"},
		{"Device.StartResidentStream", ExampleDevice_StartResidentStream,
			"consumed 64 fills, 262144 bytes; the stream ended: <nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) { guest.CheckOutput(t, tc.example, tc.want) })
	}
}
