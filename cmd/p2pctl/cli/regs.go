package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/pkg/userregs"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

type regJSON struct {
	Offset  uint32 `json:"offset"`
	Name    string `json:"name"`
	Value   uint32 `json:"value"`
	Decoded string `json:"decoded,omitempty"`
}

var targetNames = map[int]string{
	xdma.TargetH2C: "h2c", xdma.TargetC2H: "c2h", xdma.TargetIRQ: "irq", xdma.TargetConfig: "config",
	xdma.TargetH2CSGDMA: "h2c-sgdma", xdma.TargetC2HSGDMA: "c2h-sgdma", xdma.TargetSGDMACommon: "sgdma-common",
}

var regNames = map[int]map[uint32]string{
	xdma.TargetH2C: {xdma.RegIdentifier: "identifier", xdma.RegControl: "control", xdma.RegStatus: "status",
		xdma.RegCompletedCount: "completed", xdma.RegAlignments: "alignments", xdma.RegIntEnable: "int_enable"},
	xdma.TargetH2CSGDMA: {xdma.RegIdentifier: "identifier", xdma.RegDescLo: "desc_lo", xdma.RegDescHi: "desc_hi",
		xdma.RegDescAdjacent: "desc_adjacent", xdma.RegDescCredits: "credits"},
	xdma.TargetIRQ: {xdma.RegIdentifier: "identifier", xdma.RegChanIntEnable: "chan_int_enable",
		xdma.RegChanIntRequest: "chan_int_request", xdma.RegChanIntPending: "chan_int_pending",
		xdma.RegChanVector: "chan_vector0", xdma.RegChanVector + 4: "chan_vector1"},
	xdma.TargetConfig:      {xdma.RegIdentifier: "identifier"},
	xdma.TargetSGDMACommon: {xdma.RegIdentifier: "identifier", xdma.RegDescHalt: "desc_halt", xdma.RegCreditMode: "credit_mode"},
}

// describeReg names a register and decodes its value.
func describeReg(off, v uint32) regJSON {
	target, ch, reg := int(off>>12&0xF), int(off>>8&0xF), off&0xFF
	names := regNames[target]
	switch target {
	case xdma.TargetC2H:
		names = regNames[xdma.TargetH2C]
	case xdma.TargetC2HSGDMA:
		names = regNames[xdma.TargetH2CSGDMA]
	}
	name := fmt.Sprintf("%s%d.%s", targetNames[target], ch, names[reg])
	if target >= xdma.TargetIRQ && target <= xdma.TargetConfig || target == xdma.TargetSGDMACommon {
		name = targetNames[target] + "." + names[reg]
	}
	r := regJSON{Offset: off, Name: name, Value: v}
	switch {
	case xdma.LinkDown(v):
		r.Decoded = "all ones: link down"
	case reg == xdma.RegIdentifier:
		if id, ok := xdma.DecodeIdentifier(v); ok {
			r.Decoded = id.String()
		}
	case (target == xdma.TargetH2C || target == xdma.TargetC2H) && reg == xdma.RegStatus:
		r.Decoded = xdma.DecodeStatus(xdma.Direction(target), ch, v)
	}
	return r
}

func parseRegs(b []byte) ([]regJSON, error) {
	var out []regJSON
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			return nil, fmt.Errorf("unexpected line %q", sc.Text())
		}
		off, err1 := strconv.ParseUint(f[0], 0, 32)
		v, err2 := strconv.ParseUint(f[1], 0, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("unexpected line %q", sc.Text())
		}
		out = append(out, describeReg(uint32(off), uint32(v)))
	}
	return out, sc.Err()
}

func newRegsCmd(g *globals) *cobra.Command {
	var user bool
	cmd := &cobra.Command{
		Use:   "regs [--user OFFSET[=VALUE]...]",
		Short: "Dump and decode the XDMA engine's registers, or read and write the user logic's",
		Long: "regs reads the engine's registers through the driver's debugfs (as root) and decodes identifiers and status words.\n\n" +
			"With --user it reaches the FPGA user logic's registers instead, in the XDMA IP's AXI-Lite master BAR (as root): " +
			"each OFFSET is read, each OFFSET=VALUE written, in order, each a 32-bit AXI-Lite transaction. " +
			"Only the offsets named are touched: a read of a user register may have effects.",
		Args: func(cmd *cobra.Command, args []string) error {
			if !user && len(args) > 0 {
				return usageErr("offsets need --user")
			}
			if user && len(args) == 0 {
				return usageErr("--user needs at least one OFFSET or OFFSET=VALUE")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if user {
				// Every argument is checked before anything is touched.
				acc := make([]userAccess, 0, len(args))
				for _, arg := range args {
					a, err := parseUserAccess(arg)
					if err != nil {
						return err
					}
					acc = append(acc, a)
				}
				if err := g.present(); err != nil {
					return err
				}
				return userRegs(g, acc)
			}
			if err := g.present(); err != nil {
				return err
			}
			path := filepath.Join("/sys/kernel/debug/gpufpga", filepath.Base(g.device), "regs")
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read registers (debugfs needs root and a mounted /sys/kernel/debug): %w", err)
			}
			regs, err := parseRegs(b)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			return g.emit(regs, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "offset\tregister\tvalue\t")
				for _, r := range regs {
					fmt.Fprintf(tw, "0x%04x\t%s\t0x%08x\t%s\n", r.Offset, r.Name, r.Value, r.Decoded)
				}
				tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&user, "user", false, "the user logic's registers (AXI-Lite master BAR), not the engine's")
	return cmd
}

// userAccess is one OFFSET or OFFSET=VALUE argument of regs --user.
type userAccess struct {
	Offset uint32 `json:"offset"`
	Write  bool   `json:"write"`
	Value  uint32 `json:"value"` // written, or read back
}

func parseUserAccess(arg string) (userAccess, error) {
	offs, val, write := strings.Cut(arg, "=")
	off, err := strconv.ParseUint(offs, 0, 32)
	if err != nil || off%4 != 0 {
		return userAccess{}, usageErr("offset %q: want a multiple of 4, such as 0x58", offs)
	}
	a := userAccess{Offset: uint32(off), Write: write}
	if write {
		v, err := strconv.ParseUint(val, 0, 32)
		if err != nil {
			return userAccess{}, usageErr("value %q: want a 32-bit number", val)
		}
		a.Value = uint32(v)
	}
	return a, nil
}

// userRegs runs regs --user: each access in order.
func userRegs(g *globals, acc []userAccess) error {
	r, err := userregs.Open(g.device)
	if err != nil {
		return fmt.Errorf("%w (the user BAR needs root, and a gpufpga that gives its dma_bar)", err)
	}
	defer r.Close()
	// Every offset is checked against the BAR before the first access.
	for _, a := range acc {
		if uint64(a.Offset)+4 > uint64(r.Len()) {
			return usageErr("offset %#x: past the user BAR's %d bytes", a.Offset, r.Len())
		}
	}
	for i := range acc {
		if acc[i].Write {
			err = r.Write32(acc[i].Offset, acc[i].Value)
		} else {
			acc[i].Value, err = r.Read32(acc[i].Offset)
		}
		if err != nil {
			return err
		}
	}
	return g.emit(acc, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "offset\taccess\tvalue\t")
		for _, a := range acc {
			op := "read"
			if a.Write {
				op = "write"
			}
			fmt.Fprintf(tw, "0x%04x\t%s\t0x%08x\t\n", a.Offset, op, a.Value)
		}
		tw.Flush()
	})
}
