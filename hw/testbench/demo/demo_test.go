//go:build vmguest

package demo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/cli"
	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
)

func say(format string, a ...any) {
	for _, line := range strings.Split(strings.TrimRight(fmt.Sprintf(format, a...), "\n"), "\n") {
		fmt.Fprintf(os.Stdout, "DEMO| %s\n", line)
	}
}

func TestDemo(t *testing.T) {
	guest.Require(t)
	say("QEMU guest, Debian kernel; simulated XDMA FPGA and NVIDIA GPU attached")
	guestrig.Load(t, "card_mem_size=67108864")
	say("# loaded nvp2p_sim, gpufpga card_mem_size=67108864, gpufpga_nv")
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	// The simulated FPGA's source: 64 KiB frames, as fast as they are read.
	if err := ctl.ConfigureSource(64<<10-32, 0, 64); err != nil {
		t.Fatal(err)
	}
	// p2pctl as the rig builds it (hw/testbench/cmd/p2pctl-sim): the
	// simulated GPU's memory as --mem sim.
	p2pctl := &cli.Options{Memory: map[string]cli.Memory{"sim": simgpu.Memory{}}}
	// Trace the whole demo; its summary comes last.
	traceCtx, stopTrace := context.WithCancel(context.Background())
	defer stopTrace()
	traceOut, traceWriter := io.Pipe()
	traceCode := make(chan int, 1)
	go func() {
		traceCode <- cli.Run(traceCtx, []string{"trace", "--interval", "200ms"}, traceWriter, traceWriter)
		traceWriter.Close()
	}()
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(traceOut)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if first, ok := <-lines; !ok || strings.HasPrefix(first, "p2pctl:") {
		t.Fatalf("trace did not start: %s", first)
	}
	for _, args := range [][]string{
		{"info"},
		{"pin", "--mem", "sim", "--size", "1MiB"},
		{"transfer", "--channel", "h2c0", "--mem", "sim", "--size", "4MiB", "--count", "4", "--verify"},
		{"transfer", "--channel", "c2h0", "--mem", "sim", "--size", "4MiB", "--count", "4", "--verify"},
		{"bench", "--channel", "c2h0", "--mem", "sim", "--sizes", "64KiB,1MiB,4MiB", "--count", "8"},
		{"stream", "--mem", "sim", "--channel", "c2h1", "--slots", "16", "--slot-size", "64KiB", "--bytes", "32MiB", "--interval", "1h"},
		{"regs"},
	} {
		var out, errOut bytes.Buffer
		say("")
		say("$ p2pctl %s", strings.Join(args, " "))
		code := p2pctl.Run(context.Background(), args, &out, &errOut)
		say("%s%s", out.String(), errOut.String())
		if code != cli.ExitOK {
			t.Fatalf("p2pctl %v: exit %d", args, code)
		}
	}
	// The rig's acquisition program (examples/acquire, the one to copy,
	// needs a CUDA GPU).
	say("")
	say("$ acquire-sim -bytes 128MiB    # hw/testbench/cmd/acquire-sim")
	out, err := exec.Command("/bin/acquire-sim", "-bytes", "134217728").CombinedOutput()
	say("%s", out)
	if err != nil {
		t.Fatalf("acquire-sim: %v", err)
	}
	stopTrace()
	var traced []string
	for l := range lines {
		traced = append(traced, l)
	}
	if code := <-traceCode; code != cli.ExitOK {
		t.Fatalf("trace: exit %d: %s", code, strings.Join(traced, "\n"))
	}
	say("")
	say("$ p2pctl trace    # ran alongside the commands above; its summary:")
	for i, l := range traced {
		if strings.HasPrefix(l, "summary") {
			say("%s", strings.Join(traced[i:], "\n"))
			break
		}
	}
	guest.CheckDmesg(t)
}
