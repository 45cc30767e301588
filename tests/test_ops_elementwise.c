/* test_ops_elementwise.c: end-to-end tests of the elementwise ops through the public API (scalars,
 * full, iota, unary, binary, cmp, select, convert), each against plain C loops in double. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "support/optest.h"
#include "tjit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

static const jit_dtype float_dts[] = {JIT_F32, JIT_F64, JIT_F16, JIT_BF16};
static const jit_dtype int_dts[] = {JIT_I32, JIT_I64, JIT_I8, JIT_U8};

typedef struct shape {
  int rank;
  int64_t d[JIT_MAX_RANK];
} shape;

/* rank 0, size 1, size 0, a vector with a tail, matrices and higher ranks */
static const shape shapes[] = {
    {0, {0}}, {1, {1}}, {1, {7}}, {2, {3, 4}}, {3, {2, 0, 3}}, {3, {4, 1, 5}},
    {4, {2, 3, 2, 3}}, {1, {67}}, {1, {0}},
};

static void what_str(char *buf, size_t n, const char *op, jit_dtype dt, const shape *s) {
  char sb[96];
  snprintf(buf, n, "%s %s%s", op, jit_dtype_name(dt), ot_shape_str(s->rank, s->d, sb, sizeof sb));
}

/* ---- unary ---------------------------------------------------------------------------------------- */
enum { U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_TANH, U_LOGISTIC, U_SIN, U_COS, U_ERF,
       U_FLOOR, U_RELU, N_UNARY };
static const char *const unary_names[N_UNARY] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh",
                                                 "logistic", "sin", "cos", "erf", "floor", "relu"};

static jit_val apply_unary(jit_trace *t, int op, jit_val x) {
  switch (op) {
  case U_NEG: return jit_neg(t, x);
  case U_ABS: return jit_abs(t, x);
  case U_EXP: return jit_exp(t, x);
  case U_LOG: return jit_log(t, x);
  case U_SQRT: return jit_sqrt(t, x);
  case U_RSQRT: return jit_rsqrt(t, x);
  case U_TANH: return jit_tanh(t, x);
  case U_LOGISTIC: return jit_logistic(t, x);
  case U_SIN: return jit_sin(t, x);
  case U_COS: return jit_cos(t, x);
  case U_ERF: return jit_erf(t, x);
  case U_FLOOR: return jit_floor(t, x);
  default: return jit_relu(t, x);
  }
}

static double ref_unary(int op, double x) {
  switch (op) {
  case U_NEG: return -x;
  case U_ABS: return fabs(x);
  case U_EXP: return exp(x);
  case U_LOG: return log(x);
  case U_SQRT: return sqrt(x);
  case U_RSQRT: return 1.0 / sqrt(x);
  case U_TANH: return tanh(x);
  case U_LOGISTIC: return 1.0 / (1.0 + exp(-x));
  case U_SIN: return sin(x);
  case U_COS: return cos(x);
  case U_ERF: return erf(x);
  case U_FLOOR: return floor(x);
  default: return isnan(x) ? x : x > 0 ? x : 0.0; /* max(x, 0) propagates NaN */
  }
}

static bool positive_domain(int op) { return op == U_LOG || op == U_SQRT || op == U_RSQRT; }

/* args: x in (-3, 3), xp in (0.05, 4) for the ops defined on positives only */
static void unary_float_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int k = 0; k < N_UNARY; k++) r[k] = apply_unary(t, k, positive_domain(k) ? a[1] : a[0]);
}

static void test_unary_float(void **state) {
  bool ok = true;
  for (int d = 0; d < N_OF(float_dts); d++) {
    for (int s = 0; s < N_OF(shapes); s++) {
      jit_dtype dt = float_dts[d];
      const shape *sh = &shapes[s];
      ot_array in[2] = {ot_random(dt, sh->rank, sh->d, 100 + s, -3, 3),
                        ot_random(dt, sh->rank, sh->d, 200 + s, 0.05, 4)};
      ot_array out[N_UNARY];
      OT_ASSERT_OK(ot_run("unary", unary_float_fn, NULL, 2, in, N_UNARY, out));
      for (int k = 0; k < N_UNARY; k++) {
        const ot_array *x = &in[positive_domain(k) ? 1 : 0];
        ot_array want = ot_zeros(dt, sh->rank, sh->d);
        for (int64_t i = 0; i < want.n; i++) want.v[i] = ref_unary(k, x->v[i]);
        char what[128];
        what_str(what, sizeof what, unary_names[k], dt, sh);
        ok &= ot_expect(what, &out[k], &want);
      }
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
  }
  assert_true(ok);
}

/* The special values every float unary op must get right. */
static const double edge_values[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 0.5, -0.5,
                                     2.5, -2.5, 1e-3, 30.0, -30.0, 100.0, -100.0};

static void unary_edge_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int k = 0; k < N_UNARY; k++) r[k] = apply_unary(t, k, a[0]);
}

static void test_unary_edge_values(void **state) {
  bool ok = true;
  shape sh = {1, {N_OF(edge_values)}};
  for (int d = 0; d < N_OF(float_dts); d++) {
    jit_dtype dt = float_dts[d];
    ot_array in = ot_values(dt, 1, sh.d, edge_values);
    ot_array out[N_UNARY];
    OT_ASSERT_OK(ot_run("unary_edge", unary_edge_fn, NULL, 1, &in, N_UNARY, out));
    for (int k = 0; k < N_UNARY; k++) {
      ot_array want = ot_zeros(dt, 1, sh.d);
      for (int64_t i = 0; i < want.n; i++) want.v[i] = ref_unary(k, in.v[i]);
      char what[128];
      what_str(what, sizeof what, unary_names[k], dt, &sh);
      ok &= ot_expect(what, &out[k], &want);
    }
    ot_free(&in);
  }
  assert_true(ok);
}

