/* test_ops_lax.c: u32/u64 and lax's further elementwise ops (bitwise, shifts, rem, atan2, clamp,
 * log1p, expm1, ceil, round, sign, erf_inv, is_finite): the interpreter's semantics against
 * hand-computed values and edge cases (INT_MIN / -1, shifts by >= width, NaN, inf, -0), u64
 * values past 2^63 end to end, weak scalars, and dtype errors naming the user's line.
 * (test_codegen compares the compiled kernels with the interpreter on every op and dtype,
 * test_grad checks the VJPs, test_vmap the batching, test_llvm_math the inline math.) */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir/ir.h"
#include "support/optest.h"
#include "tjit.h"

#define THIS_FILE "tests/test_ops_lax.c"
#define PI 3.141592653589793
#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

/* ---- scalar semantics (ir_eval_elementwise: the interpreter's own, also used for folding) ---- */

typedef struct sc {
  ir_op op;
  jit_dtype dt;
  double a, b, c; /* operands (unused ones 0) */
  double want;    /* NAN: a NaN; zeros compare their sign */
} sc;

static const sc SCALARS[] = {
    /* integer division and remainder: x/0 = all ones, x%0 = x, INT_MIN / -1 wraps, % is 0 */
    {IR_DIV, JIT_I32, -2147483648.0, -1, 0, -2147483648.0},
    {IR_REM, JIT_I32, -2147483648.0, -1, 0, 0},
    {IR_REM, JIT_I32, -7, 2, 0, -1},
    {IR_REM, JIT_I32, 7, -2, 0, 1},
    {IR_REM, JIT_I32, 5, 0, 0, 5},
    {IR_DIV, JIT_I32, 5, 0, 0, -1},
    {IR_DIV, JIT_U32, 5, 0, 0, 4294967295.0},
    {IR_REM, JIT_U32, 5, 0, 0, 5},
    {IR_DIV, JIT_U32, 4294967295.0, 2, 0, 2147483647.0},
    {IR_REM, JIT_U8, 250, 7, 0, 5},
    {IR_REM, JIT_I8, -128, -1, 0, 0},
    /* unsigned wrap and order */
    {IR_ADD, JIT_U32, 4294967295.0, 2, 0, 1},
    {IR_SUB, JIT_U32, 0, 1, 0, 4294967295.0},
    {IR_MUL, JIT_U32, 65536, 65536, 0, 0},
    {IR_MAX, JIT_U32, 4294967295.0, 1, 0, 4294967295.0},
    {IR_MIN, JIT_U32, 4294967295.0, 1, 0, 1},
    {IR_NEG, JIT_U32, 1, 0, 0, 4294967295.0},
    {IR_ABS, JIT_U32, 4294967295.0, 0, 0, 4294967295.0},
    {IR_SIGN, JIT_U32, 4294967295.0, 0, 0, 1},
    {IR_SIGN, JIT_I32, -5, 0, 0, -1},
    {IR_SIGN, JIT_I8, 0, 0, 0, 0},
    /* bitwise */
    {IR_AND, JIT_U32, 0xf0f0, 0xff00, 0, 0xf000},
    {IR_OR, JIT_U32, 0xf0f0, 0xff00, 0, 0xfff0},
    {IR_XOR, JIT_U32, 0xf0f0, 0xff00, 0, 0x0ff0},
    {IR_NOT, JIT_U32, 0, 0, 0, 4294967295.0},
    {IR_NOT, JIT_I32, 0, 0, 0, -1},
    {IR_NOT, JIT_U8, 0x0f, 0, 0, 0xf0},
    {IR_NOT, JIT_BOOL, 1, 0, 0, 0},
    {IR_NOT, JIT_BOOL, 0, 0, 0, 1},
    {IR_AND, JIT_BOOL, 1, 0, 0, 0},
    {IR_OR, JIT_BOOL, 1, 0, 0, 1},
    {IR_XOR, JIT_BOOL, 1, 1, 0, 0},
    /* shifts: amounts >= width (or negative, read unsigned) shift everything out */
    {IR_SHL, JIT_U32, 1, 31, 0, 2147483648.0},
    {IR_SHL, JIT_U32, 1, 32, 0, 0},
    {IR_SHL, JIT_I32, 1, 31, 0, -2147483648.0},
    {IR_SHL, JIT_I32, 1, -1, 0, 0},
    {IR_SHL, JIT_I8, 3, 7, 0, -128},
    {IR_SHL, JIT_I8, 3, 8, 0, 0},
    {IR_SHR_LOGICAL, JIT_I32, -1, 28, 0, 15},
    {IR_SHR_LOGICAL, JIT_I32, -1, 32, 0, 0},
    {IR_SHR_LOGICAL, JIT_U8, 0x80, 7, 0, 1},
    {IR_SHR_LOGICAL, JIT_U8, 0x80, 200, 0, 0},
    {IR_SHR_ARITH, JIT_I32, -8, 1, 0, -4},
    {IR_SHR_ARITH, JIT_I32, -8, 40, 0, -1},
    {IR_SHR_ARITH, JIT_I32, 8, 40, 0, 0},
    {IR_SHR_ARITH, JIT_U32, 2147483648.0, 31, 0, 4294967295.0}, /* the sign bit fills */
    {IR_SHR_ARITH, JIT_U32, 2147483648.0, 99, 0, 4294967295.0},
    {IR_SHR_ARITH, JIT_I8, -128, 7, 0, -1},
    {IR_SHR_ARITH, JIT_I64, -1, 64, 0, -1},
    {IR_SHL, JIT_I64, 1, 64, 0, 0},
    /* float rem is C's fmod: exact, the sign of the dividend */
    {IR_REM, JIT_F32, 5.5, 2, 0, 1.5},
    {IR_REM, JIT_F32, -5.5, 2, 0, -1.5},
    {IR_REM, JIT_F64, -0.0, 3, 0, -0.0},
    {IR_REM, JIT_F64, 1, 0, 0, NAN},
    {IR_REM, JIT_F64, INFINITY, 2, 0, NAN},
    {IR_REM, JIT_F64, 3, INFINITY, 0, 3},
    /* atan2 (Annex F) */
    {IR_ATAN2, JIT_F64, 0.0, -0.0, 0, PI},
    {IR_ATAN2, JIT_F64, -0.0, -0.0, 0, -PI},
    {IR_ATAN2, JIT_F64, -0.0, 0.0, 0, -0.0},
    {IR_ATAN2, JIT_F64, 1, 1, 0, PI / 4},
    {IR_ATAN2, JIT_F64, INFINITY, -INFINITY, 0, 3 * PI / 4},
    {IR_ATAN2, JIT_F64, NAN, 1, 0, NAN},
    /* clamp(lo, x, hi) = min(max(x, lo), hi): NaN anywhere is NaN */
    {IR_CLAMP, JIT_F32, -1, 5, 2, 2},
    {IR_CLAMP, JIT_F32, -1, -5, 2, -1},
    {IR_CLAMP, JIT_F32, -1, NAN, 2, NAN},
    {IR_CLAMP, JIT_F32, NAN, 0, 2, NAN},
    {IR_CLAMP, JIT_I32, -1, 7, 3, 3},
    {IR_CLAMP, JIT_U32, 10, 4294967295.0, 20, 20},
    {IR_CLAMP, JIT_U32, 10, 3, 20, 10},
    {IR_CLAMP, JIT_I8, 5, -100, 9, 5},
    /* rounding: ties to even; ceil; sign keeps -0 and NaN */
    {IR_ROUND, JIT_F32, 2.5, 0, 0, 2},
    {IR_ROUND, JIT_F32, 3.5, 0, 0, 4},
    {IR_ROUND, JIT_F32, -2.5, 0, 0, -2},
    {IR_ROUND, JIT_F64, -0.4, 0, 0, -0.0},
    {IR_ROUND, JIT_F64, INFINITY, 0, 0, INFINITY},
    {IR_CEIL, JIT_F32, -0.5, 0, 0, -0.0},
    {IR_CEIL, JIT_F32, 1.25, 0, 0, 2},
    {IR_CEIL, JIT_F64, NAN, 0, 0, NAN},
    {IR_SIGN, JIT_F32, -0.0, 0, 0, -0.0},
    {IR_SIGN, JIT_F32, 0.0, 0, 0, 0.0},
    {IR_SIGN, JIT_F32, NAN, 0, 0, NAN},
    {IR_SIGN, JIT_F32, -3e-40, 0, 0, -1},
    {IR_SIGN, JIT_F64, INFINITY, 0, 0, 1},
    /* log1p, expm1, erf_inv edges */
    {IR_LOG1P, JIT_F64, -1, 0, 0, -INFINITY},
    {IR_LOG1P, JIT_F64, -2, 0, 0, NAN},
    {IR_LOG1P, JIT_F64, -0.0, 0, 0, -0.0},
    {IR_LOG1P, JIT_F64, INFINITY, 0, 0, INFINITY},
    {IR_EXPM1, JIT_F64, -INFINITY, 0, 0, -1},
    {IR_EXPM1, JIT_F64, -0.0, 0, 0, -0.0},
    {IR_EXPM1, JIT_F32, 100, 0, 0, INFINITY},
    {IR_ERF_INV, JIT_F64, 0.0, 0, 0, 0.0},
    {IR_ERF_INV, JIT_F64, -0.0, 0, 0, -0.0},
    {IR_ERF_INV, JIT_F64, 1, 0, 0, INFINITY},
    {IR_ERF_INV, JIT_F64, -1, 0, 0, -INFINITY},
    {IR_ERF_INV, JIT_F64, 1.5, 0, 0, NAN},
    {IR_ERF_INV, JIT_F64, NAN, 0, 0, NAN},
    /* float -> unsigned: truncated and saturated as fptoui.sat; NaN and negatives -> 0 */
    {IR_CONVERT, JIT_U32, -5.7, 0, 0, 0},
    {IR_CONVERT, JIT_U32, 5.7, 0, 0, 5},
    {IR_CONVERT, JIT_U32, 1e20, 0, 0, 4294967295.0},
    {IR_CONVERT, JIT_U32, NAN, 0, 0, 0},
    {IR_CONVERT, JIT_U64, -1, 0, 0, 0},
    {IR_CONVERT, JIT_U64, 1e30, 0, 0, 18446744073709551615.0},
    {IR_CONVERT, JIT_U64, INFINITY, 0, 0, 18446744073709551615.0},
};

