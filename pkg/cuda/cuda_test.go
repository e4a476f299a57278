package cuda

import (
	"errors"
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
