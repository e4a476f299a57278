//go:build vmguest

package kmodtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/hw/testbench/guest"
	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/hw/testbench/xdmamodel"
	"github.com/gpufpga/gpufpga/pkg/frame"
	"github.com/gpufpga/gpufpga/pkg/p2p"
	"github.com/gpufpga/gpufpga/pkg/sgl"
	"github.com/gpufpga/gpufpga/pkg/xdma"
)

func TestGPUPinsNeedTheBridge(t *testing.T) {
	setup(t)
	// gpufpga keeps working without NVIDIA's API: take the bridge out.
	if err := guest.UnloadModule("gpufpga_nv"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := guest.LoadModule("gpufpga_nv"); err != nil {
			t.Fatal(err)
		}
	}()
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Supports(p2p.KindGPU) || !info.Supports(p2p.KindHost) {
		t.Fatalf("without gpufpga_nv: pin kinds %v", info.PinKinds)
	}
	_, err = d.PinGPU(0x7f0000000000, 1<<16, p2p.PinOptions{})
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrP2PUnavailable) || !errors.As(err, &e) || e.Hint() == "" {
		t.Fatalf("GPU pin without the bridge: %v", err)
	}
}

func TestInfo(t *testing.T) {
	d := openDev(t)
	info, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	want := []p2p.Channel{
		{Dir: p2p.H2C, Index: 0}, {Dir: p2p.H2C, Index: 1, Stream: true},
		{Dir: p2p.C2H, Index: 0}, {Dir: p2p.C2H, Index: 1, Stream: true},
	}
	if !reflect.DeepEqual(info.Channels, want) {
		t.Fatalf("channels %+v, want %+v", info.Channels, want)
	}
	for _, k := range []p2p.PinKind{p2p.KindGPU, p2p.KindHost, p2p.KindDmabuf} {
		if !info.Supports(k) {
			t.Errorf("pin kind %v not available", k)
		}
	}
	if info.ABIVersion != 1 || info.MaxDescLen != xdma.MaxSegmentLen || info.CardMemSize != 64<<20 {
		t.Fatalf("info %+v", info)
	}
	// Module BTF, for fentry/fexit on the driver's functions.
	if _, err := os.Stat("/sys/kernel/btf/gpufpga"); err != nil {
		t.Errorf("no module BTF: %v", err)
	}
}

func runsOf(pages []uint64, ps uint64) (runs, largest int) {
	run := 0
	for i, p := range pages {
		if i > 0 && p == pages[i-1]+ps {
			run++
		} else {
			runs++
			run = 1
		}
		largest = max(largest, run)
	}
	return runs, largest
}

