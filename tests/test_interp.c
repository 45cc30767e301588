/* test_interp.c: the reference interpreter (ir_interp) and the scalar semantics it shares with
 * constant folding (ir_eval_elementwise), against references computed here by plain C loops. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "support/optest.h"

static const jit_dtype float_dts[] = {JIT_F16, JIT_BF16, JIT_F32, JIT_F64};
static const jit_dtype all_dts[] = {JIT_BOOL, JIT_I8,   JIT_U8,  JIT_I32, JIT_I64,
                                    JIT_F16,  JIT_BF16, JIT_F32, JIT_F64};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------------------------------ */

static ir_type mk(jit_dtype dt, int rank, const int64_t *dims) {
  ir_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}
#define TY(dt, ...) \
  mk(dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define SCALAR(dt) mk(dt, 0, NULL)

/* v as a value of dt holds it; 16-bit floats through f32, as the interpreter stores them. */
static double rnd(jit_dtype dt, double v) {
  if (dt == JIT_F16 || dt == JIT_BF16) return ot_round(dt, (double)(float)v);
  return ot_round(dt, v);
}

/* Equal as values: NaN matches NaN, and zeros must agree in sign. */
static bool same(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* Formats the message only on a mismatch: some tests compare millions of elements. */
#define EXPECT_SAME(got, want, ...)                                           \
  do {                                                                        \
    double got_ = (got), want_ = (want);                                      \
    if (!same(got_, want_)) {                                                 \
      print_error(__VA_ARGS__);                                               \
      print_error(": got %.17g, want %.17g\n", got_, want_);                  \
      fail();                                                                 \
    }                                                                         \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

/* For an elementwise op: ir_eval_elementwise on each element's operands must give exactly the
   element the interpreter stored (skipping i64 values a double cannot hold). */
static void check_fold_agrees(ir_op op, const ir_attr *attr, int n_in, const ir_type *in,
                              const ir_type *out, const void *const *bufs, const void *res) {
  int64_t n = ir_type_numel(out);
  jit_dtype in_dt = op == IR_SELECT ? out->dtype : in[0].dtype;
  for (int64_t e = 0; e < n; e++) {
    double x[3];
    bool exact = true;
    for (int k = 0; k < n_in; k++) {
      x[k] = ir_load_f64(in[k].dtype, bufs[k], e);
      if (in[k].dtype == JIT_I64 && fabs(x[k]) >= 0x1p53) exact = false;
    }
    double want = ir_load_f64(out->dtype, res, e);
    if (out->dtype == JIT_I64 && fabs(want) >= 0x1p53) exact = false;
    if (!exact) continue;
    double got = ir_eval_elementwise(op, attr, in_dt, out->dtype, x);
    if (!same(got, want)) {
      print_error("fold %s %s->%s [%lld]: ir_eval_elementwise %.17g, interpreter %.17g\n",
                  ir_op_name[op], jit_dtype_name(in_dt), jit_dtype_name(out->dtype),
                  (long long)e, got, want);
      fail();
    }
  }
}

/* Builds @t(in...) -> op(params) : out, and interprets it on raw buffers. */
static jit_status run_raw(ir_op op, const ir_attr *attr, int n_in, const ir_type *in,
                          ir_type out, const void *const *bufs, void *res) {
  ir_func *f = ir_func_new("t");
  assert_non_null(f);
  ir_ref p[8];
  for (int k = 0; k < n_in; k++) p[k] = ir_emit_param(f, ir_type_intern(f, &in[k]));
  ir_ref r = ir_emit(f, op, ir_type_intern(f, &out), (uint32_t)n_in, p, attr, (ir_loc){0});
  assert_int_not_equal(r, IR_NOREF);
  assert_int_equal(ir_set_results(f, 1, &r), JIT_OK);
  void *results[1] = {res};
  jit_status st = ir_interp(f, bufs, results);
  ir_func_free(f);
  if (st == JIT_OK && (ir_op_flags[op] & IR_EW)) check_fold_agrees(op, attr, n_in, in, &out, bufs, res);
  return st;
}

/* run_raw on inputs given as doubles (stored into each input's dtype); the result elements come
   back as doubles in got. */
static void run_d(ir_op op, const ir_attr *attr, int n_in, const ir_type *in, ir_type out,
                  const double *const *vals, double *got) {
  void *bufs[8];
  for (int k = 0; k < n_in; k++) {
    int64_t n = ir_type_numel(&in[k]);
    bufs[k] = xmalloc((size_t)n * 8);
    for (int64_t e = 0; e < n; e++) ir_store_f64(in[k].dtype, bufs[k], e, vals[k][e]);
  }
  int64_t n = ir_type_numel(&out);
  void *res = xmalloc((size_t)n * 8);
  jit_status st = run_raw(op, attr, n_in, in, out, (const void *const *)bufs, res);
  if (st != JIT_OK) print_error("%s: %s\n", ir_op_name[op], jit_last_error());
  assert_int_equal(st, JIT_OK);
  for (int64_t e = 0; e < n; e++) got[e] = ir_load_f64(out.dtype, res, e);
  for (int k = 0; k < n_in; k++) free(bufs[k]);
  free(res);
}

static double run1(ir_op op, jit_dtype in_dt, jit_dtype out_dt, double a) {
  ir_type in = SCALAR(in_dt);
  double got;
  run_d(op, NULL, 1, &in, SCALAR(out_dt), (const double *[]){&a}, &got);
  return got;
}

static double run2(ir_op op, jit_dtype dt, double a, double b) {
  ir_type in[2] = {SCALAR(dt), SCALAR(dt)};
  double got;
  run_d(op, NULL, 2, in, SCALAR(dt), (const double *[]){&a, &b}, &got);
  return got;
}

/* ---- elementwise floats -------------------------------------------------------------------------- */

static const double fvals[] = {0.5, -1.25, 2.0,      0.0,       -0.0, 3.0,   INFINITY, -INFINITY,
                               NAN, 1e-3,  100.0, -7.5,     1.0 / 3, 70000, -2.75, 1e-6};
enum { NF = sizeof fvals / sizeof fvals[0] };

static double ref_unary(ir_op op, double x) {
  switch (op) {
  case IR_NEG: return -x;
  case IR_ABS: return fabs(x);
  case IR_EXP: return exp(x);
  case IR_LOG: return log(x);
  case IR_SQRT: return sqrt(x);
  case IR_RSQRT: return 1 / sqrt(x);
  case IR_TANH: return tanh(x);
  case IR_LOGISTIC: return 1 / (1 + exp(-x));
  case IR_SIN: return sin(x);
  case IR_COS: return cos(x);
  case IR_ERF: return erf(x);
  case IR_FLOOR: return floor(x);
  default: fail(); return 0;
  }
}

static void test_unary_float(void **state) {
  const ir_op ops[] = {IR_NEG,      IR_ABS, IR_EXP, IR_LOG, IR_SQRT, IR_RSQRT,
                       IR_TANH, IR_LOGISTIC, IR_SIN, IR_COS, IR_ERF,  IR_FLOOR};
  for (int d = 0; d < COUNT(float_dts); d++) {
    jit_dtype dt = float_dts[d];
    ir_type t = TY(dt, 4, 4);
    for (int o = 0; o < COUNT(ops); o++) {
      double got[NF];
      run_d(ops[o], NULL, 1, &t, t, (const double *[]){fvals}, got);
      for (int i = 0; i < NF; i++)
        EXPECT_SAME(got[i], rnd(dt, ref_unary(ops[o], rnd(dt, fvals[i]))), "%s %s of %g",
                    ir_op_name[ops[o]], jit_dtype_name(dt), fvals[i]);
    }
  }
  /* a few values written out */
  assert_true(same(run1(IR_LOGISTIC, JIT_F64, JIT_F64, 0), 0.5));
  assert_true(same(run1(IR_RSQRT, JIT_F32, JIT_F32, 4), 0.5));
  assert_true(same(run1(IR_RSQRT, JIT_F32, JIT_F32, 0), INFINITY));
  assert_true(same(run1(IR_FLOOR, JIT_F32, JIT_F32, -0.5), -1));
  assert_true(same(run1(IR_NEG, JIT_F32, JIT_F32, 0), -0.0));
  assert_true(isnan(run1(IR_LOG, JIT_F32, JIT_F32, -1)));
  assert_true(same(run1(IR_LOG, JIT_F16, JIT_F16, 0), -INFINITY));
  assert_true(same(run1(IR_EXP, JIT_F16, JIT_F16, 12), INFINITY)); /* e^12 > 65504 */
  assert_true(same(run1(IR_EXP, JIT_BF16, JIT_BF16, 1), 2.71875));
}

static double ref_binary_f(ir_op op, double a, double b) {
  switch (op) {
  case IR_ADD: return a + b;
  case IR_SUB: return a - b;
  case IR_MUL: return a * b;
  case IR_DIV: return a / b;
  case IR_POW: return pow(a, b);
  case IR_MAX:
    if (isnan(a) || isnan(b)) return NAN;
    if (a == 0 && b == 0) return signbit(a) && signbit(b) ? -0.0 : 0.0;
    return a > b ? a : b;
  case IR_MIN:
    if (isnan(a) || isnan(b)) return NAN;
    if (a == 0 && b == 0) return signbit(a) || signbit(b) ? -0.0 : 0.0;
    return a < b ? a : b;
  default: fail(); return 0;
  }
}

static void test_binary_float(void **state) {
  const ir_op ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_POW, IR_MAX, IR_MIN};
  enum { N = NF * NF };
  double *a = xmalloc(N * sizeof *a), *b = xmalloc(N * sizeof *b), *got = xmalloc(N * sizeof *got);
  for (int i = 0; i < NF; i++)
    for (int j = 0; j < NF; j++) {
      a[i * NF + j] = fvals[i];
      b[i * NF + j] = fvals[j];
    }
  for (int d = 0; d < COUNT(float_dts); d++) {
    jit_dtype dt = float_dts[d];
    ir_type t[2] = {TY(dt, NF, NF), TY(dt, NF, NF)};
    for (int o = 0; o < COUNT(ops); o++) {
      run_d(ops[o], NULL, 2, t, t[0], (const double *[]){a, b}, got);
      for (int i = 0; i < N; i++)
        EXPECT_SAME(got[i], rnd(dt, ref_binary_f(ops[o], rnd(dt, a[i]), rnd(dt, b[i]))),
                    "%s %s of %g, %g", ir_op_name[ops[o]], jit_dtype_name(dt), a[i], b[i]);
    }
  }
  free(a);
  free(b);
  free(got);
  /* rounding to the dtype after the op */
  assert_true(same(run2(IR_DIV, JIT_F16, 1, 3), 0.333251953125));
  assert_true(same(run2(IR_DIV, JIT_BF16, 1, 3), 0.333984375));
  assert_true(same(run2(IR_DIV, JIT_F32, 1, 3), (double)(1.0f / 3.0f)));
  assert_true(same(run2(IR_ADD, JIT_F16, 2048, 1), 2048));      /* tie to even */
  assert_true(same(run2(IR_ADD, JIT_F16, 65504, 65504), INFINITY));
  assert_true(same(run2(IR_ADD, JIT_BF16, 256, 1), 256));
  /* max/min propagate NaN from either side, and are commutative on signed zeros */
  assert_true(isnan(run2(IR_MAX, JIT_F32, NAN, 1)));
  assert_true(isnan(run2(IR_MAX, JIT_F32, 1, NAN)));
  assert_true(isnan(run2(IR_MIN, JIT_F64, -INFINITY, NAN)));
  assert_true(same(run2(IR_MAX, JIT_F32, -0.0, 0.0), 0.0));
  assert_true(same(run2(IR_MAX, JIT_F32, 0.0, -0.0), 0.0));
  assert_true(same(run2(IR_MIN, JIT_F32, -0.0, 0.0), -0.0));
  assert_true(same(run2(IR_MIN, JIT_F32, 0.0, -0.0), -0.0));
  assert_true(same(run2(IR_DIV, JIT_F32, 1, -0.0), -INFINITY));
  assert_true(isnan(run2(IR_DIV, JIT_F32, 0, 0)));
}

/* ---- elementwise integers -------------------------------------------------------------------------- */

static int64_t wrapt(jit_dtype dt, int64_t v) {
  switch (dt) {
  case JIT_I8: return (int8_t)v;
  case JIT_U8: return (uint8_t)v;
  case JIT_I32: return (int32_t)v;
  default: return v;
  }
}

/* Reference integer semantics for i8/u8, computed wide then wrapped. */
static int64_t ref_int(ir_op op, jit_dtype dt, int64_t a, int64_t b) {
  switch (op) {
  case IR_ADD: return wrapt(dt, a + b);
  case IR_SUB: return wrapt(dt, a - b);
  case IR_MUL: return wrapt(dt, a * b);
  case IR_DIV: return b == 0 ? wrapt(dt, -1) : wrapt(dt, a / b);
  case IR_MAX: return a > b ? a : b;
  case IR_MIN: return a < b ? a : b;
  case IR_POW: {
    if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
    int64_t r = 1;
    for (int64_t i = 0; i < b; i++) r = wrapt(dt, r * a);
    return r;
  }
  case IR_NEG: return wrapt(dt, -a);
  case IR_ABS: return wrapt(dt, a < 0 ? -a : a);
  default: fail(); return 0;
  }
}

/* Every pair of i8 values, and of u8 values, through every integer op. */
static void test_int_exhaustive_8bit(void **state) {
  const ir_op ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_MAX, IR_MIN, IR_POW, IR_NEG, IR_ABS};
  const jit_dtype dts[] = {JIT_I8, JIT_U8};
  enum { N = 256 * 256 };
  double *a = xmalloc(N * sizeof *a), *b = xmalloc(N * sizeof *b), *got = xmalloc(N * sizeof *got);
  for (int d = 0; d < 2; d++) {
    jit_dtype dt = dts[d];
    int lo = dt == JIT_I8 ? -128 : 0;
    for (int i = 0; i < 256; i++)
      for (int j = 0; j < 256; j++) {
        a[i * 256 + j] = lo + i;
        b[i * 256 + j] = lo + j;
      }
    ir_type t[2] = {TY(dt, 256, 256), TY(dt, 256, 256)};
    for (int o = 0; o < COUNT(ops); o++) {
      int n_in = ir_op_arity[ops[o]];
      run_d(ops[o], NULL, n_in, t, t[0], (const double *[]){a, b}, got);
      for (int i = 0; i < N; i++)
        EXPECT_SAME(got[i], (double)ref_int(ops[o], dt, (int64_t)a[i], (int64_t)b[i]),
                    "%s %s of %g, %g", ir_op_name[ops[o]], jit_dtype_name(dt), a[i], b[i]);
    }
  }
  free(a);
  free(b);
  free(got);
}

static void test_int_edge_cases(void **state) {
  /* i8 */
  assert_true(same(run2(IR_ADD, JIT_I8, 127, 1), -128));
  assert_true(same(run2(IR_DIV, JIT_I8, -128, -1), -128));
  assert_true(same(run2(IR_DIV, JIT_I8, 7, 0), -1));
  assert_true(same(run2(IR_DIV, JIT_I8, -7, 2), -3));
  assert_true(same(run2(IR_DIV, JIT_I8, 7, -2), -3));
  assert_true(same(run1(IR_ABS, JIT_I8, JIT_I8, -128), -128));
  assert_true(same(run1(IR_NEG, JIT_I8, JIT_I8, -128), -128));
  assert_true(same(run2(IR_POW, JIT_I8, 2, 7), -128));
  assert_true(same(run2(IR_POW, JIT_I8, 2, -1), 0));
  assert_true(same(run2(IR_POW, JIT_I8, 1, -3), 1));
  assert_true(same(run2(IR_POW, JIT_I8, -1, -3), -1));
  assert_true(same(run2(IR_POW, JIT_I8, -1, -2), 1));
  assert_true(same(run2(IR_POW, JIT_I8, 0, 0), 1));
  assert_true(same(run2(IR_POW, JIT_I8, 0, -1), 0));
  /* u8: x / 0 is all ones */
  assert_true(same(run2(IR_DIV, JIT_U8, 5, 0), 255));
  assert_true(same(run2(IR_DIV, JIT_U8, 255, 2), 127));
  assert_true(same(run2(IR_ADD, JIT_U8, 200, 100), 44));
  assert_true(same(run2(IR_SUB, JIT_U8, 0, 1), 255));
  assert_true(same(run1(IR_NEG, JIT_U8, JIT_U8, 1), 255));
  assert_true(same(run2(IR_POW, JIT_U8, 2, 8), 0));
  /* i32 */
  assert_true(same(run2(IR_DIV, JIT_I32, INT32_MIN, -1), INT32_MIN));
  assert_true(same(run2(IR_DIV, JIT_I32, 9, 0), -1));
  assert_true(same(run2(IR_DIV, JIT_I32, -9, 0), -1));
  assert_true(same(run2(IR_ADD, JIT_I32, INT32_MAX, 1), INT32_MIN));
  assert_true(same(run2(IR_MUL, JIT_I32, 65536, 65536), 0));
  assert_true(same(run1(IR_ABS, JIT_I32, JIT_I32, INT32_MIN), INT32_MIN));
  assert_true(same(run2(IR_POW, JIT_I32, 3, 4), 81));
  assert_true(same(run2(IR_POW, JIT_I32, -2, 3), -8));
  assert_true(same(run2(IR_POW, JIT_I32, 7, -1), 0));
  assert_true(same(run2(IR_POW, JIT_I32, -1, INT32_MIN), 1));
  assert_true(same(run1(IR_FLOOR, JIT_I32, JIT_I32, -5), -5));

  /* i64 at the ends of its range, through raw buffers (doubles cannot hold INT64_MAX) */
  const int64_t a[] = {INT64_MIN, INT64_MAX, INT64_MIN, (int64_t)1 << 62, -7, 123456789012345678,
                       INT64_MIN, 5};
  const int64_t b[] = {-1, 1, 0, 4, 2, 10, -INT64_MAX, -1};
  enum { N = sizeof a / sizeof a[0] };
  ir_type t[2] = {TY(JIT_I64, N), TY(JIT_I64, N)};
  int64_t res[N];
  assert_int_equal(run_raw(IR_DIV, NULL, 2, t, t[0], (const void *[]){a, b}, res), JIT_OK);
  const int64_t want_div[N] = {INT64_MIN, INT64_MAX, -1, (int64_t)1 << 60, -3, 12345678901234567,
                               1, -5};
  for (int i = 0; i < N; i++) assert_true(res[i] == want_div[i]);
  assert_int_equal(run_raw(IR_ADD, NULL, 2, t, t[0], (const void *[]){a, b}, res), JIT_OK);
  assert_true(res[0] == INT64_MAX);     /* wraps */
  assert_true(res[1] == INT64_MIN);
  assert_true(res[6] == 1);
  assert_int_equal(run_raw(IR_MUL, NULL, 2, t, t[0], (const void *[]){a, b}, res), JIT_OK);
  assert_true(res[0] == INT64_MIN);     /* INT64_MIN * -1 */
  assert_true(res[3] == 0);             /* 2^62 * 4 */
  assert_int_equal(run_raw(IR_ABS, NULL, 1, t, t[0], (const void *[]){a}, res), JIT_OK);
  assert_true(res[0] == INT64_MIN && res[1] == INT64_MAX && res[4] == 7);
  assert_int_equal(run_raw(IR_NEG, NULL, 1, t, t[0], (const void *[]){a}, res), JIT_OK);
  assert_true(res[0] == INT64_MIN && res[1] == -INT64_MAX);
  assert_int_equal(run_raw(IR_MAX, NULL, 2, t, t[0], (const void *[]){a, b}, res), JIT_OK);
  assert_true(res[0] == -1 && res[1] == INT64_MAX && res[6] == -INT64_MAX);
  const int64_t pa[] = {3, 2, -1, 1, 0, 2, -3, 10};
  const int64_t pb[] = {39, 63, INT64_MIN + 1, -5, 0, 64, 3, -2};
  assert_int_equal(run_raw(IR_POW, NULL, 2, t, t[0], (const void *[]){pa, pb}, res), JIT_OK);
  assert_true(res[0] == 4052555153018976267); /* 3^39 fits */
  assert_true(res[1] == INT64_MIN);           /* 2^63 wraps */
  assert_true(res[2] == -1 && res[3] == 1 && res[4] == 1 && res[5] == 0 && res[6] == -27);
  assert_true(res[7] == 0);
}

/* bool arithmetic is on 0/1, stored as (v != 0): add and max are or, mul and min are and. */
static void test_bool_ops(void **state) {
  const double a[] = {0, 0, 1, 1}, b[] = {0, 1, 0, 1};
  ir_type t[2] = {TY(JIT_BOOL, 4), TY(JIT_BOOL, 4)};
  double got[4];
  run_d(IR_ADD, NULL, 2, t, t[0], (const double *[]){a, b}, got);
  for (int i = 0; i < 4; i++) assert_true(got[i] == (a[i] || b[i]));
  run_d(IR_MAX, NULL, 2, t, t[0], (const double *[]){a, b}, got);
  for (int i = 0; i < 4; i++) assert_true(got[i] == (a[i] || b[i]));
  run_d(IR_MUL, NULL, 2, t, t[0], (const double *[]){a, b}, got);
  for (int i = 0; i < 4; i++) assert_true(got[i] == (a[i] && b[i]));
  run_d(IR_MIN, NULL, 2, t, t[0], (const double *[]){a, b}, got);
  for (int i = 0; i < 4; i++) assert_true(got[i] == (a[i] && b[i]));
  /* a bool buffer holding 2 still reads as true */
  const unsigned char raw[4] = {0, 2, 0, 7}, ones[4] = {1, 1, 1, 1};
  unsigned char res[4];
  assert_int_equal(run_raw(IR_MIN, NULL, 2, t, t[0], (const void *[]){raw, ones}, res), JIT_OK);
  assert_memory_equal(res, ((unsigned char[]){0, 1, 0, 1}), 4);
}

/* ---- cmp, select, convert ----------------------------------------------------------------------- */

static bool ref_cmp(jit_cmp_op c, double a, double b) {
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

static void test_cmp(void **state) {
  const double a[] = {1, 2, 3, NAN, NAN, 0.0, -INFINITY, 5, -3};
  const double b[] = {2, 2, 1, 1, NAN, -0.0, -INFINITY, NAN, 100};
  enum { N = sizeof a / sizeof a[0] };
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    for (int c = JIT_EQ; c <= JIT_GE; c++) {
      ir_attr at = {0};
      at.cmp = (jit_cmp_op)c;
      ir_type t[2] = {TY(dt, 3, 3), TY(dt, 3, 3)};
      double got[N];
      run_d(IR_CMP, &at, 2, t, TY(JIT_BOOL, 3, 3), (const double *[]){a, b}, got);
      for (int i = 0; i < N; i++) {
        double x = rnd(dt, a[i]), y = rnd(dt, b[i]);
        if (!ot_is_float(dt)) { /* ints hold the stored (truncated, saturated, NaN -> 0) value */
          unsigned char bx[8], by[8];
          ir_store_f64(dt, bx, 0, a[i]);
          ir_store_f64(dt, by, 0, b[i]);
          x = ir_load_f64(dt, bx, 0);
          y = ir_load_f64(dt, by, 0);
        }
        EXPECT_SAME(got[i], ref_cmp((jit_cmp_op)c, x, y), "cmp %d %s [%d]", c,
                    jit_dtype_name(dt), i);
      }
    }
  }
  /* NaN: every direction is false except ne */
  ir_attr at = {0};
  double nan = NAN, one = 1, got;
  ir_type t[2] = {SCALAR(JIT_F32), SCALAR(JIT_F32)};
  for (int c = JIT_EQ; c <= JIT_GE; c++) {
    at.cmp = (jit_cmp_op)c;
    run_d(IR_CMP, &at, 2, t, SCALAR(JIT_BOOL), (const double *[]){&nan, &one}, &got);
    assert_true(got == (c == JIT_NE));
    run_d(IR_CMP, &at, 2, t, SCALAR(JIT_BOOL), (const double *[]){&nan, &nan}, &got);
    assert_true(got == (c == JIT_NE));
  }
}

static void test_select(void **state) {
  const double p[] = {1, 0, 1, 0, 0, 1};
  const double a[] = {1, 2, 3, 4, 5, 6}, b[] = {-1, -2, -3, -4, -5, -6};
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    ir_type t[3] = {TY(JIT_BOOL, 2, 3), TY(dt, 2, 3), TY(dt, 2, 3)};
    double got[6];
    run_d(IR_SELECT, NULL, 3, t, t[1], (const double *[]){p, a, b}, got);
    for (int i = 0; i < 6; i++) {
      unsigned char buf[8];
      ir_store_f64(dt, buf, 0, p[i] ? a[i] : b[i]);
      EXPECT_SAME(got[i], ir_load_f64(dt, buf, 0), "select %s [%d]", jit_dtype_name(dt), i);
    }
  }
  /* NaN passes through untouched */
  const double pn[] = {1, 0}, an[] = {NAN, 1}, bn[] = {2, NAN};
  ir_type t[3] = {TY(JIT_BOOL, 2), TY(JIT_F32, 2), TY(JIT_F32, 2)};
  double got[2];
  run_d(IR_SELECT, NULL, 3, t, t[1], (const double *[]){pn, an, bn}, got);
  assert_true(isnan(got[0]) && isnan(got[1]));
}

