package xdma

import (
	"encoding/hex"
	"errors"
	"math"
	"testing"
)

func TestDescriptorWireFormat(t *testing.T) {
	d := Descriptor{
		Magic: DescMagic, NextAdjacent: 5, Flags: FlagStop | FlagCompleted | FlagEOP,
		Len: 0x0ABCDEF1, Src: 0x1122334455667788, Dst: 0x99AABBCCDDEEFF00, Next: 0x0000000100002000,
	}
	var b [DescSize]byte
	d.Marshal(b[:])
	want := "1305" + "4bad" + "f1debc0a" + "8877665544332211" + "00ffeeddccbbaa99" + "0020000001000000"
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("wire bytes\n got %s\nwant %s", got, want)
	}
	var back Descriptor
	back.Unmarshal(b[:])
	if back != d {
		t.Fatalf("round trip: got %+v, want %+v", back, d)
	}
}

func TestDescriptorValidate(t *testing.T) {
	good := Descriptor{Magic: DescMagic, Len: 4096, Next: 0x1000, NextAdjacent: 3}
	tests := []struct {
		name string
		mod  func(*Descriptor)
		err  error
	}{
		{"good", func(*Descriptor) {}, nil},
		{"bad magic", func(d *Descriptor) { d.Magic = 0xAD4C }, ErrBadMagic},
		{"zero length", func(d *Descriptor) { d.Len = 0 }, ErrBadLength},
		{"misaligned next", func(d *Descriptor) { d.Next = 0x1010 }, ErrMisaligned},
		{"adjacent too large", func(d *Descriptor) { d.NextAdjacent = 64 }, ErrBadAdjacent},
		{"adjacent crosses 4K", func(d *Descriptor) { d.Next = 0x1FC0; d.NextAdjacent = 2 }, ErrBadAdjacent},
		{"adjacent fills 4K exactly", func(d *Descriptor) { d.Next = 0x1FC0; d.NextAdjacent = 1 }, nil},
		{"stop ignores next", func(d *Descriptor) { d.Flags = FlagStop; d.Next = 3 }, nil},
		{"source ends at 2^64", func(d *Descriptor) { d.Src = math.MaxUint64 - 4095 }, ErrWrap},
		{"source wraps", func(d *Descriptor) { d.Src = math.MaxUint64 }, ErrWrap},
		{"destination ends at 2^64", func(d *Descriptor) { d.Dst = math.MaxUint64 - 4095 }, ErrWrap},
		{"destination wraps", func(d *Descriptor) { d.Dst = math.MaxUint64 - 100 }, ErrWrap},
		{"both end just below 2^64", func(d *Descriptor) { d.Src, d.Dst = math.MaxUint64-4096, math.MaxUint64-4096 }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := good
			tc.mod(&d)
			if err := d.Validate(); !errors.Is(err, tc.err) {
				t.Fatalf("Validate = %v, want %v", err, tc.err)
			}
		})
	}
}

func TestDecodeStatus(t *testing.T) {
	tests := []struct {
		dir    Direction
		ch     int
		status uint32
		want   string
	}{
		{C2H, 0, StatMagicStopped | 0x2<<descErrorShift, "C2H channel 0: magic_stopped, descriptor error 0x2"},
		{H2C, 3, CtrlRun, "H2C channel 3: busy"},
		{H2C, 1, 0, "H2C channel 1: idle"},
		{C2H, 2, StatDescStopped | StatDescCompleted | 0x1<<readErrorShift | 0x10<<writeErrorShift,
			"C2H channel 2: descriptor_stopped, descriptor_completed, read error 0x1, write error 0x10"},
	}
	for _, tc := range tests {
		if got := DecodeStatus(tc.dir, tc.ch, tc.status); got != tc.want {
			t.Errorf("DecodeStatus(%#x) = %q, want %q", tc.status, got, tc.want)
		}
	}
}

func TestIdentifier(t *testing.T) {
	id, ok := DecodeIdentifier(0x1FC18006)
	want := Identifier{Target: TargetC2H, Stream: true, Channel: 0, Version: 6}
	if !ok || id != want {
		t.Fatalf("DecodeIdentifier = %+v, %v; want %+v", id, ok, want)
	}
	if id.Encode() != 0x1FC18006 {
		t.Fatalf("Encode = %#x", id.Encode())
	}
	for _, v := range []uint32{0, 0xFFFFFFFF, 0x1FB00000} {
		if _, ok := DecodeIdentifier(v); ok {
			t.Errorf("DecodeIdentifier(%#x) accepted", v)
		}
	}
	if got := id.String(); got != "target 1 channel 0, stream, IP 2017.1 or later" {
		t.Errorf("String = %q", got)
	}
}
