//go:build linux

package stream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// An acquisition into a ring of 16 slots in the memory of CUDA device 0:
// each filled slot is handed to the consumer, then back to the engine; the
// frames (64 KiB each) are checked on the GPU on the way (sequence numbers
// and CRCs), and Stop ends the session after 64 slots.
func ExampleStart() {
	gpu, err := cudamem.Open(0)
	if err != nil {
		log.Fatal(err)
	}
	defer gpu.Close()
	dev, err := p2p.Open("/dev/gpufpga0")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	if err := acquire(dev, gpu, stream.CheckGPU); err != nil {
		log.Fatal(err)
	}
}

// acquire runs the session on channel c2h1 and prints what it saw.
func acquire(dev *p2p.Device, gpu stream.GPU, check stream.Check) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := stream.Start(ctx, stream.Config{
		Device: dev, Channel: 1, Slots: 16, SlotSize: 64 << 10,
		GPU: gpu, Check: check, FrameSize: 64 << 10,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	for f := range s.Filled() {
		// f.Addr is the slot's address in GPU memory: launch the work
		// on it here, and release the slot once that work is done
		// (ReleaseAfter does it when a CUDA event completes).
		if err := s.Release(f.Slot); err != nil {
			return err
		}
		if s.Stats().Slots >= 64 {
			s.Stop() // slots filled before the stop still arrive, then Filled closes
		}
	}
	st := s.Stats()
	fmt.Printf("%s mode, at least 64 slots: %v, gaps %d, duplicates %d, CRC failures %d, ended: %v\n",
		st.Mode, st.Slots >= 64, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, s.Err())
	return s.Err()
}
