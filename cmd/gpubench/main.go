// Command gpubench measures the GPU side of gpufpga on a machine with an
// NVIDIA GPU, in one pass: device attributes, dma-buf export, the pinned
// host to GPU copy peak and the device-to-device copy rate, the frame
// checker kernel in both table configurations against the read-only
// baseline kernel (readsum) on the same bytes, and the compat path (the
// device model writing frames into a pinned host ring in process, slots
// copied to the GPU and checked there) against the copy peak, with the
// source alone measured in the same run. Every repetition's output is
// verified. With -resident it measures GPU-resident streams instead
// (pkg/resident: the persistent consumer kernel against the CPU-driven
// path and the bare CPU <-> GPU round trips, on an emulated producer),
// into a file named the same way with "-resident". It writes one JSON document, with the revision it was built
// from, its flags, the driver, the GPU and its clocks: to a new file in
// -out (named for date, GPU and revision, never overwriting), or to
// standard output with -out -.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/gpucheck"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

type copyResult struct {
	Bytes uint64  `json:"bytes"`
	Reps  int     `json:"reps"`
	GBps  float64 `json:"gb_per_s"`
}

// machine is what every gpubench document says first: the run, the host
// and the GPU.
type machine struct {
	Date        string            `json:"date"`
	Command     []string          `json:"command"`
	Flags       map[string]string `json:"flags"`
	Build       build             `json:"build"`
	Host        string            `json:"host"`
	Kernel      string            `json:"kernel"`
	Device      string            `json:"device"`
	ComputeCap  string            `json:"compute_capability"`
	SMs         int               `json:"multiprocessors"`
	CUDAVersion int               `json:"cuda_driver_version"`
	CPU         string            `json:"cpu"`
	CPUs        int               `json:"cpus"`
	Topology    topology          `json:"topology"`
}

// describe reads the machine a run started at t0 measures on g.
func describe(g *cuda.Device, t0 time.Time) (machine, error) {
	host, _ := os.Hostname()
	m := machine{Date: t0.UTC().Format(time.RFC3339), Command: os.Args, Flags: flags(flag.CommandLine),
		Build: buildInfo(), Host: host, Kernel: kernelRelease(), CPU: cpuModel(), CPUs: runtime.NumCPU()}
	var err error
	if m.Device, err = g.Name(); err != nil {
		return m, err
	}
	major, _ := g.Attribute(attrCCMajor)
	minor, _ := g.Attribute(attrCCMinor)
	m.ComputeCap = fmt.Sprintf("%d.%d", major, minor)
	m.SMs, _ = g.Attribute(cuda.AttrMultiprocessorCount)
	m.CUDAVersion, _ = g.Driver().Version()
	m.Topology = describeTopology(g.Driver())
	return m, nil
}

type report struct {
	machine
	ClockKHz       int           `json:"max_sm_clock_khz"`
	MemClockKHz    int           `json:"max_mem_clock_khz"`
	SharedOptin    int           `json:"max_shared_per_block_optin"`
	GPUStart       gpuState      `json:"gpu_at_start"`
	GPUEnd         gpuState      `json:"gpu_at_end"`
	TotalMem       uint64        `json:"total_mem"`
	RDMASupported  int           `json:"gpudirect_rdma_supported"`
	RDMAFlush      int           `json:"gpudirect_rdma_flush_writes_options"`
	RDMAOrdering   int           `json:"gpudirect_rdma_writes_ordering"`
	DmaBufSupport  int           `json:"dma_buf_supported"`
	BAR1Total      uint64        `json:"bar1_total"`
	BAR1Free       uint64        `json:"bar1_free"`
	DmaBufSize     int64         `json:"dma_buf_export_size"`
	DmaBufWant     uint64        `json:"dma_buf_export_want"`
	HtoD           []copyResult  `json:"pinned_htod"`
	DtoD           []copyResult  `json:"dtod"`
	AllocAligned64 bool          `json:"alloc_64k_aligned"`
	HtoDPeak       float64       `json:"pinned_htod_peak_gb_per_s"`
	Checker        []checkRun    `json:"frame_checker"`
	Compat         []*compatRun  `json:"compat"`
	Calibration    []calibration `json:"compat_source_calibration,omitempty"`
	CompatMedian   float64       `json:"compat_median_ratio_to_peak"`
	SourceMin      float64       `json:"compat_source_alone_min_ratio_to_peak"`
	// CopyUnderSource is the pinned copy peak measured again while the
	// compat source writes frames into a ring of its own at the compat
	// path's median rate: what the copies can do while the host's memory
	// also takes the source's writes, with no session in between.
	CopyUnderSource *copyUnderSource `json:"copy_under_source,omitempty"`
	Seconds         float64          `json:"seconds"`
}

