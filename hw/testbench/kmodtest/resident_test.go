//go:build vmguest

package kmodtest

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/resident"
	"golang.org/x/sys/unix"
)

// residentRing is a GPU-resident stream's memory on the simulated GPU: a
// fragmented ring of one-descriptor slots, its results in another GPU
// allocation, and the consumer's word in a host pin.
type residentRing struct {
	t        *testing.T
	slotSize int
	nslots   int
	ring     []byte
	ringPin  *p2p.Pin
	resAlloc *simgpu.Alloc
	results  []byte
	resPin   *p2p.Pin
	host     *p2p.HostBuffer
	wordPin  *p2p.Pin
	slots    []p2p.Segment
	cons     *simgpu.Consumer
	stop     func() error // the running consumer's
}

func newResidentRing(t *testing.T, d *p2p.Device, g *simgpu.GPU, nslots, slotSize int) *residentRing {
	t.Helper()
	r := &residentRing{t: t, slotSize: slotSize, nslots: nslots}
	_, r.ringPin, r.ring, r.slots = ring(t, d, g, nslots, uint64(slotSize))
	r.resAlloc = alloc(t, g, uint64(nslots*resident.ResultSize), simgpu.Contiguous)
	r.resPin = pinGPU(t, d, r.resAlloc.VA, r.resAlloc.Size)
	var err error
	if r.results, err = r.resAlloc.Bytes(); err != nil {
		t.Fatal(err)
	}
	clear(r.results)
	if r.host, err = d.AllocHost(4096); err != nil {
		t.Fatal(err)
	}
	if r.wordPin, err = d.PinHost(r.host.Bytes()); err != nil {
		t.Fatal(err)
	}
	if r.cons, err = simgpu.NewConsumer(r.ring, slotSize, nslots, r.results, r.host.Bytes()); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *residentRing) config(coalesce int) p2p.Resident {
	return p2p.Resident{
		Results:  p2p.Segment{Pin: r.resPin, Len: uint64(r.nslots * resident.ResultSize)},
		Consumer: p2p.Segment{Pin: r.wordPin, Len: uint64(resident.ConsumerSize)},
		Coalesce: coalesce,
	}
}

