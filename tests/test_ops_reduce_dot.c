/* test_ops_reduce_dot.c: end-to-end tests of reductions, matmul and dot_general through the
 * public API, against plain C loops in double with sum-of-|terms| error bounds. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/optest.h"
#include "tjit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))


typedef struct shape {
  int rank;
  int64_t d[JIT_MAX_RANK];
} shape;

static ot_array data(jit_dtype dt, const shape *s, uint64_t seed) {
  if (ot_is_float(dt)) return ot_random(dt, s->rank, s->d, seed, -1, 1);
  if (dt == JIT_U8) return ot_random(dt, s->rank, s->d, seed, 0, 9);
  return ot_random(dt, s->rank, s->d, seed, -9, 9);
}

/* ---- reductions --------------------------------------------------------------------------------- */
typedef struct reduce_case {
  shape x;
  int n_axes;
  int axes[JIT_MAX_RANK];
} reduce_case;

static void reduce_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const reduce_case *c = user;
  r[0] = jit_reduce_sum(t, a[0], c->n_axes, c->axes);
  r[1] = jit_reduce_max(t, a[0], c->n_axes, c->axes);
  r[2] = jit_reduce_min(t, a[0], c->n_axes, c->axes);
}

/* The three reductions of x over the case's axes, and each sum's magnitude sum |x_i|. Max and min
   propagate NaN; an empty reduction gives the identity (0, lowest, highest), as XLA does. */
static void ref_reduce(const ot_array *x, const reduce_case *c, ot_array out[3], double **mag) {
  bool red[JIT_MAX_RANK] = {false};
  for (int k = 0; k < c->n_axes; k++) red[c->axes[k]] = true;
  int rank = 0;
  int64_t sh[JIT_MAX_RANK], xi[JIT_MAX_RANK], oi[JIT_MAX_RANK];
  for (int k = 0; k < x->rank; k++)
    if (!red[k]) sh[rank++] = x->shape[k];
  bool fl = ot_is_float(x->dt);
  for (int j = 0; j < 3; j++) out[j] = ot_zeros(x->dt, rank, sh);
  *mag = calloc((size_t)(out[0].n ? out[0].n : 1), sizeof **mag);
  assert_non_null(*mag);
  for (int64_t i = 0; i < out[0].n; i++) {
    out[1].v[i] = fl ? -INFINITY : ot_int_min(x->dt);
    out[2].v[i] = fl ? INFINITY : ot_int_max(x->dt);
  }
  for (int64_t i = 0; i < x->n; i++) {
    ot_unravel(i, x->rank, x->shape, xi);
    int r = 0;
    for (int k = 0; k < x->rank; k++)
      if (!red[k]) oi[r++] = xi[k];
    int64_t o = ot_ravel(rank, sh, oi);
    double v = x->v[i];
    out[0].v[o] += v;
    (*mag)[o] += fabs(v);
    if (isnan(v) || isnan(out[1].v[o])) out[1].v[o] = NAN;
    else if (v > out[1].v[o]) out[1].v[o] = v;
    if (isnan(v) || isnan(out[2].v[o])) out[2].v[o] = NAN;
    else if (v < out[2].v[o]) out[2].v[o] = v;
  }
}

static bool check_reduce(const reduce_case *c, jit_dtype dt, const ot_array *x) {
  ot_array out[3], want[3];
  double *mag;
  OT_ASSERT_OK(ot_run("reduce", reduce_fn, (void *)c, 1, x, 3, out));
  ref_reduce(x, c, want, &mag);
  static const char *const names[3] = {"reduce_sum", "reduce_max", "reduce_min"};
  bool ok = true;
  for (int j = 0; j < 3; j++) {
    char what[128], s1[64], s2[64];
    snprintf(what, sizeof what, "%s %s%s axes=%s", names[j], jit_dtype_name(dt),
             ot_shape_str(c->x.rank, c->x.d, s1, sizeof s1),
             ot_shape_str(c->n_axes, (int64_t[JIT_MAX_RANK]){c->axes[0], c->axes[1], c->axes[2],
                                                              c->axes[3]},
                          s2, sizeof s2));
    ok &= ot_expect_tol(what, &out[j], &want[j], j == 0 ? mag : NULL, ot_tol_of(dt));
  }
  free(mag);
  return ok;
}

