package gpucheck

// CRC32C arithmetic for combining CRCs: polynomials in the reflected bit
// order of the CRC, multiplied modulo the Castagnoli polynomial. The
// kernel combines chunk CRCs with "multiply by a constant power of x",
// which this file turns into byte tables once per frame size.

const poly = 0x82F63B78 // CRC32C, reflected

// multModP returns a*b modulo poly.
func multModP(a, b uint32) uint32 {
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

// x8n returns x^(8n) modulo poly: multiplying a raw CRC by it appends n
// zero bytes.
func x8n(n uint64) uint32 {
	sq := uint32(1) << 30 // x^1
	for range 3 {
		sq = multModP(sq, sq) // x^8
	}
	p := uint32(1) << 31 // x^0
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			p = multModP(sq, p)
		}
		sq = multModP(sq, sq)
	}
	return p
}

// mulTable appends to t the four 256-entry byte tables of multiplying by
// p: p*c = t[c&0xff] ^ t[256+(c>>8&0xff)] ^ t[512+(c>>16&0xff)] ^ t[768+c>>24].
func mulTable(t []uint32, p uint32) []uint32 {
	for j := range 4 {
		for v := range uint32(256) {
			t = append(t, multModP(p, v<<(8*j)))
		}
	}
	return t
}

// Multipliers in the kernel's table, in this order (struct layout in
// framecheck.cu: enum multiplier).
const (
	mulLevels  = 5 // chunk * 2^k bytes, k = 0..4: the shuffle tree
	mulWarp    = 5 // 32 chunks: warp to warp
	mulPayload = 6 // the payload: shifts the header's CRC
	multipliers
)

// combineTables returns the kernel's multiplier tables for frames of
// frameSize bytes checked by 2^groupLog2 threads each, and the constant
// the 0xFFFFFFFF initial value and the final xor add to a raw CRC.
func combineTables(frameSize int, groupLog2 uint) ([]uint32, uint32) {
	payload := uint64(frameSize - 32)
	group := uint64(1) << groupLog2
	chunk := (payload + group*16 - 1) / (group * 16) * 16
	t := make([]uint32, 0, multipliers*1024)
	for k := range mulLevels {
		t = mulTable(t, x8n(chunk<<k))
	}
	t = mulTable(t, x8n(chunk*32))
	t = mulTable(t, x8n(payload))
	initFix := multModP(x8n(28+payload), 0xFFFFFFFF) ^ 0xFFFFFFFF
	return t, initFix
}
