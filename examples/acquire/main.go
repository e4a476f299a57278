// Command acquire is a complete acquisition program to copy from: it
// allocates GPU buffers for a ring of slots, streams an FPGA's C2H channel
// into them, checks every frame, and prints a summary.
//
// GPU memory comes from the test rig's simulated GPU; on a real system swap
// simgpu.StreamMemory for CUDA-allocated memory, which pkg/stream pins the
// same way.
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
	if err := run(*device, *channel, *slots, *slotSize, *total); err != nil {
		log.Fatal(err)
	}
}

func run(device string, channel, slots int, slotSize, total uint64) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	d, err := p2p.Open(device)
	if err != nil {
		return err
	}
	defer d.Close()
	gpu, err := simgpu.Open()
	if err != nil {
		return err
	}
	defer gpu.Close()

	s, err := stream.Start(ctx, stream.Config{
		Device:   d,
		Channel:  channel,
		SlotSize: slotSize,
		Slots:    slots,
		Mode:     stream.Auto,
		GPU:      simgpu.StreamMemory{GPU: gpu, Pattern: simgpu.Fragmented},
		Host:     stream.HostMemory{},
		Check:    true,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	for f := range s.Filled() {
		// Consume f.Data here: launch the GPU kernels that use the slot.
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
	fmt.Printf("acquired %.1f MiB in %d slots (%s mode) in %v: %.3f GB/s, mean slot latency %v\n",
		float64(st.Bytes)/(1<<20), st.Slots, st.Mode, st.Elapsed.Round(time.Millisecond), st.GBps, st.SlotLatency.Round(time.Microsecond))
	fmt.Printf("frames: %d checked, %d gaps, %d duplicates, %d CRC failures; at most %d slots held\n",
		st.Frames.Frames, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, st.MaxHeld)
	if st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		return fmt.Errorf("frames lost or damaged")
	}
	return nil
}
