/* test_cond.c: jit_cond, jit_switch and jit_fori_loop through jit_call, compiled and on the
 * interpreter (opt_level 0), against plain C: the index clamped as lax.switch, branches closing
 * over values of the enclosing trace, conds inside scans and scans inside conds, fori_loop
 * bounds (empty, shifted), the errors with the user's file:line, the native steps in the dump. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/optest.h"
#include "tjit.h"

enum { N = 5 };
static const int64_t shape_n[1] = {N};

/* ---- switch over three branches; branch 1 closes over the outer trace's w ---------------------- */
static void br_mul(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_mul(t, args[0], args[1]);
  results[1] = jit_reduce_sum(t, args[0], 1, (int[]){0});
}
static void br_add_w(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const jit_val *w = user;
  results[0] = jit_add(t, jit_add(t, args[0], args[1]), *w);
  results[1] = jit_reduce_max(t, args[1], 1, (int[]){0});
}
static void br_sin(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_sub(t, jit_sin(t, args[0]), args[1]);
  results[1] = jit_scalar(t, 7.0);
}

/* args: index i32[], x f32[N], y f32[N], w f32[N] */
static void switch_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  const jit_trace_fn brs[3] = {br_mul, br_add_w, br_sin};
  jit_val w = args[3];
  jit_switch(t, args[0], 3, brs, &w, 2, &args[1], 2, results);
}

/* What branch b computes, in double rounded to f32 after each op as the IR does. */
static void switch_want(int b, const ot_array *in, ot_array *r0, ot_array *r1) {
  double acc = b == 1 ? -INFINITY : 0;
  for (int j = 0; j < N; j++) {
    double x = in[1].v[j], y = in[2].v[j], w = in[3].v[j];
    if (b == 0) r0->v[j] = (float)(x * y), acc = (float)(acc + x);
    if (b == 1) r0->v[j] = (float)((float)(x + y) + w), acc = fmax(acc, y);
    if (b == 2) r0->v[j] = (float)((float)sin(x) - y), acc = 7;
  }
  r1->v[0] = acc;
}

static void test_switch(void **state) {
  (void)state;
  const int idx[] = {-3, -1, 0, 1, 2, 3, 100};
  for (size_t c = 0; c < sizeof idx / sizeof idx[0]; c++) {
    ot_array in[4] = {ot_values(JIT_I32, 0, NULL, (double[]){idx[c]}),
                      ot_random(JIT_F32, 1, shape_n, 1, -2, 2), ot_random(JIT_F32, 1, shape_n, 2, -2, 2),
                      ot_random(JIT_F32, 1, shape_n, 3, -2, 2)};
    ot_array out[4];
    ot_run_both("switch", switch_fn, NULL, 4, in, 2, out);
    int b = idx[c] < 0 ? 0 : idx[c] > 2 ? 2 : idx[c]; /* clamped as lax.switch */
    for (int k = 0; k < 2; k++) {
      ot_array w0 = ot_zeros(JIT_F32, 1, shape_n), w1 = ot_zeros(JIT_F32, 0, NULL);
      switch_want(b, in, &w0, &w1);
      assert_true(ot_expect(k ? "interp r0" : "compiled r0", &out[2 * k], &w0));
      assert_true(ot_expect(k ? "interp r1" : "compiled r1", &out[2 * k + 1], &w1));
    }
    for (int i = 0; i < 4; i++) ot_free(&in[i]);
  }
}

/* ---- cond on a computed predicate ---------------------------------------------------------------- */
static void t_exp(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_exp(t, args[0]);
}
static void f_neg(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_neg(t, args[0]);
}

static void cond_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val pred = jit_cmp(t, JIT_GT, jit_reduce_sum(t, args[0], 1, (int[]){0}), jit_scalar(t, 0.0));
  jit_cond(t, pred, t_exp, f_neg, NULL, 1, args, 1, results);
}

