package devmodel

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// The protocol of QEMU's xdma-model device (hw/testbench/qemu/xdma-model.c):
// the device connects twice, saying which connection is which; on the
// first it sends register requests, on the second it receives interrupts.
const (
	pciHello    = "XDMAMDL"
	pciRoleReq  = 0
	pciRoleIRQ  = 1
	pciReqSize  = 24
	pciOpRead   = 1
	pciOpWrite  = 2
	pciOpMode   = 3
	pciOpReset  = 4
	pciOpMaster = 5
	pciOpTick   = 6
	pciIRQEdge  = 1
	pciIRQLevel = 2
	// A translation request on the interrupt connection, and its answer.
	pciMsgTranslate = 3
	pciTranslateLen = 16
	pciRegionRAM    = 1
	pciRegionVRAM   = 2
	pciBarDMA       = 0
	pciBarUser      = 1
	pciIRQBuffer    = 4096 // interrupt messages in flight before the model fails
)

// pciDevice is what a pciServer forwards the device's requests to.
type pciDevice interface {
	readBAR(bar int, addr uint64, size int) uint64
	writeBAR(bar int, addr uint64, size int, v uint64)
	setMode(mode int)
	reset()
	setBusMaster(on bool)
	// tick runs the card up to ns of the guest's virtual clock and
	// returns the ns to the next tick it needs: 0 for the device's
	// tick-ns.
	tick(ns uint64) (next uint64)
}

// pciServer serves one xdma-model device.
type pciServer struct {
	sock string
	ln   *net.UnixListener
	req  net.Conn
	irq  net.Conn

	// Interrupt messages wait in irqs, and leave it only under irqMu, so
	// that they are written in order and a read's answer never overtakes
	// an interrupt raised before the read, as on PCIe, where a completion
	// does not pass an earlier message. kick wakes the writer.
	irqs  chan [8]byte
	kick  chan struct{}
	irqMu sync.Mutex
	// ticked: the device ticks the model (tick-ns), and interrupts go
	// only before an answer, never at a moment the host's scheduling
	// picks.
	ticked bool
	// xlateMu keeps one translation request in flight.
	xlateMu sync.Mutex

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

func listenPCI(sock string) (*pciServer, error) {
	os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	return &pciServer{sock: sock, ln: ln, irqs: make(chan [8]byte, pciIRQBuffer),
		kick: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// accept takes the device's two connections, in whichever order they come,
// until ctx ends.
func (s *pciServer) accept(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.SetDeadline(time.Now()) })
	defer stop()
	var req, irq net.Conn
	for req == nil || irq == nil {
		c, err := s.ln.Accept()
		if err != nil {
			closeAll(req, irq)
			if ctx.Err() != nil {
				return fmt.Errorf("devmodel: %s: no device connected: %w", s.sock, ctx.Err())
			}
			return fmt.Errorf("devmodel: accept: %w", err)
		}
		role, err := readHello(c)
		switch {
		case err != nil:
			c.Close()
			closeAll(req, irq)
			return fmt.Errorf("devmodel: %s: %w", s.sock, err)
		case role == pciRoleReq && req == nil:
			req = c
		case role == pciRoleIRQ && irq == nil:
			irq = c
		default:
			c.Close()
			closeAll(req, irq)
			return fmt.Errorf("devmodel: %s: unexpected connection role %d", s.sock, role)
		}
	}
	s.irqMu.Lock()
	s.req, s.irq = req, irq
	s.irqMu.Unlock()
	return nil
}

func readHello(c net.Conn) (byte, error) {
	var hello [8]byte
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return 0, fmt.Errorf("reading the device's hello: %w", err)
	}
	if string(hello[:7]) != pciHello {
		return 0, fmt.Errorf("not an xdma-model device: hello %q", hello[:7])
	}
	return hello[7], c.SetReadDeadline(time.Time{})
}

func closeAll(cs ...net.Conn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// serve answers requests until the device goes away, and sends the
// interrupts queued by send: as they come, or, where the device ticks the
// model, before the next answer.
func (s *pciServer) serve(dev pciDevice, fail func(error)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.serveRequests(dev); !deviceGone(err) {
			fail(err)
		}
	}()
	if s.ticked {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case <-s.kick:
				if err := s.flushIRQs(); err != nil {
					if !deviceGone(err) {
						fail(fmt.Errorf("devmodel: interrupt: %w", err))
					}
					return
				}
			case <-s.done:
				return
			}
		}
	}()
}

