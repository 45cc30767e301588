/* test_ops_sort_cum.c: reduce_prod/and/or, argmax/argmin and the cumulative ops against
 * hand-written C loops (empty dims, NaN, +-0, ties, integer wrapping), interpreted (opt_level 0)
 * and compiled, vmapped (against a loop over examples), sharded over 2 devices (against the
 * unsharded result), and their VJPs (reduce_prod at zeros, cumsum = reverse cumsum, cumprod and
 * cummax by finite differences). */
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

#define THIS_FILE "tests/test_ops_sort_cum.c"

typedef enum kind {
  K_PROD, K_AND, K_OR, K_ARGMAX, K_ARGMIN, K_CUMSUM, K_CUMPROD, K_CUMMAX, K_CUMMIN,
  K_SORT, K_TOPK /* top_k's values, k = 2 (axis must be the last) */
} kind;

typedef struct opcase {
  kind k;
  int axis;       /* argmax & co and cumulative ops; reductions reduce this one axis */
  int reverse;
  jit_sharding *sharding; /* non-NULL: the operand constrained to it first */
} opcase;

static jit_val apply(jit_trace *t, const opcase *c, jit_val x) {
  int axes[1] = {c->axis};
  switch (c->k) {
  case K_PROD: return jit_reduce_prod(t, x, 1, axes);
  case K_AND: return jit_reduce_and(t, x, 1, axes);
  case K_OR: return jit_reduce_or(t, x, 1, axes);
  case K_ARGMAX: return jit_argmax(t, x, c->axis, JIT_I32);
  case K_ARGMIN: return jit_argmin(t, x, c->axis, JIT_I32);
  case K_CUMSUM: return jit_cumsum(t, x, c->axis, c->reverse);
  case K_CUMPROD: return jit_cumprod(t, x, c->axis, c->reverse);
  case K_CUMMAX: return jit_cummax(t, x, c->axis, c->reverse);
  case K_CUMMIN: return jit_cummin(t, x, c->axis, c->reverse);
  case K_SORT: {
    jit_val y;
    jit_sort(t, 1, &x, c->axis, 1, &y);
    return y;
  }
  case K_TOPK: {
    jit_val v, i;
    jit_top_k(t, x, 2, &v, &i);
    return v;
  }
  }
  return (jit_val){0};
}

static void trace_op(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  const opcase *c = user;
  jit_val x = args[0];
  if (c->sharding) x = jit_with_sharding_constraint(t, x, c->sharding);
  res[0] = apply(t, c, x);
}

/* ---- references ------------------------------------------------------------------------------- */

/* lax.max / lax.min: NaN wins, +0 is above -0 */
static double lax_max(double a, double b, bool max) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return (signbit(a) != 0) == max ? b : a;
  return (a > b) == max ? a : b;
}

/* v wrapped to an int dtype's width (products that leave double's 53 bits included) */
static double wrapped(jit_dtype dt, uint64_t v) {
  unsigned bits = (unsigned)jit_dtype_size(dt) * 8;
  if (bits < 64) v &= (UINT64_C(1) << bits) - 1;
  bool sign = dt == JIT_I8 || dt == JIT_I32 || dt == JIT_I64;
  if (sign && bits < 64 && (v >> (bits - 1))) return (double)(int64_t)(v | ~((UINT64_C(1) << bits) - 1));
  return sign ? (double)(int64_t)v : (double)v;
}

static bool nan_or_gt(double a, double b) { return isnan(a) ? !isnan(b) : a > b; }

/* lax's total order: NaN last, -0 before +0. */
static int total_cmp(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  if (a != b) return a < b ? -1 : 1;
  return (signbit(b) != 0) - (signbit(a) != 0);
}

/* Row-wise stable insertion sort (descending: of the reversed order), values reordered. */
static ot_array sort_ref(const ot_array *x, int ax, bool descending, int64_t keep) {
  int64_t outer = 1, n = x->shape[ax], inner = 1;
  for (int d = 0; d < ax; d++) outer *= x->shape[d];
  for (int d = ax + 1; d < x->rank; d++) inner *= x->shape[d];
  int64_t s[JIT_MAX_RANK];
  memcpy(s, x->shape, sizeof s);
  s[ax] = keep;
  ot_array r = ot_zeros(x->dt, x->rank, s);
  double *row = malloc((size_t)(n ? n : 1) * sizeof *row);
  assert_non_null(row);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t j = 0; j < n; j++) {
        double v = x->v[(o * n + j) * inner + i];
        int64_t p = j;
        while (p > 0 && (descending ? total_cmp(row[p - 1], v) < 0 : total_cmp(row[p - 1], v) > 0)) {
          row[p] = row[p - 1];
          p--;
        }
        row[p] = v;
      }
      for (int64_t j = 0; j < keep; j++) r.v[(o * keep + j) * inner + i] = row[j];
    }
  free(row);
  return r;
}

