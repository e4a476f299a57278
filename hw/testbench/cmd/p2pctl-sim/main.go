// Command p2pctl-sim is p2pctl with the test rig's simulated GPU memory as
// --mem sim, for use inside the rig's guest. p2pctl
// itself links no rig code.
package main

import (
	"context"
	"os"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/cli"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
)

func main() {
	opts := &cli.Options{Memory: map[string]cli.Memory{
		"sim": simgpu.Memory{},
	}}
	os.Exit(opts.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
