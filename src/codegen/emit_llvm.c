/* emit_llvm.c: loop IR -> LLVM IR through the C API: one module holding every kernel of a
 * signature, each a public entry (bufs, row_begin, row_end) that calls an always-inlined body
 * taking one noalias pointer per buffer (inlining turns noalias into alias scopes, which is what
 * lets the vectorizer use full-width vectors). Semantics are ir_eval_elementwise's; see kernel.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>

#include "codegen/epilogue.h"
#include "codegen/kernel.h"
#include "codegen/llvm_jit.h"
#include "codegen/llvm_math.h"
#include "runtime/error.h"

/* A row nest's inner extent at least this: below, its loop overhead outweighs the divisions. */
#define ROW_NEST_MIN 4
/* ... and rows of at most this many inner iterations (lp_func.row_work): a longer row amortizes
   its divisions, and the nest costs LLVM time (W10's compile 9% more instructions, none
   faster). */
#define ROW_NEST_MAX_WORK 64

typedef struct le {
  LLVMContextRef c;
  LLVMModuleRef m;
  LLVMBuilderRef b;
  LLVMValueRef fn;
  const lp_func *lf;
  LLVMValueRef *val;   /* per ins */
  LLVMValueRef *slot;  /* per LP_ACC ins: its alloca */
  LLVMValueRef *buf;   /* per buffer: the body's pointer parameter */
  LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, half, ptr, vd;
  LLVMBasicBlockRef alloca_bb;
  bool bad;            /* an op with no compiled form (lowering rejects those first) */
  bool in_stream;      /* emitting a streamed loop's body: its prefetches were issued per run */
  /* the row loop as a nest (row_nest): the row is s W + w for the outer and inner indices, W =
     lf->row_inner, so that index math of the outer row dims is divided once per W rows */
  LLVMValueRef row_s, row_w;
} le;

static LLVMTypeRef ctype(const le *e, jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return e->i1;
  case JIT_I8:
  case JIT_U8: return e->i8;
  case JIT_I32:
  case JIT_U32: return e->i32;
  case JIT_I64:
  case JIT_U64: return e->i64;
  case JIT_F64: return e->f64;
  default: return e->f32;
  }
}

static LLVMTypeRef stype(const le *e, jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return e->i8;
  case JIT_F16: return e->half;
  case JIT_BF16: return e->i16;
  default: return ctype(e, d);
  }
}

static bool is_f(jit_dtype d) { return ir_dtype_is_float(d); }
static bool is_signed(jit_dtype d) { return d == JIT_I8 || d == JIT_I32 || d == JIT_I64; }

static LLVMValueRef intrinsic(le *e, const char *name, LLVMTypeRef *tys, unsigned n_tys,
                              LLVMValueRef *args, unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->m, id, tys, n_tys);
  LLVMTypeRef fty = LLVMIntrinsicGetType(e->c, id, tys, n_tys);
  return LLVMBuildCall2(e->b, fty, fn, args, n, "");
}

static LLVMValueRef intr1(le *e, const char *name, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  return intrinsic(e, name, &t, 1, &x, 1);
}

static LLVMValueRef intr2(le *e, const char *name, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef a[2] = {x, y};
  return intrinsic(e, name, &t, 1, a, 2);
}

static LLVMValueRef intr3(le *e, const char *name, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef a[3] = {x, y, z};
  return intrinsic(e, name, &t, 1, a, 3);
}

