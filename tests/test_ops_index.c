/* test_ops_index.c: take, take_along_axis, scatter_add/set, dynamic_slice,
 * dynamic_update_slice, pad and rev through the public API, each against loops written out in C
 * (negative, out-of-range and duplicate indices, empty dims), both compiled and interpreted
 * (opt_level 0); fused consumers, scatter over several threads, vmap against a loop, a sharded
 * call against the unsharded one, and errors naming the user's line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir/ir.h"
#include "support/optest.h"
#include "tjit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

static jit_ctx *interp_ctx; /* opt_level 0: the reference interpreter */

static int setup(void **state) {
  if (ot_setup(state)) return -1;
  interp_ctx = ot_ctx_with(1, 2, 0);
  return interp_ctx ? 0 : -1;
}

static int teardown(void **state) {
  jit_ctx_destroy(interp_ctx);
  return ot_teardown(state);
}

/* Runs fn compiled and interpreted; both must equal want (freed). */
static void expect_both(const char *name, jit_trace_fn fn, void *user, int n_args,
                        const ot_array *args, ot_array *want) {
  ot_array got[2];
  OT_ASSERT_OK(ot_run(name, fn, user, n_args, args, 1, &got[0]));
  OT_ASSERT_OK(ot_run_in(interp_ctx, name, fn, user, n_args, args, 1, &got[1]));
  bool ok = ot_equal(name, &got[0], want) && ot_equal(name, &got[1], want);
  ot_free(&got[0]);
  ot_free(&got[1]);
  ot_free(want);
  assert_true(ok);
}

static int count(const char *s, const char *what) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, what)); p++) n++;
  return n;
}

/* The number of kernels fn (one result) compiles into; each must have native code. */
static int native_kernels(const char *name, jit_trace_fn fn, void *user, int n_args,
                          const ot_array *args) {
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = name, .n_args = n_args, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), fn, user, &o, &f));
  jit_array *in[8] = {0}, *out = NULL;
  for (int i = 0; i < n_args; i++) in[i] = ot_upload(&args[i]);
  OT_ASSERT_OK(jit_call(f, in, &out));
  jit_array_free(out);
  char *fused = ot_fn_dump(f, in, JIT_DUMP_FUSED), *c = ot_fn_dump(f, in, JIT_DUMP_C);
  int kernels = count(fused, "kernel k"), compiled = count(c, "void tjit_k");
  if (kernels != compiled || getenv("TJIT_TEST_SHOW")) print_error("%s%s", fused, c);
  assert_int_equal(kernels, compiled);
  free(fused);
  free(c);
  for (int i = 0; i < n_args; i++) jit_array_free(in[i]);
  jit_fn_free(f);
  return kernels;
}

/* The index jnp's clamping gives entry i of an axis of n: negative counts from the end. */
static int64_t clamped(int64_t i, int64_t n) {
  if (i < 0) i += n;
  return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* ---- take --------------------------------------------------------------------------------------- */
typedef struct take_case {
  int axis;
  int post;   /* 0: the gather itself; 1: exp(gather) * 2 (fused into its consumer) */
} take_case;

static void take_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const take_case *c = user;
  jit_val y = jit_take(t, a[0], a[1], c->axis);
  r[0] = c->post ? jit_mul(t, jit_exp(t, y), jit_scalar(t, 2)) : y;
}

static ot_array ref_take(const ot_array *x, const ot_array *idx, int axis, int post) {
  int64_t sh[JIT_MAX_RANK], oi[JIT_MAX_RANK], xi[JIT_MAX_RANK];
  int rank = x->rank - 1 + idx->rank;
  for (int d = 0, r = 0; d < x->rank; d++) {
    if (d == axis)
      for (int k = 0; k < idx->rank; k++) sh[r++] = idx->shape[k];
    else
      sh[r++] = x->shape[d];
  }
  ot_array y = ot_zeros(x->dt, rank, sh);
  for (int64_t e = 0; e < y.n; e++) {
    ot_unravel(e, rank, sh, oi);
    int64_t ii[JIT_MAX_RANK];
    for (int k = 0; k < idx->rank; k++) ii[k] = oi[axis + k];
    for (int d = 0; d < x->rank; d++)
      xi[d] = d < axis ? oi[d] : d == axis ? clamped((int64_t)idx->v[ot_ravel(idx->rank, idx->shape, ii)], x->shape[axis])
                                           : oi[d - 1 + idx->rank];
    double v = x->v[ot_ravel(x->rank, x->shape, xi)];
    y.v[e] = post ? ot_round(x->dt, ot_round(x->dt, exp(v)) * 2) : v;
  }
  return y;
}