/* The reference result of c on x (x's dtype rules: ints wrap, floats rounded per step). */
static ot_array reference(const opcase *c, const ot_array *x) {
  if (c->k == K_SORT) return sort_ref(x, c->axis, false, x->shape[c->axis]);
  if (c->k == K_TOPK) return sort_ref(x, x->rank - 1, true, 2);
  int ax = c->axis;
  int64_t outer = 1, n = x->shape[ax], inner = 1;
  for (int d = 0; d < ax; d++) outer *= x->shape[d];
  for (int d = ax + 1; d < x->rank; d++) inner *= x->shape[d];
  bool cum = c->k >= K_CUMSUM;
  ot_array r;
  if (cum) {
    r = ot_zeros(x->dt, x->rank, x->shape);
  } else {
    int64_t s[JIT_MAX_RANK];
    int rk = 0;
    for (int d = 0; d < x->rank; d++)
      if (d != ax) s[rk++] = x->shape[d];
    r = ot_zeros(c->k == K_ARGMAX || c->k == K_ARGMIN ? JIT_I32 : x->dt, rk, s);
  }
  bool fl = ot_is_float(x->dt);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double acc = c->k == K_PROD || c->k == K_AND ? 1 : 0;
      int64_t best = 0;
      uint64_t iacc = 1;
      for (int64_t j0 = 0; j0 < n; j0++) {
        int64_t j = c->reverse ? n - 1 - j0 : j0;
        double v = x->v[(o * n + j) * inner + i];
        double b = x->v[(o * n + best) * inner + i];
        switch (c->k) {
        case K_PROD:
          if (fl) acc = ot_round(x->dt, acc * v);
          else acc = wrapped(x->dt, iacc *= (uint64_t)(int64_t)v);
          break;
        case K_AND: acc = acc && v != 0; break;
        case K_OR: acc = acc || v != 0; break;
        case K_ARGMAX: if (!isnan(b) && nan_or_gt(v, b)) best = j; break;
        case K_ARGMIN: if (!isnan(b) && (isnan(v) || v < b)) best = j; break;
        case K_CUMSUM: acc = ot_round(x->dt, j0 ? acc + v : v); break;
        case K_CUMPROD:
          if (fl) acc = ot_round(x->dt, j0 ? acc * v : v);
          else acc = wrapped(x->dt, iacc *= (uint64_t)(int64_t)v);
          break;
        case K_CUMMAX: acc = j0 ? lax_max(acc, v, true) : v; break;
        case K_CUMMIN: acc = j0 ? lax_max(acc, v, false) : v; break;
        default: break;
        }
        if (cum) r.v[(o * n + j) * inner + i] = acc;
      }
      if (!cum) r.v[o * inner + i] = c->k == K_ARGMAX || c->k == K_ARGMIN ? (double)best : acc;
    }
  return r;
}

/* ---- running on a context of our own (opt_level 0 = the interpreter) ------------------------- */

static ot_array run_on(jit_ctx *ctx, jit_trace_fn fn, void *user, const ot_array *x) {
  jit_fn_opts o = {.name = "op", .n_args = 1, .n_results = 1};
  jit_fn *f = NULL;
  OT_ASSERT_OK(jit_compile(ctx, fn, user, &o, &f));
  size_t es = jit_dtype_size(x->dt);
  unsigned char *buf = malloc((size_t)(x->n ? x->n : 1) * es);
  assert_non_null(buf);
  /* through a scratch array of the shared context: ot_upload's conversions, then raw bytes */
  jit_array *tmp = ot_upload(x);
  OT_ASSERT_OK(jit_array_to_host(tmp, buf, (size_t)x->n * es));
  jit_array_free(tmp);
  jit_array *in = NULL, *out = NULL;
  OT_ASSERT_OK(jit_array_from_host(ctx, x->dt, x->rank, x->shape, buf, &in));
  free(buf);
  OT_ASSERT_OK(jit_call(f, &in, &out));
  size_t nb = jit_array_nbytes(out);
  unsigned char *ob = malloc(nb ? nb : 1);
  assert_non_null(ob);
  OT_ASSERT_OK(jit_array_to_host(out, ob, nb));
  jit_array *back = NULL;
  OT_ASSERT_OK(jit_array_from_host(ot_ctx(), jit_array_dtype(out), jit_array_rank(out),
                                   jit_array_shape(out), ob, &back));
  ot_array r = ot_download(back);
  free(ob);
  jit_array_free(back);
  jit_array_free(in);
  jit_array_free(out);
  jit_fn_free(f);
  return r;
}

