package cdefs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestDiff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.h")
	h := "#define X_A 0x10\n#define X_B 7U /* seven */\n#define Y_C 1\n#define X_D BIT(3)\n"
	if err := os.WriteFile(path, []byte(h), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Diff(path, "X_", map[string]uint64{"X_A": 16, "X_B": 8, "X_E": 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"X_B: C 0x7, Go 0x8", "X_E: not defined in " + path}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