/* neg, abs and relu on ints (the other unary ops are float-only) */
static void unary_int_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_neg(t, a[0]);
  r[1] = jit_abs(t, a[0]);
  r[2] = jit_relu(t, a[0]);
}

static void test_unary_int(void **state) {
  bool ok = true;
  static const int ops[3] = {U_NEG, U_ABS, U_RELU};
  for (int d = 0; d < N_OF(int_dts); d++) {
    for (int s = 0; s < N_OF(shapes); s++) {
      jit_dtype dt = int_dts[d];
      const shape *sh = &shapes[s];
      ot_array in = ot_random(dt, sh->rank, sh->d, 300 + s, dt == JIT_U8 ? 0 : -100, 100);
      ot_array out[3];
      OT_ASSERT_OK(ot_run("unary_int", unary_int_fn, NULL, 1, &in, 3, out));
      for (int k = 0; k < 3; k++) {
        ot_array want = ot_zeros(dt, sh->rank, sh->d);
        /* neg of a u8 wraps (ot_round), as NumPy and XLA do */
        for (int64_t i = 0; i < want.n; i++) want.v[i] = ref_unary(ops[k], in.v[i]);
        char what[128];
        what_str(what, sizeof what, unary_names[ops[k]], dt, sh);
        ok &= ot_expect(what, &out[k], &want);
      }
      ot_free(&in);
    }
  }
  assert_true(ok);
}

/* ---- binary --------------------------------------------------------------------------------------- */
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN, B_POW, N_BINARY };
static const char *const binary_names[N_BINARY] = {"add", "sub", "mul", "div", "max", "min", "pow"};

static jit_val apply_binary(jit_trace *t, int op, jit_val a, jit_val b) {
  switch (op) {
  case B_ADD: return jit_add(t, a, b);
  case B_SUB: return jit_sub(t, a, b);
  case B_MUL: return jit_mul(t, a, b);
  case B_DIV: return jit_div(t, a, b);
  case B_MAX: return jit_max(t, a, b);
  case B_MIN: return jit_min(t, a, b);
  default: return jit_pow(t, a, b);
  }
}

/* Float semantics are IEEE's (max/min propagate NaN, as jnp.maximum does); int division truncates
   toward zero and pow takes non-negative exponents (XLA's integer semantics). */
static double ref_binary(jit_dtype dt, int op, double a, double b) {
  bool fl = ot_is_float(dt);
  switch (op) {
  case B_ADD: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_DIV: return fl ? a / b : trunc(a / b);
  case B_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
  case B_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
  default:
    if (fl) return pow(a, b);
    double p = 1;
    for (int i = 0; i < (int)b; i++) p = ot_round(dt, p * a);
    return p;
  }
}

typedef struct shape_pair {
  shape a, b;
} shape_pair;

static const shape_pair pairs[] = {
    {{2, {3, 1}}, {1, {4}}},          {{3, {2, 1, 5}}, {2, {3, 1}}},
    {{0, {0}}, {2, {2, 3}}},          {{2, {2, 3}}, {0, {0}}},
    {{0, {0}}, {0, {0}}},             {{2, {0, 3}}, {1, {3}}},
    {{2, {2, 1}}, {1, {0}}},          {{2, {4, 5}}, {2, {4, 5}}},
    {{1, {1}}, {1, {7}}},             {{4, {2, 3, 1, 4}}, {3, {3, 5, 1}}},
    {{1, {67}}, {1, {67}}},           {{3, {1, 1, 1}}, {0, {0}}},
};

/* The reference of a broadcasting binary op: out_dt[broadcast(a, b)]. */
static ot_array ref_bcast(jit_dtype out_dt, const ot_array *a, const ot_array *b,
                          double (*f)(jit_dtype, int, double, double), jit_dtype f_dt, int op) {
  int rank;
  int64_t sh[JIT_MAX_RANK], idx[JIT_MAX_RANK];
  assert_true(ot_bcast_shape(a->rank, a->shape, b->rank, b->shape, &rank, sh));
  ot_array w = ot_zeros(out_dt, rank, sh);
  for (int64_t i = 0; i < w.n; i++) {
    ot_unravel(i, rank, sh, idx);
    w.v[i] = f(f_dt, op, a->v[ot_bcast_src(a, rank, idx)], b->v[ot_bcast_src(b, rank, idx)]);
  }
  return w;
}

/* args: a, b (b has no zeros for int division), c, d (pow's base and exponent) */
static void binary_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int k = 0; k < N_BINARY; k++)
    r[k] = k == B_POW ? apply_binary(t, k, a[2], a[3]) : apply_binary(t, k, a[0], a[1]);
}

static void run_binary(jit_dtype dt, const shape_pair *p, uint64_t seed) {
  ot_array in[4];
  bool fl = ot_is_float(dt);
  double lo = -20, hi = 20, base_lo = -4, base_hi = 4, exp_hi = 3;
  if (dt == JIT_U8) lo = 0, hi = 15, base_lo = 0;
  if (dt == JIT_I8) lo = -10, hi = 10;
  if (dt == JIT_I64) lo = -1000000, hi = 1000000, base_lo = -20, base_hi = 20, exp_hi = 6;
  if (fl) lo = -2, hi = 2, base_lo = 0.1, base_hi = 2;
  in[0] = ot_random(dt, p->a.rank, p->a.d, seed, lo, hi);
  in[1] = ot_random(dt, p->b.rank, p->b.d, seed + 1, lo, hi);
  if (!fl)
    for (int64_t i = 0; i < in[1].n; i++)
      if (in[1].v[i] == 0) in[1].v[i] = 1;
  in[2] = ot_random(dt, p->a.rank, p->a.d, seed + 2, base_lo, base_hi);
  in[3] = ot_random(dt, p->b.rank, p->b.d, seed + 3, fl ? -2 : 0, fl ? 2 : exp_hi);
  ot_array out[N_BINARY];
  OT_ASSERT_OK(ot_run("binary", binary_fn, NULL, 4, in, N_BINARY, out));
  bool ok = true;
  for (int k = 0; k < N_BINARY; k++) {
    ot_array want = k == B_POW ? ref_bcast(dt, &in[2], &in[3], ref_binary, dt, k)
                               : ref_bcast(dt, &in[0], &in[1], ref_binary, dt, k);
    char what[160], sa[64], sb[64];
    snprintf(what, sizeof what, "%s %s%s x %s%s", binary_names[k], jit_dtype_name(dt),
             ot_shape_str(p->a.rank, p->a.d, sa, sizeof sa), jit_dtype_name(dt),
             ot_shape_str(p->b.rank, p->b.d, sb, sizeof sb));
    ok &= ot_expect(what, &out[k], &want);
  }
  for (int i = 0; i < 4; i++) ot_free(&in[i]);
  assert_true(ok);
}

