/* test_grad.c: jit_value_and_grad and jit_checkpoint through the public API: every VJP rule
 * against central finite differences in float64, higher orders, aux, wrt subsets, an MLP, remat. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir/passes/passes.h"
#include "support/optest.h"
#include "tjit.h"
#include "trace/trace.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
#define MAX_IN 3

typedef struct shape {
  int rank;
  int64_t d[JIT_MAX_RANK];
} shape;

/* ---- finite differences --------------------------------------------------------------------------
   A case: an op on n_in f64 inputs giving y; the loss is sum(y * r) for a random direction r of
   y's shape (an extra, non-differentiated argument), so every element of every input's gradient
   is checked against (L(x + h e_i) - L(x - h e_i)) / 2h. */
typedef struct vcase vcase;
typedef jit_val (*op_fn)(jit_trace *t, const jit_val *x, const vcase *c);
struct vcase {
  const char *name;
  op_fn op;
  int n_in;
  shape in[MAX_IN];
  double lo, hi; /* inputs uniform in [lo, hi) */
  double h;      /* step; 0: 1e-5 */
  double tol;    /* |grad - fd| <= tol * (1 + |fd|); 0: 1e-6 */
  int k;         /* op-specific parameter */
};

static jit_val (*const unary[])(jit_trace *, jit_val) = {
    (jit_neg),  (jit_abs), (jit_exp), (jit_log), (jit_sqrt),  (jit_rsqrt), (jit_tanh),
    (jit_logistic), (jit_sin), (jit_cos), (jit_erf), (jit_floor), (jit_relu),
    (jit_log1p), (jit_expm1), (jit_erf_inv), (jit_ceil), (jit_round), (jit_sign)};
enum { U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_TANH, U_LOGISTIC, U_SIN, U_COS, U_ERF,
       U_FLOOR, U_RELU, U_LOG1P, U_EXPM1, U_ERF_INV, U_CEIL, U_ROUND, U_SIGN };
static jit_val (*const binary[])(jit_trace *, jit_val, jit_val) = {
    (jit_add), (jit_sub), (jit_mul), (jit_div), (jit_max), (jit_min), (jit_pow), (jit_rem),
    (jit_atan2)};
/* lax.clamp with x[1] as the operand, lo = x[0] and hi = x[0] + 1.5 */
static jit_val op_clamp(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  return jit_clamp(t, x[0], x[1], jit_add(t, x[0], jit_scalar(t, 1.5)));
}

static jit_val op_unary(jit_trace *t, const jit_val *x, const vcase *c) { return unary[c->k](t, x[0]); }
static jit_val op_binary(jit_trace *t, const jit_val *x, const vcase *c) {
  return binary[c->k](t, x[0], x[1]);
}
static jit_val op_convert(jit_trace *t, const jit_val *x, const vcase *c) {
  return jit_convert(t, jit_convert(t, x[0], c->k ? JIT_I32 : JIT_F32), JIT_F64);
}
static jit_val op_select(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  jit_val p = jit_cmp(t, JIT_GT, x[0], x[1]);
  return jit_select(t, p, jit_mul(t, x[0], jit_scalar(t, 2)), jit_exp(t, x[1]));
}
static jit_val op_consts(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  const int64_t s[2] = {3, 4};
  jit_val io = jit_iota(t, JIT_F64, 2, s, 1), two = jit_full(t, JIT_F64, 2, s, 2);
  return jit_add(t, jit_mul(t, x[0], io), jit_mul(t, two, x[0]));
}
static jit_val op_reshape(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  return jit_reshape(t, jit_sin(t, x[0]), 2, (const int64_t[]){3, 4});
}
static jit_val op_transpose(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  return jit_transpose(t, x[0], (const int[]){2, 0, 1});
}
static jit_val op_broadcast(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  return jit_broadcast_to(t, x[0], 3, (const int64_t[]){2, 3, 4});
}
static jit_val op_slice(jit_trace *t, const jit_val *x, const vcase *c) {
  switch (c->k) {
  case 0: return jit_slice(t, x[0], (const int64_t[]){1, 2}, (const int64_t[]){3, 5}, NULL);
  case 1:
    return jit_slice(t, x[0], (const int64_t[]){1, 0}, (const int64_t[]){7, 9},
                     (const int64_t[]){2, 3});
  default: /* rank 3, a stride that takes one element, a full dim, a stride past the end */
    return jit_slice(t, x[0], (const int64_t[]){1, 0, 0}, (const int64_t[]){2, 3, 5},
                     (const int64_t[]){4, 1, 2});
  }
}
static jit_val op_concat(jit_trace *t, const jit_val *x, const vcase *c) {
  return jit_concat(t, 3, x, c->k);
}
static jit_val op_reduce(jit_trace *t, const jit_val *x, const vcase *c) {
  static const int axes[][2] = {{0, 2}, {1, 0}, {0, 1}};
  int n = c->k == 1 ? 1 : 2;
  jit_val e = jit_exp(t, x[0]); /* a reduction of an intermediate, not of a param */
  switch (c->k) {
  case 0: return jit_reduce_sum(t, e, n, axes[0]);
  case 1: return jit_reduce_max(t, e, n, (const int[]){1});
  default: return jit_reduce_min(t, e, n, axes[2]);
  }
}
static jit_val op_matmul(jit_trace *t, const jit_val *x, const vcase *c) {
  (void)c;
  return jit_matmul(t, x[0], x[1]);
}
static jit_val op_dot_general(jit_trace *t, const jit_val *x, const vcase *c) {
  if (c->k == 0) /* [2,3,4] x [2,4,5]: batch 0x0, contract 2x1 */
    return jit_dot_general(t, x[0], x[1], 1, (const int[]){0}, (const int[]){0}, 1,
                           (const int[]){2}, (const int[]){1});
  /* [4,2,3] x [3,5,2]: batch 1x2, contract 2x0, dims out of order on both sides */
  return jit_dot_general(t, x[0], x[1], 1, (const int[]){1}, (const int[]){2}, 1,
                         (const int[]){2}, (const int[]){0});
}
static jit_val op_two_contract(jit_trace *t, const jit_val *x, const vcase *c) {
  if (c->k == 0) /* [3,4,2] x [2,5,4]: contract (2,1) x (0,2) */
    return jit_dot_general(t, x[0], x[1], 0, NULL, NULL, 2, (const int[]){2, 1},
                           (const int[]){0, 2});
  /* [3,3,4] x [4,3,3]: two free dims of equal size on each side, so that a mixed-up order of
     free dims would still type-check */
  return jit_dot_general(t, x[0], x[1], 0, NULL, NULL, 1, (const int[]){2}, (const int[]){0});
}

/* Indices (i32[6]) with duplicates, negative and out-of-range entries for an axis of 3:
   (3 i mod 5) - 4 = -4 -1 -3 0 -2 -4. */
