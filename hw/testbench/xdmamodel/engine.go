package xdmamodel

import (
	"github.com/gpufpga/gpufpga/pkg/xdma"

	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// Source feeds a C2H stream channel, like the AXI4-Stream master on the
// card. Read fills p with the next bytes of the current packet and reports
// whether the packet ended with the last byte returned; it never returns
// bytes of two packets at once. n == 0 with a nil error means no data yet.
type Source interface {
	Read(p []byte) (n int, eop bool, err error)
}

// Sink receives an H2C stream channel's data, like the AXI4-Stream slave on
// the card.
type Sink interface {
	Write(p []byte, eop bool) error
}

// ReadySink is a Sink that can hold the engine back, as tready low does on
// the card: the engine moves at most Ready bytes to it per step, and
// waits while Ready is 0.
type ReadySink interface {
	Sink
	Ready() int
}

// ChannelConfig describes one channel of an engine.
type ChannelConfig struct {
	Stream bool   // AXI4-Stream rather than memory mapped
	Source Source // xdma.C2H stream channels
	Sink   Sink   // xdma.H2C stream channels
}

// Config describes an engine: its channels and what they connect to.
type Config struct {
	H2C, C2H []ChannelConfig // at most xdma.MaxChannels each
	Bus      xdma.Memory     // host bus addresses (descriptors, data)
	Card     xdma.Memory     // card AXI memory for memory-mapped channels
	// Raise delivers an interrupt vector (MSI-X or MSI): an edge, once per
	// channel interrupt that becomes pending. Level follows the legacy
	// interrupt line, asserted while any enabled channel interrupt is
	// pending. Both are called with the engine locked and must not call
	// back into the engine.
	Raise func(vector int)
	Level func(asserted bool)
	// Version is the IP version in the identifier registers; 0 means 6.
	Version int
	// Chunk is the most bytes a channel moves per Step; 0 means 64 KiB.
	Chunk int
}

// Fault is a fault to inject into a channel.
type Fault int

// Injectable faults. All but FaultStall fire once, at the next matching
// access; FaultStall holds the channel busy until software clears RUN.
const (
	FaultNone      Fault = iota
	FaultBadMagic        // the next descriptor fetched has a corrupt magic
	FaultDescRead        // the next descriptor fetch fails on the bus
	FaultDataRead        // the next data read fails
	FaultDataWrite       // the next data write fails
	FaultStall           // the channel stops making progress
	// FaultCorrupt flips a bit in the middle of the next data write and
	// reports success: silent corruption, which only checking the data
	// finds.
	FaultCorrupt
	// FaultCountAllOnes makes the next read of the completed-descriptor
	// count return 0xFFFFFFFF: a legitimate value, which a 32-bit count
	// passes once every 2^32 descriptors, and not a link that is down.
	FaultCountAllOnes
	// FaultWedged makes the channel stop making progress and ignore both
	// clearing RUN and the descriptor halt, as a hung engine does; only
	// clearing the fault (a reset) idles it.
	FaultWedged
)

func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultBadMagic:
		return "bad-magic"
	case FaultDescRead:
		return "desc-read"
	case FaultDataRead:
		return "data-read"
	case FaultDataWrite:
		return "data-write"
	case FaultStall:
		return "stall"
	case FaultCorrupt:
		return "corrupt"
	case FaultCountAllOnes:
		return "count-all-ones"
	case FaultWedged:
		return "wedged"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Valid reports whether f is a fault the engine knows.
func (f Fault) Valid() bool { return f >= FaultNone && f <= FaultWedged }

// ParseFault parses the String form of a fault.
func ParseFault(s string) (Fault, error) {
	for f := FaultNone; f.Valid(); f++ {
		if f.String() == s {
			return f, nil
		}
	}
	return FaultNone, fmt.Errorf("xdma: unknown fault %q", s)
}

// ErrNoChannel is returned for a channel the engine does not have.
var ErrNoChannel = errors.New("xdma: no such channel")

// Engine models the XDMA register space and its SGDMA channels (PG195). It
// is safe for concurrent use: register accesses and Step serialise on one
// lock, so a register write never lands in the middle of a chunk.
type Engine struct {
	mu       sync.Mutex
	cfg      Config
	h2c, c2h []*channel
	chunk    int

	chanIntEnable uint32
	userIntEnable uint32
	userVectors   [4]uint32
	chanVectors   [2]uint32
	halt          uint32 // descriptor halt, xdma.RegDescHalt layout
	creditMode    uint32
	pendingRaised uint32 // channel interrupts already delivered
	userReq       uint32 // usr_irq_req from the user logic
	userSent      uint32 // user interrupts delivered, their requests still high
	userAck       uint32 // usr_irq_ack owed to the user logic
	levelAsserted bool
	// Messages still to send (QuirkLateInterrupt): vector -> steps left.
	lateVectors   map[int]int
	irqMode       InterruptMode
	linkDown      bool
	quirks        Quirk
	align         xdma.Alignments
	violations    uint64 // descriptors the engine's alignments forbid
	pollWBScratch [4]byte
	resultScratch [8]byte
	descriptorBuf [(xdma.MaxNextAdjacent + 1) * xdma.DescSize]byte
}

type fetched struct {
	addr uint64
	d    xdma.Descriptor
}

type channel struct {
	engine *Engine // its quirks and credit mode; under engine.mu
	dir    xdma.Direction
	index  int
	cfg    ChannelConfig
	irq    uint32 // bit in the interrupt block

	control, status, completed, intMask uint32
	wbLo, wbHi                          uint32
	descLo, descHi, descAdj, credits    uint32
	// Which address registers were written since the last reset: the
	// engine fetching descriptors from, or writing back to, an address
	// the driver has not programmed since is a violation.
	programmed uint8

	busy     bool
	lateBusy int // status reads still to see BUSY (QuirkLateBusy)
	// Status bits not yet visible (QuirkSplitStatus): they show at the
	// next status read, or after deferSteps more steps.
	deferred   uint32
	deferSteps int
	// Completions whose results are written but not yet in completed
	// (QuirkLateCount).
	countLag uint32
	queue    []fetched // fetched, not yet started
	nextAddr uint64    // next block to fetch
	nextAdj  int
	cur      fetched
	active   bool   // cur is being processed
	done     uint64 // bytes of cur moved
	fault    Fault
	stalled  bool
	scratch  []byte
	// Performance monitor (PG195 0xC0-0xD0): control, cycles and data
	// beats counted. A step that moves data counts a cycle per beat; one
	// that fetches descriptors, or waits, counts one.
	perfCtrl, perfCycles, perfBeats uint64
}

// Address registers a driver must write after a reset before the engine
// uses them (channel.programmed).
const (
	progDescLo = 1 << iota
	progDescHi
	progWBLo
	progWBHi
)

// PerfBeatBytes is the data path's width the performance monitor counts
// beats of: 512 bits, as a Gen3 x16 or Gen4 x8 build has.
const PerfBeatBytes = 64

// perfCounting reports whether the performance monitor counts now.
func (c *channel) perfCounting() bool {
	return c.perfCtrl&xdma.PerfRun != 0 || c.perfCtrl&xdma.PerfAuto != 0 && c.busy
}

// perfCount adds to the performance monitor's counters, saturating.
func (c *channel) perfCount(cycles, beats uint64) {
	if !c.perfCounting() {
		return
	}
	c.perfCycles = min(c.perfCycles+cycles, xdma.PerfCountMax)
	c.perfBeats = min(c.perfBeats+beats, xdma.PerfCountMax)
}

// perfHigh is a counter's high register: bits 41:32 and whether it maxed.
func perfHigh(v uint64) uint32 {
	hi := uint32(v>>32) & 0x3ff
	if v == xdma.PerfCountMax {
		hi |= xdma.PerfMaxed
	}
	return hi
}

// NewEngine returns an engine for cfg.
func NewEngine(cfg Config) (*Engine, error) {
	if len(cfg.H2C) > xdma.MaxChannels || len(cfg.C2H) > xdma.MaxChannels {
		return nil, fmt.Errorf("xdma: at most %d channels per direction", xdma.MaxChannels)
	}
	if cfg.Bus == nil {
		return nil, errors.New("xdma: engine needs a bus")
	}
	if cfg.Version == 0 {
		cfg.Version = 6
	}
	e := &Engine{cfg: cfg, chunk: cfg.Chunk, align: AnyAlignment}
	if e.chunk <= 0 {
		e.chunk = 64 << 10
	}
	for i, cc := range cfg.H2C {
		if cc.Stream && cc.Sink == nil || !cc.Stream && cfg.Card == nil {
			return nil, fmt.Errorf("xdma: xdma.H2C channel %d has nothing to write to", i)
		}
		e.h2c = append(e.h2c, e.newChannel(xdma.H2C, i, cc, uint32(i)))
	}
	for i, cc := range cfg.C2H {
		if cc.Stream && cc.Source == nil || !cc.Stream && cfg.Card == nil {
			return nil, fmt.Errorf("xdma: xdma.C2H channel %d has nothing to read from", i)
		}
		e.c2h = append(e.c2h, e.newChannel(xdma.C2H, i, cc, uint32(len(cfg.H2C)+i)))
	}
	return e, nil
}

func (e *Engine) newChannel(dir xdma.Direction, i int, cc ChannelConfig, irq uint32) *channel {
	return &channel{engine: e, dir: dir, index: i, cfg: cc, irq: irq, scratch: make([]byte, e.chunk)}
}

func (e *Engine) channel(dir xdma.Direction, i int) *channel {
	list := e.h2c
	if dir == xdma.C2H {
		list = e.c2h
	}
	if i < 0 || i >= len(list) {
		return nil
	}
	return list[i]
}

// InjectFault arms a fault on a channel.
func (e *Engine) InjectFault(dir xdma.Direction, ch int, f Fault) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.channel(dir, ch)
	if c == nil {
		return fmt.Errorf("%w: %v %d", ErrNoChannel, dir, ch)
	}
	if c.fault == FaultWedged {
		c.fault = FaultNone // reset: the hung chain is dropped
		c.stop()
		c.control &^= xdma.CtrlRun
	}
	c.fault = f
	c.stalled = false
	return nil
}

