//go:build linux

// Package gpucheck verifies acquisition frames (package frame) where they
// land, in GPU memory: a CUDA kernel checks every frame's header and CRC32C
// at memory speed and the host accounts for the sequence numbers exactly as
// frame.Checker does on the CPU.
//
// The kernel ships as PTX (framecheck.ptx, made from framecheck.cu by
// `make ptx`); the driver compiles it for the GPU at load time, so no CUDA
// toolkit is needed where it runs.
package gpucheck

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// PTX is the checker kernel, as nvcc generated it from Source.
//
//go:embed framecheck.ptx
var PTX []byte

// Source is the kernel's CUDA C source.
//
//go:embed framecheck.cu
var Source []byte

const (
	kernel      = "framecheck"
	blockSize   = 1024             // threads; BLOCK in framecheck.cu
	chunkTarget = 4096             // payload bytes per thread: best measured on an H200
	tableBytes  = 4 * 256 * 32 * 4 // slicing-by-4 tables, one copy per bank
	recordBytes = 16
)

// Frame status codes the kernel writes (enum status in framecheck.cu).
const (
	statusOK = iota
	statusBadMagic
	statusBadVersion
	statusBadLength
	// 4: CRC mismatch
)

// Errors.
var (
	ErrFrameSize   = errors.New("gpucheck: frame size must be a multiple of 16 bytes and at least 48")
	ErrWholeFrames = errors.New("gpucheck: range is not a whole number of frames")
	ErrTooMany     = errors.New("gpucheck: more frames than the checker was sized for")
	ErrSharedMem   = errors.New("gpucheck: the GPU cannot give a block 128 KiB of shared memory (needs compute capability 8.0 or 9.0)")
)

// Failures counts frames that failed, by reason; their sum is
// frame.Stats.CRCFailures (the CPU checker's name for any bad frame).
type Failures struct {
	Magic   uint64
	Version uint64
	Length  uint64
	CRC     uint64
}

// Checker checks fixed-size frames in device memory. It is not safe for
// concurrent use; use it from the goroutine that holds the device's
// context (cuda.Device.Lock).
type Checker struct {
	dev       *cuda.Device
	mod       *cuda.Module
	fn        *cuda.Function
	frameSize uint64
	maxFrames uint64
	grid      int
	groupLog2 uint         // 2^groupLog2 threads check a frame
	mult      *cuda.Buffer // the kernel's multiplier tables for this frame size and group
	initFix   uint32
	records   *cuda.Buffer     // one record per frame launched
	host      *cuda.HostBuffer // their page-locked copy
	pending   uint64           // frames launched, not yet collected
	acc       frame.Checker
	failures  Failures
}