/* c on x interpreted and compiled, each against the reference. */
static void check(opcase c, const ot_array *x, const char *what) {
  ot_array want = reference(&c, x);
  ot_tol tol = ot_tol_of(want.dt);
  if (c.k == K_CUMSUM && ot_is_float(x->dt)) tol = (ot_tol){1e-5, 1e-5}; /* tree order */
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = ot_ctx_with(1, 2, opt);
    ot_array got = run_on(ctx, trace_op, &c, x);
    char msg[160];
    snprintf(msg, sizeof msg, "%s (opt_level %d)", what, opt);
    assert_true(ot_close(msg, &got, &want, NULL, tol));
    ot_free(&got);
    jit_ctx_destroy(ctx);
  }
  ot_free(&want);
}

static const double SPECIAL[] = {1.5, -0.0, 0.0, NAN, -2, 3, 3, -INFINITY, 0.25, NAN, 7, -7};

static void test_reductions(void **state) {
  (void)state;
  int64_t s[2] = {3, 4};
  ot_array f = ot_values(JIT_F32, 2, s, SPECIAL);
  ot_array r = ot_random(JIT_F32, 2, (int64_t[]){5, 7}, 1, -2, 2);
  ot_array i = ot_random(JIT_I32, 2, (int64_t[]){4, 9}, 2, -100000, 100000); /* products wrap */
  ot_array u8 = ot_random(JIT_U8, 2, (int64_t[]){3, 5}, 3, 0, 255);
  ot_array b = ot_random(JIT_BOOL, 2, (int64_t[]){6, 3}, 4, 0, 1);
  ot_array e = ot_zeros(JIT_F32, 2, (int64_t[]){3, 0});
  ot_array eb = ot_zeros(JIT_BOOL, 2, (int64_t[]){0, 2});
  for (int ax = 0; ax < 2; ax++) {
    check((opcase){K_PROD, ax, 0, NULL}, &f, "prod special");
    check((opcase){K_PROD, ax, 0, NULL}, &r, "prod f32");
    check((opcase){K_PROD, ax, 0, NULL}, &i, "prod i32 wraps");
    check((opcase){K_PROD, ax, 0, NULL}, &u8, "prod u8 wraps");
    check((opcase){K_PROD, ax, 0, NULL}, &e, "prod empty");
    check((opcase){K_AND, ax, 0, NULL}, &b, "and");
    check((opcase){K_OR, ax, 0, NULL}, &b, "or");
    check((opcase){K_AND, ax, 0, NULL}, &eb, "and empty");
    check((opcase){K_OR, ax, 0, NULL}, &eb, "or empty");
    check((opcase){K_ARGMAX, ax, 0, NULL}, &f, "argmax special");
    check((opcase){K_ARGMIN, ax, 0, NULL}, &f, "argmin special");
    check((opcase){K_ARGMAX, ax, 0, NULL}, &i, "argmax i32");
    check((opcase){K_ARGMIN, ax, 0, NULL}, &u8, "argmin u8");
    check((opcase){K_ARGMAX, ax, 0, NULL}, &b, "argmax bool");
  }
  /* ties: the first index; -0 and +0 tie */
  ot_array ties = ot_values(JIT_F32, 1, (int64_t[]){6}, (double[]){-0.0, 0.0, -1, 0.0, -1, -0.0});
  check((opcase){K_ARGMAX, 0, 0, NULL}, &ties, "argmax ties");
  check((opcase){K_ARGMIN, 0, 0, NULL}, &ties, "argmin ties");
  ot_free(&ties);
  ot_free(&f);
  ot_free(&r);
  ot_free(&i);
  ot_free(&u8);
  ot_free(&b);
  ot_free(&e);
  ot_free(&eb);
}

