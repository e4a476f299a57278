package riglayout

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"testing"
)

func TestLayoutMatchesHeader(t *testing.T) {
	f, err := os.Open("../../../kmod/gpufpga/gpufpga_rig.h")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	def := regexp.MustCompile(`^#define\s+(RIG_\w+)\s+(0x[0-9a-fA-F]+|\d+)(U|ULL)?\b`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := def.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := HeaderConstants[m[1]]
		if !ok {
			t.Errorf("%s = %#x has no Go mirror", m[1], v)
			continue
		}
		if v != want {
			t.Errorf("%s: header %#x, Go %#x", m[1], v, want)
		}
		seen[m[1]] = true
	}
	for name := range HeaderConstants {
		if !seen[name] {
			t.Errorf("Go mirror %s has no #define", name)
		}
	}
}
