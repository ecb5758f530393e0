//go:build amd64 && !purego

#include "textflag.h"

DATA bf16bias<>+0(SB)/4, $0x00007fff
GLOBL bf16bias<>(SB), RODATA|NOPTR, $4
DATA bf16one<>+0(SB)/4, $0x00000001
GLOBL bf16one<>(SB), RODATA|NOPTR, $4
DATA bf16nan<>+0(SB)/4, $0x00007fc0
GLOBL bf16nan<>(SB), RODATA|NOPTR, $4

// func addBF16AVX2(z, x, y *uint16, n int)
TEXT ·addBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	VPBROADCASTD bf16bias<>(SB), Y7
	VPBROADCASTD bf16one<>(SB), Y8
	VPBROADCASTD bf16nan<>(SB), Y9
loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD (DX), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VADDPS Y1, Y0, Y0
	VCMPPS $3, Y0, Y0, Y2 // unordered: NaN lanes
	VPSRLD $16, Y0, Y3
	VPAND Y8, Y3, Y3      // lowest kept bit
	VPADDD Y7, Y0, Y4
	VPADDD Y3, Y4, Y4     // + 0x7fff + lsb: round to nearest-even
	VPSRLD $16, Y4, Y4
	VPBLENDVB Y2, Y9, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPACKUSDW X5, X4, X4
	VMOVDQU X4, (DI)
	ADDQ $16, SI
	ADDQ $16, DX
	ADDQ $16, DI
	SUBQ $8, CX
	JNZ loop
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv() (a, d uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, a+0(FP)
	MOVL DX, d+4(FP)
	RET
