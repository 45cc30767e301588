/* test_cache.c: the per-function signature cache: what makes a new signature (shape, dtype, static
 * bytes), that a warm call never traces, exact statistics, and concurrent calls from threads. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tjit.h"

/* What the trace functions count and see, through `user`. */
typedef struct counter {
  atomic_int traces;
  size_t last_static_len;
  double last_scale;
} counter;

/* r0 = x * x + x */
static void square_plus(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  counter *c = user;
  atomic_fetch_add(&c->traces, 1);
  r[0] = jit_add(t, jit_mul(t, a[0], a[0]), a[0]);
}

/* r0 = x * scale, scale = the static bytes read as a double (1 without them) */
static void scaled(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  counter *c = user;
  atomic_fetch_add(&c->traces, 1);
  size_t len = 12345;
  const void *p = jit_trace_static_args(t, &len);
  double scale = 1;
  c->last_static_len = len;
  if (len == sizeof scale) memcpy(&scale, p, sizeof scale);
  c->last_scale = scale;
  r[0] = jit_mul(t, a[0], jit_scalar(t, scale));
}

/* r0 = a + b */
static void add2(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  counter *c = user;
  atomic_fetch_add(&c->traces, 1);
  r[0] = jit_add(t, a[0], a[1]);
}

typedef struct env {
  jit_ctx *ctx;
  counter c;
} env;

static int setup(void **state) {
  env *e = calloc(1, sizeof *e);
  if (!e || jit_ctx_create(NULL, &e->ctx) != JIT_OK) return -1;
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env *e = *state;
  jit_ctx_destroy(e->ctx);
  free(e);
  return 0;
}

static jit_fn *compile(env *e, jit_trace_fn fn, const char *name, int n_args) {
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = name, .n_args = n_args, .n_results = 1};
  assert_int_equal(jit_compile(e->ctx, fn, &e->c, &o, &f), JIT_OK);
  return f;
}

/* An array of dtype dt with values base, base + 1, ... */
static jit_array *ramp(env *e, jit_dtype dt, int rank, const int64_t *shape, double base) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  size_t es = jit_dtype_size(dt);
  unsigned char *buf = calloc((size_t)n + 1, es);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    double v = base + (double)i;
    switch (dt) {
    case JIT_F32: ((float *)buf)[i] = (float)v; break;
    case JIT_F64: ((double *)buf)[i] = v; break;
    case JIT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case JIT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: fail_msg("ramp: dtype %d not handled", (int)dt);
    }
  }
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(e->ctx, dt, rank, shape, buf, &a), JIT_OK);
  free(buf);
  return a;
}

/* Element i of a result as a double. */
static double elem(const jit_array *a, int64_t i) {
  size_t nb = jit_array_nbytes(a);
  unsigned char *buf = malloc(nb ? nb : 1);
  assert_non_null(buf);
  assert_int_equal(jit_array_to_host(a, buf, nb), JIT_OK);
  double v = 0;
  switch (jit_array_dtype(a)) {
  case JIT_F32: v = ((float *)buf)[i]; break;
  case JIT_F64: v = ((double *)buf)[i]; break;
  case JIT_I32: v = ((int32_t *)buf)[i]; break;
  case JIT_I64: v = (double)((int64_t *)buf)[i]; break;
  default: fail_msg("elem: dtype not handled");
  }
  free(buf);
  return v;
}

static jit_fn_stats stats(jit_fn *f) {
  jit_fn_stats s;
  assert_int_equal(jit_fn_stats_get(f, &s), JIT_OK);
  return s;
}

/* Calls f(args) and checks that result element i is want (exact: small integers). */
static void call_check(jit_fn *f, jit_array *const *args, int64_t i, double want) {
  jit_array *r = NULL;
  jit_status st = jit_call(f, args, &r);
  if (st != JIT_OK) fail_msg("jit_call: %s", jit_last_error());
  assert_true(elem(r, i) == want);
  jit_array_free(r);
}