static void test_take(void **state) {
  (void)state;
  static const double iv[6] = {2, -1, 7, -9, 0, 2}; /* negative, past the end, before the start, duplicates */
  const int64_t xs[3] = {4, 5, 3}, is[2] = {2, 3};
  ot_array args[2] = {ot_random(JIT_F32, 3, xs, 1, -1, 1), ot_values(JIT_I32, 2, is, iv)};
  for (int axis = 0; axis < 3; axis++)
    for (int post = 0; post < 2; post++) {
      take_case c = {axis, post};
      ot_array want = ref_take(&args[0], &args[1], axis, post);
      if (post) { /* exp: a few ulp */
        ot_array got;
        OT_ASSERT_OK(ot_run("take_exp", take_fn, &c, 2, args, 1, &got));
        assert_true(ot_expect("take_exp", &got, &want));
      } else {
        expect_both("take", take_fn, &c, 2, args, &want);
      }
    }
  /* int64 and uint8 indices, int data, axis -1 */
  ot_array a2[2] = {ot_random(JIT_I64, 2, (int64_t[]){3, 6}, 2, -100, 100),
                    ot_values(JIT_I64, 1, (int64_t[]){4}, (double[]){-6, 5, 6, -7})};
  take_case c = {-1, 0};
  ot_array want = ref_take(&a2[0], &a2[1], 1, 0);
  expect_both("take_i64", take_fn, &c, 2, a2, &want);
  ot_free(&a2[1]);
  a2[1] = ot_values(JIT_U8, 1, (int64_t[]){3}, (double[]){255, 1, 0});
  want = ref_take(&a2[0], &a2[1], 1, 0);
  expect_both("take_u8", take_fn, &c, 2, a2, &want);
  /* empty dims: no indices, an empty kept dim */
  ot_array e1[2] = {ot_random(JIT_F32, 2, (int64_t[]){0, 3}, 3, -1, 1),
                    ot_values(JIT_I32, 1, (int64_t[]){0}, NULL)};
  c.axis = 0;
  want = ot_zeros(JIT_F32, 2, (int64_t[]){0, 3});
  expect_both("take_empty_axis", take_fn, &c, 2, e1, &want);
  ot_array e2[2] = {ot_random(JIT_F32, 2, (int64_t[]){3, 0}, 3, -1, 1),
                    ot_values(JIT_I32, 1, (int64_t[]){2}, (double[]){1, -1})};
  want = ot_zeros(JIT_F32, 2, (int64_t[]){2, 0});
  expect_both("take_empty_rows", take_fn, &c, 2, e2, &want);
  for (int i = 0; i < 2; i++) {
    ot_free(&args[i]);
    ot_free(&a2[i]);
    ot_free(&e1[i]);
    ot_free(&e2[i]);
  }
}

/* x[:, -1]: a weak scalar index is an i32 scalar; the axis goes away */
static void take_last_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_take(t, a[0], jit_scalar(t, -1), 1);
}

static void test_take_scalar(void **state) {
  (void)state;
  ot_array x = ot_random(JIT_F32, 2, (int64_t[]){3, 4}, 6, -1, 1), want = ot_zeros(JIT_F32, 1, (int64_t[]){3});
  for (int i = 0; i < 3; i++) want.v[i] = x.v[i * 4 + 3];
  expect_both("take_last", take_last_fn, NULL, 1, &x, &want);
  ot_free(&x);
}

/* An embedding lookup feeding a reduction: the gather fuses into the row kernel. */
static void embed_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val e = jit_take(t, a[0], a[1], 0);                       /* [n, d] */
  r[0] = jit_reduce_sum(t, jit_mul(t, e, e), 1, (const int[]){1}); /* [n] */
}

static void test_take_fused(void **state) {
  (void)state;
  const int64_t ws[2] = {50, 64}, is[1] = {300};
  ot_array args[2] = {ot_random(JIT_F32, 2, ws, 4, -1, 1), ot_random(JIT_I32, 1, is, 5, -60, 60)};
  ot_array want = ot_zeros(JIT_F32, 1, is);
  for (int i = 0; i < 300; i++) {
    int64_t row = clamped((int64_t)args[1].v[i], 50);
    for (int j = 0; j < 64; j++) want.v[i] += args[0].v[row * 64 + j] * args[0].v[row * 64 + j];
  }
  ot_array got;
  OT_ASSERT_OK(ot_run("embed", embed_fn, NULL, 2, args, 1, &got));
  assert_true(ot_expect_tol("embed", &got, &want, NULL, (ot_tol){1e-5, 1e-5}));
  /* one kernel: the gather is read inside the reduction's loop, never stored */
  assert_int_equal(native_kernels("embed", embed_fn, NULL, 2, args), 1);
  ot_free(&args[0]);
  ot_free(&args[1]);
}

/* ---- take_along_axis -------------------------------------------------------------------------- */
static void along_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_take_along_axis(t, a[0], a[1], *(const int *)user);
}

