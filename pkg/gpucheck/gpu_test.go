//go:build linux && gpu

package gpucheck

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

func device(t testing.TB) *cuda.Device {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	g, err := cuda.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	if err := g.Lock(); err != nil {
		t.Fatal(err)
	}
	return g
}

// frames lays out n frames of size bytes with the damage a link or a
// buggy source would do, and returns what the CPU checker makes of them.
func frames(n, size int) ([]byte, frame.Stats) {
	buf := make([]byte, n*size)
	seq := uint64(1000)
	for i := range n {
		switch {
		case i == 7 || i == 8: // two frames lost upstream
			seq += 3
		case i == 20: // a repeated frame
			seq -= 2
		}
		frame.Encode(buf[i*size:], seq, seq*10, size-frame.HeaderSize)
		seq++
	}
	buf[3*size+frame.HeaderSize+5] ^= 0x10                           // payload bit flip
	buf[4*size+16] ^= 1                                              // timestamp bit flip
	binary.LittleEndian.PutUint32(buf[5*size:], 0xdeadbeef)          // magic
	buf[(n-1)*size+size-1] ^= 0x80                                   // last byte of the last frame
	binary.LittleEndian.PutUint32(buf[(n-2)*size+24:], uint32(size)) // length
	var cpu frame.Checker
	for i := range n {
		cpu.Check(buf[i*size : (i+1)*size])
	}
	return buf, cpu.Stats
}

// The GPU checker's accounting equals the CPU checker's, frame for frame,
// for frame sizes that split evenly over a warp's lanes and sizes that do
// not, in one launch and in several launches collected together.
func TestMatchesCPU(t *testing.T) {
	g := device(t)
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct{ n, size, launches int }{
		{64, 48, 1}, {300, 4096, 1}, {300, 4112, 3}, {129, 65536, 1}, {40, 1 << 20, 2}, {100, 1008, 4},
	} {
		buf, want := frames(tc.n, tc.size)
		dev, err := g.Alloc(uint64(len(buf)))
		if err != nil {
			t.Fatal(err)
		}
		host, err := g.HostAlloc(uint64(len(buf)))
		if err != nil {
			t.Fatal(err)
		}
		copy(host.Bytes, buf)
		if err := s.CopyHtoD(dev.Ptr, host.Bytes[:len(buf)]); err != nil {
			t.Fatal(err)
		}
		c, err := New(g, tc.size, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if *ptxFile != "" {
			if err := c.reload(*ptxFile); err != nil {
				t.Fatal(err)
			}
		}
		per := tc.n / tc.launches
		for i := 0; i < tc.n; i += per {
			k := min(per, tc.n-i)
			if err := c.Launch(s, dev.Ptr+uint64(i*tc.size), uint64(k*tc.size)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Collect(s); err != nil {
			t.Fatal(err)
		}
		got := c.Stats()
		f := c.Failures()
		if got != want || f != (Failures{Magic: 1, Length: 1, CRC: 3}) {
			t.Errorf("%d frames of %d bytes: GPU %+v %+v, CPU %+v", tc.n, tc.size, got, f, want)
		}
		c.Close()
		dev.Free()
		host.Free()
	}
}

// Ranges that are not whole frames, and more frames than room, are refused.
func TestLaunchErrors(t *testing.T) {
	g := device(t)
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := New(g, 4096, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		ptr, n uint64
		want   error
	}{
		{0x10000, 4095, ErrWholeFrames},
		{0x10008, 4096, ErrWholeFrames},
		{0x10000, 5 * 4096, ErrTooMany},
	} {
		if err := c.Launch(s, tc.ptr, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("Launch(%#x, %d) = %v, want %v", tc.ptr, tc.n, err, tc.want)
		}
	}
}
