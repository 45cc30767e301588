/* test_buffers.c: the per-context buffer cache: reuse by size class, bounds, alignment, and
 * arrays that outlive their context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classes_and_reuse),
      cmocka_unit_test(test_bounded_slots),
      cmocka_unit_test(test_array_outlives_ctx),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
