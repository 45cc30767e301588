/* test_reduce_window.c: jit_reduce_window (sum, max, min pooling) against a direct float64 loop:
 * 1-3 dims, odd sizes, strides and padding, windows larger than strides, ints; compiled and
 * interpreted; VJPs by finite differences (sum; max and min through select_and_scatter_add, with
 * ties going to the first element as XLA's); vmap against a loop; errors naming the user's line. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/gradcheck.h"
#include "support/optest.h"
#include "tjit.h"

#define THIS_FILE "tests/test_reduce_window.c"

typedef struct wcase {
  jit_window_kind kind;
  int rank;
  int64_t shape[4], window[4], stride[4], lo[4], hi[4];
  jit_dtype dt;
} wcase;

static double identity(const wcase *c) {
  if (c->kind == JIT_WINDOW_SUM) return 0;
  if (ot_is_float(c->dt)) return c->kind == JIT_WINDOW_MAX ? -INFINITY : INFINITY;
  return c->kind == JIT_WINDOW_MAX ? ot_int_min(c->dt) : ot_int_max(c->dt);
}

static ot_array reference(const wcase *c, const ot_array *x) {
  int64_t oshape[4];
  for (int d = 0; d < c->rank; d++) {
    int64_t padded = x->shape[d] + c->lo[d] + c->hi[d];
    oshape[d] = padded < c->window[d] ? 0 : (padded - c->window[d]) / c->stride[d] + 1;
  }
  ot_array r = ot_zeros(c->dt, c->rank, oshape);
  int64_t nw = ot_numel(c->rank, c->window), oi[4], wi[4], xi[4];
  for (int64_t q = 0; q < r.n; q++) {
    ot_unravel(q, c->rank, oshape, oi);
    double acc = identity(c);
    for (int64_t k = 0; k < nw; k++) {
      ot_unravel(k, c->rank, c->window, wi);
      bool inside = true;
      for (int d = 0; d < c->rank; d++) {
        xi[d] = oi[d] * c->stride[d] + wi[d] - c->lo[d];
        if (xi[d] < 0 || xi[d] >= x->shape[d]) inside = false;
      }
      double v = inside ? x->v[ot_ravel(c->rank, x->shape, xi)] : identity(c);
      acc = c->kind == JIT_WINDOW_SUM ? acc + v : c->kind == JIT_WINDOW_MAX ? fmax(acc, v) : fmin(acc, v);
    }
    r.v[q] = ot_round(c->dt, acc);
  }
  return r;
}

static jit_val apply(jit_trace *t, const wcase *c, jit_val x) {
  return jit_reduce_window(t, x, c->kind, c->window, c->stride, c->lo, c->hi);
}

static void trace_op(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  res[0] = apply(t, user, args[0]);
}

static const wcase cases[] = {
    /* 2x2 max-pool, stride 2, odd sizes (the last row and column dropped) */
    {JIT_WINDOW_MAX, 4, {2, 7, 5, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0}, {0}, JIT_F32},
    /* 3x3 stride 2 SAME-like padding, sum (avg-pool's numerator) and min */
    {JIT_WINDOW_SUM, 4, {2, 3, 7, 6}, {1, 1, 3, 3}, {1, 1, 2, 2}, {0, 0, 1, 1}, {0, 0, 1, 1}, JIT_F32},
    {JIT_WINDOW_MIN, 4, {1, 6, 5, 2}, {1, 3, 3, 1}, {1, 2, 1, 1}, {0, 1, 0, 0}, {0, 1, 2, 0}, JIT_F64},
    {JIT_WINDOW_MAX, 2, {9, 4}, {3, 2}, {2, 1}, {1, 0}, {2, 1}, JIT_F32},
    /* 1-D and 3-D, windows larger than the strides */
    {JIT_WINDOW_SUM, 1, {11}, {4}, {3}, {2}, {1}, JIT_F64},
    {JIT_WINDOW_MAX, 3, {5, 4, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {0, 1, 1}, JIT_F32},
    {JIT_WINDOW_MIN, 3, {4, 5, 3}, {3, 2, 2}, {2, 1, 1}, {0, 0, 1}, {1, 0, 0}, JIT_F32},
    /* windows that tile the operand (stride = window, no padding, no remainder): the VJP views
       the operand as windows x offsets (windows.c tiled_shares) */
    {JIT_WINDOW_MAX, 4, {2, 6, 4, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0}, {0}, JIT_F32},
    {JIT_WINDOW_MIN, 3, {6, 4, 5}, {3, 1, 1}, {3, 1, 1}, {0}, {0}, JIT_F32},
    {JIT_WINDOW_MAX, 2, {4, 6}, {2, 3}, {2, 3}, {0}, {0}, JIT_F64},
    /* ints: sums wrap, pads hold the dtype's extremes */
    {JIT_WINDOW_SUM, 2, {5, 6}, {2, 3}, {1, 2}, {1, 0}, {0, 2}, JIT_I32},
    {JIT_WINDOW_MAX, 2, {5, 6}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, JIT_I32},
    {JIT_WINDOW_MIN, 2, {4, 4}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, JIT_I8},
    /* a window too large to expand into slices (the op itself, interpreted), 64-bit ints */
    {JIT_WINDOW_MAX, 2, {9, 8}, {6, 6}, {1, 2}, {1, 0}, {0, 3}, JIT_F32},
    {JIT_WINDOW_SUM, 2, {5, 6}, {2, 3}, {1, 2}, {1, 0}, {0, 2}, JIT_I64},
    {JIT_WINDOW_MIN, 1, {7}, {2}, {2}, {1}, {1}, JIT_U32},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static ot_array input(const wcase *c, uint64_t seed) {
  bool uns = c->dt == JIT_U8 || c->dt == JIT_U32;
  return ot_is_float(c->dt) ? ot_random(c->dt, c->rank, c->shape, seed, -1, 1)
                            : ot_random(c->dt, c->rank, c->shape, seed, uns ? 0 : -50, 50);
}

static void test_against_loop(void **state) {
  (void)state;
  for (int i = 0; i < N_CASES; i++) {
    ot_array x = input(&cases[i], 1), got[2];
    ot_array want = reference(&cases[i], &x);
    char what[40];
    snprintf(what, sizeof what, "reduce_window case %d", i);
    ot_run_both(what, trace_op, (void *)&cases[i], 1, &x, 1, got);
    ot_tol tol = cases[i].dt == JIT_F64 ? (ot_tol){1e-12, 1e-12} : (ot_tol){1e-5, 1e-5};
    assert_true(ot_close(what, &got[0], &want, NULL, tol));
    assert_true(ot_close(what, &got[1], &want, NULL, tol));
    ot_free(&got[0]);
    ot_free(&got[1]);
    ot_free(&want);
    ot_free(&x);
  }
}

/* NaN wins a max or min window, as lax.max / lax.min propagate it */
static void test_nan(void **state) {
  (void)state;
  wcase c = {JIT_WINDOW_MAX, 1, {6}, {2}, {2}, {0}, {0}, JIT_F32};
  ot_array x = ot_values(JIT_F32, 1, c.shape, (double[]){1, NAN, 3, 2, -1, -2}), got;
  for (int k = JIT_WINDOW_MAX; k <= JIT_WINDOW_MIN; k++) {
    c.kind = (jit_window_kind)k;
    OT_ASSERT_OK(ot_run("nan", trace_op, &c, 1, &x, 1, &got));
    assert_true(isnan(got.v[0]));
    assert_true(got.v[1] == (k == JIT_WINDOW_MAX ? 3 : 2) && got.v[2] == (k == JIT_WINDOW_MAX ? -1 : -2));
    ot_free(&got);
  }
  ot_free(&x);
}

/* ---- VJPs ------------------------------------------------------------------------------------ */

static void loss_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_val y = apply(t, user, args[0]);
  int axes[4], rank = jit_val_rank(t, y);
  for (int i = 0; i < rank; i++) axes[i] = i;
  res[0] = jit_reduce_sum(t, jit_sin(t, jit_mul(t, y, jit_scalar(t, 1.7))), rank, axes);
}