static const reduce_case reduce_cases[] = {
    {{3, {3, 4, 5}}, 1, {0}},       {{3, {3, 4, 5}}, 1, {1}},       {{3, {3, 4, 5}}, 1, {2}},
    {{3, {3, 4, 5}}, 2, {0, 2}},    {{3, {3, 4, 5}}, 2, {0, 1}},    {{3, {3, 4, 5}}, 2, {1, 2}},
    {{3, {3, 4, 5}}, 3, {0, 1, 2}}, {{3, {3, 4, 5}}, 0, {0}},       {{0, {0}}, 0, {0}},
    {{3, {2, 0, 3}}, 1, {1}},       {{3, {2, 0, 3}}, 1, {0}},       {{3, {2, 0, 3}}, 3, {0, 1, 2}},
    {{1, {7}}, 1, {0}},             {{1, {67}}, 1, {0}},            {{2, {1, 1}}, 2, {0, 1}},
    {{1, {0}}, 1, {0}},             {{4, {2, 3, 2, 3}}, 2, {1, 3}}, {{2, {33, 65}}, 1, {1}},
    {{2, {33, 65}}, 1, {0}},
};

static void test_reduce_f32(void **state) {
  bool ok = true;
  for (int c = 0; c < N_OF(reduce_cases); c++) {
    ot_array x = data(JIT_F32, &reduce_cases[c].x, 100 + c);
    ok &= check_reduce(&reduce_cases[c], JIT_F32, &x);
    ot_free(&x);
  }
  assert_true(ok);
}

static void test_reduce_other_dtypes(void **state) {
  static const jit_dtype dts[] = {JIT_F64, JIT_F16, JIT_BF16, JIT_I32, JIT_I64, JIT_I8, JIT_U8};
  static const int some[] = {0, 3, 6, 7, 8, 9, 11, 13, 16};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    for (int c = 0; c < N_OF(some); c++) {
      const reduce_case *rc = &reduce_cases[some[c]];
      ot_array x = data(dts[d], &rc->x, 200 + c);
      ok &= check_reduce(rc, dts[d], &x);
      ot_free(&x);
    }
  }
  assert_true(ok);
}

/* NaN propagates through max and min (and sum); infinities are ordinary extremes. */
static void test_reduce_special_values(void **state) {
  static const double v[] = {1, NAN, -2, 3, INFINITY, -INFINITY, 0.5, -0.5, 2, -INFINITY, -1, 0};
  static const reduce_case c = {{2, {3, 4}}, 1, {1}};
  bool ok = true;
  for (int d = JIT_F16; d <= JIT_F64; d++) {
    ot_array x = ot_values((jit_dtype)d, 2, c.x.d, v);
    ok &= check_reduce(&c, (jit_dtype)d, &x);
    ot_free(&x);
  }
  assert_true(ok);
}

/* Axes given out of order, or negative (counting from the end), mean the same set of axes, as
   in NumPy. The reference gets them normalized. */
static void test_reduce_axes_order_and_sign(void **state) {
  static const reduce_case given[] = {{{3, {3, 4, 5}}, 2, {2, 0}}, {{3, {3, 4, 5}}, 1, {-1}},
                                      {{3, {3, 4, 5}}, 2, {-3, -2}}, {{2, {4, 5}}, 2, {-1, 0}}};
  bool ok = true;
  for (int c = 0; c < N_OF(given); c++) {
    reduce_case norm = given[c];
    for (int k = 0; k < norm.n_axes; k++)
      if (norm.axes[k] < 0) norm.axes[k] += norm.x.rank;
    ot_array x = data(JIT_F32, &given[c].x, 5 + c), out[3], want[3];
    double *mag;
    OT_ASSERT_OK(ot_run("reduce", reduce_fn, (void *)&given[c], 1, &x, 3, out));
    ref_reduce(&x, &norm, want, &mag);
    char what[64];
    snprintf(what, sizeof what, "reduce with axes case %d", c);
    for (int j = 0; j < 3; j++)
      ok &= ot_expect_tol(what, &out[j], &want[j], j == 0 ? mag : NULL, ot_tol_of(JIT_F32));
    free(mag);
    ot_free(&x);
  }
  assert_true(ok);
}

