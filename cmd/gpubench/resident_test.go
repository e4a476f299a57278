package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/resident"
)

func parse(t *testing.T, args ...string) (options, error) {
	t.Helper()
	fs := flag.NewFlagSet("gpubench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlags(fs, args)
}

func TestParseFlags(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if o.resident || o.rc.PeerOnly || o.rc.Repeats != 5 || o.rc.Peer.NSlots != 1024 || o.rc.Peer.Rate != 12.5e6 ||
		o.rc.Peer.Timeout != 2*time.Second || o.rc.Peer.Blocks != 256 || o.rc.Peer.Word != wordConsumer || o.out != "-" {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parse(t, "-resident", "-peer-only", "-resident-repeats", "3", "-out", "results", "-peer-rate", "1e6", "-peer-slots", "128")
	if err != nil {
		t.Fatal(err)
	}
	if !o.resident || !o.rc.PeerOnly || o.rc.Repeats != 3 || o.out != "results" || o.rc.Peer.Rate != 1e6 || o.rc.Peer.NSlots != 128 {
		t.Errorf("-resident -peer-only -resident-repeats 3: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-peer-only"}, "-peer-only needs -resident"},
		{[]string{"-resident", "-resident-repeats", "0"}, "-resident-repeats 0: at least 1"},
		{[]string{"-resident", "-peer-rate", "0"}, "-peer-rate 0: above 0"},
		{[]string{"-resident", "-peer-slots", "0"}, "-peer-slots 0, -peer-blocks 256, -peer-timeout 2s: slots, blocks and a timeout above 0"},
		{[]string{"-resident", "-peer-blocks", "0"}, "-peer-slots 1024, -peer-blocks 0, -peer-timeout 2s: slots, blocks and a timeout above 0"},
		{[]string{"-resident", "-peer-consumer", "warp"}, `-peer-consumer "warp": function or dispatcher`},
		{[]string{"-resident", "-peer-rings", "0"}, "-peer-rings 0: at least 1"},
		{[]string{"-resident", "-peer-function", "null"}, `-peer-function "null": pattern or empty`},
		{[]string{"-resident", "-peer-word", "host"}, `-peer-word "host": consumer or producer`},
		{[]string{"-resident", "-peer-function", "empty", "-peer-consumer", "dispatcher"}, "-peer-function empty runs in the function consumer, not dispatcher"},
		{[]string{"-resident", "peer"}, `unexpected arguments ["peer"]`},
		{[]string{"-resident-repeats", "x"}, `invalid value "x" for flag -resident-repeats: parse error`},
	} {
		if _, err := parse(t, tc.args...); err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// at walks a decoded JSON document by a path of /-separated keys
// (indices for arrays); a spread's keys are themselves dotted paths.
func at(t *testing.T, doc any, path string) any {
	t.Helper()
	v := doc
	for _, k := range strings.Split(path, "/") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				t.Errorf("%s: no %q", path, k)
				return nil
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				t.Errorf("%s: no element %q", path, k)
				return nil
			}
			v = x[i]
		default:
			t.Errorf("%s: %q of a %T", path, k, v)
			return nil
		}
	}
	return v
}

