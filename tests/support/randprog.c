/* randprog.c: the seeded random-program generator of the differential tests: random DAGs of
 * the ops over random shapes, broadcasts and dtypes, with value bounds that keep the float math
 * inside the range where every backend must agree with the interpreter. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "support/randprog.h"

static uint64_t rng(uint64_t *s) { /* splitmix64, as the tests' own */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int64_t irange(uint64_t *s, int64_t lo, int64_t hi) { return lo + (int64_t)(rng(s) % (uint64_t)(hi - lo + 1)); }

/* ---- random programs ---------------------------------------------------------------------------- */
typedef struct pv {
  ir_ref r;
  bool exact;   /* rounds exactly as the interpreter does */
  double bound; /* |value| <= bound (floats) */
} pv;

typedef struct gen {
  ir_func *f;
  uint64_t s;
  jit_dtype dt;
  pv v[96];
  int n;
} gen;

#define MAX_NUMEL 6000

static const ir_type *ty(gen *g, ir_ref r) { return ir_type_of(g->f, r); }

static ir_ref emit_op(gen *g, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *attr,
                      const ir_type *declared) {
  const ir_type *ts[8] = {0}; /* gcc -O3 cannot see n <= 8 */
  ir_type out;
  char why[256];
  assert_true(n <= 8);
  for (uint32_t k = 0; k < n; k++) ts[k] = ty(g, args[k]);
  if (ir_infer_type(op, n, ts, attr, declared, &out, why, sizeof why) != JIT_OK) return IR_NOREF;
  if (ir_type_numel(&out) > MAX_NUMEL) return IR_NOREF;
  ir_ty t = ir_type_intern(g->f, &out);
  assert_true(t != UINT32_MAX);
  return ir_emit(g->f, op, t, n, args, attr, (ir_loc){0});
}

static void push(gen *g, ir_ref r, bool exact, double bound) {
  if (r == IR_NOREF || g->n >= 96) return;
  g->v[g->n++] = (pv){r, exact, bound};
}

static pv *pick(gen *g) {
  /* favour recent values, so that chains grow */
  int i = g->n - 1 - (int)(rng(&g->s) % (uint64_t)(g->n < 4 ? g->n : 4));
  if (rng(&g->s) % 3 == 0) i = (int)(rng(&g->s) % (uint64_t)g->n);
  return &g->v[i];
}

static ir_ref mk_const(gen *g, const ir_type *t, double v) {
  ir_ty tt = ir_type_intern(g->f, t);
  return ir_emit_const(g->f, tt, v, (ir_loc){0});
}

static ir_ref unary(gen *g, ir_op op, ir_ref a) { return emit_op(g, op, 1, &a, NULL, NULL); }
static ir_ref binary(gen *g, ir_op op, ir_ref a, ir_ref b) {
  ir_ref x[2] = {a, b};
  return emit_op(g, op, 2, x, NULL, NULL);
}

/* A value of a's type, from the pool or made from a. */
static pv partner(gen *g, const pv *a) {
  for (int tries = 0; tries < 6; tries++) {
    pv *b = &g->v[rng(&g->s) % (uint64_t)g->n];
    if (ir_type_equal(ty(g, b->r), ty(g, a->r))) return *b;
  }
  /* broadcast a compatible pool value, or a constant */
  const ir_type *t = ty(g, a->r);
  for (int tries = 0; tries < 6; tries++) {
    pv *b = &g->v[rng(&g->s) % (uint64_t)g->n];
    const ir_type *bt = ty(g, b->r);
    if (bt->dtype != t->dtype || bt->rank > t->rank) continue;
    /* map b's dims onto the trailing dims of t (NumPy style) */
    ir_attr at = {0};
    at.dims.n = (uint8_t)bt->rank;
    bool ok = true;
    for (int i = 0; i < bt->rank; i++) {
      int j = t->rank - bt->rank + i;
      at.dims.d[i] = (uint8_t)j;
      if (bt->dims[i] != 1 && bt->dims[i] != t->dims[j]) ok = false;
    }
    if (!ok) continue;
    ir_ref r = emit_op(g, IR_BROADCAST, 1, &b->r, &at, t);
    if (r != IR_NOREF) return (pv){r, b->exact, b->bound};
  }
  double c = ir_dtype_is_float(t->dtype) ? 0.75 : 3;
  return (pv){mk_const(g, t, c), true, 0.75};
}

