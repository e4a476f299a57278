//go:build vmguest

package kmodtest

import (
	"bytes"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

// TestPinsOfOnePage pins disjoint ranges of one host page, and one range
// twice, and moves data between them through the card: each pin is a
// mapping of its own, which the debug kernel's DMA-API checker accepts
// (this pass fails on any report it makes).
func TestPinsOfOnePage(t *testing.T) {
	d := openDev(t)
	buf, err := hostMem(d, 4096)
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.PinHost(buf[0:100])
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.PinHost(buf[200:300])
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.PinHost(buf[200:300])
	if err != nil {
		t.Fatal(err)
	}
	fill(buf[0:100], 4)
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.H2C, CardAddr: 4096, Segments: []p2p.Segment{a.Whole()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, CardAddr: 4096, Segments: []p2p.Segment{b.Whole()}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[200:300], buf[0:100]) {
		t.Fatal("the data did not arrive in the second pin of the page")
	}
	clear(buf[200:300])
	if _, err := d.Transfer(ctx(t), p2p.Transfer{Dir: p2p.C2H, CardAddr: 4096, Segments: []p2p.Segment{again.Whole()}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[200:300], buf[0:100]) {
		t.Fatal("the data did not arrive through the range's second pin")
	}
	for _, p := range []*p2p.Pin{a, b, again} {
		if err := p.Unpin(); err != nil {
			t.Fatal(err)
		}
	}
}
