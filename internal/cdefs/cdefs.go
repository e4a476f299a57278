// Package cdefs checks Go mirrors of C headers: it reads the numeric
// #defines of a header and compares them with the Go values, both ways.
package cdefs

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var define = regexp.MustCompile(`^#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)(U|ULL)?\s*(/\*.*)?$`)

// Parse returns the numeric #defines of path whose names start with prefix.
func Parse(path, prefix string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := define.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[1], prefix) {
			continue
		}
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, m[1], err)
		}
		out[m[1]] = v
	}
	return out, sc.Err()
}

// Diff lists every disagreement between the header's defines (with prefix)
// and the Go mirror, in name order; nil when they agree.
func Diff(path, prefix string, mirror map[string]uint64) ([]string, error) {
	defs, err := Parse(path, prefix)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for name, v := range defs {
		want, ok := mirror[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s = %#x has no Go counterpart", name, v))
		case v != want:
			diffs = append(diffs, fmt.Sprintf("%s: C %#x, Go %#x", name, v, want))
		}
	}
	for name := range mirror {
		if _, ok := defs[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: not defined in %s", name, path))
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}