/* What convert must give for a source value x (already as the source dtype holds it). */
static double ref_convert(jit_dtype from, jit_dtype to, double x) {
  if (to == JIT_BOOL) return x != 0;
  if (ot_is_float(to)) return rnd(to, x);
  if (isnan(x)) return 0;
  double lo = ot_int_min(to), hi = ot_int_max(to);
  if (!ot_is_float(from) && from != JIT_BOOL) return (double)wrapt(to, (int64_t)x);
  double t = trunc(x);
  return (t < lo ? lo : t > hi ? hi : t) + 0.0; /* trunc(-0.5) is -0 */
}

static void test_convert(void **state) {
  const double v[] = {-300.7, -128.5, -1.5, -0.5, 0, 0.7,  1,         127.9,     255.5,
                      300,    3e9,    -3e9, 1e20, NAN, INFINITY, -INFINITY, 65519, 65520};
  enum { N = sizeof v / sizeof v[0] };
  for (int s = 0; s < COUNT(all_dts); s++) {
    jit_dtype from = all_dts[s];
    ir_type in = TY(from, N);
    /* the source values as the source dtype holds them */
    unsigned char buf[N * 8];
    double x[N];
    for (int i = 0; i < N; i++) {
      ir_store_f64(from, buf, i, v[i]);
      x[i] = ir_load_f64(from, buf, i);
    }
    for (int d = 0; d < COUNT(all_dts); d++) {
      jit_dtype to = all_dts[d];
      double got[N];
      run_d(IR_CONVERT, NULL, 1, &in, TY(to, N), (const double *[]){x}, got);
      for (int i = 0; i < N; i++) {
        if (from == JIT_I64 && fabs(x[i]) >= 0x1p62) continue; /* saturated: not a double */
        EXPECT_SAME(got[i], ref_convert(from, to, x[i]), "convert %s->%s of %g",
                    jit_dtype_name(from), jit_dtype_name(to), x[i]);
      }
    }
  }
  /* written out */
  assert_true(same(run1(IR_CONVERT, JIT_F32, JIT_I32, -2.9), -2));
  assert_true(same(run1(IR_CONVERT, JIT_F32, JIT_I32, NAN), 0));
  assert_true(same(run1(IR_CONVERT, JIT_F64, JIT_I32, 1e10), INT32_MAX));
  assert_true(same(run1(IR_CONVERT, JIT_F64, JIT_I8, -1e10), -128));
  assert_true(same(run1(IR_CONVERT, JIT_F32, JIT_U8, -5), 0));
  assert_true(same(run1(IR_CONVERT, JIT_F32, JIT_BOOL, NAN), 1));
  assert_true(same(run1(IR_CONVERT, JIT_F32, JIT_BOOL, -0.0), 0));
  assert_true(same(run1(IR_CONVERT, JIT_I32, JIT_BOOL, -7), 1));
  assert_true(same(run1(IR_CONVERT, JIT_I32, JIT_I8, 200), -56));
  assert_true(same(run1(IR_CONVERT, JIT_I32, JIT_U8, -1), 255));
  assert_true(same(run1(IR_CONVERT, JIT_F64, JIT_F16, 0.1), 0.0999755859375));
  assert_true(same(run1(IR_CONVERT, JIT_F64, JIT_BF16, 0.1), 0.10009765625));
  assert_true(same(run1(IR_CONVERT, JIT_I32, JIT_F16, 2049), 2048));
  assert_true(same(run1(IR_CONVERT, JIT_BOOL, JIT_F32, 1), 1));
  /* i64 -> f64 -> i64 at the range ends, through raw buffers */
  const int64_t big[] = {INT64_MAX, INT64_MIN};
  double d[2];
  int64_t back[2];
  ir_type ti = TY(JIT_I64, 2), tf = TY(JIT_F64, 2);
  assert_int_equal(run_raw(IR_CONVERT, NULL, 1, &ti, tf, (const void *[]){big}, d), JIT_OK);
  assert_true(d[0] == 0x1p63 && d[1] == -0x1p63);
  assert_int_equal(run_raw(IR_CONVERT, NULL, 1, &tf, ti, (const void *[]){d}, back), JIT_OK);
  assert_true(back[0] == INT64_MAX && back[1] == INT64_MIN); /* 2^63 saturates */
}

