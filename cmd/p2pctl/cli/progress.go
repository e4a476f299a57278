package cli

import (
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gpufpga/gpufpga/cmd/p2pctl/internal/units"
	"github.com/gpufpga/gpufpga/pkg/stream"
)

// progress is the status line every long command (transfer, bench,
// stream, trace, pin --hold) keeps on a terminal: one line on stderr,
// rewritten in place, and erased when the command ends, so that what
// stays on the screen is the command's output alone. It is off, every
// method doing nothing, when stderr is not a terminal or the output is
// JSON: a pipe, a log or a script gets no control characters.
type progress struct {
	w  io.Writer
	on bool
	// width is the terminal's columns: a longer line is cut, since one
	// that wrapped could not be rewritten by a carriage return.
	width int
	now   func() time.Time
	text  string    // the line last set
	drawn time.Time // when it was last written
	shown bool      // a line is on the screen
}

// progressEvery is how often the line is rewritten at most: often enough
// to read as live, seldom enough that a terminal never slows a command.
const progressEvery = 100 * time.Millisecond

// eraseLine returns the cursor to the start of the line and erases it.
const eraseLine = "\r\033[K"

// newProgress returns cmd's status line, on where stderr is a terminal
// and the output is not JSON.
func newProgress(g *globals, cmd *cobra.Command) *progress {
	w := cmd.ErrOrStderr()
	p := &progress{w: w, now: time.Now}
	if g.json {
		return p
	}
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		p.on, p.width = true, terminalWidth(f)
	}
	return p
}

// set makes text the line, written now unless it was written less than
// progressEvery ago: the last text set is written by the next set after
// that, or by the next above.
func (p *progress) set(text string) {
	if !p.on {
		return
	}
	p.text = text
	if now := p.now(); !p.shown || now.Sub(p.drawn) >= progressEvery {
		p.draw(now)
	}
}

func (p *progress) draw(now time.Time) {
	line := p.text
	if p.width > 1 && utf8.RuneCountInString(line) > p.width-1 {
		// The last column stays free: a line that fills it wraps on
		// some terminals.
		line = string([]rune(line)[:p.width-1])
	}
	fmt.Fprint(p.w, eraseLine+line)
	p.drawn, p.shown = now, true
}

// above runs write, which prints the command's output, with the line out
// of its way: erased before, written again after.
func (p *progress) above(write func() error) error {
	p.erase()
	err := write()
	if p.on && p.text != "" {
		p.draw(p.now())
	}
	return err
}

// tick returns a channel that ticks every d while the line is on, for a
// line that changes with time rather than with the command's work, and
// the function that stops it; nil, never ready, when the line is off.
func (p *progress) tick(d time.Duration) (<-chan time.Time, func()) {
	if !p.on {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// clear erases the line for good, until the next set: a command defers
// it, so that the line goes whichever way the command ends, and calls it
// before its last output, which nothing follows.
func (p *progress) clear() {
	p.erase()
	p.text = ""
}

func (p *progress) erase() {
	if p.shown {
		fmt.Fprint(p.w, eraseLine)
		p.shown = false
	}
}

// isTerminal reports whether f is a terminal: whether it answers the
// terminal's own ioctl. A character device is not enough: /dev/null is
// one.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalWidth returns f's columns; 0 when the terminal does not say
// (a serial line), and then lines are not cut.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// countStatus is transfer's line: the transfers done of all.
func countStatus(done, total int) string {
	return fmt.Sprintf("%d/%d transfers", done, total)
}

// benchStatus is bench's line: the size being measured, and its
// transfers done.
func benchStatus(size uint64, index, sizes, done, count int) string {
	return fmt.Sprintf("%s (size %d of %d): %d/%d transfers", units.Bytes(size), index+1, sizes, done, count)
}

// streamStatus is stream's line: what the stream moved so far, and how
// far it is to --bytes or --duration when either is set.
func streamStatus(st stream.Stats, limit uint64, duration time.Duration) string {
	verb := "streamed"
	if st.Resident {
		verb = "consumed"
	}
	s := fmt.Sprintf("%s %s in %d slots, %.3f GB/s, %s", verb, units.Bytes(st.Bytes), st.Slots, st.GBps, seconds(st.Elapsed))
	if limit > 0 {
		s += fmt.Sprintf("; %d%% of %s", min(100, st.Bytes*100/limit), units.Bytes(limit))
	}
	if duration > 0 {
		s += fmt.Sprintf("; %s left", seconds(max(0, duration-st.Elapsed)))
	}
	return s
}

// traceStatus is trace's line: how long it has watched, and the events
// and live pins it has seen.
func traceStatus(elapsed, duration time.Duration, events, pins int) string {
	s := fmt.Sprintf("tracing for %s: %d events, %d live pins", seconds(elapsed), events, pins)
	if duration > 0 {
		s += fmt.Sprintf("; %s left", seconds(max(0, duration-elapsed)))
	}
	return s
}

// holdStatus is pin --hold's line.
func holdStatus(elapsed time.Duration) string {
	return fmt.Sprintf("holding the pin for %s; Ctrl-C unpins it", seconds(elapsed))
}

// seconds writes d to a tenth of a second, as the status lines count.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}
