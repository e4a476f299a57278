package cli

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// chainHeader is the header of the driver's debugfs chain dumps.
const chainHeader = 16

type descJSON struct {
	Index int    `json:"index"`
	Addr  uint64 `json:"addr"`
	Len   uint32 `json:"len"`
	Src   uint64 `json:"src"`
	Dst   uint64 `json:"dst"`
	Next  uint64 `json:"next"`
	Adj   uint8  `json:"next_adjacent"`
	Flags string `json:"flags"`
}

type chainJSON struct {
	Source      string     `json:"source"`
	Addr        uint64     `json:"addr"`
	Descriptors []descJSON `json:"descriptors"`
	Bytes       uint64     `json:"bytes"`
	Problem     string     `json:"problem,omitempty"`
}

// decodeChain walks a dump: a 16-byte header (bus address, count, first
// adjacent count) followed by the descriptors as the engine sees them.
func decodeChain(source string, b []byte) (chainJSON, error) {
	out := chainJSON{Source: source, Descriptors: []descJSON{}}
	if len(b) < chainHeader {
		return out, fmt.Errorf("%s: %d bytes, not a chain dump", source, len(b))
	}
	addr := binary.LittleEndian.Uint64(b)
	count := binary.LittleEndian.Uint32(b[8:])
	adj := uint8(binary.LittleEndian.Uint32(b[12:]))
	body := b[chainHeader:]
	out.Addr = addr
	if count == 0 {
		return out, nil
	}
	if uint64(len(body)) < uint64(count)*xdma.DescSize {
		return out, fmt.Errorf("%s: header says %d descriptors, %d bytes follow", source, count, len(body))
	}
	if addr+uint64(len(body)) < addr {
		return out, fmt.Errorf("%s: a chain of %d bytes at %#x wraps the address space", source, len(body), addr)
	}
	m := dumpMemory{base: addr, data: body}
	walked, err := xdma.Walk(&m, addr, adj, xdma.WalkLimits{Lo: addr, Hi: addr + uint64(len(body))})
	for i, w := range walked {
		out.Descriptors = append(out.Descriptors, descJSON{i, w.Addr, w.Len, w.Src, w.Dst, w.Next, w.NextAdjacent, w.Flags.String()})
		out.Bytes += uint64(w.Len)
	}
	if err != nil {
		out.Problem = err.Error()
	}
	return out, nil
}

// dumpMemory is a chain dump as the bus address space it came from;
// addresses outside it fail as unsupported requests.
type dumpMemory struct {
	base uint64
	data []byte
}

func (m *dumpMemory) at(addr uint64, n int) ([]byte, error) {
	if addr < m.base || addr-m.base > uint64(len(m.data)) || uint64(n) > uint64(len(m.data))-(addr-m.base) {
		return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
	}
	return m.data[addr-m.base:][:n], nil
}

func (m *dumpMemory) Read(addr uint64, p []byte) error {
	b, err := m.at(addr, len(p))
	if err == nil {
		copy(p, b)
	}
	return err
}

func (m *dumpMemory) Write(addr uint64, p []byte) error {
	b, err := m.at(addr, len(p))
	if err == nil {
		copy(b, p)
	}
	return err
}

func newDescCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "desc [h2c<N>|c2h<N>]",
		Short: "Decode and check the last descriptor chain a channel ran",
		Long: `desc reads the last chain a channel ran from the driver's debugfs (as root),
or a dump given with --file, decodes every descriptor and checks the chain as
the engine would: magic, lengths, adjacency, pointers, termination.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			source := file
			if file == "" {
				if len(args) != 1 {
					return usageErr("name a channel (e.g. c2h0) or give --file")
				}
				if _, _, err := parseChannel(args[0]); err != nil {
					return err
				}
				if err := g.present(); err != nil {
					return err
				}
				source = filepath.Join("/sys/kernel/debug/gpufpga", filepath.Base(g.device), "chain-"+args[0])
			}
			b, err := os.ReadFile(source)
			if err != nil {
				return fmt.Errorf("read chain (debugfs needs root and a mounted /sys/kernel/debug): %w", err)
			}
			c, err := decodeChain(source, b)
			if err != nil {
				return err
			}
			if err := g.emit(c, func(w io.Writer) { writeChain(w, c) }); err != nil {
				return err
			}
			if c.Problem != "" {
				return verifyErr("chain check: %s", c.Problem)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "decode a chain dump from this file")
	return cmd
}

func writeChain(w io.Writer, c chainJSON) {
	fmt.Fprintf(w, "%s: %d descriptors at %#x, %s\n", c.Source, len(c.Descriptors), c.Addr, units.Bytes(c.Bytes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\taddress\tlength\tsource\tdestination\tnext\tadj\tflags")
	for _, d := range c.Descriptors {
		fmt.Fprintf(tw, "%d\t%#x\t%d\t%#x\t%#x\t%#x\t%d\t%s\n", d.Index, d.Addr, d.Len, d.Src, d.Dst, d.Next, d.Adj, d.Flags)
	}
	tw.Flush()
	if c.Problem != "" {
		fmt.Fprintf(w, "problem: %s\n", c.Problem)
	} else {
		fmt.Fprintln(w, "chain checks out")
	}
}
