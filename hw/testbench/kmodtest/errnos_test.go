//go:build !vmguest

package kmodtest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// headerErrnos reads, from the uapi header, the errnos each call's comment
// names: its "Errors:" list, or for read() every errno of the record's
// comment.
func headerErrnos(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../../kmod/gpufpga/uapi/gpufpga.h")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile(`(?s)/\*\*.*?\*/`).FindAllString(string(b), -1)
	call := regexp.MustCompile(`struct gpufpga_\w+ - (GPUFPGA_IOC_(\w+)|read\(\))`)
	errno := regexp.MustCompile(`-E[A-Z0-9]+`)
	out := map[string][]string{}
	// The opening comment's paragraph of errors common to all ioctls.
	if i := strings.Index(string(b), "common to all ioctls:"); i >= 0 {
		end := strings.Index(string(b)[i:], "*/")
		out["common"] = names(errno.FindAllString(string(b)[i:i+end], -1))
	}
	for _, blk := range blocks {
		m := call.FindStringSubmatch(blk)
		if m == nil {
			continue
		}
		name, text := m[2], blk
		if name == "" {
			name = "read"
		} else if i := strings.Index(blk, "Errors:"); i >= 0 {
			text = blk[i:]
		} else {
			text = ""
		}
		out[name] = names(errno.FindAllString(text, -1))
	}
	return out
}

// names turns "-EFOO" tokens into the sorted, distinct names
// unix.ErrnoName gives their numbers.
func names(tokens []string) []string {
	var list []string
	for _, e := range tokens {
		e = e[1:]
		if e == "EOPNOTSUPP" {
			e = "ENOTSUP" // one number, which unix.ErrnoName calls so
		}
		if !slices.Contains(list, e) {
			list = append(list, e)
		}
	}
	slices.Sort(list)
	return list
}

// TestHeaderListsEveryErrno: the header's lists and callErrnos, which the
// guest tests check the driver against, are the same.
func TestHeaderListsEveryErrno(t *testing.T) {
	header := headerErrnos(t)
	for call, errnos := range callErrnos {
		var want []string
		for _, e := range errnos {
			want = append(want, unix.ErrnoName(e))
		}
		slices.Sort(want)
		if got, ok := header[call]; !ok {
			t.Errorf("%s: no comment in the header", call)
		} else if !slices.Equal(got, want) {
			t.Errorf("%s: the header lists %v, the tests %v", call, got, want)
		}
	}
	for call := range header {
		if _, ok := callErrnos[call]; !ok && call != "common" {
			t.Errorf("%s: documented in the header, unknown to the tests", call)
		}
	}
	var common []string
	for _, e := range commonErrnos {
		common = append(common, unix.ErrnoName(e))
	}
	slices.Sort(common)
	if !slices.Equal(header["common"], common) {
		t.Errorf("common to all ioctls: the header lists %v, the tests %v", header["common"], common)
	}
}
