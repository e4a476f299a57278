package cuda

import (
	"errors"
	"fmt"
	"testing"
)

// Without a CUDA driver the package says so, plainly.
func TestNoDriver(t *testing.T) {
	_, err := openLib("libcuda-not-installed.so.1")
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open without the library: %v, want ErrNoDriver", err)
	}
}

// Open either loads the driver, which then answers, or reports that there
// is none: no third outcome on any machine.
func TestOpen(t *testing.T) {
	d, err := Open()
	if err != nil {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Open: %v, want a driver or ErrNoDriver", err)
		}
		return
	}
	v, err := d.Version()
	if err != nil || v < 1000 {
		t.Fatalf("driver version %d, %v", v, err)
	}
}

func TestErrorMatchesResult(t *testing.T) {
	err := fmt.Errorf("allocating: %w", &Error{Op: "cuMemAlloc_v2", Code: 2, Msg: "out of memory"})
	if !errors.Is(err, ErrorOutOfMemory) {
		t.Fatalf("%v does not match ErrorOutOfMemory", err)
	}
	if errors.Is(err, ErrorInvalidValue) {
		t.Fatalf("%v matches ErrorInvalidValue", err)
	}
}

// A function the loaded driver lacks fails when called, with its name.
func TestMissingFunction(t *testing.T) {
	d := &Driver{}
	err := d.call(cuMemGetHandleForAddressRange)
	var e *Error
	if !errors.As(err, &e) || e.Op != "cuMemGetHandleForAddressRange" || !errors.Is(err, ErrorNotFound) {
		t.Fatalf("calling a missing function: %v", err)
	}
}
