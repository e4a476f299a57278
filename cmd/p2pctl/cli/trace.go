package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/trace"
)

type traceChannelJSON struct {
	Name           string  `json:"name"`
	Bytes          uint64  `json:"bytes"`
	Transfers      uint64  `json:"transfers"`
	Slots          uint64  `json:"stream_slots"`
	Errors         uint64  `json:"errors"`
	GBps           float64 `json:"gb_per_s"`
	TransfersPerS  float64 `json:"transfers_per_s"`
	SlotsPerS      float64 `json:"stream_slots_per_s"`
	P50us          float64 `json:"p50_us"`
	P99us          float64 `json:"p99_us"`
	LatencyBuckets []struct {
		UpToUs float64 `json:"up_to_us"`
		Count  uint64  `json:"count"`
	} `json:"latency,omitempty"`
}

type traceEventJSON struct {
	Type    string `json:"type"`
	Device  int    `json:"device"`
	Handle  uint64 `json:"handle,omitempty"`
	Len     uint64 `json:"len,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Channel string `json:"channel,omitempty"`
	Slots   uint64 `json:"slots,omitempty"`
	Pages   int    `json:"pages,omitempty"`
	Status  uint32 `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
	Op      string `json:"op,omitempty"`
}

type traceTickJSON struct {
	Time     time.Time          `json:"time"`
	Summary  bool               `json:"summary,omitempty"`
	Seconds  float64            `json:"seconds"`
	Channels []traceChannelJSON `json:"channels"`
	Events   []traceEventJSON   `json:"events"`
	Pins     int                `json:"live_pins"`
	Lost     uint64             `json:"lost_events"`
}

func eventJSON(e trace.Event) traceEventJSON {
	out := traceEventJSON{Type: e.Type.String(), Device: e.Device, Handle: e.Handle, Len: e.Len, Pages: e.Pages, Status: e.Status, Op: e.Op}
	switch e.Type {
	case trace.EventPin, trace.EventUnpin, trace.EventRevoke:
		out.Kind = p2p.PinKind(e.Kind).String()
	case trace.EventTransferFailed, trace.EventStreamStart, trace.EventStreamEnd:
		out.Channel = fmt.Sprintf("%s%d", map[uint32]string{0: "h2c", 1: "c2h"}[e.Kind], e.Channel)
		out.Slots = e.Slots
	}
	if e.Err != 0 {
		out.Error = e.Err.Error()
	}
	return out
}

func traceChannel(c trace.Channel, secs float64, buckets bool) traceChannelJSON {
	out := traceChannelJSON{Name: c.Name, Bytes: c.Bytes, Transfers: c.Transfers, Slots: c.Slots, Errors: c.Errors,
		P50us: us(c.Quantile(0.5)), P99us: us(c.Quantile(0.99))}
	if secs > 0 {
		out.GBps = float64(c.Bytes) / secs / 1e9
		out.TransfersPerS = float64(c.Transfers) / secs
		out.SlotsPerS = float64(c.Slots) / secs
	}
	if buckets {
		for b, n := range c.Latency {
			if n > 0 {
				out.LatencyBuckets = append(out.LatencyBuckets, struct {
					UpToUs float64 `json:"up_to_us"`
					Count  uint64  `json:"count"`
				}{float64(uint64(1)<<(b+1)) / 1000, n})
			}
		}
	}
	return out
}

func writeTick(w io.Writer, t traceTickJSON) {
	for _, e := range t.Events {
		fmt.Fprintf(w, "%s event %s dev %d", t.Time.Format("15:04:05"), e.Type, e.Device)
		switch {
		case e.Kind != "":
			fmt.Fprintf(w, " handle %d %s %s", e.Handle, e.Kind, units.Bytes(e.Len))
		case e.Type == trace.EventStreamStart.String():
			fmt.Fprintf(w, " %s ring of %d slots, %d descriptors, %s", e.Channel, e.Slots, e.Pages, units.Bytes(e.Len))
		case e.Type == trace.EventStreamEnd.String():
			fmt.Fprintf(w, " %s after %d slots", e.Channel, e.Slots)
		case e.Type == trace.EventLifecycle.String():
			fmt.Fprintf(w, " %s", e.Op)
		case e.Channel != "":
			fmt.Fprintf(w, " %s transfer %d after %s", e.Channel, e.Handle, units.Bytes(e.Len))
		case e.Op != "":
			fmt.Fprintf(w, " in %s", e.Op)
		}
		if e.Error != "" {
			fmt.Fprintf(w, ": %s", e.Error)
		}
		switch {
		case e.Status != 0 && e.Type == trace.EventLifecycle.String():
			fmt.Fprintf(w, " (PCI channel state %d)", e.Status)
		case e.Status != 0:
			fmt.Fprintf(w, " (status %#x)", e.Status)
		}
		fmt.Fprintln(w)
	}
	label := t.Time.Format("15:04:05")
	if t.Summary {
		label = fmt.Sprintf("summary over %.1f s", t.Seconds)
	}
	active := 0
	for _, c := range t.Channels {
		if c.Transfers == 0 && c.Slots == 0 {
			continue
		}
		active++
		if c.Transfers > 0 {
			fmt.Fprintf(w, "%s  %-5s %8.3f GB/s %8.0f transfers/s  p50 %8.0f µs  p99 %8.0f µs  errors %d\n",
				label, c.Name, c.GBps, c.TransfersPerS, c.P50us, c.P99us, c.Errors)
		} else {
			fmt.Fprintf(w, "%s  %-5s %8.3f GB/s %8.0f stream slots/s\n", label, c.Name, c.GBps, c.SlotsPerS)
		}
		if t.Summary && c.Transfers > 0 {
			writeHistogram(w, c)
		}
	}
	if active == 0 {
		fmt.Fprintf(w, "%s  idle\n", label)
	}
	fmt.Fprintf(w, "%s  live pins %d, lost events %d\n", label, t.Pins, t.Lost)
}