/* ---- const, iota, param -------------------------------------------------------------------------- */

static void test_const(void **state) {
  const double vals[] = {0.1, -300.5, 300, NAN, -1, 1e40, 2.5};
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    for (int v = 0; v < COUNT(vals); v++) {
      ir_attr at = {0};
      at.value = vals[v];
      ir_type t = TY(dt, 2, 3);
      double got[6];
      run_d(IR_CONST, &at, 0, NULL, t, NULL, got);
      double want = ref_convert(JIT_F64, dt, vals[v]);
      for (int i = 0; i < 6; i++)
        EXPECT_SAME(got[i], want, "const %g %s", vals[v], jit_dtype_name(dt));
      run_d(IR_CONST, &at, 0, NULL, SCALAR(dt), NULL, got);
      EXPECT_SAME(got[0], want, "scalar const %g %s", vals[v], jit_dtype_name(dt));
    }
  }
  ir_attr at = {0};
  at.value = 1;
  double got[1];
  run_d(IR_CONST, &at, 0, NULL, TY(JIT_F32, 0, 4), NULL, got); /* size 0: nothing to write */
}

static void test_iota(void **state) {
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    for (int axis = 0; axis < 3; axis++) {
      ir_attr at = {0};
      at.axis = axis;
      const int64_t dims[3] = {2, 3, 300};
      ir_type t = mk(dt, 3, dims);
      double *got = xmalloc(1800 * sizeof *got);
      run_d(IR_IOTA, &at, 0, NULL, t, NULL, got);
      for (int64_t e = 0; e < 1800; e++) {
        int64_t idx[3];
        ot_unravel(e, 3, dims, idx);
        EXPECT_SAME(got[e], ref_convert(JIT_I64, dt, (double)idx[axis]), "iota %s [%lld]",
                    jit_dtype_name(dt), (long long)e);
      }
      free(got);
    }
  }
  ir_attr at = {0};
  double got[4];
  run_d(IR_IOTA, &at, 0, NULL, SCALAR(JIT_I32), NULL, got);
  assert_true(got[0] == 0);
  run_d(IR_IOTA, &at, 0, NULL, TY(JIT_F32, 4), NULL, got);
  assert_true(got[0] == 0 && got[3] == 3);
}

