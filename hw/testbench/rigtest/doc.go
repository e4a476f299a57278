// Package rigtest holds the rig's own acceptance tests. They run inside the
// QEMU guest (build tag vmguest) through `make vmtest`: both simulated
// devices enumerate, the simulated GPU hands out fragmented memory with the
// page tables it promises, and the simulated XDMA, driven from user space
// through its registers, moves data into VRAM and guest RAM and reports
// injected faults as hardware would.
package rigtest