static void step_float(gen *g, pv a) {
  ir_ref r = IR_NOREF;
  double B = a.bound;
  const ir_type *t = ty(g, a.r);
  switch (rng(&g->s) % 18) {
  case 0: push(g, unary(g, IR_NEG, a.r), a.exact, B); return;
  case 1: push(g, unary(g, IR_ABS, a.r), a.exact, B); return;
  case 2:
    if (B <= 4) push(g, unary(g, IR_EXP, a.r), false, exp(B));
    return;
  case 3: {
    ir_ref one = mk_const(g, t, 1);
    r = binary(g, IR_ADD, unary(g, IR_ABS, a.r), one);
    bool lg = rng(&g->s) & 1;
    push(g, unary(g, lg ? IR_LOG : IR_RSQRT, r), a.exact && !lg, log(B + 1) + 1);
    return;
  }
  case 4: {
    static const ir_op sq[] = {IR_TANH, IR_LOGISTIC, IR_ERF, IR_SIN, IR_COS};
    ir_op op = sq[rng(&g->s) % 5];
    if ((op == IR_SIN || op == IR_COS) && B > 100) return;
    push(g, unary(g, op, a.r), false, 1);
    return;
  }
  case 5: push(g, unary(g, IR_SQRT, unary(g, IR_ABS, a.r)), a.exact, sqrt(B)); return;
  case 6:
    if (a.exact) push(g, unary(g, IR_FLOOR, a.r), true, B + 1);
    return;
  case 7:
  case 8: {
    pv b = partner(g, &a);
    static const ir_op ops[] = {IR_ADD, IR_SUB, IR_MAX, IR_MIN};
    ir_op op = ops[rng(&g->s) % 4];
    push(g, binary(g, op, a.r, b.r), a.exact && b.exact, B + b.bound);
    return;
  }
  case 9: {
    pv b = partner(g, &a);
    if (B * b.bound > 1e4) return;
    push(g, binary(g, IR_MUL, a.r, b.r), a.exact && b.exact, B * b.bound);
    return;
  }
  case 10: {
    /* a / (|b| + 1) */
    pv b = partner(g, &a);
    ir_ref d = binary(g, IR_ADD, unary(g, IR_ABS, b.r), mk_const(g, t, 1));
    push(g, binary(g, IR_DIV, a.r, d), a.exact && b.exact, B);
    return;
  }
  case 11: {
    /* (|a| + 1) ^ b with small b */
    pv b = partner(g, &a);
    if (b.bound > 2 || B > 50) return;
    ir_ref base = binary(g, IR_ADD, unary(g, IR_ABS, a.r), mk_const(g, t, 1));
    push(g, binary(g, IR_POW, base, b.r), a.exact && b.exact, pow(B + 1, b.bound));
    return;
  }
  case 12: {
    /* select(cmp(a, b), c, d) with an exact predicate */
    pv b = partner(g, &a);
    if (!a.exact || !b.exact) return;
    ir_attr at = {0};
    at.cmp = (jit_cmp_op)(rng(&g->s) % 6);
    ir_ref x[2] = {a.r, b.r};
    ir_ref p = emit_op(g, IR_CMP, 2, x, &at, NULL);
    pv c = partner(g, &a), d = partner(g, &a);
    ir_ref y[3] = {p, c.r, d.r};
    push(g, emit_op(g, IR_SELECT, 3, y, NULL, NULL), c.exact && d.exact,
         c.bound > d.bound ? c.bound : d.bound);
    return;
  }
  case 13: {
    /* through another float dtype and back */
    static const jit_dtype via[] = {JIT_F16, JIT_BF16, JIT_F64, JIT_F32};
    jit_dtype v = via[rng(&g->s) % 4];
    if (v == JIT_F16 && B > 6e4) return;
    ir_type tv = *t;
    tv.dtype = v;
    ir_ref c1 = emit_op(g, IR_CONVERT, 1, &a.r, NULL, &tv);
    if (c1 == IR_NOREF) return;
    ir_type tb = *t;
    push(g, emit_op(g, IR_CONVERT, 1, &c1, NULL, &tb), a.exact, B);
    return;
  }
  case 16: {
    /* the lax parity ops: ceil/round/sign exact, log1p/expm1/atan2/erf_inv within ulps,
       rem and clamp exact */
    pv b = partner(g, &a);
    switch (rng(&g->s) % 7) {
    case 0: push(g, unary(g, (ir_op)(IR_CEIL + rng(&g->s) % 2), a.r), a.exact, B + 1); return;
    case 1: push(g, unary(g, IR_SIGN, a.r), a.exact, 1); return;
    case 2: push(g, unary(g, IR_LOG1P, unary(g, IR_ABS, a.r)), false, log(B + 1) + 1); return;
    case 3:
      if (B <= 4) push(g, unary(g, IR_EXPM1, a.r), false, exp(B));
      return;
    case 4: push(g, binary(g, IR_ATAN2, a.r, b.r), false, 4); return;
    case 5: {
      ir_ref d = binary(g, IR_ADD, unary(g, IR_ABS, b.r), mk_const(g, t, 1));
      push(g, binary(g, IR_REM, a.r, d), a.exact && b.exact, B);
      return;
    }
    default: {
      ir_ref x[3] = {mk_const(g, t, -0.5), a.r, b.r};
      push(g, emit_op(g, IR_CLAMP, 3, x, NULL, NULL), a.exact && b.exact, B + b.bound);
      return;
    }
    }
  }
  case 17:
    /* erf_inv of a value kept inside (-1, 1) whatever its inexactness: 0.5 tanh(a) */
    push(g, unary(g, IR_ERF_INV, binary(g, IR_MUL, unary(g, IR_TANH, a.r), mk_const(g, t, 0.5))),
         false, 1);
    return;
  case 14: {
    if (!a.exact) return;
    static const jit_dtype via[] = {JIT_I32, JIT_I8, JIT_U8, JIT_I64, JIT_BOOL, JIT_U32, JIT_U64};
    ir_type tv = *t;
    tv.dtype = via[rng(&g->s) % 7];
    ir_ref c1 = emit_op(g, IR_CONVERT, 1, &a.r, NULL, &tv);
    if (c1 == IR_NOREF) return;
    ir_type tb = *t;
    push(g, emit_op(g, IR_CONVERT, 1, &c1, NULL, &tb), true, B > 300 ? B : 300);
    return;
  }
  default: {
    /* iota combined */
    if (t->rank == 0) return;
    ir_attr at = {0};
    at.axis = (int64_t)(rng(&g->s) % (uint64_t)t->rank);
    ir_ty tt = ir_type_intern(g->f, t);
    ir_ref io = ir_emit(g->f, IR_IOTA, tt, 0, NULL, &at, (ir_loc){0});
    push(g, binary(g, IR_ADD, a.r, io), a.exact, B + (double)t->dims[at.axis]);
    return;
  }
  }
}

