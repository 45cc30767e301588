/* test_llvm_math.c: the inline exp/log/tanh/logistic/erf/sin/cos/log1p/expm1/erf_inv/atan2,
 * JITed as vectorized loops and compared with libm over a dense sweep of f32 bit patterns (and
 * f64 samples; pairs for atan2) plus edge values. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* See test_llvm_jit.c: this test needs LLVM's include directory on its path. */
#if defined(__has_include)
#if __has_include(<llvm-c/Core.h>)
#define HAVE_LLVM_HEADERS 1
#endif
#endif

#ifdef HAVE_LLVM_HEADERS
#include "codegen/llvm_jit.h"
#include "codegen/llvm_math.h"
#include "support/target_gate.h"

/* The bounds documented in docs/MATH.md, in ulp, on each function's documented range. */
static const double BOUND32[CG_MATH_COUNT] = {
    [CG_MATH_EXP] = 1,   [CG_MATH_LOG] = 1, [CG_MATH_TANH] = 1.5, [CG_MATH_LOGISTIC] = 2.5,
    [CG_MATH_ERF] = 1.5, [CG_MATH_SIN] = 2, [CG_MATH_COS] = 2,    [CG_MATH_LOG1P] = 2,
    [CG_MATH_EXPM1] = 2, [CG_MATH_ERF_INV] = 4, [CG_MATH_ATAN2] = 2.5};
static const double BOUND64[CG_MATH_COUNT] = {
    [CG_MATH_EXP] = 1.5, [CG_MATH_LOG] = 1.5, [CG_MATH_TANH] = 3, [CG_MATH_LOGISTIC] = 3,
    [CG_MATH_ERF] = 1.5, [CG_MATH_SIN] = 2,   [CG_MATH_COS] = 2,  [CG_MATH_LOG1P] = 2,
    [CG_MATH_EXPM1] = 2, [CG_MATH_ERF_INV] = 4.5, [CG_MATH_ATAN2] = 2.5};
/* sin/cos keep their bound for |x| below this; beyond, results are only finite and in [-1,1]
   (f32: <= 2.5 ulp up to 2^24, measured, not asserted). */
#define TRIG32_RANGE 1048576.0 /* 2^20 */
#define TRIG64_RANGE 1e15

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- JIT: one module per dtype with one map function per op ---------------------------- */

typedef void (*map32_fn)(float *, const float *, int64_t);
typedef void (*map64_fn)(double *, const double *, int64_t);
/* the binary function (atan2): y[i] = op(a[i], b[i]) */
typedef void (*zip32_fn)(float *, const float *, const float *, int64_t);
typedef void (*zip64_fn)(double *, const double *, const double *, int64_t);

typedef struct {
  cg_jit *jit;
  cg_dylib *lib;
  void *fn[2][CG_MATH_COUNT]; /* [f64][op] */
  void *vec5;                 /* exp on a <5 x float> operand, no loop */
  void *summand[2];           /* cg_math_emit_exp_summand's map, [f64] */
  void *nonpos[2];            /* cg_math_emit_exp_nonpos's map, [f64] */
  double ms_build, ms_opt, ms_emit, ms_load;
  size_t obj_len;
} jitted;

static jitted J;

static void add_noalias(LLVMContextRef c, LLVMValueRef fn, unsigned param) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateEnumAttribute(c, kind, 0));
}

/* Which emitter a map of exp calls. */
typedef enum { EXP_PLAIN, EXP_SUMMAND, EXP_NONPOS } exp_variant;

/* void NAME(T *restrict y, const T *restrict x, int64_t n): y[i] = op(x[i]); for the binary
   atan2, void NAME(T *restrict y, const T *restrict a, const T *restrict b, int64_t n). */
static void build_map(LLVMModuleRef m, LLVMContextRef c, const char *name, cg_math_fn op,
                      exp_variant variant, LLVMTypeRef t) {
  LLVMTypeRef i64 = LLVMInt64TypeInContext(c), ptr = LLVMPointerTypeInContext(c, 0);
  unsigned nin = op == CG_MATH_ATAN2 ? 2 : 1;
  LLVMTypeRef params[4] = {ptr, ptr, ptr, i64};
  params[nin + 1] = i64;
  LLVMValueRef fn =
      LLVMAddFunction(m, name, LLVMFunctionType(LLVMVoidTypeInContext(c), params, nin + 2, 0));
  for (unsigned k = 0; k <= nin; k++) add_noalias(c, fn, k);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c, fn, "entry");
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(c, fn, "loop");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c, fn, "done");
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef zero = LLVMConstInt(i64, 0, 0), n = LLVMGetParam(fn, nin + 1);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, n, zero, ""), loop, done);
  LLVMPositionBuilderAtEnd(b, loop);
  LLVMValueRef i = LLVMBuildPhi(b, i64, "i");
  LLVMValueRef xi = LLVMBuildLoad2(b, t, LLVMBuildGEP2(b, t, LLVMGetParam(fn, 1), &i, 1, ""), "");
  LLVMValueRef yi;
  if (nin == 2) {
    LLVMValueRef xb = LLVMBuildLoad2(b, t, LLVMBuildGEP2(b, t, LLVMGetParam(fn, 2), &i, 1, ""), "");
    yi = cg_math_emit2(b, op, xi, xb);
  } else {
    yi = variant == EXP_SUMMAND  ? cg_math_emit_exp_summand(b, xi)
         : variant == EXP_NONPOS ? cg_math_emit_exp_nonpos(b, xi)
                                 : cg_math_emit(b, op, xi);
  }
  assert_non_null(yi);
  LLVMBuildStore(b, yi, LLVMBuildGEP2(b, t, LLVMGetParam(fn, 0), &i, 1, ""));
  LLVMValueRef inext = LLVMBuildAdd(b, i, LLVMConstInt(i64, 1, 0), "");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, inext, n, ""), loop, done);
  LLVMValueRef vals[2] = {zero, inext};
  LLVMBasicBlockRef blocks[2] = {entry, loop};
  LLVMAddIncoming(i, vals, blocks, 2);
  LLVMPositionBuilderAtEnd(b, done);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
}

