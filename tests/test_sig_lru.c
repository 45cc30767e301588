/* test_sig_lru.c: the bound on a context's compiled signatures: least recently called ones are
 * evicted over all functions, an evicted signature recompiles when called again, TJIT_MAX_SIGNATURES
 * is parsed strictly, and RSS stays flat over thousands of distinct signatures. */
#define _GNU_SOURCE /* setenv */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "support/optest.h"
#include "tjit.h"

/* r0 = 2 x + 1; counts its traces through user */
static void affine(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  atomic_fetch_add((atomic_int *)user, 1);
  r[0] = jit_add(t, jit_mul(t, a[0], jit_scalar(t, 2)), jit_scalar(t, 1));
}

static jit_ctx *make_ctx(void) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 1;
  o.cache_dir = ""; /* no disk cache: a recompile must really compile */
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  return ctx;
}

static jit_fn *make_fn(jit_ctx *ctx, atomic_int *traces) {
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "affine", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, affine, traces, &o, &f), JIT_OK);
  return f;
}

/* Calls f on n floats 0, 1, ... and checks the result. */
static void call_n(jit_fn *f, jit_ctx *ctx, int64_t n) {
  static float x[1 << 14], y[1 << 14];
  assert_true(n <= (int64_t)(sizeof x / sizeof *x));
  for (int64_t i = 0; i < n; i++) x[i] = (float)i;
  jit_array *a = NULL, *r = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, &n, x, &a), JIT_OK);
  jit_status st = jit_call(f, &a, &r);
  if (st != JIT_OK) fail_msg("jit_call on f32[%lld]: %s", (long long)n, jit_last_error());
  assert_int_equal(jit_array_to_host(r, y, (size_t)n * sizeof *y), JIT_OK);
  for (int64_t i = 0; i < n; i++) assert_true(y[i] == 2 * x[i] + 1);
  jit_array_free(a);
  jit_array_free(r);
}

static jit_fn_stats stats(jit_fn *f) {
  jit_fn_stats s;
  assert_int_equal(jit_fn_stats_get(f, &s), JIT_OK);
  assert_int_equal(s.calls, s.cache_hits + s.cache_misses);
  return s;
}

static void test_least_recent_goes_first(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx();
  sig_lru_set_max(ctx, 4);
  atomic_int traces = 0;
  jit_fn *f = make_fn(ctx, &traces);
  for (int n = 1; n <= 4; n++) call_n(f, ctx, n);
  assert_int_equal(stats(f).n_signatures, 4);
  call_n(f, ctx, 1); /* a hit: shape 1 becomes the most recent, shape 2 the least */
  assert_int_equal(atomic_load(&traces), 4);
  call_n(f, ctx, 5); /* evicts shape 2 */
  jit_fn_stats s = stats(f);
  assert_int_equal(s.n_signatures, 4);
  assert_int_equal(s.cache_misses, 5);
  call_n(f, ctx, 1); /* still cached */
  call_n(f, ctx, 3);
  call_n(f, ctx, 4);
  assert_int_equal(atomic_load(&traces), 5);
  call_n(f, ctx, 2); /* evicted: traced and compiled again, and right */
  assert_int_equal(atomic_load(&traces), 6);
  s = stats(f);
  assert_int_equal(s.cache_misses, 6);
  assert_int_equal(s.n_signatures, 4);
  /* dumps name signatures by compile count, which eviction does not reuse */
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_OPTIMIZED);
  assert_non_null(strstr(text, "f32[2]"));
  free(text);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* The bound is the context's: two functions share it, the least recent of either goes. */
static void test_bound_is_per_context(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx();
  sig_lru_set_max(ctx, 3);
  atomic_int tf = 0, tg = 0;
  jit_fn *f = make_fn(ctx, &tf), *g = make_fn(ctx, &tg);
  call_n(f, ctx, 1);
  call_n(g, ctx, 1);
  call_n(f, ctx, 2);
  call_n(g, ctx, 2); /* evicts f's shape 1 */
  assert_int_equal(stats(f).n_signatures + stats(g).n_signatures, 3);
  assert_int_equal(stats(f).n_signatures, 1);
  call_n(g, ctx, 1);
  assert_int_equal(atomic_load(&tg), 2);
  call_n(f, ctx, 1); /* recompiled; evicts f's shape 2 (g's shape 1 was called since) */
  assert_int_equal(atomic_load(&tf), 3);
  call_n(g, ctx, 1);
  call_n(g, ctx, 2);
  assert_int_equal(atomic_load(&tg), 2);
  /* freeing a function leaves the other's signatures and frees room for new ones */
  jit_fn_free(f);
  call_n(g, ctx, 3);
  assert_int_equal(stats(g).n_signatures, 3);
  /* lowering the bound evicts at once; 0 lifts it */
  sig_lru_set_max(ctx, 1);
  assert_int_equal(stats(g).n_signatures, 1);
  sig_lru_set_max(ctx, 0);
  for (int n = 4; n <= 8; n++) call_n(g, ctx, n);
  assert_int_equal(stats(g).n_signatures, 6);
  jit_fn_free(g);
  jit_ctx_destroy(ctx);
}