static void test_take_along_axis(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t xs[3], is[3];
    int axis;
  } cases[] = {
      {2, {4, 5}, {4, 3}, 1},
      {2, {4, 5}, {1, 3}, 1},    /* indices broadcast over rows */
      {2, {1, 5}, {3, 2}, -1},   /* the operand broadcast over rows */
      {3, {3, 4, 2}, {3, 6, 2}, 1},
      {2, {4, 5}, {2, 5}, 0},
  };
  for (int k = 0; k < N_OF(cases); k++) {
    int rank = cases[k].rank, axis = cases[k].axis < 0 ? cases[k].axis + rank : cases[k].axis;
    ot_array args[2] = {ot_random(JIT_F32, rank, cases[k].xs, 10 + (uint64_t)k, -1, 1),
                        ot_random(JIT_I32, rank, cases[k].is, 20 + (uint64_t)k, -8, 8)};
    int64_t sh[3], oi[3], xi[3], ii[3];
    for (int d = 0; d < rank; d++)
      sh[d] = d == axis ? cases[k].is[d] : cases[k].xs[d] > cases[k].is[d] ? cases[k].xs[d] : cases[k].is[d];
    ot_array want = ot_zeros(JIT_F32, rank, sh);
    for (int64_t e = 0; e < want.n; e++) {
      ot_unravel(e, rank, sh, oi);
      for (int d = 0; d < rank; d++) ii[d] = cases[k].is[d] == 1 ? 0 : oi[d];
      for (int d = 0; d < rank; d++) xi[d] = cases[k].xs[d] == 1 ? 0 : oi[d];
      xi[axis] = clamped((int64_t)args[1].v[ot_ravel(rank, cases[k].is, ii)], cases[k].xs[axis]);
      want.v[e] = args[0].v[ot_ravel(rank, cases[k].xs, xi)];
    }
    expect_both("take_along_axis", along_fn, (void *)&cases[k].axis, 2, args, &want);
    ot_free(&args[0]);
    ot_free(&args[1]);
  }
}

/* ---- scatter ------------------------------------------------------------------------------------ */
typedef struct scatter_case {
  bool add;
  int axis;
} scatter_case;

static void scatter_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const scatter_case *c = user;
  r[0] = c->add ? jit_scatter_add(t, a[0], a[1], a[2], c->axis)
                : jit_scatter_set(t, a[0], a[1], a[2], c->axis);
}

/* x.at[idx].add/set(u) along axis, in update order (the last of duplicates wins a set). */
static ot_array ref_scatter(const ot_array *x, const ot_array *idx, const ot_array *u, int axis,
                            bool add) {
  ot_array y = ot_zeros(x->dt, x->rank, x->shape);
  if (x->n) memcpy(y.v, x->v, (size_t)x->n * sizeof *y.v);
  int64_t ui[JIT_MAX_RANK], xi[JIT_MAX_RANK], ii[JIT_MAX_RANK];
  for (int64_t e = 0; e < u->n; e++) {
    ot_unravel(e, u->rank, u->shape, ui);
    for (int k = 0; k < idx->rank; k++) ii[k] = ui[axis + k];
    int64_t i = (int64_t)idx->v[ot_ravel(idx->rank, idx->shape, ii)], n = x->shape[axis];
    if (i < 0) i += n;
    if (i < 0 || i >= n) continue; /* dropped */
    for (int d = 0; d < x->rank; d++) xi[d] = d < axis ? ui[d] : d == axis ? i : ui[d - 1 + idx->rank];
    int64_t at = ot_ravel(x->rank, x->shape, xi);
    y.v[at] = add ? ot_round(x->dt, y.v[at] + u->v[e]) : u->v[e];
  }
  return y;
}

static void run_scatter(jit_dtype dt, int rank, const int64_t *xs, int irank, const int64_t *is,
                        int axis, bool add, uint64_t seed, int64_t ilo, int64_t ihi) {
  int64_t us[JIT_MAX_RANK];
  for (int d = 0, r = 0; d < rank; d++) {
    if (d == axis)
      for (int k = 0; k < irank; k++) us[r++] = is[k];
    else
      us[r++] = xs[d];
  }
  ot_array args[3] = {ot_random(dt, rank, xs, seed, -50, 50),
                      ot_random(JIT_I32, irank, is, seed + 1, (double)ilo, (double)ihi),
                      ot_random(dt, rank - 1 + irank, us, seed + 2, -50, 50)};
  ot_array want = ref_scatter(&args[0], &args[1], &args[2], axis, add);
  scatter_case c = {add, axis};
  expect_both(add ? "scatter_add" : "scatter_set", scatter_fn, &c, 3, args, &want);
  native_kernels("scatter", scatter_fn, &c, 3, args);
  for (int i = 0; i < 3; i++) ot_free(&args[i]);
}

