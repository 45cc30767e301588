/* test_cond_transforms.c: vmap and value_and_grad through jit_switch, jit_cond and
 * jit_fori_loop: a batched index (every branch runs, selected per example) and an unbatched one
 * against per-example C; VJPs against central finite differences in f64, for both branches of a
 * cond, every branch of a switch (index clamped), a fori_loop; vmap of a fori_loop. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/gradcheck.h"
#include "support/optest.h"
#include "tjit.h"

enum { B = 4, N = 3 };

/* ---- vmap of a switch ---------------------------------------------------------------------------- */
static void br0(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_mul(t, args[0], args[1]);
}
static void br1(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const jit_val *w = user; /* closed over */
  results[0] = jit_add(t, jit_exp(t, args[0]), *w);
}
static void br2(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_sub(t, args[1], args[0]);
}

static double branch_value(int b, double x, double y, double w) {
  b = b < 0 ? 0 : b > 2 ? 2 : b;
  return b == 0 ? (float)(x * y) : b == 1 ? (float)((float)exp(x) + w) : (float)(y - x);
}

/* args: index i32[], x f32[N], y f32[N], w f32[N] (one example) */
static void switch_one(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  const jit_trace_fn brs[3] = {br0, br1, br2};
  jit_val w = args[3];
  jit_switch(t, args[0], 3, brs, &w, 2, &args[1], 1, results);
}

static void vmapped_switch(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const int *in_axes = user;
  jit_vmap(t, switch_one, NULL, 4, args, in_axes, 1, results, (int[]){0});
}

static void test_vmap_switch(void **state) {
  (void)state;
  int64_t sb[1] = {B}, sbn[2] = {B, N}, sn[1] = {N};
  for (int batched_index = 0; batched_index < 2; batched_index++) {
    int in_axes[4] = {batched_index ? 0 : -1, 0, 0, -1};
    ot_array in[4] = {batched_index ? ot_values(JIT_I32, 1, sb, (double[]){2, -1, 1, 9})
                                    : ot_values(JIT_I32, 0, NULL, (double[]){1}),
                      ot_random(JIT_F32, 2, sbn, 1, -1, 1), ot_random(JIT_F32, 2, sbn, 2, -1, 1),
                      ot_random(JIT_F32, 1, sn, 3, -1, 1)};
    ot_array out[1];
    OT_ASSERT_OK(ot_run("vswitch", vmapped_switch, in_axes, 4, in, 1, out));
    ot_array want = ot_zeros(JIT_F32, 2, sbn);
    for (int e = 0; e < B; e++)
      for (int j = 0; j < N; j++) {
        int b = (int)in[0].v[batched_index ? e : 0];
        want.v[e * N + j] = branch_value(b, in[1].v[e * N + j], in[2].v[e * N + j], in[3].v[j]);
      }
    assert_true(ot_expect(batched_index ? "batched index" : "unbatched index", &out[0], &want));
    for (int i = 0; i < 4; i++) ot_free(&in[i]);
  }
}

/* ---- vmap of a fori_loop: h = h * x + i ---------------------------------------------------------- */
static void fori_body(jit_trace *t, jit_val i, const jit_val *carry, jit_val *new_carry, void *user) {
  const jit_val *x = user;
  new_carry[0] = jit_add(t, jit_mul(t, carry[0], *x), jit_convert(t, i, JIT_F32));
}
static void fori_one(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_fori_loop(t, 1, 4, fori_body, (void *)&args[1], 1, &args[0], results);
}
static void vmapped_fori(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_vmap(t, fori_one, NULL, 2, args, (int[]){0, -1}, 1, results, (int[]){0});
}

