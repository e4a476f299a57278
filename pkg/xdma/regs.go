// Package xdma describes the Xilinx DMA/Bridge Subsystem for PCI Express
// (XDMA, PG195) as data: its register map and bit fields, the 32-byte
// descriptor, chains of descriptors laid out in memory, and a model of the
// scatter-gather engine that executes them.
//
// The constants follow PG195. The descriptor builder writes into a
// caller-supplied buffer at a given bus address, so a chain built here can be
// compared byte for byte with one the kernel driver built. The engine model
// (Engine) answers register reads and writes and moves data through a bus
// memory interface; the testbench wraps it to stand in for the FPGA.
package xdma

import (
	"fmt"
	"strings"
)

// RegSpaceSize is the size of the DMA register BAR.
const RegSpaceSize = 64 << 10

// Targets: bits 15:12 of a register offset.
const (
	TargetH2C         = 0x0 // H2C channel registers
	TargetC2H         = 0x1 // C2H channel registers
	TargetIRQ         = 0x2 // interrupt block
	TargetConfig      = 0x3 // configuration block
	TargetH2CSGDMA    = 0x4 // H2C SGDMA (descriptor) registers
	TargetC2HSGDMA    = 0x5 // C2H SGDMA (descriptor) registers
	TargetSGDMACommon = 0x6 // SGDMA common registers
)

// MaxChannels is the number of channels per direction PG195 allows.
const MaxChannels = 4

// ChannelStride separates the register blocks of neighbouring channels.
const ChannelStride = 0x100

// Base returns the offset of the register block of target for channel ch.
func Base(target, ch int) uint32 { return uint32(target)<<12 | uint32(ch)*ChannelStride }

// Channel register offsets, relative to Base(TargetH2C or TargetC2H, ch).
const (
	RegIdentifier      = 0x00
	RegControl         = 0x04
	RegControlW1S      = 0x08
	RegControlW1C      = 0x0C
	RegStatus          = 0x40
	RegStatusRC        = 0x44 // read clears the status bits
	RegCompletedCount  = 0x48
	RegAlignments      = 0x4C
	RegPollWBLo        = 0x88
	RegPollWBHi        = 0x8C
	RegIntEnable       = 0x90
	RegIntEnableW1S    = 0x94
	RegIntEnableW1C    = 0x98 // PG195; some headers name 0x9C
	RegPerfControl     = 0xC0
	RegPerfCycleLo     = 0xC4
	RegPerfCycleHi     = 0xC8
	RegPerfDataLo      = 0xCC
	RegPerfDataHi      = 0xD0
	RegPerfStallCount  = 0xD4 // not modelled
	RegPerfIdleCount   = 0xD8 // not modelled
	RegPerfReservedEnd = 0xDC
)

// Performance monitor control (RegPerfControl) bits and the counters' form
// (PG195): 42-bit counts of cycles and of data beats, the high registers
// holding bits 41:32 and, at PerfMaxed, whether the count saturated.
const (
	PerfRun      = 1 << 0 // count from now
	PerfClear    = 1 << 1 // zero both counters
	PerfAuto     = 1 << 2 // count while the channel runs
	PerfCountMax = 1<<42 - 1
	PerfMaxed    = 1 << 16
)

// SGDMA register offsets, relative to Base(TargetH2CSGDMA or TargetC2HSGDMA, ch).
const (
	RegDescLo       = 0x80 // first descriptor bus address, low word
	RegDescHi       = 0x84
	RegDescAdjacent = 0x88 // extra descriptors adjacent to the first
	RegDescCredits  = 0x8C
	// MaxCredits is what the 10-bit credit counter holds.
	MaxCredits = 0x3FF
)

// SGDMA common register offsets, relative to Base(TargetSGDMACommon, 0).
const (
	RegDescHalt       = 0x10 // H2C channels bits 3:0, C2H bits 19:16
	RegDescHaltW1S    = 0x14
	RegDescHaltW1C    = 0x18
	RegCreditMode     = 0x20 // same bit layout as RegDescHalt
	RegCreditModeW1S  = 0x24
	RegCreditModeW1C  = 0x28
	commonC2HBitShift = 16
)

// Interrupt block register offsets, relative to Base(TargetIRQ, 0).
const (
	RegUserIntEnable     = 0x04
	RegUserIntEnableW1S  = 0x08
	RegUserIntEnableW1C  = 0x0C
	RegChanIntEnable     = 0x10
	RegChanIntEnableW1S  = 0x14
	RegChanIntEnableW1C  = 0x18
	RegUserIntRequest    = 0x40
	RegChanIntRequest    = 0x44
	RegUserIntPending    = 0x48
	RegChanIntPending    = 0x4C
	RegUserVector        = 0x80 // four registers, four vectors each
	RegChanVector        = 0xA0 // two registers, four vectors each
	vectorFieldMask      = 0x1F
	vectorsPerRegister   = 4
	vectorFieldBitStride = 8
)

