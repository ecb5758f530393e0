//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (bfloat16, MIN/MAX) and AVX2+F16C (float16) kernels. Each does the
// same arithmetic as the Go loops in kernels_half.go: widen exactly to
// float32, one IEEE float32 operation, NaN replaced by the canonical quiet
// NaN 0x7fc00000, then one rounding to nearest-even (which turns that NaN
// into 0x7fc0 or 0x7e00). n is a positive multiple of 8;
// loops do 16 elements a step and one step of 8 at the end if needed.
//
// Register conventions: Y11 canonical float32 NaN, Y12 dword 1, Y13 dword
// 0x7fff, Y14 dword 0xffff0000, Y10 the scale/divide factor. Operands of
// three-operand instructions are in Go order: OP src2, src1, dst.

DATA nanf32<>+0(SB)/4, $0x7fc00000
GLOBL nanf32<>(SB), RODATA|NOPTR, $4
DATA dwone<>+0(SB)/4, $0x00000001
GLOBL dwone<>(SB), RODATA|NOPTR, $4
DATA dwbias<>+0(SB)/4, $0x00007fff
GLOBL dwbias<>(SB), RODATA|NOPTR, $4

#define BF16_CONSTS \
	VPBROADCASTD nanf32<>(SB), Y11; \
	VPBROADCASTD dwone<>(SB), Y12; \
	VPBROADCASTD dwbias<>(SB), Y13; \
	VPCMPEQD Y14, Y14, Y14; \
	VPSLLD $16, Y14, Y14

// BF16_WIDEN widens the bfloat16 words of V to float32: L gets the even
// elements, H the odd ones (BF16_NARROW puts them back). HI is the dword
// mask 0xffff0000.
#define BF16_WIDEN(V, L, H, HI) \
	VPSLLD $16, V, L; \
	VPAND HI, V, H

// BF16_NARROW rounds the float32 lanes of L and H to bfloat16 (canonical
// NaN, ties to even; an overflowing carry gives Inf) in their high words and
// interleaves them back into L in the original element order. T and U are
// scratch.
#define BF16_NARROW(L, H, T, U, NAN, ONE, BIAS) \
	VCMPPS $3, L, L, T; \
	VCMPPS $3, H, H, U; \
	VBLENDVPS T, NAN, L, L; \
	VBLENDVPS U, NAN, H, H; \
	VPSRLD $16, L, T; \
	VPSRLD $16, H, U; \
	VPAND ONE, T, T; \
	VPAND ONE, U, U; \
	VPADDD BIAS, L, L; \
	VPADDD BIAS, H, H; \
	VPADDD T, L, L; \
	VPADDD U, H, H; \
	VPSRLD $16, L, L; \
	VPBLENDW $0xaa, H, L, L

// BF16_BIN: z = round(x OP y) for 16 (Y registers) or 8 (X registers)
// elements at SI, DX -> DI.
#define BF16_BIN(OP, R0, R1, R2, R3, R4, R5, HI, NAN, ONE, BIAS) \
	VMOVDQU (SI), R0; \
	VMOVDQU (DX), R1; \
	BF16_WIDEN(R0, R2, R3, HI); \
	BF16_WIDEN(R1, R4, R5, HI); \
	OP R4, R2, R2; \
	OP R5, R3, R3; \
	BF16_NARROW(R2, R3, R4, R5, NAN, ONE, BIAS); \
	VMOVDQU R2, (DI)

#define BF16_BIN_FUNC(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-32; \
	MOVQ z+0(FP), DI; \
	MOVQ x+8(FP), SI; \
	MOVQ y+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	BF16_CONSTS; \
	SUBQ $16, CX; \
	JLT  tail8; \
loop16: \
	BF16_BIN(OP, Y0, Y1, Y2, Y3, Y4, Y5, Y14, Y11, Y12, Y13); \
	ADDQ $32, SI; \
	ADDQ $32, DX; \
	ADDQ $32, DI; \
	SUBQ $16, CX; \
	JGE  loop16; \
