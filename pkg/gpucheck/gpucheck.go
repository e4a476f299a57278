//go:build linux

// Package gpucheck verifies acquisition frames (package frame) where they
// land, in GPU memory: a CUDA kernel checks every frame's header and CRC32C
// and the host accounts for the sequence numbers exactly as frame.Checker
// does on the CPU. Reader reads device memory as fast as a kernel can,
// the baseline the checker's throughput is measured against.
//
// The kernels ship as PTX (framecheck.ptx, made from framecheck.cu by
// `make ptx`, PTX ISA 6.0 for sm_70 and later); the driver compiles it for
// the GPU at load time, so no CUDA toolkit is needed where it runs.
package gpucheck

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// PTX is the kernels, as `make ptx` generated them from Source.
//
//go:embed framecheck.ptx
var PTX []byte

// Source is the kernels' CUDA C source.
//
//go:embed framecheck.cu
var Source []byte

const (
	blockSize     = 1024 // threads; BLOCK in framecheck.cu
	chunkTarget   = 4096 // payload bytes per thread: best measured on an H200
	runWords      = 2    // words per run when a group shares a frame: 32 bytes, a sector
	minGroup      = 4    // threads per frame of at least minGroupWords words
	minGroupWords = 64
	recordBytes   = 16
	staticBytes   = 32 * 4 // warp_crc
	gapBytes      = 4 * 256 * 4
	readBlock     = 512 // READ_BLOCK in framecheck.cu
	readPerSM     = 4   // readsum blocks per multiprocessor
)

// Config is the checker's table configuration.
type Config int

const (
	// Auto picks Large where the device allows a block its shared
	// memory, Small elsewhere.
	Auto Config = iota
	// Large: slicing-by-4 tables, 128 KiB of shared memory a block and
	// the 4 KiB gap multiplier (compute capability 8.0 and 9.0, and
	// others that allow a block more than 132 KiB).
	Large
	// Small: one byte table, 32 KiB and the gap multiplier, within the
	// 48 KiB every GPU gives a block (V100, Turing, and the RTX and Ada
	// workstation parts, which allow 64 to 99 KiB).
	Small
)

func (c Config) String() string {
	switch c {
	case Large:
		return "large"
	case Small:
		return "small"
	}
	return "auto"
}

// kernel returns the configuration's kernel and its dynamic shared memory.
func (c Config) kernel() (string, int) {
	if c == Small {
		return "framecheck_small", 256*32*4 + gapBytes
	}
	return "framecheck", 4*256*32*4 + gapBytes
}

// pickConfig returns the configuration for a device that allows a block
// optin bytes of shared memory.
func pickConfig(want Config, optin int) (Config, error) {
	if want == Auto {
		want = Large
		if _, n := Large.kernel(); optin < n+staticBytes {
			want = Small
		}
	}
	if _, n := want.kernel(); optin < n+staticBytes {
		return want, fmt.Errorf("%w: %s tables need %d bytes, the device allows %d", ErrSharedMem, want, n+staticBytes, optin)
	}
	return want, nil
}

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
	ErrSharedMem   = errors.New("gpucheck: the GPU cannot give a block the shared memory of the tables")
	ErrAlign       = errors.New("gpucheck: range must be 16-byte aligned and a whole number of 16-byte words")
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
	cfg       Config
	shared    int // dynamic shared memory a block
	mod       *cuda.Module
	fn        *cuda.Function
	frameSize uint64
	maxFrames uint64
	grid      int
	layout    layout
	mult      *cuda.Buffer // the kernel's multiplier tables for this frame size and layout
	initFix   uint32
	records   *cuda.Buffer     // one record per frame launched
	host      *cuda.HostBuffer // their page-locked copy
	pending   uint64           // frames launched, not yet collected
	acc       frame.Checker
	failures  Failures
}

// New loads the kernel and sizes a checker for frames of frameSize bytes,
// at most maxFrames of them between two Collects, in the configuration
// the device allows (Auto).
func New(g *cuda.Device, frameSize, maxFrames int) (*Checker, error) {
	return NewConfig(g, frameSize, maxFrames, Auto)
}

