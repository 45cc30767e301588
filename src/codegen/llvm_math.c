/* llvm_math.c: exp, log, tanh, logistic, erf, sin, cos as straight-line LLVM IR (Cody-Waite
 * reduction, minimax polynomials fitted by Remez exchange, selects for edge values). */
#include "codegen/llvm_math.h"

#include <stdint.h>
#include <string.h>

/* Why straight-line code: the loop vectorizer widens arithmetic, compares and selects to any
   width, but turns a libm call into one scalar call per lane. Both sides of a branch are
   computed and joined by select; NaN inputs flow through ordered compares (which are false
   for NaN) into the result, and every select below is written so that a NaN is not replaced.
   llvm.fma is used for every multiply-add: Cody-Waite steps rely on the exact product, and the
   error bounds in docs/MATH.md are measured with it (every x86-64 CPU with AVX2 has FMA). */

typedef struct {
  LLVMBuilderRef b;
  LLVMModuleRef m;
  LLVMContextRef c;
  LLVMTypeRef ty;   /* x's type: float/double or a vector of them */
  LLVMTypeRef ety;  /* float or double */
  LLVMTypeRef ity;  /* the integer type of ty's shape and width */
  LLVMTypeRef iety; /* i32 or i64 */
  unsigned lanes;   /* 0 for a scalar */
  int f64;
} em;

/* Numbers of a floating format that the algorithms need. */
typedef struct {
  int mant;       /* explicit mantissa bits: 23, 52 */
  int bias;       /* 127, 1023 */
  double round_m; /* 1.5 * 2^mant: adding it rounds to an integer held in the low bits */
} fmt_info;

static const fmt_info FMT32 = {23, 127, 12582912.0};
static const fmt_info FMT64 = {52, 1023, 6755399441055744.0};

/* ---- building blocks --------------------------------------------------------------------- */

/* insertelement + shufflevector of constants, which the builder folds into a splat constant
   (the C API has no LLVMBuildVectorSplat, and LLVMConstVector would need an array per width). */
static LLVMValueRef splat(em *e, LLVMValueRef scalar) {
  if (!e->lanes) return scalar;
  LLVMTypeRef vty = LLVMVectorType(LLVMTypeOf(scalar), e->lanes);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(e->c);
  LLVMValueRef v =
      LLVMBuildInsertElement(e->b, LLVMGetPoison(vty), scalar, LLVMConstInt(i32, 0, 0), "");
  return LLVMBuildShuffleVector(e->b, v, LLVMGetPoison(vty),
                                LLVMConstNull(LLVMVectorType(i32, e->lanes)), "");
}
static LLVMValueRef kf(em *e, double v) { return splat(e, LLVMConstReal(e->ety, v)); }
static LLVMValueRef ki(em *e, int64_t v) {
  return splat(e, LLVMConstInt(e->iety, (unsigned long long)v, 1));
}

static LLVMValueRef intrinsic(em *e, const char *name, LLVMValueRef *args, unsigned n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(e->m, id, &e->ty, 1);
  LLVMTypeRef fty = LLVMIntrinsicGetType(e->c, id, &e->ty, 1);
  return LLVMBuildCall2(e->b, fty, fn, args, n, "");
}
static LLVMValueRef fma3(em *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return intrinsic(e, "llvm.fma", args, 3);
}
static LLVMValueRef fabs1(em *e, LLVMValueRef a) { return intrinsic(e, "llvm.fabs", &a, 1); }
static LLVMValueRef rint1(em *e, LLVMValueRef a) { return intrinsic(e, "llvm.rint", &a, 1); }
static LLVMValueRef floor1(em *e, LLVMValueRef a) { return intrinsic(e, "llvm.floor", &a, 1); }
static LLVMValueRef copysign2(em *e, LLVMValueRef mag, LLVMValueRef sgn) {
  LLVMValueRef args[2] = {mag, sgn};
  return intrinsic(e, "llvm.copysign", args, 2);
}

