// Package rigctl is the guest side of the rig's test equipment: the control
// port's mailbox (fault injection, the acquisition source's settings and
// counters, late DMA writes), and the simulated XDMA's registers mapped into
// user space for tests that drive it before any driver binds it.
package rigctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpufpga/gpufpga/hw/testbench/acq"
	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	rl "github.com/gpufpga/gpufpga/hw/testbench/riglayout"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

// ErrNoDevice reports that no rig device with the wanted magic exists.
var ErrNoDevice = errors.New("rigctl: rig device not found")

// Mailbox is a request/response slot in an ivshmem BAR, rung through the
// device's doorbell.
type Mailbox struct {
	mu   sync.Mutex
	mem  []byte // BAR2
	regs []byte // BAR0: ivshmem registers
	base int
	seq  uint32
}

// openMailbox finds the rig device whose BAR2 starts with magic.
func openMailbox(magic uint32, base int) (*Mailbox, error) {
	devs, err := guest.FindPCI(0x1af4, 0x1110)
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		mem, err := d.MapBAR(2, rl.MboxSize)
		if err != nil {
			continue // ivshmem-plain's BAR2 is larger; any mapping error means not ours
		}
		if binary.LittleEndian.Uint32(mem) != magic {
			continue
		}
		regs, err := d.MapBAR(0, 256)
		if err != nil {
			return nil, err
		}
		return &Mailbox{mem: mem, regs: regs, base: base, seq: atomic.LoadUint32(word(mem, base+rl.RspSeq))}, nil
	}
	return nil, fmt.Errorf("%w: magic %#x", ErrNoDevice, magic)
}

func word(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// Call sends one request and waits up to 5 s for its answer. A non-zero
// status comes back as a syscall.Errno.
func (m *Mailbox) Call(op, a0, a1, a2 uint32) (uint32, uint32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	atomic.StoreUint32(word(m.mem, m.base+rl.ReqOp), op)
	atomic.StoreUint32(word(m.mem, m.base+rl.ReqArg0), a0)
	atomic.StoreUint32(word(m.mem, m.base+rl.ReqArg1), a1)
	atomic.StoreUint32(word(m.mem, m.base+rl.ReqArg2), a2)
	atomic.StoreUint32(word(m.mem, m.base+rl.ReqSeq), m.seq)
	atomic.StoreUint32(word(m.regs, rl.DoorbellReg), rl.HostPeer<<16|rl.VecMbox)
	deadline := time.Now().Add(5 * time.Second)
	for atomic.LoadUint32(word(m.mem, m.base+rl.RspSeq)) != m.seq {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("rigctl: no answer to op %d", op)
		}
	}
	if st := atomic.LoadUint32(word(m.mem, m.base+rl.RspStatus)); st != 0 {
		return 0, 0, syscall.Errno(st)
	}
	return atomic.LoadUint32(word(m.mem, m.base+rl.RspVal0)), atomic.LoadUint32(word(m.mem, m.base+rl.RspVal1)), nil
}

// Control is the rig's control port.
type Control struct{ mb *Mailbox }

// OpenControl finds the control port.
func OpenControl() (*Control, error) {
	mb, err := openMailbox(rl.CtlMagic, rl.CtlMbox)
	if err != nil {
		return nil, err
	}
	return &Control{mb}, nil
}

// InjectFault arms a fault on a channel of the simulated XDMA.
func (c *Control) InjectFault(dir xdma.Direction, ch int, f xdmamodel.Fault) error {
	_, _, err := c.mb.Call(rl.CtlFault, uint32(dir), uint32(ch), uint32(f))
	if err != nil {
		return fmt.Errorf("rigctl: inject %v on %v %d: %w", f, dir, ch, err)
	}
	return nil
}

// SetUserIRQ drives the user logic's usr_irq_req lines (bit n for line n)
// on a rig whose user logic is the Go model's, and returns the usr_irq_ack
// pulses owed since the last call: one per request the engine has sent.
func (c *Control) SetUserIRQ(lines uint16) (ack uint16, err error) {
	v, _, err := c.mb.Call(rl.CtlUserIRQ, uint32(lines), 0, 0)
	if err != nil {
		return 0, fmt.Errorf("rigctl: usr_irq_req %#x: %w", lines, err)
	}
	return uint16(v), nil
}

