/* interp.c: the reference interpreter, the oracle every pass and the LLVM backend are tested
 * against: evaluates an IR function on host buffers one op at a time, slowly and obviously.
 *
 * Semantics (XLA's, which JAX programs expect):
 * - Values live in their own dtype's storage. Float math is done in double and rounded to the
 *   value's dtype when stored, after every op (f16/bf16 through f32, as the kernels store them);
 *   integer math is done in int64 and wrapped to the dtype's width (two's complement); bool is
 *   0/1, and bool arithmetic stores (v != 0) (so add/max = or, mul/min = and).
 * - max/min propagate NaN (either operand NaN -> NaN); max(-0, +0) = +0, min(-0, +0) = -0.
 * - Unsigned dtypes (u8 u32 u64) compare, divide, min/max and convert as unsigned; a u64 is
 *   held in the int64 as its bits.
 * - Integer div truncates toward zero; x / 0 = -1 (all ones: 255 for u8); INT_MIN / -1 = INT_MIN.
 *   rem truncates (sign of the dividend, C's % and fmod); x % 0 = x; INT_MIN % -1 = 0.
 *   Integer pow: x^0 = 1; a negative exponent gives 0 unless the base is 1 (-> 1) or -1 (-> +-1).
 *   abs and neg of INT_MIN stay INT_MIN; floor of an integer is itself; sign: -1, 0, 1.
 * - Bitwise and/or/xor/not: logical on bool, on the bits otherwise. Shifts: an amount outside
 *   [0, width) (read as unsigned) gives 0 (left, logical) or the sign fill (arithmetic);
 *   arithmetic shifts read an unsigned value as signed of its width (as lax on uint32).
 * - clamp(lo, x, hi) = min(max(x, lo), hi) (NaN anywhere -> NaN). round: half to even. sign:
 *   NaN -> NaN, +-0 -> +-0, else +-1. is_finite: neither inf nor NaN. erf_inv: Newton-refined
 *   to double (interp.c's erf_inv); log1p, expm1, ceil, fmod (rem), atan2 from libm.
 * - convert: float -> int truncates toward zero and saturates (NaN -> 0; negatives -> 0 for
 *   unsigned: LLVM's fptosi.sat / fptoui.sat, as XLA); anything -> bool is (x != 0) (NaN ->
 *   true); int -> int wraps; int -> float goes through double.
 * - cmp on NaN: every direction is false except ne. select picks a where pred, else b.
 * - logistic(x) = 1 / (1 + exp(-x)); rsqrt(x) = 1 / sqrt(x); erf, exp, log, tanh, sin, cos,
 *   floor, pow from libm, in double.
 * - const: a splat of attr.value converted to the dtype as convert from f64 does. iota: element
 *   = its index along attr.axis, converted from i64. param: args[attr.axis].
 * - Reductions accumulate floats in double and integers in int64 (wrapping), then round once;
 *   empty axes give the identity: sum 0, max -inf (ints: the dtype's min; bool: false = or),
 *   min +inf (ints: the dtype's max; bool: true = and).
 * - dot accumulates in double (floats) or int64 (ints, wrapping) and rounds once; result dims =
 *   batch (in attr order), lhs free, rhs free (each in increasing dim order).
 * - transpose: result dim i = operand dim perm[i]. broadcast: operand dim i -> result dim
 *   dims.d[i], size-1 operand dims stretch. slice: start/limit/stride per dim. concat along
 *   attr.axis. reshape: row-major reinterpretation.
 * Each value's buffer is allocated when evaluated and freed after its last use. The interpreter
 * checks what it relies on (operand order, shapes, attributes in range) and returns
 * JIT_EINTERNAL for IR that breaks it, rather than reading out of bounds; ir_verify checks more.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"

/* One element: .f for float dtypes, .i (in the dtype's range; bool 0/1) for the others. */
typedef union scalar {
  double f;
  int64_t i;
} scalar;

/* ---- scalar semantics, shared by the interpreter and constant folding -------------------------- */

static int64_t int_min(jit_dtype d) {
  switch (d) {
  case JIT_I8: return INT8_MIN;
  case JIT_I32: return INT32_MIN;
  case JIT_I64: return INT64_MIN;
  default: return 0; /* bool, u8 */
  }
}

static int64_t int_max(jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return 1;
  case JIT_I8: return INT8_MAX;
  case JIT_U8: return UINT8_MAX;
  case JIT_I32: return INT32_MAX;
  case JIT_U32: return UINT32_MAX;
  case JIT_U64: return -1; /* all ones: u64 values are held as their bits */
  default: return INT64_MAX;
  }
}

static unsigned int_bits(jit_dtype d) { return (unsigned)jit_dtype_size(d) * 8; }

/* The dtype's value as an unsigned number (signed ones as their two's complement bits). */
static uint64_t int_bits_of(jit_dtype d, int64_t v) {
  unsigned w = int_bits(d);
  return w == 64 ? (uint64_t)v : (uint64_t)v & ((UINT64_C(1) << w) - 1);
}

/* The dtype's bits read as a signed number of its width (u32 0x80000000 -> -2^31). */
static int64_t int_signed_of(jit_dtype d, int64_t v) {
  unsigned w = int_bits(d);
  uint64_t u = int_bits_of(d, v), sign = UINT64_C(1) << (w - 1);
  return u & sign ? -(int64_t)(~u & (sign - 1)) - 1 : (int64_t)u;
}

/* a < b in the dtype's order (u64 compares its bits unsigned). */
static bool int_less(jit_dtype d, int64_t a, int64_t b) {
  return ir_dtype_is_unsigned(d) ? (uint64_t)a < (uint64_t)b : a < b;
}

/* v modulo 2^width, as the dtype's signed or unsigned value (no implementation-defined casts). */
static int64_t wrap_int(jit_dtype d, uint64_t v) {
  switch (d) {
  case JIT_BOOL: return v != 0;
  case JIT_U8: return (int64_t)(v & 0xffu);
  case JIT_I8: v &= 0xffu; return v >= 0x80u ? (int64_t)v - 0x100 : (int64_t)v;
  case JIT_I32: v &= 0xffffffffu; return v >= 0x80000000u ? (int64_t)v - 0x100000000 : (int64_t)v;
  case JIT_U32: return (int64_t)(v & 0xffffffffu);
  default: return v <= (uint64_t)INT64_MAX ? (int64_t)v : -(int64_t)~v - 1;
  }
}

static int64_t f64_to_int(jit_dtype d, double v) {
  if (d == JIT_BOOL) return v != 0;
  if (isnan(v)) return 0;
  if (d == JIT_U64) { /* saturating as LLVM's fptoui.sat, held as bits */
    if (v <= 0) return 0;
    if (v >= 0x1p64) return -1;
    return wrap_int(d, (uint64_t)v);
  }
  /* (double)int_max(I64) is 2^63, so >= catches everything that does not fit. */
  if (v <= (double)int_min(d)) return int_min(d);
  if (v >= (double)int_max(d)) return int_max(d);
  return (int64_t)v;
}