static void test_env(void **state) {
  (void)state;
  const char *bad[] = {"", "abc", "-1", "12x", "99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("TJIT_MAX_SIGNATURES", bad[i], 1);
    jit_ctx *ctx = (jit_ctx *)&ctx;
    assert_int_equal(jit_ctx_create(NULL, &ctx), JIT_EINVAL);
    assert_null(ctx);
    assert_non_null(strstr(jit_last_error(), "TJIT_MAX_SIGNATURES"));
  }
  setenv("TJIT_MAX_SIGNATURES", "2", 1);
  jit_ctx *ctx = make_ctx();
  unsetenv("TJIT_MAX_SIGNATURES");
  atomic_int traces = 0;
  jit_fn *f = make_fn(ctx, &traces);
  for (int n = 1; n <= 5; n++) call_n(f, ctx, n);
  assert_int_equal(stats(f).n_signatures, 2);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  ctx = make_ctx();
  assert_int_equal(sig_lru_set_max(ctx, 7), JIT_DEFAULT_MAX_SIGNATURES);
  jit_ctx_destroy(ctx);
}

static long rss_kb(void) {
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Thousands of distinct signatures (f32[1] .. f32[N]) under a bound of 64, the function itself
   replaced every 200 signatures: RSS after N is that after the first 500 plus a small margin.
   Without the bound (or with code memory kept after eviction) a tiny signature costs ~90 KB, so
   300 more would add ~27 MB. N is 800 here, ~15-45 ms per compile on a loaded 2-core machine
   ($TJIT_TEST_SIGNATURES=10000 for the figure, a few minutes). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifdef UNDER_ASAN
/* ASan's quarantine holds freed blocks back (256 MB by default), so RSS says nothing there: the
   loop still runs, shorter, for what ASan does check (no leak, no use after free). */
enum { RSS_MEANINGFUL = 0, DEFAULT_SIGS = 300, BASE_AT = 150 };
#else
enum { RSS_MEANINGFUL = 1, DEFAULT_SIGS = 800, BASE_AT = 500 };
#endif

static void test_rss_bounded(void **state) {
  (void)state;
  int n_sigs = DEFAULT_SIGS;
  const char *env = getenv("TJIT_TEST_SIGNATURES");
  if (env && atoi(env) > BASE_AT) n_sigs = atoi(env);
  if (n_sigs > 1 << 14) n_sigs = 1 << 14;
  jit_ctx *ctx = make_ctx();
  sig_lru_set_max(ctx, 64);
  atomic_int traces = 0;
  jit_fn *f = make_fn(ctx, &traces);
  long rss_base = 0, rss_peak = 0;
  double t0 = now_s();
  for (int n = 1; n <= n_sigs; n++) {
    call_n(f, ctx, n);
    if (n % 200 == 0) {
      jit_fn_free(f); /* returns its 64 signatures' code */
      f = make_fn(ctx, &traces);
    }
    long rss = rss_kb();
    if (n == BASE_AT) rss_base = rss;
    if (n > BASE_AT && rss > rss_peak) rss_peak = rss;
  }
  double secs = now_s() - t0;
  long rss_end = rss_kb();
  assert_int_equal(atomic_load(&traces), n_sigs);
  assert_true(stats(f).n_signatures <= 64);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  print_message("[ info ] %d signatures (bound 64) in %.1f s: RSS %ld KB after %d, at most %ld KB "
                "after, %ld KB at the end%s\n",
                n_sigs, secs, rss_base, BASE_AT, rss_peak, rss_end,
                RSS_MEANINGFUL ? "" : " (ASan: not checked)");
  /* 8 MB of margin for allocator slack: the unbounded growth would be ~90 MB per 1,000. */
  if (RSS_MEANINGFUL) assert_true(rss_peak <= rss_base + 8 * 1024);
}

int main(void) {
  unsetenv("TJIT_MAX_SIGNATURES");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_least_recent_goes_first),
      cmocka_unit_test(test_bound_is_per_context),
      cmocka_unit_test(test_env),
      cmocka_unit_test(test_rss_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