static void test_binary_f32(void **state) {
  for (int p = 0; p < N_OF(pairs); p++) run_binary(JIT_F32, &pairs[p], 1000 + p);
}

static void test_binary_other_floats(void **state) {
  static const int some[] = {0, 1, 2, 5, 7, 10};
  for (int d = 1; d < N_OF(float_dts); d++)
    for (int p = 0; p < N_OF(some); p++) run_binary(float_dts[d], &pairs[some[p]], 2000 + p);
}

static void test_binary_ints(void **state) {
  static const int some[] = {0, 1, 2, 4, 6, 7, 10};
  for (int d = 0; d < N_OF(int_dts); d++)
    for (int p = 0; p < N_OF(some); p++) run_binary(int_dts[d], &pairs[some[p]], 3000 + p);
}

/* Special operands: division by zero, NaN through max/min, pow's corner cases, inf arithmetic. */
static void binary_edge_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int k = 0; k < N_BINARY; k++) r[k] = apply_binary(t, k, a[0], a[1]);
}

static void test_binary_edge_values(void **state) {
  static const double av[] = {1, -1, 0, 0, NAN, 1, INFINITY, INFINITY, -2, -2, -2, 0, 0, 2, -0.0};
  static const double bv[] = {0, 0, 0, NAN, 1, NAN, 1, INFINITY, 3, 2, 0.5, 0, -1, -INFINITY, 2};
  int64_t n = N_OF(av);
  bool ok = true;
  for (int d = 0; d < N_OF(float_dts); d++) {
    jit_dtype dt = float_dts[d];
    ot_array in[2] = {ot_values(dt, 1, &n, av), ot_values(dt, 1, &n, bv)};
    ot_array out[N_BINARY];
    OT_ASSERT_OK(ot_run("binary_edge", binary_edge_fn, NULL, 2, in, N_BINARY, out));
    for (int k = 0; k < N_BINARY; k++) {
      ot_array want = ref_bcast(dt, &in[0], &in[1], ref_binary, dt, k);
      char what[64];
      snprintf(what, sizeof what, "%s edge values %s", binary_names[k], jit_dtype_name(dt));
      ok &= ot_expect(what, &out[k], &want);
    }
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
  assert_true(ok);
}

static void div_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_div(t, a[0], a[1]);
}

/* Int division truncates toward zero for every sign combination (C, XLA and lax.div). */
static void test_int_division_signs(void **state) {
  static const double av[] = {7, -7, 7, -7, 6, -6, 0, 1};
  static const double bv[] = {2, 2, -2, -2, 3, 4, 5, -3};
  int64_t n = N_OF(av);
  bool ok = true;
  for (int d = 0; d < 3; d++) { /* the signed ones */
    jit_dtype dt = int_dts[d];
    ot_array in[2] = {ot_values(dt, 1, &n, av), ot_values(dt, 1, &n, bv)};
    ot_array out;
    OT_ASSERT_OK(ot_run("int_div", div_fn, NULL, 2, in, 1, &out));
    ot_array want = ref_bcast(dt, &in[0], &in[1], ref_binary, dt, B_DIV);
    char what[64];
    snprintf(what, sizeof what, "div signs %s", jit_dtype_name(dt));
    ok &= ot_expect(what, &out, &want);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
  assert_true(ok);
}

/* ---- weak scalars, full, iota ----------------------------------------------------------------------- */
enum { W_F64_PLUS, W_I32_PLUS, W_BOTH_WEAK, W_ALONE, W_F16_TIMES, W_I8_MINUS, W_I32_HALF,
       W_BF16_MAX, W_F32_RECIP, W_WEAK_CHAIN, W_F64_TENTH, W_CMP_I32, W_POW2, N_WEAK };

static void weak_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int mode = *(const int *)user;
  switch (mode) {
  case W_F64_PLUS: r[0] = jit_add(t, a[0], jit_scalar(t, 1.5)); break;
  case W_I32_PLUS: r[0] = jit_add(t, a[0], jit_scalar(t, 2)); break;
  case W_BOTH_WEAK: r[0] = jit_add(t, jit_scalar(t, 1.25), jit_scalar(t, 2)); break;
  case W_ALONE: r[0] = jit_scalar(t, 0.1); break;
  case W_F16_TIMES: r[0] = jit_mul(t, jit_scalar(t, 3), a[0]); break;
  case W_I8_MINUS: r[0] = jit_sub(t, a[0], jit_scalar(t, 3)); break;
  case W_I32_HALF: r[0] = jit_add(t, a[0], jit_scalar(t, 0.5)); break;
  case W_BF16_MAX: r[0] = jit_max(t, a[0], jit_scalar(t, 0)); break;
  case W_F32_RECIP: r[0] = jit_div(t, jit_scalar(t, 1), a[0]); break;
  case W_WEAK_CHAIN: r[0] = jit_add(t, a[0], jit_mul(t, jit_scalar(t, 2), jit_scalar(t, 3))); break;
  case W_F64_TENTH: r[0] = jit_add(t, a[0], jit_scalar(t, 0.1)); break;
  case W_CMP_I32: r[0] = jit_cmp(t, JIT_GT, a[0], jit_scalar(t, 0)); break;
  default: r[0] = jit_pow(t, a[0], jit_scalar(t, 2)); break;
  }
}