static jit_val test_indices(jit_trace *t) {
  jit_val i = jit_iota(t, JIT_I32, 1, (const int64_t[]){6}, 0);
  return jit_sub(t, jit_rem(t, jit_mul(t, i, jit_scalar(t, 3)), jit_scalar(t, 5)), jit_scalar(t, 4));
}
static jit_val op_index(jit_trace *t, const jit_val *x, const vcase *c) {
  jit_val s1 = jit_full(t, JIT_I32, 0, NULL, 1), s5 = jit_full(t, JIT_I64, 0, NULL, 5);
  switch (c->k) {
  case 0: return jit_take(t, x[0], test_indices(t), 0);            /* [3,4] -> [6,4] */
  case 1: return jit_take(t, jit_exp(t, x[0]), test_indices(t), 1); /* [4,3] -> [4,6] */
  case 2: return jit_scatter_add(t, x[0], test_indices(t), x[1], 0); /* [3,4] += [6,4] */
  case 3: return jit_scatter_set(t, x[0], test_indices(t), x[1], 0); /* duplicates: one wins */
  case 4: return jit_take_along_axis(t, x[0], jit_reshape(t, test_indices(t), 2, (const int64_t[]){2, 3}), 1);
  case 5: return jit_dynamic_slice(t, x[0], (jit_val[]){s1, s5}, (const int64_t[]){2, 3});
  case 6: return jit_dynamic_update_slice(t, x[0], x[1], (jit_val[]){s1, s5});
  case 9: { /* one index a row (a label): -3 1 5 0 over an axis of 5, one past it (clamped) */
    jit_val i = jit_iota(t, JIT_I32, 2, (const int64_t[]){4, 1}, 0);
    jit_val l = jit_sub(t, jit_rem(t, jit_mul(t, i, jit_scalar(t, 4)), jit_scalar(t, 9)), jit_scalar(t, 3));
    return jit_take_along_axis(t, jit_exp(t, x[0]), l, 1);
  }
  case 7:
    return jit_pad(t, x[0], x[1], (const int64_t[]){1, -1}, (const int64_t[]){-1, 2},
                   (const int64_t[]){2, 1});
  default: return jit_rev(t, x[0], 2, (const int[]){0, 1});
  }
}

#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
static const vcase cases[] = {
    {"neg", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_NEG},
    {"abs", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_ABS},
    {"exp", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_EXP},
    {"log", op_unary, 1, {S2(3, 4)}, 0.5, 3, 0, 0, U_LOG},
    {"sqrt", op_unary, 1, {S2(3, 4)}, 0.5, 3, 0, 0, U_SQRT},
    {"rsqrt", op_unary, 1, {S2(3, 4)}, 0.5, 3, 0, 0, U_RSQRT},
    {"tanh", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_TANH},
    {"logistic", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_LOGISTIC},
    {"sin", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_SIN},
    {"cos", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_COS},
    {"erf", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_ERF},
    {"floor", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_FLOOR},
    {"relu", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_RELU},
    {"log1p", op_unary, 1, {S2(3, 4)}, -0.5, 3, 0, 0, U_LOG1P},
    {"expm1", op_unary, 1, {S2(3, 4)}, -2, 2, 0, 0, U_EXPM1},
    {"erf_inv", op_unary, 1, {S2(3, 4)}, -0.9, 0.9, 0, 0, U_ERF_INV},
    {"ceil", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_CEIL},
    {"round", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_ROUND},
    {"sign", op_unary, 1, {S2(3, 4)}, -3, 3, 0, 0, U_SIGN},
    {"rem", op_binary, 2, {S2(3, 4), S2(3, 4)}, 0.7, 3, 0, 0, 7},
    {"atan2", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 8},
    {"clamp", op_clamp, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 0},
    {"scalar_exp", op_unary, 1, {{0, {0}}}, -1, 1, 0, 0, U_EXP},
    {"convert_f32", op_convert, 1, {S2(3, 4)}, -2, 2, 1e-2, 1e-4, 0},
    {"convert_i32", op_convert, 1, {S2(3, 4)}, -3, 3, 0, 0, 1},
    {"add", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 0},
    {"sub", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 1},
    {"mul", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 2},
    {"div", op_binary, 2, {S2(3, 4), S2(3, 4)}, 0.5, 2, 0, 0, 3},
    {"max", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 4},
    {"min", op_binary, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 5},
    {"pow", op_binary, 2, {S2(3, 4), S2(3, 4)}, 0.5, 2, 0, 0, 6},
    {"add_bcast", op_binary, 2, {S2(3, 1), S1(4)}, -2, 2, 0, 0, 0},
    {"mul_bcast", op_binary, 2, {S3(2, 1, 4), S2(3, 1)}, -2, 2, 0, 0, 2},
    {"div_scalar", op_binary, 2, {S2(3, 4), {0, {0}}}, 0.5, 2, 0, 0, 3},
    {"select_cmp", op_select, 2, {S2(3, 4), S2(3, 4)}, -2, 2, 0, 0, 0},
    {"iota_full", op_consts, 1, {S2(3, 4)}, -2, 2, 0, 0, 0},
    {"reshape", op_reshape, 1, {S2(2, 6)}, -2, 2, 0, 0, 0},
    {"transpose", op_transpose, 1, {S3(2, 3, 4)}, -2, 2, 0, 0, 0},
    {"broadcast", op_broadcast, 1, {S2(3, 1)}, -2, 2, 0, 0, 0},
    {"slice", op_slice, 1, {S2(4, 6)}, -2, 2, 0, 0, 0},
    {"slice_strided", op_slice, 1, {S2(7, 9)}, -2, 2, 0, 0, 1},
    {"slice_rank3", op_slice, 1, {S3(5, 3, 6)}, -2, 2, 0, 0, 2},
    {"concat", op_concat, 3, {S2(2, 1), S2(2, 3), S2(2, 2)}, -2, 2, 0, 0, 1},
    {"concat_axis0", op_concat, 3, {S2(1, 3), S2(2, 3), S2(3, 3)}, -2, 2, 0, 0, 0},
    {"reduce_sum", op_reduce, 1, {S3(2, 3, 4)}, -1, 1, 0, 0, 0},
    {"reduce_max", op_reduce, 1, {S3(2, 3, 4)}, -1, 1, 0, 0, 1},
    {"reduce_min", op_reduce, 1, {S3(2, 3, 4)}, -1, 1, 0, 0, 2},
    {"matmul", op_matmul, 2, {S2(3, 4), S2(4, 2)}, -1, 1, 0, 0, 0},
    {"matmul_vec", op_matmul, 2, {S1(4), S2(4, 2)}, -1, 1, 0, 0, 0},
    {"matmul_batch_bcast", op_matmul, 2, {S3(2, 3, 4), S2(4, 5)}, -1, 1, 0, 0, 0},
    {"dot_batch", op_dot_general, 2, {S3(2, 3, 4), S3(2, 4, 5)}, -1, 1, 0, 0, 0},
    {"dot_permuted", op_dot_general, 2, {S3(4, 2, 3), S3(3, 5, 2)}, -1, 1, 0, 0, 1},
    {"dot_two_contract", op_two_contract, 2, {S3(3, 4, 2), S3(2, 5, 4)}, -1, 1, 0, 0, 0},
    {"dot_two_free", op_two_contract, 2, {S3(3, 3, 4), S3(4, 3, 3)}, -1, 1, 0, 0, 1},
    {"take", op_index, 1, {S2(3, 4)}, -1, 1, 0, 0, 0},
    {"take_axis1", op_index, 1, {S2(4, 3)}, -1, 1, 0, 0, 1},
    {"scatter_add", op_index, 2, {S2(3, 4), S2(6, 4)}, -1, 1, 0, 0, 2},
    {"scatter_set", op_index, 2, {S2(3, 4), S2(6, 4)}, -1, 1, 0, 0, 3},
    {"take_along_axis", op_index, 1, {S2(2, 3)}, -1, 1, 0, 0, 4},
    {"take_along_axis_one", op_index, 1, {S2(4, 5)}, -1, 1, 0, 0, 9},
    {"dynamic_slice", op_index, 1, {S2(3, 6)}, -1, 1, 0, 0, 5},
    {"dynamic_update_slice", op_index, 2, {S2(3, 6), S2(2, 3)}, -1, 1, 0, 0, 6},
    {"pad", op_index, 2, {S2(3, 4), {0, {0}}}, -1, 1, 0, 0, 7},
    {"rev", op_index, 1, {S2(3, 4)}, -1, 1, 0, 0, 8},
};

