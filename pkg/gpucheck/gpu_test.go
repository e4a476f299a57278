//go:build linux && gpu

package gpucheck

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/cuda"
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

// The driver compiles the PTX (ISA 6.0, sm_70) for this GPU: every kernel
// loads, with the shared memory each configuration asks for.
func TestPTXLoads(t *testing.T) {
	g := device(t)
	v, _ := g.Driver().Version()
	mod, err := g.LoadPTX(PTX)
	if err != nil {
		t.Fatalf("driver %d: cuModuleLoadData: %v", v, err)
	}
	defer mod.Close()
	if _, err := mod.Function("readsum"); err != nil {
		t.Errorf("readsum: %v", err)
	}
	optin, _ := g.Attribute(cuda.AttrMaxSharedPerBlockOptin)
	for _, cfg := range []Config{Large, Small} {
		name, n := cfg.kernel()
		fn, err := mod.Function(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if err := fn.SetMaxDynamicShared(n); err != nil && n+staticBytes <= optin {
			t.Errorf("%s: %d bytes of shared memory: %v", name, n, err)
		}
	}
	name, _ := g.Name()
	t.Logf("%s, CUDA driver API %d: the PTX (%s) loads", name, v, bytes.SplitN(PTX[bytes.Index(PTX, []byte(".version")):], []byte("\n"), 2)[0])
}

// The GPU checker's accounting equals the CPU checker's, frame for frame,
// for frame sizes that split evenly over a warp's lanes and sizes that do
// not, in one launch and in several launches collected together, with
// either table configuration.
func TestMatchesCPU(t *testing.T) {
	for _, cfg := range []Config{Auto, Small} {
		t.Run(cfg.String(), func(t *testing.T) { matchesCPU(t, cfg) })
	}
}

func matchesCPU(t *testing.T, cfg Config) {
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
		copy(host.Bytes(), buf)
		if err := s.CopyHtoD(dev.Ptr, host, 0, uint64(len(buf))); err != nil {
			t.Fatal(err)
		}
		c, err := NewConfig(g, tc.size, tc.n, cfg)
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
			t.Errorf("%s, %d frames of %d bytes: GPU %+v %+v, CPU %+v", c.Config(), tc.n, tc.size, got, f, want)
		}
		c.Close()
		dev.Free()
		host.Free()
	}
}

// The read-only baseline reads every word: its sum is the CPU's.
func TestReader(t *testing.T) {
	g := device(t)
	s, err := g.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := NewReader(g)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, n := range []int{16, 4096, 64<<20 + 48} {
		host, err := g.HostAlloc(uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		hb := host.Bytes()
		for i := range hb {
			hb[i] = byte(i*7 + i>>11)
		}
		dev, err := g.Alloc(uint64(n))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CopyHtoD(dev.Ptr, host, 0, uint64(n)); err != nil {
			t.Fatal(err)
		}
		if err := r.Reset(s); err != nil {
			t.Fatal(err)
		}
		if err := r.Launch(s, dev.Ptr, uint64(n)); err != nil {
			t.Fatal(err)
		}
		got, err := r.Sum(s)
		if err != nil {
			t.Fatal(err)
		}
		if want := XorSum(hb); got != want {
			t.Errorf("%d bytes: readsum %x, CPU %x", n, got, want)
		}
		dev.Free()
		host.Free()
	}
	if err := r.Launch(s, 0x10008, 16); !errors.Is(err, ErrAlign) {
		t.Errorf("unaligned read: %v", err)
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
