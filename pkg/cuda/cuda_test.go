package cuda

import (
	"errors"
	"testing"
)

// Without a CUDA driver the package says so, plainly.
func TestNoDriver(t *testing.T) {
	_, err := Open()
	if err == nil {
		t.Log("this machine has a CUDA driver: the error path is checked on machines without one")
		return
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open without libcuda: %v, want ErrNoDriver", err)
	}
}