static void test_scalar_weak_typing(void **state) {
  static const struct {
    int mode;
    jit_dtype in_dt, out_dt;
    shape sh;
  } cases[] = {
      {W_F64_PLUS, JIT_F64, JIT_F64, {2, {2, 3}}},   {W_I32_PLUS, JIT_I32, JIT_I32, {1, {5}}},
      {W_BOTH_WEAK, JIT_F32, JIT_F32, {0, {0}}},     {W_ALONE, JIT_F32, JIT_F32, {0, {0}}},
      {W_F16_TIMES, JIT_F16, JIT_F16, {1, {6}}},     {W_I8_MINUS, JIT_I8, JIT_I8, {2, {2, 2}}},
      {W_BF16_MAX, JIT_BF16, JIT_BF16, {2, {3, 2}}}, {W_F32_RECIP, JIT_F32, JIT_F32, {1, {4}}},
      {W_WEAK_CHAIN, JIT_F64, JIT_F64, {0, {0}}},    {W_F64_TENTH, JIT_F64, JIT_F64, {1, {3}}},
      {W_CMP_I32, JIT_I32, JIT_BOOL, {1, {9}}},      {W_I32_PLUS, JIT_I64, JIT_I64, {1, {0}}},
      {W_POW2, JIT_I32, JIT_I32, {1, {5}}},          {W_POW2, JIT_F32, JIT_F32, {2, {2, 2}}},
  };
  bool ok = true;
  for (int c = 0; c < N_OF(cases); c++) {
    int mode = cases[c].mode;
    const shape *sh = &cases[c].sh;
    bool takes_arg = mode != W_BOTH_WEAK && mode != W_ALONE;
    ot_array in = ot_random(cases[c].in_dt, sh->rank, sh->d, 40 + c, -10, 10);
    if (mode == W_F32_RECIP)
      for (int64_t i = 0; i < in.n; i++) in.v[i] = in.v[i] == 0 ? 1 : in.v[i];
    ot_array out;
    jit_status st = takes_arg ? ot_run("weak", weak_fn, &mode, 1, &in, 1, &out)
                              : ot_run("weak", weak_fn, &mode, 0, NULL, 1, &out);
    OT_ASSERT_OK(st);
    ot_array want = takes_arg ? ot_zeros(cases[c].out_dt, sh->rank, sh->d)
                              : ot_zeros(cases[c].out_dt, 0, NULL);
    for (int64_t i = 0; i < want.n; i++) {
      double x = takes_arg ? in.v[i] : 0;
      switch (mode) {
      case W_F64_PLUS: want.v[i] = x + 1.5; break;
      case W_I32_PLUS: want.v[i] = x + 2; break;
      case W_BOTH_WEAK: want.v[i] = 3.25; break;
      case W_ALONE: want.v[i] = 0.1; break;
      case W_F16_TIMES: want.v[i] = 3 * x; break;
      case W_I8_MINUS: want.v[i] = x - 3; break;
      case W_BF16_MAX: want.v[i] = x > 0 ? x : 0; break;
      case W_F32_RECIP: want.v[i] = 1 / x; break;
      case W_WEAK_CHAIN: want.v[i] = x + 6; break;
      case W_F64_TENTH: want.v[i] = x + 0.1; break;
      case W_CMP_I32: want.v[i] = x > 0; break;
      default: want.v[i] = x * x; break;
      }
    }
    char what[64];
    snprintf(what, sizeof what, "weak scalar case %d", c);
    /* f64 + 0.1 must use the double 0.1, not 0.1 rounded to f32: exact to 1e-15 */
    ok &= ot_expect_tol(what, &out, &want, NULL,
                        mode == W_F64_TENTH ? (ot_tol){1e-15, 0} : ot_tol_of(want.dt));
    ot_free(&in);
  }
  assert_true(ok);

  /* A non-integral weak scalar does not fit an int operand. */
  int mode = W_I32_HALF;
  int64_t n = 4;
  ot_array in = ot_random(JIT_I32, 1, &n, 1, -5, 5), out;
  assert_int_equal(ot_run("weak", weak_fn, &mode, 1, &in, 1, &out), JIT_EDTYPE);
  ot_free(&in);
}

static void full_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const shape *sh = user;
  static const double vals[] = {1, -3, 7, -3, -3, 0.1, -2.5, 2.5, 1e300};
  for (int d = 0; d <= JIT_F64; d++) r[d] = jit_full(t, (jit_dtype)d, sh->rank, sh->d, vals[d]);
}

static void test_full(void **state) {
  static const double vals[] = {1, -3, 7, -3, -3, 0.1, -2.5, 2.5, 1e300};
  static const shape fshapes[] = {{0, {0}}, {1, {3}}, {2, {2, 0}}, {3, {2, 3, 4}}, {1, {1}}};
  bool ok = true;
  for (int s = 0; s < N_OF(fshapes); s++) {
    ot_array out[JIT_F64 + 1];
    OT_ASSERT_OK(ot_run("full", full_fn, (void *)&fshapes[s], 0, NULL, JIT_F64 + 1, out));
    for (int d = 0; d <= JIT_F64; d++) {
      ot_array want = ot_zeros((jit_dtype)d, fshapes[s].rank, fshapes[s].d);
      for (int64_t i = 0; i < want.n; i++) want.v[i] = vals[d];
      char what[64];
      what_str(what, sizeof what, "full", (jit_dtype)d, &fshapes[s]);
      ok &= ot_expect(what, &out[d], &want);
    }
  }
  assert_true(ok);
}

