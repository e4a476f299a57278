// Command acquire is a complete acquisition program to copy from: it
// streams an FPGA's C2H channel into a ring of slots in GPU memory
// (package stream, CUDA memory from package stream/cudamem), runs a GPU
// kernel of your own on every slot as it fills, copies the kernel's
// results back and prints them, and hands each slot back to the FPGA once
// the kernel no longer reads it.
//
// The kernel comes from a PTX file (-ptx, -kernel); by default it is
// framestats.cu, built in: per-frame statistics of the payload's 16-bit
// samples (mean, minimum, maximum, RMS) and a trigger on the samples whose
// magnitude reaches -threshold. framestats.cu says what a kernel of your
// own receives and writes.
//
// With -resident, the stream is GPU-resident: framestats runs as a
// function inside the GPU's persistent consumer (framestats_func.cu,
// linked by the driver), on every fill as it lands, with no kernel
// launch and no CPU work per slot, and prints the same statistics; with
// -check it checks every frame there too.
//
// Ctrl-C stops the stream, waits for the kernels in flight, prints the
// summary and frees the ring; a second Ctrl-C kills the program. On a
// terminal, progress is shown on standard error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// options are the command line's.
type options struct {
	device    string
	gpu       int
	channel   int
	slots     int
	slotSize  uint64
	frameSize int
	total     uint64
	ptx       string
	kernel    string
	threshold int
	depth     int
	check     bool
	show      int
	every     bool
	resident  bool
}

func main() {
	var o options
	flag.StringVar(&o.device, "device", "/dev/gpufpga0", "gpufpga device")
	flag.IntVar(&o.gpu, "gpu", 0, "CUDA device ordinal")
	flag.IntVar(&o.channel, "channel", 1, "C2H stream channel")
	flag.IntVar(&o.slots, "slots", 32, "ring slots")
	flag.Uint64Var(&o.slotSize, "slot-size", 64<<10, "bytes per slot: whole frames (a slot of several GPU pages needs the FPGA's packets as long as the slot)")
	flag.IntVar(&o.frameSize, "frame-size", 64<<10, "bytes per frame, header included")
	flag.Uint64Var(&o.total, "bytes", 0, "bytes to acquire (0: until Ctrl-C)")
	flag.StringVar(&o.ptx, "ptx", "", "PTX file of the kernel to run on each slot (default: the built-in framestats.cu)")
	flag.StringVar(&o.kernel, "kernel", defaultKernel, "the kernel's entry in the PTX")
	flag.IntVar(&o.threshold, "threshold", 32000, "trigger on samples of at least this magnitude (0: off)")
	flag.IntVar(&o.depth, "depth", 4, "slots whose kernels may be in flight before the oldest's results are read")
	flag.BoolVar(&o.check, "check", true, "check every frame on the GPU too: header, sequence and CRC per slot; with -resident header, sequence and every payload word (frames of a multiple of 16 bytes)")
	flag.IntVar(&o.show, "show", 10, "triggered frames to print")
	flag.BoolVar(&o.every, "v", false, "print every frame's statistics")
	flag.BoolVar(&o.resident, "resident", false, "GPU-resident: framestats runs inside the GPU's persistent consumer on every fill (no launch per slot; not with -ptx)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer stop()
	// After the first signal, the next one kills the program as usual.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, o options, stdout, stderr *os.File) error {
	kc := KernelConfig{Name: o.kernel, FrameSize: o.frameSize, Threshold: o.threshold, Depth: o.depth}
	if o.resident && o.ptx != "" {
		return fmt.Errorf("%w: -resident runs framestats as the consumer's function: not with -ptx", ErrKernel)
	}
	if o.ptx != "" {
		var err error
		if kc.PTX, err = LoadPTXFile(o.ptx); err != nil {
			return err
		}
	}
	d, err := p2p.Open(o.device)
	if err != nil {
		return err
	}
	defer d.Close()
	gpu, err := cudamem.Open(o.gpu)
	if err != nil {
		return err
	}
	defer gpu.Close()
	check := stream.CheckNone
	if o.check && !o.resident {
		check = stream.CheckGPU
	}
	cfg := stream.Config{
		Device:    d,
		Channel:   o.channel,
		SlotSize:  o.slotSize,
		Slots:     o.slots,
		Mode:      stream.Auto,
		GPU:       gpu,
		Check:     check,
		FrameSize: o.frameSize,
	}
	con := newConsole(stdout, stderr)
	sum := newSummary(o.threshold)
	shown := 0
	record := func(r Record) {
		sum.add(r)
		switch {
		case o.every:
			con.printf("%s\n", r)
		case r.Triggered() && shown < o.show:
			shown++
			con.printf("trigger: %s\n", r)
			if shown == o.show {
				con.printf("(further triggers are counted, not printed)\n")
			}
		}
	}
	var residentCheck *FrameCount
	if o.resident {
		if o.check {
			residentCheck = &FrameCount{}
		}
		cfg.Mode, cfg.Resident = stream.Direct, true
		if cfg.ResidentFunc, err = ResidentFunc(o.slotSize, o.frameSize, o.threshold, residentCheck, record); err != nil {
			return err
		}
	}
	s, err := stream.Start(ctx, cfg)
	if err != nil {
		return err
	}
	// Last: the releases handed to the session finish, the pins go, the
	// ring is freed.
	defer s.Close()
	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := con.progress(progressCtx, func() string { return progressLine(s.Stats(), sum) })
	if o.resident {
		err = ConsumeResident(s, o.total)
	} else {
		var p *Pipeline
		if p, err = NewPipeline(gpu, o.slotSize, kc); err != nil {
			stopProgress()
			<-progressDone
			return err
		}
		err = Consume(s, p, o.total, record)
		// Before the session's Close: the kernels in flight end first.
		err = errors.Join(err, p.Close())
	}
	stopProgress()
	<-progressDone
	if err != nil {
		return err
	}
	interrupted := false
	if err := s.Err(); err != nil {
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("acquisition ended: %w", err)
		}
		interrupted = true
	}
	st := s.Stats()
	mode := st.Mode.String() + " mode"
	if st.Mode == stream.Direct {
		mode += ", pinned through " + st.Pinning.String()
	}
	if interrupted {
		fmt.Fprintln(stdout, "interrupted")
	}
	fmt.Fprintf(stdout, "acquired %.1f MiB in %d slots (%s) in %v: %.3f GB/s, mean slot latency %v, at most %d slots held\n",
		float64(st.Bytes)/(1<<20), st.Slots, mode, st.Elapsed.Round(time.Millisecond), st.GBps,
		st.SlotLatency.Round(time.Microsecond), st.MaxHeld)
	fmt.Fprintln(stdout, sum)
	switch {
	case st.Check == stream.CheckGPU:
		fmt.Fprintf(stdout, "frames checked on the GPU: %d, %d gaps, %d duplicates, %d CRC failures\n",
			st.Frames.Frames, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures)
		if st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
			return errors.New("acquire: frames lost or damaged")
		}
	case residentCheck != nil:
		o := residentCheck.Stats()
		fmt.Fprintf(stdout, "frames checked on the GPU: %d, %d gaps, %d duplicates, %d bad fills\n",
			o.Frames, o.Gaps, o.Duplicates, st.BadFills)
		if o.Gaps+o.Duplicates+st.BadFills != 0 {
			return errors.New("acquire: frames lost or damaged")
		}
	}
	return nil
}