static void test_scatter(void **state) {
  (void)state;
  /* duplicates (8 entries into 6 rows), negative and out-of-range entries (dropped) */
  for (int add = 0; add < 2; add++) {
    run_scatter(JIT_I32, 2, (int64_t[]){6, 3}, 1, (int64_t[]){8}, 0, add, 30, -8, 7);
    run_scatter(JIT_I32, 2, (int64_t[]){6, 3}, 2, (int64_t[]){2, 4}, 1, add, 40, -4, 3);
    run_scatter(JIT_F64, 3, (int64_t[]){3, 4, 2}, 1, (int64_t[]){5}, 1, add, 50, -5, 4);
  }
  /* set without duplicates: unique indices, one of them out of range */
  ot_array args[3] = {ot_random(JIT_F32, 2, (int64_t[]){5, 2}, 60, -1, 1),
                      ot_values(JIT_I32, 1, (int64_t[]){4}, (double[]){4, -5, 9, 2}),
                      ot_random(JIT_F32, 2, (int64_t[]){4, 2}, 61, -1, 1)};
  ot_array want = ref_scatter(&args[0], &args[1], &args[2], 0, false);
  scatter_case c = {false, 0};
  expect_both("scatter_set_unique", scatter_fn, &c, 3, args, &want);
  for (int i = 0; i < 3; i++) ot_free(&args[i]);
  /* empty: no updates; an empty kept dim */
  run_scatter(JIT_F32, 2, (int64_t[]){4, 3}, 1, (int64_t[]){0}, 0, true, 70, 0, 3);
  run_scatter(JIT_F32, 2, (int64_t[]){4, 0}, 1, (int64_t[]){3}, 0, true, 71, 0, 3);
  /* few updates: the kernel's rows are chunks of the operand's rows (5 rows: 2, 2, 1; 9: 3, 3, 3;
     no chunk past the end), the updates' rows vectorized along the last dim (an embedding's
     gradient, 2-d indices; a window of a 3-d operand) or not (the last dim indexed) */
  for (int add = 0; add < 2; add++) {
    run_scatter(JIT_F32, 2, (int64_t[]){5, 64}, 1, (int64_t[]){1}, 0, add, 72, -6, 6);
    run_scatter(JIT_F32, 2, (int64_t[]){9, 16}, 1, (int64_t[]){2}, 0, add, 73, -10, 10);
    run_scatter(JIT_F32, 2, (int64_t[]){301, 40}, 2, (int64_t[]){3, 7}, 0, add, 74, -320, 320);
    run_scatter(JIT_F64, 3, (int64_t[]){40, 3, 8}, 1, (int64_t[]){5}, 0, add, 75, -41, 41);
    run_scatter(JIT_F32, 2, (int64_t[]){64, 30}, 1, (int64_t[]){3}, 1, add, 76, -31, 31);
  }
}

/* A scatter into a constant (a gather's gradient scatters into zeros): its kernel stores the
   constant where it would copy an operand, and the constant gets no kernel or buffer. */
typedef struct const_scatter {
  int64_t shape[2];
  double value;
} const_scatter;

static void const_scatter_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const const_scatter *c = user;
  r[0] = jit_scatter_add(t, jit_full(t, JIT_F32, 2, c->shape, c->value), a[0], a[1], 1);
}

static void test_scatter_into_constant(void **state) {
  (void)state;
  const_scatter c = {{300, 40}, 2.5};
  /* columns with duplicates, negative and out-of-range entries (dropped) */
  ot_array args[2] = {ot_random(JIT_I32, 1, (int64_t[]){9}, 90, -45, 45),
                      ot_random(JIT_F32, 2, (int64_t[]){300, 9}, 91, -8, 8)};
  ot_array x = ot_zeros(JIT_F32, 2, c.shape);
  for (int64_t i = 0; i < x.n; i++) x.v[i] = c.value;
  ot_array want = ref_scatter(&x, &args[0], &args[1], 1, true);
  ot_free(&x);
  expect_both("scatter_into_constant", const_scatter_fn, &c, 2, args, &want);
  /* the indices made non-negative, and the scatter: no kernel (and buffer) of the constant */
  assert_int_equal(native_kernels("scatter_into_constant", const_scatter_fn, &c, 2, args), 2);
  for (int i = 0; i < 2; i++) ot_free(&args[i]);
}

/* Many duplicate rows over an operand big enough to be split over threads: each thread owns
   a chunk of rows, so the sums are exact (ints) and in order. */
static void test_scatter_threads(void **state) {
  (void)state;
  jit_ctx *ctx = ot_ctx_with(1, 4, 3);
  const int64_t xs[2] = {4096, 64}, is[1] = {700}, us[2] = {700, 64};
  ot_array args[3] = {ot_random(JIT_I32, 2, xs, 80, -100, 100), ot_random(JIT_I32, 1, is, 81, -4200, 4200),
                      ot_random(JIT_I32, 2, us, 82, -100, 100)};
  for (int i = 0; i < 700; i += 3) args[1].v[i] = 17; /* a heavily shared row */
  ot_array want = ref_scatter(&args[0], &args[1], &args[2], 0, true), got;
  scatter_case c = {true, 0};
  for (int rep = 0; rep < 3; rep++) {
    OT_ASSERT_OK(ot_run_in(ctx, "scatter_threads", scatter_fn, &c, 3, args, 1, &got));
    bool ok = ot_equal("scatter_threads", &got, &want);
    ot_free(&got);
    assert_true(ok);
  }
  ot_free(&want);
  for (int i = 0; i < 3; i++) ot_free(&args[i]);
  jit_ctx_destroy(ctx);
}

/* ---- dynamic_slice, dynamic_update_slice ----------------------------------------------------------- */
static void dslice_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const int64_t *sizes = user;
  r[0] = jit_dynamic_slice(t, a[0], (jit_val[]){a[1], a[2]}, sizes);
}

static void dupdate_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_dynamic_update_slice(t, a[0], a[3], (jit_val[]){a[1], a[2]});
}

