// Package devmodel is the simulated FPGA: it serves QEMU's xdma-model PCI
// device (hw/testbench/qemu), whose register accesses it answers with the
// XDMA engine model, raising the engine's interrupts as MSI-X, MSI or INTx;
// and it moves data between the guest's RAM, the simulated GPU's VRAM (an
// ivshmem-plain BAR) and its own card memory and stream endpoints. It also
// owns the files that back guest RAM and VRAM, and answers the test
// equipment's control port (an ivshmem-doorbell mailbox that no driver
// binds).
//
// The driver sees a PCI function with plain MMIO registers: everything
// behind them follows PG195 through the engine model.
package devmodel

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/ivshmem"
	"github.com/gpufpga/gpufpga/hw/testbench/qmp"
	rl "github.com/gpufpga/gpufpga/hw/testbench/riglayout"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Config sizes the rig.
type Config struct {
	Dir      string // where sockets and backing files go; /dev/shm suits
	GuestRAM int64  // bytes, at most 2 GiB so bus address = file offset
	VRAM     int64  // bytes of simulated GPU memory, a power of two
	CardMem  int    // bytes of card (AXI) memory behind the MM channels
	// IOMMU puts an Intel IOMMU in the machine, translating the FPGA's
	// DMA: the model asks QEMU what each DMA address reaches.
	IOMMU bool
	// Source configures the C2H stream source until the guest reconfigures
	// it through the control mailbox.
	Source acq.SourceConfig
	// Quirks are the behaviours PG195 leaves open that the card shows,
	// until the guest selects others through the control mailbox.
	Quirks xdmamodel.Quirk
	// Align is what the engine's ALIGNMENTS registers report until the
	// guest selects another through the control mailbox; zero means
	// xdmamodel.AnyAlignment.
	Align xdma.Alignments
	// User, when set, is the user's FPGA logic at the IP's user ports
	// (hw/testbench/rtlbridge): it feeds the stream channel and answers
	// the user BAR in place of the Go source, the checking sink and plain
	// registers.
	User *UserLogic
	// QMP is the QMP socket of the QEMU that runs the rig, through which
	// the control mailbox injects PCIe errors (QEMU's
	// pcie_aer_inject_error); without one, injection is refused.
	QMP string
}

// UserLogic is the user side of the XDMA IP: what its stream channels
// meet and what its AXI-Lite master reaches. The rig's stream channel is
// channel 1 (its channel 0 is memory mapped).
type UserLogic struct {
	C2H  xdmamodel.Source
	H2C  xdmamodel.Sink
	Regs UserRegisters
	// Interrupts, when set, carries usr_irq_req to the engine's user
	// interrupts and its acknowledgements back.
	Interrupts UserInterrupts
	// Reset, when set, resets the user logic when the function resets
	// (axi_aresetn follows the PCIe reset), after the engine.
	Reset UserReset
	// Clock, when set, ties the user clock to the guest's virtual clock
	// (a synchronised rtlbridge): QEMU's device ticks the model every
	// quantum of CycleNS-long cycles of virtual time, and the rig runs
	// the design up to that time, then the engine; it moves data and
	// raises interrupts only then. Under QEMU's -icount, what the design
	// sees of the guest and the guest of it then depend on the guest's
	// instructions, not on the host's load. Without Clock, the design
	// and the engine run on the host's time.
	//
	// The design's clock starts at the first tick after the card's
	// first BAR access (in a guest, the driver's probe): the boot before
	// it, hundreds of millions of cycles in which nothing reaches the
	// card, is not co-simulated, and is ticked every millisecond only.
	Clock UserClock
	// CycleNS is the guest's virtual nanoseconds per user-clock cycle,
	// with Clock; 0 means 4 (250 MHz, the XDMA IP's axi_aclk at 256
	// bits on a Gen3 x8 link).
	CycleNS uint64
}

// UserClock is a user design whose clock the rig grants a quantum at a
// time: rtlbridge's synchronised Bridge.
type UserClock interface {
	Tick(ctx context.Context) error // runs one quantum
	Cycle() uint64                  // cycles run so far
	Quantum() uint64                // cycles a Tick runs
}

// UserReset resets the user logic and flushes the IP's stream FIFOs.
type UserReset interface {
	Reset(ctx context.Context) error
}

// UserInterrupts is the user logic's usr_irq_req and usr_irq_ack.
type UserInterrupts interface {
	IRQ() uint32
	AckIRQ(mask uint32)
}

// UserRegisters is the AXI-Lite slave behind the user BAR.
type UserRegisters interface {
	ReadReg(ctx context.Context, addr uint32) (uint32, error)
	WriteReg(ctx context.Context, addr, v uint32) error
}

