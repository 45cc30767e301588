/* llvm_math.h: transcendental functions emitted inline as LLVM IR (range reduction + minimax
 * polynomials, no libm calls, no tables), so that loops using them vectorize at full width. */
#ifndef TJIT_CODEGEN_LLVM_MATH_H
#define TJIT_CODEGEN_LLVM_MATH_H

#include <llvm-c/Core.h>

/* _(name, text): the functions; error bounds per function and dtype are in docs/MATH.md. */
#define CG_MATH_DEF(_)            \
  _(CG_MATH_EXP, "exp")           \
  _(CG_MATH_LOG, "log")           \
  _(CG_MATH_TANH, "tanh")         \
  _(CG_MATH_LOGISTIC, "logistic") \
  _(CG_MATH_ERF, "erf")           \
  _(CG_MATH_SIN, "sin")           \
  _(CG_MATH_COS, "cos")           \
  _(CG_MATH_LOG1P, "log1p")       \
  _(CG_MATH_EXPM1, "expm1")       \
  _(CG_MATH_ERF_INV, "erf_inv")   \
  _(CG_MATH_ATAN2, "atan2")

typedef enum {
#define CG_MATH_ENUM(name, text) name,
  CG_MATH_DEF(CG_MATH_ENUM)
#undef CG_MATH_ENUM
  CG_MATH_COUNT
} cg_math_fn;

/* Emits FN(x) at B's insertion point (which must be inside a function of a module) and returns
   the result, of x's type. x is float or double, scalar or a fixed vector of any width. Uses
   only arithmetic, compares, selects, bitcasts and the intrinsics fma, fabs, rint, floor,
   copysign, sqrt; the one exception is f64 erf, which calls libm's erf per element (documented in
   docs/MATH.md). NaN inputs give NaN. Returns NULL (and emits nothing) for any other type or an
   unknown FN: a bug in the caller, not a user error. */
LLVMValueRef cg_math_emit(LLVMBuilderRef b, cg_math_fn fn, LLVMValueRef x);
/* exp(x) as cg_math_emit, for a value that is only ever added to (or subtracted from, or
   subtracted) a constant c with |c| >= 2^-40: the same bits for x >= -86.5 (f64: -707), and below
   it a positive normal number under 2^-124 (f64: 2^-1019), so that c plus it is c plus exp(x) for
   every x. Without the selects that round subnormal results once. */
LLVMValueRef cg_math_emit_exp_summand(LLVMBuilderRef b, LLVMValueRef x);
/* exp(x) as cg_math_emit, for an x that is <= 0 or NaN wherever the result is read (softmax's
   x - max(x)): the same bits, with fewer operations. */
LLVMValueRef cg_math_emit_exp_nonpos(LLVMBuilderRef b, LLVMValueRef x);
/* The binary functions (CG_MATH_ATAN2: atan2(y, x), C's argument order) as cg_math_emit; y and
   x have one type. NULL for a unary FN. */
LLVMValueRef cg_math_emit2(LLVMBuilderRef b, cg_math_fn fn, LLVMValueRef y, LLVMValueRef x);

/* "exp", "log", ...; NULL for an unknown FN. */
const char *cg_math_name(cg_math_fn fn);

/* f32 tanh's polynomials (see emit_tanh), shared with the precompiled core's epilogue programs
   (core_dot.c), which must give the same bits. */
extern const double cg_tanh32_p[4], cg_tanh32_e[6];

#endif /* TJIT_CODEGEN_LLVM_MATH_H */
