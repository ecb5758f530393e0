//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels for the 8-, 16-, 32- and 64-bit element types (floats and
// integers). Each does exactly what the Go loop it stands in for does
// (kernels_float.go, kernels_int.go, scale.go), so results are bitwise
// identical: float SUM/PRODUCT are one IEEE operation per lane with NaN
// results replaced by the canonical quiet NaN; float MIN/MAX compare the bit
// patterns mapped to two's complement order and give the canonical NaN if
// either operand is NaN; integers wrap around.
//
// Binary kernels: func(z, x, y *byte, n int), z = x OP y over n bytes, n a
// positive multiple of 32. Scale kernels: func(z *byte, n int, f), z = z OP f
// in place. Loops do 64 bytes a step and one step of 32 at the end if
// needed. Operands of three-operand instructions are in Go order:
// OP src2, src1, dst (dst = src1 OP src2).
//
// Register conventions: Y11 canonical NaN, Y12 +Inf, Y13 |x| mask (all but
// the sign bit), Y15 zero, Y10 the scale factor.

DATA nan32<>+0(SB)/4, $0x7fc00000
GLOBL nan32<>(SB), RODATA|NOPTR, $4
DATA inf32<>+0(SB)/4, $0x7f800000
GLOBL inf32<>(SB), RODATA|NOPTR, $4
DATA abs32<>+0(SB)/4, $0x7fffffff
GLOBL abs32<>(SB), RODATA|NOPTR, $4
DATA nan64<>+0(SB)/8, $0x7ff8000000000000
GLOBL nan64<>(SB), RODATA|NOPTR, $8
DATA inf64<>+0(SB)/8, $0x7ff0000000000000
GLOBL inf64<>(SB), RODATA|NOPTR, $8
DATA abs64<>+0(SB)/8, $0x7fffffffffffffff
GLOBL abs64<>(SB), RODATA|NOPTR, $8

#define CONSTS32 \
	VPBROADCASTD nan32<>(SB), Y11; \
	VPBROADCASTD inf32<>(SB), Y12; \
	VPBROADCASTD abs32<>(SB), Y13; \
	VPXOR Y15, Y15, Y15

#define CONSTS64 \
	VPBROADCASTQ nan64<>(SB), Y11; \
	VPBROADCASTQ inf64<>(SB), Y12; \
	VPBROADCASTQ abs64<>(SB), Y13; \
	VPXOR Y15, Y15, Y15

// BIN_FUNC defines a binary kernel whose body BODY(OFF, A, B, C, D) handles
// the 32 bytes at OFF(SI), OFF(DX) -> OFF(DI) with scratch registers A-D.
#define BIN_FUNC(NAME, CONSTS, BODY) \
TEXT NAME(SB), NOSPLIT, $0-32; \
	MOVQ z+0(FP), DI; \
	MOVQ x+8(FP), SI; \
	MOVQ y+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	CONSTS; \
	SUBQ $64, CX; \
	JLT  tail; \
loop: \
	BODY(0, Y0, Y1, Y2, Y3); \
	BODY(32, Y4, Y5, Y6, Y7); \
	ADDQ $64, SI; \
	ADDQ $64, DX; \
	ADDQ $64, DI; \
	SUBQ $64, CX; \
	JGE  loop; \
tail: \
	ADDQ $64, CX; \
	JZ   done; \
	BODY(0, Y0, Y1, Y2, Y3); \
done: \
	VZEROUPPER; \
	RET

#define NOCONSTS

// LANE: one instruction per lane (integer SUM/PRODUCT/MIN/MAX, bitwise).
#define LANE(OP, OFF, A, B, C, D) \
	VMOVDQU OFF(SI), A; \
	OP OFF(DX), A, A; \
	VMOVDQU A, OFF(DI)

// FARITH: float op, then NaN lanes replaced by the canonical NaN. CMP is
// VCMPPS or VCMPPD, BLEND VBLENDVPS or VBLENDVPD; predicate 3 = unordered.
#define FARITH(OP, CMP, BLEND, OFF, A, B, C, D) \
	VMOVUPS OFF(SI), A; \
	OP OFF(DX), A, A; \
	CMP $3, A, A, B; \
	BLEND B, Y11, A, A; \
	VMOVUPS A, OFF(DI)

// KEY32 maps float32 bit patterns in V to two's complement order in K:
// negative values get their magnitude bits flipped.
#define KEY32(V, K) \
	VPSRAD $31, V, K; \
	VPAND Y13, K, K; \
	VPXOR V, K, K

// KEY64 is KEY32 for float64 (AVX2 has no 64-bit arithmetic shift: the
// sign mask comes from 0 > V).
#define KEY64(V, K) \
	VPCMPGTQ V, Y15, K; \
	VPAND Y13, K, K; \
	VPXOR V, K, K