static const jit_dtype iota_dts[] = {JIT_I32, JIT_F32, JIT_I64, JIT_F64, JIT_U8, JIT_BF16};
enum { N_IOTA_DT = 6 };

static void iota_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const shape *sh = user;
  for (int dim = 0; dim < sh->rank; dim++)
    for (int d = 0; d < N_IOTA_DT; d++)
      r[dim * N_IOTA_DT + d] = jit_iota(t, iota_dts[d], sh->rank, sh->d, dim);
}

static void test_iota(void **state) {
  static const shape ishapes[] = {{1, {5}}, {2, {3, 4}}, {3, {2, 3, 4}}, {3, {2, 0, 3}},
                                  {2, {1, 6}}, {4, {2, 1, 3, 2}}};
  bool ok = true;
  for (int s = 0; s < N_OF(ishapes); s++) {
    const shape *sh = &ishapes[s];
    ot_array out[JIT_MAX_RANK * N_IOTA_DT];
    OT_ASSERT_OK(ot_run("iota", iota_fn, (void *)sh, 0, NULL, sh->rank * N_IOTA_DT, out));
    for (int dim = 0; dim < sh->rank; dim++) {
      for (int d = 0; d < N_IOTA_DT; d++) {
        ot_array want = ot_zeros(iota_dts[d], sh->rank, sh->d);
        int64_t idx[JIT_MAX_RANK];
        for (int64_t i = 0; i < want.n; i++) {
          ot_unravel(i, sh->rank, sh->d, idx);
          want.v[i] = (double)idx[dim];
        }
        char what[96], op[32];
        snprintf(op, sizeof op, "iota dim=%d", dim);
        what_str(what, sizeof what, op, iota_dts[d], sh);
        ok &= ot_expect_tol(what, &out[dim * N_IOTA_DT + d], &want, NULL, (ot_tol){0, 0});
      }
    }
  }
  assert_true(ok);
}

/* ---- cmp and select ---------------------------------------------------------------------------------- */
static void cmp_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int c = JIT_EQ; c <= JIT_GE; c++) r[c] = jit_cmp(t, (jit_cmp_op)c, a[0], a[1]);
}

static double ref_cmp(jit_dtype dt, int op, double a, double b) {
  switch (op) {
  case JIT_EQ: return a == b;
  case JIT_NE: return a != b;
  case JIT_LT: return a < b;
  case JIT_LE: return a <= b;
  case JIT_GT: return a > b;
  default: return a >= b;
  }
}

/* Small integer values (as any dtype) so that equal pairs are common; NaNs sprinkled in floats. */
static ot_array cmp_data(jit_dtype dt, const shape *sh, uint64_t seed, int nan_every) {
  ot_array a = ot_random(JIT_I32, sh->rank, sh->d, seed, dt == JIT_U8 ? 0 : -3, 3);
  a.dt = dt;
  if (dt == JIT_BOOL)
    for (int64_t i = 0; i < a.n; i++) a.v[i] = a.v[i] > 0;
  if (ot_is_float(dt))
    for (int64_t i = 0; i < a.n; i += nan_every) a.v[i] = NAN;
  return a;
}

static void test_cmp(void **state) {
  static const char *const cmp_names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  static const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_F16, JIT_BF16, JIT_I32,
                                  JIT_I64, JIT_I8,  JIT_U8,  JIT_BOOL};
  static const int some[] = {0, 1, 2, 5, 7, 10};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    for (int p = 0; p < N_OF(some); p++) {
      const shape_pair *sp = &pairs[some[p]];
      ot_array in[2] = {cmp_data(dts[d], &sp->a, 50 + p, 5), cmp_data(dts[d], &sp->b, 60 + p, 7)};
      ot_array out[6];
      OT_ASSERT_OK(ot_run("cmp", cmp_fn, NULL, 2, in, 6, out));
      for (int c = 0; c < 6; c++) {
        ot_array want = ref_bcast(JIT_BOOL, &in[0], &in[1], ref_cmp, dts[d], c);
        char what[128], sa[64], sb[64];
        snprintf(what, sizeof what, "cmp %s %s%s x %s", cmp_names[c], jit_dtype_name(dts[d]),
                 ot_shape_str(sp->a.rank, sp->a.d, sa, sizeof sa),
                 ot_shape_str(sp->b.rank, sp->b.d, sb, sizeof sb));
        ok &= ot_expect(what, &out[c], &want);
      }
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
  }
  assert_true(ok);
}

static void select_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_select(t, a[0], a[1], a[2]);
}

static void test_select(void **state) {
  static const shape triples[][3] = {
      {{2, {3, 4}}, {2, {3, 4}}, {2, {3, 4}}}, {{2, {3, 1}}, {1, {4}}, {0, {0}}},
      {{0, {0}}, {2, {2, 3}}, {2, {2, 3}}},    {{2, {2, 3}}, {2, {1, 3}}, {2, {2, 1}}},
      {{2, {0, 2}}, {1, {2}}, {0, {0}}},       {{3, {2, 1, 3}}, {2, {4, 1}}, {1, {1}}},
      {{0, {0}}, {0, {0}}, {0, {0}}},          {{1, {67}}, {1, {67}}, {1, {1}}},
  };
  static const jit_dtype dts[] = {JIT_F32, JIT_I32, JIT_F16, JIT_BOOL, JIT_F64, JIT_U8};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    for (int s = 0; s < N_OF(triples); s++) {
      const shape *sh = triples[s];
      ot_array in[3] = {ot_random(JIT_BOOL, sh[0].rank, sh[0].d, 70 + s, 0, 1),
                        ot_random(dts[d], sh[1].rank, sh[1].d, 80 + s, 0, 50),
                        ot_random(dts[d], sh[2].rank, sh[2].d, 90 + s, 0, 50)};
      ot_array out;
      OT_ASSERT_OK(ot_run("select", select_fn, NULL, 3, in, 1, &out));
      int r1, r2;
      int64_t s1[JIT_MAX_RANK], s2[JIT_MAX_RANK], idx[JIT_MAX_RANK];
      assert_true(ot_bcast_shape(sh[0].rank, sh[0].d, sh[1].rank, sh[1].d, &r1, s1));
      assert_true(ot_bcast_shape(r1, s1, sh[2].rank, sh[2].d, &r2, s2));
      ot_array want = ot_zeros(dts[d], r2, s2);
      for (int64_t i = 0; i < want.n; i++) {
        ot_unravel(i, r2, s2, idx);
        bool p = in[0].v[ot_bcast_src(&in[0], r2, idx)] != 0;
        want.v[i] = p ? in[1].v[ot_bcast_src(&in[1], r2, idx)] : in[2].v[ot_bcast_src(&in[2], r2, idx)];
      }
      char what[64];
      snprintf(what, sizeof what, "select %s case %d", jit_dtype_name(dts[d]), s);
      ok &= ot_expect_tol(what, &out, &want, NULL, (ot_tol){0, 0});
      for (int i = 0; i < 3; i++) ot_free(&in[i]);
    }
  }
  assert_true(ok);
}