/* a times an iota along a random dim */
static void push_iota_mul(gen *g, pv a, const ir_type *t) {
  if (t->rank == 0) return;
  ir_attr at = {0};
  at.axis = (int64_t)(rng(&g->s) % (uint64_t)t->rank);
  ir_ty tt = ir_type_intern(g->f, t);
  ir_ref io = ir_emit(g->f, IR_IOTA, tt, 0, NULL, &at, (ir_loc){0});
  push(g, binary(g, IR_MUL, a.r, io), true, 0);
}

static void step_int(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  switch (rng(&g->s) % 12) {
  case 0: push(g, unary(g, rng(&g->s) & 1 ? IR_NEG : IR_ABS, a.r), true, 0); return;
  case 8: {
    static const ir_op ops[] = {IR_AND, IR_OR, IR_XOR, IR_SHL, IR_SHR_LOGICAL, IR_SHR_ARITH,
                                IR_REM};
    pv b = partner(g, &a);
    push(g, binary(g, ops[rng(&g->s) % 7], a.r, b.r), true, 0);
    return;
  }
  case 6: {
    /* a stable sort along a random axis, the partner carried along (both exact) */
    if (t->rank == 0) return;
    pv b = partner(g, &a);
    ir_attr at = {0};
    at.axis = (int64_t)(rng(&g->s) % (uint64_t)t->rank);
    at.sort = (ir_sort){1, (uint8_t)(rng(&g->s) % 2), (uint8_t)(rng(&g->s) % 2)};
    ir_ref x[2] = {a.r, b.r};
    push(g, emit_op(g, IR_SORT, 2, x, &at, NULL), true, 0);
    return;
  }
  case 7: {
    /* threefry2x32 of both as u64, wrapped back */
    pv b = partner(g, &a);
    ir_type tu = *t, tb = *t;
    tu.dtype = JIT_U64;
    ir_ref ka = emit_op(g, IR_CONVERT, 1, &a.r, NULL, &tu), kb = emit_op(g, IR_CONVERT, 1, &b.r, NULL, &tu);
    if (ka == IR_NOREF || kb == IR_NOREF) return;
    ir_ref y = binary(g, IR_THREEFRY, ka, kb);
    if (y == IR_NOREF) return;
    push(g, emit_op(g, IR_CONVERT, 1, &y, NULL, &tb), true, 0);
    return;
  }
  case 9: {
    pv b = partner(g, &a), c = partner(g, &a);
    ir_ref x[3] = {b.r, a.r, c.r};
    if (rng(&g->s) % 2) push(g, unary(g, rng(&g->s) % 2 ? IR_NOT : IR_SIGN, a.r), true, 0);
    else push(g, emit_op(g, IR_CLAMP, 3, x, NULL, NULL), true, 0);
    return;
  }
  case 1:
  case 2:
  case 3: {
    static const ir_op ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_MAX, IR_MIN, IR_POW};
    pv b = partner(g, &a);
    push(g, binary(g, ops[rng(&g->s) % 7], a.r, b.r), true, 0);
    return;
  }
  case 4: {
    pv b = partner(g, &a), c = partner(g, &a);
    ir_attr at = {0};
    at.cmp = (jit_cmp_op)(rng(&g->s) % 6);
    ir_ref x[2] = {a.r, b.r};
    ir_ref p = emit_op(g, IR_CMP, 2, x, &at, NULL);
    ir_ref y[3] = {p, a.r, c.r};
    push(g, emit_op(g, IR_SELECT, 3, y, NULL, NULL), true, 0);
    return;
  }
  case 5: {
    static const jit_dtype via[] = {JIT_I8,  JIT_U8,   JIT_I32, JIT_I64, JIT_F32,
                                    JIT_F64, JIT_BOOL, JIT_F16, JIT_U32, JIT_U64};
    ir_type tv = *t;
    tv.dtype = via[rng(&g->s) % 10];
    ir_ref c1 = emit_op(g, IR_CONVERT, 1, &a.r, NULL, &tv);
    if (c1 == IR_NOREF) return;
    ir_type tb = *t;
    push(g, emit_op(g, IR_CONVERT, 1, &c1, NULL, &tb), true, 0);
    return;
  }
  default: push_iota_mul(g, a, t); return;
  }
}