func (r *residentRing) start(d *p2p.Device, coalesce int) *p2p.Stream {
	r.t.Helper()
	s, err := d.StartResidentStream(1, r.slots, r.config(coalesce))
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// word is the consumer's count as the driver reads it.
func (r *residentRing) word() *uint64 { return (*uint64)(unsafe.Pointer(&r.host.Bytes()[0])) }

// run runs the consumer until stopped; stop returns its error, every
// time it is called. A test that fails stops it too, before its memory
// goes.
func (r *residentRing) run() (stop func() error) {
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.cons.Run(c) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	r.t.Cleanup(func() { stop() })
	return stop
}

// unpin unpins everything: the stream that used it must have ended.
func (r *residentRing) unpin() {
	r.t.Helper()
	for _, p := range []*p2p.Pin{r.ringPin, r.resPin, r.wordPin} {
		if err := p.Unpin(); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.host.Free(); err != nil {
		r.t.Fatal(err)
	}
}

// waitConsumed waits until the consumer has consumed n fills.
func waitConsumed(t *testing.T, c *simgpu.Consumer, n uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for c.Stats().Consumed < n {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of %d fills", c.Stats().Consumed, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// drainResident stops the stream, lets the consumer take every fill the engine
// made, and checks that the consumer saw exactly those.
func drainResident(t *testing.T, s *p2p.Stream, r *residentRing, stopConsumer func() error) simgpu.ConsumerStats {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for range s.Slots() {
		t.Fatal("a resident stream reported a slot")
	}
	if s.Err() != nil {
		t.Fatalf("stream ended with %v", s.Err())
	}
	waitConsumed(t, r.cons, s.Fills())
	if err := stopConsumer(); err != nil {
		t.Fatal(err)
	}
	st := r.cons.Stats()
	if st.Consumed != s.Fills() || atomic.LoadUint64(r.word()) != s.Fills() {
		t.Fatalf("the engine made %d fills, the consumer took %d and published %d", s.Fills(), st.Consumed, atomic.LoadUint64(r.word()))
	}
	return st
}

// accountFor checks every frame the source generated: consumed, dropped
// upstream, or still queued, and that the consumer saw them in order.
func accountFor(t *testing.T, src acq.SourceStats, st simgpu.ConsumerStats) {
	t.Helper()
	f := st.Frames
	if f.CRCFailures != 0 || f.Duplicates != 0 || f.Frames != src.Delivered ||
		src.Generated != src.Delivered+src.Dropped+src.Queued || f.Gaps > src.Dropped+src.Queued {
		t.Fatalf("consumer %+v, source %+v", st, src)
	}
}

// The whole path at line rate: every fill consumed and checked in order,
// credits coming back through the consumer's word alone.
func TestResidentStreamIsExact(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot, nslots = 4096, 16
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	r := newResidentRing(t, d, g, nslots, slot)
	// A word left from an earlier stream: the driver starts it at 0.
	atomic.StoreUint64(r.word(), 12345)
	// Relaxed ordering as the PCIe spec has it at reset: a result could
	// pass its data. The driver turns it off.
	setDevctl(t, pciExpDevctlRelaxEn, true)
	if devctl(t)&pciExpDevctlRelaxEn == 0 {
		t.Fatal("the card keeps relaxed ordering off: its enable must be writable, as the PCIe spec has it")
	}
	stop := r.run()
	irqs := interrupts(t)
	s := r.start(d, 4)
	if !s.Resident() {
		t.Fatal("not a resident stream")
	}
	if devctl(t)&pciExpDevctlRelaxEn != 0 {
		t.Fatal("a resident stream runs with relaxed ordering on")
	}
	if err := s.Release(0); !errors.Is(err, p2p.ErrInvalid) {
		t.Fatalf("release on a resident stream: %v", err)
	}
	waitConsumed(t, r.cons, 2048)
	st := drainResident(t, s, r, stop)
	// One interrupt every 4 fills at most, and a few for the stop.
	if n := interrupts(t) - irqs; n > s.Fills()/4+8 {
		t.Fatalf("%d interrupts for %d fills coalesced 4 to one", n, s.Fills())
	}
	src, err := ctl.SourceStats()
	if err != nil {
		t.Fatal(err)
	}
	accountFor(t, src, st)
	if st.Bytes != st.Consumed*slot || st.EOPs != st.Consumed || st.Frames.Gaps != 0 {
		t.Fatalf("with room for every frame: %+v", st)
	}
	noViolations(t)
	r.unpin()
}

// A stalled consumer: the engine fills the ring and stops, overwrites
// nothing, and the source drops and counts; once it goes on, the poll (no
// interrupt comes while the engine has no credit) gives the credits back.
// Then a slow one.
func TestResidentConsumerStallsAndCrawls(t *testing.T) {
	for _, coalesce := range []int{2, 8} {
		t.Run("", func(t *testing.T) { residentStall(t, coalesce) })
	}
}

// The same on a card whose completed count lags the results it writes
// (the consumer can publish a fill the driver's count does not have yet),
// on one whose count lags until its next completion whatever is read (with
// coalesce equal to nslots, the engine's only interrupting fill is beyond
// the credits a count one short would grant: the driver must not stop its
// poll on that count), and on one with every quirk: nothing stalls,
// nothing ends with ErrConsumer, and every frame is accounted for.
func TestResidentUnderQuirks(t *testing.T) {
	for _, q := range []xdmamodel.Quirk{xdmamodel.QuirkLateCount, xdmamodel.QuirkStickyCount, xdmamodel.AllQuirks} {
		t.Run(q.String(), func(t *testing.T) {
			withQuirks(t, q)
			residentStall(t, 2)
			residentStall(t, 8)
		})
	}
}

func residentStall(t *testing.T, coalesce int) {
	// The watchdog's own look (every timeout_ms) would also give credits
	// back: far off, so that only the poll can within waitConsumed's 60 s.
	defer setParam(t, "timeout_ms", "600000")()
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot, nslots = 4096, 8
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 2000, 16); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64)
	r := newResidentRing(t, d, g, nslots, slot)
	r.cons.Stall(0)
	stop := r.run()
	s := r.start(d, coalesce)
	seqs := func() (out [nslots]uint64) {
		for i := range nslots {
			h, err := frame.Parse(r.ring[i*slot:])
			if err != nil {
				t.Fatalf("slot %d: %v", i, err)
			}
			out[i] = h.Seq
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < nslots; {
		if resident.Ready(*(*uint32)(unsafe.Pointer(&r.results[i*resident.ResultSize]))) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d slots filled", i)
		}
		time.Sleep(time.Millisecond)
	}
	held := seqs()
	time.Sleep(300 * time.Millisecond)
	if now := seqs(); now != held {
		t.Fatalf("slots held by the consumer were overwritten: %v, then %v", held, now)
	}
	src, err := ctl.SourceStats()
	if err != nil {
		t.Fatal(err)
	}
	if src.Delivered != nslots || src.Dropped == 0 {
		t.Fatalf("with every slot held the source delivered %d and dropped %d", src.Delivered, src.Dropped)
	}
	r.cons.Delay = func(k uint64) time.Duration {
		if k < 3*nslots {
			return 2 * time.Millisecond
		}
		return 0
	}
	r.cons.Resume()
	waitConsumed(t, r.cons, 8*nslots)
	st := drainResident(t, s, r, stop)
	if src, err = ctl.SourceStats(); err != nil {
		t.Fatal(err)
	}
	accountFor(t, src, st)
	if st.Frames.Gaps == 0 {
		t.Fatalf("no frame lost to a stalled consumer: %+v, source %+v", st, src)
	}
	noViolations(t)
	r.unpin()
}

// A consumer that publishes a count the engine has not reached, or one
// that goes back, ends the stream with ErrConsumer: the driver would
// otherwise let the engine overwrite slots.
func TestResidentConsumerOutOfRange(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot, nslots = 4096, 8
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		publish func(r *residentRing)
	}{
		{"ahead", func(r *residentRing) { atomic.StoreUint64(r.word(), 1<<40) }},
		{"back", func(r *residentRing) {
			r.cons.Stall(6)
			stop := r.run()
			waitConsumed(t, r.cons, 6)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// Slots 0 to 5 filled again: the driver has read 6.
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; i < 6; {
				if resident.Ready(atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.results[i*resident.ResultSize])))) {
					i++
				} else if time.Now().After(deadline) {
					t.Fatalf("slot %d not filled again", i)
				}
			}
			atomic.StoreUint64(r.word(), 2)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResidentRing(t, d, g, nslots, slot)
			s := r.start(d, 2)
			tc.publish(r)
			for range s.Slots() {
			}
			if !errors.Is(s.Err(), p2p.ErrConsumer) {
				t.Fatalf("stream ended with %v", s.Err())
			}
			r.unpin()
		})
	}
}