static void test_vmap_fori(void **state) {
  (void)state;
  int64_t sbn[2] = {B, N}, sn[1] = {N};
  ot_array in[2] = {ot_random(JIT_F32, 2, sbn, 5, -1, 1), ot_random(JIT_F32, 1, sn, 6, -1, 1)}, out[1];
  OT_ASSERT_OK(ot_run("vfori", vmapped_fori, NULL, 2, in, 1, out));
  ot_array want = ot_zeros(JIT_F32, 2, sbn);
  for (int e = 0; e < B; e++)
    for (int j = 0; j < N; j++) {
      double h = in[0].v[e * N + j];
      for (int i = 1; i < 4; i++) h = (float)((float)(h * in[1].v[j]) + i);
      want.v[e * N + j] = h;
    }
  assert_true(ot_expect("vmapped fori", &out[0], &want));
  ot_free(&in[0]);
  ot_free(&in[1]);
}

/* ---- gradients ------------------------------------------------------------------------------------ */
static jit_val sum_all(jit_trace *t, jit_val v) { return jit_reduce_sum(t, v, 1, (int[]){0}); }

static void g_true(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_mul(t, jit_sin(t, args[0]), args[1]));
  results[1] = jit_mul(t, args[0], args[0]);
}
static void g_false(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_mul(t, jit_mul(t, args[0], args[0]), args[1]));
  results[1] = jit_exp(t, args[1]);
}

/* loss = r0 + sum(r1 * x): both results' cotangents reach the branches */
static void cond_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val pred = jit_cmp(t, JIT_GT, sum_all(t, args[0]), jit_scalar(t, 0.0));
  jit_val r[2];
  jit_cond(t, pred, g_true, g_false, NULL, 2, args, 2, r);
  results[0] = jit_add(t, r[0], sum_all(t, jit_mul(t, r[1], args[0])));
}

static void test_grad_cond(void **state) {
  (void)state;
  int64_t sn[1] = {N};
  for (int sign = 0; sign < 2; sign++) {
    ot_array in[2] = {ot_random(JIT_F64, 1, sn, 11, sign ? 0.1 : -1, sign ? 1 : -0.1),
                      ot_random(JIT_F64, 1, sn, 12, -1, 1)};
    ot_loss_fn l = {cond_loss, NULL, 2};
    ot_check_grad(sign ? "cond_true" : "cond_false", &l, in);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

/* A switch on a static index (user), over branches with an argument one of them ignores. */
static void s0(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_tanh(t, jit_mul(t, args[0], args[1])));
}
static void s1(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_exp(t, args[0]));
}
static void s2(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_div(t, args[1], jit_add(t, jit_mul(t, args[0], args[0]), jit_scalar(t, 1.0))));
}
static void switch_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const int *index = user;
  const jit_trace_fn brs[3] = {s0, s1, s2};
  jit_val i = jit_full(t, JIT_I32, 0, NULL, *index);
  jit_switch(t, i, 3, brs, NULL, 2, args, 1, results);
}

