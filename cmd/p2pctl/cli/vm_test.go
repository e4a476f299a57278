//go:build vmguest

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/rigctl"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// The test binary doubles as p2pctl: with P2PCTL_ARGS set it runs the CLI
// with those arguments and exits with its code, so the tests drive a real
// process and read its exit code.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("P2PCTL_ARGS"); ok {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			os.Exit(99)
		}
		// p2pctl as the rig builds it (hw/testbench/cmd/p2pctl-sim).
		opts := &Options{Memory: map[string]Memory{"sim": simgpu.Memory{}}}
		os.Exit(opts.Run(context.Background(), a, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type run struct {
	stdout, stderr string
	code           int
}

// selfCopy is the test binary where every user may run it.
var selfCopy string

func p2pctl(t *testing.T, cred *syscall.Credential, args ...string) run {
	t.Helper()
	a, _ := json.Marshal(args)
	bin := os.Args[0]
	if cred != nil {
		if selfCopy == "" {
			b, err := os.ReadFile(os.Args[0])
			if err != nil {
				t.Fatal(err)
			}
			// The initramfs's root is private to root; open a path.
			dir := "/p2pctl-test"
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"/", dir} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			selfCopy = dir + "/p2pctl"
			if err := os.WriteFile(selfCopy, b, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bin = selfCopy
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "P2PCTL_ARGS="+string(a))
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func jsonRun(t *testing.T, v any, args ...string) {
	t.Helper()
	r := p2pctl(t, nil, append(args, "--json")...)
	if r.code != 0 {
		t.Fatalf("p2pctl %v: exit %d: %s", args, r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("p2pctl %v --json: %v\n%s", args, err, r.stdout)
	}
}

func TestCLIEndToEnd(t *testing.T) {
	guestrig.Load(t, "card_mem_size=67108864")
	var infos []infoJSON
	jsonRun(t, &infos, "info")
	if len(infos) != 1 || len(infos[0].Channels) != 4 || len(infos[0].PinKinds) != 3 {
		t.Fatalf("info: %+v", infos)
	}
	// GPU memory is pinned through a dma-buf where the GPU exports them
	// (NVIDIA's open driver), else through nvidia_p2p; --pin forces either.
	proprietary := guest.NVIDIAVariant() == guest.NVIDIAProprietary
	autoKind, autoPinning, autoPages := "dma-buf", "dma-buf", 256
	pinnings := [][]string{{"--mem", "sim", "--pin", "nvidia-p2p"}, {"--mem", "sim", "--pin", "dma-buf"}, {"--mem", "host"}}
	if proprietary {
		autoKind, autoPinning, autoPages = "gpu", "nvidia-p2p", 16
		pinnings = append(pinnings[:1], pinnings[2])
	}
	for _, tc := range []struct {
		args  []string
		kind  string
		pages int
	}{{nil, autoKind, autoPages}, {[]string{"--pin", "nvidia-p2p"}, "gpu", 16}} {
		var p pinJSON
		jsonRun(t, &p, append([]string{"pin", "--mem", "sim", "--size", "1MiB"}, tc.args...)...)
		var sum uint64
		for _, s := range p.SGList {
			sum += s.Len
		}
		if p.Kind != tc.kind || p.Pages != tc.pages || sum != 1<<20 || p.Descriptors != len(p.SGList) || p.Descriptors == 0 {
			t.Fatalf("pin %v: %+v", tc.args, p)
		}
	}
	for _, ch := range []string{"h2c0", "c2h0"} {
		for _, mem := range pinnings {
			var x transferJSON
			jsonRun(t, &x, append([]string{"transfer", "--channel", ch, "--size", "300KiB", "--count", "3", "--verify", "--card-addr", "4096"}, mem...)...)
			if !x.Verified || x.Bytes != 3*300<<10 || x.Count != 3 {
				t.Fatalf("transfer %s %v: %+v", ch, mem, x)
			}
		}
	}
	var c chainJSON
	jsonRun(t, &c, "desc", "c2h0")
	if len(c.Descriptors) == 0 || c.Problem != "" || c.Bytes != 300<<10 {
		t.Fatalf("desc: %+v", c)
	}
	var lines []streamJSON
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ConfigureSource(64<<10-32, 0, 64); err != nil { // one frame a slot
		t.Fatal(err)
	}
	r := p2pctl(t, nil, "stream", "--mem", "sim", "--bytes", "8MiB", "--slots", "16", "--slot-size", "64KiB", "--json", "--out", "/tmp/stream.bin")
	if r.code != 0 {
		t.Fatalf("stream: exit %d: %s", r.code, r.stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var sl streamJSON
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatalf("stream --json line %q: %v", l, err)
		}
		lines = append(lines, sl)
	}
	if sum := lines[len(lines)-1]; !sum.Summary || sum.Mode != "direct" || sum.Pinning != autoPinning || sum.Bytes < 8<<20 || sum.Gaps != 0 || sum.CRCFailures != 0 || sum.Frames == 0 {
		t.Fatalf("stream summary: %+v", sum)
	}
	if fi, err := os.Stat("/tmp/stream.bin"); err != nil || uint64(fi.Size()) != lines[len(lines)-1].Bytes {
		t.Fatalf("recording: %v, %v", fi, err)
	}
	var regs []regJSON
	jsonRun(t, &regs, "regs")
	if len(regs) < 20 || !strings.Contains(regs[0].Decoded, "target 0 channel 0") {
		t.Fatalf("regs: %+v", regs)
	}
	var b benchJSON
	jsonRun(t, &b, "bench", "--sizes", "4KiB,256KiB", "--count", "4")
	if len(b.Rows) != 2 || b.Rows[1].GBps <= 0 || b.Rows[0].MaxUs < b.Rows[0].P50us || b.Rows[0].P99us != nil {
		t.Fatalf("bench: %+v", b)
	}
	// Human output of the same commands works too.
	for _, args := range [][]string{{"info"}, {"pin", "--size", "128KiB"}, {"transfer", "--verify"}, {"bench", "--count", "2", "--sizes", "64KiB"}, {"version"}, {"regs"}} {
		if r := p2pctl(t, nil, args...); r.code != 0 || r.stdout == "" {
			t.Errorf("p2pctl %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestCLITrace(t *testing.T) {
	guestrig.Load(t, "card_mem_size=67108864")
	a, _ := json.Marshal([]string{"trace", "--interval", "200ms", "--json"})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "P2PCTL_ARGS="+string(a))
	var errOut strings.Builder
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first tick means the programs are attached.
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatalf("trace printed nothing: %s", errOut.String())
	}
	lines := []string{sc.Text()}
	var x transferJSON
	jsonRun(t, &x, "transfer", "--channel", "h2c0", "--size", "256KiB", "--count", "5")
	// Interrupted, trace prints its summary and exits 0.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("trace: %v\n%s", err, errOut.String())
	}
	var sum traceTickJSON
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || !sum.Summary {
		t.Fatalf("last line is not the summary: %v\n%s", err, strings.Join(lines, "\n"))
	}
	var h2c traceChannelJSON
	for _, c := range sum.Channels {
		if c.Name == "h2c0" {
			h2c = c
		}
	}
	if h2c.Transfers != 5 || h2c.Bytes != 5*256<<10 || len(h2c.LatencyBuckets) == 0 {
		t.Fatalf("traced h2c0: %+v", h2c)
	}
	var pins, unpins int
	for _, l := range lines {
		var tick traceTickJSON
		json.Unmarshal([]byte(l), &tick)
		for _, e := range tick.Events {
			switch e.Type {
			case "pin":
				pins++
			case "unpin":
				unpins++
			}
		}
	}
	if pins != 1 || unpins != 1 {
		t.Fatalf("traced %d pins and %d unpins, want 1 and 1", pins, unpins)
	}
	if r := p2pctl(t, &syscall.Credential{Uid: 65534, Gid: 65534}, "trace", "--duration", "1s"); r.code != ExitDevice || !strings.Contains(r.stderr, "tracing needs root") {
		t.Fatalf("trace as nobody: exit %d: %s", r.code, r.stderr)
	}
}

func TestCLIErrors(t *testing.T) {
	guestrig.Load(t, "card_mem_size=67108864")
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for _, tc := range []struct {
		cred *syscall.Credential
		args []string
		code int
		msg  string
	}{
		{nil, []string{"info", "-d", "/dev/gpufpga7"}, ExitDevice, "/dev/gpufpga7 does not exist"},
		{nil, []string{"transfer", "--channel", "c2h3"}, ExitUsage, "c2h3: no such channel"},
		{nil, []string{"transfer", "--channel", "c2h1", "--card-addr", "4096"}, ExitUsage, "c2h1 is a stream"},
		{nil, []string{"transfer", "--size", "1GiB", "--mem", "sim"}, ExitDevice, "simgpu: alloc"},
		{nil, []string{"transfer", "--size", "64KiB", "--card-addr", "0x3fff000"}, ExitDevice, "invalid argument"},
		{nil, []string{"transfer", "--size", "64KiB"}, ExitDevice, "DMA engine reported an error (C2H channel 0: magic_stopped)"},
		{nobody, []string{"info", "-d", "/dev/gpufpga0"}, ExitDevice, "permission denied"},
		{nil, []string{"stream", "--mem", "cuda", "--check", "none", "--bytes", "1MiB"}, ExitUnsupported, "no CUDA driver (libcuda.so.1 not found): GPU features are off"},
		{nil, []string{"stream", "--mem", "cuda", "--mode", "direct", "--bytes", "1MiB"}, ExitUsage, "checking frames in CUDA memory needs --frame-size (or --check none)"},
		// Auto mode into CUDA memory asks the GPU which mode it can do.
		{nil, []string{"stream", "--mem", "cuda", "--bytes", "1MiB"}, ExitUnsupported, "no CUDA driver (libcuda.so.1 not found): GPU features are off"},
		{nil, []string{"pin", "--mem", "cuda"}, ExitUnsupported, "no CUDA driver (libcuda.so.1 not found): GPU features are off"},
		{nil, []string{"stream", "--mem", "gpu"}, ExitUsage, `--mem "gpu": want cuda, host, sim`},
		{nil, []string{"stream"}, ExitUsage, "--mem host: a stream's slots end up in GPU memory: want cuda, sim"},
		{nil, []string{"pin", "--mem", "sim", "--pin", "fast"}, ExitUsage, `invalid argument "fast" for "--pin" flag: want auto, dma-buf or nvidia-p2p`},
		{nil, []string{"stream", "--check", "fast"}, ExitUsage, `--check "fast": want auto, cpu, gpu or none`},
		{nil, []string{"stream", "--mem", "sim", "--check", "gpu", "--bytes", "1MiB"}, ExitUsage, "--check gpu runs the CUDA frame checker: needs --mem cuda"},
		{nil, []string{"stream", "--mem", "cuda", "--out", "/tmp/x"}, ExitUsage, "--out records CPU-visible memory: not with --mem cuda"},
	} {
		if strings.Contains(strings.Join(tc.args, " "), "--size 64KiB") && len(tc.args) == 3 {
			if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultBadMagic); err != nil {
				t.Fatal(err)
			}
		}
		r := p2pctl(t, tc.cred, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("p2pctl %v: exit %d, stderr %q; want %d with %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
			t.Errorf("p2pctl %v: crashed:\n%s", tc.args, r.stderr)
		}
	}
	// A forced dma-buf where the GPU exports none (NVIDIA's proprietary
	// driver) says so; nothing falls back behind the user's back.
	if guest.NVIDIAVariant() == guest.NVIDIAProprietary {
		r := p2pctl(t, nil, "pin", "--mem", "sim", "--pin", "dma-buf")
		if want := "pinning through a dma-buf: the GPU does not export them"; r.code != ExitDevice || !strings.Contains(r.stderr, want) {
			t.Errorf("pin --pin dma-buf on the proprietary driver: exit %d, stderr %q; want %d with %q", r.code, r.stderr, ExitDevice, want)
		}
	}
}

// TestCLISilentCorruption: a DMA that reports success but changed a bit
// fails verification with exit 4, in transfers and in checked streams.
func TestCLISilentCorruption(t *testing.T) {
	guestrig.Load(t, "card_mem_size=67108864")
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ConfigureSource(64<<10-32, 0, 64); err != nil { // one frame a slot
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  xdma.Direction
		ch   int
		args []string
		msg  string
	}{
		{xdma.C2H, 0, []string{"transfer", "--channel", "c2h0", "--mem", "sim", "--size", "256KiB", "--verify"}, "differs after the round trip"},
		{xdma.H2C, 0, []string{"transfer", "--channel", "h2c0", "--mem", "host", "--size", "256KiB", "--verify"}, "differs after the round trip"},
		{xdma.C2H, 1, []string{"stream", "--mem", "sim", "--slots", "16", "--slot-size", "64KiB", "--bytes", "2MiB", "--check", "cpu"}, "frames lost or damaged"},
	} {
		// Clean first, so the failure below is the fault's.
		if r := p2pctl(t, nil, tc.args...); r.code != ExitOK {
			t.Fatalf("p2pctl %v without a fault: exit %d: %s", tc.args, r.code, r.stderr)
		}
		if err := ctl.InjectFault(tc.dir, tc.ch, xdmamodel.FaultCorrupt); err != nil {
			t.Fatal(err)
		}
		if r := p2pctl(t, nil, tc.args...); r.code != ExitVerify || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("p2pctl %v with a bit flipped: exit %d, stderr %q; want %d with %q", tc.args, r.code, r.stderr, ExitVerify, tc.msg)
		}
	}
}

// TestCLIDoctor runs doctor against the rig's real sysfs: the driver and
// the FPGA it binds are found and pass; the simulated GPU is no NVIDIA
// device, which doctor reports without failing.
func TestCLIDoctor(t *testing.T) {
	guestrig.Load(t, "card_mem_size=67108864")
	r := p2pctl(t, nil, "doctor", "--json")
	var rep struct {
		Checks []struct{ Key, Subject, Status, Summary, Hint string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: exit %d: %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	status := map[string]string{}
	heldByGpufpga := regexp.MustCompile(`^10ee:[0-9a-f]{4} held by gpufpga, an ID gpufpga claims$`)
	held := 0
	for _, c := range rep.Checks {
		status[c.Key] = c.Status
		if c.Status == "FAIL" {
			t.Errorf("FAIL %s %s: %s (%s)", c.Key, c.Subject, c.Summary, c.Hint)
		}
		// The rig's FPGA is its only Xilinx function, and gpufpga's.
		if c.Key == "fpga.driver" {
			held++
			if !heldByGpufpga.MatchString(c.Summary) {
				t.Errorf("fpga.driver %s: %q, want it held by gpufpga, an ID gpufpga claims", c.Subject, c.Summary)
			}
		}
	}
	if held != 1 {
		t.Errorf("%d fpga.driver checks, want the rig's FPGA's alone\n%s", held, r.stdout)
	}
	for key, want := range map[string]string{
		"driver.module": "OK", "driver.abi": "OK", "fpga.driver": "OK", "fpga.bars": "OK", "gpu.device": "WARN",
	} {
		if status[key] != want {
			t.Errorf("%s: %q, want %s\n%s", key, status[key], want, r.stdout)
		}
	}
	if r.code != ExitOK {
		t.Errorf("doctor exited %d\n%s", r.code, r.stderr)
	}
}

// TestCLIStreamMetrics: stream --metrics serves the stream's and the
// device's counters while the stream runs, and they move.
func TestCLIStreamMetrics(t *testing.T) {
	guestrig.Load(t)
	ctl, err := rigctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ConfigureSource(64<<10-32, 0, 64); err != nil {
		t.Fatal(err)
	}
	const addr = "127.0.0.1:19464"
	done := make(chan run, 1)
	// Long enough for a slow guest (the debug kernel) to start serving and
	// be scraped twice; the loop below ends as soon as it has been.
	go func() {
		done <- p2pctl(t, nil, "stream", "--mem", "sim", "--duration", "20s", "--slots", "16", "--slot-size", "64KiB", "--json", "--metrics", addr)
	}()
	ended := false
	// A failure below must not leave p2pctl holding the device for the
	// tests after, which unload the modules.
	t.Cleanup(func() {
		if !ended {
			<-done
		}
	})
	var first, last float64
	scrapes := 0
	deadline := time.Now().Add(18 * time.Second)
	for time.Now().Before(deadline) && (scrapes < 2 || last <= first) {
		time.Sleep(200 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue // not listening yet
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		f := fams["gpufpga_stream_slots_total"]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("scrape without gpufpga_stream_slots_total: %v", fams)
		}
		labels := map[string]string{}
		for _, l := range f.Metric[0].Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["channel"] != "c2h1" || !strings.HasPrefix(labels["device"], "/dev/gpufpga") {
			t.Fatalf("labels %v", labels)
		}
		if st := fams["gpufpga_device_state"]; st == nil || st.Metric[0].GetGauge().GetValue() != 0 {
			t.Fatalf("device state %v", st)
		}
		v := f.Metric[0].GetCounter().GetValue()
		if scrapes == 0 {
			first = v
		}
		last = v
		scrapes++
	}
	if scrapes < 2 || last <= first {
		t.Fatalf("%d scrapes, slots %v then %v", scrapes, first, last)
	}
	r := <-done
	ended = true
	if r.code != 0 {
		t.Fatalf("stream: exit %d: %s", r.code, r.stderr)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("metrics still served after the stream ended")
	}
}