// fpgaID is the xdma-model device's qdev id, which QEMU's monitor
// commands name it by.
const fpgaID = "fpga"

// aerErrors are the PCIe errors the control mailbox injects for each class
// (rl.AER*), as pcie_aer_inject_error arguments: a poisoned TLP
// (uncorrectable, non-fatal by the AER capability's default severity) and
// a malformed TLP (fatal by default). Not correctable errors: QEMU 7.2
// sends their messages no further than the function itself.
var aerErrors = map[uint32]string{
	rl.AERNonFatal: fpgaID + " POISON_TLP",
	rl.AERFatal:    fpgaID + " MALF_TLP",
}

// The rig's channels: 0 is memory-mapped to card memory in both
// directions, 1 is the acquisition stream (C2H) and a checking sink (H2C).
// A real XDMA IP is either all MM or all stream; one rig offers both so the
// driver's handling of each is exercised.
var channelLayout = struct{ h2c, c2h []bool }{
	h2c: []bool{false, true},
	c2h: []bool{false, true},
}

// Rig is a running simulated FPGA and GPU.
type Rig struct {
	cfg Config

	ramPath, vramPath string
	ram, vram         []byte
	fpga              *pciServer
	ctl               *port
	userRegs          sync.Map // the user BAR's 32-bit registers: offset -> uint32

	engine *xdmamodel.Engine
	source switchableSource
	// sourceSnap is the source's counters as of the last snapshot request,
	// so the fields read one by one agree with each other.
	sourceSnap acq.SourceStats
	sink       *acq.Sink
	card       []byte

	kick       chan struct{}
	lateWrites atomic.Uint64
	// iommuFaults counts DMA writes the IOMMU dropped.
	iommuFaults atomic.Uint64
	lateMu      sync.Mutex
	lateAddrs   []uint64
	// unmapped counts DMA accesses to VRAM pages no peer had mapped.
	unmapped     atomic.Uint64
	unmappedAddr []uint64 // the first few, under lateMu
	// master is the function's Bus Master Enable, as QEMU reports it:
	// with it off, no DMA leaves the function; masterOffWrites counts the
	// writes it held back.
	master          atomic.Bool
	masterOffWrites atomic.Uint64
	// userClock is where the design's clock stands against the guest's
	// (UserLogic.Clock); clockOffset is the guest's time, in cycles,
	// when the design's cycle 0 would have been. Only the request
	// goroutine touches them.
	userClock   userClockState
	clockOffset uint64
	cycleNS     uint64 // UserLogic.CycleNS, or its default
	// failResets makes every reset leave the BARs unanswered until it is
	// cleared; failedReset says the last reset did, until the next one.
	resetMu     sync.Mutex
	failResets  bool
	failedReset bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

// New creates the backing files and the ivshmem socket. QEMU may be
// started once New returns; Serve must run alongside it.
func New(cfg Config) (*Rig, error) {
	if cfg.GuestRAM <= 0 || cfg.GuestRAM > 2<<30 {
		return nil, fmt.Errorf("devmodel: guest RAM %d: want 1 byte to 2 GiB", cfg.GuestRAM)
	}
	if cfg.VRAM < 2*rl.VramPage || cfg.VRAM&(cfg.VRAM-1) != 0 {
		return nil, fmt.Errorf("devmodel: VRAM %d: want a power of two of at least 128 KiB", cfg.VRAM)
	}
	if cfg.CardMem <= 0 {
		cfg.CardMem = 64 << 20
	}
	r := &Rig{
		cfg:      cfg,
		ramPath:  filepath.Join(cfg.Dir, "guest-ram"),
		vramPath: filepath.Join(cfg.Dir, "vram"),
		card:     make([]byte, cfg.CardMem),
		sink:     &acq.Sink{},
		kick:     make(chan struct{}, 1),
	}
	if u := cfg.User; u != nil && u.Clock != nil {
		r.cycleNS = cmp.Or(u.CycleNS, 4)
	}
	r.source.set(acq.NewSource(cfg.Source))
	ok := false
	var err error
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	if r.ram, err = mapFile(r.ramPath, cfg.GuestRAM); err != nil {
		return nil, err
	}
	if r.vram, err = mapFile(r.vramPath, cfg.VRAM); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(r.vram[rl.VramOffMagic:], rl.VramMagic)
	binary.LittleEndian.PutUint32(r.vram[rl.VramOffVersion:], rl.VramVersion)
	binary.LittleEndian.PutUint32(r.vram[rl.VramOffPages:], uint32(cfg.VRAM/rl.VramPage))

	if r.fpga, err = listenPCI(filepath.Join(cfg.Dir, "fpga.sock")); err != nil {
		return nil, err
	}
	r.fpga.ticked = r.ticked()
	if r.ctl, err = newPort(filepath.Join(cfg.Dir, "ctl.sock"), rl.CtlMagic, 1); err != nil {
		return nil, err
	}
	var src xdmamodel.Source = &r.source
	var sink xdmamodel.Sink = r.sink
	if cfg.User != nil {
		src, sink = cfg.User.C2H, cfg.User.H2C
	}
	r.engine, err = xdmamodel.NewEngine(xdmamodel.Config{
		H2C:   channels(channelLayout.h2c, nil, sink),
		C2H:   channels(channelLayout.c2h, src, nil),
		Bus:   &guestBus{r},
		Card:  cardMemory(r.card),
		Raise: r.raise,
		Level: r.level,
	})
	if err != nil {
		return nil, err
	}
	if err := r.engine.SetQuirks(cfg.Quirks); err != nil {
		return nil, err
	}
	if cfg.Align != (xdma.Alignments{}) {
		if err := r.engine.SetAlignments(cfg.Align); err != nil {
			return nil, err
		}
	}
	ok = true
	return r, nil
}

func channels(stream []bool, src xdmamodel.Source, sink xdmamodel.Sink) []xdmamodel.ChannelConfig {
	var out []xdmamodel.ChannelConfig
	for _, s := range stream {
		c := xdmamodel.ChannelConfig{Stream: s}
		if s {
			c.Source, c.Sink = src, sink
		}
		out = append(out, c)
	}
	return out
}

// mapFile creates a file of size bytes at path and maps it shared.
func mapFile(path string, size int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("devmodel: mmap %s: %w", path, err)
	}
	return b, nil
}