static LLVMValueRef add(em *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFAdd(e->b, a, b, "");
}
static LLVMValueRef sub(em *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFSub(e->b, a, b, "");
}
static LLVMValueRef mul(em *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFMul(e->b, a, b, "");
}
static LLVMValueRef fdiv(em *e, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFDiv(e->b, a, b, "");
}
static LLVMValueRef sel(em *e, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(e->b, c, a, b, "");
}
static LLVMValueRef fcmp(em *e, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildFCmp(e->b, p, a, b, "");
}
static LLVMValueRef is_nan(em *e, LLVMValueRef a) { return fcmp(e, LLVMRealUNO, a, a); }
static LLVMValueRef as_int(em *e, LLVMValueRef a) { return LLVMBuildBitCast(e->b, a, e->ity, ""); }
static LLVMValueRef as_float(em *e, LLVMValueRef a) { return LLVMBuildBitCast(e->b, a, e->ty, ""); }

/* c[0] + x*(c[1] + x*(... + x*c[n-1])) */
static LLVMValueRef poly(em *e, LLVMValueRef x, const double *c, int n) {
  LLVMValueRef r = kf(e, c[n - 1]);
  for (int i = n - 2; i >= 0; i--)
    r = fma3(e, r, x, kf(e, c[i]));
  return r;
}

/* x clamped to [lo, hi] by ordered compares, so that NaN stays NaN (minnum/maxnum would not). */
static LLVMValueRef clamp(em *e, LLVMValueRef x, double lo, double hi) {
  x = sel(e, fcmp(e, LLVMRealOGT, x, kf(e, hi)), kf(e, hi), x);
  return sel(e, fcmp(e, LLVMRealOLT, x, kf(e, lo)), kf(e, lo), x);
}

/* 2^n for integers n in [1 - bias, bias], built in the exponent field. */
static LLVMValueRef pow2i(em *e, const fmt_info *f, LLVMValueRef n) {
  LLVMValueRef biased = LLVMBuildAdd(e->b, n, ki(e, f->bias), "");
  return as_float(e, LLVMBuildShl(e->b, biased, ki(e, f->mant), ""));
}

/* ---- exp ---------------------------------------------------------------------------------
   x = n ln2 + r, |r| <= ln2/2, with n = rint(x / ln2) read from the low bits of x/ln2 + 1.5*2^m.
   With fma, x - n*ln2_hi is exact (both are multiples of ulp(ln2_hi) near the result), and
   ln2_lo brings r to ~2^-48 relative. exp(r) = 1 + r*P(r), P minimax for relative error.
   2^n is applied as two factors, 2^(n + 64) * 2^-64 for x < 0 (f64: 2^(n + 512) * 2^-512) and
   2^(n - 1) * 2 otherwise, so that results in the subnormal range are rounded once and overflow
   gives inf; the first factor is normal and exact because x is clamped first. A NaN x needs no
   select: it reaches the result through every fma and multiply, whatever bits n gets from it. */

static const double EXP32_P[] = {1.0,
                                 0.4999999403953552,
                                 0.1666651964187622,
                                 0.041668400168418884,
                                 0.00836885068565607,
                                 0.0013814320554956794};
static const double EXP64_P[] = {1.0,
                                 0.500000000000001,
                                 0.16666666666666674,
                                 0.041666666666519775,
                                 0.008333333333322037,
                                 0.0013888888948496267,
                                 0.00019841269887110348,
                                 2.4801486563471478e-05,
                                 2.7557241750305074e-06,
                                 2.7632942641482864e-07,
                                 2.511027050068687e-08};

