//go:build linux && gpu

package resident

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

func device(t testing.TB) *cuda.Device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	g, err := cuda.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := g.Lock(); err != nil {
		t.Fatal(err)
	}
	return g
}

func kernels(t testing.TB, g *cuda.Device) *Kernels {
	t.Helper()
	k, err := LoadKernels(g)
	if err != nil {
		v, _ := g.Driver().Version()
		t.Fatalf("driver %d: %v", v, err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// The driver compiles the PTX (ISA 6.0, sm_70), and reports the
// attributes GPU-resident mode depends on.
func TestPTXLoads(t *testing.T) {
	g := device(t)
	kernels(t, g)
	ord, flush, err := g.RDMAOrdering()
	if err != nil {
		t.Fatal(err)
	}
	name, _ := g.Name()
	t.Logf("%s: the PTX (%s) loads; GPU_DIRECT_RDMA_WRITES_ORDERING %d (%s), FLUSH_WRITES_OPTIONS %d",
		name, bytes.SplitN(PTX[bytes.Index(PTX, []byte(".version")):], []byte("\n"), 2)[0], int(ord), ord, int(flush))
}

type ringCase struct {
	where         Placement
	nslots, size  int
	workers       int
	delay         uint64
	fills         uint64
	depth         int
	producerFirst bool // result before data (a broken producer)
	resultsInGPU  bool
}

// run produces tc.fills into a fresh ring consumed by start and returns
// what the producer and the consumer counted.
func runRing(t *testing.T, g *cuda.Device, tc ringCase, start func(*GPURing) (RingConsumer, error)) (Produced, Counters, *GPURing, error) {
	t.Helper()
	r, err := NewGPURing(g, tc.nslots, tc.size, tc.where, tc.resultsInGPU)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Free() })
	var p Producer
	if tc.where == SlotsHost {
		hp, err := NewHostProducer(r.Ring)
		if err != nil {
			t.Fatal(err)
		}
		p = hp
		if tc.producerFirst {
			p = slowData{resultFirst{hp}}
		}
	} else {
		cp, err := NewCopyProducer(g, r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.Close() })
		p = cp
	}
	c, err := start(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, perr := Produce(ctx, r.Ring, p, Run{Fills: tc.fills, Depth: tc.depth})
	cnt, cerr := c.Stop()
	if cerr != nil {
		t.Fatalf("%+v: consumer: %v", tc, cerr)
	}
	return out, cnt, r, perr
}

func exact(t *testing.T, tc ringCase, out Produced, cnt Counters, err error, r *GPURing, resident bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("%+v: %v", tc, err)
	}
	if out.Fills != tc.fills || cnt.Slots != tc.fills || r.Consumed() != tc.fills || cnt.Bytes != tc.fills*uint64(tc.size) {
		t.Errorf("%+v: produced %d, consumed %d (%d bytes), consumer index %d", tc, out.Fills, cnt.Slots, cnt.Bytes, r.Consumed())
	}
	if resident && cnt.Published != tc.fills {
		t.Errorf("%+v: the publisher ended at %d", tc, cnt.Published)
	}
	if cnt.Errors != 0 {
		t.Errorf("%+v: %d bad fills, the first %d", tc, cnt.Errors, cnt.FirstError-1)
	}
	sts, err := r.Statuses()
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sts {
		if st != 0 {
			t.Errorf("%+v: slot %d's result left at %#x", tc, i, st)
		}
	}
}

// Every fill is consumed once, in order (each fill's first word is its k,
// checked against the k the consumer expects), with its data, by the
// persistent kernel: CPU stores into host memory and copy-engine writes
// into GPU memory, one and many workers, a slow consumer the producer
// must wait for (each slot held before it is read: an overrun would change
// its bytes), one fill at a time.
func TestResidentExact(t *testing.T) {
	g := device(t)
	k := kernels(t, g)
	for _, tc := range []ringCase{
		{where: SlotsHost, nslots: 8, size: 4096, fills: 20000},
		{where: SlotsGPU, nslots: 8, size: 4096, fills: 20000},
		{where: SlotsGPU, nslots: 8, size: 4096, fills: 20000, resultsInGPU: true},
		{where: SlotsGPU, nslots: 64, size: 64 << 10, workers: 16, fills: 5000, resultsInGPU: true},
		{where: SlotsHost, nslots: 64, size: 4096, workers: 16, fills: 50000},
		{where: SlotsHost, nslots: 3, size: 1 << 20, workers: 3, fills: 200},
		{where: SlotsGPU, nslots: 8, size: 1 << 20, workers: 16, fills: 1000, resultsInGPU: true},
		{where: SlotsGPU, nslots: 8, size: 1<<20 + 4096, workers: 5, fills: 300, resultsInGPU: true},
		{where: SlotsHost, nslots: 1, size: 256, workers: 1, fills: 2000},
		{where: SlotsHost, nslots: 4, size: 4096, workers: 2, delay: 200000, fills: 500},
		{where: SlotsGPU, nslots: 4, size: 65536, workers: 4, delay: 200000, fills: 500, resultsInGPU: true},
		{where: SlotsHost, nslots: 16, size: 4096, fills: 500, depth: 1},
	} {
		out, cnt, r, err := runRing(t, g, tc, func(r *GPURing) (RingConsumer, error) {
			return k.StartResident(g, r, Resident{Workers: tc.workers, Delay: tc.delay})
		})
		exact(t, tc, out, cnt, err, r, true)
		if cnt.CPU > 100*time.Millisecond {
			t.Errorf("%+v: the consumer's host thread spent %v", tc, cnt.CPU)
		}
	}
}

