package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}

func TestHumanOutput(t *testing.T) {
	var b bytes.Buffer
	writeInfo(&b, infoJSON{
		Device: "/dev/gpufpga0", ABIVersion: 1, IPVersion: 6,
		Channels:    []channelJSON{{"h2c0", false}, {"h2c1", true}, {"c2h0", false}, {"c2h1", true}},
		PinKinds:    []string{"host", "dmabuf"},
		CardMemSize: 64 << 20, MaxDescs: 4096, MaxSegs: 1024, MaxPins: 4096, MaxPinned: 64 << 30,
		MaxPinnedTotal: 256 << 30, PinnedTotal: 3 << 20, MaxQueued: 1024, DefaultTimeoutMS: 5000,
	})
	golden(t, "info", b.Bytes())

	b.Reset()
	writePin(&b, pinJSON{Handle: 3, Kind: "gpu", Addr: 0x7f0000000064, Len: 200000, Offset: 100, PageSize: 65536,
		Pages: 4, Runs: 2, LargestRun: 3, Descriptors: 2,
		SGList: []segJSON{{0x3800010064, 130972}, {0x3800100000, 69028}}})
	golden(t, "pin", b.Bytes())

	b.Reset()
	p99 := 12500.0
	writeBench(&b, benchJSON{Channel: "c2h0", Memory: "sim", Rows: []benchRow{
		{Size: 4096, Count: 20, GBps: 0.0123, P50us: 410, MaxUs: 900, EngineUs: 333},
		{Size: 16 << 20, Count: 100, GBps: 1.5, P50us: 11000, P99us: &p99, MaxUs: 13000, EngineUs: 11184},
	}})
	golden(t, "bench", b.Bytes())
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4096", 4096, true}, {"64KiB", 64 << 10, true}, {"16mib", 16 << 20, true}, {"1G", 1 << 30, true},
		{"2MB", 2000000, true}, {"12QB", 0, false}, {"", 0, false}, {"-1", 0, false}, {"1.5MiB", 0, false},
		{"99999999999999999999", 0, false}, {"20000000000GiB", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v", tc.in, got, err)
		}
	}
}

func TestExitCodes(t *testing.T) {
	_, badChain := writeChains(t)
	none := filepath.Join(t.TempDir(), "gpufpga-none")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"bogus"}, ExitUsage, `unknown command "bogus"`},
		{[]string{"transfer", "--size", "12QB"}, ExitUsage, `"12QB" is not a size`},
		{[]string{"transfer", "--channel", "x2h0"}, ExitUsage, `channel "x2h0"`},
		{[]string{"transfer", "--count", "0"}, ExitUsage, "--count must be at least 1"},
		{[]string{"info", "-d", "/dev/gpufpga-none"}, ExitDevice, "/dev/gpufpga-none does not exist"},
		{[]string{"info", "-d", "/dev/null"}, ExitDevice, "p2pctl: gpufpga open /dev/null: driver ABI not supported: not a gpufpga device (INFO ioctl: inappropriate ioctl for device)\nhint: install p2pctl and the gpufpga module from one release"},
		{[]string{"desc"}, ExitUsage, "name a channel"},
		{[]string{"desc", "--file", badChain}, ExitVerify, "bad descriptor magic"},
		// Flags are checked before the device is opened: none exists here.
		{[]string{"pin", "--size", "0", "-d", none}, ExitUsage, "--size must be more than 0"},
		{[]string{"pin", "--mem", "sim", "-d", none}, ExitUsage, `--mem "sim": want cuda, host`},
		{[]string{"transfer", "--size", "0", "-d", none}, ExitUsage, "--size must be more than 0"},
		{[]string{"stream", "--mem", "cuda", "--frame-size", "100", "-d", none}, ExitUsage, "--frame-size 100: frames are at least 48 bytes, in multiples of 16"},
		{[]string{"stream", "--mem", "cuda", "--frame-size", "96", "-d", none}, ExitUsage, "--frame-size 96: slots of 65536 bytes must hold whole frames"},
		{[]string{"stream", "--mem", "cuda", "--mode", "direct", "--check", "cpu", "-d", none}, ExitUsage, "--check cpu cannot read CUDA memory in direct mode"},
		{[]string{"stream", "--mem", "cuda", "--mode", "direct", "-d", none}, ExitUsage, "checking frames in CUDA memory needs --frame-size"},
		{[]string{"stream", "--mem", "host", "-d", none}, ExitUsage, "a stream's slots end up in GPU memory"},
		{[]string{"stream", "--mem", "cuda", "--mode", "compat", "--pin", "dma-buf", "-d", none}, ExitUsage, "pinning dma-buf is for a ring in GPU memory, not compat mode's"},
		{[]string{"bench", "--sizes", "0,4K", "-d", none}, ExitUsage, `--sizes: "0": sizes must be more than 0`},
		{[]string{"bench", "--sizes", "4K,,8K", "-d", none}, ExitUsage, `--sizes: "" is not a size`},
		{[]string{"desc", "c2h0", "-d", none}, ExitDevice, none + " does not exist"},
		{[]string{"regs", "-d", none}, ExitDevice, none + " does not exist"},
		{[]string{"info", "extra"}, ExitUsage, `unknown command "extra" for "p2pctl info"`},
		{[]string{"desc", "c2h0", "c2h1"}, ExitUsage, "accepts at most 1 arg(s), received 2"},
	} {
		var out, errOut bytes.Buffer
		code := Main(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.msg)
		}
		if strings.Contains(errOut.String(), "goroutine") || strings.Count(errOut.String(), "\n") > 3 {
			t.Errorf("%v: not a short message: %q", tc.args, errOut.String())
		}
	}
}

