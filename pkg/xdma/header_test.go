package xdma

import (
	"testing"

	"github.com/gpufpga/gpufpga/internal/cdefs"
)

// The driver's C view of PG195, kmod/gpufpga/xdma_regs.h, must say what this
// package says.
var cHeader = map[string]uint64{
	"XDMA_REG_SPACE": RegSpaceSize, "XDMA_TARGET_H2C": TargetH2C, "XDMA_TARGET_C2H": TargetC2H,
	"XDMA_TARGET_IRQ": TargetIRQ, "XDMA_TARGET_CONFIG": TargetConfig, "XDMA_TARGET_H2C_SGDMA": TargetH2CSGDMA,
	"XDMA_TARGET_C2H_SGDMA": TargetC2HSGDMA, "XDMA_TARGET_SGDMA_COMMON": TargetSGDMACommon,
	"XDMA_CHANNEL_STRIDE": ChannelStride, "XDMA_REG_IDENTIFIER": RegIdentifier, "XDMA_REG_CONTROL": RegControl,
	"XDMA_REG_CONTROL_W1S": RegControlW1S, "XDMA_REG_CONTROL_W1C": RegControlW1C, "XDMA_REG_STATUS": RegStatus,
	"XDMA_REG_STATUS_RC": RegStatusRC, "XDMA_REG_COMPLETED": RegCompletedCount, "XDMA_REG_ALIGNMENTS": RegAlignments,
	"XDMA_REG_INT_ENABLE": RegIntEnable, "XDMA_REG_POLL_WB_LO": RegPollWBLo, "XDMA_REG_POLL_WB_HI": RegPollWBHi,
	"XDMA_REG_DESC_LO": RegDescLo, "XDMA_REG_DESC_HI": RegDescHi,
	"XDMA_REG_DESC_ADJ": RegDescAdjacent, "XDMA_REG_DESC_CREDITS": RegDescCredits, "XDMA_REG_DESC_HALT": RegDescHalt,
	"XDMA_REG_DESC_HALT_W1S": RegDescHaltW1S, "XDMA_REG_DESC_HALT_W1C": RegDescHaltW1C,
	"XDMA_REG_CREDIT_MODE": RegCreditMode, "XDMA_REG_CREDIT_MODE_W1S": RegCreditModeW1S,
	"XDMA_REG_CREDIT_MODE_W1C": RegCreditModeW1C, "XDMA_MAX_CREDITS": MaxCredits, "XDMA_COMMON_C2H_SHIFT": commonC2HBitShift,
	"XDMA_REG_CHAN_INT_ENABLE": RegChanIntEnable, "XDMA_REG_CHAN_INT_ENABLE_W1S": RegChanIntEnableW1S,
	"XDMA_REG_CHAN_INT_ENABLE_W1C": RegChanIntEnableW1C, "XDMA_REG_CHAN_INT_REQUEST": RegChanIntRequest,
	"XDMA_REG_CHAN_INT_PENDING": RegChanIntPending, "XDMA_REG_CHAN_VECTOR": RegChanVector,
	"XDMA_REG_USER_INT_ENABLE": RegUserIntEnable, "XDMA_REG_USER_INT_ENABLE_W1S": RegUserIntEnableW1S,
	"XDMA_REG_USER_INT_ENABLE_W1C": RegUserIntEnableW1C, "XDMA_REG_USER_INT_REQUEST": RegUserIntRequest,
	"XDMA_REG_USER_VECTOR": RegUserVector,
	"XDMA_ID_SUBSYSTEM":    identifierSubsystem, "XDMA_DESC_SIZE": DescSize, "XDMA_DESC_MAGIC": DescMagic,
	"XDMA_DESC_MAX_ADJ": MaxNextAdjacent, "XDMA_DESC_BLOCK": AdjacentBlock, "XDMA_RESULT_SIZE": ResultSize,
	"XDMA_RESULT_MAGIC": ResultMagic,
}

func TestDriverHeaderAgrees(t *testing.T) {
	diffs, err := cdefs.Diff("../../kmod/gpufpga/xdma_regs.h", "XDMA_", cHeader)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Error(d)
	}
	// The BIT()/GENMASK() fields, by value.
	if uint32(StatReadErrorMask) != 0x3e00 || uint32(StatWriteErrorMask) != 0x7c000 || uint32(StatDescErrorMask) != 0xf80000 ||
		MaxDescLen != 1<<28-1 || MaxSegmentLen != 1<<28-1<<16 || CtrlInterruptsAll != 0xfffffe || CtrlPollModeWB != 1<<26 ||
		(PollWriteback{Completed: 0xFFFFFF, Error: true}).Encode() != 0x80FFFFFF {
		t.Error("bit fields differ from xdma_regs.h's GENMASK definitions")
	}
}
