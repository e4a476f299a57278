package guest

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// CheckOutput runs f, the body of an example, with os.Stdout captured as
// go test captures an example's, and fails t unless f printed want (both
// trimmed of surrounding space, as go test compares them). Examples that
// need the device carry no "// Output:" comment, so that they compile on
// every machine and run nowhere but here.
func CheckOutput(t *testing.T, f func(), want string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		out <- b
	}()
	stdout := os.Stdout
	os.Stdout = w
	func() {
		// Restored also when f fails t (runtime.Goexit).
		defer func() {
			os.Stdout = stdout
			w.Close()
		}()
		f()
	}()
	select {
	case b := <-out:
		if got := strings.TrimSpace(string(b)); got != strings.TrimSpace(want) {
			t.Errorf("printed\n%s\nwant\n%s", got, strings.TrimSpace(want))
		}
	case <-time.After(time.Minute):
		t.Fatal("the example's output was not read within a minute")
	}
}
