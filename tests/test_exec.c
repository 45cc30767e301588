/* test_exec.c: the executor end to end through jit_call: dots as matmul kernels (many shapes,
 * dtypes and layouts, against opt_level 0 and across thread counts), their epilogues, the typed
 * entry, and the disk cache across processes (hits, corrupt entries, concurrent compiles). */
#define _GNU_SOURCE /* open_memstream, mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/ir.h"
#include "support/optest.h"
#include "tjit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- random data ------------------------------------------------------------------------------- */
static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int64_t numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* Floats uniform in (-1, 1); ints small, so that i8 sums stay readable (they wrap alike anyway). */
static void *random_data(jit_dtype dt, int64_t n, uint64_t seed) {
  void *buf = malloc((size_t)(n ? n : 1) * jit_dtype_size(dt));
  assert_non_null(buf);
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = rng(&s);
    if (ir_dtype_is_float(dt)) ir_store_f64(dt, buf, i, (double)(r >> 11) * 0x1p-52 - 1.0);
    else if (dt == JIT_U8) ir_store_i64(dt, buf, i, (int64_t)(r % 6));
    else ir_store_i64(dt, buf, i, (int64_t)(r % 9) - 4);
  }
  return buf;
}

static jit_array *upload(jit_ctx *ctx, jit_dtype dt, int rank, const int64_t *shape, const void *d) {
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, dt, rank, shape, d, &a), JIT_OK);
  return a;
}

static void *download(const jit_array *a) {
  size_t n = (size_t)numel(jit_array_rank(a), jit_array_shape(a)) * jit_dtype_size(jit_array_dtype(a));
  void *buf = malloc(n ? n : 1);
  assert_non_null(buf);
  assert_int_equal(jit_array_to_host(a, buf, n), JIT_OK);
  return buf;
}

/* f's LLVM dump for args (a compiled signature), as a string the caller frees */
static char *llvm_dump(jit_fn *f, jit_array *const *args) {
  char *text = NULL;
  size_t len = 0;
  FILE *ms = open_memstream(&text, &len);
  assert_non_null(ms);
  assert_int_equal(jit_fn_dump(f, args, JIT_DUMP_LLVM, ms), JIT_OK);
  fclose(ms);
  return text;
}

/* ---- contexts ------------------------------------------------------------------------------------ */
static jit_ctx *ctx2, *ctx1, *ctx0; /* opt 3 with 2 threads, opt 3 with 1 thread, opt 0 */

static int ctx_setup(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2;
  o.cache_dir = "";
  if (jit_ctx_create(&o, &ctx2) != JIT_OK) return -1;
  o.n_threads = 1;
  if (jit_ctx_create(&o, &ctx1) != JIT_OK) return -1;
  o.opt_level = 0;
  if (jit_ctx_create(&o, &ctx0) != JIT_OK) return -1;
  return 0;
}

static int ctx_teardown(void **state) {
  (void)state;
  jit_ctx_destroy(ctx2);
  jit_ctx_destroy(ctx1);
  jit_ctx_destroy(ctx0);
  return 0;
}

/* ---- dot cases ----------------------------------------------------------------------------------- */
typedef enum {
  EPI_NONE, EPI_BIAS_RELU, EPI_BOTH, EPI_ABS_IN,
  EPI_BIAS,      /* dot + bias */
  EPI_BIAS_TANH, /* tanh(dot + bias) */
  EPI_CONST,     /* max(dot * 0.5 + bias, -1) + 1: scalar constants */
  EPI_RESID      /* dot + r, r the size of the result (2-d cases only) */
} epi_kind;

typedef struct dot_case {
  int lr, rr;                   /* ranks */
  int64_t ls[4], rs[4];         /* shapes */
  int nb, lb[2], rb[2];         /* batch dims */
  int nc, lc[2], rc[2];         /* contracting dims */
} dot_case;

typedef struct dot_run {
  const dot_case *c;
  epi_kind epi;
} dot_run;

/* The dot; EPI_BIAS_RELU: relu(dot + bias) (bias over the last dim); EPI_BOTH: the dot and
   dot * 2 + bias; EPI_ABS_IN: dot(|a|, |b|) (the magnitude the tolerance scales with). */
static void dot_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const dot_run *u = user;
  const dot_case *c = u->c;
  jit_val x = a[0], y = a[1];
  if (u->epi == EPI_ABS_IN) {
    x = jit_abs(t, x);
    y = jit_abs(t, y);
  }
  jit_val d = jit_dot_general(t, x, y, c->nb, c->lb, c->rb, c->nc, c->lc, c->rc);
  if (u->epi == EPI_BIAS_RELU) {
    r[0] = jit_relu(t, jit_add(t, d, a[2]));
  } else if (u->epi == EPI_BIAS) {
    r[0] = jit_add(t, d, a[2]);
  } else if (u->epi == EPI_BIAS_TANH) {
    r[0] = jit_tanh(t, jit_add(t, d, a[2]));
  } else if (u->epi == EPI_CONST) {
    jit_val y = jit_add(t, jit_mul(t, d, jit_scalar(t, 0.5)), a[2]);
    r[0] = jit_add(t, jit_max(t, y, jit_scalar(t, -1.0)), jit_scalar(t, 1.0));
  } else if (u->epi == EPI_RESID) {
    r[0] = jit_add(t, d, a[2]);
  } else if (u->epi == EPI_BOTH) {
    r[0] = d;
    r[1] = jit_add(t, jit_mul(t, d, jit_scalar(t, 2.0)), a[2]);
  } else {
    r[0] = d;
  }
}

static int n_results_of(epi_kind e) { return e == EPI_BOTH ? 2 : 1; }

/* Runs the case on ctx with the given data; returns the results (malloc'd) and their shape. */
static void run_case(jit_ctx *ctx, const dot_run *u, jit_dtype dt, void *const *data,
                     const int64_t *bias_shape, void **out, int *out_rank, int64_t *out_shape) {
  const dot_case *c = u->c;
  int nr = n_results_of(u->epi);
  jit_array *args[3] = {upload(ctx, dt, c->lr, c->ls, data[0]), upload(ctx, dt, c->rr, c->rs, data[1]),
                        NULL};
  int n_args = 2;
  if (u->epi == EPI_RESID) {
    int64_t rs[2] = {c->ls[0], c->rs[1]};
    args[2] = upload(ctx, dt, 2, rs, data[2]);
    n_args = 3;
  } else if (u->epi != EPI_NONE && u->epi != EPI_ABS_IN) {
    args[2] = upload(ctx, dt, 1, bias_shape, data[2]);
    n_args = 3;
  }
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "dot", .n_args = n_args, .n_results = nr};
  assert_int_equal(jit_compile(ctx, dot_fn, (void *)u, &o, &f), JIT_OK);
  jit_array *res[2] = {NULL, NULL};
  jit_status st = jit_call(f, args, res);
  if (st != JIT_OK) fprintf(stderr, "jit_call: %s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  for (int i = 0; i < nr; i++) {
    out[i] = download(res[i]);
    if (i == 0) {
      *out_rank = jit_array_rank(res[0]);
      memcpy(out_shape, jit_array_shape(res[0]), (size_t)*out_rank * sizeof *out_shape);
    }
    jit_array_free(res[i]);
  }
  /* a warm call of the same signature gives the same bytes */
  assert_int_equal(jit_call(f, args, res), JIT_OK);
  for (int i = 0; i < nr; i++) {
    void *again = download(res[i]);
    int64_t n = numel(jit_array_rank(res[i]), jit_array_shape(res[i]));
    if (n > 0) assert_memory_equal(again, out[i], (size_t)n * jit_dtype_size(dt));
    free(again);
    jit_array_free(res[i]);
  }
  jit_fn_free(f);
  for (int i = 0; i < n_args; i++) jit_array_free(args[i]);
}

static double eps_result(jit_dtype dt) {
  switch (dt) {
  case JIT_F16: return 0x1p-10;
  case JIT_BF16: return 0x1p-7;
  case JIT_F32: return 0x1p-23;
  case JIT_F64: return 0x1p-52;
  default: return 0;
  }
}

/* Compiled (2 threads) vs compiled (1 thread): bit-identical; vs the interpreter: exact for ints,
   for floats within a result rounding plus K accumulation roundings of the magnitude. */