static void test_cond(void **state) {
  (void)state;
  for (int seed = 1; seed <= 6; seed++) {
    ot_array in = ot_random(JIT_F32, 1, shape_n, (uint64_t)seed, -1, 1), out[2];
    ot_run_both("cond", cond_fn, NULL, 1, &in, 1, out);
    double sum = 0;
    for (int j = 0; j < N; j++) sum = (float)(sum + in.v[j]);
    for (int k = 0; k < 2; k++) {
      ot_array want = ot_zeros(JIT_F32, 1, shape_n);
      for (int j = 0; j < N; j++) want.v[j] = sum > 0 ? exp(in.v[j]) : -in.v[j];
      assert_true(ot_expect(k ? "interp" : "compiled", &out[k], &want));
    }
    ot_free(&in);
  }
}

/* ---- fori_loop: h = 0.5 h + sin(h) * i over i in [lower, upper) --------------------------------- */
typedef struct bounds {
  int64_t lower, upper;
} bounds;

static void fori_body(jit_trace *t, jit_val i, const jit_val *carry, jit_val *new_carry, void *user) {
  (void)user;
  jit_val fi = jit_convert(t, i, JIT_F32);
  new_carry[0] = jit_add(t, jit_mul(t, carry[0], jit_scalar(t, 0.5)), jit_mul(t, jit_sin(t, carry[0]), fi));
  new_carry[1] = jit_add(t, carry[1], i);
}

static void fori_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const bounds *b = user;
  jit_fori_loop(t, b->lower, b->upper, fori_body, NULL, 2, args, results);
}

static void test_fori_loop(void **state) {
  (void)state;
  const bounds cases[] = {{0, 4}, {2, 7}, {-3, 1}, {5, 5}, {6, 2}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    ot_array in[2] = {ot_random(JIT_F32, 1, shape_n, 4, -1, 1), ot_values(JIT_I32, 0, NULL, (double[]){10})};
    ot_array out[4];
    ot_run_both("fori", fori_fn, (void *)&cases[c], 2, in, 2, out);
    for (int k = 0; k < 2; k++) {
      ot_array want = ot_zeros(JIT_F32, 1, shape_n), want_n = ot_values(JIT_I32, 0, NULL, (double[]){10});
      for (int j = 0; j < N; j++) {
        double h = in[0].v[j];
        for (int64_t i = cases[c].lower; i < cases[c].upper; i++)
          h = (float)((float)(h * 0.5) + (float)((float)sin(h) * (double)i));
        want.v[j] = h;
      }
      for (int64_t i = cases[c].lower; i < cases[c].upper; i++) want_n.v[0] += (double)i;
      assert_true(ot_expect_tol(k ? "interp h" : "compiled h", &out[2 * k], &want, NULL,
                                (ot_tol){1e-5, 1e-6}));
      assert_true(ot_expect(k ? "interp n" : "compiled n", &out[2 * k + 1], &want_n));
    }
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

/* ---- a cond inside a scan's body, a scan inside a cond's branch --------------------------------- */
static void clip_pos(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_add(t, args[0], args[1]);
}
static void clip_neg(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_mul(t, args[0], jit_scalar(t, 0.5));
}

/* carry += x_t when x_t's first element is positive, else carry halves */
static void scan_cond_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                           jit_val *y, void *user) {
  (void)user;
  jit_val first = jit_reshape(t, jit_slice(t, x[0], (int64_t[]){0}, (int64_t[]){1}, NULL), 0, NULL);
  jit_val pred = jit_cmp(t, JIT_GT, first, jit_scalar(t, 0.0));
  jit_val a[2] = {carry[0], x[0]};
  jit_cond(t, pred, clip_pos, clip_neg, NULL, 2, a, 1, new_carry);
  y[0] = new_carry[0];
}

static void scan_cond_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_scan(t, scan_cond_body, NULL, 1, &args[0], 1, &args[1], -1, 0, &results[0], 1, &results[1]);
}

