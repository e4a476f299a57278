package main

// The GPU-resident benchmark harness (gpubench -resident): pkg/resident's
// consumers against the CPU-driven path and the bare round trips.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/resident"
)

// residentConfig is one measurement pass (measureResident).
type residentConfig struct {
	Sizes        []int         // slot sizes in bytes (default 4 KiB, 64 KiB, 1 MiB)
	NSlots       int           // slots in each ring (default 64)
	Workers      int           // the resident kernel's worker blocks (default 16)
	Duration     time.Duration // each throughput run (default 1 s)
	LatencyFills int           // round trips measured for each path, one fill at a time (default 2000)
	PingPongs    int           // bare round trips and launch+synchronize pairs (default 10000)
	Repeats      int           // runs of each figure, reported as the median and spread (default 5)
	PeerOnly     bool          // the bare round trips and the peer producer alone
	Peer         peerConfig
}

func (c *residentConfig) defaults() {
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
	if c.Repeats <= 0 {
		c.Repeats = 5
	}
	c.Peer.defaults()
}

// residentPass is one pass: the bare round trips, then for each slot size and
// producer the producer alone, the GPU-resident consumer and the
// CPU-driven one on the same ring and producer.
type residentPass struct {
	Config             residentConfig   `json:"config"`
	RDMAWritesOrdering int              `json:"gpudirect_rdma_writes_ordering"`
	RDMAOrderingName   string           `json:"gpudirect_rdma_writes_ordering_name"`
	RDMAFlushOptions   int              `json:"gpudirect_rdma_flush_writes_options"`
	PingPong           resident.Latency `json:"pingpong"`
	LaunchSync         resident.Latency `json:"launch_sync"`
	// PingPongEach and LaunchSyncEach are every repeat; PingPong and
	// LaunchSync the one whose p50 is the median, Baselines the p50s'
	// and p99s' spreads.
	PingPongEach   []resident.Latency `json:"pingpong_each,omitempty"`
	LaunchSyncEach []resident.Latency `json:"launch_sync_each,omitempty"`
	Baselines      map[string]spread  `json:"baselines_median_of_repeats,omitempty"`
	PingPongAfter  resident.Latency   `json:"pingpong_after"`
	Runs           []residentSizeRun  `json:"runs"`
	// Peer is the producer on a second GPU, or why it did not run.
	Peer *peerPass `json:"peer,omitempty"`
}

// residentSizeRun is one slot size and producer.
type residentSizeRun struct {
	SlotBytes int          `json:"slot_bytes"`
	Producer  string       `json:"producer"` // cpu-store or copy-engine
	Slots     string       `json:"slots_in"` // host memory mapped into the GPU, or GPU memory
	Resident  residentPath `json:"gpu_resident"`
	CPUDriven residentPath `json:"cpu_driven"`
	// Ratios against the baselines of the same run.
	ResidentToAlone         float64 `json:"resident_gbps_to_producer_alone"`
	CPUDrivenToAlone        float64 `json:"cpu_driven_gbps_to_producer_alone"`
	ResidentToCPUDriven     float64 `json:"resident_slots_per_s_to_cpu_driven"`
	ResidentRTTToPingPong   float64 `json:"resident_rtt_p50_to_pingpong_p50"`
	ResidentRTT99ToPingPong float64 `json:"resident_rtt_p99_to_pingpong_p99"`
	CPUDrivenRTTToPingPong  float64 `json:"cpu_driven_rtt_p50_to_pingpong_p50"`
	// Repeats is how many times this size and producer ran: the fields
	// above are the run whose resident/alone ratio is the median (the
	// lower middle one for an even count), Each is every run, and Spread
	// each figure's median and range over them, by its JSON path.
	Repeats int               `json:"repeats,omitempty"`
	Spread  map[string]spread `json:"median_of_repeats,omitempty"`
	Each    []residentSizeRun `json:"each,omitempty"`
}

// figures are a run's numbers by their JSON paths, for its spread.
func (x residentSizeRun) figures() map[string]float64 {
	m := map[string]float64{
		"resident_gbps_to_producer_alone":    x.ResidentToAlone,
		"cpu_driven_gbps_to_producer_alone":  x.CPUDrivenToAlone,
		"resident_slots_per_s_to_cpu_driven": x.ResidentToCPUDriven,
		"resident_rtt_p50_to_pingpong_p50":   x.ResidentRTTToPingPong,
		"resident_rtt_p99_to_pingpong_p99":   x.ResidentRTT99ToPingPong,
		"cpu_driven_rtt_p50_to_pingpong_p50": x.CPUDrivenRTTToPingPong,
	}
	for name, p := range map[string]residentPath{"gpu_resident": x.Resident, "cpu_driven": x.CPUDriven} {
		m[name+".producer_alone.slots_per_s"] = p.Alone.PerS
		m[name+".producer_alone.gb_per_s"] = p.Alone.GBps
		m[name+".sustained.slots_per_s"] = p.Throughput.PerS
		m[name+".sustained.gb_per_s"] = p.Throughput.GBps
		m[name+".round_trip.p50_us"] = p.RTT.P50
		m[name+".round_trip.p99_us"] = p.RTT.P99
		m[name+".consumer_cpu_ns_per_slot"] = p.CPUPerSlot
		m[name+".lost"] = float64(p.Lost)
		m[name+".counters.errors"] = float64(p.Counters.Errors)
	}
	return m
}