static void test_dynamic_slice(void **state) {
  (void)state;
  static const int64_t starts[][2] = {{1, 2}, {3, -2}, {-7, 9}, {0, 0}, {4, 4}};
  const int64_t xs[2] = {5, 6}, sizes[2] = {2, 4};
  for (int k = 0; k < N_OF(starts); k++) {
    ot_array args[4] = {ot_random(JIT_F32, 2, xs, 90, -1, 1),
                        ot_values(JIT_I32, 0, NULL, (double[]){(double)starts[k][0]}),
                        ot_values(JIT_I64, 0, NULL, (double[]){(double)starts[k][1]}),
                        ot_random(JIT_F32, 2, sizes, 91, 2, 3)};
    int64_t s0 = starts[k][0] < 0 ? 0 : starts[k][0] > 3 ? 3 : starts[k][0];
    int64_t s1 = starts[k][1] < 0 ? 0 : starts[k][1] > 2 ? 2 : starts[k][1];
    ot_array want = ot_zeros(JIT_F32, 2, sizes), upd = ot_zeros(JIT_F32, 2, xs);
    memcpy(upd.v, args[0].v, 30 * sizeof *upd.v);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 4; j++) {
        want.v[i * 4 + j] = args[0].v[(s0 + i) * 6 + s1 + j];
        upd.v[(s0 + i) * 6 + s1 + j] = args[3].v[i * 4 + j];
      }
    expect_both("dynamic_slice", dslice_fn, (void *)sizes, 3, args, &want);
    expect_both("dynamic_update_slice", dupdate_fn, NULL, 4, args, &upd);
    native_kernels("dynamic_slice", dslice_fn, (void *)sizes, 3, args);
    native_kernels("dynamic_update_slice", dupdate_fn, NULL, 4, args);
    for (int i = 0; i < 4; i++) ot_free(&args[i]);
  }
}

/* ---- pad, rev -------------------------------------------------------------------------------------- */
typedef struct pad_case {
  int64_t lo[2], hi[2], in[2];
} pad_case;

static void pad_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const pad_case *c = user;
  r[0] = jit_pad(t, a[0], a[1], c->lo, c->hi, c->in);
}

static void test_pad(void **state) {
  (void)state;
  static const pad_case cases[] = {
      {{1, 0}, {2, 3}, {0, 0}},
      {{1, -1}, {2, 0}, {1, 2}},  /* interior, a crop */
      {{-2, 0}, {-1, -2}, {0, 1}},
      {{0, 3}, {0, -3}, {2, 0}},
  };
  const int64_t xs[2] = {4, 5};
  for (int k = 0; k < N_OF(cases); k++) {
    const pad_case *c = &cases[k];
    ot_array args[2] = {ot_random(JIT_F32, 2, xs, 100 + (uint64_t)k, -1, 1),
                        ot_values(JIT_F32, 0, NULL, (double[]){7.5})};
    int64_t sh[2];
    for (int d = 0; d < 2; d++) sh[d] = c->lo[d] + c->hi[d] + xs[d] + (xs[d] - 1) * c->in[d];
    ot_array want = ot_zeros(JIT_F32, 2, sh);
    for (int64_t e = 0; e < want.n; e++) {
      int64_t o[2], xi[2];
      ot_unravel(e, 2, sh, o);
      bool in = true;
      for (int d = 0; d < 2; d++) {
        int64_t i = o[d] - c->lo[d], st = c->in[d] + 1;
        in = in && i >= 0 && i % st == 0 && i / st < xs[d];
        xi[d] = in ? i / st : 0;
      }
      want.v[e] = in ? args[0].v[ot_ravel(2, xs, xi)] : 7.5;
    }
    expect_both("pad", pad_fn, (void *)c, 2, args, &want);
    assert_int_equal(native_kernels("pad", pad_fn, (void *)c, 2, args), 1);
    ot_free(&args[0]);
    ot_free(&args[1]);
  }
}

static void rev_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_rev(t, a[0], 2, (const int[]){2, 0}), a[0]);
}

static void test_rev(void **state) {
  (void)state;
  const int64_t xs[3] = {3, 4, 5};
  ot_array x = ot_random(JIT_I32, 3, xs, 110, -100, 100), want = ot_zeros(JIT_I32, 3, xs);
  for (int64_t e = 0; e < x.n; e++) {
    int64_t o[3];
    ot_unravel(e, 3, xs, o);
    int64_t r[3] = {2 - o[0], o[1], 4 - o[2]};
    want.v[e] = x.v[ot_ravel(3, xs, r)] + x.v[e];
  }
  expect_both("rev", rev_fn, NULL, 1, &x, &want);
  assert_int_equal(native_kernels("rev", rev_fn, NULL, 1, &x), 1);
  ot_free(&x);
}

/* ---- vmap against a loop over the examples ---------------------------------------------------------- */
typedef struct vmap_case {
  const char *name;
  jit_trace_fn body;
  void *user;
  int n_args;
  int in_axes[4]; /* 0: batched (leading dim), -1: shared */
} vmap_case;

static void vmapped_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vmap_case *c = user;
  jit_vmap(t, c->body, c->user, c->n_args, a, c->in_axes, 1, r, (const int[]){0});
}

