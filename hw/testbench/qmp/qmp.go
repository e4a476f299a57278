// Package qmp speaks QEMU's machine protocol (QMP) over its Unix socket: the
// rig's host side quits a guest that does not boot and injects PCIe errors
// through the human monitor's commands.
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Error is an error QEMU answered a command with.
type Error struct {
	Command string
	Class   string
	Desc    string
}

func (e *Error) Error() string { return fmt.Sprintf("qmp: %s: %s: %s", e.Command, e.Class, e.Desc) }

// Conn is one QMP session, past its capabilities negotiation.
type Conn struct {
	c net.Conn
	r *bufio.Reader
}

// Dial connects to the QMP socket at path and negotiates capabilities.
func Dial(ctx context.Context, path string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	q := &Conn{c: c, r: bufio.NewReader(c)}
	if err := q.deadline(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
		c.Close()
		return nil, fmt.Errorf("qmp: greeting: %w", err)
	}
	if _, err := q.Execute(ctx, "qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

// Close ends the session.
func (q *Conn) Close() error { return q.c.Close() }

// deadline bounds the next exchange by ctx, or by a minute.
func (q *Conn) deadline(ctx context.Context) error {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(time.Minute)
	}
	return q.c.SetDeadline(d)
}

// Execute runs one command and returns its result. Events QEMU sends
// meanwhile are skipped. Cancelling ctx ends the wait, and the session
// with it.
func (q *Conn) Execute(ctx context.Context, command string, args any) (json.RawMessage, error) {
	stop := context.AfterFunc(ctx, func() { q.c.SetDeadline(time.Now()) })
	defer stop()
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{command, args}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", command, err)
	}
	if err := q.deadline(ctx); err != nil {
		return nil, err
	}
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", command, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("qmp: %s: %w", command, err)
		}
		var rsp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &rsp); err != nil {
			return nil, fmt.Errorf("qmp: %s: %w", command, err)
		}
		switch {
		case rsp.Error != nil:
			return nil, &Error{Command: command, Class: rsp.Error.Class, Desc: rsp.Error.Desc}
		case rsp.Return != nil:
			return rsp.Return, nil
		}
	}
}

// HMP runs a human monitor command line and returns what it printed.
func (q *Conn) HMP(ctx context.Context, cmdline string) (string, error) {
	raw, err := q.Execute(ctx, "human-monitor-command", map[string]string{"command-line": cmdline})
	if err != nil {
		return "", err
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("qmp: %s: %w", cmdline, err)
	}
	return out, nil
}

// Quit asks QEMU to quit. QEMU may close the socket before it answers.
func (q *Conn) Quit(ctx context.Context) error {
	_, err := q.Execute(ctx, "quit", nil)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
