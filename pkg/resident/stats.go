package resident

import (
	"errors"
	"slices"
	"time"
)

// Errors a run reports; match them with errors.Is.
var (
	// ErrData is a slot whose bytes were not the fill its result announced.
	ErrData = errors.New("resident: slot data differs from its fill")
	// ErrLost is a run in which fills were produced and not consumed, or
	// consumed more than once.
	ErrLost = errors.New("resident: fills lost or consumed twice")
	// ErrStalled is a consumer that stopped publishing progress.
	ErrStalled = errors.New("resident: consumer made no progress")
	// ErrConfig is a ring or run that cannot work as asked.
	ErrConfig = errors.New("resident: invalid configuration")
)

// Latency summarises round trips, in microseconds.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	Mean float64 `json:"mean_us"`
	Max  float64 `json:"max_us"`
}

// Summarize returns the samples' count, median, 99th percentile (nearest
// rank), mean and maximum; it sorts ds.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return Latency{N: len(ds), P50: us(Percentile(ds, 50)), P99: us(Percentile(ds, 99)),
		Mean: us(sum) / float64(len(ds)), Max: us(ds[len(ds)-1])}
}

// Percentile is the nearest-rank p-th percentile of sorted samples: the
// smallest sample that at least p % of them do not exceed.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted)) + 0.999999999)
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Throughput is a sustained rate.
type Throughput struct {
	Slots   uint64  `json:"slots"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	PerS    float64 `json:"slots_per_s"`
	GBps    float64 `json:"gb_per_s"`
}
