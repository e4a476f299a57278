//go:build vmguest

package icount

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
)

// irqHandler is the driver's hard IRQ handler, as kallsyms names it.
const irqHandler = "gpufpga_irq"

// chainLengths are the descriptors per chain the handler is timed at.
var chainLengths = []int{1, 1024, 65536}

// IRQWork is the guest time (instructions, under -icount shift=0) the
// hard IRQ handler spends per call, with chains of Descs descriptors
// queued back to back, so that each completion starts the next chain.
type IRQWork struct {
	Descs   int     `json:"descs"`
	Calls   uint64  `json:"calls"`
	PerCall float64 `json:"ns_per_call"`
}

// handlerTimer times every call of the IRQ handler: a kprobe notes the
// entry's clock, a kretprobe adds the time since to a sum and counts.
type handlerTimer struct {
	start, sum *ebpf.Map
	links      []link.Link
}

func newHandlerTimer(t *testing.T) *handlerTimer {
	t.Helper()
	var h handlerTimer
	var err error
	h.start, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.start.Close() })
	// Key 0: calls; key 1: ns. One vCPU: no two handlers run at once.
	h.sum, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.sum.Close() })

	lookup := func(m *ebpf.Map, key int32, into asm.Register, miss string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, -4, int64(key), asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, miss),
			asm.Mov.Reg(into, asm.R0),
		}
	}
	exit := asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return()}

	entry := append(lookup(h.start, 0, asm.R6, "out"),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R6, 0, asm.R0, asm.DWord),
	)
	ret := append(lookup(h.start, 0, asm.R6, "out"), lookup(h.sum, 0, asm.R7, "out")...)
	ret = append(ret, lookup(h.sum, 1, asm.R8, "out")...)
	ret = append(ret,
		asm.FnKtimeGetNs.Call(),
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
		asm.Sub.Reg(asm.R0, asm.R1),
		asm.StoreXAdd(asm.R8, asm.R0, asm.DWord),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R7, asm.R1, asm.DWord),
	)
	for _, p := range []struct {
		insns  asm.Instructions
		attach func(string, *ebpf.Program, *link.KprobeOptions) (link.Link, error)
	}{{append(entry, exit...), link.Kprobe}, {append(ret, exit...), link.Kretprobe}} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL", Instructions: p.insns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prog.Close() })
		l, err := p.attach(irqHandler, prog, nil)
		if err != nil {
			t.Fatalf("attaching to %s: %v", irqHandler, err)
		}
		h.links = append(h.links, l)
		t.Cleanup(func() { l.Close() })
	}
	return &h
}

// take returns the calls and ns since the last take, and starts again.
func (h *handlerTimer) take(t *testing.T) (calls, ns uint64) {
	t.Helper()
	var zero uint64
	for key, v := range []*uint64{&calls, &ns} {
		if err := h.sum.Lookup(uint32(key), v); err != nil {
			t.Fatal(err)
		}
		if err := h.sum.Update(uint32(key), zero, ebpf.UpdateExist); err != nil {
			t.Fatal(err)
		}
	}
	return calls, ns
}

// TestIRQWork prints the hard IRQ handler's guest instructions per call
// for chains of 1, 1,024 and 65,536 descriptors, as an "IRQWORK|" line:
// a handler whose work is bounded spends about the same on each.
func TestIRQWork(t *testing.T) {
	guestrig.Open(t, "card_mem_size=67108864", "max_descs=65536", "max_segs=65536")
	h := newHandlerTimer(t)
	var work []IRQWork
	for _, descs := range chainLengths {
		h.take(t)
		out, err := exec.Command(CostBinary, "chains", strconv.Itoa(descs)).Output()
		if err != nil {
			t.Fatalf("%s chains %d: %v (%s)", CostBinary, descs, err, out)
		}
		calls, ns := h.take(t)
		if calls == 0 {
			t.Fatalf("chains of %d: the handler never ran", descs)
		}
		work = append(work, IRQWork{Descs: descs, Calls: calls, PerCall: float64(ns) / float64(calls)})
	}
	j, err := json.Marshal(work)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("IRQWORK| %s\n", j)
}