// Stalled reports whether a channel is running a chain that an injected
// stall or wedge holds: the engine has fetched it, and moves nothing.
func (e *Engine) Stalled(dir xdma.Direction, ch int) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.channel(dir, ch)
	if c == nil {
		return false, fmt.Errorf("%w: %v %d", ErrNoChannel, dir, ch)
	}
	return c.busy && c.stalled, nil
}

// InterruptMode is how the PCIe function's interrupts are enabled, as the
// config block's MSI enable register reports it.
type InterruptMode int

// Interrupt modes.
const (
	InterruptINTx InterruptMode = iota
	InterruptMSI
	InterruptMSIX
)

// SetInterruptMode records which interrupts the host enabled in the
// function's config space.
func (e *Engine) SetInterruptMode(m InterruptMode) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.irqMode = m
}

// Reset returns the engine to its power-on state, as a PCIe reset does:
// every channel stops and forgets its chain, credits and faults, and all
// interrupts are disabled. The link state is the bus's, not the engine's.
func (e *Engine) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, list := range [][]*channel{e.h2c, e.c2h} {
		for i, c := range list {
			list[i] = e.newChannel(c.dir, c.index, c.cfg, c.irq)
		}
	}
	e.chanIntEnable, e.userIntEnable = 0, 0
	e.userReq, e.userSent, e.userAck = 0, 0, 0
	e.userVectors, e.chanVectors = [4]uint32{}, [2]uint32{}
	e.halt, e.creditMode = 0, 0
	e.irqMode = InterruptINTx
	e.lateVectors = nil // a reset function sends nothing it owed
	e.updateIRQ()
}