/* Indexing: rev, pad, take (a gather along an axis at i32 indices iota * m + o, so that some
   are clamped) and dynamic_slice (a gather of a window at one start per dim). */
static void step_index(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  ir_attr at = {0};
  if (t->rank == 0) return;
  switch (rng(&g->s) % 4) {
  case 0:
    for (int d = 0; d < t->rank; d++)
      if (rng(&g->s) % 2) at.dims.d[at.dims.n++] = (uint8_t)d;
    if (!at.dims.n) at.dims.d[at.dims.n++] = (uint8_t)(t->rank - 1);
    push(g, emit_op(g, IR_REV, 1, &a.r, &at, NULL), a.exact, a.bound);
    return;
  case 1: {
    for (int d = 0; d < t->rank; d++) {
      at.pad.lo[d] = irange(&g->s, -1, 2);
      at.pad.hi[d] = irange(&g->s, -1, 2);
      at.pad.interior[d] = irange(&g->s, 0, 1);
    }
    ir_type st = {.dtype = t->dtype};
    double v = ir_dtype_is_float(t->dtype) ? 0.5 : 3;
    ir_ref x[2] = {a.r, mk_const(g, &st, t->dtype == JIT_BOOL ? 1 : v)};
    push(g, emit_op(g, IR_PAD, 2, x, &at, NULL), a.exact, a.bound > 3 ? a.bound : 3);
    return;
  }
  default: {
    bool take = rng(&g->s) % 4 != 3;
    int axis = (int)(rng(&g->s) % (uint64_t)t->rank);
    ir_gather *ga = &at.gather;
    ir_type it = {.dtype = JIT_I32, .rank = 1, .dims = {take ? irange(&g->s, 1, 9) : t->rank}};
    ir_attr io = {0};
    ir_ref idx = emit_op(g, IR_IOTA, 0, NULL, &io, &it);
    ir_ref m = mk_const(g, &it, (double)irange(&g->s, -2, 3)), o = mk_const(g, &it, (double)irange(&g->s, -3, 4));
    idx = binary(g, IR_ADD, binary(g, IR_MUL, idx, m), o);
    for (int d = 0; d < t->rank; d++) {
      ga->sizes[d] = take && d == axis ? 1 : take ? t->dims[d] : irange(&g->s, 0, t->dims[d]);
      if (!take) ga->offset_dims.d[ga->offset_dims.n++] = (uint8_t)d, ga->start_map.d[ga->start_map.n++] = (uint8_t)d;
      else if (d != axis) ga->offset_dims.d[ga->offset_dims.n++] = (uint8_t)d; /* the indices dim sits at axis */
    }
    if (take) {
      if (t->dims[axis] == 0) return;
      ga->collapsed = (ir_dims){1, {(uint8_t)axis}};
      ga->start_map = (ir_dims){1, {(uint8_t)axis}};
      ga->index_dim = 1;
    }
    ir_ref x[2] = {a.r, idx};
    push(g, emit_op(g, IR_GATHER, 2, x, &at, NULL), a.exact, a.bound);
    return;
  }
  }
}