// deviceGone reports whether err only says that QEMU went away.
func deviceGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// flushIRQs writes every interrupt queued so far: for the writer, and
// before a read's answer.
func (s *pciServer) flushIRQs() error {
	s.irqMu.Lock()
	defer s.irqMu.Unlock()
	for {
		select {
		case m := <-s.irqs:
			if _, err := s.irq.Write(m[:]); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// serveRequests returns when the device goes away (io.EOF, or
// net.ErrClosed when the rig closes), or with the protocol error it met.
func (s *pciServer) serveRequests(dev pciDevice) error {
	r := bufio.NewReader(s.req)
	var req [pciReqSize]byte
	var rsp [8]byte
	for {
		if _, err := io.ReadFull(r, req[:]); err != nil {
			return fmt.Errorf("devmodel: %s: %w", s.sock, err)
		}
		op, bar, size := req[0], int(req[1]), int(req[2])
		addr := binary.LittleEndian.Uint64(req[8:])
		data := binary.LittleEndian.Uint64(req[16:])
		switch op {
		case pciOpRead, pciOpTick:
			if op == pciOpRead {
				binary.LittleEndian.PutUint64(rsp[:], dev.readBAR(bar, addr, size))
			} else {
				binary.LittleEndian.PutUint64(rsp[:], dev.tick(data))
			}
			if err := s.flushIRQs(); err != nil {
				return fmt.Errorf("devmodel: %s: interrupt: %w", s.sock, err)
			}
			if _, err := s.req.Write(rsp[:]); err != nil {
				return fmt.Errorf("devmodel: %s: %w", s.sock, err)
			}
		case pciOpWrite:
			dev.writeBAR(bar, addr, size, data)
		case pciOpMode:
			dev.setMode(int(data))
		case pciOpReset:
			dev.reset()
		case pciOpMaster:
			dev.setBusMaster(data != 0)
		default:
			return fmt.Errorf("devmodel: %s: unknown request %d", s.sock, op)
		}
	}
}

// translate asks the device what its DMA of n bytes at addr reaches
// (through the IOMMU): got bytes at offset off of region, pciRegionRAM or
// pciRegionVRAM, or region 0 where it reaches neither.
func (s *pciServer) translate(addr uint64, n int, write bool) (region byte, off uint64, got int, err error) {
	var m [pciTranslateLen]byte
	m[0] = pciMsgTranslate
	if write {
		m[1] = 1
	}
	binary.LittleEndian.PutUint32(m[4:], uint32(n))
	binary.LittleEndian.PutUint64(m[8:], addr)
	s.xlateMu.Lock()
	defer s.xlateMu.Unlock()
	s.irqMu.Lock()
	_, err = s.irq.Write(m[:])
	s.irqMu.Unlock()
	if err == nil {
		_, err = io.ReadFull(s.irq, m[:])
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("devmodel: %s: translation: %w", s.sock, err)
	}
	got = int(binary.LittleEndian.Uint32(m[4:]))
	if m[0] == 0 {
		return 0, 0, 0, nil
	}
	if got == 0 || got > n {
		return 0, 0, 0, fmt.Errorf("devmodel: %s: translation of %d bytes answered with %d", s.sock, n, got)
	}
	return m[1], binary.LittleEndian.Uint64(m[8:]), got, nil
}

// send queues an interrupt message; it never blocks the engine.
func (s *pciServer) send(kind byte, v uint32) error {
	var m [8]byte
	m[0] = kind
	binary.LittleEndian.PutUint32(m[4:], v)
	select {
	case s.irqs <- m:
	default:
		return fmt.Errorf("devmodel: %d interrupt messages undelivered", pciIRQBuffer)
	}
	select {
	case s.kick <- struct{}{}:
	default: // the writer is awake already
	}
	return nil
}

func (s *pciServer) close() {
	s.closeOnce.Do(func() {
		s.ln.Close()
		s.irqMu.Lock()
		closeAll(s.req, s.irq)
		s.irqMu.Unlock()
		close(s.done)
		s.wg.Wait()
		os.Remove(s.sock)
	})
}
