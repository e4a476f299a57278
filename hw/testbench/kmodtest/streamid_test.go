//go:build vmguest

package kmodtest

import (
	"encoding/binary"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
)

// sizeStopID is STREAM_STOP's struct with the stream id; sizeStop is ABI
// 1's first, without it.
const sizeStopID = 16

// startID starts a stream through STREAM_START's read-write number and
// returns the id the driver wrote back.
func startID(t *testing.T, f *os.File, s rawStream) uint64 {
	t.Helper()
	b := s.bytes()
	if err := rawIoctl(f, ioc(iocRW, 6, sizeStream), b); err != nil {
		t.Fatalf("stream start: %v", err)
	}
	id := binary.LittleEndian.Uint64(b[24:])
	if id == 0 {
		t.Fatal("stream start wrote back id 0")
	}
	return id
}

func stopID(channel uint32, id uint64) []byte {
	b := make([]byte, sizeStopID)
	binary.LittleEndian.PutUint32(b[0:], channel)
	binary.LittleEndian.PutUint64(b[8:], id)
	return b
}

func releaseID(channel uint32, id uint64, slots []uint32) []byte {
	return rawRelease{channel: channel, nslots: uint32(len(slots)), slots: slots, stream: id}.bytes()
}

// rec is the part of a read() record these tests look at.
type rec struct {
	kind uint32
	id   uint64
	slot uint32
	err  int32
}

// nextRecord reads one record, waiting up to 20 s for it.
func nextRecord(t *testing.T, f *os.File) rec {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatal("no record within 20 s")
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if n == 1 {
			break
		}
	}
	b := make([]byte, sizeCompletion)
	if n, err := unix.Read(int(f.Fd()), b); err != nil || n != sizeCompletion {
		t.Fatalf("read: %d bytes, %v", n, err)
	}
	le := binary.LittleEndian
	return rec{kind: le.Uint32(b[0:]), id: le.Uint64(b[16:]), slot: le.Uint32(b[40:]), err: int32(le.Uint32(b[56:]))}
}

// untilSlot reads records until the first SLOT record, which it returns.
func untilSlot(t *testing.T, f *os.File) rec {
	t.Helper()
	for {
		r := nextRecord(t, f)
		switch r.kind {
		case 2:
			return r
		case 3:
			t.Fatalf("stream %d ended (%d) before filling a slot", r.id, r.err)
		}
	}
}

// untilEnd reads records until STREAM_END, which it returns.
func untilEnd(t *testing.T, f *os.File) rec {
	t.Helper()
	for {
		if r := nextRecord(t, f); r.kind == 3 {
			return r
		}
	}
}

