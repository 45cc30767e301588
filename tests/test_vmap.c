/* test_vmap.c: jit_vmap through the public API: every batching rule checked against running the
 * un-vmapped function once per example, dumps of vmapped dots, nested vmap, locations, errors. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/optest.h"
#include "support/roundtrip.h"
#include "trace/trace.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
#define THIS_FILE "tests/test_vmap.c"

/* ---- the per-example functions --------------------------------------------------------------- */
typedef jit_val (*unary_fn)(jit_trace *, jit_val);
typedef jit_val (*binary_fn)(jit_trace *, jit_val, jit_val);
/* the functions themselves (not the location macros): a table of pointers */
static const unary_fn unaries[] = {jit_neg,  jit_abs,      jit_exp, jit_log, jit_sqrt,
                                   jit_rsqrt, jit_tanh,    jit_logistic, jit_sin, jit_cos,
                                   jit_erf,  jit_floor,    jit_relu, jit_log1p, jit_expm1,
                                   jit_ceil, jit_round,    jit_sign, jit_erf_inv};
static const binary_fn binaries[] = {jit_add, jit_sub, jit_mul,  jit_div, jit_max,
                                     jit_min, jit_pow, jit_rem, jit_atan2};

typedef enum {
  F_UNARY, F_BINARY, F_BCAST_ADD, F_WEAK, F_CMP_SELECT, F_CONVERT, F_CONSTS, F_RESHAPE,
  F_TRANSPOSE, F_BROADCAST, F_SLICE, F_CONCAT, F_REDUCE, F_MATMUL, F_DOT_GENERAL, F_MLP,
  F_PASS, F_CHAIN, F_BITS
} fkind;

typedef struct arg_spec {
  jit_dtype dt;
  int rank;
  int64_t d[JIT_MAX_RANK];
} arg_spec;

typedef struct vcase {
  const char *what;
  fkind kind;
  int which; /* index into unaries/binaries */
  int n_args, n_results;
  arg_spec args[4]; /* one example's types */
  int in_axes[4], out_axes[4];
  int64_t batch;
  double lo, hi; /* input range */
} vcase;

static void chain_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user);

static void example(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vcase *c = user;
  switch (c->kind) {
  case F_UNARY: r[0] = unaries[c->which](t, a[0]); break;
  case F_BINARY: r[0] = binaries[c->which](t, a[0], a[1]); break;
  case F_BCAST_ADD: r[0] = jit_add(t, a[0], a[1]); break; /* NumPy broadcasting in the body */
  case F_WEAK: r[0] = jit_add(t, jit_mul(t, a[0], jit_scalar(t, 2)), jit_scalar(t, 1)); break;
  case F_CMP_SELECT:
    r[0] = jit_select(t, jit_cmp(t, JIT_LT, a[0], a[1]), a[0], jit_mul(t, a[1], jit_scalar(t, 3)));
    r[1] = jit_cmp(t, JIT_GE, a[0], a[1]);
    break;
  case F_CONVERT:
    r[0] = jit_convert(t, a[0], JIT_I32);
    r[1] = jit_convert(t, a[0], JIT_F16);
    break;
  case F_CONSTS:
    r[0] = jit_add(t, a[0], jit_iota(t, JIT_F32, 2, (int64_t[]){3, 4}, 1));
    r[1] = jit_full(t, JIT_F32, 1, (int64_t[]){2}, 7); /* unbatched result */
    r[2] = jit_iota(t, JIT_I32, 2, (int64_t[]){2, 3}, 0);
    break;
  case F_RESHAPE:
    r[0] = jit_reshape(t, a[0], 2, (int64_t[]){3, 4});
    r[1] = jit_reshape(t, a[0], 1, (int64_t[]){-1});
    r[2] = jit_reshape(t, jit_reduce_sum(t, a[0], 2, (int[]){0, 1}), 2, (int64_t[]){1, 1});
    r[3] = jit_reshape(t, a[0], 3, (int64_t[]){2, 3, 2}); /* keeps dim 0: no transpose */
    break;
  case F_TRANSPOSE:
    r[0] = jit_transpose(t, a[0], (int[]){2, 0, 1});
    r[1] = jit_transpose(t, a[0], (int[]){1, 0, 2});
    break;
  case F_BROADCAST:
    r[0] = jit_broadcast_to(t, a[0], 3, (int64_t[]){2, 3, 4});
    r[1] = jit_broadcast_to(t, a[1], 2, (int64_t[]){3, 4});
    break;
  case F_SLICE:
    r[0] = jit_slice(t, a[0], (int64_t[]){1, 0}, (int64_t[]){5, 6}, (int64_t[]){2, 3});
    r[1] = jit_slice(t, a[0], (int64_t[]){0, 2}, (int64_t[]){3, 5}, NULL);
    break;
  case F_CONCAT:
    r[0] = jit_concat(t, 3, (jit_val[]){a[0], a[1], a[0]}, 0);
    r[1] = jit_concat(t, 2, (jit_val[]){a[0], a[0]}, -1);
    break;
  case F_REDUCE:
    r[0] = jit_reduce_sum(t, a[0], 2, (int[]){0, 2});
    r[1] = jit_reduce_max(t, a[0], 1, (int[]){1});
    r[2] = jit_reduce_min(t, a[0], 1, (int[]){-1});
    r[3] = jit_reduce_sum(t, a[0], 3, (int[]){2, 1, 0});
    break;
  case F_MATMUL: r[0] = jit_matmul(t, a[0], a[1]); break;
  case F_DOT_GENERAL:
    r[0] = jit_dot_general(t, a[0], a[1], 1, (int[]){0}, (int[]){0}, 1, (int[]){2}, (int[]){1});
    break;
  case F_MLP: {
    jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
    r[0] = jit_reduce_sum(t, jit_mul(t, h, h), 1, (int[]){0});
    r[1] = h;
    break;
  }
  case F_PASS: r[0] = a[0]; r[1] = a[1]; break;
  case F_CHAIN: chain_inner(t, a, r, NULL); break;
  case F_BITS: /* the bitwise ops, shifts and clamp on u32 */
    r[0] = jit_xor(t, jit_shift_left(t, a[0], jit_scalar(t, 3)),
                   jit_shift_right_logical(t, a[1], jit_scalar(t, 2)));
    r[1] = jit_clamp(t, jit_scalar(t, 100), jit_or(t, a[0], jit_not(t, jit_and(t, a[1], a[0]))),
                     jit_shift_right_arithmetic(t, a[1], jit_scalar(t, 1)));
    break;
  }
}