// SetLinkDown makes every register read return all ones and every write
// vanish, and stops all data movement, as a device that fell off the bus.
func (e *Engine) SetLinkDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.linkDown = down
}

// ReadReg returns the 32-bit register at off. Reads of RegStatusRC clear
// the status bits they return.
func (e *Engine) ReadReg(off uint32) uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.linkDown {
		return 0xFFFFFFFF
	}
	v := e.readReg(off)
	e.updateIRQ()
	return v
}

// WriteReg writes the 32-bit register at off.
func (e *Engine) WriteReg(off, v uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.linkDown {
		return
	}
	e.writeReg(off, v)
	e.updateIRQ()
}

func (e *Engine) readReg(off uint32) uint32 {
	if off%4 != 0 || off >= xdma.RegSpaceSize {
		return 0
	}
	target, ch, reg := int(off>>12&0xF), int(off>>8&0xF), off&0xFF
	switch target {
	case xdma.TargetH2C, xdma.TargetC2H:
		c := e.channel(xdma.Direction(target), ch)
		if c == nil {
			return 0
		}
		return c.readChannel(reg, e.cfg.Version)
	case xdma.TargetH2CSGDMA, xdma.TargetC2HSGDMA:
		c := e.channel(xdma.Direction(target-xdma.TargetH2CSGDMA), ch)
		if c == nil {
			return 0
		}
		return c.readSGDMA(reg, e.cfg.Version)
	case xdma.TargetIRQ:
		if ch == 0 {
			return e.readIRQ(reg)
		}
	case xdma.TargetConfig:
		if ch == 0 {
			return e.readConfig(reg)
		}
	case xdma.TargetSGDMACommon:
		if ch == 0 {
			return e.readCommon(reg)
		}
	}
	return 0
}

func (e *Engine) writeReg(off, v uint32) {
	if off%4 != 0 || off >= xdma.RegSpaceSize {
		return
	}
	target, ch, reg := int(off>>12&0xF), int(off>>8&0xF), off&0xFF
	switch target {
	case xdma.TargetH2C, xdma.TargetC2H:
		if c := e.channel(xdma.Direction(target), ch); c != nil {
			c.writeChannel(reg, v)
		}
	case xdma.TargetH2CSGDMA, xdma.TargetC2HSGDMA:
		if c := e.channel(xdma.Direction(target-xdma.TargetH2CSGDMA), ch); c != nil {
			c.writeSGDMA(reg, v)
		}
	case xdma.TargetIRQ:
		if ch == 0 {
			e.writeIRQ(reg, v)
		}
	case xdma.TargetSGDMACommon:
		if ch == 0 {
			e.writeCommon(reg, v)
		}
	}
}

func (c *channel) readChannel(reg uint32, version int) uint32 {
	switch reg {
	case xdma.RegIdentifier:
		return xdma.Identifier{Target: c.dir.ChannelTarget(), Stream: c.cfg.Stream, Channel: c.index, Version: version}.Encode()
	case xdma.RegControl:
		return c.control
	case xdma.RegStatus:
		return c.readStatus(false)
	case xdma.RegStatusRC:
		return c.readStatus(true)
	case xdma.RegCompletedCount:
		if c.fault == FaultCountAllOnes {
			c.fault = FaultNone
			return ^uint32(0)
		}
		v := c.completed
		if c.engine.quirks&QuirkStickyCount == 0 {
			c.catchUpCount() // this read missed them; the next sees them
		}
		return v
	case xdma.RegAlignments:
		return c.engine.align.Encode()
	case xdma.RegPollWBLo:
		return c.wbLo
	case xdma.RegPollWBHi:
		return c.wbHi
	case xdma.RegIntEnable:
		return c.intMask
	case xdma.RegPerfControl:
		return uint32(c.perfCtrl)
	case xdma.RegPerfCycleLo:
		return uint32(c.perfCycles)
	case xdma.RegPerfCycleHi:
		return perfHigh(c.perfCycles)
	case xdma.RegPerfDataLo:
		return uint32(c.perfBeats)
	case xdma.RegPerfDataHi:
		return perfHigh(c.perfBeats)
	}
	return 0
}

