// Package metrics exports gpufpga's counters to Prometheus: a collector
// over a stream session's statistics (pkg/stream) and a device's counters
// (pkg/p2p), so that an acquisition host can be watched without root or
// eBPF. pkg/p2p and pkg/stream do not import Prometheus; this package
// reads them through the small interfaces below.
//
// Every metric is read when Prometheus scrapes: the collector holds no
// copy, and registers nothing globally. Register it on a registry of your
// own and serve that (Handler), or use Serve.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// StreamStats is what the collector reads of a stream: *stream.Session.
type StreamStats interface {
	Stats() stream.Stats
}

// DeviceInfo is what the collector reads of a device: *p2p.Device.
type DeviceInfo interface {
	Info() (p2p.Info, error)
}

// Config names what a Collector reads. Either may be nil.
type Config struct {
	Device DeviceInfo
	Stream StreamStats
	// Labels are added to every metric (for example device="/dev/gpufpga0",
	// channel="c2h1").
	Labels prometheus.Labels
}

// Collector is a prometheus.Collector over one device and one stream.
type Collector struct {
	cfg Config

	streamBytes, streamSlots, streamElapsed, streamHeld, streamMaxHeld, streamLatency *prometheus.Desc
	frames, frameBytes, gaps, duplicates, crcFailures, streamInfo, residentFills      *prometheus.Desc

	devInfo, devState, pinned, maxPinnedTotal, resets, pcieErrors *prometheus.Desc
}

// New returns a collector of what cfg names.
func New(cfg Config) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("gpufpga_"+name, help, labels, cfg.Labels)
	}
	return &Collector{
		cfg:           cfg,
		streamBytes:   d("stream_bytes_total", "Bytes the engine wrote into the stream's slots."),
		streamSlots:   d("stream_slots_total", "Slots the stream filled."),
		streamElapsed: d("stream_elapsed_seconds", "Time since the stream started, or its length once ended."),
		streamHeld:    d("stream_slots_held", "Slots the consumer holds now."),
		streamMaxHeld: d("stream_slots_held_max", "Most slots the consumer held at once."),
		streamLatency: d("stream_slot_latency_seconds", "Time from the driver seeing a slot filled to the consumer getting it."),
		frames:        d("stream_frames_total", "Well-formed frames checked."),
		frameBytes:    d("stream_frame_bytes_total", "Bytes of well-formed frames checked."),
		gaps:          d("stream_frame_gaps_total", "Frames missing between consecutive sequence numbers."),
		duplicates:    d("stream_frame_duplicates_total", "Frames at or behind the last sequence number seen."),
		crcFailures:   d("stream_frame_crc_failures_total", "Frames that failed to parse or their CRC."),
		residentFills: d("stream_resident_fills_total",
			"A GPU-resident stream's fills, which its consumer on the GPU takes: known once the stream ended, 0 before."),
		streamInfo: d("stream_info", "The stream's mode, pinning route and frame check (value 1).", "mode", "pinning", "check"),
		devInfo:    d("device_info", "The driver's ABI and the XDMA IP version (value 1).", "abi", "ip_version"),
		devState:   d("device_state", "Whether the device takes work: 0 ready, 1 recovering, 2 offline."),
		pinned:     d("device_pinned_bytes", "Bytes pinned on the device by all its users."),
		maxPinnedTotal: d("device_pinned_bytes_limit",
			"Most bytes the device lets its users pin (module parameter max_pinned_total)."),
		resets:     d("device_resets_total", "Times the card lost its engine state since the driver bound it."),
		pcieErrors: d("device_pcie_errors_total", "Uncorrectable PCIe (AER) errors reported to the driver."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	if c.cfg.Stream != nil {
		for _, d := range []*prometheus.Desc{c.streamBytes, c.streamSlots, c.streamElapsed, c.streamHeld, c.streamMaxHeld,
			c.streamLatency, c.frames, c.frameBytes, c.gaps, c.duplicates, c.crcFailures, c.streamInfo, c.residentFills} {
			ch <- d
		}
	}
	if c.cfg.Device != nil {
		for _, d := range []*prometheus.Desc{c.devInfo, c.devState, c.pinned, c.maxPinnedTotal, c.resets, c.pcieErrors} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector. A device whose INFO fails
// reports the error for its metrics, and the stream's still come.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.cfg.Stream != nil {
		st := c.cfg.Stream.Stats()
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
		}
		counter(c.streamBytes, st.Bytes)
		counter(c.streamSlots, st.Slots)
		gauge(c.streamElapsed, st.Elapsed.Seconds())
		gauge(c.streamHeld, float64(st.Held))
		gauge(c.streamMaxHeld, float64(st.MaxHeld))
		if !st.Resident {
			// A resident stream's slots never pass the CPU.
			ch <- latencyHistogram(c.streamLatency, st.Latency)
		}
		counter(c.frames, st.Frames.Frames)
		counter(c.frameBytes, st.Frames.Bytes)
		counter(c.gaps, st.Frames.Gaps)
		counter(c.duplicates, st.Frames.Duplicates)
		counter(c.crcFailures, st.Frames.CRCFailures)
		if st.Resident {
			counter(c.residentFills, st.Fills)
		}
		pinning := ""
		if st.Mode == stream.Direct {
			pinning = st.Pinning.String()
		}
		ch <- prometheus.MustNewConstMetric(c.streamInfo, prometheus.GaugeValue, 1, st.Mode.String(), pinning, st.Check.String())
	}
	if c.cfg.Device != nil {
		info, err := c.cfg.Device.Info()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(c.devState, fmt.Errorf("gpufpga device info: %w", err))
			return
		}
		ch <- prometheus.MustNewConstMetric(c.devInfo, prometheus.GaugeValue, 1,
			fmt.Sprint(info.ABIVersion), fmt.Sprintf("%#x", info.IPVersion))
		ch <- prometheus.MustNewConstMetric(c.devState, prometheus.GaugeValue, float64(info.State))
		ch <- prometheus.MustNewConstMetric(c.pinned, prometheus.GaugeValue, float64(info.PinnedTotal))
		ch <- prometheus.MustNewConstMetric(c.maxPinnedTotal, prometheus.GaugeValue, float64(info.MaxPinnedTotal))
		ch <- prometheus.MustNewConstMetric(c.resets, prometheus.CounterValue, float64(info.Resets))
		ch <- prometheus.MustNewConstMetric(c.pcieErrors, prometheus.CounterValue, float64(info.Errors))
	}
}

// latencyHistogram is h as a Prometheus histogram, in seconds.
func latencyHistogram(d *prometheus.Desc, h stream.LatencyHistogram) prometheus.Metric {
	buckets := make(map[float64]uint64, stream.LatencyBuckets-1)
	var n uint64
	for i, c := range h.Counts {
		n += c
		if i < stream.LatencyBuckets-1 {
			buckets[stream.LatencyBound(i).Seconds()] = n // cumulative, as Prometheus counts
		}
	}
	return prometheus.MustNewConstHistogram(d, n, h.Sum.Seconds(), buckets)
}

// Handler serves reg's metrics in Prometheus' text format; a metric that
// fails is left out and logged in the response's error count rather than
// failing the whole scrape.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}

// Serve serves reg's metrics at /metrics on l until ctx is done, then
// shuts the server down (waiting up to 5 s for scrapes in progress). It
// returns nil after ctx ends, or why serving failed.
func Serve(ctx context.Context, l net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(reg))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("metrics: serving on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("metrics: shutting down on %s: %w", l.Addr(), err)
	}
	return nil
}