static void vmapped(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const vcase *c = user;
  jit_vmap(t, example, (void *)c, c->n_args, a, c->in_axes, c->n_results, r, c->out_axes);
}

/* ---- host-side slicing ----------------------------------------------------------------------- */

/* a[..., b, ...] with index b taken along axis. */
static ot_array take(const ot_array *a, int axis, int64_t b) {
  int64_t sh[JIT_MAX_RANK], idx[JIT_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < a->rank; i++)
    if (i != axis) sh[rank++] = a->shape[i];
  ot_array r = ot_zeros(a->dt, rank, sh);
  for (int64_t k = 0; k < r.n; k++) {
    int64_t ri[JIT_MAX_RANK];
    ot_unravel(k, rank, sh, ri);
    for (int i = 0, j = 0; i < a->rank; i++) idx[i] = i == axis ? b : ri[j++];
    r.v[k] = a->v[ot_ravel(a->rank, a->shape, idx)];
  }
  return r;
}

static int norm_axis(int ax, int rank) { return ax < 0 ? ax + rank : ax; }

/* Runs vmap(example) on random batched inputs, then example on each slice, and compares. Also
   traces the vmapped function directly and round-trips its IR. */
static bool check_case(const vcase *c, uint64_t seed) {
  ot_array in[4], out[4], ex_in[4], ex_out[4];
  int ax[4];
  bool ok = true;
  for (int i = 0; i < c->n_args; i++) {
    const arg_spec *s = &c->args[i];
    int64_t sh[JIT_MAX_RANK];
    ax[i] = c->in_axes[i] == -1 ? -1 : norm_axis(c->in_axes[i], s->rank + 1);
    int rank = 0;
    for (int d = 0, j = 0; d < s->rank + (ax[i] >= 0); d++)
      sh[rank++] = d == ax[i] ? c->batch : s->d[j++];
    in[i] = ot_random(s->dt, rank, sh, seed + (uint64_t)i, c->lo, c->hi);
  }
  jit_status st = ot_run("vmapped", vmapped, (void *)c, c->n_args, in, c->n_results, out);
  if (st != JIT_OK) {
    print_error("%s: vmapped run failed: %s\n", c->what, jit_last_error());
    ok = false;
    goto free_in;
  }
  for (int64_t b = 0; b < c->batch && ok; b++) {
    for (int i = 0; i < c->n_args; i++)
      ex_in[i] = ax[i] < 0 ? ot_values(in[i].dt, in[i].rank, in[i].shape, in[i].v)
                           : take(&in[i], ax[i], b);
    st = ot_run("example", example, (void *)c, c->n_args, ex_in, c->n_results, ex_out);
    if (st != JIT_OK) {
      print_error("%s: example %lld failed: %s\n", c->what, (long long)b, jit_last_error());
      ok = false;
    }
    for (int j = 0; j < c->n_results && st == JIT_OK; j++) {
      int oax = norm_axis(c->out_axes[j], ex_out[j].rank + 1);
      char what[128];
      snprintf(what, sizeof what, "%s: result %d, example %lld", c->what, j, (long long)b);
      if (out[j].rank != ex_out[j].rank + 1 || out[j].shape[oax] != c->batch) {
        print_error("%s: batched rank %d, batch dim %lld\n", what, out[j].rank,
                    (long long)out[j].shape[oax]);
        ok = false;
        ot_free(&ex_out[j]);
        continue;
      }
      ot_array got = take(&out[j], oax, b);
      ok &= ot_expect(what, &got, &ex_out[j]);
    }
    for (int i = 0; i < c->n_args; i++) ot_free(&ex_in[i]);
  }
  for (int j = 0; j < c->n_results; j++) ot_free(&out[j]);

  /* the traced IR of the vmapped function verifies and round-trips */
  ir_type types[4];
  for (int i = 0; i < c->n_args; i++) {
    memset(&types[i], 0, sizeof types[i]);
    types[i].dtype = in[i].dt;
    types[i].rank = in[i].rank;
    memcpy(types[i].dims, in[i].shape, (size_t)in[i].rank * sizeof *in[i].shape);
  }
  trace_request req = {.name = "vmapped", .fn = vmapped, .user = (void *)c,
                       .n_args = c->n_args, .n_results = c->n_results, .arg_types = types};
  ir_func *f = NULL;
  if (trace_function(&req, &f) != JIT_OK) {
    print_error("%s: trace failed: %s\n", c->what, jit_last_error());
    ok = false;
  } else {
    assert_ir_roundtrip(f);
    ir_func_free(f);
  }
free_in:
  for (int i = 0; i < c->n_args; i++) ot_free(&in[i]);
  return ok;
}