/* A libm function of doubles, declared in the module (the JIT resolves it in the process). */
static LLVMValueRef libm2(le *e, const char *name, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef params[2] = {e->f64, e->f64};
  LLVMTypeRef fty = LLVMFunctionType(e->f64, params, 2, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(e->m, name);
  if (!fn) fn = LLVMAddFunction(e->m, name, fty);
  LLVMValueRef a[2] = {x, y};
  return LLVMBuildCall2(e->b, fty, fn, a, 2, "");
}

/* ---- 16-bit floats ------------------------------------------------------------------------ */

/* The bf16 bits of a float, rounded to nearest even; NaN stays a quiet NaN (as dtype.c). */
static LLVMValueRef bf16_bits(le *e, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef u = LLVMBuildBitCast(b, x, e->i32, "");
  LLVMValueRef hi = LLVMBuildLShr(b, u, LLVMConstInt(e->i32, 16, 0), "");
  LLVMValueRef nan = LLVMBuildOr(b, hi, LLVMConstInt(e->i32, 0x40, 0), "");
  LLVMValueRef bias = LLVMBuildAdd(b, LLVMConstInt(e->i32, 0x7fff, 0),
                                   LLVMBuildAnd(b, hi, LLVMConstInt(e->i32, 1, 0), ""), "");
  LLVMValueRef r = LLVMBuildLShr(b, LLVMBuildAdd(b, u, bias, ""), LLVMConstInt(e->i32, 16, 0), "");
  LLVMValueRef isnan = LLVMBuildFCmp(b, LLVMRealUNO, x, x, "");
  return LLVMBuildTrunc(b, LLVMBuildSelect(b, isnan, nan, r, ""), e->i16, "");
}

static LLVMValueRef bf16_to_f32(le *e, LLVMValueRef h) {
  LLVMValueRef w = LLVMBuildShl(e->b, LLVMBuildZExt(e->b, h, e->i32, ""), LLVMConstInt(e->i32, 16, 0), "");
  return LLVMBuildBitCast(e->b, w, e->f32, "");
}

/* x (a float) rounded to dtype d when d is a 16-bit float. */
static LLVMValueRef round_to(le *e, jit_dtype d, LLVMValueRef x) {
  if (d == JIT_F16)
    return LLVMBuildFPExt(e->b, LLVMBuildFPTrunc(e->b, x, e->half, ""), e->f32, "");
  if (d == JIT_BF16) return bf16_to_f32(e, bf16_bits(e, x));
  return x;
}

/* ---- elementwise ops ----------------------------------------------------------------------- */

static LLVMValueRef convert(le *e, jit_dtype from, jit_dtype to, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  LLVMTypeRef tt = ctype(e, to);
  if (to == JIT_BOOL) {
    if (from == JIT_BOOL) return x;
    if (is_f(from)) return LLVMBuildFCmp(b, LLVMRealUNE, x, LLVMConstReal(LLVMTypeOf(x), 0), "");
    return LLVMBuildICmp(b, LLVMIntNE, x, LLVMConstInt(LLVMTypeOf(x), 0, 0), "");
  }
  if (is_f(from) && is_f(to)) {
    LLVMTypeRef ft = LLVMTypeOf(x);
    LLVMValueRef r = x;
    if (ft == e->f64 && tt == e->f32) r = LLVMBuildFPTrunc(b, x, e->f32, "");
    if (ft == e->f32 && tt == e->f64) r = LLVMBuildFPExt(b, x, e->f64, "");
    return round_to(e, to, r);
  }
  if (is_f(from)) {
    LLVMTypeRef tys[2] = {tt, LLVMTypeOf(x)};
    return intrinsic(e, ir_dtype_is_unsigned(to) ? "llvm.fptoui.sat" : "llvm.fptosi.sat", tys, 2,
                     &x, 1);
  }
  if (is_f(to)) {
    LLVMValueRef r;
    if (from == JIT_I64 || from == JIT_U64) {
      /* through double, as the interpreter rounds it */
      r = from == JIT_I64 ? LLVMBuildSIToFP(b, x, e->f64, "") : LLVMBuildUIToFP(b, x, e->f64, "");
      if (tt != e->f64) r = LLVMBuildFPTrunc(b, r, tt, "");
    } else if (is_signed(from)) {
      r = LLVMBuildSIToFP(b, x, tt, "");
    } else {
      r = LLVMBuildUIToFP(b, x, tt, "");
    }
    return round_to(e, to, r);
  }
  unsigned fw = LLVMGetIntTypeWidth(LLVMTypeOf(x)), tw = LLVMGetIntTypeWidth(tt);
  if (fw == tw) return x;
  if (fw > tw) return LLVMBuildTrunc(b, x, tt, "");
  return is_signed(from) ? LLVMBuildSExt(b, x, tt, "") : LLVMBuildZExt(b, x, tt, "");
}

static const cg_math_fn math_of[IR_N_OPS] = {
    [IR_EXP] = CG_MATH_EXP, [IR_LOG] = CG_MATH_LOG,   [IR_TANH] = CG_MATH_TANH,
    [IR_LOGISTIC] = CG_MATH_LOGISTIC, [IR_ERF] = CG_MATH_ERF, [IR_SIN] = CG_MATH_SIN,
    [IR_COS] = CG_MATH_COS, [IR_LOG1P] = CG_MATH_LOG1P, [IR_EXPM1] = CG_MATH_EXPM1,
    [IR_ERF_INV] = CG_MATH_ERF_INV,
};

/* math_of's zero is CG_MATH_EXP: an op other than exp mapped to it has no function */
bool lp_ew_is_math(int ew) {
  return ew >= 0 && ew < IR_N_OPS && (ew == IR_EXP || math_of[ew] != CG_MATH_EXP);
}

static LLVMValueRef ew_float(le *e, const lp_ins *in, LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = e->b;
  jit_dtype d = in->dt;
  LLVMTypeRef t = ctype(e, d);
  LLVMValueRef r;
  switch ((ir_op)in->ew) {
  case IR_NEG: return LLVMBuildFNeg(b, x, "");
  case IR_ABS: return intr1(e, "llvm.fabs", x);
  case IR_FLOOR: return intr1(e, "llvm.floor", x);
  case IR_CEIL: return intr1(e, "llvm.ceil", x);
  case IR_ROUND: return intr1(e, "llvm.roundeven", x);
  case IR_SIGN: {
    /* +-1 with x's sign; 0, -0 and NaN are their own sign */
    LLVMValueRef keep = LLVMBuildFCmp(b, LLVMRealUEQ, x, LLVMConstReal(t, 0), "");
    return LLVMBuildSelect(b, keep, x, intr2(e, "llvm.copysign", LLVMConstReal(t, 1), x), "");
  }
  case IR_MAX: return intr2(e, "llvm.maximum", x, y);
  case IR_MIN: return intr2(e, "llvm.minimum", x, y);
  case IR_SQRT: r = intr1(e, "llvm.sqrt", x); break;
  case IR_RSQRT: {
    /* in double: one rounding, as the interpreter's 1 / sqrt in double */
    LLVMValueRef xd = t == e->f64 ? x : LLVMBuildFPExt(b, x, e->f64, "");
    r = LLVMBuildFDiv(b, LLVMConstReal(e->f64, 1.0), intr1(e, "llvm.sqrt", xd), "");
    if (t != e->f64) r = LLVMBuildFPTrunc(b, r, t, "");
    break;
  }
  case IR_ADD: r = LLVMBuildFAdd(b, x, y, ""); break;
  case IR_SUB: r = LLVMBuildFSub(b, x, y, ""); break;
  case IR_MUL: r = LLVMBuildFMul(b, x, y, ""); break;
  case IR_DIV: r = LLVMBuildFDiv(b, x, y, ""); break;
  case IR_REM: r = LLVMBuildFRem(b, x, y, ""); break; /* exact (fmod): no rounding */
  case IR_ATAN2: r = cg_math_emit2(b, CG_MATH_ATAN2, x, y); break;
  case IR_POW: {
    LLVMValueRef xd = t == e->f64 ? x : LLVMBuildFPExt(b, x, e->f64, "");
    LLVMValueRef yd = t == e->f64 ? y : LLVMBuildFPExt(b, y, e->f64, "");
    r = libm2(e, "pow", xd, yd);
    if (t != e->f64) r = LLVMBuildFPTrunc(b, r, t, "");
    break;
  }
  default:
    if (!lp_ew_is_math(in->ew)) {
      e->bad = true;
      return LLVMGetUndef(t);
    }
    r = in->ew == IR_EXP && in->range == LP_RANGE_NONPOS ? cg_math_emit_exp_nonpos(b, x)
                                                          : cg_math_emit(b, math_of[in->ew], x);
    break;
  }
  if (!r) {
    e->bad = true;
    return LLVMGetUndef(t);
  }
  return round_to(e, d, r);
}

/* a ** b in the integer dtype's width, wrapping (an internal helper per width). */
static LLVMValueRef ipow(le *e, jit_dtype d, LLVMValueRef x, LLVMValueRef y) {
  LLVMTypeRef t = ctype(e, d);
  char name[32];
  snprintf(name, sizeof name, "tjit.ipow.%s", jit_dtype_name(d));
  LLVMTypeRef params[2] = {t, t};
  LLVMTypeRef fty = LLVMFunctionType(t, params, 2, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(e->m, name);
  if (!fn) {
    fn = LLVMAddFunction(e->m, name, fty);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(e->c);
    LLVMValueRef a = LLVMGetParam(fn, 0), n = LLVMGetParam(fn, 1);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(e->c, fn, "entry");
    LLVMBasicBlockRef neg = LLVMAppendBasicBlockInContext(e->c, fn, "neg");
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(e->c, fn, "head");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->c, fn, "body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(e->c, fn, "done");
    LLVMValueRef zero = LLVMConstInt(t, 0, 0), one = LLVMConstInt(t, 1, 0);
    LLVMValueRef m1 = LLVMConstAllOnes(t);
    LLVMPositionBuilderAtEnd(b, entry);
    LLVMValueRef isneg = is_signed(d) ? LLVMBuildICmp(b, LLVMIntSLT, n, zero, "") : LLVMConstInt(e->i1, 0, 0);
    LLVMBuildCondBr(b, isneg, neg, head);
    /* a negative exponent: 1 for a == 1, +-1 for a == -1, else 0 */
    LLVMPositionBuilderAtEnd(b, neg);
    LLVMValueRef odd = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, n, one, ""), zero, "");
    LLVMValueRef pm = LLVMBuildSelect(b, odd, m1, one, "");
    LLVMValueRef r0 = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, a, m1, ""), pm, zero, "");
    r0 = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, a, one, ""), one, r0, "");
    LLVMBuildRet(b, r0);
    LLVMPositionBuilderAtEnd(b, head);
    LLVMValueRef r = LLVMBuildPhi(b, t, "r"), xb = LLVMBuildPhi(b, t, "x"), k = LLVMBuildPhi(b, t, "k");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, k, zero, ""), body, done);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef bit = LLVMBuildICmp(b, LLVMIntNE, LLVMBuildAnd(b, k, one, ""), zero, "");
    LLVMValueRef r2 = LLVMBuildSelect(b, bit, LLVMBuildMul(b, r, xb, ""), r, "");
    LLVMValueRef x2 = LLVMBuildMul(b, xb, xb, "");
    LLVMValueRef k2 = LLVMBuildLShr(b, k, one, "");
    LLVMBuildBr(b, head);
    LLVMValueRef rin[2] = {one, r2}, xin[2] = {a, x2}, kin[2] = {n, k2};
    LLVMBasicBlockRef from[2] = {entry, body};
    LLVMAddIncoming(r, rin, from, 2);
    LLVMAddIncoming(xb, xin, from, 2);
    LLVMAddIncoming(k, kin, from, 2);
    LLVMPositionBuilderAtEnd(b, done);
    LLVMBuildRet(b, r);
    LLVMDisposeBuilder(b);
  }
  LLVMValueRef args[2] = {x, y};
  return LLVMBuildCall2(e->b, fty, fn, args, 2, "");
}