static void test_grads(void **state) {
  (void)state;
  for (int i = 0; i < N_CASES; i++) {
    if (!ot_is_float(cases[i].dt)) continue;
    wcase c = cases[i];
    c.dt = JIT_F64;
    /* distinct values far apart: finite differences never cross a tie of a max or min */
    ot_array x = input(&c, 3);
    for (int64_t q = 0; q < x.n; q++) x.v[q] = (double)((q * 7919) % x.n) / 4 + 0.001 * x.v[q];
    ot_loss_fn l = {loss_fn, &c, 1};
    char what[40];
    snprintf(what, sizeof what, "reduce_window grad case %d", i);
    ot_check_grad(what, &l, &x);
    ot_free(&x);
  }
}

static void grad_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_value_and_grad(t, loss_fn, user, 1, args, 1, 0, res);
}

/* A window of equal values sends its whole cotangent to its first element (XLA's select). */
static void test_tie_goes_first(void **state) {
  (void)state;
  wcase c = {JIT_WINDOW_MAX, 1, {5}, {3}, {2}, {0}, {0}, JIT_F64};
  ot_array x = ot_values(JIT_F64, 1, c.shape, (double[]){2, 2, 2, 1, 2}), res[2];
  OT_ASSERT_OK(ot_run("tie", grad_fn, &c, 1, &x, 2, res));
  double ct = 1.7 * cos(1.7 * 2);
  assert_true(fabs(res[1].v[0] - ct) < 1e-12 && res[1].v[1] == 0);
  assert_true(fabs(res[1].v[2] - ct) < 1e-12 && res[1].v[3] == 0 && res[1].v[4] == 0);
  ot_free(&res[0]);
  ot_free(&res[1]);
  ot_free(&x);
  /* windows that tile x: the same, each window's first equal element */
  c = (wcase){JIT_WINDOW_MAX, 1, {6}, {3}, {3}, {0}, {0}, JIT_F64};
  x = ot_values(JIT_F64, 1, c.shape, (double[]){2, 2, 2, 1, 2, 2});
  OT_ASSERT_OK(ot_run("tie tiled", grad_fn, &c, 1, &x, 2, res));
  assert_true(fabs(res[1].v[0] - ct) < 1e-12 && res[1].v[1] == 0 && res[1].v[2] == 0);
  assert_true(res[1].v[3] == 0 && fabs(res[1].v[4] - ct) < 1e-12 && res[1].v[5] == 0);
  ot_free(&res[0]);
  ot_free(&res[1]);
  ot_free(&x);
}