#define A(dt_, ...) {dt_, N_OF(((int64_t[]){__VA_ARGS__})), {__VA_ARGS__}}
#define S(dt_) {dt_, 0, {0}}
#define F32(...) A(JIT_F32, __VA_ARGS__)

/* ---- every batching rule --------------------------------------------------------------------- */

static void test_elementwise(void **state) {
  (void)state;
  bool ok = true;
  for (int k = 0; k < N_OF(unaries); k++) {
    vcase c = {"unary", F_UNARY, k, 1, 1, {F32(3, 4)}, {1}, {0}, 3, 0.25, 2};
    if (unaries[k] == jit_floor || unaries[k] == jit_neg || unaries[k] == jit_relu ||
        unaries[k] == jit_ceil || unaries[k] == jit_round || unaries[k] == jit_sign)
      c.lo = -2;
    if (unaries[k] == jit_erf_inv) c.lo = -0.9, c.hi = 0.9;
    ok &= check_case(&c, (uint64_t)k);
  }
  for (int k = 0; k < N_OF(binaries); k++) {
    vcase both = {"binary, batch at 0 and 1", F_BINARY, k, 2, 1, {F32(3, 4), F32(3, 4)},
                  {0, 1}, {1}, 2, 0.5, 2};
    vcase one = {"binary, rhs unbatched", F_BINARY, k, 2, 1, {F32(3, 4), F32(3, 4)},
                 {1, -1}, {-1}, 3, 0.5, 2};
    vcase lhs = {"binary, lhs unbatched", F_BINARY, k, 2, 1, {F32(4), F32(4)}, {-1, 0}, {0}, 2,
                 0.5, 2};
    ok &= check_case(&both, 10 + (uint64_t)k);
    ok &= check_case(&one, 20 + (uint64_t)k);
    ok &= check_case(&lhs, 30 + (uint64_t)k);
  }
  vcase more[] = {
      {"numpy broadcasting in the body", F_BCAST_ADD, 0, 2, 1, {F32(3, 4), F32(4)}, {1, 0}, {0},
       5, -1, 1},
      {"broadcasting, scalar batched", F_BCAST_ADD, 0, 2, 1, {F32(3, 4), S(JIT_F32)}, {-1, 0},
       {2}, 3, -1, 1},
      {"weak scalars, i32", F_WEAK, 0, 1, 1, {A(JIT_I32, 2, 3)}, {-2}, {0}, 4, -9, 9},
      {"bitwise, shifts, clamp, u32", F_BITS, 0, 2, 2, {A(JIT_U32, 5), A(JIT_U32, 5)}, {0, -1},
       {0, 1}, 3, 0, 4000000000.0},
      {"cmp and select, i32", F_CMP_SELECT, 0, 2, 2, {A(JIT_I32, 5), A(JIT_I32, 5)}, {0, 1},
       {1, 0}, 3, -5, 5},
      {"select, one side unbatched", F_CMP_SELECT, 0, 2, 2, {F32(2, 2), F32(2, 2)}, {-1, 2},
       {-1, 1}, 3, -1, 1},
      {"convert", F_CONVERT, 0, 1, 2, {F32(2, 3)}, {1}, {0, -1}, 4, -20, 20},
      {"consts, iota, full", F_CONSTS, 0, 1, 3, {F32(3, 4)}, {2}, {0, 1, -1}, 2, -1, 1},
  };
  for (int i = 0; i < N_OF(more); i++) ok &= check_case(&more[i], 40 + (uint64_t)i);
  assert_true(ok);
}