static scalar convert(jit_dtype from, jit_dtype to, scalar x) {
  scalar r;
  bool ff = ir_dtype_is_float(from), tf = ir_dtype_is_float(to);
  if (ff && tf) r.f = x.f;
  else if (ff) r.i = f64_to_int(to, x.f);
  else if (tf) r.f = from == JIT_U64 ? (double)(uint64_t)x.i : (double)x.i;
  else r.i = wrap_int(to, (uint64_t)x.i);
  return r;
}

/* erf^-1(y) in double: Giles' single-precision approximation ("Approximating the erfinv
   function", GPU Computing Gems, 2011) as the start, then Newton steps on erf (|y| < 1/2) or on
   erfc(x) = 1 - |y| (|y| >= 1/2, where 1 - |y| is exact and erf's slope vanishes). */
static double erf_inv(double y) {
  if (isnan(y) || y == 0) return y;
  double a = fabs(y);
  if (a > 1) return NAN;
  if (a == 1) return copysign(INFINITY, y);
  double w = -log((1 - a) * (1 + a)), p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * a, c = 1 - a;
  for (int i = 0; i < 4; i++) {
    double slope = 1.1283791670955126 * exp(-x * x); /* 2/sqrt(pi) e^(-x^2) */
    if (slope == 0) break;
    double step = a < 0.5 ? (erf(x) - a) / slope : (c - erfc(x)) / slope;
    if (!isfinite(step)) break;
    x -= step;
  }
  return copysign(x, y);
}

static double float_op(ir_op op, double a, double b) {
  switch (op) {
  case IR_NEG: return -a;
  case IR_ABS: return fabs(a);
  case IR_EXP: return exp(a);
  case IR_LOG: return log(a);
  case IR_SQRT: return sqrt(a);
  case IR_RSQRT: return 1.0 / sqrt(a);
  case IR_TANH: return tanh(a);
  case IR_LOGISTIC: return 1.0 / (1.0 + exp(-a));
  case IR_SIN: return sin(a);
  case IR_COS: return cos(a);
  case IR_ERF: return erf(a);
  case IR_FLOOR: return floor(a);
  case IR_CEIL: return ceil(a);
  case IR_ROUND: return nearbyint(a); /* ties to even in the default rounding mode */
  case IR_LOG1P: return log1p(a);
  case IR_EXPM1: return expm1(a);
  case IR_ERF_INV: return erf_inv(a);
  case IR_SIGN: return isnan(a) || a == 0 ? a : copysign(1.0, a);
  case IR_REM: return fmod(a, b);
  case IR_ATAN2: return atan2(a, b);
  case IR_ADD: return a + b;
  case IR_SUB: return a - b;
  case IR_MUL: return a * b;
  case IR_DIV: return a / b;
  case IR_POW: return pow(a, b);
  case IR_MAX:
  case IR_MIN:
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    if (a != b) return (a > b) == (op == IR_MAX) ? a : b;
    /* Equal: only the zeros' signs can differ; keep max/min commutative. */
    return (signbit(a) != 0) == (op == IR_MAX) ? b : a;
  default: return NAN;
  }
}

static int64_t int_pow(jit_dtype d, int64_t a, int64_t b) {
  if (b < 0 && !ir_dtype_is_unsigned(d)) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  for (uint64_t e = (uint64_t)b; e; e >>= 1) {
    if (e & 1) r *= base;
    base *= base;
  }
  return wrap_int(d, r);
}

/* XLA's shifts: an amount outside [0, width) (read unsigned) shifts every bit out: 0 for the
   left and logical shifts, the sign for the arithmetic one. Never C's undefined shifts. */
static int64_t int_shift(ir_op op, jit_dtype d, int64_t a, int64_t b) {
  unsigned w = int_bits(d);
  uint64_t n = int_bits_of(d, b);
  bool out = n >= w;
  switch (op) {
  case IR_SHL: return out ? 0 : wrap_int(d, int_bits_of(d, a) << n);
  case IR_SHR_LOGICAL: return out ? 0 : wrap_int(d, int_bits_of(d, a) >> n);
  default: {
    int64_t s = int_signed_of(d, a);
    unsigned k = out ? w - 1 : (unsigned)n;
    uint64_t r = s < 0 ? ~(~(uint64_t)s >> k) : (uint64_t)s >> k;
    return wrap_int(d, r);
  }
  }
}

/* Unsigned arithmetic so that i64 overflow wraps instead of being undefined. */
static int64_t int_op(ir_op op, jit_dtype d, int64_t a, int64_t b) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  bool u = ir_dtype_is_unsigned(d);
  switch (op) {
  case IR_NEG: return wrap_int(d, 0u - ua);
  case IR_ABS: return a < 0 && !u ? wrap_int(d, 0u - ua) : a;
  case IR_SIGN: return u ? a != 0 : (a > 0) - (a < 0);
  case IR_FLOOR: return a;
  case IR_ADD: return wrap_int(d, ua + ub);
  case IR_SUB: return wrap_int(d, ua - ub);
  case IR_MUL: return wrap_int(d, ua * ub);
  case IR_DIV:
    if (b == 0) return wrap_int(d, UINT64_MAX);
    if (u) return wrap_int(d, ua / ub);
    if (b == -1) return wrap_int(d, 0u - ua); /* INT_MIN / -1 = INT_MIN, without the trap */
    return wrap_int(d, (uint64_t)(a / b));
  case IR_REM: /* truncated; x % 0 = x and INT_MIN % -1 = 0, as XLA */
    if (b == 0) return a;
    if (u) return wrap_int(d, ua % ub);
    if (b == -1) return 0;
    return a % b;
  case IR_MAX: return int_less(d, a, b) ? b : a;
  case IR_MIN: return int_less(d, b, a) ? b : a;
  case IR_POW: return int_pow(d, a, b);
  case IR_NOT: return d == JIT_BOOL ? !a : wrap_int(d, ~ua);
  case IR_AND: return wrap_int(d, ua & ub);
  case IR_OR: return wrap_int(d, ua | ub);
  case IR_XOR: return wrap_int(d, ua ^ ub);
  case IR_THREEFRY: return (int64_t)ir_threefry2x32(ua, ub);
  case IR_SHL:
  case IR_SHR_LOGICAL:
  case IR_SHR_ARITH: return int_shift(op, d, a, b);
  default: return 0;
  }
}

static bool cmp_holds(jit_cmp_op c, jit_dtype d, scalar x, scalar y) {
  if (ir_dtype_is_float(d)) {
    double a = x.f, b = y.f;
    switch (c) {
    case JIT_EQ: return a == b;
    case JIT_NE: return a != b;
    case JIT_LT: return a < b;
    case JIT_LE: return a <= b;
    case JIT_GT: return a > b;
    case JIT_GE: return a >= b;
    }
    return false;
  }
  int64_t a = x.i, b = y.i;
  switch (c) {
  case JIT_EQ: return a == b;
  case JIT_NE: return a != b;
  case JIT_LT: return int_less(d, a, b);
  case JIT_LE: return !int_less(d, b, a);
  case JIT_GT: return int_less(d, b, a);
  case JIT_GE: return !int_less(d, a, b);
  }
  return false;
}

/* The one definition of an elementwise op on one element. Operands are of in_dt (select: the
   predicate is bool, the choices out_dt). A float result is returned unrounded: storing it rounds
   it, and reductions keep accumulating in double. */