static bool check_case(const dot_case *c, jit_dtype dt, epi_kind epi, uint64_t seed) {
  dot_run u = {c, epi}, um = {c, EPI_ABS_IN};
  int64_t k = 1;
  for (int i = 0; i < c->nc; i++) k *= c->ls[c->lc[i]];
  void *data[3] = {random_data(dt, numel(c->lr, c->ls), seed),
                   random_data(dt, numel(c->rr, c->rs), seed + 1), NULL};
  /* the bias runs along the result's last dim */
  int64_t n_last = 1;
  if (c->rr > c->nb + c->nc) {
    bool used[4] = {false};
    for (int i = 0; i < c->nb; i++) used[c->rb[i]] = true;
    for (int i = 0; i < c->nc; i++) used[c->rc[i]] = true;
    for (int i = c->rr - 1; i >= 0; i--)
      if (!used[i]) {
        n_last = c->rs[i];
        break;
      }
  } else if (c->lr > c->nb + c->nc) {
    bool used[4] = {false};
    for (int i = 0; i < c->nb; i++) used[c->lb[i]] = true;
    for (int i = 0; i < c->nc; i++) used[c->lc[i]] = true;
    for (int i = c->lr - 1; i >= 0; i--)
      if (!used[i]) {
        n_last = c->ls[i];
        break;
      }
  }
  int64_t bias_shape[1] = {n_last};
  data[2] = random_data(dt, epi == EPI_RESID ? c->ls[0] * c->rs[1] : n_last, seed + 2);
  void *r2[2] = {0}, *r1[2] = {0}, *r0[2] = {0}, *mag[1] = {0};
  int rank = 0, rank1 = 0, rank0 = 0, rankm = 0;
  int64_t shape[JIT_MAX_RANK], shape1[JIT_MAX_RANK], shape0[JIT_MAX_RANK], shapem[JIT_MAX_RANK];
  run_case(ctx2, &u, dt, data, bias_shape, r2, &rank, shape);
  run_case(ctx1, &u, dt, data, bias_shape, r1, &rank1, shape1);
  run_case(ctx0, &u, dt, data, bias_shape, r0, &rank0, shape0);
  run_case(ctx0, &um, dt, data, bias_shape, mag, &rankm, shapem);
  assert_int_equal(rank, rank0);
  assert_int_equal(rank, rank1);
  assert_memory_equal(shape, shape0, (size_t)rank * sizeof *shape);
  int64_t n = numel(rank, shape);
  bool ok = true;
  char what[160];
  snprintf(what, sizeof what, "%s [%lld %lld %lld %lld]x[%lld %lld %lld %lld] epi %d",
           jit_dtype_name(dt), (long long)c->ls[0], (long long)c->ls[1], (long long)c->ls[2],
           (long long)c->ls[3], (long long)c->rs[0], (long long)c->rs[1], (long long)c->rs[2],
           (long long)c->rs[3], (int)epi);
  for (int r = 0; r < n_results_of(epi); r++) {
    if (n > 0 && memcmp(r2[r], r1[r], (size_t)n * jit_dtype_size(dt)) != 0) {
      fprintf(stderr, "%s: result %d differs between 1 and 2 threads\n", what, r);
      ok = false;
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double g = ir_load_f64(dt, r2[r], i), w = ir_load_f64(dt, r0[r], i);
      double m = fabs(ir_load_f64(dt, mag[0], i)) * (r == 1 ? 2 : 1) + 2.0;
      double tol = ir_dtype_is_float(dt)
                       ? eps_result(dt) * (fabs(w) + 1.0) * 2 +
                             (double)(k + 2) * (dt == JIT_F64 ? 0x1p-53 : 0x1p-24) * m
                       : 0;
      bool same = ir_dtype_is_float(dt) ? fabs(g - w) <= tol
                                        : ir_load_i64(dt, r2[r], i) == ir_load_i64(dt, r0[r], i);
      if (!same && bad++ == 0)
        fprintf(stderr, "%s: result %d [%lld]: compiled %.9g, interpreter %.9g (tol %.3g)\n", what, r,
                (long long)i, g, w, tol);
    }
    if (bad) {
      fprintf(stderr, "%s: %d of %lld elements differ\n", what, bad, (long long)n);
      ok = false;
    }
  }
  for (int r = 0; r < 2; r++) {
    free(r2[r]);
    free(r1[r]);
    free(r0[r]);
  }
  free(mag[0]);
  for (int i = 0; i < 3; i++) free(data[i]);
  return ok;
}

static const dot_case cases[] = {
    /* 0: 1 x 1 x 1 */
    {2, 2, {1, 1}, {1, 1}, 0, {0}, {0}, 1, {1}, {0}},
    /* 1: primes */
    {2, 2, {7, 13}, {13, 5}, 0, {0}, {0}, 1, {1}, {0}},
    /* 2: just past the tile sizes */
    {2, 2, {33, 65}, {65, 17}, 0, {0}, {0}, 1, {1}, {0}},
    /* 3: large enough to be split over threads, not a multiple of any block */
    {2, 2, {129, 300}, {300, 257}, 0, {0}, {0}, 1, {1}, {0}},
    /* 4: K past one K block */
    {2, 2, {20, 1500}, {1500, 40}, 0, {0}, {0}, 1, {1}, {0}},
    /* 5: transposed lhs (contract its dim 0) */
    {2, 2, {37, 19}, {37, 23}, 0, {0}, {0}, 1, {0}, {0}},
    /* 6: transposed rhs (contract its dim 1) */
    {2, 2, {19, 37}, {23, 37}, 0, {0}, {0}, 1, {1}, {1}},
    /* 7: batch in front */
    {3, 3, {3, 17, 29}, {3, 29, 11}, 1, {0}, {0}, 1, {2}, {1}},
    /* 8: batch dims elsewhere */
    {3, 3, {17, 3, 29}, {29, 11, 3}, 1, {1}, {2}, 1, {2}, {0}},
    /* 9: two contracting dims */
    {3, 3, {5, 6, 7}, {6, 7, 4}, 0, {0}, {0}, 2, {1, 2}, {0, 1}},
    /* 10: vector x matrix */
    {1, 2, {64}, {64, 33}, 0, {0}, {0}, 1, {0}, {0}},
    /* 11: matrix x vector */
    {2, 1, {33, 64}, {64}, 0, {0}, {0}, 1, {1}, {0}},
    /* 12: vector . vector */
    {1, 1, {100}, {100}, 0, {0}, {0}, 1, {0}, {0}},
    /* 13: many rows (split in whole cache blocks) */
    {2, 2, {600, 64}, {64, 96}, 0, {0}, {0}, 1, {1}, {0}},
    /* 14: nothing contracted over (K = 0): zeros */
    {2, 2, {4, 0}, {0, 5}, 0, {0}, {0}, 1, {1}, {0}},
    /* 15: no rows */
    {2, 2, {0, 5}, {5, 3}, 0, {0}, {0}, 1, {1}, {0}},
    /* 16: batched with two free dims on each side and a batch of 2 split over threads */
    {4, 3, {2, 9, 8, 70}, {2, 70, 90}, 1, {0}, {0}, 1, {3}, {1}},
};

static void test_dot_f32(void **state) {
  (void)state;
  bool ok = true;
  for (int i = 0; i < N_OF(cases); i++) ok &= check_case(&cases[i], JIT_F32, EPI_NONE, 100 + i);
  assert_true(ok);
}

static void test_dot_dtypes(void **state) {
  (void)state;
  const jit_dtype dts[] = {JIT_F64, JIT_F16, JIT_BF16, JIT_I8, JIT_U8, JIT_I32, JIT_I64};
  const int some[] = {1, 2, 4, 6, 8, 9, 11, 14};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    for (int i = 0; i < N_OF(some); i++) ok &= check_case(&cases[some[i]], dts[d], EPI_NONE, 200 + i);
    /* split over threads: one 8-byte and one 1-byte dtype are enough next to f32 */
    if (dts[d] == JIT_F64 || dts[d] == JIT_I8) ok &= check_case(&cases[3], dts[d], EPI_NONE, 250);
  }
  assert_true(ok);
}

static void test_dot_epilogues(void **state) {
  (void)state;
  const int f32_cases[] = {0, 1, 3, 4, 7, 10, 13, 16}, other_cases[] = {0, 1, 4, 7, 10};
  const jit_dtype dts[] = {JIT_F32, JIT_F16, JIT_I32};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++) {
    const int *some = d == 0 ? f32_cases : other_cases;
    int n = d == 0 ? N_OF(f32_cases) : N_OF(other_cases);
    for (int i = 0; i < n; i++) {
      ok &= check_case(&cases[some[i]], dts[d], EPI_BIAS_RELU, 300 + i);
      ok &= check_case(&cases[some[i]], dts[d], EPI_BOTH, 400 + i);
    }
  }
  assert_true(ok);
}

