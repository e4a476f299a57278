/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Layouts shared between the simulated rig's host process (Go, package
 * hw/testbench/riglayout, which checks these values against its own) and
 * the guest: the test equipment's control mailbox, and the header of the
 * simulated VRAM. The FPGA itself is a PCI function with plain registers
 * (hw/testbench/qemu/xdma-model.c); nothing here is the driver's.
 *
 * All fields are little-endian. A mailbox request is published by writing
 * its seq last; the host answers by writing the response seq last.
 */
#ifndef RIG_LAYOUT_H
#define RIG_LAYOUT_H

/*
 * The control port is an ivshmem-doorbell device, which no driver binds;
 * tests map its BAR2 through sysfs. Its mailbox is answered by the device
 * model: fault injection, link state, source settings and statistics.
 */
#define RIG_CTL_MAGIC		0x4c525443U	/* "CTRL" */
#define RIG_MBOX_VERSION	1
#define RIG_MBOX_SIZE		0x10000		/* BAR2 bytes */

#define RIG_MBOX_OFF_MAGIC	0x00
#define RIG_MBOX_OFF_VERSION	0x04

#define RIG_CTL_MBOX		0x0100	/* the control mailbox */

/* ivshmem doorbell register (BAR0) and the host's peer ID. */
#define RIG_DOORBELL		0x0c
#define RIG_HOST_PEER		0

/* Offsets inside a mailbox. */
#define RIG_REQ_SEQ		0x00
#define RIG_REQ_OP		0x04
#define RIG_REQ_ARG0		0x08
#define RIG_REQ_ARG1		0x0c
#define RIG_REQ_ARG2		0x10
#define RIG_RSP_SEQ		0x40
#define RIG_RSP_STATUS		0x44	/* 0, or a positive errno */
#define RIG_RSP_VAL0		0x48
#define RIG_RSP_VAL1		0x4c

#define RIG_VEC_MBOX		0	/* the host's doorbell vector */

/* Control mailbox operations. */
#define RIG_CTL_FAULT		1	/* arg0 dir (0 H2C, 1 C2H), arg1 channel, arg2 fault */
#define RIG_CTL_LINK		2	/* arg0: 1 link down, 0 up */
#define RIG_CTL_SOURCE		3	/* arg0 payload bytes, arg1 frames/s (0: on demand), arg2 FIFO frames; restarts the source */
#define RIG_CTL_SOURCE_STATS	4	/* arg0 field of the last snapshot -> val0 low, val1 high */
#define RIG_CTL_LATE_WRITES	5	/* -> val0 count of DMA writes into free VRAM pages */
#define RIG_CTL_SINK_STATS	6	/* arg0 field -> val0 low, val1 high */
#define RIG_CTL_SOURCE_SNAPSHOT	7	/* freeze the source's counters for SOURCE_STATS */
#define RIG_CTL_IOMMU_FAULTS	8	/* -> val0 count of DMA writes an IOMMU dropped */
#define RIG_CTL_UNMAPPED	13	/* -> val0 count of DMA to VRAM no peer has mapped */

/* Fields of RIG_CTL_SOURCE_STATS. */
#define RIG_SRC_GENERATED	0
#define RIG_SRC_DELIVERED	1
#define RIG_SRC_DROPPED		2
#define RIG_SRC_QUEUED		3
#define RIG_SRC_BYTES		4

/* Fields of RIG_CTL_SINK_STATS. */
#define RIG_SINK_FRAMES		0
#define RIG_SINK_GAPS		1
#define RIG_SINK_DUPLICATES	2
#define RIG_SINK_CRC_FAILURES	3
#define RIG_SINK_PACKETS	4

/* Faults, as RIG_CTL_FAULT's arg2. */
#define RIG_FAULT_NONE		0
#define RIG_FAULT_BAD_MAGIC	1
#define RIG_FAULT_DESC_READ	2
#define RIG_FAULT_DATA_READ	3
#define RIG_FAULT_DATA_WRITE	4
#define RIG_FAULT_STALL		5

/* BAR2 of the ivshmem-plain device that stands for the GPU's BAR1. */
#define RIG_VRAM_MAGIC		0x4d49535032505653ULL	/* "SVP2PSIM" */
#define RIG_VRAM_VERSION	1
#define RIG_VRAM_PAGE		0x10000	/* page 0 holds this header */

#define RIG_VRAM_OFF_MAGIC	0x00	/* u64, written by the host */
#define RIG_VRAM_OFF_VERSION	0x08	/* u32, host */
#define RIG_VRAM_OFF_PAGES	0x0c	/* u32 pages including page 0, host */
#define RIG_VRAM_OFF_BAR	0x10	/* u64 bus address of BAR2, guest */
#define RIG_VRAM_OFF_LATE	0x18	/* u64 late writes seen, host */
#define RIG_VRAM_OFF_STATE	0x100	/* u8 per page: 1 allocated, guest */
#define RIG_VRAM_OFF_PEERS	0x8000	/* u8 per page: peers that may reach it, guest */
#define RIG_VRAM_PEERS_RELEASED	0x80	/* ... none since the last one let it go */

#endif /* RIG_LAYOUT_H */
