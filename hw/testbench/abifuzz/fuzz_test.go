//go:build vmguest

package abifuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
)

const (
	pciAddr  = "/sys/bus/pci/drivers/gpufpga"
	workers  = 4
	fdsEach  = 2
	allocsEa = 3
)

// The ABI as uapi/gpufpga.h lays it out, so the fuzzer can send anything.
const (
	nrPin, nrUnpin, nrQuery, nrXfer, nrCancel = 1, 2, 3, 4, 5
	nrStreamStart, nrRelease, nrStop          = 6, 7, 8
	sizePin, sizeUnpin, sizeQuery, sizeXfer   = 80, 16, 96, 104
	sizeCancel, sizeStream, sizeRelease       = 16, 40, 24
	sizeStop, sizeStopID, sizeCompletion      = 8, 16, 112
	iocW, iocRW                               = 1, 3
)

// Pin kinds of uapi/gpufpga.h; 0 is none.
const (
	pinGPU    = 1
	pinHost   = 2
	pinDmabuf = 3
)

func ioc(dir, nr, size uintptr) uintptr { return dir<<30 | size<<16 | 0xD6<<8 | nr }

// cmdline reads gpufpga_fuzz.NAME=VALUE from the kernel command line, where
// the host's vmtest puts the fuzzer's settings.
func cmdline(name string, def uint64) uint64 {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "gpufpga_fuzz."+name+"="); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return def
}

