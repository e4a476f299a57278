//go:build vmguest

package kmodtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufpga/gpufpga/hw/testbench/simgpu"
	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestChildMidTransfer is the child of TestKilledProcessLeavesNothing: it
// pins memory, starts a slow stream transfer, says so, and waits to die.
func TestChildMidTransfer(t *testing.T) {
	if os.Getenv("KMODTEST_CHILD") == "" {
		return // only meaningful as the child
	}
	d, err := p2p.Open(devPath)
	if err != nil {
		t.Fatal(err)
	}
	g, err := simgpu.Open()
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Alloc(4<<20, simgpu.Fragmented, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PinGPU(a.VA, a.Size, p2p.PinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := hostMem(d, 1<<20)
	hp, err := d.PinHost(host)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KMODTEST_CHILD") == "stream" {
		var slots []p2p.Segment
		for i := range 8 {
			slots = append(slots, p2p.Segment{Pin: p, Offset: uint64(i) << 16, Len: 4096})
		}
		s, err := d.StartStream(1, slots)
		if err != nil {
			t.Fatal(err)
		}
		<-s.Slots() // running, and holding a slot
	} else {
		if _, err := d.Submit(p2p.Transfer{Dir: p2p.C2H, Channel: 1, Segments: []p2p.Segment{p.Whole()}, Timeout: time.Minute}, 0); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			st, err := p.Query(false)
			if err == nil && st.Inflight == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("transfer never in flight: %+v, %v", st, err)
			}
		}
	}
	fmt.Println("CHILD-READY")
	time.Sleep(time.Hour)
	runtime.KeepAlive(hp) // pinned until the kill: no collector unpins it
}

func TestKilledProcessLeavesNothing(t *testing.T) {
	for _, what := range []string{"transfer", "stream"} {
		t.Run(what, func(t *testing.T) { killChildMid(t, what) })
	}
}

// killChildMid kills a child in the middle of a transfer or a stream.
func killChildMid(t *testing.T, what string) {
	setup(t)
	g := openGPU(t)
	ctl := control(t)
	// 50 frames/s and at most 8 queued: the child's 64-descriptor transfer
	// cannot finish before it sees it in flight, whenever it starts.
	if err := ctl.ConfigureSource(4064, 50, 8); err != nil {
		t.Fatal(err)
	}
	defer ctl.ConfigureSource(4064, 0, 64)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildMidTransfer$", "-test.v")
	cmd.Env = append(os.Environ(), "KMODTEST_CHILD="+what)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A child that never gets going is killed, not waited for forever.
	watchdog := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	sc := bufio.NewScanner(out)
	var log []string
	ready := false
	for sc.Scan() {
		log = append(log, sc.Text())
		if strings.Contains(sc.Text(), "CHILD-READY") {
			ready = true
			break
		}
	}
	if !ready {
		cmd.Wait()
		t.Fatalf("child never got its transfer going:\n%s\n%s", strings.Join(log, "\n"), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("child survived SIGKILL")
	}
	if c := counters(t, g); c.LivePins != 0 || c.LiveAllocs != 0 {
		t.Fatalf("after the child died: %+v", c)
	}
	if late, err := ctl.LateWrites(); err != nil || late != 0 {
		t.Fatalf("%d DMA writes into freed VRAM (%v)", late, err)
	}
	d := openDev(t)
	info, err := d.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.PinnedTotal != 0 {
		t.Fatalf("%d bytes still pinned after the child died", info.PinnedTotal)
	}
}

// TestConcurrentPinTransferUnpin: 8 goroutines share a device and pin,
// move data through card memory, verify and unpin, for 6 rounds each.
func TestConcurrentPinTransferUnpin(t *testing.T) {
	d := openDev(t)
	g := openGPU(t)
	var mu sync.Mutex // simgpu.GPU is not safe for concurrent use
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			card := uint64(w) * (4 << 20)
			for round := range 6 {
				n := uint64(4096 + rng.IntN(1<<20))
				mu.Lock()
				src, err1 := g.Alloc(n, simgpu.RandomRuns, uint32(w*100+round))
				dst, err2 := g.Alloc(n, simgpu.Fragmented, 0)
				var srcMem, dstMem []byte
				if err1 == nil && err2 == nil {
					srcMem, err1 = src.Bytes()
					dstMem, err2 = dst.Bytes()
				}
				mu.Unlock()
				if err := errors.Join(err1, err2); err != nil {
					errs <- err
					return
				}
				fill(srcMem, byte(w+round))
				ps, err1 := d.PinGPU(src.VA, n, p2p.PinOptions{})
				pd, err2 := d.PinGPU(dst.VA, n, p2p.PinOptions{})
				if err := errors.Join(err1, err2); err != nil {
					errs <- err
					return
				}
				_, err1 = d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, Channel: 0, CardAddr: card, Segments: []p2p.Segment{ps.Whole()}})
				_, err2 = d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, Channel: 0, CardAddr: card, Segments: []p2p.Segment{pd.Whole()}})
				if err := errors.Join(err1, err2); err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, round, err)
					return
				}
				if !bytes.Equal(dstMem[:n], srcMem[:n]) {
					errs <- fmt.Errorf("worker %d round %d: data differs", w, round)
					return
				}
				err1, err2 = ps.Unpin(), pd.Unpin()
				mu.Lock()
				err3, err4 := src.Free(), dst.Free()
				mu.Unlock()
				if err := errors.Join(err1, err2, err3, err4); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := counters(t, g); c.LivePins != 0 || c.LiveAllocs != 0 {
		t.Fatalf("left behind: %+v", c)
	}
}
