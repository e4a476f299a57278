/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Xilinx DMA/Bridge Subsystem for PCI Express (PG195): the registers and
 * descriptor format gpufpga uses. pkg/xdma holds the same facts for Go; its
 * tests read this file to keep the two equal.
 */
#ifndef GPUFPGA_XDMA_REGS_H
#define GPUFPGA_XDMA_REGS_H

#include <linux/bits.h>
#include <linux/sizes.h>
#include <linux/types.h>

#define XDMA_REG_SPACE		0x10000
#define XDMA_TARGET_H2C		0x0
#define XDMA_TARGET_C2H		0x1
#define XDMA_TARGET_IRQ		0x2
#define XDMA_TARGET_CONFIG	0x3
#define XDMA_TARGET_H2C_SGDMA	0x4
#define XDMA_TARGET_C2H_SGDMA	0x5
#define XDMA_TARGET_SGDMA_COMMON 0x6
#define XDMA_CHANNEL_STRIDE	0x100
#define XDMA_BASE(target, ch)	(((target) << 12) | ((ch) * XDMA_CHANNEL_STRIDE))

/* Channel registers. */
#define XDMA_REG_IDENTIFIER	0x00
#define XDMA_REG_CONTROL	0x04
#define XDMA_REG_CONTROL_W1S	0x08
#define XDMA_REG_CONTROL_W1C	0x0c
#define XDMA_REG_STATUS		0x40
#define XDMA_REG_STATUS_RC	0x44
#define XDMA_REG_COMPLETED	0x48
#define XDMA_REG_ALIGNMENTS	0x4c
#define XDMA_REG_POLL_WB_LO	0x88
#define XDMA_REG_POLL_WB_HI	0x8c
#define XDMA_REG_INT_ENABLE	0x90

/* SGDMA registers. */
#define XDMA_REG_DESC_LO	0x80
#define XDMA_REG_DESC_HI	0x84
#define XDMA_REG_DESC_ADJ	0x88
#define XDMA_REG_DESC_CREDITS	0x8c

/* SGDMA common registers. */
#define XDMA_REG_DESC_HALT	0x10
#define XDMA_REG_DESC_HALT_W1S	0x14
#define XDMA_REG_DESC_HALT_W1C	0x18
#define XDMA_REG_CREDIT_MODE	0x20
#define XDMA_REG_CREDIT_MODE_W1S 0x24
#define XDMA_REG_CREDIT_MODE_W1C 0x28
#define XDMA_MAX_CREDITS	0x3ff
#define XDMA_COMMON_C2H_SHIFT	16
#define XDMA_COMMON_ALL		(GENMASK(3, 0) | GENMASK(19, 16))	/* every channel's bit */

/* Interrupt block registers. */
#define XDMA_REG_USER_INT_ENABLE	0x04
#define XDMA_REG_USER_INT_ENABLE_W1S	0x08
#define XDMA_REG_USER_INT_ENABLE_W1C	0x0c
#define XDMA_REG_USER_INT_REQUEST	0x40
#define XDMA_REG_USER_VECTOR		0x80	/* four registers, four lines each */
#define XDMA_REG_CHAN_INT_ENABLE	0x10
#define XDMA_REG_CHAN_INT_ENABLE_W1S	0x14
#define XDMA_REG_CHAN_INT_ENABLE_W1C	0x18
#define XDMA_REG_CHAN_INT_REQUEST	0x44
#define XDMA_REG_CHAN_INT_PENDING	0x4c
#define XDMA_REG_CHAN_VECTOR		0xa0

/* Identifier register. */
#define XDMA_ID_SUBSYSTEM	0x1fc
#define XDMA_ID_STREAM		BIT(15)

/* Control and status bits. */
#define XDMA_CTRL_RUN		BIT(0)
#define XDMA_STAT_BUSY		BIT(0)
#define XDMA_STAT_DESC_STOPPED	BIT(1)
#define XDMA_STAT_DESC_COMPLETED BIT(2)
#define XDMA_STAT_ALIGN_MISMATCH BIT(3)
#define XDMA_STAT_MAGIC_STOPPED	BIT(4)
#define XDMA_STAT_INVALID_LEN	BIT(5)
#define XDMA_STAT_IDLE_STOPPED	BIT(6)
#define XDMA_STAT_READ_ERROR	GENMASK(13, 9)
#define XDMA_STAT_WRITE_ERROR	GENMASK(18, 14)
#define XDMA_STAT_DESC_ERROR	GENMASK(23, 19)
#define XDMA_STAT_ERRORS	(XDMA_STAT_ALIGN_MISMATCH | XDMA_STAT_MAGIC_STOPPED | \
				 XDMA_STAT_INVALID_LEN | XDMA_STAT_READ_ERROR | \
				 XDMA_STAT_WRITE_ERROR | XDMA_STAT_DESC_ERROR)
/* Control: log every status bit (bits 1-23 enable their status bit). */
#define XDMA_CTRL_LOG_ALL	GENMASK(23, 1)
#define XDMA_CTRL_POLL_MODE_WB	BIT(26)

/* Poll-mode writeback word: completed descriptor count, error. */
#define XDMA_WB_COUNT		GENMASK(23, 0)
#define XDMA_WB_ERROR		BIT(31)

/* Descriptors. */
#define XDMA_DESC_SIZE		32
#define XDMA_DESC_MAGIC		0xad4b
#define XDMA_DESC_STOP		BIT(0)
#define XDMA_DESC_COMPLETED	BIT(1)
#define XDMA_DESC_EOP		BIT(4)
#define XDMA_DESC_MAX_LEN	(BIT(28) - 1)
/*
 * The longest descriptor the driver makes: a 64 KiB multiple, so that the
 * pieces of a longer run stay as aligned as its start, for any ALIGNMENTS.
 */
#define XDMA_DESC_SPLIT_LEN	(BIT(28) - SZ_64K)
#define XDMA_DESC_MAX_ADJ	63
#define XDMA_DESC_BLOCK		4096	/* adjacent descriptors never cross it */

/* C2H stream writeback records, one per descriptor. */
#define XDMA_RESULT_SIZE	32
#define XDMA_RESULT_MAGIC	0x52b4
#define XDMA_RESULT_EOP		BIT(0)

struct xdma_desc {
	__le32 control;
	__le32 len;
	__le64 src;
	__le64 dst;
	__le64 next;
};

struct xdma_result {
	__le32 status;
	__le32 len;
	__le32 reserved[6];
};

#endif /* GPUFPGA_XDMA_REGS_H */