/* Epilogues fused into the matmul's store: each kind, several dtypes, whole and edge tiles. */
static void test_dot_fused_epilogues(void **state) {
  (void)state;
  const int some[] = {1, 3, 4, 7};
  const epi_kind kinds[] = {EPI_BIAS, EPI_BIAS_TANH, EPI_CONST};
  const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_BF16};
  bool ok = true;
  for (int d = 0; d < N_OF(dts); d++)
    for (int e = 0; e < N_OF(kinds); e++)
      for (int i = 0; i < N_OF(some); i++) {
        if (dts[d] != JIT_F32 && some[i] == 3) continue;
        ok &= check_case(&cases[some[i]], dts[d], kinds[e], 500 + i);
      }
  /* 2-d cases only for the residual (its shape is [lhs rows, rhs cols]) */
  const int two_d[] = {1, 2, 4};
  for (int d = 0; d < N_OF(dts); d++)
    for (int i = 0; i < N_OF(two_d); i++) ok &= check_case(&cases[two_d[i]], dts[d], EPI_RESID, 600 + i);
  ok &= check_case(&cases[3], JIT_F32, EPI_RESID, 700);
  ok &= check_case(&cases[2], JIT_I32, EPI_RESID, 702);
  ok &= check_case(&cases[3], JIT_I32, EPI_BIAS, 701);
  assert_true(ok);
}

/* ---- epilogue programs on the precompiled core (codegen/core_dot.h) ------------------------------ */

enum { N_PROG_KINDS = 12 };

/* a[0] [M, K] x a[1] [K, N], then an epilogue of kind *user over bias a[2] [N], a residual
   a[3] [M, N] and a scalar a[4] */
static void prog_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val d = jit_matmul(t, a[0], a[1]);
  switch (*(const int *)user) {
  case 0: r[0] = jit_relu(t, jit_add(t, d, a[2])); break;
  case 1: r[0] = jit_sub(t, jit_add(t, d, a[2]), a[3]); break;
  case 2: /* a clamp by max and min, and a scale */
    r[0] = jit_mul(t, jit_min(t, jit_max(t, d, jit_scalar(t, -0.5)), jit_scalar(t, 0.25)),
                   jit_scalar(t, 3.0));
    break;
  case 3: /* leaky relu: compare and select */
    r[0] = jit_select(t, jit_cmp(t, JIT_GT, d, jit_scalar(t, 0.0)), d,
                      jit_mul(t, d, jit_scalar(t, 0.1)));
    break;
  case 4: r[0] = jit_div(t, jit_abs(t, d), jit_add(t, jit_mul(t, a[3], a[3]), jit_scalar(t, 1.0))); break;
  case 5: r[0] = jit_mul(t, jit_add(t, jit_neg(t, d), a[2]), a[4]); break;
  case 6: /* relu's gradient, as W8's backward pass has it */
    r[0] = jit_select(t, jit_cmp(t, JIT_EQ, a[3], jit_scalar(t, 0.0)),
                      jit_mul(t, d, jit_scalar(t, 0.5)), d);
    break;
  case 7: r[0] = d; break;
  case 8: r[0] = jit_tanh(t, jit_add(t, d, a[2])); break; /* f32 only: f64 generates it */
  case 9: r[0] = jit_tanh(t, jit_add(t, jit_mul(t, d, jit_scalar(t, 30.0)), a[3])); break;
  case 10: r[0] = jit_sqrt(t, jit_add(t, jit_abs(t, d), a[2])); break; /* NaN where bias < -|d| */
  default: r[0] = jit_exp(t, d); break; /* no program has it: a generated epilogue */
  }
}

static char *g_prog_llvm; /* run_prog's LLVM dump, where asked for (non-NULL before the call) */

static void *run_prog(jit_ctx *ctx, int kind, jit_dtype dt, int64_t m, int64_t k, int64_t n,
                      const char *mode, double *llvm_ms) {
  if (mode) setenv("TJIT_GEMM_CORE", mode, 1);
  else unsetenv("TJIT_GEMM_CORE");
  int64_t shapes[5][2] = {{m, k}, {k, n}, {n, 0}, {m, n}, {0, 0}};
  int ranks[5] = {2, 2, 1, 2, 0};
  jit_array *args[5];
  for (int i = 0; i < 5; i++) {
    void *v = random_data(dt, numel(ranks[i], shapes[i]), 900 + (uint64_t)i * 7 + (uint64_t)kind);
    if (i == 3) /* zeros for kind 6's compare */
      for (int64_t j = 0; j < m * n; j += 3) ir_store_f64(dt, v, j, 0.0);
    args[i] = upload(ctx, dt, ranks[i], shapes[i], v);
    free(v);
  }
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "prog", .n_args = 5, .n_results = 1};
  assert_int_equal(jit_compile(ctx, prog_fn, &kind, &o, &f), JIT_OK);
  jit_array *res = NULL;
  if (jit_call(f, args, &res) != JIT_OK) fail_msg("kind %d: %s", kind, jit_last_error());
  void *out = download(res);
  if (g_prog_llvm) {
    free(g_prog_llvm);
    g_prog_llvm = llvm_dump(f, args);
  }
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  *llvm_ms = st.llvm_ms;
  jit_array_free(res);
  jit_fn_free(f);
  for (int i = 0; i < 5; i++) jit_array_free(args[i]);
  unsetenv("TJIT_GEMM_CORE");
  return out;
}

/* A bf16 program of kind over shape sh with TJIT_BF16_DOT=how: within bf16 roundings of the f32
   micro-kernel's `want` (its dot's sums only differ in order, which changes one element of a
   thousand or none); its dump says that `kind_text` runs it. */
static void check_bf16_dot(jit_ctx *ctx, int kind, const int64_t sh[3], const void *want,
                           const char *how, const char *kind_text) {
  setenv("TJIT_BF16_DOT", how, 1);
  double ms;
  g_prog_llvm = strdup("");
  uint16_t *got = run_prog(ctx, kind, JIT_BF16, sh[0], sh[1], sh[2], NULL, &ms);
  setenv("TJIT_BF16_DOT", "f32", 1);
  if (!strstr(g_prog_llvm, kind_text))
    fail_msg("kind %d: no %s in\n%s", kind, kind_text, g_prog_llvm);
  free(g_prog_llvm);
  g_prog_llvm = NULL;
  for (int64_t i = 0; i < sh[0] * sh[2]; i++) {
    double g = ir_load_f64(JIT_BF16, got, i), w = ir_load_f64(JIT_BF16, want, i);
    if (!(fabs(g - w) <= fabs(w) / 128 + 1.0 / 64))
      fail_msg("kind %d, %lldx%lldx%lld with %s, element %lld: %g, the f32 kernel's %g", kind,
               (long long)sh[0], (long long)sh[1], (long long)sh[2], how, (long long)i, g, w);
  }
  free(got);
}

/* By vdpbf16ps (TJIT_BF16_DOT=pairs) where the host and the context's target have it, and by the
   AMX core on its C model (amx-model) where the target has 512-bit vectors and the dot fits it
   (gemm_core_amx_fits: K >= 32, and lhs blocks of whole 32-row strips, as M >= 128 or a multiple
   of 32 make them). */
static void check_pairs(jit_ctx *ctx, int kind, const int64_t sh[3], const void *want) {
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
      strstr(jit_ctx_target(ctx), "bf16 dot"))
    check_bf16_dot(ctx, kind, sh, want, "pairs", "bf16 (vdpbf16ps, f32 sums) dot");
  if (__builtin_cpu_supports("avx512f") && strstr(jit_ctx_target(ctx), "512-bit") && sh[1] >= 32 &&
      (sh[0] >= 128 || sh[0] % 32 == 0))
    check_bf16_dot(ctx, kind, sh, want, "amx-model", "bf16 (AMX tiles modelled in C, f32 sums) dot");
}

/* Each program gives the generated epilogue's bits (TJIT_GEMM_CORE=jit) and the VM's
   (TJIT_GEMM_CORE=vm: no chain), over whole and edge
   tiles, split over threads and not, f32 and f64; bf16 dots (operands and results; each op
   rounded to bf16) give the generated kernel's bits (TJIT_GEMM_CORE=0: the core has no generated
   form for them), also when K is more than one block (partial sums in f32 scratch) and M more
   than one chunk of them. A program of arithmetic epilogues compiles no LLVM module where the
   core runs. */