// QEMUArgs returns the QEMU options that attach the rig: guest RAM backed
// by the shared file, the FPGA (xdma-model, which needs the rig's QEMU),
// the control port (ivshmem-doorbell) and the GPU (ivshmem-plain).
func (r *Rig) QEMUArgs() []string {
	mib := func(n int64) string { return fmt.Sprintf("%dM", n>>20) }
	var iommu []string
	if r.cfg.IOMMU {
		// Before the devices it translates for.
		iommu = []string{"-device", "intel-iommu,intremap=off"}
	}
	// User logic behind the user BAR: PG195's AXI-Lite master BAR, which
	// then comes first (BAR0) and the DMA BAR after it. 4 KiB: the
	// driver's search for the engine's registers passes over it.
	userBAR := ""
	if r.cfg.User != nil {
		userBAR = ",user-bar-size=4096"
	}
	if r.ticked() {
		userBAR += fmt.Sprintf(",tick-ns=%d", r.cfg.User.Clock.Quantum()*r.cycleNS)
	}
	return append(iommu,
		"-machine", "q35,memory-backend=ram0",
		// Native PCIe hotplug on the root ports rather than ACPI's: QEMU
		// then sets the port's Data Link Layer Link Active for the card
		// present at boot, which the kernel waits for after the secondary
		// bus reset of a fatal AER error's recovery, as on a real port.
		"-global", "ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off",
		"-m", mib(r.cfg.GuestRAM),
		"-object", fmt.Sprintf("memory-backend-file,id=ram0,size=%s,mem-path=%s,share=on", mib(r.cfg.GuestRAM), r.ramPath),
		// Behind a root port, as a card in a slot: a PCIe link with its
		// speed and width, rather than an integrated endpoint.
		"-device", "pcie-root-port,id=fpga-slot,chassis=1,slot=1",
		"-device", fmt.Sprintf("xdma-model,id=%s,bus=fpga-slot,socket=%s%s", fpgaID, r.fpga.sock, userBAR),
		"-chardev", fmt.Sprintf("socket,id=ctl,path=%s", r.ctl.sock),
		"-device", "ivshmem-doorbell,chardev=ctl,vectors=1",
		"-object", fmt.Sprintf("memory-backend-file,id=vram,size=%s,mem-path=%s,share=on", mib(r.cfg.VRAM), r.vramPath),
		"-device", "ivshmem-plain,memdev=vram",
	)
}

// Serve accepts QEMU's connections, then answers the device and the
// control mailbox and runs the engine until ctx ends or Close is called.
func (r *Rig) Serve(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	// QEMU connects as it realizes each device, in command-line order, and
	// the ivshmem one waits for its setup messages: accept both at once.
	var wg sync.WaitGroup
	var errFPGA, errCtl error
	wg.Add(2)
	go func() {
		defer wg.Done()
		errFPGA = r.fpga.accept(ctx)
	}()
	go func() {
		defer wg.Done()
		errCtl = r.ctl.server.Serve(ctx)
	}()
	wg.Wait()
	if err := errors.Join(errFPGA, errCtl); err != nil {
		return err
	}
	r.fpga.serve(r, r.fail)
	r.wg.Add(1)
	go r.serveMailbox(ctx, r.ctl, rl.CtlMbox, r.control)
	if !r.ticked() {
		r.wg.Add(1)
		go r.runEngine(ctx)
	}
	return nil
}

