// Package kmodtest holds the acceptance tests of the gpufpga kernel module.
// They run inside the rig's QEMU guest (build tag vmguest) through `make
// vmtest`, against the real module, the simulated GPU (nvp2p_sim) and the
// simulated XDMA.
package kmodtest
