package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/metrics"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

type streamJSON struct {
	Time        time.Time `json:"time"`
	Summary     bool      `json:"summary,omitempty"`
	Mode        string    `json:"mode"`
	Pinning     string    `json:"pinning,omitempty"` // direct mode: dma-buf or nvidia-p2p
	Seconds     float64   `json:"seconds"`
	Bytes       uint64    `json:"bytes"`
	Slots       uint64    `json:"slots"`
	GBps        float64   `json:"gb_per_s"`
	SlotsPerS   float64   `json:"slots_per_s"`
	Held        int       `json:"held"`
	MaxHeld     int       `json:"max_held"`
	LatencyUs   float64   `json:"slot_latency_us"`
	Frames      uint64    `json:"frames"`
	Gaps        uint64    `json:"gaps"`
	Duplicates  uint64    `json:"duplicates"`
	CRCFailures uint64    `json:"crc_failures"`
	// A resident stream's: slots and bytes are what the consumer on the
	// GPU took, fills what the engine made (in the summary).
	Resident bool   `json:"resident,omitempty"`
	Fills    uint64 `json:"fills,omitempty"`
	// Fills a --resident-func function found bad.
	BadFills uint64 `json:"bad_fills,omitempty"`
	Error    string `json:"error,omitempty"`
}

func streamLine(st stream.Stats, summary bool) streamJSON {
	out := streamJSON{Time: time.Now(), Summary: summary, Mode: st.Mode.String(), Seconds: st.Elapsed.Seconds(),
		Bytes: st.Bytes, Slots: st.Slots, GBps: st.GBps, Held: st.Held, MaxHeld: st.MaxHeld,
		LatencyUs: us(st.SlotLatency), Frames: st.Frames.Frames, Gaps: st.Frames.Gaps,
		Duplicates: st.Frames.Duplicates, CRCFailures: st.Frames.CRCFailures, Resident: st.Resident, Fills: st.Fills, BadFills: st.BadFills}
	if st.Mode == stream.Direct {
		out.Pinning = st.Pinning.String()
	}
	if out.Seconds > 0 {
		out.SlotsPerS = float64(st.Slots) / out.Seconds
	}
	return out
}

func writeStreamLine(w io.Writer, l streamJSON) {
	label := l.Time.Format("15:04:05")
	if l.Summary {
		mode := l.Mode
		if l.Resident {
			mode = "resident " + mode
		}
		label = fmt.Sprintf("summary (%s mode, %.1f s)", mode, l.Seconds)
		if l.Pinning != "" {
			label = fmt.Sprintf("summary (%s mode pinned through %s, %.1f s)", mode, l.Pinning, l.Seconds)
		}
	}
	frames := fmt.Sprintf("frames %d  gaps %d  duplicates %d  CRC failures %d", l.Frames, l.Gaps, l.Duplicates, l.CRCFailures)
	switch {
	case l.Resident && l.Summary:
		fmt.Fprintf(w, "%s  %s in %d slots consumed of %d fills  %.3f GB/s  %.0f slots/s  %s\n",
			label, units.Bytes(l.Bytes), l.Slots, l.Fills, l.GBps, l.SlotsPerS, frames)
	case l.Resident:
		// The engine's fills are known once the stream ended; the CPU
		// holds no slot and sees none arrive.
		fmt.Fprintf(w, "%s  %s in %d slots consumed  %.3f GB/s  %.0f slots/s  %s\n",
			label, units.Bytes(l.Bytes), l.Slots, l.GBps, l.SlotsPerS, frames)
	default:
		fmt.Fprintf(w, "%s  %s in %d slots  %.3f GB/s  %.0f slots/s  held %d (max %d)  latency %.0f µs  %s\n",
			label, units.Bytes(l.Bytes), l.Slots, l.GBps, l.SlotsPerS, l.Held, l.MaxHeld, l.LatencyUs, frames)
	}
	if l.Error != "" {
		fmt.Fprintf(w, "%s  ended: %s\n", label, l.Error)
	}
}

// checkAuto is --check auto until the memory and mode are known.
const checkAuto stream.Check = -1