/* void vec5(float *y, const float *x): *(<5 x float>*)y = exp(*(<5 x float>*)x), an odd width
   given to cg_math_emit directly. */
static void build_vec5(LLVMModuleRef m, LLVMContextRef c) {
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0);
  LLVMTypeRef v5 = LLVMVectorType(LLVMFloatTypeInContext(c), 5);
  LLVMTypeRef params[2] = {ptr, ptr};
  LLVMValueRef fn =
      LLVMAddFunction(m, "vec5", LLVMFunctionType(LLVMVoidTypeInContext(c), params, 2, 0));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, fn, "entry"));
  LLVMValueRef x = LLVMBuildLoad2(b, v5, LLVMGetParam(fn, 1), "");
  LLVMSetAlignment(x, 4);
  LLVMValueRef st = LLVMBuildStore(b, cg_math_emit(b, CG_MATH_EXP, x), LLVMGetParam(fn, 0));
  LLVMSetAlignment(st, 4);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
}

/* Whether the function text calls anything but an LLVM intrinsic (llvm.fma, ...) or uses
   llvm.exp/llvm.log, which lower to libm calls. */
static int calls_function(const char *text) {
  for (const char *p = strstr(text, "call "); p; p = strstr(p + 1, "call ")) {
    const char *at = strchr(p, '@');
    if (at && strncmp(at, "@llvm.", 6) != 0) return 1;
  }
  return strstr(text, "@llvm.exp") || strstr(text, "@llvm.log") || strstr(text, "@llvm.sin") ||
         strstr(text, "@llvm.cos");
}

static int setup(void **state) {
  (void)state;
  memset(&J, 0, sizeof J);
  if (cg_jit_create(3, &J.jit) != JIT_OK) return -1;
  double t0 = now_ms();
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("math", c);
  char name[64];
  for (int d = 0; d < 2; d++)
    for (int op = 0; op < CG_MATH_COUNT; op++) {
      snprintf(name, sizeof name, "%s_f%d", cg_math_name(op), d ? 64 : 32);
      build_map(m, c, name, op, EXP_PLAIN,
                d ? LLVMDoubleTypeInContext(c) : LLVMFloatTypeInContext(c));
    }
  build_map(m, c, "exp_summand_f32", CG_MATH_EXP, EXP_SUMMAND, LLVMFloatTypeInContext(c));
  build_map(m, c, "exp_summand_f64", CG_MATH_EXP, EXP_SUMMAND, LLVMDoubleTypeInContext(c));
  build_map(m, c, "exp_nonpos_f32", CG_MATH_EXP, EXP_NONPOS, LLVMFloatTypeInContext(c));
  build_map(m, c, "exp_nonpos_f64", CG_MATH_EXP, EXP_NONPOS, LLVMDoubleTypeInContext(c));
  build_vec5(m, c);
  double t1 = now_ms();
  int ok = cg_optimize(J.jit, m) == JIT_OK;
  double t2 = now_ms();
  /* Every loop must vectorize at the target's full width (f64 erf calls libm: not that one). */
  char want32[32], want64[32];
  int vb = cg_jit_target(J.jit)->vector_bytes;
  snprintf(want32, sizeof want32, "<%d x float>", vb / 4);
  snprintf(want64, sizeof want64, "<%d x double>", vb / 8);
  for (int d = 0; d < 2 && ok; d++)
    for (int op = 0; op < CG_MATH_COUNT && ok; op++) {
      if (d && op == CG_MATH_ERF) continue;
      snprintf(name, sizeof name, "%s_f%d", cg_math_name(op), d ? 64 : 32);
      char *text = LLVMPrintValueToString(LLVMGetNamedFunction(m, name));
      if (!strstr(text, d ? want64 : want32)) {
        fprintf(stderr, "%s is not vectorized to %s\n", name, d ? want64 : want32);
        ok = 0;
      }
      if (calls_function(text)) {
        fprintf(stderr, "%s calls a function\n", name);
        ok = 0;
      }
      LLVMDisposeMessage(text);
    }
  void *obj = NULL;
  if (ok) ok = cg_emit_object(J.jit, m, &obj, &J.obj_len) == JIT_OK;
  double t3 = now_ms();
  if (ok) ok = cg_add_object(J.jit, obj, J.obj_len, &J.lib) == JIT_OK;
  for (int d = 0; d < 2 && ok; d++)
    for (int op = 0; op < CG_MATH_COUNT && ok; op++) {
      snprintf(name, sizeof name, "%s_f%d", cg_math_name(op), d ? 64 : 32);
      ok = cg_lookup(J.lib, name, &J.fn[d][op]) == JIT_OK;
    }
  if (ok) ok = cg_lookup(J.lib, "vec5", &J.vec5) == JIT_OK;
  if (ok) ok = cg_lookup(J.lib, "exp_summand_f32", &J.summand[0]) == JIT_OK;
  if (ok) ok = cg_lookup(J.lib, "exp_summand_f64", &J.summand[1]) == JIT_OK;
  if (ok) ok = cg_lookup(J.lib, "exp_nonpos_f32", &J.nonpos[0]) == JIT_OK;
  if (ok) ok = cg_lookup(J.lib, "exp_nonpos_f64", &J.nonpos[1]) == JIT_OK;
  double t4 = now_ms();
  free(obj);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  J.ms_build = t1 - t0, J.ms_opt = t2 - t1, J.ms_emit = t3 - t2, J.ms_load = t4 - t3;
  if (!ok) fprintf(stderr, "setup failed: %s\n", jit_last_error());
  return ok ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  cg_dylib_free(J.lib);
  cg_jit_destroy(J.jit);
  return 0;
}

/* ---- exact products --------------------------------------------------------------------- */

static int count_calls(const char *text, const char *callee) {
  int n = 0;
  for (const char *q = strstr(text, callee); q; q = strstr(q + 1, callee)) n++;
  return n;
}

