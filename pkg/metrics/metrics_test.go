package metrics

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

type fakeStream struct{ st stream.Stats }

func (f *fakeStream) Stats() stream.Stats { return f.st }

type fakeDevice struct {
	info p2p.Info
	err  error
}

func (f *fakeDevice) Info() (p2p.Info, error) { return f.info, f.err }

// scrape serves reg over HTTP as Handler does and parses what comes back.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	return get(t, srv.URL)
}

func get(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the one sample of family name, with its labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) (float64, map[string]string) {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.Metric) != 1 {
		t.Fatalf("%s: %v", name, f)
	}
	m := f.Metric[0]
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), labels
	case m.Gauge != nil:
		return m.Gauge.GetValue(), labels
	}
	t.Fatalf("%s is neither a counter nor a gauge", name)
	return 0, nil
}

func TestScrapeReportsStreamAndDevice(t *testing.T) {
	s := &fakeStream{st: stream.Stats{
		Mode: stream.Direct, Pinning: stream.PinDmabuf, Check: stream.CheckGPU,
		Bytes: 64 << 20, Slots: 1024, Elapsed: 2500 * time.Millisecond, Held: 3, MaxHeld: 7,
		SlotLatency: 150 * time.Microsecond,
		Latency: stream.LatencyHistogram{Counts: [stream.LatencyBuckets]uint64{3: 1000, 4: 20, 15: 4},
			Sum: 1024 * 150 * time.Microsecond},
		Frames: frame.Stats{Frames: 1000, Bytes: 60 << 20, Gaps: 2, Duplicates: 1, CRCFailures: 4},
	}}
	d := &fakeDevice{info: p2p.Info{ABIVersion: 1, IPVersion: 0x1fc20006, PinnedTotal: 1 << 30,
		MaxPinnedTotal: 8 << 30, State: p2p.DeviceRecovering, Resets: 5, Errors: 6}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Config{Device: d, Stream: s, Labels: prometheus.Labels{"device": "/dev/gpufpga0", "channel": "c2h1"}}))
	fams := scrape(t, reg)
	want := map[string]float64{
		"gpufpga_stream_bytes_total":              64 << 20,
		"gpufpga_stream_slots_total":              1024,
		"gpufpga_stream_elapsed_seconds":          2.5,
		"gpufpga_stream_slots_held":               3,
		"gpufpga_stream_slots_held_max":           7,
		"gpufpga_stream_slot_latency_seconds":     0, // a histogram, checked below
		"gpufpga_stream_frames_total":             1000,
		"gpufpga_stream_frame_bytes_total":        60 << 20,
		"gpufpga_stream_frame_gaps_total":         2,
		"gpufpga_stream_frame_duplicates_total":   1,
		"gpufpga_stream_frame_crc_failures_total": 4,
		"gpufpga_stream_info":                     1,
		"gpufpga_device_info":                     1,
		"gpufpga_device_state":                    1,
		"gpufpga_device_pinned_bytes":             1 << 30,
		"gpufpga_device_pinned_bytes_limit":       8 << 30,
		"gpufpga_device_resets_total":             5,
		"gpufpga_device_pcie_errors_total":        6,
	}
	for n := range fams {
		if _, ok := want[n]; !ok && strings.HasPrefix(n, "gpufpga_") {
			t.Errorf("unexpected family %s", n)
		}
	}
	for name, w := range want {
		if name == "gpufpga_stream_slot_latency_seconds" {
			continue
		}
		v, labels := value(t, fams, name)
		if v != w {
			t.Errorf("%s = %v, want %v", name, v, w)
		}
		if labels["device"] != "/dev/gpufpga0" || labels["channel"] != "c2h1" {
			t.Errorf("%s labels %v", name, labels)
		}
	}
	if fams["gpufpga_stream_bytes_total"].GetType() != dto.MetricType_COUNTER ||
		fams["gpufpga_stream_slots_held"].GetType() != dto.MetricType_GAUGE {
		t.Error("counters and gauges mixed up")
	}
	// The latency's distribution, not a lifetime mean: cumulative
	// buckets, in seconds, and the slots above the last bound in +Inf.
	lat := fams["gpufpga_stream_slot_latency_seconds"]
	if lat.GetType() != dto.MetricType_HISTOGRAM || len(lat.Metric) != 1 {
		t.Fatalf("slot latency: %v", lat)
	}
	h := lat.Metric[0].Histogram
	if h.GetSampleCount() != 1024 || h.GetSampleSum() < 0.1535 || h.GetSampleSum() > 0.1537 || len(h.Bucket) != stream.LatencyBuckets {
		t.Errorf("slot latency: %d slots, sum %v s, %d buckets", h.GetSampleCount(), h.GetSampleSum(), len(h.Bucket))
	}
	for _, b := range h.Bucket {
		want := map[float64]uint64{10e-6: 0, 50e-6: 0, 100e-6: 1000, 250e-6: 1020, 0.5: 1020, math.Inf(1): 1024}
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("slot latency bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
	if _, l := value(t, fams, "gpufpga_stream_info"); l["mode"] != "direct" || l["pinning"] != "dma-buf" || l["check"] != "gpu" {
		t.Errorf("stream_info labels %v", l)
	}
	if _, l := value(t, fams, "gpufpga_device_info"); l["abi"] != "1" || l["ip_version"] != "0x1fc20006" {
		t.Errorf("device_info labels %v", l)
	}

	// Values are read at each scrape, not when the collector was made.
	s.st.Bytes, d.info.Resets = 128<<20, 9
	fams = scrape(t, reg)
	if v, _ := value(t, fams, "gpufpga_stream_bytes_total"); v != 128<<20 {
		t.Errorf("second scrape: stream bytes %v", v)
	}
	if v, _ := value(t, fams, "gpufpga_device_resets_total"); v != 9 {
		t.Errorf("second scrape: resets %v", v)
	}
}

// A resident stream reports the engine's fills; its slots pass no CPU,
// so it has no latency.
func TestScrapeResidentStream(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Config{Stream: &fakeStream{st: stream.Stats{Mode: stream.Direct, Resident: true, Slots: 70, Fills: 77}}}))
	fams := scrape(t, reg)
	if v, _ := value(t, fams, "gpufpga_stream_resident_fills_total"); v != 77 {
		t.Errorf("resident fills %v, want 77", v)
	}
	if v, _ := value(t, fams, "gpufpga_stream_slots_total"); v != 70 {
		t.Errorf("slots %v, want 70", v)
	}
	if f := fams["gpufpga_stream_slot_latency_seconds"]; f != nil {
		t.Errorf("a resident stream's slot latency: %v", f)
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(New(Config{Stream: &fakeStream{st: stream.Stats{Slots: 3}}}))
	if f := scrape(t, reg)["gpufpga_stream_resident_fills_total"]; f != nil {
		t.Errorf("resident fills of a stream that is not resident: %v", f)
	}
}