static LLVMValueRef emit_exp(em *e, LLVMValueRef x) {
  const fmt_info *f = e->f64 ? &FMT64 : &FMT32;
  double lo = e->f64 ? -746.0 : -104.0, hi = e->f64 ? 710.0 : 89.0;
  double log2e = e->f64 ? 1.4426950408889634 : 1.4426950216293335;
  double ln2_hi = e->f64 ? 0.6931471805599453 : 0.6931471824645996;
  double ln2_lo = e->f64 ? 2.3190468138462996e-17 : -1.9046542121259336e-09;
  LLVMValueRef xc = clamp(e, x, lo, hi);
  LLVMValueRef t = fma3(e, xc, kf(e, log2e), kf(e, f->round_m));
  LLVMValueRef nf = sub(e, t, kf(e, f->round_m));
  LLVMValueRef n = LLVMBuildSub(e->b, as_int(e, t), as_int(e, kf(e, f->round_m)), "");
  LLVMValueRef r = fma3(e, nf, kf(e, -ln2_hi), xc);
  r = fma3(e, nf, kf(e, -ln2_lo), r);
  LLVMValueRef p = e->f64 ? poly(e, r, EXP64_P, 11) : poly(e, r, EXP32_P, 6);
  p = fma3(e, p, r, kf(e, 1.0));
  LLVMValueRef neg = fcmp(e, LLVMRealOLT, xc, kf(e, 0.0));
  int down = e->f64 ? 512 : 64;
  LLVMValueRef s1 = pow2i(e, f, LLVMBuildAdd(e->b, n, sel(e, neg, ki(e, down), ki(e, -1)), ""));
  LLVMValueRef s2 = sel(e, neg, kf(e, e->f64 ? 0x1p-512 : 0x1p-64), kf(e, 2.0));
  return mul(e, mul(e, p, s1), s2);
}

/* ---- log ---------------------------------------------------------------------------------
   x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals are scaled up first), f = m - 1,
   s = f/(2+f): log(1+f) = 2 atanh(s) = f - hfsq + s*(hfsq + R(s^2)) with hfsq = f^2/2 (the
   fdlibm arrangement, which keeps the large terms exact), R(z) = z*Q(z) minimax. */

static const double LOG32_Q[] = {0.6666678190231323, 0.39975589513778687, 0.29939505457878113};
static const double LOG64_Q[] = {0.6666666666666713, 0.3999999999948997,  0.2857142873744843,
                                 0.2222219813452716, 0.18183625988936286, 0.15311676796355583,
                                 0.14826148761113353};

static LLVMValueRef emit_log(em *e, LLVMValueRef x) {
  const fmt_info *f = e->f64 ? &FMT64 : &FMT32;
  double min_normal = e->f64 ? 2.2250738585072014e-308 : 1.1754943508222875e-38;
  double up = e->f64 ? 18014398509481984.0 : 8388608.0; /* 2^54, 2^23 */
  int up_bits = e->f64 ? 54 : 23;
  int64_t sqrt_half = e->f64 ? (int64_t)0x3fe6a09e667f3bcdLL : 0x3f3504f3;
  double ln2_hi = e->f64 ? 0.6931471805599453 : 0.6931471824645996;
  double ln2_lo = e->f64 ? 2.3190468138462996e-17 : -1.9046542121259336e-09;
  LLVMValueRef sub_n = fcmp(e, LLVMRealOLT, x, kf(e, min_normal));
  LLVMValueRef xs = sel(e, sub_n, mul(e, x, kf(e, up)), x);
  LLVMValueRef kadj = sel(e, sub_n, ki(e, -up_bits), ki(e, 0));
  LLVMValueRef ix = as_int(e, xs);
  LLVMValueRef k =
      LLVMBuildAShr(e->b, LLVMBuildSub(e->b, ix, ki(e, sqrt_half), ""), ki(e, f->mant), "");
  LLVMValueRef m =
      as_float(e, LLVMBuildSub(e->b, ix, LLVMBuildShl(e->b, k, ki(e, f->mant), ""), ""));
  LLVMValueRef kf_ = LLVMBuildSIToFP(e->b, LLVMBuildAdd(e->b, k, kadj, ""), e->ty, "");
  LLVMValueRef fm = sub(e, m, kf(e, 1.0));
  LLVMValueRef s = fdiv(e, fm, add(e, kf(e, 2.0), fm));
  LLVMValueRef z = mul(e, s, s);
  LLVMValueRef R = e->f64 ? mul(e, z, poly(e, z, LOG64_Q, 7)) : mul(e, z, poly(e, z, LOG32_Q, 3));
  LLVMValueRef hfsq = mul(e, mul(e, kf(e, 0.5), fm), fm);
  /* k*ln2_hi - ((hfsq - (s*(hfsq+R) + k*ln2_lo)) - f) */
  LLVMValueRef t = fma3(e, s, add(e, hfsq, R), mul(e, kf_, kf(e, ln2_lo)));
  t = sub(e, sub(e, hfsq, t), fm);
  LLVMValueRef y = fma3(e, kf_, kf(e, ln2_hi), LLVMBuildFNeg(e->b, t, ""));
  double inf = __builtin_inf();
  y = sel(e, fcmp(e, LLVMRealOEQ, x, kf(e, inf)), kf(e, inf), y);
  y = sel(e, fcmp(e, LLVMRealOEQ, x, kf(e, 0.0)), kf(e, -inf), y);
  y = sel(e, fcmp(e, LLVMRealOLT, x, kf(e, 0.0)), kf(e, __builtin_nan("")), y);
  return sel(e, is_nan(e, x), x, y);
}

