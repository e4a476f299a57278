//go:build vmguest

package kmodtest

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// The tests of this file hold the driver to what NVIDIA's nv-p2p.c does
// and the simulator now does as strictly: dma_map_pages reads the table
// unlocked, put_pages can be refused, the free callback runs under an API
// lock lockdep sees, and dma_map_pages can refuse the peer.

// TestNVTopologyRefused: NVIDIA's dma_map_pages refuses a peer behind a
// PCI topology it does not support with -ENOTSUPP, after get_pages
// succeeded. The pin fails with EOPNOTSUPP (user space cannot name
// ENOTSUPP), revocable or persistent, and the driver gives the pages back.
func TestNVTopologyRefused(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 1<<20, simgpu.RandomRuns)
	defer a.Free()
	before := counters(t, g)
	guest.SetParam(t, "nvp2p_sim", "p2p_topology_ok", "N")
	for _, persistent := range []bool{false, true} {
		p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{Persistent: persistent})
		if !errors.Is(err, unix.EOPNOTSUPP) {
			if err == nil {
				p.Unpin()
			}
			t.Fatalf("pin (persistent %v) behind an unsupported topology: %v, want EOPNOTSUPP", persistent, err)
		}
	}
	if c := counters(t, g); c.LivePins != before.LivePins {
		t.Fatalf("simulated GPU holds %d pins after refused mappings, want %d", c.LivePins, before.LivePins)
	}
}

// TestNVPutPagesRefused: NVIDIA's put_pages can fail (RM refuses with
// NV_ERR_INVALID_STATE, -EIO), leaving the pin registered, and a later free
// of the memory still calls the free callback with the driver's data. The
// unpin succeeds, the kernel log says what stays pinned, and the callback
// that comes later finds its pin alive (a freed one is a use after free:
// KASAN reports it on the debug kernel, a poisoned spinlock hangs the
// callback elsewhere). Through UNPIN, through close, and through a pin
// that fails after get_pages.
func TestNVPutPagesRefused(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	check := func(name string, a *simgpu.Alloc, before simgpu.Counters) {
		t.Helper()
		if c := counters(t, g); c.LivePins != before.LivePins+1 {
			t.Fatalf("%s: simulated GPU holds %d pins, want %d (the refused one)", name, c.LivePins, before.LivePins+1)
		}
		log, err := guest.Dmesg()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log, "nvidia_p2p_put_pages failed (-5)") {
			t.Fatalf("%s: no warning of the refused put_pages in the kernel log", name)
		}
		if err := a.Free(); err != nil {
			t.Fatal(err)
		}
		if c := counters(t, g); c.LivePins != before.LivePins || c.CallbacksFired != before.CallbacksFired+1 {
			t.Fatalf("%s: after the free: %+v (before %+v)", name, c, before)
		}
	}

	// UNPIN.
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	before := counters(t, g)
	p := pinGPU(t, d, a.VA, a.Size)
	guest.SetParam(t, "nvp2p_sim", "put_pages_fail", "1")
	if err := p.Unpin(); err != nil {
		t.Fatalf("unpin with put_pages refused: %v, want success", err)
	}
	if _, err := p.Query(false); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("query after unpin: %v, want ENOENT", err)
	}
	check("unpin", a, before)

	// Close of the file that holds the pin.
	a = alloc(t, g, 1<<20, simgpu.Fragmented)
	before = counters(t, g)
	d2, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d2.PinGPU(a.VA, a.Size, p2p.PinOptions{}); err != nil {
		t.Fatal(err)
	}
	guest.SetParam(t, "nvp2p_sim", "put_pages_fail", "1")
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	check("close", a, before)

	// A pin that fails after get_pages: its put_pages is refused too.
	a = alloc(t, g, 1<<20, simgpu.Fragmented)
	before = counters(t, g)
	restore := guest.SetParam(t, "nvp2p_sim", "p2p_topology_ok", "N")
	guest.SetParam(t, "nvp2p_sim", "put_pages_fail", "1")
	if p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{}); !errors.Is(err, unix.EOPNOTSUPP) {
		if err == nil {
			p.Unpin()
		}
		t.Fatalf("pin behind an unsupported topology: %v, want EOPNOTSUPP", err)
	}
	restore()
	check("failed pin", a, before)
	if info, err := d.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("driver counts %d bytes pinned (%v), want 0", info.PinnedTotal, err)
	}
	guest.CheckDmesg(t)
}