/* ---- matmul ------------------------------------------------------------------------------------- */
/* NumPy matmul, written out: 1-D operands gain a dim (a in front, b behind) that the result drops;
   batch dims broadcast. Also returns sum |a*b| per result element. */
static ot_array ref_matmul(const ot_array *a, const ot_array *b, double **mag) {
  int64_t as[JIT_MAX_RANK + 1], bs[JIT_MAX_RANK + 1];
  int ar = a->rank, br = b->rank;
  memcpy(as, a->shape, sizeof(int64_t) * (size_t)ar);
  memcpy(bs, b->shape, sizeof(int64_t) * (size_t)br);
  if (ar == 1) as[1] = as[0], as[0] = 1, ar = 2;
  if (br == 1) bs[1] = 1, br = 2;
  int64_t M = as[ar - 2], K = as[ar - 1], N = bs[br - 1];
  assert_int_equal(K, bs[br - 2]);
  int brank;
  int64_t bsh[JIT_MAX_RANK];
  assert_true(ot_bcast_shape(ar - 2, as, br - 2, bs, &brank, bsh));
  int64_t full[JIT_MAX_RANK + 2];
  memcpy(full, bsh, sizeof(int64_t) * (size_t)brank);
  full[brank] = M;
  full[brank + 1] = N;
  /* the result's shape drops the dims the 1-D operands gained */
  int64_t rsh[JIT_MAX_RANK];
  int rr = 0;
  for (int i = 0; i < brank; i++) rsh[rr++] = bsh[i];
  if (a->rank != 1) rsh[rr++] = M;
  if (b->rank != 1) rsh[rr++] = N;
  ot_array w = ot_zeros(a->dt, rr, rsh);
  *mag = calloc((size_t)(w.n ? w.n : 1), sizeof **mag);
  assert_non_null(*mag);
  assert_int_equal(w.n, ot_numel(brank + 2, full));
  int64_t idx[JIT_MAX_RANK + 2], ai[JIT_MAX_RANK + 2], bi[JIT_MAX_RANK + 2];
  for (int64_t o = 0; o < w.n; o++) {
    ot_unravel(o, brank + 2, full, idx);
    double s = 0, m = 0;
    for (int64_t k = 0; k < K; k++) {
      /* batch index of each operand: right-aligned, size-1 dims broadcast */
      for (int i = 0; i < ar - 2; i++) {
        int64_t j = idx[i + brank - (ar - 2)];
        ai[i] = as[i] == 1 ? 0 : j;
      }
      ai[ar - 2] = idx[brank], ai[ar - 1] = k;
      for (int i = 0; i < br - 2; i++) {
        int64_t j = idx[i + brank - (br - 2)];
        bi[i] = bs[i] == 1 ? 0 : j;
      }
      bi[br - 2] = k, bi[br - 1] = idx[brank + 1];
      double x = a->v[ot_ravel(ar, as, ai)], y = b->v[ot_ravel(br, bs, bi)];
      s += x * y;
      m += fabs(x * y);
    }
    w.v[o] = s;
    (*mag)[o] = m;
  }
  return w;
}

static void matmul_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_matmul(t, a[0], a[1]);
}

typedef struct mm_case {
  shape a, b;
} mm_case;

