// Package ivshmem serves one QEMU ivshmem-doorbell device: it is the server
// side of the protocol in QEMU's docs/specs/ivshmem-spec.rst, with this
// process as the only other peer.
//
// The guest rings this process by writing (peer << 16 | vector) to the
// device's doorbell register; this process interrupts the guest by writing
// the eventfd of one of the guest's MSI-X vectors.
package ivshmem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// HostPeer is the peer ID of this process; the guest is GuestPeer.
const (
	HostPeer  = 0
	GuestPeer = 1
)

// Server is an ivshmem server for one guest.
type Server struct {
	ln      *net.UnixListener
	shm     *os.File
	vectors int

	host  []int // our eventfds, one per vector: the guest's doorbells
	guest []int // the guest's eventfds, one per vector: its interrupts

	mu   sync.Mutex
	conn *net.UnixConn
}

// Listen creates the socket at path. shm becomes the device's BAR2; vectors
// is the number of MSI-X vectors the device is configured with.
func Listen(path string, shm *os.File, vectors int) (*Server, error) {
	if vectors < 1 {
		return nil, errors.New("ivshmem: at least one vector")
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ivshmem: %w", err)
	}
	s := &Server{ln: ln, shm: shm, vectors: vectors}
	for range vectors {
		h, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("ivshmem: eventfd: %w", err)
		}
		s.host = append(s.host, h)
		g, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("ivshmem: eventfd: %w", err)
		}
		s.guest = append(s.guest, g)
	}
	return s, nil
}

// Serve accepts QEMU's connection and sends it the setup messages. It
// returns once the guest is connected; QEMU blocks until then.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	c, err := s.ln.AcceptUnix()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ivshmem: accept: %w", err)
	}
	send := func(v int64, fd int) error {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		var oob []byte
		if fd >= 0 {
			oob = unix.UnixRights(fd)
		}
		_, _, err := c.WriteMsgUnix(b[:], oob, nil)
		return err
	}
	err = send(0, -1) // protocol version
	if err == nil {
		err = send(GuestPeer, -1)
	}
	if err == nil {
		err = send(-1, int(s.shm.Fd()))
	}
	for _, fd := range s.host {
		if err == nil {
			err = send(HostPeer, fd)
		}
	}
	for _, fd := range s.guest {
		if err == nil {
			err = send(GuestPeer, fd)
		}
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("ivshmem: setup: %w", err)
	}
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
	return nil
}

// Doorbell returns the eventfd that becomes readable when the guest rings
// vector v of this peer.
func (s *Server) Doorbell(v int) int { return s.host[v] }

// Interrupt raises MSI-X vector v in the guest.
func (s *Server) Interrupt(v int) error {
	if v < 0 || v >= len(s.guest) {
		return fmt.Errorf("ivshmem: no vector %d", v)
	}
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	_, err := unix.Write(s.guest[v], one[:])
	return err
}

// Close closes the socket and the eventfds.
func (s *Server) Close() error {
	s.ln.Close()
	s.mu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	for _, fd := range append(s.host, s.guest...) {
		unix.Close(fd)
	}
	return nil
}
