package main

import (
	"reflect"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/resident"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{0.93, 0.97, 0.95, 0.99, 0.91}, spread{Median: 0.95, Min: 0.91, Max: 0.99, N: 5}},
		{[]float64{4, 1, 3, 2}, spread{Median: 2.5, Min: 1, Max: 4, N: 4}},
		{[]float64{7}, spread{Median: 7, Min: 7, Max: 7, N: 1}},
		{nil, spread{}},
	} {
		if got := spreadOf(tc.in); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	// The input keeps its order.
	in := []float64{3, 1, 2}
	spreadOf(in)
	if !reflect.DeepEqual(in, []float64{3, 1, 2}) {
		t.Errorf("spreadOf sorted its input: %v", in)
	}
}

func TestSpreads(t *testing.T) {
	got := spreads([]map[string]float64{{"a": 1, "b": 10}, {"a": 3}, {"a": 2, "b": 20}})
	want := map[string]spread{"a": {Median: 2, Min: 1, Max: 3, N: 3}, "b": {Median: 15, Min: 10, Max: 20, N: 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spreads = %+v, want %+v", got, want)
	}
	if got := spreads(nil); len(got) != 0 {
		t.Errorf("spreads(nil) = %v", got)
	}
}

func TestMedianIndex(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want int
	}{
		{[]float64{0.9, 0.7, 0.8}, 2},
		{[]float64{4, 1, 3, 2}, 3}, // the lower middle: 2
		{[]float64{5, 5, 5}, 1},
		{[]float64{1}, 0},
		{nil, -1},
	} {
		if got := medianIndex(tc.in); got != tc.want {
			t.Errorf("medianIndex(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestMedianLatency(t *testing.T) {
	ls := []resident.Latency{{P50: 3, P99: 9}, {P50: 1, P99: 20}, {P50: 2, P99: 4}}
	if got := medianLatency(ls); got != ls[2] {
		t.Errorf("medianLatency = %+v, want %+v", got, ls[2])
	}
	if got := medianLatency(nil); got != (resident.Latency{}) {
		t.Errorf("medianLatency(nil) = %+v", got)
	}
}