func TestPinGeometryMatchesSimulatedGPU(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	for _, pat := range []simgpu.Pattern{simgpu.Contiguous, simgpu.Fragmented, simgpu.RandomRuns} {
		for _, persistent := range []bool{false, true} {
			a := alloc(t, g, 2<<20, pat)
			table, err := a.Table()
			if err != nil {
				t.Fatal(err)
			}
			// Unaligned: 100 bytes in, ending 100 bytes short of the end.
			p, err := d.PinGPU(a.VA+100, a.Size-200, p2p.PinOptions{Persistent: persistent})
			if err != nil {
				t.Fatalf("pattern %d persistent %v: %v", pat, persistent, err)
			}
			runs, largest := runsOf(table, simgpu.PageSize)
			if p.Offset != 100 || p.Pages != len(table) || p.PageSize != simgpu.PageSize || p.Runs != runs || p.LargestRun != largest {
				t.Fatalf("pattern %d: pin %+v, want %d pages in %d runs (largest %d)", pat, p, len(table), runs, largest)
			}
			st, err := p.Query(true)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(st.Table.Pages, table) || st.Revoked {
				t.Fatalf("pattern %d: queried table differs from the simulated GPU's", pat)
			}
			if err := p.Unpin(); err != nil {
				t.Fatal(err)
			}
			if err := a.Free(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if c := counters(t, g); c.LivePins != 0 || c.LiveAllocs != 0 {
		t.Fatalf("after unpinning: %+v", c)
	}
}

func TestPinHostAndDmabuf(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	buf, err := hostMem(d, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := d.PinHost(buf[10 : 1<<20-10])
	if err != nil {
		t.Fatal(err)
	}
	if hp.Offset != 10 || hp.PageSize != 4096 || hp.Pages != 256 || hp.Kind != p2p.KindHost {
		t.Fatalf("host pin %+v", hp)
	}
	a := alloc(t, g, 1<<20, simgpu.RandomRuns)
	table, _ := a.Table()
	f, err := a.ExportDmabuf(a.VA, a.Size)
	if guest.NVIDIAVariant() == guest.NVIDIAProprietary {
		// NVIDIA's proprietary driver exports no dma-bufs.
		if !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatalf("dma-buf export from the proprietary driver: %v, want EOPNOTSUPP", err)
		}
		if err := hp.Unpin(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dp, err := d.PinDmabuf(int(f.Fd()), 3*4096+5, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	st, err := dp.Query(true)
	if err != nil {
		t.Fatal(err)
	}
	// The dma-buf pin sees the same VRAM pages, in 4 KiB steps.
	for i, p := range st.Table.Pages {
		byteOff := uint64(3*4096 + i*4096)
		want := table[byteOff/simgpu.PageSize] + byteOff%simgpu.PageSize
		if p != want {
			t.Fatalf("dma-buf page %d at %#x, want %#x", i, p, want)
		}
	}
	if dp.Pages != 17 || dp.Offset != 5 {
		t.Fatalf("dma-buf pin %+v", dp)
	}
	// debugfs names each live pin's kind.
	gp := pinGPU(t, d, a.VA, 1<<16)
	pins, err := os.ReadFile("/sys/kernel/debug/gpufpga/gpufpga0/pins")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf(" %d host ", hp.Handle), fmt.Sprintf(" %d dmabuf ", dp.Handle), fmt.Sprintf(" %d gpu ", gp.Handle),
	} {
		if !strings.Contains(string(pins), want) {
			t.Errorf("debugfs pins lacks %q:\n%s", want, pins)
		}
	}
	for _, p := range []*p2p.Pin{hp, dp, gp} {
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	}
}

// expectedChain builds, with pkg/sgl and pkg/xdma, the chain the driver must
// have built for segs, at the ring address the driver reports.
func expectedChain(t *testing.T, segs []p2p.Segment, ringAddr uint64, spec xdma.ChainSpec) ([]byte, xdma.Chain) {
	t.Helper()
	b := sgl.Builder{Limits: sgl.Limits{MaxSegment: xdma.MaxSegmentLen}}
	for _, s := range segs {
		st, err := s.Pin.Query(true)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append(st.Table, s.Pin.Offset+s.Offset, s.Len); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, len(b.Segments())*xdma.DescSize)
	c, err := xdma.BuildChain(buf, ringAddr, b.Segments(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return buf, c
}

func readChain(t *testing.T, name string) (uint64, uint32, uint32, []byte) {
	t.Helper()
	b, err := os.ReadFile("/sys/kernel/debug/gpufpga/gpufpga0/chain-" + name)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:]), b[16:]
}

func TestDataBothWaysAndChainsMatchGo(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	const n = 3<<20 + 12345
	src := alloc(t, g, 4<<20, simgpu.Fragmented)
	dst := alloc(t, g, 4<<20, simgpu.RandomRuns)
	srcMem, _ := src.Bytes()
	dstMem, _ := dst.Bytes()
	fill(srcMem, 1)
	ps := pinGPU(t, d, src.VA+777, n)
	pd := pinGPU(t, d, dst.VA+4096, n)
	// Two segments per transfer, split unevenly, so windows concatenate.
	segsOf := func(p *p2p.Pin) []p2p.Segment {
		return []p2p.Segment{{Pin: p, Offset: 0, Len: 1<<20 + 3}, {Pin: p, Offset: 1<<20 + 3, Len: n - (1<<20 + 3)}}
	}
	res, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Channel: 0, CardAddr: 1 << 20, Segments: segsOf(ps)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != n {
		t.Fatalf("H2C moved %d bytes, want %d", res.Bytes, n)
	}
	addr, count, adj, got := readChain(t, "h2c0")
	want, c := expectedChain(t, segsOf(ps), addr, xdma.ChainSpec{Dir: xdma.H2C, CardAddr: 1 << 20})
	if int(count) != c.Count || uint8(adj) != c.FirstAdjacent || !bytes.Equal(got, want) {
		t.Fatalf("H2C chain differs from pkg/xdma's: %d descriptors adj %d, want %d adj %d", count, adj, c.Count, c.FirstAdjacent)
	}
	res, err = d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 0, CardAddr: 1 << 20, Segments: segsOf(pd)})
	if err != nil || res.Bytes != n {
		t.Fatalf("C2H: %v, %d bytes", err, res.Bytes)
	}
	addr, _, _, got = readChain(t, "c2h0")
	if want, _ := expectedChain(t, segsOf(pd), addr, xdma.ChainSpec{Dir: xdma.C2H, CardAddr: 1 << 20}); !bytes.Equal(got, want) {
		t.Fatal("C2H chain differs from pkg/xdma's")
	}
	if !bytes.Equal(dstMem[4096:4096+n], srcMem[777:777+n]) {
		t.Fatal("GPU -> card -> GPU changed the data")
	}
}

func TestStreamAndTwoChannelsAtOnce(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	const slot = 64 << 10
	if err := ctl.ConfigureSource(slot-frame.HeaderSize, 0, 64); err != nil {
		t.Fatal(err)
	}
	ring := alloc(t, g, 64*slot, simgpu.Fragmented)
	out := alloc(t, g, 8<<20, simgpu.RandomRuns)
	outMem, _ := out.Bytes()
	fill(outMem, 9)
	pr := pinGPU(t, d, ring.VA, ring.Size)
	po := pinGPU(t, d, out.VA, out.Size)
	var wg sync.WaitGroup
	var errStream, errMM error
	var resStream p2p.Result
	wg.Add(2)
	go func() {
		defer wg.Done()
		resStream, errStream = d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{pr.Whole()}})
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 4 && errMM == nil; i++ {
			_, errMM = d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Channel: 0, CardAddr: 8 << 20, Segments: []p2p.Segment{po.Whole()}})
		}
	}()
	wg.Wait()
	if errStream != nil || errMM != nil {
		t.Fatalf("stream: %v; memory-mapped: %v", errStream, errMM)
	}
	if resStream.Bytes != ring.Size {
		t.Fatalf("stream moved %d bytes, want %d", resStream.Bytes, ring.Size)
	}
	mem, _ := ring.Bytes()
	var chk frame.Checker
	for off := 0; off < len(mem); off += slot {
		if _, err := chk.Check(mem[off : off+slot]); err != nil {
			t.Fatalf("slot %d: %v", off/slot, err)
		}
	}
	if chk.Frames != 64 || chk.Gaps != 0 || chk.Duplicates != 0 {
		t.Fatalf("frames %+v", chk.Stats)
	}
	// And back out through the H2C stream into the checking sink.
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Channel: 1, Segments: []p2p.Segment{pr.Whole()}}); err != nil {
		t.Fatal(err)
	}
	sink, err := ctl.SinkStats()
	if err != nil {
		t.Fatal(err)
	}
	if sink.Frames != 64 || sink.Gaps != 0 || sink.CRCFailures != 0 {
		t.Fatalf("sink %+v", sink)
	}
}

