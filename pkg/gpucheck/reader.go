//go:build linux

package gpucheck

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// Reader reads device memory with readsum, a kernel that reads every byte
// once and xors the 16-byte words together: what the GPU's memory
// delivers to a kernel that only reads, the baseline of the checker's
// throughput. Use it from the goroutine that holds the device's context.
type Reader struct {
	mod  *cuda.Module
	fn   *cuda.Function
	out  *cuda.Buffer
	host *cuda.HostBuffer
	grid int
}

// NewReader loads the kernel.
func NewReader(g *cuda.Device) (*Reader, error) {
	sms, err := g.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	r := &Reader{grid: sms * readPerSM}
	if r.mod, err = g.LoadPTX(PTX); err != nil {
		return nil, fmt.Errorf("gpucheck: loading the kernel: %w", err)
	}
	if r.fn, err = r.mod.Function("readsum"); err == nil {
		if r.out, err = g.Alloc(16); err == nil {
			r.host, err = g.HostAlloc(16)
		}
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Reset zeroes the sum, on s.
func (r *Reader) Reset(s *cuda.Stream) error { return s.MemsetD8(r.out.Ptr, 0, 16) }

// Launch queues the read of [ptr, ptr+n) on s, xoring it into the sum;
// ptr and n multiples of 16.
func (r *Reader) Launch(s *cuda.Stream, ptr, n uint64) error {
	if ptr%16 != 0 || n%16 != 0 {
		return fmt.Errorf("%w: %d bytes at %#x", ErrAlign, n, ptr)
	}
	return r.fn.Launch(s, r.grid, readBlock, 0, ptr, n/16, r.out.Ptr)
}

// Sum waits for the launches queued on s and returns the xor of the
// 16-byte words read since the last Reset, as four little-endian words.
func (r *Reader) Sum(s *cuda.Stream) ([4]uint32, error) {
	var v [4]uint32
	if err := s.CopyDtoH(r.host, 0, r.out.Ptr, 16); err != nil {
		return v, err
	}
	if err := s.Sync(); err != nil {
		return v, err
	}
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(r.host.Bytes()[4*i:])
	}
	return v, nil
}

// Close frees the reader's memory and unloads the kernel.
func (r *Reader) Close() error {
	var errs []error
	if r.host != nil {
		errs = append(errs, r.host.Free())
	}
	if r.out != nil {
		errs = append(errs, r.out.Free())
	}
	if r.mod != nil {
		errs = append(errs, r.mod.Close())
	}
	return errors.Join(errs...)
}

// XorSum is what readsum computes, on the CPU: the xor of b's 16-byte
// words (len(b) a multiple of 16) as four little-endian words.
func XorSum(b []byte) [4]uint32 {
	var x [2]uint64
	for i := 0; i+16 <= len(b); i += 16 {
		x[0] ^= binary.LittleEndian.Uint64(b[i:])
		x[1] ^= binary.LittleEndian.Uint64(b[i+8:])
	}
	return [4]uint32{uint32(x[0]), uint32(x[0] >> 32), uint32(x[1]), uint32(x[1] >> 32)}
}