// UserClock returns how the user design's clock follows the guest's:
// the guest's virtual nanoseconds per cycle and the cycles of a quantum,
// within which the design keeps to the guest's time; 0 and 0 where it
// runs on the host's time.
func (c *Control) UserClock() (cycleNS, quantum uint64, err error) {
	ns, q, err := c.mb.Call(rl.CtlUserClock, 0, 0, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("rigctl: user clock: %w", err)
	}
	return uint64(ns), uint64(q), nil
}

// Stalled reports whether a channel runs a chain that an injected stall or
// wedge holds: the engine fetched its descriptors, and is now stuck on it.
func (c *Control) Stalled(dir xdma.Direction, ch int) (bool, error) {
	v, _, err := c.mb.Call(rl.CtlStalled, uint32(dir), uint32(ch), 0)
	if err != nil {
		return false, fmt.Errorf("rigctl: stalled %v %d: %w", dir, ch, err)
	}
	return v != 0, nil
}

// SetQuirks selects the behaviours PG195 leaves open that the simulated
// XDMA shows from now on, and returns those it showed.
func (c *Control) SetQuirks(q xdmamodel.Quirk) (xdmamodel.Quirk, error) {
	was, _, err := c.mb.Call(rl.CtlQuirks, uint32(q), 0, 0)
	if err != nil {
		return 0, fmt.Errorf("rigctl: quirks %v: %w", q, err)
	}
	return xdmamodel.Quirk(was), nil
}

// SetAlignments makes the simulated XDMA report a from now on (the driver
// reads it when it binds), and returns what it reported.
func (c *Control) SetAlignments(a xdma.Alignments) (xdma.Alignments, error) {
	was, _, err := c.mb.Call(rl.CtlAlign, a.Encode(), 0, 0)
	if err != nil {
		return xdma.Alignments{}, fmt.Errorf("rigctl: alignments %v: %w", a, err)
	}
	return xdma.DecodeAlignments(was), nil
}

