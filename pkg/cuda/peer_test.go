package cuda

import (
	"errors"
	"testing"

	"github.com/ebitengine/purego"
)

// echoing returns a driver whose function f returns its first argument as
// its CUresult (libc's abs), with the context calls succeeding: a call
// made with a peer context of 704 answers 704.
func echoing(t *testing.T, f sym) *Driver {
	t.Helper()
	d := succeeding(t)
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skip(err)
	}
	if d.fns[f], err = purego.Dlsym(libc, "abs"); err != nil {
		t.Fatal(err)
	}
	return d
}

// Enabling peer access that is already on is no error; any other refusal
// is, naming both devices and matching its Result.
func TestEnablePeerAccess(t *testing.T) {
	d := echoing(t, cuCtxEnablePeerAccess)
	g := &Device{drv: d, ctx: 1, ordinal: 1}
	for _, tc := range []struct {
		code int
		want error
		msg  string
	}{
		{int(ErrorPeerAccessAlreadyEnabled), nil, ""},
		{int(ErrorPeerAccessUnsupported), ErrorPeerAccessUnsupported,
			"cuda: peer access from device 1 to device 0: cuda: cuCtxEnablePeerAccess: unknown error (217)"},
	} {
		err := g.EnablePeerAccess(&Device{drv: d, ctx: uintptr(tc.code), ordinal: 0})
		if tc.want == nil {
			if err != nil {
				t.Errorf("peer access answered %d: %v", tc.code, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || err.Error() != tc.msg {
			t.Errorf("peer access answered %d: %v, want %q", tc.code, err, tc.msg)
		}
	}
	// A peer without a context is refused before the driver sees it.
	err := g.EnablePeerAccess(&Device{drv: d, ordinal: -1})
	if !errors.Is(err, ErrorInvalidContext) {
		t.Errorf("peer without a context: %v", err)
	}
}

// A driver without the peer functions says which one it lacks.
func TestPeerFunctionsMissing(t *testing.T) {
	g := noDriver()
	if _, err := g.CanAccessPeer(noDriver()); !errors.Is(err, ErrorNotFound) || err.Error() != "cuda: cuDeviceCanAccessPeer: not in this driver (too old?) (500)" {
		t.Errorf("CanAccessPeer: %v", err)
	}
	if _, err := g.Driver().DeviceInfo(1); !errors.Is(err, ErrorNotFound) {
		t.Errorf("DeviceInfo: %v", err)
	}
}