func (r Record) String() string {
	if r.Samples == 0 {
		return fmt.Sprintf("frame %d: no samples (not a frame)", r.Seq)
	}
	s := fmt.Sprintf("frame %d: %d samples, mean %.2f, min %d, max %d, RMS %.2f", r.Seq, r.Samples, r.Mean(), r.Min, r.Max, r.RMS())
	if r.Triggered() {
		s += fmt.Sprintf(", %d over the threshold from sample %d", r.Over, r.FirstOver)
	}
	return s
}

// summary accumulates the records of a run.
type summary struct {
	mu        sync.Mutex
	threshold int
	frames    uint64
	empty     uint64 // records of no frame
	triggered uint64
	samples   uint64
	sum       float64
	sumSq     float64
	min, max  int64
}

func newSummary(threshold int) *summary {
	return &summary{threshold: threshold, min: math.MaxInt64, max: math.MinInt64}
}

func (s *summary) add(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames++
	if r.Samples == 0 {
		s.empty++
		return
	}
	if r.Triggered() {
		s.triggered++
	}
	s.samples += r.Samples
	s.sum += float64(r.Sum)
	s.sumSq += float64(r.SumSq)
	s.min = min(s.min, r.Min)
	s.max = max(s.max, r.Max)
}

func (s *summary) counts() (frames, triggered uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frames, s.triggered
}

func (s *summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		return fmt.Sprintf("%d frames processed on the GPU, no samples", s.frames)
	}
	n := float64(s.samples)
	t := "trigger off"
	if s.threshold > 0 {
		t = fmt.Sprintf("%d triggered (|sample| >= %d)", s.triggered, s.threshold)
	}
	out := fmt.Sprintf("%d frames processed on the GPU, %s; %d samples: mean %.3f, min %d, max %d, RMS %.2f",
		s.frames, t, s.samples, s.sum/n, s.min, s.max, math.Sqrt(s.sumSq/n))
	if s.empty > 0 {
		out += fmt.Sprintf("; %d not a frame", s.empty)
	}
	return out
}

func progressLine(st stream.Stats, s *summary) string {
	frames, triggered := s.counts()
	return fmt.Sprintf("%.1f MiB, %.3f GB/s, %d slots (%d held), %d frames processed, %d triggered",
		float64(st.Bytes)/(1<<20), st.GBps, st.Slots, st.Held, frames, triggered)
}

// console prints results on stdout and, when stderr is a terminal, a
// progress line there that the results' lines do not garble.
type console struct {
	mu      sync.Mutex
	out     io.Writer
	err     io.Writer
	tty     bool
	showing bool // a progress line is on the terminal
}

func newConsole(stdout, stderr *os.File) *console {
	_, err := unix.IoctlGetTermios(int(stderr.Fd()), unix.TCGETS)
	return &console{out: stdout, err: stderr, tty: err == nil}
}

func (c *console) clear() {
	if c.showing {
		fmt.Fprint(c.err, "\r\033[K")
		c.showing = false
	}
}

func (c *console) printf(format string, a ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	fmt.Fprintf(c.out, format, a...)
}

// progress redraws line() every half second until ctx ends, then clears
// it; the channel is closed once it has.
func (c *console) progress(ctx context.Context, line func() string) <-chan struct{} {
	done := make(chan struct{})
	if !c.tty {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				c.mu.Lock()
				c.clear()
				c.mu.Unlock()
				return
			case <-t.C:
			}
			l := line()
			c.mu.Lock()
			fmt.Fprintf(c.err, "\r\033[K%s", l)
			c.showing = true
			c.mu.Unlock()
		}
	}()
	return done
}
