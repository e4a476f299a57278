package frame

import (
	"errors"
	"testing"
)

func TestEncodeParse(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 4064} {
		b := make([]byte, Size(n))
		Encode(b, 42, 1000, n)
		h, err := Parse(b)
		if err != nil {
			t.Fatalf("payload %d: %v", n, err)
		}
		if h.Seq != 42 || h.Timestamp != 1000 || h.PayloadLen != uint32(n) {
			t.Fatalf("payload %d: header %+v", n, h)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good := make([]byte, Size(100))
	Encode(good, 1, 2, 100)
	tests := []struct {
		name string
		mod  func([]byte) []byte
		err  error
	}{
		{"short header", func(b []byte) []byte { return b[:10] }, ErrShort},
		{"short payload", func(b []byte) []byte { return b[:50] }, ErrShort},
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }, ErrMagic},
		{"version", func(b []byte) []byte { b[4] = 2; return b }, ErrVersion},
		{"payload bit flip", func(b []byte) []byte { b[60] ^= 0x80; return b }, ErrCRC},
		{"sequence changed", func(b []byte) []byte { b[8]++; return b }, ErrCRC},
	}
	for _, tc := range tests {
		b := append([]byte(nil), good...)
		if _, err := Parse(tc.mod(b)); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestPayloadDiffersBySequence(t *testing.T) {
	a, b := make([]byte, 64), make([]byte, 64)
	FillPayload(a, 1)
	FillPayload(b, 2)
	if string(a) == string(b) {
		t.Fatal("payloads of frames 1 and 2 are equal")
	}
}

func TestChecker(t *testing.T) {
	var c Checker
	f := func(seq uint64) []byte {
		b := make([]byte, Size(16))
		Encode(b, seq, 0, 16)
		return b
	}
	for _, s := range []uint64{5, 6, 9, 9, 3, 10} {
		if _, err := c.Check(f(s)); err != nil {
			t.Fatal(err)
		}
	}
	bad := f(11)
	bad[40] ^= 1
	if _, err := c.Check(bad); !errors.Is(err, ErrCRC) {
		t.Fatalf("corrupt frame: %v", err)
	}
	want := Stats{Frames: 4, Bytes: 4 * 48, Gaps: 2, Duplicates: 2, CRCFailures: 1}
	if c.Stats != want {
		t.Fatalf("stats %+v, want %+v", c.Stats, want)
	}
}

// The in-process source's cost per frame: Encode reads the payload back
// for its CRC, Encoder does not.
func BenchmarkEncode(b *testing.B) {
	const n = 64<<10 - HeaderSize
	dst := make([]byte, Size(n))
	b.Run("Encode", func(b *testing.B) {
		b.SetBytes(int64(len(dst)))
		for i := range b.N {
			Encode(dst, uint64(i), 0, n)
		}
	})
	b.Run("Encoder", func(b *testing.B) {
		e := NewEncoder(n)
		b.SetBytes(int64(len(dst)))
		for i := range b.N {
			e.Encode(dst, uint64(i), 0)
		}
	})
}

// Account counts frames verified elsewhere (the GPU's checkers) as Check
// counts parsed ones: frames missing between sequence numbers are gaps,
// frames at or behind the furthest seen are duplicates and not counted.
func TestAccount(t *testing.T) {
	var c Checker
	for _, f := range []struct{ first, n uint64 }{
		{100, 4}, // the first: no gap before it
		{104, 4},
		{112, 4}, // 108..111 missing: 4 gaps
		{114, 4}, // 114, 115 again: 2 duplicates
		{100, 2}, // both behind: 2 duplicates
		{125, 1}, // 118..124 missing: 7 gaps
	} {
		for i := range f.n {
			c.Account(f.first+i, 64)
		}
	}
	if want := (Stats{Frames: 15, Bytes: 15 * 64, Gaps: 11, Duplicates: 4}); c.Stats != want {
		t.Fatalf("got %+v, want %+v", c.Stats, want)
	}
}
