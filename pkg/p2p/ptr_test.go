//go:build linux

package p2p

import (
	"reflect"
	"runtime"
	"testing"
	"unsafe"
	"weak"
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

// argArray returns a weak pointer to the array a pointer field points at.
func argArray[T any](p pointer) weak.Pointer[T] { return weak.Make((*T)(p.ptr)) }

// collected reports whether w's object was freed after two collections
// (the second sweeps what the first found unreachable).
func collected[T any](w weak.Pointer[T]) bool {
	runtime.GC()
	runtime.GC()
	return w.Value() == nil
}

// TestArgumentsKeepTheirArrays holds each ioctl argument that carries an
// array and drops everything else: the array must survive collections for
// as long as the argument lives, since the kernel reads it through the
// argument. An address kept as an integer fails this.
func TestArgumentsKeepTheirArrays(t *testing.T) {
	pin := &Pin{Handle: 7}
	x, err := xferArgs(&Transfer{Segments: []Segment{{Pin: pin, Offset: 1, Len: 2}, {Pin: pin, Offset: 3, Len: 4}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	wx := argArray[segArg](x.Segs)
	st, err := streamArgs(1, []Segment{{Pin: pin, Len: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	ws := argArray[segArg](st.Slots)
	r := releaseArgs(1, 7, []int{3, 5})
	wr := argArray[uint32](r.Slots)
	if collected(wx) || collected(ws) || collected(wr) {
		t.Fatal("an ioctl argument's array was collected while the argument lived")
	}
	if segs := unsafe.Slice((*segArg)(x.Segs.ptr), x.Nsegs); segs[1] != (segArg{Handle: 7, Offset: 3, Len: 4}) {
		t.Fatalf("segments %+v", segs)
	}
	if v := unsafe.Slice((*uint32)(r.Slots.ptr), r.Nslots); v[0] != 3 || v[1] != 5 {
		t.Fatalf("released slots %v", v)
	}
	runtime.KeepAlive(&x)
	runtime.KeepAlive(&st)
	runtime.KeepAlive(&r)
}