/* ---- elementwise shapes: rank 0, size 1, size 0 ---------------------------------------------- */

static void test_elementwise_shapes(void **state) {
  double a = 2, b = 5, got[1];
  ir_type s[2] = {SCALAR(JIT_F32), SCALAR(JIT_F32)};
  run_d(IR_MUL, NULL, 2, s, s[0], (const double *[]){&a, &b}, got);
  assert_true(got[0] == 10);
  ir_type one[2] = {TY(JIT_I32, 1, 1, 1), TY(JIT_I32, 1, 1, 1)};
  run_d(IR_SUB, NULL, 2, one, one[0], (const double *[]){&a, &b}, got);
  assert_true(got[0] == -3);
  ir_type zero[2] = {TY(JIT_F16, 3, 0), TY(JIT_F16, 3, 0)};
  run_d(IR_ADD, NULL, 2, zero, zero[0], (const double *[]){&a, &b}, got);
}

/* ---- data movement ------------------------------------------------------------------------------ */

static double *seq(int64_t n, double scale) {
  double *v = xmalloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (double)i * scale;
  return v;
}

static void test_reshape(void **state) {
  double *x = seq(24, 1), got[24];
  ir_type in = TY(JIT_I32, 2, 3, 4);
  run_d(IR_RESHAPE, NULL, 1, &in, TY(JIT_I32, 6, 4), (const double *[]){x}, got);
  for (int i = 0; i < 24; i++) assert_true(got[i] == i);
  run_d(IR_RESHAPE, NULL, 1, &in, TY(JIT_I32, 24), (const double *[]){x}, got);
  for (int i = 0; i < 24; i++) assert_true(got[i] == i);
  ir_type s = TY(JIT_F32, 1, 1);
  run_d(IR_RESHAPE, NULL, 1, &s, SCALAR(JIT_F32), (const double *[]){x + 7}, got);
  assert_true(got[0] == 7);
  free(x);
}

static void check_transpose(jit_dtype dt, int rank, const int64_t *dims, const int *perm) {
  ir_type in = mk(dt, rank, dims);
  int64_t n = ir_type_numel(&in), rdims[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) rdims[i] = dims[perm[i]];
  ir_attr at = {0};
  at.dims.n = (uint8_t)rank;
  for (int i = 0; i < rank; i++) at.dims.d[i] = (uint8_t)perm[i];
  double *x = seq(n, 1), *got = xmalloc((size_t)n * sizeof *got);
  for (int64_t e = 0; e < n; e++) x[e] = ot_round(dt, x[e] * 0.5);
  run_d(IR_TRANSPOSE, &at, 1, &in, mk(dt, rank, rdims), (const double *[]){x}, got);
  for (int64_t e = 0; e < n; e++) {
    int64_t ri[IR_MAX_RANK], oi[IR_MAX_RANK];
    ot_unravel(e, rank, rdims, ri);
    for (int i = 0; i < rank; i++) oi[perm[i]] = ri[i];
    EXPECT_SAME(got[e], x[ot_ravel(rank, dims, oi)], "transpose rank %d [%lld]", rank,
                (long long)e);
  }
  free(x);
  free(got);
}

static void test_transpose(void **state) {
  check_transpose(JIT_F32, 2, (int64_t[]){3, 5}, (int[]){1, 0});
  check_transpose(JIT_F64, 3, (int64_t[]){2, 3, 4}, (int[]){2, 0, 1});
  check_transpose(JIT_I8, 3, (int64_t[]){2, 3, 4}, (int[]){1, 2, 0});
  check_transpose(JIT_BF16, 4, (int64_t[]){2, 3, 4, 5}, (int[]){3, 1, 0, 2});
  check_transpose(JIT_I64, 5, (int64_t[]){2, 1, 3, 2, 2}, (int[]){4, 2, 3, 0, 1});
  check_transpose(JIT_F16, 3, (int64_t[]){2, 0, 3}, (int[]){2, 1, 0});
  check_transpose(JIT_I32, 8, (int64_t[]){2, 1, 2, 1, 2, 3, 1, 2},
                  (int[]){7, 6, 5, 4, 3, 2, 1, 0});
  check_transpose(JIT_BOOL, 0, NULL, NULL);
}

static void check_broadcast(int orank, const int64_t *odims, int rrank, const int64_t *rdims,
                            const int *map) {
  ir_type in = mk(JIT_F32, orank, odims), out = mk(JIT_F32, rrank, rdims);
  ir_attr at = {0};
  at.dims.n = (uint8_t)orank;
  for (int i = 0; i < orank; i++) at.dims.d[i] = (uint8_t)map[i];
  int64_t on = ir_type_numel(&in), rn = ir_type_numel(&out);
  double *x = seq(on, 1.5), *got = xmalloc((size_t)rn * sizeof *got);
  run_d(IR_BROADCAST, &at, 1, &in, out, (const double *[]){x}, got);
  for (int64_t e = 0; e < rn; e++) {
    int64_t ri[IR_MAX_RANK], oi[IR_MAX_RANK];
    ot_unravel(e, rrank, rdims, ri);
    for (int i = 0; i < orank; i++) oi[i] = odims[i] == 1 ? 0 : ri[map[i]];
    EXPECT_SAME(got[e], x[ot_ravel(orank, odims, oi)], "broadcast [%lld]", (long long)e);
  }
  free(x);
  free(got);
}

static void test_broadcast(void **state) {
  check_broadcast(0, NULL, 2, (int64_t[]){2, 3}, NULL);
  check_broadcast(1, (int64_t[]){3}, 2, (int64_t[]){2, 3}, (int[]){1});
  check_broadcast(1, (int64_t[]){2}, 2, (int64_t[]){2, 3}, (int[]){0});
  check_broadcast(2, (int64_t[]){2, 1}, 2, (int64_t[]){2, 3}, (int[]){0, 1});
  check_broadcast(2, (int64_t[]){1, 4}, 3, (int64_t[]){3, 2, 4}, (int[]){1, 2});
  check_broadcast(2, (int64_t[]){3, 4}, 4, (int64_t[]){3, 2, 4, 2}, (int[]){0, 2});
  check_broadcast(1, (int64_t[]){1}, 2, (int64_t[]){0, 3}, (int[]){1});
  check_broadcast(1, (int64_t[]){5}, 1, (int64_t[]){5}, (int[]){0});
}

