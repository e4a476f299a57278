// Package demo is what `make demo` shows: inside the rig's guest, with the
// real driver and the simulated FPGA and GPU, p2pctl inspects the device,
// pins simulated GPU memory, moves verified data each way and benchmarks.
// Its output lines carry the prefix "DEMO| " so the Makefile can show them
// alone. It also runs in `make vmtest`, so the demo cannot rot.
package demo