/* Which multiply-adds must be exact (llvm.fma: a Dekker product on targets without FMA) and which
   may round twice (llvm.fmuladd: a multiply and an add there), per function: the reduction steps
   and the few final steps docs/MATH.md lists. One exact product too many costs a target without
   FMA ~25 operations per element; one too few, the bound (the sweep under TJIT_CPU=x86-64-v2). */
static void test_exact_products(void **state) {
  (void)state;
  static const int exact[2][CG_MATH_COUNT] = {
      {[CG_MATH_EXP] = 2, [CG_MATH_LOG] = 1, [CG_MATH_TANH] = 2, [CG_MATH_LOGISTIC] = 2,
       [CG_MATH_ERF] = 3, [CG_MATH_SIN] = 3, [CG_MATH_COS] = 3, [CG_MATH_LOG1P] = 1,
       [CG_MATH_EXPM1] = 1, [CG_MATH_ERF_INV] = 1, [CG_MATH_ATAN2] = 1},
      {[CG_MATH_EXP] = 2, [CG_MATH_LOG] = 1, [CG_MATH_TANH] = 2, [CG_MATH_LOGISTIC] = 2,
       [CG_MATH_ERF] = 0, [CG_MATH_SIN] = 3, [CG_MATH_COS] = 3, [CG_MATH_LOG1P] = 1,
       [CG_MATH_EXPM1] = 1, [CG_MATH_ERF_INV] = 1, [CG_MATH_ATAN2] = 1}};
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("exact", c);
  int failed = 0;
  for (int d = 0; d < 2; d++)
    for (int op = 0; op <= CG_MATH_COUNT + 1; op++) { /* past the last: exp's two variants */
      exp_variant variant = op == CG_MATH_COUNT       ? EXP_SUMMAND
                            : op == CG_MATH_COUNT + 1 ? EXP_NONPOS
                                                      : EXP_PLAIN;
      char name[64];
      snprintf(name, sizeof name, "%s_f%d",
               variant == EXP_SUMMAND  ? "exp_summand"
               : variant == EXP_NONPOS ? "exp_nonpos"
                                       : cg_math_name(op),
               d ? 64 : 32);
      build_map(m, c, name, variant ? CG_MATH_EXP : (cg_math_fn)op, variant,
                d ? LLVMDoubleTypeInContext(c) : LLVMFloatTypeInContext(c));
      char *text = LLVMPrintValueToString(LLVMGetNamedFunction(m, name));
      int fma = count_calls(text, "@llvm.fma."), mad = count_calls(text, "@llvm.fmuladd.");
      int want = variant ? 2 : exact[d][op];
      if (fma != want || (mad == 0 && !(d && op == CG_MATH_ERF))) {
        print_error("%s: %d exact multiply-adds (want %d), %d that may round twice\n", name, fma,
                    want, mad);
        failed++;
      }
      LLVMDisposeMessage(text);
    }
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  assert_int_equal(failed, 0);
}

/* ---- references and ulp ------------------------------------------------------------------ */

/* erf^-1 as a reference, in T: 28 bisection steps on [0, 6] (erf_inv(1 - 2^-53) = 5.86) to
   about 2e-8, then Newton on erf (on erfc = 1 - abs(y) from 1/2 on, where that difference is
   exact and erf is flat), which converges quadratically from there (six steps: for tiny y the
   bisection's x is far larger than the answer, and each step only cubes the excess). */
#define ERF_INV_REF(NAME, T, ERF, ERFC, EXP, FABS, COPYSIGN)                                      \
  static T NAME(T y) {                                                                           \
    if (isnan(y) || y == 0) return y;                                                            \
    T a = FABS(y);                                                                               \
    if (a > 1) return NAN;                                                                       \
    if (a == 1) return COPYSIGN((T)INFINITY, y);                                                 \
    if (a < 1e-30) return y * (T)0.88622692545275801365L; /* sqrt(pi)/2 y (1 + O(y^2)) */     \
    T lo = 0, hi = 6, x = 3;                                                                     \
    for (int i = 0; i < 28; i++) {                                                               \
      x = (lo + hi) / 2;                                                                         \
      if ((a < 0.5 ? ERF(x) - a : (1 - a) - ERFC(x)) > 0) hi = x;                                \
      else lo = x;                                                                               \
    }                                                                                            \
    for (int i = 0; i < 6; i++) {                                                                \
      T slope = (T)1.1283791670955125739L * EXP(-x * x);                                         \
      T step = (a < 0.5 ? ERF(x) - a : (1 - a) - ERFC(x)) / slope;                               \
      if (!(slope > 0) || !isfinite(step)) break;                                                \
      x -= step;                                                                                 \
    }                                                                                            \
    return COPYSIGN(x, y);                                                                       \
  }
ERF_INV_REF(erf_inv_ref64, double, erf, erfc, exp, fabs, copysign)
ERF_INV_REF(erf_inv_ref80, long double, erfl, erfcl, expl, fabsl, copysignl)

static double ref64(cg_math_fn op, double x) {
  switch (op) {
  case CG_MATH_EXP: return exp(x);
  case CG_MATH_LOG: return log(x);
  case CG_MATH_TANH: return tanh(x);
  case CG_MATH_LOGISTIC: return 1.0 / (1.0 + exp(-x));
  case CG_MATH_ERF: return erf(x);
  case CG_MATH_SIN: return sin(x);
  case CG_MATH_COS: return cos(x);
  case CG_MATH_LOG1P: return log1p(x);
  case CG_MATH_EXPM1: return expm1(x);
  case CG_MATH_ERF_INV: return erf_inv_ref64(x);
  default: return NAN;
  }
}

static long double ref80(cg_math_fn op, long double x) {
  switch (op) {
  case CG_MATH_EXP: return expl(x);
  case CG_MATH_LOG: return logl(x);
  case CG_MATH_TANH: return tanhl(x);
  case CG_MATH_LOGISTIC: return 1.0L / (1.0L + expl(-x));
  case CG_MATH_ERF: return erfl(x);
  case CG_MATH_SIN: return sinl(x);
  case CG_MATH_COS: return cosl(x);
  case CG_MATH_LOG1P: return log1pl(x);
  case CG_MATH_EXPM1: return expm1l(x);
  case CG_MATH_ERF_INV: return erf_inv_ref80(x);
  default: return NAN;
  }
}

