//go:build linux

package resident

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// Config is one measurement pass (Measure).
type Config struct {
	Sizes        []int         // slot sizes in bytes (default 4 KiB, 64 KiB, 1 MiB)
	NSlots       int           // slots in each ring (default 64)
	Workers      int           // the resident kernel's worker blocks (default 16)
	Duration     time.Duration // each throughput run (default 1 s)
	LatencyFills int           // round trips measured for each path, one fill at a time (default 2000)
	PingPongs    int           // bare round trips and launch+synchronize pairs (default 10000)
}

func (c *Config) defaults() {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{4 << 10, 64 << 10, 1 << 20}
	}
	if c.NSlots <= 0 {
		c.NSlots = 64
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.LatencyFills <= 0 {
		c.LatencyFills = 2000
	}
	if c.PingPongs <= 0 {
		c.PingPongs = 10000
	}
}

// Report is one pass: the bare round trips, then for each slot size and
// producer the producer alone, the GPU-resident consumer and the
// CPU-driven one on the same ring and producer.
type Report struct {
	Config             Config    `json:"config"`
	RDMAWritesOrdering int       `json:"gpudirect_rdma_writes_ordering"`
	RDMAOrderingName   string    `json:"gpudirect_rdma_writes_ordering_name"`
	RDMAFlushOptions   int       `json:"gpudirect_rdma_flush_writes_options"`
	PingPong           Latency   `json:"pingpong"`
	LaunchSync         Latency   `json:"launch_sync"`
	PingPongAfter      Latency   `json:"pingpong_after"`
	Runs               []SizeRun `json:"runs"`
}

// SizeRun is one slot size and producer.
type SizeRun struct {
	SlotBytes int    `json:"slot_bytes"`
	Producer  string `json:"producer"` // cpu-store or copy-engine
	Slots     string `json:"slots_in"` // host memory mapped into the GPU, or GPU memory
	Resident  Path   `json:"gpu_resident"`
	CPUDriven Path   `json:"cpu_driven"`
	// Ratios against the baselines of the same run.
	ResidentToAlone         float64 `json:"resident_gbps_to_producer_alone"`
	CPUDrivenToAlone        float64 `json:"cpu_driven_gbps_to_producer_alone"`
	ResidentToCPUDriven     float64 `json:"resident_slots_per_s_to_cpu_driven"`
	ResidentRTTToPingPong   float64 `json:"resident_rtt_p50_to_pingpong_p50"`
	ResidentRTT99ToPingPong float64 `json:"resident_rtt_p99_to_pingpong_p99"`
	CPUDrivenRTTToPingPong  float64 `json:"cpu_driven_rtt_p50_to_pingpong_p50"`
}

// Path is one consumer on its ring.
type Path struct {
	// Results is where the ring's results are: host memory mapped into
	// the GPU, or GPU memory (the GPU-resident path's with the copy
	// engine; the CPU-driven path polls them from the host).
	Results string `json:"results_in"`
	// Alone is the producer on this ring with nothing consuming: its peak.
	Alone      Throughput `json:"producer_alone"`
	Throughput Throughput `json:"sustained"`
	Lost       uint64     `json:"lost"` // produced and not consumed
	Counters   Counters   `json:"counters"`
	// CPUPerSlot is the consumer's host thread's CPU time over the
	// throughput run, per slot, in nanoseconds.
	CPUPerSlot float64 `json:"consumer_cpu_ns_per_slot"`
	RTT        Latency `json:"round_trip"`
}

// Measure makes one pass with the context current on the calling
// goroutine. Every run's counters must account for every fill with no
// error, or Measure fails with ErrLost or ErrData.
func Measure(ctx context.Context, g *cuda.Device, cfg Config) (*Report, error) {
	cfg.defaults()
	rep := &Report{Config: cfg}
	ord, flush, err := g.RDMAOrdering()
	if err != nil {
		return nil, err
	}
	rep.RDMAWritesOrdering, rep.RDMAOrderingName, rep.RDMAFlushOptions = int(ord), ord.String(), int(flush)
	k, err := LoadKernels(g)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	if _, err := k.PingPong(ctx, g, 1000); err != nil { // warm up
		return nil, fmt.Errorf("ping-pong: %w", err)
	}
	pp, err := k.PingPong(ctx, g, cfg.PingPongs)
	if err != nil {
		return nil, fmt.Errorf("ping-pong: %w", err)
	}
	rep.PingPong = Summarize(pp)
	ls, err := k.LaunchSync(g, cfg.PingPongs)
	if err != nil {
		return nil, fmt.Errorf("launch and synchronize: %w", err)
	}
	rep.LaunchSync = Summarize(ls)
	for _, size := range cfg.Sizes {
		for _, where := range []Placement{SlotsHost, SlotsGPU} {
			run, err := measureRing(ctx, g, k, cfg, size, where)
			if err != nil {
				return rep, fmt.Errorf("%d-byte slots, %s: %w", size, run.Producer, err)
			}
			run.ResidentToAlone = ratio(run.Resident.Throughput.GBps, run.Resident.Alone.GBps)
			run.CPUDrivenToAlone = ratio(run.CPUDriven.Throughput.GBps, run.CPUDriven.Alone.GBps)
			run.ResidentToCPUDriven = ratio(run.Resident.Throughput.PerS, run.CPUDriven.Throughput.PerS)
			run.ResidentRTTToPingPong = ratio(run.Resident.RTT.P50, rep.PingPong.P50)
			run.ResidentRTT99ToPingPong = ratio(run.Resident.RTT.P99, rep.PingPong.P99)
			run.CPUDrivenRTTToPingPong = ratio(run.CPUDriven.RTT.P50, rep.PingPong.P50)
			rep.Runs = append(rep.Runs, run)
		}
	}
	if pp, err = k.PingPong(ctx, g, cfg.PingPongs); err != nil {
		return rep, fmt.Errorf("ping-pong: %w", err)
	}
	rep.PingPongAfter = Summarize(pp)
	return rep, nil
}