static scalar ew_eval(ir_op op, jit_cmp_op cmp, jit_dtype in_dt, jit_dtype out_dt,
                      const scalar *x) {
  scalar r;
  bool binary = ir_op_arity[op] == 2;
  switch (op) {
  case IR_SELECT: return x[0].i ? x[1] : x[2];
  case IR_CONVERT: return convert(in_dt, out_dt, x[0]);
  case IR_CMP: r.i = cmp_holds(cmp, in_dt, x[0], x[1]); return r;
  case IR_IS_FINITE: r.i = ir_dtype_is_float(in_dt) ? isfinite(x[0].f) : 1; return r;
  case IR_CLAMP: { /* lax.clamp(lo, x, hi) = min(max(x, lo), hi) */
    scalar lo_x[2] = {x[1], x[0]};
    scalar m[2] = {ew_eval(IR_MAX, cmp, in_dt, in_dt, lo_x), x[2]};
    return ew_eval(IR_MIN, cmp, in_dt, out_dt, m);
  }
  default: break;
  }
  if (ir_dtype_is_float(in_dt)) {
    r.f = float_op(op, x[0].f, binary ? x[1].f : 0);
    return convert(JIT_F64, out_dt, r);
  }
  if (op == IR_FLOOR || !(ir_op_flags[op] & IR_UNARY_F)) {
    r.i = int_op(op, in_dt, x[0].i, binary ? x[1].i : 0);
    return convert(in_dt, out_dt, r);
  }
  /* Float math on an integer operand: not produced by the tracer; done in double. */
  r.f = float_op(op, (double)x[0].i, 0);
  return convert(JIT_F64, out_dt, r);
}

static scalar load_scalar(jit_dtype d, const void *buf, int64_t i) {
  scalar s;
  if (ir_dtype_is_float(d)) s.f = ir_load_f64(d, buf, i);
  else if (d == JIT_BOOL) s.i = ((const unsigned char *)buf)[i] != 0;
  else s.i = ir_load_i64(d, buf, i);
  return s;
}

static void store_scalar(jit_dtype d, void *buf, int64_t i, scalar s) {
  if (ir_dtype_is_float(d)) ir_store_f64(d, buf, i, s.f);
  else ir_store_i64(d, buf, i, s.i);
}

/* For SELECT the choices are taken as out_dt (whatever in_dt says) and the predicate as bool.
   An i64 beyond 2^53 cannot come in or go out exactly as a double; the interpreter itself keeps
   i64 exact. Not an elementwise op: NaN. */
double ir_eval_elementwise(ir_op op, const ir_attr *attr, jit_dtype in_dt, jit_dtype out_dt,
                           const double *operands) {
  if ((unsigned)op >= IR_N_OPS || !(ir_op_flags[op] & IR_EW) || !ir_dtype_valid(in_dt) ||
      !ir_dtype_valid(out_dt))
    return NAN;
  /* Operands go through the storage of their dtype, exactly as the interpreter holds them. */
  scalar x[3];
  unsigned char tmp[8];
  for (int k = 0; k < ir_op_arity[op]; k++) {
    jit_dtype d = op != IR_SELECT ? in_dt : k == 0 ? JIT_BOOL : out_dt;
    scalar v = convert(JIT_F64, d, (scalar){.f = operands[k]});
    store_scalar(d, tmp, 0, v);
    x[k] = load_scalar(d, tmp, 0);
  }
  scalar r = ew_eval(op, attr ? attr->cmp : JIT_EQ, in_dt, out_dt, x);
  if (!ir_dtype_is_float(out_dt)) return out_dt == JIT_U64 ? (double)(uint64_t)r.i : (double)r.i;
  ir_store_f64(out_dt, tmp, 0, r.f);
  return ir_load_f64(out_dt, tmp, 0);
}

/* ---- buffers and index walks ------------------------------------------------------------------- */

typedef struct ival {
  const unsigned char *data; /* the value's elements (a param's points into args) */
  unsigned char *own;        /* malloc'd buffer to free, or NULL */
} ival;

static unsigned char empty_buf[8]; /* data of zero-size params given as NULL */

JIT_PRINTF(3, 4)
static jit_status bad(const ir_func *f, ir_ref r, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  const ir_ins *in = &f->ins[r];
  const char *op = (unsigned)in->op < IR_N_OPS ? ir_op_name[in->op] : "?";
  if (in->loc.file)
    return jit_error(JIT_EINTERNAL, "interp: @%s: %%%u = %s at %s:%d: %s", f->name, r, op,
                     in->loc.file, in->loc.line, why);
  return jit_error(JIT_EINTERNAL, "interp: @%s: %%%u = %s: %s", f->name, r, op, why);
}

/* Checks t (dtype, rank, dims, and that no product of its dims overflows) and its byte size. */
static bool type_bytes(const ir_type *t, size_t *bytes) {
  if (!ir_dtype_valid(t->dtype) || t->rank < 0 || t->rank > IR_MAX_RANK) return false;
  int64_t n = 1, nonzero = 1;
  for (int i = 0; i < t->rank; i++) {
    int64_t d = t->dims[i];
    if (d < 0) return false;
    if (d == 0) n = 0;
    if (d > 1 && nonzero > INT64_MAX / d) return false;
    if (d > 1) nonzero *= d;
  }
  if (n) n = nonzero;
  size_t es = jit_dtype_size(t->dtype);
  if (es == 0 || (uint64_t)n > SIZE_MAX / es) return false;
  *bytes = (size_t)n * es;
  return true;
}

static void row_major_strides(const ir_type *t, int64_t *str) {
  int64_t s = 1;
  for (int i = t->rank; i-- > 0;) {
    str[i] = s;
    s *= t->dims[i];
  }
}

