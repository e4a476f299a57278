//go:build linux && gpu

package main

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// acquire -resident's processing equals its launch-per-slot mode's: the
// same fills, written by a copy engine into a resident ring as the FPGA
// would, give framestats_func (linked into the GPU-resident consumer)
// the same records, frame for frame and in order, as framestats
// launched once per slot on the same bytes. The frames exercise the
// trigger both ways. The function checks the frames too: every one is
// counted, and the one fill with a flipped payload byte is bad, its
// frames missing.
func TestResidentMatchesLaunchPerSlot(t *testing.T) {
	gpu := openGPU(t)
	g := gpu.Device()
	const nslots, slotSize, frameSize, fills, threshold = 8, 256 << 10, 16 << 10, 48, 32760
	const perSlot, corrupt = slotSize / frameSize, 20
	fill := func(b []byte, k uint64) {
		for f := range uint64(perSlot) {
			frame.Encode(b[f*frameSize:(f+1)*frameSize], k*perSlot+f, k, frameSize-frame.HeaderSize)
		}
		if k == corrupt {
			b[3*frameSize+frame.HeaderSize+100] ^= 0x10
		}
	}
	ring, err := gpu.Alloc(nslots * slotSize)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Free()
	results, err := gpu.Alloc(nslots * 32)
	if err != nil {
		t.Fatal(err)
	}
	defer results.Free()
	word, release, err := gpu.ResidentWord()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	src, err := g.HostAlloc((nslots + 1) * slotSize)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.HostAlloc(8)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := g.NewNonBlockingStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ps.Sync(); ps.Close(); src.Free(); res.Free() }()
	binary.LittleEndian.PutUint64(res.Bytes(), uint64(slotSize)<<32|0x52b4<<16|1)

	var mu sync.Mutex
	var resident []Record
	var check FrameCount
	fn, err := ResidentFunc(slotSize, frameSize, threshold, &check, func(r Record) {
		mu.Lock()
		resident = append(resident, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := gpu.StartConsumer(stream.ResidentRing{Ring: ring, SlotSize: slotSize, Slots: nslots, Results: results,
		Consumer: word[:64], Check: stream.CheckNone, Func: fn})
	if err != nil {
		t.Fatal(err)
	}
	published := func() uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&word[0]))) }
	deadline := time.Now().Add(60 * time.Second)
	for k := uint64(0); k < fills; k++ {
		for k >= nslots && published() < k-nslots+1 {
			if time.Now().After(deadline) {
				cons.Stop()
				t.Fatalf("fill %d: %d published", k, published())
			}
		}
		off := (k % (nslots + 1)) * slotSize
		fill(src.Bytes()[off:off+slotSize], k)
		err := ps.CopyHtoD(ring.Addr()+(k%nslots)*slotSize, src, off, slotSize)
		if err == nil {
			err = ps.CopyHtoD(results.Addr()+(k%nslots)*32, res, 0, 8)
		}
		if err != nil {
			cons.Stop()
			t.Fatal(err)
		}
	}
	for published() < fills {
		if time.Now().After(deadline) {
			cons.Stop()
			t.Fatalf("%d of %d published", published(), fills)
		}
	}
	if err := cons.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := cons.Stats(); st.Consumed != fills || st.Bytes != fills*slotSize || st.Bad != 1 {
		t.Fatalf("consumer %+v, want one bad fill", st)
	}
	if o := check.Stats(); o.Frames != (fills-1)*perSlot || o.Gaps != perSlot || o.Duplicates != 0 {
		t.Fatalf("frames checked %+v, want %d, and the bad fill's %d missing", o, (fills-1)*perSlot, perSlot)
	}

	// The same fills, one launch per slot, once the consumer has
	// stopped (loading a module waits for every kernel on the GPU).
	p, err := NewPipeline(gpu, slotSize, KernelConfig{FrameSize: frameSize, Threshold: threshold, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slot, err := g.Alloc(slotSize)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Free()
	var launched []Record
	b := make([]byte, slotSize)
	for k := uint64(0); k < fills; k++ {
		fill(b, k)
		if err := g.CopyHtoD(slot.Ptr, b); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Submit(slot.Ptr, slotSize); err != nil {
			t.Fatal(err)
		}
		if err := p.Retire(0, func(r Record) { launched = append(launched, r) }); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(launched) != fills*perSlot || !slices.Equal(resident, launched) {
		t.Fatalf("%d records resident, %d launched per slot: they differ", len(resident), len(launched))
	}
	triggered := 0
	for _, r := range resident {
		if r.Triggered() {
			triggered++
		}
	}
	if triggered == 0 || triggered == len(resident) {
		t.Errorf("%d of %d frames triggered: the test's frames should exercise both outcomes", triggered, len(resident))
	}
	t.Logf("%d frames in %d fills: the resident records equal the launched ones; %d triggered", len(resident), fills, triggered)
}