static void test_shape_ops(void **state) {
  (void)state;
  vcase cases[] = {
      {"reshape, batch at 1", F_RESHAPE, 0, 1, 4, {F32(2, 6)}, {1}, {0, 1, -1, 1}, 3, -1, 1},
      {"reshape, batch last", F_RESHAPE, 0, 1, 4, {F32(2, 6)}, {2}, {2, 0, 0, 3}, 2, -1, 1},
      {"reshape, batch first", F_RESHAPE, 0, 1, 4, {F32(2, 6)}, {0}, {1, 1, 2, 0}, 2, -1, 1},
      {"transpose, batch in the middle", F_TRANSPOSE, 0, 1, 2, {F32(2, 3, 4)}, {1}, {-1, 0}, 3,
       -1, 1},
      {"transpose, batch last", F_TRANSPOSE, 0, 1, 2, {F32(2, 3, 4)}, {3}, {2, 3}, 2, -1, 1},
      {"broadcast_to, batch at 1 / 0", F_BROADCAST, 0, 2, 2, {F32(3, 1), F32(4)}, {1, 0},
       {0, -1}, 3, -1, 1},
      {"broadcast_to, batch last / unbatched", F_BROADCAST, 0, 2, 2, {F32(3, 1), F32(4)},
       {2, -1}, {3, 1}, 2, -1, 1},
      {"broadcast_to, batch first", F_BROADCAST, 0, 2, 2, {F32(3, 1), F32(1)}, {0, 1}, {1, 2},
       2, -1, 1},
      {"slice with strides, batch last", F_SLICE, 0, 1, 2, {F32(5, 6)}, {2}, {0, 1}, 3, -1, 1},
      {"slice, batch first", F_SLICE, 0, 1, 2, {F32(5, 6)}, {0}, {-1, 2}, 2, -1, 1},
      {"concat, one unbatched", F_CONCAT, 0, 2, 2, {F32(2, 3), F32(4, 3)}, {1, -1}, {0, 1}, 3,
       -1, 1},
      {"chain of shape ops (test_no_moves)", F_CHAIN, 0, 1, 1, {F32(2, 6)}, {1}, {2}, 3, -1, 1},
      {"concat, batch at different axes", F_CONCAT, 0, 2, 2, {F32(2, 3), F32(1, 3)}, {0, 2},
       {-1, 0}, 2, -1, 1},
  };
  bool ok = true;
  for (int i = 0; i < N_OF(cases); i++) ok &= check_case(&cases[i], 100 + (uint64_t)i);
  assert_true(ok);
}

static void test_reductions(void **state) {
  (void)state;
  vcase cases[] = {
      {"reduce, batch at 1", F_REDUCE, 0, 1, 4, {F32(3, 4, 5)}, {1}, {0, 1, -1, 0}, 2, -1, 1},
      {"reduce, batch first", F_REDUCE, 0, 1, 4, {F32(3, 4, 5)}, {0}, {1, 0, 0, -1}, 3, -1, 1},
      {"reduce, batch last, i32", F_REDUCE, 0, 1, 4, {A(JIT_I32, 2, 3, 2)}, {3}, {1, 2, 1, 0}, 3,
       -9, 9},
  };
  bool ok = true;
  for (int i = 0; i < N_OF(cases); i++) ok &= check_case(&cases[i], 200 + (uint64_t)i);
  assert_true(ok);
}

static void test_dots(void **state) {
  (void)state;
  vcase cases[] = {
      {"matmul, both batched", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3, 4)}, {0, 0}, {0}, 3, -1, 1},
      {"matmul, both batched at other axes", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3, 4)}, {2, 1},
       {-1}, 2, -1, 1},
      {"matmul, rhs unbatched", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3, 4)}, {1, -1}, {1}, 3, -1, 1},
      {"matmul, lhs unbatched", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3, 4)}, {-1, 2}, {0}, 3, -1, 1},
      {"matmul, lhs unbatched, out last", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3, 4)}, {-1, 0},
       {2}, 2, -1, 1},
      {"matmul of vectors", F_MATMUL, 0, 2, 1, {F32(3), F32(3, 4)}, {0, 1}, {0}, 3, -1, 1},
      {"matmul, vector rhs", F_MATMUL, 0, 2, 1, {F32(2, 3), F32(3)}, {-1, 0}, {1}, 4, -1, 1},
      {"matmul with its own batch dims", F_MATMUL, 0, 2, 1, {F32(2, 2, 3), F32(2, 3, 4)},
       {1, -1}, {0}, 3, -1, 1},
      {"dot_general with batch dims", F_DOT_GENERAL, 0, 2, 1, {F32(2, 3, 4), F32(2, 4, 5)},
       {1, 3}, {-1}, 2, -1, 1},
      {"dot_general, lhs unbatched", F_DOT_GENERAL, 0, 2, 1, {F32(2, 3, 4), F32(2, 4, 5)},
       {-1, 1}, {1}, 3, -1, 1},
      {"matmul i32", F_MATMUL, 0, 2, 1, {A(JIT_I32, 2, 3), A(JIT_I32, 3, 2)}, {1, 0}, {0}, 3, -9,
       9},
      {"mlp", F_MLP, 0, 3, 2, {F32(4), F32(4, 3), F32(3)}, {0, -1, -1}, {0, 1}, 5, -1, 1},
      {"mlp, all batched", F_MLP, 0, 3, 2, {F32(4), F32(4, 3), F32(3)}, {1, 2, 0}, {-1, 0}, 2,
       -1, 1},
      {"mlp, empty batch", F_MLP, 0, 3, 2, {F32(4), F32(4, 3), F32(3)}, {0, -1, 0}, {0, 1}, 0,
       -1, 1},
      {"pass-through results", F_PASS, 0, 2, 2, {F32(3), F32(2)}, {1, -1}, {0, 1}, 2, -1, 1},
  };
  bool ok = true;
  for (int i = 0; i < N_OF(cases); i++) ok &= check_case(&cases[i], 300 + (uint64_t)i);
  assert_true(ok);
}