static bool same_shape(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* A row-major walk over dims, tracking a source and a destination element offset through
   arbitrary strides (0 = broadcast). Offsets stay inside the buffers as long as a stride whose
   dim has size 1 is 0 (walk_init does that), since the last step adds it then takes it back. */
typedef struct walk {
  int rank;
  int64_t n; /* elements to visit */
  int64_t dims[IR_MAX_RANK], idx[IR_MAX_RANK], sstr[IR_MAX_RANK], dstr[IR_MAX_RANK];
  int64_t s, d;
} walk;

static void walk_init(walk *w, int rank, const int64_t *dims, int64_t s0, const int64_t *sstr,
                      int64_t d0, const int64_t *dstr) {
  memset(w, 0, sizeof *w);
  w->rank = rank;
  w->n = 1;
  w->s = s0;
  w->d = d0;
  for (int i = 0; i < rank; i++) {
    w->dims[i] = dims[i];
    w->n *= dims[i];
    w->sstr[i] = dims[i] > 1 ? sstr[i] : 0;
    w->dstr[i] = dims[i] > 1 && dstr ? dstr[i] : 0;
  }
}

static void walk_next(walk *w) {
  for (int k = w->rank; k-- > 0;) {
    if (++w->idx[k] < w->dims[k]) {
      w->s += w->sstr[k];
      w->d += w->dstr[k];
      return;
    }
    w->idx[k] = 0;
    w->s -= w->sstr[k] * (w->dims[k] - 1);
    w->d -= w->dstr[k] * (w->dims[k] - 1);
  }
}

/* dst (contiguous unless dstr is given) <- src through the walk; both of dtype size es. */
static void copy_walk(size_t es, walk *w, unsigned char *dst, const unsigned char *src,
                      bool dst_walks) {
  for (int64_t t = 0; t < w->n; t++) {
    int64_t d = dst_walks ? w->d : t;
    memcpy(dst + (size_t)d * es, src + (size_t)w->s * es, es);
    walk_next(w);
  }
}

/* ---- op evaluation ------------------------------------------------------------------------------ */

typedef struct opnd {
  const ir_type *t;
  const unsigned char *data;
} opnd;

static jit_status eval_sort(const ir_ins *in, const opnd *a, void *out) {
  enum { MAX_INLINE = 8 };
  const ir_type *ts_small[MAX_INLINE], **ts = ts_small;
  const void *ds_small[MAX_INLINE], **ds = ds_small;
  if (in->n_args > MAX_INLINE && (!(ts = malloc(in->n_args * sizeof *ts)) ||
                                  !(ds = malloc(in->n_args * sizeof *ds)))) {
    if (ts != ts_small) free(ts);
    return jit_error(JIT_ENOMEM, "interp: sort: out of memory");
  }
  for (uint32_t k = 0; k < in->n_args; k++) {
    ts[k] = a[k].t;
    ds[k] = a[k].data;
  }
  jit_status st = ir_sort_eval(ts, in->n_args, ds, (int)in->attr.axis, &in->attr.sort, out);
  if (ts != ts_small) free(ts);
  if (ds != ds_small) free(ds);
  return st;
}

static jit_status eval_elementwise(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_ins *in = &f->ins[r];
  const ir_type *t = ir_type_of(f, r);
  int n = (int)in->n_args;
  for (int k = 0; k < n; k++)
    if (!same_shape(a[k].t, t)) return bad(f, r, "operand %d's shape differs from the result's", k);
  jit_dtype in_dt = a[0].t->dtype;
  switch (in->op) {
  case IR_CONVERT: break;
  case IR_CMP:
    if (t->dtype != JIT_BOOL || a[1].t->dtype != in_dt) return bad(f, r, "dtypes do not match");
    break;
  case IR_IS_FINITE:
    if (t->dtype != JIT_BOOL) return bad(f, r, "dtypes do not match");
    break;
  case IR_SELECT:
    if (in_dt != JIT_BOOL || a[1].t->dtype != t->dtype || a[2].t->dtype != t->dtype)
      return bad(f, r, "dtypes do not match");
    in_dt = t->dtype;
    break;
  default:
    for (int k = 0; k < n; k++)
      if (a[k].t->dtype != t->dtype) return bad(f, r, "dtypes do not match");
  }
  int64_t numel = ir_type_numel(t);
  for (int64_t e = 0; e < numel; e++) {
    scalar x[3];
    for (int k = 0; k < n; k++) x[k] = load_scalar(a[k].t->dtype, a[k].data, e);
    store_scalar(t->dtype, out, e, ew_eval(in->op, in->attr.cmp, in_dt, t->dtype, x));
  }
  return JIT_OK;
}

static jit_status eval_iota(const ir_func *f, ir_ref r, unsigned char *out) {
  const ir_type *t = ir_type_of(f, r);
  int64_t axis = f->ins[r].attr.axis;
  if (t->rank == 0) { /* a scalar iota counts nothing: its one element is 0 */
    store_scalar(t->dtype, out, 0, convert(JIT_I64, t->dtype, (scalar){.i = 0}));
    return JIT_OK;
  }
  if (axis < 0 || axis >= t->rank) return bad(f, r, "axis %lld out of range", (long long)axis);
  int64_t str[IR_MAX_RANK];
  row_major_strides(t, str);
  int64_t numel = ir_type_numel(t);
  for (int64_t e = 0; e < numel; e++) {
    scalar i = {.i = e / str[axis] % t->dims[axis]};
    store_scalar(t->dtype, out, e, convert(JIT_I64, t->dtype, i));
  }
  return JIT_OK;
}

static jit_status eval_transpose(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_type *t = ir_type_of(f, r);
  const ir_dims *p = &f->ins[r].attr.dims;
  if (a->t->rank != t->rank || p->n != t->rank) return bad(f, r, "perm does not match the rank");
  bool seen[IR_MAX_RANK] = {0};
  int64_t astr[IR_MAX_RANK], sstr[IR_MAX_RANK];
  row_major_strides(a->t, astr);
  for (int i = 0; i < t->rank; i++) {
    int j = p->d[i];
    if (j >= t->rank || seen[j] || a->t->dims[j] != t->dims[i])
      return bad(f, r, "perm is not a permutation matching the shapes");
    seen[j] = true;
    sstr[i] = astr[j];
  }
  walk w;
  walk_init(&w, t->rank, t->dims, 0, sstr, 0, NULL);
  copy_walk(jit_dtype_size(t->dtype), &w, out, a->data, false);
  return JIT_OK;
}

static jit_status eval_broadcast(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_type *t = ir_type_of(f, r);
  const ir_dims *dd = &f->ins[r].attr.dims;
  if (dd->n != a->t->rank || a->t->rank > t->rank) return bad(f, r, "dims do not match the rank");
  int64_t astr[IR_MAX_RANK], sstr[IR_MAX_RANK] = {0};
  row_major_strides(a->t, astr);
  for (int i = 0; i < dd->n; i++) {
    int j = dd->d[i];
    if (j >= t->rank || (i > 0 && j <= dd->d[i - 1]))
      return bad(f, r, "dims must be increasing result dims");
    if (a->t->dims[i] != t->dims[j] && a->t->dims[i] != 1)
      return bad(f, r, "operand dim %d (%lld) cannot stretch to %lld", i,
                 (long long)a->t->dims[i], (long long)t->dims[j]);
    sstr[j] = a->t->dims[i] == 1 ? 0 : astr[i];
  }
  walk w;
  walk_init(&w, t->rank, t->dims, 0, sstr, 0, NULL);
  copy_walk(jit_dtype_size(t->dtype), &w, out, a->data, false);
  return JIT_OK;
}

static jit_status eval_slice(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_type *t = ir_type_of(f, r);
  const ir_slice *s = &f->ins[r].attr.slice;
  if (a->t->rank != t->rank) return bad(f, r, "rank differs from the operand's");
  int64_t astr[IR_MAX_RANK], sstr[IR_MAX_RANK], s0 = 0;
  row_major_strides(a->t, astr);
  for (int i = 0; i < t->rank; i++) {
    int64_t lo = s->start[i], hi = s->limit[i], st = s->stride[i];
    if (lo < 0 || lo > hi || hi > a->t->dims[i] || st < 1)
      return bad(f, r, "dim %d: bad start/limit/stride", i);
    int64_t len = hi == lo ? 0 : (hi - lo - 1) / st + 1;
    if (len != t->dims[i]) return bad(f, r, "dim %d: result size should be %lld", i, (long long)len);
    if (len) s0 += lo * astr[i];
    sstr[i] = len > 1 ? st * astr[i] : 0; /* st < dim here, so this cannot overflow */
  }
  walk w;
  walk_init(&w, t->rank, t->dims, s0, sstr, 0, NULL);
  copy_walk(jit_dtype_size(t->dtype), &w, out, a->data, false);
  return JIT_OK;
}

static jit_status eval_concat(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_ins *in = &f->ins[r];
  const ir_type *t = ir_type_of(f, r);
  int64_t axis = in->attr.axis;
  if (axis < 0 || axis >= t->rank) return bad(f, r, "axis %lld out of range", (long long)axis);
  int64_t total = 0;
  for (uint32_t k = 0; k < in->n_args; k++) {
    const ir_type *at = a[k].t;
    if (at->rank != t->rank || at->dtype != t->dtype) return bad(f, r, "operand %u differs", k);
    for (int i = 0; i < t->rank; i++)
      if (i != axis && at->dims[i] != t->dims[i]) return bad(f, r, "operand %u's shape differs", k);
    total += at->dims[axis];
  }
  if (total != t->dims[axis]) return bad(f, r, "operand sizes along the axis do not add up");
  int64_t tstr[IR_MAX_RANK], astr[IR_MAX_RANK], off = 0;
  row_major_strides(t, tstr);
  for (uint32_t k = 0; k < in->n_args; k++) {
    row_major_strides(a[k].t, astr);
    walk w;
    walk_init(&w, t->rank, a[k].t->dims, 0, astr, off * tstr[axis], tstr);
    copy_walk(jit_dtype_size(t->dtype), &w, out, a[k].data, true);
    off += a[k].t->dims[axis];
  }
  return JIT_OK;
}

static jit_status eval_reduce(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_ins *in = &f->ins[r];
  const ir_type *t = ir_type_of(f, r), *at = a->t;
  const ir_dims *axes = &in->attr.dims;
  jit_dtype dt = t->dtype;
  if (at->dtype != dt || axes->n > at->rank || t->rank != at->rank - axes->n)
    return bad(f, r, "result type does not match the operand and axes");
  bool reduced[IR_MAX_RANK] = {0};
  for (int i = 0; i < axes->n; i++) {
    if (axes->d[i] >= at->rank || (i > 0 && axes->d[i] <= axes->d[i - 1]))
      return bad(f, r, "axes must be increasing operand dims");
    reduced[axes->d[i]] = true;
  }
  int64_t astr[IR_MAX_RANK], tstr[IR_MAX_RANK], dstr[IR_MAX_RANK];
  row_major_strides(at, astr);
  row_major_strides(t, tstr);
  for (int i = 0, j = 0; i < at->rank; i++) {
    if (reduced[i]) {
      dstr[i] = 0;
    } else {
      if (at->dims[i] != t->dims[j]) return bad(f, r, "kept dim %d differs from the result's", i);
      dstr[i] = tstr[j++];
    }
  }
  ir_op comb = ir_reduce_combiner(in->op);
  scalar init;
  if (ir_dtype_is_float(dt))
    init.f = comb == IR_ADD ? 0.0 : comb == IR_MUL ? 1.0 : comb == IR_MAX ? -INFINITY : INFINITY;
  else
    init.i = comb == IR_ADD ? 0 : comb == IR_MUL ? 1 : comb == IR_MAX ? int_min(dt) : int_max(dt);
  int64_t rn = ir_type_numel(t);
  scalar *acc = malloc((size_t)(rn ? rn : 1) * sizeof *acc); /* rn * 8 <= the operand's bytes * 8 */
  if (!acc) return jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  for (int64_t e = 0; e < rn; e++) acc[e] = init;
  walk w;
  walk_init(&w, at->rank, at->dims, 0, astr, 0, dstr);
  for (int64_t e = 0; e < w.n; e++) {
    scalar x[2] = {acc[w.d], load_scalar(dt, a->data, w.s)};
    acc[w.d] = ew_eval(comb, JIT_EQ, dt, dt, x);
    walk_next(&w);
  }
  for (int64_t e = 0; e < rn; e++) store_scalar(dt, out, e, acc[e]);
  free(acc);
  return JIT_OK;
}

/* Gathers operand a, with its dims permuted by perm, into a contiguous array of doubles or of
   int64s (ints), so that dot sees lhs as [batch, free, contract] and rhs as
   [batch, contract, free]. */
static void *pack(const opnd *a, const int *perm, bool as_float) {
  const ir_type *t = a->t;
  int64_t astr[IR_MAX_RANK], dims[IR_MAX_RANK], sstr[IR_MAX_RANK];
  row_major_strides(t, astr);
  for (int i = 0; i < t->rank; i++) {
    dims[i] = t->dims[perm[i]];
    sstr[i] = astr[perm[i]];
  }
  int64_t n = ir_type_numel(t); /* n * 8 fits: the operand's byte size was checked and es >= 1 */
  if ((uint64_t)n > SIZE_MAX / 8) return NULL;
  void *p = malloc((size_t)(n ? n : 1) * 8);
  if (!p) return NULL;
  walk w;
  walk_init(&w, t->rank, dims, 0, sstr, 0, NULL);
  for (int64_t e = 0; e < w.n; e++) {
    scalar s = load_scalar(t->dtype, a->data, w.s);
    if (as_float) ((double *)p)[e] = ir_dtype_is_float(t->dtype) ? s.f : (double)s.i;
    else ((uint64_t *)p)[e] = ir_dtype_is_float(t->dtype) ? (uint64_t)f64_to_int(JIT_I64, s.f)
                                                          : (uint64_t)s.i;
    walk_next(&w);
  }
  return p;
}

static jit_status eval_dot(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  jit_status st = JIT_OK;
  const ir_dot_dims *dd = &f->ins[r].attr.dot;
  const ir_type *t = ir_type_of(f, r), *lt = a[0].t, *rt = a[1].t;
  int nb = dd->n_batch, nc = dd->n_contract;
  if (nb + nc > lt->rank || nb + nc > rt->rank) return bad(f, r, "too many batch/contract dims");
  bool lused[IR_MAX_RANK] = {0}, rused[IR_MAX_RANK] = {0};
  for (int i = 0; i < nb + nc; i++) {
    int l = i < nb ? dd->lhs_batch[i] : dd->lhs_contract[i - nb];
    int q = i < nb ? dd->rhs_batch[i] : dd->rhs_contract[i - nb];
    if (l >= lt->rank || q >= rt->rank || lused[l] || rused[q] || lt->dims[l] != rt->dims[q])
      return bad(f, r, "bad batch/contract dims");
    lused[l] = rused[q] = true;
  }
  /* lperm = batch, lhs free, contract; rperm = batch, contract, rhs free. */
  int lperm[IR_MAX_RANK], rperm[IR_MAX_RANK], nl = 0, nr = 0;
  int64_t B = 1, M = 1, K = 1, N = 1, want[2 * IR_MAX_RANK];
  int nw = 0;
  for (int i = 0; i < nb; i++) {
    lperm[nl++] = dd->lhs_batch[i];
    rperm[nr++] = dd->rhs_batch[i];
    B *= want[nw++] = lt->dims[dd->lhs_batch[i]];
  }
  for (int i = 0; i < lt->rank; i++)
    if (!lused[i]) M *= want[nw++] = lt->dims[lperm[nl++] = i];
  for (int i = 0; i < nc; i++) {
    lperm[nl++] = dd->lhs_contract[i];
    rperm[nr++] = dd->rhs_contract[i];
    K *= lt->dims[dd->lhs_contract[i]];
  }
  for (int i = 0; i < rt->rank; i++)
    if (!rused[i]) N *= want[nw++] = rt->dims[rperm[nr++] = i];
  if (lt->dtype != rt->dtype || t->rank != nw) return bad(f, r, "result type does not match");
  for (int i = 0; i < nw; i++)
    if (t->dims[i] != want[i]) return bad(f, r, "result dim %d should be %lld", i, (long long)want[i]);

  bool fl = ir_dtype_is_float(t->dtype);
  enum { JB = 128 }; /* columns per block: a block of rhs rows stays in cache across lhs rows */
  void *lp = pack(&a[0], lperm, fl), *rp = pack(&a[1], rperm, fl);
  void *acc = malloc(JB * 8);
  if (!lp || !rp || !acc) {
    st = jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
    goto fail;
  }
  for (int64_t b = 0; b < B; b++) {
    for (int64_t j0 = 0; j0 < N; j0 += JB) {
      int64_t jn = N - j0 < JB ? N - j0 : JB;
      for (int64_t i = 0; i < M; i++) {
        int64_t orow = (b * M + i) * N + j0;
        if (fl) {
          double *ac = acc;
          const double *lrow = (const double *)lp + (b * M + i) * K;
          for (int64_t j = 0; j < jn; j++) ac[j] = 0;
          for (int64_t k = 0; k < K; k++) {
            double x = lrow[k];
            const double *rrow = (const double *)rp + (b * K + k) * N + j0;
            for (int64_t j = 0; j < jn; j++) ac[j] += x * rrow[j];
          }
          for (int64_t j = 0; j < jn; j++) ir_store_f64(t->dtype, out, orow + j, ac[j]);
        } else {
          uint64_t *ac = acc;
          const uint64_t *lrow = (const uint64_t *)lp + (b * M + i) * K;
          for (int64_t j = 0; j < jn; j++) ac[j] = 0;
          for (int64_t k = 0; k < K; k++) {
            uint64_t x = lrow[k];
            const uint64_t *rrow = (const uint64_t *)rp + (b * K + k) * N + j0;
            for (int64_t j = 0; j < jn; j++) ac[j] += x * rrow[j];
          }
          for (int64_t j = 0; j < jn; j++)
            ir_store_i64(t->dtype, out, orow + j, wrap_int(t->dtype, ac[j]));
        }
      }
    }
  }
fail:
  free(lp);
  free(rp);
  free(acc);
  return st;
}

/* ---- scan ------------------------------------------------------------------------------------ */
/* A SCAN's value is its results laid end to end in one buffer, result k at off[k] (16-byte
   aligned); GET copies one out. off has n_results + 1 entries, the last the total. */
static jit_status scan_layout(const ir_func *f, ir_ref r, size_t **off) {
  const ir_ins *in = &f->ins[r];
  const ir_func *b = ir_body(f, in);
  if (!b) return bad(f, r, "no body");
  size_t *o = malloc((b->n_results + 1) * sizeof *o);
  if (!o) return jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  o[0] = 0;
  for (uint32_t k = 0; k < b->n_results; k++) {
    ir_type t;
    size_t bytes;
    if (!ir_result_type(f, in, k, &t) || !type_bytes(&t, &bytes) || bytes > SIZE_MAX / 2 - o[k]) {
      free(o);
      return bad(f, r, "result %u has an invalid or too large type", k);
    }
    o[k + 1] = o[k] + ((bytes + 15) & ~(size_t)15);
  }
  *off = o;
  return JIT_OK;
}

/* Runs the body length times: carries double-buffered, x slices read and y slices written in
   place (slice t of a row-major array is contiguous). */
static jit_status eval_scan(const ir_func *f, ir_ref r, ival *vals) {
  const ir_ins *in = &f->ins[r];
  const ir_scan *a = &in->attr.scan;
  const ir_func *b = ir_scan_body(f, in);
  size_t *off = NULL, *xstep = NULL;
  const void **bargs = NULL;
  void **bres = NULL;
  unsigned char **cur = NULL, **nxt = NULL;
  jit_status st = scan_layout(f, r, &off);
  if (st != JIT_OK) return st;
  uint32_t nc = a->n_carry, na = in->n_args, nr = b->n_results;
  unsigned char *out = malloc(off[nr] ? off[nr] : 1);
  bargs = calloc(na + 1, sizeof *bargs);
  bres = calloc(nr + 1, sizeof *bres);
  xstep = calloc(na + 1, sizeof *xstep);
  cur = calloc(nc + 1, sizeof *cur);
  nxt = calloc(nc + 1, sizeof *nxt);
  vals[r].data = vals[r].own = out;
  if (!out || !bargs || !bres || !xstep || !cur || !nxt) goto nomem;
  for (uint32_t i = 0; i < nc; i++) {
    size_t bytes = off[i + 1] - off[i];
    cur[i] = malloc(bytes ? bytes : 1);
    nxt[i] = malloc(bytes ? bytes : 1);
    if (!cur[i] || !nxt[i]) goto nomem;
    type_bytes(ir_type_of(f, in->args[a->n_consts + i]), &bytes);
    if (bytes) memcpy(cur[i], vals[in->args[a->n_consts + i]].data, bytes);
  }
  for (uint32_t i = a->n_consts + nc; i < na; i++) type_bytes(ir_type_of(b, i), &xstep[i]);
  for (int64_t s = 0; s < a->length; s++) {
    int64_t t = a->reverse ? a->length - 1 - s : s;
    for (uint32_t i = 0; i < na; i++) {
      const unsigned char *base = vals[in->args[i]].data;
      if (i >= a->n_consts && i < a->n_consts + nc) base = cur[i - a->n_consts];
      bargs[i] = base + (size_t)t * xstep[i];
    }
    for (uint32_t k = 0; k < nr; k++) {
      if (k < nc) {
        bres[k] = nxt[k];
      } else {
        size_t ybytes = 0;
        type_bytes(ir_type_of(b, b->results[k]), &ybytes);
        bres[k] = out + off[k] + (size_t)t * ybytes;
      }
    }
    if ((st = ir_interp(b, bargs, bres)) != JIT_OK) goto done;
    unsigned char **swap = cur;
    cur = nxt;
    nxt = swap;
  }
  for (uint32_t i = 0; i < nc; i++) memcpy(out + off[i], cur[i], off[i + 1] - off[i]);
  goto done;
nomem:
  st = jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
done:
  for (uint32_t i = 0; cur && i < nc; i++) free(cur[i]);
  for (uint32_t i = 0; nxt && i < nc; i++) free(nxt[i]);
  free(cur);
  free(nxt);
  free(bargs);
  free(bres);
  free(xstep);
  free(off);
  return st;
}

/* A COND's index clamped to [0, n) as lax.switch clamps it. */
static uint32_t branch_of(const ival *vals, const ir_ins *in) {
  int32_t i;
  memcpy(&i, vals[in->args[0]].data, sizeof i);
  return i < 0 ? 0 : (uint32_t)i >= in->attr.cond.n_bodies ? in->attr.cond.n_bodies - 1 : (uint32_t)i;
}

/* Runs the chosen branch on the args, its results laid out as a scan's. */
static jit_status eval_cond(const ir_func *f, ir_ref r, ival *vals) {
  const ir_ins *in = &f->ins[r];
  const ir_func *b = ir_body_at(f, in, branch_of(vals, in));
  size_t *off = NULL;
  jit_status st = scan_layout(f, r, &off);
  if (st != JIT_OK) return st;
  unsigned char *out = malloc(off[b->n_results] ? off[b->n_results] : 1);
  const void **bargs = calloc(in->n_args, sizeof *bargs);
  void **bres = calloc(b->n_results + 1, sizeof *bres);
  vals[r].data = vals[r].own = out;
  if (!out || !bargs || !bres) {
    st = jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  } else {
    for (uint32_t i = 1; i < in->n_args; i++) bargs[i - 1] = vals[in->args[i]].data;
    for (uint32_t k = 0; k < b->n_results; k++) bres[k] = out + off[k];
    st = ir_interp(b, bargs, bres);
  }
  free(bargs);
  free(bres);
  free(off);
  return st;
}

/* Runs the body while the predicate holds; the carries live in the result buffer itself (the
   body's results go to a second buffer, then are copied back). */
static jit_status eval_while(const ir_func *f, ir_ref r, ival *vals) {
  const ir_ins *in = &f->ins[r];
  const ir_func *pred = ir_body_at(f, in, 0), *b = ir_body_at(f, in, 1);
  uint32_t nk = in->attr.cond.n_consts, nc = in->n_args - nk;
  size_t *off = NULL;
  jit_status st = scan_layout(f, r, &off);
  if (st != JIT_OK) return st;
  unsigned char *out = malloc(off[nc] ? off[nc] : 1), *next = malloc(off[nc] ? off[nc] : 1);
  const void **bargs = calloc(in->n_args, sizeof *bargs);
  void **bres = calloc(nc, sizeof *bres);
  vals[r].data = vals[r].own = out;
  if (!out || !next || !bargs || !bres) {
    st = jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
    goto done;
  }
  for (uint32_t i = 0; i < in->n_args; i++) {
    if (i < nk) {
      bargs[i] = vals[in->args[i]].data;
      continue;
    }
    size_t bytes = 0; /* off[] spacing is padded: copy the init's own bytes */
    type_bytes(ir_type_of(f, in->args[i]), &bytes);
    if (bytes) memcpy(out + off[i - nk], vals[in->args[i]].data, bytes);
    bargs[i] = out + off[i - nk];
    bres[i - nk] = next + off[i - nk];
  }
  for (;;) {
    unsigned char go = 0; /* a bool is one byte */
    void *pres[1] = {&go};
    if ((st = ir_interp(pred, bargs, pres)) != JIT_OK || !go) break;
    if ((st = ir_interp(b, bargs, bres)) != JIT_OK) break;
    memcpy(out, next, off[nc]);
  }
done:
  free(next);
  free(bargs);
  free(bres);
  free(off);
  return st;
}

static jit_status eval_get(const ir_func *f, ir_ref r, ival *vals) {
  const ir_ins *in = &f->ins[r];
  size_t *off = NULL, bytes = 0;
  if (!ir_op_has_body(f->ins[in->args[0]].op))
    return bad(f, r, "operand is not a scan, cond, while or shard_map");
  jit_status st = scan_layout(f, in->args[0], &off);
  if (st != JIT_OK) return st;
  const ir_func *b = ir_body(f, &f->ins[in->args[0]]);
  if (in->attr.axis < 0 || in->attr.axis >= b->n_results) {
    free(off);
    return bad(f, r, "index %lld out of range", (long long)in->attr.axis);
  }
  type_bytes(ir_type_of(f, r), &bytes);
  unsigned char *out = malloc(bytes ? bytes : 1);
  if (!out) {
    free(off);
    return jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  }
  if (bytes) memcpy(out, vals[in->args[0]].data + off[in->attr.axis], bytes);
  vals[r].data = vals[r].own = out;
  free(off);
  return JIT_OK;
}

/* The device the interpreter runs as on this thread (ir_interp_device), seen by nested bodies. */
static _Thread_local const ir_device *cur_device;

static jit_status eval_collective(const ir_func *f, ir_ref r, const opnd *a, unsigned char *out) {
  const ir_ins *in = &f->ins[r];
  if (!cur_device || !cur_device->collective)
    return jit_error(JIT_EUNSUPPORTED, "interp: @%s: %%%u: '%s' runs only on the devices of a mesh "
                     "(ir_interp_spmd)", f->name, r, ir_op_name[in->op]);
  return cur_device->collective(cur_device->ctx, cur_device->position, in->op, &in->attr.coll,
                                in->n_args ? a[0].t : NULL, in->n_args ? a[0].data : NULL, out);
}

/* The body on every device of its mesh (threads meeting at its collectives); results laid end
   to end as for a scan. */
static jit_status eval_shard_map(const ir_func *f, ir_ref r, ival *vals) {
  const ir_ins *in = &f->ins[r];
  size_t *off = NULL;
  jit_status st = scan_layout(f, r, &off);
  if (st != JIT_OK) return st;
  uint32_t n_out = ir_body(f, in)->n_results;
  unsigned char *out = malloc(off[n_out] ? off[n_out] : 1);
  const void **ops = calloc(in->n_args + 1, sizeof *ops);
  vals[r].data = vals[r].own = out;
  if (!out || !ops) st = jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  for (uint32_t i = 0; st == JIT_OK && i < in->n_args; i++) ops[i] = vals[in->args[i]].data;
  if (st == JIT_OK) st = ir_eval_shard_map(f, in, ops, out, off);
  free(ops);
  free(off);
  return st;
}

/* Evaluates instruction r into vals[r]. */
static jit_status eval_ins(const ir_func *f, ir_ref r, ival *vals, const void *const *args) {
  const ir_ins *in = &f->ins[r];
  if ((unsigned)in->op >= IR_N_OPS) return bad(f, r, "unknown op %d", (int)in->op);
  if (in->ty >= f->n_types) return bad(f, r, "unknown type %u", in->ty);
  const ir_type *t = ir_type_of(f, r);
  size_t bytes;
  if (!type_bytes(t, &bytes)) return bad(f, r, "invalid or too large result type");
  int arity = ir_op_arity[in->op];
  if (in->op != IR_SCAN && in->op != IR_SHARD_MAP &&
      (arity >= 0 ? in->n_args != (uint32_t)arity : in->n_args < 1))
    return bad(f, r, "%u operands", in->n_args);
  if (in->op == IR_SCAN) return eval_scan(f, r, vals);
  if (in->op == IR_GET) return eval_get(f, r, vals);
  if (in->op == IR_SHARD_MAP) return eval_shard_map(f, r, vals);
  if (in->op == IR_COND) return eval_cond(f, r, vals);
  if (in->op == IR_WHILE) return eval_while(f, r, vals);

  if (in->op == IR_PARAM) {
    int64_t p = in->attr.axis;
    if (p < 0 || p >= f->n_params) return bad(f, r, "param index %lld out of range", (long long)p);
    if (!args[p] && bytes) return jit_error(JIT_EINVAL, "interp: @%s: args[%lld] is NULL",
                                            f->name, (long long)p);
    vals[r].data = args[p] ? args[p] : empty_buf;
    return JIT_OK;
  }

  unsigned char *out = malloc(bytes ? bytes : 1);
  if (!out) return jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory (%zu bytes)", f->name,
                             r, bytes);
  vals[r].data = vals[r].own = out; /* owned now, so every failure below frees it */

  enum { MAX_INLINE = 8 };
  opnd small[MAX_INLINE], *a = small;
  if (in->n_args > MAX_INLINE) {
    a = malloc(in->n_args * sizeof *a);
    if (!a) return jit_error(JIT_ENOMEM, "interp: @%s: %%%u: out of memory", f->name, r);
  }
  for (uint32_t k = 0; k < in->n_args; k++) {
    a[k].t = ir_type_of(f, in->args[k]);
    a[k].data = vals[in->args[k]].data;
  }
  jit_status st = JIT_OK;
  if (ir_op_flags[in->op] & IR_EW) {
    st = eval_elementwise(f, r, a, out);
  } else {
    switch (in->op) {
    case IR_CONST: {
      scalar v = convert(JIT_F64, t->dtype, (scalar){.f = in->attr.value});
      int64_t n = ir_type_numel(t);
      for (int64_t e = 0; e < n; e++) store_scalar(t->dtype, out, e, v);
      break;
    }
    case IR_IOTA: st = eval_iota(f, r, out); break;
    case IR_RESHAPE:
      if (a[0].t->dtype != t->dtype || ir_type_numel(a[0].t) != ir_type_numel(t))
        st = bad(f, r, "reshape changes the dtype or the element count");
      else if (bytes) memcpy(out, a[0].data, bytes);
      break;
    case IR_TRANSPOSE: st = eval_transpose(f, r, a, out); break;
    case IR_BROADCAST: st = eval_broadcast(f, r, a, out); break;
    case IR_SLICE: st = eval_slice(f, r, a, out); break;
    case IR_CONCAT: st = eval_concat(f, r, a, out); break;
    case IR_GATHER: ir_eval_gather(&in->attr, a[0].t, a[0].data, a[1].t, a[1].data, t, out); break;
    case IR_SCATTER:
      ir_eval_scatter(&in->attr, a[0].t, a[0].data, a[1].t, a[1].data, a[2].t, a[2].data, out);
      break;
    case IR_PAD: ir_eval_pad(&in->attr, a[0].t, a[0].data, a[1].data, t, out); break;
    case IR_REV: ir_eval_rev(&in->attr, a[0].t, a[0].data, out); break;
    case IR_REDUCE_SUM:
    case IR_REDUCE_MAX:
    case IR_REDUCE_MIN:
    case IR_REDUCE_PROD: st = eval_reduce(f, r, a, out); break;
    case IR_DOT: st = eval_dot(f, r, a, out); break;
    case IR_SORT: st = eval_sort(in, a, out); break;
    case IR_FFT: st = ir_fft_eval(&in->attr.fft, a[0].t, a[0].data, t, out); break;
    case IR_CONV: ir_eval_conv(&in->attr.conv, a[0].t, a[0].data, a[1].t, a[1].data, t, out); break;
    case IR_REDUCE_WINDOW: ir_eval_reduce_window(&in->attr.window, a[0].t, a[0].data, t, out); break;
    case IR_SELECT_SCATTER:
      ir_eval_select_scatter(&in->attr.window, a[0].t, a[0].data, a[1].t, a[1].data, out);
      break;
    case IR_SHARDING:
      if (bytes) memcpy(out, a[0].data, bytes);
      break;
    default:
      st = ir_op_is_collective(in->op) ? eval_collective(f, r, a, out) : bad(f, r, "op not handled");
      break;
    }
  }
  if (a != small) free(a);
  return st;
}

