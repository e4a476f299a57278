//go:build ignore

// Input to cgo -godefs: the Go mirror of kmod/gpufpga/uapi/gpufpga.h.
// Regenerate with `make godefs`; TestGeneratedTypesMatchHeader fails when
// the committed ztypes_linux.go drifts from the header.

package p2p

/*
#include "../../kmod/gpufpga/uapi/gpufpga.h"
*/
import "C"

const (
	abiVersion  = C.GPUFPGA_ABI_VERSION
	maxChannels = C.GPUFPGA_MAX_CHANNELS

	dirH2C = C.GPUFPGA_H2C
	dirC2H = C.GPUFPGA_C2H

	chanPresent = C.GPUFPGA_CHAN_PRESENT
	chanStream  = C.GPUFPGA_CHAN_STREAM

	pinKindGPU    = C.GPUFPGA_PIN_GPU
	pinKindHost   = C.GPUFPGA_PIN_HOST
	pinKindDmabuf = C.GPUFPGA_PIN_DMABUF

	pinFlagPersistent = C.GPUFPGA_PIN_PERSISTENT
	pinStateActive    = C.GPUFPGA_PIN_ACTIVE
	pinStateRevoked   = C.GPUFPGA_PIN_REVOKED

	devReady      = C.GPUFPGA_DEV_READY
	devRecovering = C.GPUFPGA_DEV_RECOVERING
	devOffline    = C.GPUFPGA_DEV_OFFLINE

	xferFlagAsync = C.GPUFPGA_XFER_ASYNC
	xferFlagPoll  = C.GPUFPGA_XFER_POLL

	eventXfer      = C.GPUFPGA_EVENT_XFER
	eventSlot      = C.GPUFPGA_EVENT_SLOT
	eventStreamEnd = C.GPUFPGA_EVENT_STREAM_END
	slotEOP        = C.GPUFPGA_SLOT_EOP

	streamFlagResident = C.GPUFPGA_STREAM_RESIDENT
	featureResident    = C.GPUFPGA_FEATURE_RESIDENT

	iocInfo   = C.GPUFPGA_IOC_INFO
	iocPin    = C.GPUFPGA_IOC_PIN
	iocUnpin  = C.GPUFPGA_IOC_UNPIN
	iocQuery  = C.GPUFPGA_IOC_QUERY
	iocXfer   = C.GPUFPGA_IOC_XFER
	iocCancel = C.GPUFPGA_IOC_CANCEL

	iocStreamStart   = C.GPUFPGA_IOC_STREAM_START
	iocStreamRelease = C.GPUFPGA_IOC_STREAM_RELEASE
	iocStreamStop    = C.GPUFPGA_IOC_STREAM_STOP

	userIRQs   = C.GPUFPGA_USER_IRQS
	iocUserIRQ = C.GPUFPGA_IOC_USER_IRQ
)

type (
	infoArg       C.struct_gpufpga_info
	pinArg        C.struct_gpufpga_pin
	unpinArg      C.struct_gpufpga_unpin
	queryArg      C.struct_gpufpga_query
	segArg        C.struct_gpufpga_seg
	xferArg       C.struct_gpufpga_xfer
	cancelArg     C.struct_gpufpga_cancel
	completionArg C.struct_gpufpga_completion
	streamArg     C.struct_gpufpga_stream
	releaseArg    C.struct_gpufpga_release
	streamStopArg C.struct_gpufpga_stream_stop
	userIRQArg    C.struct_gpufpga_user_irq
)