// Configuration block register offsets, relative to Base(TargetConfig, 0).
const (
	RegConfigBusDev       = 0x04
	RegConfigMaxPayload   = 0x08
	RegConfigMaxReadReq   = 0x0C
	RegConfigSystemID     = 0x10
	RegConfigMSIEnable    = 0x14
	RegConfigDataWidth    = 0x18
	RegConfigWriteFlushTO = 0x60
)

// Control and status bits of a channel. In the control register bits 1-23
// enable the interrupt for the status bit of the same position.
const (
	CtrlRun              = 1 << 0 // control: run; status: busy
	StatDescStopped      = 1 << 1
	StatDescCompleted    = 1 << 2
	StatAlignMismatch    = 1 << 3
	StatMagicStopped     = 1 << 4
	StatInvalidLength    = 1 << 5
	StatIdleStopped      = 1 << 6
	CtrlNonIncAddr       = 1 << 25
	CtrlPollModeWB       = 1 << 26
	CtrlStreamWBDisable  = 1 << 27
	readErrorShift       = 9
	writeErrorShift      = 14
	descErrorShift       = 19
	errorFieldMask       = 0x1F
	StatReadErrorMask    = errorFieldMask << readErrorShift
	StatWriteErrorMask   = errorFieldMask << writeErrorShift
	StatDescErrorMask    = errorFieldMask << descErrorShift
	StatErrorMask        = StatAlignMismatch | StatMagicStopped | StatInvalidLength | StatReadErrorMask | StatWriteErrorMask | StatDescErrorMask
	statusBitsMask       = 0x00FFFFFF
	CtrlInterruptsAll    = statusBitsMask &^ CtrlRun
	controlWritableMask  = statusBitsMask | CtrlNonIncAddr | CtrlPollModeWB | CtrlStreamWBDisable
	pollWBCountMask      = 0x00FFFFFF
	pollWBErrorBit       = 1 << 31
	identifierSubsystem  = 0x1FC
	identifierStreamBit  = 1 << 15
	identifierTargetBits = 16
)

// Error codes in the read, write and descriptor error fields. PG195 names
// one bit per cause. On the PCIe side (the host's memory and the
// descriptors) all five are PCIe's; on the AXI side (card memory, an H2C
// channel's writes and a C2H channel's reads) the first two are AXI's
// responses, DECERR first.
const (
	ErrCodeUnsupportedRequest = 1 << 0
	ErrCodeCompleterAbort     = 1 << 1
	ErrCodeAXIDecode          = 1 << 0 // DECERR: nothing at the address
	ErrCodeAXISlave           = 1 << 1 // SLVERR: the slave refused the access
	ErrCodeParity             = 1 << 2
	ErrCodeHeaderEP           = 1 << 3
	ErrCodeUnexpectedComp     = 1 << 4
)

// ReadError returns the read error field of a status word.
func ReadError(status uint32) uint32 { return status >> readErrorShift & errorFieldMask }

// WriteError returns the write error field of a status word.
func WriteError(status uint32) uint32 { return status >> writeErrorShift & errorFieldMask }

// DescError returns the descriptor error field of a status word.
func DescError(status uint32) uint32 { return status >> descErrorShift & errorFieldMask }

// Direction of a channel.
type Direction int

// Directions. H2C moves host (bus) memory to the card, C2H the card to host.
const (
	H2C Direction = iota
	C2H
)

