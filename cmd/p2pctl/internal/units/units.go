// Package units formats byte counts for p2pctl's human output.
package units

import (
	"fmt"
	"strings"
)

// Bytes formats n in the largest binary unit it reaches: whole where it
// divides evenly ("64 KiB"), else with up to two decimals ("1.25 MiB").
func Bytes(n uint64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n < 1<<u.shift {
			continue
		}
		if n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
		s := fmt.Sprintf("%.2f", float64(n)/float64(uint64(1)<<u.shift))
		return strings.TrimSuffix(strings.TrimRight(s, "0"), ".") + " " + u.name
	}
	return fmt.Sprintf("%d B", n)
}
