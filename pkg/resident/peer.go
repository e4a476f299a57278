//go:build linux

package resident

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// PeerPTX is the peer producer's kernels, as `make ptx` generated them
// from PeerSource.
//
//go:embed peer.ptx
var PeerPTX []byte

// PeerSource is their CUDA C source.
//
//go:embed peer.cu
var PeerSource []byte

// ErrPeer is a peer kernel that gave up waiting: the error says for what.
var ErrPeer = errors.New("resident: peer kernel timed out")

// ErrCountBackwards is a count a peer kernel read below a value it had
// read before: the consumer index (or the ping-pong's answer) went
// backwards, which the engine would take as slots taken back.
var ErrCountBackwards = errors.New("resident: a count went backwards")

// peerCtlSize is struct peer_ctl in peer.cu.
const peerCtlSize = 12 * 8

// A peer kernel's failure codes (PEER_* in peer.cu).
const (
	peerCredits   = 1
	peerRoundTrip = 2
	peerDrain     = 3
	peerPing      = 4
	peerPong      = 5
	peerBackwards = 6
)

// peerCtl is struct peer_ctl once the kernel has ended.
type peerCtl struct {
	next, t0, tEnd, fills, status, at, seen, exited, abort uint64
	c0, cEnd                                               uint64 // %clock64 beside t0 and tEnd (one block)
	credit                                                 uint64 // the credit poller's last consumer index
}

func parsePeerCtl(b []byte) peerCtl {
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return peerCtl{w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7), w(8), w(9), w(10), w(11)}
}

// roundTrips reads n samples of (%globaltimer ns, %clock64 cycles) from
// a one-block kernel: the ns as they are, and the cycles in ns at the
// multiprocessor's clock over the whole kernel (%globaltimer may tick
// in whole microseconds; %clock64 ticks each cycle). The cycles come
// back nil where the run gave no clock to convert them by.
func (c peerCtl) roundTrips(b []byte) (ns, clock []time.Duration) {
	raw := nanos(b)
	ns = make([]time.Duration, 0, len(raw)/2)
	cyc := make([]time.Duration, 0, len(raw)/2)
	for i := 0; i+1 < len(raw); i += 2 {
		ns, cyc = append(ns, raw[i]), append(cyc, raw[i+1])
	}
	if c.cEnd <= c.c0 || c.tEnd <= c.t0 {
		return ns, nil
	}
	perCycle := float64(c.tEnd-c.t0) / float64(c.cEnd-c.c0)
	for i, x := range cyc {
		cyc[i] = time.Duration(float64(x)*perCycle + 0.5)
	}
	return ns, cyc
}

// err says what a kernel that failed waited for.
func (c peerCtl) err(timeout time.Duration) error {
	var what string
	switch c.status {
	case 0:
		return nil
	case peerCredits:
		what = fmt.Sprintf("fill %d waited for credits (its slot freed by the consumer); the consumer index stood at %d", c.at, c.seen)
	case peerRoundTrip:
		what = fmt.Sprintf("fill %d's round trip waited for the consumer index to reach %d; it stood at %d", c.at, c.at+1, c.seen)
	case peerDrain:
		what = fmt.Sprintf("the drain waited for the consumer index to reach %d; it stood at %d", c.at, c.seen)
	case peerPing:
		what = fmt.Sprintf("ping %d waited for its answer; the answer stood at %d", c.at, c.seen)
	case peerPong:
		what = fmt.Sprintf("pong waited for ping %d; the ping stood at %d", c.at, c.seen)
	case peerBackwards:
		return fmt.Errorf("%w: read %d after %d", ErrCountBackwards, c.seen, c.at)
	default:
		what = fmt.Sprintf("status %d at %d, seen %d", c.status, c.at, c.seen)
	}
	return fmt.Errorf("%w after %v: %s", ErrPeer, timeout, what)
}

// PeerKernels is the peer producer's module on the producer GPU, and the
// ping-pong's answering kernel on the consumer GPU.
type PeerKernels struct {
	prod, cons       *cuda.Device
	prodMod, consMod *cuda.Module
	produce, ping    *cuda.Function
	pong             *cuda.Function
}