// NAN32 sets R to the canonical NaN in lanes where X or Y (clobbered) is
// NaN, i.e. max(|X|, |Y|) > Inf.
#define NAN32(X, Y, R) \
	VPAND Y13, X, X; \
	VPAND Y13, Y, Y; \
	VPMAXSD Y, X, X; \
	VPCMPGTD Y12, X, X; \
	VPBLENDVB X, Y11, R, R

#define NAN64(X, Y, R) \
	VPAND Y13, X, X; \
	VPAND Y13, Y, Y; \
	VPCMPGTQ Y12, X, X; \
	VPCMPGTQ Y12, Y, Y; \
	VPOR Y, X, X; \
	VPBLENDVB X, Y11, R, R

// FPICK: C = y where the keys compare GT (src2 P, src1 Q: Q > P), else x;
// then the canonical NaN where either operand is NaN. GT is VPCMPGTD or
// VPCMPGTQ; P, Q name key registers: (D, C) compares kx > ky (MIN), (C, D)
// ky > kx (MAX).
#define FPICK(KEY, GT, NANS, P, Q, OFF, A, B, C, D) \
	VMOVDQU OFF(SI), A; \
	VMOVDQU OFF(DX), B; \
	KEY(A, C); \
	KEY(B, D); \
	GT P, Q, C; \
	VPBLENDVB C, B, A, C; \
	NANS(A, B, C); \
	VMOVDQU C, OFF(DI)

// IPICK64: int64 MIN (P, Q = B, A: x > y) or MAX (A, B: y > x) by compare
// and blend (AVX2 has no VPMINSQ): C = y where Q > P, else x.
#define IPICK64(P, Q, OFF, A, B, C, D) \
	VMOVDQU OFF(SI), A; \
	VMOVDQU OFF(DX), B; \
	VPCMPGTQ P, Q, C; \
	VPBLENDVB C, B, A, C; \
	VMOVDQU C, OFF(DI)

#define IMIN64(OFF, A, B, C, D) IPICK64(B, A, OFF, A, B, C, D)
#define IMAX64(OFF, A, B, C, D) IPICK64(A, B, OFF, A, B, C, D)

#define ADDPS(OFF, A, B, C, D) FARITH(VADDPS, VCMPPS, VBLENDVPS, OFF, A, B, C, D)
#define MULPS(OFF, A, B, C, D) FARITH(VMULPS, VCMPPS, VBLENDVPS, OFF, A, B, C, D)
#define ADDPD(OFF, A, B, C, D) FARITH(VADDPD, VCMPPD, VBLENDVPD, OFF, A, B, C, D)
#define MULPD(OFF, A, B, C, D) FARITH(VMULPD, VCMPPD, VBLENDVPD, OFF, A, B, C, D)
#define MINF32(OFF, A, B, C, D) FPICK(KEY32, VPCMPGTD, NAN32, D, C, OFF, A, B, C, D)
#define MAXF32(OFF, A, B, C, D) FPICK(KEY32, VPCMPGTD, NAN32, C, D, OFF, A, B, C, D)
#define MINF64(OFF, A, B, C, D) FPICK(KEY64, VPCMPGTQ, NAN64, D, C, OFF, A, B, C, D)
#define MAXF64(OFF, A, B, C, D) FPICK(KEY64, VPCMPGTQ, NAN64, C, D, OFF, A, B, C, D)

#define PADDB(OFF, A, B, C, D) LANE(VPADDB, OFF, A, B, C, D)
#define PADDW(OFF, A, B, C, D) LANE(VPADDW, OFF, A, B, C, D)
#define PADDD(OFF, A, B, C, D) LANE(VPADDD, OFF, A, B, C, D)
#define PADDQ(OFF, A, B, C, D) LANE(VPADDQ, OFF, A, B, C, D)
#define PMULLW(OFF, A, B, C, D) LANE(VPMULLW, OFF, A, B, C, D)
#define PMULLD(OFF, A, B, C, D) LANE(VPMULLD, OFF, A, B, C, D)
#define PMINSB(OFF, A, B, C, D) LANE(VPMINSB, OFF, A, B, C, D)
#define PMAXSB(OFF, A, B, C, D) LANE(VPMAXSB, OFF, A, B, C, D)
#define PMINUB(OFF, A, B, C, D) LANE(VPMINUB, OFF, A, B, C, D)
#define PMAXUB(OFF, A, B, C, D) LANE(VPMAXUB, OFF, A, B, C, D)
#define PMINSW(OFF, A, B, C, D) LANE(VPMINSW, OFF, A, B, C, D)
#define PMAXSW(OFF, A, B, C, D) LANE(VPMAXSW, OFF, A, B, C, D)
#define PMINSD(OFF, A, B, C, D) LANE(VPMINSD, OFF, A, B, C, D)
#define PMAXSD(OFF, A, B, C, D) LANE(VPMAXSD, OFF, A, B, C, D)
#define PAND(OFF, A, B, C, D) LANE(VPAND, OFF, A, B, C, D)
#define POR(OFF, A, B, C, D) LANE(VPOR, OFF, A, B, C, D)
#define PXOR(OFF, A, B, C, D) LANE(VPXOR, OFF, A, B, C, D)

