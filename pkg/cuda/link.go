//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// PTXInput is one PTX text for Link, named for its errors.
type PTXInput struct {
	Name string
	PTX  []byte
}

// CUjit_option values Link passes, and CU_JIT_INPUT_PTX.
const (
	jitErrorLogBuffer     = 5
	jitErrorLogBufferSize = 6
	jitInputPTX           = 1
	linkLogSize           = 16 << 10
)

// ErrLink is a link the driver's JIT refused (an unresolved or mistyped
// extern function, PTX that does not compile): the error carries the
// driver's log.
var ErrLink = errors.New("cuda: JIT link failed")

// Link compiles and links PTX texts with the driver's JIT linker
// (cuLinkCreate, cuLinkAddData, cuLinkComplete: no CUDA toolkit), so that
// one text may call an extern function another defines, and loads the
// result. Loading a module waits for every kernel running on the device
// (a persistent kernel too): link and load before such a kernel starts.
func (g *Device) Link(inputs ...PTXInput) (*Module, error) {
	if len(inputs) == 0 {
		return nil, invalid(cuLinkCreate_v2, "nothing to link")
	}
	// The driver writes its log into the buffer on every later call of
	// the link: it stays pinned until the link is destroyed.
	log := make([]byte, linkLogSize)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSize}
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), linkLogSize}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&log[0])
	pin.Pin(&opts[0])
	pin.Pin(&vals[0])
	var state uintptr
	if err := g.call(cuLinkCreate_v2, uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])),
		uintptr(unsafe.Pointer(&state))); err != nil {
		return nil, err
	}
	defer g.call(cuLinkDestroy, state)
	logged := func(err error, what string) error {
		msg := strings.TrimSpace(string(log[:max(0, indexNUL(log))]))
		return fmt.Errorf("%w: %s: %w: %s", ErrLink, what, err, msg)
	}
	for _, in := range inputs {
		text := append(append([]byte(nil), in.PTX...), 0)
		name := append([]byte(in.Name), 0)
		if err := g.call(cuLinkAddData_v2, state, jitInputPTX, uintptr(unsafe.Pointer(&text[0])), uintptr(len(text)),
			uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			return nil, logged(err, in.Name)
		}
	}
	var cubin unsafe.Pointer
	var size uintptr
	if err := g.call(cuLinkComplete, state, uintptr(unsafe.Pointer(&cubin)), uintptr(unsafe.Pointer(&size))); err != nil {
		return nil, logged(err, "completing the link")
	}
	// The image belongs to the link: loaded before it is destroyed.
	m := &Module{dev: g}
	if err := g.call(cuModuleLoadData, uintptr(unsafe.Pointer(&m.m)), uintptr(cubin)); err != nil {
		return nil, err
	}
	return m, nil
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