static void test_grad_switch(void **state) {
  (void)state;
  int64_t sn[1] = {N};
  for (int index = -1; index <= 3; index++) {
    ot_array in[2] = {ot_random(JIT_F64, 1, sn, 13, -1, 1), ot_random(JIT_F64, 1, sn, 14, -1, 1)};
    ot_loss_fn l = {switch_loss, &index, 2};
    ot_check_grad("switch", &l, in);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

/* fori_loop: h = sin(h) * w + i, loss = sum(h) */
static void fori_grad_body(jit_trace *t, jit_val i, const jit_val *carry, jit_val *new_carry, void *user) {
  const jit_val *w = user;
  new_carry[0] = jit_add(t, jit_mul(t, jit_sin(t, carry[0]), *w), jit_convert(t, i, JIT_F64));
}
static void fori_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val h;
  jit_fori_loop(t, 0, 4, fori_grad_body, (void *)&args[1], 1, &args[0], &h);
  results[0] = sum_all(t, h);
}

static void test_grad_fori(void **state) {
  (void)state;
  int64_t sn[1] = {N};
  ot_array in[2] = {ot_random(JIT_F64, 1, sn, 15, -1, 1), ot_random(JIT_F64, 1, sn, 16, -1, 1)};
  ot_loss_fn l = {fori_loss, NULL, 2};
  ot_check_grad("fori", &l, in);
  ot_free(&in[0]);
  ot_free(&in[1]);
}

/* ---- nesting: a cond in a scan's step (its gradient through the scan's partial evaluation), a
   scan in a cond's branch, and vmap of the first with a per-example predicate ------------------ */
static void step_pos(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_tanh(t, jit_add(t, jit_mul(t, args[0], args[2]), args[1]));
}
static void step_neg(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = jit_mul(t, jit_sin(t, args[0]), args[1]);
}
/* h = x_t[0] > 0 ? tanh(h * w + x_t) : sin(h) * x_t; y_t = h */
static void step_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  const jit_val *w = user;
  jit_val first = jit_reshape(t, jit_slice(t, x[0], (int64_t[]){0}, (int64_t[]){1}, NULL), 0, NULL);
  jit_val pred = jit_cmp(t, JIT_GT, first, jit_scalar(t, 0.0));
  jit_val a[3] = {carry[0], x[0], *w};
  jit_cond(t, pred, step_pos, step_neg, NULL, 3, a, 1, new_carry);
  y[0] = new_carry[0];
}
static jit_val scan_with_cond(jit_trace *t, jit_val h, jit_val xs, jit_val w, jit_val *ys) {
  jit_val c;
  jit_scan(t, step_body, &w, 1, &h, 1, &xs, -1, 0, &c, 1, ys);
  return c;
}
static void scan_cond_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val ys, c = scan_with_cond(t, args[0], args[1], args[2], &ys);
  results[0] = jit_add(t, sum_all(t, c), jit_reduce_sum(t, jit_mul(t, ys, ys), 2, (int[]){0, 1}));
}

static void test_grad_cond_in_scan(void **state) {
  (void)state;
  int64_t sn[1] = {N}, sx[2] = {5, N};
  ot_array in[3] = {ot_random(JIT_F64, 1, sn, 21, -1, 1), ot_random(JIT_F64, 2, sx, 22, -1, 1),
                    ot_random(JIT_F64, 1, sn, 23, -1, 1)};
  ot_loss_fn l = {scan_cond_loss, NULL, 3};
  ot_check_grad("scan_cond", &l, in);
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

static void cumsum_step(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)user;
  (void)y;
  new_carry[0] = jit_mul(t, jit_add(t, carry[0], x[0]), carry[0]);
}
static void br_scan(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val c;
  jit_scan(t, cumsum_step, NULL, 1, &args[0], 1, &args[1], -1, 0, &c, 0, NULL);
  results[0] = sum_all(t, c);
}
static void br_plain(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = sum_all(t, jit_exp(t, args[0]));
}
static void cond_scan_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const int *which = user;
  jit_val pred = jit_full(t, JIT_BOOL, 0, NULL, *which);
  jit_cond(t, pred, br_scan, br_plain, NULL, 2, args, 1, results);
}