static void test_same_signature_traces_once(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, square_plus, "sq", 1);
  const int64_t shape[2] = {2, 3};
  jit_array *a = ramp(e, JIT_F32, 2, shape, 1), *b = ramp(e, JIT_F32, 2, shape, 10);
  call_check(f, &a, 5, 6 * 6 + 6);
  call_check(f, &a, 0, 2);
  call_check(f, &b, 1, 11 * 11 + 11); /* other values, same signature */
  assert_int_equal(atomic_load(&e->c.traces), 1);
  jit_fn_stats s = stats(f);
  assert_int_equal(s.calls, 3);
  assert_int_equal(s.cache_hits, 2);
  assert_int_equal(s.cache_misses, 1);
  assert_int_equal(s.n_signatures, 1);
  jit_array_free(a);
  jit_array_free(b);
  jit_fn_free(f);
}

static void test_new_shape_new_signature(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, square_plus, "sq", 1);
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6}, s0[1] = {0};
  jit_array *a = ramp(e, JIT_F32, 2, s23, 1), *b = ramp(e, JIT_F32, 2, s32, 1);
  jit_array *c = ramp(e, JIT_F32, 1, s6, 1), *z = ramp(e, JIT_F32, 1, s0, 1);
  jit_array *scalar = ramp(e, JIT_F32, 0, NULL, 3);
  call_check(f, &a, 1, 6);
  call_check(f, &b, 1, 6);         /* same numel, other shape */
  call_check(f, &c, 1, 6);         /* same numel, other rank */
  call_check(f, &scalar, 0, 12);   /* rank 0 */
  jit_array *r = NULL;
  assert_int_equal(jit_call(f, &z, &r), JIT_OK); /* empty */
  assert_int_equal(jit_array_nbytes(r), 0);
  assert_int_equal(jit_array_shape(r)[0], 0);
  jit_array_free(r);
  assert_int_equal(atomic_load(&e->c.traces), 5);
  call_check(f, &a, 2, 12);        /* all of them stay cached */
  call_check(f, &b, 2, 12);
  call_check(f, &c, 2, 12);
  call_check(f, &scalar, 0, 12);
  assert_int_equal(atomic_load(&e->c.traces), 5);
  jit_fn_stats s = stats(f);
  assert_int_equal(s.calls, 9);
  assert_int_equal(s.cache_misses, 5);
  assert_int_equal(s.cache_hits, 4);
  assert_int_equal(s.n_signatures, 5);
  jit_array_free(a);
  jit_array_free(b);
  jit_array_free(c);
  jit_array_free(z);
  jit_array_free(scalar);
  jit_fn_free(f);
}

static void test_new_dtype_new_signature(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, square_plus, "sq", 1);
  const int64_t shape[1] = {4};
  const jit_dtype dts[4] = {JIT_F32, JIT_F64, JIT_I32, JIT_I64};
  jit_array *a[4];
  for (int i = 0; i < 4; i++) a[i] = ramp(e, dts[i], 1, shape, 2);
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 4; i++) {
      jit_array *r = NULL;
      assert_int_equal(jit_call(f, &a[i], &r), JIT_OK);
      assert_int_equal(jit_array_dtype(r), dts[i]);
      assert_true(elem(r, 3) == 5 * 5 + 5);
      jit_array_free(r);
    }
  }
  assert_int_equal(atomic_load(&e->c.traces), 4);
  jit_fn_stats s = stats(f);
  assert_int_equal(s.calls, 8);
  assert_int_equal(s.cache_misses, 4);
  assert_int_equal(s.cache_hits, 4);
  assert_int_equal(s.n_signatures, 4);
  for (int i = 0; i < 4; i++) jit_array_free(a[i]);
  jit_fn_free(f);
}

