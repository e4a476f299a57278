//go:build vmguest

package kmodtest

import "golang.org/x/sys/unix"

func unixMmap(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}
