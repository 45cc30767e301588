/* test_threads_load.c: 8 host threads compile and call functions of one context for a while (their
 * own, replaced every so often, and one they share) under a bound of 24 signatures with a disk
 * cache, so that evictions, recompiles, disk loads and frees race with running calls. Every result
 * is checked, and so are the statistics. Run under ThreadSanitizer by .ci/run (label threads).
 * $TJIT_TEST_LOAD_SECONDS sets the duration (default 10; the figure is 60). */
#define _GNU_SOURCE /* mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tjit.h"

#define N_THREADS 8
#define MAX_SIGS 24  /* far below the 8 x 9 + 9 signatures in play: evictions all the time */
#define RENEW_EVERY 25 /* calls after which a thread frees its own function and makes another */

static const int64_t shapes[] = {1, 3, 8, 17, 64, 100, 1000, 4096, 1 << 17};
#define N_SHAPES ((int)(sizeof shapes / sizeof *shapes))

typedef struct fn_user {
  float a, b;        /* the function computes a x + b */
  atomic_int traces;
} fn_user;

static void affine(jit_trace *t, const jit_val *x, jit_val *r, void *user) {
  fn_user *u = user;
  atomic_fetch_add(&u->traces, 1);
  r[0] = jit_add(t, jit_mul(t, x[0], jit_scalar(t, u->a)), jit_scalar(t, u->b));
}

typedef struct shared {
  jit_ctx *ctx;
  jit_fn *common;           /* called by every thread */
  fn_user common_user;
  atomic_ullong common_calls;
  double deadline;
} shared;

typedef struct worker {
  shared *sh;
  int id;
  uint64_t rng;
  long calls, renewals;
  char error[256];          /* the first failure, empty when none */
} worker;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t next(worker *w) {
  w->rng ^= w->rng << 13, w->rng ^= w->rng >> 7, w->rng ^= w->rng << 17;
  return w->rng;
}

#define CHECK(w, cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (!(w)->error[0]) snprintf((w)->error, sizeof (w)->error, __VA_ARGS__);                    \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

/* One call of f (computing a x + b) on a random shape, its result checked. */
static bool call_checked(worker *w, jit_fn *f, const fn_user *u, float *x, float *y) {
  int64_t n = shapes[next(w) % N_SHAPES];
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i + w->id) % 17);
  jit_array *a = NULL, *r = NULL;
  CHECK(w, jit_array_from_host(w->sh->ctx, JIT_F32, 1, &n, x, &a) == JIT_OK, "from_host: %s",
        jit_last_error());
  jit_status st = jit_call(f, &a, &r);
  jit_array_free(a);
  CHECK(w, st == JIT_OK, "thread %d: jit_call on f32[%lld]: %s", w->id, (long long)n,
        jit_last_error());
  st = jit_array_to_host(r, y, (size_t)n * sizeof *y);
  jit_array_free(r);
  CHECK(w, st == JIT_OK, "to_host: %s", jit_last_error());
  for (int64_t i = 0; i < n; i++)
    CHECK(w, y[i] == u->a * x[i] + u->b, "thread %d: f32[%lld][%lld] = %g, expected %g", w->id,
          (long long)n, (long long)i, (double)y[i], (double)(u->a * x[i] + u->b));
  return true;
}

/* The statistics of a function this thread alone called `calls` times. */
static bool stats_ok(worker *w, jit_fn *f, long calls) {
  jit_fn_stats s;
  CHECK(w, jit_fn_stats_get(f, &s) == JIT_OK, "stats: %s", jit_last_error());
  CHECK(w, s.calls == (uint64_t)calls, "thread %d: calls %llu, made %ld", w->id,
        (unsigned long long)s.calls, calls);
  CHECK(w, s.calls == s.cache_hits + s.cache_misses, "thread %d: calls %llu != %llu + %llu",
        w->id, (unsigned long long)s.calls, (unsigned long long)s.cache_hits,
        (unsigned long long)s.cache_misses);
  CHECK(w, s.n_signatures >= 0 && s.n_signatures <= N_SHAPES, "n_signatures %d", s.n_signatures);
  return true;
}

