package qmp

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// fakeQEMU answers each command line with the reply reply gives it, after
// an event, as QEMU may send one at any time.
func fakeQEMU(t *testing.T, reply func(cmd string) string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			rsp := reply(strings.TrimSpace(line))
			if rsp == "" {
				continue // a command that hangs
			}
			c.Write([]byte(`{"event": "RESET", "data": {}}` + "\n" + rsp + "\n"))
		}
	}()
	return path
}

func TestHMP(t *testing.T) {
	var got []string
	path := fakeQEMU(t, func(cmd string) string {
		got = append(got, cmd)
		if strings.Contains(cmd, "human-monitor-command") {
			return `{"return": "OK id: fpga\r\n"}`
		}
		return `{"return": {}}`
	})
	ctx := context.Background()
	q, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out, err := q.HMP(ctx, "pcie_aer_inject_error fpga POISON_TLP")
	if err != nil {
		t.Fatal(err)
	}
	if out != "OK id: fpga\r\n" {
		t.Fatalf("output %q", out)
	}
	want := []string{
		`{"execute":"qmp_capabilities"}`,
		`{"execute":"human-monitor-command","arguments":{"command-line":"pcie_aer_inject_error fpga POISON_TLP"}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("commands\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestErrorReply(t *testing.T) {
	path := fakeQEMU(t, func(cmd string) string {
		if strings.Contains(cmd, "capabilities") {
			return `{"return": {}}`
		}
		return `{"error": {"class": "CommandNotFound", "desc": "no such command"}}`
	})
	ctx := context.Background()
	q, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, err = q.Execute(ctx, "bogus", nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "bogus" {
		t.Fatalf("error %v, want CommandNotFound from bogus", err)
	}
}

func TestCancel(t *testing.T) {
	path := fakeQEMU(t, func(cmd string) string {
		if strings.Contains(cmd, "capabilities") {
			return `{"return": {}}`
		}
		return "" // never answers
	})
	q, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if _, err := q.Execute(ctx, "query-status", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled command: %v, want context.Canceled", err)
	}
}