func TestRevocationDuringTransfer(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	// A slow source keeps the stream transfer in flight.
	if err := ctl.ConfigureSource(4096-frame.HeaderSize, 200, 64); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4096-frame.HeaderSize, 0, 64)
	a := alloc(t, g, 4<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	before := counters(t, g)
	done := make(chan error, 1)
	go func() {
		_, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: 20e9})
		done <- err
	}()
	waitInflight(t, p)
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("transfer over freed memory: %v, want ErrRevoked", err)
	}
	if c := counters(t, g); c.CallbacksFired != before.CallbacksFired+1 || c.LivePins != before.LivePins-1 {
		t.Fatalf("after free: %+v (before %+v)", c, before)
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes landed in freed VRAM (%v)", late, err)
	}
	st, err := p.Query(false)
	if err != nil || !st.Revoked {
		t.Fatalf("pin state %+v, %v; want revoked", st, err)
	}
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: []p2p.Segment{p.Whole()}}); !errors.Is(err, p2p.ErrRevoked) {
		t.Fatalf("transfer on a revoked pin: %v", err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatalf("unpin of a revoked pin: %v", err)
	}
}

func TestInjectedFaultsAndRecovery(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	a := alloc(t, g, 1<<20, simgpu.Fragmented)
	p := pinGPU(t, d, a.VA, a.Size)
	xfer := p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: []p2p.Segment{p.Whole()}}
	for _, tc := range []struct {
		fault  xdmamodel.Fault
		err    error
		status uint32
	}{
		{xdmamodel.FaultBadMagic, p2p.ErrHardware, xdma.StatMagicStopped},
		{xdmamodel.FaultDescRead, p2p.ErrHardware, xdma.ErrCodeUnsupportedRequest << 19},
		{xdmamodel.FaultDataRead, p2p.ErrHardware, xdma.ErrCodeCompleterAbort << 9},
		{xdmamodel.FaultDataWrite, p2p.ErrHardware, xdma.ErrCodeCompleterAbort << 14},
	} {
		if err := ctl.InjectFault(xdma.C2H, 0, tc.fault); err != nil {
			t.Fatal(err)
		}
		_, err := d.Transfer(ctx(t), xfer)
		var e *p2p.Error
		if !errors.Is(err, tc.err) || !errors.As(err, &e) || e.Status&xdma.StatErrorMask != tc.status {
			t.Errorf("%v: %v, want %v with status %#x", tc.fault, err, tc.err, tc.status)
		}
		if _, err := d.Transfer(ctx(t), xfer); err != nil {
			t.Errorf("after %v: %v", tc.fault, err)
		}
	}
	if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultStall); err != nil {
		t.Fatal(err)
	}
	stalled := xfer
	stalled.Timeout = 200e6
	_, err := d.Transfer(ctx(t), stalled)
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrTimeout) || !errors.As(err, &e) || e.Status&xdma.StatIdleStopped == 0 {
		t.Fatalf("stall: %v, want ErrTimeout with idle_stopped", err)
	}
	if _, err := d.Transfer(ctx(t), xfer); err != nil {
		t.Fatalf("after the stall: %v", err)
	}
	if err := p.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryMappedNeedsCardMemSize: without card_mem_size the driver cannot
