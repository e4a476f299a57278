package vmtest

import (
	"regexp"
	"strings"
	"sync"
)

// reportStart matches the first line of a kernel report: what KASAN,
// UBSAN, KFENCE, lockdep, DEBUG_ATOMIC_SLEEP, DMA-API debug, DEBUG_LIST,
// DEBUG_OBJECTS and kmemleak print, and WARN/BUG/oops.
var reportStart = regexp.MustCompile(`BUG:|WARNING:|KASAN:|UBSAN:|KFENCE:|ODEBUG:|` +
	`possible circular locking|possible recursive locking|inconsistent lock state|` +
	`trying to register non-static key|suspicious RCU usage|bad unlock balance|` +
	`held lock freed|lock held when returning to user space|possible irq lock inversion|` +
	`sleeping function called from invalid context|DMA-API: .*(driver|device)|` +
	`list_(add|del) corruption|suspected memory leak|general protection fault|Kernel panic|Oops:`)

// reportLines is how much of a report is kept after its first line.
const reportLines = 40

// A Report is a kernel report seen on the guest's console.
type Report struct {
	Test string // the guest test that was running, as "package TestName"
	Text string
}

// reportScanner reads the guest's console: it follows the guest tests'
// "=== RUN" lines and collects kernel reports with the test that was
// running when each appeared.
type reportScanner struct {
	mu      sync.Mutex
	partial []byte
	test    string
	reports []Report
	open    int // lines still to add to the last report
}

func newReportScanner() *reportScanner { return &reportScanner{test: "boot"} }

func (s *reportScanner) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, b...)
	for {
		i := strings.IndexByte(string(s.partial), '\n')
		if i < 0 {
			break
		}
		s.line(strings.TrimRight(string(s.partial[:i]), "\r"))
		s.partial = s.partial[i+1:]
	}
	return len(b), nil
}

func (s *reportScanner) line(l string) {
	if i := strings.Index(l, "=== RUN   "); i >= 0 {
		s.test = strings.TrimSpace(l[i+len("=== RUN   "):])
		return
	}
	if s.open > 0 {
		r := &s.reports[len(s.reports)-1]
		r.Text += "\n" + l
		s.open--
		return
	}
	// Only the kernel's own console lines ("[  12.345678] ..."): guest
	// tests that print the kernel log would report it a second time.
	if strings.HasPrefix(strings.TrimSpace(l), "[") && reportStart.MatchString(l) {
		s.reports = append(s.reports, Report{Test: s.test, Text: l})
		s.open = reportLines
	}
}

func (s *reportScanner) Close() error { return nil }

// started reports whether any guest test has started.
func (s *reportScanner) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.test != "boot"
}

// Reports returns the reports seen so far.
func (s *reportScanner) Reports() []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Report(nil), s.reports...)
}