static void test_cumulative(void **state) {
  (void)state;
  int64_t s[2] = {3, 4};
  ot_array f = ot_values(JIT_F32, 2, s, SPECIAL);
  ot_array r = ot_random(JIT_F32, 2, (int64_t[]){5, 13}, 5, -1, 1);
  ot_array p = ot_random(JIT_F64, 2, (int64_t[]){2, 37}, 6, 0.5, 1.5);
  ot_array i = ot_random(JIT_I32, 2, (int64_t[]){7, 11}, 7, -2000000000, 2000000000); /* wraps */
  ot_array b = ot_random(JIT_BOOL, 2, (int64_t[]){5, 6}, 8, 0, 1);
  ot_array e = ot_zeros(JIT_F32, 2, (int64_t[]){0, 3});
  ot_array one = ot_random(JIT_F32, 2, (int64_t[]){1, 1}, 9, -1, 1);
  for (int rev = 0; rev < 2; rev++)
    for (int ax = 0; ax < 2; ax++) {
      for (kind k = K_CUMSUM; k <= K_CUMMIN; k++) {
        opcase c = {k, ax, rev, NULL};
        check(c, &r, "cum f32");
        check(c, &i, "cum i32 wraps");
        check(c, &e, "cum empty");
        check(c, &one, "cum 1x1");
        if (k != K_CUMSUM) check(c, &p, "cum f64"); /* cumsum's tree order: checked below */
        if (k >= K_CUMMAX) {
          check(c, &f, "cum special");
          check(c, &b, "cum bool");
        }
      }
    }
  /* a long row: 1000 steps fold into 10 */
  ot_array l = ot_random(JIT_F32, 1, (int64_t[]){1000}, 10, 0, 1);
  check((opcase){K_CUMSUM, 0, 0, NULL}, &l, "cumsum long");
  check((opcase){K_CUMMAX, 0, 1, NULL}, &l, "cummax long reverse");
  ot_free(&l);
  /* blocks of blocks (5000 = 157 blocks of 32, padded), either direction, any axis */
  ot_array l2 = ot_random(JIT_F64, 2, (int64_t[]){3, 5000}, 20, 0.999, 1.001);
  ot_array l3 = ot_random(JIT_I32, 2, (int64_t[]){4133, 2}, 21, -2000000000, 2000000000);
  for (int rev = 0; rev < 2; rev++) {
    check((opcase){K_CUMPROD, 1, rev, NULL}, &l2, "cumprod blocks");
    check((opcase){K_CUMMIN, 1, rev, NULL}, &l2, "cummin blocks");
    check((opcase){K_CUMSUM, 0, rev, NULL}, &l3, "cumsum blocks i32");
    check((opcase){K_CUMMAX, 0, rev, NULL}, &l3, "cummax blocks i32");
  }
  ot_free(&l2);
  ot_free(&l3);
  ot_free(&f);
  ot_free(&r);
  ot_free(&p);
  ot_free(&i);
  ot_free(&b);
  ot_free(&e);
  ot_free(&one);
}

/* ---- sorting ------------------------------------------------------------------------------------ */

static void test_sort(void **state) {
  (void)state;
  int64_t s[2] = {3, 4};
  ot_array f = ot_values(JIT_F32, 2, s, SPECIAL);
  ot_array r = ot_random(JIT_F32, 2, (int64_t[]){6, 17}, 16, -1, 1);
  ot_array i = ot_random(JIT_I32, 2, (int64_t[]){5, 9}, 17, -3, 3); /* many ties */
  ot_array u = ot_random(JIT_U8, 2, (int64_t[]){4, 6}, 18, 0, 255);
  ot_array b = ot_random(JIT_BOOL, 2, (int64_t[]){4, 5}, 19, 0, 1);
  ot_array e = ot_zeros(JIT_F32, 2, (int64_t[]){0, 3});
  for (int ax = 0; ax < 2; ax++) {
    check((opcase){K_SORT, ax, 0, NULL}, &f, "sort special");
    check((opcase){K_SORT, ax, 0, NULL}, &r, "sort f32");
    check((opcase){K_SORT, ax, 0, NULL}, &i, "sort i32");
    check((opcase){K_SORT, ax, 0, NULL}, &u, "sort u8");
    check((opcase){K_SORT, ax, 0, NULL}, &b, "sort bool");
    check((opcase){K_SORT, ax, 0, NULL}, &e, "sort empty");
  }
  check((opcase){K_TOPK, 1, 0, NULL}, &f, "top_k special");
  check((opcase){K_TOPK, 1, 0, NULL}, &r, "top_k f32");
  check((opcase){K_TOPK, 1, 0, NULL}, &i, "top_k i32");
  ot_free(&f);
  ot_free(&r);
  ot_free(&i);
  ot_free(&u);
  ot_free(&b);
  ot_free(&e);
}