// userClockState is the design's clock in a ticked rig.
type userClockState int

const (
	clockHeld     userClockState = iota // no BAR access yet
	clockAccessed                       // starts at the next tick
	clockRunning
	clockFailed // the design failed a quantum: ticks answer at once
)

// ticked reports whether QEMU's virtual clock drives the card (UserLogic.Clock).
func (r *Rig) ticked() bool { return r.cfg.User != nil && r.cfg.User.Clock != nil }

// Err returns the first error the rig met serving the guest, the
// descriptors it was handed that the engine's alignments forbid (a driver
// must never start one), or DMA that reached GPU memory after the driver
// let it go.
func (r *Rig) Err() error {
	// Before errMu: the engine calls fail, which takes errMu, under its lock.
	violations := r.engine.Violations()
	unmapped, at := r.Unmapped()
	r.errMu.Lock()
	defer r.errMu.Unlock()
	switch {
	case r.err != nil:
		return r.err
	case violations != 0:
		return fmt.Errorf("devmodel: the engine saw %d violations: descriptors its ALIGNMENTS forbid, or descriptor fetches and writebacks at an address not programmed since the last reset", violations)
	case unmapped != 0:
		return fmt.Errorf("devmodel: %d DMA accesses reached VRAM pages no peer had mapped (memory the driver had let go), first at VRAM offsets %#x", unmapped, at)
	}
	return nil
}

func (r *Rig) fail(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// Close stops the rig and removes its files.
func (r *Rig) Close() error {
	if r.cancel != nil {
		r.cancel()
	}
	if r.fpga != nil {
		r.fpga.close()
	}
	r.wg.Wait()
	if r.ctl != nil {
		r.ctl.close()
	}
	for _, b := range [][]byte{r.ram, r.vram} {
		if b != nil {
			unix.Munmap(b)
		}
	}
	for _, p := range []string{r.ramPath, r.vramPath} {
		os.Remove(p)
	}
	return nil
}

// port is one ivshmem-doorbell device: its BAR2 memory and its server.
type port struct {
	sock   string
	file   *os.File
	mem    []byte
	server *ivshmem.Server
}

func newPort(sock string, magic uint32, vectors int) (*port, error) {
	fd, err := unix.MemfdCreate(filepath.Base(sock), unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("devmodel: memfd: %w", err)
	}
	p := &port{sock: sock, file: os.NewFile(uintptr(fd), sock)}
	if err := p.file.Truncate(rl.MboxSize); err != nil {
		p.close()
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	if p.mem, err = unix.Mmap(fd, 0, rl.MboxSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		p.close()
		return nil, fmt.Errorf("devmodel: mmap mailbox: %w", err)
	}
	binary.LittleEndian.PutUint32(p.mem[rl.MboxOffVersion:], rl.MboxVersion)
	binary.LittleEndian.PutUint32(p.mem[rl.MboxOffMagic:], magic)
	if p.server, err = ivshmem.Listen(sock, p.file, vectors); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *port) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&p.mem[off]))
}

func (p *port) close() {
	if p.server != nil {
		p.server.Close()
	}
	if p.mem != nil {
		unix.Munmap(p.mem)
	}
	p.file.Close()
	os.Remove(p.sock)
}

// serveMailbox answers requests on one mailbox each time the guest rings
// its vector.
func (r *Rig) serveMailbox(ctx context.Context, p *port, base int, handle func(op, a0, a1, a2 uint32) (status, v0, v1 uint32)) {
	defer r.wg.Done()
	efd := p.server.Doorbell(rl.VecMbox)
	var buf [8]byte
	var last uint32
	for ctx.Err() == nil {
		if err := waitReadable(ctx, efd); err != nil {
			return
		}
		if _, err := unix.Read(efd, buf[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
			r.fail(fmt.Errorf("devmodel: doorbell %s: %w", p.sock, err))
			return
		}
		seq := atomic.LoadUint32(p.word(base + rl.ReqSeq))
		if seq == last {
			continue
		}
		last = seq
		st, v0, v1 := handle(atomic.LoadUint32(p.word(base+rl.ReqOp)), atomic.LoadUint32(p.word(base+rl.ReqArg0)),
			atomic.LoadUint32(p.word(base+rl.ReqArg1)), atomic.LoadUint32(p.word(base+rl.ReqArg2)))
		atomic.StoreUint32(p.word(base+rl.RspStatus), st)
		atomic.StoreUint32(p.word(base+rl.RspVal0), v0)
		atomic.StoreUint32(p.word(base+rl.RspVal1), v1)
		atomic.StoreUint32(p.word(base+rl.RspSeq), seq)
	}
}

// waitReadable polls fd, waking every 100 ms to notice ctx.
func waitReadable(ctx context.Context, fd int) error {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if n > 0 {
			if fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
				return errors.New("devmodel: doorbell closed")
			}
			return nil
		}
	}
}