static void cumsum_step(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)user;
  (void)y;
  new_carry[0] = jit_add(t, carry[0], x[0]);
}
static void br_scan(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_scan(t, cumsum_step, NULL, 1, &args[0], 1, &args[1], -1, 0, results, 0, NULL);
}
static void br_first(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_neg(t, args[0]);
}

/* args: index i32[], h f32[N], xs f32[T,N] */
static void cond_scan_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  const jit_trace_fn brs[2] = {br_first, br_scan};
  jit_switch(t, args[0], 2, brs, NULL, 2, &args[1], 1, results);
}

static void test_nested(void **state) {
  (void)state;
  enum { T = 6 };
  int64_t sx[2] = {T, N};
  ot_array in[2] = {ot_random(JIT_F32, 1, shape_n, 7, -1, 1), ot_random(JIT_F32, 2, sx, 8, -1, 1)};
  ot_array out[4];
  ot_run_both("scan_cond", scan_cond_fn, NULL, 2, in, 2, out);
  for (int k = 0; k < 2; k++) {
    ot_array want_c = ot_zeros(JIT_F32, 1, shape_n), want_y = ot_zeros(JIT_F32, 2, sx);
    double h[N];
    for (int j = 0; j < N; j++) h[j] = in[0].v[j];
    for (int s = 0; s < T; s++)
      for (int j = 0; j < N; j++) {
        h[j] = in[1].v[s * N] > 0 ? (float)(h[j] + in[1].v[s * N + j]) : (float)(h[j] * 0.5);
        want_y.v[s * N + j] = h[j];
      }
    for (int j = 0; j < N; j++) want_c.v[j] = h[j];
    assert_true(ot_expect(k ? "interp carry" : "compiled carry", &out[2 * k], &want_c));
    assert_true(ot_expect(k ? "interp ys" : "compiled ys", &out[2 * k + 1], &want_y));
  }
  for (int which = 0; which < 2; which++) {
    ot_array in3[3] = {ot_values(JIT_I32, 0, NULL, (double[]){which}), in[0], in[1]};
    ot_array r[2];
    ot_run_both("cond_scan", cond_scan_fn, NULL, 3, in3, 1, r);
    for (int k = 0; k < 2; k++) {
      ot_array want = ot_zeros(JIT_F32, 1, shape_n);
      for (int j = 0; j < N; j++) {
        double h = which ? in[0].v[j] : -in[0].v[j];
        for (int s = 0; which && s < T; s++) h = (float)(h + in[1].v[s * N + j]);
        want.v[j] = h;
      }
      assert_true(ot_expect(k ? "interp" : "compiled", &r[k], &want));
    }
    ot_free(&in3[0]);
  }
  ot_free(&in[0]);
  ot_free(&in[1]);
}

/* ---- the steps run native code: each branch is its own compiled executable ---------------------- */
static void test_native_dump(void **state) {
  (void)state;
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "switch", .n_args = 4, .n_results = 2};
  OT_ASSERT_OK(jit_compile(ot_ctx(), switch_fn, NULL, &o, &f));
  ot_array in[4] = {ot_values(JIT_I32, 0, NULL, (double[]){1}), ot_random(JIT_F32, 1, shape_n, 1, -2, 2),
                    ot_random(JIT_F32, 1, shape_n, 2, -2, 2), ot_random(JIT_F32, 1, shape_n, 3, -2, 2)};
  jit_array *a[4], *r[2] = {NULL, NULL};
  for (int i = 0; i < 4; i++) a[i] = ot_upload(&in[i]);
  OT_ASSERT_OK(jit_call(f, a, r));
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_FUSED);
  assert_non_null(strstr(text, "cond"));
  free(text);
  text = ot_fn_dump(f, NULL, JIT_DUMP_LLVM); /* one native step calling the branches' entries */
  assert_non_null(strstr(text, "define void @tjit_cond"));
  free(text);
  jit_fn_stats st;
  OT_ASSERT_OK(jit_fn_stats_get(f, &st));
  assert_true(st.n_kernels >= 3); /* the branches' kernels, compiled */
  for (int i = 0; i < 4; i++) {
    jit_array_free(a[i]);
    ot_free(&in[i]);
  }
  for (int i = 0; i < 2; i++) jit_array_free(r[i]);
  jit_fn_free(f);
}