func (d Direction) String() string {
	switch d {
	case H2C:
		return "H2C"
	case C2H:
		return "C2H"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// ChannelTarget returns the channel register target of d.
func (d Direction) ChannelTarget() int {
	if d == C2H {
		return TargetC2H
	}
	return TargetH2C
}

// SGDMATarget returns the SGDMA register target of d.
func (d Direction) SGDMATarget() int {
	if d == C2H {
		return TargetC2HSGDMA
	}
	return TargetH2CSGDMA
}

// Alignments is a channel's ALIGNMENTS register (PG195): the byte alignment
// of every source and destination address, the granularity of lengths in
// bytes, and the address bits the engine drives. A build that needs no
// alignment reports 1 and 1.
type Alignments struct {
	Addr, Len, Bits uint8
}

// Encode returns the register's value.
func (a Alignments) Encode() uint32 {
	return uint32(a.Addr)<<16 | uint32(a.Len)<<8 | uint32(a.Bits)
}

// DecodeAlignments decodes the register.
func DecodeAlignments(v uint32) Alignments {
	return Alignments{Addr: uint8(v >> 16), Len: uint8(v >> 8), Bits: uint8(v)}
}

// Valid reports whether a is what a build can report: powers of two up to
// the 512-bit datapath's 64 bytes, and 32 to 64 address bits.
func (a Alignments) Valid() bool {
	pow2 := func(v uint8) bool { return v != 0 && v&(v-1) == 0 && v <= 64 }
	return pow2(a.Addr) && pow2(a.Len) && a.Bits >= 32 && a.Bits <= 64
}

// String gives a as address/length/bits, PG195's field order.
func (a Alignments) String() string { return fmt.Sprintf("%d/%d/%d", a.Addr, a.Len, a.Bits) }

// Identifier is a decoded identifier register.
type Identifier struct {
	Target  int
	Stream  bool // AXI4-Stream rather than memory mapped
	Channel int
	Version int
}

// Version codes of the identifier register.
var versionNames = map[int]string{
	1: "2015.3/2015.4", 2: "2016.1", 3: "2016.2", 4: "2016.3", 5: "2016.4", 6: "2017.1 or later",
}

// DecodeIdentifier decodes an identifier register value. It reports false
// when the value does not carry the XDMA subsystem code (an absent channel
// reads 0, a dead link 0xFFFFFFFF).
func DecodeIdentifier(v uint32) (Identifier, bool) {
	if v>>20 != identifierSubsystem {
		return Identifier{}, false
	}
	return Identifier{
		Target:  int(v >> identifierTargetBits & 0xF),
		Stream:  v&identifierStreamBit != 0,
		Channel: int(v >> 8 & 0xF),
		Version: int(v & 0xFF),
	}, true
}

// Encode returns the register value for id.
func (id Identifier) Encode() uint32 {
	v := uint32(identifierSubsystem)<<20 | uint32(id.Target&0xF)<<identifierTargetBits |
		uint32(id.Channel&0xF)<<8 | uint32(id.Version&0xFF)
	if id.Stream {
		v |= identifierStreamBit
	}
	return v
}

func (id Identifier) String() string {
	kind := "memory-mapped"
	if id.Stream {
		kind = "stream"
	}
	ver := versionNames[id.Version]
	if ver == "" {
		ver = fmt.Sprintf("version %d", id.Version)
	}
	return fmt.Sprintf("target %d channel %d, %s, IP %s", id.Target, id.Channel, kind, ver)
}

var statusNames = []struct {
	bit  uint32
	name string
}{
	{CtrlRun, "busy"},
	{StatDescStopped, "descriptor_stopped"},
	{StatDescCompleted, "descriptor_completed"},
	{StatAlignMismatch, "align_mismatch"},
	{StatMagicStopped, "magic_stopped"},
	{StatInvalidLength, "invalid_length"},
	{StatIdleStopped, "idle_stopped"},
}

// DecodeStatus renders a channel status word for people, for example
// "C2H channel 0: magic_stopped, descriptor error 0x2".
func DecodeStatus(dir Direction, ch int, status uint32) string {
	var parts []string
	for _, s := range statusNames {
		if status&s.bit != 0 {
			parts = append(parts, s.name)
		}
	}
	for _, f := range []struct {
		code uint32
		name string
	}{
		{ReadError(status), "read error"},
		{WriteError(status), "write error"},
		{DescError(status), "descriptor error"},
	} {
		if f.code != 0 {
			parts = append(parts, fmt.Sprintf("%s %#x", f.name, f.code))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "idle")
	}
	return fmt.Sprintf("%v channel %d: %s", dir, ch, strings.Join(parts, ", "))
}

// LinkDown reports whether a register read came back as all ones, which is
// what a PCIe read returns when the device is gone.
func LinkDown(v uint32) bool { return v == 0xFFFFFFFF }

// PollWriteback is the word the engine writes to the poll-mode writeback
// address.
type PollWriteback struct {
	Completed uint32 // completed descriptor count, 24 bits
	Error     bool
}

// DecodePollWriteback decodes a poll-mode writeback word.
func DecodePollWriteback(v uint32) PollWriteback {
	return PollWriteback{Completed: v & pollWBCountMask, Error: v&pollWBErrorBit != 0}
}

// Encode returns the word the engine writes for w.
func (w PollWriteback) Encode() uint32 {
	v := w.Completed & pollWBCountMask
	if w.Error {
		v |= pollWBErrorBit
	}
	return v
}