/* threefry2x32 (see ir/threefry.c) on u64 key x and counter y: 20 rounds of 32-bit add, rotate
   (funnel shift) and xor, straight-line code the loop vectorizer widens. */
static LLVMValueRef threefry(le *e, LLVMValueRef key, LLVMValueRef count) {
  static const unsigned rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  LLVMBuilderRef b = e->b;
  LLVMTypeRef t = e->i32;
  LLVMValueRef c32 = LLVMConstInt(e->i64, 32, 0);
  LLVMValueRef ks[3] = {LLVMBuildTrunc(b, LLVMBuildLShr(b, key, c32, ""), t, ""),
                        LLVMBuildTrunc(b, key, t, ""), NULL};
  ks[2] = LLVMBuildXor(b, LLVMBuildXor(b, ks[0], ks[1], ""), LLVMConstInt(t, 0x1BD11BDA, 0), "");
  LLVMValueRef x0 = LLVMBuildAdd(b, LLVMBuildTrunc(b, LLVMBuildLShr(b, count, c32, ""), t, ""), ks[0], "");
  LLVMValueRef x1 = LLVMBuildAdd(b, LLVMBuildTrunc(b, count, t, ""), ks[1], "");
  for (unsigned g = 0; g < 5; g++) {
    for (unsigned r = 0; r < 4; r++) {
      x0 = LLVMBuildAdd(b, x0, x1, "");
      LLVMValueRef a[3] = {x1, x1, LLVMConstInt(t, rot[g & 1][r], 0)};
      x1 = LLVMBuildXor(b, intrinsic(e, "llvm.fshl", &t, 1, a, 3), x0, "");
    }
    x0 = LLVMBuildAdd(b, x0, ks[(g + 1) % 3], "");
    x1 = LLVMBuildAdd(b, x1, LLVMBuildAdd(b, ks[(g + 2) % 3], LLVMConstInt(t, g + 1, 0), ""), "");
  }
  LLVMValueRef hi = LLVMBuildShl(b, LLVMBuildZExt(b, x0, e->i64, ""), c32, "");
  return LLVMBuildOr(b, hi, LLVMBuildZExt(b, x1, e->i64, ""), "");
}

static LLVMValueRef ew_int(le *e, const lp_ins *in, LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = e->b;
  jit_dtype d = in->dt;
  LLVMTypeRef t = ctype(e, d);
  bool s = is_signed(d);
  if (d == JIT_BOOL) {
    switch ((ir_op)in->ew) {
    case IR_ADD:
    case IR_MAX: return LLVMBuildOr(b, x, y, "");
    case IR_SUB: return LLVMBuildXor(b, x, y, "");
    case IR_MUL:
    case IR_MIN: return LLVMBuildAnd(b, x, y, "");
    case IR_DIV: return LLVMBuildSelect(b, y, x, LLVMConstInt(e->i1, 1, 0), "");
    case IR_POW: return LLVMBuildOr(b, x, LLVMBuildNot(b, y, ""), "");
    case IR_NOT: return LLVMBuildNot(b, x, "");
    case IR_AND: return LLVMBuildAnd(b, x, y, "");
    case IR_OR: return LLVMBuildOr(b, x, y, "");
    case IR_XOR: return LLVMBuildXor(b, x, y, "");
    default: return x;
    }
  }
  LLVMValueRef zero = LLVMConstInt(t, 0, 0), ones = LLVMConstAllOnes(t);
  LLVMValueRef width = LLVMConstInt(t, LLVMGetIntTypeWidth(t), 0);
  switch ((ir_op)in->ew) {
  case IR_NEG: return LLVMBuildSub(b, LLVMConstInt(t, 0, 0), x, "");
  case IR_ABS: {
    if (!s) return x;
    LLVMValueRef a[2] = {x, LLVMConstInt(e->i1, 0, 0)};
    return intrinsic(e, "llvm.abs", &t, 1, a, 2);
  }
  case IR_FLOOR: return x;
  case IR_ADD: return LLVMBuildAdd(b, x, y, "");
  case IR_SUB: return LLVMBuildSub(b, x, y, "");
  case IR_MUL: return LLVMBuildMul(b, x, y, "");
  case IR_MAX: return intr2(e, s ? "llvm.smax" : "llvm.umax", x, y);
  case IR_MIN: return intr2(e, s ? "llvm.smin" : "llvm.umin", x, y);
  case IR_POW: return ipow(e, d, x, y);
  case IR_SIGN: {
    LLVMValueRef gt = LLVMBuildICmp(b, s ? LLVMIntSGT : LLVMIntNE, x, zero, "");
    LLVMValueRef pos = LLVMBuildZExt(b, gt, t, "");
    if (!s) return pos;
    LLVMValueRef neg = LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntSLT, x, zero, ""), t, "");
    return LLVMBuildSub(b, pos, neg, "");
  }
  case IR_NOT: return LLVMBuildNot(b, x, "");
  case IR_AND: return LLVMBuildAnd(b, x, y, "");
  case IR_OR: return LLVMBuildOr(b, x, y, "");
  case IR_XOR: return LLVMBuildXor(b, x, y, "");
  case IR_THREEFRY: return threefry(e, x, y);
  /* amounts outside [0, width) as XLA: no poison reaches the result (select ignores the arm it
     does not pick) */
  case IR_SHL:
  case IR_SHR_LOGICAL: {
    LLVMValueRef in_range = LLVMBuildICmp(b, LLVMIntULT, y, width, "");
    LLVMValueRef r = in->ew == IR_SHL ? LLVMBuildShl(b, x, y, "") : LLVMBuildLShr(b, x, y, "");
    return LLVMBuildSelect(b, in_range, r, zero, "");
  }
  case IR_SHR_ARITH: {
    LLVMValueRef in_range = LLVMBuildICmp(b, LLVMIntULT, y, width, "");
    LLVMValueRef top = LLVMConstInt(t, LLVMGetIntTypeWidth(t) - 1, 0);
    LLVMValueRef n = LLVMBuildSelect(b, in_range, y, top, "");
    return LLVMBuildAShr(b, x, n, "");
  }
  case IR_REM:
  case IR_DIV: {
    /* No division ever traps: x / 0 = -1 (all ones), INT_MIN / -1 = INT_MIN (= -x);
       x % 0 = x, INT_MIN % -1 = 0. The divisor is 1 where the answer is chosen instead. */
    bool rem = in->ew == IR_REM;
    LLVMValueRef is0 = LLVMBuildICmp(b, LLVMIntEQ, y, zero, "");
    LLVMValueRef ism1 = s ? LLVMBuildICmp(b, LLVMIntEQ, y, ones, "") : LLVMConstInt(e->i1, 0, 0);
    LLVMValueRef safe = LLVMBuildSelect(b, LLVMBuildOr(b, is0, ism1, ""), LLVMConstInt(t, 1, 0), y, "");
    LLVMValueRef q = rem ? (s ? LLVMBuildSRem(b, x, safe, "") : LLVMBuildURem(b, x, safe, ""))
                         : (s ? LLVMBuildSDiv(b, x, safe, "") : LLVMBuildUDiv(b, x, safe, ""));
    if (s) q = LLVMBuildSelect(b, ism1, rem ? zero : LLVMBuildSub(b, zero, x, ""), q, "");
    return LLVMBuildSelect(b, is0, rem ? x : ones, q, "");
  }
  default: e->bad = true; return LLVMGetUndef(t);
  }
}

