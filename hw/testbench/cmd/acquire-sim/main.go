// Command acquire-sim is the rig's acquisition program, which `make demo`
// runs in the guest: it streams the simulated FPGA's C2H channel into a
// ring of slots in the simulated GPU's memory, checks every frame on the
// CPU (the simulated GPU's memory is CPU-visible through its BAR), sums
// the payload bytes of each slot as the consumer's work, and prints a
// summary. The program to copy for a real GPU is examples/acquire.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

func main() {
	device := flag.String("device", "/dev/gpufpga0", "gpufpga device")
	channel := flag.Int("channel", 1, "C2H stream channel")
	slots := flag.Int("slots", 32, "ring slots")
	slotSize := flag.Uint64("slot-size", 64<<10, "bytes per slot")
	total := flag.Uint64("bytes", 256<<20, "bytes to acquire")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *device, *channel, *slots, *slotSize, *total); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, device string, channel, slots int, slotSize uint64, total uint64) error {
	d, err := p2p.Open(device)
	if err != nil {
		return err
	}
	defer d.Close()
	sim, err := simgpu.Open()
	if err != nil {
		return fmt.Errorf("simulated GPU: %w", err)
	}
	defer sim.Close()
	s, err := stream.Start(ctx, stream.Config{
		Device:   d,
		Channel:  channel,
		SlotSize: slotSize,
		Slots:    slots,
		Mode:     stream.Auto,
		GPU:      simgpu.StreamGPU{GPU: sim, Pattern: simgpu.Fragmented},
		Check:    stream.CheckCPU,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	var sum uint64
	for f := range s.Filled() {
		for _, b := range f.Data {
			sum += uint64(b)
		}
		if err := s.Release(f.Slot); err != nil {
			return err
		}
		if s.Stats().Bytes >= total {
			if err := s.Stop(); err != nil {
				return err
			}
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("acquisition ended: %w", err)
	}
	st := s.Stats()
	mode := st.Mode.String() + " mode"
	if st.Mode == stream.Direct {
		mode += ", pinned through " + st.Pinning.String()
	}
	fmt.Printf("acquired %.1f MiB in %d slots (%s, checked on the %s) in %v: %.3f GB/s, mean slot latency %v\n",
		float64(st.Bytes)/(1<<20), st.Slots, mode, st.Check, st.Elapsed.Round(time.Millisecond), st.GBps, st.SlotLatency.Round(time.Microsecond))
	fmt.Printf("frames: %d checked, %d gaps, %d duplicates, %d CRC failures; at most %d slots held; byte sum %d\n",
		st.Frames.Frames, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, st.MaxHeld, sum)
	if st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		return fmt.Errorf("frames lost or damaged")
	}
	return nil
}