/* ---- tanh --------------------------------------------------------------------------------
   Both branches are computed on a = |x| and the sign is restored once at the end:
     a < T:   a + a^3 P(a^2) (minimax, relative).
     a >= T:  1 - 2/(exp(2a) + 1), with no cancellation (tanh(T) > 1/2 in f32, 0.29 in f64).
   f32 writes the second as 1 - 2 w/(w + 1) with w = exp(-2a) in (0, 0.34], where w's error is
   scaled by 2w/(1 + w)^2 <= 0.38: so w needs no general exp. a is clamped to 9.125 (tanh rounds
   to 1 from 9.011 on), -2a = n ln2 - 2r with n = rint(-2a log2 e) in [-27, -2] and r = a + n ln2/2
   in one fma (exact for the high part of ln2/2; the low part, left out, would change w by
   |n| 1.9e-9 relative, which moves tanh by at most 2e-9, 0.03 ulp, since w ~ 2^n),
   exp(-2r) = 1 + r E(r) on |r| <= ln2/4 (minimax, relative), and 2^-n one normal number.
   Degrees (f32): P 3 (3.7e-8 relative on [0, 0.55]; that branch stays under 1.1 ulp), E 5
   (degree 4 would reach 2.0 ulp at a = 0.555).
   One formula for every a (e/(e + 2) with e = expm1(2a) below T, no small branch) was tried: the
   roundings of e and of e + 2 cost up to 2.6 ulp.
   f64 keeps the general exp: 1 - 2/(exp(2a) + 1), where exp overflows to inf past 355 and the
   result saturates to exactly 1. */

static const double TANH32_P[] = {-0.3333294689655304, 0.13320724666118622,
                                  -0.05267181247472763, 0.016437580808997154};
static const double TANH32_E[] = {-2.0, 1.999999761581421, -1.3333144187927246, 0.666688084602356,
                                  -0.2679738998413086, 0.08859916776418686};
static const double TANH64_P[] = {
    -0.3333333333333333,   0.13333333333333072,   -0.05396825396778458,
    0.021869488497610775,  -0.008863233801032069, 0.0035920821156481663,
    -0.001455090718411639, 0.000582786569452815,  -0.0001997314284034809};

