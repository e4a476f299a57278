// Package cli implements p2pctl's commands.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Exit codes, by cause (exitHelp, in p2pctl --help, says the same).
const (
	ExitOK          = 0
	ExitError       = 1 // a runtime failure of anything else
	ExitUsage       = 2 // bad flags or arguments
	ExitDevice      = 3 // the device or driver refused or failed
	ExitVerify      = 4 // data did not verify
	ExitUnsupported = 5 // the host lacks a capability the command needs
)

const exitHelp = `Exit codes:
  0  success; also a long command stopped by Ctrl-C or SIGTERM, after its summary
  1  a runtime failure of anything else (a file, the network, a GPU kernel)
  2  usage: bad flags or arguments, or flags that contradict each other
  3  the device or the driver refused or failed (a pin, a transfer, a stream)
  4  data did not verify (transfer --verify, frames lost or damaged)
  5  this host lacks a capability the command needs (no CUDA driver, a GPU
     that cannot export dma-bufs, DMA through bounce buffers or past the
     IOMMU, no card memory size configured)`

// Version overrides the version p2pctl reports, which is otherwise the
// module version and VCS revision the binary was built from; set it with
// -ldflags "-X github.com/gpufpga/gpufpga/cmd/p2pctl/cli.Version=...".
var Version string

// version returns Version, or what the build recorded.
func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	return versionFrom(bi, ok)
}

// versionFrom formats what a build recorded: the module version, else
// the VCS revision (12 digits, +dirty when modified), else "(devel)".
func versionFrom(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" && (v == "" || v == "(devel)") {
		return rev[:min(len(rev), 12)] + modified
	}
	if v == "" {
		return "(devel)"
	}
	return v
}

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

// globals are the flags every command shares, and the options.
type globals struct {
	device string
	json   bool
	out    io.Writer
	opts   *Options
}

// Main runs p2pctl with args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return Run(context.Background(), args, stdout, stderr)
}

// Run is Main with a context: cancelling it ends long-running commands
// (trace, hold) as an interrupt would.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return (&Options{}).Run(ctx, args, stdout, stderr)
}

// Run is the package's Run with the options' additions.
func (o *Options) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{out: stdout, opts: o}
	root := o.command(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var hint string
	var h interface{ Hint() string }
	if errors.As(err, &h) {
		hint = h.Hint()
	}
	if g.json {
		b, jerr := versioned(errorJSON{Error: err.Error(), ExitCode: code, Hint: hint})
		if jerr == nil {
			stderr.Write(append(b, '\n'))
			return code
		}
	}
	fmt.Fprintf(stderr, "p2pctl: %v\n", err)
	if hint != "" {
		fmt.Fprintf(stderr, "hint: %s\n", hint)
	}
	if code == ExitUsage && !strings.Contains(err.Error(), "--help") {
		fmt.Fprintln(stderr, "run 'p2pctl --help' for usage")
	}
	return code
}

// Command returns p2pctl's command tree, with cobra's completion command,
// for generating its man pages and shell completion.
func Command() *cobra.Command {
	o := &Options{}
	root := o.command(&globals{out: io.Discard, opts: o})
	root.InitDefaultCompletionCmd()
	return root
}

// command builds the command tree around g.
func (o *Options) command(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "p2pctl",
		Short:         "Operate gpufpga FPGA-GPU peer DMA devices",
		Long:          "p2pctl operates gpufpga FPGA-GPU peer DMA devices.\n\n" + exitHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runnable, so that a stray argument reaches Args rather than
		// cobra's help.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.PersistentFlags().StringVarP(&g.device, "device", "d", "/dev/gpufpga0", "device node")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "machine-readable output")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{ExitUsage, err} })
	root.AddCommand(
		newVersionCmd(g), newInfoCmd(g), newPinCmd(g), newTransferCmd(g),
		newBenchCmd(g), newDescCmd(g), newRegsCmd(g), newTraceCmd(g), newStreamCmd(g),
		newDoctorCmd(g),
	)
	return root
}