// Every way a running resident stream can end leaves its pins idle and
// unpinnable, the results and consumer word included.
func TestResidentStreamEnds(t *testing.T) {
	g := openGPU(t)
	ctl := control(t)
	const slot, nslots = 4096, 16
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, d *p2p.Device, r *residentRing, s *p2p.Stream)
		want error
	}{
		{"stop", func(t *testing.T, d *p2p.Device, r *residentRing, s *p2p.Stream) {
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"results freed", func(t *testing.T, d *p2p.Device, r *residentRing, s *p2p.Stream) {
			if err := r.stop(); err != nil { // it reads the results
				t.Fatal(err)
			}
			if err := r.resAlloc.Free(); err != nil {
				t.Fatal(err)
			}
		}, p2p.ErrRevoked},
		{"function reset", func(t *testing.T, d *p2p.Device, r *residentRing, s *p2p.Stream) {
			resetFunction(t, "flr")
		}, p2p.ErrReset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openDev(t)
			r := newResidentRing(t, d, g, nslots, slot)
			stop := r.run()
			r.stop = stop
			s := r.start(d, 4)
			waitConsumed(t, r.cons, 64)
			if err := r.wordPin.Unpin(); !errors.Is(err, p2p.ErrBusy) {
				t.Fatalf("unpinning the consumer word of a running stream: %v", err)
			}
			tc.end(t, d, r, s)
			for range s.Slots() {
			}
			if err := s.Err(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("stream ended with %v, want %v", err, tc.want)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if st := r.cons.Stats(); st.Consumed > s.Fills() || st.Frames.CRCFailures != 0 {
				t.Fatalf("the engine made %d fills; consumer %+v", s.Fills(), st)
			}
			if tc.want == p2p.ErrReset {
				waitReady(t, d, func(i p2p.Info) bool { return i.State == p2p.DeviceReady })
			}
			if tc.want == p2p.ErrRevoked {
				for _, p := range []*p2p.Pin{r.ringPin, r.wordPin} {
					if err := p.Unpin(); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.resPin.Unpin(); err != nil && !errors.Is(err, p2p.ErrRevoked) {
					t.Fatal(err)
				}
				return
			}
			r.unpin()
		})
	}
	// Close with the stream running: the driver ends it and unpins.
	d := openDev(t)
	r := newResidentRing(t, d, g, nslots, slot)
	stop := r.run()
	r.start(d, 4)
	waitConsumed(t, r.cons, 64)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.host.Free(); err != nil {
		t.Fatal(err)
	}
	noViolations(t)
}

type rawResident struct {
	rawStream
	results, consumer [3]uint64
	coalesce, pad2    uint32
}

const sizeStreamResident = 96

func (x rawResident) bytes() []byte {
	b := append(x.rawStream.bytes(), make([]byte, sizeStreamResident-sizeStream)...)
	le := binary.LittleEndian
	for i := range 3 {
		le.PutUint64(b[40+8*i:], x.results[i])
		le.PutUint64(b[64+8*i:], x.consumer[i])
	}
	le.PutUint32(b[88:], x.coalesce)
	le.PutUint32(b[92:], x.pad2)
	return b
}

// Every malformed resident start gets its exact error, and starts nothing.
func TestResidentBadInputGetsExactErrors(t *testing.T) {
	g := openGPU(t)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	gpu := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: a.Size, fd: -1})
	page, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	host := rawPinOK(t, f, rawPin{kind: kindHost, addr: uint64(uintptr(unsafe.Pointer(&page[0]))), len: 2 * 4096, fd: -1})
	slots := []uint64{gpu, 0, 4096, gpu, 4096, 4096}
	ok := func(m func(*rawResident)) []byte {
		x := rawResident{rawStream: rawStream{channel: 1, nslots: 2, slots: slots, flags: 1},
			results: [3]uint64{gpu, 65536, 64}, consumer: [3]uint64{host, 0, 64}}
		m(&x)
		return x.bytes()
	}
	for _, tc := range []struct {
		name string
		arg  []byte
		want unix.Errno
	}{
		{"results fields without the flag", ok(func(x *rawResident) { x.flags = 0 }), unix.EINVAL},
		{"coalesce without the flag", ok(func(x *rawResident) { x.flags, x.results, x.consumer, x.coalesce = 0, [3]uint64{}, [3]uint64{}, 1 }), unix.EINVAL},
		{"pad2 set", ok(func(x *rawResident) { x.pad2 = 1 }), unix.EINVAL},
		{"no consumer", ok(func(x *rawResident) { x.consumer = [3]uint64{} }), unix.EINVAL},
		{"coalesce over the slots", ok(func(x *rawResident) { x.coalesce = 3 }), unix.EINVAL},
		{"results too short", ok(func(x *rawResident) { x.results[2] = 63 }), unix.EINVAL},
		{"results misaligned", ok(func(x *rawResident) { x.results[1] += 16 }), unix.EINVAL},
		{"results past the pin", ok(func(x *rawResident) { x.results[1] = a.Size - 32 }), unix.EINVAL},
		{"results in host memory for GPU slots", ok(func(x *rawResident) { x.results = [3]uint64{host, 0, 64} }), unix.EINVAL},
		{"consumer in GPU memory", ok(func(x *rawResident) { x.consumer = [3]uint64{gpu, 65536, 64} }), unix.EINVAL},
		{"consumer misaligned", ok(func(x *rawResident) { x.consumer[1] = 32 }), unix.EINVAL},
		{"consumer too short", ok(func(x *rawResident) { x.consumer[2] = 8 }), unix.EINVAL},
		{"slot of two descriptors", ok(func(x *rawResident) { x.slots = []uint64{gpu, 0, 4096, gpu, 60 << 10, 8192} }), unix.EINVAL},
		{"slots in host and GPU memory", ok(func(x *rawResident) { x.slots = []uint64{gpu, 0, 4096, host, 4096, 4096} }), unix.EINVAL},
		{"unknown results handle", ok(func(x *rawResident) { x.results[0] = 999 }), unix.ENOENT},
		{"unknown consumer handle", ok(func(x *rawResident) { x.consumer[0] = 999 }), unix.ENOENT},
	} {
		if err := rawIoctl(f, ioc(iocRW, 6, sizeStreamResident), tc.arg); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The same struct, well formed, starts and stops.
	b := ok(func(*rawResident) {})
	if err := rawIoctl(f, ioc(iocRW, 6, sizeStreamResident), b); err != nil {
		t.Fatalf("well-formed resident start: %v", err)
	}
	id := binary.LittleEndian.Uint64(b[24:])
	if err := rawIoctl(f, ioc(iocW, 8, sizeStopID), stopID(1, id)); err != nil {
		t.Fatal(err)
	}
}

// PCIe Device Control's relaxed ordering enable (PCI_EXP_DEVCTL_RELAX_EN).
const pciExpDevctlRelaxEn = 0x10

// pcieDevctl returns the FPGA's config space file and the offset of its
// PCIe Device Control register.
func pcieDevctl(t *testing.T) (*os.File, int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join("/sys/bus/pci/devices", fpgaBDF(t), "config"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := make([]byte, 0x100)
	if _, err := f.ReadAt(cfg, 0); err != nil {
		t.Fatal(err)
	}
	for o := int(cfg[0x34]); o != 0 && o < 0x100; o = int(cfg[o+1]) {
		if cfg[o] == 0x10 {
			return f, int64(o + 8)
		}
	}
	t.Fatal("the FPGA has no PCIe capability")
	return nil, 0
}

func devctl(t *testing.T) uint16 {
	t.Helper()
	f, off := pcieDevctl(t)
	defer f.Close()
	var b [2]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}

func setDevctl(t *testing.T, bits uint16, on bool) {
	t.Helper()
	f, off := pcieDevctl(t)
	defer f.Close()
	v := devctl(t) &^ bits
	if on {
		v |= bits
	}
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}
