package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// residentReport is gpubench -resident's document: the machine, then
// pkg/resident's pass.
type residentReport struct {
	machine
	GPUStart gpuState      `json:"gpu_at_start"`
	GPUEnd   gpuState      `json:"gpu_at_end"`
	Resident *residentPass `json:"resident"`
	Seconds  float64       `json:"seconds"`
	// Error is why the pass stopped early: the file keeps what it had
	// measured by then.
	Error string `json:"error,omitempty"`
}

// runResident measures GPU-resident streams against the CPU-driven path
// and the bare round trips (pkg/resident), into a new
// DATE-GPU-REV-resident.json in out (DATE-GPU-REV-resident-peer.json with
// -peer-only), or standard output with -.
func runResident(cfg residentConfig, out string) error {
	runtime.LockOSThread()
	t0 := time.Now()
	g, err := cuda.OpenDevice(0)
	if err != nil {
		return err
	}
	defer g.Close()
	if err := g.Lock(); err != nil {
		return err
	}
	defer g.Unlock()
	r := residentReport{GPUStart: nvidiaSMI()}
	if r.machine, err = describe(g, t0); err != nil {
		return err
	}
	// Ctrl-C ends the pass as a failure does: what was measured is
	// still written to the file.
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sig, 10*time.Minute)
	defer cancel()
	r.Resident, err = measureResident(ctx, g, cfg)
	r.GPUEnd = nvidiaSMI()
	r.Seconds = time.Since(t0).Seconds()
	if err != nil {
		err = fmt.Errorf("resident: %w", err)
		if r.Resident == nil {
			return err
		}
		// What was measured before the failure, and the failure, go
		// to the file: a run on a lent machine may not come again.
		r.Error = err.Error()
		if werr := writeResident(&r, t0, out); werr != nil {
			return errors.Join(err, werr)
		}
		return err
	}
	return writeResident(&r, t0, out)
}

