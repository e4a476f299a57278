//go:build linux

// Package userregs reaches the FPGA user logic's registers: the XDMA IP's
// AXI-Lite master BAR, which gpufpga leaves to user space. Each 32-bit
// access is one AXI-Lite transaction on the user's design.
package userregs

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	// ErrNoUserBAR: the card's DMA BAR is BAR0, so the IP has no AXI-Lite
	// master BAR (PG195 puts it at BAR0, before the DMA BAR).
	ErrNoUserBAR = errors.New("the card has no AXI-Lite master BAR")
	// ErrOffset: an offset that is not 4-byte aligned or lies past the BAR.
	ErrOffset = errors.New("register offset outside the BAR or unaligned")
)

// Registers is a mapping of the user BAR. Its methods are safe for
// concurrent use; a closed Registers answers os.ErrClosed.
type Registers struct {
	mu  sync.RWMutex // mem, against Close
	mem []byte
	bar string
}

// Open maps the user BAR of the card behind device (a gpufpga device node
// such as /dev/gpufpga0). It needs the rights to map the PCI device's
// resource file (root).
func Open(device string) (*Registers, error) { return openAt("/sys", device) }

// openAt is Open under another sysfs root, for tests.
func openAt(sysfs, device string) (*Registers, error) {
	name := filepath.Base(device)
	misc := filepath.Join(sysfs, "class/misc", name)
	b, err := os.ReadFile(filepath.Join(misc, "dma_bar"))
	if err != nil {
		return nil, fmt.Errorf("userregs: %s: which BAR is the engine's (a gpufpga that exports dma_bar?): %w", name, err)
	}
	dma, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || dma < 0 || dma > 5 {
		return nil, fmt.Errorf("userregs: %s: dma_bar %q is not a BAR number", name, b)
	}
	if dma == 0 {
		return nil, fmt.Errorf("userregs: %s: %w", name, ErrNoUserBAR)
	}
	link, err := os.Readlink(filepath.Join(misc, "device"))
	if err != nil {
		return nil, fmt.Errorf("userregs: %s: its PCI device: %w", name, err)
	}
	path := filepath.Join(sysfs, "bus/pci/devices", filepath.Base(link), "resource0")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("userregs: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("userregs: %w", err)
	}
	if st.Size() < 4 || st.Size() > math.MaxInt32 {
		return nil, fmt.Errorf("userregs: %s: a BAR of %d bytes", path, st.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("userregs: map %s: %w", path, err)
	}
	return &Registers{mem: mem, bar: path}, nil
}

// Len returns the BAR's size in bytes; 0 once closed.
func (r *Registers) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.mem)
}

// word returns the register at off, or why not. Called with r.mu held.
func (r *Registers) word(off uint32) (*uint32, error) {
	if r.mem == nil {
		return nil, fmt.Errorf("userregs: %s: %w", r.bar, os.ErrClosed)
	}
	if off%4 != 0 || uint64(off)+4 > uint64(len(r.mem)) {
		return nil, fmt.Errorf("userregs: offset %#x of a %d-byte BAR: %w", off, len(r.mem), ErrOffset)
	}
	return (*uint32)(unsafe.Pointer(&r.mem[off])), nil
}

// Read32 reads the register at byte offset off. A card off the bus reads
// all ones.
func (r *Registers) Read32(off uint32) (uint32, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	w, err := r.word(off)
	if err != nil {
		return 0, err
	}
	return load32(w), nil
}

// Write32 writes v to the register at byte offset off.
func (r *Registers) Write32(off, v uint32) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	w, err := r.word(off)
	if err != nil {
		return err
	}
	store32(w, v)
	return nil
}

// load32 and store32 are one plain 32-bit access each: one AXI-Lite
// transaction, never split, merged or dropped (not inlined, so the
// compiler cannot fold two of them). Not sync/atomic: its store is a
// locked exchange on amd64, a read before the write, which the user
// logic would see as a read of the register.
//
//go:noinline
func load32(p *uint32) uint32 { return *p }

//go:noinline
func store32(p *uint32, v uint32) { *p = v }

// Close unmaps the BAR. Closing a closed Registers does nothing.
func (r *Registers) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	if err != nil {
		return fmt.Errorf("userregs: unmap %s: %w", r.bar, err)
	}
	return nil
}