static bool same(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && !signbit(got) == !signbit(want);
}

static void test_scalar_semantics(void **state) {
  (void)state;
  int failed = 0;
  for (int i = 0; i < N_OF(SCALARS); i++) {
    const sc *t = &SCALARS[i];
    double ops[3] = {t->a, t->b, t->c};
    /* converts take their operand as f64; everything else as the dtype itself */
    jit_dtype in = t->op == IR_CONVERT ? JIT_F64 : t->dt;
    double got = ir_eval_elementwise(t->op, NULL, in, t->dt, ops);
    if (!same(got, t->want)) {
      print_error("%s %s (%g, %g, %g) = %.17g, want %.17g\n", ir_op_name[t->op],
                  jit_dtype_name(t->dt), t->a, t->b, t->c, got, t->want);
      failed++;
    }
  }
  /* erf_inv is the inverse of erf to double precision */
  for (double y = -0.999999; y < 1; y += 0.0123) {
    double x = ir_eval_elementwise(IR_ERF_INV, NULL, JIT_F64, JIT_F64, &y);
    if (fabs(erf(x) - y) > 4e-16 * (1 + fabs(y))) {
      print_error("erf(erf_inv(%.17g)) = %.17g\n", y, erf(x));
      failed++;
    }
  }
  assert_int_equal(failed, 0);
}