/* The key covers every arg: changing only the second one is a new signature too. */
static void test_every_arg_in_key(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, add2, "add2", 2);
  const int64_t s4[1] = {4}, s1[1] = {1};
  jit_array *a = ramp(e, JIT_F32, 1, s4, 1), *b = ramp(e, JIT_F32, 1, s1, 100);
  call_check(f, (jit_array *[]){a, a}, 3, 8);
  call_check(f, (jit_array *[]){a, b}, 3, 104); /* broadcast of a [1] */
  call_check(f, (jit_array *[]){b, a}, 3, 104);
  call_check(f, (jit_array *[]){a, b}, 0, 101);
  assert_int_equal(atomic_load(&e->c.traces), 3);
  assert_int_equal(stats(f).n_signatures, 3);
  jit_array_free(a);
  jit_array_free(b);
  jit_fn_free(f);
}

static void call_scaled(jit_fn *f, jit_array *a, const void *sa, size_t len, double want) {
  jit_array *r = NULL;
  jit_status st = jit_call_static(f, sa, len, &a, &r);
  if (st != JIT_OK) fail_msg("jit_call_static: %s", jit_last_error());
  assert_true(elem(r, 1) == want);
  jit_array_free(r);
}

static void test_static_bytes_new_signature(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, scaled, "scaled", 1);
  const int64_t shape[1] = {3};
  jit_array *a = ramp(e, JIT_F32, 1, shape, 1); /* a[1] = 2 */
  double two = 2, three = 3;
  call_scaled(f, a, &two, sizeof two, 4);
  assert_int_equal(e->c.last_static_len, sizeof two);
  assert_true(e->c.last_scale == 2);
  call_scaled(f, a, &three, sizeof three, 6);
  assert_true(e->c.last_scale == 3);
  assert_int_equal(atomic_load(&e->c.traces), 2);
  double again = 2; /* equal bytes at another address: a hit */
  call_scaled(f, a, &again, sizeof again, 4);
  call_scaled(f, a, &three, sizeof three, 6);
  assert_int_equal(atomic_load(&e->c.traces), 2);

  /* no static bytes: jit_call, and jit_call_static with len 0 (any pointer) are one signature */
  call_scaled(f, a, NULL, 0, 2);
  assert_int_equal(e->c.last_static_len, 0);
  call_scaled(f, a, &two, 0, 2);
  call_check(f, &a, 1, 2);
  assert_int_equal(atomic_load(&e->c.traces), 3);
  /* a prefix of other static bytes is another key */
  float two_f = 2;
  call_scaled(f, a, &two_f, sizeof two_f, 2); /* len 4: the trace falls back to 1 */
  assert_int_equal(e->c.last_static_len, sizeof two_f);
  assert_int_equal(atomic_load(&e->c.traces), 4);
  /* a dump selected by args finds the newest signature with those arg types */
  FILE *null = fopen("/dev/null", "w");
  assert_non_null(null);
  assert_int_equal(jit_fn_dump(f, &a, JIT_DUMP_TRACED, null), JIT_OK);
  fclose(null);

  jit_fn_stats s = stats(f);
  assert_int_equal(s.calls, 8);
  assert_int_equal(s.cache_misses, 4);
  assert_int_equal(s.cache_hits, 4);
  assert_int_equal(s.n_signatures, 4);
  jit_array_free(a);
  jit_fn_free(f);
}

/* Enough signatures to grow the hash table several times; all stay reachable. */
static void test_many_signatures(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, square_plus, "sq", 1);
  enum { N = 40 };
  jit_array *a[N];
  for (int i = 0; i < N; i++) {
    const int64_t shape[1] = {i + 1};
    a[i] = ramp(e, JIT_F64, 1, shape, 1);
    call_check(f, &a[i], i, (double)(i + 1) * (i + 1) + (i + 1));
  }
  for (int i = N; i-- > 0;) call_check(f, &a[i], 0, 2);
  assert_int_equal(atomic_load(&e->c.traces), N);
  jit_fn_stats s = stats(f);
  assert_int_equal(s.n_signatures, N);
  assert_int_equal(s.cache_hits, N);
  assert_int_equal(s.cache_misses, N);
  for (int i = 0; i < N; i++) jit_array_free(a[i]);
  jit_fn_free(f); /* frees every signature (ASan checks) */
}