// readStatus answers a read of the status register, clearing what it
// returns when clear is set. Under the quirks a read may see BUSY after the
// stop, and bits held back appear for the next read.
func (c *channel) readStatus(clear bool) uint32 {
	if c.engine.quirks&QuirkStickyCount == 0 {
		c.catchUpCount()
	}
	v := c.status
	if c.busy && !c.idleWithoutCredits() || c.lateBusy > 0 {
		v |= xdma.CtrlRun // BUSY
	}
	if c.lateBusy > 0 {
		c.lateBusy--
	}
	if clear {
		c.status = 0
	}
	c.status |= c.deferred
	c.deferred = 0
	return v
}

// catchUpCount moves the completed count past the completions it lags
// (QuirkLateCount).
func (c *channel) catchUpCount() {
	c.completed = (c.completed + c.countLag) & pollWBCountMask
	c.countLag = 0
}

// idleWithoutCredits reports whether c reports idle while it waits for
// credits (QuirkIdleWithoutCredits).
func (c *channel) idleWithoutCredits() bool {
	e := c.engine
	return e.quirks&QuirkIdleWithoutCredits != 0 && e.creditMode&c.commonBit() != 0 && c.credits == 0 &&
		!c.active && len(c.queue) == 0
}

// ended records the end of a chain: the stop bits (held back for a read
// under QuirkSplitStatus) and a BUSY that lingers under QuirkLateBusy.
func (c *channel) ended(stop uint32) {
	if c.engine.quirks&QuirkStickyCount != 0 {
		c.catchUpCount() // a channel that stops publishes its count
	}
	if c.engine.quirks&QuirkSplitStatus != 0 {
		c.deferred |= stop & c.control
		c.deferSteps = SplitSteps
	} else {
		c.log(stop)
	}
	if c.engine.quirks&QuirkLateBusy != 0 {
		c.lateBusy = LateBusyReads
	}
}

func (c *channel) writeChannel(reg, v uint32) {
	switch reg {
	case xdma.RegStatus:
		c.status &^= v // write 1 to clear (PG195)
	case xdma.RegControl:
		c.setControl(v)
	case xdma.RegControlW1S:
		c.setControl(c.control | v)
	case xdma.RegControlW1C:
		c.setControl(c.control &^ v)
	case xdma.RegPollWBLo:
		c.wbLo = v
		c.programmed |= progWBLo
	case xdma.RegPollWBHi:
		c.wbHi = v
		c.programmed |= progWBHi
	case xdma.RegIntEnable:
		c.intMask = v & statusBitsMask
	case xdma.RegIntEnableW1S:
		c.intMask |= v & statusBitsMask
	case xdma.RegIntEnableW1C:
		c.intMask &^= v
	case xdma.RegPerfControl:
		if v&xdma.PerfClear != 0 {
			c.perfCycles, c.perfBeats = 0, 0
		}
		c.perfCtrl = uint64(v & (xdma.PerfRun | xdma.PerfAuto))
	}
}

func (c *channel) setControl(v uint32) {
	v &= controlWritableMask
	was := c.control&xdma.CtrlRun != 0
	c.control = v
	switch run := v&xdma.CtrlRun != 0; {
	case run && !was:
		c.start()
	case !run && was:
		c.stop()
	}
}

// start begins a chain on the rising edge of RUN: status and the completed
// count reset, and the first block comes from the SGDMA registers.
func (c *channel) start() {
	c.status = 0
	c.deferred = 0
	c.lateBusy = 0
	c.completed = 0
	c.countLag = 0
	c.busy = true
	c.queue = c.queue[:0]
	c.active = false
	c.nextAddr = uint64(c.descHi)<<32 | uint64(c.descLo)
	c.nextAdj = int(c.descAdj & 0x3F)
}

// stop ends a chain when software clears RUN; a busy channel stops at the
// chunk boundary it is at.
func (c *channel) stop() {
	if c.fault == FaultWedged {
		return
	}
	// The stall is spent on the chain it held; a RUN cleared on an idle
	// channel (a completion's late write) leaves it armed for the next.
	if c.fault == FaultStall && c.busy {
		c.fault = FaultNone
	}
	if c.busy {
		c.ended(xdma.StatIdleStopped)
	}
	c.busy = false
	c.active = false
	c.queue = c.queue[:0]
	c.stalled = false
}

// log records status bits whose logging the control register enables.
func (c *channel) log(bits uint32) {
	c.status |= bits & c.control
}

