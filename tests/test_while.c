/* test_while.c: jit_while through jit_call, compiled and on the interpreter, against C loops: a
 * data-dependent trip count (Collatz steps), a loop closing over an outer value, zero
 * iterations; vmap with a batched predicate (lanes finish at different steps and keep their
 * carries); value_and_grad through it refused with JAX's reason; the errors. */
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

/* ---- Collatz: (n, steps) while n != 1: n = n even ? n / 2 : 3n + 1; steps += 1 ------------------- */
static void collatz_cond(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_cmp(t, JIT_NE, args[0], jit_scalar(t, 1));
}
static void collatz_body(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val n = args[0];
  jit_val even = jit_cmp(t, JIT_EQ, jit_rem(t, n, jit_scalar(t, 2)), jit_scalar(t, 0));
  jit_val up = jit_add(t, jit_mul(t, n, jit_scalar(t, 3)), jit_scalar(t, 1));
  results[0] = jit_select(t, even, jit_div(t, n, jit_scalar(t, 2)), up);
  results[1] = jit_add(t, args[1], jit_scalar(t, 1));
}
static void collatz_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val init[2] = {args[0], jit_full(t, JIT_I32, 0, NULL, 0)};
  jit_while(t, collatz_cond, collatz_body, NULL, 2, init, results);
}

static int collatz_steps(int64_t n) {
  int s = 0;
  for (; n != 1; s++) n = n % 2 == 0 ? n / 2 : 3 * n + 1;
  return s;
}

static void test_collatz(void **state) {
  (void)state;
  const int starts[] = {1, 2, 6, 7, 27};
  for (size_t c = 0; c < sizeof starts / sizeof starts[0]; c++) {
    ot_array in = ot_values(JIT_I64, 0, NULL, (double[]){starts[c]}), out[4];
    ot_run_both("collatz", collatz_fn, NULL, 1, &in, 2, out);
    for (int k = 0; k < 2; k++) {
      ot_array n = ot_values(JIT_I64, 0, NULL, (double[]){1});
      ot_array s = ot_values(JIT_I32, 0, NULL, (double[]){collatz_steps(starts[c])});
      assert_true(ot_expect(k ? "interp n" : "compiled n", &out[2 * k], &n));
      assert_true(ot_expect(k ? "interp steps" : "compiled steps", &out[2 * k + 1], &s));
    }
    ot_free(&in);
  }
}

/* ---- x = x * a + b while sum(x) < limit; a and b closed over, from the outer trace -------------- */
typedef struct affine {
  jit_val a, b;
} affine;
static void grow_cond(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_cmp(t, JIT_LT, jit_reduce_sum(t, args[0], 1, (int[]){0}), jit_scalar(t, 50.0));
}
static void grow_body(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const affine *w = user;
  results[0] = jit_add(t, jit_mul(t, args[0], w->a), w->b);
}
static void grow_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  affine w = {args[1], args[2]};
  jit_while(t, grow_cond, grow_body, &w, 1, &args[0], results);
}

static void grow_want(const double *x0, const double *a, const double *b, int n, double *x) {
  for (int j = 0; j < n; j++) x[j] = x0[j];
  for (;;) {
    double s = 0;
    for (int j = 0; j < n; j++) s = (float)(s + x[j]);
    if (!(s < 50)) break;
    for (int j = 0; j < n; j++) x[j] = (float)((float)(x[j] * a[j]) + b[j]);
  }
}

static void test_closure(void **state) {
  (void)state;
  int64_t sn[1] = {4};
  for (int big = 0; big < 2; big++) { /* big: the predicate is false at once */
    ot_array in[3] = {ot_random(JIT_F32, 1, sn, 1, big ? 20 : 0, big ? 30 : 1),
                      ot_random(JIT_F32, 1, sn, 2, 1.1, 1.5), ot_random(JIT_F32, 1, sn, 3, 0.5, 1)};
    ot_array out[2];
    ot_run_both("grow", grow_fn, NULL, 3, in, 1, out);
    for (int k = 0; k < 2; k++) {
      ot_array want = ot_zeros(JIT_F32, 1, sn);
      grow_want(in[0].v, in[1].v, in[2].v, 4, want.v);
      assert_true(ot_expect(k ? "interp" : "compiled", &out[k], &want));
    }
    for (int i = 0; i < 3; i++) ot_free(&in[i]);
  }
}

