/* test_ops_shape.c: end-to-end tests of the data-movement ops through the public API (reshape,
 * transpose, broadcast_to, slice, concat), each against index arithmetic written out in C. */
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

static const jit_dtype move_dts[] = {JIT_F32, JIT_I64, JIT_F16, JIT_U8, JIT_BOOL, JIT_F64};

typedef struct shape {
  int rank;
  int64_t d[JIT_MAX_RANK];
} shape;

/* Data movement must be bit exact. */
static const ot_tol exact = {0, 0};

/* Distinct values per element where the dtype allows, so that a misplaced element shows. */
static ot_array data(jit_dtype dt, const shape *s, uint64_t seed) {
  if (dt == JIT_BOOL || dt == JIT_U8 || dt == JIT_I8)
    return ot_random(dt, s->rank, s->d, seed, 0, 100);
  return ot_random(dt, s->rank, s->d, seed, -1000, 1000);
}

/* ---- references ---------------------------------------------------------------------------------- */
static ot_array ref_transpose(const ot_array *x, const int *perm) {
  int64_t sh[JIT_MAX_RANK], oi[JIT_MAX_RANK], xi[JIT_MAX_RANK];
  for (int i = 0; i < x->rank; i++) sh[i] = x->shape[perm[i]];
  ot_array y = ot_zeros(x->dt, x->rank, sh);
  for (int64_t i = 0; i < y.n; i++) {
    ot_unravel(i, y.rank, sh, oi);
    for (int k = 0; k < x->rank; k++) xi[perm[k]] = oi[k]; /* result dim k is x's dim perm[k] */
    y.v[i] = x->v[ot_ravel(x->rank, x->shape, xi)];
  }
  return y;
}

static ot_array ref_broadcast_to(const ot_array *x, int rank, const int64_t *shape) {
  int64_t oi[JIT_MAX_RANK];
  ot_array y = ot_zeros(x->dt, rank, shape);
  for (int64_t i = 0; i < y.n; i++) {
    ot_unravel(i, rank, shape, oi);
    y.v[i] = x->v[ot_bcast_src(x, rank, oi)];
  }
  return y;
}

static ot_array ref_slice(const ot_array *x, const int64_t *start, const int64_t *limit,
                          const int64_t *stride) {
  int64_t sh[JIT_MAX_RANK], oi[JIT_MAX_RANK], xi[JIT_MAX_RANK];
  for (int k = 0; k < x->rank; k++) {
    int64_t st = stride ? stride[k] : 1;
    sh[k] = limit[k] > start[k] ? (limit[k] - start[k] + st - 1) / st : 0;
  }
  ot_array y = ot_zeros(x->dt, x->rank, sh);
  for (int64_t i = 0; i < y.n; i++) {
    ot_unravel(i, y.rank, sh, oi);
    for (int k = 0; k < x->rank; k++) xi[k] = start[k] + oi[k] * (stride ? stride[k] : 1);
    y.v[i] = x->v[ot_ravel(x->rank, x->shape, xi)];
  }
  return y;
}

static ot_array ref_concat(int n, const ot_array *xs, int axis) {
  int64_t sh[JIT_MAX_RANK], oi[JIT_MAX_RANK];
  memcpy(sh, xs[0].shape, sizeof sh);
  sh[axis] = 0;
  for (int j = 0; j < n; j++) sh[axis] += xs[j].shape[axis];
  ot_array y = ot_zeros(xs[0].dt, xs[0].rank, sh);
  for (int64_t i = 0; i < y.n; i++) {
    ot_unravel(i, y.rank, sh, oi);
    int j = 0;
    while (oi[axis] >= xs[j].shape[axis]) oi[axis] -= xs[j++].shape[axis];
    y.v[i] = xs[j].v[ot_ravel(xs[j].rank, xs[j].shape, oi)];
  }
  return y;
}

static ot_array ref_reshape(const ot_array *x, int rank, const int64_t *shape) {
  ot_array y = ot_zeros(x->dt, rank, shape);
  assert_int_equal(y.n, x->n);
  for (int64_t i = 0; i < y.n; i++) y.v[i] = x->v[i]; /* row-major order is kept */
  return y;
}

/* ---- reshape ------------------------------------------------------------------------------------- */
typedef struct reshape_case {
  shape from;
  int n;
  shape to[6];
} reshape_case;

static void reshape_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const reshape_case *c = user;
  for (int k = 0; k < c->n; k++) r[k] = jit_reshape(t, a[0], c->to[k].rank, c->to[k].d);
}

