package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
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
}

// runResident measures GPU-resident streams against the CPU-driven path
// and the bare round trips (pkg/resident), into a new
// DATE-GPU-REV-resident.json in out (or standard output with -).
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r.Resident, err = measureResident(ctx, g, cfg)
	r.GPUEnd = nvidiaSMI()
	r.Seconds = time.Since(t0).Seconds()
	if err != nil {
		if r.Resident != nil {
			json.NewEncoder(os.Stderr).Encode(r.Resident)
		}
		return fmt.Errorf("resident: %w", err)
	}
	w := os.Stdout
	if out != "-" {
		f, err := createResult(out, t0, r.Device, r.Build.shortRev()+"-resident")
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
func printResident(w *os.File, rep *residentPass) {
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
}
