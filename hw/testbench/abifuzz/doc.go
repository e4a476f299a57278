// Package abifuzz holds the concurrency fuzzer of gpufpga's ioctl ABI, a
// guest test run by hw/testbench/vmtest: several threads on several file
// descriptors throw random but plausible sequences at the driver while GPU
// memory is freed under live pins and the device is unbound and rebound.
package abifuzz
