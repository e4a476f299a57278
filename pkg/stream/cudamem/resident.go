//go:build linux

package cudamem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/resident"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

var _ stream.ResidentGPU = (*GPU)(nil)

// StartConsumer implements stream.ResidentGPU with package resident's
// persistent kernel checking the FPGA's frames word by word where they
// land (stream.CheckGPU, fixed-size frames). It refuses a GPU that does
// not promise to show its own kernels a peer's writes in order
// (GPUDirect RDMA writes ordering below owner): its kernel could read a
// result before the slot's data.
func (c *GPU) StartConsumer(r stream.ResidentRing) (stream.ResidentConsumer, error) {
	if r.Check != stream.CheckGPU || r.FrameSize <= 0 {
		return nil, fmt.Errorf("%w: a resident consumer on a CUDA GPU checks frames there: check %v with a frame size, not %v",
			stream.ErrConfig, stream.CheckGPU, r.Check)
	}
	if len(r.Consumer) < resident.ConsumerSize || uintptr(unsafe.Pointer(&r.Consumer[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: consumer word of %d bytes", stream.ErrConfig, len(r.Consumer))
	}
	ord, _, err := c.dev.RDMAOrdering()
	if err != nil {
		return nil, err
	}
	if ord < cuda.RDMAOrderingOwner {
		return nil, fmt.Errorf("%w: the GPU's GPUDirect RDMA writes ordering is %v: its kernels may see a slot's result before its data (p2pctl doctor: gpu.ordering)",
			stream.ErrUnsupported, ord)
	}
	rc := &residentConsumer{word: (*uint64)(unsafe.Pointer(&r.Consumer[0])), frameSize: uint64(r.FrameSize)}
	err = c.dev.Do(func() error {
		if rc.k, err = resident.LoadKernels(c.dev); err != nil {
			return err
		}
		// A status left from an earlier stream would read as a fill.
		if err := c.dev.CopyHtoD(r.Results.Addr(), make([]byte, r.Slots*resident.ResultSize)); err != nil {
			return err
		}
		if rc.mapped, err = c.dev.HostRegisterMapped(r.Consumer); err != nil {
			return err
		}
		rc.fc, err = rc.k.StartFrames(c.dev, resident.StreamRing{
			Slots: r.Ring.Addr(), SlotSize: int(r.SlotSize), NSlots: r.Slots, Results: r.Results.Addr(),
			Consumer: rc.mapped.DevPtr, Published: rc.published, FrameSize: r.FrameSize,
		}, resident.Resident{})
		return err
	})
	if err != nil {
		rc.release(c.dev)
		return nil, err
	}
	rc.dev = c.dev
	return rc, nil
}

// residentConsumer is resident_consume running on a driver stream's ring.
type residentConsumer struct {
	dev       *cuda.Device
	k         *resident.Kernels
	mapped    *cuda.MappedBuffer
	fc        *resident.FrameConsumer
	word      *uint64
	frameSize uint64

	once  sync.Once
	mu    sync.Mutex // final and stopped
	final resident.Counters
	done  bool // stopped: final holds the kernel's counts
	err   error
}

func (rc *residentConsumer) published() uint64 { return atomic.LoadUint64(rc.word) }

// Stats reports the fills and bytes published while the kernel runs,
// which writes its frame counts back only when it stops. CRCFailures
// counts the fills (or the parts several workers read) whose frames
// failed their check.
func (rc *residentConsumer) Stats() stream.ConsumerStats {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.done {
		return stream.ConsumerStats{Consumed: rc.published(), Bytes: rc.fc.Bytes()}
	}
	c := rc.final
	return stream.ConsumerStats{Consumed: c.Published, Bytes: c.Bytes, Frames: frame.Stats{
		Frames: c.Frames, Bytes: c.Frames * rc.frameSize, Gaps: c.Gaps, Duplicates: c.Duplicates, CRCFailures: c.Errors,
	}}
}

// Done is closed once the kernel has ended: stopped, or failed.
func (rc *residentConsumer) Done() <-chan struct{} { return rc.fc.Done() }

// Stop stops the kernel where it is: it leaves once every fill it has
// seen is published.
func (rc *residentConsumer) Stop() error {
	rc.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		final, err := rc.fc.Stop(ctx, 0)
		err = errors.Join(err, rc.release(rc.dev))
		rc.mu.Lock()
		rc.final, rc.err, rc.done = final, err, true
		rc.mu.Unlock()
	})
	return rc.err
}

// release unregisters the word and unloads the kernels.
func (rc *residentConsumer) release(g *cuda.Device) error {
	return g.Do(func() error {
		var errs []error
		if rc.mapped != nil {
			errs = append(errs, rc.mapped.Free())
		}
		if rc.k != nil {
			errs = append(errs, rc.k.Close())
		}
		return errors.Join(errs...)
	})
}