BIN_FUNC(·addF32AVX2, CONSTS32, ADDPS)
BIN_FUNC(·mulF32AVX2, CONSTS32, MULPS)
BIN_FUNC(·minF32AVX2, CONSTS32, MINF32)
BIN_FUNC(·maxF32AVX2, CONSTS32, MAXF32)
BIN_FUNC(·addF64AVX2, CONSTS64, ADDPD)
BIN_FUNC(·mulF64AVX2, CONSTS64, MULPD)
BIN_FUNC(·minF64AVX2, CONSTS64, MINF64)
BIN_FUNC(·maxF64AVX2, CONSTS64, MAXF64)

BIN_FUNC(·addI8AVX2, NOCONSTS, PADDB)
BIN_FUNC(·addI16AVX2, NOCONSTS, PADDW)
BIN_FUNC(·addI32AVX2, NOCONSTS, PADDD)
BIN_FUNC(·addI64AVX2, NOCONSTS, PADDQ)
BIN_FUNC(·mulI16AVX2, NOCONSTS, PMULLW)
BIN_FUNC(·mulI32AVX2, NOCONSTS, PMULLD)
BIN_FUNC(·minI8AVX2, NOCONSTS, PMINSB)
BIN_FUNC(·maxI8AVX2, NOCONSTS, PMAXSB)
BIN_FUNC(·minU8AVX2, NOCONSTS, PMINUB)
BIN_FUNC(·maxU8AVX2, NOCONSTS, PMAXUB)
BIN_FUNC(·minI16AVX2, NOCONSTS, PMINSW)
BIN_FUNC(·maxI16AVX2, NOCONSTS, PMAXSW)
BIN_FUNC(·minI32AVX2, NOCONSTS, PMINSD)
BIN_FUNC(·maxI32AVX2, NOCONSTS, PMAXSD)
BIN_FUNC(·minI64AVX2, NOCONSTS, IMIN64)
BIN_FUNC(·maxI64AVX2, NOCONSTS, IMAX64)
BIN_FUNC(·andAVX2, NOCONSTS, PAND)
BIN_FUNC(·orAVX2, NOCONSTS, POR)
BIN_FUNC(·xorAVX2, NOCONSTS, PXOR)

// SCALE_FUNC defines z = z OP f in place (z the first operand, like the Go
// loops' v[i] OP= f, so a NaN payload propagates the same way). BCAST
// broadcasts the factor at f+16(FP) into Y10.
#define SCALE_FUNC(NAME, FRAME, BCAST, OP) \
TEXT NAME(SB), NOSPLIT, FRAME; \
	MOVQ z+0(FP), DI; \
	MOVQ n+8(FP), CX; \
	BCAST f+16(FP), Y10; \
	SUBQ $64, CX; \
	JLT  tail; \
loop: \
	VMOVUPS 0(DI), Y0; \
	VMOVUPS 32(DI), Y1; \
	OP Y10, Y0, Y0; \
	OP Y10, Y1, Y1; \
	VMOVUPS Y0, 0(DI); \
	VMOVUPS Y1, 32(DI); \
	ADDQ $64, DI; \
	SUBQ $64, CX; \
	JGE  loop; \
tail: \
	ADDQ $64, CX; \
	JZ   done; \
	VMOVUPS 0(DI), Y0; \
	OP Y10, Y0, Y0; \
	VMOVUPS Y0, 0(DI); \
done: \
	VZEROUPPER; \
	RET

// func mulScalarF32AVX2(z *byte, n int, f float32)
SCALE_FUNC(·mulScalarF32AVX2, $0-20, VBROADCASTSS, VMULPS)

// func divScalarF32AVX2(z *byte, n int, f float32)
SCALE_FUNC(·divScalarF32AVX2, $0-20, VBROADCASTSS, VDIVPS)

// func mulScalarF64AVX2(z *byte, n int, f float64)
SCALE_FUNC(·mulScalarF64AVX2, $0-24, VBROADCASTSD, VMULPD)

// func divScalarF64AVX2(z *byte, n int, f float64)
SCALE_FUNC(·divScalarF64AVX2, $0-24, VBROADCASTSD, VDIVPD)