static void test_core_epilogue_programs(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{37, 70, 45}, {96, 33, 64}, {5, 300, 7}, {600, 2100, 21}};
  static const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_BF16};
  bool core = ot_core_runs(ctx1) && ot_core_runs(ctx2);
  setenv("TJIT_BF16_DOT", "f32", 1); /* the f32 micro-kernel, whose sums are the generated ones */
  for (int kind = 0; kind < N_PROG_KINDS; kind++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
      for (size_t di = 0; di < sizeof dts / sizeof *dts; di++)
        for (int c = 0; c < 2; c++) {
          jit_ctx *ctx = c ? ctx1 : ctx2;
          const int64_t *sh = shapes[si];
          double ms_prog, ms_jit;
          void *a = run_prog(ctx, kind, dts[di], sh[0], sh[1], sh[2], NULL, &ms_prog);
          bool bf16 = dts[di] == JIT_BF16;
          void *b = run_prog(ctx, kind, dts[di], sh[0], sh[1], sh[2], bf16 ? "0" : "jit", &ms_jit);
          if (memcmp(a, b, (size_t)(sh[0] * sh[2]) * jit_dtype_size(dts[di])) != 0)
            fail_msg("kind %d, %lldx%lldx%lld %s: the program and the generated epilogue differ",
                     kind, (long long)sh[0], (long long)sh[1], (long long)sh[2],
                     jit_dtype_name(dts[di]));
          bool prog = kind <= 7 || kind == 10 || (kind <= 9 && dts[di] != JIT_F64);
          if (core && prog && !(ms_prog == 0.0 && ms_jit > 0.0))
            fail_msg("kind %d, %lldx%lldx%lld %s: llvm %.3f ms with programs, %.3f without", kind,
                     (long long)sh[0], (long long)sh[1], (long long)sh[2], jit_dtype_name(dts[di]),
                     ms_prog, ms_jit);
          if (core && !prog) assert_true(ms_prog > 0.0);
          if (bf16 && (kind == 1 || kind == 7)) check_pairs(ctx, kind, sh, a);
          double ms_vm;
          void *v = run_prog(ctx, kind, dts[di], sh[0], sh[1], sh[2], "vm", &ms_vm);
          if (memcmp(a, v, (size_t)(sh[0] * sh[2]) * jit_dtype_size(dts[di])) != 0)
            fail_msg("kind %d, %lldx%lldx%lld %s: the chain and the VM differ", kind,
                     (long long)sh[0], (long long)sh[1], (long long)sh[2], jit_dtype_name(dts[di]));
          free(v);
          free(a);
          free(b);
        }
  unsetenv("TJIT_BF16_DOT");
}

/* relu(x @ w + b) * 3: a bf16 chain of an add, a max and a mul */
static void tiny_chain_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_mul(t, jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2])), jit_scalar(t, 3.0));
}

/* A bf16 chain whose sums, bias and results are f32 denormals (products of 2^-70-sized bf16),
   with a NaN and an infinity in the bias:
   where the chain rounds by vcvtneps2bf16 (which flushes denormal inputs) the vectors with such
   lanes round the integer way; the bits equal the VM's (TJIT_GEMM_CORE=vm) and the generated
   kernel's (TJIT_GEMM_CORE=0), sums by the f32 micro-kernel in each. */
static void test_bf16_chain_denormals(void **state) {
  (void)state;
  enum { M = 70, K = 40, N = 96 };
  const int64_t sa[2] = {M, K}, sw[2] = {K, N}, sb[1] = {N};
  void *h[3] = {random_data(JIT_BF16, M * K, 71), random_data(JIT_BF16, K * N, 72),
                random_data(JIT_BF16, N, 73)};
  for (int i = 0; i < 3; i++) {
    int64_t n = i == 0 ? M * K : i == 1 ? K * N : N;
    double scale = i < 2 ? 0x1p-70 : 0x1p-132; /* products ~2^-140; bias bf16 denormals */
    for (int64_t j = 0; j < n; j++)
      ir_store_f64(JIT_BF16, h[i], j, ir_load_f64(JIT_BF16, h[i], j) * scale);
  }
  ir_store_f64(JIT_BF16, h[2], 5, NAN); /* a NaN through the max (llvm.maximum's), and -inf */
  ir_store_f64(JIT_BF16, h[2], 37, -INFINITY);
  jit_array *args[3] = {upload(ctx1, JIT_BF16, 2, sa, h[0]), upload(ctx1, JIT_BF16, 2, sw, h[1]),
                        upload(ctx1, JIT_BF16, 1, sb, h[2])};
  setenv("TJIT_BF16_DOT", "f32", 1);
  static const char *const modes[] = {NULL, "vm", "0"};
  uint16_t *out[3];
  int denormals = 0;
  for (int m = 0; m < 3; m++) {
    if (modes[m]) setenv("TJIT_GEMM_CORE", modes[m], 1);
    else unsetenv("TJIT_GEMM_CORE");
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = "tiny_chain", .n_args = 3, .n_results = 1};
    assert_int_equal(jit_compile(ctx1, tiny_chain_fn, NULL, &o, &f), JIT_OK);
    jit_array *res = NULL;
    if (jit_call(f, args, &res) != JIT_OK) fail_msg("%s", jit_last_error());
    out[m] = download(res);
    if (m == 0 && ot_core_runs(ctx1)) { /* zmm where the target and the host have AVX-512 BF16 */
      char *dump = llvm_dump(f, args);
      bool zmm = strstr(jit_ctx_target(ctx1), "bf16 dot") && __builtin_cpu_supports("avx512bf16");
      if (!strstr(dump, "a chain:") || zmm != (strstr(dump, "vcvtneps2bf16") != NULL))
        fail_msg("target %s: expected a chain%s:\n%s", jit_ctx_target(ctx1),
                 zmm ? " on zmm" : " on ymm", dump);
      free(dump);
    }
    jit_array_free(res);
    jit_fn_free(f);
  }
  unsetenv("TJIT_GEMM_CORE");
  unsetenv("TJIT_BF16_DOT");
  for (int64_t i = 0; i < M * N; i++) {
    denormals += (out[0][i] & 0x7f80) == 0 && (out[0][i] & 0x7f) != 0;
    if (out[0][i] != out[1][i] || out[0][i] != out[2][i])
      fail_msg("element %lld: chain 0x%04x, VM 0x%04x, generated 0x%04x", (long long)i,
               out[0][i], out[1][i], out[2][i]);
  }
  assert_true(denormals > M * N / 8); /* the case is what it says */
  for (int i = 0; i < 3; i++) {
    free(out[i]);
    free(h[i]);
    jit_array_free(args[i]);
  }
}

/* ---- dots whose row kernel sums their epilogue (cg_epi_plan_reduce) ------------------------------- */

enum { N_RED_KINDS = 11 };

/* The one-example loss of W6: mean((x_i @ w - y_i)^2), for jit_vmap. */
static void red_example(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val e = jit_sub(t, jit_matmul(t, a[0], a[1]), a[2]);
  int axis = 0;
  r[0] = jit_div(t, jit_reduce_sum(t, jit_mul(t, e, e), 1, &axis),
                 jit_scalar(t, (double)jit_val_shape(t, e)[0]));
}

/* x a[0] [.., M, K] @ w a[1] [.., K, N], summed over N after an epilogue of kind *user over y
   a[2] [.., M, N], bias a[3] [N], a row value a[4] [.., M] and a scalar a[5] */
static void red_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int kind = *(const int *)user;
  if (kind == 6) { /* W6: the example's loss, vmapped */
    jit_vmap(t, red_example, NULL, 3, a, (const int[]){0, -1, 0}, 1, r, NULL);
    return;
  }
  jit_val rs = jit_mul(t, a[4], jit_scalar(t, 2.0)); /* kind 10's op on rows, before the sum */
  jit_val d = jit_matmul(t, a[0], a[1]);
  int last = jit_val_rank(t, d) - 1;
  double n = (double)jit_val_shape(t, d)[last];
  switch (kind) {
  case 0: {
    jit_val e = jit_sub(t, d, a[2]);
    r[0] = jit_div(t, jit_reduce_sum(t, jit_mul(t, e, e), 1, &last), jit_scalar(t, n));
    break;
  }
  case 1: /* post ops on a scalar and a row value */
    r[0] = jit_add(t, jit_mul(t, jit_reduce_sum(t, jit_relu(t, jit_add(t, d, a[3])), 1, &last), a[5]), a[4]);
    break;
  case 2: /* a const in every lane: the edge tile's lanes past N must not count */
    r[0] = jit_max(t, jit_reduce_sum(t, jit_add(t, jit_abs(t, d), jit_scalar(t, 0.25)), 1, &last),
                   jit_scalar(t, 10.0));
    break;
  case 3: r[0] = jit_reduce_sum(t, d, 1, &last); break; /* the sums themselves, signed */
  case 4: /* leaky relu's sum, negated */
    r[0] = jit_neg(t, jit_reduce_sum(t, jit_select(t, jit_cmp(t, JIT_GT, d, jit_scalar(t, 0.0)), d,
                                                   jit_mul(t, d, jit_scalar(t, 0.1))), 1, &last));
    break;
  case 7: { /* the root of the mean square: sqrt after the sum */
    jit_val e = jit_sub(t, d, a[2]);
    r[0] = jit_sqrt(t, jit_div(t, jit_reduce_sum(t, jit_mul(t, e, e), 1, &last), jit_scalar(t, n)));
    break;
  }
  case 8: r[0] = jit_reduce_sum(t, jit_sqrt(t, jit_abs(t, d)), 1, &last); break; /* sqrt before */
  case 9: /* rsqrt after */
    r[0] = jit_rsqrt(t, jit_add(t, jit_reduce_sum(t, jit_mul(t, d, d), 1, &last), jit_scalar(t, 1.0)));
    break;
  case 10: r[0] = jit_mul(t, rs, jit_reduce_sum(t, jit_mul(t, d, d), 1, &last)); break;
  default: r[0] = jit_reduce_sum(t, jit_exp(t, d), 1, &last); break; /* no program has exp */
  }
}

