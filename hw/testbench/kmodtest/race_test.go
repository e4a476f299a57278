//go:build vmguest

package kmodtest

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestCancelRacesSubmit cancels the ids an asynchronous submission is
// about to get, from another thread, while submissions run: a request
// becomes cancellable only once its channel owns it, so no cancel may free
// one that the submitting ioctl still uses (the debug kernel's KASAN and
// refcount checks report it if one does).
func TestCancelRacesSubmit(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	var last atomic.Uint64
	stop := make(chan struct{})
	canceled := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				canceled <- n
				return
			default:
			}
			next := last.Load()
			for k := uint64(1); k <= 3; k++ {
				if d.Cancel(next+k) == nil {
					n++
				}
			}
		}
	}()
	done := 0
	for i := range 3000 {
		id, err := d.Submit(p2p.Transfer{Dir: p2p.H2C, Segments: []p2p.Segment{{Pin: p, Offset: uint64(i%16) << 12, Len: 4096}}}, uint64(i))
		if err != nil && !errors.Is(err, p2p.ErrLimit) {
			t.Fatalf("submit %d: %v", i, err)
		}
		if err == nil {
			last.Store(id)
		}
		for drained := false; !drained; {
			select {
			case c := <-d.Completions():
				if c.Err != nil && !errors.Is(c.Err, p2p.ErrCanceled) {
					t.Fatalf("transfer %d: %v", c.ID, c.Err)
				}
				done++
			default:
				drained = true
			}
		}
	}
	close(stop)
	t.Logf("%d completions read, %d cancels hit", done, <-canceled)
	if err := p.Unpin(); err != nil && !errors.Is(err, p2p.ErrBusy) {
		t.Fatal(err)
	}
}

// TestStreamRecordsBounded releases stream slots without ever reading
// their records: past max_queued unread records the stream ends with
// EOVERFLOW instead of queueing without bound.
func TestStreamRecordsBounded(t *testing.T) {
	setup(t)
	setParam(t, "max_queued", "8")
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4064, 0, 64); err != nil {
		t.Fatal(err)
	}
	a := alloc(t, g, 1<<20, simgpu.Contiguous)
	f, err := os.OpenFile(devPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := rawPinOK(t, f, rawPin{kind: kindGPU, addr: a.VA, len: 1 << 20, fd: -1})
	const nslots = 4
	slots := make([]uint64, 0, 3*nslots)
	for i := range nslots {
		slots = append(slots, h, uint64(i)*4096, 4096)
	}
	if err := rawIoctl(f, ioc(iocW, 6, sizeStream), rawStream{channel: 1, nslots: nslots, slots: slots}.bytes()); err != nil {
		t.Fatalf("stream start: %v", err)
	}
	runtime.KeepAlive(slots)
	deadline := time.Now().Add(30 * time.Second)
	released := 0
	for ended := false; !ended; {
		if time.Now().After(deadline) {
			t.Fatalf("stream still running after %d releases with nothing read", released)
		}
		for s := range uint32(nslots) {
			one := []uint32{s}
			err := rawIoctl(f, ioc(iocW, 7, sizeRelease), rawRelease{channel: 1, nslots: 1, slots: one}.bytes())
			runtime.KeepAlive(one)
			switch {
			case err == nil:
				released++
			case errors.Is(err, unix.ENOENT):
				ended = true
			case !errors.Is(err, unix.EINVAL): // EINVAL: not filled yet
				t.Fatalf("release: %v", err)
			}
		}
	}
	buf := make([]byte, sizeCompletion*64)
	if err := unix.SetNonblock(int(f.Fd()), true); err != nil {
		t.Fatal(err)
	}
	n, err := unix.Read(int(f.Fd()), buf)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	records, endErr := 0, int32(0)
	for off := 0; off+sizeCompletion <= n; off += sizeCompletion {
		switch le.Uint32(buf[off:]) { // kind
		case 2: // slot
			records++
		case 3: // stream end
			endErr = int32(le.Uint32(buf[off+56:])) // error
		}
	}
	if records > 8 || endErr != -int32(unix.EOVERFLOW) {
		t.Fatalf("%d slot records queued (max_queued 8), stream ended with %d; want at most 8 and -EOVERFLOW", records, endErr)
	}
	t.Logf("%d releases; %d records queued; stream ended with EOVERFLOW", released, records)
}
