//go:build vmguest

package bounce

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/guestrig"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestHostPinsRefusedGPUPinsWork: a host pin would hand the FPGA a bounce
// buffer's address, and DMA would land where user space never looks, so the
// driver refuses it and says why. Peer-to-peer GPU memory is not bounced.
func TestHostPinsRefusedGPUPinsWork(t *testing.T) {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmdline), "swiotlb=force") {
		t.Fatalf("needs a guest booted with swiotlb=force (vmtest's TestBounceBuffers): %s", cmdline)
	}
	r := guestrig.Open(t, "card_mem_size=67108864")
	host, err := r.Dev.AllocHost(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	_, err = r.Dev.PinHost(host.Bytes())
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrBounceBuffers) || !errors.As(err, &e) || e.Err != unix.EOPNOTSUPP || e.Hint() == "" {
		t.Fatalf("host pin under swiotlb=force: %v, want ErrBounceBuffers (EOPNOTSUPP)", err)
	}
	if info, err := r.Dev.Info(); err != nil || info.PinnedTotal != 0 {
		t.Fatalf("after the refused pin: %d bytes pinned (%v)", info.PinnedTotal, err)
	}

	a, err := r.GPU.Alloc(1<<20, simgpu.Fragmented, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	p, err := r.Dev.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	for _, dir := range []p2p.Direction{p2p.H2C, p2p.C2H} {
		res, err := r.Dev.Transfer(context.Background(), p2p.Transfer{Dir: dir, Segments: []p2p.Segment{p.Whole()}})
		if err != nil || res.Bytes != a.Size {
			t.Fatalf("%v transfer of GPU memory: %+v, %v", dir, res, err)
		}
	}
	guest.CheckDmesg(t)
}
