//go:build linux

package resident

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// framesFuncPTX is the built-in frame checker as a function
// (frames_func.cu), as `make ptx` generated it.
//
//go:embed frames_func.ptx
var framesFuncPTX []byte

// frameHeader is frame.HeaderSize: FRAME_HEADER in frm1.cu.
const frameHeader = 32

// framesRecordSize is struct frames_record: the fill's first sequence
// number and the frames that passed.
const framesRecordSize = 16

// framesDepth is how many fills' records may wait for the host (1 MiB of
// them): 5 ms of 4 KiB fills at 12.5 M a second, before a worker waits
// for the reader.
const framesDepth = 1 << 16

// Frames is the built-in frame checker, linked into the consumer as a
// user's function is (LinkFunc), loaded once per GPU.
type Frames struct {
	f *Func
}

// LinkFrames links and loads the frame checker: it waits for every
// kernel running on the device, so link it before the first consumer
// starts.
func LinkFrames(g *cuda.Device) (*Frames, error) {
	f, err := LinkFunc(g, "frames_func.ptx", framesFuncPTX)
	if err != nil {
		return nil, err
	}
	return &Frames{f: f}, nil
}

// Close frees the consumers' memory and unloads the module; both wait for
// every kernel running on the device.
func (fr *Frames) Close() error { return fr.f.Close() }

// FrameConsumer is the frame checker running on a driver stream's ring.
type FrameConsumer struct {
	c *FuncConsumer
	// The record reader's until Stop has waited for it: each fill's
	// frames counted in fill order, as on the CPU.
	acc frame.Checker
}

// Start launches the frame checker on a driver stream's ring of FRM1
// frames of frameSize bytes (package frame; a multiple of 16 over 32):
// every fill's frames are checked word by word where they landed, and
// their sequence numbers counted in fill order on the host
// (frame.Checker.Account: a bad fill's frames are missing), with no CPU
// work per slot but reading a 16-byte record. Start it before the stream,
// with the results zeroed. workers is FuncConfig.Workers (0: 16). It
// allocates from what earlier consumers of fr ran on and loads nothing,
// so it waits for none of them; while it runs, cuMemFree, cuMemFreeHost,
// cuMemHostUnregister and module loads and unloads of the whole process
// wait for it. One block checks each fill: with few large slots, give
// the ring more slots, not the consumer more workers.
func (fr *Frames) Start(g *cuda.Device, r StreamRing, workers, frameSize int) (*FrameConsumer, error) {
	if frameSize <= frameHeader || frameSize%16 != 0 || r.SlotSize%frameSize != 0 {
		return nil, fmt.Errorf("%w: %d-byte slots of %d-byte frames (a multiple of 16 over %d)", ErrConfig, r.SlotSize, frameSize, frameHeader)
	}
	fc := &FrameConsumer{}
	state := binary.LittleEndian.AppendUint64(nil, uint64(frameSize)) // struct frames_state
	c, err := fr.f.Start(g, r, FuncConfig{Workers: workers, State: state, OutSize: framesRecordSize, OutDepth: framesDepth,
		OnRecord: func(_ uint64, rec []byte) {
			first, n := binary.LittleEndian.Uint64(rec), binary.LittleEndian.Uint64(rec[8:])
			for i := range n {
				fc.acc.Account(first+i, frameSize)
			}
		}})
	if err != nil {
		return nil, err
	}
	fc.c = c
	return fc, nil
}

// Done is closed once the kernel has ended: stopped, or failed (Stop
// says why).
func (c *FrameConsumer) Done() <-chan struct{} { return c.c.Done() }

// Bytes returns the bytes of the fills the workers have taken so far; 0
// once stopped.
func (c *FrameConsumer) Bytes() uint64 { return c.c.Bytes() }

// Stop ends the consumer once it has published fills (a stream's
// p2p.Stream.Fills, once it has ended), or when ctx ends first
// (ErrStalled), and returns its counters, the frames' among them.
func (c *FrameConsumer) Stop(ctx context.Context, fills uint64) (Counters, error) {
	cnt, err := c.c.Stop(ctx, fills)
	// Stop has waited for the record reader: the order is this
	// goroutine's now.
	cnt.Frames, cnt.Gaps, cnt.Duplicates = c.acc.Frames, c.acc.Gaps, c.acc.Duplicates
	return cnt, err
}
