package trace

import (
	"encoding/binary"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var c Channel
	if c.Quantile(0.5) != 0 {
		t.Fatal("quantile of nothing")
	}
	c.Latency[10] = 50 // 1-2 µs
	c.Latency[20] = 49 // 1-2 ms
	c.Latency[30] = 1  // 1-2 s
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 2048}, {0.51, 2 << 20}, {0.99, 2 << 20}, {1, 2 << 30}} {
		if got := c.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	d := c.Sub(Channel{Latency: [64]uint64{10: 50}})
	if d.Latency[10] != 0 || d.Latency[20] != 49 {
		t.Fatalf("Sub: %v", d.Latency[:32])
	}
}

func TestDecodeEvent(t *testing.T) {
	var want gpufpgaEvent
	b := make([]byte, binarySize(want))
	le := binary.LittleEndian
	le.PutUint64(b[0:], 123)
	le.PutUint64(b[8:], 7)
	le.PutUint64(b[16:], 65536)
	le.PutUint32(b[24:], uint32(EventTransferFailed))
	le.PutUint32(b[28:], 0)
	le.PutUint32(b[32:], 1)
	le.PutUint32(b[36:], 1)
	le.PutUint32(b[40:], 0x10)
	le.PutUint32(b[44:], uint32(0xffffffff-5+1)) // -5 (EIO)
	copy(b[56:], "xfer")
	var got gpufpgaEvent
	decode(b, &got)
	if got.TsNs != 123 || got.HandleOrId != 7 || got.LenOrBytes != 65536 || EventType(got.Type) != EventTransferFailed ||
		got.KindOrDir != 1 || got.Chan != 1 || got.Status != 0x10 || got.Error != -5 || cString(got.Op[:]) != "xfer" {
		t.Fatalf("decoded %+v", got)
	}
	if len(b) != 72 {
		t.Fatalf("event is %d bytes, the BPF program's is 72", len(b))
	}
}
