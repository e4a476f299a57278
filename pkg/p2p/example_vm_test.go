//go:build vmguest

package p2p_test

import (
	"fmt"
	"log"

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
	// Output: 32 slots, 2097152 bytes, 32 packets; the stream ended: <nil>
}