/* ---- dumps ----------------------------------------------------------------------------------- */

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void matmul_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_matmul(t, a[0], a[1]);
}

static void vmapped_matmul(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const int *in_axes = user;
  jit_vmap(t, matmul_fn, NULL, 2, a, in_axes, 1, r, NULL);
}

/* Compiles and calls vmap(matmul) with in_axes on random x, w of the given shapes; returns
   the optimized dump (malloc'd). */
static char *dump_of(const int *in_axes, const int64_t *xs, const int64_t *ws, int xr, int wr) {
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "bmm", .n_args = 2, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), vmapped_matmul, (void *)in_axes, &o, &f));
  ot_array x = ot_random(JIT_F32, xr, xs, 1, -1, 1), w = ot_random(JIT_F32, wr, ws, 2, -1, 1);
  jit_array *in[2] = {ot_upload(&x), ot_upload(&w)}, *out[1] = {NULL};
  OT_ASSERT_OK(jit_call(f, in, out));
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  OT_ASSERT_OK(jit_fn_dump(f, NULL, JIT_DUMP_OPTIMIZED, m));
  fclose(m);
  jit_array_free(in[0]);
  jit_array_free(in[1]);
  jit_array_free(out[0]);
  jit_fn_free(f);
  ot_free(&x);
  ot_free(&w);
  return buf;
}

static void test_matmul_dump(void **state) {
  (void)state;
  static const int both[2] = {0, 0}, lhs_only[2] = {0, -1};
  char *d = dump_of(both, (int64_t[]){8, 4, 5}, (int64_t[]){8, 5, 6}, 3, 3);
  if (count(d, " dot ") != 1 || !strstr(d, "batch=[0]x[0] contract=[2]x[1] : f32[8,4,6]") ||
      strstr(d, "concat") || strstr(d, "slice") || strstr(d, "transpose") ||
      strstr(d, "broadcast"))
    fail_msg("vmapped matmul, both batched:\n%s", d);
  free(d);

  /* one batched operand: its batch dim is a free dim of the dot, the weights are not copied */
  d = dump_of(lhs_only, (int64_t[]){8, 4, 5}, (int64_t[]){5, 6}, 3, 2);
  if (count(d, " dot ") != 1 || !strstr(d, "contract=[2]x[0] : f32[8,4,6]") ||
      strstr(d, "batch=") || strstr(d, "broadcast") || strstr(d, "concat"))
    fail_msg("vmapped matmul, rhs unbatched:\n%s", d);
  free(d);
}

/* ---- nested vmap ----------------------------------------------------------------------------- */

static void inner_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  /* x: f32[3], w: f32[3,2] -> tanh(x @ w) * sum(x) */
  jit_val y = jit_tanh(t, jit_matmul(t, a[0], a[1]));
  r[0] = jit_mul(t, y, jit_reduce_sum(t, a[0], 1, (int[]){0}));
}

static void middle_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  /* x: f32[B2,3] (batch at 0), w: f32[3,2] shared */
  jit_vmap(t, inner_fn, NULL, 2, a, (int[]){0, -1}, 1, r, (int[]){1});
}

static void outer_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  /* x: f32[3,B1,B2] (outer batch at 1), w: f32[B1,3,2] (outer batch at 0) */
  jit_val x = jit_transpose(t, a[0], (int[]){1, 2, 0}); /* [B1,B2,3] */
  jit_vmap(t, middle_fn, NULL, 2, (jit_val[]){x, a[1]}, (int[]){0, 0}, 1, r, (int[]){-1});
}