// LoadPeer loads the peer kernels onto both devices. Loading waits for
// every kernel running on a device: load before any consumer starts. The
// producer must have peer access to the consumer, and the consumer to the
// producer for the ping-pong (cuda.Device.EnablePeerAccess).
func LoadPeer(producer, consumer *cuda.Device) (_ *PeerKernels, err error) {
	k := &PeerKernels{prod: producer, cons: consumer}
	defer func() {
		if err != nil {
			k.Close()
		}
	}()
	if k.prodMod, err = producer.LoadPTX(PeerPTX); err != nil {
		return nil, fmt.Errorf("resident: loading the peer kernels on the producer: %w", err)
	}
	if k.consMod, err = consumer.LoadPTX(PeerPTX); err != nil {
		return nil, fmt.Errorf("resident: loading the peer kernels on the consumer: %w", err)
	}
	for _, f := range []struct {
		fn   **cuda.Function
		m    *cuda.Module
		name string
	}{{&k.produce, k.prodMod, "peer_produce"}, {&k.ping, k.prodMod, "peer_ping"}, {&k.pong, k.consMod, "peer_pong"}} {
		if *f.fn, err = f.m.Function(f.name); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// Close unloads both modules; it waits for every kernel on both devices.
func (k *PeerKernels) Close() error {
	var errs []error
	for _, m := range []*cuda.Module{k.prodMod, k.consMod} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// PeerRun says how the peer producer runs.
type PeerRun struct {
	// Duration bounds the claiming of fills, Fills their number: the
	// first reached ends the run (one must be set).
	Duration time.Duration
	Fills    uint64
	// Rate paces the fills, per second (0: as fast as it goes).
	Rate float64
	// Depth1 writes one fill at a time, each waiting for the consumer
	// index to pass it, and records the round trips (one block).
	Depth1 bool
	// Alone writes with no consumer: no credits, no drain.
	Alone bool
	// Blocks is how many fills are written at once (default the ring's
	// slots, at most 1024); where fills take credits, one more block
	// reads them for all.
	Blocks int
	// Timeout bounds each wait of the kernel (default 2 s), and the
	// host's wait for it beyond Duration.
	Timeout time.Duration
}

// PeerProduced is what a peer run did, timed on the producer's clock
// (%globaltimer).
type PeerProduced struct {
	Fills uint64
	// Elapsed is from the first block's start until the last fill was
	// written (alone) or consumed.
	Elapsed time.Duration
	// RoundTrips are the depth-1 run's round trips by %globaltimer, and
	// RoundTripsClock the same by the multiprocessor's cycles, in ns.
	RoundTrips      []time.Duration
	RoundTripsClock []time.Duration
	Blocks          int
}

// Produce runs peer_produce on the producer GPU over r, a ring in the
// consumer GPU's memory (NewPeerRing) whose consumer, if any, is
// running, and waits for it, on the calling goroutine. A kernel that gave
// up waiting fails with ErrPeer, saying for what; one that read the
// consumer index below a value it had read, with ErrCountBackwards; one
// that outlives its own bounds by 10 s, or ctx, fails with ErrStalled and
// leaves its memory allocated (freeing it would wait for the kernel).
func (k *PeerKernels) Produce(ctx context.Context, r *GPURing, run PeerRun) (out PeerProduced, err error) {
	if run.Duration <= 0 && run.Fills == 0 {
		return out, fmt.Errorf("%w: a peer run needs a duration or a number of fills", ErrConfig)
	}
	if run.Depth1 && run.Fills == 0 {
		return out, fmt.Errorf("%w: a depth-1 peer run needs a number of fills", ErrConfig)
	}
	if run.Rate < 0 {
		return out, fmt.Errorf("%w: rate %g fills/s", ErrConfig, run.Rate)
	}
	timeout := run.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	blocks := run.Blocks
	if blocks <= 0 {
		blocks = r.NSlots
	}
	blocks = min(blocks, r.NSlots, 1024)
	depth := uint64(r.NSlots)
	if run.Depth1 {
		blocks, depth = 1, 1
	}
	out.Blocks = blocks
	grid := blocks
	if !run.Alone && !run.Depth1 {
		grid++ // block 0 polls the credits
	}
	maxFills := ^uint64(0)
	if run.Fills != 0 {
		maxFills = run.Fills
	}
	var periodPS uint64
	if run.Rate > 0 {
		periodPS = uint64(1e12/run.Rate + 0.5)
	}
	alone := uint64(0)
	if run.Alone {
		alone = 1
	}
	ctl, err := k.prod.Alloc(peerCtlSize)
	if err != nil {
		return out, fmt.Errorf("peer producer: control block: %w", err)
	}
	stuck := false
	defer func() {
		if !stuck {
			err = errors.Join(err, ctl.Free())
		}
	}()
	var rtt *cuda.Buffer
	if run.Depth1 {
		if rtt, err = k.prod.Alloc(run.Fills * 16); err != nil {
			return out, fmt.Errorf("peer producer: round-trip buffer: %w", err)
		}
		defer func() {
			if !stuck {
				err = errors.Join(err, rtt.Free())
			}
		}()
	}
	s, err := k.prod.NewNonBlockingStream()
	if err != nil {
		return out, fmt.Errorf("peer producer: stream: %w", err)
	}
	defer func() {
		if !stuck {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := s.MemsetD8(ctl.Ptr, 0, ctl.Size); err != nil {
		return out, fmt.Errorf("peer producer: clearing its control block: %w", err)
	}
	var rttPtr uint64
	if rtt != nil {
		rttPtr = rtt.Ptr
	}
	if err := k.produce.Launch(s, grid, threads, 0, r.SlotsDev, uint64(r.SlotSize), r.ResultsDev, uint64(r.NSlots),
		r.ConsumerDev, r.NSrc, maxFills, uint64(run.Duration.Nanoseconds()), periodPS, depth, alone, rttPtr,
		uint64(timeout.Nanoseconds()), ctl.Ptr); err != nil {
		return out, fmt.Errorf("peer producer: launch: %w", err)
	}
	// The kernel ends by itself: its claiming by Duration or Fills, each
	// wait by timeout (the credits, a round trip, the drain, each fill's
	// pacing no longer than the run).
	// A fill that takes over a millisecond, beyond the pacing, is a
	// kernel gone wrong.
	bound := run.Duration + 3*timeout + 10*time.Second
	if run.Fills != 0 && run.Duration <= 0 {
		bound += time.Duration(run.Fills) * time.Millisecond
		if run.Rate > 0 {
			bound += time.Duration(float64(run.Fills) / run.Rate * float64(time.Second))
		}
	}
	if err := waitIdle(ctx, s, bound); err != nil {
		stuck = errors.Is(err, ErrStalled) || ctx.Err() != nil
		return out, fmt.Errorf("peer producer: %w", err)
	}
	b := make([]byte, peerCtlSize)
	if err := k.prod.CopyDtoH(b, ctl.Ptr); err != nil {
		return out, fmt.Errorf("peer producer: reading its control block: %w", err)
	}
	c := parsePeerCtl(b)
	out.Fills = c.fills
	if c.tEnd > c.t0 {
		out.Elapsed = time.Duration(c.tEnd - c.t0)
	}
	if err := c.err(timeout); err != nil {
		return out, fmt.Errorf("peer producer: %w", err)
	}
	if run.Depth1 {
		rb := make([]byte, out.Fills*16)
		if err := k.prod.CopyDtoH(rb, rtt.Ptr); err != nil {
			return out, fmt.Errorf("peer producer: reading the round trips: %w", err)
		}
		out.RoundTrips, out.RoundTripsClock = c.roundTrips(rb)
	}
	return out, nil
}

// nanos reads little-endian nanosecond counts.
func nanos(b []byte) []time.Duration {
	out := make([]time.Duration, len(b)/8)
	for i := range out {
		out[i] = time.Duration(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// waitIdle waits until s has nothing left to run, its work's failure,
// bound or ctx: ErrStalled past the bound.
func waitIdle(ctx context.Context, s *cuda.Stream, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		idle, err := s.Idle()
		if err != nil {
			return err
		}
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the kernel still running: %w", ErrStalled, ctx.Err())
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: the kernel still running after %v, past every bound of its own", ErrStalled, bound)
			}
		}
	}
}

// PingPong measures n bare round trips between the GPUs, timed on the
// producer's clock: the producer GPU stores i into the consumer GPU's
// memory, a kernel there waits for it and stores i into the producer
// GPU's memory, which the producer waits for. Each wait is bounded by
// timeout (default 2 s). It returns the round trips by %globaltimer and
// by the multiprocessor's cycles, in ns, as Produce's depth-1 runs.
func (k *PeerKernels) PingPong(ctx context.Context, n int, timeout time.Duration) (ns, clock []time.Duration, err error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("%w: %d peer round trips", ErrConfig, n)
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	stuck := false
	var bufs []*cuda.Buffer
	defer func() {
		for _, b := range bufs {
			if !stuck {
				err = errors.Join(err, b.Free())
			}
		}
	}()
	alloc := func(g *cuda.Device, size uint64, what string) (*cuda.Buffer, error) {
		b, err := g.Alloc(size)
		if err != nil {
			return nil, fmt.Errorf("peer ping-pong: %s: %w", what, err)
		}
		bufs = append(bufs, b)
		return b, nil
	}
	ping, err := alloc(k.cons, 8, "ping word (consumer GPU)")
	if err != nil {
		return nil, nil, err
	}
	pongCtl, err := alloc(k.cons, peerCtlSize, "pong's control block")
	if err != nil {
		return nil, nil, err
	}
	pong, err := alloc(k.prod, 8, "pong word (producer GPU)")
	if err != nil {
		return nil, nil, err
	}
	pingCtl, err := alloc(k.prod, peerCtlSize, "ping's control block")
	if err != nil {
		return nil, nil, err
	}
	rtt, err := alloc(k.prod, uint64(n)*16, "round trips")
	if err != nil {
		return nil, nil, err
	}
	var streams []*cuda.Stream
	defer func() {
		for _, s := range streams {
			if !stuck {
				err = errors.Join(err, s.Close())
			}
		}
	}()
	cs, err := k.cons.NewNonBlockingStream()
	if err != nil {
		return nil, nil, fmt.Errorf("peer ping-pong: consumer stream: %w", err)
	}
	streams = append(streams, cs)
	ps, err := k.prod.NewNonBlockingStream()
	if err != nil {
		return nil, nil, fmt.Errorf("peer ping-pong: producer stream: %w", err)
	}
	streams = append(streams, ps)
	for _, z := range []struct {
		s *cuda.Stream
		b *cuda.Buffer
	}{{cs, ping}, {cs, pongCtl}, {ps, pong}, {ps, pingCtl}} {
		if err := z.s.MemsetD8(z.b.Ptr, 0, z.b.Size); err != nil {
			return nil, nil, fmt.Errorf("peer ping-pong: clearing: %w", err)
		}
	}
	// Both words are zero before either kernel starts.
	for _, s := range streams {
		if err := s.Sync(); err != nil {
			return nil, nil, fmt.Errorf("peer ping-pong: clearing: %w", err)
		}
	}
	tns := uint64(timeout.Nanoseconds())
	if err := k.pong.Launch(cs, 1, 32, 0, ping.Ptr, pong.Ptr, uint64(n), tns, pongCtl.Ptr); err != nil {
		return nil, nil, fmt.Errorf("peer ping-pong: launching the answer on the consumer: %w", err)
	}
	if err := k.ping.Launch(ps, 1, 32, 0, ping.Ptr, pong.Ptr, uint64(n), rtt.Ptr, tns, pingCtl.Ptr); err != nil {
		// The answering kernel gives up by itself after timeout.
		return nil, nil, errors.Join(fmt.Errorf("peer ping-pong: launching the ping on the producer: %w", err), waitIdle(ctx, cs, 2*timeout+10*time.Second))
	}
	// Each side gives up after timeout without the other; a round trip
	// over a millisecond is a kernel gone wrong.
	bound := time.Duration(n)*time.Millisecond + 3*timeout + 10*time.Second
	for _, w := range []struct {
		s    *cuda.Stream
		what string
	}{{ps, "the ping (producer)"}, {cs, "the answer (consumer)"}} {
		if err := waitIdle(ctx, w.s, bound); err != nil {
			stuck = errors.Is(err, ErrStalled) || ctx.Err() != nil
			return nil, nil, fmt.Errorf("peer ping-pong: %s: %w", w.what, err)
		}
	}
	var errs []error
	var pingCtlRead peerCtl
	for _, c := range []struct {
		g    *cuda.Device
		b    *cuda.Buffer
		what string
	}{{k.prod, pingCtl, "ping"}, {k.cons, pongCtl, "answer"}} {
		b := make([]byte, peerCtlSize)
		if err := c.g.CopyDtoH(b, c.b.Ptr); err != nil {
			return nil, nil, fmt.Errorf("peer ping-pong: reading the %s's control block: %w", c.what, err)
		}
		pc := parsePeerCtl(b)
		if c.b == pingCtl {
			pingCtlRead = pc
		}
		if err := pc.err(timeout); err != nil {
			errs = append(errs, fmt.Errorf("peer ping-pong: %s: %w", c.what, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	rb := make([]byte, n*16)
	if err := k.prod.CopyDtoH(rb, rtt.Ptr); err != nil {
		return nil, nil, fmt.Errorf("peer ping-pong: reading the round trips: %w", err)
	}
	ns, clock = pingCtlRead.roundTrips(rb)
	return ns, clock, nil
}