static void sum_loss(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  res[0] = jit_reduce_sum(t, apply(t, user, args[0]), 1, (int[]){0});
}

static void sum_grad(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_value_and_grad(t, sum_loss, user, 1, args, 1, 0, res);
}

/* Padding is never selected: a window of a pad and the identity (-inf for max) picks the
   identity element (compiled, where the VJP is slices and selects, and interpreted). */
static void test_padded_infinities(void **state) {
  (void)state;
  for (int k = JIT_WINDOW_MAX; k <= JIT_WINDOW_MIN; k++) {
    double id = k == JIT_WINDOW_MAX ? -INFINITY : INFINITY, mid = k == JIT_WINDOW_MAX ? 3 : -3;
    wcase c = {(jit_window_kind)k, 1, {4}, {2}, {2}, {1}, {1}, JIT_F32};
    ot_array x = ot_values(JIT_F32, 1, c.shape, (double[]){id, id, mid, id}), res[4];
    ot_run_both("padded infinities", sum_grad, &c, 1, &x, 2, res);
    for (int r = 0; r < 2; r++) {
      const double *g = res[1 + 2 * r].v; /* the compiled, then the interpreted gradient */
      assert_true(g[0] == 1 && g[1] == 0 && g[2] == 1 && g[3] == 1);
    }
    for (int r = 0; r < 4; r++) ot_free(&res[r]);
    ot_free(&x);
  }
}

