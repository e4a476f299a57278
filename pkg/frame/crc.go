package frame

import "hash/crc32"

// CRC32C arithmetic: polynomials in the reflected bit order of the CRC,
// multiplied modulo the Castagnoli polynomial. A raw CRC (no initial value,
// no final xor) is linear in the message, and appending n zero bytes
// multiplies it by x^(8n); so CRCs of pieces combine, and a CRC can be
// multiplied by a constant through four byte tables. The GPU checker
// combines chunk CRCs this way, and Encoder computes frame CRCs without a
// pass over the payload.

const poly = 0x82F63B78 // CRC32C, reflected

// MultModP returns a*b modulo the CRC32C polynomial.
func MultModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
	return p
}

// X8N returns x^(8n) modulo the polynomial: multiplying a raw CRC by it
// appends n zero bytes.
func X8N(n uint64) uint32 {
	sq := uint32(1) << 30 // x^1
	for range 3 {
		sq = MultModP(sq, sq) // x^8
	}
	p := uint32(1) << 31 // x^0
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = MultModP(sq, p)
		}
		sq = MultModP(sq, sq)
	}
	return p
}

// MulTable appends to t the four 256-entry byte tables of multiplying by
// p: p*c = t[c&0xff] ^ t[256+(c>>8&0xff)] ^ t[512+(c>>16&0xff)] ^ t[768+c>>24].
func MulTable(t []uint32, p uint32) []uint32 {
	for j := range 4 {
		for v := range uint32(256) {
			t = append(t, MultModP(p, v<<(8*j)))
		}
	}
	return t
}

// RawCRC returns the CRC32C of b with no initial value and no final xor.
func RawCRC(b []byte) uint32 { return ^crc32.Update(^uint32(0), castagnoli, b) }

// InitFix is what the standard CRC's initial value and final xor add to
// the raw CRC of n bytes: crc32c(b) = RawCRC(b) ^ InitFix(len(b)).
func InitFix(n uint64) uint32 { return MultModP(X8N(n), 0xFFFFFFFF) ^ 0xFFFFFFFF }
