// godist_mpi_reduce.h: godist's element types and reduce ops on MPI, bit
// for bit as libgodist/reduce computes them. Included once, by
// godist_mpi.c (everything here is static to that file).
//
// float16 and bfloat16 travel as two-byte contiguous types and reduce
// through user ops that compute in float32 and round to nearest-even
// exactly like godist's Go kernels (libgodist/reduce/half.go,
// kernels_half.go, kernels_float.go): SUM and PRODUCT write the canonical
// quiet NaN (0x7e00, 0x7fc0) for any NaN; MIN and MAX pick one operand's
// bits by sign-magnitude order (-0 < +0) and give the canonical NaN if
// either operand is NaN.
#ifndef GODIST_MPI_REDUCE_H
#define GODIST_MPI_REDUCE_H

#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "godist_mpi.h"

// ---- float16 / bfloat16 arithmetic, bit for bit as in libgodist/reduce.

static inline uint32_t f32bits(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float f32from(uint32_t u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float f16to32(uint16_t h) {
	const uint32_t shifted_exp = 0x7c00u << 13;
	uint32_t o = (uint32_t)(h & 0x7fff) << 13;
	uint32_t exp = o & shifted_exp;
	o += (uint32_t)(127 - 15) << 23;
	if (exp == shifted_exp) {
		o += (uint32_t)(128 - 16) << 23;
	} else if (exp == 0) {
		o += 1u << 23;
		volatile float t = f32from(o); // one exact float32 subtraction, no contraction
		o = f32bits(t - 0x1p-14f);
	}
	return f32from(o | (uint32_t)(h & 0x8000) << 16);
}

static inline uint16_t f32to16(float f) {
	uint32_t u = f32bits(f);
	uint16_t sign = (uint16_t)(u >> 16) & 0x8000;
	u &= 0x7fffffff;
	if (u > 0x7f800000u) {
		return 0x7e00;
	}
	if (u < (uint32_t)(127 - 14) << 23) {
		volatile float t = f32from(u);
		return sign | (uint16_t)(f32bits(t + 0.5f) - 0x3f000000u);
	}
	if (u > (uint32_t)(127 + 16) << 23) {
		u = (uint32_t)(127 + 16) << 23;
	}
	return sign | (uint16_t)((u - ((uint32_t)(127 - 15) << 23) + 0xfff + ((u >> 13) & 1)) >> 13);
}

static inline float bf16to32(uint16_t h) { return f32from((uint32_t)h << 16); }

static inline uint16_t f32tobf16(float f) {
	uint32_t u = f32bits(f);
	if ((u & 0x7fffffff) > 0x7f800000u) {
		return 0x7fc0;
	}
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

// key maps sign-magnitude bits to two's complement order.
static inline int16_t hkey(int16_t v) { return v < 0 ? (int16_t)(v ^ 0x7fff) : v; }

static inline uint16_t pick_min(uint16_t x, uint16_t y, uint16_t inf, uint16_t nan) {
	uint16_t r = hkey((int16_t)y) < hkey((int16_t)x) ? y : x;
	if ((x & 0x7fff) > inf || (y & 0x7fff) > inf) {
		r = nan;
	}
	return r;
}

static inline uint16_t pick_max(uint16_t x, uint16_t y, uint16_t inf, uint16_t nan) {
	uint16_t r = hkey((int16_t)y) > hkey((int16_t)x) ? y : x;
	if ((x & 0x7fff) > inf || (y & 0x7fff) > inf) {
		r = nan;
	}
	return r;
}

// The user functions: inout[i] = in[i] (op) inout[i]. Each product and sum
// is stored to a float32 variable before rounding, so no wider precision
// or fused operation reaches the result.
#define HALF_OP(name, expr)                                                 \
	static void name(void *invec, void *inoutvec, int *len, MPI_Datatype *dt) { \
		(void)dt;                                                           \
		const uint16_t *a = (const uint16_t *)invec;                        \
		uint16_t *b = (uint16_t *)inoutvec;                                 \
		for (int i = 0; i < *len; i++) {                                    \
			uint16_t x = a[i], y = b[i];                                    \
			b[i] = (expr);                                                  \
		}                                                                   \
	}

static inline uint16_t add16(uint16_t x, uint16_t y) {
	volatile float r = f16to32(x) + f16to32(y);
	return f32to16(r);
}
static inline uint16_t mul16(uint16_t x, uint16_t y) {
	volatile float r = f16to32(x) * f16to32(y);
	return f32to16(r);
}
static inline uint16_t addbf(uint16_t x, uint16_t y) {
	volatile float r = bf16to32(x) + bf16to32(y);
	return f32tobf16(r);
}
static inline uint16_t mulbf(uint16_t x, uint16_t y) {
	volatile float r = bf16to32(x) * bf16to32(y);
	return f32tobf16(r);
}

HALF_OP(op_f16_sum, add16(x, y))
HALF_OP(op_f16_prod, mul16(x, y))
HALF_OP(op_f16_min, pick_min(x, y, 0x7c00, 0x7e00))
HALF_OP(op_f16_max, pick_max(x, y, 0x7c00, 0x7e00))
HALF_OP(op_bf16_sum, addbf(x, y))
HALF_OP(op_bf16_prod, mulbf(x, y))
HALF_OP(op_bf16_min, pick_min(x, y, 0x7f80, 0x7fc0))
HALF_OP(op_bf16_max, pick_max(x, y, 0x7f80, 0x7fc0))

// Integer ops the predefined ones get wrong in the Debian builds (measured
// against libgodist/reduce): Open MPI 4.1.4's MPI_SUM on 8- and 16-bit
// integers saturates (its AVX op component) where C and Go wrap around, and
// MPICH 4.0.2's MPI_MIN/MPI_MAX on MPI_UINT8_T compare as signed. Both
// builds use these user ops for those pairs.
#define INT_OP(name, T, expr)                                               \
	static void name(void *invec, void *inoutvec, int *len, MPI_Datatype *dt) { \
		(void)dt;                                                           \
		const T *a = (const T *)invec;                                      \
		T *b = (T *)inoutvec;                                               \
		for (int i = 0; i < *len; i++) {                                    \
			T x = a[i], y = b[i];                                           \
			b[i] = (T)(expr);                                               \
		}                                                                   \
	}

INT_OP(op_i8_sum, uint8_t, x + y)
INT_OP(op_u8_sum, uint8_t, x + y)
INT_OP(op_i16_sum, uint16_t, x + y)
INT_OP(op_u8_min, uint8_t, x < y ? x : y)
INT_OP(op_u8_max, uint8_t, x > y ? x : y)

// ---- the shim's datatypes and ops

enum { DT_F16 = 0, DT_BF16 = 1, DT_BOOL = 11, NUM_DTYPES = 12 };
enum { OP_SUM = 0, OP_PRODUCT = 2, OP_MIN = 3, OP_MAX = 4, OP_BAND = 5, OP_BOR = 6, OP_BXOR = 7 };

static MPI_Datatype half_type[2]; // float16, bfloat16
static MPI_Op half_ops[2][4];     // [f16, bf16][SUM, PRODUCT, MIN, MAX]
enum { FIX_I8_SUM, FIX_U8_SUM, FIX_I16_SUM, FIX_U8_MIN, FIX_U8_MAX, NUM_FIX };
static MPI_Op fix_ops[NUM_FIX];

// reduce_setup makes the datatypes and ops (once, with the shim's mutex
// held, MPI initialised).
static int reduce_setup(void) {
	int rc;
	for (int i = 0; i < 2; i++) {
		if ((rc = MPI_Type_contiguous(2, MPI_BYTE, &half_type[i])) != MPI_SUCCESS) return rc;
		if ((rc = MPI_Type_commit(&half_type[i])) != MPI_SUCCESS) return rc;
	}
	MPI_User_function *fns[2][4] = {{op_f16_sum, op_f16_prod, op_f16_min, op_f16_max},
	                                {op_bf16_sum, op_bf16_prod, op_bf16_min, op_bf16_max}};
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 4; j++) {
			if ((rc = MPI_Op_create(fns[i][j], 1, &half_ops[i][j])) != MPI_SUCCESS) return rc;
		}
	}
	MPI_User_function *fix[NUM_FIX] = {op_i8_sum, op_u8_sum, op_i16_sum, op_u8_min, op_u8_max};
	for (int i = 0; i < NUM_FIX; i++) {
		if ((rc = MPI_Op_create(fix[i], 1, &fix_ops[i])) != MPI_SUCCESS) return rc;
	}
	return 0;
}

// ---- dtype and op mapping

static int map_dtype(int dtype, MPI_Datatype *t) {
	switch (dtype) {
	case DT_F16: *t = half_type[0]; return 0;
	case DT_BF16: *t = half_type[1]; return 0;
	case 2: *t = MPI_FLOAT; return 0;
	case 3: *t = MPI_DOUBLE; return 0;
	case 4: *t = MPI_C_FLOAT_COMPLEX; return 0;
	case 5: *t = MPI_C_DOUBLE_COMPLEX; return 0;
	case 6: *t = MPI_INT8_T; return 0;
	case 7: *t = MPI_UINT8_T; return 0;
	case 8: *t = MPI_INT16_T; return 0;
	case 9: *t = MPI_INT32_T; return 0;
	case 10: *t = MPI_INT64_T; return 0;
	case DT_BOOL: *t = MPI_C_BOOL; return 0;
	}
	return GM_ERR_ARG;
}

static int map_op(int dtype, int op, MPI_Op *o) {
	if (dtype == DT_F16 || dtype == DT_BF16) {
		int j;
		switch (op) {
		case OP_SUM: j = 0; break;
		case OP_PRODUCT: j = 1; break;
		case OP_MIN: j = 2; break;
		case OP_MAX: j = 3; break;
		default: return GM_ERR_ARG;
		}
		*o = half_ops[dtype][j];
		return 0;
	}
	if (dtype == DT_BOOL) {
		switch (op) {
		case OP_SUM: case OP_MAX: case OP_BOR: *o = MPI_LOR; return 0;
		case OP_PRODUCT: case OP_MIN: case OP_BAND: *o = MPI_LAND; return 0;
		case OP_BXOR: *o = MPI_LXOR; return 0;
		}
		return GM_ERR_ARG;
	}
	int is_float = dtype == 2 || dtype == 3, is_complex = dtype == 4 || dtype == 5;
	if (op == OP_SUM && (dtype == 6 || dtype == 7 || dtype == 8)) {
		*o = fix_ops[dtype == 6 ? FIX_I8_SUM : dtype == 7 ? FIX_U8_SUM : FIX_I16_SUM];
		return 0;
	}
	if (dtype == 7 && (op == OP_MIN || op == OP_MAX)) {
		*o = fix_ops[op == OP_MIN ? FIX_U8_MIN : FIX_U8_MAX];
		return 0;
	}
	switch (op) {
	case OP_SUM: *o = MPI_SUM; return 0;
	case OP_PRODUCT: *o = MPI_PROD; return 0;
	case OP_MIN: if (is_complex) return GM_ERR_ARG; *o = MPI_MIN; return 0;
	case OP_MAX: if (is_complex) return GM_ERR_ARG; *o = MPI_MAX; return 0;
	case OP_BAND: if (is_float || is_complex) return GM_ERR_ARG; *o = MPI_BAND; return 0;
	case OP_BOR: if (is_float || is_complex) return GM_ERR_ARG; *o = MPI_BOR; return 0;
	case OP_BXOR: if (is_float || is_complex) return GM_ERR_ARG; *o = MPI_BXOR; return 0;
	}
	return GM_ERR_ARG;
}

#endif
