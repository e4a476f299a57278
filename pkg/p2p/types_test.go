//go:build !vmguest

package p2p

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestGeneratedTypesMatchHeader regenerates the Go mirror of the uapi header
// and fails if the committed one differs: run `make godefs` after changing
// kmod/gpufpga/uapi/gpufpga.h. It needs the Go toolchain: not in the rig's
// guest, where the rest of the package's tests run too.
func TestGeneratedTypesMatchHeader(t *testing.T) {
	// cgo's objects go to a directory of the test's, not _obj/ here.
	obj := t.TempDir()
	out, err := exec.Command("go", "tool", "cgo", "-objdir", obj, "-godefs", "types_linux.go").Output()
	if err != nil {
		t.Fatalf("cgo -godefs (needs gcc): %v", err)
	}
	// The command line cgo writes into the header: as `make godefs` runs it.
	out = bytes.Replace(out, []byte("cgo -objdir "+obj+" -godefs"), []byte("cgo -godefs"), 1)
	gofmt := exec.Command("gofmt")
	gofmt.Stdin = bytes.NewReader(append([]byte("//go:build linux\n\n"), out...))
	want, err := gofmt.Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("ztypes_linux.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("ztypes_linux.go is stale: run `make godefs`")
	}
}
