//go:build linux

package hostring

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/frame"
)

func ring(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// Whether frames are streamed into the ring or copied from a FIFO, every
// slot holds Encoder's frames byte for byte, in sequence, and the CPU
// checker finds them whole.
func TestHostRingFrames(t *testing.T) {
	for _, tc := range []struct {
		frameSize int
		fifo      bool
	}{{64 << 10, false}, {64 << 10, true}, {4096, false}, {4112, false}} {
		t.Run(fmt.Sprintf("frame=%d/fifo=%v", tc.frameSize, tc.fifo), func(t *testing.T) {
			const slots = 4
			slotSize := 16 * tc.frameSize
			r, err := New(Config{Ring: ring(t, slots*slotSize), Slots: slots, SlotSize: slotSize,
				FrameSize: tc.frameSize, Workers: 3, FIFO: tc.fifo})
			if err != nil {
				t.Fatal(err)
			}
			wantStream := !tc.fifo && canStream() && (tc.frameSize-frame.HeaderSize)%32 == 0
			if r.stream != wantStream {
				t.Errorf("streaming %v, want %v", r.stream, wantStream)
			}
			enc := frame.NewEncoder(tc.frameSize - frame.HeaderSize)
			want := make([]byte, tc.frameSize)
			var chk frame.Checker
			got := 0
			for sl := range r.Slots() {
				b := r.cfg.Ring[sl.Index*slotSize:][:slotSize]
				for i := 0; i < slotSize; i += tc.frameSize {
					f := b[i : i+tc.frameSize]
					seq, ts := binary.LittleEndian.Uint64(f[8:]), binary.LittleEndian.Uint64(f[16:])
					if seq != uint64(got) {
						t.Fatalf("frame %d has sequence number %d", got, seq)
					}
					enc.Encode(want, seq, ts)
					if !bytes.Equal(f, want) {
						t.Fatalf("frame %d differs from Encoder's", seq)
					}
					if _, err := chk.Check(f); err != nil {
						t.Fatalf("frame %d: %v", seq, err)
					}
					got++
				}
				if err := r.Release(sl.Index); err != nil {
					t.Fatal(err)
				}
				if got >= 40*16 {
					r.Stop()
				}
			}
			if st := chk.Stats; st.Gaps+st.Duplicates+st.CRCFailures != 0 || uint64(got) != r.Generated() {
				t.Errorf("checked %+v, %d frames of %d generated", st, got, r.Generated())
			}
		})
	}
}

// The source alone, as the compat benchmark runs it (64 KiB frames,
// 16 MiB slots), streaming frames into the ring and through a FIFO: compare
// the two within one run.
func BenchmarkHostRing(b *testing.B) {
	const frameSize, slotSize, slots = 64 << 10, 16 << 20, 8
	host := ring(b, slots*slotSize)
	for _, fifo := range []bool{false, true} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("fifo=%v/workers=%d", fifo, workers), func(b *testing.B) {
				r, err := New(Config{Ring: host, Slots: slots, SlotSize: slotSize, FrameSize: frameSize,
					Workers: workers, FIFO: fifo})
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for sl := range r.Slots() {
					if err := r.Release(sl.Index); err != nil {
						b.Fatal(err)
					}
					if n++; n == b.N {
						r.Stop()
					}
				}
				// Slots in flight at Stop are delivered too: count them all.
				b.ReportMetric(float64(n)*slotSize/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
