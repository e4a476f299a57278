package main

// Several resident channels on one GPU: each ring in GPU 0's memory with
// a consumer of its own, all from one loaded consumer, and a producer of
// its own on GPU 1, all at once.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/resident"
)

// peerBeside is Rings rings consumed at once, unthrottled, against one
// ring alone in the same repeat.
type peerBeside struct {
	Rings     int               `json:"rings"`
	SlotBytes int               `json:"slot_bytes"`
	Spread    map[string]spread `json:"median_of_repeats"`
	Each      []besideRepeat    `json:"each"`
}

// besideRepeat is one repeat: one ring alone, then every ring at once.
type besideRepeat struct {
	Alone resident.Throughput   `json:"one_ring_alone"`
	Rings []resident.Throughput `json:"each_ring"`
	// TotalToAlone is the rings' slots/s summed over one ring's alone;
	// SlowestToAlone the slowest ring's over it.
	TotalToAlone   float64 `json:"total_to_one_alone"`
	SlowestToAlone float64 `json:"slowest_to_one_alone"`
	// Lost and Errors are summed over both runs, one ring alone and
	// every ring at once.
	Lost   uint64 `json:"lost"`
	Errors uint64 `json:"errors"`
}

func (x besideRepeat) figures() map[string]float64 {
	return map[string]float64{
		"one_ring_alone.slots_per_s": x.Alone.PerS,
		"total_to_one_alone":         x.TotalToAlone,
		"slowest_to_one_alone":       x.SlowestToAlone,
		"lost":                       float64(x.Lost),
		"errors":                     float64(x.Errors),
	}
}

// measureBeside runs cfg.Peer.Rings rings of size-byte slots at once,
// cfg.Repeats times.
func measureBeside(ctx context.Context, g0, word *cuda.Device, start startConsumer, pk *resident.PeerKernels, cfg residentConfig,
	size int) (b peerBeside, err error) {
	b = peerBeside{Rings: cfg.Peer.Rings, SlotBytes: size}
	// Every consumer's blocks must be resident at once, or one waits for
	// a multiprocessor the others never give back.
	sms, err := g0.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return b, err
	}
	if need := b.Rings * (cfg.Workers + 1); need > sms {
		return b, fmt.Errorf("%d rings of %d worker blocks and a publisher: %d blocks on %d multiprocessors", b.Rings, cfg.Workers, need, sms)
	}
	rings := make([]*resident.GPURing, b.Rings)
	defer func() {
		if stuck(err) {
			return
		}
		for _, r := range rings {
			if r != nil {
				err = errors.Join(err, r.Free())
			}
		}
	}()
	for i := range rings {
		if rings[i], err = resident.NewPeerRing(g0, word, cfg.Peer.NSlots, size); err != nil {
			return b, fmt.Errorf("ring %d in GPU 0's memory: %w", i, err)
		}
	}
	run := resident.PeerRun{Duration: cfg.Duration, Blocks: cfg.Peer.Blocks, Timeout: cfg.Peer.Timeout}
	var figs []map[string]float64
	defer func() { b.Spread = spreads(figs) }()
	for i := range cfg.Repeats {
		var x besideRepeat
		// A run that lost fills is kept: the goals count them.
		keep := func(err error) {
			if lostOrBad(err) {
				b.Each = append(b.Each, x)
				figs = append(figs, x.figures())
			}
		}
		alone, err := consumeAtOnce(ctx, start, pk, rings[:1], run, &x)
		if err != nil {
			keep(err)
			return b, fmt.Errorf("run %d of %d, one ring: %w", i+1, cfg.Repeats, err)
		}
		x.Alone = alone[0]
		if x.Rings, err = consumeAtOnce(ctx, start, pk, rings, run, &x); err != nil {
			keep(err)
			return b, fmt.Errorf("run %d of %d, %d rings: %w", i+1, cfg.Repeats, len(rings), err)
		}
		total, slowest := 0.0, x.Rings[0].PerS
		for _, t := range x.Rings {
			total += t.PerS
			slowest = min(slowest, t.PerS)
		}
		x.TotalToAlone, x.SlowestToAlone = ratio(total, x.Alone.PerS), ratio(slowest, x.Alone.PerS)
		b.Each = append(b.Each, x)
		figs = append(figs, x.figures())
	}
	return b, nil
}

// consumeAtOnce starts a consumer on every ring, runs a producer on each
// at once, stops the consumers and returns each ring's rate; lost fills
// and check errors go to x and fail it.
func consumeAtOnce(ctx context.Context, start startConsumer, pk *resident.PeerKernels, rings []*resident.GPURing,
	run resident.PeerRun, x *besideRepeat) ([]resident.Throughput, error) {
	stops := make([]func(uint64) (resident.Counters, error), len(rings))
	var errs []error
	for i, r := range rings {
		if err := r.Reset(); err != nil {
			return nil, fmt.Errorf("resetting ring %d: %w", i, err)
		}
	}
	for i, r := range rings {
		var err error
		if stops[i], err = start(r); err != nil {
			errs = append(errs, fmt.Errorf("starting consumer %d on GPU 0: %w", i, err))
			break
		}
	}
	outs := make([]resident.PeerProduced, len(rings))
	perrs := make([]error, len(rings))
	if len(errs) == 0 {
		var wg sync.WaitGroup
		for i, r := range rings {
			wg.Go(func() { outs[i], perrs[i] = pk.Produce(ctx, r, run) })
		}
		wg.Wait()
	}
	rates := make([]resident.Throughput, len(rings))
	for i, stop := range stops {
		if stop == nil {
			continue
		}
		cnt, cerr := stop(outs[i].Fills)
		if err := errors.Join(perrs[i], cerr); err != nil {
			errs = append(errs, fmt.Errorf("ring %d: %w", i, err))
			continue
		}
		x.Lost += outs[i].Fills - min(cnt.Slots, outs[i].Fills)
		x.Errors += cnt.Errors
		consumed, err := rings[i].ConsumedIndex()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ring %d: reading the consumer index: %w", i, err))
		case cnt.Errors != 0:
			errs = append(errs, fmt.Errorf("ring %d: %w: %d errors, the first at fill %d", i, resident.ErrData, cnt.Errors, cnt.FirstError-1))
		case cnt.Slots != outs[i].Fills || consumed != outs[i].Fills:
			errs = append(errs, fmt.Errorf("ring %d: %w: %d fills produced, %d consumed, consumer index %d", i, resident.ErrLost,
				outs[i].Fills, cnt.Slots, consumed))
		}
		rates[i] = rate(outs[i].Fills, rings[i].SlotSize, outs[i].Elapsed)
	}
	return rates, errors.Join(errs...)
}