// readBAR answers a read of the FPGA's BARs: the DMA BAR is the engine's
// register space, the user BAR plain registers, both 32 bits at a time (an
// 8-byte access is two, not atomic against the engine's steps).
func (r *Rig) readBAR(bar int, addr uint64, size int) uint64 {
	r.accessed()
	if bar == pciBarUser && r.cfg.User != nil {
		v := r.userRead(addr)
		if size == 8 {
			v |= r.userRead(addr+4) << 32
		}
		return v
	}
	if bar == pciBarUser {
		v := r.userWord(addr)
		if size == 8 {
			v |= r.userWord(addr+4) << 32
		}
		return v
	}
	v := uint64(r.engine.ReadReg(uint32(addr)))
	if size == 8 {
		v |= uint64(r.engine.ReadReg(uint32(addr+4))) << 32
	}
	return v
}

func (r *Rig) writeBAR(bar int, addr uint64, size int, v uint64) {
	r.accessed()
	if bar == pciBarUser && r.cfg.User != nil {
		r.userWrite(addr, uint32(v))
		if size == 8 {
			r.userWrite(addr+4, uint32(v>>32))
		}
		return
	}
	if bar == pciBarUser {
		r.userRegs.Store(addr, uint32(v))
		if size == 8 {
			r.userRegs.Store(addr+4, uint32(v>>32))
		}
		return
	}
	r.engine.WriteReg(uint32(addr), uint32(v))
	if size == 8 {
		r.engine.WriteReg(uint32(addr+4), uint32(v>>32))
	}
	r.wake()
}

// userRead reads a register of the user logic over AXI-Lite. A
// transaction that fails (an error response, none, or a dead RTL process)
// reads all ones, as a completer abort does, and fails the rig.
func (r *Rig) userRead(addr uint64) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	v, err := r.cfg.User.Regs.ReadReg(ctx, uint32(addr))
	if err != nil {
		r.fail(fmt.Errorf("devmodel: user BAR read at %#x: %w", addr, err))
		return 0xFFFFFFFF
	}
	return uint64(v)
}

func (r *Rig) userWrite(addr uint64, v uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	if err := r.cfg.User.Regs.WriteReg(ctx, uint32(addr), v); err != nil {
		r.fail(fmt.Errorf("devmodel: user BAR write at %#x: %w", addr, err))
	}
}

// userWord reads a 32-bit register of the user BAR: what was written, or 0.
func (r *Rig) userWord(addr uint64) uint64 {
	v, _ := r.userRegs.Load(addr)
	u, _ := v.(uint32)
	return uint64(u)
}

func (r *Rig) setMode(mode int) { r.engine.SetInterruptMode(xdmamodel.InterruptMode(mode)) }

// reset is the function's reset: the engine and the user logic back at
// their reset values, bus mastering off, and the link down or up again as
// CtlFailReset asked.
func (r *Rig) reset() {
	r.engine.Reset()
	r.master.Store(false)
	if r.cfg.User != nil && r.cfg.User.Reset != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.cfg.User.Reset.Reset(ctx); err != nil {
			r.fail(fmt.Errorf("devmodel: resetting the user logic: %w", err))
		}
	}
	r.resetMu.Lock()
	defer r.resetMu.Unlock()
	switch {
	case r.failResets:
		r.failedReset = true
		r.engine.SetLinkDown(true)
	case r.failedReset:
		r.failedReset = false
		r.engine.SetLinkDown(false)
	}
}

func (r *Rig) setBusMaster(on bool) { r.master.Store(on) }

func split(v uint64) (uint32, uint32, uint32) { return 0, uint32(v), uint32(v >> 32) }

// field answers a read of counter i of values, or EINVAL.
func field(i uint32, values ...uint64) (uint32, uint32, uint32) {
	if int(i) >= len(values) {
		return uint32(unix.EINVAL), 0, 0
	}
	return split(values[i])
}

