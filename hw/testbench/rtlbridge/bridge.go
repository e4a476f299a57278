// Package rtlbridge co-simulates a user's FPGA logic, built with Verilator,
// against the XDMA engine model: the design runs in its own process (the
// harness in harness/, built by Build) and meets the model at the IP's user
// ports: C2H and H2C AXI-Stream on channel 0, the AXI-Lite master of the
// user BAR and usr_irq_req/ack. The two sides share a memory file of
// rings of time-stamped beats and commands, read and published once per
// quantum of the user clock, so nothing waits on a message per beat.
//
// C2H tready is derived in the RTL process from the credits the model
// grants: a ring of Options.C2HDepth beats whose free entries the model
// returns as it takes beats. When the engine has no descriptor, no credit
// or is stopped it takes none, the ring fills and tready falls. A credit
// returned reaches the design at the next quantum boundary: the credit
// latency is at most Options.Quantum cycles (exactly that in synchronised
// mode). See README's conformance table.
package rtlbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Mode is how the RTL process's clock relates to the model.
type Mode int

const (
	// Synchronised: the RTL process runs a quantum only when the model
	// grants it (Tick), and samples what the model wrote only at quantum
	// boundaries, so the same inputs give the same trace.
	Synchronised Mode = iota
	// FreeRunning: the RTL process runs its clock as fast as it can,
	// sampling the model's rings every quantum.
	FreeRunning
)

func (m Mode) String() string {
	if m == FreeRunning {
		return "free-running"
	}
	return "synchronised"
}

// Options configures a co-simulation.
type Options struct {
	Binary string // from Build
	Width  int    // the IP's AXI-Stream width in bits, both directions
	Mode   Mode
	// Quantum is the cycles the RTL process runs between samples of the
	// shared rings: the credit and command latency. 0 means 256.
	Quantum uint64
	// C2HDepth is the beats the model takes ahead of the engine (the IP's
	// C2H FIFO): tready falls when they are all taken. 0 means 512.
	C2HDepth int
	H2CDepth int // 0 means 512
	// MaxPacket is the most C2H bytes without tlast before ErrNoLast; 0
	// means 1 MiB.
	MaxPacket int
	// StallCycles is how long the engine may wait on an empty C2H stream
	// before ErrNoValid; 0 means 1<<24 cycles synchronised and no limit
	// free-running, where the design's clock runs on while the host is
	// busy elsewhere (booting, say).
	StallCycles uint64
	// ConnectTimeout bounds the start handshake; 0 means 10 s.
	ConnectTimeout time.Duration
	// WaitTimeout bounds every later wait on the RTL process; 0 means 30 s.
	WaitTimeout time.Duration
	// Dir holds the shared-memory file; "" means /dev/shm.
	Dir string
	// Stderr receives the RTL process's standard error as well.
	Stderr io.Writer
}

// Bridge is a running co-simulation.
type Bridge struct {
	opt    Options
	mem    []byte
	path   string
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	stderr tail

	errMu   sync.Mutex
	err     error
	exitErr error

	grant uint64 // synchronised mode: cycles granted so far

	axilMu  sync.Mutex
	cmdTail uint64

	c2h      *C2H
	h2c      *H2C
	ackSeq   uint64
	resetSeq uint64
}