func exitCode(err error) int {
	var ee *exitError
	var pe *p2p.Error
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, stream.ErrUnsupported), errors.Is(err, p2p.ErrBounceBuffers),
		errors.Is(err, p2p.ErrIOMMUBypass), errors.Is(err, p2p.ErrNoCardMemory):
		return ExitUnsupported
	case errors.As(err, &pe), errors.Is(err, p2p.ErrNoDevice), errors.Is(err, p2p.ErrABI):
		return ExitDevice
	case errors.Is(err, stream.ErrConfig):
		return ExitUsage
	}
	return ExitError
}

// usageArgs makes an argument check's error a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &exitError{ExitUsage, err}
		}
		return nil
	}
}

// open opens the selected device.
func (g *globals) open() (*p2p.Device, error) {
	d, err := p2p.Open(g.device)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// present checks that the selected device exists, for commands that read
// its debugfs files rather than open it.
func (g *globals) present() error {
	if _, err := os.Stat(g.device); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s does not exist (is the gpufpga module loaded?)", p2p.ErrNoDevice, g.device)
		}
		return &exitError{ExitDevice, err}
	}
	return nil
}

// SchemaVersion is the version of p2pctl's --json output, carried by every
// JSON object it prints as "schema_version" (each element of an array
// does). It grows when a field changes meaning or goes away; new fields
// may appear without it.
const SchemaVersion = 1

// versioned returns v as JSON with schema_version first in every object
// at its top level (v itself, or each element of an array).
func versioned(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	stamp := func(obj []byte) []byte {
		if len(obj) < 2 || obj[0] != '{' {
			return obj
		}
		head := fmt.Sprintf(`{"schema_version":%d`, SchemaVersion)
		if string(obj) == "{}" {
			return []byte(head + "}")
		}
		return append([]byte(head+","), obj[1:]...)
	}
	if len(b) > 0 && b[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil {
			return nil, err
		}
		for i, e := range elems {
			elems[i] = stamp(e)
		}
		return json.Marshal(elems)
	}
	return stamp(b), nil
}

// emit writes v as indented JSON, or calls human to write text.
func (g *globals) emit(v any, human func(io.Writer)) error {
	if g.json {
		b, err := versioned(v)
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err = g.out.Write(out.Bytes())
		return err
	}
	human(g.out)
	return nil
}

// emitLine writes v as one line of JSON, for streams of records.
func (g *globals) emitLine(v any) error {
	b, err := versioned(v)
	if err != nil {
		return err
	}
	_, err = g.out.Write(append(b, '\n'))
	return err
}

// errorJSON is how a failure reads under --json, on stderr.
type errorJSON struct {
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
	Hint     string `json:"hint,omitempty"`
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print p2pctl's version and the driver's ABI",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			v := struct {
				Version string `json:"version"`
				ABI     uint32 `json:"abi,omitempty"`
			}{Version: version()}
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

// sizeValue parses sizes like 4096, 64KiB, 1MiB, 2G. The suffixes follow
// GNU coreutils (dd, truncate): K, M, G and KiB, MiB, GiB are powers of
// 1024; KB, MB, GB powers of 1000; B is bytes; case is ignored. So 4K and
// 4KiB are 4096 bytes, 4KB is 4000. sizeHelp says so on every size flag's
// command.
type sizeValue uint64

// sizeHelp documents sizeValue's suffixes for a command's help.
const sizeHelp = "Sizes take the suffixes K, M, G, KiB, MiB, GiB (powers of 1024) and KB, MB, GB (powers of 1000), as dd does: 4K is 4096 bytes, 4KB 4000."

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

func (s *sizeValue) String() string { return units.Bytes(uint64(*s)) }
func (s *sizeValue) Type() string   { return "size" }
func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

// durationValue is a time.Duration flag that refuses negative values.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Type() string   { return "duration" }
func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (examples: 500ms, 10s, 2m)", s)
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	*d = durationValue(v)
	return nil
}

// durationFlag defines a non-negative duration flag on cmd.
func durationFlag(cmd *cobra.Command, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	cmd.Flags().Var((*durationValue)(p), name, usage)
}

// interruptible returns cmd's context, cancelled by the first SIGINT or
// SIGTERM: every long command (transfer, bench, pin --hold, stream,
// trace) then stops, prints what it did and exits 0. A second signal
// kills p2pctl, as it would a program that handles none.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the default action again, for the next signal
	}()
	return ctx, stop
}

// interrupted reports whether err ended a command because ctx, an
// interruptible context, was cancelled: what the command did so far is
// its result then.
func interrupted(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil
}
