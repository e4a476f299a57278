// Package resident is the GPU-resident stream consumer and the harness
// that measures it: a persistent CUDA kernel (resident.cu, shipped as PTX)
// that follows kmod/gpufpga/uapi/gpufpga_resident.h, consuming a ring of
// slots with no CPU work per slot, beside the CPU-driven path (a host
// thread that sees each result, launches the slot's work, waits on its
// event and releases the slot) and the bare CPU <-> GPU round trips, all
// fed by an emulated producer that plays the engine: it writes a slot's
// data, then its result, and reads the consumer index to know which slots
// are free, as the engine does through credits. On a machine with two GPUs
// that are peers, a producer kernel on the second (peer.cu, PeerKernels)
// writes a ring in the first's memory (NewPeerRing) as an FPGA does.
package resident

import "unsafe"

// The protocol's constants (uapi/gpufpga_resident.h).
const (
	ResultMagic      = 0x52b4
	ResultMagicShift = 16
	ResultEOP        = 0x1
	// ResultReady is a filled slot's status word.
	ResultReady = ResultMagic<<ResultMagicShift | ResultEOP
)

// SlotResult is struct gpufpga_slot_result: PG195's C2H stream writeback
// record for one slot.
type SlotResult struct {
	Status   uint32 // ResultReady once filled, 0 once consumed
	Length   uint32 // bytes written into the slot
	Reserved [6]uint32
}

// Consumer is struct gpufpga_consumer: the consumer's progress, on a
// 64-byte line of its own.
type Consumer struct {
	Consumed uint64 // slots consumed since the stream started
	Reserved [7]uint64
}

// Sizes of the two records.
const (
	ResultSize   = int(unsafe.Sizeof(SlotResult{}))
	ConsumerSize = int(unsafe.Sizeof(Consumer{}))
)

// Ready reports whether a status word marks a filled slot.
func Ready(status uint32) bool { return status>>ResultMagicShift == ResultMagic }

// resultWord is the first 8 bytes of a result as one little-endian word:
// the status in the low half, the length in the high half. Producers store
// it in one piece, so that a consumer that sees the status sees the
// length.
func resultWord(length uint32) uint64 { return uint64(length)<<32 | ResultReady }