func measureRing(ctx context.Context, g *cuda.Device, k *Kernels, cfg Config, size int, where Placement) (run SizeRun, err error) {
	run.SlotBytes = size
	run.Producer, run.Slots = "cpu-store", "host memory mapped into the GPU"
	if where == SlotsGPU {
		run.Producer, run.Slots = "copy-engine", "GPU memory"
	}
	resident := func(r *GPURing) (RingConsumer, error) { return k.StartResident(g, r, Resident{Workers: cfg.Workers}) }
	cpu := func(r *GPURing) (RingConsumer, error) { return k.StartCPUDriven(g, r) }
	// The copy engine writes the resident path's results into GPU memory.
	if run.Resident, err = measurePath(ctx, g, cfg, size, where, where == SlotsGPU, resident); err != nil {
		return run, fmt.Errorf("GPU-resident: %w", err)
	}
	if run.CPUDriven, err = measurePath(ctx, g, cfg, size, where, false, cpu); err != nil {
		return run, fmt.Errorf("CPU-driven: %w", err)
	}
	return run, nil
}

// measurePath makes a ring and its producer and measures the producer
// alone, then the consumer twice: sustained, and one fill at a time for
// the round trips.
func measurePath(ctx context.Context, g *cuda.Device, cfg Config, size int, where Placement, resultsInGPU bool,
	start func(*GPURing) (RingConsumer, error)) (path Path, err error) {
	r, err := NewGPURing(g, cfg.NSlots, size, where, resultsInGPU)
	if err != nil {
		return path, err
	}
	defer func() { err = errors.Join(err, r.Free()) }()
	path.Results = "host memory mapped into the GPU"
	if resultsInGPU {
		path.Results = "GPU memory"
	}
	var p Producer
	if where == SlotsHost {
		if p, err = NewHostProducer(r.Ring); err != nil {
			return path, err
		}
	} else {
		cp, err := NewCopyProducer(g, r)
		if err != nil {
			return path, err
		}
		defer func() { err = errors.Join(err, cp.Close()) }()
		p = cp
	}
	out, err := Produce(ctx, r.Ring, p, Run{Duration: cfg.Duration, Alone: true})
	if err != nil {
		return path, fmt.Errorf("producer alone: %w", err)
	}
	path.Alone = rate(out.Fills, size, out.Elapsed)
	once := func(run Run) (Produced, Counters, error) {
		if err := r.Reset(); err != nil {
			return Produced{}, Counters{}, err
		}
		c, err := start(r)
		if err != nil {
			return Produced{}, Counters{}, err
		}
		out, perr := Produce(ctx, r.Ring, p, run)
		cnt, cerr := c.Stop()
		if err := errors.Join(perr, cerr); err != nil {
			return out, cnt, err
		}
		switch {
		case cnt.Errors != 0:
			return out, cnt, fmt.Errorf("%w: %d errors, the first at fill %d", ErrData, cnt.Errors, cnt.FirstError-1)
		case cnt.Slots != out.Fills || r.Consumed() != out.Fills:
			return out, cnt, fmt.Errorf("%w: %d fills produced, %d consumed, consumer index %d", ErrLost, out.Fills, cnt.Slots, r.Consumed())
		}
		return out, cnt, nil
	}
	out, cnt, err := once(Run{Duration: cfg.Duration})
	if err != nil {
		return path, err
	}
	path.Throughput = rate(out.Fills, r.SlotSize, out.Elapsed)
	path.Counters, path.Lost = cnt, out.Fills-cnt.Slots
	if out.Fills > 0 {
		path.CPUPerSlot = float64(cnt.CPU.Nanoseconds()) / float64(out.Fills)
	}
	out, _, err = once(Run{Fills: uint64(cfg.LatencyFills), Depth: 1})
	if err != nil {
		return path, fmt.Errorf("round trips: %w", err)
	}
	path.RTT = Summarize(out.RoundTrips)
	return path, nil
}
