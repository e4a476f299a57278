package sgl_test

import (
	"fmt"

	"github.com/gpufpga/gpufpga/pkg/sgl"
)

// A transfer of 200 KiB starting 1000 bytes into a pin whose 64 KiB pages
// are partly contiguous, split so no segment exceeds 96 KiB.
func ExampleBuilder() {
	table := &sgl.PageTable{
		PageSize: sgl.PageSize64K,
		Pages:    []uint64{0x8_0000_0000, 0x8_0001_0000, 0x8_0005_0000, 0x8_0006_0000},
	}
	b := sgl.Builder{Limits: sgl.Limits{MaxSegment: 96 << 10}}
	if err := b.Append(table, 1000, 200<<10); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range b.Segments() {
		fmt.Printf("%#x +%d\n", s.Addr, s.Len)
	}
	// Output:
	// 0x8000003e8 +98304
	// 0x8000183e8 +31768
	// 0x800050000 +74728
}