static void test_nested(void **state) {
  (void)state;
  enum { B1 = 2, B2 = 3 };
  ot_array x = ot_random(JIT_F32, 3, (int64_t[]){3, B1, B2}, 7, -1, 1);
  ot_array w = ot_random(JIT_F32, 3, (int64_t[]){B1, 3, 2}, 8, -1, 1);
  ot_array out;
  OT_ASSERT_OK(ot_run("nested", outer_fn, NULL, 2, (ot_array[]){x, w}, 1, &out));
  /* middle gives [2,B2] (batch at 1), outer puts B1 last: [2,B2,B1] */
  assert_int_equal(out.rank, 3);
  assert_int_equal(out.shape[0], 2);
  assert_int_equal(out.shape[1], B2);
  assert_int_equal(out.shape[2], B1);
  bool ok = true;
  for (int i = 0; i < B1; i++) {
    ot_array xi = take(&x, 1, i), wi = take(&w, 0, i), oi = take(&out, 2, i);
    for (int j = 0; j < B2; j++) {
      ot_array xij = take(&xi, 1, j), want, got = take(&oi, 1, j);
      OT_ASSERT_OK(ot_run("inner", inner_fn, NULL, 2, (ot_array[]){xij, wi}, 1, &want));
      char what[64];
      snprintf(what, sizeof what, "nested [%d,%d]", i, j);
      ok &= ot_expect(what, &got, &want);
      ot_free(&xij);
    }
    ot_free(&xi);
    ot_free(&wi);
    ot_free(&oi);
  }
  ot_free(&x);
  ot_free(&w);
  ot_free(&out);
  assert_true(ok);
}

/* ---- where the batch dim goes ---------------------------------------------------------------- */

static void chain_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y = jit_reshape(t, jit_exp(t, a[0]), 3, (int64_t[]){2, 3, 2});
  y = jit_reduce_sum(t, y, 1, (int[]){2});                                      /* [2,3] */
  y = jit_slice(t, y, (int64_t[]){0, 1}, (int64_t[]){2, 3}, NULL);              /* [2,2] */
  y = jit_transpose(t, jit_mul(t, y, jit_scalar(t, 2)), (int[]){1, 0});         /* [2,2] */
  r[0] = jit_broadcast_to(t, y, 3, (int64_t[]){4, 2, 2});
}

static void chain_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_vmap(t, chain_inner, NULL, 1, a, (int[]){1}, 1, r, (int[]){2});
}

/* The batch dim stays at 1 through exp, a reshape that keeps dim 0, the reduction, the slice and
   the transpose, and the broadcast puts it at 2 = out_axes: no transpose but the body's own,
   broadcast of a batched value but the body's own (the scalar 2, unbatched, is broadcast to
   the batched shape: canonicalize merges that chain). */
static void test_no_moves(void **state) {
  (void)state;
  ir_type ty = {.dtype = JIT_F32, .rank = 3, .dims = {2, 5, 6}};
  trace_request req = {.name = "chain", .fn = chain_outer, .n_args = 1, .n_results = 1,
                       .arg_types = &ty};
  ir_func *f = NULL;
  OT_ASSERT_OK(trace_function(&req, &f));
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  if (count(text, "transpose") != 1 || count(text, "broadcast") != 3 ||
      !strstr(text, "reshape %1 : f32[2,5,3,2]") ||
      !strstr(text, "broadcast %9 dims=[1,2,3] : f32[4,2,5,2]"))
    fail_msg("traced:\n%s", text);
  free(text);
  ir_func_free(f);
}

/* ---- static args and queries inside fn ------------------------------------------------------- */

static void static_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  size_t len = 0;
  const void *bytes = jit_trace_static_args(t, &len);
  const int64_t *sh = jit_val_shape(t, a[0]);
  /* fn sees one example (f32[3]) and the parent's static bytes */
  double k;
  if (!bytes || len != sizeof k || jit_val_rank(t, a[0]) != 1 || !sh || sh[0] != 3) {
    jit_trace_fail(t, "wrong view inside vmap");
    return;
  }
  memcpy(&k, bytes, sizeof k);
  r[0] = jit_mul(t, a[0], jit_scalar(t, k));
}

static void static_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_vmap(t, static_inner, NULL, 1, a, (int[]){1}, 1, r, NULL);
}

static void test_static_args(void **state) {
  (void)state;
  double k = 2.5;
  ot_array x = ot_random(JIT_F32, 2, (int64_t[]){3, 4}, 3, -1, 1), out;
  OT_ASSERT_OK(ot_run_static("static", static_outer, NULL, &k, sizeof k, 1, &x, 1, &out));
  ot_array want = ot_zeros(JIT_F32, 2, (int64_t[]){4, 3});
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) want.v[i * 3 + j] = x.v[j * 4 + i] * k;
  bool ok = ot_expect("static args", &out, &want);
  ot_free(&x);
  assert_true(ok);
}

/* ---- locations ------------------------------------------------------------------------------- */

static int loc_op_line, loc_vmap_line;
static void loc_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val e;
  loc_op_line = __LINE__; e = jit_exp(t, a[0]); r[0] = jit_reduce_sum(t, e, 1, (int[]){0});
  r[1] = e;
}
static void loc_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  loc_vmap_line = __LINE__; jit_vmap(t, loc_inner, NULL, 1, a, (int[]){1}, 2, r, NULL);
}

