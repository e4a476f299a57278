package hostring

import "golang.org/x/sys/cpu"

// streamFrame writes a frame with streaming stores (stream_amd64.s).
//
//go:noescape
func streamFrame(dst *byte, hdr *[32]byte, blocks int, vec *[8]uint64, key uint64)

// canStream reports whether this CPU has streamFrame's instructions.
func canStream() bool { return cpu.X86.HasAVX2 }