// check card addresses, so memory-mapped transfers are refused.
func TestMemoryMappedNeedsCardMemSize(t *testing.T) {
	setup(t)
	reload := func(params ...string) {
		t.Helper()
		for _, m := range []string{"gpufpga_nv", "gpufpga"} {
			if err := guest.UnloadModule(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := guest.LoadModule("gpufpga", params...); err != nil {
			t.Fatal(err)
		}
		if err := guest.LoadModule("gpufpga_nv"); err != nil {
			t.Fatal(err)
		}
	}
	reload("timeout_ms=2000")
	defer reload(driverParams...)

	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if info, err := d.Info(); err != nil || info.CardMemSize != 0 {
		t.Fatalf("info without card_mem_size: %+v, %v", info, err)
	}
	buf, err := hostMem(d, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinHost(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	_, err = d.Transfer(context.Background(), p2p.Transfer{Dir: p2p.H2C, Segments: []p2p.Segment{p.Whole()}})
	var e *p2p.Error
	if !errors.Is(err, p2p.ErrNoCardMemory) || !errors.As(err, &e) || e.Err != unix.ENXIO || e.Hint() == "" {
		t.Fatalf("memory-mapped transfer without card_mem_size: %v, want ENXIO", err)
	}
}

// TestAllOnesCountIsNotLinkDown: a completed-descriptor count of 0xFFFFFFFF
// is a value a 32-bit counter passes through; the driver must confirm with
// the identifier and config space before it declares the link down, which
// would fail every later call with ENODEV.
func TestAllOnesCountIsNotLinkDown(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	ctl := control(t)
	a := alloc(t, g, 1<<16, simgpu.Contiguous)
	p := pinGPU(t, d, a.VA, a.Size)
	xfer := p2p.Transfer{Dir: p2p.C2H, Channel: 0, Segments: []p2p.Segment{p.Whole()}}
	if err := ctl.InjectFault(xdma.C2H, 0, xdmamodel.FaultCountAllOnes); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r, err := d.Transfer(ctx(t), xfer); err != nil || r.Bytes != a.Size {
			t.Fatalf("transfer %d: %+v, %v", i, r, err)
		}
	}
}

// TestTopPageIsNotFollowedByPageZero: GPU pages handed out at the very top
// of the bus address space and at 0 (the simulated driver moves its DMA
// addresses, as an IOMMU's IOVAs could) are two runs, not one that wraps.
// No transfer touches them: DMA to those addresses goes nowhere.
func TestTopPageIsNotFollowedByPageZero(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	a := alloc(t, g, 2*simgpu.PageSize, simgpu.Contiguous)
	table, err := a.Table()
	if err != nil || len(table) != 2 || table[1] != table[0]+simgpu.PageSize {
		t.Fatalf("allocation table %#x, %v: want two contiguous pages", table, err)
	}
	offset := -table[0] - simgpu.PageSize // page 0 to 2^64-64K, page 1 to 0
	defer guest.SetParam(t, "nvp2p_sim", "dma_offset", strconv.FormatUint(offset, 10))()
	p := pinGPU(t, d, a.VA, a.Size)
	defer p.Unpin()
	st, err := p.Query(true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{math.MaxUint64 - simgpu.PageSize + 1, 0}; !reflect.DeepEqual(st.Table.Pages, want) {
		t.Fatalf("bus pages %#x, want %#x", st.Table.Pages, want)
	}
	if p.Runs != 2 || p.LargestRun != 1 {
		t.Fatalf("pin of the top page and page 0: %d runs, largest %d; want 2 and 1", p.Runs, p.LargestRun)
	}
}
