//go:build linux

package cudamem

import (
	"errors"
	"testing"

	"github.com/gpufpga/gpufpga/pkg/cuda"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// Compat mode's copies come only from registered, page-locked memory: the
// copy engines read the source after CopyIn returns. Anything else is
// refused before the device is touched.
func TestCopyInNeedsRegisteredMemory(t *testing.T) {
	b := &buffer{c: &GPU{}, b: &cuda.Buffer{Size: 1 << 20}}
	if _, err := b.CopyIn(0, make([]byte, 4096)); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("copy from unregistered memory: %v, want stream.ErrConfig", err)
	}
	if _, err := b.CopyIn(1<<20-16, make([]byte, 32)); !errors.Is(err, stream.ErrConfig) {
		t.Fatalf("copy past the end of the buffer: %v, want stream.ErrConfig", err)
	}
}
