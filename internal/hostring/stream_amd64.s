#include "textflag.h"

// func streamFrame(dst *byte, hdr *[32]byte, blocks int, vec *[8]uint64, key uint64)
//
// Writes a frame with non-temporal (streaming) stores: the 32-byte header,
// then blocks 32-byte blocks of payload whose 8-byte words are
// vec[i%4] + (i/4)*vec[4] ^ key (vec: (i+1)*phi for words 0-3, then 4*phi
// four times). dst is 32-byte aligned. Ends with SFENCE, so the stores are
// visible before the frame is published.
TEXT ·streamFrame(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ hdr+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVQ vec+24(FP), BX
	VMOVDQU (SI), Y0
	VMOVNTDQ Y0, (DI)
	ADDQ $32, DI
	VMOVDQU (BX), Y1
	VMOVDQU 32(BX), Y2
	VPBROADCASTQ key+32(FP), Y3

loop4:
	CMPQ CX, $4
	JB tail
	VPXOR Y1, Y3, Y4
	VPADDQ Y2, Y1, Y1
	VPXOR Y1, Y3, Y5
	VPADDQ Y2, Y1, Y1
	VPXOR Y1, Y3, Y6
	VPADDQ Y2, Y1, Y1
	VPXOR Y1, Y3, Y7
	VPADDQ Y2, Y1, Y1
	VMOVNTDQ Y4, (DI)
	VMOVNTDQ Y5, 32(DI)
	VMOVNTDQ Y6, 64(DI)
	VMOVNTDQ Y7, 96(DI)
	ADDQ $128, DI
	SUBQ $4, CX
	JMP loop4

tail:
	TESTQ CX, CX
	JZ done
	VPXOR Y1, Y3, Y4
	VPADDQ Y2, Y1, Y1
	VMOVNTDQ Y4, (DI)
	ADDQ $32, DI
	DECQ CX
	JMP tail

done:
	SFENCE
	VZEROUPPER
	RET