/* The traced IR shows plain ops; the ops of fn carry fn's line, the moves the vmap's line. */
static void test_locations(void **state) {
  (void)state;
  ir_type ty = {.dtype = JIT_F32, .rank = 2, .dims = {4, 3}};
  trace_request req = {.name = "loc", .fn = loc_outer, .n_args = 1, .n_results = 2,
                       .arg_types = &ty};
  ir_func *f = NULL;
  OT_ASSERT_OK(trace_function(&req, &f));
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  char want_op[64], want_vmap[64];
  snprintf(want_op, sizeof want_op, "# %s:%d", THIS_FILE, loc_op_line);
  snprintf(want_vmap, sizeof want_vmap, "# %s:%d", THIS_FILE, loc_vmap_line);
  /* exp and the reduction come from fn (the batch dim stays at 1, no transpose before the
     reduction); exp's result is moved to out_axes 0 at the vmap */
  bool ok = strstr(text, "exp %0 : f32[4,3]") && strstr(text, "reduce_sum %1 axes=[0] : f32[3]") &&
            strstr(text, "transpose %1 perm=[1,0] : f32[3,4]") && count(text, want_op) == 2 &&
            count(text, want_vmap) == 1 && f->n_ins == 4;
  if (!ok) fail_msg("traced:\n%s", text);
  free(text);
  ir_func_free(f);
}

/* ---- errors ---------------------------------------------------------------------------------- */

typedef enum {
  E_IN_AXIS, E_IN_AXIS_NEG, E_OUT_AXIS, E_SIZES, E_NO_BATCHED, E_NO_ARGS, E_NULL_FN, E_NULL_ARGS,
  E_NULL_RESULTS, E_NEG_COUNT, E_INSIDE, E_UNSET, E_RANK, E_FOREIGN, E_INVALID_ARG, E_NESTED_INSIDE
} emode;

static int err_line, inner_line;
static emode cur_mode;
static jit_val outer_val;
static bool result_left_set; /* a failed vmap must invalidate its results */
#define L(stmt) (err_line = __LINE__, stmt)

static void bad_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  static const int64_t five[1] = {5}, rank8[8] = {1, 1, 1, 1, 1, 1, 1, 3};
  switch (cur_mode) {
  case E_INSIDE: {
    jit_val i = jit_iota(t, JIT_F32, 1, five, 0);
    inner_line = __LINE__; r[0] = jit_add(t, a[0], i);
    break;
  }
  case E_UNSET: break;
  case E_RANK: inner_line = __LINE__; r[0] = jit_broadcast_to(t, a[0], 8, rank8); break;
  case E_FOREIGN: inner_line = __LINE__; r[0] = jit_add(t, a[0], outer_val); break;
  default: r[0] = jit_neg(t, a[0]); break;
  }
}

static void nested_bad(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  cur_mode = E_INSIDE;
  jit_vmap(t, bad_inner, NULL, 1, a, NULL, 1, r, NULL);
}

static void err_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val two[2] = {a[0], a[1]};
  r[0] = (jit_val){12345};
  switch (cur_mode) {
  case E_IN_AXIS: L(jit_vmap(t, bad_inner, NULL, 1, a, (int[]){2}, 1, r, NULL)); break;
  case E_IN_AXIS_NEG: L(jit_vmap(t, bad_inner, NULL, 1, a, (int[]){-3}, 1, r, NULL)); break;
  case E_OUT_AXIS: L(jit_vmap(t, bad_inner, NULL, 1, a, NULL, 1, r, (int[]){2})); break;
  case E_SIZES: L(jit_vmap(t, bad_inner, NULL, 2, two, (int[]){0, 1}, 1, r, NULL)); break;
  case E_NO_BATCHED: L(jit_vmap(t, bad_inner, NULL, 1, a, (int[]){-1}, 1, r, NULL)); break;
  case E_NO_ARGS: L(jit_vmap(t, bad_inner, NULL, 0, NULL, NULL, 1, r, NULL)); break;
  case E_NULL_FN: L(jit_vmap(t, NULL, NULL, 1, a, NULL, 1, r, NULL)); break;
  case E_NULL_ARGS: L(jit_vmap(t, bad_inner, NULL, 1, NULL, NULL, 1, r, NULL)); break;
  case E_NULL_RESULTS: L(jit_vmap(t, bad_inner, NULL, 1, a, NULL, 1, NULL, NULL)); break;
  case E_NEG_COUNT: L(jit_vmap(t, bad_inner, NULL, -1, a, NULL, 1, r, NULL)); break;
  case E_INSIDE:
  case E_UNSET:
  case E_RANK: L(jit_vmap(t, bad_inner, NULL, 1, a, NULL, 1, r, NULL)); break;
  case E_FOREIGN:
    outer_val = a[1];
    L(jit_vmap(t, bad_inner, NULL, 1, a, NULL, 1, r, NULL));
    break;
  case E_INVALID_ARG:
    two[1] = (jit_val){0};
    L(jit_vmap(t, bad_inner, NULL, 2, two, NULL, 1, r, NULL));
    break;
  case E_NESTED_INSIDE: L(jit_vmap(t, nested_bad, NULL, 1, a, NULL, 1, r, NULL)); break;
  }
  result_left_set = cur_mode != E_NULL_RESULTS && r[0].id != 0;
}