/* args: x[0..n_in), r */
static void probe_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vcase *c = user;
  r[0] = c->op(t, a, c);
}

static jit_val sum_all(jit_trace *t, jit_val y) {
  int rank = jit_val_rank(t, y), axes[JIT_MAX_RANK];
  for (int i = 0; i < rank; i++) axes[i] = i;
  return rank ? jit_reduce_sum(t, y, rank, axes) : y;
}

static void loss_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vcase *c = user;
  r[0] = sum_all(t, jit_mul(t, c->op(t, a, c), a[c->n_in]));
}

static void vg_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vcase *c = user;
  jit_value_and_grad(t, loss_fn, user, c->n_in + 1, a, (UINT64_C(1) << c->n_in) - 1, 0, r);
}

/* Calls a compiled scalar function. */
static double call_scalar(jit_fn *f, int n, const ot_array *xs) {
  jit_array *in[MAX_IN + 1] = {0}, *out = NULL;
  for (int i = 0; i < n; i++) in[i] = ot_upload(&xs[i]);
  OT_ASSERT_OK(jit_call(f, in, &out));
  ot_array v = ot_download(out);
  double r = v.v[0];
  ot_free(&v);
  jit_array_free(out);
  for (int i = 0; i < n; i++) jit_array_free(in[i]);
  return r;
}

static bool check_case(const vcase *c, uint64_t seed) {
  ot_array xs[MAX_IN + 1], y, res[MAX_IN + 1];
  for (int i = 0; i < c->n_in; i++)
    xs[i] = ot_random(JIT_F64, c->in[i].rank, c->in[i].d, seed + (uint64_t)i, c->lo, c->hi);
  OT_ASSERT_OK(ot_run(c->name, probe_fn, (void *)c, c->n_in, xs, 1, &y));
  xs[c->n_in] = ot_random(JIT_F64, y.rank, y.shape, seed + 99, -1, 1);
  OT_ASSERT_OK(ot_run(c->name, vg_fn, (void *)c, c->n_in + 1, xs, 1 + c->n_in, res));

  jit_fn *lf = NULL;
  jit_fn_opts o = {.name = c->name, .n_args = c->n_in + 1, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), loss_fn, (void *)c, &o, &lf));
  bool ok = true;
  double h = c->h ? c->h : 1e-5, tol = c->tol ? c->tol : 1e-6;
  double loss = call_scalar(lf, c->n_in + 1, xs);
  if (fabs(loss - res[0].v[0]) > 1e-12 * (1 + fabs(loss))) {
    print_error("%s: loss %.17g, value_and_grad's %.17g\n", c->name, loss, res[0].v[0]);
    ok = false;
  }
  for (int k = 0; k < c->n_in && ok; k++) {
    const ot_array *g = &res[1 + k];
    if (g->dt != JIT_F64 || g->rank != xs[k].rank ||
        memcmp(g->shape, xs[k].shape, sizeof(int64_t) * (size_t)g->rank) != 0) {
      print_error("%s: gradient %d has the wrong type\n", c->name, k);
      ok = false;
      break;
    }
    for (int64_t i = 0; i < xs[k].n && ok; i++) {
      double x0 = xs[k].v[i];
      xs[k].v[i] = x0 + h;
      double lp = call_scalar(lf, c->n_in + 1, xs);
      xs[k].v[i] = x0 - h;
      double lm = call_scalar(lf, c->n_in + 1, xs);
      xs[k].v[i] = x0;
      double fd = (lp - lm) / (2 * h);
      if (!(fabs(g->v[i] - fd) <= tol * (1 + fabs(fd)))) {
        print_error("%s: d/dx%d[%lld] = %.12g, finite differences %.12g\n", c->name, k,
                    (long long)i, g->v[i], fd);
        ok = false;
      }
    }
  }
  jit_fn_free(lf);
  ot_free(&y);
  for (int i = 0; i <= c->n_in; i++) {
    ot_free(&xs[i]);
    ot_free(&res[i]);
  }
  return ok;
}

static void test_vjp_rules(void **state) {
  (void)state;
  int bad = 0;
  for (int i = 0; i < N_OF(cases); i++)
    if (!check_case(&cases[i], 1000 + 17 * (uint64_t)i)) bad++;
  assert_int_equal(bad, 0);
}

/* ---- ties: JAX splits max/min's cotangent half/half, reduce_max's evenly ------------------------ */
static void ties_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val m = jit_max(t, a[0], a[1]);                       /* ties at equal entries */
  jit_val n = jit_min(t, a[0], a[0]);                       /* always a tie: 1/2 + 1/2 */
  jit_val rm = jit_reduce_max(t, a[2], 1, (const int[]){0}); /* [1,3,3,2] -> 3 */
  r[0] = jit_add(t, jit_add(t, sum_all(t, m), sum_all(t, jit_mul(t, n, jit_scalar(t, 3)))), rm);
}
static void ties_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, ties_loss, user, 3, a, 7, 0, r);
}