/* ---- threads ------------------------------------------------------------------------------------- */
enum { ITERS = 50, N_SHAPES = 3 };

typedef struct worker {
  jit_fn *f;
  jit_array *in[N_SHAPES];     /* this worker's own inputs, one per shape */
  double base;                 /* in[k][i] = base + i */
  pthread_barrier_t *start;
  int errors;
  char first_error[256];
} worker;

static void *work(void *p) {
  worker *w = p;
  pthread_barrier_wait(w->start);
  for (int it = 0; it < ITERS; it++) {
    int k = it % N_SHAPES;
    jit_array *r = NULL;
    if (jit_call(w->f, &w->in[k], &r) != JIT_OK) {
      if (!w->errors++) snprintf(w->first_error, sizeof w->first_error, "%s", jit_last_error());
      continue;
    }
    int64_t n = jit_array_shape(r)[0];
    double *buf = malloc((size_t)n * sizeof *buf);
    if (!buf || jit_array_to_host(r, buf, (size_t)n * sizeof *buf) != JIT_OK) {
      w->errors++;
    } else {
      for (int64_t i = 0; i < n; i++) {
        double x = w->base + (double)i;
        if (buf[i] != x * x + x) {
          if (!w->errors++)
            snprintf(w->first_error, sizeof w->first_error, "elem %lld: %g != %g",
                     (long long)i, buf[i], x * x + x);
        }
      }
    }
    free(buf);
    jit_array_free(r);
  }
  return NULL;
}

static void run_threads(env *e, int n_threads) {
  jit_fn *f = compile(e, square_plus, "sq", 1);
  worker *ws = calloc((size_t)n_threads, sizeof *ws);
  pthread_t *tid = calloc((size_t)n_threads, sizeof *tid);
  pthread_barrier_t start;
  assert_non_null(ws);
  assert_non_null(tid);
  assert_int_equal(pthread_barrier_init(&start, NULL, (unsigned)n_threads), 0);
  for (int t = 0; t < n_threads; t++) {
    ws[t].f = f;
    ws[t].start = &start;
    ws[t].base = 1000.0 * (t + 1);
    for (int k = 0; k < N_SHAPES; k++) {
      const int64_t shape[1] = {16 + 8 * k};
      ws[t].in[k] = ramp(e, JIT_F64, 1, shape, ws[t].base);
    }
  }
  for (int t = 0; t < n_threads; t++)
    assert_int_equal(pthread_create(&tid[t], NULL, work, &ws[t]), 0);
  for (int t = 0; t < n_threads; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&start);
  for (int t = 0; t < n_threads; t++) {
    if (ws[t].errors) fail_msg("thread %d: %d errors, first: %s", t, ws[t].errors, ws[t].first_error);
    for (int k = 0; k < N_SHAPES; k++) jit_array_free(ws[t].in[k]);
  }
  assert_int_equal(atomic_load(&e->c.traces), N_SHAPES); /* one trace per signature */
  jit_fn_stats s = stats(f);
  assert_int_equal(s.calls, (uint64_t)n_threads * ITERS);
  assert_int_equal(s.cache_misses, N_SHAPES);
  assert_int_equal(s.cache_hits, (uint64_t)n_threads * ITERS - N_SHAPES);
  assert_int_equal(s.n_signatures, N_SHAPES);
  free(ws);
  free(tid);
  jit_fn_free(f);
}

static void test_threads_4(void **state) { run_threads(*state, 4); }
static void test_threads_8(void **state) { run_threads(*state, 8); }