// A device whose INFO fails leaves its metrics out; the stream's still
// come.
func TestDeviceErrorKeepsStreamMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Config{Device: &fakeDevice{err: p2p.ErrDeviceGone}, Stream: &fakeStream{st: stream.Stats{Slots: 3}}}))
	fams := scrape(t, reg)
	if v, _ := value(t, fams, "gpufpga_stream_slots_total"); v != 3 {
		t.Errorf("slots %v", v)
	}
	for name := range fams {
		if strings.HasPrefix(name, "gpufpga_device_") {
			t.Errorf("%s reported for a device that failed", name)
		}
	}
	// The handler counts the failure once it has served the scrape: the
	// next one shows it.
	fams = scrape(t, reg)
	if f := fams["promhttp_metric_handler_errors_total"]; f == nil || len(f.Metric) == 0 {
		t.Error("the handler counted no error")
	} else {
		errs := 0.0
		for _, m := range f.Metric {
			errs += m.Counter.GetValue()
		}
		if errs != 1 {
			t.Errorf("the handler counted %v errors, want 1", errs)
		}
	}
	if _, err := reg.Gather(); !errors.Is(err, p2p.ErrDeviceGone) {
		t.Errorf("gather: %v, want ErrDeviceGone", err)
	}
}

// Serve answers at /metrics until its context ends, then returns nil and
// stops listening.
func TestServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Config{Stream: &fakeStream{st: stream.Stats{Bytes: 42}}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, reg) }()
	url := "http://" + l.Addr().String()
	if v, _ := value(t, get(t, url+"/metrics"), "gpufpga_stream_bytes_total"); v != 42 {
		t.Errorf("bytes %v", v)
	}
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/: %s", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running after its context ended")
	}
	if _, err := http.Get(url + "/metrics"); err == nil {
		t.Error("still answering after Serve returned")
	}
}

// A listener that fails ends Serve with its error.
func TestServeFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := Serve(context.Background(), l, prometheus.NewRegistry()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
}
