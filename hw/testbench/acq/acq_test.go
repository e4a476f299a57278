package acq

import (
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/frame"
)

func TestSourceOnDemandNeverDrops(t *testing.T) {
	s := NewSource(SourceConfig{PayloadLen: 100})
	var k Sink
	buf := make([]byte, 50)
	for range 1000 {
		n, eop, err := s.Read(buf)
		if err != nil || n == 0 {
			t.Fatalf("Read = %d, %v", n, err)
		}
		if err := k.Write(buf[:n], eop); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	fs, _ := k.Stats()
	if st.Dropped != 0 || fs.Gaps != 0 || fs.CRCFailures != 0 || fs.Frames != st.Delivered {
		t.Fatalf("source %+v, sink %+v", st, fs)
	}
}

func TestSourceDropsWhenFIFOFull(t *testing.T) {
	var now time.Duration
	s := NewSource(SourceConfig{PayloadLen: 32, Rate: 1000, FIFO: 4, Now: func() time.Duration { return now }})
	buf := make([]byte, frame.Size(32))
	if n, _, _ := s.Read(buf); n != 0 {
		t.Fatalf("frame before any was due")
	}
	now = 10 * time.Millisecond // 10 frames due, 4 fit
	var k Sink
	for {
		n, eop, _ := s.Read(buf)
		if n == 0 {
			break
		}
		_ = k.Write(buf[:n], eop)
	}
	st := s.Stats()
	want := SourceStats{Generated: 10, Delivered: 4, Dropped: 6, Bytes: 4 * uint64(len(buf))}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if st.Generated != st.Delivered+st.Dropped+st.Queued {
		t.Fatal("accounting does not balance")
	}
	// The dropped frames appear as a gap at the next delivery.
	now = 11 * time.Millisecond
	n, eop, _ := s.Read(buf)
	_ = k.Write(buf[:n], eop)
	fs, _ := k.Stats()
	if fs.Gaps != 6 || fs.Frames != 5 {
		t.Fatalf("sink %+v, want 6 gaps over 5 frames", fs)
	}
}
