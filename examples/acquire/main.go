// Command acquire is a complete acquisition program to copy from: it
// allocates GPU buffers for a ring of slots, streams an FPGA's C2H channel
// into them, checks every frame, and prints a summary.
//
// GPU memory comes from CUDA where there is a CUDA driver, the frames then
// checked on the GPU by package gpucheck's kernel; on the test rig it is
// the simulated GPU's, checked on the CPU. The acquisition code is the
// same for both.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

func main() {
	device := flag.String("device", "/dev/gpufpga0", "gpufpga device")
	channel := flag.Int("channel", 1, "C2H stream channel")
	slots := flag.Int("slots", 32, "ring slots")
	slotSize := flag.Uint64("slot-size", 64<<10, "bytes per slot")
	frameSize := flag.Int("frame-size", 64<<10, "bytes per frame (checking on the GPU)")
	total := flag.Uint64("bytes", 256<<20, "bytes to acquire")
	flag.Parse()
	if err := run(*device, *channel, *slots, *slotSize, *frameSize, *total); err != nil {
		log.Fatal(err)
	}
}

// openGPU picks CUDA when there is a driver, else the rig's simulated GPU.
func openGPU() (stream.GPU, stream.Check, func(), error) {
	c, err := stream.OpenCUDA(0)
	if err == nil {
		return c, stream.CheckGPU, func() { c.Close() }, nil
	}
	if !errors.Is(err, cuda.ErrNoDriver) {
		return nil, 0, nil, err
	}
	sim, err := simgpu.Open()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("no CUDA driver and no simulated GPU: %w", err)
	}
	return simgpu.StreamGPU{GPU: sim, Pattern: simgpu.Fragmented}, stream.CheckCPU, func() { sim.Close() }, nil
}

func run(device string, channel, slots int, slotSize uint64, frameSize int, total uint64) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	d, err := p2p.Open(device)
	if err != nil {
		return err
	}
	defer d.Close()
	gpu, check, closeGPU, err := openGPU()
	if err != nil {
		return err
	}
	defer closeGPU()

	s, err := stream.Start(ctx, stream.Config{
		Device:    d,
		Channel:   channel,
		SlotSize:  slotSize,
		Slots:     slots,
		Mode:      stream.Auto,
		GPU:       gpu,
		Check:     check,
		FrameSize: frameSize,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	for f := range s.Filled() {
		// Consume the slot here: launch the GPU kernels that read
		// f.Len bytes at f.Addr, then release it.
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
	fmt.Printf("acquired %.1f MiB in %d slots (%s mode, checked on the %s) in %v: %.3f GB/s, mean slot latency %v\n",
		float64(st.Bytes)/(1<<20), st.Slots, st.Mode, st.Check, st.Elapsed.Round(time.Millisecond), st.GBps, st.SlotLatency.Round(time.Microsecond))
	fmt.Printf("frames: %d checked, %d gaps, %d duplicates, %d CRC failures; at most %d slots held\n",
		st.Frames.Frames, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, st.MaxHeld)
	if st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		return fmt.Errorf("frames lost or damaged")
	}
	return nil
}