static LLVMValueRef ew(le *e, const lp_ins *in) {
  LLVMBuilderRef b = e->b;
  LLVMValueRef x = in->a >= 0 ? e->val[in->a] : NULL, y = in->b >= 0 ? e->val[in->b] : NULL;
  switch ((ir_op)in->ew) {
  case IR_SELECT: return LLVMBuildSelect(b, x, y, e->val[in->c], "");
  case IR_CONVERT: return convert(e, in->in_dt, in->dt, x);
  case IR_IS_FINITE: /* |x| < inf is false for inf and NaN */
    return LLVMBuildFCmp(b, LLVMRealOLT, intr1(e, "llvm.fabs", x),
                         LLVMConstReal(LLVMTypeOf(x), __builtin_inf()), "");
  case IR_CLAMP: { /* min(max(x, lo), hi) */
    lp_ins op = *in;
    op.ew = IR_MAX;
    LLVMValueRef m = is_f(in->dt) ? ew_float(e, &op, y, x) : ew_int(e, &op, y, x);
    op.ew = IR_MIN;
    return is_f(in->dt) ? ew_float(e, &op, m, e->val[in->c]) : ew_int(e, &op, m, e->val[in->c]);
  }
  case IR_CMP: {
    if (is_f(in->in_dt)) {
      static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                             LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
      return LLVMBuildFCmp(b, fp[in->cmp % 6], x, y, "");
    }
    static const LLVMIntPredicate sp[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT,
                                          LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
    static const LLVMIntPredicate up[] = {LLVMIntEQ, LLVMIntNE, LLVMIntULT,
                                          LLVMIntULE, LLVMIntUGT, LLVMIntUGE};
    return LLVMBuildICmp(b, (is_signed(in->in_dt) ? sp : up)[in->cmp % 6], x, y, "");
  }
  default: break;
  }
  return is_f(in->dt) ? ew_float(e, in, x, y) : ew_int(e, in, x, y);
}

/* An emitter over module m and builder b, with the types every emission uses. */
static void le_init(le *e, LLVMContextRef c, LLVMModuleRef m, LLVMBuilderRef b) {
  memset(e, 0, sizeof *e);
  e->c = c;
  e->m = m;
  e->b = b;
  e->i1 = LLVMInt1TypeInContext(c);
  e->i8 = LLVMInt8TypeInContext(c);
  e->i16 = LLVMInt16TypeInContext(c);
  e->i32 = LLVMInt32TypeInContext(c);
  e->i64 = LLVMInt64TypeInContext(c);
  e->f32 = LLVMFloatTypeInContext(c);
  e->f64 = LLVMDoubleTypeInContext(c);
  e->half = LLVMHalfTypeInContext(c);
  e->ptr = LLVMPointerTypeInContext(c, 0);
  e->vd = LLVMVoidTypeInContext(c);
}

/* One elementwise op of the loop IR on scalars x, y, z, for code outside a loop kernel (the matmul
   epilogue): the same emission as a kernel's LP_EW. NULL when the op has no compiled form. */
LLVMValueRef lp_emit_ew(LLVMBuilderRef b, LLVMModuleRef m, const lp_ins *in, LLVMValueRef x,
                        LLVMValueRef y, LLVMValueRef z) {
  le e;
  le_init(&e, LLVMGetModuleContext(m), m, b);
  LLVMValueRef vals[3] = {x, y, z};
  lp_ins op = *in;
  op.a = x ? 0 : -1;
  op.b = y ? 1 : -1;
  op.c = z ? 2 : -1;
  e.val = vals;
  LLVMValueRef r = ew(&e, &op);
  return e.bad ? NULL : r;
}

/* Whether instruction id, an f32 or f64 exp, is only ever an operand of adds and subtracts whose
   other operand is a constant of magnitude 2^-40 or more (or inf, or NaN): then its results below
   the normal range never show, and cg_math_emit_exp_summand computes it with fewer ops (W1's
   1 / (1 + exp(-x)), written out as users write the logistic). */
bool lp_exp_only_summed(const lp_func *lf, int32_t id) {
  const lp_ins *x = &lf->ins[id];
  if (x->op != LP_EW || x->ew != IR_EXP || (x->dt != JIT_F32 && x->dt != JIT_F64)) return false;
  bool used = false;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    const lp_ins *in = &lf->ins[i];
    if (in->a != id && in->b != id && in->c != id) continue;
    if (in->op != LP_EW || (in->ew != IR_ADD && in->ew != IR_SUB) || in->dt != x->dt || in->c >= 0)
      return false;
    int32_t other = in->a == id ? in->b : in->a;
    if (other < 0 || other == id) return false;
    const lp_ins *k = &lf->ins[other];
    if (k->op != LP_CONST || k->dt != x->dt || !(fabs(k->imm.f) >= 0x1p-40 || isnan(k->imm.f)))
      return false;
    used = true;
  }
  return used;
}

/* ---- instructions and loops ------------------------------------------------------------------- */

static void emit_block(le *e, int32_t block);

static LLVMValueRef elem_ptr(le *e, jit_dtype d, int32_t buf, LLVMValueRef idx) {
  return LLVMBuildInBoundsGEP2(e->b, stype(e, d), e->buf[buf], &idx, 1, "");
}

/* Float max/min accumulate as integers that order like the floats (NaN above everything for
   max, below for min; -0 < +0): an integer max is associative, so the vectorizer keeps several
   partial results instead of one chain of NaN-checking float maxima per vector. */
static bool int_order(const lp_ins *in) {
  return is_f(in->dt) && in->ew != IR_ADD && in->ew != IR_MUL;
}

static LLVMTypeRef acc_type(le *e, const lp_ins *in) {
  if (!int_order(in)) return ctype(e, in->dt);
  return in->dt == JIT_F64 ? e->i64 : e->i32;
}

static LLVMValueRef to_ordered(le *e, const lp_ins *in, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  bool wide = in->dt == JIT_F64;
  LLVMTypeRef it = wide ? e->i64 : e->i32;
  unsigned bits = wide ? 64 : 32;
  unsigned long long nan = in->ew == IR_MAX ? (wide ? 0x7ff8000000000000ull : 0x7fc00000ull)
                                            : (wide ? 0xfff8000000000000ull : 0xffc00000ull);
  LLVMValueRef u = LLVMBuildBitCast(b, x, it, "");
  u = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), LLVMConstInt(it, nan, 0), u, "");
  LLVMValueRef sign = LLVMBuildAShr(b, u, LLVMConstInt(it, bits - 1, 0), "");
  LLVMValueRef mag = LLVMConstInt(it, wide ? 0x7fffffffffffffffull : 0x7fffffffull, 0);
  return LLVMBuildXor(b, u, LLVMBuildAnd(b, sign, mag, ""), "");
}

static LLVMValueRef from_ordered(le *e, const lp_ins *in, LLVMValueRef t) {
  LLVMBuilderRef b = e->b;
  bool wide = in->dt == JIT_F64;
  LLVMTypeRef it = wide ? e->i64 : e->i32;
  LLVMValueRef sign = LLVMBuildAShr(b, t, LLVMConstInt(it, wide ? 63 : 31, 0), "");
  LLVMValueRef mag = LLVMConstInt(it, wide ? 0x7fffffffffffffffull : 0x7fffffffull, 0);
  LLVMValueRef u = LLVMBuildXor(b, t, LLVMBuildAnd(b, sign, mag, ""), "");
  return LLVMBuildBitCast(b, u, ctype(e, in->dt), "");
}

