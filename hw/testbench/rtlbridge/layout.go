package rtlbridge

import "encoding/binary"

// The shared-memory file's layout: keep in step with harness/harness.cpp.
// Each word one side writes sits on its own cache line; the rings start at
// offRings: the C2H beats, the H2C beats, then the AXI-Lite commands.
const (
	offMagic       = 0
	offC2HBits     = 8
	offH2CBits     = 16
	offMode        = 24
	offQuantum     = 32
	offC2HDepth    = 40
	offH2CDepth    = 48
	offCmdDepth    = 56
	offRTLState    = 64 // 1 once the harness has mapped the file and written its widths
	offRTLC2HBits  = 72
	offRTLH2CBits  = 80
	offRTLPid      = 88
	offCycle       = 128 // cycles run, published at the end of each quantum
	offGrant       = 192 // synchronised mode: the cycle the harness may run to
	offStop        = 256
	offC2HTail     = 320 // beats the design has sent
	offC2HHead     = 384 // beats the model has taken: the credits it grants
	offH2CTail     = 448 // beats the model has queued
	offH2CHead     = 512 // beats the design has taken
	offCmdTail     = 576 // AXI-Lite commands queued
	offCmdDone     = 640 // AXI-Lite commands answered
	offIRQReq      = 704 // usr_irq_req as of the last quantum
	offIRQAckSeq   = 768 // bumped for each acknowledgement pulse
	offIRQAckMask  = 776
	offResetSeq    = 832 // bumped for each reset of the user logic
	offResetAck    = 896 // the reset the harness has carried out
	offResetTail   = 904 // the C2H tail when it did: beats before it are stale
	offRings       = 4096
	magic          = 0x31304752424c5452 // "RTLBRG01"
	cmdSize        = 32                 // op, addr, wdata, wstrb, resp, rdata (u32 each), cycle (u64)
	cmdRead        = 1
	cmdWrite       = 2
	respNoResponse = 0x100
)

// entrySize is the bytes of a ring entry for a stream bits wide: the cycle,
// tkeep, tlast and a spare word, then tdata.
func entrySize(bits int) int { return 32 + (bits/8+7)&^7 }

var le = binary.LittleEndian
