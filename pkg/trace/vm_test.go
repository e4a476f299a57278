//go:build vmguest

package trace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

type rig struct{ *guestrig.Rig }

func setup(t *testing.T) rig {
	t.Helper()
	guest.Require(t)
	if _, err := Start(context.Background(), Options{Device: -1}); !errors.Is(err, ErrModuleNotLoaded) {
		t.Fatalf("Start without the module: %v, want ErrModuleNotLoaded", err)
	}
	return rig{guestrig.Open(t, "card_mem_size=67108864")}
}

func (r rig) pin(t *testing.T, size uint64) (*simgpu.Alloc, *p2p.Pin) {
	t.Helper()
	a, err := r.GPU.Alloc(size, simgpu.Fragmented, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Dev.PinGPU(a.VA, size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return a, p
}

// next waits for the next event of type typ, skipping others.
func next(t *testing.T, s *Session, typ EventType) Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-s.Events():
			if e.Type == typ {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event", typ)
		}
	}
}

func TestTracedCountsEqualTransfers(t *testing.T) {
	r := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, p := r.pin(t, 1<<20)
	if e := next(t, s, EventPin); e.Handle != p.Handle || e.Len != 1<<20 || e.Pages != 16 || e.Kind != uint32(p2p.KindGPU) {
		t.Fatalf("pin event %+v", e)
	}
	before, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[string][]uint64{"h2c0": {4096, 65536, 1 << 20}, "c2h0": {100, 200000}}
	for name, list := range sizes {
		dir := p2p.H2C
		if name == "c2h0" {
			dir = p2p.C2H
		}
		for _, n := range list {
			if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: dir, Segments: []p2p.Segment{{Pin: p, Len: n}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	after, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range after.Channels {
		d := c.Sub(before.Channels[i])
		var want, count uint64
		for _, n := range sizes[c.Name] {
			want += n
			count++
		}
		var hist uint64
		for _, n := range d.Latency {
			hist += n
		}
		if d.Bytes != want || d.Transfers != count || d.Submitted != count || d.Errors != 0 || hist != count {
			t.Errorf("%s: traced %+v, want %d bytes in %d transfers", c.Name, d, want, count)
		}
	}
	// A fault: a failed-transfer event with its status, and an error event.
	if err := r.Ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultBadMagic); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.C2H, Segments: []p2p.Segment{p.Whole()}}); !errors.Is(err, p2p.ErrHardware) {
		t.Fatalf("faulted transfer: %v", err)
	}
	got := map[EventType]Event{}
	for len(got) < 2 {
		select {
		case e := <-s.Events():
			if e.Type == EventTransferFailed || e.Type == EventError {
				got[e.Type] = e
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("events of the failed transfer: %+v", got)
		}
	}
	if e := got[EventTransferFailed]; e.Err != unix.EIO || e.Status&xdma.StatMagicStopped == 0 || e.Kind != 1 {
		t.Fatalf("failed-transfer event %+v", e)
	}
	if e := got[EventError]; e.Op != "xfer" || e.Err != unix.EIO || e.Status&xdma.StatMagicStopped == 0 {
		t.Fatalf("error event %+v", e)
	}
	// Revocation: freeing the memory under the pin.
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if e := next(t, s, EventRevoke); e.Handle != p.Handle {
		t.Fatalf("revoke event %+v", e)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	if e := next(t, s, EventUnpin); e.Handle != p.Handle {
		t.Fatalf("unpin event %+v", e)
	}
	final, _ := s.Snapshot()
	if final.Lost != 0 {
		t.Fatalf("%d events lost", final.Lost)
	}
}

// BenchmarkTracedTransfer measures 4 KiB transfers without and with
// tracing attached, for the overhead of the BPF programs.
func BenchmarkTracedTransfer(b *testing.B) {
	r := rig{guestrig.Open(b, "card_mem_size=67108864")}
	a, err := r.GPU.Alloc(64<<10, simgpu.Fragmented, 0)
	if err != nil {
		b.Fatal(err)
	}
	p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	run := func(b *testing.B) {
		for b.Loop() {
			if _, err := r.Dev.Transfer(ctx, p2p.Transfer{Dir: p2p.C2H, Segments: []p2p.Segment{{Pin: p, Len: 4096}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("untraced", run)
	b.Run("traced", func(b *testing.B) {
		s, err := Start(ctx, Options{Device: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b)
	})
}

// TestUnreadEventsCounted leaves Events unread while more events happen
// than it holds: the ones it had no room for are counted as lost, with
// the kernel's count, in Snapshot.
func TestUnreadEventsCounted(t *testing.T) {
	r := setup(t)
	s, err := Start(context.Background(), Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := r.GPU.Alloc(64<<10, simgpu.Fragmented, 0)
	if err != nil {
		t.Fatal(err)
	}
	const pins = eventBufferCapacity // two events each
	for range pins {
		p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	}
	// The reader may still be behind; it catches up without help.
	deadline := time.Now().Add(time.Minute)
	for {
		snap, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if snap.Lost >= 2*pins-eventBufferCapacity {
			if snap.Lost > 2*pins-eventBufferCapacity {
				t.Fatalf("%d events lost of %d, %d buffered", snap.Lost, 2*pins, eventBufferCapacity)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events lost of %d with %d buffered", snap.Lost, 2*pins, eventBufferCapacity)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(s.Events()); n != eventBufferCapacity {
		t.Fatalf("%d events buffered, want %d", n, eventBufferCapacity)
	}
}

// A stream shows up as a start event with its ring, one counted slot per
// fill with its bytes, and an end event with the number of fills.
func TestTracedStream(t *testing.T) {
	r := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const slot = 128 << 10 // two fragmented GPU pages: two descriptors
	if err := r.Ctl.ConfigureSource(slot-32, 0, 64); err != nil {
		t.Fatal(err)
	}
	_, p := r.pin(t, 8*slot)
	var segs []p2p.Segment
	for i := range 8 {
		segs = append(segs, p2p.Segment{Pin: p, Offset: uint64(i) * slot, Len: slot})
	}
	before, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Dev.StartStream(1, segs)
	if err != nil {
		t.Fatal(err)
	}
	var fills, bytes uint64
	for sl := range st.Slots() {
		fills++
		bytes += sl.Bytes
		st.Release(sl.Index)
		if fills == 40 {
			st.Stop()
		}
	}
	if st.Err() != nil {
		t.Fatal(st.Err())
	}
	if e := next(t, s, EventStreamStart); e.Channel != 1 || e.Slots != 8 || e.Pages != 16 || e.Len != 8*slot {
		t.Errorf("stream-start event %+v", e)
	}
	if e := next(t, s, EventStreamEnd); e.Channel != 1 || e.Slots != fills || e.Err != 0 {
		t.Errorf("stream-end event %+v after %d fills", e, fills)
	}
	after, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Channels[5].Sub(before.Channels[5]); d.Slots != fills || d.Bytes != bytes || d.Transfers != 0 {
		t.Errorf("c2h1 traced %+v, want %d slots of %d bytes", d, fills, bytes)
	}
}

// A GPU-resident stream has no event per slot: its fills reach the
// channel's statistics a batch at a time, from the engine's count, and
// add up to what its end reports.
func TestTracedResidentStream(t *testing.T) {
	r := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const slot, nslots = 4096, 16
	if err := r.Ctl.ConfigureSource(slot-32, 0, 64); err != nil {
		t.Fatal(err)
	}
	ring, p := r.pin(t, nslots*slot)
	res, rp := r.pin(t, 64<<10)
	ringMem, err := ring.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	resMem, err := res.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	clear(resMem)
	word, err := r.Dev.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer word.Free()
	wp, err := r.Dev.PinHost(word.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer wp.Unpin()
	cons, err := simgpu.NewConsumer(ringMem, slot, nslots, resMem, word.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	var consErr error
	consumerDone := make(chan struct{})
	go func() {
		consErr = cons.Run(cctx)
		close(consumerDone)
	}()
	// It reads the simulated GPU's memory: stopped before that goes.
	defer func() {
		stopConsumer()
		<-consumerDone
	}()
	var segs []p2p.Segment
	for i := range nslots {
		segs = append(segs, p2p.Segment{Pin: p, Offset: uint64(i) * slot, Len: slot})
	}
	before, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Dev.StartResidentStream(1, segs, p2p.Resident{
		Results: p2p.Segment{Pin: rp, Len: nslots * 32}, Consumer: p2p.Segment{Pin: wp, Len: 64}, Coalesce: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Until the consumer has taken n fills, or it or the test fails.
	waitFor := func(n uint64) {
		t.Helper()
		for cons.Stats().Consumed < n {
			select {
			case <-consumerDone:
				t.Fatalf("the consumer ended after %d fills: %v", cons.Stats().Consumed, consErr)
			case <-ctx.Done():
				t.Fatalf("%d of %d fills consumed: %v", cons.Stats().Consumed, n, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	waitFor(400)
	if err := st.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(st.Fills())
	stopConsumer()
	<-consumerDone
	if consErr != nil {
		t.Fatal(consErr)
	}
	if c := cons.Stats().Consumed; c != st.Fills() {
		t.Fatalf("the consumer took %d fills of %d", c, st.Fills())
	}
	if st.Err() != nil {
		t.Fatal(st.Err())
	}
	if e := next(t, s, EventStreamEnd); e.Channel != 1 || e.Slots != st.Fills() || e.Err != 0 {
		t.Errorf("stream-end event %+v after %d fills", e, st.Fills())
	}
	after, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Channels[5].Sub(before.Channels[5]); d.Slots != st.Fills() || d.Transfers != 0 {
		t.Errorf("c2h1 traced %+v, want %d slots", d, st.Fills())
	}
}

// TestTracedReset traces a function-level reset: the driver's
// reset_prepare and reset_done, the restart succeeding.
func TestTracedReset(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	link, err := os.Readlink("/sys/class/misc/gpufpga0/device")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/sys/bus/pci/devices", filepath.Base(link))
	if err := os.WriteFile(filepath.Join(dir, "reset_method"), []byte("flr"), 0); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(filepath.Join(dir, "reset_method"), []byte("default"), 0)
	if err := os.WriteFile(filepath.Join(dir, "reset"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"reset_prepare", "reset_done"} {
		if e := next(t, s, EventLifecycle); e.Op != op || e.Device != 0 || e.Err != 0 {
			t.Fatalf("lifecycle event %+v, want %s", e, op)
		}
	}
}
