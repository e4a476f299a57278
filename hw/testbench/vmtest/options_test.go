package vmtest

import (
	"context"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/devmodel"
)

// clock is a user design's clock that is never run.
type clock struct{}

func (clock) Tick(context.Context) error { return nil }
func (clock) Cycle() uint64              { return 0 }
func (clock) Quantum() uint64            { return 256 }

// Options that cannot run as asked are refused before anything boots.
func TestOptionsValidate(t *testing.T) {
	tied := devmodel.Config{User: &devmodel.UserLogic{Clock: clock{}}}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"plain", Options{}, ""},
		{"icount", Options{ICount: true}, ""},
		{"synchronised", Options{Synchronised: true, Rig: tied}, ""},
		{"both", Options{ICount: true, Synchronised: true, Rig: tied},
			"vmtest: ICount and Synchronised both set: one instruction-counting guest, its idle time passing in real time or in none"},
		{"clock alone", Options{Rig: tied},
			"vmtest: a user design's clock tied to the guest's (devmodel.UserLogic.Clock) needs Synchronised: otherwise the guest's clock follows the host's"},
		{"synchronised alone", Options{Synchronised: true},
			"vmtest: Synchronised without a user design's clock (devmodel.UserLogic.Clock): nothing follows the guest's clock"},
	} {
		err := tc.opts.validate()
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s: accepted, want %q", tc.name, tc.want)
		}
	}
}
