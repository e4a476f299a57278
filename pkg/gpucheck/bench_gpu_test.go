//go:build linux && gpu

package gpucheck

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

var ptxFile = flag.String("gpucheck.ptx", "", "PTX to benchmark instead of the embedded kernel")

// reload swaps in the kernel from a PTX file.
func (c *Checker) reload(path string) error {
	ptx, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return c.loadKernel(ptx)
}

// BenchmarkCheck measures the kernel alone (CUDA events around the
// launch) on 1 GiB of frames for several frame sizes, both table
// configurations and several layouts (threads per frame, words per run;
// run=0: one contiguous chunk a thread), next to the read-only baseline
// (readsum) and a device-to-device copy of the same bytes: compare
// checker/read within one run.
//
// -gpucheck.ptx loads another build of the kernels, to measure a change
// where there is a compiler but no Go.
func BenchmarkCheck(b *testing.B) {
	g := device(b)
	s, err := g.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const size = 1 << 30
	src, err := g.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Free()
	dst, err := g.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Free()
	start, _ := g.NewEvent()
	end, _ := g.NewEvent()
	timed := func(b *testing.B, op func() error) {
		// Sub-benchmarks run on goroutines of their own.
		if err := g.Lock(); err != nil {
			b.Fatal(err)
		}
		defer g.Unlock()
		var ms float64
		for range b.N {
			start.Record(s)
			if err := op(); err != nil {
				b.Fatal(err)
			}
			end.Record(s)
			t, err := end.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			ms += float64(t)
		}
		b.ReportMetric(float64(size)*float64(b.N)/(ms/1000)/1e9, "GB/s")
	}
	b.Run("dtod", func(b *testing.B) {
		timed(b, func() error { return s.CopyDtoD(dst.Ptr, src.Ptr, size) })
	})
	rd, err := NewReader(g)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	b.Run("read", func(b *testing.B) {
		timed(b, func() error { return rd.Launch(s, src.Ptr, size) })
	})
	for _, fs := range []int{4 << 10, 64 << 10, 1 << 20} {
		buf, _ := frames(size/fs, fs)
		host, err := g.HostAlloc(size)
		if err != nil {
			b.Fatal(err)
		}
		copy(host.Bytes(), buf)
		if err := s.CopyHtoD(src.Ptr, host, 0, size); err != nil {
			b.Fatal(err)
		}
		s.Sync()
		host.Free()
		for _, cfg := range []Config{Large, Small} {
			c, err := NewConfig(g, fs, size/fs, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if *ptxFile != "" {
				if err := c.reload(*ptxFile); err != nil {
					b.Fatal(err)
				}
			}
			for k := uint(0); k <= 10; k++ {
				if chunk := (fs - 32) >> k; chunk < 256 || chunk > 16<<10 {
					continue
				}
				for _, run := range []int{0, 1, 2, 4, 16} {
					l := newLayout(fs, k, run)
					if k == 0 && run != 0 || l.rounds == 1 && run != 0 {
						continue
					}
					if err := c.setLayout(l); err != nil {
						b.Fatal(err)
					}
					b.Run(fmt.Sprintf("%s/frame=%d/threads=%d/run=%d", cfg, fs, 1<<k, run), func(b *testing.B) {
						timed(b, func() error {
							if err := c.Launch(s, src.Ptr, size); err != nil {
								return err
							}
							c.pending = 0
							return nil
						})
					})
				}
			}
			c.Close()
		}
	}
}