static LLVMValueRef combine(le *e, const lp_ins *in, LLVMValueRef acc, LLVMValueRef x) {
  LLVMBuilderRef b = e->b;
  jit_dtype d = in->dt;
  if (is_f(d)) {
    if (in->ew == IR_ADD) {
      /* reassociation lets the vectorizer keep partial sums in lanes of several vectors (see
         loop_hints): the order is fixed by the target's vector width, not by the data */
      LLVMValueRef r = LLVMBuildFAdd(b, acc, x, "");
      LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
      return r;
    }
    if (in->ew == IR_MUL) { /* partial products in lanes, as the sums */
      LLVMValueRef r = LLVMBuildFMul(b, acc, x, "");
      LLVMSetFastMathFlags(r, LLVMFastMathAllowReassoc);
      return r;
    }
    return intr2(e, in->ew == IR_MAX ? "llvm.smax" : "llvm.smin", acc, to_ordered(e, in, x));
  }
  if (d == JIT_BOOL)
    return in->ew == IR_MIN ? LLVMBuildAnd(b, acc, x, "") : LLVMBuildOr(b, acc, x, "");
  if (in->ew == IR_ADD) return LLVMBuildAdd(b, acc, x, "");
  if (in->ew == IR_MUL) return LLVMBuildMul(b, acc, x, "");
  bool s = is_signed(d);
  if (in->ew == IR_MAX) return intr2(e, s ? "llvm.smax" : "llvm.umax", acc, x);
  return intr2(e, s ? "llvm.smin" : "llvm.umin", acc, x);
}

/* Loop metadata on a back edge. A vectorized loop gets interleave count 1: the default
   interleaving doubles or quadruples loops whose bodies hold inline polynomials (and the time to
   compile them) for no gain in memory-bound loops; measured on W1-W3, one vector per iteration
   was as fast or faster (folding the tail into masked iterations instead was 2-3x slower). A
   loop that accumulates floats is the exception: with one vector of partial sums it runs at
   the add's latency (3-4 cycles a vector), so it keeps REDUCE_IC vectors of them, enough to
   cover the latency on two add pipes (one Zen 3 core, rows in L2: W3 0.38 -> 0.26 ns per
   element, W2 0.78 -> 0.66; 8 vectors were no faster for W3 and slower for W2); integer max and
   min (LP_QUOT's range checks) take a cycle and keep one. A tail loop is neither
   vectorized nor unrolled. Nor does a loop of fewer than REDUCE_MIN_TRIP iterations known at
   compile time keep several vectors: it has too few elements for them, and LLVM 19 then folds
   the tail into masked lanes whose scalar code it sinks lane by lane, for minutes on a long body
   (a fused threefry summed over rows of 8: tests/regress/randprog_114109.tir). */
#define REDUCE_IC 4
#define REDUCE_MIN_TRIP 64

/* A streamed run (emit_streamed) of a constant 16 or so iterations: left alone, LLVM unrolls it
   whole before the loop vectorizer sees it and the SLP vectorizer puts the copies back together
   into vectors, which for W8's relu kernel was 2.5x the LLVM work of a plain loop. So the run is
   not unrolled until it is vectorized; the vector loop (one or a few iterations) is then
   unrolled whole, into the same straight vector code. */
typedef enum { HINT_MAIN, HINT_TAIL, HINT_RUN } hint_kind;

static LLVMMetadataRef md_str(le *e, const char *s) {
  return LLVMMDStringInContext2(e->c, s, strlen(s));
}

static void loop_hints(le *e, LLVMValueRef latch_br, hint_kind kind, bool reduces) {
  bool tail = kind == HINT_TAIL;
  LLVMMetadataRef tmp = LLVMTemporaryMDNode(e->c, NULL, 0);
  LLVMMetadataRef a[2] = {md_str(e, tail ? "llvm.loop.vectorize.enable" : "llvm.loop.interleave.count"),
                          LLVMValueAsMetadata(tail ? LLVMConstInt(e->i1, 0, 0)
                                                   : LLVMConstInt(e->i32, reduces ? REDUCE_IC : 1, 0))};
  LLVMMetadataRef u = md_str(e, "llvm.loop.unroll.disable");
  LLVMMetadataRef full = md_str(e, "llvm.loop.unroll.full");
  LLVMMetadataRef after[2] = {md_str(e, "llvm.loop.vectorize.followup_vectorized"),
                              LLVMMDNodeInContext2(e->c, &full, 1)};
  LLVMMetadataRef ops[4] = {tmp, LLVMMDNodeInContext2(e->c, a, 2), LLVMMDNodeInContext2(e->c, &u, 1),
                            LLVMMDNodeInContext2(e->c, after, 2)};
  LLVMMetadataRef node = LLVMMDNodeInContext2(e->c, ops, kind == HINT_MAIN ? 2 : kind == HINT_TAIL ? 3 : 4);
  LLVMMetadataReplaceAllUsesWith(tmp, node);
  unsigned md_kind = LLVMGetMDKindIDInContext(e->c, "llvm.loop", 9);
  LLVMSetMetadata(latch_br, md_kind, LLVMMetadataAsValue(e->c, node));
}

/* A counted loop being built: open_loop leaves the builder in its body with i its counter;
   close_loop adds step, branches back (with loop_hints) and leaves the builder after it. */
typedef struct counted_loop {
  LLVMBasicBlockRef pre, head, done;
  LLVMValueRef lo, i;
} counted_loop;

static counted_loop open_loop(le *e, LLVMValueRef lo, LLVMValueRef hi, const char *name) {
  LLVMBuilderRef b = e->b;
  counted_loop l = {.pre = LLVMGetInsertBlock(b), .lo = lo};
  char bn[32];
  snprintf(bn, sizeof bn, "%s.head", name);
  l.head = LLVMAppendBasicBlockInContext(e->c, e->fn, bn);
  snprintf(bn, sizeof bn, "%s.body", name);
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(e->c, e->fn, bn);
  snprintf(bn, sizeof bn, "%s.done", name);
  l.done = LLVMAppendBasicBlockInContext(e->c, e->fn, bn);
  LLVMBuildBr(b, l.head);
  LLVMPositionBuilderAtEnd(b, l.head);
  l.i = LLVMBuildPhi(b, e->i64, name);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, l.i, hi, ""), body, l.done);
  LLVMPositionBuilderAtEnd(b, body);
  return l;
}

static void close_loop(le *e, const counted_loop *l, LLVMValueRef next, hint_kind kind,
                       bool reduces) {
  LLVMBuilderRef b = e->b;
  LLVMBasicBlockRef end = LLVMGetInsertBlock(b);
  loop_hints(e, LLVMBuildBr(b, l->head), kind, reduces);
  LLVMValueRef vals[2] = {l->lo, next};
  LLVMBasicBlockRef from[2] = {l->pre, end};
  LLVMAddIncoming(l->i, vals, from, 2);
  LLVMPositionBuilderAtEnd(b, l->done);
}

/* for (i = lo; i < hi; i++) body */
static void emit_loop(le *e, const lp_ins *in, LLVMValueRef lo, LLVMValueRef hi, hint_kind kind,
                      bool reduces) {
  counted_loop l = open_loop(e, lo, hi, "i");
  e->val[in->b] = l.i;
  emit_block(e, in->body);
  LLVMValueRef next = LLVMBuildNSWAdd(e->b, l.i, LLVMConstInt(e->i64, 1, 0), "");
  if (LLVMIsAConstantInt(lo) && LLVMIsAConstantInt(hi) &&
      LLVMConstIntGetSExtValue(hi) - LLVMConstIntGetSExtValue(lo) < REDUCE_MIN_TRIP)
    reduces = false;
  close_loop(e, &l, next, kind, reduces);
}

