/* test_pool.c: the fork-join thread pool (src/runtime/pool.c): every ith runs once per job, chunk
 * sums are exact for every nth, many small jobs, concurrent callers, nested jobs, two pools. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/pool.h"
#include "tjit.h"

#define N_THREADS 4 /* more than this machine's cores on purpose: workers must share them */

static pool *new_pool(int n) {
  pool *p = NULL;
  assert_int_equal(pool_create(n, &p), JIT_OK);
  assert_non_null(p);
  assert_int_equal(pool_n_threads(p), n);
  return p;
}

/* ---- a chunked sum: each job sums 1..n over chunks and counts which ith ran ----------------- */
typedef struct sum_job {
  pool_chunks chunks;
  _Atomic int64_t sum;
  _Atomic int ran[N_THREADS + 1]; /* times each ith ran in this job */
  _Atomic int bad;                /* an ith or nth out of range, or nth not the expected one */
  int want_nth;
  int64_t local[N_THREADS];       /* plain per-ith slots: read by the caller after the join */
} sum_job;

static void sum_body(void *arg, int ith, int nth) {
  sum_job *j = arg;
  if (ith < 0 || ith >= nth || nth != j->want_nth) {
    atomic_fetch_add(&j->bad, 1);
    return;
  }
  atomic_fetch_add(&j->ran[ith], 1);
  int64_t lo, hi, s = 0;
  while (pool_chunk_next(&j->chunks, &lo, &hi))
    for (int64_t i = lo; i < hi; i++) s += i + 1;
  j->local[ith] = s;
  atomic_fetch_add(&j->sum, s);
}

static void run_sum(pool *p, int nth, int64_t n, int64_t chunk) {
  sum_job j;
  memset(&j, 0, sizeof j);
  int eff = nth > pool_n_threads(p) ? pool_n_threads(p) : nth < 1 ? 1 : nth;
  j.want_nth = eff;
  pool_chunks_init(&j.chunks, 0, n, chunk);
  pool_run(p, sum_body, &j, nth);
  assert_int_equal(atomic_load(&j.bad), 0);
  assert_int_equal(atomic_load(&j.sum), n * (n + 1) / 2);
  int64_t plain = 0;
  for (int i = 0; i < eff; i++) {
    assert_int_equal(atomic_load(&j.ran[i]), 1);
    plain += j.local[i];
  }
  for (int i = eff; i <= N_THREADS; i++) assert_int_equal(atomic_load(&j.ran[i]), 0);
  assert_int_equal(plain, n * (n + 1) / 2); /* the join makes the plain writes visible */
}

static void test_sum_every_nth(void **state) {
  (void)state;
  pool *p = new_pool(N_THREADS);
  for (int nth = 1; nth <= N_THREADS; nth++) {
    run_sum(p, nth, 100000, 1000);
    run_sum(p, nth, 100000, 7);      /* a short last chunk */
    run_sum(p, nth, 3, 1);           /* fewer chunks than threads */
    run_sum(p, nth, 0, 16);          /* empty range */
  }
  run_sum(p, N_THREADS + 3, 5000, 10); /* nth clamped to n_threads */
  run_sum(p, 0, 5000, 10);             /* and to 1 */
  pool_destroy(p);
}

static void test_single_thread_pool(void **state) {
  (void)state;
  pool *p = new_pool(1);
  run_sum(p, 1, 1000, 10);
  run_sum(p, 4, 1000, 10); /* clamped: runs inline */
  pool_destroy(p);
}

/* nth == 1 runs on the caller itself. */
static void self_body(void *arg, int ith, int nth) {
  *(pthread_t *)arg = pthread_self();
}

static void test_nth1_inline(void **state) {
  (void)state;
  pool *p = new_pool(2);
  pthread_t who;
  pool_run(p, self_body, &who, 1);
  assert_true(pthread_equal(who, pthread_self()));
  pool_destroy(p);
}

/* ---- many small jobs: no lost wake-ups, no skipped job -------------------------------------- */
typedef struct count_job {
  _Atomic int64_t calls;
  int64_t per_ith[N_THREADS]; /* plain: each ith writes only its own slot */
} count_job;