/* Example b of a (its leading dim dropped). */
static ot_array example(const ot_array *a, int64_t b) {
  ot_array e = ot_zeros(a->dt, a->rank - 1, a->shape + 1);
  if (e.n) memcpy(e.v, a->v + b * e.n, (size_t)e.n * sizeof *e.v);
  return e;
}

static void check_vmap(const vmap_case *c, const ot_array *args, int64_t batch) {
  ot_array got, want = {0};
  OT_ASSERT_OK(ot_run(c->name, vmapped_fn, (void *)c, c->n_args, args, 1, &got));
  for (int64_t b = 0; b < batch; b++) {
    ot_array ex[4], y;
    for (int i = 0; i < c->n_args; i++) ex[i] = c->in_axes[i] == 0 ? example(&args[i], b) : args[i];
    OT_ASSERT_OK(ot_run(c->name, c->body, c->user, c->n_args, ex, 1, &y));
    if (b == 0) {
      int64_t sh[JIT_MAX_RANK] = {batch};
      memcpy(sh + 1, y.shape, (size_t)y.rank * sizeof *sh);
      want = ot_zeros(y.dt, y.rank + 1, sh);
    }
    if (y.n) memcpy(want.v + b * y.n, y.v, (size_t)y.n * sizeof *y.v);
    ot_free(&y);
    for (int i = 0; i < c->n_args; i++)
      if (c->in_axes[i] == 0) ot_free(&ex[i]);
  }
  assert_true(ot_expect(c->name, &got, &want));
}

static void take_along0_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_take_along_axis(t, a[0], a[1], 0);
}

static void test_vmap(void **state) {
  (void)state;
  const int64_t B = 3;
  take_case tc = {1, 0};
  scatter_case sa = {true, 0}, ss = {false, 1};
  static const int64_t sizes[2] = {2, 3};
  static const pad_case pc = {{1, -1}, {0, 2}, {1, 0}};
  ot_array x = ot_random(JIT_F32, 3, (int64_t[]){B, 4, 5}, 120, -1, 1),
           x1 = example(&x, 1),
           idx = ot_random(JIT_I32, 2, (int64_t[]){B, 6}, 121, -7, 7),
           idx1 = example(&idx, 0),
           u_take = ot_random(JIT_F32, 3, (int64_t[]){B, 6, 5}, 122, -1, 1),
           u1 = example(&u_take, 2),
           u_set = ot_random(JIT_F32, 3, (int64_t[]){B, 4, 6}, 123, -1, 1),
           starts = ot_values(JIT_I32, 1, (int64_t[]){B}, (double[]){-1, 2, 9}),
           start1 = ot_values(JIT_I64, 0, NULL, (double[]){1}),
           pads = ot_values(JIT_F32, 1, (int64_t[]){B}, (double[]){5, 6, 7}),
           pad1 = ot_values(JIT_F32, 0, NULL, (double[]){-3}),
           along = ot_random(JIT_I32, 3, (int64_t[]){B, 2, 5}, 124, -5, 5);
  const struct {
    vmap_case c;
    ot_array args[4];
  } cases[] = {
      {{"vmap_take_x", take_fn, &tc, 2, {0, -1}}, {x, idx1}},
      {{"vmap_take_idx", take_fn, &tc, 2, {-1, 0}}, {x1, idx}},
      {{"vmap_take_both", take_fn, &tc, 2, {0, 0}}, {x, idx}},
      {{"vmap_take_along", take_along0_fn, NULL, 2, {0, 0}}, {x, along}},
      {{"vmap_scatter_add_x", scatter_fn, &sa, 3, {0, -1, -1}}, {x, idx1, u1}},
      {{"vmap_scatter_add_idx", scatter_fn, &sa, 3, {-1, 0, 0}}, {x1, idx, u_take}},
      {{"vmap_scatter_add_all", scatter_fn, &sa, 3, {0, 0, 0}}, {x, idx, u_take}},
      {{"vmap_scatter_set_u", scatter_fn, &ss, 3, {-1, -1, 0}}, {x1, idx1, u_set}},
      {{"vmap_dynamic_slice", dslice_fn, (void *)sizes, 3, {0, 0, -1}}, {x, starts, start1}},
      {{"vmap_dynamic_update", dupdate_fn, NULL, 4, {0, -1, 0, -1}},
       {x, start1, starts, ot_random(JIT_F32, 2, (int64_t[]){2, 3}, 125, -1, 1)}},
      {{"vmap_pad", pad_fn, (void *)&pc, 2, {0, -1}}, {x, pad1}},
      {{"vmap_pad_value", pad_fn, (void *)&pc, 2, {-1, 0}}, {x1, pads}},
      {{"vmap_rev", rev_fn, NULL, 1, {0}}, {ot_random(JIT_I32, 4, (int64_t[]){B, 3, 4, 5}, 126, -9, 9)}},
  };
  for (int k = 0; k < N_OF(cases); k++) check_vmap(&cases[k].c, cases[k].args, B);
  ot_array owned[] = {x, x1, idx, idx1, u_take, u1, u_set, starts, start1, pads, pad1, along,
                      cases[9].args[3], cases[12].args[0]};
  for (int i = 0; i < N_OF(owned); i++) ot_free(&owned[i]);
}

