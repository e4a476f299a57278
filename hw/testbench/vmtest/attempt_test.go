package vmtest

import (
	"strings"
	"testing"
)

// A first boot's failures stay with it until replayed, and Fatal ends only
// the goroutine that runs the attempt.
func TestAttempt(t *testing.T) {
	a := &attempt{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Errorf("kernel report during %s", "boot")
		a.Fatal("VM exited")
		t.Error("Fatal returned")
	}()
	<-done
	if !a.Failed() || strings.Join(a.messages(), "|") != "kernel report during boot|VM exited" {
		t.Fatalf("attempt: failed %v, messages %q", a.Failed(), a.messages())
	}
	if t.Failed() {
		t.Fatal("the attempt's failures reached the test")
	}
}

func TestReportScannerStarted(t *testing.T) {
	s := newReportScanner()
	s.Write([]byte("[    2.6] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n"))
	if s.started() {
		t.Fatal("started before any test ran")
	}
	s.Write([]byte("=== RUN   TestInfo\n"))
	if !s.started() {
		t.Fatal("not started after a === RUN line")
	}
	if r := s.Reports(); len(r) != 1 || r[0].Test != "boot" {
		t.Fatalf("reports %+v", r)
	}
}