static void test_grad_scan_in_cond(void **state) {
  (void)state;
  int64_t sn[1] = {N}, sx[2] = {4, N};
  for (int which = 0; which < 2; which++) {
    ot_array in[2] = {ot_random(JIT_F64, 1, sn, 24, -0.8, 0.8), ot_random(JIT_F64, 2, sx, 25, -0.5, 0.5)};
    ot_loss_fn l = {cond_scan_loss, &which, 2};
    ot_check_grad("cond_scan", &l, in);
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
}

static void scan_cond_one(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  results[0] = scan_with_cond(t, args[0], args[1], args[2], &results[1]);
}
static void vmapped_scan_cond(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_vmap(t, scan_cond_one, NULL, 3, args, (int[]){0, 0, -1}, 2, results, (int[]){0, 0});
}

static void test_vmap_cond_in_scan(void **state) {
  (void)state;
  enum { T = 5 };
  int64_t sbn[2] = {B, N}, sbx[3] = {B, T, N}, sn[1] = {N}, sy[3] = {B, T, N};
  ot_array in[3] = {ot_random(JIT_F32, 2, sbn, 26, -1, 1), ot_random(JIT_F32, 3, sbx, 27, -1, 1),
                    ot_random(JIT_F32, 1, sn, 28, -1, 1)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("vscan_cond", vmapped_scan_cond, NULL, 3, in, 2, out));
  ot_array want_c = ot_zeros(JIT_F32, 2, sbn), want_y = ot_zeros(JIT_F32, 3, sy);
  for (int e = 0; e < B; e++) {
    double h[N];
    for (int j = 0; j < N; j++) h[j] = in[0].v[e * N + j];
    for (int s = 0; s < T; s++) {
      const double *x = &in[1].v[(e * T + s) * N];
      for (int j = 0; j < N; j++) {
        h[j] = x[0] > 0 ? (float)tanh((float)((float)(h[j] * in[2].v[j]) + x[j]))
                        : (float)((float)sin(h[j]) * x[j]);
        want_y.v[(e * T + s) * N + j] = h[j];
      }
    }
    for (int j = 0; j < N; j++) want_c.v[e * N + j] = h[j];
  }
  ot_tol tol = {1e-5, 1e-6};
  assert_true(ot_expect_tol("carry", &out[0], &want_c, NULL, tol));
  assert_true(ot_expect_tol("ys", &out[1], &want_y, NULL, tol));
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

/* ---- per-example gradients: vmap of value_and_grad through a cond whose predicate differs per
   example (the backward cond's index is batched too), against one call per example ---------- */
static void vg_cond(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_value_and_grad(t, cond_loss, NULL, 2, args, 3, 0, results);
}
static void vmapped_vg_cond(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_vmap(t, vg_cond, NULL, 2, args, (int[]){0, -1}, 3, results, (int[]){0, 0, 0});
}

static void test_vmap_of_grad(void **state) {
  (void)state;
  int64_t sbn[2] = {B, N}, sn[1] = {N};
  ot_array in[2] = {ot_random(JIT_F64, 2, sbn, 31, -1, 1), ot_random(JIT_F64, 1, sn, 32, -1, 1)};
  ot_array out[3];
  OT_ASSERT_OK(ot_run("vvg_cond", vmapped_vg_cond, NULL, 2, in, 3, out));
  int branches[2] = {0, 0};
  for (int e = 0; e < B; e++) {
    ot_array one[2] = {ot_values(JIT_F64, 1, sn, &in[0].v[e * N]), ot_values(JIT_F64, 1, sn, in[1].v)};
    ot_array r[3];
    OT_ASSERT_OK(ot_run("vg_cond", vg_cond, NULL, 2, one, 3, r));
    double s = one[0].v[0] + one[0].v[1] + one[0].v[2];
    branches[s > 0]++;
    for (int k = 0; k < 3; k++) {
      int64_t n = k == 0 ? 1 : N;
      for (int64_t j = 0; j < n; j++)
        if (fabs(out[k].v[e * n + j] - r[k].v[j]) > 1e-12 * (1 + fabs(r[k].v[j])))
          fail_msg("example %d, result %d [%lld]: vmapped %.17g, alone %.17g", e, k, (long long)j,
                   out[k].v[e * n + j], r[k].v[j]);
      ot_free(&r[k]);
    }
    ot_free(&one[0]);
    ot_free(&one[1]);
  }
  assert_true(branches[0] > 0 && branches[1] > 0); /* both branches taken among the examples */
  for (int k = 0; k < 3; k++) ot_free(&out[k]);
  ot_free(&in[0]);
  ot_free(&in[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vmap_switch), cmocka_unit_test(test_vmap_fori),
      cmocka_unit_test(test_grad_cond),   cmocka_unit_test(test_grad_switch),
      cmocka_unit_test(test_grad_fori),   cmocka_unit_test(test_grad_cond_in_scan),
      cmocka_unit_test(test_grad_scan_in_cond), cmocka_unit_test(test_vmap_cond_in_scan),
      cmocka_unit_test(test_vmap_of_grad),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