/* select with a weak scalar branch takes the other branch's dtype, like jnp.where(p, x, 0) */
static void select_weak_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_select(t, jit_cmp(t, JIT_GT, a[0], jit_scalar(t, 0)), a[0], jit_scalar(t, -1));
}

static void test_select_weak_scalar(void **state) {
  static const jit_dtype dts[] = {JIT_F32, JIT_I32, JIT_BF16, JIT_I8};
  int64_t n = 17;
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    ot_array in = ot_random(dts[d], 1, &n, 7 + d, -5, 5), out;
    OT_ASSERT_OK(ot_run("select_weak", select_weak_fn, NULL, 1, &in, 1, &out));
    ot_array want = ot_zeros(dts[d], 1, &n);
    for (int64_t i = 0; i < n; i++) want.v[i] = in.v[i] > 0 ? in.v[i] : -1;
    ok &= ot_expect("select weak", &out, &want);
    ot_free(&in);
  }
  assert_true(ok);
}

/* ---- convert -------------------------------------------------------------------------------------- */
/* args: x (values every signed dtype holds), xp (non-negative, for u8) */
static void convert_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  for (int d = 0; d <= JIT_F64; d++) r[d] = jit_convert(t, d == JIT_U8 ? a[1] : a[0], (jit_dtype)d);
}

static void test_convert_all_pairs(void **state) {
  static const shape cshapes[] = {{1, {23}}, {0, {0}}, {2, {2, 0}}, {2, {3, 5}}};
  bool ok = true;
  for (int src = 0; src <= JIT_F64; src++) {
    for (int s = 0; s < N_OF(cshapes); s++) {
      const shape *sh = &cshapes[s];
      jit_dtype sdt = (jit_dtype)src;
      double lo = sdt == JIT_U8 ? 0 : -100;
      ot_array in[2] = {ot_random(sdt, sh->rank, sh->d, 500 + s, lo, 100),
                        ot_random(sdt, sh->rank, sh->d, 600 + s, 0, 100)};
      ot_array out[JIT_F64 + 1];
      OT_ASSERT_OK(ot_run("convert", convert_fn, NULL, 2, in, JIT_F64 + 1, out));
      for (int dst = 0; dst <= JIT_F64; dst++) {
        const ot_array *x = &in[dst == JIT_U8 ? 1 : 0];
        ot_array want = ot_zeros((jit_dtype)dst, sh->rank, sh->d);
        /* ot_round truncates toward zero for ints and rounds to nearest even for floats */
        for (int64_t i = 0; i < want.n; i++) want.v[i] = x->v[i];
        char what[64], op[32];
        snprintf(op, sizeof op, "convert %s->%s", jit_dtype_name(src), jit_dtype_name(dst));
        what_str(what, sizeof what, op, (jit_dtype)dst, sh);
        ok &= ot_expect_tol(what, &out[dst], &want, NULL, (ot_tol){0, 0});
      }
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
  }
  assert_true(ok);
}

static void convert_one_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_convert(t, a[0], *(const jit_dtype *)user);
}

/* Hand-computed conversions: round to nearest even at 16 bits, overflow, subnormals, truncation of
   floats toward zero, float -> bool, int -> float rounding. */