static void check_slice(int rank, const int64_t *dims, const int64_t *start, const int64_t *limit,
                        const int64_t *stride) {
  ir_type in = mk(JIT_I32, rank, dims);
  ir_attr at = {0};
  int64_t rdims[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    at.slice.start[i] = start[i];
    at.slice.limit[i] = limit[i];
    at.slice.stride[i] = stride[i];
    rdims[i] = limit[i] > start[i] ? (limit[i] - start[i] + stride[i] - 1) / stride[i] : 0;
  }
  ir_type out = mk(JIT_I32, rank, rdims);
  int64_t n = ir_type_numel(&in), rn = ir_type_numel(&out);
  double *x = seq(n, 1), *got = xmalloc((size_t)rn * sizeof *got);
  run_d(IR_SLICE, &at, 1, &in, out, (const double *[]){x}, got);
  for (int64_t e = 0; e < rn; e++) {
    int64_t ri[IR_MAX_RANK], oi[IR_MAX_RANK];
    ot_unravel(e, rank, rdims, ri);
    for (int i = 0; i < rank; i++) oi[i] = start[i] + ri[i] * stride[i];
    EXPECT_SAME(got[e], x[ot_ravel(rank, dims, oi)], "slice rank %d [%lld]", rank, (long long)e);
  }
  free(x);
  free(got);
}

static void test_slice(void **state) {
  check_slice(1, (int64_t[]){10}, (int64_t[]){2}, (int64_t[]){9}, (int64_t[]){3});
  check_slice(2, (int64_t[]){5, 7}, (int64_t[]){1, 0}, (int64_t[]){5, 7}, (int64_t[]){2, 3});
  check_slice(3, (int64_t[]){4, 5, 6}, (int64_t[]){1, 2, 5}, (int64_t[]){4, 5, 6},
              (int64_t[]){1, 2, 100});
  check_slice(2, (int64_t[]){4, 4}, (int64_t[]){2, 0}, (int64_t[]){2, 4}, (int64_t[]){1, 1});
  check_slice(2, (int64_t[]){4, 4}, (int64_t[]){0, 0}, (int64_t[]){4, 4}, (int64_t[]){1, 1});
  check_slice(4, (int64_t[]){3, 4, 2, 5}, (int64_t[]){0, 3, 1, 1}, (int64_t[]){3, 4, 2, 5},
              (int64_t[]){2, 1, 5, 2});
  check_slice(0, NULL, NULL, NULL, NULL);
}

static void test_concat(void **state) {
  /* along axis 1: [2,1] ++ [2,0] ++ [2,3] -> [2,4] */
  ir_func *f = ir_func_new("cat");
  assert_non_null(f);
  ir_ref p0 = ir_emit_param(f, ir_type_make(f, JIT_F16, 2, (int64_t[]){2, 1}));
  ir_ref p1 = ir_emit_param(f, ir_type_make(f, JIT_F16, 2, (int64_t[]){2, 0}));
  ir_ref p2 = ir_emit_param(f, ir_type_make(f, JIT_F16, 2, (int64_t[]){2, 3}));
  ir_attr at = {0};
  at.axis = 1;
  ir_ref c1 = ir_emit(f, IR_CONCAT, ir_type_make(f, JIT_F16, 2, (int64_t[]){2, 4}), 3,
                      (ir_ref[]){p0, p1, p2}, &at, (ir_loc){0});
  at.axis = 0; /* along axis 0: [2,3] ++ [2,3] ++ [2,1]... only equal shapes; [4,3] */
  ir_ref c0 = ir_emit(f, IR_CONCAT, ir_type_make(f, JIT_F16, 2, (int64_t[]){4, 3}), 2,
                      (ir_ref[]){p2, p2}, &at, (ir_loc){0});
  ir_ref one = ir_emit(f, IR_CONCAT, ir_type_make(f, JIT_F16, 2, (int64_t[]){2, 3}), 1,
                       (ir_ref[]){p2}, &at, (ir_loc){0});
  assert_int_equal(ir_set_results(f, 3, (ir_ref[]){c1, c0, one}), JIT_OK);
  uint16_t a[2], b[1], c[6], r1[8], r0[12], r2[6];
  for (int i = 0; i < 2; i++) a[i] = ir_f32_to_f16((float)(100 + i));
  for (int i = 0; i < 6; i++) c[i] = ir_f32_to_f16((float)i);
  assert_int_equal(ir_interp(f, (const void *[]){a, b, c}, (void *[]){r1, r0, r2}), JIT_OK);
  const float w1[8] = {100, 0, 1, 2, 101, 3, 4, 5};
  for (int i = 0; i < 8; i++) assert_true(ir_f16_to_f32(r1[i]) == w1[i]);
  for (int i = 0; i < 12; i++) assert_true(ir_f16_to_f32(r0[i]) == (float)(i % 6));
  assert_memory_equal(r2, c, sizeof c);
  ir_func_free(f);

  /* rank 3 along the middle axis, ints */
  ir_type t[2] = {TY(JIT_I32, 2, 2, 3), TY(JIT_I32, 2, 1, 3)};
  double *x = seq(12, 1), *y = seq(6, 1), got[18];
  for (int i = 0; i < 6; i++) y[i] = -1 - y[i];
  at.axis = 1;
  run_d(IR_CONCAT, &at, 2, t, TY(JIT_I32, 2, 3, 3), (const double *[]){x, y}, got);
  for (int64_t e = 0; e < 18; e++) {
    int64_t idx[3];
    ot_unravel(e, 3, (int64_t[]){2, 3, 3}, idx);
    double want = idx[1] < 2 ? x[ot_ravel(3, (int64_t[]){2, 2, 3}, idx)]
                             : y[ot_ravel(3, (int64_t[]){2, 1, 3}, (int64_t[]){idx[0], 0, idx[2]})];
    EXPECT_SAME(got[e], want, "concat [%lld]", (long long)e);
  }
  free(x);
  free(y);
}

/* ---- reductions ------------------------------------------------------------------------------------ */

static double ref_identity(ir_op op, jit_dtype dt) {
  if (op == IR_REDUCE_SUM) return 0;
  if (dt == JIT_BOOL) return op == IR_REDUCE_MIN;
  if (ot_is_float(dt)) return op == IR_REDUCE_MAX ? -INFINITY : INFINITY;
  return op == IR_REDUCE_MAX ? ot_int_min(dt) : ot_int_max(dt);
}

static void check_reduce(ir_op op, jit_dtype dt, int rank, const int64_t *dims, int n_axes,
                         const int *axes, const double *x) {
  ir_type in = mk(dt, rank, dims);
  ir_attr at = {0};
  at.dims.n = (uint8_t)n_axes;
  bool red[IR_MAX_RANK] = {0};
  for (int i = 0; i < n_axes; i++) {
    at.dims.d[i] = (uint8_t)axes[i];
    red[axes[i]] = true;
  }
  int64_t rdims[IR_MAX_RANK];
  int rr = 0;
  for (int i = 0; i < rank; i++)
    if (!red[i]) rdims[rr++] = dims[i];
  ir_type out = mk(dt, rr, rdims);
  int64_t n = ir_type_numel(&in), rn = ir_type_numel(&out);
  double *acc = xmalloc((size_t)rn * sizeof *acc), *got = xmalloc((size_t)rn * sizeof *got);
  bool *nan = calloc((size_t)(rn ? rn : 1), 1);
  assert_non_null(nan);
  for (int64_t e = 0; e < rn; e++) acc[e] = ref_identity(op, dt);
  for (int64_t e = 0; e < n; e++) {
    int64_t idx[IR_MAX_RANK], ri[IR_MAX_RANK];
    ot_unravel(e, rank, dims, idx);
    for (int i = 0, j = 0; i < rank; i++)
      if (!red[i]) ri[j++] = idx[i];
    int64_t r = ot_ravel(rr, rdims, ri);
    double v = x[e];
    if (isnan(v)) nan[r] = true;
    if (op == IR_REDUCE_SUM) acc[r] += v;
    else if (op == IR_REDUCE_MAX) acc[r] = v > acc[r] ? v : acc[r];
    else acc[r] = v < acc[r] ? v : acc[r];
  }
  run_d(op, &at, 1, &in, out, (const double *[]){x}, got);
  for (int64_t e = 0; e < rn; e++) {
    double want = nan[e] ? NAN : acc[e];
    if (!ot_is_float(dt) && dt != JIT_BOOL && dt != JIT_I64) /* i64 sums here stay small */
      want = (double)wrapt(dt, (int64_t)want);
    else want = rnd(dt, want);
    EXPECT_SAME(got[e], want, "%s %s [%lld]", ir_op_name[op], jit_dtype_name(dt), (long long)e);
  }
  free(acc);
  free(got);
  free(nan);
}