/* ---- u64 past 2^63 and u32 through the compiled path --------------------------------------- */

static void u64_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_shift_right_logical(t, a[0], a[1]);
  r[1] = jit_cmp(t, JIT_GT, a[0], a[1]);
  r[2] = jit_div(t, a[0], a[1]);
  r[3] = jit_max(t, a[0], a[1]);
  r[4] = jit_reduce_max(t, a[0], 1, (int[]){0});
  r[5] = jit_convert(t, a[0], JIT_F64);
  r[6] = jit_rem(t, a[0], a[1]);
  r[7] = jit_reduce_min(t, a[0], 1, (int[]){0});
}

static void test_u64_high_bit(void **state) {
  (void)state;
  const uint64_t x[4] = {0xffffffffffffffffull, 0x8000000000000001ull, 3, 0};
  const uint64_t y[4] = {1, 63, 0x9000000000000000ull, 0};
  jit_ctx *ctx = ot_ctx();
  const int64_t shape[1] = {4};
  jit_array *in[2] = {NULL, NULL}, *out[8] = {NULL};
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_U64, 1, shape, x, &in[0]));
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_U64, 1, shape, y, &in[1]));
  jit_fn *f = NULL;
  const jit_fn_opts o = {.name = "u64", .n_args = 2, .n_results = 8};
  OT_ASSERT_OK(jit_compile(ctx, u64_fn, NULL, &o, &f));
  OT_ASSERT_OK(jit_call(f, in, out));
  uint64_t sh[4], dv[4], mx[4], rm[4], red[2];
  uint8_t gt[4];
  double cv[4];
  OT_ASSERT_OK(jit_array_to_host(out[0], sh, sizeof sh));
  OT_ASSERT_OK(jit_array_to_host(out[1], gt, sizeof gt));
  OT_ASSERT_OK(jit_array_to_host(out[2], dv, sizeof dv));
  OT_ASSERT_OK(jit_array_to_host(out[3], mx, sizeof mx));
  OT_ASSERT_OK(jit_array_to_host(out[4], &red[0], 8));
  OT_ASSERT_OK(jit_array_to_host(out[5], cv, sizeof cv));
  OT_ASSERT_OK(jit_array_to_host(out[6], rm, sizeof rm));
  OT_ASSERT_OK(jit_array_to_host(out[7], &red[1], 8));
  for (int i = 0; i < 4; i++) {
    assert_true(sh[i] == (y[i] < 64 ? x[i] >> y[i] : 0));
    assert_int_equal(gt[i], x[i] > y[i]);
    assert_true(dv[i] == (y[i] ? x[i] / y[i] : UINT64_MAX));
    assert_true(rm[i] == (y[i] ? x[i] % y[i] : x[i]));
    assert_true(mx[i] == (x[i] > y[i] ? x[i] : y[i]));
    assert_true(cv[i] == (double)x[i]);
  }
  assert_true(red[0] == 0xffffffffffffffffull);
  assert_true(red[1] == 0);
  for (int i = 0; i < 2; i++) jit_array_free(in[i]);
  for (int i = 0; i < 8; i++) jit_array_free(out[i]);
  jit_fn_free(f);
}