static const mm_case mm_cases[] = {
    {{2, {3, 4}}, {2, {4, 5}}},             {{1, {4}}, {2, {4, 5}}},
    {{2, {3, 4}}, {1, {4}}},                {{1, {4}}, {1, {4}}},
    {{3, {2, 3, 4}}, {3, {2, 4, 5}}},       {{4, {2, 1, 3, 4}}, {3, {5, 4, 2}}},
    {{3, {2, 3, 4}}, {2, {4, 5}}},          {{1, {4}}, {3, {2, 4, 5}}},
    {{2, {3, 0}}, {2, {0, 5}}},             {{2, {0, 4}}, {2, {4, 5}}},
    {{2, {33, 65}}, {2, {65, 17}}},         {{2, {1, 1}}, {2, {1, 1}}},
    {{3, {1, 3, 4}}, {3, {2, 4, 1}}},       {{3, {2, 3, 4}}, {1, {4}}},
};

static bool check_matmul(jit_dtype dt, const mm_case *c, uint64_t seed) {
  ot_array in[2] = {data(dt, &c->a, seed), data(dt, &c->b, seed + 1)}, out;
  OT_ASSERT_OK(ot_run("matmul", matmul_fn, NULL, 2, in, 1, &out));
  double *mag;
  ot_array want = ref_matmul(&in[0], &in[1], &mag);
  char what[128], s1[64], s2[64];
  snprintf(what, sizeof what, "matmul %s%s x %s", jit_dtype_name(dt),
           ot_shape_str(c->a.rank, c->a.d, s1, sizeof s1), ot_shape_str(c->b.rank, c->b.d, s2, sizeof s2));
  bool ok = ot_expect_tol(what, &out, &want, mag, ot_tol_of(dt));
  free(mag);
  ot_free(&in[0]);
  ot_free(&in[1]);
  return ok;
}

static void test_matmul_f32(void **state) {
  bool ok = true;
  for (int c = 0; c < N_OF(mm_cases); c++) ok &= check_matmul(JIT_F32, &mm_cases[c], 300 + c);
  assert_true(ok);
}

static void test_matmul_other_dtypes(void **state) {
  static const jit_dtype dts[] = {JIT_F64, JIT_F16, JIT_BF16, JIT_I32, JIT_I64, JIT_I8};
  static const int some[] = {0, 1, 3, 5, 8, 10};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++)
    for (int c = 0; c < N_OF(some); c++) ok &= check_matmul(dts[d], &mm_cases[some[c]], 400 + c);
  assert_true(ok);
}

/* ---- dot_general ------------------------------------------------------------------------------ */
typedef struct dot_case {
  shape a, b;
  int n_batch, a_batch[4], b_batch[4];
  int n_contract, a_contract[4], b_contract[4];
} dot_case;

static void dot_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const dot_case *c = user;
  r[0] = jit_dot_general(t, a[0], a[1], c->n_batch, c->a_batch, c->b_batch, c->n_contract,
                         c->a_contract, c->b_contract);
}