/* A random permutation of 0..n-1 into d. */
static void shuffle(gen *g, uint8_t *d, int n) {
  for (int i = 0; i < n; i++) d[i] = (uint8_t)i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng(&g->s) % (uint64_t)(i + 1));
    uint8_t x = d[i];
    d[i] = d[j];
    d[j] = x;
  }
}

/* fft (a quarter of the f32 / f64 draws), conv (floats, rank >= 3: random dimension numbers,
   strides, pads, dilations, groups, against a kernel made of iotas) or reduce_window (pads smaller than the window, so that every window
   holds an element of the operand). */
/* real(rfft(x)) over the last 1 or 2 dims of an f32 / f64 value (complex in between, expanded by
   both the interpreter and the compiler): each term a sum of n values. */
static void step_fft(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  ir_attr at = {0};
  int nd = t->rank >= 2 && rng(&g->s) % 2 ? 2 : 1;
  double n = 1;
  at.fft.type = IR_RFFT_R2C;
  at.fft.n_dims = (uint8_t)nd;
  for (int i = 0; i < nd; i++) n *= (double)(at.fft.lengths[i] = t->dims[t->rank - nd + i]);
  ir_ref y = emit_op(g, IR_FFT, 1, &a.r, &at, NULL);
  if (y == IR_NOREF || n < 1) return;
  ir_type rt = *ty(g, y);
  rt.dtype = t->dtype;
  push(g, emit_op(g, IR_REAL, 1, &y, NULL, &rt), false, a.bound * n);
}

/* a [.., K] @ w [K, N] with w made of iotas (i / 4 - j / 8; i32: i - j) and N random: the dot
   and what later steps make of it (epilogues, sums over N: core_dot.c's programs) meet the
   interpreter. */
static void step_dot(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  bool fl = ir_dtype_is_float(t->dtype);
  static const int64_t ns[] = {1, 5, 16, 33, 40};
  ir_type wt = {.dtype = t->dtype, .rank = 2};
  wt.dims[0] = t->dims[t->rank - 1];
  wt.dims[1] = ns[rng(&g->s) % 5];
  double k = (double)wt.dims[0], bound = a.bound * k * (0.25 * k + 0.125 * (double)wt.dims[1]);
  if (k == 0 || ir_type_numel(&wt) > MAX_NUMEL || (fl && bound > 1e4)) return;
  ir_attr i0 = {0}, i1 = {0};
  i1.axis = 1;
  ir_type it = wt;
  it.dtype = JIT_I32;
  ir_ref q = emit_op(g, IR_IOTA, 0, NULL, &i0, &it), r = emit_op(g, IR_IOTA, 0, NULL, &i1, &it);
  if (q == IR_NOREF || r == IR_NOREF) return;
  q = emit_op(g, IR_CONVERT, 1, &q, NULL, &wt);
  r = emit_op(g, IR_CONVERT, 1, &r, NULL, &wt);
  ir_ref w = fl ? binary(g, IR_SUB, binary(g, IR_MUL, q, mk_const(g, &wt, 0.25)),
                         binary(g, IR_MUL, r, mk_const(g, &wt, 0.125)))
                : binary(g, IR_SUB, q, r);
  ir_attr dd = {0};
  dd.dot.n_contract = 1;
  dd.dot.lhs_contract[0] = (uint8_t)(t->rank - 1);
  ir_ref x[2] = {a.r, w};
  ir_ref d = emit_op(g, IR_DOT, 2, x, &dd, NULL);
  push(g, d, !fl && a.exact, bound);
  if (d == IR_NOREF || !fl || rng(&g->s) % 2) return;
  /* a per-row loss of it: sum((d - b)^2, last axis) / N, as a reducing epilogue runs it */
  pv b = partner(g, &(pv){d, false, bound});
  const ir_type *dt = ty(g, d);
  double n = (double)dt->dims[dt->rank - 1], lb = n * (bound + b.bound) * (bound + b.bound);
  if (lb > 1e4) return;
  ir_ref e = binary(g, IR_SUB, d, b.r);
  ir_attr ra = {0};
  ra.dims.n = 1;
  ra.dims.d[0] = (uint8_t)(dt->rank - 1);
  ir_ref sq = binary(g, IR_MUL, e, e), sum = emit_op(g, IR_REDUCE_SUM, 1, &sq, &ra, NULL);
  if (sum == IR_NOREF) return;
  push(g, binary(g, IR_DIV, sum, mk_const(g, ty(g, sum), n)), false, lb / n);
}