/* A u32 matmul (hashing-style products that wrap) and a u32 reduce_sum, compiled. */
static void u32_dot_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_matmul(t, a[0], a[1]);
  r[1] = jit_reduce_sum(t, a[0], 1, (int[]){1});
}

static void test_u32_dot(void **state) {
  (void)state;
  enum { M = 5, K = 7, N = 6 };
  ot_array in[2] = {ot_random(JIT_U32, 2, (int64_t[]){M, K}, 7, 0, 4294967295.0),
                    ot_random(JIT_U32, 2, (int64_t[]){K, N}, 8, 0, 4294967295.0)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("u32dot", u32_dot_fn, NULL, 2, in, 2, out));
  double want[M * N], sums[M];
  for (int i = 0; i < M; i++) {
    uint32_t s = 0;
    for (int k = 0; k < K; k++) s += (uint32_t)in[0].v[i * K + k];
    sums[i] = s;
    for (int j = 0; j < N; j++) {
      uint32_t acc = 0;
      for (int k = 0; k < K; k++)
        acc += (uint32_t)in[0].v[i * K + k] * (uint32_t)in[1].v[k * N + j];
      want[i * N + j] = acc;
    }
  }
  ot_array w0 = ot_values(JIT_U32, 2, (int64_t[]){M, N}, want);
  ot_array w1 = ot_values(JIT_U32, 1, (int64_t[]){M}, sums);
  bool ok = ot_expect("matmul", &out[0], &w0);
  ok &= ot_expect("reduce_sum", &out[1], &w1);
  for (int i = 0; i < 2; i++) ot_free(&in[i]);
  assert_true(ok);
}