/* XLA's DotGeneral: result dims are the batch dims, then a's free dims, then b's, in order. */
static ot_array ref_dot(const dot_case *c, const ot_array *a, const ot_array *b, double **mag) {
  int a_role[JIT_MAX_RANK] = {0}, b_role[JIT_MAX_RANK] = {0}; /* 0 free, 1 batch, 2 contract */
  for (int i = 0; i < c->n_batch; i++) a_role[c->a_batch[i]] = 1, b_role[c->b_batch[i]] = 1;
  for (int i = 0; i < c->n_contract; i++) a_role[c->a_contract[i]] = 2, b_role[c->b_contract[i]] = 2;
  int a_free[JIT_MAX_RANK], b_free[JIT_MAX_RANK], naf = 0, nbf = 0;
  for (int i = 0; i < a->rank; i++)
    if (!a_role[i]) a_free[naf++] = i;
  for (int i = 0; i < b->rank; i++)
    if (!b_role[i]) b_free[nbf++] = i;
  int rr = 0;
  int64_t rsh[JIT_MAX_RANK], csh[JIT_MAX_RANK];
  for (int i = 0; i < c->n_batch; i++) rsh[rr++] = a->shape[c->a_batch[i]];
  for (int i = 0; i < naf; i++) rsh[rr++] = a->shape[a_free[i]];
  for (int i = 0; i < nbf; i++) rsh[rr++] = b->shape[b_free[i]];
  for (int i = 0; i < c->n_contract; i++) csh[i] = a->shape[c->a_contract[i]];
  int64_t nk = ot_numel(c->n_contract, csh);
  ot_array w = ot_zeros(a->dt, rr, rsh);
  *mag = calloc((size_t)(w.n ? w.n : 1), sizeof **mag);
  assert_non_null(*mag);
  int64_t oi[JIT_MAX_RANK], ki[JIT_MAX_RANK], ai[JIT_MAX_RANK], bi[JIT_MAX_RANK];
  for (int64_t o = 0; o < w.n; o++) {
    ot_unravel(o, rr, rsh, oi);
    for (int i = 0; i < c->n_batch; i++) ai[c->a_batch[i]] = oi[i], bi[c->b_batch[i]] = oi[i];
    for (int i = 0; i < naf; i++) ai[a_free[i]] = oi[c->n_batch + i];
    for (int i = 0; i < nbf; i++) bi[b_free[i]] = oi[c->n_batch + naf + i];
    double s = 0, m = 0;
    for (int64_t k = 0; k < nk; k++) {
      ot_unravel(k, c->n_contract, csh, ki);
      for (int i = 0; i < c->n_contract; i++) ai[c->a_contract[i]] = ki[i], bi[c->b_contract[i]] = ki[i];
      double x = a->v[ot_ravel(a->rank, a->shape, ai)], y = b->v[ot_ravel(b->rank, b->shape, bi)];
      s += x * y;
      m += fabs(x * y);
    }
    w.v[o] = s;
    (*mag)[o] = m;
  }
  return w;
}

static const dot_case dot_cases[] = {
    /* plain matmul */
    {{2, {3, 4}}, {2, {4, 5}}, 0, {0}, {0}, 1, {1}, {0}},
    /* batch dims */
    {{3, {2, 3, 4}}, {3, {2, 4, 5}}, 1, {0}, {0}, 1, {2}, {1}},
    /* two contracting dims */
    {{3, {3, 4, 5}}, {3, {4, 5, 6}}, 0, {0}, {0}, 2, {1, 2}, {0, 1}},
    /* two contracting dims paired in the other order */
    {{3, {3, 4, 5}}, {3, {5, 4, 6}}, 0, {0}, {0}, 2, {1, 2}, {1, 0}},
    /* non-adjacent contracting dims, free dims on both sides */
    {{3, {4, 3, 5}}, {3, {5, 2, 4}}, 0, {0}, {0}, 1, {0}, {2}},
    /* batch dim in the middle of both operands */
    {{3, {3, 2, 4}}, {3, {4, 2, 5}}, 1, {1}, {1}, 1, {2}, {0}},
    /* no contracting dims: outer products */
    {{1, {3}}, {1, {4}}, 0, {0}, {0}, 0, {0}, {0}},
    {{2, {2, 3}}, {1, {4}}, 0, {0}, {0}, 0, {0}, {0}},
    /* batch only */
    {{2, {2, 3}}, {2, {2, 4}}, 1, {0}, {0}, 0, {0}, {0}},
    /* two batch dims, given in swapped order on b */
    {{4, {2, 3, 4, 5}}, {4, {3, 2, 5, 6}}, 2, {0, 1}, {1, 0}, 1, {3}, {2}},
    /* scalars */
    {{0, {0}}, {0, {0}}, 0, {0}, {0}, 0, {0}, {0}},
    /* vector . vector -> scalar */
    {{1, {9}}, {1, {9}}, 0, {0}, {0}, 1, {0}, {0}},
    /* empty contraction and empty free dim */
    {{2, {2, 0}}, {2, {0, 3}}, 0, {0}, {0}, 1, {1}, {0}},
    {{2, {0, 4}}, {2, {4, 3}}, 0, {0}, {0}, 1, {1}, {0}},
    /* contraction over a's first dim (a transposed) */
    {{2, {17, 9}}, {2, {17, 33}}, 0, {0}, {0}, 1, {0}, {0}},
};