// tail keeps the last bytes of the process's standard error.
type tail struct {
	mu  sync.Mutex
	buf []byte
	w   io.Writer
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Start starts the RTL process and completes the handshake: it returns
// ErrConnect if the process does not map the shared file within
// ConnectTimeout, ErrExited if it dies first, and ErrWidth if its stream
// widths are not opt.Width.
func Start(ctx context.Context, opt Options) (*Bridge, error) {
	if opt.Width < 64 || opt.Width > 512 || opt.Width%64 != 0 {
		return nil, fmt.Errorf("%w: the model is configured for %d bits: the XDMA IP's streams are 64, 128, 256 or 512", ErrWidth, opt.Width)
	}
	if opt.Quantum == 0 {
		opt.Quantum = 256
	}
	if opt.C2HDepth <= 0 {
		opt.C2HDepth = 512
	}
	if opt.H2CDepth <= 0 {
		opt.H2CDepth = 512
	}
	if opt.MaxPacket <= 0 {
		opt.MaxPacket = 1 << 20
	}
	if opt.StallCycles == 0 && opt.Mode == Synchronised {
		opt.StallCycles = 1 << 24
	}
	if opt.ConnectTimeout <= 0 {
		opt.ConnectTimeout = 10 * time.Second
	}
	if opt.WaitTimeout <= 0 {
		opt.WaitTimeout = 30 * time.Second
	}
	if opt.Dir == "" {
		opt.Dir = "/dev/shm"
	}
	const cmdDepth = 64
	// The harness sizes entries by the design's width, which may differ
	// from opt.Width (then the handshake fails): size for the widest.
	size := offRings + (opt.C2HDepth+opt.H2CDepth)*entrySize(512) + cmdDepth*cmdSize
	f, err := os.CreateTemp(opt.Dir, "rtlbridge-")
	if err != nil {
		return nil, fmt.Errorf("rtlbridge: shared memory: %w", err)
	}
	b := &Bridge{opt: opt, path: f.Name(), done: make(chan struct{})}
	b.stderr.w = opt.Stderr
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	err = f.Truncate(int64(size))
	if err == nil {
		b.mem, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	}
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("rtlbridge: shared memory: %w", err)
	}
	b.store(offC2HBits, uint64(opt.Width))
	b.store(offH2CBits, uint64(opt.Width))
	b.store(offMode, uint64(opt.Mode))
	b.store(offQuantum, opt.Quantum)
	b.store(offC2HDepth, uint64(opt.C2HDepth))
	b.store(offH2CDepth, uint64(opt.H2CDepth))
	b.store(offCmdDepth, cmdDepth)
	b.store(offMagic, magic)

	b.cmd = exec.Command(opt.Binary, b.path)
	b.cmd.Stderr = &b.stderr
	b.cmd.Stdout = &b.stderr
	if err := b.cmd.Start(); err != nil {
		close(b.done)
		return nil, fmt.Errorf("%w: %s: %w", ErrExited, opt.Binary, err)
	}
	go func() {
		err := b.cmd.Wait()
		b.errMu.Lock()
		b.exitErr = fmt.Errorf("%w (%v): %s", ErrExited, err, b.stderr.String())
		b.errMu.Unlock()
		close(b.done)
	}()
	cctx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	if err := b.wait(cctx, func() bool { return b.load(offRTLState) == 1 }); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s did not map its shared memory within %v", ErrConnect, opt.Binary, opt.ConnectTimeout)
		}
		return nil, err
	}
	if c, h := int(b.load(offRTLC2HBits)), int(b.load(offRTLH2CBits)); c != opt.Width || h != opt.Width {
		return nil, fmt.Errorf("%w: the design's s_axis_c2h_tdata_0 is %d bits and m_axis_h2c_tdata_0 %d; the model is configured for %d",
			ErrWidth, c, h, opt.Width)
	}
	// The harness has the file mapped: nothing else needs its name.
	os.Remove(b.path)
	b.c2h = &C2H{b: b, bytes: opt.Width / 8, es: entrySize(opt.Width)}
	b.h2c = &H2C{b: b, bytes: opt.Width / 8, es: entrySize(opt.Width),
		base: offRings + opt.C2HDepth*entrySize(opt.Width)}
	ok = true
	return b, nil
}

func (b *Bridge) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[off]))
}
func (b *Bridge) load(off int) uint64     { return b.word(off).Load() }
func (b *Bridge) store(off int, v uint64) { b.word(off).Store(v) }

