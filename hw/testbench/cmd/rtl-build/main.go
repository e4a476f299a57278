// Command rtl-build builds a user's top level with the co-simulation
// harness (hw/testbench/rtlbridge) and prints the binary's path. The
// binary is cached by its inputs under -out.
//
//	rtl-build -top my_top -I rtl/include -G DATA_WIDTH=256 rtl/my_top.sv rtl/fifo.sv
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/gpufpga/gpufpga/hw/testbench/rtlbridge"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var incs, params list
	top := flag.String("top", "", "the top module: the logic across from the XDMA IP")
	out := flag.String("out", "build/rtl", "where built binaries are cached")
	jobs := flag.Int("j", 2, "parallel C++ compiles")
	flag.Var(&incs, "I", "an `include directory (repeatable)")
	flag.Var(&params, "G", "a top-level parameter NAME=VALUE (repeatable)")
	flag.Parse()
	d := rtlbridge.Design{Top: *top, Files: flag.Args(), IncDirs: incs, Params: map[string]string{}, Jobs: *jobs}
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "rtl-build: -G %q: want NAME=VALUE\n", p)
			os.Exit(2)
		}
		d.Params[k] = v
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := rtlbridge.Build(ctx, d, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
