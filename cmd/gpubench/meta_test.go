package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "h100-80gb-hbm3",
		"NVIDIA H200":           "h200",
		" NVIDIA RTX 6000 Ada ": "rtx-6000-ada",
		"??":                    "gpu",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// Each run gets a new file, named for the date, GPU and revision; a name
// already there is never opened again.
func TestCreateResultNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 23, 12, 5, 0, 0, time.UTC)
	if err := os.WriteFile(filepath.Join(dir, "2026-11-23T1205Z-h200-0123456789ab.json"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 3 {
		f, err := createResult(dir, at, "NVIDIA H200", "0123456789ab")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("new")
		f.Close()
		names = append(names, filepath.Base(f.Name()))
	}
	want := []string{"2026-11-23T1205Z-h200-0123456789ab-2.json", "2026-11-23T1205Z-h200-0123456789ab-3.json",
		"2026-11-23T1205Z-h200-0123456789ab-4.json"}
	if !slices.Equal(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "2026-11-23T1205Z-h200-0123456789ab.json")); string(b) != "old" {
		t.Errorf("the first run's file now holds %q", b)
	}
}

func TestShortRev(t *testing.T) {
	if got := (build{Revision: "0123456789abcdef0123", Dirty: true}).shortRev(); got != "0123456789ab-dirty" {
		t.Errorf("shortRev = %q", got)
	}
	if got := (build{Revision: "unknown"}).shortRev(); got != "unknown" {
		t.Errorf("shortRev = %q", got)
	}
}

func TestFlagsRecorded(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("a", 3, "")
	fs.String("b", "x", "")
	if err := fs.Parse([]string{"-a", "5"}); err != nil {
		t.Fatal(err)
	}
	if m := flags(fs); m["a"] != "5" || m["b"] != "x" {
		t.Errorf("flags = %v", m)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{0.9}, 0.9}, {nil, 0}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRate(t *testing.T) {
	if r := rate(1000, 4096, time.Second); r.PerS != 1000 || r.GBps != 4.096e-3 || r.Bytes != 4096000 {
		t.Errorf("rate = %+v", r)
	}
	if ratio(1, 0) != 0 || ratio(3, 2) != 1.5 {
		t.Error("ratio")
	}
}