// A resident document keeps every field older files have, the runs'
// figures as the median run with each figure's spread over the repeats,
// the peer producer's goals, and the topology.
func TestResidentJSONShape(t *testing.T) {
	run := func(ratio, gbps float64) residentSizeRun {
		return residentSizeRun{SlotBytes: 4096, Producer: "cpu-store", ResidentToAlone: ratio,
			Resident: residentPath{Throughput: resident.Throughput{GBps: gbps}}}
	}
	peer := &peerPass{ProducerGPU: 1, NSlots: 256, Rate: 12.5e6,
		PingPongSpread: map[string]spread{"p50_us": spreadOf([]float64{1, 2, 3})}}
	x := peerRepeat{Consumer: resident.Throughput{PerS: 12e6}, ConsumerToAlone: 0.96, RTTToPingPong: 1.4,
		AloneThrottled: &resident.Throughput{PerS: 12.5e6}}
	peer.Runs = []peerSizeRun{{SlotBytes: 4096, Throttled: true, Each: []peerRepeat{x}, Spread: spreads([]map[string]float64{x.figures()})},
		{SlotBytes: 65536, Each: []peerRepeat{{ConsumerToAlone: 0.9}}}}
	peer.Goals = peer.goals()
	r := residentReport{Resident: &residentPass{Runs: []residentSizeRun{combineRuns([]residentSizeRun{run(0.9, 9), run(0.8, 8), run(0.95, 9.5)})},
		Peer: peer, Baselines: spreads([]map[string]float64{{"pingpong.p50_us": 2.5}, {"pingpong.p50_us": 3.5}})}}
	r.Topology = topology{GPUs: []gpuInfo{{Ordinal: 0, Name: "NVIDIA H200", BusID: "00000000:19:00.0"}},
		Peers: &peerAccess{GPU0ToGPU1: true, GPU1ToGPU0: true}, TopoM: "\tGPU0\tGPU1\nGPU0\t X \tNV18"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]any{
		"topology/gpus/0/pci_bus_id":                                                         "00000000:19:00.0",
		"topology/peer_access/gpu1_to_gpu0":                                                  true,
		"topology/nvidia_smi_topo_m":                                                         "\tGPU0\tGPU1\nGPU0\t X \tNV18",
		"resident/runs/0/resident_gbps_to_producer_alone":                                    0.9,
		"resident/runs/0/gpu_resident/sustained/gb_per_s":                                    9.0,
		"resident/runs/0/repeats":                                                            3.0,
		"resident/runs/0/median_of_repeats/gpu_resident.sustained.gb_per_s/max":              9.5,
		"resident/runs/0/median_of_repeats/resident_gbps_to_producer_alone/min":              0.8,
		"resident/runs/0/each/2/resident_gbps_to_producer_alone":                             0.95,
		"resident/baselines_median_of_repeats/pingpong.p50_us/median":                        3.0,
		"resident/peer/pingpong/p50_us/median":                                               2.0,
		"resident/peer/runs/0/median_of_repeats/consumer_to_producer_alone/median":           0.96,
		"resident/peer/runs/0/median_of_repeats/producer_alone_throttled.slots_per_s/median": 12.5e6,
		"resident/peer/runs/0/each/0/producer_alone_throttled/slots_per_s":                   12.5e6,
		"resident/peer/goals/0/goal":                                                         0.95,
		"resident/peer/goals/0/met":                                                          true,
		"resident/peer/goals/1/name":                                                         "4096-byte slots: round trip p50 over the bare peer ping-pong p50",
		"resident/peer/goals/1/at_most":                                                      true,
		"resident/peer/goals/1/measured/median":                                              1.4,
		"resident/peer/goals/2/met":                                                          false,
		"resident/peer/goals/3/name":                                                         "lost slots in each repeat",
		"resident/peer/goals/4/met":                                                          true,
	} {
		if got := at(t, doc, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if n := len(peer.Goals); n != 5 {
		t.Errorf("%d goals, want 5", n)
	}
}

// Every field of the resident files already committed still has its place.
func TestOldResidentFilesRead(t *testing.T) {
	for _, name := range []string{"2026-11-27T1031Z-h200-2ece68eba799-resident.json", "2026-11-27T1030Z-h100-80gb-hbm3-2ece68eba799-resident.json"} {
		b, err := os.ReadFile("../../results/" + name)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var r residentReport
		if err := dec.Decode(&r); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(r.Resident.Runs) == 0 || r.Resident.Runs[0].Resident.Throughput.GBps == 0 {
			t.Errorf("%s: no runs read", name)
		}
	}
}

// The table says each goal, whether its median meets it, and why the peer
// producer did not run where it did not.
func TestPrintPeer(t *testing.T) {
	var b bytes.Buffer
	printPeer(&b, &peerPass{Skipped: "1 GPU: the peer producer needs a second"})
	if got := b.String(); got != "peer producer skipped: 1 GPU: the peer producer needs a second\n" {
		t.Errorf("skipped: %q", got)
	}
	b.Reset()
	p := &peerPass{Rate: 12.5e6, Runs: []peerSizeRun{{SlotBytes: 4096, Throttled: true, Each: []peerRepeat{{ConsumerToAlone: 0.97, RTTToPingPong: 1.6}}}}}
	p.Goals = p.goals()
	printPeer(&b, p)
	for _, want := range []string{
		"goal MET     4096-byte slots: consumer slots/s over the producer alone throttled to 1.25e+07 slots/s: 0.970 [0.970 .. 0.970] (goal >= 0.95)",
		"goal NOT MET 4096-byte slots: round trip p50 over the bare peer ping-pong p50: 1.600 [1.600 .. 1.600] (goal <= 1.5)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// The empty function's figures judge no goal: the are for a
// consumer that runs a real function.
func TestEmptyFunctionJudgesNoGoal(t *testing.T) {
	runs := []peerSizeRun{{SlotBytes: 65536, Each: []peerRepeat{{ConsumerToAlone: 0.96, RTTToPingPong: 1.4}}}}
	p := &peerPass{Consumer: consumerFunction, Function: functionEmpty, Runs: runs}
	p.judge()
	var b bytes.Buffer
	printPeer(&b, p)
	if len(p.Goals) != 0 || !strings.Contains(b.String(), "goals: none judged: the consumer ran an empty function") {
		t.Errorf("empty function: %d goals, table:\n%s", len(p.Goals), b.String())
	}
	p = &peerPass{Consumer: consumerFunction, Function: functionPattern, Runs: runs}
	p.judge()
	if len(p.Goals) == 0 {
		t.Error("the pattern check judged no goal")
	}
}

// A slot lost, or a check error, while several rings ran at once fails
// the pass's goals as it does in a ring's own runs, and the table says
// what the rings made together.
func TestBesideCountsInGoals(t *testing.T) {
	x := besideRepeat{Alone: resident.Throughput{PerS: 1e6}, TotalToAlone: 1.9, SlowestToAlone: 0.94, Lost: 1}
	p := &peerPass{Rate: 12.5e6,
		Runs:   []peerSizeRun{{SlotBytes: 4096, Throttled: true, Each: []peerRepeat{{ConsumerToAlone: 0.97, RTTToPingPong: 1.4}}}},
		Beside: &peerBeside{Rings: 2, SlotBytes: 4096, Each: []besideRepeat{x}, Spread: spreads([]map[string]float64{x.figures()})}}
	p.Goals = p.goals()
	var b bytes.Buffer
	printPeer(&b, p)
	for _, want := range []string{
		"   4096 peer   2 rings at once, each its consumer: one ring alone 1000000 [1000000 .. 1000000]/s; total over one alone 1.900 [1.900 .. 1.900], slowest ring over one alone 0.940 [0.940 .. 0.940]; lost 1 [1 .. 1] errors 0 [0 .. 0]",
		"goal NOT MET lost slots in each repeat: 0.500 [0.000 .. 1.000] (goal <= 0)",
		"goal MET     check errors in each repeat: 0.000 [0.000 .. 0.000] (goal <= 0)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A count that must be 0 is met only if it is 0 in every repeat, not in
// the median one.
func TestNoneGoal(t *testing.T) {
	for _, tc := range []struct {
		xs  []float64
		met bool
	}{{[]float64{0, 0, 0}, true}, {[]float64{0, 0, 1}, false}, {nil, false}} {
		if g := noneGoal("lost", tc.xs); g.Met != tc.met {
			t.Errorf("%v: met %v, want %v", tc.xs, g.Met, tc.met)
		}
	}
}
