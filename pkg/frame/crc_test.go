package frame

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func raw(b []byte) uint32 { return RawCRC(b) }

// The combine arithmetic the kernel relies on, against hash/crc32:
// raw(A||B) = raw(A)*x^(8|B|) ^ raw(B), multiplying through the byte
// tables gives the same, and the initial-value constant turns a raw CRC
// into the standard one.
func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		a := make([]byte, r.IntN(3000))
		b := make([]byte, r.IntN(3000))
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		p := X8N(uint64(len(b)))
		want := raw(append(append([]byte{}, a...), b...))
		if got := MultModP(p, raw(a)) ^ raw(b); got != want {
			t.Fatalf("|A|=%d |B|=%d: combined %#x, want %#x", len(a), len(b), got, want)
		}
		tab := MulTable(nil, p)
		c := raw(a)
		if got := tab[c&0xff] ^ tab[256+(c>>8&0xff)] ^ tab[512+(c>>16&0xff)] ^ tab[768+c>>24]; got != MultModP(p, c) {
			t.Fatalf("table product %#x, want %#x", got, MultModP(p, c))
		}
	}
	// A frame's standard CRC from the raw one, as the kernel computes it.
	msg := make([]byte, 28+4064)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	if got, want := raw(msg)^InitFix(uint64(len(msg))), crc32.Checksum(msg, castagnoli); got != want {
		t.Fatalf("standard CRC %#x, want %#x", got, want)
	}
}

// Encoder's frames are Encode's, byte for byte, CRC included.
func TestEncoderMatchesEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 33, 4064, 65504, 100003} {
		e := NewEncoder(n)
		a := make([]byte, Size(n))
		b := make([]byte, Size(n))
		for range 20 {
			seq, ts := r.Uint64(), r.Uint64()
			Encode(a, seq, ts, n)
			e.Encode(b, seq, ts)
			if !bytes.Equal(a, b) {
				t.Fatalf("payload %d, frame %d: Encoder differs from Encode", n, seq)
			}
			if _, err := Parse(b); err != nil {
				t.Fatalf("payload %d: %v", n, err)
			}
		}
	}
}