/* sort by (a, b) carrying c; top_k's indices */
static void multi_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  (void)user;
  jit_sort(t, 3, args, 1, 2, res);
  jit_val v;
  jit_top_k(t, args[0], 3, &v, &res[3]);
}

static void test_sort_multi(void **state) {
  (void)state;
  int64_t s[2] = {2, 6};
  ot_array in[3] = {
      ot_values(JIT_I32, 2, s, (double[]){2, 1, 2, 1, 2, 0, 5, 5, 5, 5, 5, 5}),
      ot_values(JIT_F32, 2, s, (double[]){0.5, 1, 0.5, -1, NAN, 3, 1, -0.0, 0.0, 1, -0.0, -2}),
      ot_values(JIT_F64, 2, s, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
  };
  /* row 0 keys (2,.5)0 (1,1)1 (2,.5)2 (1,-1)3 (2,nan)4 (0,3)5 -> 5 3 1 0 2 4;
     row 1 keys (5,1)6 (5,-0)7 (5,0)8 (5,1)9 (5,-0)10 (5,-2)11 -> 11 7 10 8 6 9 */
  const double want_c[12] = {5, 3, 1, 0, 2, 4, 11, 7, 10, 8, 6, 9};
  const double want_i[6] = {0, 2, 4, 0, 1, 2}; /* top 3 of row 0: 2 2 2 at 0 2 4; row 1 ties */
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = ot_ctx_with(1, 2, opt);
    jit_fn_opts o = {.name = "multi", .n_args = 3, .n_results = 4};
    jit_fn *f = NULL;
    OT_ASSERT_OK(jit_compile(ctx, multi_fn, NULL, &o, &f));
    jit_array *a[3], *r[4];
    for (int k = 0; k < 3; k++) {
      jit_array *tmp = ot_upload(&in[k]);
      unsigned char buf[96];
      OT_ASSERT_OK(jit_array_to_host(tmp, buf, jit_array_nbytes(tmp)));
      OT_ASSERT_OK(jit_array_from_host(ctx, in[k].dt, 2, s, buf, &a[k]));
      jit_array_free(tmp);
    }
    OT_ASSERT_OK(jit_call(f, a, r));
    double c[12];
    int32_t idx[6];
    OT_ASSERT_OK(jit_array_to_host(r[2], c, sizeof c));
    OT_ASSERT_OK(jit_array_to_host(r[3], idx, sizeof idx));
    for (int k = 0; k < 12; k++) assert_true(c[k] == want_c[k]);
    for (int k = 0; k < 6; k++) assert_int_equal(idx[k], (int)want_i[k]);
    for (int k = 0; k < 3; k++) jit_array_free(a[k]);
    for (int k = 0; k < 4; k++) jit_array_free(r[k]);
    jit_fn_free(f);
    jit_ctx_destroy(ctx);
  }
  for (int k = 0; k < 3; k++) ot_free(&in[k]);
}

/* ---- vmap against a loop ------------------------------------------------------------------------ */

typedef struct vcase {
  opcase c;
  int in_axis;
} vcase;

static void inner_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  res[0] = apply(t, user, args[0]);
}

static void vmapped(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  vcase *v = user;
  int in_axes[1] = {v->in_axis}, out_axes[1] = {0};
  jit_vmap(t, inner_fn, &v->c, 1, args, in_axes, 1, res, out_axes);
}