// TestStreamIDsKeepStaleCallsOff: a release or stop meant for a stream that
// has ended reaches no stream started after it on the same channel by the
// same file; records carry their stream's id; a stream started with an id
// must be named by it; ABI 1's calls without ids still work on a stream
// they started.
func TestStreamIDsKeepStaleCallsOff(t *testing.T) {
	setup(t)
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: 1 << 16, fd: -1})
	slots := []uint64{h, 0, 4096, h, 4096, 4096, h, 8192, 4096, h, 12288, 4096}
	defer runtime.KeepAlive(slots)
	ring := rawStream{channel: 1, nslots: 4, slots: slots}
	zero := []uint32{0}
	defer runtime.KeepAlive(zero)

	// Stream A fills slot 0 and is stopped by its id.
	idA := startID(t, f, ring)
	if r := untilSlot(t, f); r.id != idA || r.slot != 0 {
		t.Fatalf("first record of stream %d: %+v", idA, r)
	}
	if err := rawIoctl(f, ioc(iocW, 8, sizeStopID), stopID(1, idA)); err != nil {
		t.Fatalf("stop by id: %v", err)
	}
	if r := untilEnd(t, f); r.id != idA || r.err != 0 {
		t.Fatalf("STREAM_END of stream %d: %+v", idA, r)
	}
	expectErrno(t, f, "release: an ended stream's id, no stream running", ioc(iocW, 7, sizeRelease), releaseID(1, idA, zero), unix.ENOENT)

	// Stream B on the same channel: A's slot 0 is B's slot 0 now.
	idB := startID(t, f, ring)
	if idB == idA {
		t.Fatalf("the second stream got the first one's id %d", idA)
	}
	if r := untilSlot(t, f); r.id != idB || r.slot != 0 {
		t.Fatalf("first record of stream %d: %+v", idB, r)
	}
	expectErrno(t, f, "release: the ended stream's id while another runs", ioc(iocW, 7, sizeRelease), releaseID(1, idA, zero), unix.ENOENT)
	expectErrno(t, f, "stop: the ended stream's id while another runs", ioc(iocW, 8, sizeStopID), stopID(1, idA), unix.ENOENT)
	expectErrno(t, f, "release: no id, stream started with one", ioc(iocW, 7, sizeRelease), releaseID(1, 0, zero), unix.EINVAL)
	expectErrno(t, f, "stop: ABI 1's struct, stream started with an id", ioc(iocW, 8, sizeStop), stop(1, 0), unix.EINVAL)
	flagged := stopID(1, idB)
	flagged[4] = 1
	expectErrno(t, f, "stop: flags set", ioc(iocW, 8, sizeStopID), flagged, unix.EINVAL)
	// Slot 0 is still B's, filled and held: none of the above released
	// it (or refused it as not filled).
	if err := rawIoctl(f, ioc(iocW, 7, sizeRelease), releaseID(1, idB, zero)); err != nil {
		t.Fatalf("release of stream %d's slot 0 by its id: %v", idB, err)
	}
	if err := rawIoctl(f, ioc(iocW, 8, sizeStopID), stopID(1, idB)); err != nil {
		t.Fatalf("stop by id: %v", err)
	}
	if r := untilEnd(t, f); r.id != idB || r.err != 0 {
		t.Fatalf("STREAM_END of stream %d: %+v", idB, r)
	}

	// ABI 1's STREAM_START (_IOW, nothing written back): its stream takes
	// release and stop without an id, and its records carry one.
	legacy := ring.bytes()
	if err := rawIoctl(f, ioc(iocW, 6, sizeStream), legacy); err != nil {
		t.Fatalf("ABI 1 stream start: %v", err)
	}
	if id := binary.LittleEndian.Uint64(legacy[24:]); id != 0 {
		t.Fatalf("ABI 1 stream start wrote back %d", id)
	}
	r := untilSlot(t, f)
	if r.id == 0 || r.id == idA || r.id == idB || r.slot != 0 {
		t.Fatalf("first record of the ABI 1 stream: %+v", r)
	}
	if err := rawIoctl(f, ioc(iocW, 7, sizeRelease), releaseID(1, 0, zero)); err != nil {
		t.Fatalf("release without id: %v", err)
	}
	expectErrno(t, f, "release: the ABI 1 stream under an ended stream's id", ioc(iocW, 7, sizeRelease), releaseID(1, idB, zero), unix.ENOENT)
	if err := rawIoctl(f, ioc(iocW, 8, sizeStop), stop(1, 0)); err != nil {
		t.Fatalf("ABI 1 stop: %v", err)
	}
	if end := untilEnd(t, f); end.id != r.id {
		t.Fatalf("STREAM_END %+v of stream %d", end, r.id)
	}
}

// TestStreamIDWriteFaultStartsNothing: a STREAM_START whose struct can be
// read but not written back fails with EFAULT and leaves the channel free.
func TestStreamIDWriteFaultStartsNothing(t *testing.T) {
	setup(t)
	g := openGPU(t)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: 1 << 16, fd: -1})
	slots := []uint64{h, 0, 4096, h, 4096, 4096}
	defer runtime.KeepAlive(slots)
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	copy(page, rawStream{channel: 1, nslots: 2, slots: slots}.bytes())
	if err := unix.Mprotect(page, unix.PROT_READ); err != nil {
		t.Fatal(err)
	}
	expectErrno(t, f, "stream: id not writable", ioc(iocRW, 6, sizeStream), page[:sizeStream], unix.EFAULT)
	id := startID(t, f, rawStream{channel: 1, nslots: 2, slots: slots})
	if err := rawIoctl(f, ioc(iocW, 8, sizeStopID), stopID(1, id)); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