// writeChains writes a chain dump in the driver's debugfs format, and a copy
// with a corrupt magic in its second descriptor.
func writeChains(t *testing.T) (good, bad string) {
	t.Helper()
	const addr = 0x1234000
	segs := []sgl.Segment{{Addr: 0x3800010064, Len: 130972}, {Addr: 0x3800100000, Len: 69028}, {Addr: 0x3800300000, Len: 4096}}
	buf := make([]byte, chainHeader+len(segs)*xdma.DescSize)
	c, err := xdma.BuildChain(buf[chainHeader:], addr, segs, xdma.ChainSpec{Dir: xdma.C2H, CardAddr: 0x1000})
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(buf, addr)
	binary.LittleEndian.PutUint32(buf[8:], uint32(c.Count))
	binary.LittleEndian.PutUint32(buf[12:], uint32(c.FirstAdjacent))
	dir := t.TempDir()
	good, bad = filepath.Join(dir, "chain.bin"), filepath.Join(dir, "bad-chain.bin")
	if err := os.WriteFile(good, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	buf[chainHeader+xdma.DescSize+2] ^= 0xff
	if err := os.WriteFile(bad, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return good, bad
}

func TestVersionFromBuild(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"version", "-d", filepath.Join(t.TempDir(), "none"), "--json"}, &out, &errOut); code != ExitOK {
		t.Fatalf("version: exit %d: %s", code, errOut.String())
	}
	var v struct{ Version string }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	// A test binary records no module version or revision.
	if want := version(); v.Version != want || v.Version == "" || v.Version == "dev" {
		t.Fatalf("version %q, want %q from the build info", v.Version, want)
	}
}

func TestDescDecodesDump(t *testing.T) {
	good, _ := writeChains(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"desc", "--file", good}, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	golden(t, "desc", bytes.ReplaceAll(out.Bytes(), []byte(filepath.Dir(good)), []byte("DIR")))
}

func TestRegsDecode(t *testing.T) {
	regs, err := parseRegs([]byte("0x1000 0x1fc18006\n0x1040 0x00080012\n0x2010 0x0000000f\n0x0040 0xffffffff\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range regs {
		fmt.Fprintf(&b, "%s %#x %s\n", r.Name, r.Value, r.Decoded)
	}
	golden(t, "regs", b.Bytes())
	if _, err := parseRegs([]byte("garbage\n")); err == nil {
		t.Fatal("garbage parsed")
	}
}