/* Row i's sum of the absolute values kind's epilogue sums (from the inputs in double), times the
   largest factor by which the post ops scale a change of the sum: what bounds the effect of the
   sum's order on the result. */
static double red_scale(int kind, jit_dtype dt, void *const *h, int64_t bi, int64_t i, int64_t m,
                        int64_t k, int64_t n) {
  double s = 0;
  for (int64_t j = 0; j < n; j++) {
    double d = 0;
    for (int64_t q = 0; q < k; q++)
      d += ir_load_f64(dt, h[0], (bi * m + i) * k + q) * ir_load_f64(dt, h[1], (bi * k + q) * n + j);
    double y = ir_load_f64(dt, h[2], (bi * m + i) * n + j), b = ir_load_f64(dt, h[3], j);
    double v = kind == 0 || kind == 6 || kind == 7 ? (d - y) * (d - y)
               : kind == 1                       ? fmax(d + b, 0.0)
               : kind == 2                       ? fabs(d) + 0.25
               : kind == 5                       ? exp(d)
               : kind == 8                       ? sqrt(fabs(d))
               : kind == 9 || kind == 10         ? d * d
                                                 : d;
    s += fabs(v);
  }
  if (kind == 1) return s * fabs(ir_load_f64(dt, h[5], 0));
  if (kind == 7) return sqrt(s / (double)n) / 2; /* d sqrt(s / n) / ds times s */
  if (kind == 9) return s * pow(s + 1, -1.5) / 2;
  if (kind == 10) return s * fabs(2 * ir_load_f64(dt, h[4], bi * m + i));
  return s;
}

/* Each kind (0-4, 6-10: a program; 5: exp, which the programs lack) against the row kernel it
   replaces (TJIT_GEMM_CORE=jit: the sum runs as a generated row kernel after the dot): the dot's
   sums and every op are the same IEEE operations, so the two differ only by the order of the
   sum, within 2 (N + 2) ulps of the sum of absolute values. Where the core runs, a program
   compiles no LLVM at all and its dump shows the sum; shapes with edge tiles, a batch, several
   K blocks (partial sums in the dot's buffer) and several column panels (N past nc). */
static void test_core_reducing_epilogues(void **state) {
  (void)state;
  static const int64_t shapes[][4] = {{1, 37, 70, 45}, {1, 96, 33, 64}, {1, 5, 300, 7},
                                      {1, 600, 40, 21}, {1, 70, 1100, 1100}, {3, 20, 50, 40}};
  static const jit_dtype dts[] = {JIT_F32, JIT_F64};
  bool core = ot_core_runs(ctx1) && ot_core_runs(ctx2);
  int checked = 0;
  for (int kind = 0; kind < N_RED_KINDS; kind++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
      for (size_t di = 0; di < sizeof dts / sizeof *dts; di++) {
        const int64_t *sh = shapes[si];
        int64_t nb = sh[0], m = sh[1], k = sh[2], n = sh[3];
        if (kind == 6 && nb > 1) continue; /* vmap over the rows of a 2-d x */
        if ((kind == 5 || kind == 6) && k > 500) continue; /* exp of big sums overflows; time */
        jit_dtype dt = dts[di];
        jit_ctx *ctx = si % 2 ? ctx1 : ctx2;
        bool b3 = nb > 1;
        int64_t sx[3] = {nb, m, k}, sw[3] = {nb, k, n}, sy[3] = {nb, m, n}, sb[1] = {n}, sr[2] = {nb, m};
        const int64_t *shp[6] = {b3 ? sx : sx + 1, b3 ? sw : sw + 1, b3 ? sy : sy + 1, sb, b3 ? sr : sr + 1, NULL};
        int ranks[6] = {2 + b3, 2 + b3, 2 + b3, 1, 1 + b3, 0};
        int n_args = kind == 6 ? 3 : 6;
        void *h[6];
        jit_array *args[6];
        for (int i = 0; i < 6; i++) {
          h[i] = random_data(dt, numel(ranks[i], shp[i]), 1300 + (uint64_t)i * 11 + (uint64_t)kind);
          args[i] = upload(ctx, dt, ranks[i], shp[i], h[i]);
        }
        void *out[3];
        double llvm_ms[3];
        char *dump = NULL;
        for (int mode = 0; mode < 3; mode++) {
          if (mode) setenv("TJIT_GEMM_CORE", mode == 1 ? "jit" : "vm", 1);
          else unsetenv("TJIT_GEMM_CORE");
          jit_fn *f = NULL;
          jit_fn_opts o = {.name = "red", .n_args = n_args, .n_results = 1};
          assert_int_equal(jit_compile(ctx, red_fn, &kind, &o, &f), JIT_OK);
          jit_array *res = NULL;
          if (jit_call(f, args, &res) != JIT_OK) fail_msg("kind %d: %s", kind, jit_last_error());
          out[mode] = download(res);
          jit_fn_stats st;
          assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
          llvm_ms[mode] = st.llvm_ms;
          if (!mode) dump = llvm_dump(f, args);
          jit_array_free(res);
          jit_fn_free(f);
        }
        unsetenv("TJIT_GEMM_CORE");
        bool prog = kind != 5;
        if (core && prog && !(llvm_ms[0] == 0.0 && strstr(dump, "summed over each row's columns")))
          fail_msg("kind %d, %lldx%lldx%lldx%lld %s: llvm %.3f ms, dump:\n%s", kind, (long long)nb,
                   (long long)m, (long long)k, (long long)n, jit_dtype_name(dt), llvm_ms[0], dump);
        if (core && !prog) assert_true(llvm_ms[0] > 0.0);
        /* f32 programs of a value and leaves run as chains (epi_chain), with the VM's bits */
        bool chain = dt == JIT_F32 && kind != 4 && kind != 5;
        if (core && chain != (strstr(dump, "a chain:") != NULL))
          fail_msg("kind %d %s: chain expected %d, dump:\n%s", kind, jit_dtype_name(dt), chain, dump);
        if (memcmp(out[0], out[2], (size_t)(nb * m) * jit_dtype_size(dt)) != 0)
          fail_msg("kind %d, %lldx%lldx%lldx%lld %s: the chain and the VM differ", kind,
                   (long long)nb, (long long)m, (long long)k, (long long)n, jit_dtype_name(dt));
        double eps = dt == JIT_F32 ? 0x1p-24 : 0x1p-53;
        for (int64_t bi = 0; bi < nb; bi++)
          for (int64_t i = 0; i < m; i++) {
            double a = ir_load_f64(dt, out[0], bi * m + i), b = ir_load_f64(dt, out[1], bi * m + i);
            double tol = 2.0 * (double)(2 * n + 4) * eps * red_scale(kind, dt, h, bi, i, m, k, n) +
                         4 * eps * fabs(b);
            if (!(fabs(a - b) <= tol))
              fail_msg("kind %d, %lldx%lldx%lldx%lld %s, row %lld: %.17g, the row kernel's %.17g"
                       " (tolerance %.3g)", kind, (long long)nb, (long long)m, (long long)k,
                       (long long)n, jit_dtype_name(dt), (long long)(bi * m + i), a, b, tol);
          }
        checked += core && prog;
        free(dump);
        for (int i = 0; i < 3; i++) free(out[i]);
        for (int i = 0; i < 6; i++) {
          free(h[i]);
          jit_array_free(args[i]);
        }
      }
  if (core) assert_true(checked >= 40);
}

/* ---- a scan whose dots multiply by its consts ------------------------------------------------------ */

static void scan_const_rhs(int64_t B);

static void rnn_step(jit_trace *t, const jit_val *h, const jit_val *x, jit_val *nh, jit_val *y,
                     void *user) {
  const jit_val *w = user;
  nh[0] = jit_tanh(t, jit_add(t, jit_matmul(t, h[0], w[0]), jit_matmul(t, x[0], w[1])));
  y[0] = nh[0];
}

static void rnn_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val last;
  jit_scan(t, rnn_step, (void *)&a[2], 1, &a[0], 1, &a[1], -1, 0, &last, 1, &r[0]);
}