static void *work(void *p) {
  worker *w = p;
  shared *sh = w->sh;
  float *x = malloc(sizeof(float) << 17), *y = malloc(sizeof(float) << 17);
  fn_user u = {.a = (float)(w->id + 2), .b = 0};
  jit_fn *own = NULL;
  long own_calls = 0;
  if (!x || !y) {
    snprintf(w->error, sizeof w->error, "out of memory");
    goto out;
  }
  while (now_s() < sh->deadline) {
    if (!own) {
      /* b cycles through 5 values: some new functions load a predecessor's code from disk */
      u.b = (float)(w->renewals % 5);
      atomic_store(&u.traces, 0);
      jit_fn_opts o = {.name = "own", .n_args = 1, .n_results = 1};
      if (jit_compile(sh->ctx, affine, &u, &o, &own) != JIT_OK) {
        snprintf(w->error, sizeof w->error, "jit_compile: %s", jit_last_error());
        break;
      }
      own_calls = 0;
    }
    bool ok;
    if (next(w) % 4 == 0) {
      ok = call_checked(w, sh->common, &sh->common_user, x, y);
      atomic_fetch_add(&sh->common_calls, 1);
    } else {
      ok = call_checked(w, own, &u, x, y);
      own_calls++;
    }
    if (!ok) break;
    w->calls++;
    if (own_calls == RENEW_EVERY) {
      if (!stats_ok(w, own, own_calls)) break;
      jit_fn_free(own);
      own = NULL;
      w->renewals++;
    }
  }
  if (own && !w->error[0]) (void)stats_ok(w, own, own_calls);
  jit_fn_free(own);
out:
  free(x);
  free(y);
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_threads_load: no progress: deadlock?\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
      if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
        unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
  }
  rmdir(dir);
}

static void test_eight_threads(void **state) {
  (void)state;
  int seconds = 10;
  const char *env = getenv("TJIT_TEST_LOAD_SECONDS");
  if (env && atoi(env) > 0) seconds = atoi(env);
  char dir[] = "/tmp/tjit-load-XXXXXX";
  assert_non_null(mkdtemp(dir));
  shared sh = {.common_user = {.a = -1, .b = 0.5f}};
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2;
  o.cache_dir = dir;
  assert_int_equal(jit_ctx_create(&o, &sh.ctx), JIT_OK);
  sig_lru_set_max(sh.ctx, MAX_SIGS);
  jit_fn_opts fo = {.name = "common", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(sh.ctx, affine, &sh.common_user, &fo, &sh.common), JIT_OK);

  signal(SIGALRM, watchdog);
  alarm((unsigned)seconds * 3 + 300); /* compiles under TSan are slow, a deadlock is forever */
  sh.deadline = now_s() + seconds;
  worker w[N_THREADS];
  pthread_t th[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    w[i] = (worker){.sh = &sh, .id = i, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)};
    assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  long calls = 0, renewals = 0;
  for (int i = 0; i < N_THREADS; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    if (w[i].error[0]) fail_msg("%s", w[i].error);
    calls += w[i].calls;
    renewals += w[i].renewals;
  }
  alarm(0);

  jit_fn_stats s;
  assert_int_equal(jit_fn_stats_get(sh.common, &s), JIT_OK);
  assert_int_equal(s.calls, atomic_load(&sh.common_calls));
  assert_int_equal(s.calls, s.cache_hits + s.cache_misses);
  /* every miss traced once; evictions made some shapes miss more than once */
  assert_int_equal(s.cache_misses, (uint64_t)atomic_load(&sh.common_user.traces));
  /* quiescent now: the context's list is exactly the one function left, within the bound */
  assert_true(s.n_signatures <= MAX_SIGS);
  pthread_mutex_lock(&sh.ctx->sigs_mu);
  assert_int_equal(sh.ctx->n_sigs, s.n_signatures);
  pthread_mutex_unlock(&sh.ctx->sigs_mu);
  print_message("[ info ] %d s, %d threads: %ld calls, %ld functions replaced; common: %llu calls, "
                "%llu misses, %llu disk hits, %d signatures left\n",
                seconds, N_THREADS, calls, renewals, (unsigned long long)s.calls,
                (unsigned long long)s.cache_misses, (unsigned long long)s.disk_cache_hits,
                s.n_signatures);
  if (s.calls >= 100) assert_true(s.cache_misses > (uint64_t)N_SHAPES); /* evictions happened */
  jit_fn_free(sh.common);
  pthread_mutex_lock(&sh.ctx->sigs_mu);
  assert_int_equal(sh.ctx->n_sigs, 0);
  assert_null(sh.ctx->sigs);
  pthread_mutex_unlock(&sh.ctx->sigs_mu);
  jit_ctx_destroy(sh.ctx);
  remove_dir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eight_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