/* |y - ref| in units of the last place of ref's f32 (ulp of subnormals: 2^-149). A result that
   disagrees on NaN or infinity counts as 1e9 ulp. */
static double ulp32(float y, double ref) {
  if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0 : 1e9;
  if (isinf(y)) return (float)ref == y ? 0 : 1e9;
  int e = ref == 0 ? -126 : ilogb(ref);
  if (e < -126) e = -126;
  if (e > 127) e = 127;
  return fabs((double)y - ref) / ldexp(1.0, e - 23);
}

static double ulp64(double y, long double ref) {
  if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0 : 1e9;
  if (isinf(y)) return (double)ref == y ? 0 : 1e9;
  int e = ref == 0 ? -1022 : ilogbl(ref);
  if (e < -1022) e = -1022;
  if (e > 1023) e = 1023;
  return (double)(fabsl((long double)y - ref) / ldexpl(1.0L, e - 52));
}

static int in_range32(cg_math_fn op, float x) {
  return (op != CG_MATH_SIN && op != CG_MATH_COS) || fabsf(x) < TRIG32_RANGE;
}

/* ---- f32: every 257th bit pattern of the whole range ----------------------------------------- */

/* Every STRIDE-th bit pattern, in chunks; $TJIT_MATH_STRIDE=1 makes it exhaustive (minutes) and
   $TJIT_MATH_OP=sin restricts it to one function. */
#define CHUNK32 (1u << 20)

static void test_sweep_f32(void **state) {
  (void)state;
  const char *s = getenv("TJIT_MATH_STRIDE"), *only = getenv("TJIT_MATH_OP");
  uint64_t stride = s && atoi(s) > 0 ? (uint64_t)atoi(s) : 257;
  float *x = malloc(CHUNK32 * sizeof *x), *y = malloc(CHUNK32 * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  print_message("[ info ] llvm: build %.1f ms, O3 %.1f ms, emit %.1f ms (%zu bytes), load %.1f ms "
                "for %d functions\n",
                J.ms_build, J.ms_opt, J.ms_emit, J.obj_len, J.ms_load, 2 * CG_MATH_COUNT + 1);
  int failed = 0;
  for (int op = 0; op < CG_MATH_COUNT; op++) {
    if (op == CG_MATH_ATAN2 || (only && strcmp(only, cg_math_name(op)) != 0)) continue;
    double worst = 0, jit_ms = 0, t_start = now_ms();
    float worst_x = 0;
    size_t bad_beyond = 0, total = 0;
    double binade[4] = {0}; /* sin/cos past the range: worst ulp for |x| in [2^20,2^21) ... */
    for (uint64_t bits = 0; bits <= 0xffffffffull;) {
      size_t n = 0;
      for (; n < CHUNK32 && bits <= 0xffffffffull; n++, bits += stride) {
        uint32_t b = (uint32_t)bits;
        memcpy(&x[n], &b, 4);
      }
      double t0 = now_ms();
      ((map32_fn)(uintptr_t)J.fn[0][op])(y, x, (int64_t)n);
      jit_ms += now_ms() - t0;
      total += n;
      for (size_t i = 0; i < n; i++) {
        if (!in_range32(op, x[i])) { /* finite and in [-1, 1]; NaN for inf and NaN */
          if (!isfinite(x[i])) {
            bad_beyond += !isnan(y[i]);
            continue;
          }
          bad_beyond += !(y[i] >= -1.0f && y[i] <= 1.0f);
          int bi = ilogbf(x[i]) - 20;
          if (bi >= 0 && bi < 4) {
            double u = ulp32(y[i], ref64(op, x[i]));
            if (u > binade[bi]) binade[bi] = u;
          }
          continue;
        }
        double u = ulp32(y[i], ref64(op, x[i]));
        if (u > worst) worst = u, worst_x = x[i];
      }
    }
    print_message("[ info ] f32 %-8s max %.3f ulp (at %.9g) over %zu inputs; %.2f ns/elem jit, "
                  "check %.0f ms\n",
                  cg_math_name(op), worst, (double)worst_x, total, jit_ms * 1e6 / (double)total,
                  now_ms() - t_start);
    if (op == CG_MATH_SIN || op == CG_MATH_COS)
      print_message("[ info ]   |x| >= %g: %zu results outside [-1,1]; worst ulp per binade "
                    "2^20..2^24: %.3g %.3g %.3g %.3g\n",
                    TRIG32_RANGE, bad_beyond, binade[0], binade[1], binade[2], binade[3]);
    if (worst > BOUND32[op] || bad_beyond) failed++;
  }
  free(x);
  free(y);
  assert_int_equal(failed, 0);
}

/* ---- f64: random bit patterns plus dense ranges where the functions bend ------------------ */

/* xorshift64; the f64 sweep and test_atan2 each draw from their own state */
static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) { return xorshift(&rng); }

