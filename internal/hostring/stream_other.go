//go:build !amd64

package hostring

func streamFrame(dst *byte, hdr *[32]byte, blocks int, vec *[8]uint64, key uint64) {
	panic("hostring: no streaming stores on this architecture")
}

func canStream() bool { return false }