// CUDA device attributes read here alone.
const (
	attrClockRate    = 13 // CU_DEVICE_ATTRIBUTE_CLOCK_RATE, kHz
	attrMemClockRate = 36 // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, kHz
	attrCCMajor      = 75
	attrCCMinor      = 76
)

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(2)
	}
	if o.resident {
		err = runResident(o.rc, o.out)
	} else {
		err = run(o.cc, o.compatOnly, o.reps, o.out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

// options are gpubench's flags.
type options struct {
	cc         compatConfig
	compatOnly bool
	reps       int
	out        string
	resident   bool
	rc         residentConfig
}

// parseFlags defines gpubench's flags on fs and parses args.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	var o options
	cc := &o.cc
	fs.IntVar(&cc.slots, "compat-slots", 8, "compat path: slots in the ring")
	fs.IntVar(&cc.slotSize, "compat-slot-size", 64<<20, "compat path: bytes per slot")
	fs.IntVar(&cc.workers, "compat-workers", 0, "compat path: device model workers encoding frames; 0: the fewest that outrun the copy peak 1.3 times")
	fs.IntVar(&cc.streams, "compat-streams", cudamem.CopyStreams, "compat path: CUDA streams the copies go round")
	fs.IntVar(&cc.runs, "compat-runs", 5, "compat path: runs, each with the source alone first; the median is reported")
	fs.DurationVar(&cc.seconds, "compat-time", 4*time.Second, "compat path: length of each run")
	fs.BoolVar(&o.compatOnly, "compat-only", false, "measure the compat path alone (against a fresh copy peak)")
	fs.IntVar(&o.reps, "reps", 8, "frame checker and read baseline: timed repetitions, each verified")
	fs.StringVar(&o.out, "out", "-", "directory for a new result file named for date, GPU and revision; - for standard output")
	fs.BoolVar(&o.resident, "resident", false, "measure GPU-resident streams alone (pkg/resident), into a new DATE-GPU-REV-resident.json")
	rc := &o.rc
	fs.IntVar(&rc.NSlots, "resident-slots", 64, "GPU-resident: slots in each ring")
	fs.IntVar(&rc.Workers, "resident-workers", 16, "GPU-resident: the persistent kernel's worker blocks")
	fs.DurationVar(&rc.Duration, "resident-time", time.Second, "GPU-resident: length of each throughput run")
	fs.IntVar(&rc.LatencyFills, "resident-rtt", 2000, "GPU-resident: round trips measured for each path")
	fs.IntVar(&rc.Repeats, "resident-repeats", 5, "GPU-resident: runs of every figure, reported as the median and the spread")
	fs.BoolVar(&rc.PeerOnly, "peer-only", false, "GPU-resident: the bare round trips and the peer producer (GPU 1 writing GPU 0's memory) alone")
	fs.IntVar(&rc.Peer.NSlots, "peer-slots", defaultPeerSlots, "peer producer: slots in each ring")
	fs.IntVar(&rc.Peer.Blocks, "peer-blocks", defaultPeerBlocks, "peer producer: fills written at once, at most the ring's slots")
	fs.Float64Var(&rc.Peer.Rate, "peer-rate", 12.5e6, "peer producer: the throttled rate, slots per second, for slots of 4 KiB or less")
	fs.DurationVar(&rc.Peer.Timeout, "peer-timeout", 2*time.Second, "peer producer: bound of each wait of its kernels")
	fs.StringVar(&rc.Peer.Function, "peer-function", functionPattern, "peer producer: what the function consumer runs on each fill, pattern (the pattern check, every word) or empty (nothing read: the consumer's own cost)")
	fs.StringVar(&rc.Peer.Word, "peer-word", wordConsumer, "peer producer: whose memory holds each ring's consumer word, consumer (GPU 0's: the producer reads it across the link) or producer (GPU 1's: the consumer writes it across the link, as GPU 0 answers the ping-pong, and the producer polls it locally)")
	fs.IntVar(&rc.Peer.Rings, "peer-rings", 2, "peer producer: rings consumed at once on GPU 0, each its consumer and producer, at the smallest slot size (1: none)")
	fs.StringVar(&rc.Peer.Consumer, "peer-consumer", consumerFunction, "peer producer: GPU 0's consumer, function (the pattern check linked into the consumer a user's function runs in) or dispatcher (resident_consume)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() != 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case rc.PeerOnly && !o.resident:
		return o, errors.New("-peer-only needs -resident")
	case rc.Repeats < 1:
		return o, fmt.Errorf("-resident-repeats %d: at least 1", rc.Repeats)
	case rc.Peer.Rate <= 0:
		return o, fmt.Errorf("-peer-rate %g: above 0", rc.Peer.Rate)
	case rc.Peer.NSlots < 1 || rc.Peer.Blocks < 1 || rc.Peer.Timeout <= 0:
		return o, fmt.Errorf("-peer-slots %d, -peer-blocks %d, -peer-timeout %v: slots, blocks and a timeout above 0",
			rc.Peer.NSlots, rc.Peer.Blocks, rc.Peer.Timeout)
	case rc.Peer.Consumer != consumerFunction && rc.Peer.Consumer != consumerDispatcher:
		return o, fmt.Errorf("-peer-consumer %q: %s or %s", rc.Peer.Consumer, consumerFunction, consumerDispatcher)
	case rc.Peer.Function != functionPattern && rc.Peer.Function != functionEmpty:
		return o, fmt.Errorf("-peer-function %q: %s or %s", rc.Peer.Function, functionPattern, functionEmpty)
	case rc.Peer.Function == functionEmpty && rc.Peer.Consumer != consumerFunction:
		return o, fmt.Errorf("-peer-function %s runs in the %s consumer, not %s", functionEmpty, consumerFunction, rc.Peer.Consumer)
	case rc.Peer.Word != wordProducer && rc.Peer.Word != wordConsumer:
		return o, fmt.Errorf("-peer-word %q: %s or %s", rc.Peer.Word, wordConsumer, wordProducer)
	case rc.Peer.Rings < 1:
		return o, fmt.Errorf("-peer-rings %d: at least 1", rc.Peer.Rings)
	}
	return o, nil
}

func run(cc compatConfig, compatOnly bool, reps int, out string) error {
	runtime.LockOSThread()
	t0 := time.Now()
	g, err := cuda.OpenDevice(0)
	if err != nil {
		return err
	}
	defer g.Close()
	if err := g.Lock(); err != nil {
		return err
	}
	r := report{GPUStart: nvidiaSMI()}
	if r.machine, err = describe(g, t0); err != nil {
		return err
	}
	r.ClockKHz, _ = g.Attribute(attrClockRate)
	r.MemClockKHz, _ = g.Attribute(attrMemClockRate)
	r.SharedOptin, _ = g.Attribute(cuda.AttrMaxSharedPerBlockOptin)
	r.TotalMem, _ = g.TotalMem()
	r.RDMASupported, _ = g.Attribute(cuda.AttrGPUDirectRDMASupported)
	r.RDMAFlush, _ = g.Attribute(cuda.AttrGPUDirectRDMAFlushWrites)
	r.RDMAOrdering, _ = g.Attribute(cuda.AttrGPUDirectRDMAWritesOrdering)
	r.DmaBufSupport, _ = g.Attribute(cuda.AttrDmaBufSupported)
	if bar, err := g.BAR1(); err == nil {
		r.BAR1Total, r.BAR1Free = bar.Total, bar.Free
	} else {
		fmt.Fprintln(os.Stderr, "gpubench: BAR1:", err)
	}

	const big = 1 << 30
	dst, err := g.Alloc(big)
	if err != nil {
		return err
	}
	defer dst.Free()
	r.AllocAligned64 = dst.Ptr%(64<<10) == 0
	src, err := g.Alloc(big)
	if err != nil {
		return err
	}
	defer src.Free()
	hb, err := g.HostAlloc(big)
	if err != nil {
		return err
	}
	defer hb.Free()
	pattern := hb.Bytes()
	for i := range pattern {
		pattern[i] = byte(i)
	}
	s, err := g.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	start, _ := g.NewEvent()
	end, _ := g.NewEvent()
	timeit := func(n uint64, reps int, op func(off uint64) error) (copyResult, error) {
		if err := op(0); err != nil { // warm up
			return copyResult{}, err
		}
		if err := s.Sync(); err != nil {
			return copyResult{}, err
		}
		start.Record(s)
		for i := range reps {
			if err := op(uint64(i) * n % (big - n + 1)); err != nil {
				return copyResult{}, err
			}
		}
		end.Record(s)
		ms, err := end.Since(start)
		if err != nil {
			return copyResult{}, err
		}
		return copyResult{Bytes: n, Reps: reps, GBps: float64(n) * float64(reps) / (float64(ms) / 1000) / 1e9}, nil
	}
	sizes := []uint64{1 << 20, 4 << 20, 64 << 20, 1 << 30}
	if compatOnly {
		sizes = sizes[3:]
	}
	for _, n := range sizes {
		reps := int(max(4, (4<<30)/n))
		c, err := timeit(n, reps, func(off uint64) error { return s.CopyHtoD(dst.Ptr+off, hb, off, n) })
		if err != nil {
			return err
		}
		r.HtoD = append(r.HtoD, c)
		c, err = timeit(n, reps, func(off uint64) error { return s.CopyDtoD(dst.Ptr+off, src.Ptr+off, n) })
		if err != nil {
			return err
		}
		r.DtoD = append(r.DtoD, c)
	}
	// dma-buf export of a 64 MiB range: its size must match.
	r.DmaBufWant = 64 << 20
	if fd, err := dst.ExportDmabuf(0, 64<<20); err == nil {
		r.DmaBufSize, _ = unix.Seek(fd, 0, 2)
		unix.Close(fd)
	} else {
		fmt.Fprintln(os.Stderr, "gpubench: dma-buf export:", err)
	}
	for _, c := range r.HtoD {
		r.HtoDPeak = max(r.HtoDPeak, c.GBps)
	}
	d2d := r.DtoD[len(r.DtoD)-1] // 1 GiB
	if !compatOnly {
		rd, err := gpucheck.NewReader(g)
		if err != nil {
			return err
		}
		defer rd.Close()
		for _, fs := range []int{4 << 10, 64 << 10, 1 << 20} {
			runs, err := benchChecker(g, s, hb, dst, rd, big, fs, reps, d2d.GBps)
			if err != nil {
				return fmt.Errorf("frame checker, %d-byte frames: %w", fs, err)
			}
			r.Checker = append(r.Checker, runs...)
		}
	}
	// The host is shared: several runs, each with the source's own
	// ceiling measured just before, and their median.
	var ratios []float64
	r.SourceMin = 0
	if cc.workers <= 0 {
		var err error
		if cc.workers, r.Calibration, err = calibrateWorkers(cc, r.HtoDPeak); err != nil {
			return fmt.Errorf("compat path: calibrating the source: %w", err)
		}
	}
	for i := range max(cc.runs, 1) {
		c, err := benchCompat(g, cc, r.HtoDPeak)
		if err != nil {
			return fmt.Errorf("compat path: %w", err)
		}
		r.Compat = append(r.Compat, c)
		ratios = append(ratios, c.RatioToPeak)
		if i == 0 || c.SourceRatio < r.SourceMin {
			r.SourceMin = c.SourceRatio
		}
	}
	r.CompatMedian = median(ratios)
	var rates []float64
	for _, c := range r.Compat {
		rates = append(rates, c.GBps)
	}
	copy64 := func(off uint64) error { return s.CopyHtoD(dst.Ptr+off, hb, off, 64<<20) }
	if r.CopyUnderSource, err = measureCopyUnderSource(cc, median(rates), r.HtoDPeak, func() (float64, error) {
		c, err := timeit(64<<20, 1024, copy64)
		return c.GBps, err
	}); err != nil {
		return fmt.Errorf("compat path: copies under the source's writes: %w", err)
	}
	r.GPUEnd = nvidiaSMI()
	r.Seconds = time.Since(t0).Seconds()

	w := os.Stdout
	if out != "-" {
		f, err := createResult(out, t0, r.Device, r.Build.shortRev())
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
		fmt.Fprintln(os.Stderr, "gpubench:", f.Name())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// cpuModel returns the CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
