package xdma_test

import (
	"testing"

	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// benchTable returns a 1 GiB table of 64 KiB pages, fully fragmented (no two
// neighbours contiguous) or fully contiguous.
func benchTable(fragmented bool) *sgl.PageTable {
	const pages = 16384
	t := &sgl.PageTable{PageSize: sgl.PageSize64K, Pages: make([]uint64, pages)}
	for i := range t.Pages {
		slot := uint64(i)
		if fragmented {
			slot = 2 * uint64(pages-1-i)
		}
		t.Pages[i] = 1<<36 + slot*sgl.PageSize64K
	}
	return t
}

// BenchmarkTableToChain measures page table → SG list → descriptor chain
// with a reused builder and descriptor buffer, reporting ns per page.
func BenchmarkTableToChain(b *testing.B) {
	for _, tc := range []struct {
		name       string
		fragmented bool
	}{{"fragmented", true}, {"contiguous", false}} {
		b.Run(tc.name, func(b *testing.B) {
			table := benchTable(tc.fragmented)
			builder := sgl.Builder{Limits: sgl.Limits{MaxSegment: xdma.MaxSegmentLen}}
			buf := make([]byte, len(table.Pages)*xdma.DescSize)
			b.ReportAllocs()
			for b.Loop() {
				builder.Reset()
				if err := builder.Append(table, 0, table.Size()); err != nil {
					b.Fatal(err)
				}
				if _, err := xdma.BuildChain(buf, 0x1000_0000, builder.Segments(), xdma.ChainSpec{Dir: xdma.C2H}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(table.Pages)), "ns/page")
		})
	}
}

// BenchmarkBaselineMarshal writes one descriptor per page with no SG logic:
// the floor that BenchmarkTableToChain is compared against.
func BenchmarkBaselineMarshal(b *testing.B) {
	table := benchTable(true)
	buf := make([]byte, len(table.Pages)*xdma.DescSize)
	for b.Loop() {
		for i, p := range table.Pages {
			d := xdma.Descriptor{Magic: xdma.DescMagic, Len: sgl.PageSize64K, Dst: p, Next: uint64(i+1) * xdma.DescSize}
			d.Marshal(buf[i*xdma.DescSize:])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(table.Pages)), "ns/page")
}