tail8: \
	ADDQ $16, CX; \
	JZ   done; \
	BF16_BIN(OP, X0, X1, X2, X3, X4, X5, X14, X11, X12, X13); \
done: \
	VZEROUPPER; \
	RET

// func addBF16AVX2(z, x, y *uint16, n int)
BF16_BIN_FUNC(·addBF16AVX2, VADDPS)

// func mulBF16AVX2(z, x, y *uint16, n int)
BF16_BIN_FUNC(·mulBF16AVX2, VMULPS)

// BF16_UN: z = round(z OP f) in place for 16 or 8 elements at DI.
#define BF16_UN(OP, R0, R2, R3, R4, R5, F, HI, NAN, ONE, BIAS) \
	VMOVDQU (DI), R0; \
	BF16_WIDEN(R0, R2, R3, HI); \
	OP F, R2, R2; \
	OP F, R3, R3; \
	BF16_NARROW(R2, R3, R4, R5, NAN, ONE, BIAS); \
	VMOVDQU R2, (DI)

#define BF16_UN_FUNC(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-20; \
	MOVQ z+0(FP), DI; \
	MOVQ n+8(FP), CX; \
	VBROADCASTSS f+16(FP), Y10; \
	BF16_CONSTS; \
	SUBQ $16, CX; \
	JLT  tail8; \
loop16: \
	BF16_UN(OP, Y0, Y2, Y3, Y4, Y5, Y10, Y14, Y11, Y12, Y13); \
	ADDQ $32, DI; \
	SUBQ $16, CX; \
	JGE  loop16; \
tail8: \
	ADDQ $16, CX; \
	JZ   done; \
	BF16_UN(OP, X0, X2, X3, X4, X5, X10, X14, X11, X12, X13); \
done: \
	VZEROUPPER; \
	RET

// func mulScalarBF16AVX2(z *uint16, n int, f float32)
BF16_UN_FUNC(·mulScalarBF16AVX2, VMULPS)

// func divScalarBF16AVX2(z *uint16, n int, f float32)
BF16_UN_FUNC(·divScalarBF16AVX2, VDIVPS)

// F16_FIN canonicalises the NaN lanes of the float32 register R (T scratch)
// and stores R rounded to float16 (imm 0: nearest-even) at OFF(DI).
#define F16_FIN(R, T, OFF) \
	VCMPPS $3, R, R, T; \
	VBLENDVPS T, Y11, R, R; \
	VCVTPS2PH $0, R, OFF(DI)

// F16_BIN: z = round(x OP y) for 8 elements at OFF(SI), OFF(DX) -> OFF(DI).
#define F16_BIN(OP, R0, R1, OFF) \
	VCVTPH2PS OFF(SI), R0; \
	VCVTPH2PS OFF(DX), R1; \
	OP R1, R0, R0; \
	F16_FIN(R0, R1, OFF)

#define F16_BIN_FUNC(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-32; \
	MOVQ z+0(FP), DI; \
	MOVQ x+8(FP), SI; \
	MOVQ y+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	VPBROADCASTD nanf32<>(SB), Y11; \
	SUBQ $16, CX; \
	JLT  tail8; \
loop16: \
	F16_BIN(OP, Y0, Y1, 0); \
	F16_BIN(OP, Y2, Y3, 16); \
	ADDQ $32, SI; \
	ADDQ $32, DX; \
	ADDQ $32, DI; \
	SUBQ $16, CX; \
	JGE  loop16; \
tail8: \
	ADDQ $16, CX; \
	JZ   done; \
	F16_BIN(OP, Y0, Y1, 0); \
done: \
	VZEROUPPER; \
	RET

// func addF16F16C(z, x, y *uint16, n int)
F16_BIN_FUNC(·addF16F16C, VADDPS)

// func mulF16F16C(z, x, y *uint16, n int)
F16_BIN_FUNC(·mulF16F16C, VMULPS)

