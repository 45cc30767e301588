/* llvm_math.c: exp, log, tanh, logistic, erf, sin, cos, log1p, expm1, erf_inv, atan2 as
 * straight-line LLVM IR (Cody-Waite
 * reduction, minimax polynomials fitted by Remez exchange, selects for edge values). */
#include "codegen/llvm_math.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Why straight-line code: the loop vectorizer widens arithmetic, compares and selects to any
   width, but turns a libm call into one scalar call per lane. Both sides of a branch are
   computed and joined by select; NaN inputs flow through ordered compares (which are false
   for NaN) into the result, and every select below is written so that a NaN is not replaced.
   Two kinds of multiply-add: fma3 (llvm.fma) where the product must be exact, in the Cody-Waite
   reduction steps and the few error terms that cancel against a rounded product, and in exp's
   and tanh's last step 1 + r P, where a second rounding would break their bounds; mad
   (llvm.fmuladd) everywhere else, Horner steps above all. On a target with FMA both are one
   vfmadd, so the code and docs/MATH.md's figures are the same; without FMA, fma_expand.c makes
   each llvm.fma an exact Dekker product (~25 operations), while a mad is a multiply and an add,
   within the bounds docs/MATH.md gives for such targets. */

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
static LLVMValueRef mad(em *e, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMValueRef args[3] = {a, b, c};
  return intrinsic(e, "llvm.fmuladd", args, 3);
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
    r = mad(e, r, x, kf(e, c[i]));
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

/* summand: exp(x) for a value that is only ever added to a constant c with |c| >= 2^-40
   (1 + exp(-x), the logistic a user writes out). There results below the normal range round away
   in the sum, so x is clamped at -86.5 (f64 -707), where 2^(n - 1) is still normal, and the
   result is (2 p) 2^(n - 1) in one multiply: 2 p comes exactly from the doubled coefficients, the
   product is exact or overflows to inf as the two factors below do. So it is bit for bit exp(x)
   from the clamp up (every result there is normal), and a normal number under 2^-124.6 (f64
   2^-1019.9) below it, far under half an ulp of c, so c + it = c + exp(x).
   low: exp(x) where x <= 43 (f64 354) whenever the result is read (exp(-|x|) in the logistic,
   exp(log(erfc)) in erf), so that the factors for x < 0 serve every x: 2^(n + 64) stays normal
   (f64 2^(n + 512)) and is one shift as for a summand; the x >= 0 factors give the same bits
   (both products are exact there). Saves the compare, the select and an add. Its p is computed
   already scaled by 2^-64 (f64 2^-512), from coefficients so scaled: every Horner step is the
   unscaled one times that power of 2 (the values stay far above the subnormals), so p 2^-64 is
   exact and the one multiply by 2^(n + 64) rounds as the two did.
   nonpos: exp(x) for x <= 0 or NaN (x - max(x), -abs(x)): low without the upper clamp.
   The lower clamp (but a summand's) is where the factor 2^(n + 64) (f64 2^(n + 512)) has exponent
   field 0, i.e. is +0: far below where exp rounds to 0 (-103.97, f64 -745.1), the result is then
   0 * p, exact. A clamp where the factor is normal gives the same 0 through a product that
   underflows, which Intel cores run as a microcode assist of ~150 cycles: a causal attention's
   softmax, half its entries masked to -1e30, ran 9x slower for it. */
typedef enum { EXP_ANY, EXP_SUMMAND, EXP_LOW, EXP_NONPOS } exp_kind;

static LLVMValueRef emit_exp_as(em *e, LLVMValueRef x, exp_kind kind) {
  const fmt_info *f = e->f64 ? &FMT64 : &FMT32;
  bool summand = kind == EXP_SUMMAND, low = kind == EXP_LOW || kind == EXP_NONPOS;
  int down = e->f64 ? 512 : 64;
  double lo = summand ? (e->f64 ? -707.0 : -86.5) : (e->f64 ? -1064.0 : -132.5); /* n -1535, -191 */
  double hi = kind == EXP_LOW ? (e->f64 ? 354.0 : 43.0) : e->f64 ? 710.0 : 89.0;
  double log2e = e->f64 ? 1.4426950408889634 : 1.4426950216293335;
  double ln2_hi = e->f64 ? 0.6931471805599453 : 0.6931471824645996;
  double ln2_lo = e->f64 ? 2.3190468138462996e-17 : -1.9046542121259336e-09;
  LLVMValueRef xc = kind == EXP_NONPOS
                        ? sel(e, fcmp(e, LLVMRealOLT, x, kf(e, lo)), kf(e, lo), x)
                        : clamp(e, x, lo, hi);
  /* a summand's t also holds the exponent field of 2^(n - 1) in its low bits (round_m plus
     bias - 1: n - 1 + bias stays in [1, 2 bias - 1] after the clamp), so that 2^(n - 1) is one
     shift; the sum rounds to the same integer, as no x log2e is ever half way between two */
  double magic = summand ? f->round_m + f->bias - 1
                 : low ? f->round_m + f->bias + down
                       : f->round_m;
  LLVMValueRef t = mad(e, xc, kf(e, log2e), kf(e, magic));
  LLVMValueRef nf = sub(e, t, kf(e, magic));
  LLVMValueRef r = fma3(e, nf, kf(e, -ln2_hi), xc);
  r = mad(e, nf, kf(e, -ln2_lo), r);
  const double *coef = e->f64 ? EXP64_P : EXP32_P;
  int n_coef = e->f64 ? 11 : 6;
  if (summand) {
    double twice[11];
    for (int i = 0; i < n_coef; i++) twice[i] = 2 * coef[i];
    LLVMValueRef p2 = fma3(e, poly(e, r, twice, n_coef), r, kf(e, 2.0));
    return mul(e, p2, as_float(e, LLVMBuildShl(e->b, as_int(e, t), ki(e, f->mant), "")));
  }
  double scale_down = e->f64 ? 0x1p-512 : 0x1p-64;
  if (low) {
    double scaled[11];
    for (int i = 0; i < n_coef; i++) scaled[i] = coef[i] * scale_down;
    LLVMValueRef p_down = fma3(e, poly(e, r, scaled, n_coef), r, kf(e, scale_down));
    return mul(e, p_down, as_float(e, LLVMBuildShl(e->b, as_int(e, t), ki(e, f->mant), "")));
  }
  LLVMValueRef p = fma3(e, poly(e, r, coef, n_coef), r, kf(e, 1.0));
  LLVMValueRef n = LLVMBuildSub(e->b, as_int(e, t), as_int(e, kf(e, f->round_m)), "");
  LLVMValueRef neg = fcmp(e, LLVMRealOLT, xc, kf(e, 0.0));
  LLVMValueRef s1 = pow2i(e, f, LLVMBuildAdd(e->b, n, sel(e, neg, ki(e, down), ki(e, -1)), ""));
  LLVMValueRef s2 = sel(e, neg, kf(e, scale_down), kf(e, 2.0));
  return mul(e, mul(e, p, s1), s2);
}

static LLVMValueRef emit_exp(em *e, LLVMValueRef x) { return emit_exp_as(e, x, EXP_ANY); }

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
  LLVMValueRef t = mad(e, s, add(e, hfsq, R), mul(e, kf_, kf(e, ln2_lo)));
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

const double cg_tanh32_p[4] = {-0.3333294689655304, 0.13320724666118622,
                              -0.05267181247472763, 0.016437580808997154};
const double cg_tanh32_e[6] = {-2.0, 1.999999761581421, -1.3333144187927246, 0.666688084602356,
                              -0.2679738998413086, 0.08859916776418686};
static const double TANH64_P[] = {
    -0.3333333333333333,   0.13333333333333072,   -0.05396825396778458,
    0.021869488497610775,  -0.008863233801032069, 0.0035920821156481663,
    -0.001455090718411639, 0.000582786569452815,  -0.0001997314284034809};

static LLVMValueRef emit_tanh(em *e, LLVMValueRef x) {
  LLVMValueRef a = fabs1(e, x);
  LLVMValueRef a2 = mul(e, a, a);
  LLVMValueRef P = e->f64 ? poly(e, a2, TANH64_P, 9) : poly(e, a2, cg_tanh32_p, 4);
  /* a^3 underflows to 0 for tiny a, where tanh rounds to a */
  LLVMValueRef small = mad(e, mul(e, a, a2), P, a);
  LLVMValueRef big;
  if (e->f64) {
    LLVMValueRef ex = emit_exp(e, add(e, a, a));
    big = sub(e, kf(e, 1.0), fdiv(e, kf(e, 2.0), add(e, ex, kf(e, 1.0))));
  } else {
    const fmt_info *f = &FMT32;
    /* NaN stays NaN */
    LLVMValueRef ac = sel(e, fcmp(e, LLVMRealOGT, a, kf(e, 9.125)), kf(e, 9.125), a);
    /* t = round_m + bias - n: its low bits are the exponent field of 2^-n (-n + bias in
       [129, 154]), and n as a float is exact */
    double magic = f->round_m + f->bias;
    LLVMValueRef t = mad(e, ac, kf(e, 2 * 1.4426950216293335), kf(e, magic));
    LLVMValueRef nf = sub(e, kf(e, magic), t);
    LLVMValueRef r = fma3(e, nf, kf(e, 0.5 * 0.6931471824645996), ac);
    LLVMValueRef p = fma3(e, r, poly(e, r, cg_tanh32_e, 6), kf(e, 1.0));
    /* w/(w + 1) = p/(p + 2^-n) exactly (scaling by 2^n commutes with rounding here), and
       2^-n in [4, 2^27] costs no multiply: one shift */
    LLVMValueRef pow2_mn = as_float(e, LLVMBuildShl(e->b, as_int(e, t), ki(e, f->mant), ""));
    LLVMValueRef q = fdiv(e, p, add(e, p, pow2_mn));
    big = mad(e, q, kf(e, -2.0), kf(e, 1.0));
  }
  LLVMValueRef y = sel(e, fcmp(e, LLVMRealOLT, a, kf(e, e->f64 ? 0.3 : 0.55)), small, big);
  return copysign2(e, y, x); /* keeps -0; NaN comes through the big branch */
}

/* ---- logistic ----------------------------------------------------------------------------
   With t = exp(-|x|) in (0, 1]: 1/(1+t) for x >= 0 and t/(1+t) for x < 0, so that no exp
   overflows and results down in the subnormal range keep their digits. */

static LLVMValueRef emit_logistic(em *e, LLVMValueRef x) {
  LLVMValueRef t = emit_exp_as(e, LLVMBuildFNeg(e->b, fabs1(e, x), ""), EXP_NONPOS);
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
  LLVMValueRef small = mad(e, x, poly(e, mul(e, x, x), ERF32_SMALL, 7), x);
  LLVMValueRef ac = clamp(e, a, 0.0, 4.0);
  LLVMValueRef h = poly(e, sub(e, ac, kf(e, 2.5)), ERF32_TAIL, 8);
  /* log(erfc) <= -1.8 on the branch's range [1, 4] */
  LLVMValueRef erfc = emit_exp_as(e, fma3(e, LLVMBuildFNeg(e->b, ac, ""), ac, h), EXP_LOW);
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
  LLVMValueRef frac = add(e, sub(e, p, q), mad(e, x, kf(e, two_over_pi_lo), perr));
  q = add(e, q, sel(e, fcmp(e, LLVMRealOGT, frac, kf(e, 0.5)), kf(e, 1.0), kf(e, 0.0)));
  q = sub(e, q, sel(e, fcmp(e, LLVMRealOLT, frac, kf(e, -0.5)), kf(e, 1.0), kf(e, 0.0)));
  LLVMValueRef r = x;
  for (int i = 0; i < 3; i++)
    r = i < 2 ? fma3(e, q, kf(e, -pio2[i]), r) : mad(e, q, kf(e, -pio2[i]), r);
  r = clamp(e, r, -0.8, 0.8);
  /* q mod 4 in floating point works for every finite q; inf/NaN give NaN, replaced by 0 before
     the conversion (fptosi of NaN would be poison). */
  LLVMValueRef qm = mad(e, floor1(e, mul(e, q, kf(e, 0.25))), kf(e, -4.0), q);
  qm = sel(e, is_nan(e, qm), kf(e, 0.0), qm);
  LLVMValueRef quad = LLVMBuildFPToSI(e->b, qm, e->ity, "");
  if (is_cos) quad = LLVMBuildAdd(e->b, quad, ki(e, 1), "");
  LLVMValueRef y = mul(e, r, r);
  LLVMValueRef s =
      mad(e, mul(e, r, y), e->f64 ? poly(e, y, SIN64_S, 6) : poly(e, y, SIN32_S, 3), r);
  LLVMValueRef c = mad(e, mul(e, y, y), e->f64 ? poly(e, y, COS64_C, 6) : poly(e, y, COS32_C, 3),
                        mad(e, y, kf(e, -0.5), kf(e, 1.0)));
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


/* ---- log1p -------------------------------------------------------------------------------
   u = 1 + x rounded, then log1p(x) = log(u) + (x - (u - 1)) / u: the second term is the
   rounding error of 1 + x (exact), divided by u, which is log's slope there (Goldberg's trick,
   "What every computer scientist should know about floating-point", theorem 4 in spirit).
   u == 1 gives x itself (tiny x, -0); u == 0 (x = -1) gives -inf; x = +inf gives inf. */

static LLVMValueRef emit_log1p(em *e, LLVMValueRef x) {
  double inf = __builtin_inf();
  LLVMValueRef u = add(e, kf(e, 1.0), x);
  LLVMValueRef c = fdiv(e, sub(e, x, sub(e, u, kf(e, 1.0))), u);
  LLVMValueRef y = add(e, emit_log(e, u), c);
  y = sel(e, fcmp(e, LLVMRealOEQ, u, kf(e, 1.0)), x, y);
  y = sel(e, fcmp(e, LLVMRealOEQ, u, kf(e, 0.0)), kf(e, -inf), y);
  return sel(e, fcmp(e, LLVMRealOEQ, x, kf(e, inf)), x, y);
}

/* ---- expm1 -------------------------------------------------------------------------------
   x = n ln2 + r as in exp (|r| <= ln2/2), e = expm1(r) = r + r^2 P(r) with P the Taylor
   coefficients 1/2! .. 1/7! (f64: .. 1/13!; the first omitted term is below 2^-26 (2^-56) of r
   on this interval), then expm1(x) = 2^n (e + (1 - 2^-n)): 1 - 2^-n is exact for
   abs(n) <= mantissa bits and rounds to 1 beyond (where the result is exp's), so the only
   roundings are e's, the one addition and nothing for n = 0 (e itself). x is clamped to
   [-18, 89] (f64 [-40, 710]): below, the result rounds to -1; above, the two-factor 2^n
   overflows to inf as exp's does. Tiny x (0, -0, subnormals) is returned by a select. */

static const double EXPM1_TAYLOR[] = {
    0.5, 0.16666666666666666, 0.041666666666666664, 0.008333333333333333, 0.001388888888888889,
    0.0001984126984126984, 2.48015873015873e-05, 2.7557319223985893e-06, 2.755731922398589e-07,
    2.505210838544172e-08, 2.08767569878681e-09, 1.6059043836821613e-10};

static LLVMValueRef emit_expm1(em *e, LLVMValueRef x) {
  const fmt_info *f = e->f64 ? &FMT64 : &FMT32;
  double log2e = e->f64 ? 1.4426950408889634 : 1.4426950216293335;
  double ln2_hi = e->f64 ? 0.6931471805599453 : 0.6931471824645996;
  double ln2_lo = e->f64 ? 2.3190468138462996e-17 : -1.9046542121259336e-09;
  LLVMValueRef xc = clamp(e, x, e->f64 ? -40.0 : -18.0, e->f64 ? 710.0 : 89.0);
  LLVMValueRef t = mad(e, xc, kf(e, log2e), kf(e, f->round_m));
  LLVMValueRef nf = sub(e, t, kf(e, f->round_m));
  LLVMValueRef n = LLVMBuildSub(e->b, as_int(e, t), as_int(e, kf(e, f->round_m)), "");
  LLVMValueRef r = fma3(e, nf, kf(e, -ln2_hi), xc);
  r = mad(e, nf, kf(e, -ln2_lo), r);
  LLVMValueRef em1 = mad(e, mul(e, r, r), poly(e, r, EXPM1_TAYLOR, e->f64 ? 12 : 6), r);
  /* 2^-n with n capped at mantissa + 2, where 1 - 2^-n has rounded to 1 already */
  LLVMValueRef cap = ki(e, f->mant + 2);
  LLVMValueRef ncap = sel(e, LLVMBuildICmp(e->b, LLVMIntSGT, n, cap, ""), cap, n);
  LLVMValueRef c = sub(e, kf(e, 1.0), pow2i(e, f, LLVMBuildNeg(e->b, ncap, "")));
  LLVMValueRef s1 = pow2i(e, f, LLVMBuildSub(e->b, n, ki(e, 1), ""));
  LLVMValueRef y = mul(e, mul(e, add(e, em1, c), s1), kf(e, 2.0));
  /* expm1(x) rounds to x below 2^-25 (f64 2^-54), where halving first would lose subnormals */
  return sel(e, fcmp(e, LLVMRealOLT, fabs1(e, x), kf(e, e->f64 ? 0x1p-54 : 0x1p-25)), x, y);
}

/* ---- erf_inv -----------------------------------------------------------------------------
   Giles, "Approximating the erfinv function" (GPU Computing Gems Jade, 2011): with
   w = -log((1 - x)(1 + x)), erfinv(x) = x P(w) with one polynomial per range of w: two in
   f32 (w < 5: P(w - 2.5); else P(sqrt(w) - 3), as XLA computes jax.scipy.special.erfinv and
   jax.random.normal), three in f64 (w < 6.25, < 16, beyond). abs(x) = 1 gives +-inf,
   abs(x) > 1 NaN (log of a negative), 0 and -0 themselves. */

static const double ERFINV32_A[] = {1.50140941,     0.246640727,   -0.00417768164,
                                    -0.00125372503, 0.00021858087, -4.39150654e-06,
                                    -3.5233877e-06, 3.43273939e-07, 2.81022636e-08};
static const double ERFINV32_B[] = {2.83297682,    1.00167406,     0.00943887047,
                                    -0.0076224613, 0.00573950773,  -0.00367342844,
                                    0.00134934322, 0.000100950558, -0.000200214257};
static const double ERFINV64_A[] = {
    1.6536545626831027356,       0.24015818242558961693,      -0.0060336708714301490533,
    -0.00074070253416626697512,  0.0001867342080340571352,    -1.3882523362786468719e-05,
    -1.3654692000834678645e-06,  4.2347877827932403518e-07,   -2.9070369957882005086e-08,
    -4.1126339803469836976e-09,  1.051212273321532285e-09,    -5.4154120542946279317e-11,
    -1.2975133253453532498e-11,  2.6335093153082322977e-12,   -8.1519341976054721522e-14,
    -4.0545662729752068639e-14,  6.6376381343583238325e-15,   2.0972767875968561637e-17,
    -1.333171662854620906e-16,   1.115787767802518096e-17,    1.2858480715256400167e-18,
    -1.685059138182016589e-19,   -3.6444120640178196996e-21};
static const double ERFINV64_B[] = {
    3.0838856104922207635,      1.0052589676941592334,      0.005370914553590063617,
    -0.0037512085075692412107,  0.0024914420961078508066,   -0.0016882755560235047313,
    0.00095328937973738049703,  -0.0003550375203628474796,  2.4031110387097893999e-05,
    6.8284851459573175448e-05,  -4.7318229009055733981e-05, 1.2475304481671778723e-05,
    2.9234449089955446044e-06,  -4.013867526981545969e-06,  1.5027403968909827627e-06,
    1.8239629214389227755e-08,  -2.7517406297064545428e-07, 9.0756561938885390979e-08,
    2.2137376921775787049e-09};
static const double ERFINV64_C[] = {
    4.8499064014085844221,      1.0103004648645343977,      -0.00013871931833623122026,
    -0.00021503011930044477347, 7.5995277030017761139e-05,  -1.9681778105531670567e-05,
    4.5260625972231537039e-06,  -9.9298272942317002539e-07, 2.2900482228026654717e-07,
    -6.7711997758452339498e-08, 2.9147953450901080826e-08,  -1.4960026627149240478e-08,
    7.6157012080783393804e-09,  -3.7894654401267369937e-09, 1.5076572693500548083e-09,
    -2.5556418169965252055e-10, -2.7109920616438573243e-11};

static LLVMValueRef sqrt1(em *e, LLVMValueRef a) { return intrinsic(e, "llvm.sqrt", &a, 1); }

static LLVMValueRef emit_erf_inv(em *e, LLVMValueRef x) {
  LLVMValueRef a = fabs1(e, x);
  LLVMValueRef w =
      LLVMBuildFNeg(e->b, emit_log(e, mul(e, sub(e, kf(e, 1.0), a), add(e, kf(e, 1.0), a))), "");
  LLVMValueRef sw = sqrt1(e, w);
  LLVMValueRef p;
  if (!e->f64) {
    LLVMValueRef pa = poly(e, sub(e, w, kf(e, 2.5)), ERFINV32_A, 9);
    LLVMValueRef pb = poly(e, sub(e, sw, kf(e, 3.0)), ERFINV32_B, 9);
    p = sel(e, fcmp(e, LLVMRealOLT, w, kf(e, 5.0)), pa, pb);
  } else {
    LLVMValueRef pa = poly(e, sub(e, w, kf(e, 3.125)), ERFINV64_A, 23);
    LLVMValueRef pb = poly(e, sub(e, sw, kf(e, 3.25)), ERFINV64_B, 19);
    LLVMValueRef pc = poly(e, sub(e, sw, kf(e, 5.0)), ERFINV64_C, 17);
    p = sel(e, fcmp(e, LLVMRealOLT, w, kf(e, 6.25)), pa,
            sel(e, fcmp(e, LLVMRealOLT, w, kf(e, 16.0)), pb, pc));
  }
  LLVMValueRef y = mul(e, p, x);
  /* abs(x) = 1: w = inf makes p inf already; keep the exact answer explicit */
  return sel(e, fcmp(e, LLVMRealOEQ, a, kf(e, 1.0)), mul(e, x, kf(e, __builtin_inf())), y);
}

/* ---- atan2 -------------------------------------------------------------------------------
   t = min(abs(x), abs(y)) / max(...) in [0, 1]; t > tan(pi/8) is reduced to
   u = (t - 1)/(t + 1) (atan t = pi/4 + atan u), so abs(u) <= tan(pi/8), computed from the
   operands as (min - max)/(min + max); atan u = u + u z P(z),
   z = u^2, P minimax from fdlibm (s_atanf.c / s_atan.c, valid to 7/16). The octant then gives
   atan2 = k pi/4 + s atan(u) (k in 0..4, s = +-1; abs(y) > abs(x) reflects about pi/2, x < 0
   or x = -0 about pi), with k pi/4 in two parts so that it adds one rounding; the sign of y is
   put on last. 0/0 is read as t = 0 (atan2(+-0, +-0) = +-0 or +-pi) and inf/inf as t = 1
   (+-pi/4, +-3pi/4); a NaN operand gives NaN. */

static const double ATAN32_P[] = {-3.3333328366e-01, 1.9999158382e-01, -1.4253635705e-01,
                                  1.0648017377e-01, -6.1687607318e-02};
static const double ATAN64_P[] = {
    -3.33333333333329318027e-01, 1.99999999998764832476e-01,  -1.42857142725034663711e-01,
    1.11111104054623557880e-01,  -9.09088713343650656196e-02, 7.69187620504482999495e-02,
    -6.66107313738753120669e-02, 5.83357013379057348645e-02,  -4.97687799461593236017e-02,
    3.65315727442169155270e-02,  -1.62858201153657823623e-02};

static LLVMValueRef emit_atan2(em *e, LLVMValueRef y, LLVMValueRef x) {
  double inf = __builtin_inf();
  double pi4_hi = e->f64 ? 0.7853981633974483 : 0.7853981852531433;
  double pi4_lo = e->f64 ? 3.061616997868383e-17 : -2.1855695031547384e-08;
  LLVMValueRef ax = fabs1(e, x), ay = fabs1(e, y);
  LLVMValueRef swap = fcmp(e, LLVMRealOGT, ay, ax);
  LLVMValueRef mn = sel(e, swap, ax, ay), mx = sel(e, swap, ay, ax);
  LLVMValueRef t = fdiv(e, mn, mx);
  t = sel(e, fcmp(e, LLVMRealOEQ, mx, kf(e, 0.0)), kf(e, 0.0), t);
  t = sel(e, fcmp(e, LLVMRealOEQ, mn, kf(e, inf)), kf(e, 1.0), t);
  LLVMValueRef big = fcmp(e, LLVMRealOGT, t, kf(e, 0.4375));
  /* (mn - mx) / (mn + mx) = (t - 1)/(t + 1) without t's rounding (mn - mx is exact for
     t >= 1/2); scaled by 1/4 where mn + mx could overflow (exact: both are huge then) */
  LLVMValueRef sc = sel(e, fcmp(e, LLVMRealOGT, mx, kf(e, e->f64 ? 0x1p1000 : 0x1p120)),
                        kf(e, 0.25), kf(e, 1.0));
  LLVMValueRef mns = mul(e, mn, sc), mxs = mul(e, mx, sc);
  LLVMValueRef ub = fdiv(e, sub(e, mns, mxs), add(e, mns, mxs));
  ub = sel(e, fcmp(e, LLVMRealOEQ, mn, kf(e, inf)), kf(e, 0.0), ub); /* inf/inf: u = 0 */
  LLVMValueRef u = sel(e, big, ub, t);
  LLVMValueRef z = mul(e, u, u);
  LLVMValueRef P = e->f64 ? poly(e, z, ATAN64_P, 11) : poly(e, z, ATAN32_P, 5);
  LLVMValueRef at = mad(e, mul(e, u, z), P, u);
  /* the octant: k and s */
  LLVMValueRef k = sel(e, big, kf(e, 1.0), kf(e, 0.0)), s = kf(e, 1.0);
  k = sel(e, swap, sub(e, kf(e, 2.0), k), k);
  s = sel(e, swap, kf(e, -1.0), s);
  LLVMValueRef xneg = LLVMBuildICmp(e->b, LLVMIntSLT, as_int(e, x), ki(e, 0), "");
  k = sel(e, xneg, sub(e, kf(e, 4.0), k), k);
  s = sel(e, xneg, LLVMBuildFNeg(e->b, s, ""), s);
  LLVMValueRef r = fma3(e, k, kf(e, pi4_hi), mad(e, k, kf(e, pi4_lo), mul(e, s, at)));
  r = copysign2(e, r, y);
  return sel(e, fcmp(e, LLVMRealUNO, x, y), add(e, x, y), r);
}

/* ---- entry ------------------------------------------------------------------------------- */

/* An emitter for values of x's type at b's insertion point; false for a type it cannot do. */
static bool em_init(em *e, LLVMBuilderRef b, LLVMValueRef x) {
  if (!b || !x) return false;
  LLVMBasicBlockRef bb = LLVMGetInsertBlock(b);
  if (!bb) return false;
  memset(e, 0, sizeof *e);
  e->b = b;
  e->ty = LLVMTypeOf(x);
  e->m = LLVMGetGlobalParent(LLVMGetBasicBlockParent(bb));
  e->c = LLVMGetTypeContext(e->ty);
  e->ety = e->ty;
  if (LLVMGetTypeKind(e->ty) == LLVMVectorTypeKind) {
    e->lanes = LLVMGetVectorSize(e->ty);
    e->ety = LLVMGetElementType(e->ty);
  }
  LLVMTypeKind k = LLVMGetTypeKind(e->ety);
  if (k != LLVMFloatTypeKind && k != LLVMDoubleTypeKind) return false;
  e->f64 = k == LLVMDoubleTypeKind;
  e->iety = LLVMIntTypeInContext(e->c, e->f64 ? 64 : 32);
  e->ity = e->lanes ? LLVMVectorType(e->iety, e->lanes) : e->iety;
  return true;
}

LLVMValueRef cg_math_emit_exp_summand(LLVMBuilderRef b, LLVMValueRef x) {
  em e;
  return em_init(&e, b, x) ? emit_exp_as(&e, x, EXP_SUMMAND) : NULL;
}

LLVMValueRef cg_math_emit_exp_nonpos(LLVMBuilderRef b, LLVMValueRef x) {
  em e;
  return em_init(&e, b, x) ? emit_exp_as(&e, x, EXP_NONPOS) : NULL;
}

LLVMValueRef cg_math_emit(LLVMBuilderRef b, cg_math_fn fn, LLVMValueRef x) {
  em e;
  if (!em_init(&e, b, x)) return NULL;
  switch (fn) {
  case CG_MATH_EXP: return emit_exp(&e, x);
  case CG_MATH_LOG: return emit_log(&e, x);
  case CG_MATH_TANH: return emit_tanh(&e, x);
  case CG_MATH_LOGISTIC: return emit_logistic(&e, x);
  case CG_MATH_ERF: return emit_erf(&e, x);
  case CG_MATH_SIN: return emit_sincos(&e, x, 0);
  case CG_MATH_COS: return emit_sincos(&e, x, 1);
  case CG_MATH_LOG1P: return emit_log1p(&e, x);
  case CG_MATH_EXPM1: return emit_expm1(&e, x);
  case CG_MATH_ERF_INV: return emit_erf_inv(&e, x);
  case CG_MATH_ATAN2:
  case CG_MATH_COUNT: break;
  }
  return NULL;
}

LLVMValueRef cg_math_emit2(LLVMBuilderRef b, cg_math_fn fn, LLVMValueRef y, LLVMValueRef x) {
  em e;
  if (fn != CG_MATH_ATAN2 || !y || !em_init(&e, b, x) || LLVMTypeOf(y) != e.ty) return NULL;
  return emit_atan2(&e, y, x);
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