// wait polls cond until it holds, the process exits or ctx ends.
func (b *Bridge) wait(ctx context.Context, cond func() bool) error {
	// Spin (yielding) for the first millisecond: a quantum's hand-off
	// takes microseconds, and Go's timers sleep a millisecond or more.
	start := time.Now()
	for spins := 0; ; spins++ {
		if cond() {
			return nil
		}
		select {
		case <-b.done:
			if cond() {
				return nil
			}
			b.errMu.Lock()
			defer b.errMu.Unlock()
			return b.exitErr
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if spins%64 != 0 || time.Since(start) < time.Millisecond {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// waitRTL is wait under WaitTimeout, naming what it waited for.
func (b *Bridge) waitRTL(ctx context.Context, what string, cond func() bool) error {
	cctx, cancel := context.WithTimeout(ctx, b.opt.WaitTimeout)
	defer cancel()
	err := b.wait(cctx, cond)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("%w: %s (cycle %d) after %v", ErrTimeout, what, b.Cycle(), b.opt.WaitTimeout)
	}
	return err
}

// until waits for something the harness does at a quantum's start:
// synchronised, it grants quanta until done holds (the harness answers an
// AXI-Lite transaction within 10 000 cycles, answered or not);
// free-running, it waits.
func (b *Bridge) until(ctx context.Context, what string, done func() bool) error {
	if b.opt.Mode != Synchronised {
		return b.waitRTL(ctx, what, done)
	}
	for i := uint64(0); !done(); i++ {
		if i > 2+10000/b.opt.Quantum {
			return fmt.Errorf("%w: %s (cycle %d) after %d quanta", ErrTimeout, what, b.Cycle(), i)
		}
		if err := b.Tick(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Cycle returns the user-clock cycles the design has run, as of the last
// quantum.
func (b *Bridge) Cycle() uint64 { return b.load(offCycle) }

// Quantum returns the cycles per quantum.
func (b *Bridge) Quantum() uint64 { return b.opt.Quantum }

// Tick runs one quantum: in synchronised mode it grants the RTL process
// Quantum cycles and waits for them; free-running, it waits until the
// clock has moved on by a quantum.
func (b *Bridge) Tick(ctx context.Context) error {
	if err := b.Err(); err != nil {
		return err
	}
	if b.opt.Mode == Synchronised {
		b.grant += b.opt.Quantum
		b.store(offGrant, b.grant)
		return b.waitRTL(ctx, "a quantum", func() bool { return b.Cycle() >= b.grant })
	}
	to := b.Cycle() + b.opt.Quantum
	return b.waitRTL(ctx, "a quantum", func() bool { return b.Cycle() >= to })
}

// fail records the first error the co-simulation found.
func (b *Bridge) fail(err error) error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if b.err == nil {
		b.err = err
	}
	return err
}

// Err returns the first protocol error the bridge found (a tkeep hole, a
// missing tlast, a stalled stream), or the process's exit.
func (b *Bridge) Err() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if b.err != nil {
		return b.err
	}
	select {
	case <-b.done:
		return b.exitErr
	default:
	}
	return nil
}

// Close stops the RTL process and releases the shared memory.
func (b *Bridge) Close() error {
	if b.mem != nil {
		b.store(offStop, 1)
	}
	if b.cmd != nil && b.cmd.Process != nil {
		// A harness that connected stops at the flag; anything else is
		// killed at once.
		grace := 5 * time.Second
		if b.mem == nil || b.load(offRTLState) != 1 {
			grace = 0
		}
		select {
		case <-b.done:
		case <-time.After(grace):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
	if b.mem != nil {
		_ = syscall.Munmap(b.mem)
		b.mem = nil
	}
	os.Remove(b.path)
	return nil
}

// C2H returns the C2H channel 0 stream as an xdmamodel.Source.
func (b *Bridge) C2H() *C2H { return b.c2h }

// H2C returns the H2C channel 0 stream as an xdmamodel.Sink.
func (b *Bridge) H2C() *H2C { return b.h2c }

// ReadReg reads a 32-bit register of the user BAR over AXI-Lite.
func (b *Bridge) ReadReg(ctx context.Context, addr uint32) (uint32, error) {
	v, _, err := b.axil(ctx, cmdRead, addr, 0)
	return v, err
}

// WriteReg writes a 32-bit register of the user BAR over AXI-Lite.
func (b *Bridge) WriteReg(ctx context.Context, addr, v uint32) error {
	_, _, err := b.axil(ctx, cmdWrite, addr, v)
	return err
}

func (b *Bridge) axil(ctx context.Context, op, addr, v uint32) (uint32, uint64, error) {
	b.axilMu.Lock()
	defer b.axilMu.Unlock()
	if err := b.Err(); err != nil {
		return 0, 0, err
	}
	depth := b.load(offCmdDepth)
	slot := offRings + b.opt.C2HDepth*b.c2h.es + b.opt.H2CDepth*b.h2c.es + int(b.cmdTail%depth)*cmdSize
	s := b.mem[slot : slot+cmdSize]
	le.PutUint32(s[0:], op)
	le.PutUint32(s[4:], addr)
	le.PutUint32(s[8:], v)
	le.PutUint32(s[12:], 0xF)
	b.cmdTail++
	b.store(offCmdTail, b.cmdTail)
	name := "read"
	if op == cmdWrite {
		name = "write"
	}
	done := func() bool { return b.load(offCmdDone) >= b.cmdTail }
	if err := b.until(ctx, "AXI-Lite "+name, done); err != nil {
		return 0, 0, err
	}
	resp, rdata, cyc := le.Uint32(s[16:]), le.Uint32(s[20:]), le.Uint64(s[24:])
	switch {
	case resp == respNoResponse:
		return 0, cyc, fmt.Errorf("%w: %s at %#x got no response in 10000 cycles", ErrAXILite, name, addr)
	case resp != 0:
		return 0, cyc, fmt.Errorf("%w: %s at %#x: response %s", ErrAXILite, name, addr, []string{"OKAY", "EXOKAY", "SLVERR", "DECERR"}[resp&3])
	}
	return rdata, cyc, nil
}

// Reset resets the user logic, as the IP's axi_aresetn does when the PCIe
// function resets: it falls for 16 cycles at the next quantum, the beats
// the rings hold are dropped (the IP's FIFOs are flushed), and a packet
// in flight is forgotten. Call it with the engine's channels stopped (after
// Engine.Reset), so that no Read or Write is in progress.
func (b *Bridge) Reset(ctx context.Context) error {
	if err := b.Err(); err != nil {
		return err
	}
	b.resetSeq++
	b.store(offResetSeq, b.resetSeq)
	if err := b.until(ctx, "a reset", func() bool { return b.load(offResetAck) == b.resetSeq }); err != nil {
		return err
	}
	c := b.c2h
	c.head = max(c.head, b.load(offResetTail))
	c.off, c.pkt = 0, 0
	c.lastCycle = b.Cycle()
	b.store(offC2HHead, c.head)
	b.h2c.partial = b.h2c.partial[:0]
	return nil
}

// IRQ returns usr_irq_req as of the last quantum.
func (b *Bridge) IRQ() uint32 { return uint32(b.load(offIRQReq)) }

// AckIRQ pulses usr_irq_ack for the vectors in mask for one cycle at the
// next quantum, as the IP does once it has sent the interrupt.
func (b *Bridge) AckIRQ(mask uint32) {
	b.store(offIRQAckMask, uint64(mask))
	b.ackSeq++
	b.store(offIRQAckSeq, b.ackSeq)
}

// C2H is the design's C2H stream, as the engine's xdmamodel.Source.
type C2H struct {
	b         *Bridge
	bytes, es int
	head      uint64 // beats taken
	off       int    // bytes of the head beat already returned
	pkt       int    // bytes of the current packet so far
	lastCycle uint64 // cycle of the last beat taken
	waiting   bool   // the engine found the stream empty...
	waitFrom  uint64 // ...since this cycle
	packets   uint64
	lastEOP   uint64 // cycle of the last tlast beat taken
}

// Read implements xdmamodel.Source: it returns the bytes of the beats the
// design has sent, up to a packet's end, and returns the credits of the
// beats it takes.
func (c *C2H) Read(p []byte) (int, bool, error) {
	b := c.b
	if err := b.Err(); err != nil {
		return 0, false, err
	}
	depth := uint64(b.opt.C2HDepth)
	tail := b.load(offC2HTail)
	n := 0
	eop := false
	for n < len(p) && c.head < tail {
		e := b.mem[offRings+int(c.head%depth)*c.es:][:c.es]
		cyc, keep, last := le.Uint64(e), le.Uint64(e[8:]), le.Uint64(e[16:])&1 != 0
		if c.off == 0 {
			full := uint64(1)<<c.bytes - 1
			if c.bytes == 64 {
				full = ^uint64(0)
			}
			if !last && keep != full || last && (keep == 0 || keep&(keep+1) != 0) {
				where := "in the middle of a packet"
				if last {
					where = "on a packet's last beat, where it must be contiguous from byte 0"
				}
				return n, false, b.fail(fmt.Errorf("%w: c2h0 beat %d (cycle %d): tkeep %#x %s", ErrKeepHole, c.head, cyc, keep, where))
			}
		}
		kb := bits.OnesCount64(keep)
		m := copy(p[n:], e[32+c.off:32+kb])
		n += m
		c.off += m
		c.pkt += m
		if c.off < kb {
			break
		}
		c.off = 0
		c.head++
		c.lastCycle = cyc
		if last {
			eop = true
			c.pkt = 0
			c.packets++
			c.lastEOP = cyc
			break
		}
		if c.pkt > b.opt.MaxPacket {
			return n, false, b.fail(fmt.Errorf("%w: c2h0 packet ran %d bytes (beat %d, cycle %d) without tlast; Options.MaxPacket is %d",
				ErrNoLast, c.pkt, c.head, cyc, b.opt.MaxPacket))
		}
	}
	b.store(offC2HHead, c.head)
	if n > 0 || eop {
		c.waiting = false
		return n, eop, nil
	}
	// The engine waits from the later of its first empty look and the
	// last beat.
	now := b.Cycle()
	if !c.waiting {
		c.waiting, c.waitFrom = true, max(now, c.lastCycle)
		if c.head == 0 {
			c.waitFrom = c.lastCycle // nothing yet: since the start
		}
	}
	if b.opt.StallCycles != 0 && now-c.waitFrom > b.opt.StallCycles {
		return 0, false, b.fail(fmt.Errorf("%w: c2h0: the engine waited %d cycles without a beat (beats so far: %d, cycle %d)",
			ErrNoValid, now-c.waitFrom, c.head, now))
	}
	return 0, false, nil
}

// Beats returns the beats the model has taken.
func (c *C2H) Beats() uint64 { return c.head }

// LastPacketCycle returns the cycle at which the last complete packet's
// tlast beat was sent.
func (c *C2H) LastPacketCycle() uint64 { return c.lastEOP }

// H2C is the design's H2C stream, as the engine's xdmamodel.Sink; it
// implements xdmamodel.ReadySink, so the engine moves only what the ring
// has room for (the design's tready backpressures the engine).
type H2C struct {
	b         *Bridge
	bytes, es int
	base      int
	tail      uint64
	partial   []byte
}

// Ready returns the bytes the ring takes now.
func (h *H2C) Ready() int {
	depth := uint64(h.b.opt.H2CDepth)
	free := depth - (h.tail - h.b.load(offH2CHead))
	if free <= 1 {
		return 0
	}
	return int(free-1)*h.bytes - len(h.partial)
}

// Write implements xdmamodel.Sink.
func (h *H2C) Write(p []byte, eop bool) error {
	b := h.b
	if err := b.Err(); err != nil {
		return err
	}
	depth := uint64(b.opt.H2CDepth)
	put := func(data []byte, last bool) error {
		if h.tail-b.load(offH2CHead) >= depth {
			return b.fail(fmt.Errorf("%w: %d beats queued", ErrOverrun, depth))
		}
		e := b.mem[h.base+int(h.tail%depth)*h.es:][:h.es]
		keep := uint64(1)<<len(data) - 1
		if len(data) == 64 {
			keep = ^uint64(0)
		}
		le.PutUint64(e[8:], keep)
		var l uint64
		if last {
			l = 1
		}
		le.PutUint64(e[16:], l)
		clear(e[32:])
		copy(e[32:], data)
		h.tail++
		return nil
	}
	for len(p) > 0 {
		if len(h.partial) == 0 && len(p) >= h.bytes && !(eop && len(p) == h.bytes) {
			if err := put(p[:h.bytes], false); err != nil {
				return err
			}
			p = p[h.bytes:]
			continue
		}
		m := min(h.bytes-len(h.partial), len(p))
		h.partial = append(h.partial, p[:m]...)
		p = p[m:]
		if len(h.partial) == h.bytes && (len(p) > 0 || !eop) {
			if err := put(h.partial, false); err != nil {
				return err
			}
			h.partial = h.partial[:0]
		}
	}
	if eop && len(h.partial) > 0 {
		if err := put(h.partial, true); err != nil {
			return err
		}
		h.partial = h.partial[:0]
	}
	b.store(offH2CTail, h.tail)
	return nil
}

// RTLPid returns the RTL process's id.
func (b *Bridge) RTLPid() int { return int(b.load(offRTLPid)) }

// Dir is where Build keeps its binaries by default, from the module root.
func Dir(root string) string { return filepath.Join(root, "build", "rtl") }