static void test_sweep_f64(void **state) {
  (void)state;
  enum { NR = 1 << 20, ND = 1 << 20 };
  size_t n = NR + ND;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  assert_non_null(x);
  assert_non_null(y);
  int failed = 0;
  for (int op = 0; op < CG_MATH_COUNT; op++) {
    if (op == CG_MATH_ATAN2) continue; /* test_atan2 */
    for (size_t i = 0; i < NR; i++) {
      uint64_t b = next_u64();
      memcpy(&x[i], &b, 8);
    }
    double lo = -40, hi = 40;
    if (op == CG_MATH_EXP) lo = -746, hi = 710;
    if (op == CG_MATH_LOG) lo = 0, hi = 10;
    if (op == CG_MATH_SIN || op == CG_MATH_COS) lo = -2000, hi = 2000;
    if (op == CG_MATH_LOG1P) lo = -1, hi = 10;
    if (op == CG_MATH_EXPM1) lo = -40, hi = 710;
    if (op == CG_MATH_ERF_INV) lo = -1, hi = 1;
    for (size_t i = 0; i < ND; i++)
      x[NR + i] = lo + (hi - lo) * ((double)i + 0.5) / ND;
    if (op == CG_MATH_SIN || op == CG_MATH_COS) /* half of them log-uniform up to the range */
      for (size_t i = 0; i < ND / 2; i++)
        x[NR + i] =
            (i & 1 ? -1 : 1) * exp(log(TRIG64_RANGE) * (double)(next_u64() >> 11) * 0x1p-53);
    ((map64_fn)(uintptr_t)J.fn[1][op])(y, x, (int64_t)n);
    double worst = 0, worst_x = 0, worst_y = 0;
    size_t bad_beyond = 0;
    for (size_t i = 0; i < n; i++) {
      if ((op == CG_MATH_SIN || op == CG_MATH_COS) && !(fabs(x[i]) < TRIG64_RANGE)) {
        bad_beyond += isnan(x[i]) || isinf(x[i]) ? !isnan(y[i]) : !(fabs(y[i]) <= 1.0);
        continue;
      }
      double u = ulp64(y[i], ref80(op, x[i]));
      if (u > worst) worst = u, worst_x = x[i], worst_y = y[i];
    }
    print_message("[ info ] f64 %-8s max %.3f ulp (at %.17g: %.17g, want %.17Lg)\n",
                  cg_math_name(op), worst, worst_x, worst_y, ref80(op, worst_x));
    if (worst > BOUND64[op] || bad_beyond) failed++;
  }
  free(x);
  free(y);
  assert_int_equal(failed, 0);
}

/* ---- edge values ----------------------------------------------------------------------------- */

typedef struct {
  cg_math_fn op;
  double x, want; /* want NAN: a NaN; for zeros the sign must match too */
  int only;       /* 32 or 64: checked for that dtype only; 0: both */
} edge;

static const edge EDGES[] = {
    {CG_MATH_EXP, 0.0, 1.0, 0},           {CG_MATH_EXP, -0.0, 1.0, 0},
    {CG_MATH_EXP, INFINITY, INFINITY, 0}, {CG_MATH_EXP, -INFINITY, 0.0, 0},
    {CG_MATH_EXP, NAN, NAN, 0},           {CG_MATH_EXP, 89.0, INFINITY, 32},
    {CG_MATH_EXP, 1e30, INFINITY, 0},     {CG_MATH_EXP, -104.0, 0.0, 32},
    {CG_MATH_EXP, 710.0, INFINITY, 64},   {CG_MATH_EXP, -746.0, 0.0, 64},
    {CG_MATH_EXP, -1e30, 0.0, 0},         {CG_MATH_EXP, -132.0, 0.0, 32},
    {CG_MATH_EXP, -132.5, 0.0, 32},       {CG_MATH_EXP, -133.0, 0.0, 32},
    {CG_MATH_EXP, -1063.5, 0.0, 64},      {CG_MATH_EXP, -1064.0, 0.0, 64},
    {CG_MATH_EXP, -1065.0, 0.0, 64},      {CG_MATH_LOG, 0.0, -INFINITY, 0},
    {CG_MATH_LOG, -0.0, -INFINITY, 0},    {CG_MATH_LOG, 1.0, 0.0, 0},
    {CG_MATH_LOG, INFINITY, INFINITY, 0}, {CG_MATH_LOG, -1.0, NAN, 0},
    {CG_MATH_LOG, -INFINITY, NAN, 0},     {CG_MATH_LOG, NAN, NAN, 0},
    {CG_MATH_LOG, -1e-40, NAN, 0},        {CG_MATH_TANH, 0.0, 0.0, 0},
    {CG_MATH_TANH, -0.0, -0.0, 0},        {CG_MATH_TANH, INFINITY, 1.0, 0},
    {CG_MATH_TANH, -INFINITY, -1.0, 0},   {CG_MATH_TANH, 20.0, 1.0, 0},
    {CG_MATH_TANH, -1e30, -1.0, 0},       {CG_MATH_TANH, NAN, NAN, 0},
    {CG_MATH_TANH, 0x1p-140, 0x1p-140, 0}, {CG_MATH_TANH, -0x1p-149, -0x1p-149, 0},
    {CG_MATH_TANH, 9.125, 1.0, 32},       {CG_MATH_TANH, -3.4e38, -1.0, 0},
    {CG_MATH_EXP, -0x1p-140, 1.0, 0},     {CG_MATH_EXP, 0x1p-149, 1.0, 0},
    {CG_MATH_LOGISTIC, 0.0, 0.5, 0},      {CG_MATH_LOGISTIC, -0.0, 0.5, 0},
    {CG_MATH_LOGISTIC, INFINITY, 1.0, 0}, {CG_MATH_LOGISTIC, -INFINITY, 0.0, 0},
    {CG_MATH_LOGISTIC, 100.0, 1.0, 0},    {CG_MATH_LOGISTIC, -1e30, 0.0, 0},
    {CG_MATH_LOGISTIC, NAN, NAN, 0},      {CG_MATH_ERF, 0.0, 0.0, 0},
    {CG_MATH_ERF, -0.0, -0.0, 0},         {CG_MATH_ERF, INFINITY, 1.0, 0},
    {CG_MATH_ERF, -INFINITY, -1.0, 0},    {CG_MATH_ERF, 6.0, 1.0, 0},
    {CG_MATH_ERF, -1e30, -1.0, 0},        {CG_MATH_ERF, NAN, NAN, 0},
    {CG_MATH_SIN, 0.0, 0.0, 0},           {CG_MATH_SIN, -0.0, -0.0, 0},
    {CG_MATH_SIN, INFINITY, NAN, 0},      {CG_MATH_SIN, -INFINITY, NAN, 0},
    {CG_MATH_SIN, NAN, NAN, 0},           {CG_MATH_COS, 0.0, 1.0, 0},
    {CG_MATH_COS, -0.0, 1.0, 0},          {CG_MATH_COS, INFINITY, NAN, 0},
    {CG_MATH_COS, -INFINITY, NAN, 0},     {CG_MATH_COS, NAN, NAN, 0},
    {CG_MATH_LOG1P, 0.0, 0.0, 0},         {CG_MATH_LOG1P, -0.0, -0.0, 0},
    {CG_MATH_LOG1P, -1.0, -INFINITY, 0},  {CG_MATH_LOG1P, -2.0, NAN, 0},
    {CG_MATH_LOG1P, INFINITY, INFINITY, 0}, {CG_MATH_LOG1P, -INFINITY, NAN, 0},
    {CG_MATH_LOG1P, NAN, NAN, 0},         {CG_MATH_LOG1P, 0x1p-140, 0x1p-140, 0},
    {CG_MATH_EXPM1, 0.0, 0.0, 0},         {CG_MATH_EXPM1, -0.0, -0.0, 0},
    {CG_MATH_EXPM1, INFINITY, INFINITY, 0}, {CG_MATH_EXPM1, -INFINITY, -1.0, 0},
    {CG_MATH_EXPM1, NAN, NAN, 0},         {CG_MATH_EXPM1, 100.0, INFINITY, 32},
    {CG_MATH_EXPM1, 1000.0, INFINITY, 0}, {CG_MATH_EXPM1, -50.0, -1.0, 0},
    {CG_MATH_EXPM1, 0x1p-140, 0x1p-140, 0}, {CG_MATH_EXPM1, -0x1p-149, -0x1p-149, 0},
    {CG_MATH_ERF_INV, 0.0, 0.0, 0},       {CG_MATH_ERF_INV, -0.0, -0.0, 0},
    {CG_MATH_ERF_INV, 1.0, INFINITY, 0},  {CG_MATH_ERF_INV, -1.0, -INFINITY, 0},
    {CG_MATH_ERF_INV, 1.5, NAN, 0},       {CG_MATH_ERF_INV, -INFINITY, NAN, 0},
    {CG_MATH_ERF_INV, NAN, NAN, 0},
};