func (c *channel) readSGDMA(reg uint32, version int) uint32 {
	switch reg {
	case xdma.RegIdentifier:
		return xdma.Identifier{Target: c.dir.SGDMATarget(), Stream: c.cfg.Stream, Channel: c.index, Version: version}.Encode()
	case xdma.RegDescLo:
		return c.descLo
	case xdma.RegDescHi:
		return c.descHi
	case xdma.RegDescAdjacent:
		return c.descAdj
	case xdma.RegDescCredits:
		return c.credits
	}
	return 0
}

func (c *channel) writeSGDMA(reg, v uint32) {
	switch reg {
	case xdma.RegDescLo:
		c.descLo = v
		c.programmed |= progDescLo
	case xdma.RegDescHi:
		c.descHi = v
		c.programmed |= progDescHi
	case xdma.RegDescAdjacent:
		c.descAdj = v & 0x3F
	case xdma.RegDescCredits:
		// Writes add credits; the counter is 10 bits wide.
		c.credits = min(c.credits+v&xdma.MaxCredits, xdma.MaxCredits)
	}
}

func (e *Engine) readIRQ(reg uint32) uint32 {
	switch reg {
	case xdma.RegIdentifier:
		return xdma.Identifier{Target: xdma.TargetIRQ, Version: e.cfg.Version}.Encode()
	case xdma.RegUserIntEnable:
		return e.userIntEnable
	case xdma.RegChanIntEnable:
		return e.chanIntEnable
	case xdma.RegUserIntRequest:
		return e.userReq
	case xdma.RegUserIntPending:
		return e.userReq & e.userIntEnable
	case xdma.RegChanIntRequest:
		return e.chanRequest()
	case xdma.RegChanIntPending:
		return e.chanRequest() & e.chanIntEnable
	case xdma.RegUserVector, xdma.RegUserVector + 4, xdma.RegUserVector + 8, xdma.RegUserVector + 12:
		return e.userVectors[(reg-xdma.RegUserVector)/4]
	case xdma.RegChanVector, xdma.RegChanVector + 4:
		return e.chanVectors[(reg-xdma.RegChanVector)/4]
	}
	return 0
}

func (e *Engine) writeIRQ(reg, v uint32) {
	switch reg {
	case xdma.RegUserIntEnable:
		e.userIntEnable = v
	case xdma.RegUserIntEnableW1S:
		e.userIntEnable |= v
	case xdma.RegUserIntEnableW1C:
		e.userIntEnable &^= v
	case xdma.RegChanIntEnable:
		e.chanIntEnable = v & e.channelBits()
	case xdma.RegChanIntEnableW1S:
		e.chanIntEnable |= v & e.channelBits()
	case xdma.RegChanIntEnableW1C:
		e.chanIntEnable &^= v
	case xdma.RegUserVector, xdma.RegUserVector + 4, xdma.RegUserVector + 8, xdma.RegUserVector + 12:
		e.userVectors[(reg-xdma.RegUserVector)/4] = v & 0x1F1F1F1F
	case xdma.RegChanVector, xdma.RegChanVector + 4:
		e.chanVectors[(reg-xdma.RegChanVector)/4] = v & 0x1F1F1F1F
	}
}

// channelBits has one bit per channel the engine has, H2C first: the
// channel interrupt registers hold no others (PG195).
func (e *Engine) channelBits() uint32 {
	return 1<<(len(e.h2c)+len(e.c2h)) - 1
}

func (e *Engine) readConfig(reg uint32) uint32 {
	switch reg {
	case xdma.RegIdentifier:
		return xdma.Identifier{Target: xdma.TargetConfig, Version: e.cfg.Version}.Encode()
	case xdma.RegConfigMaxPayload:
		return 1 // 256 bytes
	case xdma.RegConfigMaxReadReq:
		return 2 // 512 bytes
	case xdma.RegConfigDataWidth:
		return 3 // 512 bits
	case xdma.RegConfigMSIEnable:
		switch e.irqMode {
		case InterruptMSI:
			return 1 << 0
		case InterruptMSIX:
			return 1 << 1
		}
		return 0
	}
	return 0
}

func (e *Engine) readCommon(reg uint32) uint32 {
	switch reg {
	case xdma.RegIdentifier:
		return xdma.Identifier{Target: xdma.TargetSGDMACommon, Version: e.cfg.Version}.Encode()
	case xdma.RegDescHalt:
		return e.halt
	case xdma.RegCreditMode:
		return e.creditMode
	}
	return 0
}

func (e *Engine) writeCommon(reg, v uint32) {
	const mask = 0xF | 0xF<<commonC2HBitShift
	switch reg {
	case xdma.RegDescHalt:
		e.halt = v & mask
	case xdma.RegDescHaltW1S:
		e.halt |= v & mask
	case xdma.RegDescHaltW1C:
		e.halt &^= v
	case xdma.RegCreditMode:
		e.setCreditMode(v & mask)
	case xdma.RegCreditModeW1S:
		e.setCreditMode(e.creditMode | v&mask)
	case xdma.RegCreditModeW1C:
		e.setCreditMode(e.creditMode &^ v)
	}
}