/* Two functions called from two threads each: their caches are separate. */
static void test_threads_two_fns(void **state) {
  env *e = *state;
  jit_fn *f = compile(e, square_plus, "f", 1), *g = compile(e, square_plus, "g", 1);
  pthread_barrier_t start;
  assert_int_equal(pthread_barrier_init(&start, NULL, 4), 0);
  worker ws[4];
  pthread_t tid[4];
  memset(ws, 0, sizeof ws);
  for (int t = 0; t < 4; t++) {
    ws[t].f = t % 2 ? g : f;
    ws[t].start = &start;
    ws[t].base = 7.0 * t;
    for (int k = 0; k < N_SHAPES; k++) {
      const int64_t shape[1] = {4 + k};
      ws[t].in[k] = ramp(e, JIT_F64, 1, shape, ws[t].base);
    }
  }
  for (int t = 0; t < 4; t++) assert_int_equal(pthread_create(&tid[t], NULL, work, &ws[t]), 0);
  for (int t = 0; t < 4; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&start);
  for (int t = 0; t < 4; t++) {
    if (ws[t].errors) fail_msg("thread %d: %s", t, ws[t].first_error);
    for (int k = 0; k < N_SHAPES; k++) jit_array_free(ws[t].in[k]);
  }
  assert_int_equal(atomic_load(&e->c.traces), 2 * N_SHAPES);
  assert_int_equal(stats(f).n_signatures, N_SHAPES);
  assert_int_equal(stats(g).n_signatures, N_SHAPES);
  assert_int_equal(stats(f).calls, 2 * ITERS);
  jit_fn_free(f);
  jit_fn_free(g);
}

/* A trace function that calls its own jit_fn would wait forever on the lock its caller holds:
   that inner call fails instead, and the outer one goes on. */
static jit_fn *self_fn;
static jit_ctx *self_ctx;
static jit_status inner_status;
static char inner_error[256];
static void calls_itself(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_array *arg = NULL, *res = NULL;
  const float v = 1;
  inner_status = jit_array_from_host(self_ctx, JIT_F32, 0, NULL, &v, &arg);
  if (inner_status == JIT_OK) inner_status = jit_call(self_fn, &arg, &res);
  snprintf(inner_error, sizeof inner_error, "%s", jit_last_error());
  jit_array_free(res);
  jit_array_free(arg);
  r[0] = jit_neg(t, a[0]);
}

static void test_recursive_call_fails(void **state) {
  env *e = *state;
  jit_fn_opts o = {.name = "selfish", .n_args = 1, .n_results = 1};
  self_ctx = e->ctx;
  assert_int_equal(jit_compile(e->ctx, calls_itself, NULL, &o, &self_fn), JIT_OK);
  jit_array *a = ramp(e, JIT_F32, 0, NULL, 5), *r = NULL;
  inner_status = JIT_OK;
  assert_int_equal(jit_call(self_fn, &a, &r), JIT_OK);
  assert_int_equal(inner_status, JIT_EINVAL);
  assert_non_null(strstr(inner_error, "jit_call: selfish: called from inside its own trace function"));
  assert_true(elem(r, 0) == -5);
  jit_array_free(r);
  jit_fn_stats s = stats(self_fn);
  assert_int_equal(s.calls, 1); /* the refused inner call is not counted */
  assert_int_equal(s.n_signatures, 1);
  jit_array_free(a);
  jit_fn_free(self_fn);
  self_fn = NULL;
}

static int reset(void **state) {
  env *e = *state;
  atomic_store(&e->c.traces, 0);
  e->c.last_static_len = 0;
  e->c.last_scale = 0;
  return 0;
}

int main(void) {
  unsetenv("TJIT_DUMP");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_same_signature_traces_once, reset),
      cmocka_unit_test_setup(test_new_shape_new_signature, reset),
      cmocka_unit_test_setup(test_new_dtype_new_signature, reset),
      cmocka_unit_test_setup(test_every_arg_in_key, reset),
      cmocka_unit_test_setup(test_static_bytes_new_signature, reset),
      cmocka_unit_test_setup(test_many_signatures, reset),
      cmocka_unit_test_setup(test_threads_4, reset),
      cmocka_unit_test_setup(test_threads_8, reset),
      cmocka_unit_test_setup(test_threads_two_fns, reset),
      cmocka_unit_test_setup(test_recursive_call_fails, reset),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