/* Sharded: the new ops run per shard on a 2-device mesh (elementwise propagation, a reduce_max of
   u32 across the shards) and give the unsharded results bit for bit. */
static void sharded_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val h = jit_xor(t, jit_shift_left(t, a[0], jit_scalar(t, 13)),
                      jit_shift_right_logical(t, a[0], jit_scalar(t, 19)));
  r[0] = jit_reduce_max(t, h, 1, (int[]){1});
  jit_val f = jit_mul(t, jit_convert(t, h, JIT_F32), jit_scalar(t, 0x1p-32));
  jit_val centred = jit_sub(t, jit_mul(t, f, jit_scalar(t, 1.8)), jit_scalar(t, 0.9));
  r[1] = jit_atan2(t, jit_erf_inv(t, centred),
                   jit_clamp(t, jit_scalar(t, 0.1), jit_log1p(t, f), jit_scalar(t, 0.6)));
}

static void test_sharded(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = 2;
  o.n_threads = 2;
  jit_ctx *c = NULL;
  OT_ASSERT_OK(jit_ctx_create(&o, &c));
  enum { R = 8, C = 40 };
  uint32_t x[R * C];
  uint64_t s = 99;
  for (int i = 0; i < R * C; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (uint32_t)(s >> 32);
  }
  jit_array *a = NULL, *b = NULL;
  OT_ASSERT_OK(jit_array_from_host(c, JIT_U32, 2, (int64_t[]){R, C}, x, &a));
  jit_mesh *m = NULL;
  OT_ASSERT_OK(jit_mesh_create(c, 1, (int64_t[]){2}, (const char *const[]){"x"}, NULL, &m));
  jit_sharding *sh = NULL;
  OT_ASSERT_OK(jit_sharding_create(m, "x,_", &sh));
  OT_ASSERT_OK(jit_device_put(a, sh, &b));
  const jit_fn_opts fo = {.name = "sharded", .n_args = 1, .n_results = 2};
  jit_fn *f = NULL;
  OT_ASSERT_OK(jit_compile(c, sharded_fn, NULL, &fo, &f));
  jit_array *plain[2] = {NULL, NULL}, *split[2] = {NULL, NULL};
  OT_ASSERT_OK(jit_call(f, &a, plain));
  OT_ASSERT_OK(jit_call(f, &b, split));
  uint32_t m0[R], m1[R];
  float f0[R * C], f1[R * C];
  OT_ASSERT_OK(jit_array_to_host(plain[0], m0, sizeof m0));
  OT_ASSERT_OK(jit_array_to_host(split[0], m1, sizeof m1));
  OT_ASSERT_OK(jit_array_to_host(plain[1], f0, sizeof f0));
  OT_ASSERT_OK(jit_array_to_host(split[1], f1, sizeof f1));
  assert_memory_equal(m0, m1, sizeof m0);
  assert_memory_equal(f0, f1, sizeof f0);
  for (int i = 0; i < R; i++) { /* and the max is the host's */
    uint32_t want = 0;
    for (int j = 0; j < C; j++) {
      uint32_t v = x[i * C + j], h = (v << 13) ^ (v >> 19);
      if (h > want) want = h;
    }
    assert_true(m0[i] == want);
  }
  for (int i = 0; i < 2; i++) jit_array_free(plain[i]), jit_array_free(split[i]);
  jit_array_free(a);
  jit_array_free(b);
  jit_fn_free(f);
  jit_sharding_free(sh);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

/* ---- tracing: weak scalars, broadcasting, dtype errors with the user's line ------------------ */

static int err_line;

static void weak_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)a, (void)user;
  /* two weak ints fold as integers: (1 << 4) ^ 5 = 21, then 21 & u32 stays u32 */
  jit_val w = jit_xor(t, jit_shift_left(t, jit_scalar(t, 1), jit_scalar(t, 4)), jit_scalar(t, 5));
  r[0] = jit_and(t, a[0], w);
  r[1] = jit_clamp(t, jit_scalar(t, 0.5), a[1], jit_scalar(t, 1.5)); /* weak bounds take f32 */
  r[2] = jit_is_finite(t, a[1]);
  r[3] = jit_atan2(t, a[1], jit_scalar(t, -1));
}

