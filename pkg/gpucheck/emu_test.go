//go:build linux

package gpucheck

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The kernels run on the CPU (testdata/emu.h: a host thread per CUDA
// thread, barriers for __syncthreads and the shuffles), so their logic is
// tested where there is no GPU; the GPU tests run the same on hardware.
// Needs a C++20 compiler (clang++, or $CXX).

var emuOnce struct {
	sync.Once
	path string
	err  error
}

func emulator(t *testing.T) string {
	t.Helper()
	emuOnce.Do(func() {
		cxx := os.Getenv("CXX")
		if cxx == "" {
			cxx = "clang++"
		}
		if _, err := exec.LookPath(cxx); err != nil {
			emuOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "gpucheck-emu")
		if err != nil {
			emuOnce.err = err
			return
		}
		emuOnce.path = filepath.Join(dir, "emu")
		out, err := exec.Command(cxx, "-std=c++20", "-O2", "-pthread", "-include", "testdata/emu.h",
			"testdata/emu_main.cc", "-o", emuOnce.path).CombinedOutput()
		if err != nil {
			emuOnce.err = fmt.Errorf("%v: %s", err, out)
		}
	})
	if emuOnce.err != nil {
		t.Skipf("no CPU emulator of the kernels: %v", emuOnce.err)
	}
	return emuOnce.path
}

// emulate runs kernel with a grid of grid blocks on buf and returns its
// output; args holds offsets into buf (inputs) or into the output.
func emulate(t *testing.T, kernel string, grid, block int, buf []byte, args []uint64, outLen int) []byte {
	t.Helper()
	emu := emulator(t)
	dir := t.TempDir()
	a := make([]byte, 8*len(args))
	for i, v := range args {
		binary.LittleEndian.PutUint64(a[8*i:], v)
	}
	argf, buff, outf := filepath.Join(dir, "args"), filepath.Join(dir, "buf"), filepath.Join(dir, "out")
	if err := os.WriteFile(argf, a, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(buff, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(emu, kernel, fmt.Sprint(grid), fmt.Sprint(block), "0", argf, buff, outf).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", kernel, err, out)
	}
	out, err := os.ReadFile(outf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != outLen {
		t.Fatalf("%s: %d bytes out, want %d", kernel, len(out), outLen)
	}
	return out
}

// Both configurations account for damaged frames exactly as the CPU
// checker does, for every way of sharing a frame among threads: one
// thread, contiguous chunks, runs, groups of several warps and the whole
// block, frame sizes that split evenly and sizes that do not.
func TestKernelOnCPU(t *testing.T) {
	emulator(t)
	for _, tc := range []struct {
		n, size   int
		groupLog2 uint
		run       int
	}{
		{64, 48, 0, 0}, {100, 1008, 2, 2}, {300, 4096, 2, 2}, {300, 4112, 2, 2}, {129, 65536, 4, 2},
		{40, 1 << 20, 8, 2},
		{300, 4096, 0, 0}, {129, 65536, 4, 0}, {129, 65536, 5, 1}, {70, 65536, 6, 3}, {300, 4112, 3, 16},
		{9, 1 << 20, 10, 4}, {64, 48, 2, 1}, {100, 1008, 1, 5},
	} {
		l := newLayout(tc.size, tc.groupLog2, tc.run)
		buf, want := frames(tc.n, tc.size)
		mult, fix := combineTables(tc.size, l)
		multOff := uint64(len(buf))
		for _, v := range mult {
			buf = binary.LittleEndian.AppendUint32(buf, v)
		}
		for _, cfg := range []Config{Large, Small} {
			c := &Checker{frameSize: uint64(tc.size), layout: l, initFix: fix}
			name, _ := cfg.kernel()
			perBlock := blockSize >> l.groupLog2
			grid := min(3, (tc.n+perBlock-1)/perBlock)
			rec := emulate(t, name, grid, blockSize, buf, c.args(0, uint64(tc.n), 0, multOff), tc.n*recordBytes)
			for i := range tc.n {
				r := rec[i*recordBytes:]
				c.account(binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[12:]))
			}
			if got, f := c.Stats(), c.Failures(); got != want || f != (Failures{Magic: 1, Length: 1, CRC: 3}) {
				t.Errorf("%s, %d frames of %d bytes, %+v: %+v %+v, CPU %+v", cfg, tc.n, tc.size, l, got, f, want)
			}
		}
	}
}

// readsum reads every word once: its sum is XorSum's, whatever the size
// against the grid.
func TestReadsumOnCPU(t *testing.T) {
	emulator(t)
	for _, n := range []int{16, 4096, 1<<20 + 48} {
		buf := make([]byte, n)
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		out := emulate(t, "readsum", 3, readBlock, buf, []uint64{0, uint64(n / 16), 0}, 16)
		var got [4]uint32
		for i := range got {
			got[i] = binary.LittleEndian.Uint32(out[4*i:])
		}
		if want := XorSum(buf); got != want {
			t.Errorf("%d bytes: readsum %x, XorSum %x", n, got, want)
		}
	}
}