static void test_vmap(void **state) {
  (void)state;
  ot_array x = ot_random(JIT_F32, 3, (int64_t[]){4, 5, 6}, 11, -1, 1);
  x.v[7] = NAN;
  for (kind k = K_PROD; k <= K_TOPK; k++) {
    if (k == K_AND || k == K_OR) continue;
    for (int in_axis = 0; in_axis < 3; in_axis += 2) {
      vcase v = {{k, 1, k == K_CUMPROD, NULL}, in_axis};
      ot_array got;
      OT_ASSERT_OK(ot_run("vmapped", vmapped, &v, 1, &x, 1, &got));
      /* the loop: example e is x sliced at e along in_axis */
      int64_t nb = x.shape[in_axis];
      int64_t es[2] = {in_axis == 0 ? 5 : 4, in_axis == 0 ? 6 : 5};
      for (int64_t e = 0; e < nb; e++) {
        ot_array ex = ot_zeros(JIT_F32, 2, es);
        for (int64_t q = 0; q < ex.n; q++) {
          int64_t a = q / es[1], b = q % es[1];
          ex.v[q] = in_axis == 0 ? x.v[(e * 5 + a) * 6 + b] : x.v[(a * 5 + b) * 6 + e];
        }
        ot_array want = reference(&v.c, &ex);
        int64_t per = want.n;
        ot_array slice = ot_zeros(want.dt, want.rank, want.shape);
        for (int64_t q = 0; q < per; q++) slice.v[q] = got.v[e * per + q];
        assert_true(ot_close("vmap", &slice, &want, NULL, (ot_tol){1e-5, 1e-5}));
        ot_free(&slice);
        ot_free(&want);
        ot_free(&ex);
      }
      ot_free(&got);
    }
  }
  ot_free(&x);
}

/* ---- sharded over 2 devices ------------------------------------------------------------------- */

static void test_sharded(void **state) {
  (void)state;
  jit_ctx *one = ot_ctx_with(1, 2, 3), *two = ot_ctx_with(2, 2, 3);
  jit_mesh *mesh = NULL;
  OT_ASSERT_OK(jit_mesh_create(two, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &mesh));
  static const char *const specs[] = {"x,_", "_,x"};
  ot_array x = ot_random(JIT_F32, 2, (int64_t[]){6, 8}, 12, 0.5, 1.5);
  x.v[9] = NAN;
  ot_array bx = ot_random(JIT_BOOL, 2, (int64_t[]){6, 8}, 13, 0, 1);
  for (int s = 0; s < 2; s++) {
    jit_sharding *sh = NULL;
    OT_ASSERT_OK(jit_sharding_create(mesh, specs[s], &sh));
    for (kind k = K_PROD; k <= K_TOPK; k++)
      for (int ax = 0; ax < 2; ax++) {
        const ot_array *in = k == K_AND || k == K_OR ? &bx : &x;
        opcase c = {k, k == K_TOPK ? 1 : ax, k == K_CUMMAX, NULL};
        ot_array want = run_on(one, trace_op, &c, in);
        c.sharding = sh;
        ot_array got = run_on(two, trace_op, &c, in);
        assert_true(ot_close("sharded", &got, &want, NULL, (ot_tol){1e-6, 1e-6}));
        ot_free(&got);
        ot_free(&want);
      }
    jit_sharding_free(sh);
  }
  ot_free(&x);
  ot_free(&bx);
  jit_mesh_free(mesh);
  jit_ctx_destroy(one);
  jit_ctx_destroy(two);
}

/* ---- VJPs ---------------------------------------------------------------------------------------- */

/* loss = sum(w * op(x)), w fixed weights, so that every output's cotangent differs. */
static void loss_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_val y = apply(t, user, args[0]);
  int64_t n = 1;
  for (int d = 0; d < jit_val_rank(t, y); d++) n *= jit_val_shape(t, y)[d];
  jit_val w = jit_reshape(t, jit_add(t, jit_iota(t, JIT_F64, 1, &n, 0), jit_scalar(t, 1)),
                          jit_val_rank(t, y), jit_val_shape(t, y));
  int axes[JIT_MAX_RANK];
  for (int d = 0; d < jit_val_rank(t, y); d++) axes[d] = d;
  res[0] = jit_reduce_sum(t, jit_mul(t, w, y), jit_val_rank(t, y), axes);
}

static void grad_fn(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  jit_value_and_grad(t, loss_fn, user, 1, args, 1, 0, res);
}

static double loss_at(opcase *c, const ot_array *x) {
  ot_array l;
  OT_ASSERT_OK(ot_run("loss", loss_fn, c, 1, x, 1, &l));
  double v = l.v[0];
  ot_free(&l);
  return v;
}