static void count_body(void *arg, int ith, int nth) {
  count_job *c = arg;
  c->per_ith[ith]++;
  atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
}

static void test_many_small_jobs(void **state) {
  (void)state;
  pool *p = new_pool(N_THREADS);
  count_job c;
  memset(&c, 0, sizeof c);
  int64_t want = 0, want_ith[N_THREADS] = {0};
  for (int k = 0; k < 10000; k++) {
    int nth = 1 + k % N_THREADS;
    pool_run(p, count_body, &c, nth);
    want += nth;
    for (int i = 0; i < nth; i++) want_ith[i]++;
    if (atomic_load(&c.calls) != want) break; /* checked below; stop early on the first miss */
  }
  assert_int_equal(atomic_load(&c.calls), want);
  for (int i = 0; i < N_THREADS; i++) assert_int_equal(c.per_ith[i], want_ith[i]);
  pool_destroy(p);
}

/* ---- several host threads on one pool --------------------------------------------------------- */
typedef struct host_arg {
  pool *p;
  int id;
  int jobs;
  int failures;
} host_arg;

static void *host_main(void *a) {
  host_arg *h = a;
  for (int k = 0; k < h->jobs; k++) {
    sum_job *j = calloc(1, sizeof *j);
    if (!j) {
      h->failures++;
      continue;
    }
    int nth = 1 + (h->id + k) % pool_n_threads(h->p);
    int64_t n = 1000 + 37 * k + h->id;
    j->want_nth = nth;
    pool_chunks_init(&j->chunks, 0, n, 1 + k % 50);
    pool_run(h->p, sum_body, j, nth);
    int ok = atomic_load(&j->bad) == 0 && atomic_load(&j->sum) == n * (n + 1) / 2;
    for (int i = 0; i < nth; i++) ok = ok && atomic_load(&j->ran[i]) == 1;
    if (!ok) h->failures++;
    free(j);
  }
  return NULL;
}

static void run_hosts(pool **pools, int n_hosts, int jobs) {
  pthread_t tid[8];
  host_arg args[8];
  for (int i = 0; i < n_hosts; i++) {
    args[i] = (host_arg){.p = pools[i], .id = i, .jobs = jobs};
    assert_int_equal(pthread_create(&tid[i], NULL, host_main, &args[i]), 0);
  }
  for (int i = 0; i < n_hosts; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < n_hosts; i++) assert_int_equal(args[i].failures, 0);
}

static void test_concurrent_callers(void **state) {
  (void)state;
  pool *p = new_pool(N_THREADS);
  pool *ps[4] = {p, p, p, p};
  run_hosts(ps, 4, 500);
  pool_destroy(p);
}

static void test_two_pools_side_by_side(void **state) {
  (void)state;
  pool *a = new_pool(2), *b = new_pool(3);
  pool *ps[2] = {a, b};
  run_hosts(ps, 2, 1000);
  run_sum(a, 2, 10000, 100); /* each still works alone afterwards */
  run_sum(b, 3, 10000, 100);
  pool_destroy(a);
  pool_destroy(b);
}

/* ---- nested jobs -------------------------------------------------------------------------------- */
typedef struct nest_job {
  pool *p;
  pool *other;
  _Atomic int64_t inner_calls;
  _Atomic int inner_bad;
} nest_job;

static void inner_body(void *arg, int ith, int nth) {
  nest_job *n = arg;
  if (ith < 0 || ith >= nth) atomic_fetch_add(&n->inner_bad, 1);
  atomic_fetch_add(&n->inner_calls, 1);
}

static void outer_body(void *arg, int ith, int nth) {
  nest_job *n = arg;
  pool_run(n->p, inner_body, n, 3);                 /* same pool: runs inline, in turn */
  if (n->other) pool_run(n->other, inner_body, n, 2); /* another pool: a real job */
}