static void test_ties(void **state) {
  (void)state;
  ot_array in[3], out[4];
  in[0] = ot_values(JIT_F32, 1, (const int64_t[]){3}, (const double[]){1, 2, 5});
  in[1] = ot_values(JIT_F32, 1, (const int64_t[]){3}, (const double[]){1, 4, 3});
  in[2] = ot_values(JIT_F32, 1, (const int64_t[]){4}, (const double[]){1, 3, 3, 2});
  OT_ASSERT_OK(ot_run("ties", ties_vg, NULL, 3, in, 4, out));
  ot_array w0 = ot_values(JIT_F32, 1, (const int64_t[]){3}, (const double[]){0.5 + 3, 0 + 3, 1 + 3});
  ot_array w1 = ot_values(JIT_F32, 1, (const int64_t[]){3}, (const double[]){0.5, 1, 0});
  ot_array w2 = ot_values(JIT_F32, 1, (const int64_t[]){4}, (const double[]){0, 0.5, 0.5, 0});
  bool ok = ot_expect("d/da", &out[1], &w0);
  ok &= ot_expect("d/db", &out[2], &w1);
  ok &= ot_expect("d/dc", &out[3], &w2);
  assert_true(ok);
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
  ot_free(&out[0]);
}

/* The operands alone decide where max's and min's cotangent goes: a NaN operand (y is NaN) sends
   it nowhere, as JAX's comparison with y does; signed zeros and infinities tie. */
static void nan_ties_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val two = jit_scalar(t, 2);
  jit_val twice_min = jit_mul(t, jit_min(t, a[0], a[1]), two);
  r[0] = jit_add(t, sum_all(t, jit_max(t, a[0], a[1])), sum_all(t, twice_min));
}
static void nan_ties_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, nan_ties_loss, user, 2, a, 3, 0, r);
}

static void test_nan_ties(void **state) {
  (void)state;
  const double inf = INFINITY;
  ot_array in[2], out[3];
  in[0] = ot_values(JIT_F32, 1, (const int64_t[]){6}, (const double[]){NAN, 1, -0.0, inf, -inf, 3});
  in[1] = ot_values(JIT_F32, 1, (const int64_t[]){6}, (const double[]){1, NAN, 0.0, inf, 2, -inf});
  OT_ASSERT_OK(ot_run("nan_ties", nan_ties_vg, NULL, 2, in, 3, out));
  /* max's share + 2 x min's share */
  ot_array wa = ot_values(JIT_F32, 1, (const int64_t[]){6}, (const double[]){0, 0, 1.5, 1.5, 2, 1});
  ot_array wb = ot_values(JIT_F32, 1, (const int64_t[]){6}, (const double[]){0, 0, 1.5, 1.5, 1, 2});
  bool ok = ot_expect("d/da", &out[1], &wa);
  ok &= ot_expect("d/db", &out[2], &wb);
  assert_true(ok);
  for (int i = 0; i < 2; i++) ot_free(&in[i]);
  ot_free(&out[0]);
}

/* ---- pow at a zero base: JAX's guards keep the gradient finite -------------------------------- */
static void pow_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = sum_all(t, jit_pow(t, a[0], a[1]));
}
static void pow_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, pow_loss, user, 2, a, 3, 0, r);
}

static void test_pow_zero(void **state) {
  (void)state;
  ot_array in[2], out[3];
  in[0] = ot_values(JIT_F64, 1, (const int64_t[]){3}, (const double[]){0, 0, 2});
  in[1] = ot_values(JIT_F64, 1, (const int64_t[]){3}, (const double[]){2, 0, 0});
  OT_ASSERT_OK(ot_run("pow0", pow_vg, NULL, 2, in, 3, out));
  /* d/da: 2*0^1 = 0; b == 0 -> 0; b == 0 -> 0.  d/db: log(1)*0 = 0; log(1)*1 = 0; log 2 * 1 */
  ot_array wa = ot_values(JIT_F64, 1, (const int64_t[]){3}, (const double[]){0, 0, 0});
  ot_array wb = ot_values(JIT_F64, 1, (const int64_t[]){3}, (const double[]){0, 0, log(2.0)});
  bool ok = ot_expect("d/da", &out[1], &wa);
  ok &= ot_expect("d/db", &out[2], &wb);
  assert_true(ok);
  ot_free(&in[0]);
  ot_free(&in[1]);
  ot_free(&out[0]);
}

/* ---- higher order -------------------------------------------------------------------------------- */
typedef struct chain {
  int order;  /* how many nested value_and_grads */
  int which;  /* 0: sin(x), 1: x^3 (pow), 2: x*x*x, 3: tanh(exp(x) * x), 4: x (the param) */
} chain;

static void base_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const chain *c = user;
  switch (c->which) {
  case 0: r[0] = jit_sin(t, a[0]); break;
  case 1: r[0] = jit_pow(t, a[0], jit_scalar(t, 3)); break;
  case 2: r[0] = jit_mul(t, jit_mul(t, a[0], a[0]), a[0]); break;
  case 4: r[0] = a[0]; break;
  default: r[0] = jit_tanh(t, jit_mul(t, jit_exp(t, a[0]), a[0])); break;
  }
}

/* The order-th derivative: each level differentiates the level below and returns its gradient. */
static void deriv_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const chain *c = user;
  if (c->order == 0) {
    base_fn(t, a, r, user);
    return;
  }
  chain below = {c->order - 1, c->which};
  jit_val res[2];
  jit_value_and_grad(t, deriv_fn, &below, 1, a, 1, 0, res);
  r[0] = res[1];
}

static double deriv(int order, int which, double x, double h) {
  if (which == 0) {
    static const double s[4][2] = {{0, 1}, {1, 0}, {0, -1}, {-1, 0}}; /* sin, cos, -sin, -cos */
    return s[order % 4][0] * cos(x) + s[order % 4][1] * sin(x);
  }
  if (which == 4) return order == 0 ? x : order == 1 ? 1 : 0;
  if (which <= 2) {
    static const double k[4][2] = {{1, 3}, {3, 2}, {6, 1}, {6, 0}}; /* c * x^p */
    return order > 3 ? 0 : k[order][0] * pow(x, k[order][1]);
  }
  /* f(x) = tanh(x e^x): derivatives by finite differences of the analytic first derivative */
  double u = x * exp(x), d1 = (1 - tanh(u) * tanh(u)) * exp(x) * (1 + x);
  if (order == 0) return tanh(u);
  if (order == 1) return d1;
  return (deriv(1, 3, x + h, 0) - deriv(1, 3, x - h, 0)) / (2 * h);
}

static void test_higher_order(void **state) {
  (void)state;
  const double xs[] = {0.7, -1.3};
  for (int which = 0; which < 5; which++)
    for (int order = 1; order <= (which == 3 ? 2 : 4); order++)
      for (int i = 0; i < N_OF(xs); i++) {
        chain c = {order, which};
        ot_array x = ot_values(JIT_F64, 0, NULL, &xs[i]), y;
        OT_ASSERT_OK(ot_run("deriv", deriv_fn, &c, 1, &x, 1, &y));
        double want = deriv(order, which, xs[i], 1e-5);
        if (!(fabs(y.v[0] - want) <= 1e-8 * (1 + fabs(want))))
          fail_msg("f%d order %d at %g: %.17g, want %.17g", which, order, xs[i], y.v[0], want);
        ot_free(&x);
        ot_free(&y);
      }
}

