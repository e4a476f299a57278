package xdma

// Registers is 32-bit access to an XDMA register space: the Engine model, or
// a driver's mapping of the real BAR.
type Registers interface {
	ReadReg(off uint32) uint32
	WriteReg(off, v uint32)
}

// ControlDefault enables logging of every status bit and leaves the engine
// in interrupt mode.
const ControlDefault = CtrlInterruptsAll

// Start programs channel ch of direction dir to run chain c: the first
// descriptor's address and adjacent count into the SGDMA registers, then
// control (which should include the status bits to log) with RUN. Status is
// read-cleared first so that what follows belongs to this chain.
func Start(r Registers, dir Direction, ch int, c Chain, control uint32) {
	sg := Base(dir.SGDMATarget(), ch)
	cb := Base(dir.ChannelTarget(), ch)
	r.ReadReg(cb + RegStatusRC)
	r.WriteReg(sg+RegDescLo, uint32(c.Addr))
	r.WriteReg(sg+RegDescHi, uint32(c.Addr>>32))
	r.WriteReg(sg+RegDescAdjacent, uint32(c.FirstAdjacent))
	r.WriteReg(cb+RegControl, control&^CtrlRun)
	r.WriteReg(cb+RegControl, control|CtrlRun)
}

// Halt clears RUN on a channel and returns its status, read-cleared.
func Halt(r Registers, dir Direction, ch int) uint32 {
	cb := Base(dir.ChannelTarget(), ch)
	r.WriteReg(cb+RegControlW1C, CtrlRun)
	return r.ReadReg(cb + RegStatusRC)
}