static LLVMValueRef emit_tanh(em *e, LLVMValueRef x) {
  LLVMValueRef a = fabs1(e, x);
  LLVMValueRef a2 = mul(e, a, a);
  LLVMValueRef P = e->f64 ? poly(e, a2, TANH64_P, 9) : poly(e, a2, TANH32_P, 4);
  /* a^3 underflows to 0 for tiny a, where tanh rounds to a */
  LLVMValueRef small = fma3(e, mul(e, a, a2), P, a);
  LLVMValueRef big;
  if (e->f64) {
    LLVMValueRef ex = emit_exp(e, add(e, a, a));
    big = sub(e, kf(e, 1.0), fdiv(e, kf(e, 2.0), add(e, ex, kf(e, 1.0))));
  } else {
    const fmt_info *f = &FMT32;
    /* NaN stays NaN */
    LLVMValueRef ac = sel(e, fcmp(e, LLVMRealOGT, a, kf(e, 9.125)), kf(e, 9.125), a);
    LLVMValueRef t = fma3(e, ac, kf(e, -2 * 1.4426950216293335), kf(e, f->round_m));
    LLVMValueRef nf = sub(e, t, kf(e, f->round_m));
    LLVMValueRef mn = LLVMBuildSub(e->b, as_int(e, kf(e, f->round_m)), as_int(e, t), "");
    LLVMValueRef r = fma3(e, nf, kf(e, 0.5 * 0.6931471824645996), ac);
    LLVMValueRef p = fma3(e, r, poly(e, r, TANH32_E, 6), kf(e, 1.0));
    /* w/(w + 1) = p/(p + 2^-n) exactly (scaling by 2^n commutes with rounding here), and
       2^-n in [4, 2^27] costs no multiply */
    LLVMValueRef q = fdiv(e, p, add(e, p, pow2i(e, f, mn)));
    big = fma3(e, q, kf(e, -2.0), kf(e, 1.0));
  }
  LLVMValueRef y = sel(e, fcmp(e, LLVMRealOLT, a, kf(e, e->f64 ? 0.3 : 0.55)), small, big);
  return copysign2(e, y, x); /* keeps -0; NaN comes through the big branch */
}

/* ---- logistic ----------------------------------------------------------------------------
   With t = exp(-|x|) in (0, 1]: 1/(1+t) for x >= 0 and t/(1+t) for x < 0, so that no exp
   overflows and results down in the subnormal range keep their digits. */

static LLVMValueRef emit_logistic(em *e, LLVMValueRef x) {
  LLVMValueRef t = emit_exp(e, LLVMBuildFNeg(e->b, fabs1(e, x), ""));
  LLVMValueRef d = add(e, kf(e, 1.0), t);
  /* one division of the chosen numerator: the same results as dividing both, for half the
     divider's time, which bounds W1-like kernels */
  LLVMValueRef num = sel(e, fcmp(e, LLVMRealOGE, x, kf(e, 0.0)), kf(e, 1.0), t);
  return fdiv(e, num, d);
}

/* ---- erf (f32) ---------------------------------------------------------------------------
   |x| < 1: x + x (P(x^2) - 1) (minimax, relative). 1 <= |x|: 1 - exp(-x^2 + H(|x| - 2.5)) where
   H(u) ~ log(erfc(x)) + x^2 = log(erfcx(x)) is smooth on [1, 4] (minimax weighted by erfc, i.e.
   for the absolute error of erf); |x| is clamped to 4, where 1 - erfc rounds to 1 in f32.
   f64 calls libm's erf per element: an f64 polynomial of the same accuracy for the tail would
   need piecewise tables. */

static const double ERF32_SMALL[] = {
    0.12837916709551257,  -0.3761262595653534,    0.1128358542919159,   -0.026853812858462334,
    0.005188327748328447, -0.0008010193705558777, 7.853860734030604e-05};
static const double ERF32_TAIL[] = {
    -1.556815266609192,   -0.3526788055896759,     0.05610760673880577,   -0.010866631753742695,
    0.002159613184630871, -0.00041179603431373835, 8.312242425745353e-05, -1.5662451914977282e-05};

static LLVMValueRef emit_erf_libm(em *e, LLVMValueRef x) {
  LLVMValueRef fn = LLVMGetNamedFunction(e->m, "erf");
  LLVMTypeRef fty = LLVMFunctionType(e->ety, &e->ety, 1, 0);
  if (!fn) fn = LLVMAddFunction(e->m, "erf", fty);
  if (!e->lanes) return LLVMBuildCall2(e->b, fty, fn, &x, 1, "");
  LLVMValueRef v = LLVMGetUndef(e->ty);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(e->c);
  for (unsigned i = 0; i < e->lanes; i++) {
    LLVMValueRef idx = LLVMConstInt(i32, i, 0);
    LLVMValueRef xi = LLVMBuildExtractElement(e->b, x, idx, "");
    v = LLVMBuildInsertElement(e->b, v, LLVMBuildCall2(e->b, fty, fn, &xi, 1, ""), idx, "");
  }
  return v;
}