func writeHistogram(w io.Writer, c traceChannelJSON) {
	var most uint64
	for _, b := range c.LatencyBuckets {
		most = max(most, b.Count)
	}
	for _, b := range c.LatencyBuckets {
		bar := strings.Repeat("#", int(1+39*b.Count/max(most, 1)))
		fmt.Fprintf(w, "    ≤ %10.1f µs %8d %s\n", b.UpToUs, b.Count, bar)
	}
}

// deviceNumber returns N of /dev/gpufpgaN.
func deviceNumber(path string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(path), "gpufpga"))
	if err != nil || !strings.HasPrefix(filepath.Base(path), "gpufpga") {
		return 0, usageErr("--device %s: want /dev/gpufpgaN", path)
	}
	return n, nil
}

func newTraceCmd(g *globals) *cobra.Command {
	var duration, interval time.Duration
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Watch transfers, latencies, pins and errors live (eBPF)",
		Long: `trace attaches eBPF programs to the driver's trace events and prints, every
--interval, each active channel's throughput, transfers per second, p50/p99
engine latency and errors, plus pins, revocations and failures as they
happen; at the end, totals and latency histograms. Without --device it
watches every gpufpga device. Needs root.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageErr("--interval must be positive")
			}
			opts := trace.Options{Device: -1}
			if cmd.Flags().Changed("device") {
				n, err := deviceNumber(g.device)
				if err != nil {
					return err
				}
				opts.Device = n
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			s, err := trace.Start(context.Background(), opts)
			if err != nil {
				if errors.Is(err, trace.ErrNotRoot) || errors.Is(err, trace.ErrModuleNotLoaded) {
					return &exitError{ExitDevice, err}
				}
				return err
			}
			defer s.Close()
			prog := newProgress(g, cmd)
			defer prog.clear()
			return runTrace(ctx, g, s, interval, duration, prog)
		},
	}
	durationFlag(cmd, &duration, "duration", 0, "stop after this long (0: until interrupted)")
	durationFlag(cmd, &interval, "interval", time.Second, "refresh interval")
	return cmd
}

func runTrace(ctx context.Context, g *globals, s *trace.Session, interval, duration time.Duration, prog *progress) error {
	first, err := s.Snapshot()
	if err != nil {
		return err
	}
	prev := first
	pins := 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pending []traceEventJSON
	start, events := time.Now(), 0
	status, stopStatus := prog.tick(progressEvery)
	defer stopStatus()
	emit := func(now trace.Snapshot, from trace.Snapshot, summary bool) error {
		secs := now.Time.Sub(from.Time).Seconds()
		t := traceTickJSON{Time: now.Time, Summary: summary, Seconds: secs, Events: pending, Pins: pins, Lost: now.Lost}
		if t.Events == nil {
			t.Events = []traceEventJSON{}
		}
		for i, c := range now.Channels {
			t.Channels = append(t.Channels, traceChannel(c.Sub(from.Channels[i]), secs, summary))
		}
		pending = nil
		return prog.above(func() error {
			if g.json {
				return g.emitLine(t)
			}
			writeTick(g.out, t)
			return nil
		})
	}
	record := func(e trace.Event) {
		switch e.Type {
		case trace.EventPin:
			pins++
		case trace.EventUnpin:
			pins--
		}
		pending = append(pending, eventJSON(e))
		events++
	}
	for {
		select {
		case e, ok := <-s.Events():
			if !ok {
				return errors.New("trace: the event stream ended")
			}
			record(e)
		case <-tick.C:
			now, err := s.Snapshot()
			if err != nil {
				return err
			}
			if err := emit(now, prev, false); err != nil {
				return err
			}
			prev = now
		case <-status:
			prog.set(traceStatus(time.Since(start), duration, events, pins))
		case <-ctx.Done():
			prog.clear() // the summary ends the output
			// Let events already in the ring buffer arrive.
			drain := time.After(100 * time.Millisecond)
		loop:
			for {
				select {
				case e, ok := <-s.Events():
					if !ok {
						break loop
					}
					record(e)
				case <-drain:
					break loop
				}
			}
			now, err := s.Snapshot()
			if err != nil {
				return err
			}
			return emit(now, first, true)
		}
	}
}
