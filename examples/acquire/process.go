package main

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/stream"
	"github.com/gpufpga/gpufpga/pkg/stream/cudamem"
)

// framestatsPTX is the default kernel, framestats.cu as `make ptx` compiled
// it. -ptx and -kernel name another.
//
//go:embed framestats.ptx
var framestatsPTX []byte

const (
	defaultKernel = "framestats"
	blockThreads  = 256 // BLOCK in framestats.cu
	recordWords   = 8   // RECORD_WORDS in framestats.cu
	recordBytes   = recordWords * 8
	headerBytes   = 32 // a frame's header, before its samples
)

// ErrKernel reports a kernel that cannot be loaded or does not fit the
// launch the example makes.
var ErrKernel = errors.New("acquire: kernel")

// Record is what the kernel writes for one frame (framestats.cu).
type Record struct {
	Seq       uint64 // the frame's sequence number
	Samples   uint64 // 16-bit samples in its payload; 0 if it was no frame
	Sum       int64
	SumSq     uint64
	Min, Max  int64
	Over      uint64 // samples whose magnitude reached the threshold
	FirstOver uint64 // index of the first of them; NoSample if none
}

// NoSample is Record.FirstOver when no sample reached the threshold.
const NoSample = ^uint64(0)

// Mean is the mean sample.
func (r Record) Mean() float64 {
	if r.Samples == 0 {
		return 0
	}
	return float64(r.Sum) / float64(r.Samples)
}

// RMS is the root mean square of the samples.
func (r Record) RMS() float64 {
	if r.Samples == 0 {
		return 0
	}
	return math.Sqrt(float64(r.SumSq) / float64(r.Samples))
}

// Triggered reports whether a sample reached the threshold.
func (r Record) Triggered() bool { return r.Over > 0 }

func decodeRecord(b []byte) Record {
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return Record{Seq: w(0), Samples: w(1), Sum: int64(w(2)), SumSq: w(3), Min: int64(w(4)), Max: int64(w(5)),
		Over: w(6), FirstOver: w(7)}
}

// KernelConfig says which kernel runs on each slot, and on what.
type KernelConfig struct {
	PTX       []byte // PTX text; nil for framestats
	Name      string // the kernel's entry; "" for framestats
	FrameSize int    // bytes per frame: slots hold whole frames
	Threshold int    // the trigger's sample magnitude; 0 or less: off
	// Depth is how many slots' work may be in flight on the GPU before
	// the oldest's results are read: results come back that many slots
	// late, and the CPU waits for none of them sooner.
	Depth int
}

// Pipeline runs the kernel on slots in GPU memory, one launch per slot on
// its own CUDA stream, each launch followed by an asynchronous copy of its
// records to page-locked host memory and an event that stream.Session's
// ReleaseAfter waits for: the CPU never waits for a slot's work before
// taking the next.
type Pipeline struct {
	gpu     *cudamem.GPU
	g       *cuda.Device
	cfg     KernelConfig
	perSlot int // records a slot's results have room for
	mod     *cuda.Module
	fn      *cuda.Function
	s       *cuda.Stream
	out     *cuda.Buffer     // Depth regions of perSlot records
	host    *cuda.HostBuffer // the same, copied back
	pending []launch         // oldest first
	next    int              // region of the next launch
}

// launch is a slot's work in flight.
type launch struct {
	region, frames int
	done           stream.Copy
}

// NewPipeline loads the kernel on gpu's device for slots of up to
// slotSize bytes.
func NewPipeline(gpu *cudamem.GPU, slotSize uint64, cfg KernelConfig) (*Pipeline, error) {
	if cfg.PTX == nil {
		cfg.PTX = framestatsPTX
	}
	if cfg.Name == "" {
		cfg.Name = defaultKernel
	}
	if cfg.FrameSize <= headerBytes || cfg.FrameSize%4 != 0 || slotSize%uint64(cfg.FrameSize) != 0 {
		return nil, fmt.Errorf("%w: frames of %d bytes in slots of %d: frames need a multiple of 4 bytes above the %d-byte header, and slots whole frames",
			stream.ErrConfig, cfg.FrameSize, slotSize, headerBytes)
	}
	cfg.Depth = max(cfg.Depth, 1)
	p := &Pipeline{gpu: gpu, g: gpu.Device(), cfg: cfg, perSlot: int(slotSize / uint64(cfg.FrameSize))}
	err := p.g.Do(func() error {
		var err error
		if p.mod, err = p.g.LoadPTX(cfg.PTX); err != nil {
			return fmt.Errorf("%w: loading PTX: %w", ErrKernel, err)
		}
		if p.fn, err = p.mod.Function(cfg.Name); err != nil {
			return fmt.Errorf("%w: entry %q: %w", ErrKernel, cfg.Name, err)
		}
		if p.s, err = p.g.NewStream(); err != nil {
			return err
		}
		size := uint64(cfg.Depth * p.perSlot * recordBytes)
		if p.out, err = p.g.Alloc(size); err != nil {
			return err
		}
		p.host, err = p.g.HostAlloc(size)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, p.free())
	}
	return p, nil
}