func (r *Rig) control(op, a0, a1, a2 uint32) (uint32, uint32, uint32) {
	einval := uint32(unix.EINVAL)
	switch op {
	case rl.CtlFault:
		if a0 > 1 || !xdmamodel.Fault(a2).Valid() {
			return einval, 0, 0
		}
		if err := r.engine.InjectFault(xdma.Direction(a0), int(a1), xdmamodel.Fault(a2)); err != nil {
			return uint32(unix.ENODEV), 0, 0
		}
		return 0, 0, 0
	case rl.CtlLink:
		r.engine.SetLinkDown(a0 != 0)
		return 0, 0, 0
	case rl.CtlSource:
		r.source.set(acq.NewSource(acq.SourceConfig{PayloadLen: int(a0), Rate: float64(a1), FIFO: int(a2)}))
		r.wake()
		return 0, 0, 0
	case rl.CtlSourceSnap:
		r.sourceSnap = r.source.stats()
		return 0, 0, 0
	case rl.CtlSourceStats:
		st := r.sourceSnap
		// Indexed by the RIG_SRC_* field numbers.
		return field(a0, st.Generated, st.Delivered, st.Dropped, st.Queued, st.Bytes)
	case rl.CtlSinkStats:
		fs, packets := r.sink.Stats()
		// Indexed by the RIG_SINK_* field numbers.
		return field(a0, fs.Frames, fs.Gaps, fs.Duplicates, fs.CRCFailures, packets)
	case rl.CtlLateWrites:
		return split(r.lateWrites.Load())
	case rl.CtlIOMMUFaults:
		return split(r.iommuFaults.Load())
	case rl.CtlUnmapped:
		return split(r.unmapped.Load())
	case rl.CtlUserIRQ:
		if r.cfg.User != nil && r.cfg.User.Interrupts != nil {
			return uint32(unix.EBUSY), 0, 0 // the RTL's lines, not ours
		}
		return 0, r.engine.UserIRQ(a0), 0
	case rl.CtlUserClock:
		if !r.ticked() {
			return 0, 0, 0
		}
		return 0, uint32(r.cycleNS), uint32(r.cfg.User.Clock.Quantum())
	case rl.CtlStalled:
		if a0 > 1 {
			return einval, 0, 0
		}
		stalled, err := r.engine.Stalled(xdma.Direction(a0), int(a1))
		if err != nil {
			return uint32(unix.ENODEV), 0, 0
		}
		if stalled {
			return 0, 1, 0
		}
		return 0, 0, 0
	case rl.CtlFailReset:
		r.resetMu.Lock()
		r.failResets = a0 != 0
		if r.failResets {
			// Off the bus from now on, until a reset after it is cleared.
			r.failedReset = true
			r.engine.SetLinkDown(true)
		}
		r.resetMu.Unlock()
		return 0, 0, 0
	case rl.CtlAlign:
		was := r.engine.Alignments()
		if r.engine.SetAlignments(xdma.DecodeAlignments(a0)) != nil {
			return einval, 0, 0
		}
		return 0, was.Encode(), 0
	case rl.CtlViolations:
		return split(r.engine.Violations())
	case rl.CtlQuirks:
		was := r.engine.Quirks()
		if r.engine.SetQuirks(xdmamodel.Quirk(a0)) != nil {
			return einval, 0, 0
		}
		return 0, uint32(was), 0
	case rl.CtlAER:
		if _, ok := aerErrors[a0]; !ok {
			return einval, 0, 0
		}
		if err := r.injectAER(a0); err != nil {
			r.fail(err)
			return uint32(unix.EIO), 0, 0
		}
		return 0, 0, 0
	}
	return einval, 0, 0
}

// injectAER has QEMU report an error of class from the FPGA to its root
// port, as a card's PCIe core would; the guest's AER driver takes it from
// there.
func (r *Rig) injectAER(class uint32) error {
	if r.cfg.QMP == "" {
		return errors.New("devmodel: AER injection without a QMP socket")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := qmp.Dial(ctx, r.cfg.QMP)
	if err != nil {
		return fmt.Errorf("devmodel: AER injection: %w", err)
	}
	defer q.Close()
	cmd := "pcie_aer_inject_error " + aerErrors[class]
	out, err := q.HMP(ctx, cmd)
	if err != nil {
		return fmt.Errorf("devmodel: %s: %w", cmd, err)
	}
	// The command prints "OK id: ..." or why it failed.
	if !strings.HasPrefix(out, "OK") {
		return fmt.Errorf("devmodel: %s: %q", cmd, out)
	}
	return nil
}

func (r *Rig) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Rig) raise(vec int) {
	if err := r.fpga.send(pciIRQEdge, uint32(vec)); err != nil {
		r.fail(fmt.Errorf("devmodel: interrupt %d: %w", vec, err))
	}
}

