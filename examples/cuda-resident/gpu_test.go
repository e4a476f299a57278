//go:build linux && gpu

package cudaresident

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/pkg/cuda"
)

// consume, from the committed PTX, on a ring that a copy engine fills as
// the FPGA would (fill k's words k * 0x100000001 + i, then its result):
// 8 worker blocks of 8 warps each take every eighth fill, the publisher
// publishes them in order, and the counts come back exact: every fill
// once, the two bad fills found (one word wrong at the start of one, at
// the end of the other), the consumer word at the fills made.
func TestHeaderConsumer(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := cuda.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const nslots, size, workers, fills, bad1, bad2 = 16, 64 << 10, 8, 3000, 1234, 2345
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mod, err := g.LoadPTX(PTX)
	must(err)
	defer mod.Close()
	fn, err := mod.Function("consume")
	must(err)
	slots, err := g.Alloc(nslots * size)
	must(err)
	defer slots.Free()
	results, err := g.Alloc(nslots * 32)
	must(err)
	defer results.Free()
	done, err := g.Alloc((nslots + 1) * 8) // done[nslots], then published
	must(err)
	defer done.Free()
	must(g.CopyHtoD(results.Ptr, make([]byte, nslots*32)))
	must(g.CopyHtoD(done.Ptr, make([]byte, (nslots+1)*8)))
	host, err := g.HostAllocMapped(64 + 64 + (workers+1)*64) // consumer word, stop, counters
	must(err)
	defer host.Free()
	ks, err := g.NewNonBlockingStream()
	must(err)
	defer ks.Close()
	ps, err := g.NewNonBlockingStream()
	must(err)
	defer ps.Close()
	src, err := g.HostAlloc((nslots + 1) * size)
	must(err)
	defer src.Free()
	res, err := g.HostAlloc(8)
	must(err)
	defer res.Free()
	binary.LittleEndian.PutUint64(res.Bytes(), uint64(size)<<32|0x52b4<<16|1)

	word, stop := (*uint64)(host.Ptr(0)), (*uint32)(host.Ptr(64))
	must(fn.Launch(ks, workers+1, Threads, 0, slots.Ptr, size, results.Ptr, nslots, host.DevPtr,
		done.Ptr, done.Ptr+nslots*8, host.DevPtr+64, host.DevPtr+128))
	stopKernel := func() {
		atomic.StoreUint32(stop, 1)
		ch := make(chan error, 1)
		go func() { ch <- ks.Sync() }()
		select {
		case err := <-ch:
			must(err)
		case <-time.After(10 * time.Second):
			t.Fatal("the kernel did not stop in 10 s")
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for k := uint64(0); k < fills; k++ {
		for k >= nslots && atomic.LoadUint64(word) < k-nslots+1 {
			if time.Now().After(deadline) {
				stopKernel()
				t.Fatalf("fill %d: %d published", k, atomic.LoadUint64(word))
			}
		}
		off := (k % (nslots + 1)) * size
		b := src.Bytes()[off : off+size]
		for i := range uint64(size / 8) {
			binary.LittleEndian.PutUint64(b[8*i:], k*0x100000001+i)
		}
		switch k {
		case bad1:
			b[0] ^= 1
		case bad2:
			b[size-1] ^= 0x80
		}
		must(ps.CopyHtoD(slots.Ptr+(k%nslots)*size, src, off, size))
		must(ps.CopyHtoD(results.Ptr+(k%nslots)*32, res, 0, 8))
	}
	must(ps.Sync())
	for atomic.LoadUint64(word) < fills {
		if time.Now().After(deadline) {
			stopKernel()
			t.Fatalf("%d of %d published", atomic.LoadUint64(word), fills)
		}
	}
	stopKernel()
	c := host.Bytes()[128:]
	var got [3]uint64
	for b := 1; b <= workers; b++ {
		for i := range got {
			got[i] += binary.LittleEndian.Uint64(c[b*64+8*i:])
		}
	}
	if pub := binary.LittleEndian.Uint64(c); pub != fills || got != [3]uint64{fills, fills * size, 2} {
		t.Fatalf("published %d, workers counted %v fills/bytes/errors, want %d, %d, 2", pub, got, fills, fills*size)
	}
}