// combineRuns is repeated runs of one size and producer as one: the
// median run's fields, every run, and each figure's spread.
func combineRuns(each []residentSizeRun) residentSizeRun {
	if len(each) == 0 {
		return residentSizeRun{}
	}
	keys := make([]float64, len(each))
	figs := make([]map[string]float64, len(each))
	for i, x := range each {
		keys[i], figs[i] = x.ResidentToAlone, x.figures()
	}
	out := each[medianIndex(keys)]
	out.Repeats, out.Spread, out.Each = len(each), spreads(figs), each
	return out
}

// residentPath is one consumer on its ring.
type residentPath struct {
	// Results is where the ring's results are: host memory mapped into
	// the GPU, or GPU memory (the GPU-resident path's with the copy
	// engine; the CPU-driven path polls them from the host).
	Results string `json:"results_in"`
	// Alone is the producer on this ring with nothing consuming: its peak.
	Alone      resident.Throughput `json:"producer_alone"`
	Throughput resident.Throughput `json:"sustained"`
	Lost       uint64              `json:"lost"` // produced and not consumed
	Counters   resident.Counters   `json:"counters"`
	// CPUPerSlot is the consumer's host thread's CPU time over the
	// throughput run, per slot, in nanoseconds.
	CPUPerSlot float64          `json:"consumer_cpu_ns_per_slot"`
	RTT        resident.Latency `json:"round_trip"`
}

// measureResident makes one pass with the context current on the calling
// goroutine. Every run's counters must account for every fill with no
// error, or measureResident fails with resident.ErrLost or resident.ErrData.
func measureResident(ctx context.Context, g *cuda.Device, cfg residentConfig) (*residentPass, error) {
	cfg.defaults()
	rep := &residentPass{Config: cfg}
	ord, flush, err := g.RDMAOrdering()
	if err != nil {
		return nil, err
	}
	rep.RDMAWritesOrdering, rep.RDMAOrderingName, rep.RDMAFlushOptions = int(ord), ord.String(), int(flush)
	k, err := resident.LoadKernels(g)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	if _, err := k.PingPong(ctx, g, 1000); err != nil { // warm up
		return nil, fmt.Errorf("ping-pong: %w", err)
	}
	var figs []map[string]float64
	for i := range cfg.Repeats {
		pp, err := k.PingPong(ctx, g, cfg.PingPongs)
		if err != nil {
			return nil, fmt.Errorf("ping-pong, run %d of %d: %w", i+1, cfg.Repeats, err)
		}
		ls, err := k.LaunchSync(g, cfg.PingPongs)
		if err != nil {
			return nil, fmt.Errorf("launch and synchronize, run %d of %d: %w", i+1, cfg.Repeats, err)
		}
		p, l := resident.Summarize(pp), resident.Summarize(ls)
		rep.PingPongEach, rep.LaunchSyncEach = append(rep.PingPongEach, p), append(rep.LaunchSyncEach, l)
		figs = append(figs, map[string]float64{"pingpong.p50_us": p.P50, "pingpong.p99_us": p.P99,
			"launch_sync.p50_us": l.P50, "launch_sync.p99_us": l.P99})
	}
	rep.Baselines = spreads(figs)
	rep.PingPong = medianLatency(rep.PingPongEach)
	rep.LaunchSync = medianLatency(rep.LaunchSyncEach)
	for _, size := range cfg.Sizes {
		for _, where := range []resident.Placement{resident.SlotsHost, resident.SlotsGPU} {
			if cfg.PeerOnly {
				break
			}
			var each []residentSizeRun
			for i := range cfg.Repeats {
				run, err := measureRing(ctx, g, k, cfg, size, where)
				if err != nil {
					return rep, fmt.Errorf("%d-byte slots, %s, run %d of %d: %w", size, run.Producer, i+1, cfg.Repeats, err)
				}
				run.ResidentToAlone = ratio(run.Resident.Throughput.GBps, run.Resident.Alone.GBps)
				run.CPUDrivenToAlone = ratio(run.CPUDriven.Throughput.GBps, run.CPUDriven.Alone.GBps)
				run.ResidentToCPUDriven = ratio(run.Resident.Throughput.PerS, run.CPUDriven.Throughput.PerS)
				run.ResidentRTTToPingPong = ratio(run.Resident.RTT.P50, rep.PingPong.P50)
				run.ResidentRTT99ToPingPong = ratio(run.Resident.RTT.P99, rep.PingPong.P99)
				run.CPUDrivenRTTToPingPong = ratio(run.CPUDriven.RTT.P50, rep.PingPong.P50)
				each = append(each, run)
			}
			rep.Runs = append(rep.Runs, combineRuns(each))
		}
	}
	// The peer producer: recorded as skipped where the machine has no
	// second GPU its first can be a peer of; a failure is the pass's.
	if rep.Peer, err = measurePeer(ctx, g, k, cfg); err != nil {
		return rep, fmt.Errorf("peer producer: %w", err)
	}
	pp, err := k.PingPong(ctx, g, cfg.PingPongs)
	if err != nil {
		return rep, fmt.Errorf("ping-pong after: %w", err)
	}
	rep.PingPongAfter = resident.Summarize(pp)
	return rep, nil
}

