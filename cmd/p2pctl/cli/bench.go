package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

type benchRow struct {
	Size  uint64  `json:"size"`
	Count int     `json:"count"`
	GBps  float64 `json:"gb_per_s"`
	P50us float64 `json:"p50_us"`
	// P99us is left out below p99Samples samples, where it would only be
	// the maximum again.
	P99us    *float64 `json:"p99_us,omitempty"`
	MaxUs    float64  `json:"max_us"`
	EngineUs float64  `json:"engine_us"`
}

type benchJSON struct {
	Channel string     `json:"channel"`
	Memory  string     `json:"memory"`
	Rows    []benchRow `json:"results"`
	// Interrupted: stopped by a signal; Rows are the sizes measured in full.
	Interrupted bool `json:"interrupted,omitempty"`
}

// p99Samples is the fewest samples whose 99th percentile is not their
// maximum.
const p99Samples = 100

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func newBenchCmd(g *globals) *cobra.Command {
	var mem, channel, sizes string
	var count int
	var via pinningFlag
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency over transfer sizes",
		Long: `bench runs --count transfers of each size in --sizes on --channel and reports
throughput (bytes over the engine's time, start of the chain to its
completion) and the latency a caller sees (submit to completion: p50, p99
from 100 transfers a size on, and the maximum).

` + sizeHelp,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, idx, err := parseChannel(channel)
			if err != nil {
				return err
			}
			if count < 1 {
				return usageErr("--count must be at least 1")
			}
			list, err := parseSizes(sizes)
			if err != nil {
				return err
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
			buf, err := g.opts.allocPinned(d, mem, slices.Max(list), 1, via.p)
			if err != nil {
				return err
			}
			defer buf.close()
			ctx, stop := interruptible(cmd)
			defer stop()
			prog := newProgress(g, cmd)
			defer prog.clear()
			out := benchJSON{Channel: channel, Memory: mem}
			for si, n := range list {
				var lat []time.Duration
				var engine time.Duration
				var bytes uint64
				for i := range count {
					t0 := time.Now()
					r, err := d.Transfer(ctx, p2p.Transfer{Dir: dir, Channel: idx, Segments: []p2p.Segment{{Pin: buf.pin, Len: n}}})
					if interrupted(ctx, err) {
						// The sizes measured in full are the result.
						out.Interrupted = true
						prog.clear()
						return g.emit(out, func(w io.Writer) { writeBench(w, out) })
					}
					if err != nil {
						return err
					}
					lat = append(lat, time.Since(t0))
					engine += r.Duration
					bytes += r.Bytes
					prog.set(benchStatus(n, si, len(list), i+1, count))
				}
				slices.Sort(lat)
				row := benchRow{Size: n, Count: count, P50us: us(percentile(lat, 0.5)), MaxUs: us(lat[len(lat)-1]),
					EngineUs: us(engine / time.Duration(count))}
				if count >= p99Samples {
					p99 := us(percentile(lat, 0.99))
					row.P99us = &p99
				}
				if engine > 0 {
					row.GBps = float64(bytes) / engine.Seconds() / 1e9
				}
				out.Rows = append(out.Rows, row)
			}
			prog.clear() // before the result, which nothing follows
			return g.emit(out, func(w io.Writer) { writeBench(w, out) })
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "c2h0", "channel: h2c<N> or c2h<N>")
	cmd.Flags().StringVar(&mem, "mem", "", memHelp(g.opts))
	cmd.Flags().StringVar(&sizes, "sizes", "4KiB,64KiB,1MiB,16MiB", "comma-separated transfer sizes")
	cmd.Flags().IntVar(&count, "count", p99Samples, "transfers per size (p99 needs 100)")
	cmd.Flags().Var(&via, "pin", pinHelp)
	return cmd
}

// parseSizes parses --sizes: a comma-separated list of sizes above 0.
func parseSizes(s string) ([]uint64, error) {
	var list []uint64
	for _, f := range strings.Split(s, ",") {
		n, err := parseSize(f)
		if err != nil {
			return nil, usageErr("--sizes: %v", err)
		}
		if n == 0 {
			return nil, usageErr("--sizes: %q: sizes must be more than 0", f)
		}
		list = append(list, n)
	}
	return list, nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

func writeBench(w io.Writer, b benchJSON) {
	fmt.Fprintf(w, "%s, %s memory\n", b.Channel, b.Memory)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tcount\tthroughput\tengine\tp50 latency\tp99 latency\tmax latency\t")
	for _, r := range b.Rows {
		p99 := "-" // too few samples
		if r.P99us != nil {
			p99 = fmt.Sprintf("%.0f µs", *r.P99us)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f GB/s\t%.0f µs\t%.0f µs\t%s\t%.0f µs\t\n", units.Bytes(r.Size), r.Count, r.GBps, r.EngineUs, r.P50us, p99, r.MaxUs)
	}
	tw.Flush()
	if b.Interrupted {
		fmt.Fprintf(w, "interrupted: %d sizes measured in full\n", len(b.Rows))
	}
}