/* W5's shape of scan: dots whose rhs are the scan's consts keep them packed over the steps of
   one call (a kept team area), split over threads or not, and must repack for the next call's
   weights, also when those land at the same address. Bit for bit the generated kernels' results
   (TJIT_GEMM_CORE=0: no core, no packing kept), call after call. */
static void test_scan_const_rhs(void **state) {
  (void)state;
  for (int64_t B = 32; B >= 8; B -= 24) /* 2M multiply-adds a dot (split over threads), 0.5M */
    scan_const_rhs(B);
}


static void scan_const_rhs(int64_t B) {
  const int64_t T = 6, H = 256;
  int64_t sh[4][3] = {{B, H}, {T, B, H}, {H, H}, {H, H}};
  int rk[4] = {2, 3, 2, 2};
  jit_fn *f[3];
  jit_ctx *ctxs[3] = {ctx1, ctx2, ctx1};
  for (int c = 0; c < 3; c++) {
    jit_fn_opts o = {.name = "rnn", .n_args = 4, .n_results = 1};
    assert_int_equal(jit_compile(ctxs[c], rnn_fn, NULL, &o, &f[c]), JIT_OK);
  }
  for (int call = 0; call < 3; call++) {
    void *out[3];
    for (int c = 0; c < 3; c++) {
      if (c == 2) setenv("TJIT_GEMM_CORE", "0", 1); /* read when the signature compiles */
      jit_array *args[4];
      for (int i = 0; i < 4; i++) {
        void *v = random_data(JIT_F32, numel(rk[i], sh[i]), 70 + (uint64_t)(call * 4 + i));
        if (i >= 2)
          for (int64_t j = 0; j < H * H; j++) ((float *)v)[j] *= 0.125f;
        args[i] = upload(ctxs[c], JIT_F32, rk[i], sh[i], v);
        free(v);
      }
      jit_array *res = NULL;
      assert_int_equal(jit_call(f[c], args, &res), JIT_OK);
      unsetenv("TJIT_GEMM_CORE");
      out[c] = download(res);
      jit_array_free(res);
      for (int i = 0; i < 4; i++) jit_array_free(args[i]);
    }
    assert_memory_equal(out[0], out[2], (size_t)(T * B * H) * sizeof(float));
    assert_memory_equal(out[1], out[2], (size_t)(T * B * H) * sizeof(float));
    for (int c = 0; c < 3; c++) free(out[c]);
  }
  for (int c = 0; c < 3; c++) jit_fn_free(f[c]);
}

static void dot_bias_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_matmul(t, a[0], a[1]), a[2]);
}

/* W4's kind of loop: a dot whose rhs is a param keeps it packed for the next calls on an array
   it saw before (a kept team area, tagged with the array's serial), and must repack for another
   array, also when that one lands at the same address (freed, then its buffer reused by the
   pool) or holds the same bytes at another. Bit for bit the generated kernels' results
   (TJIT_GEMM_CORE=0). */
static void test_param_rhs_kept(void **state) {
  (void)state;
  const int64_t M = 64, K = 256, N = 512; /* 8M multiply-adds: split over threads */
  int64_t sh[3][2] = {{M, K}, {K, N}, {N, 0}};
  int rk[3] = {2, 2, 1};
  jit_ctx *ctxs[3] = {ctx2, ctx1, ctx1};
  jit_fn *f[3];
  for (int c = 0; c < 3; c++) {
    if (c == 2) setenv("TJIT_GEMM_CORE", "0", 1); /* read when the signature compiles */
    jit_fn_opts o = {.name = "dot_bias", .n_args = 3, .n_results = 1};
    assert_int_equal(jit_compile(ctxs[c], dot_bias_fn, NULL, &o, &f[c]), JIT_OK);
    void *v[3];
    for (int i = 0; i < 3; i++) v[i] = random_data(JIT_F32, numel(rk[i], sh[i]), 90 + (uint64_t)i);
    jit_array *args[3];
    for (int i = 0; i < 3; i++) args[i] = upload(ctxs[c], JIT_F32, rk[i], sh[i], v[i]);
    jit_array *res = NULL;
    assert_int_equal(jit_call(f[c], args, &res), JIT_OK); /* signature compiled (and env read) */
    unsetenv("TJIT_GEMM_CORE");
    jit_fn_stats st;
    assert_int_equal(jit_fn_stats_get(f[c], &st), JIT_OK);
    assert_int_equal(st.kept_bytes, 0); /* nothing kept from a first call */
    jit_array_free(res);
    for (int i = 0; i < 3; i++) jit_array_free(args[i]), free(v[i]);
  }
  /* per round: the rhs's contents (seed) and whether the rhs array is the previous round's (the
     second call on an array makes the kept area, the third packs nothing) */
  static const struct { uint64_t seed; bool same_array; } rounds[] = {
      {100, false}, {100, true}, {100, true}, {101, false}, {101, true},
      {100, false}, {100, true}, {102, false}};
  jit_array *w[3] = {NULL, NULL, NULL};
  void *x = random_data(JIT_F32, M * K, 98), *b = random_data(JIT_F32, N, 99);
  for (int r = 0; r < N_OF(rounds); r++) {
    void *wv = random_data(JIT_F32, K * N, rounds[r].seed), *out[3];
    for (int c = 0; c < 3; c++) {
      if (!rounds[r].same_array) {
        jit_array_free(w[c]); /* first: the new array may get its buffer */
        w[c] = upload(ctxs[c], JIT_F32, 2, sh[1], wv);
      }
      jit_array *args[3] = {upload(ctxs[c], JIT_F32, 2, sh[0], x), w[c],
                            upload(ctxs[c], JIT_F32, 1, sh[2], b)}, *res = NULL;
      assert_int_equal(jit_call(f[c], args, &res), JIT_OK);
      out[c] = download(res);
      jit_array_free(res);
      jit_array_free(args[0]);
      jit_array_free(args[2]);
    }
    assert_memory_equal(out[0], out[2], (size_t)(M * N) * sizeof(float));
    assert_memory_equal(out[1], out[2], (size_t)(M * N) * sizeof(float));
    for (int c = 0; c < 3; c++) free(out[c]);
    free(wv);
  }
  /* where the core runs, its packing of w is held: K x N rounded up to whole strips, at least */
  bool core = ot_core_runs(ctx1) && ot_core_runs(ctx2);
  for (int c = 0; c < 3; c++) {
    jit_fn_stats st;
    assert_int_equal(jit_fn_stats_get(f[c], &st), JIT_OK);
    if (c == 2 || !core) assert_int_equal(st.kept_bytes, 0);
    else assert_true(st.kept_bytes >= (uint64_t)(K * N) * sizeof(float));
  }
  for (int c = 0; c < 3; c++) jit_array_free(w[c]), jit_fn_free(f[c]);
  free(x);
  free(b);
}

/* ---- dots inside larger programs ---------------------------------------------------------------- */
/* relu(x @ w1 + b1) @ w2 + b2, the operands of the second dot made by other kernels, and a
   transposed operand computed on the fly. */
static void mlp_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  jit_val y = jit_add(t, jit_matmul(t, h, a[3]), a[4]);
  const int perm[2] = {1, 0};
  jit_val z = jit_matmul(t, jit_transpose(t, jit_exp(t, a[0]), perm), y); /* [K,M] x [M,N2] */
  r[0] = y;
  r[1] = z;
}

typedef struct mlp_data {
  int64_t m, k, n1, n2;
  void *v[5];
  int64_t shape[5][2];
  int rank[5];
} mlp_data;

static void mlp_init(mlp_data *d, int64_t m, int64_t k, int64_t n1, int64_t n2, uint64_t seed) {
  memset(d, 0, sizeof *d);
  int64_t shapes[5][2] = {{m, k}, {k, n1}, {n1, 0}, {n1, n2}, {n2, 0}};
  int ranks[5] = {2, 2, 1, 2, 1};
  for (int i = 0; i < 5; i++) {
    memcpy(d->shape[i], shapes[i], sizeof shapes[i]);
    d->rank[i] = ranks[i];
    d->v[i] = random_data(JIT_F32, numel(ranks[i], shapes[i]), seed + (uint64_t)i);
  }
}

static void mlp_free(mlp_data *d) {
  for (int i = 0; i < 5; i++) free(d->v[i]);
}

