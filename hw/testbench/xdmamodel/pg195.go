package xdmamodel

import "github.com/gpufpga/gpufpga/pkg/xdma"

// Register fields the model decodes that pkg/xdma keeps to itself (PG195).
const (
	commonC2HBitShift    = 16
	vectorFieldMask      = 0x1F
	vectorsPerRegister   = 4
	vectorFieldBitStride = 8
	readErrorShift       = 9
	writeErrorShift      = 14
	descErrorShift       = 19
	errorFieldMask       = 0x1F
	statusBitsMask       = 0x00FFFFFF
	pollWBCountMask      = 0x00FFFFFF
	resultEOP            = 1 << 0
)

const controlWritableMask = statusBitsMask | xdma.CtrlNonIncAddr | xdma.CtrlPollModeWB | xdma.CtrlStreamWBDisable

// adjacentFits reports whether extra descriptors after the one at addr stay
// inside addr's 4 KiB block, where the engine fetches adjacent ones.
func adjacentFits(addr uint64, extra int) bool {
	return addr%xdma.AdjacentBlock+uint64(extra+1)*xdma.DescSize <= xdma.AdjacentBlock
}
