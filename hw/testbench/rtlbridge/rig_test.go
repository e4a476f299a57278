package rtlbridge_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/hw/testbench/rtlbridge"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// The example design's registers (hw/rtl/example/gpufpga_example.sv).
const (
	regID        = 0x00
	regGeometry  = 0x04
	regControl   = 0x08
	regPeriod    = 0x0C
	regSnapshot  = 0x14
	regSeed      = 0x18
	regGenerated = 0x20
	regSent      = 0x28
	regDropped   = 0x30
	regQueued    = 0x38
	regH2CGood   = 0x48
	regH2CBad    = 0x4C
	regIRQStatus = 0x54
	regIRQEnable = 0x58

	examplePayload = 1000 // bytes: a 1032-byte frame ends in a partial beat
)

var root = filepath.Join("..", "..", "..")

// buildExample builds the example design at width bits (cached in build/rtl).
func buildExample(t testing.TB, width int) string {
	t.Helper()
	ex := filepath.Join(root, "hw", "rtl", "example")
	d := rtlbridge.Design{
		Top:     "gpufpga_example",
		Files:   []string{filepath.Join(ex, "gpufpga_example.sv")},
		IncDirs: []string{ex},
		Params:  map[string]string{"DATA_WIDTH": strconv.Itoa(width), "PAYLOAD_BYTES": strconv.Itoa(examplePayload)},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := rtlbridge.Build(ctx, d, rtlbridge.Dir(root))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func startBridge(t testing.TB, opt rtlbridge.Options) *rtlbridge.Bridge {
	t.Helper()
	b, err := rtlbridge.Start(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Bus layout of the in-process consumer: descriptors and result records,
// then slots of frames.
const (
	descBase = 0x10000
	resBase  = 0x18000
	dataBase = 0x100000
	slots    = 16
	slotSize = 2048
)

// rig is an engine model whose channel 0 streams meet the RTL design, and
// a consumer that posts slots of one frame each and checks what lands.
type rig struct {
	t       testing.TB
	ctx     context.Context
	b       *rtlbridge.Bridge
	e       *xdmamodel.Engine
	desc    []byte
	data    []byte
	checker frame.Checker
	latency []uint64 // cycles from a frame's timestamp to the consumer's check
	trace   hash.Hash
	free    bool // the bridge is free-running
	stopped bool // the generator is off
}

func newRig(t testing.TB, b *rtlbridge.Bridge) *rig {
	return newRigMode(t, b, false)
}

// newRigMode is newRig for a bridge whose mode free names.
func newRigMode(t testing.TB, b *rtlbridge.Bridge, free bool) *rig {
	t.Helper()
	r := &rig{t: t, b: b, desc: make([]byte, 0x10000), data: make([]byte, slots*slotSize), trace: sha256.New(), free: free}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	var bus busmem.Map
	must(t, bus.Add("descriptors", descBase, r.desc))
	must(t, bus.Add("slots", dataBase, r.data))
	e, err := xdmamodel.NewEngine(xdmamodel.Config{
		C2H: []xdmamodel.ChannelConfig{{Stream: true, Source: b.C2H()}},
		H2C: []xdmamodel.ChannelConfig{{Stream: true, Sink: b.H2C()}},
		Bus: &bus,
	})
	must(t, err)
	r.e = e
	return r
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (r *rig) write(addr, v uint32) {
	r.t.Helper()
	must(r.t, r.b.WriteReg(r.ctx, addr, v))
}

func (r *rig) read(addr uint32) uint32 {
	r.t.Helper()
	v, err := r.b.ReadReg(r.ctx, addr)
	must(r.t, err)
	return v
}

func (r *rig) read64(addr uint32) uint64 {
	return uint64(r.read(addr)) | uint64(r.read(addr+4))<<32
}

// counters is the design's own accounting, captured in one cycle.
type counters struct{ generated, sent, dropped, queued uint64 }

func (r *rig) counters() counters {
	r.write(regSnapshot, 1)
	return counters{r.read64(regGenerated), r.read64(regSent), r.read64(regDropped), uint64(r.read(regQueued))}
}

// ticks runs n quanta.
func (r *rig) ticks(n int) {
	r.t.Helper()
	for range n {
		must(r.t, r.b.Tick(r.ctx))
		r.e.RunUntilIdle()
	}
}

// batch posts the slots as one chain, runs until the engine has filled
// them (or maxTicks quanta pass), and checks the frames that landed. It
// returns the frames seen.
func (r *rig) batch(maxTicks int) int {
	r.t.Helper()
	var segs []sgl.Segment
	for i := range slots {
		segs = append(segs, sgl.Segment{Addr: dataBase + uint64(i)*slotSize, Len: slotSize})
	}
	clear(r.desc[resBase-descBase:])
	c, err := xdma.BuildChain(r.desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resBase, Completed: xdma.CompletedEach})
	must(r.t, err)
	xdma.Start(r.e, xdma.C2H, 0, c, xdma.ControlDefault)
	status := xdma.Base(xdma.TargetC2H, 0) + xdma.RegStatus
	r.e.RunUntilIdle()
	end := r.b.Cycle() + uint64(maxTicks)*r.b.Quantum()
	for i := 0; r.e.ReadReg(status)&xdma.CtrlRun != 0; i++ {
		// Free-running, a chain is stopped only once the generator
		// is off and the design has had time to send all it held, so
		// no packet is cut in two; the last beats are taken first.
		if r.free && r.stopped && r.b.Cycle() >= end {
			r.e.RunUntilIdle()
			if r.e.ReadReg(status)&xdma.CtrlRun == 0 {
				break
			}
		}
		if !r.free && i == maxTicks || r.free && r.stopped && r.b.Cycle() >= end {
			// Stop the chain; what has landed is still checked.
			xdma.Halt(r.e, xdma.C2H, 0)
			break
		}
		if r.free {
			// The design's clock runs on its own: take beats as
			// they come, within the test's deadline.
			i = 0
			runtime.Gosched()
			must(r.t, r.ctx.Err())
		} else {
			must(r.t, r.b.Tick(r.ctx))
		}
		r.e.RunUntilIdle()
		must(r.t, r.b.Err())
	}
	now := r.b.Cycle()
	n := 0
	for i := range slots {
		res := r.desc[resBase-descBase+i*xdma.ResultSize:]
		if binary.LittleEndian.Uint32(res)>>16 != xdma.ResultMagic {
			break
		}
		length := binary.LittleEndian.Uint32(res[4:])
		slot := r.data[i*slotSize : i*slotSize+int(length)]
		if _, err := r.checker.Check(slot); err != nil {
			r.t.Fatalf("slot %d: %v", i, err)
		}
		h, _ := frame.Parse(slot)
		r.latency = append(r.latency, now-h.Timestamp)
		fmt.Fprintf(r.trace, "%d %d %d %d\n", h.Seq, h.Timestamp, now, length)
		n++
	}
	return n
}

// drain stops the generator and consumes until the design and the bridge
// hold no frame.
func (r *rig) drain() counters {
	r.t.Helper()
	r.write(regPeriod, 0)
	r.stopped = true
	for range 100 {
		r.batch(64)
		if c := r.counters(); c.queued == 0 && c.sent == r.checker.Frames {
			return c
		}
	}
	r.t.Fatalf("the design still holds frames after 100 batches: %+v, consumed %d", r.counters(), r.checker.Frames)
	return counters{}
}

// checkAccounts checks that every frame the design generated was consumed
// or dropped, and that the consumer saw each drop as a gap.
func (r *rig) checkAccounts(c counters) {
	r.t.Helper()
	if c.generated != c.sent+c.dropped+c.queued {
		r.t.Errorf("design: generated %d != sent %d + dropped %d + queued %d", c.generated, c.sent, c.dropped, c.queued)
	}
	if r.checker.Frames != c.sent || r.checker.CRCFailures != 0 || r.checker.Duplicates != 0 {
		r.t.Errorf("consumer %+v, design sent %d", r.checker.Stats, c.sent)
	}
	// Drops after the last frame consumed are no gap to the checker.
	if lost := r.checker.Gaps + c.generated - r.checker.Next(); lost != c.dropped {
		r.t.Errorf("consumer lost %d frames (%d gaps), design dropped %d", lost, r.checker.Gaps, c.dropped)
	}
}

func (r *rig) latencyReport() string {
	l := slices.Clone(r.latency)
	slices.Sort(l)
	if len(l) == 0 {
		return "no frames"
	}
	return fmt.Sprintf("FPGA-to-consumer latency over %d frames: min %d, median %d, max %d cycles", len(l), l[0], l[len(l)/2], l[len(l)-1])
}

// slowConsumer runs batches with seeded pauses between them, long enough
// that the design's FIFO and the bridge's ring fill and frames drop.
func (r *rig) slowConsumer(seed uint64, batches int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for range batches {
		r.batch(64)
		r.ticks(rng.IntN(64))
	}
}