static int same(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && signbit(got) == signbit(want);
}

static void test_edges(void **state) {
  (void)state;
  int failed = 0;
  for (size_t i = 0; i < sizeof EDGES / sizeof *EDGES; i++) {
    const edge *t = &EDGES[i];
    /* 17 copies so that the vector body and the remainder both see the value */
    float x32[17], y32[17];
    double x64[17], y64[17];
    for (int k = 0; k < 17; k++)
      x32[k] = (float)t->x, x64[k] = t->x;
    ((map32_fn)(uintptr_t)J.fn[0][t->op])(y32, x32, 17);
    ((map64_fn)(uintptr_t)J.fn[1][t->op])(y64, x64, 17);
    for (int k = 0; k < 17; k++) {
      if ((t->only != 64 && !same(y32[k], t->want)) || (t->only != 32 && !same(y64[k], t->want))) {
        print_error("%s(%g): f32 %g, f64 %g, want %g\n", cg_math_name(t->op), t->x, (double)y32[k],
                    y64[k], t->want);
        failed++;
        break;
      }
    }
  }
  /* Huge arguments of sin/cos: finite and in [-1, 1]. */
  const double huge[] = {1e6, -3e7, 1e10, 1e20, -1e30, 3.4e38, 1e300, -1e308};
  for (size_t i = 0; i < sizeof huge / sizeof *huge; i++)
    for (int op = CG_MATH_SIN; op <= CG_MATH_COS; op++) {
      float x32 = fabs(huge[i]) < FLT_MAX ? (float)huge[i] : copysignf(FLT_MAX, (float)huge[i]),
            y32;
      double y64;
      ((map32_fn)(uintptr_t)J.fn[0][op])(&y32, &x32, 1);
      ((map64_fn)(uintptr_t)J.fn[1][op])(&y64, &huge[i], 1);
      if (!(fabsf(y32) <= 1.0f) || !(fabs(y64) <= 1.0)) {
        print_error("%s(%g): f32 %g, f64 %g\n", cg_math_name(op), huge[i], (double)y32, y64);
        failed++;
      }
    }
  /* Subnormal results and arguments. */
  float xs[4] = {-100.0f, -87.5f, 1e-45f, 1e-40f}, ys[4];
  ((map32_fn)(uintptr_t)J.fn[0][CG_MATH_EXP])(ys, xs, 2);
  if (ulp32(ys[0], exp(-100.0)) > 1 || ulp32(ys[1], exp(-87.5)) > 1) failed++;
  ((map32_fn)(uintptr_t)J.fn[0][CG_MATH_LOG])(ys + 2, xs + 2, 2);
  if (ulp32(ys[2], log((double)1e-45f)) > 1 || ulp32(ys[3], log((double)1e-40f)) > 1) failed++;
  assert_int_equal(failed, 0);
}

/* ---- atan2: pairs ------------------------------------------------------------------------
   Random bit-pattern pairs (every exponent, zeros, infinities, NaN), pairs of one exponent range
   (where the octant reduction works hardest), and the edge pairs of C99 Annex F. */