/* Runs mlp on ctx; results[0..1] malloc'd; stats into *st when non-NULL. */
static jit_status mlp_run(jit_ctx *ctx, const mlp_data *d, void **results, jit_fn_stats *st) {
  jit_array *args[5] = {0};
  jit_status rc = JIT_OK;
  for (int i = 0; i < 5 && rc == JIT_OK; i++)
    rc = jit_array_from_host(ctx, JIT_F32, d->rank[i], d->shape[i], d->v[i], &args[i]);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 5, .n_results = 2};
  if (rc == JIT_OK) rc = jit_compile(ctx, mlp_fn, NULL, &o, &f);
  jit_array *res[2] = {NULL, NULL};
  if (rc == JIT_OK) rc = jit_call(f, args, res);
  for (int i = 0; i < 2; i++) {
    results[i] = NULL;
    if (rc != JIT_OK) continue;
    size_t n = (size_t)numel(jit_array_rank(res[i]), jit_array_shape(res[i])) * 4;
    results[i] = malloc(n);
    if (!results[i]) rc = JIT_ENOMEM;
    else rc = jit_array_to_host(res[i], results[i], n);
  }
  if (rc == JIT_OK && st) rc = jit_fn_stats_get(f, st);
  for (int i = 0; i < 2; i++) jit_array_free(res[i]);
  jit_fn_free(f);
  for (int i = 0; i < 5; i++) jit_array_free(args[i]);
  return rc;
}

static bool close_f32(const char *what, const float *a, const float *b, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)a[i] - (double)b[i]) <= tol * (1 + fabs((double)b[i])))) {
      fprintf(stderr, "%s [%lld]: %.9g vs %.9g\n", what, (long long)i, a[i], b[i]);
      return false;
    }
  return true;
}

static void test_mlp(void **state) {
  (void)state;
  mlp_data d;
  mlp_init(&d, 70, 96, 130, 40, 7);
  void *r2[2], *r1[2], *r0[2];
  jit_fn_stats st;
  assert_int_equal(mlp_run(ctx2, &d, r2, &st), JIT_OK);
  assert_true(st.n_kernels >= 4);
  assert_true(st.codegen_ms > 0 && st.llvm_ms > 0);
  assert_int_equal(mlp_run(ctx1, &d, r1, NULL), JIT_OK);
  assert_int_equal(mlp_run(ctx0, &d, r0, NULL), JIT_OK);
  assert_memory_equal(r2[0], r1[0], 70 * 40 * 4);
  assert_memory_equal(r2[1], r1[1], 96 * 40 * 4);
  assert_true(close_f32("mlp y", r2[0], r0[0], 70 * 40, 1e-4));
  assert_true(close_f32("mlp z", r2[1], r0[1], 96 * 40, 1e-4));
  for (int i = 0; i < 2; i++) {
    free(r2[i]);
    free(r1[i]);
    free(r0[i]);
  }
  mlp_free(&d);
}

/* The dumps name the matmul kernels and the entry. */
static void test_dump(void **state) {
  (void)state;
  mlp_data d;
  mlp_init(&d, 8, 16, 24, 8, 9);
  jit_array *args[5] = {0};
  for (int i = 0; i < 5; i++) args[i] = upload(ctx2, JIT_F32, d.rank[i], d.shape[i], d.v[i]);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 5, .n_results = 2};
  assert_int_equal(jit_compile(ctx2, mlp_fn, NULL, &o, &f), JIT_OK);
  jit_array *res[2] = {NULL, NULL};
  assert_int_equal(jit_call(f, args, res), JIT_OK);
  jit_array_free(res[0]);
  jit_array_free(res[1]);
  char *text = ot_fn_dump(f, args, JIT_DUMP_C | JIT_DUMP_LLVM);
  assert_non_null(strstr(text, "is the matmul kernel tjit_dot"));
  assert_non_null(strstr(text, "define void @tjit_entry("));
  /* a generated dot kernel, or a dot on the precompiled core with its epilogue program */
  assert_true(strstr(text, "define void @tjit_dot") || strstr(text, "; tjit_dot"));
  assert_null(strstr(text, "runs in the interpreter"));
  /* the epilogues of relu(x @ w1 + b1) @ w2 + b2 run in the matmuls' stores: the only loop
     kernel left is exp(x) (the transposed operand of the third dot) */
  int loops = 0;
  for (const char *q = text; (q = strstr(q, "define void @tjit_k")) != NULL; q++) loops++;
  assert_int_equal(loops, 1);
  free(text);
  text = ot_fn_dump(f, args, JIT_DUMP_FUSED);
  int dots = 0, kernels = 0;
  for (const char *q = text; (q = strstr(q, " = dot ")) != NULL; q++) dots++;
  for (const char *q = text; (q = strstr(q, "kernel k")) != NULL; q++) kernels++;
  assert_int_equal(dots, 3);
  assert_int_equal(kernels, 4); /* one per dot (with its epilogue), and exp */
  free(text);
  jit_fn_free(f);
  for (int i = 0; i < 5; i++) jit_array_free(args[i]);
  mlp_free(&d);
}

/* Host threads calling one jit_fn at once: each run needs its own intermediates and matmul
   scratch, whichever thread owns the executable's arena. */
typedef struct conc {
  jit_fn *f;
  jit_array **args;
  const float *want;
  int64_t n;
  int bad;
} conc;

static void *conc_main(void *arg) {
  conc *c = arg;
  for (int it = 0; it < 6; it++) {
    jit_array *res[2] = {NULL, NULL};
    if (jit_call(c->f, c->args, res) != JIT_OK) {
      c->bad++;
      continue;
    }
    float *y = malloc((size_t)c->n * 4);
    if (!y || jit_array_to_host(res[0], y, (size_t)c->n * 4) != JIT_OK ||
        memcmp(y, c->want, (size_t)c->n * 4) != 0)
      c->bad++;
    free(y);
    jit_array_free(res[0]);
    jit_array_free(res[1]);
  }
  return NULL;
}

static void test_concurrent(void **state) {
  (void)state;
  mlp_data d;
  mlp_init(&d, 200, 128, 160, 64, 11);
  void *want[2];
  assert_int_equal(mlp_run(ctx2, &d, want, NULL), JIT_OK);
  jit_array *args[5];
  for (int i = 0; i < 5; i++) args[i] = upload(ctx2, JIT_F32, d.rank[i], d.shape[i], d.v[i]);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 5, .n_results = 2};
  assert_int_equal(jit_compile(ctx2, mlp_fn, NULL, &o, &f), JIT_OK);
  enum { NT = 4 };
  pthread_t th[NT];
  conc c[NT];
  for (int i = 0; i < NT; i++) {
    c[i] = (conc){f, args, want[0], 200 * 64, 0};
    assert_int_equal(pthread_create(&th[i], NULL, conc_main, &c[i]), 0);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(c[i].bad, 0);
  }
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.n_signatures, 1);
  assert_int_equal(st.calls, NT * 6);
  jit_fn_free(f);
  for (int i = 0; i < 5; i++) jit_array_free(args[i]);
  free(want[0]);
  free(want[1]);
  mlp_free(&d);
}

/* ---- the disk cache across processes --------------------------------------------------------------
   Each child makes its own context with TJIT_CACHE_DIR set, runs mlp, and reports through a pipe;
   the parent holds no context while children run. */
typedef struct child_report {
  int status;          /* jit_status of the run */
  uint64_t disk_hits;
  int n_kernels;
  uint64_t hash;       /* FNV-1a of both results' bytes */
} child_report;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static pid_t child_start(const char *dir, int *fd) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    child_report r = {0};
    setenv("TJIT_CACHE_DIR", dir, 1);
    jit_ctx_opts o = jit_ctx_opts_default();
    o.n_threads = 2;
    jit_ctx *ctx = NULL;
    mlp_data d;
    mlp_init(&d, 40, 64, 96, 24, 3);
    void *res[2] = {NULL, NULL};
    jit_fn_stats st = {0};
    r.status = jit_ctx_create(&o, &ctx);
    if (r.status == JIT_OK) r.status = mlp_run(ctx, &d, res, &st);
    if (r.status == JIT_OK) {
      r.hash = fnv(fnv(14695981039346656037ull, res[0], 40 * 24 * 4), res[1], 64 * 24 * 4);
      r.disk_hits = st.disk_cache_hits;
      r.n_kernels = st.n_kernels;
    }
    free(res[0]);
    free(res[1]);
    mlp_free(&d);
    jit_ctx_destroy(ctx);
    ssize_t w = write(p[1], &r, sizeof r);
    _exit(w == (ssize_t)sizeof r ? 0 : 1);
  }
  close(p[1]);
  *fd = p[0];
  return pid;
}

static child_report child_finish(pid_t pid, int fd) {
  child_report r;
  memset(&r, 0xff, sizeof r);
  ssize_t n = read(fd, &r, sizeof r);
  close(fd);
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  assert_int_equal(n, (ssize_t)sizeof r);
  assert_int_equal(r.status, JIT_OK);
  return r;
}

static child_report child_run(const char *dir) {
  int fd;
  pid_t pid = child_start(dir, &fd);
  return child_finish(pid, fd);
}

static char cache_dir[64];