func (r *Rig) level(asserted bool) {
	var v uint32
	if asserted {
		v = 1
	}
	if err := r.fpga.send(pciIRQLevel, v); err != nil {
		r.fail(fmt.Errorf("devmodel: INTx: %w", err))
	}
}

// runEngine steps the engine while it progresses. A channel waiting for
// the stream source is retried every millisecond: the source produces
// frames by the clock. The user logic's interrupt requests are sampled
// as often.
func (r *Rig) runEngine(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var irq UserInterrupts
	if r.cfg.User != nil {
		irq = r.cfg.User.Interrupts
	}
	for {
		r.stepEngine(irq)
		// The user logic's interrupt lines are polled, like the source.
		if r.engine.Busy() || irq != nil {
			select {
			case <-ctx.Done():
				return
			case <-r.kick:
			case <-tick.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
	}
}

// tick runs the user clock up to ns of the guest's virtual clock, a
// quantum at a time, the engine after each: QEMU's device waits for it
// with the guest stopped. An AXI-Lite transaction the guest waited on
// has run the design ahead (an MMIO read stalls the CPU, not the
// card's clock): those quanta count, so the design's cycle stays within
// a quantum of the guest's time unless a transaction holds it ahead.
func (r *Rig) tick(ns uint64) (next uint64) {
	u := r.cfg.User
	now := ns / r.cycleNS
	switch r.userClock {
	case clockHeld:
		r.stepEngine(u.Interrupts)
		return max(heldTickNS, u.Clock.Quantum()*r.cycleNS)
	case clockAccessed:
		r.clockOffset = now - min(now, u.Clock.Cycle())
		r.userClock = clockRunning
	case clockFailed:
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	target := now - r.clockOffset
	for u.Clock.Cycle()+u.Clock.Quantum() <= target {
		if err := u.Clock.Tick(ctx); err != nil {
			// The rig has failed: the ticks that follow answer at
			// once, so the guest runs on to its own end.
			r.fail(fmt.Errorf("devmodel: user clock at %d ns: %w", ns, err))
			r.userClock = clockFailed
			return 0
		}
		r.stepEngine(u.Interrupts)
	}
	r.stepEngine(u.Interrupts)
	return 0
}

// heldTickNS is how often the card is ticked while the design's clock
// waits for the first BAR access: nothing reaches the card before it, and
// a tick every quantum would cost a boot tens of thousands of them.
const heldTickNS = 1_000_000

// answerTimeout bounds the work behind one of the device's requests: a
// tick, or an AXI-Lite transaction. QEMU's device gives up on an answer
// after 10 s and reads the card as gone from then on.
const answerTimeout = 8 * time.Second

// accessed notes a BAR access: the design's clock starts at the next tick.
func (r *Rig) accessed() {
	if r.userClock == clockHeld {
		r.userClock = clockAccessed
	}
}

// stepEngine steps the engine while it progresses, then passes the user
// logic's interrupt requests to it and its acknowledgements back.
func (r *Rig) stepEngine(irq UserInterrupts) {
	for r.engine.Step() {
	}
	if irq != nil {
		if ack := r.engine.UserIRQ(irq.IRQ()); ack != 0 {
			irq.AckIRQ(ack)
		}
	}
}

// LateWrites returns the DMA writes that landed in VRAM pages the simulated
// GPU had not allocated (freed, or never handed out), and their first few
// addresses.
func (r *Rig) LateWrites() (uint64, []uint64) {
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	return r.lateWrites.Load(), append([]uint64(nil), r.lateAddrs...)
}

// Unmapped returns the DMA accesses that reached VRAM pages no peer had
// mapped, and their first few page offsets.
func (r *Rig) Unmapped() (uint64, []uint64) {
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	return r.unmapped.Load(), append([]uint64(nil), r.unmappedAddr...)
}

// switchableSource lets the guest replace the source between streams.
type switchableSource struct {
	mu  sync.Mutex
	src *acq.Source
}

func (s *switchableSource) set(src *acq.Source) {
	s.mu.Lock()
	s.src = src
	s.mu.Unlock()
}

func (s *switchableSource) Read(p []byte) (int, bool, error) {
	s.mu.Lock()
	src := s.src
	s.mu.Unlock()
	return src.Read(p)
}

func (s *switchableSource) stats() acq.SourceStats {
	s.mu.Lock()
	src := s.src
	s.mu.Unlock()
	return src.Stats()
}

type cardMemory []byte

func (c cardMemory) access(addr uint64, n int) ([]byte, error) {
	if addr >= uint64(len(c)) || uint64(n) > uint64(len(c))-addr {
		return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeAXIDecode}
	}
	return c[addr : addr+uint64(n)], nil
}

func (c cardMemory) Read(addr uint64, p []byte) error {
	b, err := c.access(addr, len(p))
	if err == nil {
		copy(p, b)
	}
	return err
}

func (c cardMemory) Write(addr uint64, p []byte) error {
	b, err := c.access(addr, len(p))
	if err == nil {
		copy(b, p)
	}
	return err
}

// guestBus resolves bus addresses the way the guest's PCI topology does
// without an IOMMU: guest RAM at its physical addresses, VRAM at the BAR
// address the simulated GPU driver announced in the VRAM header.
type guestBus struct{ r *Rig }

// errIOMMUFault is DMA the IOMMU refused.
var errIOMMUFault = errors.New("devmodel: IOMMU fault")

// resolve returns the memory DMA of up to n bytes at addr reaches: fewer
// where the IOMMU maps only part of them contiguously.
func (g *guestBus) resolve(addr uint64, n int, write bool) ([]byte, error) {
	r := g.r
	if r.cfg.IOMMU {
		region, off, got, err := r.fpga.translate(addr, n, write)
		if err != nil {
			return nil, err
		}
		switch region {
		case pciRegionRAM:
			return r.ram[off : off+uint64(got)], nil
		case pciRegionVRAM:
			g.checkVRAM(off, uint64(got), write)
			return r.vram[off : off+uint64(got)], nil
		}
		return nil, errIOMMUFault
	}
	end := addr + uint64(n)
	if end < addr {
		return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
	}
	if end <= uint64(len(r.ram)) {
		return r.ram[addr:end], nil
	}
	bar := atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.vram[rl.VramOffBar])))
	if bar != 0 && addr >= bar+rl.VramPage && end <= bar+uint64(len(r.vram)) {
		off := addr - bar
		g.checkVRAM(off, uint64(n), write)
		return r.vram[off : off+uint64(n)], nil
	}
	return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
}