static void test_atan2(void **state) {
  (void)state;
  enum { N = 1 << 22 };
  float *a32 = malloc(N * sizeof *a32), *b32 = malloc(N * sizeof *b32), *y32 = malloc(N * 4);
  double *a64 = malloc(N * sizeof *a64), *b64 = malloc(N * sizeof *b64), *y64 = malloc(N * 8);
  assert_true(a32 && b32 && y32 && a64 && b64 && y64);
  uint64_t pairs = 0x2545f4914f6cdd1dull;
  for (size_t i = 0; i < N; i++) {
    uint64_t r = xorshift(&pairs);
    uint32_t ra = (uint32_t)r, rb = (uint32_t)(r >> 32);
    if (i % 2) { /* same binade range: ratios near 1 and all octants */
      ra = (ra & 0x807fffffu) | 0x3f000000u;
      rb = (rb & 0x807fffffu) | ((0x3e800000u + (rb & 0x01000000u)) & 0x7f800000u);
    }
    memcpy(&a32[i], &ra, 4);
    memcpy(&b32[i], &rb, 4);
    uint64_t qa = xorshift(&pairs), qb = xorshift(&pairs);
    if (i % 2) {
      qa = (qa & 0x800fffffffffffffull) | 0x3fe0000000000000ull;
      qb = (qb & 0x800fffffffffffffull) | (0x3fd0000000000000ull + (qb & 0x0010000000000000ull));
    }
    memcpy(&a64[i], &qa, 8);
    memcpy(&b64[i], &qb, 8);
  }
  ((zip32_fn)(uintptr_t)J.fn[0][CG_MATH_ATAN2])(y32, a32, b32, N);
  ((zip64_fn)(uintptr_t)J.fn[1][CG_MATH_ATAN2])(y64, a64, b64, N);
  double w32 = 0, w64 = 0;
  size_t at32 = 0, at64 = 0;
  for (size_t i = 0; i < N; i++) {
    double u = ulp32(y32[i], atan2((double)a32[i], (double)b32[i]));
    if (u > w32) w32 = u, at32 = i;
    u = ulp64(y64[i], atan2l(a64[i], b64[i]));
    if (u > w64) w64 = u, at64 = i;
  }
  print_message("[ info ] f32 atan2 max %.3f ulp (at %.9g, %.9g); f64 max %.3f ulp (at %.17g, "
                "%.17g), %d pairs each\n",
                w32, (double)a32[at32], (double)b32[at32], w64, a64[at64], b64[at64], N);
  assert_true(w32 <= BOUND32[CG_MATH_ATAN2]);
  assert_true(w64 <= BOUND64[CG_MATH_ATAN2]);
  /* Annex F: signed zeros, infinities, NaN */
  const double v[] = {0.0, -0.0, 1.0, -1.0, 3e-39, INFINITY, -INFINITY, NAN, 1e300};
  int nv = sizeof v / sizeof *v, failed = 0;
  for (int i = 0; i < nv; i++)
    for (int j = 0; j < nv; j++) {
      float fa = (float)v[i], fb = (float)v[j], fy;
      double dy;
      ((zip32_fn)(uintptr_t)J.fn[0][CG_MATH_ATAN2])(&fy, &fa, &fb, 1);
      ((zip64_fn)(uintptr_t)J.fn[1][CG_MATH_ATAN2])(&dy, &v[i], &v[j], 1);
      double want32 = atan2((double)fa, (double)fb), want64 = atan2(v[i], v[j]);
      bool sign_ok = isnan(want64) || (!signbit(fy) == !signbit(want32) &&
                                       !signbit(dy) == !signbit(want64));
      if (ulp32(fy, want32) > BOUND32[CG_MATH_ATAN2] ||
          ulp64(dy, want64) > BOUND64[CG_MATH_ATAN2] || !sign_ok) {
        print_error("atan2(%g, %g): f32 %g, f64 %g, want %g\n", v[i], v[j], (double)fy, dy, want64);
        failed++;
      }
    }
  free(a32), free(b32), free(y32), free(a64), free(b64), free(y64);
  assert_int_equal(failed, 0);
}

/* cg_math_emit_exp_summand: exp's bits from -86.5 (f64 -707) up, NaN for NaN, a positive normal
   under 2^-124 (2^-1019) below, and c + it, c - it, it - c as with exp for constants c of
   magnitude 2^-40 and more: every 257th f32 bit pattern, 1M random f64 patterns and 1M f64 over
   [-800, 800]. */
static const double SUMMAND_C[] = {1.0, -1.0, 0x1p-40, -0x1p-40, 0.5, 3.25, 1e30, -1e30};
enum { N_SUMMAND_C = sizeof SUMMAND_C / sizeof *SUMMAND_C };

static void test_exp_summand(void **state) {
  (void)state;
  enum { N = 1 << 16 };
  float *x32 = malloc(N * sizeof *x32), *e32 = malloc(N * sizeof *e32), *s32 = malloc(N * sizeof *s32);
  double *x64 = malloc(N * sizeof *x64), *e64 = malloc(N * sizeof *e64), *s64 = malloc(N * sizeof *s64);
  assert_true(x32 && e32 && s32 && x64 && e64 && s64);
  long bad = 0, below = 0;
  uint64_t seed = 0x5eed5u; /* its own numbers: the sweeps' draws stay as they were */
  for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)N * 257) {
    int n = 0;
    for (uint64_t bits = base; n < N && bits < (1ull << 32); bits += 257) {
      uint32_t u = (uint32_t)bits;
      memcpy(&x32[n++], &u, 4);
    }
    ((map32_fn)(uintptr_t)J.fn[0][CG_MATH_EXP])(e32, x32, n);
    ((map32_fn)(uintptr_t)J.summand[0])(s32, x32, n);
    for (int i = 0; i < n; i++) {
      float x = x32[i], e = e32[i], v = s32[i];
      bool ok = isnan(x) ? isnan(v) : x >= -86.5f ? memcmp(&e, &v, 4) == 0
                                                   : isnormal(v) && v > 0 && v < 0x1p-124f;
      for (int k = 0; k < N_SUMMAND_C && ok && !isnan(x); k++) {
        float c = (float)SUMMAND_C[k];
        ok = c + v == c + e && c - v == c - e && v - c == e - c;
      }
      below += x < -86.5f;
      if (!ok && bad++ < 5) fprintf(stderr, "f32 x %a: exp %a, summand %a\n", x, e, v);
    }
  }
  for (int part = 0; part < 2; part++)
    for (int chunk = 0; chunk < (1 << 20) / N; chunk++) {
      for (int i = 0; i < N; i++) {
        uint64_t u = xorshift(&seed);
        if (part) x64[i] = -800.0 + 1600.0 * (double)(u >> 11) * 0x1p-53;
        else memcpy(&x64[i], &u, 8);
      }
      ((map64_fn)(uintptr_t)J.fn[1][CG_MATH_EXP])(e64, x64, N);
      ((map64_fn)(uintptr_t)J.summand[1])(s64, x64, N);
      for (int i = 0; i < N; i++) {
        double x = x64[i], e = e64[i], v = s64[i];
        bool ok = isnan(x) ? isnan(v) : x >= -707.0 ? memcmp(&e, &v, 8) == 0
                                                    : isnormal(v) && v > 0 && v < 0x1p-1019;
        for (int k = 0; k < N_SUMMAND_C && ok && !isnan(x); k++) {
          double c = SUMMAND_C[k];
          ok = c + v == c + e && c - v == c - e && v - c == e - c;
        }
        below += x < -707.0;
        if (!ok && bad++ < 5) fprintf(stderr, "f64 x %a: exp %a, summand %a\n", x, e, v);
      }
    }
  free(x32), free(e32), free(s32), free(x64), free(e64), free(s64);
  assert_true(below > 1000000); /* the clamped range was reached, in both widths */
  assert_int_equal(bad, 0);
}

