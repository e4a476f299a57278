package gpucheck

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// raw is the CRC32C of b with no initial value and no final xor.
func raw(b []byte) uint32 { return ^crc32.Update(^uint32(0), castagnoli, b) }

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
		p := x8n(uint64(len(b)))
		want := raw(append(append([]byte{}, a...), b...))
		if got := multModP(p, raw(a)) ^ raw(b); got != want {
			t.Fatalf("|A|=%d |B|=%d: combined %#x, want %#x", len(a), len(b), got, want)
		}
		tab := mulTable(nil, p)
		c := raw(a)
		if got := tab[c&0xff] ^ tab[256+(c>>8&0xff)] ^ tab[512+(c>>16&0xff)] ^ tab[768+c>>24]; got != multModP(p, c) {
			t.Fatalf("table product %#x, want %#x", got, multModP(p, c))
		}
	}
	// A frame's standard CRC from the raw one, as the kernel computes it.
	msg := make([]byte, 28+4064)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	_, fix := combineTables(4096, 2)
	if got, want := raw(msg)^fix, crc32.Checksum(msg, castagnoli); got != want {
		t.Fatalf("standard CRC %#x, want %#x", got, want)
	}
}