/* An innermost loop runs as a main loop over a multiple of 16 iterations, which the vectorizer
   then needs no remainder for, and a scalar tail: one copy of the body fewer than the
   vectorizer's own main + vector epilogue + scalar remainder, for the same speed. */
#define LP_VEC_MULTIPLE 16

#define LP_LINE 64 /* bytes of a cache line */

static void emit_prefetch(le *e, const lp_ins *in, LLVMValueRef first, int locality);
static void emit_ins(le *e, int32_t id);

static bool in_block(const lp_block *bl, int32_t id) {
  for (uint32_t k = 0; k < bl->n; k++)
    if (bl->ins[k] == id) return true;
  return false;
}

/* Emits instruction id of block bl after the operands it has in bl (index arithmetic). */
static void emit_with_operands(le *e, const lp_block *bl, int32_t id) {
  if (id < 0 || !in_block(bl, id)) return;
  const lp_ins *in = &e->lf->ins[id];
  emit_with_operands(e, bl, in->a);
  emit_with_operands(e, bl, in->b);
  emit_with_operands(e, bl, in->c);
  emit_ins(e, id);
}

/* An innermost loop that prefetches (lower_post.c: a loop kernel's inputs) runs in runs of a
   cache line of its narrowest element (16 iterations of f32): the run's prefetches, one per
   cache line of its elements, then the run as a loop of that constant trip, which the
   vectorizer makes straight vector code at full width. A prefetch left in the loop would keep
   it scalar (the vectorizer has no vector prefetch). */
static void emit_streamed(le *e, const lp_ins *in, LLVMValueRef trip) {
  LLVMBuilderRef b = e->b;
  const lp_block *bl = &e->lf->blocks[in->body];
  int64_t narrowest = 8;
  for (uint32_t k = 0; k < bl->n; k++) {
    const lp_ins *x = &e->lf->ins[bl->ins[k]];
    int64_t es = (int64_t)jit_dtype_size(x->dt);
    if ((x->op == LP_LOAD || x->op == LP_STORE) && es >= 1 && es < narrowest) narrowest = es;
  }
  int64_t n_run = LP_LINE / narrowest;
  LLVMValueRef run = LLVMConstInt(e->i64, (unsigned long long)n_run, 0);
  LLVMValueRef main = LLVMBuildAnd(b, trip, LLVMConstInt(e->i64, ~(uint64_t)(n_run - 1), 1), "");
  counted_loop runs = open_loop(e, LLVMConstInt(e->i64, 0, 0), main, "run");
  LLVMValueRef i = runs.i;
  e->val[in->b] = i;
  for (uint32_t k = 0; k < bl->n && !e->bad; k++) {
    lp_ins pf = e->lf->ins[bl->ins[k]];
    if (pf.op != LP_PREFETCH) continue;
    emit_with_operands(e, bl, pf.a);
    pf.imm.i = n_run;
    emit_prefetch(e, &pf, e->val[pf.a], 3);
  }
  e->in_stream = true; /* an innermost loop: no streamed loop inside */
  LLVMValueRef next = LLVMBuildNSWAdd(b, i, run, "");
  emit_loop(e, in, i, next, HINT_RUN, false);
  close_loop(e, &runs, next, HINT_TAIL, false); /* the runs themselves: not vectorized */
  emit_loop(e, in, main, trip, HINT_TAIL, false);
  e->in_stream = false;
}

static void emit_for(le *e, const lp_ins *in) {
  const lp_block *bl = &e->lf->blocks[in->body];
  bool innermost = true, reduces = false, prefetches = false;
  for (uint32_t k = 0; k < bl->n; k++) {
    innermost &= e->lf->ins[bl->ins[k]].op != LP_FOR;
    /* float accumulators, bound by the add's latency; LP_QUOT's integer max/min are not */
    reduces |= e->lf->ins[bl->ins[k]].op == LP_ACC_ADD && is_f(e->lf->ins[bl->ins[k]].dt);
    prefetches |= e->lf->ins[bl->ins[k]].op == LP_PREFETCH;
  }
  LLVMValueRef zero = LLVMConstInt(e->i64, 0, 0), trip = e->val[in->a];
  if (innermost && prefetches && in->imm.i != 1) {
    emit_streamed(e, in, trip);
    return;
  }
  if (in->imm.i == 1) { /* seldom run: one scalar loop, as a tail */
    emit_loop(e, in, zero, trip, HINT_TAIL, false);
    return;
  }
  if (!innermost || LLVMIsConstant(trip)) {
    emit_loop(e, in, zero, trip, HINT_MAIN, innermost && reduces);
    return;
  }
  LLVMValueRef main = LLVMBuildAnd(e->b, trip, LLVMConstInt(e->i64, ~(uint64_t)(LP_VEC_MULTIPLE - 1), 1), "");
  emit_loop(e, in, zero, main, HINT_MAIN, reduces);
  emit_loop(e, in, main, trip, HINT_TAIL, false);
}

/* One llvm.prefetch (read, data) per cache line; a plain GEP, since the address may lie past the
   buffer. Locality 3 (prefetcht0, into L1) for what the loop reads a few iterations later; 2
   (prefetcht1, into L2) for a row prefetched whole: 64 lines at once into L1 would hold the
   fill buffers the loop's own misses need (W2 on one core 0.69-0.72 -> 0.61-0.68 ns an element
   with prefetcht1, two cores 0.33-0.38 -> 0.29-0.34). */

static void emit_prefetch(le *e, const lp_ins *in, LLVMValueRef first, int locality) {
  LLVMBuilderRef b = e->b;
  LLVMTypeRef ptr = e->ptr;
  int64_t es = (int64_t)jit_dtype_size(in->dt);
  LLVMValueRef at = LLVMBuildMul(b, first, LLVMConstInt(e->i64, (unsigned long long)es, 0), "");
  LLVMValueRef base = LLVMBuildGEP2(b, e->i8, e->buf[in->buf], &at, 1, "");
  for (int64_t off = 0; off < in->imm.i * es; off += LP_LINE) {
    LLVMValueRef o = LLVMConstInt(e->i64, (unsigned long long)off, 0);
    LLVMValueRef args[4] = {LLVMBuildGEP2(b, e->i8, base, &o, 1, ""), LLVMConstInt(e->i32, 0, 0),
                            LLVMConstInt(e->i32, (unsigned long long)locality, 0),
                            LLVMConstInt(e->i32, 1, 0)};
    intrinsic(e, "llvm.prefetch", &ptr, 1, args, 4);
  }
}

/* LP_QUOT (see kernel.h). */
static LLVMValueRef quot(le *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMBuilderRef bl = e->b;
  LLVMValueRef q = LLVMBuildFMul(bl, a, c, "");
  LLVMValueRef r = intr3(e, "llvm.fma", LLVMBuildFNeg(bl, q, ""), b, a);
  return intr2(e, "llvm.copysign", intr3(e, "llvm.fma", r, c, q), q);
}

/* In a row nest, the row index divided by a multiple c of W (the outer index divided by c / W)
   or its remainder by W (the inner index); NULL for any other division. */