/* cg_math_emit_exp_nonpos: exp's bits for every x <= 0 and NaN: every 257th f32 bit pattern
   with the sign set, the edges (-0, the subnormals, where results turn subnormal and then 0,
   -inf, NaNs), 1M random negative f64 patterns and 1M f64 over [-800, 0]. */
static void test_exp_nonpos(void **state) {
  (void)state;
  enum { N = 1 << 16 };
  float *x32 = malloc(N * sizeof *x32), *e32 = malloc(N * sizeof *e32), *v32 = malloc(N * sizeof *v32);
  double *x64 = malloc(N * sizeof *x64), *e64 = malloc(N * sizeof *e64), *v64 = malloc(N * sizeof *v64);
  assert_true(x32 && e32 && v32 && x64 && e64 && v64);
  static const float edges32[] = {-0.0f, -0x1p-149f, -0x1p-126f, -1e-30f, -87.3f, -87.4f,
                                  -103.27f, -103.98f, -104.0f, -104.1f, -132.0f, -132.5f,
                                  -133.0f, -1e30f, -INFINITY, NAN, -NAN};
  long bad = 0, subnormal = 0;
  uint64_t seed = 0x9e9u;
  for (uint64_t base = 0; base < (1ull << 31); base += (uint64_t)N * 257) {
    int n = 0;
    if (!base)
      for (size_t k = 0; k < sizeof edges32 / sizeof *edges32; k++) x32[n++] = edges32[k];
    for (uint64_t bits = base; n < N && bits < (1ull << 31); bits += 257) {
      uint32_t u = (uint32_t)bits | 0x80000000u;
      memcpy(&x32[n++], &u, 4);
    }
    ((map32_fn)(uintptr_t)J.fn[0][CG_MATH_EXP])(e32, x32, n);
    ((map32_fn)(uintptr_t)J.nonpos[0])(v32, x32, n);
    for (int i = 0; i < n; i++) {
      bool ok = isnan(x32[i]) ? isnan(v32[i]) : memcmp(&e32[i], &v32[i], 4) == 0;
      subnormal += fpclassify(e32[i]) == FP_SUBNORMAL;
      if (!ok && bad++ < 5) fprintf(stderr, "f32 x %a: exp %a, nonpos %a\n", x32[i], e32[i], v32[i]);
    }
  }
  for (int part = 0; part < 2; part++)
    for (int chunk = 0; chunk < (1 << 20) / N; chunk++) {
      for (int i = 0; i < N; i++) {
        uint64_t u = xorshift(&seed);
        if (part) x64[i] = -800.0 * (double)(u >> 11) * 0x1p-53;
        else {
          u |= 1ull << 63;
          memcpy(&x64[i], &u, 8);
        }
      }
      ((map64_fn)(uintptr_t)J.fn[1][CG_MATH_EXP])(e64, x64, N);
      ((map64_fn)(uintptr_t)J.nonpos[1])(v64, x64, N);
      for (int i = 0; i < N; i++) {
        bool ok = isnan(x64[i]) ? isnan(v64[i]) : memcmp(&e64[i], &v64[i], 8) == 0;
        subnormal += fpclassify(e64[i]) == FP_SUBNORMAL;
        if (!ok && bad++ < 5) fprintf(stderr, "f64 x %a: exp %a, nonpos %a\n", x64[i], e64[i], v64[i]);
      }
    }
  free(x32), free(e32), free(v32), free(x64), free(e64), free(v64);
  assert_true(subnormal > 10000); /* results rounded into the subnormals were compared */
  assert_int_equal(bad, 0);
}

/* cg_math_emit on a <5 x float> operand gives the loop's scalar results lane for lane. */
static void test_vector_operand(void **state) {
  (void)state;
  float x[5] = {-3.5f, 0.0f, 1.0f, 20.25f, -0.001f}, y[5], want[5];
  ((void (*)(float *, const float *))(uintptr_t)J.vec5)(y, x);
  ((map32_fn)(uintptr_t)J.fn[0][CG_MATH_EXP])(want, x, 5);
  for (int i = 0; i < 5; i++)
    assert_true(y[i] == want[i]);
  /* Wrong operand types are refused. */
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("bad", c);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(c);
  LLVMValueRef fn = LLVMAddFunction(m, "f", LLVMFunctionType(i32, &i32, 1, 0));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, fn, "entry"));
  assert_null(cg_math_emit(b, CG_MATH_EXP, LLVMGetParam(fn, 0)));
  assert_null(cg_math_emit(b, CG_MATH_COUNT, LLVMConstReal(LLVMFloatTypeInContext(c), 1.0)));
  assert_null(cg_math_name(CG_MATH_COUNT));
  LLVMDisposeBuilder(b);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
}

int main(void) {
  tt_skip_unrunnable_target();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_products),
      cmocka_unit_test(test_edges),
      cmocka_unit_test(test_vector_operand),
      cmocka_unit_test(test_exp_summand),
      cmocka_unit_test(test_exp_nonpos),
      cmocka_unit_test(test_atan2),
      cmocka_unit_test(test_sweep_f32),
      cmocka_unit_test(test_sweep_f64),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

#else /* !HAVE_LLVM_HEADERS */

static void test_llvm_headers_missing(void **state) {
  (void)state;
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_llvm_headers_missing)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
