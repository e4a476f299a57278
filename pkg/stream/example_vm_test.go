//go:build vmguest

package stream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// An acquisition into a ring of 16 slots in GPU memory: each filled slot
// is handed to the consumer, then back to the engine; the frames are
// checked on the way (sequence numbers and CRCs), and Stop ends the
// session after 64 slots.
func ExampleStart() {
	gpu := simulatedGPU() // with CUDA: cudamem.Open(0)
	dev, err := p2p.Open("/dev/gpufpga0")
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := stream.Start(ctx, stream.Config{
		Device: dev, Channel: 1, Slots: 16, SlotSize: 64 << 10,
		GPU: gpu, Check: stream.CheckCPU,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for f := range s.Filled() {
		// f.Addr is the slot's address in GPU memory: launch the work
		// on it here, and release the slot once that work is done
		// (ReleaseAfter does it when a CUDA event completes).
		if err := s.Release(f.Slot); err != nil {
			log.Fatal(err)
		}
		if s.Stats().Slots >= 64 {
			s.Stop()
		}
	}
	st := s.Stats()
	fmt.Printf("%s mode, at least 64 slots: %v, gaps %d, duplicates %d, CRC failures %d, ended: %v\n",
		st.Mode, st.Slots >= 64, st.Frames.Gaps, st.Frames.Duplicates, st.Frames.CRCFailures, s.Err())
	// Output: direct mode, at least 64 slots: true, gaps 0, duplicates 0, CRC failures 0, ended: <nil>
}