static bool check_dot(jit_dtype dt, const dot_case *c, int which) {
  ot_array in[2] = {data(dt, &c->a, 500 + which), data(dt, &c->b, 600 + which)}, out;
  OT_ASSERT_OK(ot_run("dot_general", dot_fn, (void *)c, 2, in, 1, &out));
  double *mag;
  ot_array want = ref_dot(c, &in[0], &in[1], &mag);
  char what[96];
  snprintf(what, sizeof what, "dot_general %s case %d", jit_dtype_name(dt), which);
  bool ok = ot_expect_tol(what, &out, &want, mag, ot_tol_of(dt));
  free(mag);
  ot_free(&in[0]);
  ot_free(&in[1]);
  return ok;
}

static void test_dot_general(void **state) {
  bool ok = true;
  for (int c = 0; c < N_OF(dot_cases); c++) ok &= check_dot(JIT_F32, &dot_cases[c], c);
  static const jit_dtype dts[] = {JIT_F64, JIT_BF16, JIT_I32};
  static const int some[] = {1, 2, 4, 6};
  for (int d = 0; d < N_OF(dts); d++)
    for (int c = 0; c < N_OF(some); c++) ok &= check_dot(dts[d], &dot_cases[some[c]], some[c]);
  assert_true(ok);
}

/* A matmul whose operands come out of other ops, and a reduction of its result: the shape of an
   MLP layer with a mean-squared loss. */
static void mlp_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  static const int all[2] = {0, 1};
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  jit_val d = jit_sub(t, h, a[3]);
  r[0] = h;
  r[1] = jit_div(t, jit_reduce_sum(t, jit_mul(t, d, d), 2, all), jit_scalar(t, 8 * 6));
}

static void test_mlp_layer(void **state) {
  shape sx = {2, {8, 5}}, sw = {2, {5, 6}}, sb = {1, {6}}, sy = {2, {8, 6}};
  ot_array in[4] = {data(JIT_F32, &sx, 1), data(JIT_F32, &sw, 2), data(JIT_F32, &sb, 3),
                    data(JIT_F32, &sy, 4)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("mlp", mlp_fn, NULL, 4, in, 2, out));
  double *mag;
  ot_array h = ref_matmul(&in[0], &in[1], &mag);
  double loss = 0, lmag = 0;
  for (int64_t i = 0; i < h.n; i++) {
    mag[i] += fabs(in[2].v[i % 6]);
    h.v[i] += in[2].v[i % 6];
    if (h.v[i] < 0) h.v[i] = 0;
    double d = h.v[i] - in[3].v[i];
    loss += d * d;
    lmag += (fabs(h.v[i]) + fabs(in[3].v[i])) * (fabs(h.v[i]) + fabs(in[3].v[i]));
  }
  ot_array want_loss = ot_zeros(JIT_F32, 0, NULL);
  want_loss.v[0] = loss / 48;
  lmag /= 48;
  bool ok = ot_expect_tol("mlp h", &out[0], &h, mag, ot_tol_of(JIT_F32));
  ok &= ot_expect_tol("mlp loss", &out[1], &want_loss, &lmag, (ot_tol){4e-6, 1e-6});
  free(mag);
  for (int i = 0; i < 4; i++) ot_free(&in[i]);
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_f32),
      cmocka_unit_test(test_reduce_other_dtypes),
      cmocka_unit_test(test_reduce_special_values),
      cmocka_unit_test(test_reduce_axes_order_and_sign),
      cmocka_unit_test(test_matmul_f32),
      cmocka_unit_test(test_matmul_other_dtypes),
      cmocka_unit_test(test_dot_general),
      cmocka_unit_test(test_mlp_layer),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