static int make_dir(void **state) {
  (void)state;
  snprintf(cache_dir, sizeof cache_dir, "/tmp/tjit-test-exec-XXXXXX");
  return mkdtemp(cache_dir) ? 0 : -1;
}

static void remove_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  char path[512];
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    unlink(path);
  }
  closedir(d);
}

static int remove_dir(void **state) {
  (void)state;
  remove_entries(cache_dir);
  rmdir(cache_dir);
  return 0;
}

/* Applies damage to every entry file: 0 truncate to half, 1 zero length, 2 flip a payload byte,
   3 flip a header byte. Returns how many files it damaged. */
static int damage_entries(const char *dir, int how) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *de;
  char path[512];
  int n = 0;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 200) continue;
    if (how == 0) assert_int_equal(truncate(path, sb.st_size / 2), 0);
    else if (how == 1) assert_int_equal(truncate(path, 0), 0);
    else {
      int fd = open(path, O_RDWR);
      assert_true(fd >= 0);
      off_t at = how == 2 ? sb.st_size - 100 : 20;
      unsigned char c;
      assert_int_equal(pread(fd, &c, 1, at), 1);
      c ^= 0x5a;
      assert_int_equal(pwrite(fd, &c, 1, at), 1);
      close(fd);
    }
    n++;
  }
  closedir(d);
  return n;
}

static void test_disk_cache_second_process(void **state) {
  (void)state;
  remove_entries(cache_dir);
  child_report a = child_run(cache_dir);
  assert_int_equal(a.disk_hits, 0);
  assert_true(a.n_kernels >= 4);
  child_report b = child_run(cache_dir);
  assert_true(b.disk_hits > 0);
  assert_int_equal(b.hash, a.hash);
}

static void test_disk_cache_corrupt(void **state) {
  (void)state;
  remove_entries(cache_dir);
  child_report a = child_run(cache_dir);
  for (int how = 0; how < 4; how++) {
    assert_true(damage_entries(cache_dir, how) > 0);
    child_report b = child_run(cache_dir); /* recompiles and replaces the entry */
    assert_int_equal(b.disk_hits, 0);
    assert_int_equal(b.hash, a.hash);
    child_report c = child_run(cache_dir);
    assert_true(c.disk_hits > 0);
    assert_int_equal(c.hash, a.hash);
  }
}

static void test_disk_cache_concurrent(void **state) {
  (void)state;
  for (int round = 0; round < 2; round++) {
    remove_entries(cache_dir);
    int fa, fb;
    pid_t pa = child_start(cache_dir, &fa), pb = child_start(cache_dir, &fb);
    child_report a = child_finish(pa, fa), b = child_finish(pb, fb);
    assert_int_equal(a.hash, b.hash);
    child_report c = child_run(cache_dir);
    assert_true(c.disk_hits > 0);
    assert_int_equal(c.hash, a.hash);
  }
}

/* ---- loop kernels split over modules ----------------------------------------------------------- */
/* softmax over rows, then layernorm of it over columns, then tanh: several loop kernels, none of
   them small enough to run inline */
static void chain_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int ax1 = 1, ax0 = 0;
  const int64_t *sh = jit_val_shape(t, a[0]);
  jit_val m = jit_reshape(t, jit_reduce_max(t, a[0], 1, &ax1), 2, (int64_t[]){sh[0], 1});
  jit_val e = jit_exp(t, jit_sub(t, a[0], m));
  jit_val y = jit_div(t, e, jit_reshape(t, jit_reduce_sum(t, e, 1, &ax1), 2, (int64_t[]){sh[0], 1}));
  jit_val mu = jit_reshape(t, jit_reduce_sum(t, y, 1, &ax0), 2, (int64_t[]){1, sh[1]});
  r[0] = jit_tanh(t, jit_mul(t, jit_sub(t, y, mu), jit_scalar(t, 3.0)));
}

/* With two threads a signature's loop kernels compile as two modules (on two threads), with one
   as one; the code is the same, so are the results, bit for bit. */
static void test_split_modules(void **state) {
  (void)state;
  int64_t sh[2] = {512, 384};
  void *x = random_data(JIT_F32, sh[0] * sh[1], 77);
  void *out[2];
  int modules[2];
  for (int c = 0; c < 2; c++) {
    jit_ctx *ctx = c ? ctx2 : ctx1;
    jit_array *a = upload(ctx, JIT_F32, 2, sh, x), *res = NULL;
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = "chain", .n_args = 1, .n_results = 1};
    assert_int_equal(jit_compile(ctx, chain_fn, NULL, &o, &f), JIT_OK);
    assert_int_equal(jit_call(f, &a, &res), JIT_OK);
    out[c] = download(res);
    char *text = ot_fn_dump(f, &a, JIT_DUMP_LLVM);
    modules[c] = 0;
    for (const char *q = text; (q = strstr(q, "; ModuleID")) != NULL; q++) modules[c]++;
    assert_non_null(strstr(text, "define void @tjit_entry("));
    free(text);
    jit_array_free(res);
    jit_array_free(a);
    jit_fn_free(f);
  }
  assert_int_equal(modules[0], 1);
  assert_int_equal(modules[1], 2);
  assert_memory_equal(out[0], out[1], (size_t)(sh[0] * sh[1]) * sizeof(float));
  free(out[0]);
  free(out[1]);
  free(x);
}

/* ---- kernels with the same code, compiled once ------------------------------------------------ */
static void twice_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_mul(t, jit_exp(t, a[0]), jit_scalar(t, 2.0));
  r[1] = jit_mul(t, jit_exp(t, a[1]), jit_scalar(t, 2.0));
}

static void once_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_mul(t, jit_exp(t, a[0]), jit_scalar(t, 2.0));
}

/* The same op on two inputs of one shape: two kernels of the same code, one function in the
   module, run for both; each result is what the op alone gives. */
static void test_shared_kernels(void **state) {
  (void)state;
  int64_t sh[2] = {512, 256};
  size_t bytes = (size_t)(sh[0] * sh[1]) * sizeof(float);
  void *x = random_data(JIT_F32, sh[0] * sh[1], 81), *y = random_data(JIT_F32, sh[0] * sh[1], 82);
  jit_array *a[2] = {upload(ctx2, JIT_F32, 2, sh, x), upload(ctx2, JIT_F32, 2, sh, y)};
  jit_fn *f2 = NULL, *f1 = NULL;
  jit_fn_opts o2 = {.name = "twice", .n_args = 2, .n_results = 2};
  jit_fn_opts o1 = {.name = "once", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx2, twice_fn, NULL, &o2, &f2), JIT_OK);
  assert_int_equal(jit_compile(ctx2, once_fn, NULL, &o1, &f1), JIT_OK);
  jit_array *r2[2] = {NULL, NULL}, *r1 = NULL;
  assert_int_equal(jit_call(f2, a, r2), JIT_OK);
  char *text = ot_fn_dump(f2, a, JIT_DUMP_LLVM | JIT_DUMP_FUSED);
  int kernels = 0, defined = 0;
  for (const char *q = text; (q = strstr(q, "kernel k")) != NULL; q++) kernels++;
  for (const char *q = text; (q = strstr(q, "define void @tjit_k")) != NULL; q++) defined++;
  free(text);
  assert_int_equal(kernels, 2);
  assert_int_equal(defined, 1);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(jit_call(f1, &a[i], &r1), JIT_OK);
    void *want = download(r1), *got = download(r2[i]);
    assert_memory_equal(got, want, bytes);
    free(want);
    free(got);
    jit_array_free(r1);
    jit_array_free(r2[i]);
  }
  jit_fn_free(f1);
  jit_fn_free(f2);
  jit_array_free(a[0]);
  jit_array_free(a[1]);
  free(x);
  free(y);
}

int main(void) {
  const struct CMUnitTest disk[] = {
      cmocka_unit_test(test_disk_cache_second_process),
      cmocka_unit_test(test_disk_cache_corrupt),
      cmocka_unit_test(test_disk_cache_concurrent),
  };
  const struct CMUnitTest dots[] = {
      cmocka_unit_test(test_dot_f32),      cmocka_unit_test(test_dot_dtypes),
      cmocka_unit_test(test_dot_epilogues), cmocka_unit_test(test_dot_fused_epilogues),
      cmocka_unit_test(test_core_epilogue_programs), cmocka_unit_test(test_core_reducing_epilogues),
      cmocka_unit_test(test_bf16_chain_denormals),
      cmocka_unit_test(test_scan_const_rhs), cmocka_unit_test(test_param_rhs_kept),
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_dump),         cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_split_modules), cmocka_unit_test(test_shared_kernels),
  };
  int fails = cmocka_run_group_tests_name("disk cache", disk, make_dir, remove_dir);
  fails += cmocka_run_group_tests_name("dots", dots, ctx_setup, ctx_teardown);
  return fails;
}