static void test_convert_rounding(void **state) {
  static const struct {
    jit_dtype from, to;
    int n;
    double in[12], want[12];
  } cases[] = {
      {JIT_F32, JIT_F16, 10,
       {1 + 0x1p-11, 1 + 0x3p-11, 65519, 65520, 0x1.5p-27, 0x1p-25, 0x3p-25, -0.0, INFINITY, NAN},
       {1, 1 + 0x1p-9, 65504, INFINITY, 0, 0, 0x1p-23, -0.0, INFINITY, NAN}},
      {JIT_F32, JIT_BF16, 7,
       {1 + 0x1p-8, 1 + 0x3p-8, 3.4028234663852886e38, -3.4028234663852886e38, 0x1p-130, NAN, 0.1f},
       {1, 1 + 0x1p-6, INFINITY, -INFINITY, 0x1p-130, NAN, 0.10009765625}},
      {JIT_F64, JIT_F32, 4, {0.1, 1 + 0x1p-24, 1 + 0x3p-24, 1e39}, {0.1f, 1, 1 + 0x1p-22, INFINITY}},
      {JIT_F32, JIT_I32, 8, {-2.75, 2.75, -0.5, 0.5, 99.875, -99.875, 0, -0.0},
       {-2, 2, 0, 0, 99, -99, 0, 0}},
      {JIT_F32, JIT_I8, 4, {-2.75, 2.75, 127.5, -128.5}, {-2, 2, 127, -128}},
      {JIT_F32, JIT_U8, 3, {0.5, 2.75, 255.5}, {0, 2, 255}},
      {JIT_F64, JIT_I64, 3, {-1e15 - 0.5, 1e15 + 0.5, -7.9}, {-1e15, 1e15, -7}},
      {JIT_BF16, JIT_I32, 3, {-99.5, 1.5, -1.5}, {-99, 1, -1}},
      {JIT_F16, JIT_I32, 3, {-1023.5, 0.75, -0.75}, {-1023, 0, 0}},
      {JIT_F32, JIT_BOOL, 5, {0.0, -0.0, 0.125, NAN, -3}, {0, 0, 1, 1, 1}},
      {JIT_I32, JIT_F32, 2, {16777217, -16777219}, {16777216, -16777220}},
      {JIT_I64, JIT_F64, 2, {0, 3}, {9007199254740992.0, 3}}, /* in: 2^53 + 1, 3 (below) */
      {JIT_I32, JIT_F16, 3, {2049, 2051, 70000}, {2048, 2052, INFINITY}},
      {JIT_I32, JIT_BF16, 2, {257, 259}, {256, 260}},
      {JIT_BOOL, JIT_F32, 2, {0, 1}, {0, 1}},
      {JIT_BOOL, JIT_I32, 2, {1, 0}, {1, 0}},
      {JIT_I8, JIT_BOOL, 3, {0, -1, 5}, {0, 1, 1}},
  };
  bool ok = true;
  for (int c = 0; c < N_OF(cases); c++) {
    int64_t n = cases[c].n;
    ot_array in = ot_zeros(cases[c].from, 1, &n);
    memcpy(in.v, cases[c].in, sizeof(double) * (size_t)n);
    /* the inputs must be exactly representable in the source dtype */
    if (cases[c].from == JIT_F32)
      for (int i = 0; i < n; i++)
        assert_true(isnan(in.v[i]) || (double)(float)in.v[i] == in.v[i]);
    jit_dtype to = cases[c].to;
    ot_array out;
    if (cases[c].from == JIT_I64) {
      /* 2^53 + 1 is no double, so it cannot go through an ot_array: upload it directly */
      int64_t raw[2] = {9007199254740993LL, 3};
      jit_array *x = NULL, *y = NULL;
      OT_ASSERT_OK(jit_array_from_host(ot_ctx(), JIT_I64, 1, &n, raw, &x));
      jit_fn *f = NULL;
      jit_fn_opts o = {.name = "convert_i64", .n_args = 1, .n_results = 1};
      OT_ASSERT_OK(jit_compile(ot_ctx(), convert_one_fn, &to, &o, &f));
      jit_status st = jit_call(f, &x, &y);
      jit_array_free(x);
      jit_fn_free(f);
      OT_ASSERT_OK(st);
      out = ot_download(y);
      jit_array_free(y);
    } else {
      OT_ASSERT_OK(ot_run("convert_one", convert_one_fn, &to, 1, &in, 1, &out));
    }
    ot_array want = ot_zeros(to, 1, &n);
    memcpy(want.v, cases[c].want, sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++)
      assert_true(isnan(want.v[i]) || ot_round(to, want.v[i]) == want.v[i]); /* self-check */
    char what[64];
    snprintf(what, sizeof what, "convert %s->%s (case %d)", jit_dtype_name(cases[c].from), jit_dtype_name(to), c);
    ok &= ot_expect_tol(what, &out, &want, NULL, (ot_tol){0, 0});
    ot_free(&in);
  }
  assert_true(ok);
}

/* Int -> int conversions keep the low bits (two's complement wrap), as NumPy's astype and XLA's
   convert do. */
static void test_convert_int_wrap(void **state) {
  static const struct {
    jit_dtype from, to;
    double in, want;
  } cases[] = {
      {JIT_I32, JIT_I8, 300, 44},   {JIT_I32, JIT_U8, -1, 255},          {JIT_U8, JIT_I8, 200, -56},
      {JIT_I64, JIT_I32, 4294967301.0, 5}, {JIT_I8, JIT_U8, -128, 128}, {JIT_I32, JIT_I8, -129, 127},
  };
  bool ok = true;
  for (int c = 0; c < N_OF(cases); c++) {
    int64_t n = 1;
    ot_array in = ot_zeros(cases[c].from, 1, &n), out;
    in.v[0] = cases[c].in;
    jit_dtype to = cases[c].to;
    OT_ASSERT_OK(ot_run("convert_wrap", convert_one_fn, &to, 1, &in, 1, &out));
    ot_array want = ot_zeros(to, 1, &n);
    want.v[0] = cases[c].want;
    char what[64];
    snprintf(what, sizeof what, "convert wrap %s->%s %g", jit_dtype_name(cases[c].from), jit_dtype_name(to),
             cases[c].in);
    ok &= ot_expect(what, &out, &want);
    ot_free(&in);
  }
  assert_true(ok);
}

/* ---- whole functions: several results, results that are inputs, static args ------------------- */
static void multi_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int axes[1] = {1};
  r[0] = jit_add(t, a[0], a[1]);
  r[1] = jit_reduce_sum(t, a[0], 1, axes);
  r[2] = jit_convert(t, a[0], JIT_I32);
  r[3] = jit_cmp(t, JIT_LT, a[0], a[1]);
  r[4] = jit_full(t, JIT_I64, 0, NULL, 42);
}