static void test_reduce(void **state) {
  const ir_op ops[] = {IR_REDUCE_SUM, IR_REDUCE_MAX, IR_REDUCE_MIN};
  const int64_t dims[4] = {3, 4, 2, 5};
  uint64_t seed = 7;
  double x[120];
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    for (int i = 0; i < 120; i++) {
      double v = ot_rng_uniform(&seed, -100, 100);
      x[i] = (dt == JIT_BOOL ? (v > 0) : dt == JIT_U8 ? rnd(dt, fabs(v)) : rnd(dt, v)) + 0.0;
    }
    for (int o = 0; o < 3; o++) {
      check_reduce(ops[o], dt, 4, dims, 1, (int[]){1}, x);
      check_reduce(ops[o], dt, 4, dims, 2, (int[]){0, 2}, x);
      check_reduce(ops[o], dt, 4, dims, 4, (int[]){0, 1, 2, 3}, x);
      check_reduce(ops[o], dt, 4, dims, 0, NULL, x);
      check_reduce(ops[o], dt, 2, (int64_t[]){0, 3}, 1, (int[]){0}, x); /* empty: identity */
      check_reduce(ops[o], dt, 1, (int64_t[]){0}, 1, (int[]){0}, x);
      check_reduce(ops[o], dt, 0, NULL, 0, NULL, x);
    }
  }
  /* f16 sums accumulate in double and round once: 2048 + 1 + 1 = 2050, not 2048 */
  double h[3] = {2048, 1, 1}, got;
  ir_attr at = {0};
  at.dims.n = 1;
  ir_type t = TY(JIT_F16, 3);
  run_d(IR_REDUCE_SUM, &at, 1, &t, SCALAR(JIT_F16), (const double *[]){h}, &got);
  assert_true(got == 2050);
  t = TY(JIT_F32, 3);
  double g[3] = {0x1p24, 1, 1};
  run_d(IR_REDUCE_SUM, &at, 1, &t, SCALAR(JIT_F32), (const double *[]){g}, &got);
  assert_true(got == 0x1p24 + 2);
  /* NaN propagates through max and min; infinities are ordinary */
  double m[3] = {1, NAN, 3}, inf[3] = {-INFINITY, -INFINITY, -INFINITY};
  run_d(IR_REDUCE_MAX, &at, 1, &t, SCALAR(JIT_F32), (const double *[]){m}, &got);
  assert_true(isnan(got));
  run_d(IR_REDUCE_MIN, &at, 1, &t, SCALAR(JIT_F32), (const double *[]){m}, &got);
  assert_true(isnan(got));
  run_d(IR_REDUCE_MAX, &at, 1, &t, SCALAR(JIT_F32), (const double *[]){inf}, &got);
  assert_true(got == -INFINITY);
  /* int sums wrap; identities written out */
  double w[3] = {100, 100, 100};
  t = TY(JIT_I8, 3);
  run_d(IR_REDUCE_SUM, &at, 1, &t, SCALAR(JIT_I8), (const double *[]){w}, &got);
  assert_true(got == 44);
  t = TY(JIT_U8, 0);
  run_d(IR_REDUCE_MIN, &at, 1, &t, SCALAR(JIT_U8), (const double *[]){w}, &got);
  assert_true(got == 255);
  t = TY(JIT_I32, 0);
  run_d(IR_REDUCE_MAX, &at, 1, &t, SCALAR(JIT_I32), (const double *[]){w}, &got);
  assert_true(got == INT32_MIN);
  t = TY(JIT_BOOL, 0);
  run_d(IR_REDUCE_MIN, &at, 1, &t, SCALAR(JIT_BOOL), (const double *[]){w}, &got);
  assert_true(got == 1);
  t = TY(JIT_F64, 0);
  run_d(IR_REDUCE_MIN, &at, 1, &t, SCALAR(JIT_F64), (const double *[]){w}, &got);
  assert_true(got == INFINITY);
  /* i64 sums wrap at 64 bits */
  const int64_t big[2] = {INT64_MAX, 2};
  int64_t res;
  t = TY(JIT_I64, 2);
  assert_int_equal(run_raw(IR_REDUCE_SUM, &at, 1, &t, SCALAR(JIT_I64), (const void *[]){big}, &res),
                   JIT_OK);
  assert_true(res == INT64_MIN + 1);
}

/* ---- dot ------------------------------------------------------------------------------------------- */

typedef struct dot_case {
  jit_dtype dt;
  int lrank, rrank;
  int64_t ldims[IR_MAX_RANK], rdims[IR_MAX_RANK];
  int nb, nc;
  int lb[IR_MAX_RANK], rb[IR_MAX_RANK], lc[IR_MAX_RANK], rc[IR_MAX_RANK];
} dot_case;

/* Runs the case on seeded data and compares with a naive dot_general in double (or int64). */
static void check_dot(const dot_case *c, uint64_t seed) {
  ir_type lt = mk(c->dt, c->lrank, c->ldims), rt = mk(c->dt, c->rrank, c->rdims);
  ir_attr at = {0};
  at.dot.n_batch = (uint8_t)c->nb;
  at.dot.n_contract = (uint8_t)c->nc;
  bool lu[IR_MAX_RANK] = {0}, ru[IR_MAX_RANK] = {0};
  for (int i = 0; i < c->nb; i++) {
    at.dot.lhs_batch[i] = (uint8_t)c->lb[i];
    at.dot.rhs_batch[i] = (uint8_t)c->rb[i];
    lu[c->lb[i]] = ru[c->rb[i]] = true;
  }
  for (int i = 0; i < c->nc; i++) {
    at.dot.lhs_contract[i] = (uint8_t)c->lc[i];
    at.dot.rhs_contract[i] = (uint8_t)c->rc[i];
    lu[c->lc[i]] = ru[c->rc[i]] = true;
  }
  int lf[IR_MAX_RANK], rf[IR_MAX_RANK], nlf = 0, nrf = 0, orank = 0;
  int64_t odims[IR_MAX_RANK], cdims[IR_MAX_RANK];
  for (int i = 0; i < c->nb; i++) odims[orank++] = c->ldims[c->lb[i]];
  for (int i = 0; i < c->lrank; i++)
    if (!lu[i]) odims[orank++] = c->ldims[lf[nlf++] = i];
  for (int i = 0; i < c->rrank; i++)
    if (!ru[i]) odims[orank++] = c->rdims[rf[nrf++] = i];
  for (int i = 0; i < c->nc; i++) cdims[i] = c->ldims[c->lc[i]];
  ir_type ot = mk(c->dt, orank, odims);
  int64_t on = ir_type_numel(&ot);
  int64_t kn = ot_numel(c->nc, cdims);
  bool fl = ot_is_float(c->dt);
  double lo = c->dt == JIT_U8 || c->dt == JIT_BOOL ? 0 : -3, hi = c->dt == JIT_BOOL ? 1 : 3;
  ot_array l = ot_random(c->dt, c->lrank, c->ldims, seed, lo, hi);
  ot_array r = ot_random(c->dt, c->rrank, c->rdims, seed + 1, lo, hi);
  double *got = xmalloc((size_t)on * sizeof *got);
  run_d(IR_DOT, &at, 2, (ir_type[]){lt, rt}, ot, (const double *[]){l.v, r.v}, got);
  for (int64_t e = 0; e < on; e++) {
    int64_t oi[IR_MAX_RANK], li[IR_MAX_RANK], ri[IR_MAX_RANK], ci[IR_MAX_RANK];
    ot_unravel(e, orank, odims, oi);
    for (int i = 0; i < c->nb; i++) li[c->lb[i]] = ri[c->rb[i]] = oi[i];
    for (int i = 0; i < nlf; i++) li[lf[i]] = oi[c->nb + i];
    for (int i = 0; i < nrf; i++) ri[rf[i]] = oi[c->nb + nlf + i];
    double sum = 0;
    int64_t isum = 0;
    for (int64_t k = 0; k < kn; k++) {
      ot_unravel(k, c->nc, cdims, ci);
      for (int i = 0; i < c->nc; i++) li[c->lc[i]] = ri[c->rc[i]] = ci[i];
      double a = l.v[ot_ravel(c->lrank, c->ldims, li)], b = r.v[ot_ravel(c->rrank, c->rdims, ri)];
      sum += a * b;
      isum += (int64_t)a * (int64_t)b;
    }
    double want = fl ? rnd(c->dt, sum) : c->dt == JIT_BOOL ? isum != 0 : (double)wrapt(c->dt, isum);
    /* Products of these dtypes are exact in double and both sum in contract order: exact. */
    EXPECT_SAME(got[e], want, "dot %s [%lld]", jit_dtype_name(c->dt), (long long)e);
  }
  free(got);
  ot_free(&l);
  ot_free(&r);
}

