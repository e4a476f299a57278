package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1 << 10: "1 KiB", 300 << 10: "300 KiB", 1<<20 + 1<<18: "1.25 MiB",
		3 << 29: "1.5 GiB", 64 << 30: "64 GiB", 1 << 40: "1 TiB", 1<<20 + 1: "1 MiB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
