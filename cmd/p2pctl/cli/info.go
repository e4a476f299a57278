package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

type channelJSON struct {
	Name   string `json:"name"`
	Stream bool   `json:"stream"`
}

type infoJSON struct {
	Device           string        `json:"device"`
	ABIVersion       uint32        `json:"abi_version"`
	IPVersion        uint32        `json:"ip_version"`
	Channels         []channelJSON `json:"channels"`
	PinKinds         []string      `json:"pin_kinds"`
	CardMemSize      uint64        `json:"card_mem_size"`
	MaxDescs         uint32        `json:"max_descs"`
	MaxSegs          uint32        `json:"max_segs"`
	MaxPins          uint32        `json:"max_pins"`
	MaxPinned        uint64        `json:"max_pinned"`
	MaxPinnedTotal   uint64        `json:"max_pinned_total"`
	PinnedTotal      uint64        `json:"pinned_total"`
	MaxQueued        uint32        `json:"max_queued"`
	DefaultTimeoutMS uint32        `json:"default_timeout_ms"`
	State            string        `json:"state"`
	Resets           uint32        `json:"resets"`
	PCIeErrors       uint32        `json:"pcie_errors"`
}

func channelName(dir p2p.Direction, i int) string { return fmt.Sprintf("%v%d", dir, i) }

func toInfoJSON(path string, i p2p.Info) infoJSON {
	out := infoJSON{
		Device: path, ABIVersion: i.ABIVersion, IPVersion: i.IPVersion, CardMemSize: i.CardMemSize,
		MaxDescs: i.MaxDescs, MaxSegs: i.MaxSegs, MaxPins: i.MaxPins, MaxPinned: i.MaxPinned,
		MaxPinnedTotal: i.MaxPinnedTotal, PinnedTotal: i.PinnedTotal, MaxQueued: i.MaxQueued,
		DefaultTimeoutMS: i.DefaultTimeoutMS, Channels: []channelJSON{}, PinKinds: []string{},
		State: i.State.String(), Resets: i.Resets, PCIeErrors: i.Errors,
	}
	for _, c := range i.Channels {
		out.Channels = append(out.Channels, channelJSON{channelName(c.Dir, c.Index), c.Stream})
	}
	for _, k := range i.PinKinds {
		out.PinKinds = append(out.PinKinds, k.String())
	}
	return out
}

func writeInfo(w io.Writer, i infoJSON) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "device\t%s\n", i.Device)
	fmt.Fprintf(tw, "driver\tABI %d, XDMA IP version %d\n", i.ABIVersion, i.IPVersion)
	for n, c := range i.Channels {
		label := ""
		if n == 0 {
			label = "channels"
		}
		kind := "memory-mapped"
		if c.Stream {
			kind = "stream"
		}
		fmt.Fprintf(tw, "%s\t%s  %s\n", label, c.Name, kind)
	}
	kinds := strings.Join(i.PinKinds, " ")
	if !strings.Contains(kinds, "gpu") {
		kinds += "  (no GPU pins: load nvidia.ko and gpufpga_nv.ko)"
	}
	fmt.Fprintf(tw, "pin kinds\t%s\n", kinds)
	card := "unknown"
	if i.CardMemSize != 0 {
		card = units.Bytes(i.CardMemSize)
	}
	fmt.Fprintf(tw, "card memory\t%s\n", card)
	fmt.Fprintf(tw, "limits\t%d descriptors and %d segments per transfer, %d queued\n", i.MaxDescs, i.MaxSegs, i.MaxQueued)
	fmt.Fprintf(tw, "\t%d pins and %s pinned per open file, %s per device\n", i.MaxPins, units.Bytes(i.MaxPinned), units.Bytes(i.MaxPinnedTotal))
	fmt.Fprintf(tw, "pinned now\t%s\n", units.Bytes(i.PinnedTotal))
	fmt.Fprintf(tw, "timeout\t%d ms\n", i.DefaultTimeoutMS)
	fmt.Fprintf(tw, "lifecycle\t%s; %d resets, %d uncorrectable PCIe errors since the driver bound\n", i.State, i.Resets, i.PCIeErrors)
	tw.Flush()
}

func newInfoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show devices, channels, pin kinds and limits",
		Long:  "info describes the device given with --device, or every gpufpga device when --device is not given.",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			paths := []string{g.device}
			if !cmd.Flags().Changed("device") {
				found, err := p2p.Devices()
				if err != nil {
					return err
				}
				if len(found) == 0 {
					return fmt.Errorf("%w: none matches %s (is the gpufpga module loaded?)", p2p.ErrNoDevice, p2p.DevicePattern)
				}
				paths = found
			}
			var all []infoJSON
			for _, p := range paths {
				d, err := p2p.Open(p)
				if err != nil {
					return err
				}
				info, err := d.Info()
				d.Close()
				if err != nil {
					return err
				}
				all = append(all, toInfoJSON(p, info))
			}
			return g.emit(all, func(w io.Writer) {
				for n, i := range all {
					if n > 0 {
						fmt.Fprintln(w)
					}
					writeInfo(w, i)
				}
			})
		},
	}
}
