package devmodel

// Mirrors of hw/testbench/include/gpufpga_rig.h; TestLayoutMatchesHeader
// keeps the two in step.
const (
	mboxMagic   = 0x584f424d
	mboxVersion = 1
	mboxSize    = 0x10000

	mboxOffMagic   = 0x00
	mboxOffVersion = 0x04
	regMbox        = 0x0100
	ctlMbox        = 0x0200

	reqSeq    = 0x00
	reqOp     = 0x04
	reqArg0   = 0x08
	reqArg1   = 0x0c
	reqArg2   = 0x10
	rspSeq    = 0x40
	rspStatus = 0x44
	rspVal0   = 0x48
	rspVal1   = 0x4c

	vecReg = 0
	vecCtl = 1

	opRead32  = 1
	opWrite32 = 2

	ctlFault       = 1
	ctlLink        = 2
	ctlSource      = 3
	ctlSourceStats = 4
	ctlLateWrites  = 5
	ctlSinkStats   = 6

	srcGenerated = 0
	srcDelivered = 1
	srcDropped   = 2
	srcQueued    = 3
	srcBytes     = 4

	sinkFrames      = 0
	sinkGaps        = 1
	sinkDuplicates  = 2
	sinkCRCFailures = 3
	sinkPackets     = 4

	guestVectors = 8

	vramMagic      = 0x4d49535032505653
	vramVersion    = 1
	vramPage       = 0x10000
	vramOffMagic   = 0x00
	vramOffVersion = 0x08
	vramOffPages   = 0x0c
	vramOffBar     = 0x10
	vramOffLate    = 0x18
	vramOffState   = 0x100
)

// headerConstants names each mirror after its #define, for the layout test.
var headerConstants = map[string]uint64{
	"RIG_MBOX_MAGIC": mboxMagic, "RIG_MBOX_VERSION": mboxVersion, "RIG_MBOX_SIZE": mboxSize,
	"RIG_MBOX_OFF_MAGIC": mboxOffMagic, "RIG_MBOX_OFF_VERSION": mboxOffVersion,
	"RIG_REG_MBOX": regMbox, "RIG_CTL_MBOX": ctlMbox,
	"RIG_REQ_SEQ": reqSeq, "RIG_REQ_OP": reqOp, "RIG_REQ_ARG0": reqArg0, "RIG_REQ_ARG1": reqArg1, "RIG_REQ_ARG2": reqArg2,
	"RIG_RSP_SEQ": rspSeq, "RIG_RSP_STATUS": rspStatus, "RIG_RSP_VAL0": rspVal0, "RIG_RSP_VAL1": rspVal1,
	"RIG_VEC_REG": vecReg, "RIG_VEC_CTL": vecCtl,
	"RIG_OP_READ32": opRead32, "RIG_OP_WRITE32": opWrite32,
	"RIG_CTL_FAULT": ctlFault, "RIG_CTL_LINK": ctlLink, "RIG_CTL_SOURCE": ctlSource,
	"RIG_CTL_SOURCE_STATS": ctlSourceStats, "RIG_CTL_LATE_WRITES": ctlLateWrites, "RIG_CTL_SINK_STATS": ctlSinkStats,
	"RIG_SRC_GENERATED": srcGenerated, "RIG_SRC_DELIVERED": srcDelivered, "RIG_SRC_DROPPED": srcDropped,
	"RIG_SRC_QUEUED": srcQueued, "RIG_SRC_BYTES": srcBytes,
	"RIG_SINK_FRAMES": sinkFrames, "RIG_SINK_GAPS": sinkGaps, "RIG_SINK_DUPLICATES": sinkDuplicates,
	"RIG_SINK_CRC_FAILURES": sinkCRCFailures, "RIG_SINK_PACKETS": sinkPackets,
	"RIG_FAULT_NONE": 0, "RIG_FAULT_BAD_MAGIC": 1, "RIG_FAULT_DESC_READ": 2, "RIG_FAULT_DATA_READ": 3,
	"RIG_FAULT_DATA_WRITE": 4, "RIG_FAULT_STALL": 5,
	"RIG_GUEST_VECTORS": guestVectors,
	"RIG_VRAM_MAGIC": vramMagic, "RIG_VRAM_VERSION": vramVersion, "RIG_VRAM_PAGE": vramPage,
	"RIG_VRAM_OFF_MAGIC": vramOffMagic, "RIG_VRAM_OFF_VERSION": vramOffVersion, "RIG_VRAM_OFF_PAGES": vramOffPages,
	"RIG_VRAM_OFF_BAR": vramOffBar, "RIG_VRAM_OFF_LATE": vramOffLate, "RIG_VRAM_OFF_STATE": vramOffState,
}
