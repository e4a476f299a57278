package xdma_test

import (
	"fmt"

	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Build a C2H chain that writes 128 KiB from card address 0 into two
// scattered 64 KiB GPU pages and walk it as the engine would.
func ExampleBuildChain() {
	var bus busmem.Map
	descs := make([]byte, 4096)
	_ = bus.Add("descriptors", 0x1000, descs)

	table := &sgl.PageTable{PageSize: sgl.PageSize64K, Pages: []uint64{0x4003_0000, 0x4001_0000}}
	var b sgl.Builder
	_ = b.Append(table, 0, table.Size())
	chain, err := xdma.BuildChain(descs, 0x1000, b.Segments(), xdma.ChainSpec{Dir: xdma.C2H})
	if err != nil {
		fmt.Println(err)
		return
	}
	walked, _ := xdma.Walk(&bus, chain.Addr, chain.FirstAdjacent, xdma.WalkLimits{})
	for _, w := range walked {
		fmt.Printf("%#x: %v\n", w.Addr, w.Descriptor)
	}
	// Output:
	// 0x1000: len 65536 src 0x0 dst 0x40030000 next 0x1020 adj 0 -
	// 0x1020: len 65536 src 0x10000 dst 0x40010000 next 0x0 adj 0 STOP|COMPLETED
}