// vramByte reads the VRAM header's byte for page p of the table at table,
// which the guest writes while the model reads.
func (r *Rig) vramByte(table, p uint64) byte {
	return byte(atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.vram[table+p&^3]))) >> (8 * (p & 3)))
}

// checkVRAM records DMA to VRAM pages whose last peer mapping has gone
// (memory a driver has let go, whether or not the GPU still holds it; a
// page no driver ever mapped is a user-space driver's, at its physical
// address), and writes into pages that are not allocated.
func (g *guestBus) checkVRAM(off, n uint64, write bool) {
	r := g.r
	for p := off / rl.VramPage; p <= (off+n-1)/rl.VramPage; p++ {
		if r.vramByte(rl.VramOffPeers, p) == rl.VramPeersReleased {
			r.unmapped.Add(1)
			r.lateMu.Lock()
			if len(r.unmappedAddr) < 16 {
				r.unmappedAddr = append(r.unmappedAddr, p*rl.VramPage)
			}
			r.lateMu.Unlock()
		}
		if !write || r.vramByte(rl.VramOffState, p) != 0 {
			continue
		}
		r.lateWrites.Add(1)
		binary.LittleEndian.PutUint64(r.vram[rl.VramOffLate:], r.lateWrites.Load())
		r.lateMu.Lock()
		if len(r.lateAddrs) < 16 {
			r.lateAddrs = append(r.lateAddrs, p*rl.VramPage)
		}
		r.lateMu.Unlock()
	}
}

func (g *guestBus) Read(addr uint64, p []byte) error  { return g.access(addr, p, false) }
func (g *guestBus) Write(addr uint64, p []byte) error { return g.access(addr, p, true) }

// access moves p to or from addr, piece by piece where the IOMMU maps it
// so. Where the IOMMU refuses, a read gets an Unsupported Request
// completion, and a write is dropped and counted: a posted write has no
// completion to fail, so the engine never learns.
func (g *guestBus) access(addr uint64, p []byte, write bool) error {
	if !g.r.master.Load() {
		if write {
			g.r.masterOffWrites.Add(1)
			return nil
		}
		return &xdma.BusError{Addr: addr, Len: len(p), Code: xdma.ErrCodeUnsupportedRequest}
	}
	for len(p) > 0 {
		b, err := g.resolve(addr, len(p), write)
		if errors.Is(err, errIOMMUFault) {
			if write {
				g.r.iommuFaults.Add(1)
				return nil
			}
			return &xdma.BusError{Addr: addr, Len: len(p), Code: xdma.ErrCodeUnsupportedRequest}
		}
		if err != nil {
			return err
		}
		var n int
		if write {
			n = copy(b, p)
		} else {
			n = copy(p, b)
		}
		addr, p = addr+uint64(n), p[n:]
	}
	return nil
}