static void test_reshape(void **state) {
  static const reshape_case cases[] = {
      {{3, {2, 3, 4}}, 6, {{1, {24}}, {2, {4, 6}}, {2, {2, 12}}, {3, {1, 24, 1}}, {3, {2, 3, 4}},
                          {5, {2, 1, 3, 1, 4}}}},
      {{0, {0}}, 3, {{1, {1}}, {3, {1, 1, 1}}, {0, {0}}}},
      {{1, {1}}, 2, {{0, {0}}, {2, {1, 1}}}},
      {{3, {2, 0, 3}}, 4, {{1, {0}}, {2, {3, 0}}, {3, {0, 7, 2}}, {2, {6, 0}}}},
      {{2, {5, 6}}, 3, {{2, {6, 5}}, {2, {30, 1}}, {8, {1, 1, 1, 1, 1, 5, 6, 1}}}},
      {{1, {0}}, 2, {{2, {0, 0}}, {1, {0}}}},
  };
  bool ok = true;
  for (int d = 0; d < N_OF(move_dts); d++) {
    for (int c = 0; c < N_OF(cases); c++) {
      const reshape_case *rc = &cases[c];
      ot_array in = data(move_dts[d], &rc->from, 10 + c), out[6];
      OT_ASSERT_OK(ot_run("reshape", reshape_fn, (void *)rc, 1, &in, rc->n, out));
      for (int k = 0; k < rc->n; k++) {
        ot_array want = ref_reshape(&in, rc->to[k].rank, rc->to[k].d);
        char what[96], s1[64], s2[64];
        snprintf(what, sizeof what, "reshape %s%s -> %s", jit_dtype_name(move_dts[d]),
                 ot_shape_str(rc->from.rank, rc->from.d, s1, sizeof s1),
                 ot_shape_str(rc->to[k].rank, rc->to[k].d, s2, sizeof s2));
        ok &= ot_expect_tol(what, &out[k], &want, NULL, exact);
      }
      ot_free(&in);
    }
  }
  assert_true(ok);
}

/* A -1 dim is inferred from the element count, as in NumPy (size-0 arrays included). */
static void test_reshape_infer(void **state) {
  static const struct {
    shape from, to, want;
  } cases[] = {
      {{3, {2, 3, 4}}, {1, {-1}}, {1, {24}}},
      {{3, {2, 3, 4}}, {2, {-1, 4}}, {2, {6, 4}}},
      {{3, {2, 3, 4}}, {3, {2, -1, 2}}, {3, {2, 6, 2}}},
      {{0, {0}}, {1, {-1}}, {1, {1}}},
      {{3, {2, 0, 3}}, {2, {-1, 3}}, {2, {0, 3}}},
      {{1, {1}}, {3, {1, -1, 1}}, {3, {1, 1, 1}}},
  };
  bool ok = true;
  for (int c = 0; c < N_OF(cases); c++) {
    reshape_case rc = {cases[c].from, 1, {cases[c].to}};
    ot_array in = data(JIT_F32, &rc.from, 60 + c), out;
    OT_ASSERT_OK(ot_run("reshape_infer", reshape_fn, &rc, 1, &in, 1, &out));
    ot_array want = ref_reshape(&in, cases[c].want.rank, cases[c].want.d);
    char what[64];
    snprintf(what, sizeof what, "reshape with -1, case %d", c);
    ok &= ot_expect_tol(what, &out, &want, NULL, exact);
    ot_free(&in);
  }
  assert_true(ok);
}

/* ---- transpose ----------------------------------------------------------------------------------- */
typedef struct transpose_case {
  shape from;
  int n;
  int perms[6][JIT_MAX_RANK];
} transpose_case;

static void transpose_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const transpose_case *c = user;
  for (int k = 0; k < c->n; k++) r[k] = jit_transpose(t, a[0], c->perms[k]);
}

static void normalize_perm(int rank, const int *perm, int *out) {
  for (int i = 0; i < rank; i++) out[i] = perm[i] < 0 ? perm[i] + rank : perm[i];
}

