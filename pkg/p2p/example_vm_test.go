//go:build vmguest

package p2p_test

import (
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
)

// The examples need the device, so they carry no "// Output:" comment
// (go test compiles them everywhere and runs them nowhere): here they run
// on the rig, and what they print is checked.
func TestExamples(t *testing.T) {
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