static LLVMValueRef row_quotient(le *e, const lp_ins *in) {
  const lp_func *lf = e->lf;
  if (!e->row_s || lf->ins[in->a].op != LP_ROW || lf->ins[in->b].op != LP_CONST) return NULL;
  int64_t c = lf->ins[in->b].imm.i, W = lf->row_inner;
  if (in->op == LP_IREM) return c == W ? e->row_w : NULL;
  if (c <= 0 || c % W) return NULL;
  if (c == W) return e->row_s;
  return LLVMBuildUDiv(e->b, e->row_s, LLVMConstInt(e->i64, (unsigned long long)(c / W), 0), "");
}

static void emit_ins(le *e, int32_t id) {
  const lp_ins *in = &e->lf->ins[id];
  LLVMBuilderRef b = e->b;
  LLVMValueRef x = in->a >= 0 ? e->val[in->a] : NULL, y = in->b >= 0 ? e->val[in->b] : NULL;
  LLVMValueRef r = NULL;
  jit_dtype d = in->dt;
  switch ((lp_op)in->op) {
  case LP_CONST:
    r = is_f(d) ? LLVMConstReal(ctype(e, d), in->imm.f)
                : LLVMConstInt(ctype(e, d), (unsigned long long)in->imm.i, 1);
    break;
  case LP_ROW:
  case LP_VAR: return; /* set by the loops */
  case LP_IADD: r = LLVMBuildNSWAdd(b, x, y, ""); break;
  case LP_ISUB: r = LLVMBuildNSWSub(b, x, y, ""); break;
  case LP_IMUL: r = LLVMBuildNSWMul(b, x, y, ""); break;
  case LP_IDIV:
  case LP_IREM:
    r = row_quotient(e, in);
    /* operands are >= 0 (kernel.h): unsigned, which needs no sign fix-up after the multiply
       LLVM divides constants by */
    if (!r) r = in->op == LP_IDIV ? LLVMBuildUDiv(b, x, y, "") : LLVMBuildURem(b, x, y, "");
    break;
  case LP_IMIN: r = intr2(e, "llvm.smin", x, y); break;
  case LP_IMAX: r = intr2(e, "llvm.smax", x, y); break;
  case LP_ILT: r = LLVMBuildICmp(b, LLVMIntSLT, x, y, ""); break;
  case LP_LOAD: {
    LLVMValueRef p = elem_ptr(e, d, in->buf, x);
    r = LLVMBuildLoad2(b, stype(e, d), p, "");
    LLVMSetAlignment(r, (unsigned)jit_dtype_size(d));
    if (d == JIT_F16) r = LLVMBuildFPExt(b, r, e->f32, "");
    else if (d == JIT_BF16) r = bf16_to_f32(e, r);
    else if (d == JIT_BOOL) r = LLVMBuildICmp(b, LLVMIntNE, r, LLVMConstInt(e->i8, 0, 0), "");
    break;
  }
  case LP_STORE: {
    LLVMValueRef v = y;
    if (d == JIT_F16) v = LLVMBuildFPTrunc(b, v, e->half, "");
    else if (d == JIT_BF16) v = bf16_bits(e, v);
    else if (d == JIT_BOOL) v = LLVMBuildZExt(b, v, e->i8, "");
    LLVMValueRef s = LLVMBuildStore(b, v, elem_ptr(e, d, in->buf, x));
    LLVMSetAlignment(s, (unsigned)jit_dtype_size(d));
    return;
  }
  case LP_EW:
    r = lp_exp_only_summed(e->lf, id) ? cg_math_emit_exp_summand(b, x) : ew(e, in);
    if (!r) {
      e->bad = true;
      r = LLVMGetUndef(ctype(e, d));
    }
    break;
  case LP_ACC: {
    /* an alloca in the entry block: mem2reg makes it the loop's reduction phi */
    LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
    LLVMValueRef first = LLVMGetFirstInstruction(e->alloca_bb);
    if (first) LLVMPositionBuilderBefore(b, first);
    else LLVMPositionBuilderAtEnd(b, e->alloca_bb);
    e->slot[id] = LLVMBuildAlloca(b, acc_type(e, in), "acc");
    LLVMPositionBuilderAtEnd(b, here);
    LLVMBuildStore(b, int_order(in) ? to_ordered(e, in, x) : x, e->slot[id]);
    return;
  }
  case LP_ACC_ADD: {
    LLVMValueRef cur = LLVMBuildLoad2(b, acc_type(e, in), e->slot[in->a], "");
    LLVMBuildStore(b, combine(e, in, cur, y), e->slot[in->a]);
    return;
  }
  case LP_ACC_GET: {
    const lp_ins *acc = &e->lf->ins[in->a];
    r = LLVMBuildLoad2(b, acc_type(e, acc), e->slot[in->a], "");
    if (int_order(acc)) r = from_ordered(e, acc, r);
    r = round_to(e, d, r);
    break;
  }
  case LP_FOR: emit_for(e, in); return;
  case LP_PREFETCH:
    if (!e->in_stream) emit_prefetch(e, in, x, 2);
    return;
  case LP_QUOT: r = round_to(e, d, quot(e, x, y, e->val[in->c])); break;
  case LP_MAG_BITS: {
    bool wide = in->in_dt == JIT_F64;
    LLVMTypeRef it = wide ? e->i64 : e->i32;
    r = LLVMBuildBitCast(b, x, it, "");
    /* a unit operand's sign is clear but for a NaN's, which the quotient keeps anyway */
    if (in->range != LP_RANGE_UNIT) {
      unsigned long long mask = wide ? 0x7fffffffffffffffull : 0x7fffffffull;
      r = LLVMBuildAnd(b, r, LLVMConstInt(it, mask, 0), "");
    }
    break;
  }
  default: e->bad = true; return;
  }
  e->val[id] = r;
}

static void emit_block(le *e, int32_t block) {
  const lp_block *bl = &e->lf->blocks[block];
  for (uint32_t i = 0; i < bl->n && !e->bad; i++) emit_ins(e, bl->ins[i]);
}

static void set_row(le *e, LLVMValueRef r) {
  for (uint32_t i = 0; i < e->lf->n_ins; i++)
    if (e->lf->ins[i].op == LP_ROW) e->val[i] = r;
}

/* The row block for rows [rb, re) as one loop; the builder is left in no block. */
static void emit_row_loop(le *e, LLVMValueRef rb, LLVMValueRef re, LLVMBasicBlockRef exit) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(e->b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(e->c, e->fn, "row.head");
  LLVMBasicBlockRef rbody = LLVMAppendBasicBlockInContext(e->c, e->fn, "row.body");
  LLVMBuildBr(e->b, head);
  LLVMPositionBuilderAtEnd(e->b, head);
  LLVMValueRef r = LLVMBuildPhi(e->b, e->i64, "r");
  LLVMBuildCondBr(e->b, LLVMBuildICmp(e->b, LLVMIntSLT, r, re, ""), rbody, exit);
  LLVMPositionBuilderAtEnd(e->b, rbody);
  set_row(e, r);
  emit_block(e, e->lf->row);
  LLVMValueRef next = LLVMBuildNSWAdd(e->b, r, LLVMConstInt(e->i64, 1, 0), "");
  LLVMBasicBlockRef end = LLVMGetInsertBlock(e->b);
  LLVMBuildBr(e->b, head);
  LLVMValueRef in_v[2] = {rb, next};
  LLVMBasicBlockRef in_b[2] = {pre, end};
  LLVMAddIncoming(r, in_v, in_b, 2);
}

/* Whether the row loop is a nest: the row dims' index math divides the row index by W (the
   innermost row dim's extent, lower.c) and W is worth an inner loop. */