static void step_window(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  ir_attr at = {0};
  if (t->rank == 0) return;
  if ((ir_dtype_is_float(t->dtype) || t->dtype == JIT_I32) && rng(&g->s) % 3 == 0) {
    step_dot(g, a);
    return;
  }
  if ((t->dtype == JIT_F32 || t->dtype == JIT_F64) && rng(&g->s) % 4 == 0) {
    step_fft(g, a);
    return;
  }
  if (rng(&g->s) % 2 && t->rank >= 3 && ir_dtype_is_float(t->dtype)) {
    ir_conv *c = &at.conv;
    int rank = t->rank, ns = rank - 2;
    shuffle(g, c->lhs, rank);
    shuffle(g, c->rhs, rank);
    shuffle(g, c->out, rank);
    int64_t C = t->dims[c->lhs[1]];
    c->groups = C % 2 == 0 && rng(&g->s) % 3 == 0 ? 2 : 1;
    c->batch_groups = 1;
    ir_type kt = {.dtype = t->dtype, .rank = rank};
    kt.dims[c->rhs[0]] = c->groups * irange(&g->s, 1, 3);
    kt.dims[c->rhs[1]] = C / c->groups;
    int64_t terms = C / c->groups;
    for (int i = 0; i < ns; i++) {
      kt.dims[c->rhs[2 + i]] = irange(&g->s, 1, 3);
      terms *= kt.dims[c->rhs[2 + i]];
      c->stride[i] = irange(&g->s, 1, 2);
      c->pad_lo[i] = irange(&g->s, -1, 2);
      c->pad_hi[i] = irange(&g->s, -1, 2);
      c->lhs_dil[i] = irange(&g->s, 1, 2);
      c->rhs_dil[i] = irange(&g->s, 1, 2);
    }
    double bound = a.bound * 3 * (double)terms; /* |kernel| < 3 */
    if (bound > 1e4) return;
    /* kernel = iota(dim 0) / 4 - iota(last dim) / 8: small distinct values */
    ir_attr i0 = {0}, i1 = {0};
    i1.axis = rank - 1;
    ir_type it = kt;
    it.dtype = JIT_I32;
    if (ir_type_numel(&kt) > MAX_NUMEL) return;
    ir_ref q = emit_op(g, IR_IOTA, 0, NULL, &i0, &it), r = emit_op(g, IR_IOTA, 0, NULL, &i1, &it);
    if (q == IR_NOREF || r == IR_NOREF) return;
    q = emit_op(g, IR_CONVERT, 1, &q, NULL, &kt);
    r = emit_op(g, IR_CONVERT, 1, &r, NULL, &kt);
    ir_ref w = binary(g, IR_SUB, binary(g, IR_MUL, q, mk_const(g, &kt, 0.25)),
                      binary(g, IR_MUL, r, mk_const(g, &kt, 0.125)));
    ir_ref x[2] = {a.r, w};
    push(g, emit_op(g, IR_CONV, 2, x, &at, NULL), false, bound);
    return;
  }
  ir_window *w = &at.window;
  w->kind = (uint8_t)(rng(&g->s) % 3);
  double n = 1;
  for (int d = 0; d < t->rank; d++) {
    w->size[d] = irange(&g->s, 1, 3);
    w->stride[d] = irange(&g->s, 1, 2);
    w->pad_lo[d] = irange(&g->s, 0, w->size[d] - 1);
    w->pad_hi[d] = irange(&g->s, 0, w->size[d] - 1);
    n *= (double)w->size[d];
  }
  bool sum = w->kind == JIT_WINDOW_SUM, fl = ir_dtype_is_float(t->dtype);
  push(g, emit_op(g, IR_REDUCE_WINDOW, 1, &a.r, &at, NULL), a.exact && !(sum && fl),
       sum ? a.bound * n : a.bound);
}

