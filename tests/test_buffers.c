/* test_buffers.c: the per-context buffer cache: reuse by size class, bounds, alignment, and
 * arrays that outlive their context. */
#define _GNU_SOURCE /* setenv, unsetenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "runtime/buffers.h"
#include "tjit.h"

static void test_classes_and_reuse(void **state) {
  (void)state;
  buf_pool *p;
  assert_int_equal(buf_pool_create(&p), JIT_OK);
  size_t cap_a, cap_b, cap_c;
  void *a = buf_pool_get(p, 100, &cap_a);
  assert_non_null(a);
  assert_int_equal(cap_a, 128);
  assert_int_equal((uintptr_t)a % 64, 0);
  void *big = buf_pool_get(p, (3u << 20) + 5, &cap_b);
  assert_non_null(big);
  assert_int_equal(cap_b, 4u << 20);
  assert_int_equal((uintptr_t)big % (2u << 20), 0);
  memset(big, 1, cap_b);
  buf_pool_put(p, a, cap_a);
  buf_pool_put(p, big, cap_b);
  void *a2 = buf_pool_get(p, 120, &cap_c); /* same class as 100 */
  assert_int_equal(cap_c, 128);
  if (buf_pool_caches()) assert_ptr_equal(a2, a);
  size_t cap_d;
  void *b2 = buf_pool_get(p, 4u << 20, &cap_d);
  assert_int_equal(cap_d, 4u << 20);
  if (buf_pool_caches()) assert_ptr_equal(b2, big);
  buf_pool_put(p, a2, cap_c);
  buf_pool_put(p, b2, cap_d);
  buf_pool_release(p);
}

static void test_bounded_slots(void **state) {
  (void)state;
  buf_pool *p;
  assert_int_equal(buf_pool_create(&p), JIT_OK);
  /* More blocks than the cache keeps: the oldest are freed, nothing leaks (ASan checks). */
  void *blocks[100];
  size_t caps[100];
  for (int i = 0; i < 100; i++) {
    blocks[i] = buf_pool_get(p, (size_t)64 << (i % 12), &caps[i]);
    assert_non_null(blocks[i]);
  }
  for (int i = 0; i < 100; i++) buf_pool_put(p, blocks[i], caps[i]);
  assert_null(buf_pool_get(p, SIZE_MAX - 10, &caps[0])); /* overflow is a failure, not a crash */
  buf_pool_release(p);
}

static void test_array_outlives_ctx(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.opt_level = 0;
  jit_ctx *ctx;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  const float v[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  jit_array *a, *b;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, shape, v, &a), JIT_OK);
  jit_array_free(a);
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, shape, v, &b), JIT_OK);
  jit_ctx_destroy(ctx);
  float out[4];
  assert_int_equal(jit_array_to_host(b, out, sizeof out), JIT_OK);
  assert_memory_equal(out, v, sizeof v);
  jit_array_free(b); /* the last reference frees the pool */
}

/* 1: the mapping holding p is advised to huge pages (VmFlags "hg" in /proc/self/smaps), 0: not,
   -1: no smaps to tell. */
static int advised_huge(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0, found = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's first line; no field's name reads so */
      inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      found = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return found;
}

/* Big blocks are advised to huge pages, none when $TJIT_HUGE_PAGES is 0 (where the kernel has
   transparent huge pages to advise). */
static void test_huge_page_advice(void **state) {
  (void)state;
  FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!thp) skip();
  fclose(thp);
  buf_pool *p;
  assert_int_equal(buf_pool_create(&p), JIT_OK);
  size_t cap_a, cap_b;
  unsetenv("TJIT_HUGE_PAGES");
  void *a = buf_pool_get(p, 6u << 20, &cap_a);
  assert_non_null(a);
  int on = advised_huge(a);
  setenv("TJIT_HUGE_PAGES", "0", 1);
  void *b = buf_pool_get(p, 10u << 20, &cap_b); /* another class: a fresh block */
  assert_non_null(b);
  int off = advised_huge(b);
  unsetenv("TJIT_HUGE_PAGES");
  buf_pool_put(p, a, cap_a);
  buf_pool_put(p, b, cap_b);
  buf_pool_release(p);
  if (on < 0 || off < 0) skip();
  assert_int_equal(on, 1);
  assert_int_equal(off, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classes_and_reuse),
      cmocka_unit_test(test_bounded_slots),
      cmocka_unit_test(test_array_outlives_ctx),
      cmocka_unit_test(test_huge_page_advice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
