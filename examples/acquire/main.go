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
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
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
	c, err := cudamem.Open(0)
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

// consumer is the application's work on each slot.
type consumer interface {
	// consume starts the work on f and releases the slot when the work
	// no longer reads it.
	consume(s *stream.Session, f stream.Filled) error
	close() error
}

// gpuConsumer works on slots in CUDA memory on its own CUDA stream. The
// work is asynchronous: the slot goes back to the FPGA only after an event
// recorded behind it has completed, never right after the launch.
type gpuConsumer struct {
	c    *cudamem.GPU
	s    *cuda.Stream
	work *cuda.Buffer // stands in for the application's output
}

func newGPUConsumer(c *cudamem.GPU, slotSize uint64) (*gpuConsumer, error) {
	g := c.Device()
	if err := g.Lock(); err != nil {
		return nil, err
	}
	defer g.Unlock()
	s, err := g.NewStream()
	if err != nil {
		return nil, err
	}
	work, err := g.Alloc(slotSize)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &gpuConsumer{c: c, s: s, work: work}, nil
}

func (k *gpuConsumer) consume(s *stream.Session, f stream.Filled) error {
	g := k.c.Device()
	if err := g.Lock(); err != nil {
		return err
	}
	// The application's kernels go here, reading f.Len bytes at f.Addr;
	// a copy out of the slot stands in for them.
	err := k.s.CopyDtoD(k.work.Ptr, f.Addr, f.Len)
	g.Unlock()
	if err != nil {
		return err
	}
	done, err := k.c.Done(k.s)
	if err != nil {
		return err
	}
	s.ReleaseAfter(f.Slot, done)
	return nil
}

func (k *gpuConsumer) close() error {
	g := k.c.Device()
	if err := g.Lock(); err != nil {
		return err
	}
	defer g.Unlock()
	return errors.Join(k.s.Sync(), k.work.Free(), k.s.Close())
}

// cpuConsumer works on slots the CPU can read (the simulated GPU's), to
// completion before releasing them.
type cpuConsumer struct{ sum uint64 }

func (k *cpuConsumer) consume(s *stream.Session, f stream.Filled) error {
	for _, b := range f.Data {
		k.sum += uint64(b)
	}
	return s.Release(f.Slot)
}

func (k *cpuConsumer) close() error { return nil }

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
	var work consumer = &cpuConsumer{}
	if c, ok := gpu.(*cudamem.GPU); ok {
		k, err := newGPUConsumer(c, slotSize)
		if err != nil {
			return err
		}
		work = k
	}
	// Before Close frees the ring: the work on the last slots ends first.
	defer work.close()
	for f := range s.Filled() {
		if err := work.consume(s, f); err != nil {
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
	fmt.Printf("frames: %d checked, %d gaps, %d duplicates, %d CRC failures; at most %d slots held\n",
		st.Frames.Frames, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, st.MaxHeld)
	if st.Frames.Gaps+st.Frames.Duplicates+st.Frames.CRCFailures != 0 {
		return fmt.Errorf("frames lost or damaged")
	}
	return nil
}