/* ---- vmap against a loop ------------------------------------------------------------------ */

typedef struct vcase {
  const wcase *c;
  int axis;
} vcase;

static void vmapped(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const vcase *v = user;
  int in_axes[1] = {v->axis}, out_axes[1] = {0};
  jit_vmap(t, trace_op, (void *)v->c, 1, args, in_axes, 1, res, out_axes);
}

static void grad_vmapped(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const vcase *v = user;
  int in_axes[1] = {v->axis}, out_axes[2] = {0, 0};
  jit_vmap(t, grad_fn, (void *)v->c, 1, args, in_axes, 2, res, out_axes);
}

/* The slice e of a (batched at 0) as an array of b's dtype and shape. */
static bool same_as_slice(const char *what, const ot_array *a, int64_t e, const ot_array *b) {
  ot_array slice = ot_zeros(b->dt, b->rank, b->shape);
  for (int64_t q = 0; q < b->n; q++) slice.v[q] = a->v[e * b->n + q];
  bool ok = ot_close(what, &slice, b, NULL, (ot_tol){1e-5, 1e-5});
  ot_free(&slice);
  return ok;
}

static void test_vmap(void **state) {
  (void)state;
  int64_t B = 3;
  for (int i = 0; i < N_CASES; i++)
    for (int axis = 0; axis <= cases[i].rank; axis += cases[i].rank) {
      const wcase *c = &cases[i];
      vcase v = {c, axis};
      int64_t shape[5];
      for (int d = 0, j = 0; d <= c->rank; d++) shape[d] = d == axis ? B : c->shape[j++];
      bool uns = c->dt == JIT_U8 || c->dt == JIT_U32;
      ot_array x = ot_random(c->dt, c->rank + 1, shape, 7, uns ? 0 : -20, 20), got, grads[2];
      OT_ASSERT_OK(ot_run("vmapped", vmapped, &v, 1, &x, 1, &got));
      bool fl = ot_is_float(c->dt);
      if (fl) OT_ASSERT_OK(ot_run("grad vmapped", grad_vmapped, &v, 1, &x, 2, grads));
      for (int64_t e = 0; e < B; e++) {
        ot_array ex = ot_zeros(c->dt, c->rank, c->shape);
        int64_t idx[5], ei[4];
        for (int64_t q = 0; q < ex.n; q++) {
          ot_unravel(q, c->rank, c->shape, ei);
          for (int d = 0, j = 0; d <= c->rank; d++) idx[d] = d == axis ? e : ei[j++];
          ex.v[q] = x.v[ot_ravel(c->rank + 1, shape, idx)];
        }
        ot_array want = reference(c, &ex);
        assert_true(same_as_slice("vmap", &got, e, &want));
        ot_free(&want);
        if (fl) { /* the vmapped VJP (select_and_scatter_add batched) against one example's */
          ot_array one[2];
          OT_ASSERT_OK(ot_run("grad", grad_fn, (void *)c, 1, &ex, 2, one));
          assert_true(same_as_slice("vmap grad", &grads[1], e, &one[1]));
          ot_free(&one[0]);
          ot_free(&one[1]);
        }
        ot_free(&ex);
      }
      ot_free(&got);
      if (fl) {
        ot_free(&grads[0]);
        ot_free(&grads[1]);
      }
      ot_free(&x);
    }
}

/* ---- sharded over 2 devices --------------------------------------------------------------- */

typedef struct scase {
  const wcase *c;
  jit_sharding *sh;
} scase;

static void trace_sharded(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const scase *s = user;
  res[0] = apply(t, s->c, jit_with_sharding_constraint(t, args[0], s->sh));
}

static void grad_sharded(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const scase *s = user;
  jit_val x = jit_with_sharding_constraint(t, args[0], s->sh);
  jit_value_and_grad(t, loss_fn, (void *)s->c, 1, &x, 1, 0, res);
}