// New loads the kernel and sizes a checker for frames of frameSize bytes,
// at most maxFrames of them between two Collects.
func New(g *cuda.Device, frameSize, maxFrames int) (*Checker, error) {
	if frameSize < frame.HeaderSize+16 || frameSize%16 != 0 {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, frameSize)
	}
	if maxFrames < 1 {
		return nil, fmt.Errorf("%w: room for %d frames", ErrTooMany, maxFrames)
	}
	if n, err := g.Attribute(cuda.AttrMaxSharedPerBlockOptin); err != nil {
		return nil, err
	} else if n < tableBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrSharedMem, n)
	}
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	c := &Checker{dev: g, frameSize: uint64(frameSize), maxFrames: uint64(maxFrames), grid: sms,
		groupLog2: groupLog2(frameSize)}
	if err := c.load(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// groupLog2 picks the threads per frame: chunks of about chunkTarget
// bytes, from one thread to a whole block.
func groupLog2(frameSize int) uint {
	want := (frameSize - frame.HeaderSize + chunkTarget - 1) / chunkTarget
	var k uint
	for 1<<k < want && 1<<k < blockSize {
		k++
	}
	return k
}

func (c *Checker) load() error {
	err := c.loadKernel(PTX)
	if err != nil {
		return err
	}
	if c.mult, err = c.dev.Alloc(multipliers * 1024 * 4); err != nil {
		return err
	}
	if err = c.setGroup(c.groupLog2); err != nil {
		return err
	}
	if c.records, err = c.dev.Alloc(c.maxFrames * recordBytes); err != nil {
		return err
	}
	c.host, err = c.dev.HostAlloc(c.maxFrames * recordBytes)
	return err
}

// loadKernel loads the kernel from ptx, in place of any loaded before.
func (c *Checker) loadKernel(ptx []byte) error {
	mod, err := c.dev.LoadPTX(ptx)
	if err != nil {
		return fmt.Errorf("gpucheck: loading the kernel: %w", err)
	}
	fn, err := mod.Function(kernel)
	if err == nil {
		err = fn.SetMaxDynamicShared(tableBytes)
	}
	if err != nil {
		mod.Close()
		return err
	}
	if c.mod != nil {
		c.mod.Close()
	}
	c.mod, c.fn = mod, fn
	return nil
}

// setGroup sets the threads per frame and uploads the multipliers for it.
func (c *Checker) setGroup(k uint) error {
	t, fix := combineTables(int(c.frameSize), k)
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	if err := c.dev.CopyHtoD(c.mult.Ptr, b); err != nil {
		return err
	}
	c.groupLog2, c.initFix = k, fix
	return nil
}

// FrameSize returns the frame size the checker was made for.
func (c *Checker) FrameSize() int { return int(c.frameSize) }

// Launch queues the check of the frames in [ptr, ptr+n) of device memory
// on s. ptr must be 16-byte aligned and n a whole number of frames.
func (c *Checker) Launch(s *cuda.Stream, ptr, n uint64) error {
	if ptr%16 != 0 || n%c.frameSize != 0 {
		return fmt.Errorf("%w: %d bytes at %#x, frames of %d", ErrWholeFrames, n, ptr, c.frameSize)
	}
	frames := n / c.frameSize
	if c.pending+frames > c.maxFrames {
		return fmt.Errorf("%w: %d pending + %d > %d", ErrTooMany, c.pending, frames, c.maxFrames)
	}
	if frames == 0 {
		return nil
	}
	perBlock := uint64(blockSize >> c.groupLog2)
	grid := min(uint64(c.grid), (frames+perBlock-1)/perBlock)
	out := c.records.Ptr + c.pending*recordBytes
	if err := c.fn.Launch(s, int(grid), blockSize, tableBytes, ptr, frames, c.frameSize, out, uint64(c.groupLog2),
		c.mult.Ptr, uint64(c.initFix)); err != nil {
		return err
	}
	c.pending += frames
	return nil
}

// Collect waits for the launches queued on s, reads their records back and
// accounts for the frames in launch order.
func (c *Checker) Collect(s *cuda.Stream) error {
	if c.pending == 0 {
		return nil
	}
	rec := c.host.Bytes[:c.pending*recordBytes]
	if err := s.CopyDtoH(rec, c.records.Ptr); err != nil {
		return err
	}
	if err := s.Sync(); err != nil {
		return err
	}
	for i := uint64(0); i < c.pending; i++ {
		r := rec[i*recordBytes:]
		c.account(binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[12:]))
	}
	c.pending = 0
	return nil
}

func (c *Checker) account(seq uint64, status uint32) {
	switch status {
	case statusOK:
		c.acc.Account(seq, int(c.frameSize))
		return
	case statusBadMagic:
		c.failures.Magic++
	case statusBadVersion:
		c.failures.Version++
	case statusBadLength:
		c.failures.Length++
	default: // CRC mismatch
		c.failures.CRC++
	}
	c.acc.CRCFailures++
}

// Stats returns the frames accounted for so far.
func (c *Checker) Stats() frame.Stats { return c.acc.Stats }

// Failures returns the failed frames by reason.
func (c *Checker) Failures() Failures { return c.failures }

// Close frees the checker's memory and unloads the kernel.
func (c *Checker) Close() error {
	var errs []error
	if c.host != nil {
		errs = append(errs, c.host.Free())
	}
	if c.records != nil {
		errs = append(errs, c.records.Free())
	}
	if c.mult != nil {
		errs = append(errs, c.mult.Free())
	}
	if c.mod != nil {
		errs = append(errs, c.mod.Close())
	}
	return errors.Join(errs...)
}
