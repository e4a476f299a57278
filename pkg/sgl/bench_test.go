package sgl

import "testing"

func BenchmarkBuilder(b *testing.B) {
	for _, tc := range []struct {
		name  string
		table *PageTable
	}{{"fragmented", fragmented(16384)}, {"contiguous", contiguous(16384)}} {
		b.Run(tc.name, func(b *testing.B) {
			var bld Builder
			b.ReportAllocs()
			for b.Loop() {
				bld.Reset()
				if err := bld.Append(tc.table, 0, tc.table.Size()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tc.table.Pages)), "ns/page")
		})
	}
}