typedef struct err_case {
  emode mode;
  jit_status want;
  arg_spec x, y;
  const char *msg; /* %d: the vmap's line (then the inner op's line, when there are two) */
} err_case;

static void test_errors(void **state) {
  (void)state;
  static const err_case cases[] = {
      {E_IN_AXIS, JIT_ESHAPE, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: in_axes[0] = 2 out of range for arg 0 of type f32[4,3] "
       "(-1: not batched)"},
      {E_IN_AXIS_NEG, JIT_ESHAPE, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: in_axes[0] = -3 out of range for arg 0 of type f32[4,3] "
       "(-1: not batched)"},
      {E_OUT_AXIS, JIT_ESHAPE, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: out_axes[0] = 2 out of range for result 0 of type f32[3]"},
      {E_SIZES, JIT_ESHAPE, F32(4, 3), F32(2, 3),
       "errfn: vmap at " THIS_FILE ":%d: batched args disagree on the batch size: arg 0 has 4 at "
       "axis 0, arg 1 has 3 at axis 1"},
      {E_NO_BATCHED, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: no batched argument (every in_axes entry is -1)"},
      {E_NO_ARGS, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: no batched argument (n_args is 0)"},
      {E_NULL_FN, JIT_EINVAL, F32(4, 3), F32(4), "errfn: vmap at " THIS_FILE ":%d: fn is NULL"},
      {E_NULL_ARGS, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: args is NULL (n_args = 1)"},
      {E_NULL_RESULTS, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: results is NULL (n_results = 1)"},
      {E_NEG_COUNT, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: negative count (n_args -1, n_results 1)"},
      {E_INSIDE, JIT_ESHAPE, F32(4, 3), F32(4),
       "errfn: add at " THIS_FILE ":%d: shapes do not broadcast: f32[3] vs f32[5]"},
      {E_UNSET, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: result 0 was not set"},
      {E_RANK, JIT_ESHAPE, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: broadcast at " THIS_FILE
       ":%d: batching f32[1,1,1,1,1,1,1,3] would need rank 9 (at most 8)"},
      {E_FOREIGN, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: add at " THIS_FILE ":%d: rhs is a value of the enclosing trace, not of vmap's "
       "function (pass it as an argument)"},
      {E_INVALID_ARG, JIT_EINVAL, F32(4, 3), F32(4),
       "errfn: vmap at " THIS_FILE ":%d: argument 1 is an invalid value (id 0)"},
      {E_NESTED_INSIDE, JIT_ESHAPE, F32(4, 5, 3), F32(4),
       "errfn: add at " THIS_FILE ":%d: shapes do not broadcast: f32[3] vs f32[5]"},
  };
  bool ok = true;
  for (int i = 0; i < N_OF(cases); i++) {
    const err_case *c = &cases[i];
    cur_mode = c->mode;
    err_line = inner_line = -1;
    ot_array in[2] = {ot_random(c->x.dt, c->x.rank, c->x.d, 1, -1, 1),
                      ot_random(c->y.dt, c->y.rank, c->y.d, 2, -1, 1)};
    ot_array out[1];
    jit_status st = ot_run("errfn", err_fn, NULL, 2, in, 1, out);
    char want[512];
    bool inner_first = c->mode == E_INSIDE || c->mode == E_FOREIGN || c->mode == E_NESTED_INSIDE;
    if (c->mode == E_RANK)
      snprintf(want, sizeof want, c->msg, err_line, inner_line);
    else
      snprintf(want, sizeof want, c->msg, inner_first ? inner_line : err_line);
    const char *got = jit_last_error();
    bool this_ok = st == c->want && !result_left_set && strcmp(got, want) == 0;
    if (!this_ok) {
      print_error("case %d: status %s (want %s)\n  got  '%s'\n  want '%s'\n", i,
                  jit_status_str(st), jit_status_str(c->want), got, want);
      ok = false;
    }
    ot_free(&in[0]);
    ot_free(&in[1]);
  }
  assert_true(ok);
}

/* A NULL trace: nothing happens, the results are invalidated. */
static void test_null_trace(void **state) {
  (void)state;
  jit_val x = {5}, res[2] = {{3}, {4}};
  jit_vmap(NULL, matmul_fn, NULL, 1, &x, NULL, 2, res, NULL);
  assert_int_equal(res[0].id, 0);
  assert_int_equal(res[1].id, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise), cmocka_unit_test(test_shape_ops),
      cmocka_unit_test(test_reductions),  cmocka_unit_test(test_dots),
      cmocka_unit_test(test_matmul_dump), cmocka_unit_test(test_nested),
      cmocka_unit_test(test_locations),   cmocka_unit_test(test_errors),
      cmocka_unit_test(test_null_trace),  cmocka_unit_test(test_static_args),
      cmocka_unit_test(test_no_moves),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
