package vmtest

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// qmpServer plays QEMU's side of QMP and records the commands it gets.
func qmpServer(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cmds := make(chan string, 4)
	go func() {
		defer close(cmds)
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
			cmds <- strings.TrimSpace(line)
			if strings.Contains(line, "quit") {
				return // QEMU exits without answering
			}
			c.Write([]byte(`{"return": {}}` + "\n"))
		}
	}()
	return path, cmds
}

func TestWatchBootQuitsAHungGuest(t *testing.T) {
	path, cmds := qmpServer(t)
	err := watchBoot(context.Background(), newPhaseClock(), 50*time.Millisecond, path)
	if err == nil || !strings.Contains(err.Error(), "did not boot") {
		t.Fatalf("watchBoot: %v", err)
	}
	var got []string
	for c := range cmds {
		got = append(got, c)
	}
	if strings.Join(got, " ") != `{"execute":"qmp_capabilities"} {"execute":"quit"}` {
		t.Fatalf("QMP commands %q", got)
	}
}

func TestWatchBootLeavesABootedGuest(t *testing.T) {
	p := newPhaseClock()
	p.Write([]byte("Run /init as init process\n"))
	if err := watchBoot(context.Background(), p, time.Minute, "/nonexistent"); err != nil {
		t.Fatal(err)
	}
}