static void test_transpose(void **state) {
  static const transpose_case cases[] = {
      {{1, {5}}, 1, {{0}}},
      {{2, {3, 4}}, 2, {{1, 0}, {0, 1}}},
      {{3, {2, 3, 4}}, 6, {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}},
      {{4, {2, 3, 1, 4}}, 4, {{3, 1, 0, 2}, {0, 1, 2, 3}, {1, 0, 3, 2}, {3, 2, 1, 0}}},
      {{3, {0, 3, 2}}, 2, {{2, 0, 1}, {1, 2, 0}}},
      {{2, {1, 7}}, 1, {{1, 0}}},
      {{2, {33, 17}}, 1, {{1, 0}}},
      {{3, {2, 3, 4}}, 2, {{-1, 0, 1}, {0, -1, -2}}}, /* negative axes count from the end (NumPy) */
  };
  bool ok = true;
  for (int d = 0; d < N_OF(move_dts); d++) {
    for (int c = 0; c < N_OF(cases); c++) {
      const transpose_case *tc = &cases[c];
      ot_array in = data(move_dts[d], &tc->from, 20 + c), out[6];
      OT_ASSERT_OK(ot_run("transpose", transpose_fn, (void *)tc, 1, &in, tc->n, out));
      for (int k = 0; k < tc->n; k++) {
        int perm[JIT_MAX_RANK];
        normalize_perm(tc->from.rank, tc->perms[k], perm);
        ot_array want = ref_transpose(&in, perm);
        char what[96], s1[64];
        snprintf(what, sizeof what, "transpose %s%s perm #%d", jit_dtype_name(move_dts[d]),
                 ot_shape_str(tc->from.rank, tc->from.d, s1, sizeof s1), k);
        ok &= ot_expect_tol(what, &out[k], &want, NULL, exact);
      }
      ot_free(&in);
    }
  }
  assert_true(ok);
}

/* ---- broadcast_to ---------------------------------------------------------------------------------- */
typedef struct bcast_case {
  shape from, to;
} bcast_case;

static void bcast_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const bcast_case *c = user;
  r[0] = jit_broadcast_to(t, a[0], c->to.rank, c->to.d);
}

static void test_broadcast_to(void **state) {
  static const bcast_case cases[] = {
      {{0, {0}}, {2, {2, 3}}},      {{1, {3}}, {2, {2, 3}}},       {{2, {3, 1}}, {3, {2, 3, 4}}},
      {{1, {1}}, {1, {0}}},         {{2, {1, 1}}, {3, {3, 1, 5}}}, {{3, {2, 1, 3}}, {3, {2, 4, 3}}},
      {{1, {4}}, {1, {4}}},         {{0, {0}}, {0, {0}}},          {{1, {0}}, {2, {2, 0}}},
      {{0, {0}}, {1, {67}}},        {{2, {1, 5}}, {4, {2, 3, 4, 5}}},
  };
  bool ok = true;
  for (int d = 0; d < N_OF(move_dts); d++) {
    for (int c = 0; c < N_OF(cases); c++) {
      const bcast_case *bc = &cases[c];
      ot_array in = data(move_dts[d], &bc->from, 30 + c), out;
      OT_ASSERT_OK(ot_run("broadcast_to", bcast_fn, (void *)bc, 1, &in, 1, &out));
      ot_array want = ref_broadcast_to(&in, bc->to.rank, bc->to.d);
      char what[96], s1[64], s2[64];
      snprintf(what, sizeof what, "broadcast_to %s%s -> %s", jit_dtype_name(move_dts[d]),
               ot_shape_str(bc->from.rank, bc->from.d, s1, sizeof s1),
               ot_shape_str(bc->to.rank, bc->to.d, s2, sizeof s2));
      ok &= ot_expect_tol(what, &out, &want, NULL, exact);
      ot_free(&in);
    }
  }
  assert_true(ok);
}

/* ---- slice ------------------------------------------------------------------------------------------ */
typedef struct slice_case {
  shape from;
  int64_t start[JIT_MAX_RANK], limit[JIT_MAX_RANK], stride[JIT_MAX_RANK];
  bool unit; /* pass stride = NULL */
} slice_case;

static void slice_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const slice_case *c = user;
  r[0] = jit_slice(t, a[0], c->start, c->limit, c->unit ? NULL : c->stride);
}