/* ---- aux outputs and wrt subsets --------------------------------------------------------------- */
static void aux_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user; /* loss = sum(a0 * a2) + 3 * sum(a1); aux: a0 * 2 and a count (int) */
  r[0] = jit_add(t, sum_all(t, jit_mul(t, a[0], a[2])),
                 jit_mul(t, sum_all(t, a[1]), jit_scalar(t, 3)));
  r[1] = jit_mul(t, a[0], jit_scalar(t, 2));
  r[2] = jit_convert(t, sum_all(t, a[2]), JIT_I32);
}

static void aux_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const uint64_t *mask = user;
  jit_value_and_grad(t, aux_loss, NULL, 3, a, *mask, 2, r);
}

static void test_aux_and_wrt(void **state) {
  (void)state;
  const int64_t s[1] = {4};
  ot_array in[3];
  in[0] = ot_values(JIT_F32, 1, s, (const double[]){1, 2, 3, 4});
  in[1] = ot_values(JIT_F32, 1, s, (const double[]){-1, 0.5, 2, 7});
  in[2] = ot_values(JIT_F32, 1, s, (const double[]){2, -3, 4, 1});
  const uint64_t masks[] = {1, 2, 4, 5, 7};
  for (int m = 0; m < N_OF(masks); m++) {
    uint64_t mask = masks[m];
    ot_array out[6];
    int n_out = 3;
    for (uint64_t b = mask; b; b &= b - 1) n_out++;
    OT_ASSERT_OK(ot_run("aux", aux_vg, &mask, 3, in, n_out, out));
    ot_array loss = ot_values(JIT_F32, 0, NULL, (const double[]){2 - 6 + 12 + 4 + 3 * 8.5});
    ot_array aux1 = ot_values(JIT_F32, 1, s, (const double[]){2, 4, 6, 8});
    ot_array aux2 = ot_values(JIT_I32, 0, NULL, (const double[]){4});
    bool ok = ot_expect("loss", &out[0], &loss);
    ok &= ot_expect("aux 1", &out[1], &aux1);
    ok &= ot_expect("aux 2", &out[2], &aux2);
    int k = 3;
    for (int p = 0; p < 3; p++) {
      if (!(mask >> p & 1)) continue;
      ot_array w = p == 0   ? ot_values(JIT_F32, 1, s, in[2].v)
                   : p == 1 ? ot_values(JIT_F32, 1, s, (const double[]){3, 3, 3, 3})
                            : ot_values(JIT_F32, 1, s, in[0].v);
      ok &= ot_expect("gradient", &out[k++], &w);
    }
    assert_true(ok);
  }
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

/* ---- dtypes, unused args, a param as the loss ---------------------------------------------------- */
static void mixed_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user; /* a: x f16[3], n i32[3] (data, not differentiated), s f32[], u f32[2] (unused) */
  jit_val xf = jit_convert(t, a[0], JIT_F32);
  jit_val w = jit_mul(t, jit_convert(t, a[1], JIT_F32), jit_mul(t, xf, xf));
  r[0] = jit_add(t, sum_all(t, w), a[2]);
}
static void mixed_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, mixed_loss, user, 4, a, 0xd, 0, r); /* x, s, u */
}

static void test_dtypes_and_unused(void **state) {
  (void)state;
  ot_array in[4], out[4];
  in[0] = ot_values(JIT_F16, 1, (const int64_t[]){3}, (const double[]){0.5, -1, 2});
  in[1] = ot_values(JIT_I32, 1, (const int64_t[]){3}, (const double[]){1, 2, 3});
  in[2] = ot_values(JIT_F32, 0, NULL, (const double[]){7});
  in[3] = ot_values(JIT_F32, 1, (const int64_t[]){2}, (const double[]){1, 1});
  OT_ASSERT_OK(ot_run("mixed", mixed_vg, NULL, 4, in, 4, out));
  ot_array loss = ot_values(JIT_F32, 0, NULL, (const double[]){0.25 + 2 + 12 + 7});
  ot_array gx = ot_values(JIT_F16, 1, (const int64_t[]){3}, (const double[]){1, -4, 12});
  ot_array gs = ot_values(JIT_F32, 0, NULL, (const double[]){1});
  ot_array gu = ot_values(JIT_F32, 1, (const int64_t[]){2}, (const double[]){0, 0});
  bool ok = ot_expect("loss", &out[0], &loss);
  ok &= ot_expect("d/dx (f16)", &out[1], &gx);
  ok &= ot_expect("d/ds (the loss is s + ...)", &out[2], &gs);
  ok &= ot_expect("d/du (unused)", &out[3], &gu);
  assert_true(ok);
  for (int i = 0; i < 4; i++) ot_free(&in[i]);
}

/* ---- a small MLP against hand-derived gradients ------------------------------------------------- */
enum { MB = 4, MI = 3, MH = 5, MO = 2 };

static void mlp_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user; /* a: x, w1, b1, w2, b2, y; loss = mean((tanh(x w1 + b1) w2 + b2 - y)^2) */
  jit_val h = jit_tanh(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  jit_val d = jit_sub(t, jit_add(t, jit_matmul(t, h, a[3]), a[4]), a[5]);
  r[0] = jit_div(t, sum_all(t, jit_mul(t, d, d)), jit_scalar(t, MB * MO));
}
static void mlp_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, mlp_loss, user, 6, a, 0x1e, 0, r); /* w1 b1 w2 b2 */
}

static void test_mlp(void **state) {
  (void)state;
  const shape sh[6] = {S2(MB, MI), S2(MI, MH), S1(MH), S2(MH, MO), S1(MO), S2(MB, MO)};
  ot_array in[6], out[5];
  for (int i = 0; i < 6; i++) in[i] = ot_random(JIT_F64, sh[i].rank, sh[i].d, 50 + (uint64_t)i, -1, 1);
  OT_ASSERT_OK(ot_run("mlp", mlp_vg, NULL, 6, in, 5, out));
  const double *x = in[0].v, *w1 = in[1].v, *b1 = in[2].v, *w2 = in[3].v, *b2 = in[4].v,
               *y = in[5].v;
  double h[MB][MH], dout[MB][MO], dz[MB][MH], loss = 0;
  double gw1[MI][MH] = {{0}}, gb1[MH] = {0}, gw2[MH][MO] = {{0}}, gb2[MO] = {0};
  for (int b = 0; b < MB; b++) {
    for (int j = 0; j < MH; j++) {
      double z = b1[j];
      for (int i = 0; i < MI; i++) z += x[b * MI + i] * w1[i * MH + j];
      h[b][j] = tanh(z);
    }
    for (int o = 0; o < MO; o++) {
      double v = b2[o] - y[b * MO + o];
      for (int j = 0; j < MH; j++) v += h[b][j] * w2[j * MO + o];
      loss += v * v / (MB * MO);
      dout[b][o] = 2 * v / (MB * MO);
      gb2[o] += dout[b][o];
      for (int j = 0; j < MH; j++) gw2[j][o] += h[b][j] * dout[b][o];
    }
    for (int j = 0; j < MH; j++) {
      double dh = 0;
      for (int o = 0; o < MO; o++) dh += dout[b][o] * w2[j * MO + o];
      dz[b][j] = dh * (1 - h[b][j] * h[b][j]);
      gb1[j] += dz[b][j];
      for (int i = 0; i < MI; i++) gw1[i][j] += x[b * MI + i] * dz[b][j];
    }
  }
  ot_array w[5] = {ot_values(JIT_F64, 0, NULL, &loss), ot_values(JIT_F64, 2, sh[1].d, &gw1[0][0]),
                   ot_values(JIT_F64, 1, sh[2].d, gb1), ot_values(JIT_F64, 2, sh[3].d, &gw2[0][0]),
                   ot_values(JIT_F64, 1, sh[4].d, gb2)};
  bool ok = true;
  for (int i = 0; i < 5; i++) ok &= ot_expect("mlp", &out[i], &w[i]);
  assert_true(ok);
  for (int i = 0; i < 6; i++) ot_free(&in[i]);
}