func TestMain(m *testing.M) {
	// A child started by the fork operation: use the inherited descriptor
	// a little, then exit, so the file's last close may happen here.
	if fd := os.Getenv("GPUFPGA_FUZZ_CHILD_FD"); fd != "" {
		// It must not block: the parent's threads read the same file.
		n, _ := strconv.Atoi(fd)
		fds := []unix.PollFd{{Fd: int32(n), Events: unix.POLLIN}}
		_, _ = unix.Poll(fds, 10)
		info := make([]byte, 128)
		_ = ioctl(n, ioc(2, 0, 128), info)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fuzzer is one run: its counters are shared by the workers.
type fuzzer struct {
	t       *testing.T
	gpu     *simgpu.GPU
	ops     atomic.Int64
	errnos  sync.Map // op name + errno -> *atomic.Int64
	unbinds atomic.Int64
	// Children holding an inherited file, waited for before the checks.
	children sync.WaitGroup
	// The device's name: a rebound device gets a new one while files of
	// the old one are open.
	name atomic.Pointer[string]
	// GPU memory every worker pins and frees: frees race pins of it.
	shared [sharedAllocs]atomic.Pointer[simgpu.Alloc]
	// Host memory every worker pins, in overlapping ranges and several
	// times in one page (hostShared).
	host hostShared
	// Descriptors that the dup2 thread replaces under the workers' calls.
	slots [dupSlots]atomic.Int32
}

const (
	sharedAllocs = 3
	dupSlots     = 2
	// maxSharedPins bounds the pins of one shared host region: the
	// DMA-API checker takes more than 7 live mappings of one cacheline
	// (ACTIVE_CACHELINE_MAX_OVERLAP) for a leak.
	maxSharedPins = 6
)

// hostShared is host memory that all workers pin, whole or in parts that
// overlap, down to disjoint bytes of one page; it is replaced by fresh
// memory (the pins keep the old pages) once it has been pinned
// maxSharedPins times.
type hostShared struct {
	mu   sync.Mutex
	mem  []byte
	pins int
}

func (z *fuzzer) path() string { return "/dev/" + *z.name.Load() }

func (z *fuzzer) count(op string, err error) {
	key := op + " ok"
	if err != nil {
		var e unix.Errno
		if errors.As(err, &e) {
			key = op + " " + unix.ErrnoName(e)
		} else {
			key = op + " " + err.Error()
		}
	}
	v, _ := z.errnos.LoadOrStore(key, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func ioctl(fd int, cmd uintptr, b []byte) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(unsafe.Pointer(&b[0])))
	runtime.KeepAlive(b)
	if e != 0 {
		return e
	}
	return nil
}

// worker is one thread of the fuzzer with its own files and GPU memory.
type worker struct {
	z       *fuzzer
	rng     *rand.Rand
	fds     []int
	allocs  []*simgpu.Alloc
	handles []uint64 // handles seen, live or not
	ids     []uint64 // async transfer ids seen
	efd     int
	unpriv  bool       // without CAP_SYS_RAWIO: revocable GPU pins get EPERM
	pages   [16]uint64 // QUERY's table
	release [2]uint32  // STREAM_RELEASE's slots
	lastID  uint64     // the id the last STREAM_START wrote back
}

func (w *worker) fd() int {
	// The unprivileged worker's files are its own: the driver grants
	// revocable pins by the opener's capability, and a file opened with
	// it would open NVIDIA's window to this worker.
	if !w.unpriv && w.rng.IntN(4) == 0 {
		// One the dup2 thread replaces, maybe while this call runs.
		return int(w.z.slots[w.rng.IntN(dupSlots)].Load())
	}
	return w.fds[w.rng.IntN(len(w.fds))]
}

func (w *worker) handle() uint64 {
	if len(w.handles) == 0 || w.rng.IntN(8) == 0 {
		return uint64(w.rng.IntN(64))
	}
	return w.handles[w.rng.IntN(len(w.handles))]
}

func (w *worker) alloc() *simgpu.Alloc {
	i := w.rng.IntN(len(w.allocs))
	if w.allocs[i] == nil {
		a, err := w.z.gpu.Alloc(uint64(1+w.rng.IntN(8))<<16, simgpu.Pattern(w.rng.IntN(3)), w.rng.Uint32())
		w.z.count("alloc", err)
		if err != nil {
			return nil
		}
		w.allocs[i] = a
	}
	return w.allocs[i]
}

// sharedAlloc is one of the GPU allocations all workers share, made if
// its slot is empty.
func (w *worker) sharedAlloc() *simgpu.Alloc {
	slot := &w.z.shared[w.rng.IntN(sharedAllocs)]
	if a := slot.Load(); a != nil {
		return a
	}
	a, err := w.z.gpu.Alloc(uint64(1+w.rng.IntN(8))<<16, simgpu.Pattern(w.rng.IntN(3)), w.rng.Uint32())
	w.z.count("alloc", err)
	if err != nil {
		return nil
	}
	if !slot.CompareAndSwap(nil, a) {
		w.z.count("free", a.Free())
		return slot.Load()
	}
	return a
}

// freeShared frees a shared allocation, while other workers may be
// pinning it.
func (w *worker) freeShared() {
	if a := w.z.shared[w.rng.IntN(sharedAllocs)].Swap(nil); a != nil {
		w.z.count("free-shared", a.Free())
	}
}

func (w *worker) pin() {
	le := binary.LittleEndian
	b := make([]byte, sizePin)
	kind := []uint32{pinGPU, pinHost}[w.rng.IntN(2)]
	var addr, n uint64
	op := "pin"
	persistent := false
	fd := int32(-1)
	if kind == pinGPU {
		a := w.alloc()
		shared := w.rng.IntN(2) == 0
		if shared {
			a = w.sharedAlloc()
		}
		if a == nil {
			return
		}
		off := uint64(w.rng.IntN(int(a.Size)))
		addr, n = a.VA+off, 1+uint64(w.rng.IntN(int(a.Size-off)))
		persistent = w.rng.IntN(4) == 0
		if shared && !w.unpriv {
			// A revocable pin racing a free of its memory is NVIDIA's
			// own window (a use after free in nvidia_p2p_dma_map_pages):
			// only unprivileged threads, which get EPERM, try one here.
			persistent = w.rng.IntN(2) == 0
			if !persistent {
				// Through a dma-buf, which holds the memory.
				f, err := a.ExportDmabuf(a.VA, a.Size)
				w.z.count("export", err)
				if err != nil {
					return
				}
				defer f.Close()
				kind, fd, addr, op = pinDmabuf, int32(f.Fd()), off, "pin-dmabuf"
			}
		}
		if shared {
			op += "-shared"
		}
		if persistent {
			le.PutUint32(b[4:], 1)
		}
	} else if w.rng.IntN(2) == 0 {
		w.z.host.mu.Lock()
		defer w.z.host.mu.Unlock()
		if w.z.host.mem == nil || w.z.host.pins >= maxSharedPins {
			if w.z.host.mem != nil {
				unix.Munmap(w.z.host.mem) // the pins keep their pages
			}
			mem, err := unix.Mmap(-1, 0, hostPinBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			w.z.count("mmap", err)
			if err != nil {
				w.z.host.mem = nil
				return
			}
			w.z.host.mem, w.z.host.pins = mem, 0
		}
		w.z.host.pins++
		base := uint64(uintptr(unsafe.Pointer(&w.z.host.mem[0])))
		if w.rng.IntN(2) == 0 {
			// A few bytes of one page, which other pins share.
			page := uint64(w.rng.IntN(hostPinBytes/4096)) * 4096
			off := uint64(w.rng.IntN(4000))
			addr, n = base+page+off, 1+uint64(w.rng.IntN(int(4096-off)))
		} else {
			off := uint64(w.rng.IntN(hostPinBytes))
			addr, n = base+off, 1+uint64(w.rng.IntN(hostPinBytes-int(off)))
		}
		op = "pin-host-shared"
	} else {
		// Fresh memory for each host pin, unmapped again once pinned (the
		// pin keeps its pages).
		host, err := unix.Mmap(-1, 0, hostPinBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			w.z.count("mmap", err)
			return
		}
		defer unix.Munmap(host)
		off := uint64(w.rng.IntN(len(host)))
		addr = uint64(uintptr(unsafe.Pointer(&host[0]))) + off
		n = 1 + uint64(w.rng.IntN(len(host)-int(off)))
	}
	mangled := w.rng.IntN(64) == 0
	if mangled {
		kind = []uint32{0, pinDmabuf + 1}[w.rng.IntN(2)] // no kind, or past the last
	}
	le.PutUint32(b[0:], kind)
	le.PutUint64(b[8:], addr)
	le.PutUint64(b[16:], n)
	le.PutUint32(b[24:], uint32(fd))
	err := ioctl(w.fd(), ioc(iocRW, nrPin, sizePin), b)
	w.z.count(op, err)
	// ENODEV: the file's device was unbound, which every call checks first.
	if w.unpriv && kind == pinGPU && !persistent && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENODEV) {
		w.z.t.Errorf("revocable GPU pin without CAP_SYS_RAWIO: %v, want EPERM", err)
	}
	if err == nil {
		w.handles = append(w.handles, le.Uint64(b[32:]))
		if len(w.handles) > 64 {
			w.handles = w.handles[1:]
		}
	}
}

// streamRace starts a stream on a file of its own and ends it three ways
// at once: its memory freed (the pin revoked: the stream ends by itself),
// STREAM_STOP (a stream's Close), and the file closed, from three threads.
func (w *worker) streamRace() {
	le := binary.LittleEndian
	fd, err := unix.Open(w.z.path(), unix.O_RDWR|unix.O_CLOEXEC, 0)
	w.z.count("open", err)
	if err != nil {
		return
	}
	a, err := w.z.gpu.Alloc(4<<16, simgpu.Pattern(w.rng.IntN(3)), w.rng.Uint32())
	w.z.count("alloc", err)
	if err != nil {
		unix.Close(fd)
		return
	}
	b := make([]byte, sizePin)
	le.PutUint32(b[0:], pinGPU)
	if w.unpriv {
		le.PutUint32(b[4:], 1) // persistent: the free waits for the unpin
	}
	le.PutUint64(b[8:], a.VA)
	le.PutUint64(b[16:], a.Size)
	le.PutUint32(b[24:], ^uint32(0))
	err = ioctl(fd, ioc(iocRW, nrPin, sizePin), b)
	w.z.count("stream-race-pin", err)
	if err == nil {
		h := le.Uint64(b[32:])
		n := 2 + w.rng.IntN(3)
		slots := make([]uint64, 3*n)
		for i := 0; i < n; i++ {
			slots[3*i], slots[3*i+1], slots[3*i+2] = h, uint64(i)<<16, 1<<16
		}
		s := make([]byte, sizeStream)
		le.PutUint32(s[0:], 1)
		le.PutUint32(s[4:], uint32(n))
		le.PutUint64(s[8:], uint64(uintptr(unsafe.Pointer(&slots[0]))))
		w.z.count("stream-race-start", ioctl(fd, ioc(iocW, nrStreamStart, sizeStream), s))
		runtime.KeepAlive(slots)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.z.count("stream-race-free", a.Free())
	}()
	stopFirst := w.rng.IntN(2) == 0
	go func() {
		defer wg.Done()
		if stopFirst {
			b := make([]byte, sizeStop)
			le.PutUint32(b[0:], 1)
			w.z.count("stream-race-stop", ioctl(fd, ioc(iocW, nrStop, sizeStop), b))
		}
		w.z.count("close", unix.Close(fd))
	}()
	wg.Wait()
}

func (w *worker) xfer(async bool) {
	le := binary.LittleEndian
	segs := make([]uint64, 3*(1+w.rng.IntN(3)))
	for i := 0; i < len(segs); i += 3 {
		segs[i] = w.handle()
		segs[i+1] = uint64(w.rng.IntN(1 << 16))
		segs[i+2] = 1 + uint64(w.rng.IntN(1<<15))
	}
	b := make([]byte, sizeXfer)
	dir := uint32(w.rng.IntN(2))
	le.PutUint32(b[0:], dir)
	// Channel 1 is the stream pair. H2C 1 feeds the rig's checking sink,
	// whose counts later tests read: the fuzzer's garbage stays out of it.
	le.PutUint32(b[4:], uint32(w.rng.IntN(2))*dir)
	le.PutUint32(b[12:], uint32(len(segs)/3)) // nsegs
	le.PutUint64(b[16:], uint64(uintptr(unsafe.Pointer(&segs[0]))))
	le.PutUint64(b[24:], uint64(w.rng.IntN(1<<20)))
	le.PutUint32(b[32:], 300) // timeout_ms
	le.PutUint32(b[36:], ^uint32(0))
	if async {
		le.PutUint32(b[8:], 1)
		if w.rng.IntN(2) == 0 {
			le.PutUint32(b[36:], uint32(w.efd))
		}
	}
	if le.Uint32(b[4:]) == 1 {
		le.PutUint64(b[24:], 0) // the stream channels take no card address
	}
	err := ioctl(w.fd(), ioc(iocRW, nrXfer, sizeXfer), b)
	runtime.KeepAlive(segs)
	if async {
		w.z.count("xfer-async", err)
	} else {
		w.z.count("xfer", err)
	}
	if async && err == nil {
		w.ids = append(w.ids, le.Uint64(b[48:]))
		if len(w.ids) > 64 {
			w.ids = w.ids[1:]
		}
	}
}

func (w *worker) cancel() {
	b := make([]byte, sizeCancel)
	id := uint64(w.rng.IntN(8))
	if n := len(w.ids); n > 0 && w.rng.IntN(4) != 0 {
		// A recent one, the last, or one about to be handed out.
		id = w.ids[max(0, n-1-w.rng.IntN(4))] + uint64(w.rng.IntN(3))
	}
	binary.LittleEndian.PutUint64(b, id)
	w.z.count("cancel", ioctl(w.fd(), ioc(iocW, nrCancel, sizeCancel), b))
}

func (w *worker) stream() {
	le := binary.LittleEndian
	fd := w.fd()
	switch w.rng.IntN(3) {
	case 0:
		n := 2 + w.rng.IntN(6)
		slots := make([]uint64, 3*n)
		h := w.handle()
		for i := 0; i < n; i++ {
			slots[3*i], slots[3*i+1], slots[3*i+2] = h, uint64(i)<<12, 4096
		}
		b := make([]byte, sizeStream)
		le.PutUint32(b[0:], 1)
		le.PutUint32(b[4:], uint32(n))
		le.PutUint64(b[8:], uint64(uintptr(unsafe.Pointer(&slots[0]))))
		// The read-write number writes the stream's id back; ABI 1's
		// first, write-only one starts a stream without.
		if w.rng.IntN(2) == 0 {
			err := ioctl(fd, ioc(iocRW, nrStreamStart, sizeStream), b)
			w.z.count("stream-start-id", err)
			if err == nil {
				w.lastID = le.Uint64(b[24:])
			}
		} else {
			w.z.count("stream-start", ioctl(fd, ioc(iocW, nrStreamStart, sizeStream), b))
		}
		runtime.KeepAlive(slots)
	case 1:
		// On the heap (a worker's field): the ioctl argument holds its
		// address as an integer, which a moving stack would invalidate.
		slots := w.release[:]
		slots[0], slots[1] = uint32(w.rng.IntN(8)), uint32(w.rng.IntN(8))
		b := make([]byte, sizeRelease)
		le.PutUint32(b[0:], uint32(w.rng.IntN(2)))
		le.PutUint32(b[4:], uint32(1+w.rng.IntN(2)))
		le.PutUint64(b[8:], uint64(uintptr(unsafe.Pointer(&slots[0]))))
		le.PutUint64(b[16:], w.streamID())
		w.z.count("stream-release", ioctl(fd, ioc(iocW, nrRelease, sizeRelease), b))
		runtime.KeepAlive(slots)
	default:
		size := sizeStop
		if w.rng.IntN(2) == 0 {
			size = sizeStopID
		}
		b := make([]byte, size)
		le.PutUint32(b[0:], uint32(w.rng.IntN(maxChannels)))
		if size == sizeStopID {
			le.PutUint64(b[8:], w.streamID())
		}
		w.z.count("stream-stop", ioctl(fd, ioc(iocW, nrStop, uintptr(size)), b))
	}
}

// streamID names a stream for a release or stop: none (ABI 1), the last
// one this worker started (which may have ended, or be another file's),
// or one guessed.
func (w *worker) streamID() uint64 {
	switch w.rng.IntN(3) {
	case 0:
		return 0
	case 1:
		return w.lastID
	}
	return w.rng.Uint64N(w.lastID + 3)
}

// hostPinBytes is the memory behind one host pin.
const hostPinBytes = 16 << 10

// maxChannels is the ABI's channel count per direction.
const maxChannels = 4

// infoPinnedTotal is the offset of pinned_total in struct gpufpga_info.
const infoPinnedTotal = 88

func (w *worker) read() {
	var buf [sizeCompletion * 8]byte
	fd := w.fd()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, err := unix.Poll(fds, 0)
	w.z.count("poll", err)
	// A worker's own file is made non-blocking here; a shared one was
	// opened so, as the dup2 thread may swap it in between.
	_ = unix.SetNonblock(fd, true)
	_, err = unix.Read(fd, buf[:sizeCompletion*(1+w.rng.IntN(8))])
	if errors.Is(err, unix.EAGAIN) {
		err = nil
	}
	w.z.count("read", err)
	var v [8]byte
	_, _ = unix.Read(w.efd, v[:])
}

func (w *worker) query() {
	b := make([]byte, sizeQuery)
	binary.LittleEndian.PutUint64(b, w.handle())
	pages := w.pages[:] // on the heap, as release's slots
	if w.rng.IntN(2) == 0 {
		binary.LittleEndian.PutUint64(b[8:], uint64(uintptr(unsafe.Pointer(&pages[0]))))
		binary.LittleEndian.PutUint32(b[16:], uint32(len(pages)))
	}
	w.z.count("query", ioctl(w.fd(), ioc(iocRW, nrQuery, sizeQuery), b))
	runtime.KeepAlive(pages)
}

func (w *worker) unpin() {
	b := make([]byte, sizeUnpin)
	h := w.handle()
	binary.LittleEndian.PutUint64(b, h)
	err := ioctl(w.fd(), ioc(iocW, nrUnpin, sizeUnpin), b)
	w.z.count("unpin", err)
	if err == nil {
		for i, x := range w.handles {
			if x == h {
				w.handles = append(w.handles[:i], w.handles[i+1:]...)
				break
			}
		}
	}
}

// reopen replaces one of the worker's files: closed, duplicated, or handed
// to a child process that closes it last.
func (w *worker) reopen() {
	i := w.rng.IntN(len(w.fds))
	old := w.fds[i]
	switch w.rng.IntN(4) {
	case 0: // dup: the same open file twice
		nfd, err := unix.FcntlInt(uintptr(old), unix.F_DUPFD_CLOEXEC, 0)
		w.z.count("dup", err)
		if err == nil {
			w.z.count("close", unix.Close(old))
			w.fds[i] = nfd
		}
		return
	case 1: // fork: a child inherits the file and may close it last
		if w.rng.IntN(8) == 0 {
			// The child gets a duplicate, which f owns and closes.
			cfd, err := unix.FcntlInt(uintptr(old), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				w.z.count("fork", err)
				break
			}
			f := os.NewFile(uintptr(cfd), "gpufpga")
			cmd := exec.Command("/proc/self/exe", "-test.run=^$")
			cmd.ExtraFiles = []*os.File{f}
			cmd.Env = append(os.Environ(), "GPUFPGA_FUZZ_CHILD_FD=3")
			err = cmd.Start()
			f.Close()
			w.z.count("fork", err)
			if err == nil {
				w.z.children.Add(1)
				go func() {
					defer w.z.children.Done()
					_ = cmd.Wait()
				}()
			}
		}
	}
	w.z.count("close", unix.Close(old))
	nfd, err := unix.Open(w.z.path(), unix.O_RDWR|unix.O_CLOEXEC, 0)
	w.z.count("open", err)
	for try := 0; err != nil && try < 10000; try++ {
		// The device is being unbound: wait for it to come back.
		time.Sleep(time.Millisecond)
		nfd, err = unix.Open(w.z.path(), unix.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		w.z.t.Errorf("%s did not come back: %v\n%s", w.z.path(), err, dmesgTail())
		nfd, _ = unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	}
	w.fds[i] = nfd
}

// reopenUnprivileged replaces the worker's files with ones it opens
// itself, without CAP_SYS_RAWIO.
func (w *worker) reopenUnprivileged() {
	for i, old := range w.fds {
		fd, err := unix.Open(w.z.path(), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			w.z.t.Errorf("reopen without CAP_SYS_RAWIO: %v", err)
			continue
		}
		unix.Close(old)
		w.fds[i] = fd
	}
}

func (w *worker) free() {
	i := w.rng.IntN(len(w.allocs))
	if w.allocs[i] != nil {
		w.z.count("free", w.allocs[i].Free())
		w.allocs[i] = nil
	}
}

func (w *worker) step() {
	switch r := w.rng.IntN(100); {
	case r < 16:
		w.pin()
	case r < 24:
		w.unpin()
	case r < 30:
		w.query()
	case r < 38:
		w.xfer(false)
	case r < 52:
		w.xfer(true)
	case r < 60:
		w.cancel()
	case r < 72:
		w.read()
	case r < 80:
		w.stream()
	case r < 81:
		w.streamRace()
	case r < 84:
		w.free()
	case r < 86:
		w.freeShared()
	case r < 88:
		w.reopen()
	default:
		// INFO, cheap and always valid: keeps the fds busy between the rest.
		b := make([]byte, 128)
		w.z.count("info", ioctl(w.fd(), ioc(2, 0, 128), b))
	}
}

func (w *worker) close() {
	for _, fd := range w.fds {
		w.z.count("close", unix.Close(fd))
	}
	for _, a := range w.allocs {
		if a != nil {
			w.z.count("free", a.Free())
		}
	}
	unix.Close(w.efd)
}

// rebind unbinds the FPGA from the driver and binds it again.
func (z *fuzzer) rebind(addr string) error {
	if err := os.WriteFile(pciAddr+"/unbind", []byte(addr), 0); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	if err := os.WriteFile(pciAddr+"/bind", []byte(addr), 0); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	for i := 0; ; i++ {
		name, err := deviceName(addr)
		if err == nil {
			if _, err = os.Stat("/dev/" + name); err == nil {
				z.name.Store(&name)
				break
			}
		}
		if i == 5000 {
			return fmt.Errorf("no device node after rebind: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	z.unbinds.Add(1)
	return nil
}

// deviceName is the misc device of the FPGA at PCI address addr.
func deviceName(addr string) (string, error) {
	ents, err := os.ReadDir("/sys/bus/pci/devices/" + addr + "/misc")
	if err != nil {
		return "", err
	}
	if len(ents) != 1 {
		return "", fmt.Errorf("%s has %d misc devices", addr, len(ents))
	}
	return ents[0].Name(), nil
}

// dmesgTail is the end of the kernel log, for failures the console's log
// level hides.
func dmesgTail() string {
	log, err := guest.Dmesg()
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(log, "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

func boundDevice() (string, error) {
	ents, err := os.ReadDir(pciAddr)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if strings.Count(e.Name(), ":") == 2 {
			return e.Name(), nil
		}
	}
	return "", errors.New("gpufpga is bound to no device")
}

// TestConcurrentABIFuzz runs the fuzzer. Its seed and operation count come
// from the kernel command line (gpufpga_fuzz.seed, gpufpga_fuzz.ops); the
// seed is printed so that a failure can be replayed with it.
func TestConcurrentABIFuzz(t *testing.T) {
	guest.Require(t)
	guest.MustLoad(t, "nvp2p_sim")
	guest.MustLoad(t, "gpufpga", "timeout_ms=300", "card_mem_size=67108864", "max_queued=64")
	guest.MustLoad(t, "gpufpga_nv")

	seed := cmdline("seed", uint64(time.Now().UnixNano()))
	total := int64(cmdline("ops", 20000))
	t.Logf("seed %d, %d operations, %d threads (replay: gpufpga_fuzz.seed=%d on the guest's command line, GPUFPGA_FUZZ_SEED=%d for make)",
		seed, total, workers, seed, seed)

	gpu, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	addr, err := boundDevice()
	if err != nil {
		t.Fatal(err)
	}
	z := &fuzzer{t: t, gpu: gpu}
	name, err := deviceName(addr)
	if err != nil {
		t.Fatal(err)
	}
	z.name.Store(&name)
	dmaErrors := dmaDebugAllErrors(t)
	for i := range z.slots {
		fd, err := unix.Open(z.path(), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		z.slots[i].Store(int32(fd))
	}

	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for i := range workers {
		// Worker 0 runs without CAP_SYS_RAWIO.
		w := &worker{z: z, rng: rand.New(rand.NewPCG(seed, uint64(i))), allocs: make([]*simgpu.Alloc, allocsEa), unpriv: i == 0}
		if w.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		for range fdsEach {
			fd, err := unix.Open(z.path(), unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.fds = append(w.fds, fd)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Never unlocked: the thread ends with the goroutine, and
			// its capabilities with it.
			runtime.LockOSThread()
			if w.unpriv {
				if err := dropCapability(unix.CAP_SYS_RAWIO); err != nil {
					errs <- err
				}
				w.reopenUnprivileged()
			}
			for {
				n := z.ops.Add(1)
				if n > total {
					break
				}
				if n%max(total/10, 1) == 0 {
					t.Logf("%d operations", n)
				}
				w.step()
			}
			w.close()
		}()
	}
	// Replace the shared descriptors under the workers' calls: dup2 of a
	// fresh file, or of the other slot's, onto each.
	dupDone := make(chan struct{})
	go func() {
		defer close(dupDone)
		rng := rand.New(rand.NewPCG(seed, 98))
		for z.ops.Load() < total {
			i := rng.IntN(dupSlots)
			var nfd int
			var err error
			if rng.IntN(4) == 0 {
				nfd, err = unix.FcntlInt(uintptr(z.slots[1-i].Load()), unix.F_DUPFD_CLOEXEC, 0)
			} else {
				nfd, err = unix.Open(z.path(), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			}
			z.count("dup2-open", err)
			if err != nil {
				time.Sleep(time.Millisecond) // unbound: wait for the rebind
				continue
			}
			z.count("dup2", unix.Dup3(nfd, int(z.slots[i].Load()), unix.O_CLOEXEC))
			unix.Close(nfd)
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
	}()
	// Unbind and rebind the device a few times while the workers run.
	done := make(chan struct{})
	go func() {
		rng := rand.New(rand.NewPCG(seed, 99))
		for z.ops.Load() < total {
			next := z.ops.Load() + total/5 + int64(rng.IntN(int(total/10+1)))
			for z.ops.Load() < next && z.ops.Load() < total {
				time.Sleep(10 * time.Millisecond)
			}
			if z.ops.Load() >= total {
				break
			}
			if err := z.rebind(addr); err != nil {
				errs <- fmt.Errorf("%w\n%s", err, dmesgTail())
				break
			}
		}
		close(done)
	}()
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		<-done
		<-dupDone
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(stuckAfter):
		dumpStuck(t)
	}
	for i := range z.slots {
		z.count("close", unix.Close(int(z.slots[i].Load())))
	}
	for i := range z.shared {
		if a := z.shared[i].Swap(nil); a != nil {
			z.count("free-shared", a.Free())
		}
	}
	if z.host.mem != nil {
		unix.Munmap(z.host.mem)
	}
	z.children.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	var lines []string
	z.errnos.Range(func(k, v any) bool {
		lines = append(lines, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d operations, %d unbind/rebind cycles; results: %s", total, z.unbinds.Load(), strings.Join(lines, " "))
	for _, l := range lines {
		// EFAULT would mean the kernel misread memory the fuzzer owns;
		// ENOTTY an ioctl number it should know.
		if strings.Contains(l, " EFAULT=") || strings.Contains(l, " ENOTTY=") {
			t.Errorf("unexpected result: %s", l)
		}
	}
	checkNothingLeft(t, gpu, *z.name.Load())
	checkDMADebug(t, dmaErrors)
	guest.CheckDmesg(t)
}

// stuckAfter is how long the workers may take to finish their last
// operations before the fuzzer takes them for hung and dumps every kernel
// and Go stack: a diagnosis, far past any pace of the slowest kernel, so
// that a hang fails with its stacks instead of the package's timeout.
const stuckAfter = 8 * time.Minute

// dumpStuck logs the kernel stacks of blocked tasks and panics with every
// goroutine's stack.
func dumpStuck(t *testing.T) {
	_ = os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0)
	log, _ := guest.Dmesg()
	lines := strings.Split(log, "\n")
	t.Logf("workers stuck; blocked tasks:\n%s", strings.Join(lines[max(0, len(lines)-400):], "\n"))
	debug.SetTraceback("all")
	panic("abifuzz: workers did not finish")
}

const dmaDebug = "/sys/kernel/debug/dma-api/"

// dmaDebugAllErrors makes the DMA-API checker (the debug kernel's) report
// every error, not only the first of the boot, and returns its error
// count so far; -1 without the checker.
func dmaDebugAllErrors(t *testing.T) int {
	if _, err := os.Stat(dmaDebug); err != nil {
		t.Log("no DMA-API checker on this kernel")
		return -1
	}
	if err := os.WriteFile(dmaDebug+"all_errors", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	return dmaDebugValue(t, "error_count")
}

func dmaDebugValue(t *testing.T, name string) int {
	b, err := os.ReadFile(dmaDebug + name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s%s: %v", dmaDebug, name, err)
	}
	return n
}

// dmaDebugFlag reads one of the checker's debugfs booleans ("Y" or "N").
func dmaDebugFlag(t *testing.T, name string) bool {
	b, err := os.ReadFile(dmaDebug + name)
	if err != nil {
		t.Fatal(err)
	}
	switch v := strings.TrimSpace(string(b)); v {
	case "Y":
		return true
	case "N":
		return false
	default:
		t.Fatalf("%s%s reads %q, want Y or N", dmaDebug, name, v)
		return false
	}
}

// checkDMADebug fails the test if the DMA-API checker counted an error,
// before the fuzzer or during it, or gave up (out of entries, it disables
// itself and checks nothing more).
func checkDMADebug(t *testing.T, before int) {
	if before < 0 {
		return
	}
	if n := dmaDebugValue(t, "error_count"); n != 0 {
		t.Errorf("DMA-API checker: %d errors (%d before the fuzzer)", n, before)
	}
	if dmaDebugFlag(t, "disabled") {
		t.Error("DMA-API checker disabled itself (out of entries?): the run was not checked")
	}
	t.Logf("DMA-API checker: no errors, %d entries free at least", dmaDebugValue(t, "min_free_entries"))
}

// dropCapability removes c from the calling thread's effective set;
// Linux keeps capabilities per thread, and the caller's is locked.
func dropCapability(c int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[c/32].Effective &^= 1 << (c % 32)
	return unix.Capset(&hdr, &data[0])
}

// TestZZKmemleak scans for leaks once the fuzzer's modules are unloaded.
func TestZZKmemleak(t *testing.T) { guest.CheckKmemleak(t) }

// checkNothingLeft waits for children holding files to exit, then asserts
// that no pin, allocation or mapping is left, in the driver and in the
// simulated GPU, and that the two agree.
func checkNothingLeft(t *testing.T, gpu *simgpu.GPU, name string) {
	t.Helper()
	var c simgpu.Counters
	var pins []byte
	var err error
	for range 500 {
		if c, err = gpu.Counters(); err != nil {
			t.Fatal(err)
		}
		if pins, err = os.ReadFile("/sys/kernel/debug/gpufpga/" + name + "/pins"); err != nil {
			t.Fatal(err)
		}
		if c.LivePins == 0 && c.LiveAllocs == 0 && c.LiveDmabufs == 0 && strings.Count(string(pins), "\n") == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.LivePins != 0 || c.LiveAllocs != 0 || c.LiveDmabufs != 0 {
		t.Errorf("simulated GPU: %d pins, %d allocations, %d dma-bufs left", c.LivePins, c.LiveAllocs, c.LiveDmabufs)
	}
	if n := strings.Count(string(pins), "\n") - 1; n != 0 {
		t.Errorf("driver: %d pins left:\n%s", n, pins)
	}
	info := make([]byte, 128)
	fd, err := unix.Open("/dev/"+name, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := ioctl(fd, ioc(2, 0, 128), info); err != nil {
		t.Fatal(err)
	}
	// pinned_total of struct gpufpga_info: the driver's count of pinned bytes.
	if n := binary.LittleEndian.Uint64(info[infoPinnedTotal:]); n != 0 {
		t.Errorf("driver counts %d bytes pinned with nothing pinned", n)
	}
}
