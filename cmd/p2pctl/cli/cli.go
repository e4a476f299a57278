// Package cli implements p2pctl's commands.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitError  = 1 // anything else
	ExitUsage  = 2 // bad flags or arguments
	ExitDevice = 3 // the device or driver refused or failed
	ExitVerify = 4 // data did not verify
)

// Version is set at build time with -ldflags "-X .../cli.Version=...".
var Version = "dev"

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{ExitUsage, fmt.Errorf(format, a...)}
}

func verifyErr(format string, a ...any) error {
	return &exitError{ExitVerify, fmt.Errorf(format, a...)}
}

// globals are the flags every command shares.
type globals struct {
	device string
	json   bool
	out    io.Writer
}

// Main runs p2pctl with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return Run(context.Background(), args, stdout, stderr)
}

// Run is Main with a context: cancelling it ends long-running commands
// (trace, hold) as an interrupt would.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{out: stdout}
	root := &cobra.Command{
		Use:           "p2pctl",
		Short:         "Operate gpufpga FPGA-GPU peer DMA devices",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&g.device, "device", "d", "/dev/gpufpga0", "device node")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "machine-readable output")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{ExitUsage, err} })
	root.AddCommand(
		newVersionCmd(g), newInfoCmd(g), newPinCmd(g), newTransferCmd(g),
		newBenchCmd(g), newDescCmd(g), newRegsCmd(g), newTraceCmd(g), newStreamCmd(g),
	)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	fmt.Fprintf(stderr, "p2pctl: %v\n", err)
	var pe *p2p.Error
	if errors.As(err, &pe) && pe.Hint() != "" {
		fmt.Fprintf(stderr, "hint: %s\n", pe.Hint())
	}
	if code == ExitUsage && !strings.Contains(err.Error(), "--help") {
		fmt.Fprintln(stderr, "run 'p2pctl --help' for usage")
	}
	return code
}

func exitCode(err error) int {
	var ee *exitError
	var pe *p2p.Error
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &pe), errors.Is(err, p2p.ErrNoDevice):
		return ExitDevice
	case errors.Is(err, stream.ErrConfig):
		return ExitUsage
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "accepts "),
		strings.Contains(err.Error(), "unknown flag"), strings.Contains(err.Error(), "required flag"):
		return ExitUsage
	}
	return ExitError
}

// open opens the selected device.
func (g *globals) open() (*p2p.Device, error) {
	d, err := p2p.Open(g.device)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// emit writes v as JSON, or calls human to write text.
func (g *globals) emit(v any, human func(io.Writer)) error {
	if g.json {
		enc := json.NewEncoder(g.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(g.out)
	return nil
}

// emitLine writes v as one line of JSON, for streams of records.
func (g *globals) emitLine(v any) error {
	return json.NewEncoder(g.out).Encode(v)
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print p2pctl's version and the driver's ABI",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := struct {
				Version string `json:"version"`
				ABI     uint32 `json:"abi,omitempty"`
			}{Version: Version}
			if d, err := p2p.Open(g.device); err == nil {
				if info, err := d.Info(); err == nil {
					v.ABI = info.ABIVersion
				}
				d.Close()
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "p2pctl %s", v.Version)
				if v.ABI != 0 {
					fmt.Fprintf(w, ", driver ABI %d", v.ABI)
				}
				fmt.Fprintln(w)
			})
		},
	}
}

// sizeValue parses sizes like 4096, 64KiB, 1MiB, 2G.
type sizeValue uint64

func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (examples: 4096, 64KiB, 16MiB, 1GiB)", s)
	}
	if n != 0 && n*mult/mult != n {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

func (s *sizeValue) String() string { return fmtBytes(uint64(*s)) }
func (s *sizeValue) Type() string   { return "size" }
func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return trimZero(fmt.Sprintf("%.2f", float64(n)/(1<<20))) + " MiB"
	case n >= 1<<10:
		return trimZero(fmt.Sprintf("%.2f", float64(n)/(1<<10))) + " KiB"
	}
	return fmt.Sprintf("%d B", n)
}

func trimZero(s string) string {
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// isTerminal reports whether w is a terminal, for progress output.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