// writeResident writes the document into a new file in out, or to
// standard output with -, and the table to standard error.
func writeResident(r *residentReport, t0 time.Time, out string) error {
	w := os.Stdout
	if out != "-" {
		kind := "-resident"
		if r.Resident.Config.PeerOnly {
			kind = "-resident-peer"
		}
		f, err := createResult(out, t0, r.Device, r.Build.shortRev()+kind)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
		fmt.Fprintln(os.Stderr, "gpubench:", f.Name())
	}
	printResident(os.Stderr, r.Resident)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// printResident writes the table the README carries.
func printResident(w io.Writer, rep *residentPass) {
	fmt.Fprintf(w, "GPU_DIRECT_RDMA_WRITES_ORDERING %d (%s), FLUSH_WRITES_OPTIONS %d\n",
		rep.RDMAWritesOrdering, rep.RDMAOrderingName, rep.RDMAFlushOptions)
	fmt.Fprintf(w, "ping-pong p50 %.2f p99 %.2f us; launch+sync p50 %.2f p99 %.2f us; ping-pong after p50 %.2f p99 %.2f us\n",
		rep.PingPong.P50, rep.PingPong.P99, rep.LaunchSync.P50, rep.LaunchSync.P99, rep.PingPongAfter.P50, rep.PingPongAfter.P99)
	for _, x := range rep.Runs {
		for _, p := range []struct {
			name string
			p    residentPath
		}{{"gpu-resident", x.Resident}, {"cpu-driven", x.CPUDriven}} {
			fmt.Fprintf(w, "%7d %-11s %-12s alone %9.0f/s %6.2f GB/s | %9.0f/s %6.2f GB/s lost %d errors %d | cpu %8.0f ns/slot | rtt p50 %7.2f p99 %7.2f us\n",
				x.SlotBytes, x.Producer, p.name, p.p.Alone.PerS, p.p.Alone.GBps, p.p.Throughput.PerS, p.p.Throughput.GBps,
				p.p.Lost, p.p.Counters.Errors, p.p.CPUPerSlot, p.p.RTT.P50, p.p.RTT.P99)
		}
		fmt.Fprintf(w, "        ratios: resident/alone %.3f, cpu-driven/alone %.3f, resident/cpu-driven slots/s %.2f, resident rtt/ping-pong p50 %.2f p99 %.2f\n",
			x.ResidentToAlone, x.CPUDrivenToAlone, x.ResidentToCPUDriven, x.ResidentRTTToPingPong, x.ResidentRTT99ToPingPong)
	}
	if rep.Peer != nil {
		printPeer(w, rep.Peer)
	}
}

// printPeer writes the peer producer's table: each figure's median and
// spread over the repeats, then the goals.
func printPeer(w io.Writer, p *peerPass) {
	switch {
	case p.Skipped != "":
		fmt.Fprintf(w, "peer producer skipped: %s\n", p.Skipped)
		return
	case p.Error != "":
		fmt.Fprintf(w, "peer producer failed: %s\n", p.Error)
	}
	sp := func(s spread, format string) string {
		return fmt.Sprintf(format+" ["+format+" .. "+format+"]", s.Median, s.Min, s.Max)
	}
	if pp, ok := p.PingPongSpread["p50_us"]; ok {
		fmt.Fprintf(w, "peer ping-pong (GPU %d -> GPU %d -> GPU %d) p50 %s us, p99 %s us\n", p.ProducerGPU, p.ConsumerGPU, p.ProducerGPU,
			sp(pp, "%.2f"), sp(p.PingPongSpread["p99_us"], "%.2f"))
	}
	for _, r := range p.Runs {
		s := r.Spread
		fmt.Fprintf(w, "%7d peer   alone %s/s", r.SlotBytes, sp(s["producer_alone_unthrottled.slots_per_s"], "%.0f"))
		if r.Throttled {
			fmt.Fprintf(w, ", throttled %s/s", sp(s["producer_alone_throttled.slots_per_s"], "%.0f"))
		}
		fmt.Fprintf(w, " | consumer %s/s %s GB/s", sp(s["consumer.slots_per_s"], "%.0f"), sp(s["consumer.gb_per_s"], "%.2f"))
		if r.Throttled {
			fmt.Fprintf(w, ", unthrottled %s/s", sp(s["consumer_unthrottled.slots_per_s"], "%.0f"))
		}
		fmt.Fprintf(w, " | rtt p50 %s p99 %s us\n", sp(s["round_trip.p50_us"], "%.2f"), sp(s["round_trip.p99_us"], "%.2f"))
		fmt.Fprintf(w, "        ratios: consumer/alone %s, rtt/ping-pong p50 %s p99 %s; lost %s errors %s\n",
			sp(s["consumer_to_producer_alone"], "%.3f"), sp(s["round_trip_p50_to_pingpong_p50"], "%.2f"),
			sp(s["round_trip_p99_to_pingpong_p99"], "%.2f"), sp(s["lost"], "%.0f"), sp(s["errors"], "%.0f"))
	}
	if b := p.Beside; b != nil {
		s := b.Spread
		fmt.Fprintf(w, "%7d peer   %d rings at once, each its consumer: one ring alone %s/s; total over one alone %s, slowest ring over one alone %s; lost %s errors %s\n",
			b.SlotBytes, b.Rings, sp(s["one_ring_alone.slots_per_s"], "%.0f"), sp(s["total_to_one_alone"], "%.3f"),
			sp(s["slowest_to_one_alone"], "%.3f"), sp(s["lost"], "%.0f"), sp(s["errors"], "%.0f"))
	}
	if p.Function == functionEmpty {
		fmt.Fprintln(w, "goals: none judged: the consumer ran an empty function, which reads nothing (-peer-function empty)")
	}
	for _, g := range p.Goals {
		cmp := ">="
		if g.AtMost {
			cmp = "<="
		}
		met := "MET"
		if !g.Met {
			met = "NOT MET"
		}
		fmt.Fprintf(w, "goal %-7s %s: %s (goal %s %g)\n", met, g.Name, sp(g.Measured, "%.3f"), cmp, g.Goal)
	}
}