/* ---- a sharded call equals the unsharded one --------------------------------------------------------- */
static void mixed_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y = jit_take(t, a[0], a[1], 0);                                   /* [12,16] */
  jit_val z = jit_scatter_add(t, a[0], a[1], jit_mul(t, y, jit_scalar(t, 2)), 0); /* [8,16] */
  jit_val w = jit_pad(t, z, jit_scalar(t, 0), (const int64_t[]){0, 1}, (const int64_t[]){0, 2}, NULL);
  r[0] = jit_rev(t, w, 1, (const int[]){1});                              /* [8,19] */
  r[1] = jit_exp(t, y);
}

static jit_array *put(const jit_array *a, const jit_mesh *m, const char *spec) {
  jit_sharding *s = NULL;
  OT_ASSERT_OK(jit_sharding_create(m, spec, &s));
  jit_array *b = NULL;
  OT_ASSERT_OK(jit_device_put(a, s, &b));
  jit_sharding_free(s);
  return b;
}

static void test_sharded(void **state) {
  (void)state;
  jit_ctx *ctx = ot_ctx_with(2, 2, 3);
  const int64_t xs[2] = {8, 16}, is[1] = {12}, two[1] = {2};
  jit_array *x = ot_f32_array(ctx, 2, xs, 130), *idx = NULL;
  int32_t iv[12] = {0, 7, -1, 3, 3, 9, -12, 5, 2, 2, 6, 1};
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_I32, 1, is, iv, &idx));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mixed", .n_args = 2, .n_results = 2};
  OT_ASSERT_OK(jit_compile(ctx, mixed_fn, NULL, &o, &f));
  jit_array *want[2];
  OT_ASSERT_OK(jit_call(f, (jit_array *[]){x, idx}, want));
  static const char *const specs[][2] = {{"x,_", "_"}, {"_,x", "x"}, {"x,_", "x"}, {"_,_", "x"}};
  jit_mesh *m = NULL;
  OT_ASSERT_OK(jit_mesh_create(ctx, 1, two, (const char *[]){"x"}, NULL, &m));
  for (int k = 0; k < N_OF(specs); k++) {
    jit_array *px = put(x, m, specs[k][0]), *pi = put(idx, m, specs[k][1]), *got[2];
    OT_ASSERT_OK(jit_call(f, (jit_array *[]){px, pi}, got));
    for (int j = 0; j < 2; j++) {
      ot_array g = ot_download(got[j]), w = ot_download(want[j]);
      bool ok = ot_equal(specs[k][0], &g, &w);
      ot_free(&g);
      ot_free(&w);
      assert_true(ok);
      jit_array_free(got[j]);
    }
    jit_array_free(px);
    jit_array_free(pi);
  }
  /* an embedding table split along its features: each device gathers its own columns */
  jit_fn *tf = NULL;
  take_case tc = {0, 0};
  jit_fn_opts to = {.name = "take_split", .n_args = 2, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ctx, take_fn, &tc, &to, &tf));
  jit_array *px = put(x, m, "_,x"), *got = NULL;
  OT_ASSERT_OK(jit_call(tf, (jit_array *[]){px, idx}, &got));
  char *text = ot_fn_dump(tf, (jit_array *[]){px, idx}, JIT_DUMP_PARTITIONED);
  if (strstr(text, "all_gather") || !strstr(text, "sizes=[1,8]")) print_error("%s", text);
  assert_null(strstr(text, "all_gather"));
  assert_non_null(strstr(text, "sizes=[1,8]"));
  free(text);
  jit_array_free(got);
  jit_array_free(px);
  jit_fn_free(tf);
  jit_mesh_free(m);
  jit_array_free(want[0]);
  jit_array_free(want[1]);
  jit_array_free(x);
  jit_array_free(idx);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* ---- errors: status, op name and the user's line ---------------------------------------------------- */
static int err_line;

static void bad_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val x = a[0], i = a[1], s = jit_full(t, JIT_I32, 0, NULL, 1);
  const int64_t big[2] = {5, 9}, lo[2] = {-3, 0}, hi[2] = {-2, 0};
  switch (*(const int *)user) {
  case 0: err_line = __LINE__; r[0] = jit_take(t, x, i, 2); break;
  case 1: err_line = __LINE__; r[0] = jit_take(t, x, x, 0); break;
  case 2: err_line = __LINE__; r[0] = jit_take_along_axis(t, x, i, 0); break;
  case 3: err_line = __LINE__; r[0] = jit_scatter_add(t, x, i, x, 0); break;
  case 4: err_line = __LINE__; r[0] = jit_scatter_set(t, x, i, jit_convert(t, jit_take(t, x, i, 0), JIT_F64), 0); break;
  case 5: err_line = __LINE__; r[0] = jit_dynamic_slice(t, x, (jit_val[]){s, s}, big); break;
  case 6: err_line = __LINE__; r[0] = jit_dynamic_slice(t, x, (jit_val[]){s, x}, (const int64_t[]){1, 1}); break;
  case 7: err_line = __LINE__; r[0] = jit_pad(t, x, jit_scalar(t, 0), lo, hi, NULL); break;
  case 8: err_line = __LINE__; r[0] = jit_pad(t, x, x, hi, hi, NULL); break;
  case 9: err_line = __LINE__; r[0] = jit_rev(t, x, 2, (const int[]){1, -1}); break;
  default: err_line = __LINE__; r[0] = jit_dynamic_update_slice(t, x, i, (jit_val[]){s, s}); break;
  }
}