static void check_grad(opcase c, ot_array *x, const char *what) {
  ot_array res[2];
  OT_ASSERT_OK(ot_run("grad", grad_fn, &c, 1, x, 2, res));
  for (int64_t q = 0; q < x->n; q++) {
    double keep = x->v[q], h = 1e-6;
    x->v[q] = keep + h;
    double up = loss_at(&c, x);
    x->v[q] = keep - h;
    double dn = loss_at(&c, x);
    x->v[q] = keep;
    double fd = (up - dn) / (2 * h);
    if (!(fabs(res[1].v[q] - fd) <= 1e-6 * (1 + fabs(fd)))) {
      print_error("%s: d/dx[%lld] = %.12g, finite differences %.12g\n", what, (long long)q,
                  res[1].v[q], fd);
      fail();
    }
  }
  ot_free(&res[0]);
  ot_free(&res[1]);
}

static void test_grads(void **state) {
  (void)state;
  int64_t s[2] = {3, 4};
  /* rows with no zero, one zero, two zeros */
  ot_array z = ot_values(JIT_F64, 2, s, (double[]){1.5, -2, 0.5, 3, 0, 2, -1.25, 0.75, 0, 4, 0, 1});
  check_grad((opcase){K_PROD, 1, 0, NULL}, &z, "reduce_prod at zeros");
  check_grad((opcase){K_PROD, 0, 0, NULL}, &z, "reduce_prod axis 0");
  ot_array x = ot_random(JIT_F64, 2, s, 14, 0.5, 1.5);
  for (int rev = 0; rev < 2; rev++)
    for (kind k = K_CUMSUM; k <= K_CUMMIN; k++) {
      check_grad((opcase){k, 1, rev, NULL}, &x, "cumulative axis 1");
      check_grad((opcase){k, 0, rev, NULL}, &x, "cumulative axis 0");
    }
  /* the blocked prefix's VJP: cumsum's is the reverse cumsum of the weights (i + 1) */
  for (int rev = 0; rev < 2; rev++) {
    opcase c = {K_CUMSUM, 0, rev, NULL};
    ot_array lx = ot_random(JIT_F64, 1, (int64_t[]){300}, 22, -1, 1), res[2];
    OT_ASSERT_OK(ot_run("grad", grad_fn, &c, 1, &lx, 2, res));
    for (int64_t q = 0; q < 300; q++) {
      double want = rev ? (double)(q + 1) * (q + 2) / 2 : (double)(300 * 301 / 2) - (double)q * (q + 1) / 2;
      assert_true(res[1].v[q] == want);
    }
    ot_free(&res[0]);
    ot_free(&res[1]);
    ot_free(&lx);
  }
  check_grad((opcase){K_SORT, 1, 0, NULL}, &x, "sort axis 1");
  check_grad((opcase){K_SORT, 0, 0, NULL}, &x, "sort axis 0");
  check_grad((opcase){K_TOPK, 1, 0, NULL}, &x, "top_k");
  ot_free(&z);
  ot_free(&x);
}

/* ---- errors name the user's line --------------------------------------------------------------- */

static int bad_line;
static void bad_ops(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  int which = *(int *)user;
  bad_line = __LINE__ + 2;
  switch (which) {
  case 0: res[0] = jit_argmax(t, args[0], 2, JIT_I32); break;
  case 1: res[0] = jit_argmax(t, args[0], 0, JIT_F32); break;
  case 2: res[0] = jit_reduce_and(t, args[0], 1, (int[]){0}); break;
  case 3: res[0] = jit_cumsum(t, args[0], -3, 0); break;
  default: res[0] = jit_argmin(t, jit_slice(t, args[0], (int64_t[]){0, 0}, (int64_t[]){0, 2}, NULL), 0, JIT_I32); break;
  }
}

static void test_errors(void **state) {
  (void)state;
  static const char *const names[] = {"argmax", "argmax", "reduce_and", "cumsum", "argmin"};
  static const jit_status codes[] = {JIT_ESHAPE, JIT_EDTYPE, JIT_EDTYPE, JIT_ESHAPE, JIT_ESHAPE};
  ot_array x = ot_random(JIT_F32, 2, (int64_t[]){2, 3}, 15, -1, 1);
  for (int which = 0; which < 5; which++) {
    ot_array r;
    assert_int_equal(ot_run("bad", bad_ops, &which, 1, &x, 1, &r), codes[which]);
    assert_true(ot_error_has(names[which], THIS_FILE, bad_line + which));
  }
  ot_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reductions), cmocka_unit_test(test_cumulative),
      cmocka_unit_test(test_sort),       cmocka_unit_test(test_sort_multi),
      cmocka_unit_test(test_vmap),       cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_grads),      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