/* Movement and reductions (any dtype). */
static void step_shape(gen *g, pv a) {
  const ir_type *t = ty(g, a.r);
  ir_type nt = *t;
  ir_attr at = {0};
  bool fl = ir_dtype_is_float(t->dtype);
  switch (rng(&g->s) % 9) {
  case 8: step_window(g, a); return;
  case 7: step_index(g, a); return;
  case 0: { /* transpose */
    int rk = t->rank < IR_MAX_RANK ? t->rank : IR_MAX_RANK;
    if (rk < 2) return;
    uint8_t perm[IR_MAX_RANK];
    for (int i = 0; i < IR_MAX_RANK; i++) perm[i] = (uint8_t)(i < rk ? i : 0); /* zero past rk */
    for (int i = rk - 1; i > 0; i--) {
      int j = (int)(rng(&g->s) % (uint64_t)(i + 1));
      uint8_t x = perm[i];
      perm[i] = perm[j];
      perm[j] = x;
    }
    at.dims.n = (uint8_t)rk;
    memcpy(at.dims.d, perm, sizeof perm);
    push(g, emit_op(g, IR_TRANSPOSE, 1, &a.r, &at, NULL), a.exact, a.bound);
    return;
  }
  case 1: { /* broadcast: a new dim somewhere */
    if (t->rank >= 4) return;
    int pos = (int)(rng(&g->s) % (uint64_t)(t->rank + 1));
    static const int64_t sizes[] = {1, 2, 3, 5, 16};
    nt.rank = t->rank + 1;
    at.dims.n = (uint8_t)t->rank;
    for (int i = 0, j = 0; i < nt.rank; i++) {
      if (i == pos) {
        nt.dims[i] = sizes[rng(&g->s) % 5];
      } else {
        nt.dims[i] = t->dims[j];
        at.dims.d[j++] = (uint8_t)i;
      }
    }
    push(g, emit_op(g, IR_BROADCAST, 1, &a.r, &at, &nt), a.exact, a.bound);
    return;
  }
  case 2: { /* slice */
    if (t->rank == 0) return;
    for (int i = 0; i < t->rank; i++) {
      int64_t d = t->dims[i];
      int64_t lo = d ? irange(&g->s, 0, d - 1) : 0, hi = d ? irange(&g->s, lo + 1, d) : 0;
      at.slice.start[i] = lo;
      at.slice.limit[i] = hi;
      at.slice.stride[i] = irange(&g->s, 1, 3);
    }
    push(g, emit_op(g, IR_SLICE, 1, &a.r, &at, NULL), a.exact, a.bound);
    return;
  }
  case 3: { /* concat with a partner along some axis */
    if (t->rank == 0) return;
    pv b = partner(g, &a);
    at.axis = (int64_t)(rng(&g->s) % (uint64_t)t->rank);
    ir_ref x[3] = {a.r, b.r, a.r};
    uint32_t n = 2 + (uint32_t)(rng(&g->s) & 1);
    push(g, emit_op(g, IR_CONCAT, n, x, &at, NULL), a.exact && b.exact,
         a.bound > b.bound ? a.bound : b.bound);
    return;
  }
  case 4:
  case 5: { /* reduce some axes, maybe keep dims and combine with the input (row patterns) */
    if (t->rank == 0) return;
    ir_op op = (ir_op)(IR_REDUCE_SUM + rng(&g->s) % 3);
    if (t->dtype == JIT_BOOL) op = IR_REDUCE_MAX;
    bool trailing = rng(&g->s) % 2;
    at.dims.n = 0;
    for (int i = 0; i < t->rank; i++)
      if (trailing ? i == t->rank - 1 : rng(&g->s) % 2) at.dims.d[at.dims.n++] = (uint8_t)i;
    if (at.dims.n == 0) at.dims.d[at.dims.n++] = (uint8_t)(t->rank - 1);
    int64_t red = 1;
    for (int i = 0; i < at.dims.n; i++) red *= t->dims[at.dims.d[i]];
    bool sum = op == IR_REDUCE_SUM;
    double bound = sum ? a.bound * (double)red : a.bound;
    if (fl && sum && bound > 1e4) return;
    ir_ref r = emit_op(g, op, 1, &a.r, &at, NULL);
    if (r == IR_NOREF) return;
    bool exact = a.exact && !(fl && sum);
    if (rng(&g->s) % 2) {
      push(g, r, exact, bound);
      return;
    }
    /* broadcast back: keepdims reshape then broadcast, combined with a */
    ir_type kt = *t;
    for (int i = 0; i < at.dims.n; i++) kt.dims[at.dims.d[i]] = 1;
    ir_ref k = emit_op(g, IR_RESHAPE, 1, &r, NULL, &kt);
    ir_attr bt = {0};
    bt.dims.n = (uint8_t)t->rank;
    for (int i = 0; i < t->rank; i++) bt.dims.d[i] = (uint8_t)i;
    ir_ref b = emit_op(g, IR_BROADCAST, 1, &k, &bt, t);
    if (b == IR_NOREF) return;
    ir_op comb = fl ? (rng(&g->s) % 2 ? IR_SUB : IR_MUL) : IR_ADD;
    if (fl && comb == IR_MUL && a.bound * bound > 1e4) comb = IR_SUB;
    push(g, binary(g, comb, a.r, b), exact, a.bound + bound);
    return;
  }
  default: { /* reshape */
    int64_t n = ir_type_numel(t);
    if (rng(&g->s) % 2) {
      nt.rank = 1;
      nt.dims[0] = n;
    } else {
      /* split: a factor of n, then the rest, with a 1 somewhere */
      int64_t f = 1;
      for (int64_t c = 2; c <= 7; c++)
        if (n % c == 0 && rng(&g->s) % 2) f = c;
      nt.rank = 3;
      nt.dims[0] = f;
      nt.dims[1] = 1;
      nt.dims[2] = n / (f ? f : 1);
      if (n == 0) nt.dims[2] = 0;
    }
    for (int i = nt.rank; i < IR_MAX_RANK; i++) nt.dims[i] = 0;
    push(g, emit_op(g, IR_RESHAPE, 1, &a.r, NULL, &nt), a.exact, a.bound);
    return;
  }
  }
}