static void test_errors(void **state) {
  (void)state;
  static const struct {
    jit_status want;
    const char *op, *text;
  } cases[] = {
      {JIT_ESHAPE, "take", "axis 2 out of range"},
      {JIT_EDTYPE, "take", "indices must be integers"},
      {JIT_ESHAPE, "take_along_axis", "rank of the operand"},
      {JIT_ESHAPE, "scatter_add", "do not fit"},
      {JIT_EDTYPE, "scatter_set", "do not fit"},
      {JIT_ESHAPE, "dynamic_slice", "do not fit"},
      {JIT_ESHAPE, "dynamic_slice", "integer scalar"},
      {JIT_ESHAPE, "pad", "crop more"},
      {JIT_ESHAPE, "pad", "scalar"},
      {JIT_ESHAPE, "rev", "not distinct"},
      {JIT_ESHAPE, "dynamic_update_slice", "does not fit"},
  };
  ot_array args[2] = {ot_random(JIT_F32, 2, (int64_t[]){4, 5}, 140, -1, 1),
                      ot_values(JIT_I32, 1, (int64_t[]){3}, (double[]){0, 1, 2})};
  for (int k = 0; k < N_OF(cases); k++) {
    ot_array out;
    err_line = 0;
    jit_status st = ot_run("bad", bad_fn, &k, 2, args, 1, &out);
    if (st != cases[k].want) print_error("case %d: %s: %s\n", k, jit_status_str(st), jit_last_error());
    assert_int_equal(st, cases[k].want);
    assert_true(ot_error_has(cases[k].op, "tests/test_ops_index.c", err_line));
    assert_true(ot_error_contains(cases[k].text));
  }
  ot_free(&args[0]);
  ot_free(&args[1]);
}

/* The IR text: malformed indexing attributes are parse errors with a position, never a crash. */
static void test_ir_text_errors(void **state) {
  (void)state;
  static const struct {
    const char *line, *want;
  } cases[] = {
      {"%2 = gather %0, %1 offset_dims=[1] collapsed=[0] start_map=[0] index_dim=1 mode=clip : f32[3,5]",
       "needs attribute 'sizes'"},
      {"%2 = gather %0, %1 offset_dims=[1] collapsed=[0] start_map=[0] index_dim=1 sizes=[1,5] mode=wrap : f32[3,5]",
       "a mode (clip or fill)"},
      {"%2 = gather %0, %1 offset_dims=[1] collapsed=[0] start_map=[0] index_dim=1 sizes=[1,6] mode=clip : f32[3,6]",
       "slice size 6 out of range"},
      {"%2 = gather %0, %1 window_dims=[1] collapsed=[0] start_map=[0] index_dim=1 sizes=[1,5] mode=clip : f32[3,5]",
       "unknown attribute 'window_dims'"},
      {"%2 = gather %0, %1 offset_dims=[1] collapsed=[0] start_map=[0,1] index_dim=1 sizes=[1,5] mode=clip : f32[3,5]",
       "start_map has 2 entries"},
      {"%2 = gather %0, %0 offset_dims=[1] collapsed=[0] start_map=[0] index_dim=2 sizes=[1,5] mode=clip : f32[4,5,5]",
       "indices must be integers"},
      {"%2 = pad %0, %0 lo=[0,0] hi=[0,0] interior=[0,0] : f32[4,5]", "must be a scalar"},
      {"%2 = rev %0 axes=[1,0] : f32[4,5]", "increasing"},
  };
  for (int k = 0; k < N_OF(cases); k++) {
    char text[512];
    snprintf(text, sizeof text, "func @f(%%0: f32[4,5], %%1: i32[3]) -> f32[4,5] {\n  %s\n  return %%0\n}\n",
             cases[k].line);
    ir_func **fs = NULL;
    uint32_t n = 0;
    jit_status st = ir_parse(text, strlen(text), &fs, &n);
    if (st == JIT_OK || !strstr(jit_last_error(), cases[k].want) || !strstr(jit_last_error(), "2:"))
      print_error("case %d: %s: %s\n", k, jit_status_str(st), jit_last_error());
    assert_int_equal(st, JIT_EINVAL);
    assert_non_null(strstr(jit_last_error(), cases[k].want));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_take),
      cmocka_unit_test(test_take_scalar),
      cmocka_unit_test(test_take_fused),
      cmocka_unit_test(test_take_along_axis),
      cmocka_unit_test(test_scatter),
      cmocka_unit_test(test_scatter_threads),
      cmocka_unit_test(test_scatter_into_constant),
      cmocka_unit_test(test_dynamic_slice),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_rev),
      cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_ir_text_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