// TestNVFreeCallbackUnderAPILock: the free callback runs under the
// simulated NVIDIA API lock (sim_rm_lock, an rw_semaphore as NVIDIA's),
// which put_pages and dma_map_pages take too. A revocation during a
// transfer makes the callback take the driver's channel and pin locks
// under it while other threads pin and unpin. On the debug kernel lockdep
// must have recorded those locks nested inside the API lock, so that an
// inversion (one of them held across a call into NVIDIA) is reported, and
// must report none.
func TestNVFreeCallbackUnderAPILock(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 200, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64)
	a := alloc(t, g, 4<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	other := alloc(t, g, 1<<20, simgpu.Contiguous)
	defer other.Free()
	done := make(chan error, 1)
	go func() {
		_, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: 20e9})
		done <- err
	}()
	waitInflight(t, p)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			q, err := d.PinGPU(other.VA, other.Size, p2p.PinOptions{})
			if err == nil {
				err = q.Unpin()
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("transfer over freed memory: %v, want ErrRevoked", err)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("pin and unpin beside the free: %v", err)
	default:
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
	guest.CheckDmesg(t)

	deps, err := lockdepDeps("sim_rm_lock")
	if errors.Is(err, os.ErrNotExist) {
		t.Log("no lockdep on this kernel: nothing more to check")
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lockdep: sim_rm_lock -> %s", strings.Join(deps, ", "))
	for _, want := range []string{"&ch->mutex", "&m->lock"} {
		found := false
		for _, dep := range deps {
			found = found || strings.Contains(dep, want)
		}
		if !found {
			t.Errorf("lockdep has no %s taken under sim_rm_lock: it does not see the free callback's locks", want)
		}
	}
}

// lockdepDeps lists the classes lockdep saw taken directly under the
// class named name (/proc/lockdep, with CONFIG_PROVE_LOCKING).
func lockdepDeps(name string) ([]string, error) {
	b, err := os.ReadFile("/proc/lockdep")
	if err != nil {
		return nil, err
	}
	var deps []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, " ") {
			f := strings.Split(l, ": ")
			in = len(f) > 1 && strings.TrimSpace(f[len(f)-1]) == name
			continue
		}
		if in {
			if _, dep, ok := strings.Cut(l, "] "); ok {
				deps = append(deps, strings.TrimSpace(dep))
			}
		}
	}
	if deps == nil {
		return nil, errors.New("lockdep lists no class " + name + " with dependencies")
	}
	return deps, nil
}

// TestNVFreeRacesUnprivilegedPins: GPU memory freed and allocated again
// while a thread without CAP_SYS_RAWIO pins it. Its revocable pins are
// refused with EPERM before NVIDIA is called, so NVIDIA's window (a free
// between get_pages and the unlocked dma_map_pages) stays closed to it;
// its persistent pins succeed or find the memory gone (EINVAL), and the
// kernel log stays clean.
func TestNVFreeRacesUnprivilegedPins(t *testing.T) {
	setup(t)
	g := openGPU(t)
	var cur sync.Mutex
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cur.Lock()
			old := a
			n, err := g.Alloc(uint64(1+i%4)<<16, simgpu.Pattern(i%3), uint32(i))
			if err == nil {
				a = n
			}
			cur.Unlock()
			if err == nil {
				old.Free()
			}
		}
	}()
	counts := map[string]int{}
	withoutCapability(t, unix.CAP_SYS_RAWIO, func() {
		// Opened without the capability: the opener's is what counts.
		u, err := p2p.Open(devPath)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		for i := range 400 {
			cur.Lock()
			va, size := a.VA, a.Size
			cur.Unlock()
			p, err := u.PinGPU(va, size, p2p.PinOptions{Persistent: i%2 == 1})
			switch {
			case i%2 == 0 && errors.Is(err, unix.EPERM):
				counts["revocable EPERM"]++
			case i%2 == 1 && err == nil:
				counts["persistent ok"]++
				if err := p.Unpin(); err != nil {
					t.Errorf("unpin: %v", err)
				}
			case i%2 == 1 && errors.Is(err, unix.EINVAL):
				counts["persistent EINVAL"]++
			default:
				t.Errorf("pin %d (persistent %v) racing a free: %v", i, i%2 == 1, err)
			}
		}
	})
	close(stop)
	wg.Wait()
	a.Free()
	t.Logf("results: %v", counts)
	if counts["revocable EPERM"] != 200 {
		t.Errorf("%d of 200 revocable pins refused with EPERM", counts["revocable EPERM"])
	}
	guest.CheckDmesg(t)
}