// A producer that writes the result before the data is caught: the
// kernel read the slot's previous fill.
func TestResidentCatchesEarlyResult(t *testing.T) {
	g := device(t)
	k := kernels(t, g)
	tc := ringCase{where: SlotsHost, nslots: 4, size: 4096, workers: 2, fills: 20, depth: 1, producerFirst: true}
	_, cnt, _, err := runRing(t, g, tc, func(r *GPURing) (RingConsumer, error) {
		return k.StartResident(g, r, Resident{Workers: tc.workers})
	})
	if err != nil {
		t.Fatal(err)
	}
	if cnt.Errors == 0 || cnt.Slots != tc.fills {
		t.Fatalf("early results: %+v", cnt)
	}
}

// The CPU-driven consumer is as exact.
func TestCPUDrivenExact(t *testing.T) {
	g := device(t)
	k := kernels(t, g)
	for _, tc := range []ringCase{
		{where: SlotsHost, nslots: 8, size: 4096, fills: 3000},
		{where: SlotsGPU, nslots: 8, size: 1 << 20, fills: 300},
		{where: SlotsGPU, nslots: 4, size: 4096, fills: 300, depth: 1},
	} {
		out, cnt, r, err := runRing(t, g, tc, func(r *GPURing) (RingConsumer, error) { return k.StartCPUDriven(g, r) })
		exact(t, tc, out, cnt, err, r, false)
	}
}

