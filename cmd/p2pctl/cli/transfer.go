package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// parseChannel parses h2c0, c2h1, ... into a direction and index.
func parseChannel(s string) (p2p.Direction, int, error) {
	s = strings.ToLower(s)
	var dir p2p.Direction
	switch {
	case strings.HasPrefix(s, "h2c"):
		dir = p2p.H2C
	case strings.HasPrefix(s, "c2h"):
		dir = p2p.C2H
	default:
		return 0, 0, usageErr("channel %q: want h2c<N> or c2h<N>", s)
	}
	n, err := strconv.Atoi(s[3:])
	if err != nil || n < 0 || n > 3 {
		return 0, 0, usageErr("channel %q: want h2c0-h2c3 or c2h0-c2h3", s)
	}
	return dir, n, nil
}

type transferJSON struct {
	Channel  string  `json:"channel"`
	Memory   string  `json:"memory"`
	Size     uint64  `json:"size"`
	Count    int     `json:"count"`
	Bytes    uint64  `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	GBps     float64 `json:"gb_per_s"`
	Verified bool    `json:"verified"`
	// Interrupted: stopped by a signal after Count transfers.
	Interrupted bool `json:"interrupted,omitempty"`
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*131+seed) ^ byte(i>>9)
	}
}

func newTransferCmd(g *globals) *cobra.Command {
	var mem, channel string
	var size sizeValue = 1 << 20
	var cardAddr uint64
	var count int
	var verify bool
	var timeout time.Duration
	var via pinningFlag
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "Move data between pinned memory and the card, optionally verified",
		Long: `transfer runs --count transfers of --size bytes on --channel (h2c<N>:
memory to card, c2h<N>: card to memory) using --mem memory.

--verify (memory-mapped channels) writes a pattern and reads it back through
card memory at --card-addr, comparing every byte.

` + sizeHelp,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, idx, err := parseChannel(channel)
			if err != nil {
				return err
			}
			if count < 1 {
				return usageErr("--count must be at least 1")
			}
			if size == 0 {
				return usageErr("--size must be more than 0")
			}
			mem, err := g.opts.checkMem(mem)
			if err != nil {
				return err
			}
			d, err := g.open()
			if err != nil {
				return err
			}
			defer d.Close()
			info, err := d.Info()
			if err != nil {
				return err
			}
			ch, ok := info.Channel(dir, idx)
			if !ok {
				return usageErr("%s: no such channel on %s (see p2pctl info)", channel, g.device)
			}
			if ch.Stream && cardAddr != 0 {
				return usageErr("--card-addr is for memory-mapped channels; %s is a stream", channel)
			}
			if verify && ch.Stream {
				return usageErr("--verify checks memory-mapped channels; %s is a stream", channel)
			}
			ctx, stop := interruptible(cmd)
			defer stop()
			t := &transferRun{d: d, opts: g.opts, mem: mem, via: via.p, size: uint64(size), card: cardAddr, dir: dir, ch: ch, timeout: timeout}
			prog := newProgress(g, cmd)
			res, err := t.run(ctx, count, verify, prog)
			prog.clear() // before the result, which nothing follows
			if err != nil {
				return err
			}
			res.Channel, res.Memory = channel, mem
			return g.emit(res, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "channel\tmemory\tsize\tcount\ttime\tthroughput\tverified")
				v := "no"
				if res.Verified {
					v = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f ms\t%.3f GB/s\t%s\n", res.Channel, res.Memory, units.Bytes(res.Size),
					res.Count, res.Seconds*1000, res.GBps, v)
				tw.Flush()
				if res.Interrupted {
					fmt.Fprintf(w, "interrupted after %d of %d transfers\n", res.Count, count)
				}
			})
		},
	}
	cmd.Flags().StringVar(&channel, "channel", "c2h0", "channel: h2c<N> or c2h<N>")
	cmd.Flags().StringVar(&mem, "mem", "", memHelp(g.opts))
	cmd.Flags().Var(&size, "size", "bytes per transfer")
	cmd.Flags().IntVar(&count, "count", 1, "transfers to run")
	cmd.Flags().Uint64Var(&cardAddr, "card-addr", 0, "card address for memory-mapped channels")
	cmd.Flags().BoolVar(&verify, "verify", false, "verify the data")
	durationFlag(cmd, &timeout, "timeout", 0, "per-transfer timeout (0: the driver's default)")
	cmd.Flags().Var(&via, "pin", pinHelp)
	return cmd
}

type transferRun struct {
	d       *p2p.Device
	opts    *Options
	mem     string
	via     stream.Pinning
	size    uint64
	card    uint64
	dir     p2p.Direction
	ch      p2p.Channel
	timeout time.Duration
}

func (t *transferRun) xfer(dir p2p.Direction, b *buffer) p2p.Transfer {
	return p2p.Transfer{Dir: dir, Channel: t.ch.Index, CardAddr: t.card, Segments: []p2p.Segment{b.pin.Whole()}, Timeout: t.timeout}
}

func (t *transferRun) run(ctx context.Context, count int, verify bool, prog *progress) (transferJSON, error) {
	res := transferJSON{Size: t.size, Count: count}
	buf, err := t.opts.allocPinned(t.d, t.mem, t.size, 1, t.via)
	if err != nil {
		return res, err
	}
	defer buf.close()
	// Memory-mapped verification goes through a second buffer.
	var other *buffer
	if verify && !t.ch.Stream {
		if other, err = t.opts.allocPinned(t.d, t.mem, t.size, 2, t.via); err != nil {
			return res, err
		}
		defer other.close()
	}
	var elapsed time.Duration
	var want, got []byte
	if verify && !t.ch.Stream {
		want, got = make([]byte, t.size), make([]byte, t.size)
	}
	for i := range count {
		bytes, took := res.Bytes, elapsed
		if err := t.one(ctx, i, verify, buf, other, want, got, &res, &elapsed); err != nil {
			if !interrupted(ctx, err) {
				return res, err
			}
			// The transfers that completed are the result.
			res.Count, res.Bytes, elapsed, res.Interrupted = i, bytes, took, true
			break
		}
		prog.set(countStatus(i+1, count))
	}
	res.Verified = verify && !res.Interrupted
	res.Seconds = elapsed.Seconds()
	if elapsed > 0 {
		res.GBps = float64(res.Bytes) / elapsed.Seconds() / 1e9
	}
	return res, nil
}

// one runs transfer i, verified as asked, adding it to res and elapsed.
func (t *transferRun) one(ctx context.Context, i int, verify bool, buf, other *buffer, want, got []byte, res *transferJSON, elapsed *time.Duration) error {
	if !verify || t.ch.Stream {
		r, err := t.d.Transfer(ctx, t.xfer(t.dir, buf))
		if err != nil {
			return err
		}
		*elapsed += r.Duration
		res.Bytes += r.Bytes
		return nil
	}
	src, dst := buf, other
	if t.dir == p2p.C2H {
		src, dst = other, buf
	}
	fill(want, i)
	clear(got)
	if err := src.write(want); err != nil {
		return err
	}
	if err := dst.write(got); err != nil {
		return err
	}
	if t.dir == p2p.C2H {
		if _, err := t.d.Transfer(ctx, t.xfer(p2p.H2C, src)); err != nil {
			return err
		}
	}
	r, err := t.d.Transfer(ctx, t.xfer(t.dir, buf))
	if err != nil {
		return err
	}
	*elapsed += r.Duration
	res.Bytes += r.Bytes
	if t.dir == p2p.H2C {
		if _, err := t.d.Transfer(ctx, t.xfer(p2p.C2H, dst)); err != nil {
			return err
		}
	}
	if err := dst.read(got); err != nil {
		return err
	}
	if off := firstDiff(want, got); off >= 0 {
		return verifyErr("transfer %d: byte %d differs after the round trip through card memory", i, off)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