static void test_nested(void **state) {
  (void)state;
  pool *p = new_pool(N_THREADS), *q = new_pool(2);
  nest_job n = {.p = p, .other = NULL};
  pool_run(p, outer_body, &n, N_THREADS);
  assert_int_equal(atomic_load(&n.inner_calls), N_THREADS * 3);
  assert_int_equal(atomic_load(&n.inner_bad), 0);

  nest_job m = {.p = p, .other = q};
  atomic_init(&m.inner_calls, 0);
  pool_run(p, outer_body, &m, 2);
  assert_int_equal(atomic_load(&m.inner_calls), 2 * (3 + 2));
  assert_int_equal(atomic_load(&m.inner_bad), 0);
  pool_destroy(p);
  pool_destroy(q);
}

/* ---- idle workers sleep: a pool must not keep a core busy between jobs ------------------------- */
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_idle_workers_sleep(void **state) {
  (void)state;
  pool *p = new_pool(N_THREADS);
  run_sum(p, N_THREADS, 1000, 10);
  struct timespec settle = {0, 20 * 1000 * 1000}, idle = {0, 300 * 1000 * 1000};
  nanosleep(&settle, NULL); /* past the bounded spin */
  double c0 = cpu_seconds();
  nanosleep(&idle, NULL);
  double used = cpu_seconds() - c0;
  /* Spinning workers would burn ~3 x 0.3 s here; sleeping ones next to nothing. */
  assert_true(used < 0.05);
  pool_destroy(p);
}

/* ---- lifetime and errors ------------------------------------------------------------------------ */
static void test_create_destroy_loop(void **state) {
  (void)state;
  for (int k = 0; k < 200; k++) {
    pool *p = new_pool(1 + k % N_THREADS);
    if (k % 2) run_sum(p, N_THREADS, 100 + k, 3); /* half of them never run a job */
    pool_destroy(p);
  }
  pool_destroy(NULL);
}

static void test_create_errors(void **state) {
  (void)state;
  pool *p = (pool *)&p; /* must be reset to NULL on failure */
  assert_int_equal(pool_create(0, &p), JIT_EINVAL);
  assert_null(p);
  assert_non_null(strstr(jit_last_error(), "n_threads is 0"));
  assert_int_equal(pool_create(-3, &p), JIT_EINVAL);
  assert_int_equal(pool_create(POOL_MAX_THREADS + 1, &p), JIT_EINVAL);
  assert_int_equal(pool_create(2, NULL), JIT_EINVAL);
  assert_int_equal(pool_n_threads(NULL), 0);
}

static void test_chunks(void **state) {
  (void)state;
  pool_chunks c;
  int64_t lo = -1, hi = -1;
  pool_chunks_init(&c, 5, 5, 4);
  assert_false(pool_chunk_next(&c, &lo, &hi));

  pool_chunks_init(&c, 10, 21, 4);
  assert_true(pool_chunk_next(&c, &lo, &hi));
  assert_int_equal(lo, 10);
  assert_int_equal(hi, 14);
  assert_true(pool_chunk_next(&c, &lo, &hi));
  assert_true(pool_chunk_next(&c, &lo, &hi));
  assert_int_equal(lo, 18);
  assert_int_equal(hi, 21); /* the short last piece */
  assert_false(pool_chunk_next(&c, &lo, &hi));
  assert_false(pool_chunk_next(&c, &lo, &hi));

  pool_chunks_init(&c, 0, 3, 0); /* chunk < 1 is taken as 1 */
  int n = 0;
  while (pool_chunk_next(&c, &lo, &hi)) {
    assert_int_equal(hi - lo, 1);
    n++;
  }
  assert_int_equal(n, 3);

  pool_chunks_init(&c, 0, 10, 1000); /* one piece holding everything */
  assert_true(pool_chunk_next(&c, &lo, &hi));
  assert_int_equal(lo, 0);
  assert_int_equal(hi, 10);
  assert_false(pool_chunk_next(&c, &lo, &hi));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_every_nth),
      cmocka_unit_test(test_single_thread_pool),
      cmocka_unit_test(test_nth1_inline),
      cmocka_unit_test(test_many_small_jobs),
      cmocka_unit_test(test_concurrent_callers),
      cmocka_unit_test(test_two_pools_side_by_side),
      cmocka_unit_test(test_nested),
      cmocka_unit_test(test_idle_workers_sleep),
      cmocka_unit_test(test_create_destroy_loop),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
