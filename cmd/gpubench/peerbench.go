package main

// The peer producer's part of gpubench -resident: GPU 1 writes a ring in
// GPU 0's memory as an FPGA does, the production resident consumer runs
// on GPU 0, and the bare round trip between the two GPUs is the baseline.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/resident"
)

// peerConfig is the peer producer's part of a pass.
type peerConfig struct {
	NSlots int // slots in each peer ring (default defaultPeerSlots)
	// Blocks is how many fills the producer writes at once, at most
	// the ring's slots (default defaultPeerBlocks).
	Blocks int
	// Rate is the throttled producer's fills per second (default 12.5 M:
	// 4 KiB slots at 51 GB/s, PCIe Gen5 x16's payload), for slots of up
	// to ThrottledBytes (default 4 KiB); larger ones run unthrottled.
	Rate           float64
	ThrottledBytes int
	Timeout        time.Duration // each wait of the peer kernels (default 2 s)
	// Consumer is GPU 0's consumer: "function", the consumer a user's
	// function is linked into (the header's kernel: each worker polls
	// its fill's result), running the pattern check as a linked
	// function; or "dispatcher", resident_consume (one warp polls the
	// results and hands fills to the workers).
	Consumer string
	// Function is what the function consumer runs on each fill:
	// "pattern", the pattern check, every word of the slot; or "empty",
	// a function that reads nothing, for what the consumer costs on
	// its own (-peer-function).
	Function string
	// Word is where each ring's consumer word is (-peer-word):
	// "consumer" (the default), GPU 0's memory, which the producer reads
	// across the link, a read at a time (about 0.93 µs each), so a count
	// is seen up to a read late; or "producer", GPU 1's, which the
	// consumer writes across the link as GPU 0 answers the ping-pong, and
	// the producer polls locally. The producer's memory takes 0.04 off
	// the round trip's ratio to the ping-pong but two rings' consumers,
	// each publishing across the link, took 1.59 of one ring at 4 KiB
	// where GPU 0's took 1.92.
	Word string
	// Rings is how many rings run at once, each with its consumer and
	// its producer, at the smallest slot size (-peer-rings, 2; 1 or 0:
	// none). Every kernel of theirs must be resident at once: the
	// rings' consumers take Rings * (Workers + 1) blocks of GPU 0.
	Rings int
}

// emptyFuncPTX is empty_func.cu as `make ptx` compiled it.
//
//go:embed empty_func.ptx
var emptyFuncPTX []byte

// A peer ring's slots, and the fills its producer writes at once. 256
// slots of 64 KiB held the consumer to 0.93 of the producer alone: fills
// are published in order, each waiting for the slowest worker before it,
// and 256 of them are 45 µs of the link. Writing as many fills at once
// as 1024 slots, two rings' producers did not fit on GPU 1 together,
// and one ring starved.
const (
	defaultPeerSlots  = 1024
	defaultPeerBlocks = 256
)

// Where the consumer word is (-peer-word).
const (
	wordProducer = "producer"
	wordConsumer = "consumer"
)

// The function consumer's functions (-peer-function).
const (
	functionPattern = "pattern"
	functionEmpty   = "empty"
)

// The peer pass's consumers.
const (
	consumerFunction   = "function"
	consumerDispatcher = "dispatcher"
)