/* ---- locations: backward instructions point at the forward op they come from ------------------- */
static int sin_line;
static void sin_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val s = jit_sin(t, a[0]); sin_line = __LINE__;
  r[0] = sum_all(t, s);
}
static void sin_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, sin_loss, user, 1, a, 1, 0, r);
}

static ir_func *trace_only(jit_trace_fn fn, void *user, int n_args, const ir_type *types,
                           int n_results) {
  trace_request req = {.name = "g", .fn = fn, .user = user, .n_args = n_args,
                       .n_results = n_results, .arg_types = types};
  ir_func *f = NULL;
  OT_ASSERT_OK(trace_function(&req, &f));
  OT_ASSERT_OK(ir_verify(f, "value_and_grad"));
  return f;
}

static int count_op(const ir_func *f, ir_op op) {
  int n = 0;
  for (uint32_t i = 0; i < f->n_ins; i++) n += f->ins[i].op == op;
  return n;
}

static void test_locations(void **state) {
  (void)state;
  ir_type ty = {.dtype = JIT_F32, .rank = 1, .dims = {8}};
  ir_func *f = trace_only(sin_vg, NULL, 1, &ty, 2);
  int cos_seen = 0;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    assert_non_null(in->loc.file);
    assert_non_null(strstr(in->loc.file, "test_grad.c"));
    if (in->op == IR_COS) {
      assert_int_equal(in->loc.line, sin_line);
      cos_seen++;
    }
  }
  assert_int_equal(cos_seen, 1);
  ir_func_free(f);
}

/* ---- take_along_axis: one index a row differentiates to a select, not a scatter into zeros ------ */
static const vcase *case_named(const char *name) {
  for (int i = 0; i < N_OF(cases); i++)
    if (strcmp(cases[i].name, name) == 0) return &cases[i];
  fail_msg("no case %s", name);
  return NULL;
}

static void test_take_along_grad(void **state) {
  (void)state;
  static const struct { const char *name; int scatters; } want[] = {
      {"take_along_axis_one", 0}, /* a label a row: select on iota == clamped index */
      {"take_along_axis", 1},     /* three indices a row, duplicates among them: scatter-add */
  };
  for (int k = 0; k < N_OF(want); k++) {
    const vcase *c = case_named(want[k].name);
    ir_type ty[2] = {{.dtype = JIT_F32, .rank = c->in[0].rank}};
    for (int d = 0; d < c->in[0].rank; d++) ty[0].dims[d] = c->in[0].d[d];
    ty[1] = ty[0];
    ty[1].dims[1] = k == 0 ? 1 : 3; /* the result's shape: the weights of the loss */
    ir_func *f = trace_only(vg_fn, (void *)c, 2, ty, 2);
    assert_int_equal(count_op(f, IR_SCATTER), want[k].scatters);
    if (!want[k].scatters) assert_true(count_op(f, IR_SELECT) >= 1);
    ir_func_free(f);
  }
}

/* ---- checkpoint ----------------------------------------------------------------------------------- */
enum { CK_LAYERS = 6, CK_N = 256 };

static void layer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val m = jit_mul(t, jit_sin(t, a[0]), jit_cos(t, a[0]));
  r[0] = jit_add(t, m, jit_mul(t, jit_tanh(t, a[0]), a[0]));
}

static void chain_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const int *ckpt = user;
  jit_val h = a[0];
  for (int k = 0; k < CK_LAYERS; k++) {
    jit_val nh;
    if (*ckpt)
      jit_checkpoint(t, layer, NULL, 1, &h, 1, &nh);
    else
      layer(t, &h, &nh, NULL);
    h = nh;
  }
  r[0] = sum_all(t, h);
}

static void chain_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, chain_loss, user, 1, a, 1, 0, r);
}

static ir_func *optimized(jit_trace_fn fn, void *user, const ir_type *ty, int n_results) {
  ir_func *f = trace_only(fn, user, 1, ty, n_results);
  OT_ASSERT_OK(ir_optimize(f, 0, true));
  return f;
}

static void test_checkpoint_grad(void **state) {
  (void)state;
  const int plain = 0, ckpt = 1;
  ot_array x = ot_random(JIT_F64, 1, (const int64_t[]){CK_N}, 7, -1, 1), a[2], b[2];
  OT_ASSERT_OK(ot_run("plain", chain_vg, (void *)&plain, 1, &x, 2, a));
  OT_ASSERT_OK(ot_run("ckpt", chain_vg, (void *)&ckpt, 1, &x, 2, b));
  bool ok = ot_expect("loss", &b[0], &a[0]);
  ok &= ot_expect("gradient", &b[1], &a[1]);
  assert_true(ok);

  ir_type ty = {.dtype = JIT_F64, .rank = 1, .dims = {CK_N}};
  ir_func *fp = optimized(chain_vg, (void *)&plain, &ty, 2);
  ir_func *fc = optimized(chain_vg, (void *)&ckpt, &ty, 2);
  uint64_t pp = ir_peak_live_bytes(fp), pc = ir_peak_live_bytes(fc);
  /* plain keeps ~4 arrays per layer for the backward pass; checkpointed keeps each layer's
     input and recomputes one layer at a time */
  if (!(pc * 2 < pp)) fail_msg("peak live bytes: checkpointed %llu, plain %llu",
                               (unsigned long long)pc, (unsigned long long)pp);
  /* the recomputation survived CSE: more sin/tanh in the checkpointed function */
  assert_true(count_op(fc, IR_TANH) > count_op(fp, IR_TANH));
  assert_int_equal(count_op(fp, IR_TANH), CK_LAYERS);
  assert_int_equal(count_op(fc, IR_TANH), 2 * CK_LAYERS);
  ir_func_free(fp);
  ir_func_free(fc);

  /* the same through the public stats */
  uint64_t peak[2];
  for (int i = 0; i < 2; i++) {
    jit_ctx *ctx;
    jit_fn *f;
    jit_array *in, *out[2];
    OT_ASSERT_OK(jit_ctx_create(NULL, &ctx));
    jit_fn_opts o = {.name = i ? "ckpt" : "plain", .n_args = 1, .n_results = 2};
    OT_ASSERT_OK(jit_compile(ctx, chain_vg, (void *)(i ? &ckpt : &plain), &o, &f));
    OT_ASSERT_OK(jit_array_from_host(ctx, JIT_F64, 1, (const int64_t[]){CK_N}, x.v, &in));
    OT_ASSERT_OK(jit_call(f, &in, out));
    jit_fn_stats st;
    OT_ASSERT_OK(jit_fn_stats_get(f, &st));
    peak[i] = st.peak_bytes;
    jit_array_free(out[0]);
    jit_array_free(out[1]);
    jit_array_free(in);
    jit_fn_free(f);
    jit_ctx_destroy(ctx);
  }
  assert_true(peak[1] > 0);
  assert_true(peak[1] * 2 < peak[0]);
  ot_free(&x);
}

