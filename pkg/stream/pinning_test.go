//go:build linux

package stream

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/p2p"
)

func TestParsePinning(t *testing.T) {
	for _, p := range []Pinning{PinAuto, PinDmabuf, PinP2P} {
		if got, err := ParsePinning(p.String()); err != nil || got != p {
			t.Errorf("ParsePinning(%q) = %v, %v", p, got, err)
		}
	}
	for in, want := range map[string]Pinning{"dmabuf": PinDmabuf, "p2p": PinP2P} {
		if got, err := ParsePinning(in); err != nil || got != want {
			t.Errorf("ParsePinning(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParsePinning("fast"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParsePinning(fast): %v, want ErrConfig", err)
	}
}

func TestSelectMode(t *testing.T) {
	gpuKinds := p2p.Info{PinKinds: []p2p.PinKind{p2p.KindGPU, p2p.KindHost, p2p.KindDmabuf}}
	dmabufOnly := p2p.Info{PinKinds: []p2p.PinKind{p2p.KindHost, p2p.KindDmabuf}} // open driver, no gpufpga_nv
	hostOnly := p2p.Info{PinKinds: []p2p.PinKind{p2p.KindHost}}
	for _, tc := range []struct {
		name     string
		info     p2p.Info
		exports  bool
		mode     Mode
		want     Pinning
		gotMode  Mode
		gotPin   Pinning
		errMatch string
	}{
		{"both pin paths, exporting GPU", gpuKinds, true, Auto, PinAuto, Direct, PinDmabuf, ""},
		{"both pin paths, GPU without dma-bufs", gpuKinds, false, Auto, PinAuto, Direct, PinP2P, ""},
		// The case p2pctl got wrong: no nvidia_p2p pins, but dma-bufs.
		{"dma-buf only", dmabufOnly, true, Auto, PinAuto, Direct, PinDmabuf, ""},
		{"dma-buf only, asked for", dmabufOnly, true, Auto, PinDmabuf, Direct, PinDmabuf, ""},
		{"dma-buf only, GPU without dma-bufs", dmabufOnly, false, Auto, PinAuto, Compat, PinAuto, ""},
		{"host only", hostOnly, true, Auto, PinAuto, Compat, PinAuto, ""},
		{"direct forced", hostOnly, false, Direct, PinAuto, Direct, PinP2P, ""},
		{"compat forced", gpuKinds, true, Compat, PinAuto, Compat, PinAuto, ""},
		{"compat with a pinning", gpuKinds, true, Compat, PinDmabuf, 0, 0,
			"stream: bad configuration: pinning dma-buf is for a ring in GPU memory, not compat mode's"},
		{"dma-buf the GPU cannot export", gpuKinds, false, Auto, PinDmabuf, 0, 0,
			"stream: bad configuration: not supported here: pinning through a dma-buf: the GPU does not export them (that needs NVIDIA's open kernel modules, R515 or later, and a Turing or newer GPU)"},
		{"dma-buf the driver cannot import", p2p.Info{PinKinds: []p2p.PinKind{p2p.KindGPU}}, true, Direct, PinDmabuf, 0, 0,
			"stream: bad configuration: not supported here: pinning through a dma-buf: the gpufpga driver does not import them"},
		{"no such mode", gpuKinds, true, Mode(7), PinAuto, 0, 0, "stream: bad configuration: Mode(7)"},
	} {
		m, p, err := SelectMode(tc.info, tc.exports, tc.mode, tc.want)
		if tc.errMatch != "" {
			// What the host lacks is told apart from a bad request.
			unsupported := strings.Contains(tc.errMatch, ": not supported here: ")
			if !errors.Is(err, ErrConfig) || errors.Is(err, ErrUnsupported) != unsupported || err.Error() != tc.errMatch {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.errMatch)
			}
			continue
		}
		if err != nil || m != tc.gotMode || p != tc.gotPin {
			t.Errorf("%s: %v %v %v, want %v %v", tc.name, m, p, err, tc.gotMode, tc.gotPin)
		}
	}
}

// A revocable GPU pin refused for want of CAP_SYS_RAWIO is made
// persistent; refused both ways, the hint names the cause.
func TestPinNVP2PFallsBackToPersistent(t *testing.T) {
	perm := &p2p.Error{Op: "pin", Err: unix.EPERM, Kind: p2p.ErrPermission, Detail: "GPU 0x10000+65536"}
	hw := &p2p.Error{Op: "pin", Err: unix.EIO, Kind: p2p.ErrHardware, Detail: "GPU 0x10000+65536"}
	for _, tc := range []struct {
		name       string
		revocable  error // the driver's answer to each kind of pin
		persistent error
		calls      []bool // Persistent, of each pin asked for
		want       error
		hint       string
	}{
		{"revocable granted", nil, nil, []bool{false}, nil, ""},
		{"revocable refused", perm, nil, []bool{false, true}, nil, ""},
		{"both refused", perm, perm, []bool{false, true}, p2p.ErrPermission, "CAP_SYS_RAWIO"},
		{"another failure", hw, nil, []bool{false}, p2p.ErrHardware, "decoded status"},
	} {
		var calls []bool
		pin := func(va, n uint64, o p2p.PinOptions) (*p2p.Pin, error) {
			calls = append(calls, o.Persistent)
			err := tc.revocable
			if o.Persistent {
				err = tc.persistent
			}
			if err != nil {
				return nil, err
			}
			return &p2p.Pin{Handle: 1, Addr: va, Len: n}, nil
		}
		p, err := pinNVP2P(pin, 0x10000, 64<<10)
		if fmt.Sprint(calls) != fmt.Sprint(tc.calls) {
			t.Errorf("%s: pins asked for (persistent) %v, want %v", tc.name, calls, tc.calls)
		}
		if tc.want == nil {
			if err != nil || p == nil || p.Len != 64<<10 {
				t.Errorf("%s: %v, %v", tc.name, p, err)
			}
			continue
		}
		var h interface{ Hint() string }
		if p != nil || !errors.Is(err, tc.want) || !errors.As(err, &h) || !strings.Contains(h.Hint(), tc.hint) ||
			err.Error() != "gpufpga pin GPU 0x10000+65536: "+tc.want.Error() {
			t.Errorf("%s: %v, %v; want %v hinting %q", tc.name, p, err, tc.want, tc.hint)
		}
	}
}