// The bare round trips answer every ping; a ring that does not fit the
// GPU's multiprocessors is refused.
func TestPingPongAndLimits(t *testing.T) {
	g := device(t)
	k := kernels(t, g)
	d, err := k.PingPong(context.Background(), g, 1000)
	if err != nil || len(d) != 1000 {
		t.Fatalf("%d round trips: %v", len(d), err)
	}
	l, err := k.LaunchSync(g, 100)
	if err != nil || len(l) != 100 {
		t.Fatalf("%d launches: %v", len(l), err)
	}
	t.Logf("ping-pong %+v, launch+sync %+v", Summarize(d), Summarize(l))
	r, err := NewGPURing(g, 4096, 4096, SlotsGPU, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	if _, err := k.StartResident(g, r, Resident{Workers: 4096}); !errors.Is(err, ErrConfig) {
		t.Fatalf("4096 workers: %v", err)
	}
	if _, err := k.StartCPUDriven(g, r); !errors.Is(err, ErrConfig) {
		t.Fatalf("CPU-driven, results in GPU memory: %v", err)
	}
}

// frameProducer writes FRM1 frames with a copy engine, as an FPGA sends
// them: each fill's frames encoded into one of nsrc pinned host areas,
// copied into the slot, then the result word. skip(k) is how many frames
// the source dropped before fill k; corrupt, if not 0, is the fill k + 1
// whose one payload byte is flipped.
type frameProducer struct {
	r         *GPURing
	s         *cuda.Stream
	src       *cuda.HostBuffer
	result    *cuda.HostBuffer
	nsrc      uint64
	frameSize int
	skip      func(k uint64) uint64
	corrupt   uint64 // fill k + 1 with a flipped byte
	long      uint64 // fill k + 1 whose result says 4 GiB less a page
}

func newFrameProducer(t *testing.T, g *cuda.Device, r *GPURing, frameSize int) *frameProducer {
	t.Helper()
	p := &frameProducer{r: r, nsrc: uint64(r.NSlots) + 1, frameSize: frameSize, skip: func(uint64) uint64 { return 0 }}
	var err error
	if p.s, err = g.NewStream(); err != nil {
		t.Fatal(err)
	}
	if p.src, err = g.HostAlloc(p.nsrc * uint64(r.SlotSize)); err != nil {
		t.Fatal(err)
	}
	if p.result, err = g.HostAlloc(16); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(p.result.Bytes(), resultWord(uint32(r.SlotSize)))
	binary.LittleEndian.PutUint64(p.result.Bytes()[8:], resultWord(0xfffff000))
	t.Cleanup(func() {
		p.s.Sync()
		p.s.Close()
		p.src.Free()
		p.result.Free()
	})
	return p
}

func (p *frameProducer) Data(k uint64) error {
	fps := uint64(p.r.SlotSize / p.frameSize)
	off := (k % p.nsrc) * uint64(p.r.SlotSize)
	area := p.src.Bytes()[off : off+uint64(p.r.SlotSize)]
	for f := range fps {
		frame.Encode(area[f*uint64(p.frameSize):], k*fps+p.skip(k)+f, k, p.frameSize-frame.HeaderSize)
	}
	if p.corrupt == k+1 {
		area[len(area)/2] ^= 1
	}
	dst := p.r.SlotsDev + (k%uint64(p.r.NSlots))*uint64(p.r.SlotSize)
	return p.s.CopyHtoD(dst, p.src, off, uint64(p.r.SlotSize))
}

func (p *frameProducer) Result(k uint64) error {
	off := uint64(0)
	if p.long == k+1 {
		off = 8
	}
	return p.s.CopyHtoD(p.r.ResultsDev+(k%uint64(p.r.NSlots))*uint64(ResultSize), p.result, off, 8)
}

func (p *frameProducer) Flush() error { return p.s.Sync() }

// The built-in frame checker, linked into the consumer as a user's
// function is, checks a driver stream's FRM1 frames word by word where
// they landed in GPU memory, results in GPU memory beside them: every
// frame of every fill, the frames the source dropped counted as gaps, a
// flipped byte found in the one fill that has it, and a fill whose result
// claims more than its slot counted bad without a read past the slot (one
// would fault: the ring's end is far nearer than 4 GiB).
func TestResidentFrames(t *testing.T) {
	g := device(t)
	fr, err := LinkFrames(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fr.Close() })
	for _, tc := range []struct {
		nslots, size, frameSize int
		fills                   uint64
		dropEvery               uint64 // fills between drops of 3 frames
		corrupt                 uint64 // fill k + 1 with a flipped byte
		long                    uint64 // fill k + 1 with a length past its slot
	}{
		{nslots: 64, size: 4096, frameSize: 4096, fills: 20000},
		{nslots: 16, size: 64 << 10, frameSize: 4096, fills: 4000},
		{nslots: 8, size: 1 << 20, frameSize: 64 << 10, fills: 300},
		{nslots: 16, size: 64 << 10, frameSize: 8192, fills: 4000, dropEvery: 97},
		{nslots: 16, size: 64 << 10, frameSize: 4096, fills: 2000, corrupt: 778},
		{nslots: 16, size: 64 << 10, frameSize: 4096, fills: 2000, long: 1301},
	} {
		r, err := NewGPURing(g, tc.nslots, tc.size, SlotsGPU, true)
		if err != nil {
			t.Fatal(err)
		}
		p := newFrameProducer(t, g, r, tc.frameSize)
		p.corrupt, p.long = tc.corrupt, tc.long
		if tc.dropEvery != 0 {
			p.skip = func(k uint64) uint64 { return 3 * (k / tc.dropEvery) }
		}
		c, err := fr.Start(g, StreamRing{Slots: r.SlotsDev, SlotSize: tc.size, NSlots: tc.nslots, Results: r.ResultsDev,
			Consumer: r.ConsumerDev, Published: r.Consumed}, 16, tc.frameSize)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, perr := Produce(ctx, r.Ring, p, Run{Fills: tc.fills})
		cnt, cerr := c.Stop(ctx, out.Fills)
		cancel()
		if perr != nil || cerr != nil {
			t.Fatalf("%+v: producer %v, consumer %v", tc, perr, cerr)
		}
		fps := uint64(tc.size / tc.frameSize)
		frames, errs, gaps := tc.fills*fps, uint64(0), uint64(0)
		bad := max(tc.corrupt, tc.long)
		if bad != 0 {
			// A fill that fails counts once, and its frames as missing
			// (as frame.Checker counts a frame that fails).
			frames, errs, gaps = frames-fps, 1, fps
		}
		if tc.dropEvery != 0 {
			gaps = 3 * ((tc.fills - 1) / tc.dropEvery)
		}
		if cnt.Slots != tc.fills || cnt.Published != tc.fills || cnt.Frames != frames || cnt.Errors != errs ||
			cnt.Gaps != gaps || cnt.Duplicates != 0 || (errs != 0 && cnt.FirstError != bad) {
			t.Errorf("%+v: want %d frames, %d errors, %d gaps; got %+v", tc, frames, errs, gaps, cnt)
		}
		t.Logf("%+v: %+v", tc, cnt)
		r.Free()
	}
	if _, err := fr.Start(g, StreamRing{NSlots: 8, SlotSize: 4096, Published: func() uint64 { return 0 }}, 0, 4000+16); !errors.Is(err, ErrConfig) ||
		err.Error() != "resident: invalid configuration: 4096-byte slots of 4016-byte frames (a multiple of 16 over 32)" {
		t.Fatalf("4 KiB slots of 4016-byte frames: %v", err)
	}
}
