package rtlbridge

import "errors"

// Errors a co-simulation reports; each comes wrapped with the details.
var (
	// ErrVerilator: verilator is missing or failed to build the design.
	ErrVerilator = errors.New("rtlbridge: verilator")
	// ErrPorts: the top level lacks a port the harness drives.
	ErrPorts = errors.New("rtlbridge: the top level lacks the XDMA IP's user-side ports")
	// ErrConnect: the RTL process did not connect before the deadline.
	ErrConnect = errors.New("rtlbridge: the RTL process did not connect")
	// ErrExited: the RTL process ended while the model needed it.
	ErrExited = errors.New("rtlbridge: the RTL process exited")
	// ErrWidth: the design's stream width is not the one the model is
	// configured for.
	ErrWidth = errors.New("rtlbridge: stream width mismatch")
	// ErrKeepHole: tkeep is not all ones in the middle of a packet, or
	// not contiguous from byte 0 on its last beat (the XDMA IP takes
	// neither).
	ErrKeepHole = errors.New("rtlbridge: tkeep hole")
	// ErrNoLast: a packet ran past Options.MaxPacket without tlast.
	ErrNoLast = errors.New("rtlbridge: no tlast")
	// ErrNoValid: the engine waited Options.StallCycles cycles for a beat
	// that never came.
	ErrNoValid = errors.New("rtlbridge: no tvalid")
	// ErrAXILite: an AXI-Lite transaction got an error response or none.
	ErrAXILite = errors.New("rtlbridge: AXI-Lite")
	// ErrTimeout: the RTL process stopped making progress.
	ErrTimeout = errors.New("rtlbridge: timed out waiting for the RTL process")
	// ErrOverrun: the H2C ring was written past the space Ready granted.
	ErrOverrun = errors.New("rtlbridge: H2C ring overrun")
)