static void test_multi_result(void **state) {
  int64_t sa[2] = {3, 4}, sb[1] = {4};
  ot_array in[2] = {ot_random(JIT_F32, 2, sa, 1, -5, 5), ot_random(JIT_F32, 1, sb, 2, -5, 5)};
  ot_array out[5];
  OT_ASSERT_OK(ot_run("multi", multi_fn, NULL, 2, in, 5, out));
  ot_array want[5] = {ot_zeros(JIT_F32, 2, sa), ot_zeros(JIT_F32, 1, sa), ot_zeros(JIT_I32, 2, sa),
                      ot_zeros(JIT_BOOL, 2, sa), ot_zeros(JIT_I64, 0, NULL)};
  double mag[3] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) {
      double x = in[0].v[i * 4 + j], y = in[1].v[j];
      want[0].v[i * 4 + j] = x + y;
      want[1].v[i] += x;
      mag[i] += fabs(x);
      want[2].v[i * 4 + j] = x;
      want[3].v[i * 4 + j] = x < y;
    }
  want[4].v[0] = 42;
  bool ok = ot_expect("multi add", &out[0], &want[0]);
  ok &= ot_expect_tol("multi reduce_sum", &out[1], &want[1], mag, ot_tol_of(JIT_F32));
  ok &= ot_expect("multi convert", &out[2], &want[2]);
  ok &= ot_expect("multi cmp", &out[3], &want[3]);
  ok &= ot_expect("multi full", &out[4], &want[4]);
  ot_free(&in[0]);
  ot_free(&in[1]);
  assert_true(ok);
}

static void identity_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = a[0];
  r[1] = a[0];
  r[2] = a[1];
}

/* Results that are the inputs themselves (twice) are new arrays the caller owns: distinct handles,
   freed independently of the args and of each other. */
static void test_return_input(void **state) {
  static const jit_dtype dts[] = {JIT_F32, JIT_BF16, JIT_BOOL, JIT_I64};
  int64_t sa[2] = {2, 3}, sb[1] = {0};
  for (int d = 0; d < N_OF(dts); d++) {
    ot_array in[2] = {ot_random(dts[d], 2, sa, 9, -3, 3), ot_random(JIT_U8, 1, sb, 9, 0, 9)};
    jit_array *args[2] = {ot_upload(&in[0]), ot_upload(&in[1])}, *res[3] = {0};
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = "identity", .n_args = 2, .n_results = 3};
    OT_ASSERT_OK(jit_compile(ot_ctx(), identity_fn, NULL, &o, &f));
    OT_ASSERT_OK(jit_call(f, args, res));
    assert_non_null(res[0]);
    assert_non_null(res[1]);
    assert_non_null(res[2]);
    assert_ptr_not_equal(res[0], args[0]);
    assert_ptr_not_equal(res[0], res[1]);
    assert_ptr_not_equal(res[2], args[1]);
    jit_array_free(args[0]); /* the results must survive their inputs */
    jit_array_free(args[1]);
    ot_array got[3] = {ot_download(res[0]), ot_download(res[1]), ot_download(res[2])};
    for (int i = 0; i < 3; i++) jit_array_free(res[i]);
    assert_true(ot_close("identity r0", &got[0], &in[0], NULL, (ot_tol){0, 0}));
    assert_true(ot_close("identity r1", &got[1], &in[0], NULL, (ot_tol){0, 0}));
    assert_true(ot_close("identity r2", &got[2], &in[1], NULL, (ot_tol){0, 0}));
    for (int i = 0; i < 3; i++) ot_free(&got[i]);
    jit_fn_free(f);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

/* The trace function picks its unary op from the static bytes: one jit_fn, one signature per op. */
static void static_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  size_t len = 0;
  const int *op = jit_trace_static_args(t, &len);
  if (!op || len != sizeof(int) || *op < 0 || *op >= N_UNARY) {
    jit_trace_fail(t, "static_fn: bad static args");
    return;
  }
  r[0] = apply_unary(t, *op, a[0]);
}

static void test_call_static(void **state) {
  int64_t n = 9;
  ot_array in = ot_random(JIT_F32, 1, &n, 77, 0.1, 3);
  jit_array *x = ot_upload(&in);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "static", .n_args = 1, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), static_fn, NULL, &o, &f));
  static const int ops[] = {U_NEG, U_SQRT, U_NEG, U_EXP, U_SQRT};
  bool ok = true;
  for (int c = 0; c < N_OF(ops); c++) {
    jit_array *y = NULL;
    OT_ASSERT_OK(jit_call_static(f, &ops[c], sizeof ops[c], &x, &y));
    ot_array got = ot_download(y);
    jit_array_free(y);
    ot_array want = ot_zeros(JIT_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) want.v[i] = ref_unary(ops[c], in.v[i]);
    char what[64];
    snprintf(what, sizeof what, "static %s (call %d)", unary_names[ops[c]], c);
    ok &= ot_expect(what, &got, &want);
  }
  jit_fn_stats stats;
  OT_ASSERT_OK(jit_fn_stats_get(f, &stats));
  assert_int_equal(stats.calls, 5);
  assert_int_equal(stats.n_signatures, 3);
  assert_int_equal(stats.cache_hits, 2);
  jit_array_free(x);
  jit_fn_free(f);
  ot_free(&in);
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalar_weak_typing),
      cmocka_unit_test(test_full),
      cmocka_unit_test(test_iota),
      cmocka_unit_test(test_unary_float),
      cmocka_unit_test(test_unary_edge_values),
      cmocka_unit_test(test_unary_int),
      cmocka_unit_test(test_binary_f32),
      cmocka_unit_test(test_binary_other_floats),
      cmocka_unit_test(test_binary_ints),
      cmocka_unit_test(test_binary_edge_values),
      cmocka_unit_test(test_int_division_signs),
      cmocka_unit_test(test_cmp),
      cmocka_unit_test(test_select),
      cmocka_unit_test(test_select_weak_scalar),
      cmocka_unit_test(test_convert_all_pairs),
      cmocka_unit_test(test_convert_rounding),
      cmocka_unit_test(test_convert_int_wrap),
      cmocka_unit_test(test_multi_result),
      cmocka_unit_test(test_return_input),
      cmocka_unit_test(test_call_static),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
