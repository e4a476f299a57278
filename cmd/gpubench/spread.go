package main

import (
	"maps"
	"slices"
)

// spread is one figure over repeated runs: its median and its range.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// spreadOf summarises xs (all zero for none).
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	return spread{Median: median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// spreads summarises each named figure over runs, a map of figures each;
// a figure some runs lack is summarised over those that have it.
func spreads(runs []map[string]float64) map[string]spread {
	by := map[string][]float64{}
	for _, r := range runs {
		for _, k := range slices.Sorted(maps.Keys(r)) {
			by[k] = append(by[k], r[k])
		}
	}
	out := make(map[string]spread, len(by))
	for k, xs := range by {
		out[k] = spreadOf(xs)
	}
	return out
}

// medianIndex is the index of the run whose key is the median: the lower
// middle one for an even count; -1 for none.
func medianIndex(keys []float64) int {
	if len(keys) == 0 {
		return -1
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case keys[a] < keys[b]:
			return -1
		case keys[a] > keys[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}