// setCreditMode changes the credit-mode bits; a channel leaving credit mode
// loses the credits it had, so the next user starts from zero.
func (e *Engine) setCreditMode(v uint32) {
	for _, list := range [][]*channel{e.h2c, e.c2h} {
		for _, c := range list {
			if e.creditMode&c.commonBit() != 0 && v&c.commonBit() == 0 {
				c.credits = 0
			}
		}
	}
	e.creditMode = v
}

// commonBit returns c's bit in the SGDMA common registers.
func (c *channel) commonBit() uint32 {
	if c.dir == xdma.C2H {
		return 1 << (commonC2HBitShift + c.index)
	}
	return 1 << c.index
}

func (e *Engine) chanRequest() uint32 {
	var req uint32
	for _, list := range [][]*channel{e.h2c, e.c2h} {
		for _, c := range list {
			if c.status&c.intMask != 0 {
				req |= 1 << c.irq
			}
		}
	}
	return req
}

// updateIRQ raises the vector of every channel whose interrupt has become
// pending: MSI-X is edge-triggered, so a pending channel raises once until
// its request drops (its status is read-cleared) or it is masked. The
// legacy line is a level: asserted while any enabled request is pending.
func (e *Engine) updateIRQ() {
	pending := e.chanRequest() & e.chanIntEnable
	fresh := pending &^ e.pendingRaised
	e.pendingRaised = pending
	for bit := uint32(0); fresh != 0 && e.cfg.Raise != nil; bit++ {
		if fresh&(1<<bit) == 0 {
			continue
		}
		fresh &^= 1 << bit
		reg := e.chanVectors[bit/vectorsPerRegister]
		vec := int(reg >> (bit % vectorsPerRegister * vectorFieldBitStride) & vectorFieldMask)
		if e.quirks&QuirkLateInterrupt == 0 {
			e.cfg.Raise(vec)
			continue
		}
		if e.lateVectors == nil {
			e.lateVectors = make(map[int]int)
		}
		if _, queued := e.lateVectors[vec]; !queued {
			e.lateVectors[vec] = LateIRQSteps
		}
	}
	// User interrupts (usr_irq_req): an enabled request that rises is
	// sent once on its vector and acknowledged (usr_irq_ack); the user
	// logic drops it before it can send another (PG195).
	user := e.userReq & e.userIntEnable
	fresh = user &^ e.userSent
	e.userSent = e.userSent&e.userReq | fresh
	for bit := uint32(0); fresh != 0; bit++ {
		if fresh&(1<<bit) == 0 {
			continue
		}
		fresh &^= 1 << bit
		e.userAck |= 1 << bit
		if e.cfg.Raise != nil {
			reg := e.userVectors[bit/vectorsPerRegister]
			e.cfg.Raise(int(reg >> (bit % vectorsPerRegister * vectorFieldBitStride) & vectorFieldMask))
		}
	}
	if asserted := pending != 0 || user != 0; asserted != e.levelAsserted {
		e.levelAsserted = asserted
		if e.cfg.Level != nil {
			e.cfg.Level(asserted)
		}
	}
}

// UserIRQ sets the user logic's usr_irq_req lines and returns the
// usr_irq_ack pulses owed since the last call: one for each enabled
// request the engine has sent as an interrupt.
func (e *Engine) UserIRQ(req uint32) (ack uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.userReq = req & 0xFFFF
	e.updateIRQ()
	ack, e.userAck = e.userAck, 0
	return ack
}

// Busy reports whether any channel is running a chain, or has status bits
// (QuirkSplitStatus) or messages (QuirkLateInterrupt) still to show:
// either needs Step called.
func (e *Engine) Busy() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, list := range [][]*channel{e.h2c, e.c2h} {
		for _, c := range list {
			if c.busy || c.deferred != 0 {
				return true
			}
		}
	}
	return len(e.lateVectors) != 0
}

// sendLate counts down the messages QuirkLateInterrupt holds back, and
// sends those whose time has come. It is not progress: on an idle engine
// the steps come by the clock.
func (e *Engine) sendLate() {
	for vec, left := range e.lateVectors {
		if left > 1 {
			e.lateVectors[vec] = left - 1
			continue
		}
		delete(e.lateVectors, vec)
		if e.cfg.Raise != nil {
			e.cfg.Raise(vec)
		}
	}
}

// Step advances every running channel by one unit of work (a descriptor
// fetch or one chunk of data) and reports whether any channel progressed.
// A channel waiting for stream data, credits, a halt to lift or a stall to
// clear does not progress.
func (e *Engine) Step() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.linkDown {
		return false
	}
	progress := false
	for _, list := range [][]*channel{e.h2c, e.c2h} {
		for _, c := range list {
			if e.stepChannel(c) {
				progress = true
			}
		}
	}
	e.sendLate()
	e.updateIRQ()
	return progress
}

// RunUntilIdle steps until no channel progresses. Status bits still to
// show (QuirkSplitStatus) may keep Busy true after it returns.
func (e *Engine) RunUntilIdle() {
	for e.Step() {
	}
}

