//go:build linux

package p2p_test

import (
	"fmt"
	"log"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// A stream into a ring of host memory: each filled slot is processed and
// handed back, and Stop ends the stream after 32 slots. GPU memory works
// the same way, pinned with PinDmabuf or PinGPU.
func ExampleDevice_StartStream() {
	d, err := p2p.Open("/dev/gpufpga0")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	const slots, slotSize = 8, 64 << 10
	ring, err := d.AllocHost(slots * slotSize)
	if err != nil {
		log.Fatal(err)
	}
	defer ring.Free()
	pin, err := d.PinHost(ring.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	defer pin.Unpin()
	var segs []p2p.Segment
	for i := range slots {
		segs = append(segs, p2p.Segment{Pin: pin, Offset: uint64(i) * slotSize, Len: slotSize})
	}

	s, err := d.StartStream(1, segs) // channel c2h1
	if err != nil {
		log.Fatal(err)
	}
	var n, bytes, packets int
	for sl := range s.Slots() {
		data := ring.Bytes()[sl.Index*slotSize:][:sl.Bytes]
		if n < 32 { // what was filled before the halt arrives too
			n, bytes = n+1, bytes+len(data)
			if sl.EOP {
				packets++
			}
		}
		if err := s.Release(sl.Index); err != nil {
			log.Fatal(err)
		}
		if n == 32 {
			s.Stop() // slots filled before the halt still arrive, then Slots closes
		}
	}
	fmt.Printf("%d slots, %d bytes, %d packets; the stream ended: %v\n", n, bytes, packets, s.Err())
}

// A GPU-resident stream, with a goroutine in the GPU's place on a ring of
// host memory: it takes each fill from its result and hands the slot back
// by publishing its count, and no system call or record goes by per slot.
// On a GPU the ring and the results are GPU memory and the consumer is a
// persistent kernel (package resident, or the user's own) following
// uapi/gpufpga_resident.h.
func ExampleDevice_StartResidentStream() {
	d, err := p2p.Open("/dev/gpufpga0")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	// One page-aligned buffer: 8 one-page slots, then the results (32
	// bytes a slot) and the consumer's 64-byte word.
	const slots, slotSize, results, word = 8, 4096, 8 * 4096, 8*4096 + 2048
	mem, err := d.AllocHost(slots*slotSize + 4096)
	if err != nil {
		log.Fatal(err)
	}
	defer mem.Free()
	pin, err := d.PinHost(mem.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	defer pin.Unpin()
	var segs []p2p.Segment
	for i := range slots {
		segs = append(segs, p2p.Segment{Pin: pin, Offset: uint64(i) * slotSize, Len: slotSize})
	}
	s, err := d.StartResidentStream(1, segs, p2p.Resident{
		Results:  p2p.Segment{Pin: pin, Offset: results, Len: slots * 32},
		Consumer: p2p.Segment{Pin: pin, Offset: word, Len: 64},
		Coalesce: 2, // an engine interrupt every 2 fills
	})
	if err != nil {
		log.Fatal(err)
	}

	// The consumer, as gpufpga_resident.h has it. A GPU's polls results in
	// its own memory; this one also stops if the stream ends under it.
	const resultMagic, resultSize = 0x52b4, 32
	buf := mem.Bytes()
	consumed := (*uint64)(unsafe.Pointer(&buf[word]))
	var bytes uint64
	for k := uint64(0); k < 64 && s.Err() == nil; k++ {
		result := (*uint64)(unsafe.Pointer(&buf[results+k%slots*resultSize]))
		w := atomic.LoadUint64(result) // status and length, in one load
		for uint32(w)>>16 != resultMagic && s.Err() == nil {
			time.Sleep(10 * time.Microsecond)
			w = atomic.LoadUint64(result)
		}
		bytes += w >> 32                                         // the slot's data is there: use it
		atomic.StoreUint32((*uint32)(unsafe.Pointer(result)), 0) // its next fill is told apart
		atomic.StoreUint64(consumed, k+1)                        // the slot goes back to the engine
	}
	if err := s.Stop(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("consumed 64 fills, %d bytes; the stream ended: %v\n", bytes, s.Err())
}