static void test_weak_and_broadcast(void **state) {
  (void)state;
  ot_array in[2] = {ot_values(JIT_U32, 1, (int64_t[]){3}, (double[]){0xffff, 20, 4}),
                    ot_values(JIT_F32, 2, (int64_t[]){2, 2}, (double[]){-1, 0.75, INFINITY, NAN})};
  ot_array out[4];
  OT_ASSERT_OK(ot_run("weak", weak_fn, NULL, 2, in, 4, out));
  ot_array w0 = ot_values(JIT_U32, 1, (int64_t[]){3}, (double[]){21, 20, 4});
  ot_array w1 = ot_values(JIT_F32, 2, (int64_t[]){2, 2}, (double[]){0.5, 0.75, 1.5, NAN});
  ot_array w2 = ot_values(JIT_BOOL, 2, (int64_t[]){2, 2}, (double[]){1, 1, 0, 0});
  ot_array w3 = ot_values(JIT_F32, 2, (int64_t[]){2, 2},
                          (double[]){atan2(-1, -1), atan2(0.75, -1), atan2(INFINITY, -1), NAN});
  bool ok = ot_expect("and", &out[0], &w0);
  ok &= ot_expect("clamp", &out[1], &w1);
  ok &= ot_expect("is_finite", &out[2], &w2);
  ok &= ot_expect_tol("atan2", &out[3], &w3, NULL, (ot_tol){3e-7, 0});
  for (int i = 0; i < 2; i++) ot_free(&in[i]);
  assert_true(ok);
}

typedef enum { E_SHIFT_FLOAT, E_AND_F32, E_AND_MIXED, E_ATAN2_INT, E_LOG1P_INT, E_NOT_F32,
               E_FINITE_INT, E_CLAMP_MIXED, E_WEAK_NEG_U32, E_WEAK_FRACTION_SHIFT } err_mode;
static const struct {
  err_mode mode;
  const char *op;
} ERRS[] = {
    {E_SHIFT_FLOAT, "shift_left"},  {E_AND_F32, "and"},     {E_AND_MIXED, "or"},
    {E_ATAN2_INT, "atan2"},         {E_LOG1P_INT, "log1p"}, {E_NOT_F32, "not"},
    {E_FINITE_INT, "is_finite"},    {E_CLAMP_MIXED, "clamp"}, {E_WEAK_NEG_U32, "xor"},
    {E_WEAK_FRACTION_SHIFT, "shift_right_logical"},
};

