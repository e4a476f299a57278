//go:build linux

package p2p

import (
	"reflect"
	"testing"
)

// TestPointerArgsMatchGenerated holds the hand-written argument structs
// with pointer fields to the layouts cgo -godefs generated from the uapi
// header: same fields, names, offsets and sizes.
func TestPointerArgsMatchGenerated(t *testing.T) {
	ptr := reflect.TypeFor[pointer]()
	for _, tc := range []struct{ gen, ours reflect.Type }{
		{reflect.TypeFor[xferArg](), reflect.TypeFor[xferPtrArg]()},
		{reflect.TypeFor[streamArg](), reflect.TypeFor[streamPtrArg]()},
		{reflect.TypeFor[releaseArg](), reflect.TypeFor[releasePtrArg]()},
		{reflect.TypeFor[queryArg](), reflect.TypeFor[queryPtrArg]()},
	} {
		if tc.gen.Size() != tc.ours.Size() || tc.gen.NumField() != tc.ours.NumField() {
			t.Errorf("%v: %d bytes, %d fields; %v: %d bytes, %d fields",
				tc.gen, tc.gen.Size(), tc.gen.NumField(), tc.ours, tc.ours.Size(), tc.ours.NumField())
			continue
		}
		pointers := 0
		for i := range tc.gen.NumField() {
			g, o := tc.gen.Field(i), tc.ours.Field(i)
			if g.Name != o.Name || g.Offset != o.Offset || g.Type.Size() != o.Type.Size() {
				t.Errorf("%v.%s at %d (%d bytes), %v.%s at %d (%d bytes)",
					tc.gen, g.Name, g.Offset, g.Type.Size(), tc.ours, o.Name, o.Offset, o.Type.Size())
			}
			switch {
			case o.Type == ptr:
				pointers++
				if g.Type.Kind() != reflect.Uint64 {
					t.Errorf("%v.%s is a pointer in place of %v", tc.ours, o.Name, g.Type)
				}
			case o.Type != g.Type:
				t.Errorf("%v.%s is %v, generated %v", tc.ours, o.Name, o.Type, g.Type)
			}
		}
		if pointers != 1 {
			t.Errorf("%v has %d pointer fields, want 1", tc.ours, pointers)
		}
	}
}
