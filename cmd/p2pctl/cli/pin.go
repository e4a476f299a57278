package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

type segJSON struct {
	Addr uint64 `json:"addr"`
	Len  uint64 `json:"len"`
}

type pinJSON struct {
	Handle      uint64    `json:"handle"`
	Kind        string    `json:"kind"`
	Addr        uint64    `json:"addr"`
	Len         uint64    `json:"len"`
	Offset      uint64    `json:"offset"`
	PageSize    uint64    `json:"page_size"`
	Pages       int       `json:"pages"`
	Runs        int       `json:"runs"`
	LargestRun  int       `json:"largest_run"`
	Descriptors int       `json:"descriptors,omitempty"`
	SGList      []segJSON `json:"sg_list,omitempty"`
	SGNote      string    `json:"sg_note,omitempty"`
}

// describePin fills in the pin's SG list when the caller may see bus
// addresses.
func describePin(p *p2p.Pin) pinJSON {
	out := pinJSON{
		Handle: p.Handle, Kind: p.Kind.String(), Addr: p.Addr, Len: p.Len, Offset: p.Offset,
		PageSize: p.PageSize, Pages: p.Pages, Runs: p.Runs, LargestRun: p.LargestRun,
	}
	st, err := p.Query(true)
	if err != nil {
		if errors.Is(err, p2p.ErrPermission) {
			out.SGNote = "bus addresses need CAP_SYS_ADMIN"
		} else {
			out.SGNote = err.Error()
		}
		return out
	}
	b := sgl.Builder{Limits: sgl.Limits{MaxSegment: xdma.MaxSegmentLen}}
	if err := b.Append(st.Table, p.Offset, p.Len); err != nil {
		out.SGNote = err.Error()
		return out
	}
	for _, s := range b.Segments() {
		out.SGList = append(out.SGList, segJSON{s.Addr, s.Len})
	}
	out.Descriptors = len(out.SGList)
	return out
}

func writePin(w io.Writer, p pinJSON) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "handle\t%d\n", p.Handle)
	fmt.Fprintf(tw, "memory\t%s, %s at %#x (offset %d in the first page)\n", p.Kind, units.Bytes(p.Len), p.Addr, p.Offset)
	fmt.Fprintf(tw, "pages\t%d x %s in %d contiguous runs (longest %d)\n", p.Pages, units.Bytes(p.PageSize), p.Runs, p.LargestRun)
	if p.SGNote != "" {
		fmt.Fprintf(tw, "SG list\t(%s)\n", p.SGNote)
		tw.Flush()
		return
	}
	fmt.Fprintf(tw, "descriptors\t%d\n", p.Descriptors)
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\tbus address\tlength\t")
	for i, s := range p.SGList {
		fmt.Fprintf(tw, "%d\t%#x\t%s\t\n", i, s.Addr, units.Bytes(s.Len))
	}
	tw.Flush()
}

func newPinCmd(g *globals) *cobra.Command {
	var mem string
	var size sizeValue = 1 << 20
	var hold bool
	var via pinningFlag
	cmd := &cobra.Command{
		Use:   "pin",
		Short: "Pin memory and show its geometry and scatter-gather list",
		Long: `pin allocates --size bytes of --mem memory (CUDA device memory, host RAM,
or a kind the build adds), pins it for DMA and prints the handle, the page
geometry, the scatter-gather list and the number of XDMA descriptors a
transfer of all of it takes. GPU memory is pinned through a dma-buf where the
GPU exports them, else through nvidia_p2p (--pin forces either); the kind
line says which. Bus addresses need root. With --hold it stays pinned until
interrupted.

` + sizeHelp,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size == 0 {
				return usageErr("--size must be more than 0")
			}
			mem, err := g.opts.checkMem(mem)
			if err != nil {
				return err
			}
			d, err := g.open()
			if err != nil {
				return err
			}
			defer d.Close()
			b, err := g.opts.allocPinned(d, mem, uint64(size), 1, via.p)
			if err != nil {
				return err
			}
			defer b.close()
			p := describePin(b.pin)
			if err := g.emit(p, func(w io.Writer) { writePin(w, p) }); err != nil {
				return err
			}
			if hold {
				ctx, stop := interruptible(cmd)
				defer stop()
				prog := newProgress(g, cmd)
				defer prog.clear()
				start := time.Now()
				prog.set(holdStatus(0))
				tick, stopTick := prog.tick(time.Second)
				defer stopTick()
				for {
					select {
					case <-tick:
						prog.set(holdStatus(time.Since(start)))
					case <-ctx.Done():
						return nil
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mem, "mem", "", memHelp(g.opts))
	cmd.Flags().Var(&size, "size", "bytes to pin (e.g. 64KiB, 16MiB)")
	cmd.Flags().BoolVar(&hold, "hold", false, "keep the pin until interrupted")
	cmd.Flags().Var(&via, "pin", pinHelp)
	return cmd
}
