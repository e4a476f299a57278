// Package icount measures the driver's guest CPU cost per operation, in a
// guest whose clock counts instructions (QEMU -icount): a synchronous 4 KiB
// transfer, the same in poll mode, a stream slot and a traced transfer,
// each against a null ioctl of the same run. The operations run in a C
// program (cost/gpufpga-cost.c), so that no language runtime's threads add
// to them. The rig boots it through vmtest's TestICount (`make
// bench-icount`); it is a benchmark, not a test of the driver's behaviour,
// and prints its figures as an "ICOUNT|" line.
package icount
