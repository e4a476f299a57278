package trace

// Regenerate the BPF objects and their Go bindings (needs clang and
// libbpf-dev); the output is committed so builds need neither.
//go:generate go tool bpf2go -target amd64,arm64 -type event -type chan_stats gpufpga bpf/gpufpga.bpf.c -- -I./bpf -O2 -g -Wall -Werror
