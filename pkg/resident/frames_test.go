//go:build linux

package resident

import (
	"errors"
	"testing"
)

// FrameOrder counts as frame.Checker does: frames missing between fills
// are gaps, frames at or behind the furthest seen are duplicates (at most
// the fill's own), a bad fill (no frames) changes nothing, so its frames
// turn up as a gap once the next good fill comes.
func TestFrameOrder(t *testing.T) {
	var o FrameOrder
	for _, f := range []struct{ first, n uint64 }{
		{100, 4}, // the first fill: no gap before it
		{104, 4},
		{0, 0},   // a bad fill: 108..111 missing
		{112, 4}, // 4 gaps
		{114, 4}, // 114, 115 again: 2 duplicates
		{100, 2}, // both behind: 2 duplicates
		{125, 1}, // 118..124 missing: 7 gaps
	} {
		o.Add(f.first, f.n)
	}
	want := FrameOrder{Frames: 19, Gaps: 11, Duplicates: 4}
	if o.Frames != want.Frames || o.Gaps != want.Gaps || o.Duplicates != want.Duplicates {
		t.Fatalf("got %+v, want %+v", o, want)
	}
}

// A frame size the checker cannot take is refused before anything is
// allocated or launched.
func TestFramesStartRefusesFrameSize(t *testing.T) {
	for _, tc := range []struct {
		slot, frame int
		want        string
	}{
		{4096, 4000 + 16, "resident: invalid configuration: 4096-byte slots of 4016-byte frames (a multiple of 16 over 32)"},
		{4096, 32, "resident: invalid configuration: 4096-byte slots of 32-byte frames (a multiple of 16 over 32)"},
		{4096, 1000, "resident: invalid configuration: 4096-byte slots of 1000-byte frames (a multiple of 16 over 32)"},
	} {
		_, err := (&Frames{}).Start(nil, StreamRing{NSlots: 8, SlotSize: tc.slot}, 0, tc.frame)
		if !errors.Is(err, ErrConfig) || err.Error() != tc.want {
			t.Errorf("%d-byte frames in %d-byte slots: %v, want %q", tc.frame, tc.slot, err, tc.want)
		}
	}
}