static void err_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  /* a[0]: f32[3], a[1]: u32[3], a[2]: i32[3] */
  switch (*(const err_mode *)user) {
  case E_SHIFT_FLOAT: err_line = __LINE__, r[0] = jit_shift_left(t, a[0], a[0]); break;
  case E_AND_F32: err_line = __LINE__, r[0] = jit_and(t, a[0], a[0]); break;
  case E_AND_MIXED: err_line = __LINE__, r[0] = jit_or(t, a[1], a[2]); break;
  case E_ATAN2_INT: err_line = __LINE__, r[0] = jit_atan2(t, a[2], a[2]); break;
  case E_LOG1P_INT: err_line = __LINE__, r[0] = jit_log1p(t, a[1]); break;
  case E_NOT_F32: err_line = __LINE__, r[0] = jit_not(t, a[0]); break;
  case E_FINITE_INT: err_line = __LINE__, r[0] = jit_is_finite(t, a[2]); break;
  case E_CLAMP_MIXED: err_line = __LINE__, r[0] = jit_clamp(t, a[2], a[1], a[1]); break;
  case E_WEAK_NEG_U32: err_line = __LINE__, r[0] = jit_xor(t, a[1], jit_scalar(t, -1)); break;
  case E_WEAK_FRACTION_SHIFT:
    err_line = __LINE__, r[0] = jit_shift_right_logical(t, jit_scalar(t, 8), jit_scalar(t, 0.5));
    break;
  }
}

static void test_dtype_errors(void **state) {
  (void)state;
  ot_array in[3] = {ot_random(JIT_F32, 1, (int64_t[]){3}, 1, 0, 3),
                    ot_random(JIT_U32, 1, (int64_t[]){3}, 2, 0, 3),
                    ot_random(JIT_I32, 1, (int64_t[]){3}, 3, 0, 3)};
  bool ok = true;
  for (int i = 0; i < N_OF(ERRS); i++) {
    ot_array out[1];
    err_line = -1;
    jit_status st = ot_run("errfn", err_fn, (void *)&ERRS[i].mode, 3, in, 1, out);
    if (st != JIT_EDTYPE) {
      print_error("%s: status %s, want JIT_EDTYPE (%s)\n", ERRS[i].op, jit_status_str(st),
                  jit_last_error());
      ok = false;
      continue;
    }
    ok &= ot_error_has(ERRS[i].op, THIS_FILE, err_line);
  }
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
  assert_true(ok);
}

/* ---- the IR text names the dtypes and ops; parse errors for a misuse ------------------------ */

static void test_ir_text(void **state) {
  (void)state;
  const char *good = "func @f(%0: u64[2], %1: u32[2]) -> (u64[2], bool[2]) {\n"
                     "  %2 = convert %1 : u64[2]\n"
                     "  %3 = shift_right_arithmetic %0, %2 : u64[2]\n"
                     "  %4 = convert %3 : f32[2]\n"
                     "  %5 = is_finite %4 : bool[2]\n"
                     "  return %3, %5\n}\n";
  ir_func **fs = NULL;
  uint32_t n = 0;
  OT_ASSERT_OK(ir_parse(good, strlen(good), &fs, &n));
  assert_int_equal(n, 1);
  uint64_t x[2] = {0x8000000000000000ull, 5}, out0[2];
  uint32_t y[2] = {62, 1};
  uint8_t out1[2];
  const void *args[2] = {x, y};
  void *res[2] = {out0, out1};
  OT_ASSERT_OK(ir_interp(fs[0], args, res));
  assert_true(out0[0] == 0xfffffffffffffffeull && out0[1] == 2);
  assert_true(out1[0] == 1 && out1[1] == 1);
  ir_func_free(fs[0]);
  free(fs);
  const char *bad = "func @g(%0: f32[2]) -> f32[2] {\n  %1 = shift_left %0, %0 : f32[2]\n"
                    "  return %1\n}\n";
  assert_int_equal(ir_parse(bad, strlen(bad), &fs, &n), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "int operands"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalar_semantics), cmocka_unit_test(test_u64_high_bit),
      cmocka_unit_test(test_u32_dot),          cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_weak_and_broadcast), cmocka_unit_test(test_dtype_errors),
      cmocka_unit_test(test_ir_text),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