/* A random function; exact[r] says which results are exact. */
ir_func *rp_random_program(uint64_t seed, bool *exact, uint32_t *n_res) {
  gen g;
  memset(&g, 0, sizeof g);
  g.s = seed * 0x9e3779b97f4a7c15ull + 17;
  g.f = ir_func_new("rand");
  assert_non_null(g.f);
  static const jit_dtype dts[] = {JIT_F32, JIT_F32, JIT_F32, JIT_F32, JIT_F64, JIT_F16,
                                  JIT_BF16, JIT_I32, JIT_I8, JIT_U8, JIT_I64, JIT_U32, JIT_U64};
  g.dt = dts[rng(&g.s) % (sizeof dts / sizeof dts[0])];
  static const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 32, 33, 64, 100};
  ir_type t = {0};
  t.dtype = g.dt;
  t.rank = (int)(rng(&g.s) % 4);
  int64_t n = 1;
  for (int i = 0; i < t.rank; i++) {
    int64_t d;
    do d = sizes[rng(&g.s) % 14];
    while (n * d > 2000 && d > 1);
    t.dims[i] = d;
    n *= d;
  }
  int np = 1 + (int)(rng(&g.s) % 3);
  for (int i = 0; i < np; i++) {
    ir_type pt = t;
    if (i > 0 && t.rank > 0 && rng(&g.s) % 2) pt.dims[rng(&g.s) % (uint64_t)t.rank] = 1;
    ir_ref p = ir_emit_param(g.f, ir_type_intern(g.f, &pt));
    push(&g, p, true, 2);
  }
  /* the params were emitted first; everything else follows */
  int steps = 3 + (int)(rng(&g.s) % 12);
  for (int k = 0; k < steps; k++) {
    pv a = *pick(&g);
    uint64_t c = rng(&g.s) % 10;
    bool fl = ir_dtype_is_float(ty(&g, a.r)->dtype);
    if (c < 4) step_shape(&g, a);
    else if (fl) step_float(&g, a);
    else step_int(&g, a);
  }
  /* results: the newest value and up to two others (never the same value twice here) */
  uint32_t nr = 0;
  ir_ref res[3];
  res[nr] = g.v[g.n - 1].r;
  exact[nr++] = g.v[g.n - 1].exact;
  for (int k = 0; k < 2 && g.n > 1; k++) {
    pv *v = &g.v[rng(&g.s) % (uint64_t)g.n];
    bool dup = false;
    for (uint32_t j = 0; j < nr; j++) dup |= res[j] == v->r;
    if (dup) continue;
    res[nr] = v->r;
    exact[nr++] = v->exact;
  }
  assert_int_equal(ir_set_results(g.f, nr, res), JIT_OK);
  *n_res = nr;
  return g.f;
}
