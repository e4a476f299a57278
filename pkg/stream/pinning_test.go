//go:build linux

package stream

import (
	"errors"
	"testing"
)

func TestParsePinning(t *testing.T) {
	for _, p := range []Pinning{PinAuto, PinDmabuf, PinP2P} {
		if got, err := ParsePinning(p.String()); err != nil || got != p {
			t.Errorf("ParsePinning(%q) = %v, %v", p, got, err)
		}
	}
	for in, want := range map[string]Pinning{"dmabuf": PinDmabuf, "p2p": PinP2P} {
		if got, err := ParsePinning(in); err != nil || got != want {
			t.Errorf("ParsePinning(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParsePinning("fast"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParsePinning(fast): %v, want ErrConfig", err)
	}
}
