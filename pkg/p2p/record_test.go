//go:build linux

package p2p

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A record laid out at the offsets of uapi/gpufpga.h, independent of the
// generated struct, decodes field by field, from any alignment.
func TestDecodeRecord(t *testing.T) {
	if completionSize != 112 {
		t.Fatalf("completion record of %d bytes, want 112", completionSize)
	}
	b := make([]byte, 1+completionSize)
	rec := b[1:] // misaligned on purpose
	ne := binary.NativeEndian
	ne.PutUint32(rec[0:], eventSlot)
	ne.PutUint32(rec[4:], slotEOP)
	ne.PutUint32(rec[8:], dirC2H)
	ne.PutUint32(rec[12:], 3)
	ne.PutUint64(rec[16:], 11)  // id
	ne.PutUint64(rec[24:], 22)  // user_data
	ne.PutUint64(rec[32:], 33)  // seq
	ne.PutUint32(rec[40:], 44)  // slot
	ne.PutUint32(rec[44:], 0x6) // status
	ne.PutUint64(rec[48:], 55)  // bytes
	errno := -int32(unix.EIO)
	ne.PutUint32(rec[56:], uint32(errno))
	ne.PutUint64(rec[64:], 66) // duration_ns
	ne.PutUint64(rec[72:], 77) // timestamp_ns
	r := decodeRecord(rec)
	c := r.c
	if r.kind != eventSlot || r.flags != slotEOP || r.slot != 44 || r.seq != 33 || r.time != 77 ||
		c.ID != 11 || c.UserData != 22 || c.Dir != C2H || c.Channel != 3 || c.Bytes != 55 || c.Status != 6 ||
		c.Duration != 66*time.Nanosecond {
		t.Fatalf("decoded %+v", r)
	}
	var e *Error
	if !errors.Is(c.Err, ErrHardware) || !errors.As(c.Err, &e) || e.Err != unix.EIO || !e.HasHW || e.Chan != 3 {
		t.Fatalf("error %v", c.Err)
	}
}

func TestPinErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		kind  uint32
		errno unix.Errno
		want  error
	}{
		{pinKindHost, unix.EOPNOTSUPP, ErrBounceBuffers},
		{pinKindGPU, unix.EOPNOTSUPP, ErrP2PUnavailable},
		{pinKindDmabuf, unix.EOPNOTSUPP, ErrP2PUnavailable},
		{pinKindDmabuf, unix.EXDEV, ErrIOMMUBypass},
	} {
		err := pinError(tc.kind, tc.errno, "")
		if !errors.Is(err, tc.want) || !errors.Is(err, tc.errno) {
			t.Errorf("kind %d, %v: %v, want %v", tc.kind, tc.errno, err, tc.want)
		}
	}
	// EXDEV means a bypassed IOMMU only for dma-bufs.
	if err := pinError(pinKindHost, unix.EXDEV, ""); errors.Is(err, ErrIOMMUBypass) {
		t.Errorf("host pin EXDEV: %v", err)
	}
}
