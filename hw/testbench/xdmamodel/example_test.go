package xdmamodel_test

import (
	"fmt"

	"github.com/gpufpga/gpufpga/hw/testbench/busmem"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Run a C2H chain that writes 128 KiB from card address 0 into two
// scattered 64 KiB GPU pages on the engine model, and decode the channel
// status.
func ExampleEngine() {
	var bus, card busmem.Map
	descs := make([]byte, 4096)
	vram := make([]byte, 4*sgl.PageSize64K)
	ddr := make([]byte, 2*sgl.PageSize64K)
	for i := range ddr {
		ddr[i] = byte(i)
	}
	_ = bus.Add("descriptors", 0x1000, descs)
	_ = bus.Add("vram", 0x4000_0000, vram)
	_ = card.Add("ddr", 0, ddr)

	table := &sgl.PageTable{PageSize: sgl.PageSize64K, Pages: []uint64{0x4003_0000, 0x4001_0000}}
	var b sgl.Builder
	_ = b.Append(table, 0, table.Size())
	chain, err := xdma.BuildChain(descs, 0x1000, b.Segments(), xdma.ChainSpec{Dir: xdma.C2H})
	if err != nil {
		fmt.Println(err)
		return
	}
	engine, _ := xdmamodel.NewEngine(xdmamodel.Config{C2H: []xdmamodel.ChannelConfig{{}}, Bus: &bus, Card: &card})
	xdma.Start(engine, xdma.C2H, 0, chain, xdma.ControlDefault)
	engine.RunUntilIdle()
	status := engine.ReadReg(xdma.Base(xdma.TargetC2H, 0) + xdma.RegStatusRC)
	fmt.Println(xdma.DecodeStatus(xdma.C2H, 0, status))
	fmt.Println(vram[0x30000+5] == ddr[5], vram[0x10000+5] == ddr[0x10000+5])
	// Output:
	// C2H channel 0: descriptor_stopped, descriptor_completed
	// true true
}
