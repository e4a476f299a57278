//go:build vmguest

package icount

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"

	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/trace"
)

// tracePairs is how many untraced and traced runs are compared.
const tracePairs = 5

// CostBinary is where vmtest's TestICount puts gpufpga-cost (cost/gpufpga-cost.c).
const CostBinary = "/usr/bin/gpufpga-cost"

// Cost is what one operation costs: the guest's busy time (every CPU,
// every context) and the calling thread's own CPU time, in ns.
type Cost struct {
	Busy   float64 `json:"busy_ns"`
	Thread float64 `json:"thread_ns"`
}

// Costs are gpufpga-cost's figures and the ratios the driver is held to.
type Costs struct {
	NullIoctl  Cost  `json:"null_ioctl"`
	Sleep      Cost  `json:"sleep_100us"` // the method's floor: waiting costs nothing
	Xfer4K     Cost  `json:"xfer_4k"`
	Xfer4KPoll *Cost `json:"xfer_4k_poll,omitempty"`
	StreamSlot Cost  `json:"stream_slot"`
	// ResidentSlot is a GPU-resident stream's slot, consumed by the CPU
	// as the GPU would: the driver's share is Busy less Thread.
	ResidentSlot Cost `json:"resident_slot"`
	Xfer4KTrace  Cost `json:"xfer_4k_traced"`

	XferRatio     Cost  `json:"xfer_4k_per_null_ioctl"`
	PollRatio     *Cost `json:"xfer_4k_poll_per_null_ioctl,omitempty"`
	SlotRatio     Cost  `json:"stream_slot_per_null_ioctl"`
	ResidentRatio Cost  `json:"resident_slot_per_null_ioctl"`
	// ResidentDriverRatio is the resident slot's time outside the
	// consumer's thread (interrupts, the poll) per null ioctl.
	ResidentDriverRatio float64   `json:"resident_slot_driver_per_null_ioctl"`
	TracingOverhead     float64   `json:"tracing_overhead_busy"` // the median of the pairs
	TracingOverheads    []float64 `json:"tracing_overheads_busy"`
}

func ratio(a, b Cost) Cost { return Cost{a.Busy / b.Busy, a.Thread / b.Thread} }

func runCost(t *testing.T, into *Costs, args ...string) {
	t.Helper()
	out, err := exec.Command(CostBinary, args...).Output()
	if err != nil {
		var stderr []byte
		if e, ok := err.(*exec.ExitError); ok {
			stderr = e.Stderr
		}
		t.Fatalf("%s %s: %v (%s) %s", CostBinary, args, err, out, stderr)
	}
	if err := json.Unmarshal(out, into); err != nil {
		t.Fatalf("%s %s: %v: %s", CostBinary, args, err, out)
	}
}

func TestGuestCosts(t *testing.T) {
	r := guestrig.Open(t, "card_mem_size=67108864")
	// Stream slots of one 4 KiB frame each, produced on demand.
	if err := r.Ctl.ConfigureSource(4096-frame.HeaderSize, 0, 256); err != nil {
		t.Fatal(err)
	}
	var c Costs
	runCost(t, &c, "all")

	// The same transfers with p2pctl trace's programs attached and their
	// events consumed, as p2pctl trace does, against the same transfers
	// untraced right before: the overhead is the difference of two near
	// figures, so it is the median of several such pairs.
	var overheads []float64
	for range tracePairs {
		var plain, traced Costs
		runCost(t, &plain, "xfer")
		func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := trace.Start(ctx, trace.Options{Device: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			go func() {
				for range s.Events() {
				}
			}()
			runCost(t, &traced, "xfer")
		}()
		c.Xfer4KTrace = traced.Xfer4K
		overheads = append(overheads, traced.Xfer4K.Busy/plain.Xfer4K.Busy-1)
	}
	slices.Sort(overheads)
	c.TracingOverheads = overheads
	c.TracingOverhead = overheads[len(overheads)/2]

	c.XferRatio = ratio(c.Xfer4K, c.NullIoctl)
	c.SlotRatio = ratio(c.StreamSlot, c.NullIoctl)
	c.ResidentRatio = ratio(c.ResidentSlot, c.NullIoctl)
	c.ResidentDriverRatio = (c.ResidentSlot.Busy - c.ResidentSlot.Thread) / c.NullIoctl.Busy
	if c.Xfer4KPoll != nil {
		p := ratio(*c.Xfer4KPoll, c.NullIoctl)
		c.PollRatio = &p
	}
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ICOUNT| %s\n", j)
}