/* A max-pool split over its batch stays split (forward and VJP move nothing); split over a
   pooled dim it is gathered first. Against the unsharded results. */
static void test_sharded(void **state) {
  (void)state;
  jit_ctx *two = ot_ctx_with(2, 2, 3);
  jit_mesh *mesh = NULL;
  OT_ASSERT_OK(jit_mesh_create(two, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &mesh));
  const wcase *c = &cases[1];
  ot_array x = input(c, 40), want[2], got[2];
  x.dt = JIT_F32;
  OT_ASSERT_OK(ot_run("unsharded", grad_fn, (void *)c, 1, &x, 2, want));
  static const char *const specs[] = {"x,_,_,_", "_,_,_,x"};
  for (int i = 0; i < 2; i++) {
    scase s = {c, NULL};
    OT_ASSERT_OK(jit_sharding_create(mesh, specs[i], &s.sh));
    OT_ASSERT_OK(ot_run_ctx(two, "sharded", grad_sharded, &s, 1, &x, 2, got));
    assert_true(ot_close("sharded loss", &got[0], &want[0], NULL, (ot_tol){1e-5, 1e-5}));
    assert_true(ot_close("sharded grad", &got[1], &want[1], NULL, (ot_tol){1e-5, 1e-5}));
    ot_free(&got[0]);
    ot_free(&got[1]);
    jit_fn_opts o = {.name = "sharded", .n_args = 1, .n_results = 1};
    jit_fn *f = NULL;
    OT_ASSERT_OK(jit_compile(two, trace_sharded, &s, &o, &f));
    jit_array *a = ot_upload_to(two, &x), *r = NULL;
    OT_ASSERT_OK(jit_call(f, &a, &r));
    char *text = ot_fn_dump(f, &a, JIT_DUMP_PARTITIONED);
    assert_true((strstr(text, "all_gather") != NULL) == (i == 1));
    free(text);
    jit_array_free(r);
    jit_array_free(a);
    jit_fn_free(f);
    jit_sharding_free(s.sh);
  }
  ot_free(&want[0]);
  ot_free(&want[1]);
  ot_free(&x);
  jit_mesh_free(mesh);
  jit_ctx_destroy(two);
}

/* ---- errors name the user's line --------------------------------------------------------------- */

static int bad_line;
static void bad_ops(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  int which = *(int *)user;
  bad_line = __LINE__ + 2;
  switch (which) {
  case 0: res[0] = jit_reduce_window(t, args[0], JIT_WINDOW_MAX, (int64_t[]){0, 2}, NULL, NULL, NULL); break;
  case 1: res[0] = jit_reduce_window(t, args[0], JIT_WINDOW_SUM, (int64_t[]){2, 2}, NULL, (int64_t[]){-1, 0}, NULL); break;
  case 2: res[0] = jit_reduce_window(t, args[0], (jit_window_kind)7, (int64_t[]){2, 2}, NULL, NULL, NULL); break;
  default: res[0] = jit_reduce_window(t, jit_convert(t, args[0], JIT_BOOL), JIT_WINDOW_MAX, (int64_t[]){2, 2}, NULL, NULL, NULL); break;
  }
}

static void test_errors(void **state) {
  (void)state;
  static const jit_status codes[] = {JIT_EINVAL, JIT_EINVAL, JIT_EINVAL, JIT_EDTYPE};
  ot_array x = ot_random(JIT_F32, 2, (int64_t[]){4, 4}, 5, -1, 1);
  for (int which = 0; which < 4; which++) {
    ot_array r;
    assert_int_equal(ot_run("bad", bad_ops, &which, 1, &x, 1, &r), codes[which]);
    assert_true(ot_error_has("reduce_window", THIS_FILE, bad_line + which));
  }
  ot_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_loop), cmocka_unit_test(test_nan),
      cmocka_unit_test(test_grads),        cmocka_unit_test(test_tie_goes_first),
      cmocka_unit_test(test_padded_infinities),
      cmocka_unit_test(test_vmap),         cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