func (e *Engine) stepChannel(c *channel) bool {
	if c.deferred != 0 {
		if c.deferSteps--; c.deferSteps <= 0 {
			c.status |= c.deferred
			c.deferred = 0
		}
	}
	if !c.busy || c.stalled {
		return false
	}
	if c.fault == FaultStall || c.fault == FaultWedged {
		c.stalled = true
		return false
	}
	if !c.active {
		progress := e.nextDescriptor(c)
		c.perfCount(1, 0)
		return progress
	}
	if !e.moveChunk(c) {
		c.perfCount(1, 0) // waiting for the stream
		return false
	}
	return true
}

// nextDescriptor starts the next descriptor, fetching a block if needed.
func (e *Engine) nextDescriptor(c *channel) bool {
	if len(c.queue) == 0 {
		if e.halt&c.commonBit() != 0 {
			return false
		}
		n := c.nextAdj + 1
		if e.creditMode&c.commonBit() != 0 {
			if c.credits == 0 {
				return false
			}
			n = min(n, int(c.credits))
			c.credits -= uint32(n)
		}
		if !e.fetch(c, n) {
			return true
		}
	}
	c.cur = c.queue[0]
	c.queue = c.queue[1:]
	d := &c.cur.d
	if d.Magic != xdma.DescMagic {
		e.fail(c, xdma.StatMagicStopped)
		return true
	}
	if d.Len == 0 {
		e.fail(c, xdma.StatInvalidLength)
		return true
	}
	if bits := e.misaligned(c, d); bits != 0 {
		e.violations++
		e.fail(c, bits)
		return true
	}
	c.active = true
	c.done = 0
	return true
}

// fetch reads n descriptors at the channel's next block address.
func (e *Engine) fetch(c *channel, n int) bool {
	addr := c.nextAddr
	if c.programmed&progDescLo == 0 {
		// The descriptor address holds its reset value.
		e.violations++
		e.fail(c, xdma.ErrCodeUnsupportedRequest<<descErrorShift)
		return false
	}
	if !e.reaches(addr) {
		e.violations++
		e.fail(c, xdma.ErrCodeUnsupportedRequest<<descErrorShift)
		return false
	}
	if addr%xdma.DescAlign != 0 || !adjacentFits(addr, n-1) {
		// The engine fetches adjacent descriptors in one read that must
		// not cross a 4 KiB block; the model stops rather than guess.
		e.fail(c, xdma.ErrCodeUnexpectedComp<<descErrorShift)
		return false
	}
	buf := e.descriptorBuf[:n*xdma.DescSize]
	err := e.cfg.Bus.Read(addr, buf)
	if c.fault == FaultDescRead {
		c.fault = FaultNone
		err = &xdma.BusError{Addr: addr, Len: len(buf), Code: xdma.ErrCodeUnsupportedRequest}
	}
	if err != nil {
		e.fail(c, errorCode(err)<<descErrorShift)
		return false
	}
	c.queue = c.queue[:0]
	for i := range n {
		var d xdma.Descriptor
		d.Unmarshal(buf[i*xdma.DescSize:])
		c.queue = append(c.queue, fetched{addr + uint64(i)*xdma.DescSize, d})
		if d.Flags&xdma.FlagStop != 0 {
			break
		}
	}
	if c.fault == FaultBadMagic {
		c.fault = FaultNone
		c.queue[0].d.Magic ^= 0xFFFF
	}
	if n <= c.nextAdj {
		// Credits cut the block short: the rest of it comes next.
		c.nextAddr += uint64(n) * xdma.DescSize
		c.nextAdj -= n
		return true
	}
	last := c.queue[len(c.queue)-1].d
	c.nextAddr, c.nextAdj = last.Next, int(last.NextAdjacent)
	return true
}

func errorCode(err error) uint32 {
	var be *xdma.BusError
	if errors.As(err, &be) && be.Code != 0 {
		return be.Code & errorFieldMask
	}
	return xdma.ErrCodeUnsupportedRequest
}

// moveChunk moves up to one chunk of the current descriptor.
func (e *Engine) moveChunk(c *channel) bool {
	d := &c.cur.d
	n := min(uint64(d.Len)-c.done, uint64(e.chunk))
	buf := c.scratch[:n]
	eop := false
	var err error
	var errBits uint32
	if rs, ok := c.cfg.Sink.(ReadySink); ok && c.dir == xdma.H2C && c.cfg.Stream {
		n = min(n, uint64(max(rs.Ready(), 0)))
		if n == 0 {
			return false // the sink holds tready low
		}
		buf = buf[:n]
	}
	switch {
	case c.dir == xdma.H2C:
		if err = e.dataRead(c, e.cfg.Bus, d.Src+c.done, buf); err != nil {
			errBits = errorCode(err) << readErrorShift
			break
		}
		last := c.done+n == uint64(d.Len)
		if c.cfg.Stream {
			err = c.cfg.Sink.Write(buf, last && d.Flags&xdma.FlagEOP != 0)
		} else {
			err = e.dataWrite(c, e.cfg.Card, c.cardAddr(d.Dst), buf)
		}
		if err != nil {
			errBits = errorCode(err) << writeErrorShift
		}
	case c.cfg.Stream:
		var got int
		got, eop, err = c.cfg.Source.Read(buf)
		if err != nil {
			errBits = errorCode(err) << readErrorShift
			break
		}
		if got == 0 && !eop {
			return false // waiting for the stream
		}
		buf = buf[:got]
		n = uint64(got)
		if err = e.dataWrite(c, e.cfg.Bus, d.Dst+c.done, buf); err != nil {
			errBits = errorCode(err) << writeErrorShift
		}
	default:
		if err = e.dataRead(c, e.cfg.Card, c.cardAddr(d.Src), buf); err != nil {
			errBits = errorCode(err) << readErrorShift
			break
		}
		if err = e.dataWrite(c, e.cfg.Bus, d.Dst+c.done, buf); err != nil {
			errBits = errorCode(err) << writeErrorShift
		}
	}
	if errBits != 0 {
		e.fail(c, errBits)
		return true
	}
	c.done += n
	beats := (n + PerfBeatBytes - 1) / PerfBeatBytes
	c.perfCount(beats, beats)
	if c.done == uint64(d.Len) || eop {
		e.complete(c, eop)
	}
	return true
}

