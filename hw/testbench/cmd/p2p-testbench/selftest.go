package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Bus addresses of the in-process rig: descriptors in "host RAM", the GPU's
// memory behind a BAR high in the address space, as on real machines.
const (
	descBus = 0x0100_0000
	descMem = 4 << 20
	vramBus = 0x38_0000_0000
)

type selftest struct {
	vramMiB int
	seed    uint64
	frames  int
	out     io.Writer
}

func newSelftestCmd() *cobra.Command {
	st := &selftest{}
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Move data through the XDMA engine model into fragmented simulated GPU memory and verify every byte",
		Long: `selftest runs the engine model of pkg/xdma in this process, with no kernel
and no QEMU: it builds a fragmented 64 KiB page table over simulated VRAM,
turns a window of it into an SG list and a descriptor chain, checks the chain,
and runs C2H and H2C transfers against card memory and a C2H stream of
acquisition frames, verifying every byte.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st.out = cmd.OutOrStdout()
			return st.run()
		},
	}
	cmd.Flags().IntVar(&st.vramMiB, "vram", 64, "simulated VRAM in MiB")
	cmd.Flags().Uint64Var(&st.seed, "seed", 1, "seed of the page layout and data")
	cmd.Flags().IntVar(&st.frames, "frames", 256, "frames to stream")
	return cmd
}

// scatteredTable hands out the VRAM's pages in runs of 1-4 contiguous
// pages, the runs in random order.
func scatteredTable(pages int, rng *rand.Rand) *sgl.PageTable {
	var runs [][2]int // first page, count
	for p := 0; p < pages; {
		n := min(1+rng.IntN(4), pages-p)
		runs = append(runs, [2]int{p, n})
		p += n
	}
	rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	t := &sgl.PageTable{PageSize: sgl.PageSize64K}
	for _, r := range runs {
		for j := range r[1] {
			t.Pages = append(t.Pages, vramBus+uint64(r[0]+j)*sgl.PageSize64K)
		}
	}
	return t
}

func (st *selftest) run() error {
	if st.vramMiB < 1 {
		return errors.New("--vram must be at least 1 MiB")
	}
	rng := rand.New(rand.NewPCG(st.seed, st.seed))
	pages := st.vramMiB << 20 / sgl.PageSize64K
	vram := make([]byte, pages*sgl.PageSize64K)
	desc := make([]byte, descMem)
	ddr := make([]byte, 2*len(vram))
	var bus, card busmem.Map
	if err := errors.Join(bus.Add("descriptors", descBus, desc), bus.Add("vram", vramBus, vram), card.Add("ddr", 0, ddr)); err != nil {
		return err
	}
	for i := range ddr[:len(vram)] {
		ddr[i] = byte(rng.Uint32())
	}
	src := acq.NewSource(acq.SourceConfig{PayloadLen: sgl.PageSize64K - frame.HeaderSize})
	engine, err := xdmamodel.NewEngine(xdmamodel.Config{
		H2C:  []xdmamodel.ChannelConfig{{}},
		C2H:  []xdmamodel.ChannelConfig{{}, {Stream: true, Source: src}},
		Bus:  &bus,
		Card: &card,
	})
	if err != nil {
		return err
	}
	table := scatteredTable(pages, rng)
	// An unaligned window, as a buffer inside a larger allocation.
	off, n := uint64(1000), table.Size()-3000
	var b sgl.Builder
	b.Limits.MaxSegment = xdma.MaxSegmentLen
	if err := b.Append(table, off, n); err != nil {
		return err
	}
	segs := b.Segments()
	fmt.Fprintf(st.out, "selftest: XDMA engine model (pkg/xdma) in this process; no kernel, no QEMU\n")
	fmt.Fprintf(st.out, "page table: %d x 64 KiB pages of simulated VRAM in random runs of 1-4\n", len(table.Pages))
	fmt.Fprintf(st.out, "window:     offset %d, %d bytes -> %d segments\n", off, n, len(segs))

	run := func(dir xdma.Direction, ch int, spec xdma.ChainSpec, segs []sgl.Segment) (xdma.Chain, time.Duration, error) {
		spec.Dir = dir
		c, err := xdma.BuildChain(desc, descBus, segs, spec)
		if err != nil {
			return c, 0, err
		}
		if _, err := xdma.Walk(&bus, c.Addr, c.FirstAdjacent, xdma.WalkLimits{Lo: descBus, Hi: descBus + descMem}); err != nil {
			return c, 0, fmt.Errorf("chain check: %w", err)
		}
		t0 := time.Now()
		xdma.Start(engine, dir, ch, c, xdma.ControlDefault)
		engine.RunUntilIdle()
		d := time.Since(t0)
		status := engine.ReadReg(xdma.Base(dir.ChannelTarget(), ch) + xdma.RegStatusRC)
		if status&xdma.StatErrorMask != 0 || status&xdma.StatDescStopped == 0 {
			return c, d, fmt.Errorf("%s", xdma.DecodeStatus(dir, ch, status))
		}
		return c, d, nil
	}
	gather := func() []byte {
		out := make([]byte, 0, n)
		for _, s := range segs {
			out = append(out, vram[s.Addr-vramBus:s.End()-vramBus]...)
		}
		return out
	}
	report := func(what string, c xdma.Chain, d time.Duration) {
		fmt.Fprintf(st.out, "%-38s %5d descriptors  %8.1f MiB  %7.1f ms  verified\n",
			what, c.Count, float64(c.Bytes)/(1<<20), float64(d.Microseconds())/1000)
	}

	c, d, err := run(xdma.C2H, 0, xdma.ChainSpec{CardAddr: 0}, segs)
	if err != nil {
		return fmt.Errorf("C2H card -> VRAM: %w", err)
	}
	if !bytes.Equal(gather(), ddr[:n]) {
		return errors.New("C2H card -> VRAM: data mismatch")
	}
	report("C2H card memory -> fragmented VRAM", c, d)

	back := uint64(len(vram))
	c, d, err = run(xdma.H2C, 0, xdma.ChainSpec{CardAddr: back}, segs)
	if err != nil {
		return fmt.Errorf("H2C VRAM -> card: %w", err)
	}
	if !bytes.Equal(ddr[back:back+n], ddr[:n]) {
		return errors.New("H2C VRAM -> card: data mismatch")
	}
	report("H2C fragmented VRAM -> card memory", c, d)

	// A stream of frames, one per 64 KiB slot of the table.
	slots := min(st.frames, len(table.Pages))
	b.Reset()
	b.Limits = sgl.Limits{Stride: sgl.PageSize64K}
	if err := b.Append(table, 0, uint64(slots)*sgl.PageSize64K); err != nil {
		return err
	}
	segs = b.Segments()
	c, d, err = run(xdma.C2H, 1, xdma.ChainSpec{Stream: true, EOP: xdma.EOPEach}, segs)
	if err != nil {
		return fmt.Errorf("C2H stream: %w", err)
	}
	var chk frame.Checker
	for i := range slots {
		p := table.Pages[i] - vramBus
		if _, err := chk.Check(vram[p : p+sgl.PageSize64K]); err != nil {
			return fmt.Errorf("C2H stream slot %d: %w", i, err)
		}
	}
	if chk.Frames != uint64(slots) || chk.Gaps != 0 || chk.Duplicates != 0 {
		return fmt.Errorf("C2H stream: %+v", chk.Stats)
	}
	report(fmt.Sprintf("C2H stream: %d frames -> VRAM slots", slots), c, d)
	fmt.Fprintf(st.out, "frames: %d checked, 0 gaps, 0 duplicates, 0 CRC failures; source dropped %d\n", chk.Frames, src.Stats().Dropped)
	return nil
}