static void test_slice(void **state) {
  static const slice_case cases[] = {
      {{2, {5, 6}}, {0, 0}, {5, 6}, {1, 1}, false},     /* full */
      {{2, {5, 6}}, {0, 0}, {5, 6}, {0}, true},         /* full, stride NULL */
      {{2, {5, 6}}, {1, 2}, {4, 5}, {1, 1}, false},     /* interior */
      {{2, {5, 6}}, {0, 1}, {5, 6}, {2, 3}, false},     /* strides */
      {{2, {5, 6}}, {2, 0}, {2, 6}, {1, 1}, false},     /* empty */
      {{2, {5, 6}}, {0, 5}, {5, 6}, {7, 1}, false},     /* stride past the end */
      {{2, {5, 6}}, {4, 0}, {5, 6}, {0}, true},         /* last row */
      {{1, {10}}, {1}, {10}, {3}, false},               /* 1, 4, 7 */
      {{1, {10}}, {1}, {9}, {4}, false},                /* 1, 5 */
      {{1, {10}}, {10}, {10}, {1}, false},              /* empty at the end */
      {{3, {3, 4, 5}}, {0, 1, 2}, {3, 4, 5}, {2, 2, 2}, false},
      {{3, {3, 4, 5}}, {1, 0, 0}, {2, 4, 5}, {1, 1, 1}, false},
      {{2, {0, 4}}, {0, 1}, {0, 3}, {1, 1}, false},     /* empty input */
      {{0, {0}}, {0}, {0}, {0}, false},                 /* rank 0: nothing to slice */
      {{4, {2, 3, 4, 5}}, {1, 0, 1, 0}, {2, 3, 4, 5}, {1, 2, 2, 4}, false},
      {{1, {67}}, {3}, {67}, {1}, false},
  };
  bool ok = true;
  for (int d = 0; d < N_OF(move_dts); d++) {
    for (int c = 0; c < N_OF(cases); c++) {
      const slice_case *sc = &cases[c];
      ot_array in = data(move_dts[d], &sc->from, 40 + c), out;
      OT_ASSERT_OK(ot_run("slice", slice_fn, (void *)sc, 1, &in, 1, &out));
      ot_array want = ref_slice(&in, sc->start, sc->limit, sc->unit ? NULL : sc->stride);
      char what[96], s1[64];
      snprintf(what, sizeof what, "slice %s%s case %d", jit_dtype_name(move_dts[d]),
               ot_shape_str(sc->from.rank, sc->from.d, s1, sizeof s1), c);
      ok &= ot_expect_tol(what, &out, &want, NULL, exact);
      ot_free(&in);
    }
  }
  assert_true(ok);
}

/* ---- concat ------------------------------------------------------------------------------------------ */
typedef struct concat_case {
  int n, axis;
  shape parts[4];
} concat_case;

static void concat_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const concat_case *c = user;
  r[0] = jit_concat(t, c->n, a, c->axis);
}

static void test_concat(void **state) {
  static const concat_case cases[] = {
      {2, 0, {{2, {2, 3}}, {2, {4, 3}}}},
      {4, 1, {{2, {2, 3}}, {2, {2, 1}}, {2, {2, 0}}, {2, {2, 5}}}},
      {1, 1, {{2, {3, 4}}}},
      {1, 0, {{1, {0}}}},
      {3, 0, {{1, {3}}, {1, {0}}, {1, {4}}}},
      {3, 2, {{3, {2, 3, 1}}, {3, {2, 3, 4}}, {3, {2, 3, 2}}}},
      {3, 1, {{3, {2, 1, 4}}, {3, {2, 2, 4}}, {3, {2, 3, 4}}}},
      {3, 0, {{3, {1, 2, 2}}, {3, {0, 2, 2}}, {3, {2, 2, 2}}}},
      {2, 0, {{2, {0, 2}}, {2, {0, 2}}}},
      {2, 1, {{2, {0, 2}}, {2, {0, 3}}}},
      {4, 0, {{1, {1}}, {1, {1}}, {1, {1}}, {1, {1}}}},
      {2, 3, {{4, {2, 1, 2, 3}}, {4, {2, 1, 2, 5}}}},
      {2, -1, {{2, {2, 3}}, {2, {2, 2}}}}, /* the last axis, NumPy style */
  };
  bool ok = true;
  for (int d = 0; d < N_OF(move_dts); d++) {
    for (int c = 0; c < N_OF(cases); c++) {
      const concat_case *cc = &cases[c];
      ot_array in[4];
      for (int j = 0; j < cc->n; j++) in[j] = data(move_dts[d], &cc->parts[j], 50 + 4 * c + j);
      ot_array out;
      OT_ASSERT_OK(ot_run("concat", concat_fn, (void *)cc, cc->n, in, 1, &out));
      ot_array want = ref_concat(cc->n, in, cc->axis < 0 ? cc->axis + cc->parts[0].rank : cc->axis);
      char what[96];
      snprintf(what, sizeof what, "concat %s case %d (axis %d, %d operands)",
               jit_dtype_name(move_dts[d]), c, cc->axis, cc->n);
      ok &= ot_expect_tol(what, &out, &want, NULL, exact);
      for (int j = 0; j < cc->n; j++) ot_free(&in[j]);
    }
  }
  assert_true(ok);
}

