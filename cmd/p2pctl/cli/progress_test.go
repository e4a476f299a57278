package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/pkg/stream"
)

// clock is a time that moves only when the test says.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// The line is rewritten in place, at most every progressEvery, cut to the
// terminal's width, kept out of the output's way and erased at the end.
func TestProgressLine(t *testing.T) {
	var w bytes.Buffer
	c := &clock{t: time.Unix(1000, 0)}
	p := &progress{w: &w, on: true, width: 20, now: c.now}
	step := func(what string, f func(), want string) {
		t.Helper()
		w.Reset()
		f()
		if w.String() != want {
			t.Errorf("%s: wrote %q, want %q", what, w.String(), want)
		}
	}
	step("first set", func() { p.set("1/3 transfers") }, "\r\033[K1/3 transfers")
	step("set within progressEvery", func() { p.set("2/3 transfers") }, "")
	c.t = c.t.Add(progressEvery)
	step("set after progressEvery", func() { p.set("3/3 transfers") }, "\r\033[K3/3 transfers")
	c.t = c.t.Add(progressEvery)
	step("a line longer than the terminal", func() { p.set("1.2 GiB in 20000 slots, 1.234 GB/s") }, "\r\033[K1.2 GiB in 20000 sl")
	step("output", func() {
		if err := p.above(func() error { _, err := io.WriteString(&w, "12:00:00  line\n"); return err }); err != nil {
			t.Fatal(err)
		}
	}, "\r\033[K12:00:00  line\n\r\033[K1.2 GiB in 20000 sl")
	errWrite := errors.New("EPIPE")
	step("output that fails", func() {
		if err := p.above(func() error { return errWrite }); err != errWrite {
			t.Fatalf("above returned %v, want the write's error", err)
		}
	}, "\r\033[K\r\033[K1.2 GiB in 20000 sl")
	step("clear", p.clear, "\r\033[K")
	step("clear again", p.clear, "")
	step("output after clear", func() {
		if err := p.above(func() error { _, err := io.WriteString(&w, "summary\n"); return err }); err != nil {
			t.Fatal(err)
		}
	}, "summary\n")
	step("set after clear", func() { p.set("µs ≤ µs ≤ µs ≤ µs ≤ µs ≤ µs") }, "\r\033[Kµs ≤ µs ≤ µs ≤ µs ≤")
}

// openPTY opens a pseudo-terminal and returns its terminal end, the
// columns set to cols.
func openPTY(t *testing.T, cols uint16) *os.File {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("a pseudo-terminal (devpts mounted on /dev/pts): %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return s
}

// The line is on only where stderr is a terminal and the output is not
// JSON; off, it writes nothing and output passes through.
func TestProgressOnlyOnTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	tty := openPTY(t, 50)
	var buf bytes.Buffer
	for _, tc := range []struct {
		name   string
		stderr io.Writer
		json   bool
		on     bool
		width  int
	}{
		{"a buffer", &buf, false, false, 0},
		{"a pipe", pw, false, false, 0},
		{"a file", file, false, false, 0},
		// A character device, and no terminal.
		{os.DevNull, null, false, false, 0},
		{"a terminal", tty, false, true, 50},
		{"a terminal, --json", tty, true, false, 0},
	} {
		cmd := &cobra.Command{}
		cmd.SetErr(tc.stderr)
		p := newProgress(&globals{json: tc.json}, cmd)
		if p.on != tc.on || p.width != tc.width {
			t.Errorf("stderr %s: on %v, width %d; want %v, %d", tc.name, p.on, p.width, tc.on, tc.width)
		}
	}

	cmd := &cobra.Command{}
	cmd.SetErr(&buf)
	p := newProgress(&globals{}, cmd)
	var out strings.Builder
	p.set("1/2 transfers")
	if err := p.above(func() error { out.WriteString("result\n"); return nil }); err != nil {
		t.Fatal(err)
	}
	p.clear()
	if buf.Len() != 0 || out.String() != "result\n" {
		t.Errorf("off: stderr %q, output %q", buf.String(), out.String())
	}
	if c, _ := p.tick(time.Millisecond); c != nil {
		t.Error("off: a clock ticks for a line nobody sees")
	}
}

func TestProgressFormat(t *testing.T) {
	st := stream.Stats{Bytes: 3 << 30, Slots: 49152, GBps: 1.2345, Elapsed: 2500 * time.Millisecond}
	res := st
	res.Resident = true
	for _, tc := range []struct{ got, want string }{
		{countStatus(37, 100), "37/100 transfers"},
		{benchStatus(64<<10, 1, 4, 37, 100), "64 KiB (size 2 of 4): 37/100 transfers"},
		{streamStatus(st, 0, 0), "streamed 3 GiB in 49152 slots, 1.234 GB/s, 2.5 s"},
		{streamStatus(res, 4<<30, 0), "consumed 3 GiB in 49152 slots, 1.234 GB/s, 2.5 s; 75% of 4 GiB"},
		// --bytes reached before the stream stops, and --duration past.
		{streamStatus(st, 1<<30, 2*time.Second), "streamed 3 GiB in 49152 slots, 1.234 GB/s, 2.5 s; 100% of 1 GiB; 0.0 s left"},
		{streamStatus(st, 0, 10*time.Second), "streamed 3 GiB in 49152 slots, 1.234 GB/s, 2.5 s; 7.5 s left"},
		{traceStatus(12340*time.Millisecond, 0, 340, 3), "tracing for 12.3 s: 340 events, 3 live pins"},
		{traceStatus(12340*time.Millisecond, 30*time.Second, 0, 0), "tracing for 12.3 s: 0 events, 0 live pins; 17.7 s left"},
		{holdStatus(61 * time.Second), "holding the pin for 61.0 s; Ctrl-C unpins it"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