/* ---- a sharded call: the cond runs on every device on replicated operands ----------------------- */
static void sharded_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val y = jit_mul(t, args[0], jit_scalar(t, 2.0)); /* split like x */
  jit_val r;
  jit_val pred = jit_cmp(t, JIT_GT, jit_reduce_sum(t, args[0], 2, (int[]){0, 1}), jit_scalar(t, 0.0));
  jit_cond(t, pred, t_exp, f_neg, NULL, 1, &y, 1, &r);
  results[0] = jit_add(t, r, args[0]);
}

static void test_sharded(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(2, 2, 3);
  assert_non_null(c);
  jit_mesh *m = NULL;
  OT_ASSERT_OK(jit_mesh_create(c, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &m));
  jit_sharding *sx = NULL;
  OT_ASSERT_OK(jit_sharding_create(m, "x,_", &sx));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "sharded_cond", .n_args = 1, .n_results = 1};
  OT_ASSERT_OK(jit_compile(c, sharded_fn, NULL, &o, &f));
  int64_t sh[2] = {8, N};
  for (int sign = 0; sign < 2; sign++) {
    ot_array in = ot_random(JIT_F32, 2, sh, 9, sign ? 0 : -1, sign ? 1 : 0);
    jit_array *x = ot_upload_to(c, &in), *xs = NULL, *plain = NULL, *split = NULL;
    OT_ASSERT_OK(jit_device_put(x, sx, &xs));
    OT_ASSERT_OK(jit_call(f, &x, &plain));
    OT_ASSERT_OK(jit_call(f, &xs, &split));
    if (sign) { /* partitioned: x's split is all-gathered for the cond's operand */
      char *text = ot_fn_dump(f, &xs, JIT_DUMP_PARTITIONED);
      assert_non_null(strstr(text, "all_gather"));
      assert_non_null(strstr(text, "= cond"));
      free(text);
    }
    ot_array want = ot_download(plain), got = ot_download(split);
    assert_true(ot_expect(sign ? "true branch" : "false branch", &got, &want));
    jit_array_free(x);
    jit_array_free(xs);
    jit_array_free(plain);
    jit_array_free(split);
    ot_free(&in);
  }
  jit_fn_free(f);
  jit_sharding_free(sx);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

/* ---- errors ------------------------------------------------------------------------------------- */
static int bad_line;
static void br_f64(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_convert(t, args[0], JIT_F64);
}
static void bad_types_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val pred = jit_cmp(t, JIT_GT, jit_reduce_sum(t, args[0], 1, (int[]){0}), jit_scalar(t, 0.0));
  bad_line = __LINE__ + 1;
  jit_cond(t, pred, f_neg, br_f64, NULL, 1, args, 1, results);
}
static void bad_pred_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  bad_line = __LINE__ + 1;
  jit_cond(t, args[0], f_neg, f_neg, NULL, 1, args, 1, results);
}

static void test_errors(void **state) {
  (void)state;
  ot_array in = ot_random(JIT_F32, 1, shape_n, 1, -1, 1), out[1];
  assert_int_equal(ot_run("bad_types", bad_types_fn, NULL, 1, &in, 1, out), JIT_EINVAL);
  assert_true(ot_error_has("true_fn returns result 0 as f32[5] but false_fn returns it as f64[5]",
                           "tests/test_cond.c", bad_line));
  assert_int_equal(ot_run("bad_pred", bad_pred_fn, NULL, 1, &in, 1, out), JIT_EDTYPE);
  assert_true(ot_error_has("pred has type f32[5]: it must be a bool scalar", "tests/test_cond.c", bad_line));
  ot_free(&in);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_switch),  cmocka_unit_test(test_cond),        cmocka_unit_test(test_fori_loop),
      cmocka_unit_test(test_nested),  cmocka_unit_test(test_native_dump), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_sharded),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
