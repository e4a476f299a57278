package cuda

import (
	"errors"
	"os"
	"testing"
)

// Without a CUDA driver the package says so, plainly.
func TestNoDriver(t *testing.T) {
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); err == nil {
		t.Log("this machine has libcuda: the error path is checked on machines without it")
		return
	}
	_, err := Open()
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open without libcuda: %v, want ErrNoDriver", err)
	}
}
