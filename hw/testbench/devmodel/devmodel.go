// Package devmodel is the simulated FPGA: it serves an ivshmem-doorbell
// device to QEMU, answers the driver's register mailbox with the XDMA engine
// model of pkg/xdma, and moves data between the guest's RAM, the simulated
// GPU's VRAM (an ivshmem-plain BAR) and its own card memory and stream
// endpoints. It also owns the files that back guest RAM and VRAM.
//
// The only thing a driver can tell apart from hardware is the register
// transport: MMIO becomes a mailbox in the device's BAR2 plus a doorbell
// (hw/testbench/include/gpufpga_rig.h). Everything behind the registers
// follows PG195 through the engine model.
package devmodel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/ivshmem"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// Config sizes the rig.
type Config struct {
	Dir      string // where sockets and backing files go; /dev/shm suits
	GuestRAM int64  // bytes, at most 2 GiB so bus address = file offset
	VRAM     int64  // bytes of simulated GPU memory, a power of two
	CardMem  int    // bytes of card (AXI) memory behind the MM channels
	// Source configures the C2H stream source until the guest reconfigures
	// it through the control mailbox.
	Source acq.SourceConfig
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

	ramPath, vramPath, sockPath string
	ram, vram, mbox             []byte
	mboxFile                    *os.File
	server                      *ivshmem.Server

	engine *xdma.Engine
	source switchableSource
	sink   *acq.Sink
	card   []byte

	kick       chan struct{}
	lateWrites atomic.Uint64
	lateMu     sync.Mutex
	lateAddrs  []uint64

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
	if cfg.VRAM < 2*vramPage || cfg.VRAM&(cfg.VRAM-1) != 0 {
		return nil, fmt.Errorf("devmodel: VRAM %d: want a power of two of at least 128 KiB", cfg.VRAM)
	}
	if cfg.CardMem <= 0 {
		cfg.CardMem = 64 << 20
	}
	r := &Rig{
		cfg:      cfg,
		ramPath:  filepath.Join(cfg.Dir, "guest-ram"),
		vramPath: filepath.Join(cfg.Dir, "vram"),
		sockPath: filepath.Join(cfg.Dir, "xdma.sock"),
		card:     make([]byte, cfg.CardMem),
		sink:     &acq.Sink{},
		kick:     make(chan struct{}, 1),
	}
	r.source.set(acq.NewSource(cfg.Source))
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	var err error
	if r.ram, err = mapFile(r.ramPath, cfg.GuestRAM); err != nil {
		return nil, err
	}
	if r.vram, err = mapFile(r.vramPath, cfg.VRAM); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(r.vram[vramOffMagic:], vramMagic)
	binary.LittleEndian.PutUint32(r.vram[vramOffVersion:], vramVersion)
	binary.LittleEndian.PutUint32(r.vram[vramOffPages:], uint32(cfg.VRAM/vramPage))

	fd, err := unix.MemfdCreate("gpufpga-mbox", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("devmodel: memfd: %w", err)
	}
	r.mboxFile = os.NewFile(uintptr(fd), "gpufpga-mbox")
	if err := r.mboxFile.Truncate(mboxSize); err != nil {
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	if r.mbox, err = unix.Mmap(fd, 0, mboxSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("devmodel: mmap mailbox: %w", err)
	}
	binary.LittleEndian.PutUint32(r.mbox[mboxOffVersion:], mboxVersion)
	binary.LittleEndian.PutUint32(r.mbox[mboxOffMagic:], mboxMagic)

	if r.server, err = ivshmem.Listen(r.sockPath, r.mboxFile, guestVectors); err != nil {
		return nil, err
	}
	r.engine, err = xdma.NewEngine(xdma.Config{
		H2C:   channels(channelLayout.h2c, nil, r.sink),
		C2H:   channels(channelLayout.c2h, &r.source, nil),
		Bus:   &guestBus{r},
		Card:  cardMemory(r.card),
		Raise: r.raise,
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

func channels(stream []bool, src xdma.Source, sink xdma.Sink) []xdma.ChannelConfig {
	var out []xdma.ChannelConfig
	for _, s := range stream {
		c := xdma.ChannelConfig{Stream: s}
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
// by the shared file, the FPGA (ivshmem-doorbell) and the GPU
// (ivshmem-plain).
func (r *Rig) QEMUArgs() []string {
	mib := func(n int64) string { return fmt.Sprintf("%dM", n>>20) }
	return []string{
		"-machine", "q35,memory-backend=ram0",
		"-m", mib(r.cfg.GuestRAM),
		"-object", fmt.Sprintf("memory-backend-file,id=ram0,size=%s,mem-path=%s,share=on", mib(r.cfg.GuestRAM), r.ramPath),
		"-chardev", fmt.Sprintf("socket,id=xdma,path=%s", r.sockPath),
		"-device", fmt.Sprintf("ivshmem-doorbell,chardev=xdma,vectors=%d", guestVectors),
		"-object", fmt.Sprintf("memory-backend-file,id=vram,size=%s,mem-path=%s,share=on", mib(r.cfg.VRAM), r.vramPath),
		"-device", "ivshmem-plain,memdev=vram",
	}
}

// Serve accepts QEMU's connection, then answers the mailboxes and runs the
// engine until ctx ends or Close is called.
func (r *Rig) Serve(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	if err := r.server.Serve(ctx); err != nil {
		return err
	}
	r.wg.Add(3)
	go r.serveMailbox(ctx, vecReg, regMbox, r.register)
	go r.serveMailbox(ctx, vecCtl, ctlMbox, r.control)
	go r.runEngine(ctx)
	return nil
}

// Err returns the first internal error the rig hit, if any.
func (r *Rig) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
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
	if r.server != nil {
		r.server.Close() // unblocks the doorbell reads
	}
	r.wg.Wait()
	for _, b := range [][]byte{r.ram, r.vram, r.mbox} {
		if b != nil {
			unix.Munmap(b)
		}
	}
	if r.mboxFile != nil {
		r.mboxFile.Close()
	}
	for _, p := range []string{r.ramPath, r.vramPath, r.sockPath} {
		os.Remove(p)
	}
	return nil
}

func (r *Rig) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mbox[off]))
}

// serveMailbox answers requests on one mailbox each time the guest rings
// its vector.
func (r *Rig) serveMailbox(ctx context.Context, vec, base int, handle func(op, a0, a1, a2 uint32) (status, v0, v1 uint32)) {
	defer r.wg.Done()
	efd := r.server.Doorbell(vec)
	var buf [8]byte
	var last uint32
	for ctx.Err() == nil {
		if err := waitReadable(ctx, efd); err != nil {
			return
		}
		if _, err := unix.Read(efd, buf[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
			r.fail(fmt.Errorf("devmodel: doorbell %d: %w", vec, err))
			return
		}
		seq := atomic.LoadUint32(r.word(base + reqSeq))
		if seq == last {
			continue
		}
		last = seq
		st, v0, v1 := handle(atomic.LoadUint32(r.word(base+reqOp)), atomic.LoadUint32(r.word(base+reqArg0)),
			atomic.LoadUint32(r.word(base+reqArg1)), atomic.LoadUint32(r.word(base+reqArg2)))
		atomic.StoreUint32(r.word(base+rspStatus), st)
		atomic.StoreUint32(r.word(base+rspVal0), v0)
		atomic.StoreUint32(r.word(base+rspVal1), v1)
		atomic.StoreUint32(r.word(base+rspSeq), seq)
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

func (r *Rig) register(op, off, val, _ uint32) (uint32, uint32, uint32) {
	switch op {
	case opRead32:
		return 0, r.engine.ReadReg(off), 0
	case opWrite32:
		r.engine.WriteReg(off, val)
		r.wake()
		return 0, 0, 0
	}
	return uint32(unix.EINVAL), 0, 0
}

func split(v uint64) (uint32, uint32, uint32) { return 0, uint32(v), uint32(v >> 32) }

func (r *Rig) control(op, a0, a1, a2 uint32) (uint32, uint32, uint32) {
	einval := uint32(unix.EINVAL)
	switch op {
	case ctlFault:
		if a0 > 1 || a2 > uint32(xdma.FaultStall) {
			return einval, 0, 0
		}
		if err := r.engine.InjectFault(xdma.Direction(a0), int(a1), xdma.Fault(a2)); err != nil {
			return uint32(unix.ENODEV), 0, 0
		}
		return 0, 0, 0
	case ctlLink:
		r.engine.SetLinkDown(a0 != 0)
		return 0, 0, 0
	case ctlSource:
		r.source.set(acq.NewSource(acq.SourceConfig{PayloadLen: int(a0), Rate: float64(a1), FIFO: int(a2)}))
		r.wake()
		return 0, 0, 0
	case ctlSourceStats:
		st := r.source.stats()
		switch a0 {
		case srcGenerated:
			return split(st.Generated)
		case srcDelivered:
			return split(st.Delivered)
		case srcDropped:
			return split(st.Dropped)
		case srcQueued:
			return split(st.Queued)
		case srcBytes:
			return split(st.Bytes)
		}
	case ctlSinkStats:
		fs, packets := r.sink.Stats()
		switch a0 {
		case sinkFrames:
			return split(fs.Frames)
		case sinkGaps:
			return split(fs.Gaps)
		case sinkDuplicates:
			return split(fs.Duplicates)
		case sinkCRCFailures:
			return split(fs.CRCFailures)
		case sinkPackets:
			return split(packets)
		}
	case ctlLateWrites:
		return split(r.lateWrites.Load())
	}
	return einval, 0, 0
}

func (r *Rig) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Rig) raise(vec int) {
	if err := r.server.Interrupt(vec); err != nil {
		r.fail(fmt.Errorf("devmodel: interrupt %d: %w", vec, err))
	}
}

// runEngine steps the engine while it progresses. A channel waiting for
// the stream source is retried every millisecond: the source produces
// frames by the clock.
func (r *Rig) runEngine(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for r.engine.Step() {
		}
		if r.engine.Busy() {
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

// LateWrites returns the DMA writes that landed in VRAM pages the simulated
// GPU had not allocated (freed, or never handed out), and their first few
// addresses.
func (r *Rig) LateWrites() (uint64, []uint64) {
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	return r.lateWrites.Load(), append([]uint64(nil), r.lateAddrs...)
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
		return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeCompleterAbort}
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

func (g *guestBus) resolve(addr uint64, n int, write bool) ([]byte, error) {
	r := g.r
	end := addr + uint64(n)
	if end < addr {
		return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
	}
	if end <= uint64(len(r.ram)) {
		return r.ram[addr:end], nil
	}
	bar := atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.vram[vramOffBar])))
	if bar != 0 && addr >= bar+vramPage && end <= bar+uint64(len(r.vram)) {
		off := addr - bar
		if write {
			g.checkAllocated(off, uint64(n))
		}
		return r.vram[off : off+uint64(n)], nil
	}
	return nil, &xdma.BusError{Addr: addr, Len: n, Code: xdma.ErrCodeUnsupportedRequest}
}

// checkAllocated records writes into VRAM pages that are not allocated.
func (g *guestBus) checkAllocated(off, n uint64) {
	r := g.r
	for p := off / vramPage; p <= (off+n-1)/vramPage; p++ {
		if atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.vram[vramOffState+p&^3])))>>(8*(p&3))&0xFF != 0 {
			continue
		}
		r.lateWrites.Add(1)
		binary.LittleEndian.PutUint64(r.vram[vramOffLate:], r.lateWrites.Load())
		r.lateMu.Lock()
		if len(r.lateAddrs) < 16 {
			r.lateAddrs = append(r.lateAddrs, p*vramPage)
		}
		r.lateMu.Unlock()
	}
}

func (g *guestBus) Read(addr uint64, p []byte) error {
	b, err := g.resolve(addr, len(p), false)
	if err == nil {
		copy(p, b)
	}
	return err
}

func (g *guestBus) Write(addr uint64, p []byte) error {
	b, err := g.resolve(addr, len(p), true)
	if err == nil {
		copy(b, p)
	}
	return err
}