static bool row_nest(const lp_func *lf) {
  if (lf->row_inner < ROW_NEST_MIN || lf->row_work > ROW_NEST_MAX_WORK) return false;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    const lp_ins *in = &lf->ins[i];
    if ((in->op == LP_IDIV || in->op == LP_IREM) && lf->ins[in->a].op == LP_ROW &&
        lf->ins[in->b].op == LP_CONST && lf->ins[in->b].imm.i % lf->row_inner == 0)
      return true;
  }
  return false;
}

/* The row block for rows [rb, re) as a nest over s (rows s W .. s W + W - 1) and w, the first
   and last s clipped to the range: what depends on s only LLVM hoists out of the w loop, and
   what is affine in w it strength-reduces. Neither loop is vectorized or unrolled. */
static void emit_row_nest(le *e, LLVMValueRef rb, LLVMValueRef re) {
  LLVMBuilderRef b = e->b;
  int64_t W = e->lf->row_inner;
  LLVMValueRef w_ext = LLVMConstInt(e->i64, (unsigned long long)W, 0);
  LLVMValueRef one = LLVMConstInt(e->i64, 1, 0), zero = LLVMConstInt(e->i64, 0, 0);
  /* rows are >= 0: s runs over [rb / W, ceil(re / W)) */
  LLVMValueRef w_less = LLVMConstInt(e->i64, (unsigned long long)(W - 1), 0);
  LLVMValueRef s_end = LLVMBuildUDiv(b, LLVMBuildNSWAdd(b, re, w_less, ""), w_ext, "");
  counted_loop rows = open_loop(e, LLVMBuildUDiv(b, rb, w_ext, ""), s_end, "rows");
  LLVMValueRef base = LLVMBuildNSWMul(b, rows.i, w_ext, "");
  LLVMValueRef wlo = intr2(e, "llvm.smax", LLVMBuildNSWSub(b, rb, base, ""), zero);
  LLVMValueRef whi = intr2(e, "llvm.smin", LLVMBuildNSWSub(b, re, base, ""), w_ext);
  counted_loop row = open_loop(e, wlo, whi, "row");
  e->row_s = rows.i;
  e->row_w = row.i;
  set_row(e, LLVMBuildNSWAdd(b, base, row.i, ""));
  emit_block(e, e->lf->row);
  e->row_s = e->row_w = NULL;
  close_loop(e, &row, LLVMBuildNSWAdd(b, row.i, one, ""), HINT_TAIL, false);
  close_loop(e, &rows, LLVMBuildNSWAdd(b, rows.i, one, ""), HINT_TAIL, false);
}

static jit_status emit_kernel(le *e, const lp_func *lf) {
  LLVMContextRef c = e->c;
  jit_status st = JIT_OK;
  e->lf = lf;
  e->bad = false;
  uint32_t nb = lf->n_bufs;
  LLVMTypeRef *params = malloc((nb + 2) * sizeof *params);
  e->val = calloc(lf->n_ins ? lf->n_ins : 1, sizeof *e->val);
  e->slot = calloc(lf->n_ins ? lf->n_ins : 1, sizeof *e->slot);
  e->buf = malloc((nb + lf->n_scratch + 1) * sizeof *e->buf);
  if (!params || !e->val || !e->slot || !e->buf) {
    st = jit_error(JIT_ENOMEM, "codegen: out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < nb; i++) params[i] = e->ptr;
  params[nb] = params[nb + 1] = e->i64;

  /* the body: noalias buffers, always inlined into the entry */
  char name[48];
  snprintf(name, sizeof name, "%s.body", lf->name);
  LLVMTypeRef bty = LLVMFunctionType(e->vd, params, nb + 2, 0);
  LLVMValueRef body = LLVMAddFunction(e->m, name, bty);
  LLVMSetLinkage(body, LLVMInternalLinkage);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  unsigned inl = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  LLVMAddAttributeAtIndex(body, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c, inl, 0));
  cg_set_nounwind(body);
  for (uint32_t i = 0; i < nb; i++) {
    LLVMAddAttributeAtIndex(body, i + 1, LLVMCreateEnumAttribute(c, noalias, 0));
    e->buf[i] = LLVMGetParam(body, i);
  }
  e->fn = body;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c, body, "entry");
  e->alloca_bb = entry;
  LLVMPositionBuilderAtEnd(e->b, entry);
  for (uint32_t s = 0; s < lf->n_scratch; s++) {
    LLVMTypeRef at = LLVMArrayType2(stype(e, lf->scratch_dt[s]), (uint64_t)lf->scratch_len[s]);
    e->buf[nb + s] = LLVMBuildAlloca(e->b, at, "row.scratch");
    LLVMSetAlignment(e->buf[nb + s], 64);
  }
  emit_block(e, lf->entry);

  LLVMValueRef rb = LLVMGetParam(body, nb), re = LLVMGetParam(body, nb + 1);
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c, body, "exit");
  if (row_nest(lf)) {
    emit_row_nest(e, rb, re);
    LLVMBuildBr(e->b, exit);
  } else {
    emit_row_loop(e, rb, re, exit);
  }
  LLVMPositionBuilderAtEnd(e->b, exit);
  LLVMBuildRetVoid(e->b);
  if (e->bad) {
    st = jit_error(JIT_EUNSUPPORTED, "codegen: %s: an op with no LLVM form", lf->name);
    goto done;
  }

  /* the entry: void NAME(void *const *bufs, int64_t row_begin, int64_t row_end), whose stores
     codegen/stream.c may make streaming after O3 when lf->stream_mask (the runtime then hands
     it aligned buffers) */
  LLVMValueRef *vargs = malloc((nb + 2) * sizeof *vargs);
  if (!vargs) {
    st = jit_error(JIT_ENOMEM, "codegen: out of memory");
    goto done;
  }
  {
    LLVMTypeRef eparams[3] = {e->ptr, e->i64, e->i64};
    LLVMValueRef fn = LLVMAddFunction(e->m, lf->name, LLVMFunctionType(e->vd, eparams, 3, 0));
    cg_set_nounwind(fn);
    LLVMPositionBuilderAtEnd(e->b, LLVMAppendBasicBlockInContext(c, fn, "entry"));
    for (uint32_t i = 0; i < nb; i++) {
      LLVMValueRef idx = LLVMConstInt(e->i64, i, 0);
      LLVMValueRef p = LLVMBuildInBoundsGEP2(e->b, e->ptr, LLVMGetParam(fn, 0), &idx, 1, "");
      vargs[i] = LLVMBuildLoad2(e->b, e->ptr, p, "");
    }
    vargs[nb] = LLVMGetParam(fn, 1);
    vargs[nb + 1] = LLVMGetParam(fn, 2);
    LLVMBuildCall2(e->b, bty, body, vargs, nb + 2, "");
    LLVMBuildRetVoid(e->b);
  }
  free(vargs);
done:
  free(params);
  free(e->val);
  free(e->slot);
  free(e->buf);
  e->val = e->slot = e->buf = NULL;
  return st;
}

jit_status lp_emit_llvm(lp_func *const *fns, uint32_t n, struct LLVMOpaqueContext *c,
                        const char *module_name, struct LLVMOpaqueModule **out) {
  jit_status st = JIT_OK;
  le e;
  le_init(&e, c, LLVMModuleCreateWithNameInContext(module_name, c), LLVMCreateBuilderInContext(c));
  for (uint32_t i = 0; i < n && st == JIT_OK; i++)
    if (fns[i]) st = emit_kernel(&e, fns[i]);
  LLVMDisposeBuilder(e.b);
  if (st != JIT_OK) {
    LLVMDisposeModule(e.m);
    *out = NULL;
    return st;
  }
  *out = e.m;
  return JIT_OK;
}