static LLVMValueRef emit_erf(em *e, LLVMValueRef x) {
  if (e->f64) return emit_erf_libm(e, x);
  LLVMValueRef a = fabs1(e, x);
  /* x + x*(P - 1): the rounding of P near 1.1 would cost an ulp */
  LLVMValueRef small = fma3(e, x, poly(e, mul(e, x, x), ERF32_SMALL, 7), x);
  LLVMValueRef ac = clamp(e, a, 0.0, 4.0);
  LLVMValueRef h = poly(e, sub(e, ac, kf(e, 2.5)), ERF32_TAIL, 8);
  LLVMValueRef erfc = emit_exp(e, fma3(e, LLVMBuildFNeg(e->b, ac, ""), ac, h));
  LLVMValueRef big = copysign2(e, sub(e, kf(e, 1.0), erfc), x);
  return sel(e, fcmp(e, LLVMRealOLT, a, kf(e, 1.0)), small, big);
}

/* ---- sin, cos ----------------------------------------------------------------------------
   q = rint(x * 2/pi), r = x - q*pi/2 with pi/2 split in three (Cody-Waite; with fma the first
   step is exact), then sin or cos of r on |r| <= pi/4 by minimax polynomials, chosen and signed
   by q mod 4. Past the documented range (docs/MATH.md) r loses accuracy; it is clamped so that
   results stay finite and in [-1, 1]. */

static const double SIN32_S[] = {-0.16666653752326965, 0.008332000114023685,
                                 -0.00019490448175929487};
static const double COS32_C[] = {0.041666653007268906, -0.0013887552777305245,
                                 2.4450286218780093e-05};
static const double SIN64_S[] = {-0.16666666666666635,    0.00833333333332156,
                                 -0.00019841269828249018, 2.7557312954438773e-06,
                                 -2.5050622304194935e-08, 1.5888139054845245e-10};
static const double COS64_C[] = {0.04166666666666665,    -0.0013888888888881523,
                                 2.4801587293442114e-05, -2.7557315302253873e-07,
                                 2.0875827494858324e-09, -1.1363870144077976e-11};

static LLVMValueRef emit_sincos(em *e, LLVMValueRef x, int is_cos) {
  static const double pio2_32[3] = {1.5707963705062866, -4.371138828673793e-08,
                                    -1.7151245100058819e-15};
  static const double pio2_64[3] = {1.5707963267948966, 6.123233995736766e-17,
                                    -1.4973849048591698e-33};
  const double *pio2 = e->f64 ? pio2_64 : pio2_32;
  double two_over_pi = e->f64 ? 0.6366197723675814 : 0.6366197466850281;
  double two_over_pi_lo = e->f64 ? -3.935735335036497e-17 : 2.5682552973194106e-08;
  /* rint of the rounded product x*2/pi can pick the wrong neighbour (|r| > pi/4) once
     ulp(x*2/pi) is large; the exact product error (fma) and the low part of 2/pi decide. */
  LLVMValueRef p = mul(e, x, kf(e, two_over_pi));
  LLVMValueRef perr = fma3(e, x, kf(e, two_over_pi), LLVMBuildFNeg(e->b, p, ""));
  LLVMValueRef q = rint1(e, p);
  LLVMValueRef frac = add(e, sub(e, p, q), fma3(e, x, kf(e, two_over_pi_lo), perr));
  q = add(e, q, sel(e, fcmp(e, LLVMRealOGT, frac, kf(e, 0.5)), kf(e, 1.0), kf(e, 0.0)));
  q = sub(e, q, sel(e, fcmp(e, LLVMRealOLT, frac, kf(e, -0.5)), kf(e, 1.0), kf(e, 0.0)));
  LLVMValueRef r = x;
  for (int i = 0; i < 3; i++)
    r = fma3(e, q, kf(e, -pio2[i]), r);
  r = clamp(e, r, -0.8, 0.8);
  /* q mod 4 in floating point works for every finite q; inf/NaN give NaN, replaced by 0 before
     the conversion (fptosi of NaN would be poison). */
  LLVMValueRef qm = fma3(e, floor1(e, mul(e, q, kf(e, 0.25))), kf(e, -4.0), q);
  qm = sel(e, is_nan(e, qm), kf(e, 0.0), qm);
  LLVMValueRef quad = LLVMBuildFPToSI(e->b, qm, e->ity, "");
  if (is_cos) quad = LLVMBuildAdd(e->b, quad, ki(e, 1), "");
  LLVMValueRef y = mul(e, r, r);
  LLVMValueRef s =
      fma3(e, mul(e, r, y), e->f64 ? poly(e, y, SIN64_S, 6) : poly(e, y, SIN32_S, 3), r);
  LLVMValueRef c = fma3(e, mul(e, y, y), e->f64 ? poly(e, y, COS64_C, 6) : poly(e, y, COS32_C, 3),
                        fma3(e, y, kf(e, -0.5), kf(e, 1.0)));
  LLVMValueRef zero = ki(e, 0);
  LLVMValueRef odd =
      LLVMBuildICmp(e->b, LLVMIntNE, LLVMBuildAnd(e->b, quad, ki(e, 1), ""), zero, "");
  LLVMValueRef neg =
      LLVMBuildICmp(e->b, LLVMIntNE, LLVMBuildAnd(e->b, quad, ki(e, 2), ""), zero, "");
  LLVMValueRef v = sel(e, odd, c, s);
  v = sel(e, neg, LLVMBuildFNeg(e->b, v, ""), v);
  v = clamp(e, v, -1.0, 1.0);
  if (!is_cos) /* sin(x) rounds to x here; also keeps the sign of -0 */
    v = sel(e, fcmp(e, LLVMRealOLT, fabs1(e, x), kf(e, e->f64 ? 0x1p-27 : 0x1p-12)), x, v);
  /* sin/cos(+-inf) and NaN are NaN */
  return sel(e, fcmp(e, LLVMRealUEQ, fabs1(e, x), kf(e, __builtin_inf())),
             add(e, x, kf(e, __builtin_nan(""))), v);
}

