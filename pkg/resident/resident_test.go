package resident

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/internal/cdefs"
)

const header = "../../kmod/gpufpga/uapi/gpufpga_resident.h"

var defines = map[string]uint64{
	"GPUFPGA_RESULT_MAGIC": ResultMagic, "GPUFPGA_RESULT_MAGIC_SHIFT": ResultMagicShift, "GPUFPGA_RESULT_EOP": ResultEOP,
}

// The constants are the header's, and resident.cu's copies of them too.
func TestHeaderConstants(t *testing.T) {
	for _, path := range []string{header, "resident.cu"} {
		diffs, err := cdefs.Diff(path, "GPUFPGA_", defines)
		if errors.Is(err, fs.ErrNotExist) {
			t.Skipf("%s: not here (a test binary away from its source)", path)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			t.Errorf("%s: %s", path, d)
		}
	}
}

// The Go records have the header's fields at the header's offsets, and
// resident.cu's struct slot_result starts as the header's does.
func TestHeaderLayout(t *testing.T) {
	src, err := os.ReadFile(header)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s: not here (a test binary away from its source)", header)
	}
	if err != nil {
		t.Fatal(err)
	}
	type field struct {
		name string
		off  int
	}
	layout := func(text, name string) ([]field, int) {
		m := regexp.MustCompile(`(?s)struct ` + name + ` \{(.*?)\};`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no struct %s", name)
		}
		var fs []field
		off := 0
		for _, f := range regexp.MustCompile(`(__u32|__u64|u32|u64)\s+(\w+)(\[(\d+)\])?;`).FindAllStringSubmatch(m[1], -1) {
			size := 4
			if strings.HasSuffix(f[1], "64") {
				size = 8
			}
			n := 1
			if f[4] != "" {
				n, _ = strconv.Atoi(f[4])
			}
			off = (off + size - 1) / size * size
			fs = append(fs, field{f[2], off})
			off += size * n
		}
		return fs, off
	}
	res, size := layout(string(src), "gpufpga_slot_result")
	want := []field{{"status", int(unsafe.Offsetof(SlotResult{}.Status))}, {"length", int(unsafe.Offsetof(SlotResult{}.Length))},
		{"reserved", int(unsafe.Offsetof(SlotResult{}.Reserved))}}
	if !equal(res, want) || size != ResultSize {
		t.Errorf("gpufpga_slot_result: header %v (%d bytes), Go %v (%d bytes)", res, size, want, ResultSize)
	}
	con, size := layout(string(src), "gpufpga_consumer")
	wantC := []field{{"consumed", 0}, {"reserved", int(unsafe.Offsetof(Consumer{}.Reserved))}}
	if !equal(con, wantC) || size != ConsumerSize || ConsumerSize != 64 {
		t.Errorf("gpufpga_consumer: header %v (%d bytes), Go %v (%d bytes)", con, size, wantC, ConsumerSize)
	}
	cu, err := os.ReadFile("resident.cu")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("resident.cu: not here (a test binary away from its source)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got, size := layout(string(cu), "slot_result"); !equal(got, res) || size != ResultSize {
		t.Errorf("resident.cu's slot_result %v (%d bytes), header %v", got, size, res)
	}
	// The producers store status and length as one little-endian word.
	if w := resultWord(4096); uint32(w) != ResultReady || w>>32 != 4096 || !Ready(uint32(w)) || Ready(0) {
		t.Errorf("resultWord(4096) = %#x", w)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Every word of a fill differs from the same slot's previous fill, and
// from the fill before it that used the same pattern.
func TestPatternCatchesStaleData(t *testing.T) {
	for _, nslots := range []uint64{1, 2, 7, 64} {
		nsrc := nslots + 1
		for k := nslots; k < 4*nsrc; k++ {
			for i := uint64(0); i < 512; i++ {
				if Word(k, nsrc, i) == Word(k-nslots, nsrc, i) {
					t.Fatalf("nslots %d: fill %d and %d share word %d", nslots, k, k-nslots, i)
				}
			}
		}
	}
	b := make([]byte, 4096)
	Fill(b, 77, 65)
	if err := Verify(b, 77, 65); err != nil {
		t.Fatal(err)
	}
	b[4000] ^= 1
	if err := Verify(b, 77, 65); !errors.Is(err, ErrData) {
		t.Fatalf("a flipped bit: %v", err)
	}
	// A prepared pattern with its sequence word stamped is the fill.
	p := Patterns(65, 4096)[77%65]
	copy(b, p)
	b[0], b[1] = 77, 0
	if err := Verify(b, 77, 65); err != nil {
		t.Fatalf("stamped pattern: %v", err)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(ds)
	if l.N != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 || l.Mean != 50.5 {
		t.Errorf("Summarize(1..100 µs) = %+v", l)
	}
	if got := Percentile([]time.Duration{5}, 99); got != 5 {
		t.Errorf("one sample's p99 = %v", got)
	}
	if (Summarize(nil) != Latency{}) {
		t.Error("no samples")
	}
}

// hostRing is a ring in Go memory.
func hostRing(t testing.TB, nslots, size int) *Ring {
	t.Helper()
	words := make([]uint64, (nslots*ResultSize+ConsumerSize)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	r, err := NewRing(nslots, size, make([]byte, nslots*size), b[:nslots*ResultSize], b[nslots*ResultSize:])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// goConsumer follows the header's steps on the CPU, as resident_consume
// does on the GPU: wait for the result, check the data, clear the result,
// publish. delay holds each slot that long, verifying it again after, so
// that a producer that overran it would be caught.
type goConsumer struct {
	r     *Ring
	delay time.Duration
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	slots  uint64
	errs   []error
	lenErr int
}

func startGo(r *Ring, delay time.Duration) *goConsumer {
	c := &goConsumer{r: r, delay: delay, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *goConsumer) run() {
	defer close(c.done)
	for k := uint64(0); ; k++ {
		i := int(k % uint64(c.r.NSlots))
		for {
			st, n := c.r.Status(i)
			if Ready(st) {
				if int(n) != c.r.SlotSize {
					c.lenErr++
				}
				break
			}
			select {
			case <-c.stop:
				return
			default:
			}
		}
		err := Verify(c.r.Slot(i), k, c.r.NSrc)
		if c.delay > 0 && err == nil {
			time.Sleep(c.delay)
			err = Verify(c.r.Slot(i), k, c.r.NSrc)
		}
		c.mu.Lock()
		c.slots++
		if err != nil {
			c.errs = append(c.errs, err)
		}
		c.mu.Unlock()
		c.r.Release(i)
		c.r.Publish(k + 1)
	}
}

func (c *goConsumer) Stop() (uint64, []error) {
	close(c.stop)
	<-c.done
	return c.slots, c.errs
}

// Every fill is consumed once, in order, with its data, at any depth; a
// slow consumer is never overrun (its second look at each slot finds the
// same fill).
func TestProduceCredits(t *testing.T) {
	for _, tc := range []struct {
		nslots, size, depth int
		delay               time.Duration
		fills               uint64
	}{
		{8, 4096, 0, 0, 5000},
		{8, 4096, 1, 0, 500},
		{3, 256, 0, 200 * time.Microsecond, 300},
		{1, 64, 0, 0, 1000},
	} {
		r := hostRing(t, tc.nslots, tc.size)
		p, err := NewHostProducer(r)
		if err != nil {
			t.Fatal(err)
		}
		c := startGo(r, tc.delay)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := Produce(ctx, r, p, Run{Fills: tc.fills, Depth: tc.depth})
		cancel()
		slots, errs := c.Stop()
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if out.Fills != tc.fills || slots != tc.fills || r.Consumed() != tc.fills || len(errs) != 0 || c.lenErr != 0 {
			t.Errorf("%+v: produced %d, consumed %d (index %d), errors %v", tc, out.Fills, slots, r.Consumed(), errs)
		}
		if tc.depth == 1 && len(out.RoundTrips) != int(tc.fills) {
			t.Errorf("%+v: %d round trips", tc, len(out.RoundTrips))
		}
	}
}

// resultFirst writes the result before the data: a consumer that checks
// the data catches it.
type resultFirst struct{ *HostProducer }

func (p resultFirst) Data(k uint64) error   { return p.HostProducer.Result(k) }
func (p resultFirst) Result(k uint64) error { return p.HostProducer.Data(k) }

func TestStaleDataCaught(t *testing.T) {
	r := hostRing(t, 4, 4096)
	hp, _ := NewHostProducer(r)
	c := startGo(r, 0)
	// The consumer's first looks race the data copy; at depth 1 with a
	// delayed data write the stale bytes are what it sees.
	slow := slowData{resultFirst{hp}}
	_, err := Produce(context.Background(), r, slow, Run{Fills: 20, Depth: 1})
	_, errs := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 || !errors.Is(errs[0], ErrData) {
		t.Fatalf("data written after the result went unnoticed: %v", errs)
	}
}

type slowData struct{ resultFirst }

func (p slowData) Result(k uint64) error {
	time.Sleep(2 * time.Millisecond)
	return p.resultFirst.Result(k)
}

// A consumer that stops publishing fails the run with ErrStalled; a
// cancelled context ends it with the context's error.
func TestProduceStallAndCancel(t *testing.T) {
	r := hostRing(t, 2, 64)
	p, _ := NewHostProducer(r)
	_, err := Produce(context.Background(), r, p, Run{Fills: 10, Stall: 50 * time.Millisecond})
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("no consumer: %v", err)
	}
	r.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = Produce(ctx, r, p, Run{Fills: 10})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled: %v", err)
	}
	if _, err := Produce(ctx, r, p, Run{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no bound: %v", err)
	}
	if _, err := NewRing(0, 64, nil, make([]byte, 64), make([]byte, 64)); !errors.Is(err, ErrConfig) {
		t.Fatalf("no slots: %v", err)
	}
	// Alone: no credits, so more fills than slots go through at once.
	r.Reset()
	out, err := Produce(context.Background(), r, p, Run{Fills: 100, Alone: true})
	if err != nil || out.Fills != 100 {
		t.Fatalf("alone: %+v %v", out, err)
	}
}
