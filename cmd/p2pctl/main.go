// Command p2pctl operates gpufpga devices: inspect them, pin memory, move
// and verify data, and measure throughput.
package main

import (
	"os"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