/* the loop is one native function of the signature's module calling the bodies' entries */
static void test_native_loop(void **state) {
  (void)state;
  int64_t sn[1] = {4};
  ot_array in[3] = {ot_random(JIT_F32, 1, sn, 1, 0, 1), ot_random(JIT_F32, 1, sn, 2, 1.1, 1.5),
                    ot_random(JIT_F32, 1, sn, 3, 0.5, 1)};
  jit_array *a[3], *r = NULL;
  for (int i = 0; i < 3; i++) a[i] = ot_upload(&in[i]);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "grow", .n_args = 3, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), grow_fn, NULL, &o, &f));
  OT_ASSERT_OK(jit_call(f, a, &r));
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_LLVM);
  assert_non_null(strstr(text, "define void @tjit_while"));
  free(text);
  ot_array got = ot_download(r), want = ot_zeros(JIT_F32, 1, sn);
  grow_want(in[0].v, in[1].v, in[2].v, 4, want.v);
  assert_true(ot_expect("native loop", &got, &want));
  for (int i = 0; i < 3; i++) {
    jit_array_free(a[i]);
    ot_free(&in[i]);
  }
  jit_array_free(r);
  jit_fn_free(f);
}

/* ---- vmap: each example's x0 (batched), shared a and b ------------------------------------------- */
static void vgrow_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_vmap(t, grow_fn, NULL, 3, args, (int[]){0, -1, -1}, 1, results, (int[]){0});
}

static void test_vmap_batched_pred(void **state) {
  (void)state;
  enum { B = 5, N = 4 };
  int64_t sbn[2] = {B, N}, sn[1] = {N};
  ot_array in[3] = {ot_random(JIT_F32, 2, sbn, 4, -1, 14), ot_random(JIT_F32, 1, sn, 5, 1.1, 1.5),
                    ot_random(JIT_F32, 1, sn, 6, 0.5, 1)};
  ot_array out[2];
  ot_run_both("vgrow", vgrow_fn, NULL, 3, in, 1, out);
  for (int k = 0; k < 2; k++) {
    ot_array want = ot_zeros(JIT_F32, 2, sbn);
    for (int e = 0; e < B; e++) grow_want(in[0].v + e * N, in[1].v, in[2].v, N, want.v + e * N);
    assert_true(ot_expect(k ? "interp" : "compiled", &out[k], &want));
  }
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

/* ---- value_and_grad through a while loop is JAX's error ------------------------------------------ */
static int bad_line;
static void while_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  affine w = {args[1], args[2]};
  jit_val x;
  bad_line = __LINE__ + 1;
  jit_while(t, grow_cond, grow_body, &w, 1, &args[0], &x);
  results[0] = jit_reduce_sum(t, x, 1, (int[]){0});
}
static void while_vg(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_value_and_grad(t, while_loss, NULL, 3, args, 1, 0, results);
}

static void bad_pred(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = args[0];
}
static void bad_pred_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  affine w = {args[0], args[0]};
  bad_line = __LINE__ + 1;
  jit_while(t, bad_pred, grow_body, &w, 1, &args[0], results);
}

static void test_errors(void **state) {
  (void)state;
  int64_t sn[1] = {4};
  ot_array in[3] = {ot_random(JIT_F32, 1, sn, 1, 0, 1), ot_random(JIT_F32, 1, sn, 2, 1.1, 1.5),
                    ot_random(JIT_F32, 1, sn, 3, 0.5, 1)};
  ot_array out[2];
  assert_int_equal(ot_run("while_vg", while_vg, NULL, 3, in, 2, out), JIT_EUNSUPPORTED);
  assert_true(ot_error_has("Reverse-mode differentiation does not work for lax.while_loop",
                           "tests/test_while.c", bad_line));
  assert_true(ot_error_contains("Try using lax.scan, or lax.fori_loop with static trip count"));
  assert_int_equal(ot_run("bad_pred", bad_pred_fn, NULL, 1, in, 1, out), JIT_EDTYPE);
  assert_true(ot_error_has("cond_fn returns f32[4]: it must return a bool scalar", "tests/test_while.c",
                           bad_line));
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collatz), cmocka_unit_test(test_closure), cmocka_unit_test(test_native_loop),
      cmocka_unit_test(test_vmap_batched_pred), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
