// Command p2p-testbench runs the simulated FPGA rig's parts on the host.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "p2p-testbench",
		Short:         "The simulated FPGA and GPU that gpufpga is tested against",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newSelftestCmd(), newServeCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "p2p-testbench:", err)
		os.Exit(1)
	}
}
