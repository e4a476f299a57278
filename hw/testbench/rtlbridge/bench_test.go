package rtlbridge_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/hw/testbench/rtlbridge"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// BenchmarkCoSim measures the example design at 256 bits, free-running
// and synchronised, feeding the engine model and the consumer as fast as
// the design sends (a frame every frame-time), against the Go source
// (hw/testbench/acq) through the same engine and consumer in the same run.
// Each leg runs `reps` times for `window` of wall time; the medians are
// reported, with the spread in the log. Run it as
//
//	go test -run '^$' -bench CoSim -benchtime 1x ./hw/testbench/rtlbridge/
func BenchmarkCoSim(b *testing.B) {
	const reps = 5
	const window = 2 * time.Second
	bin := buildExample(b, 256)
	type leg struct {
		name string
		run  func() (cycles, frames float64) // per second
	}
	rtl := func(mode rtlbridge.Mode, quantum uint64) func() (float64, float64) {
		return func() (float64, float64) {
			br, err := rtlbridge.Start(b.Context(), rtlbridge.Options{Binary: bin, Width: 256, Mode: mode, Quantum: quantum, C2HDepth: int(2 * quantum)})
			must(b, err)
			defer br.Close()
			r := newRigMode(b, br, mode == rtlbridge.FreeRunning)
			r.write(regPeriod, r.read(regGeometry)>>16+1) // back to back: the generator's limit
			c0, f0, t0 := br.Cycle(), r.checker.Frames, time.Now()
			for time.Since(t0) < window {
				r.batch(1 << 20)
			}
			d := time.Since(t0).Seconds()
			// Synchronised, the consumer keeps up by construction;
			// free-running, the design's clock runs on while the
			// consumer checks a batch, and frames drop.
			if mode == rtlbridge.Synchronised && r.checker.Gaps != 0 {
				b.Fatalf("%d gaps at full rate, synchronised", r.checker.Gaps)
			}
			b.Logf("%v: %d frames consumed, %d gaps", mode, r.checker.Frames, r.checker.Gaps)
			return float64(br.Cycle()-c0) / d, float64(r.checker.Frames-f0) / d
		}
	}
	goSource := func() (float64, float64) {
		src := acq.NewSource(acq.SourceConfig{PayloadLen: examplePayload})
		desc, data := make([]byte, 0x10000), make([]byte, slots*slotSize)
		var bus busmem.Map
		must(b, bus.Add("descriptors", descBase, desc))
		must(b, bus.Add("slots", dataBase, data))
		e, err := xdmamodel.NewEngine(xdmamodel.Config{C2H: []xdmamodel.ChannelConfig{{Stream: true, Source: src}}, Bus: &bus})
		must(b, err)
		var segs []sgl.Segment
		for i := range slots {
			segs = append(segs, sgl.Segment{Addr: dataBase + uint64(i)*slotSize, Len: slotSize})
		}
		var checker frame.Checker
		t0 := time.Now()
		for time.Since(t0) < window {
			c, err := xdma.BuildChain(desc, descBase, segs, xdma.ChainSpec{Dir: xdma.C2H, Stream: true, Results: resBase, Completed: xdma.CompletedEach})
			must(b, err)
			xdma.Start(e, xdma.C2H, 0, c, xdma.ControlDefault)
			e.RunUntilIdle()
			for i := range slots {
				if _, err := checker.Check(data[i*slotSize:]); err != nil {
					b.Fatal(err)
				}
			}
		}
		return 0, float64(checker.Frames) / time.Since(t0).Seconds()
	}
	legs := []leg{{"rtl-free-256", rtl(rtlbridge.FreeRunning, 256)}, {"rtl-sync-256", rtl(rtlbridge.Synchronised, 256)},
		{"rtl-sync-256-q4096", rtl(rtlbridge.Synchronised, 4096)}, {"go-source", goSource}}
	med := map[string][2]float64{}
	for range b.N {
		for _, l := range legs {
			var cs, fs []float64
			for range reps {
				c, f := l.run()
				cs, fs = append(cs, c), append(fs, f)
			}
			slices.Sort(cs)
			slices.Sort(fs)
			med[l.name] = [2]float64{cs[reps/2], fs[reps/2]}
			b.Logf("%s: cycles/s median %.3gM [%.3gM..%.3gM], frames/s median %.0f [%.0f..%.0f]",
				l.name, cs[reps/2]/1e6, cs[0]/1e6, cs[reps-1]/1e6, fs[reps/2], fs[0], fs[reps-1])
		}
	}
	b.ReportMetric(med["rtl-free-256"][0], "free-cycles/s")
	b.ReportMetric(med["rtl-sync-256"][0], "sync-cycles/s")
	b.ReportMetric(med["rtl-sync-256-q4096"][0], "sync-q4096-cycles/s")
	b.ReportMetric(med["rtl-sync-256-q4096"][1], "sync-q4096-frames/s")
	b.ReportMetric(med["rtl-free-256"][1], "free-frames/s")
	b.ReportMetric(med["rtl-sync-256"][1], "sync-frames/s")
	b.ReportMetric(med["go-source"][1], "go-frames/s")
	b.Logf("slowdown against the Go source (frames/s): free-running %.1fx, synchronised %.1fx, synchronised at 4096-cycle quanta %.1fx",
		med["go-source"][1]/med["rtl-free-256"][1], med["go-source"][1]/med["rtl-sync-256"][1], med["go-source"][1]/med["rtl-sync-256-q4096"][1])
}

// BenchmarkSoak runs the example at 256 bits free-running for b.N batches
// of 16 frames against a consumer that pauses at random, then checks that
// every frame the design generated was consumed or dropped, each drop a
// gap. `make rtl-soak` runs it long.
func BenchmarkSoak(b *testing.B) {
	br, err := rtlbridge.Start(b.Context(), rtlbridge.Options{Binary: buildExample(b, 256), Width: 256, Mode: rtlbridge.FreeRunning})
	must(b, err)
	defer br.Close()
	r := newRigMode(b, br, true)
	r.ctx = b.Context() // the soak's length is the caller's
	r.write(regControl, 1)
	r.write(regPeriod, 40)
	b.ResetTimer()
	r.slowConsumer(uint64(b.N), b.N)
	b.StopTimer()
	c := r.drain()
	r.checkAccounts(c)
	b.ReportMetric(float64(r.checker.Frames), "frames")
	b.ReportMetric(float64(c.dropped), "dropped")
	b.Logf("%s; generated %d, consumed %d, dropped %d", r.latencyReport(), c.generated, r.checker.Frames, c.dropped)
}