// Violations returns how many descriptors the engine was handed that its
// alignments forbid.
func (c *Control) Violations() (uint64, error) {
	lo, hi, err := c.mb.Call(rl.CtlViolations, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("rigctl: violations: %w", err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// AERClass is a class of PCIe error, as AER reports it.
type AERClass uint32

// The classes InjectAER injects.
const (
	AERCorrectable AERClass = rl.AERCorrectable
	AERNonFatal    AERClass = rl.AERNonFatal
	AERFatal       AERClass = rl.AERFatal
)

func (c AERClass) String() string {
	switch c {
	case AERCorrectable:
		return "correctable"
	case AERNonFatal:
		return "non-fatal"
	case AERFatal:
		return "fatal"
	}
	return fmt.Sprintf("AERClass(%d)", uint32(c))
}

// InjectAER has the FPGA report an uncorrectable PCIe error of class to its
// root port (QEMU's pcie_aer_inject_error). It returns once the message is
// sent; the kernel's AER driver recovers the device asynchronously. QEMU
// forwards the message only through functions with SERR# Enable set, and
// drops correctable ones: for those, use the kernel's aer_inject.
func (c *Control) InjectAER(class AERClass) error {
	if _, _, err := c.mb.Call(rl.CtlAER, uint32(class), 0, 0); err != nil {
		return fmt.Errorf("rigctl: inject %v error: %w", class, err)
	}
	return nil
}

// FailResets makes the simulated FPGA's registers unanswered from now on,
// and every reset (the secondary bus reset of AER's recovery, say) leave
// them so: a card that does not come back from a reset. With fail false,
// the next reset brings it back.
func (c *Control) FailResets(fail bool) error {
	var v uint32
	if fail {
		v = 1
	}
	if _, _, err := c.mb.Call(rl.CtlFailReset, v, 0, 0); err != nil {
		return fmt.Errorf("rigctl: fail resets %v: %w", fail, err)
	}
	return nil
}

// SetLinkDown takes the simulated FPGA off the bus, or puts it back.
func (c *Control) SetLinkDown(down bool) error {
	var v uint32
	if down {
		v = 1
	}
	_, _, err := c.mb.Call(rl.CtlLink, v, 0, 0)
	return err
}

// ConfigureSource restarts the C2H stream source: payload bytes per frame,
// frames per second (0: a frame whenever the engine asks) and FIFO depth.
func (c *Control) ConfigureSource(payload int, rate uint32, fifo int) error {
	_, _, err := c.mb.Call(rl.CtlSource, uint32(payload), rate, uint32(fifo))
	return err
}

func (c *Control) read64(op, field uint32) (uint64, error) {
	lo, hi, err := c.mb.Call(op, field, 0, 0)
	return uint64(hi)<<32 | uint64(lo), err
}

// SourceStats returns the stream source's accounting, all fields from one
// moment.
func (c *Control) SourceStats() (acq.SourceStats, error) {
	var st acq.SourceStats
	if _, _, err := c.mb.Call(rl.CtlSourceSnap, 0, 0, 0); err != nil {
		return st, err
	}
	var errs []error
	for _, f := range []struct {
		field uint32
		dst   *uint64
	}{
		{rl.SrcGenerated, &st.Generated}, {rl.SrcDelivered, &st.Delivered}, {rl.SrcDropped, &st.Dropped},
		{rl.SrcQueued, &st.Queued}, {rl.SrcBytes, &st.Bytes},
	} {
		v, err := c.read64(rl.CtlSourceStats, f.field)
		*f.dst = v
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// SinkStats is what the H2C stream sink checked.
type SinkStats struct {
	Frames, Gaps, Duplicates, CRCFailures, Packets uint64
}

// SinkStats returns the H2C stream sink's counters.
func (c *Control) SinkStats() (SinkStats, error) {
	var st SinkStats
	var errs []error
	for _, f := range []struct {
		field uint32
		dst   *uint64
	}{
		{rl.SinkFrames, &st.Frames}, {rl.SinkGaps, &st.Gaps}, {rl.SinkDuplicates, &st.Duplicates},
		{rl.SinkCRCFailures, &st.CRCFailures}, {rl.SinkPackets, &st.Packets},
	} {
		v, err := c.read64(rl.CtlSinkStats, f.field)
		*f.dst = v
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// LateWrites returns how many DMA writes landed in VRAM pages that were not
// allocated at the time.
func (c *Control) LateWrites() (uint64, error) {
	return c.read64(rl.CtlLateWrites, 0)
}

// IOMMUFaults returns how many DMA writes an IOMMU translating for the
// FPGA dropped (posted writes fail silently, as on PCIe).
func (c *Control) IOMMUFaults() (uint64, error) {
	return c.read64(rl.CtlIOMMUFaults, 0)
}

// Unmapped returns how many DMA accesses reached simulated GPU memory that
// no peer had mapped: pages the driver had unpinned.
func (c *Control) Unmapped() (uint64, error) {
	return c.read64(rl.CtlUnmapped, 0)
}

// Registers is the simulated XDMA's register space, mapped into user space
// through sysfs, for tests that drive the engine while no driver has
// claimed it. It implements xdma.Registers with plain MMIO, as a user-space
// driver would.
type Registers struct{ mem []byte }

// OpenRegisters finds the simulated FPGA and maps the BAR that holds the
// XDMA register space.
func OpenRegisters() (*Registers, error) {
	devs, err := guest.FindPCI(rl.FPGAVendor, rl.FPGADevice)
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		for bar := 0; bar < 6; bar++ {
			mem, err := d.MapBAR(bar, xdma.RegSpaceSize)
			if err != nil {
				continue // no such BAR, or a smaller one
			}
			id := atomic.LoadUint32(word(mem, xdma.TargetConfig<<12))
			if cfg, ok := xdma.DecodeIdentifier(id); ok && cfg.Target == xdma.TargetConfig {
				// As a user-space driver does: the function masters
				// the bus only with Bus Master Enable set.
				if err := enableBusMaster(d.Path); err != nil {
					syscall.Munmap(mem)
					return nil, err
				}
				return &Registers{mem}, nil
			}
			syscall.Munmap(mem)
		}
	}
	return nil, fmt.Errorf("%w: %04x:%04x", ErrNoDevice, rl.FPGAVendor, rl.FPGADevice)
}

// enableBusMaster sets Bus Master Enable in the command register of the
// function at sysfs path dir.
func enableBusMaster(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "config"), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("rigctl: %w", err)
	}
	defer f.Close()
	var cmd [2]byte
	if _, err := f.ReadAt(cmd[:], 4); err != nil {
		return fmt.Errorf("rigctl: command register: %w", err)
	}
	cmd[0] |= 0x06 // memory space and bus master
	if _, err := f.WriteAt(cmd[:], 4); err != nil {
		return fmt.Errorf("rigctl: command register: %w", err)
	}
	return nil
}

// ReadReg implements xdma.Registers: one 32-bit load.
func (r *Registers) ReadReg(off uint32) uint32 { return atomic.LoadUint32(word(r.mem, int(off))) }

// WriteReg implements xdma.Registers: one 32-bit store, a plain MOV (an
// atomic store is an XCHG, which reads the register too).
func (r *Registers) WriteReg(off, v uint32) { *word(r.mem, int(off)) = v }