static void test_checkpoint_outside_grad(void **state) {
  (void)state;
  const int plain = 0, ckpt = 1;
  ot_array x = ot_random(JIT_F32, 1, (const int64_t[]){CK_N}, 9, -1, 1), a, b;
  OT_ASSERT_OK(ot_run("plain", chain_loss, (void *)&plain, 1, &x, 1, &a));
  OT_ASSERT_OK(ot_run("ckpt", chain_loss, (void *)&ckpt, 1, &x, 1, &b));
  assert_true(ot_expect("loss", &b, &a));
  ir_type ty = {.dtype = JIT_F32, .rank = 1, .dims = {CK_N}};
  ir_func *fp = optimized(chain_loss, (void *)&plain, &ty, 1);
  ir_func *fc = optimized(chain_loss, (void *)&ckpt, &ty, 1);
  /* just inlining: the same instructions; each layer's intermediates are tagged, its result not */
  assert_int_equal(fc->n_ins, fp->n_ins);
  assert_int_equal(ir_peak_live_bytes(fc), ir_peak_live_bytes(fp));
  int tagged = 0;
  for (uint32_t i = 0; i < fc->n_ins; i++) tagged += fc->ins[i].attr.remat != 0;
  assert_int_equal(tagged, 5 * CK_LAYERS);
  assert_int_equal(ir_remat_max_tag(fc), CK_LAYERS);
  ir_func_free(fp);
  ir_func_free(fc);
  ot_free(&x);
}

/* ir_peak_live_bytes on a function with a known answer: params and constants excluded, a value
   live from its definition to its last use, results to the end, a dead value at its definition. */
static void test_peak_live_bytes(void **state) {
  (void)state;
  static const char text[] =
      "func @f(%0: f64[8]) -> (f64[], f64[8]) {\n"
      "  %1 = exp %0 : f64[8]\n"              /* 64 */
      "  %2 = sin %0 : f64[8]\n"              /* 128 */
      "  %3 = mul %1, %2 : f64[8]\n"          /* 192: the peak; then %1 and %2 die */
      "  %4 = const 2 : f64[8]\n"
      "  %5 = mul %3, %4 : f64[8]\n"          /* 128, then %3 dies */
      "  %6 = cos %5 : f64[8]\n"              /* dead: 128 at its definition */
      "  %7 = reduce_sum %5 axes=[0] : f64[]\n" /* 72 */
      "  return %7, %5\n"
      "}\n";
  ir_func **fs = NULL;
  uint32_t n = 0;
  OT_ASSERT_OK(ir_parse(text, sizeof text - 1, &fs, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ir_peak_live_bytes(fs[0]), 192);
  ir_func_free(fs[0]);
  free(fs);
}

/* nested: checkpoint inside checkpoint inside grad inside grad */
static void inner_ck(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_checkpoint(t, layer, NULL, 1, a, 1, r);
  r[0] = jit_mul(t, r[0], jit_sin(t, r[0]));
}
static void nested_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y;
  jit_checkpoint(t, inner_ck, NULL, 1, a, 1, &y);
  r[0] = sum_all(t, jit_exp(t, y));
}
static void nested_plain(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y;
  layer(t, a, &y, NULL);
  r[0] = sum_all(t, jit_exp(t, jit_mul(t, y, jit_sin(t, y))));
}
static void nested_d1(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val res[2];
  jit_value_and_grad(t, user, NULL, 1, a, 1, 0, res);
  r[0] = sum_all(t, res[1]);
}
static void nested_d2(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, nested_d1, user, 1, a, 1, 0, r);
}

static void test_checkpoint_nested(void **state) {
  (void)state;
  ot_array x = ot_random(JIT_F64, 1, (const int64_t[]){5}, 11, -1, 1), a[2], b[2];
  OT_ASSERT_OK(ot_run("plain", nested_d2, (void *)nested_plain, 1, &x, 2, a));
  OT_ASSERT_OK(ot_run("ckpt", nested_d2, (void *)nested_loss, 1, &x, 2, b));
  bool ok = ot_expect("d1", &b[0], &a[0]);
  ok &= ot_expect("d2", &b[1], &a[1]);
  assert_true(ok);
  ot_free(&x);
}

/* ---- compositions with vmap ----------------------------------------------------------------------- */
enum { VB = 5, VI = 3, VO = 2 };

static void ex_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user; /* a: w [VI,VO], x [VI]; loss = sum(tanh(x w)^2) + sum(w * x[:, None]) */
  jit_val y = jit_tanh(t, jit_matmul(t, a[1], a[0]));
  jit_val xc = jit_reshape(t, a[1], 2, (const int64_t[]){VI, 1});
  r[0] = jit_add(t, sum_all(t, jit_mul(t, y, y)), sum_all(t, jit_mul(t, a[0], xc)));
}
static void ex_grad(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, ex_loss, user, 2, a, 1, 0, r);
}
/* per-example gradients: vmap over x (axis 0), w shared */
static void per_example(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_vmap(t, ex_grad, user, 2, a, (const int[]){-1, 0}, 2, r, NULL);
}
/* grad of vmap: the loss summed over the batch */
static void batch_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val l;
  jit_vmap(t, ex_loss, user, 2, a, (const int[]){-1, 0}, 1, &l, NULL);
  r[0] = sum_all(t, l);
}
static void grad_of_vmap(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, batch_loss, user, 2, a, 1, 0, r);
}

