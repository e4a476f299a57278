//go:build linux

package resident

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// peer.cu's codes, struct and record constants are the ones peer.go reads
// and the protocol's.
func TestPeerSourceMatches(t *testing.T) {
	defs := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (0x[0-9a-f]+|\d+)`).FindAllSubmatch(PeerSource, -1) {
		v, err := strconv.ParseUint(string(m[2]), 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		defs[string(m[1])] = v
	}
	for name, want := range map[string]uint64{
		"PEER_CREDITS": peerCredits, "PEER_ROUND_TRIP": peerRoundTrip, "PEER_DRAIN": peerDrain,
		"PEER_PING": peerPing, "PEER_PONG": peerPong, "THREADS": threads, "GOLDEN": golden,
		"GPUFPGA_RESULT_MAGIC": ResultMagic, "GPUFPGA_RESULT_MAGIC_SHIFT": ResultMagicShift, "GPUFPGA_RESULT_EOP": ResultEOP,
	} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("peer.cu's %s is %d (defined %v), peer.go's %d", name, got, ok, want)
		}
	}
	body := regexp.MustCompile(`(?s)struct peer_ctl \{(.*?)\};`).FindSubmatch(PeerSource)
	if body == nil {
		t.Fatal("no struct peer_ctl in peer.cu")
	}
	if n := len(regexp.MustCompile(`(?m)^\s*u64 \w+;`).FindAll(body[1], -1)); n*8 != peerCtlSize {
		t.Errorf("struct peer_ctl has %d words, peer.go reads %d bytes", n, peerCtlSize)
	}
	// Each fill's result record is 4 words apart.
	if !bytes.Contains(PeerSource, []byte("results[(k % nslots) * 4]")) || ResultSize != 32 {
		t.Errorf("peer.cu indexes results not by %d-byte records", ResultSize)
	}
}

// The PTX is whole, for the ISA and target the other kernels use, with
// the three kernels the harness launches.
func TestPeerPTX(t *testing.T) {
	for _, want := range []string{".version 6.0", ".target sm_70", ".entry peer_produce(", ".entry peer_ping(", ".entry peer_pong("} {
		if !bytes.Contains(PeerPTX, []byte(want)) {
			t.Errorf("peer.ptx lacks %q", want)
		}
	}
}

// A kernel that gave up says what it waited for, and matches ErrPeer.
func TestPeerCtlErrors(t *testing.T) {
	ctl := func(status, at, seen uint64) peerCtl {
		b := make([]byte, peerCtlSize)
		for i, v := range []uint64{9, 1, 2, 3, status, at, seen, 4, 1, 100, 300, 8} {
			binary.LittleEndian.PutUint64(b[8*i:], v)
		}
		return parsePeerCtl(b)
	}
	if c := ctl(0, 0, 0); c.err(time.Second) != nil || c.next != 9 || c.fills != 3 || c.exited != 4 || c.c0 != 100 || c.cEnd != 300 || c.credit != 8 {
		t.Errorf("a good run: %+v, %v", c, c.err(time.Second))
	}
	for _, tc := range []struct {
		c    peerCtl
		want string
	}{
		{ctl(peerCredits, 70, 5), "resident: peer kernel timed out after 2s: fill 70 waited for credits (its slot freed by the consumer); the consumer index stood at 5"},
		{ctl(peerRoundTrip, 12, 12), "resident: peer kernel timed out after 2s: fill 12's round trip waited for the consumer index to reach 13; it stood at 12"},
		{ctl(peerDrain, 100, 99), "resident: peer kernel timed out after 2s: the drain waited for the consumer index to reach 100; it stood at 99"},
		{ctl(peerPing, 3, 2), "resident: peer kernel timed out after 2s: ping 3 waited for its answer; the answer stood at 2"},
		{ctl(peerPong, 3, 2), "resident: peer kernel timed out after 2s: pong waited for ping 3; the ping stood at 2"},
		{ctl(77, 1, 2), "resident: peer kernel timed out after 2s: status 77 at 1, seen 2"},
	} {
		err := tc.c.err(2 * time.Second)
		if !errors.Is(err, ErrPeer) || errors.Is(err, ErrCountBackwards) || err.Error() != tc.want {
			t.Errorf("status %d: %v, want %q", tc.c.status, err, tc.want)
		}
	}
	// Not a timeout: the consumer broke its contract.
	if err := ctl(peerBackwards, 40, 32).err(2 * time.Second); !errors.Is(err, ErrCountBackwards) || errors.Is(err, ErrPeer) ||
		err.Error() != "resident: a count went backwards: read 32 after 40" {
		t.Errorf("a count that went backwards: %v", err)
	}
}

// Runs that cannot work are refused before anything reaches a GPU.
func TestPeerRunConfig(t *testing.T) {
	k := &PeerKernels{}
	r := &GPURing{Ring: &Ring{NSlots: 4, SlotSize: 64}}
	for _, tc := range []struct {
		run  PeerRun
		want string
	}{
		{PeerRun{}, "resident: invalid configuration: a peer run needs a duration or a number of fills"},
		{PeerRun{Duration: time.Second, Depth1: true}, "resident: invalid configuration: a depth-1 peer run needs a number of fills"},
		{PeerRun{Fills: 1, Rate: -1}, "resident: invalid configuration: rate -1 fills/s"},
	} {
		if _, err := k.Produce(context.Background(), r, tc.run); !errors.Is(err, ErrConfig) || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.run, err, tc.want)
		}
	}
	if _, _, err := k.PingPong(context.Background(), 0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("no round trips: %v", err)
	}
}

func TestNanos(t *testing.T) {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, 1500)
	binary.LittleEndian.PutUint64(b[8:], 7)
	if got := nanos(b); len(got) != 2 || got[0] != 1500*time.Nanosecond || got[1] != 7 {
		t.Errorf("nanos = %v", got)
	}
}

// A ring whose consumer word the host does not reach (NewPeerRing's, in
// GPU memory) is made and reset without it; a short one is still refused.
func TestRingWithoutHostConsumer(t *testing.T) {
	r, err := NewRing(4, 64, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Reset()
	if _, err := NewRing(4, 64, nil, nil, make([]byte, ConsumerSize-8)); !errors.Is(err, ErrConfig) {
		t.Errorf("a short consumer word: %v", err)
	}
}

// Round trips come back by %globaltimer as they are, and by the
// multiprocessor's cycles at the clock the whole kernel ran at.
func TestPeerRoundTrips(t *testing.T) {
	b := make([]byte, 32)
	for i, v := range []uint64{1000, 1500, 2000, 2600} { // (ns, cycles) twice
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	// 2 ms over 3 M cycles: 1.5 GHz.
	c := peerCtl{t0: 1e6, tEnd: 3e6, c0: 5e6, cEnd: 8e6}
	ns, clock := c.roundTrips(b)
	if len(ns) != 2 || ns[0] != 1000 || ns[1] != 2000 {
		t.Errorf("globaltimer round trips %v", ns)
	}
	if len(clock) != 2 || clock[0] != 1000 || clock[1] != 1733 {
		t.Errorf("clock round trips %v, want [1µs 1.733µs]", clock)
	}
	// No clock to go by: no cycles in ns.
	if _, clock := (peerCtl{t0: 5, tEnd: 9}).roundTrips(b); clock != nil {
		t.Errorf("without a clock: %v", clock)
	}
}