// NewConfig is New with the tables' configuration chosen by the caller.
func NewConfig(g *cuda.Device, frameSize, maxFrames int, cfg Config) (*Checker, error) {
	if frameSize < frame.HeaderSize+16 || frameSize%16 != 0 {
		return nil, fmt.Errorf("%w: %d", ErrFrameSize, frameSize)
	}
	if maxFrames < 1 {
		return nil, fmt.Errorf("%w: room for %d frames", ErrTooMany, maxFrames)
	}
	optin, err := g.Attribute(cuda.AttrMaxSharedPerBlockOptin)
	if err != nil {
		return nil, err
	}
	if cfg, err = pickConfig(cfg, optin); err != nil {
		return nil, err
	}
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	c := &Checker{dev: g, cfg: cfg, frameSize: uint64(frameSize), maxFrames: uint64(maxFrames), grid: sms,
		layout: defaultLayout(frameSize)}
	if err := c.load(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Config returns the checker's table configuration.
func (c *Checker) Config() Config { return c.cfg }

// Layout describes how a frame is shared among threads.
func (c *Checker) Layout() string {
	return fmt.Sprintf("threads=%d run=%d rounds=%d", 1<<c.layout.groupLog2, c.layout.run, c.layout.rounds)
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

// defaultLayout: about chunkTarget bytes a thread, and at least minGroup
// threads to a frame of minGroupWords words or more, taken in runs of
// runWords words: a warp's loads then fall in 8 cache lines, where one
// contiguous chunk a thread puts each lane in a line of its own (each
// line a cycle of the L1's, which the table lookups share).
func defaultLayout(frameSize int) layout {
	k := groupLog2(frameSize)
	if (frameSize-frame.HeaderSize)/16 >= minGroupWords {
		for 1<<k < minGroup {
			k++
		}
	}
	return newLayout(frameSize, k, runWords)
}

func (c *Checker) load() error {
	err := c.loadKernel(PTX)
	if err != nil {
		return err
	}
	if c.mult, err = c.dev.Alloc(multipliers * 1024 * 4); err != nil {
		return err
	}
	if err = c.setLayout(c.layout); err != nil {
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
	name, shared := c.cfg.kernel()
	fn, err := mod.Function(name)
	if err == nil {
		err = fn.SetMaxDynamicShared(shared)
	}
	if err != nil {
		mod.Close()
		return err
	}
	if c.mod != nil {
		c.mod.Close()
	}
	c.mod, c.fn, c.shared = mod, fn, shared
	return nil
}

// setLayout sets how a frame is shared and uploads the multipliers for it.
func (c *Checker) setLayout(l layout) error {
	t, fix := combineTables(int(c.frameSize), l)
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	if err := c.dev.CopyHtoD(c.mult.Ptr, b); err != nil {
		return err
	}
	c.layout, c.initFix = l, fix
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
	perBlock := uint64(blockSize >> c.layout.groupLog2)
	grid := min(uint64(c.grid), (frames+perBlock-1)/perBlock)
	out := c.records.Ptr + c.pending*recordBytes
	if err := c.fn.Launch(s, int(grid), blockSize, c.shared, c.args(ptr, frames, out, c.mult.Ptr)...); err != nil {
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
	n := c.pending * recordBytes
	if err := s.CopyDtoH(c.host, 0, c.records.Ptr, n); err != nil {
		return err
	}
	if err := s.Sync(); err != nil {
		return err
	}
	rec := c.host.Bytes()[:n]
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

// args are the kernel's arguments for frames at ptr, records to out.
func (c *Checker) args(ptr, frames, out, mult uint64) []uint64 {
	return []uint64{ptr, frames, c.frameSize, out, uint64(c.layout.groupLog2), uint64(c.layout.run),
		uint64(c.layout.rounds), mult, uint64(c.initFix)}
}

// ResetStats forgets the frames accounted for so far, as if none had
// been: the next frame is taken as the first.
func (c *Checker) ResetStats() {
	c.acc = frame.Checker{}
	c.failures = Failures{}
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