static void test_vmap_compositions(void **state) {
  (void)state;
  ot_array in[2], pe[2], gv[2];
  in[0] = ot_random(JIT_F64, 2, (const int64_t[]){VI, VO}, 21, -1, 1);
  in[1] = ot_random(JIT_F64, 2, (const int64_t[]){VB, VI}, 22, -1, 1);
  OT_ASSERT_OK(ot_run("per_example", per_example, NULL, 2, in, 2, pe));
  OT_ASSERT_OK(ot_run("grad_of_vmap", grad_of_vmap, NULL, 2, in, 2, gv));
  assert_int_equal(pe[1].rank, 3);
  assert_int_equal(pe[1].shape[0], VB);
  /* a loop of grads, one example at a time */
  ot_array sum = ot_zeros(JIT_F64, 2, (const int64_t[]){VI, VO});
  double total = 0;
  bool ok = true;
  for (int b = 0; b < VB; b++) {
    ot_array ex[2], g[2];
    ex[0] = ot_values(JIT_F64, 2, in[0].shape, in[0].v);
    ex[1] = ot_values(JIT_F64, 1, (const int64_t[]){VI}, in[1].v + b * VI);
    OT_ASSERT_OK(ot_run("one", ex_grad, NULL, 2, ex, 2, g));
    if (fabs(pe[0].v[b] - g[0].v[0]) > 1e-12) ok = false;
    for (int i = 0; i < VI * VO; i++) {
      if (fabs(pe[1].v[b * VI * VO + i] - g[1].v[i]) > 1e-12) ok = false;
      sum.v[i] += g[1].v[i];
    }
    total += g[0].v[0];
    for (int i = 0; i < 2; i++) {
      ot_free(&ex[i]);
      ot_free(&g[i]);
    }
  }
  assert_true(ok);
  ot_array tot = ot_values(JIT_F64, 0, NULL, &total);
  ok = ot_expect("grad of vmap: loss", &gv[0], &tot);
  ok &= ot_expect("grad of vmap: gradient", &gv[1], &sum);
  assert_true(ok);
  for (int i = 0; i < 2; i++) {
    ot_free(&in[i]);
    ot_free(&pe[i]);
  }
}

/* ---- errors --------------------------------------------------------------------------------------- */
static int err_line;
static int err_kind;

static void err_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  switch (err_kind) {
  case 0: r[0] = a[0]; break; /* non-scalar loss */
  case 1: r[0] = jit_convert(t, sum_all(t, a[0]), JIT_I32); break;
  default: /* a shape error inside fn */
    r[0] = jit_add(t, a[0], jit_full(t, JIT_F32, 1, (const int64_t[]){5}, 1)); err_line = __LINE__;
    break;
  }
}

static void err_vg(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val res[3] = {{0}};
  switch (err_kind) {
  case 0:
  case 1:
  case 2: jit_value_and_grad(t, err_loss, NULL, 2, a, 1, 0, res); err_line = err_kind < 2 ? __LINE__ : err_line; break;
  case 3: jit_value_and_grad(t, err_loss, NULL, 2, a, 2, 0, res); err_line = __LINE__; break;
  case 4: jit_value_and_grad(t, err_loss, NULL, 2, a, 1, 0, NULL); err_line = __LINE__; break;
  case 5: jit_value_and_grad(t, NULL, NULL, 2, a, 1, 0, res); err_line = __LINE__; break;
  case 6: jit_value_and_grad(t, err_loss, NULL, 2, a, 0, 0, res); err_line = __LINE__; break;
  case 7: jit_value_and_grad(t, err_loss, NULL, 2, a, 4, 0, res); err_line = __LINE__; break;
  case 8: jit_value_and_grad(t, err_loss, NULL, 2, NULL, 1, 0, res); err_line = __LINE__; break;
  case 9: jit_value_and_grad(t, err_loss, NULL, 2, a, 1, -1, res); err_line = __LINE__; break;
  case 10: jit_checkpoint(t, NULL, NULL, 1, a, 1, res); err_line = __LINE__; break;
  case 11: jit_checkpoint(t, layer, NULL, 1, a, 1, NULL); err_line = __LINE__; break;
  default: jit_checkpoint(t, err_loss, NULL, 2, a, 1, res); break; /* error inside, kind 2's */
  }
  r[0] = res[0];
}

static void test_errors(void **state) {
  (void)state;
  static const struct {
    int kind;
    jit_status st;
    const char *op, *text;
  } want[] = {
      {0, JIT_ESHAPE, "value_and_grad", "must be a scalar, got f32[4]"},
      {1, JIT_EDTYPE, "value_and_grad", "must be a float scalar, got i32[]"},
      {2, JIT_ESHAPE, "add", "f32[4]"},
      {3, JIT_EDTYPE, "value_and_grad", "argument 1 is i32[4]"},
      {4, JIT_EINVAL, "value_and_grad", "results is NULL"},
      {5, JIT_EINVAL, "value_and_grad", "fn is NULL"},
      {6, JIT_EINVAL, "value_and_grad", "wrt_mask is 0"},
      {7, JIT_EINVAL, "value_and_grad", "selects argument 2, but n_args is 2"},
      {8, JIT_EINVAL, "value_and_grad", "args is NULL"},
      {9, JIT_EINVAL, "value_and_grad", "negative count"},
      {10, JIT_EINVAL, "checkpoint", "fn is NULL"},
      {11, JIT_EINVAL, "checkpoint", "results is NULL"},
      {12, JIT_ESHAPE, "add", "f32[4]"},
  };
  ot_array in[2];
  in[0] = ot_values(JIT_F32, 1, (const int64_t[]){4}, (const double[]){1, 2, 3, 4});
  in[1] = ot_values(JIT_I32, 1, (const int64_t[]){4}, (const double[]){1, 2, 3, 4});
  for (int i = 0; i < N_OF(want); i++) {
    int kind = want[i].kind;
    ot_array out;
    err_kind = kind;
    err_line = 0;
    jit_status st = ot_run("errs", err_vg, NULL, 2, in, 1, &out);
    if (st != want[i].st) fail_msg("case %d: %s, want %s (%s)", kind, jit_status_str(st),
                                   jit_status_str(want[i].st), jit_last_error());
    assert_true(ot_error_has(want[i].op, "tests/test_grad.c", err_line));
    assert_true(ot_error_contains(want[i].text));
    assert_true(ot_error_contains("errs: "));
  }
  ot_free(&in[0]);
  ot_free(&in[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vjp_rules),       cmocka_unit_test(test_ties),
      cmocka_unit_test(test_take_along_grad),
      cmocka_unit_test(test_nan_ties),
      cmocka_unit_test(test_pow_zero),        cmocka_unit_test(test_higher_order),
      cmocka_unit_test(test_aux_and_wrt),     cmocka_unit_test(test_dtypes_and_unused),
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_locations),       cmocka_unit_test(test_checkpoint_grad),
      cmocka_unit_test(test_checkpoint_outside_grad), cmocka_unit_test(test_peak_live_bytes),
      cmocka_unit_test(test_checkpoint_nested),
      cmocka_unit_test(test_vmap_compositions), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
