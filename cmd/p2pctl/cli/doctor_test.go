package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor"
	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/doctor/doctortest"
)

type fakeDevice uint32

func (f fakeDevice) ABI(context.Context, string) (uint32, error) { return uint32(f), nil }

type fakeCUDA struct{}

func (fakeCUDA) GPU(context.Context, string) (doctor.GPU, error) {
	return doctor.GPU{Name: "NVIDIA A100-PCIE-40GB", RDMASupported: true, DmaBuf: true, WritesOrdering: 100, FlushOptions: 1}, nil
}

// runDoctor runs p2pctl doctor on a fixture host, the driver answering
// with abi.
func runDoctor(t *testing.T, fixture string, abi uint32, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	h, ok := doctortest.Fixture(fixture)
	if !ok {
		t.Fatalf("no fixture %q", fixture)
	}
	dir := t.TempDir()
	if err := doctortest.Write(dir, h); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	o := &Options{doctor: &doctorEnv{device: fakeDevice(abi), cuda: fakeCUDA{}}}
	code = o.Run(context.Background(), append([]string{"doctor", "--root", dir}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDoctorExitCodes(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		abi     uint32
		code    int
		// worst is the check expected to be the worst, as status and key.
		worst string
	}{
		{"switch-shared", 1, ExitOK, ""},
		{"root-complex", 1, ExitOK, "WARN path.route"},
		{"acs-on", 1, ExitOK, "WARN path.acs"},
		{"iommu-on", 1, ExitOK, "WARN iommu.mode"},
		{"downtrained", 1, ExitOK, "WARN fpga.link"},
		{"no-fpga", 1, ExitOK, "WARN driver.nodes"},
		{"no-driver", 1, ExitDevice, "FAIL driver.module"},
		{"switch-shared", 2, ExitDevice, "FAIL driver.abi"},
	} {
		code, stdout, stderr := runDoctor(t, tc.fixture, tc.abi, "--json")
		if code != tc.code {
			t.Errorf("%s, ABI %d: exit %d, want %d; stderr %q", tc.fixture, tc.abi, code, tc.code, stderr)
		}
		if (code == ExitDevice) != strings.Contains(stderr, "checks failed") {
			t.Errorf("%s: stderr %q", tc.fixture, stderr)
		}
		var r doctor.Report
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%s: %v\n%s", tc.fixture, err, stdout)
		}
		worst := ""
		for _, c := range r.Checks {
			if c.Status != doctor.OK && worst == "" || c.Status == doctor.Fail && !strings.HasPrefix(worst, "FAIL") {
				worst = c.Status.String() + " " + c.Key
			}
		}
		if worst != tc.worst {
			t.Errorf("%s, ABI %d: first worst check %q, want %q", tc.fixture, tc.abi, worst, tc.worst)
		}
	}
}

func TestDoctorOutput(t *testing.T) {
	code, stdout, _ := runDoctor(t, "switch-shared", 1, "--json", "--ring-size", "1GiB")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	// The JSON's shape, as scripts read it.
	var v struct {
		Schema   int    `json:"schema_version"`
		RingSize uint64 `json:"ring_size"`
		Checks   []struct {
			Key, Subject, Status, Summary, Hint string
		}
		Counts struct{ OK, Warn, Fail int }
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != SchemaVersion || v.RingSize != 1<<30 || len(v.Checks) != 18 || v.Counts.OK != 18 || v.Checks[0].Key != "driver.module" || v.Checks[0].Status != "OK" {
		t.Errorf("JSON %+v", v)
	}

	_, human, _ := runDoctor(t, "downtrained", 1)
	lines := strings.Split(strings.TrimSuffix(human, "\n"), "\n")
	if len(lines) != 19 || lines[18] != "17 OK, 1 WARN, 0 FAIL" {
		t.Fatalf("human output:\n%s", human)
	}
	var link string
	for _, l := range lines {
		if strings.Contains(l, "fpga.link") {
			link = l
		}
	}
	if !strings.HasPrefix(link, "WARN  fpga.link") || !strings.Contains(link, "2.5 GT/s x4, capable of 8.0 GT/s x8; hint: ") {
		t.Errorf("fpga.link line %q", link)
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"doctor", "--ring-size", "12QB"}, `"12QB" is not a size`},
		{[]string{"doctor", "--ring-size", "0"}, "--ring-size must be more than 0"},
		{[]string{"doctor", "now"}, `unknown command "now" for "p2pctl doctor"`},
	} {
		var out, errOut bytes.Buffer
		if code := Main(tc.args, &out, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), ExitUsage, tc.msg)
		}
	}
}