// cardAddr returns the card address for the current offset, honouring the
// non-incrementing address mode.
func (c *channel) cardAddr(base uint64) uint64 {
	if c.control&xdma.CtrlNonIncAddr != 0 {
		return base
	}
	return base + c.done
}

func (e *Engine) dataRead(c *channel, m xdma.Memory, addr uint64, p []byte) error {
	if c.fault == FaultDataRead {
		c.fault = FaultNone
		return &xdma.BusError{Addr: addr, Len: len(p), Code: xdma.ErrCodeCompleterAbort}
	}
	return m.Read(addr, p)
}

func (e *Engine) dataWrite(c *channel, m xdma.Memory, addr uint64, p []byte) error {
	if c.fault == FaultDataWrite {
		c.fault = FaultNone
		return &xdma.BusError{Addr: addr, Len: len(p), Code: xdma.ErrCodeCompleterAbort}
	}
	if c.fault == FaultCorrupt && len(p) > 0 {
		c.fault = FaultNone
		bad := append([]byte(nil), p...)
		bad[len(bad)/2] ^= 0x01
		return m.Write(addr, bad)
	}
	return m.Write(addr, p)
}

// complete finishes the current descriptor.
func (e *Engine) complete(c *channel, eop bool) {
	d := c.cur.d
	c.active = false
	result := c.dir == xdma.C2H && c.cfg.Stream && d.Src != 0 && c.control&xdma.CtrlStreamWBDisable == 0
	if result && e.quirks&(QuirkLateCount|QuirkStickyCount) != 0 {
		c.catchUpCount() // the count lags by the last completion only
		c.countLag++
	} else {
		c.completed = (c.completed + 1) & pollWBCountMask
	}
	if result {
		status := uint32(xdma.ResultMagic) << 16
		if eop {
			status |= resultEOP
		}
		binary.LittleEndian.PutUint32(e.resultScratch[0:], status)
		binary.LittleEndian.PutUint32(e.resultScratch[4:], uint32(c.done))
		if err := e.cfg.Bus.Write(d.Src, e.resultScratch[:]); err != nil {
			e.fail(c, errorCode(err)<<writeErrorShift)
			return
		}
	}
	if d.Flags&xdma.FlagCompleted != 0 {
		c.log(xdma.StatDescCompleted)
	}
	if d.Flags&xdma.FlagStop != 0 {
		c.ended(xdma.StatDescStopped)
		c.busy = false
		c.queue = c.queue[:0]
	}
	e.writeback(c, false)
}

// fail stops the channel with error status bits, which are always logged.
func (e *Engine) fail(c *channel, bits uint32) {
	c.status |= bits
	c.ended(0)
	c.busy = false
	c.active = false
	c.queue = c.queue[:0]
	e.writeback(c, true)
}

// writeback writes the poll-mode writeback word when it is enabled: PG195
// writes it on a descriptor's completion, so it needs the completion's
// interrupt enable (control bit 2) as well as the writeback enable.
func (e *Engine) writeback(c *channel, failed bool) {
	// Control bits 1-23 enable the status bits at the same positions.
	// PG195 can be read as tying the writeback to ie_descriptor_completed
	// as well; QuirkWBWithoutIE is the reading Xilinx's driver relies on.
	if c.control&xdma.CtrlPollModeWB == 0 ||
		c.control&xdma.StatDescCompleted == 0 && e.quirks&QuirkWBWithoutIE == 0 {
		return
	}
	if c.programmed&progWBLo == 0 {
		// Its reset value: memory the driver never named. (A high
		// word left at its reset value, 0, is a 32-bit address.)
		e.violations++
		return
	}
	addr := uint64(c.wbHi)<<32 | uint64(c.wbLo)
	// The writeback has every completion, the count lagging or not.
	done := (c.completed + c.countLag) & pollWBCountMask
	binary.LittleEndian.PutUint32(e.pollWBScratch[:], xdma.PollWriteback{Completed: done, Error: failed}.Encode())
	// A failed writeback has nowhere to be reported but the status.
	if err := e.cfg.Bus.Write(addr, e.pollWBScratch[:]); err != nil {
		c.status |= errorCode(err) << writeErrorShift
	}
}
