// Package riglayout holds the layouts the rig's host and guest share: the
// mirror of hw/testbench/nvp2p_sim/rig_layout.h. A test keeps the two equal.
package riglayout

// The simulated FPGA's PCI IDs: the xdma-model device's defaults, those of
// a Gen3 x8 XDMA reference design.
const (
	FPGAVendor = 0x10ee
	FPGADevice = 0x9038
)

const (
	CtlMagic    = 0x4c525443
	MboxVersion = 1
	MboxSize    = 0x10000

	MboxOffMagic   = 0x00
	MboxOffVersion = 0x04
	CtlMbox        = 0x0100
	DoorbellReg    = 0x0c
	HostPeer       = 0

	ReqSeq    = 0x00
	ReqOp     = 0x04
	ReqArg0   = 0x08
	ReqArg1   = 0x0c
	ReqArg2   = 0x10
	RspSeq    = 0x40
	RspStatus = 0x44
	RspVal0   = 0x48
	RspVal1   = 0x4c

	VecMbox = 0

	CtlFault       = 1
	CtlLink        = 2
	CtlSource      = 3
	CtlSourceStats = 4
	CtlLateWrites  = 5
	CtlSinkStats   = 6
	CtlSourceSnap  = 7
	CtlIOMMUFaults = 8
	CtlQuirks      = 9
	CtlAlign       = 10
	CtlViolations  = 11
	CtlAER         = 12
	// CtlUnmapped reads how many DMA accesses reached VRAM pages that no
	// peer had mapped: memory the driver had let go.
	CtlUnmapped = 13
	// CtlFailReset (arg0 1) makes the function's BARs unanswered (all
	// ones) from now on, and every reset leave them so: a recovery by
	// reset fails. With arg0 0, the next reset brings the function back.
	CtlFailReset = 14
	// CtlStalled (arg0 direction, arg1 channel) reads 1 while the
	// channel runs a chain that an injected stall or wedge holds.
	CtlStalled = 15
	// CtlUserIRQ (arg0 the lines) sets usr_irq_req as user logic would,
	// on a rig whose user logic is the Go model's, and reads the
	// usr_irq_ack pulses owed since the last call.
	CtlUserIRQ = 16
	// CtlUserClock reads how the user design's clock is tied to the
	// guest's: val0 the guest's virtual nanoseconds per cycle and val1
	// the cycles per quantum, or 0 and 0 where it runs on the host's
	// time.
	CtlUserClock = 17

	// The classes of PCIe error CtlAER injects.
	AERCorrectable = 0
	AERNonFatal    = 1
	AERFatal       = 2

	SrcGenerated = 0
	SrcDelivered = 1
	SrcDropped   = 2
	SrcQueued    = 3
	SrcBytes     = 4

	SinkFrames      = 0
	SinkGaps        = 1
	SinkDuplicates  = 2
	SinkCRCFailures = 3
	SinkPackets     = 4

	VramMagic      = 0x4d49535032505653
	VramVersion    = 1
	VramPage       = 0x10000
	VramOffMagic   = 0x00
	VramOffVersion = 0x08
	VramOffPages   = 0x0c
	VramOffBar     = 0x10
	VramOffLate    = 0x18
	VramOffState   = 0x100
	VramOffPeers   = 0x8000
	// VramPeersReleased in a page's peers byte: peers had mapped it, and
	// the last one has let it go.
	VramPeersReleased = 0x80
)

// HeaderConstants names each mirror after its #define, for the layout test.
var HeaderConstants = map[string]uint64{
	"RIG_CTL_MAGIC": CtlMagic, "RIG_MBOX_VERSION": MboxVersion, "RIG_MBOX_SIZE": MboxSize,
	"RIG_MBOX_OFF_MAGIC": MboxOffMagic, "RIG_MBOX_OFF_VERSION": MboxOffVersion,
	"RIG_CTL_MBOX": CtlMbox,
	"RIG_DOORBELL": DoorbellReg, "RIG_HOST_PEER": HostPeer,
	"RIG_REQ_SEQ": ReqSeq, "RIG_REQ_OP": ReqOp, "RIG_REQ_ARG0": ReqArg0, "RIG_REQ_ARG1": ReqArg1, "RIG_REQ_ARG2": ReqArg2,
	"RIG_RSP_SEQ": RspSeq, "RIG_RSP_STATUS": RspStatus, "RIG_RSP_VAL0": RspVal0, "RIG_RSP_VAL1": RspVal1,
	"RIG_VEC_MBOX":  VecMbox,
	"RIG_CTL_FAULT": CtlFault, "RIG_CTL_LINK": CtlLink, "RIG_CTL_SOURCE": CtlSource,
	"RIG_CTL_SOURCE_STATS": CtlSourceStats, "RIG_CTL_LATE_WRITES": CtlLateWrites, "RIG_CTL_SINK_STATS": CtlSinkStats, "RIG_CTL_SOURCE_SNAPSHOT": CtlSourceSnap, "RIG_CTL_IOMMU_FAULTS": CtlIOMMUFaults, "RIG_CTL_UNMAPPED": CtlUnmapped,
	"RIG_SRC_GENERATED": SrcGenerated, "RIG_SRC_DELIVERED": SrcDelivered, "RIG_SRC_DROPPED": SrcDropped,
	"RIG_SRC_QUEUED": SrcQueued, "RIG_SRC_BYTES": SrcBytes,
	"RIG_SINK_FRAMES": SinkFrames, "RIG_SINK_GAPS": SinkGaps, "RIG_SINK_DUPLICATES": SinkDuplicates,
	"RIG_SINK_CRC_FAILURES": SinkCRCFailures, "RIG_SINK_PACKETS": SinkPackets,
	"RIG_FAULT_NONE": 0, "RIG_FAULT_BAD_MAGIC": 1, "RIG_FAULT_DESC_READ": 2, "RIG_FAULT_DATA_READ": 3,
	"RIG_FAULT_DATA_WRITE": 4, "RIG_FAULT_STALL": 5,
	"RIG_VRAM_MAGIC": VramMagic, "RIG_VRAM_VERSION": VramVersion, "RIG_VRAM_PAGE": VramPage,
	"RIG_VRAM_OFF_MAGIC": VramOffMagic, "RIG_VRAM_OFF_VERSION": VramOffVersion, "RIG_VRAM_OFF_PAGES": VramOffPages,
	"RIG_VRAM_OFF_BAR": VramOffBar, "RIG_VRAM_OFF_LATE": VramOffLate, "RIG_VRAM_OFF_STATE": VramOffState, "RIG_VRAM_OFF_PEERS": VramOffPeers, "RIG_VRAM_PEERS_RELEASED": VramPeersReleased,
}