static void test_dot(void **state) {
  /* plain matmul, every dtype */
  for (int d = 0; d < COUNT(all_dts); d++) {
    dot_case c = {.dt = all_dts[d], .lrank = 2, .rrank = 2, .ldims = {5, 7}, .rdims = {7, 3},
                  .nc = 1, .lc = {1}, .rc = {0}};
    check_dot(&c, 10 + (uint64_t)d);
  }
  /* batch dims and several contracting dims, in a scrambled order */
  dot_case c1 = {.dt = JIT_F32, .lrank = 4, .rrank = 4, .ldims = {3, 2, 4, 5},
                 .rdims = {5, 6, 2, 3}, .nb = 2, .lb = {1, 0}, .rb = {2, 3}, .nc = 1,
                 .lc = {3}, .rc = {0}};
  check_dot(&c1, 1);
  dot_case c2 = {.dt = JIT_F64, .lrank = 4, .rrank = 3, .ldims = {2, 3, 4, 5},
                 .rdims = {5, 2, 3}, .nb = 1, .lb = {0}, .rb = {1}, .nc = 2, .lc = {3, 1},
                 .rc = {0, 2}};
  check_dot(&c2, 2);
  dot_case c3 = {.dt = JIT_I32, .lrank = 3, .rrank = 3, .ldims = {4, 3, 2},
                 .rdims = {2, 5, 3}, .nc = 2, .lc = {1, 2}, .rc = {2, 0}};
  check_dot(&c3, 3);
  dot_case c4 = {.dt = JIT_BF16, .lrank = 3, .rrank = 3, .ldims = {2, 8, 16},
                 .rdims = {2, 16, 9}, .nb = 1, .lb = {0}, .rb = {0}, .nc = 1, .lc = {2},
                 .rc = {1}};
  check_dot(&c4, 4);
  /* vector . vector (rank-0 result), outer product (no contraction), K = 0, M = 0 */
  dot_case c5 = {.dt = JIT_F32, .lrank = 1, .rrank = 1, .ldims = {9}, .rdims = {9}, .nc = 1,
                 .lc = {0}, .rc = {0}};
  check_dot(&c5, 5);
  dot_case c6 = {.dt = JIT_I8, .lrank = 1, .rrank = 2, .ldims = {4}, .rdims = {2, 3}};
  check_dot(&c6, 6);
  dot_case c7 = {.dt = JIT_F16, .lrank = 2, .rrank = 2, .ldims = {3, 0}, .rdims = {0, 4},
                 .nc = 1, .lc = {1}, .rc = {0}};
  check_dot(&c7, 7);
  dot_case c8 = {.dt = JIT_F32, .lrank = 2, .rrank = 2, .ldims = {0, 3}, .rdims = {3, 4},
                 .nc = 1, .lc = {1}, .rc = {0}};
  check_dot(&c8, 8);
  /* wide enough to cross the interpreter's column blocks */
  dot_case c9 = {.dt = JIT_F32, .lrank = 2, .rrank = 2, .ldims = {9, 33}, .rdims = {33, 300},
                 .nc = 1, .lc = {1}, .rc = {0}};
  check_dot(&c9, 9);

  /* rounds once: bf16 sum of 256 + 1 + 1 is 258, not 256 */
  double a[3] = {256, 1, 1}, b[3] = {1, 1, 1}, got;
  ir_attr at = {0};
  at.dot.n_contract = 1;
  ir_type t[2] = {TY(JIT_BF16, 3), TY(JIT_BF16, 3)};
  run_d(IR_DOT, &at, 2, t, SCALAR(JIT_BF16), (const double *[]){a, b}, &got);
  assert_true(got == 258);
  /* ints accumulate with wrapping: 3 * (100 * 100) in i8 */
  double c[3] = {100, 100, 100};
  ir_type ti[2] = {TY(JIT_I8, 3), TY(JIT_I8, 3)};
  run_d(IR_DOT, &at, 2, ti, SCALAR(JIT_I8), (const double *[]){c, c}, &got);
  assert_true(got == (double)(int8_t)(30000 & 0xff));
  /* inf * 0 is NaN in a dot too */
  double x[2] = {INFINITY, 1}, y[2] = {0, 1};
  ir_type tf[2] = {TY(JIT_F32, 2), TY(JIT_F32, 2)};
  run_d(IR_DOT, &at, 2, tf, SCALAR(JIT_F32), (const double *[]){x, y}, &got);
  assert_true(isnan(got));
}

/* ---- whole functions --------------------------------------------------------------------------- */

/* @f(%0: f32[2,3], %1: f32[3]) -> (add(%0, bcast %1), %0, the add again, a const, i32 iota) */
static void test_multi_result(void **state) {
  ir_func *f = ir_func_new("multi");
  assert_non_null(f);
  ir_ty t23 = ir_type_make(f, JIT_F32, 2, (int64_t[]){2, 3});
  ir_ref x = ir_emit_param(f, t23);
  ir_ref v = ir_emit_param(f, ir_type_make(f, JIT_F32, 1, (int64_t[]){3}));
  ir_attr at = {0};
  at.dims.n = 1;
  at.dims.d[0] = 1;
  ir_ref bv = ir_emit(f, IR_BROADCAST, t23, 1, &v, &at, (ir_loc){"t.c", 3});
  ir_ref s = ir_emit(f, IR_ADD, t23, 2, (ir_ref[]){x, bv}, NULL, (ir_loc){"t.c", 4});
  ir_ref unused = ir_emit(f, IR_MUL, t23, 2, (ir_ref[]){s, s}, NULL, (ir_loc){0});
  ir_ref k = ir_emit_const(f, ir_type_make(f, JIT_F64, 0, NULL), 2.5, (ir_loc){0});
  at.axis = 0;
  ir_ref io = ir_emit(f, IR_IOTA, ir_type_make(f, JIT_I32, 1, (int64_t[]){4}), 0, NULL, &at,
                      (ir_loc){0});
  assert_int_not_equal(unused, IR_NOREF);
  assert_int_equal(ir_set_results(f, 5, (ir_ref[]){s, x, s, k, io}), JIT_OK);
  float xa[6] = {1, 2, 3, 4, 5, 6}, va[3] = {10, 20, 30}, r0[6], r1[6], r2[6];
  double r3;
  int32_t r4[4];
  assert_int_equal(ir_interp(f, (const void *[]){xa, va}, (void *[]){r0, r1, r2, &r3, r4}),
                   JIT_OK);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  assert_memory_equal(r0, want, sizeof want);
  assert_memory_equal(r1, xa, sizeof xa);
  assert_memory_equal(r2, want, sizeof want);
  assert_true(r3 == 2.5);
  for (int i = 0; i < 4; i++) assert_int_equal(r4[i], i);
  /* twice in a row gives the same (nothing left over between calls) */
  memset(r0, 0, sizeof r0);
  assert_int_equal(ir_interp(f, (const void *[]){xa, va}, (void *[]){r0, r1, r2, &r3, r4}),
                   JIT_OK);
  assert_memory_equal(r0, want, sizeof want);
  ir_func_free(f);

  /* no results at all */
  f = ir_func_new("none");
  assert_non_null(f);
  ir_emit_param(f, ir_type_make(f, JIT_I8, 0, NULL));
  unsigned char b = 1;
  assert_int_equal(ir_interp(f, (const void *[]){&b}, NULL), JIT_OK);
  ir_func_free(f);
}

/* A chain long enough that keeping every value alive would show; the result is exact. */
static void test_long_chain(void **state) {
  ir_func *f = ir_func_new("chain");
  assert_non_null(f);
  ir_ty t = ir_type_make(f, JIT_I64, 1, (int64_t[]){1000});
  ir_ref x = ir_emit_param(f, t);
  ir_ref one = ir_emit_const(f, t, 1, (ir_loc){0});
  for (int i = 0; i < 200; i++) x = ir_emit(f, IR_ADD, t, 2, (ir_ref[]){x, one}, NULL, (ir_loc){0});
  assert_int_equal(ir_set_results(f, 1, &x), JIT_OK);
  int64_t in[1000], out[1000];
  for (int i = 0; i < 1000; i++) in[i] = i;
  assert_int_equal(ir_interp(f, (const void *[]){in}, (void *[]){out}), JIT_OK);
  for (int i = 0; i < 1000; i++) assert_true(out[i] == i + 200);
  ir_func_free(f);
}

/* ---- ir_eval_elementwise on its own ------------------------------------------------------------ */

static void test_eval_elementwise(void **state) {
  ir_attr at = {0};
  assert_true(same(ir_eval_elementwise(IR_ADD, NULL, JIT_F16, JIT_F16, (double[]){1, 0x1p-11}), 1));
  assert_true(same(ir_eval_elementwise(IR_ADD, NULL, JIT_I8, JIT_I8, (double[]){127, 1}), -128));
  assert_true(same(ir_eval_elementwise(IR_DIV, NULL, JIT_I32, JIT_I32, (double[]){5, 0}), -1));
  assert_true(same(ir_eval_elementwise(IR_DIV, NULL, JIT_U8, JIT_U8, (double[]){5, 0}), 255));
  assert_true(same(ir_eval_elementwise(IR_DIV, NULL, JIT_F32, JIT_F32, (double[]){1, 3}),
                   (double)(1.0f / 3.0f)));
  assert_true(isnan(ir_eval_elementwise(IR_MAX, NULL, JIT_F64, JIT_F64, (double[]){NAN, 1})));
  at.cmp = JIT_NE;
  assert_true(same(ir_eval_elementwise(IR_CMP, &at, JIT_F32, JIT_BOOL, (double[]){NAN, NAN}), 1));
  at.cmp = JIT_LT;
  assert_true(same(ir_eval_elementwise(IR_CMP, &at, JIT_I32, JIT_BOOL, (double[]){-1, 0}), 1));
  assert_true(same(ir_eval_elementwise(IR_SELECT, NULL, JIT_F32, JIT_F32, (double[]){0, 1, 2}), 2));
  assert_true(same(ir_eval_elementwise(IR_SELECT, NULL, JIT_I8, JIT_I8, (double[]){1, 7, 2}), 7));
  assert_true(same(ir_eval_elementwise(IR_CONVERT, NULL, JIT_F64, JIT_I8, (double[]){300}), 127));
  assert_true(same(ir_eval_elementwise(IR_CONVERT, NULL, JIT_F64, JIT_U8, (double[]){NAN}), 0));
  assert_true(same(ir_eval_elementwise(IR_CONVERT, NULL, JIT_I32, JIT_F16, (double[]){2049}), 2048));
  assert_true(same(ir_eval_elementwise(IR_POW, NULL, JIT_I32, JIT_I32, (double[]){-1, -5}), -1));
  assert_true(same(ir_eval_elementwise(IR_LOGISTIC, NULL, JIT_F32, JIT_F32, (double[]){0}), 0.5));
  /* operands are taken as the dtype holds them: 0.1 as f16 first */
  assert_true(same(ir_eval_elementwise(IR_NEG, NULL, JIT_F16, JIT_F16, (double[]){0.1}),
                   -0.0999755859375));
  /* not elementwise: NaN */
  assert_true(isnan(ir_eval_elementwise(IR_DOT, NULL, JIT_F32, JIT_F32, (double[]){1, 2})));
  assert_true(isnan(ir_eval_elementwise(IR_N_OPS, NULL, JIT_F32, JIT_F32, (double[]){1, 2})));

  /* random operands of every op and dtype: folding = interpreting */
  const ir_op ops[] = {IR_NEG,  IR_ABS,   IR_EXP,  IR_LOG, IR_SQRT, IR_RSQRT, IR_TANH,
                       IR_LOGISTIC, IR_SIN, IR_COS, IR_ERF, IR_FLOOR, IR_ADD,  IR_SUB,
                       IR_MUL,  IR_DIV,   IR_MAX,  IR_MIN, IR_POW};
  uint64_t seed = 99;
  enum { N = 64 };
  double a[N], b[N], got[N];
  for (int d = 0; d < COUNT(all_dts); d++) {
    jit_dtype dt = all_dts[d];
    for (int i = 0; i < N; i++) {
      a[i] = ot_rng_uniform(&seed, -150, 150);
      b[i] = i % 7 == 0 ? 0 : ot_rng_uniform(&seed, -10, 10);
    }
    for (int o = 0; o < COUNT(ops); o++) {
      if ((ir_op_flags[ops[o]] & IR_UNARY_F) && !ot_is_float(dt)) continue;
      ir_type t[2] = {TY(dt, N), TY(dt, N)};
      run_d(ops[o], NULL, ir_op_arity[ops[o]], t, t[0], (const double *[]){a, b}, got); /* checks */
    }
  }
}