// streamResident validates --resident and --coalesce against the other
// flags, before anything is opened.
func streamResident(resident bool, coalesce, slots int, mode stream.Mode, out string) error {
	if !resident {
		if coalesce != 0 {
			return usageErr("--coalesce is for --resident streams")
		}
		return nil
	}
	switch {
	case mode == stream.Compat:
		return usageErr("--resident keeps the ring in GPU memory, where its consumer runs: not with --mode compat")
	case out != "":
		return usageErr("--out records slots the CPU is handed: a --resident stream's stay on the GPU")
	case coalesce < 0 || coalesce > slots:
		return usageErr("--coalesce %d: want 0 (the driver picks) to --slots (%d)", coalesce, slots)
	}
	return nil
}

// streamCheck validates --check and --frame-size against each other and
// the memory, before anything is opened.
func streamCheck(check, mem string, mode stream.Mode, slotSize, frameSize uint64) (stream.Check, error) {
	checks := map[string]stream.Check{"auto": checkAuto, "none": stream.CheckNone, "cpu": stream.CheckCPU, "gpu": stream.CheckGPU}
	ck, ok := checks[check]
	if !ok {
		return 0, usageErr("--check %q: want auto, cpu, gpu or none", check)
	}
	if slotSize == 0 {
		return 0, usageErr("--slot-size must be more than 0")
	}
	if frameSize != 0 {
		if frameSize < frame.HeaderSize+16 || frameSize%16 != 0 {
			return 0, usageErr("--frame-size %d: frames are at least %d bytes, in multiples of 16", frameSize, frame.HeaderSize+16)
		}
		if slotSize%frameSize != 0 {
			return 0, usageErr("--frame-size %d: slots of %d bytes must hold whole frames", frameSize, slotSize)
		}
	}
	switch {
	case ck == stream.CheckGPU && mem != memCUDA:
		return 0, usageErr("--check gpu runs the CUDA frame checker: needs --mem cuda")
	case ck == stream.CheckGPU && frameSize == 0:
		return 0, usageErr("--check gpu needs --frame-size")
	case ck == stream.CheckCPU && mem == memCUDA && mode == stream.Direct:
		return 0, usageErr("--check cpu cannot read CUDA memory in direct mode: use --check gpu or --mode compat")
	}
	return ck, nil
}

