package devmodel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// The protocol of QEMU's xdma-model device (hw/testbench/qemu/xdma-model.c):
// the device connects twice, saying which connection is which; on the
// first it sends register requests, on the second it receives interrupts.
const (
	pciHello     = "XDMAMDL"
	pciRoleReq   = 0
	pciRoleIRQ   = 1
	pciReqSize   = 24
	pciOpRead    = 1
	pciOpWrite   = 2
	pciOpMode    = 3
	pciOpReset   = 4
	pciIRQEdge   = 1
	pciIRQLevel  = 2
	pciBarDMA    = 0
	pciBarUser   = 1
	pciIRQBuffer = 4096 // interrupt messages in flight before the model fails
)

// pciDevice is what a pciServer forwards the device's requests to.
type pciDevice interface {
	readBAR(bar int, addr uint64, size int) uint64
	writeBAR(bar int, addr uint64, size int, v uint64)
	setMode(mode int)
	reset()
}

// pciServer serves one xdma-model device.
type pciServer struct {
	sock string
	ln   *net.UnixListener
	req  net.Conn
	irq  net.Conn
	irqs chan [8]byte
	done chan struct{}
	wg   sync.WaitGroup
}

func listenPCI(sock string) (*pciServer, error) {
	os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("devmodel: %w", err)
	}
	return &pciServer{sock: sock, ln: ln, irqs: make(chan [8]byte, pciIRQBuffer), done: make(chan struct{})}, nil
}

// accept takes the device's two connections, in whichever order they come.
func (s *pciServer) accept() error {
	for s.req == nil || s.irq == nil {
		c, err := s.ln.Accept()
		if err != nil {
			return fmt.Errorf("devmodel: accept: %w", err)
		}
		var hello [8]byte
		if _, err := io.ReadFull(c, hello[:]); err != nil || string(hello[:7]) != pciHello {
			c.Close()
			return fmt.Errorf("devmodel: %s: not an xdma-model device (%v)", s.sock, err)
		}
		switch {
		case hello[7] == pciRoleReq && s.req == nil:
			s.req = c
		case hello[7] == pciRoleIRQ && s.irq == nil:
			s.irq = c
		default:
			c.Close()
			return fmt.Errorf("devmodel: %s: unexpected connection role %d", s.sock, hello[7])
		}
	}
	return nil
}

// serve answers requests until the device goes away, and sends the
// interrupts queued by raise and level.
func (s *pciServer) serve(dev pciDevice, fail func(error)) {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		for {
			var m [8]byte
			select {
			case m = <-s.irqs:
			case <-s.done:
				return
			}
			if _, err := s.irq.Write(m[:]); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					fail(fmt.Errorf("devmodel: interrupt: %w", err))
				}
				return
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		if err := s.serveRequests(dev); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			fail(err)
		}
	}()
}

// serveRequests returns when the device goes away (io.EOF, or
// net.ErrClosed when the rig closes), or with the protocol error it met.
func (s *pciServer) serveRequests(dev pciDevice) error {
	r := bufio.NewReader(s.req)
	var req [pciReqSize]byte
	var rsp [8]byte
	for {
		if _, err := io.ReadFull(r, req[:]); err != nil {
			return err
		}
		op, bar, size := req[0], int(req[1]), int(req[2])
		addr := binary.LittleEndian.Uint64(req[8:])
		data := binary.LittleEndian.Uint64(req[16:])
		switch op {
		case pciOpRead:
			binary.LittleEndian.PutUint64(rsp[:], dev.readBAR(bar, addr, size))
			if _, err := s.req.Write(rsp[:]); err != nil {
				return err
			}
		case pciOpWrite:
			dev.writeBAR(bar, addr, size, data)
		case pciOpMode:
			dev.setMode(int(data))
		case pciOpReset:
			dev.reset()
		default:
			return fmt.Errorf("devmodel: %s: unknown request %d", s.sock, op)
		}
	}
}

// send queues an interrupt message; it never blocks the engine.
func (s *pciServer) send(kind byte, v uint32) error {
	var m [8]byte
	m[0] = kind
	binary.LittleEndian.PutUint32(m[4:], v)
	select {
	case s.irqs <- m:
		return nil
	default:
		return fmt.Errorf("devmodel: %d interrupt messages undelivered", pciIRQBuffer)
	}
}

func (s *pciServer) close() {
	s.ln.Close()
	for _, c := range []net.Conn{s.req, s.irq} {
		if c != nil {
			c.Close()
		}
	}
	close(s.done)
	s.wg.Wait()
	os.Remove(s.sock)
}