// LoadPTXFile reads a kernel's PTX, for KernelConfig.PTX.
func LoadPTXFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKernel, err)
	}
	return b, nil
}

// Submit queues the kernel on the n bytes of a slot at GPU address addr
// (its whole frames), and the copy of their records back, and returns
// the event after both, for stream.Session.ReleaseAfter. Only Depth
// slots' work may be pending: Retire the oldest first.
func (p *Pipeline) Submit(addr, n uint64) (stream.Copy, error) {
	if len(p.pending) >= p.cfg.Depth {
		return nil, fmt.Errorf("%w: %d slots' work pending, their results not read", stream.ErrConfig, len(p.pending))
	}
	frames := min(int(n/uint64(p.cfg.FrameSize)), p.perSlot)
	region := p.next
	off := uint64(region * p.perSlot * recordBytes)
	err := p.g.Do(func() error {
		if frames == 0 {
			return nil
		}
		if err := p.fn.Launch(p.s, frames, blockThreads, 0, addr, n, uint64(p.cfg.FrameSize),
			uint64(uint32(int32(p.cfg.Threshold))), p.out.Ptr+off); err != nil {
			return fmt.Errorf("%w: %w", ErrKernel, err)
		}
		return p.s.CopyDtoH(p.host, off, p.out.Ptr+off, uint64(frames*recordBytes))
	})
	if err != nil {
		return nil, err
	}
	done, err := p.gpu.Done(p.s)
	if err != nil {
		return nil, err
	}
	p.pending = append(p.pending, launch{region: region, frames: frames, done: done})
	p.next = (p.next + 1) % p.cfg.Depth
	return done, nil
}

// Retire waits for the oldest slots' work until at most keep are pending,
// and hands their records to fn, in order.
func (p *Pipeline) Retire(keep int, fn func(Record)) error {
	for len(p.pending) > keep {
		l := p.pending[0]
		if err := l.done.Wait(); err != nil {
			return fmt.Errorf("acquire: waiting for a slot's results: %w", err)
		}
		p.pending = p.pending[1:]
		b := p.host.Bytes()[l.region*p.perSlot*recordBytes:]
		for i := range l.frames {
			fn(decodeRecord(b[i*recordBytes:]))
		}
	}
	return nil
}

// Close waits for the work queued and frees what the pipeline holds.
func (p *Pipeline) Close() error { return p.free() }

func (p *Pipeline) free() error {
	return p.g.Do(func() error {
		var errs []error
		if p.s != nil {
			errs = append(errs, p.s.Sync(), p.s.Close())
		}
		if p.host != nil {
			errs = append(errs, p.host.Free())
		}
		if p.out != nil {
			errs = append(errs, p.out.Free())
		}
		if p.mod != nil {
			errs = append(errs, p.mod.Close())
		}
		return errors.Join(errs...)
	})
}

// Consume runs p on every slot s fills, hands each slot back once the
// kernel and the copy of its results are done with it, and hands every
// frame's record to fn, in order. It stops the session once limit bytes
// have come (0: none), and returns when the session has ended and every
// record is in.
func Consume(s *stream.Session, p *Pipeline, limit uint64, fn func(Record)) error {
	for f := range s.Filled() {
		// Room for this slot's results: the oldest's are read first.
		if err := p.Retire(p.cfg.Depth-1, fn); err != nil {
			return err
		}
		done, err := p.Submit(f.Addr, f.Len)
		if err != nil {
			return err
		}
		s.ReleaseAfter(f.Slot, done)
		if limit > 0 && s.Stats().Bytes >= limit {
			if err := s.Stop(); err != nil {
				return err
			}
		}
	}
	return p.Retire(0, fn)
}
