//go:build linux

package resident

import (
	"errors"
	"testing"
)

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
