package xdmamodel

import (
	"fmt"
	"strings"

	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Quirk is a behaviour that PG195 leaves open and real XDMA builds differ
// in. The model is strict in each: a driver that works with every Quirk
// set, and with none, does not lean on timing a card does not promise.
type Quirk uint32

const (
	// QuirkLateBusy keeps BUSY set for LateBusyReads reads of the status
	// after a chain has stopped, its stop bits already there: BUSY clears
	// some time after the stop is reported.
	QuirkLateBusy Quirk = 1 << iota
	// QuirkSplitStatus reports a chain's end in two parts: its last
	// descriptor's completion first, the stop a little later (SplitSteps
	// engine steps, or sooner, with the next read of the status), with an
	// interrupt of its own. A read between them sees the completion alone.
	QuirkSplitStatus
	// QuirkIdleWithoutCredits clears BUSY while a channel in credit mode
	// waits for credits it has none of; without it, BUSY stays set.
	QuirkIdleWithoutCredits
	// QuirkLateInterrupt delivers an MSI or MSI-X message LateIRQSteps
	// engine steps after the channel's request rises (at least that many
	// milliseconds on an idle engine), and one message for every request
	// that rises on the same vector meanwhile: interrupts arrive late and
	// coalesced. The data and the status are in place long before; a
	// request that a status read drops meanwhile still sends its message.
	QuirkLateInterrupt
	// QuirkLateCount moves a C2H stream channel's completed-descriptor
	// count after the descriptor's result is written: until the channel
	// completes its next descriptor, its status is read, or its count is
	// read a second time, the count leaves the last descriptor out. Whoever
	// polls the results in memory (a GPU-resident consumer) can see a fill
	// before the count does. The completion's status bit and interrupt
	// come as without the quirk, and the poll-mode writeback has it.
	QuirkLateCount
	// QuirkStickyCount is QuirkLateCount's harsher reading: the count
	// leaves the last completion out until the channel completes its next
	// descriptor or stops, whatever is read meanwhile: a channel in credit
	// mode waiting for credits keeps it out. Only the results (and the
	// poll-mode writeback) tell of that fill meanwhile.
	QuirkStickyCount
	// QuirkWBWithoutIE writes the poll-mode writeback with
	// ie_descriptor_completed (control bit 2) clear, as Xilinx's own
	// driver relies on in poll mode; without it the model is strict and
	// writes it only with both bits set.
	QuirkWBWithoutIE

	quirkLast = QuirkWBWithoutIE
)

// SplitSteps is how many engine steps the stop lags the completion by
// under QuirkSplitStatus, unless a status read shows it sooner.
const SplitSteps = 2

// LateIRQSteps is how many engine steps a message lags its request by
// under QuirkLateInterrupt.
const LateIRQSteps = 3

// LateBusyReads is how many status reads see BUSY after a stop under
// QuirkLateBusy: more than a driver's single read in its interrupt handler.
const LateBusyReads = 3

var quirkNames = []struct {
	q    Quirk
	name string
}{
	{QuirkLateBusy, "late-busy"},
	{QuirkSplitStatus, "split-status"},
	{QuirkIdleWithoutCredits, "idle-without-credits"},
	{QuirkLateInterrupt, "late-interrupt"},
	{QuirkLateCount, "late-count"},
	{QuirkStickyCount, "sticky-count"},
	{QuirkWBWithoutIE, "wb-without-ie"},
}

// AllQuirks has every Quirk set.
const AllQuirks = quirkLast<<1 - 1

// Valid reports whether q holds only quirks the model knows.
func (q Quirk) Valid() bool { return q&^AllQuirks == 0 }

// String names the quirks of q, comma-separated, as ParseQuirks reads them.
func (q Quirk) String() string {
	if q == 0 {
		return "none"
	}
	var names []string
	for _, n := range quirkNames {
		if q&n.q != 0 {
			names = append(names, n.name)
			q &^= n.q
		}
	}
	if q != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(q)))
	}
	return strings.Join(names, ",")
}

// ParseQuirks parses a comma-separated list of quirk names, the String
// form; "" and "none" mean none, "all" every one.
func ParseQuirks(s string) (Quirk, error) {
	var q Quirk
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "", "none":
			continue
		case "all":
			q |= AllQuirks
			continue
		}
		found := false
		for _, n := range quirkNames {
			if n.name == f {
				q |= n.q
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("xdma: unknown quirk %q", f)
		}
	}
	return q, nil
}

// SetQuirks selects the behaviours PG195 leaves open. They belong to the
// card's build: Reset keeps them.
func (e *Engine) SetQuirks(q Quirk) error {
	if !q.Valid() {
		return fmt.Errorf("xdma: unknown quirks %#x", uint32(q))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.quirks = q
	return nil
}

// Quirks returns the quirks in force.
func (e *Engine) Quirks() Quirk {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.quirks
}

// AnyAlignment is the ALIGNMENTS of a build with unaligned transfers
// enabled and 64 address bits.
var AnyAlignment = xdma.Alignments{Addr: 1, Len: 1, Bits: 64}

// SetAlignments sets what every channel's ALIGNMENTS register reports, a
// property of the build: Reset keeps it. From then on a descriptor that
// breaks it, or a bus address past its address bits, fails its chain and
// counts as a violation: a driver must never hand one to the engine.
func (e *Engine) SetAlignments(a xdma.Alignments) error {
	if !a.Valid() {
		return fmt.Errorf("xdma: alignments %v: want powers of two up to 64 and 32 to 64 address bits", a)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.align = a
	return nil
}

// Violations returns how many descriptors (or descriptor fetches) broke
// the engine's alignments since it was made, and how many descriptor
// fetches and writebacks went to an address register not written since
// the last reset (Reset: a function-level reset, or D3hot to D0).
func (e *Engine) Violations() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.violations
}

// reaches reports whether the engine can drive bus address addr.
func (e *Engine) reaches(addr uint64) bool {
	return e.align.Bits >= 64 || addr>>e.align.Bits == 0
}

// misaligned returns the status bits that d earns on c under the
// engine's alignments, or 0. Bus addresses must also be within its address
// bits; card (AXI) addresses and a stream's result addresses are the
// engine's own and not checked.
func (e *Engine) misaligned(c *channel, d *xdma.Descriptor) uint32 {
	var bus, card []uint64
	switch {
	case c.cfg.Stream && c.dir == xdma.H2C:
		bus = []uint64{d.Src}
	case c.cfg.Stream:
		bus = []uint64{d.Dst}
	case c.dir == xdma.H2C:
		bus, card = []uint64{d.Src}, []uint64{d.Dst}
	default:
		bus, card = []uint64{d.Dst}, []uint64{d.Src}
	}
	for _, a := range bus {
		if !e.reaches(a) || !e.reaches(a+uint64(d.Len)-1) {
			return xdma.ErrCodeUnsupportedRequest << descErrorShift
		}
	}
	for _, a := range append(bus, card...) {
		if a%uint64(e.align.Addr) != 0 {
			return xdma.StatAlignMismatch
		}
	}
	if d.Len%uint32(e.align.Len) != 0 {
		return xdma.StatAlignMismatch
	}
	return 0
}

// Alignments returns what the ALIGNMENTS registers report.
func (e *Engine) Alignments() xdma.Alignments {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.align
}