func (c *peerConfig) defaults() {
	if c.NSlots <= 0 {
		c.NSlots = defaultPeerSlots
	}
	if c.Blocks <= 0 {
		c.Blocks = defaultPeerBlocks
	}
	if c.Rate <= 0 {
		c.Rate = 12.5e6
	}
	if c.ThrottledBytes <= 0 {
		c.ThrottledBytes = 4 << 10
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Consumer == "" {
		c.Consumer = consumerFunction
	}
	if c.Function == "" {
		c.Function = functionPattern
	}
	if c.Word == "" {
		c.Word = wordConsumer
	}
}

// startConsumer starts GPU 0's consumer on a ring; stop waits until the
// consumer has published fills (bounded) and stops it.
type startConsumer func(r *resident.GPURing) (stop func(fills uint64) (resident.Counters, error), err error)

// peerConsumer returns the pass's consumer, linking the pattern function
// if it runs one (before any kernel runs: loading waits for them).
func peerConsumer(ctx context.Context, g0 *cuda.Device, k *resident.Kernels, cfg residentConfig) (startConsumer, func() error, error) {
	switch cfg.Peer.Consumer {
	case consumerDispatcher:
		return func(r *resident.GPURing) (func(uint64) (resident.Counters, error), error) {
			c, err := k.StartResident(g0, r, resident.Resident{Workers: cfg.Workers})
			if err != nil {
				return nil, err
			}
			return func(uint64) (resident.Counters, error) { return c.Stop() }, nil
		}, func() error { return nil }, nil
	case consumerFunction:
		name, ptx := "pattern_func.ptx", resident.PatternFuncPTX
		if cfg.Peer.Function == functionEmpty {
			name, ptx = "empty_func.ptx", emptyFuncPTX
		}
		f, err := resident.LinkFunc(g0, name, ptx)
		if err != nil {
			return nil, nil, err
		}
		return func(r *resident.GPURing) (func(uint64) (resident.Counters, error), error) {
			state := resident.PatternState(r.NSrc, r.SlotSize)
			// The consumer word is GPU 0's memory: read by a copy on
			// the legacy stream, which the consumer's does not hold.
			// Stop's goroutine reads it; a failed read is Stop's error.
			var readErr error
			published := func() uint64 {
				n, err := r.ConsumedIndex()
				if err != nil && readErr == nil {
					readErr = fmt.Errorf("reading the consumer index: %w", err)
				}
				return n
			}
			c, err := f.Start(g0, resident.StreamRing{Slots: r.SlotsDev, SlotSize: r.SlotSize, NSlots: r.NSlots,
				Results: r.ResultsDev, Consumer: r.ConsumerDev, Published: published},
				resident.FuncConfig{Workers: cfg.Workers, State: state})
			if err != nil {
				return nil, err
			}
			return func(fills uint64) (resident.Counters, error) {
				ctx, cancel := context.WithTimeout(ctx, cfg.Peer.Timeout)
				defer cancel()
				cnt, err := c.Stop(ctx, fills)
				// Stop has stopped the kernel once it returns: one
				// that did not publish every fill in time lost them.
				if readErr != nil {
					return cnt, readErr
				}
				if errors.Is(err, resident.ErrStalled) {
					return cnt, fmt.Errorf("%w: %v", resident.ErrLost, err)
				}
				return cnt, err
			}, nil
		}, f.Close, nil
	}
	return nil, nil, fmt.Errorf("peer consumer %q: %q or %q", cfg.Peer.Consumer, consumerFunction, consumerDispatcher)
}

// The goals of issue 38 for the peer producer.
const (
	goalConsumerToProducer = 0.95 // consumer over producer (throttled where throttled)
	goalRTTToPingPong      = 1.5  // round trip p50 over the bare peer ping-pong's
)

// peerPass is the peer producer's measurements, or why there are none.
type peerPass struct {
	// Skipped says why the machine has no peer producer (one GPU, no
	// peer access); Error what failed where it had one.
	Skipped     string  `json:"skipped,omitempty"`
	Error       string  `json:"error,omitempty"`
	ProducerGPU int     `json:"producer_gpu"`
	ConsumerGPU int     `json:"consumer_gpu"`
	NSlots      int     `json:"slots_per_ring"`
	Consumer    string  `json:"consumer"`
	Function    string  `json:"function,omitempty"` // the function consumer's
	Word        string  `json:"consumer_word"`      // whose memory holds it: producer or consumer
	Rate        float64 `json:"throttled_rate_slots_per_s"`
	// PingPong is each repeat's bare peer round trips (GPU 1 stores into
	// GPU 0's memory, GPU 0 answers into GPU 1's, timed on GPU 1 by the
	// clock Timer names), and PingPongSpread their p50 and p99 over the
	// repeats; PingPongGlobaltimer the same round trips by %globaltimer.
	PingPong            []resident.Latency `json:"pingpong_each,omitempty"`
	PingPongGlobaltimer []resident.Latency `json:"pingpong_globaltimer_each,omitempty"`
	PingPongSpread      map[string]spread  `json:"pingpong,omitempty"`
	// Timer is the clock of the round trips and the ping-pong: "sm
	// clock" (%clock64 of the one multiprocessor that times them, in ns
	// by %globaltimer over the whole kernel) where the run gave one, else
	// "globaltimer", which may tick in whole microseconds.
	Timer string        `json:"round_trip_timer,omitempty"`
	Runs  []peerSizeRun `json:"runs,omitempty"`
	// Beside is several rings consumed at once on GPU 0.
	Beside *peerBeside `json:"beside,omitempty"`
	Goals  []goal      `json:"goals,omitempty"`
}

// peerSizeRun is one slot size's repeats.
type peerSizeRun struct {
	SlotBytes int `json:"slot_bytes"`
	// Throttled: the consumer ran against the producer paced to Rate,
	// and is compared with that producer alone.
	Throttled bool              `json:"throttled"`
	Spread    map[string]spread `json:"median_of_repeats"`
	Each      []peerRepeat      `json:"each"`
}

// peerRepeat is one run of every figure of a slot size, each rate timed
// on GPU 1's clock: from the producer's start until the last fill was
// written (alone) or consumed.
type peerRepeat struct {
	Blocks         int                  `json:"producer_blocks"`
	AloneMax       resident.Throughput  `json:"producer_alone_unthrottled"`
	AloneThrottled *resident.Throughput `json:"producer_alone_throttled,omitempty"`
	// Consumer is the resident consumer on GPU 0 against the producer,
	// throttled where Throttled; ConsumerMax against it unthrottled.
	Consumer    resident.Throughput  `json:"consumer"`
	ConsumerMax *resident.Throughput `json:"consumer_unthrottled,omitempty"`
	Counters    resident.Counters    `json:"counters"`
	// Lost and Errors are summed over every consumer run of the repeat
	// (throughput, unthrottled, round trips): any of them fails the pass.
	Lost   uint64 `json:"lost"`
	Errors uint64 `json:"errors"`
	// RTT is depth 1: fill k's result written to GPU 1 seeing the
	// consumer index past k, by the pass's Timer; RTTGlobaltimer by
	// %globaltimer.
	RTT            resident.Latency `json:"round_trip"`
	RTTGlobaltimer resident.Latency `json:"round_trip_globaltimer"`
	Timer          string           `json:"round_trip_timer"` // RTT's clock, the pass's unless its run gave none
	// RTTHeadPublished is how many of the round trips' fills their own
	// worker published (the function consumer only).
	RTTHeadPublished uint64  `json:"round_trip_head_published,omitempty"`
	ConsumerToAlone  float64 `json:"consumer_to_producer_alone"`
	RTTToPingPong    float64 `json:"round_trip_p50_to_pingpong_p50"`
	RTT99ToPingPong  float64 `json:"round_trip_p99_to_pingpong_p99"`
}

// figures are a repeat's numbers by their JSON paths, for the spread.
func (x peerRepeat) figures() map[string]float64 {
	m := map[string]float64{
		"producer_alone_unthrottled.slots_per_s": x.AloneMax.PerS,
		"producer_alone_unthrottled.gb_per_s":    x.AloneMax.GBps,
		"consumer.slots_per_s":                   x.Consumer.PerS,
		"consumer.gb_per_s":                      x.Consumer.GBps,
		"round_trip.p50_us":                      x.RTT.P50,
		"round_trip.p99_us":                      x.RTT.P99,
		"consumer_to_producer_alone":             x.ConsumerToAlone,
		"round_trip_p50_to_pingpong_p50":         x.RTTToPingPong,
		"round_trip_p99_to_pingpong_p99":         x.RTT99ToPingPong,
		"lost":                                   float64(x.Lost),
		"errors":                                 float64(x.Errors),
	}
	if t := x.AloneThrottled; t != nil {
		m["producer_alone_throttled.slots_per_s"], m["producer_alone_throttled.gb_per_s"] = t.PerS, t.GBps
	}
	if t := x.ConsumerMax; t != nil {
		m["consumer_unthrottled.slots_per_s"], m["consumer_unthrottled.gb_per_s"] = t.PerS, t.GBps
	}
	return m
}

// goal is one of the goals: the figure over the repeats, and
// whether its median meets it.
type goal struct {
	Name     string  `json:"name"`
	Measured spread  `json:"measured"`
	Goal     float64 `json:"goal"`
	AtMost   bool    `json:"at_most"` // the goal bounds the figure from above
	Met      bool    `json:"met"`
}

// noneGoal is a count that must be 0 in every repeat: met only if the
// largest is.
func noneGoal(name string, xs []float64) goal {
	g := newGoal(name, xs, 0, true)
	g.Met = len(xs) > 0 && g.Measured.Max == 0
	return g
}

// lostOrBad reports a run that ended on a lost fill or a check error,
// whose figures still count.
func lostOrBad(err error) bool {
	return errors.Is(err, resident.ErrLost) || errors.Is(err, resident.ErrData)
}

func newGoal(name string, xs []float64, bound float64, atMost bool) goal {
	g := goal{Name: name, Measured: spreadOf(xs), Goal: bound, AtMost: atMost}
	if len(xs) > 0 {
		g.Met = g.Measured.Median >= bound
		if atMost {
			g.Met = g.Measured.Median <= bound
		}
	}
	return g
}

// goals computes the goals from the runs: at throttled sizes the
// consumer over the throttled producer alone, at the others over the
// producer alone; the smallest size's round trip p50 over the bare peer
// ping-pong's; no lost slot and no check error in any run.
func (p *peerPass) goals() []goal {
	var out []goal
	var lost, errs []float64
	for i, r := range p.Runs {
		var ratios, rtts []float64
		for _, x := range r.Each {
			ratios = append(ratios, x.ConsumerToAlone)
			rtts = append(rtts, x.RTTToPingPong)
			lost, errs = append(lost, float64(x.Lost)), append(errs, float64(x.Errors))
		}
		name := fmt.Sprintf("%d-byte slots: consumer slots/s over the producer alone", r.SlotBytes)
		if r.Throttled {
			name = fmt.Sprintf("%d-byte slots: consumer slots/s over the producer alone throttled to %.4g slots/s", r.SlotBytes, p.Rate)
		}
		out = append(out, newGoal(name, ratios, goalConsumerToProducer, false))
		if i == 0 {
			out = append(out, newGoal(fmt.Sprintf("%d-byte slots: round trip p50 over the bare peer ping-pong p50", r.SlotBytes),
				rtts, goalRTTToPingPong, true))
		}
	}
	if p.Beside != nil {
		for _, x := range p.Beside.Each {
			lost, errs = append(lost, float64(x.Lost)), append(errs, float64(x.Errors))
		}
	}
	return append(out, noneGoal("lost slots in each repeat", lost), noneGoal("check errors in each repeat", errs))
}

// judge sets the pass's goals from what it ran. The goals are for
// a consumer running a real function: an empty one's figures are a
// diagnosis, and no goal is judged on them.
func (p *peerPass) judge() {
	if (len(p.Runs) > 0 || p.Beside != nil) && p.Function != functionEmpty {
		p.Goals = p.goals()
	}
}

// measurePeer runs the peer producer's part of a pass with GPU 0's
// context current: skipped, and said why, where GPU 0 has no peer GPU 1.
func measurePeer(ctx context.Context, g0 *cuda.Device, k *resident.Kernels, cfg residentConfig) (*peerPass, error) {
	p := &peerPass{ProducerGPU: 1, ConsumerGPU: 0, NSlots: cfg.Peer.NSlots, Rate: cfg.Peer.Rate, Consumer: cfg.Peer.Consumer, Word: cfg.Peer.Word}
	if p.Consumer == consumerFunction {
		p.Function = cfg.Peer.Function
	}
	err := p.measure(ctx, g0, k, cfg)
	p.judge()
	if err != nil {
		p.Error = err.Error()
	}
	return p, err
}

// stuck reports a peer kernel still running past every bound of its own:
// freeing its memory, unloading its module or releasing its GPU would
// wait for it, so the pass leaves them to the process's exit.
func stuck(err error) bool { return errors.Is(err, resident.ErrStalled) }

func (p *peerPass) measure(ctx context.Context, g0 *cuda.Device, k *resident.Kernels, cfg residentConfig) (err error) {
	drv := g0.Driver()
	n, err := drv.DeviceCount()
	if err != nil {
		return fmt.Errorf("counting the GPUs: %w", err)
	}
	if n < 2 {
		p.Skipped = fmt.Sprintf("%d GPU: the peer producer needs a second", n)
		return nil
	}
	g1, err := drv.Device(1)
	if err != nil {
		return fmt.Errorf("GPU 1's context: %w", err)
	}
	defer func() {
		if !stuck(err) {
			g1.Close()
		}
	}()
	can10, err := g1.CanAccessPeer(g0)
	if err != nil {
		return fmt.Errorf("whether GPU 1 can reach GPU 0: %w", err)
	}
	can01, err := g0.CanAccessPeer(g1)
	if err != nil {
		return fmt.Errorf("whether GPU 0 can reach GPU 1: %w", err)
	}
	if !can10 || !can01 {
		p.Skipped = fmt.Sprintf("cuDeviceCanAccessPeer: GPU 1 to GPU 0 %v, GPU 0 to GPU 1 %v: the GPUs are not peers", can10, can01)
		return nil
	}
	if err := g1.EnablePeerAccess(g0); err != nil {
		return fmt.Errorf("enabling GPU 1's access to GPU 0: %w", err)
	}
	if err := g0.EnablePeerAccess(g1); err != nil {
		return fmt.Errorf("enabling GPU 0's access to GPU 1: %w", err)
	}
	pk, err := resident.LoadPeer(g1, g0)
	if err != nil {
		return err
	}
	defer func() {
		if !stuck(err) {
			pk.Close()
		}
	}()
	start, unload, err := peerConsumer(ctx, g0, k, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if !stuck(err) {
			unload()
		}
	}()
	if _, _, err := pk.PingPong(ctx, 1000, cfg.Peer.Timeout); err != nil { // warm up
		return fmt.Errorf("peer ping-pong, warming up: %w", err)
	}
	var p50s, p99s []float64
	p.Timer = "sm clock"
	for i := range cfg.Repeats {
		ns, clock, err := pk.PingPong(ctx, cfg.PingPongs, cfg.Peer.Timeout)
		if err != nil {
			return fmt.Errorf("peer ping-pong, run %d of %d: %w", i+1, cfg.Repeats, err)
		}
		if clock == nil {
			p.Timer = "globaltimer"
		}
		p.PingPongGlobaltimer = append(p.PingPongGlobaltimer, resident.Summarize(ns))
		p.PingPong = append(p.PingPong, resident.Summarize(clock))
	}
	if p.Timer == "globaltimer" {
		p.PingPong = p.PingPongGlobaltimer
	}
	for _, l := range p.PingPong {
		p50s, p99s = append(p50s, l.P50), append(p99s, l.P99)
	}
	p.PingPongSpread = map[string]spread{"p50_us": spreadOf(p50s), "p99_us": spreadOf(p99s)}
	pp50, pp99 := median(p50s), median(p99s)
	word := g0
	if cfg.Peer.Word == wordProducer {
		word = g1
	}
	for _, size := range cfg.Sizes {
		run, err := measurePeerSize(ctx, g0, word, start, pk, cfg, size, pp50, pp99, p.Timer == "sm clock")
		if len(run.Each) > 0 {
			p.Runs = append(p.Runs, run) // a failed size's runs before the failure too
		}
		if err != nil {
			return fmt.Errorf("%d-byte slots: %w", size, err)
		}
	}
	if cfg.Peer.Rings > 1 && len(cfg.Sizes) > 0 {
		b, err := measureBeside(ctx, g0, word, start, pk, cfg, cfg.Sizes[0])
		if len(b.Each) > 0 {
			p.Beside = &b
		}
		if err != nil {
			return fmt.Errorf("%d rings at once: %w", cfg.Peer.Rings, err)
		}
	}
	return nil
}

// measurePeerSize makes a ring of size-byte slots in GPU 0's memory (its
// consumer word in word's) and
// measures it cfg.Repeats times: the producer alone, the consumer against
// it, and the round trips one fill at a time.
func measurePeerSize(ctx context.Context, g0, word *cuda.Device, start startConsumer, pk *resident.PeerKernels, cfg residentConfig,
	size int, pp50, pp99 float64, smClock bool) (run peerSizeRun, err error) {
	r, err := resident.NewPeerRing(g0, word, cfg.Peer.NSlots, size)
	if err != nil {
		return run, fmt.Errorf("the ring in GPU 0's memory: %w", err)
	}
	run = peerSizeRun{SlotBytes: size, Throttled: size <= cfg.Peer.ThrottledBytes}
	var figs []map[string]float64
	defer func() {
		run.Spread = spreads(figs)
		if !stuck(err) {
			err = errors.Join(err, r.Free())
		}
	}()
	base := resident.PeerRun{Duration: cfg.Duration, Blocks: cfg.Peer.Blocks, Timeout: cfg.Peer.Timeout}
	alone := func(pace float64) (resident.Throughput, int, error) {
		if err := r.Reset(); err != nil {
			return resident.Throughput{}, 0, fmt.Errorf("resetting the ring: %w", err)
		}
		pr := base
		pr.Alone, pr.Rate = true, pace
		out, err := pk.Produce(ctx, r, pr)
		return rate(out.Fills, size, out.Elapsed), out.Blocks, err
	}
	for i := range cfg.Repeats {
		x, err := measurePeerRepeat(ctx, start, pk, r, cfg, base, run.Throttled, smClock, alone)
		if lostOrBad(err) {
			// Kept: the goals count what was lost.
			run.Each = append(run.Each, x)
			figs = append(figs, x.figures())
		}
		if err != nil {
			return run, fmt.Errorf("run %d of %d: %w", i+1, cfg.Repeats, err)
		}
		x.RTTToPingPong, x.RTT99ToPingPong = ratio(x.RTT.P50, pp50), ratio(x.RTT.P99, pp99)
		run.Each = append(run.Each, x)
		figs = append(figs, x.figures())
	}
	return run, nil
}

func measurePeerRepeat(ctx context.Context, start startConsumer, pk *resident.PeerKernels, r *resident.GPURing,
	cfg residentConfig, base resident.PeerRun, throttled, smClock bool,
	alone func(pace float64) (resident.Throughput, int, error)) (x peerRepeat, err error) {
	size := r.SlotSize
	if x.AloneMax, x.Blocks, err = alone(0); err != nil {
		return x, fmt.Errorf("producer alone, unthrottled: %w", err)
	}
	pace := 0.0
	if throttled {
		pace = cfg.Peer.Rate
		t, _, err := alone(pace)
		if err != nil {
			return x, fmt.Errorf("producer alone, throttled to %.4g slots/s: %w", pace, err)
		}
		x.AloneThrottled = &t
	}
	consume := func(pr resident.PeerRun) (resident.PeerProduced, error) {
		if err := r.Reset(); err != nil {
			return resident.PeerProduced{}, fmt.Errorf("resetting the ring: %w", err)
		}
		stop, err := start(r)
		if err != nil {
			return resident.PeerProduced{}, fmt.Errorf("starting the consumer on GPU 0: %w", err)
		}
		out, perr := pk.Produce(ctx, r, pr)
		cnt, cerr := stop(out.Fills)
		if cerr != nil {
			cerr = fmt.Errorf("the consumer on GPU 0: %w", cerr)
		}
		if err := errors.Join(perr, cerr); err != nil {
			return out, err
		}
		consumed, err := r.ConsumedIndex()
		if err != nil {
			return out, fmt.Errorf("reading the consumer index: %w", err)
		}
		x.Counters = cnt
		x.Lost += out.Fills - min(cnt.Slots, out.Fills)
		x.Errors += cnt.Errors
		switch {
		case cnt.Errors != 0:
			return out, fmt.Errorf("%w: %d errors, the first at fill %d", resident.ErrData, cnt.Errors, cnt.FirstError-1)
		case cnt.Slots != out.Fills || consumed != out.Fills:
			return out, fmt.Errorf("%w: %d fills produced, %d consumed, consumer index %d", resident.ErrLost, out.Fills, cnt.Slots, consumed)
		}
		return out, nil
	}
	pr := base
	pr.Rate = pace
	out, err := consume(pr)
	if err != nil {
		return x, fmt.Errorf("consumer against the producer at %.4g slots/s (0: unthrottled): %w", pace, err)
	}
	x.Consumer = rate(out.Fills, size, out.Elapsed)
	counters := x.Counters
	if throttled {
		out, err := consume(base)
		if err != nil {
			return x, fmt.Errorf("consumer against the producer unthrottled: %w", err)
		}
		t := rate(out.Fills, size, out.Elapsed)
		x.ConsumerMax = &t
	}
	alonePerS := x.AloneMax.PerS
	if x.AloneThrottled != nil {
		alonePerS = x.AloneThrottled.PerS
	}
	x.ConsumerToAlone = ratio(x.Consumer.PerS, alonePerS)
	out, err = consume(resident.PeerRun{Fills: uint64(cfg.LatencyFills), Depth1: true, Timeout: cfg.Peer.Timeout})
	if err != nil {
		return x, fmt.Errorf("round trips, one fill at a time: %w", err)
	}
	x.RTTGlobaltimer = resident.Summarize(out.RoundTrips)
	x.RTT, x.Timer = x.RTTGlobaltimer, "globaltimer"
	if smClock && out.RoundTripsClock != nil {
		x.RTT, x.Timer = resident.Summarize(out.RoundTripsClock), "sm clock"
	}
	// Fills published by their own worker, where the consumer counts them.
	x.RTTHeadPublished = x.Counters.HeadPublished
	x.Counters = counters // the throughput run's
	return x, nil
}