func newStreamCmd(g *globals) *cobra.Command {
	var mode, mem, channel, out, check, metricsAddr string
	var slots, coalesce int
	var resident bool
	var residentFunc string
	var frameSize sizeValue
	var slotSize sizeValue = 64 << 10
	var duration, interval time.Duration
	var limit sizeValue
	var via pinningFlag
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Acquire continuously from a C2H stream channel into a ring of slots",
		Long: `stream runs a C2H stream channel into a ring of --slots slots of --slot-size
bytes, in GPU memory (direct mode) or in host memory copied on to the GPU
(compat mode). auto picks as the library does (stream.SelectMode): direct
when the ring in GPU memory can be pinned, through a dma-buf where the GPU
exports them and the driver imports them, else through nvidia_p2p where the
driver has it; compat otherwise. Every
slot's frames are checked (sequence numbers and CRC32C: --check cpu, or gpu
with the CUDA frame checker, which needs --frame-size) and released; live
statistics print every --interval and a summary at the end. --out records
the slots' bytes to a file (CPU-visible memory only). GPU memory is CUDA's
(--mem cuda). --metrics ADDR serves the stream's and the device's counters
in Prometheus' text format at http://ADDR/metrics while the stream runs
(gpufpga_stream_* and gpufpga_device_*, labelled with the device and
channel; pkg/metrics).

--resident runs a GPU-resident stream: a consumer on the GPU takes each
slot and gives it back to the engine itself, with no CPU work per slot
(direct mode; on CUDA a persistent kernel checks every frame word by word
where it lands, as --check gpu with --frame-size; the simulated GPU's
consumer checks frames as --check cpu does). The statistics are the slots and bytes the
consumer took, and the summary the fills the engine made. --coalesce is
its fills per engine interrupt (0: the driver picks).

` + sizeHelp,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, idx, err := parseChannel(channel)
			if err != nil {
				return err
			}
			if dir != 1 {
				return usageErr("--channel %s: streams run on c2h channels", channel)
			}
			m := map[string]stream.Mode{"auto": stream.Auto, "direct": stream.Direct, "compat": stream.Compat}
			sm, ok := m[mode]
			if !ok {
				return usageErr("--mode %q: want auto, direct or compat", mode)
			}
			mem, err := g.opts.checkMem(mem)
			if err != nil {
				return err
			}
			ck, err := streamCheck(check, mem, sm, uint64(slotSize), uint64(frameSize))
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				if _, _, err := net.SplitHostPort(metricsAddr); err != nil {
					return usageErr("--metrics %q: want HOST:PORT (e.g. :9464): %v", metricsAddr, err)
				}
			}
			if slots < 1 || interval <= 0 {
				return usageErr("--slots and --interval must be positive")
			}
			if err := streamResident(resident, coalesce, slots, sm, out); err != nil {
				return err
			}
			var fn *stream.ResidentFunc
			if residentFunc != "" {
				if !resident {
					return usageErr("--resident-func runs on a resident stream's consumer: give --resident")
				}
				if check != "auto" && check != "none" {
					return usageErr("--resident-func is the consumer's check: not with --check %s", check)
				}
				ptx, err := os.ReadFile(residentFunc)
				if err != nil {
					return usageErr("--resident-func: %v", err)
				}
				fn = &stream.ResidentFunc{Name: residentFunc, PTX: ptx}
			}
			if resident && mem == memCUDA && fn == nil && ck != checkAuto && ck != stream.CheckGPU {
				// cudamem's consumer would refuse it once the ring is pinned.
				return usageErr("--resident on --mem cuda checks frames on the GPU, where they land: --check gpu (or auto), not %v", ck)
			}
			if resident && mem == memCUDA && frameSize == 0 && fn == nil {
				return usageErr("--resident on --mem cuda checks frames on the GPU: give --frame-size, or --resident-func")
			}
			if mem == memHost {
				return usageErr("--mem %s: a stream's slots end up in GPU memory: want %s", mem, g.opts.streamKinds())
			}
			if out != "" && mem == memCUDA {
				return usageErr("--out records CPU-visible memory: not with --mem %s", memCUDA)
			}
			if ck == checkAuto && mem == memCUDA && frameSize == 0 && sm == stream.Direct && fn == nil {
				return usageErr("checking frames in CUDA memory needs --frame-size (or --check none)")
			}
			if sm == stream.Compat {
				// Caught before anything is opened.
				if _, _, err := stream.SelectMode(p2p.Info{}, false, sm, via.p); err != nil {
					return err
				}
			}
			d, err := g.open()
			if err != nil {
				return err
			}
			defer d.Close()
			gpu, closeGPU, err := g.opts.openStreamGPU(mem)
			if err != nil {
				return err
			}
			defer closeGPU()
			if _, ok := gpu.(stream.ResidentGPU); resident && !ok {
				return usageErr("--resident: --mem %s has no resident consumer", mem)
			}
			cfg := stream.Config{
				Device: d, Channel: idx, SlotSize: uint64(slotSize), Slots: slots, Mode: sm,
				GPU: gpu, FrameSize: int(frameSize), Pinning: via.p,
				Resident: resident, Coalesce: coalesce,
			}
			// The library's choice, so that p2pctl runs what Start would.
			if cfg.Mode, cfg.Pinning, err = cfg.Resolve(); err != nil {
				return err
			}
			sm = cfg.Mode
			if fn != nil {
				ck = stream.CheckNone
				cfg.ResidentFunc = fn
			}
			if ck == checkAuto {
				// Where the frames can be read: on the GPU for CUDA
				// memory written directly, else on the CPU.
				ck = stream.CheckCPU
				if mem == memCUDA && sm == stream.Direct {
					if frameSize == 0 {
						return usageErr("direct mode into CUDA memory checks frames on the GPU: give --frame-size, or --check none")
					}
					ck = stream.CheckGPU
				}
			}
			cfg.Check = ck
			var rec *os.File
			if out != "" {
				if rec, err = os.Create(out); err != nil {
					return err
				}
				defer rec.Close()
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			var ml net.Listener
			if metricsAddr != "" {
				if ml, err = net.Listen("tcp", metricsAddr); err != nil {
					return fmt.Errorf("--metrics: %w", err)
				}
				defer ml.Close()
			}
			s, err := stream.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			if ml != nil {
				reg := prometheus.NewRegistry()
				reg.MustRegister(metrics.New(metrics.Config{Device: d, Stream: s,
					Labels: prometheus.Labels{"device": d.Path(), "channel": channel}}))
				mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
				served := make(chan error, 1)
				go func() { served <- metrics.Serve(mctx, ml, reg) }()
				defer func() {
					cancel()
					if err := <-served; err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "p2pctl: %v\n", err)
					}
				}()
			}
			prog := newProgress(g, cmd)
			defer prog.clear()
			status, stopStatus := prog.tick(progressEvery)
			defer stopStatus()
			emit := func(l streamJSON) error {
				return prog.above(func() error {
					if g.json {
						return g.emitLine(l)
					}
					writeStreamLine(g.out, l)
					return nil
				})
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			// A resident stream hands no slot over: --bytes is watched
			// on a clock instead, not per slot.
			var limitTick <-chan time.Time
			if resident && limit > 0 {
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				limitTick = t.C
			}
			for {
				select {
				case f, ok := <-s.Filled():
					if !ok {
						prog.clear() // the summary ends the output
						l := streamLine(s.Stats(), true)
						if err := s.Err(); err != nil && !stoppedByContext(err) {
							l.Error = err.Error()
							emit(l)
							return err
						}
						if err := emit(l); err != nil {
							return err
						}
						if l.Gaps+l.Duplicates+l.CRCFailures != 0 {
							return verifyErr("frames lost or damaged: %d gaps, %d duplicates, %d CRC failures", l.Gaps, l.Duplicates, l.CRCFailures)
						}
						return nil
					}
					if rec != nil {
						if _, err := rec.Write(f.Data); err != nil {
							return err
						}
					}
					if err := s.Release(f.Slot); err != nil {
						return err
					}
					if limit > 0 && s.Stats().Bytes >= uint64(limit) {
						s.Stop()
					}
				case <-tick.C:
					if err := emit(streamLine(s.Stats(), false)); err != nil {
						return err
					}
				case <-status:
					prog.set(streamStatus(s.Stats(), uint64(limit), duration))
				case <-limitTick:
					if s.Stats().Bytes >= uint64(limit) {
						s.Stop()
						limitTick = nil
					}
				}
			}
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "c2h1", "C2H stream channel")
	cmd.Flags().IntVar(&slots, "slots", 16, "slots in the ring")
	cmd.Flags().Var(&slotSize, "slot-size", "bytes per slot (within one GPU page run, e.g. 64KiB)")
	cmd.Flags().StringVar(&mode, "mode", "auto", "auto, direct (GPU memory) or compat (host memory, copied to the GPU)")
	cmd.Flags().StringVar(&mem, "mem", "", "GPU memory: "+g.opts.streamKinds()+" (default: cuda where a CUDA driver is present)")
	cmd.Flags().StringVar(&check, "check", "auto", "where frames are checked: cpu, gpu (CUDA), none, or auto: gpu for CUDA memory written directly, else cpu")
	cmd.Flags().Var(&frameSize, "frame-size", "bytes per frame, for --check gpu")
	durationFlag(cmd, &duration, "duration", 0, "stop after this long (0: until interrupted)")
	cmd.Flags().Var(&limit, "bytes", "stop after this many bytes (0: no limit)")
	durationFlag(cmd, &interval, "interval", time.Second, "statistics interval")
	cmd.Flags().StringVar(&out, "out", "", "record the slots' bytes to this file")
	cmd.Flags().Var(&via, "pin", pinHelp+" (direct mode)")
	cmd.Flags().BoolVar(&resident, "resident", false, "GPU-resident: a consumer on the GPU takes and gives back the slots (direct mode)")
	cmd.Flags().StringVar(&residentFunc, "resident-func", "", "--resident: PTX defining extern \"C\" __device__ int gpufpga_process(slot, len, k, state, out), run on every fill on the GPU in place of the frame check (package resident)")
	cmd.Flags().IntVar(&coalesce, "coalesce", 0, "--resident: fills per engine interrupt, 1 to --slots (0: the driver picks)")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics while streaming (e.g. :9464)")
	return cmd
}

// stoppedByContext reports whether err, a session's end, is an interrupt's
// or --duration's and nothing else: a resident session's joins every
// error its end met, and one beside the context's is a failure.
func stoppedByContext(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !stoppedByContext(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