func measureRing(ctx context.Context, g *cuda.Device, k *resident.Kernels, cfg residentConfig, size int, where resident.Placement) (run residentSizeRun, err error) {
	run.SlotBytes = size
	run.Producer, run.Slots = "cpu-store", "host memory mapped into the GPU"
	if where == resident.SlotsGPU {
		run.Producer, run.Slots = "copy-engine", "GPU memory"
	}
	gpuResident := func(r *resident.GPURing) (resident.RingConsumer, error) {
		return k.StartResident(g, r, resident.Resident{Workers: cfg.Workers})
	}
	cpu := func(r *resident.GPURing) (resident.RingConsumer, error) { return k.StartCPUDriven(g, r) }
	// The copy engine writes the resident path's results into GPU memory.
	if run.Resident, err = measurePath(ctx, g, cfg, size, where, where == resident.SlotsGPU, gpuResident); err != nil {
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
func measurePath(ctx context.Context, g *cuda.Device, cfg residentConfig, size int, where resident.Placement, resultsInGPU bool,
	start func(*resident.GPURing) (resident.RingConsumer, error)) (path residentPath, err error) {
	r, err := resident.NewGPURing(g, cfg.NSlots, size, where, resultsInGPU)
	if err != nil {
		return path, err
	}
	defer func() { err = errors.Join(err, r.Free()) }()
	path.Results = "host memory mapped into the GPU"
	if resultsInGPU {
		path.Results = "GPU memory"
	}
	var p resident.Producer
	if where == resident.SlotsHost {
		if p, err = resident.NewHostProducer(r.Ring); err != nil {
			return path, err
		}
	} else {
		cp, err := resident.NewCopyProducer(g, r)
		if err != nil {
			return path, err
		}
		defer func() { err = errors.Join(err, cp.Close()) }()
		p = cp
	}
	out, err := resident.Produce(ctx, r.Ring, p, resident.Run{Duration: cfg.Duration, Alone: true})
	if err != nil {
		return path, fmt.Errorf("producer alone: %w", err)
	}
	path.Alone = rate(out.Fills, size, out.Elapsed)
	once := func(run resident.Run) (resident.Produced, resident.Counters, error) {
		if err := r.Reset(); err != nil {
			return resident.Produced{}, resident.Counters{}, err
		}
		c, err := start(r)
		if err != nil {
			return resident.Produced{}, resident.Counters{}, err
		}
		out, perr := resident.Produce(ctx, r.Ring, p, run)
		cnt, cerr := c.Stop()
		if err := errors.Join(perr, cerr); err != nil {
			return out, cnt, err
		}
		switch {
		case cnt.Errors != 0:
			return out, cnt, fmt.Errorf("%w: %d errors, the first at fill %d", resident.ErrData, cnt.Errors, cnt.FirstError-1)
		case cnt.Slots != out.Fills || r.Consumed() != out.Fills:
			return out, cnt, fmt.Errorf("%w: %d fills produced, %d consumed, consumer index %d", resident.ErrLost, out.Fills, cnt.Slots, r.Consumed())
		}
		return out, cnt, nil
	}
	out, cnt, err := once(resident.Run{Duration: cfg.Duration})
	if err != nil {
		return path, err
	}
	path.Throughput = rate(out.Fills, r.SlotSize, out.Elapsed)
	path.Counters, path.Lost = cnt, out.Fills-cnt.Slots
	if out.Fills > 0 {
		path.CPUPerSlot = float64(cnt.CPU.Nanoseconds()) / float64(out.Fills)
	}
	out, _, err = once(resident.Run{Fills: uint64(cfg.LatencyFills), Depth: 1})
	if err != nil {
		return path, fmt.Errorf("round trips: %w", err)
	}
	path.RTT = resident.Summarize(out.RoundTrips)
	return path, nil
}

// rate makes a Throughput of n slots of size bytes in d.
func rate(n uint64, size int, d time.Duration) resident.Throughput {
	t := resident.Throughput{Slots: n, Bytes: n * uint64(size), Seconds: d.Seconds()}
	if d > 0 {
		t.PerS = float64(n) / d.Seconds()
		t.GBps = float64(t.Bytes) / d.Seconds() / 1e9
	}
	return t
}

// ratio is a/b, 0 where b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// medianLatency is the summary whose p50 is the median of ls's.
func medianLatency(ls []resident.Latency) resident.Latency {
	p50 := make([]float64, len(ls))
	for i, l := range ls {
		p50[i] = l.P50
	}
	if i := medianIndex(p50); i >= 0 {
		return ls[i]
	}
	return resident.Latency{}
}