/* ---- chains: movement ops feeding each other and elementwise ops --------------------------------- */
static void chain_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  static const int perm[3] = {2, 0, 1};
  static const int64_t shp[2] = {4, 6}, start[2] = {0, 1}, limit[2] = {4, 6}, stride[2] = {2, 2};
  static const int64_t big[3] = {2, 2, 3};
  jit_val x = jit_transpose(t, a[0], perm);             /* [4,2,3] */
  x = jit_reshape(t, x, 2, shp);                        /* [4,6] */
  x = jit_slice(t, x, start, limit, stride);            /* [2,3] */
  jit_val parts[2] = {x, jit_neg(t, x)};
  jit_val y = jit_concat(t, 2, parts, 0);               /* [4,3] */
  r[0] = y;
  r[1] = jit_add(t, jit_broadcast_to(t, x, 3, big), a[1]); /* [2,2,3] + [3] */
}

static void test_chain(void **state) {
  shape sx = {3, {2, 3, 4}}, sb = {1, {3}};
  ot_array in[2] = {data(JIT_F32, &sx, 1), data(JIT_F32, &sb, 2)}, out[2];
  OT_ASSERT_OK(ot_run("chain", chain_fn, NULL, 2, in, 2, out));
  static const int perm[3] = {2, 0, 1};
  static const int64_t shp[2] = {4, 6}, start[2] = {0, 1}, limit[2] = {4, 6}, stride[2] = {2, 2};
  static const int64_t big[3] = {2, 2, 3};
  ot_array t1 = ref_transpose(&in[0], perm), t2 = ref_reshape(&t1, 2, shp);
  ot_array x = ref_slice(&t2, start, limit, stride);
  ot_array parts[2] = {x, ot_zeros(JIT_F32, 2, x.shape)};
  for (int64_t i = 0; i < x.n; i++) parts[1].v[i] = -x.v[i];
  ot_array want0 = ref_concat(2, parts, 0), want1 = ref_broadcast_to(&x, 3, big);
  for (int64_t i = 0; i < want1.n; i++) want1.v[i] += in[1].v[i % 3];
  bool ok = ot_expect_tol("chain concat", &out[0], &want0, NULL, exact);
  ok &= ot_expect("chain broadcast+add", &out[1], &want1);
  ot_free(&t1);
  ot_free(&t2);
  ot_free(&x);
  ot_free(&parts[1]);
  ot_free(&in[0]);
  ot_free(&in[1]);
  assert_true(ok);
}

/* jit_val_rank / jit_val_shape / jit_val_dtype while tracing report what the ops produce. */
static void query_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int *seen = user;
  static const int perm[3] = {1, 2, 0};
  jit_val x = jit_transpose(t, a[0], perm);
  seen[0] = jit_val_rank(t, x);
  const int64_t *s = jit_val_shape(t, x);
  for (int i = 0; i < 3 && s; i++) seen[1 + i] = (int)s[i];
  seen[4] = (int)jit_val_dtype(t, x);
  seen[5] = jit_val_rank(t, jit_scalar(t, 1));
  seen[6] = jit_val_rank(t, (jit_val){0});
  seen[7] = jit_val_shape(t, (jit_val){0}) == NULL;
  r[0] = x;
}

static void test_val_queries(void **state) {
  shape sx = {3, {2, 3, 4}};
  ot_array in = data(JIT_I8, &sx, 3), out;
  int seen[8] = {0};
  OT_ASSERT_OK(ot_run("query", query_fn, seen, 1, &in, 1, &out));
  assert_int_equal(seen[0], 3);
  assert_int_equal(seen[1], 3);
  assert_int_equal(seen[2], 4);
  assert_int_equal(seen[3], 2);
  assert_int_equal(seen[4], JIT_I8);
  assert_int_equal(seen[5], 0);
  assert_int_equal(seen[6], -1);
  assert_int_equal(seen[7], 1);
  ot_free(&in);
  ot_free(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape),   cmocka_unit_test(test_reshape_infer),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_broadcast_to), cmocka_unit_test(test_slice),
      cmocka_unit_test(test_concat),    cmocka_unit_test(test_chain),
      cmocka_unit_test(test_val_queries),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