// F16_UN: z = round(z OP f) in place for 8 elements at OFF(DI).
#define F16_UN(OP, R0, R1, OFF) \
	VCVTPH2PS OFF(DI), R0; \
	OP Y10, R0, R0; \
	F16_FIN(R0, R1, OFF)

#define F16_UN_FUNC(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-20; \
	MOVQ z+0(FP), DI; \
	MOVQ n+8(FP), CX; \
	VBROADCASTSS f+16(FP), Y10; \
	VPBROADCASTD nanf32<>(SB), Y11; \
	SUBQ $16, CX; \
	JLT  tail8; \
loop16: \
	F16_UN(OP, Y0, Y1, 0); \
	F16_UN(OP, Y2, Y3, 16); \
	ADDQ $32, DI; \
	SUBQ $16, CX; \
	JGE  loop16; \
tail8: \
	ADDQ $16, CX; \
	JZ   done; \
	F16_UN(OP, Y0, Y1, 0); \
done: \
	VZEROUPPER; \
	RET

// func mulScalarF16F16C(z *uint16, n int, f float32)
F16_UN_FUNC(·mulScalarF16F16C, VMULPS)

// func divScalarF16F16C(z *uint16, n int, f float32)
F16_UN_FUNC(·divScalarF16F16C, VDIVPS)

// MIN and MAX of float16/bfloat16 bit patterns, like pickMin/pickMax: the
// sign-magnitude words are mapped to two's complement order by flipping the
// magnitude bits of negative values (v ^ (v>>15 >>> 1), an involution), the
// keys are compared as signed words, the winner is mapped back, and lanes
// where max(|x|, |y|) > inf become the canonical NaN. Y12 holds the word
// 0x7fff, Y13 inf, Y11 nan.

// HKEY maps V to its order key (or back) in K; T is scratch.
#define HKEY(V, K, T) \
	VPSRAW $15, V, T; \
	VPSRLW $1, T, T; \
	VPXOR T, V, K

#define MINMAX(OP, R0, R1, R2, R3, R4, R5, ABS, INF, NAN) \
	VMOVDQU (SI), R0; \
	VMOVDQU (DX), R1; \
	HKEY(R0, R2, R4); \
	HKEY(R1, R3, R5); \
	OP R3, R2, R2; \
	HKEY(R2, R2, R3); \
	VPAND ABS, R0, R0; \
	VPAND ABS, R1, R1; \
	VPMAXSW R1, R0, R0; \
	VPCMPGTW INF, R0, R0; \
	VPBLENDVB R0, NAN, R2, R2; \
	VMOVDQU R2, (DI)

#define MINMAX_FUNC(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-36; \
	MOVQ z+0(FP), DI; \
	MOVQ x+8(FP), SI; \
	MOVQ y+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	VPBROADCASTW inf+32(FP), Y13; \
	VPBROADCASTW nan+34(FP), Y11; \
	VPCMPEQW Y12, Y12, Y12; \
	VPSRLW $1, Y12, Y12; \
	SUBQ $16, CX; \
	JLT  tail8; \
loop16: \
	MINMAX(OP, Y0, Y1, Y2, Y3, Y4, Y5, Y12, Y13, Y11); \
	ADDQ $32, SI; \
	ADDQ $32, DX; \
	ADDQ $32, DI; \
	SUBQ $16, CX; \
	JGE  loop16; \
tail8: \
	ADDQ $16, CX; \
	JZ   done; \
	MINMAX(OP, X0, X1, X2, X3, X4, X5, X12, X13, X11); \
done: \
	VZEROUPPER; \
	RET

// func minHalfAVX2(z, x, y *uint16, n int, inf, nan uint16)
MINMAX_FUNC(·minHalfAVX2, VPMINSW)

// func maxHalfAVX2(z, x, y *uint16, n int, inf, nan uint16)
MINMAX_FUNC(·maxHalfAVX2, VPMAXSW)

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