static void release(ival *v) {
  free(v->own);
  v->own = NULL;
  v->data = NULL;
}

const ir_device *ir_set_thread_device(const ir_device *dev) {
  const ir_device *saved = cur_device;
  cur_device = dev;
  return saved;
}

jit_status ir_interp_device(const ir_func *f, const ir_device *dev, const void *const *args,
                            void *const *results) {
  const ir_device *saved = cur_device;
  cur_device = dev;
  jit_status st = ir_interp(f, args, results);
  cur_device = saved;
  return st;
}

/* A function with complex values runs as its real expansion (complex_expand.c, the one
   definition of complex arithmetic), whose params and results have the same bytes. */
static jit_status interp_complex(const ir_func *f, const void *const *args, void *const *results) {
  ir_func *g = ir_func_clone(f);
  if (!g) return jit_error(JIT_ENOMEM, "interp: @%s: out of memory", f->name);
  jit_status st = ir_expand_complex(g);
  if (st == JIT_OK) st = ir_interp(g, args, results);
  ir_func_free(g);
  return st;
}

jit_status ir_interp(const ir_func *f, const void *const *args, void *const *results) {
  jit_status st = JIT_OK;
  ival *vals = NULL;
  uint32_t *last = NULL; /* last[v] = the last instruction reading v; UINT32_MAX: a result */
  if (!f) return jit_error(JIT_EINVAL, "interp: no function");
  if (f->oom) return jit_error(JIT_ENOMEM, "interp: @%s: incomplete (out of memory)", f->name);
  if (ir_func_has_complex(f)) return interp_complex(f, args, results);
  if ((f->n_params && !args) || (f->n_results && !results))
    return jit_error(JIT_EINVAL, "interp: @%s: args or results is NULL", f->name);
  uint32_t n = f->n_ins;
  vals = calloc(n ? n : 1, sizeof *vals);
  last = calloc(n ? n : 1, sizeof *last);
  if (!vals || !last) {
    st = jit_error(JIT_ENOMEM, "interp: @%s: out of memory", f->name);
    goto fail;
  }
  for (uint32_t i = 0; i < n; i++) {
    last[i] = i; /* unused values are freed as soon as they are made */
    for (uint32_t k = 0; k < f->ins[i].n_args; k++) {
      ir_ref x = f->ins[i].args[k];
      if (x >= i) {
        st = bad(f, i, "operand %%%u is not defined before its use", x);
        goto fail;
      }
      last[x] = i;
    }
  }
  for (uint32_t k = 0; k < f->n_results; k++) {
    if (f->results[k] >= n) {
      st = jit_error(JIT_EINTERNAL, "interp: @%s: result %u refers to no value", f->name, k);
      goto fail;
    }
    last[f->results[k]] = UINT32_MAX;
  }
  for (uint32_t i = 0; i < n; i++) {
    TRY(eval_ins(f, i, vals, args));
    for (uint32_t k = 0; k < f->ins[i].n_args; k++)
      if (last[f->ins[i].args[k]] == i) release(&vals[f->ins[i].args[k]]);
    if (last[i] == i) release(&vals[i]);
  }
  for (uint32_t k = 0; k < f->n_results; k++) {
    size_t bytes = 0;
    type_bytes(ir_type_of(f, f->results[k]), &bytes); /* checked when the value was made */
    if (!bytes) continue;
    if (!results[k]) {
      st = jit_error(JIT_EINVAL, "interp: @%s: results[%u] is NULL", f->name, k);
      goto fail;
    }
    /* memmove: a caller may hand a param's own buffer back as that result's destination */
    memmove(results[k], vals[f->results[k]].data, bytes);
  }
fail:
  if (vals)
    for (uint32_t i = 0; i < n; i++) release(&vals[i]);
  free(vals);
  free(last);
  return st;
}
