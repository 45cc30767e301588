/* test_process_local.c: the process API in one process (tests/mpi/ runs it across ranks): index
 * and count, jit_array_from_process_local (this process holds every block: the whole array, one
 * copy of each distinct block in device order), its refusals, and the TJIT_DISTRIBUTED check. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tjit.h"

static jit_ctx *ctx_of(int devices) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = 1;
  jit_ctx *c = NULL;
  assert_int_equal(jit_ctx_create(&o, &c), JIT_OK);
  return c;
}

static void test_one_process(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(4);
  assert_int_equal(jit_process_index(c), 0);
  assert_int_equal(jit_process_count(c), 1);
  assert_int_equal(jit_device_count(c), 4);
  assert_int_equal(jit_process_index(NULL), 0);
  assert_int_equal(jit_process_count(NULL), 1);
  jit_ctx_destroy(c);
}

/* A 2 x 2 mesh, rows split over "x" and replicated over "y": the blocks are row halves, each
   held by two devices; the local data is each half once, in device order. */
static void test_from_process_local(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(4);
  static const char *const names[2] = {"x", "y"};
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  assert_int_equal(jit_mesh_create(c, 2, (const int64_t[]){2, 2}, names, NULL, &m), JIT_OK);
  assert_int_equal(jit_sharding_create(m, "x,_", &s), JIT_OK);
  float v[6 * 3], back[6 * 3];
  for (int i = 0; i < 18; i++) v[i] = (float)i * 0.5f - 3.0f;
  jit_array *a = NULL;
  const int64_t shape[2] = {6, 3};
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, shape, v, sizeof v, &a), JIT_OK);
  assert_int_equal(jit_array_to_host(a, back, sizeof back), JIT_OK);
  assert_memory_equal(back, v, sizeof v);
  jit_array_free(a);

  /* refusals: each names what is wrong, and leaves *out NULL */
  a = (jit_array *)&a;
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, shape, v, sizeof v - 4, &a),
                   JIT_EINVAL);
  assert_null(a);
  assert_non_null(strstr(jit_last_error(), "2 distinct blocks of 36 bytes (72 bytes)"));
  assert_int_equal(jit_array_from_process_local(NULL, JIT_F32, 2, shape, v, sizeof v, &a),
                   JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "sharding is NULL"));
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, shape, v, sizeof v, NULL),
                   JIT_EINVAL);
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, shape, NULL, sizeof v, &a),
                   JIT_EINVAL);
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, (const int64_t[]){5, 3}, v,
                                                sizeof v, &a),
                   JIT_ESHARDING);
  assert_int_equal(jit_array_from_process_local(s, JIT_F32, 2, NULL, v, sizeof v, &a),
                   JIT_EINVAL);
  assert_int_equal(jit_array_from_process_local(s, (jit_dtype)99, 2, shape, v, sizeof v, &a),
                   JIT_EINVAL);
  assert_null(a);
  jit_sharding_free(s);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

/* TJIT_DISTRIBUTED must be exactly 1 to join an MPI job: any other value is one process. */
static void test_env_not_distributed(void **state) {
  (void)state;
  setenv("TJIT_DISTRIBUTED", "0", 1);
  jit_ctx *c = ctx_of(2);
  assert_int_equal(jit_process_count(c), 1);
  assert_int_equal(jit_device_count(c), 2);
  jit_ctx_destroy(c);
  unsetenv("TJIT_DISTRIBUTED");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_process),
      cmocka_unit_test(test_from_process_local),
      cmocka_unit_test(test_env_not_distributed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