/* ---- bad input --------------------------------------------------------------------------------- */

static void test_errors(void **state) {
  /* an operand defined after its use */
  ir_func *f = ir_func_new("bad");
  assert_non_null(f);
  ir_ty t = ir_type_make(f, JIT_F32, 1, (int64_t[]){4});
  ir_ref x = ir_emit_param(f, t);
  ir_ref y = ir_emit(f, IR_ADD, t, 2, (ir_ref[]){x, 5}, NULL, (ir_loc){0});
  assert_int_equal(ir_set_results(f, 1, &y), JIT_OK);
  float in[4] = {0}, out[4];
  assert_int_equal(ir_interp(f, (const void *[]){in}, (void *[]){out}), JIT_EINTERNAL);
  assert_non_null(strstr(jit_last_error(), "add"));
  ir_func_free(f);

  /* a bad transpose after values were made: everything is freed (ASan checks) */
  f = ir_func_new("bad2");
  assert_non_null(f);
  ir_ty t2 = ir_type_make(f, JIT_F32, 2, (int64_t[]){2, 2});
  x = ir_emit_param(f, t2);
  ir_ref e = ir_emit(f, IR_EXP, t2, 1, &x, NULL, (ir_loc){0});
  ir_attr at = {0};
  at.dims.n = 2; /* perm [0,0] */
  ir_ref tr = ir_emit(f, IR_TRANSPOSE, t2, 1, &e, &at, (ir_loc){"model.c", 12});
  assert_int_equal(ir_set_results(f, 2, (ir_ref[]){e, tr}), JIT_OK);
  float r0[4], r1[4];
  assert_int_equal(ir_interp(f, (const void *[]){in}, (void *[]){r0, r1}), JIT_EINTERNAL);
  assert_non_null(strstr(jit_last_error(), "transpose at model.c:12"));
  /* NULL args or results */
  assert_int_equal(ir_interp(f, NULL, (void *[]){r0, r1}), JIT_EINVAL);
  assert_int_equal(ir_interp(f, (const void *[]){in}, NULL), JIT_EINVAL);
  assert_int_equal(ir_interp(f, (const void *[]){NULL}, (void *[]){r0, r1}), JIT_EINVAL);
  assert_int_equal(ir_interp(NULL, NULL, NULL), JIT_EINVAL);
  ir_func_free(f);

  /* shapes that do not fit the op */
  ir_type s4 = TY(JIT_F32, 4), s5 = TY(JIT_F32, 5), i4 = TY(JIT_I32, 4);
  float buf[8] = {0};
  assert_int_equal(run_raw(IR_ADD, NULL, 2, (ir_type[]){s4, s5}, s4, (const void *[]){buf, buf}, buf),
                   JIT_EINTERNAL);
  assert_int_equal(run_raw(IR_ADD, NULL, 2, (ir_type[]){s4, i4}, s4, (const void *[]){buf, buf}, buf),
                   JIT_EINTERNAL);
  assert_int_equal(run_raw(IR_RESHAPE, NULL, 1, &s4, s5, (const void *[]){buf}, buf), JIT_EINTERNAL);
  ir_attr sl = {0};
  sl.slice.start[0] = 2;
  sl.slice.limit[0] = 6;
  sl.slice.stride[0] = 1;
  assert_int_equal(run_raw(IR_SLICE, &sl, 1, &s4, s4, (const void *[]){buf}, buf), JIT_EINTERNAL);
  ir_attr bc = {0};
  bc.dims.n = 1;
  bc.dims.d[0] = 1;
  assert_int_equal(run_raw(IR_BROADCAST, &bc, 1, &s4, TY(JIT_F32, 2, 5), (const void *[]){buf}, buf),
                   JIT_EINTERNAL);
  ir_attr dt = {0};
  dt.dot.n_contract = 1;
  dt.dot.lhs_contract[0] = 0;
  dt.dot.rhs_contract[0] = 0;
  assert_int_equal(run_raw(IR_DOT, &dt, 2, (ir_type[]){s4, s5}, SCALAR(JIT_F32),
                           (const void *[]){buf, buf}, buf),
                   JIT_EINTERNAL);
  ir_attr ax = {0};
  ax.axis = 3;
  assert_int_equal(run_raw(IR_IOTA, &ax, 0, NULL, s4, NULL, buf), JIT_EINTERNAL);
  assert_int_equal(run_raw(IR_CONCAT, &ax, 1, &s4, s4, (const void *[]){buf}, buf), JIT_EINTERNAL);
  ir_attr rd = {0};
  rd.dims.n = 1;
  rd.dims.d[0] = 1;
  assert_int_equal(run_raw(IR_REDUCE_SUM, &rd, 1, &s4, SCALAR(JIT_F32), (const void *[]){buf}, buf),
                   JIT_EINTERNAL);
  /* a type whose size overflows */
  ir_type huge = TY(JIT_F32, (int64_t)1 << 40, (int64_t)1 << 40);
  assert_int_equal(run_raw(IR_CONST, NULL, 0, NULL, huge, NULL, buf), JIT_EINTERNAL);
}

/* Allocation failure: a value too large to allocate, after others were made; everything made
   is freed (ASan checks). ASan must return NULL rather than abort for this test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void test_out_of_memory(void **state) {
  ir_func *f = ir_func_new("oom");
  assert_non_null(f);
  ir_ty t = ir_type_make(f, JIT_F32, 1, (int64_t[]){4});
  ir_ref x = ir_emit_param(f, t);
  ir_ref e = ir_emit(f, IR_EXP, t, 1, &x, NULL, (ir_loc){0});
  ir_attr at = {0};
  at.dims.n = 1;
  at.dims.d[0] = 1;
  /* 2^60 bytes: more than any address space, so no overcommit setting can grant it */
  ir_ty big = ir_type_make(f, JIT_F32, 2, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 18});
  ir_ref b = ir_emit(f, IR_BROADCAST, big, 1, &e, &at, (ir_loc){0});
  ir_ref s = ir_emit(f, IR_REDUCE_SUM, ir_type_make(f, JIT_F32, 0, NULL), 1, &b,
                     &(ir_attr){.dims = {.n = 2, .d = {0, 1}}}, (ir_loc){0});
  assert_int_equal(ir_set_results(f, 2, (ir_ref[]){e, s}), JIT_OK);
  float in[4] = {0}, r0[4], r1;
  assert_int_equal(ir_interp(f, (const void *[]){in}, (void *[]){r0, &r1}), JIT_ENOMEM);
  assert_non_null(strstr(jit_last_error(), "out of memory"));
  ir_func_free(f);
}

/* A result buffer that is the param's own buffer (in place) */
static void test_in_place(void **state) {
  ir_func *f = ir_func_new("id");
  assert_non_null(f);
  ir_ref x = ir_emit_param(f, ir_type_make(f, JIT_I32, 1, (int64_t[]){3}));
  assert_int_equal(ir_set_results(f, 1, &x), JIT_OK);
  int32_t buf[3] = {4, 5, 6};
  assert_int_equal(ir_interp(f, (const void *[]){buf}, (void *[]){buf}), JIT_OK);
  assert_true(buf[0] == 4 && buf[1] == 5 && buf[2] == 6);
  ir_func_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_float),
      cmocka_unit_test(test_binary_float),
      cmocka_unit_test(test_int_exhaustive_8bit),
      cmocka_unit_test(test_int_edge_cases),
      cmocka_unit_test(test_bool_ops),
      cmocka_unit_test(test_cmp),
      cmocka_unit_test(test_select),
      cmocka_unit_test(test_convert),
      cmocka_unit_test(test_const),
      cmocka_unit_test(test_iota),
      cmocka_unit_test(test_elementwise_shapes),
      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_dot),
      cmocka_unit_test(test_multi_result),
      cmocka_unit_test(test_long_chain),
      cmocka_unit_test(test_eval_elementwise),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
