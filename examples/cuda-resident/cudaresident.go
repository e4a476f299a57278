// Package cudaresident is a GPU-resident stream's persistent consumer
// written in CUDA C++ with <gpufpga/gpufpga_resident_cuda.cuh> alone
// (consumer.cu), compiled to PTX that any driver from CUDA 9.0 on loads.
// A host program loads PTX with cuModuleLoadData, allocates what
// consume's parameters name, launches it with 1 + W blocks of 256
// threads on a non-blocking stream before the driver's stream starts,
// and stores 1 to the stop word once the stream has ended and the
// consumer word has reached its fills; gpu_test.go does exactly that,
// with a copy engine in the FPGA's place.
package cudaresident

import _ "embed"

// PTX is consumer.cu, as `make ptx` builds it.
//
//go:embed consumer.ptx
var PTX []byte

// Threads is consume's block size (THREADS in consumer.cu).
const Threads = 256