/* ---- entry ------------------------------------------------------------------------------- */

LLVMValueRef cg_math_emit(LLVMBuilderRef b, cg_math_fn fn, LLVMValueRef x) {
  if (!b || !x) return NULL;
  LLVMBasicBlockRef bb = LLVMGetInsertBlock(b);
  if (!bb) return NULL;
  em e = {.b = b, .ty = LLVMTypeOf(x)};
  e.m = LLVMGetGlobalParent(LLVMGetBasicBlockParent(bb));
  e.c = LLVMGetTypeContext(e.ty);
  e.ety = e.ty;
  if (LLVMGetTypeKind(e.ty) == LLVMVectorTypeKind) {
    e.lanes = LLVMGetVectorSize(e.ty);
    e.ety = LLVMGetElementType(e.ty);
  }
  LLVMTypeKind k = LLVMGetTypeKind(e.ety);
  if (k != LLVMFloatTypeKind && k != LLVMDoubleTypeKind) return NULL;
  e.f64 = k == LLVMDoubleTypeKind;
  e.iety = LLVMIntTypeInContext(e.c, e.f64 ? 64 : 32);
  e.ity = e.lanes ? LLVMVectorType(e.iety, e.lanes) : e.iety;
  switch (fn) {
  case CG_MATH_EXP: return emit_exp(&e, x);
  case CG_MATH_LOG: return emit_log(&e, x);
  case CG_MATH_TANH: return emit_tanh(&e, x);
  case CG_MATH_LOGISTIC: return emit_logistic(&e, x);
  case CG_MATH_ERF: return emit_erf(&e, x);
  case CG_MATH_SIN: return emit_sincos(&e, x, 0);
  case CG_MATH_COS: return emit_sincos(&e, x, 1);
  case CG_MATH_COUNT: break;
  }
  return NULL;
}

const char *cg_math_name(cg_math_fn fn) {
  switch (fn) {
#define CG_MATH_CASE(name, text)                                                                   \
  case name: return text;
    CG_MATH_DEF(CG_MATH_CASE)
#undef CG_MATH_CASE
  case CG_MATH_COUNT: break;
  }
  return NULL;
}
