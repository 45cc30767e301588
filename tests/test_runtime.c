/* test_runtime.c: the runtime's public API outside traces: contexts and their environment,
 * arrays, jit_compile/jit_call validation, dumps and statistics (sharding: test_sharding.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "tjit.h"

/* Fails (printing the message) unless the last error contains want. */
static void expect_msg(const char *want) {
  const char *got = jit_last_error();
  if (!strstr(got, want)) {
    print_error("last error \"%s\" does not contain \"%s\"\n", got, want);
    fail();
  }
}

#define EXPECT_ERR(call, status, msg)         \
  do {                                        \
    assert_int_equal((int)(call), (int)(status)); \
    expect_msg(msg);                          \
  } while (0)

static jit_ctx *new_ctx(void) {
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(NULL, &ctx), JIT_OK);
  assert_non_null(ctx);
  return ctx;
}

static jit_array *f32_array(jit_ctx *ctx, int rank, const int64_t *shape, const float *v) {
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, rank, shape, v, &a), JIT_OK);
  return a;
}

/* ---- context ----------------------------------------------------------------------------------- */
static void test_ctx_defaults(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  assert_int_equal(o.opt_level, 3);
  assert_int_equal(o.n_devices, 0);
  assert_int_equal(o.n_threads, 0);
  assert_null(o.cache_dir);

  jit_ctx *ctx = new_ctx();
  assert_int_equal(jit_device_count(ctx), 1);
  assert_int_equal(ctx->n_threads, (int)sysconf(_SC_NPROCESSORS_ONLN));
  assert_int_equal(ctx->opt_level, 3);
  assert_null(ctx->cache_dir);
  jit_ctx_destroy(ctx);
  jit_ctx_destroy(NULL);
  assert_int_equal(jit_device_count(NULL), 0);
}

static void test_ctx_opts(void **state) {
  (void)state;
  char dir[] = "/tmp/some-cache";
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = 3;
  o.n_threads = 5;
  o.cache_dir = dir;
  o.opt_level = 0;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  dir[1] = 'X'; /* the context keeps its own copy */
  assert_int_equal(jit_device_count(ctx), 3);
  assert_int_equal(ctx->n_threads, 5);
  assert_int_equal(ctx->opt_level, 0);
  assert_string_equal(ctx->cache_dir, "/tmp/some-cache");
  jit_ctx_destroy(ctx);
}

static void test_ctx_bad_opts(void **state) {
  (void)state;
  jit_ctx *ctx = (jit_ctx *)&ctx;
  EXPECT_ERR(jit_ctx_create(NULL, NULL), JIT_EINVAL, "jit_ctx_create: out is NULL");
  jit_ctx_opts o = jit_ctx_opts_default();
  o.opt_level = 4;
  EXPECT_ERR(jit_ctx_create(&o, &ctx), JIT_EINVAL, "jit_ctx_create: opt_level is 4 (must be 0..3)");
  assert_null(ctx);
  o.opt_level = -1;
  EXPECT_ERR(jit_ctx_create(&o, &ctx), JIT_EINVAL, "opt_level is -1");
  o = jit_ctx_opts_default();
  o.n_devices = -2;
  EXPECT_ERR(jit_ctx_create(&o, &ctx), JIT_EINVAL, "jit_ctx_create: n_devices is -2");
  o.n_devices = 100000;
  EXPECT_ERR(jit_ctx_create(&o, &ctx), JIT_EINVAL, "n_devices is 100000");
  o = jit_ctx_opts_default();
  o.n_threads = -1;
  EXPECT_ERR(jit_ctx_create(&o, &ctx), JIT_EINVAL, "jit_ctx_create: n_threads is -1");
  assert_null(ctx);
}

static void test_ctx_env(void **state) {
  (void)state;
  jit_ctx *ctx = NULL;
  setenv("TJIT_DEVICES", "8", 1);
  setenv("TJIT_CACHE_DIR", "/tmp/env-cache", 1);
  assert_int_equal(jit_ctx_create(NULL, &ctx), JIT_OK);
  assert_int_equal(jit_device_count(ctx), 8);
  assert_string_equal(ctx->cache_dir, "/tmp/env-cache");
  jit_ctx_destroy(ctx);

  /* explicit options win over the environment */
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = 2;
  o.cache_dir = "/tmp/opt-cache";
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  assert_int_equal(jit_device_count(ctx), 2);
  assert_string_equal(ctx->cache_dir, "/tmp/opt-cache");
  jit_ctx_destroy(ctx);

  const char *bad[] = {"0", "-1", "abc", "3x", "", " ", "99999999999999999999", "1.5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("TJIT_DEVICES", bad[i], 1);
    ctx = (jit_ctx *)&ctx;
    EXPECT_ERR(jit_ctx_create(NULL, &ctx), JIT_EINVAL, "jit_ctx_create: TJIT_DEVICES=");
    char want[64];
    snprintf(want, sizeof want, "TJIT_DEVICES='%s' is not an integer", bad[i]);
    expect_msg(want);
    assert_null(ctx);
  }
  /* an explicit count does not read the variable at all */
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  jit_ctx_destroy(ctx);
  unsetenv("TJIT_DEVICES");
  unsetenv("TJIT_CACHE_DIR");
  assert_int_equal(jit_ctx_create(NULL, &ctx), JIT_OK);
  assert_int_equal(jit_device_count(ctx), 1);
  assert_null(ctx->cache_dir);
  jit_ctx_destroy(ctx);
}

static void test_status_strings(void **state) {
  (void)state;
  assert_string_equal(jit_status_str(JIT_OK), "ok");
  assert_string_equal(jit_status_str(JIT_EUNSUPPORTED), "unsupported");
  assert_int_equal(jit_dtype_size(JIT_BF16), 2);
  assert_string_equal(jit_dtype_name(JIT_I64), "i64");
}

/* ---- arrays ------------------------------------------------------------------------------------ */
static void test_array_round_trip_every_dtype(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  const jit_dtype dts[] = {JIT_BOOL, JIT_I8, JIT_U8, JIT_I32, JIT_I64,
                           JIT_F16, JIT_BF16, JIT_F32, JIT_F64};
  const int64_t shapes[][3] = {{0}, {7}, {3, 5}, {2, 3, 4}};
  const int ranks[] = {0, 1, 2, 3};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    for (size_t s = 0; s < 4; s++) {
      int rank = ranks[s];
      size_t es = jit_dtype_size(dts[d]), n = 1;
      for (int i = 0; i < rank; i++) n *= (size_t)shapes[s][i];
      unsigned char *in = malloc(n * es + 1), *out = malloc(n * es + 1);
      assert_non_null(in);
      assert_non_null(out);
      for (size_t i = 0; i < n * es; i++) in[i] = (unsigned char)(i * 37 + d * 11 + 1);
      if (dts[d] == JIT_BOOL)
        for (size_t i = 0; i < n; i++) in[i] &= 1;
      jit_array *a = NULL;
      assert_int_equal(jit_array_from_host(ctx, dts[d], rank, shapes[s], in, &a), JIT_OK);
      assert_int_equal(jit_array_rank(a), rank);
      assert_int_equal(jit_array_dtype(a), dts[d]);
      assert_int_equal(jit_array_nbytes(a), n * es);
      for (int i = 0; i < rank; i++) assert_int_equal(jit_array_shape(a)[i], shapes[s][i]);
      assert_int_equal((uintptr_t)a->data % 64, 0);
      memset(out, 0xAB, n * es + 1);
      assert_int_equal(jit_array_to_host(a, out, n * es + 1), JIT_OK); /* larger is fine */
      assert_memory_equal(in, out, n * es);
      assert_int_equal(out[n * es], 0xAB);                           /* nothing past nbytes */
      jit_array_free(a);
      free(in);
      free(out);
    }
  }
  jit_ctx_destroy(ctx);
}

static void test_array_empty(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  const int64_t shape[2] = {4, 0};
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, shape, NULL, &a), JIT_OK);
  assert_int_equal(jit_array_nbytes(a), 0);
  assert_non_null(a->data);
  assert_int_equal(jit_array_to_host(a, NULL, 0), JIT_OK);
  jit_array_free(a);
  /* a zero dim makes any other dim fine, even one whose product would overflow */
  const int64_t huge[3] = {INT64_MAX, 0, INT64_MAX};
  assert_int_equal(jit_array_from_host(ctx, JIT_F64, 3, huge, NULL, &a), JIT_OK);
  assert_int_equal(jit_array_nbytes(a), 0);
  jit_array_free(a);
  jit_array_free(NULL);
  jit_ctx_destroy(ctx);
}

static void test_array_bad_inputs(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  const int64_t shape[2] = {2, 3};
  float data[6] = {0};
  jit_array *a = (jit_array *)&a;
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 2, shape, data, NULL), JIT_EINVAL,
             "jit_array_from_host: out is NULL");
  EXPECT_ERR(jit_array_from_host(NULL, JIT_F32, 2, shape, data, &a), JIT_EINVAL,
             "jit_array_from_host: ctx is NULL");
  assert_null(a);
  EXPECT_ERR(jit_array_from_host(ctx, (jit_dtype)42, 2, shape, data, &a), JIT_EINVAL,
             "jit_array_from_host: invalid dtype 42");
  EXPECT_ERR(jit_array_from_host(ctx, (jit_dtype)-1, 2, shape, data, &a), JIT_EINVAL,
             "jit_array_from_host: invalid dtype -1");
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, -1, shape, data, &a), JIT_ESHAPE,
             "jit_array_from_host: rank -1 is out of range 0..8");
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 9, shape, data, &a), JIT_ESHAPE,
             "jit_array_from_host: rank 9 is out of range 0..8");
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 2, NULL, data, &a), JIT_EINVAL,
             "jit_array_from_host: shape is NULL for rank 2");
  const int64_t neg[3] = {2, -3, 4};
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 3, neg, data, &a), JIT_ESHAPE,
             "jit_array_from_host: dim 1 is -3 (must be >= 0)");
  const int64_t big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 2, big, data, &a), JIT_ESHAPE,
             "jit_array_from_host: the byte size of a f32 array of this shape overflows");
  const int64_t big1[1] = {INT64_MAX / 2};
  EXPECT_ERR(jit_array_from_host(ctx, JIT_I64, 1, big1, data, &a), JIT_ESHAPE, "overflows");
  EXPECT_ERR(jit_array_from_host(ctx, JIT_F32, 2, shape, NULL, &a), JIT_EINVAL,
             "jit_array_from_host: data is NULL for 24 bytes");
  assert_null(a);

  /* rank 0 needs no shape */
  float one = 1.5f, back = 0;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 0, NULL, &one, &a), JIT_OK);
  assert_int_equal(jit_array_to_host(a, &back, sizeof back), JIT_OK);
  assert_true(back == 1.5f);
  jit_array_free(a);

  const int64_t four[1] = {4};
  a = f32_array(ctx, 1, four, data);
  float small[3];
  EXPECT_ERR(jit_array_to_host(a, small, 12), JIT_EINVAL,
             "jit_array_to_host: buffer of 12 bytes is too small for f32[4] (16 bytes)");
  EXPECT_ERR(jit_array_to_host(a, NULL, 16), JIT_EINVAL, "jit_array_to_host: dst is NULL");
  EXPECT_ERR(jit_array_to_host(NULL, small, 12), JIT_EINVAL, "jit_array_to_host: array is NULL");
  jit_array_free(a);

  assert_int_equal(jit_array_rank(NULL), -1);
  assert_null(jit_array_shape(NULL));
  assert_int_equal(jit_array_nbytes(NULL), 0);
  jit_ctx_destroy(ctx);
}

/* ---- jitted functions ---------------------------------------------------------------------------- */
static int n_traces;

/* r0 = x * x + x */
static void square_plus(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  n_traces++;
  r[0] = jit_add(t, jit_mul(t, a[0], a[0]), a[0]);
}

/* r0 = a + b (shapes must match or broadcast) */
static void add2(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  n_traces++;
  r[0] = jit_add(t, a[0], a[1]);
}

/* r0 = a + b, r1 = a - b */
static void add_sub(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  n_traces++;
  r[0] = jit_add(t, a[0], a[1]);
  r[1] = jit_sub(t, a[0], a[1]);
}

static void fails(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)a;
  (void)user;
  n_traces++;
  jit_trace_fail(t, "the user gave up");
  r[0] = (jit_val){0};
}

/* r0 = iota f64[4] (no args) */
static void no_args(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)a;
  (void)user;
  n_traces++;
  const int64_t shape[1] = {4};
  r[0] = jit_iota(t, JIT_F64, 1, shape, 0);
}

/* r0 is fine, r1 fails: the call must hand back neither */
static void second_fails(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  n_traces++;
  r[0] = jit_neg(t, a[0]);
  int axis = 5;
  r[1] = jit_reduce_sum(t, a[0], 1, &axis);
}

static void test_compile_validation(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = (jit_fn *)&f;
  jit_fn_opts o = {.name = "sq", .n_args = 1, .n_results = 1};
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, NULL), JIT_EINVAL, "jit_compile: out is NULL");
  EXPECT_ERR(jit_compile(NULL, square_plus, NULL, &o, &f), JIT_EINVAL, "jit_compile: ctx is NULL");
  assert_null(f);
  EXPECT_ERR(jit_compile(ctx, NULL, NULL, &o, &f), JIT_EINVAL, "jit_compile: fn is NULL");
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, NULL, &f), JIT_EINVAL, "jit_compile: opts is NULL");
  o.n_args = -1;
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_EINVAL,
             "jit_compile: sq: n_args is -1 (must be 0..64)");
  o.n_args = 65;
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_EINVAL, "n_args is 65");
  o.n_args = 1;
  o.n_results = 0;
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_EINVAL,
             "jit_compile: sq: n_results is 0 (must be 1..64)");
  o.n_results = 65;
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_EINVAL, "n_results is 65");
  o.n_results = 1;
  o.donate_mask = 2;
  EXPECT_ERR(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_EINVAL,
             "jit_compile: sq: donate_mask 0x2 names args past n_args = 1");
  assert_null(f);
  o.donate_mask = 1;
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  jit_fn_free(f);
  o.n_args = 64;
  o.donate_mask = UINT64_MAX;
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  jit_fn_free(f);

  /* the name is copied; NULL means "fn" */
  char name[] = "mine";
  o = (jit_fn_opts){.name = name, .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  name[0] = 'X';
  assert_string_equal(f->name, "mine");
  jit_fn_free(f);
  o.name = NULL;
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  assert_string_equal(f->name, "fn");
  jit_fn_free(f);
  jit_fn_free(NULL);
  jit_ctx_destroy(ctx);
}

static void test_call_values(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "add_sub", .n_args = 2, .n_results = 2};
  assert_int_equal(jit_compile(ctx, add_sub, NULL, &o, &f), JIT_OK);
  const int64_t shape[2] = {2, 3};
  const float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60};
  jit_array *args[2] = {f32_array(ctx, 2, shape, x), f32_array(ctx, 2, shape, y)};
  jit_array *res[2] = {NULL, NULL};
  assert_int_equal(jit_call(f, args, res), JIT_OK);
  float sum[6], diff[6];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(jit_array_rank(res[k]), 2);
    assert_int_equal(jit_array_shape(res[k])[0], 2);
    assert_int_equal(jit_array_shape(res[k])[1], 3);
    assert_int_equal(jit_array_dtype(res[k]), JIT_F32);
    assert_ptr_equal(res[k]->ctx, ctx);
  }
  assert_int_equal(jit_array_to_host(res[0], sum, sizeof sum), JIT_OK);
  assert_int_equal(jit_array_to_host(res[1], diff, sizeof diff), JIT_OK);
  for (int i = 0; i < 6; i++) {
    assert_true(sum[i] == x[i] + y[i]);
    assert_true(diff[i] == x[i] - y[i]);
  }
  jit_array_free(res[0]);
  jit_array_free(res[1]);
  jit_array_free(args[0]);
  jit_array_free(args[1]);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static void test_call_validation(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx(), *other = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "add2", .n_args = 2, .n_results = 1};
  assert_int_equal(jit_compile(ctx, add2, NULL, &o, &f), JIT_OK);
  const int64_t shape[1] = {3};
  const float v[3] = {1, 2, 3};
  jit_array *a = f32_array(ctx, 1, shape, v), *b = f32_array(other, 1, shape, v);
  jit_array *junk = (jit_array *)&junk, *r = junk;

  EXPECT_ERR(jit_call(NULL, (jit_array *[]){a, a}, &r), JIT_EINVAL, "jit_call: f is NULL");
  EXPECT_ERR(jit_call(f, (jit_array *[]){a, a}, NULL), JIT_EINVAL, "jit_call: add2: results is NULL");
  EXPECT_ERR(jit_call(f, NULL, &r), JIT_EINVAL, "jit_call: add2: args is NULL but the function takes 2");
  assert_null(r);
  r = junk;
  EXPECT_ERR(jit_call(f, (jit_array *[]){a, NULL}, &r), JIT_EINVAL, "jit_call: add2: args[1] is NULL");
  assert_null(r);
  r = junk;
  EXPECT_ERR(jit_call(f, (jit_array *[]){b, a}, &r), JIT_EINVAL,
             "jit_call: add2: args[0] belongs to another jit_ctx");
  assert_null(r);
  r = junk;
  EXPECT_ERR(jit_call_static(f, NULL, 4, (jit_array *[]){a, a}, &r), JIT_EINVAL,
             "jit_call: add2: static_args is NULL for 4 bytes");
  assert_null(r);
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 0); /* rejected before the cache: not calls */
  assert_int_equal(n_traces, 0);

  /* a shape error in the trace: the status and message of the tracer, no result */
  const int64_t four[1] = {4};
  const float w[4] = {0};
  jit_array *c = f32_array(ctx, 1, four, w);
  r = junk;
  jit_status s = jit_call(f, (jit_array *[]){a, c}, &r);
  assert_int_equal(s, JIT_ESHAPE);
  expect_msg("add2");
  expect_msg("add");
  expect_msg("tests/test_runtime.c");
  assert_null(r);
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 1);
  assert_int_equal(st.cache_misses, 1);
  assert_int_equal(st.n_signatures, 0);

  jit_array_free(a);
  jit_array_free(b);
  jit_array_free(c);
  jit_fn_free(f);
  jit_ctx_destroy(other);
  jit_ctx_destroy(ctx);
}

static void test_call_no_args(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "count", .n_args = 0, .n_results = 1};
  assert_int_equal(jit_compile(ctx, no_args, NULL, &o, &f), JIT_OK);
  jit_array *r = NULL;
  for (int k = 0; k < 2; k++) {
    assert_int_equal(jit_call(f, NULL, &r), JIT_OK);
    double got[4];
    assert_int_equal(jit_array_to_host(r, got, sizeof got), JIT_OK);
    for (int i = 0; i < 4; i++) assert_true(got[i] == i);
    jit_array_free(r);
  }
  assert_int_equal(n_traces, 1);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static void test_call_partial_failure(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "half", .n_args = 1, .n_results = 2};
  assert_int_equal(jit_compile(ctx, second_fails, NULL, &o, &f), JIT_OK);
  const int64_t shape[1] = {2};
  const float v[2] = {1, 2};
  jit_array *a = f32_array(ctx, 1, shape, v);
  jit_array *res[2] = {(jit_array *)&res, (jit_array *)&res};
  assert_int_not_equal(jit_call(f, &a, res), JIT_OK);
  expect_msg("half: reduce_sum at tests/test_runtime.c:");
  assert_null(res[0]);
  assert_null(res[1]);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* A failed trace is a miss that is not cached: the next call traces again and fails the same way. */
static void test_failed_trace_not_cached(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "quitter", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, fails, NULL, &o, &f), JIT_OK);
  const int64_t shape[1] = {2};
  const float v[2] = {1, 2};
  jit_array *a = f32_array(ctx, 1, shape, v), *r = (jit_array *)&r;
  n_traces = 0;
  jit_status s1 = jit_call(f, &a, &r);
  assert_int_not_equal(s1, JIT_OK);
  assert_null(r);
  char first[2048];
  snprintf(first, sizeof first, "%s", jit_last_error());
  expect_msg("the user gave up");
  expect_msg("quitter");
  r = (jit_array *)&r;
  assert_int_equal(jit_call(f, &a, &r), s1);
  assert_string_equal(jit_last_error(), first);
  assert_null(r);
  assert_int_equal(n_traces, 2);
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 2);
  assert_int_equal(st.cache_misses, 2);
  assert_int_equal(st.cache_hits, 0);
  assert_int_equal(st.n_signatures, 0);
  EXPECT_ERR(jit_fn_dump(f, NULL, JIT_DUMP_TRACED, stdout), JIT_EINVAL,
             "jit_fn_dump: quitter: no compiled signature yet");
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static void test_stats(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "sq", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  jit_fn_stats st;
  memset(&st, 0xff, sizeof st);
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 0);
  assert_int_equal(st.n_signatures, 0);
  assert_true(st.trace_ms == 0 && st.passes_ms == 0 && st.last_call_us == 0);
  EXPECT_ERR(jit_fn_stats_get(NULL, &st), JIT_EINVAL, "jit_fn_stats_get: f is NULL");
  EXPECT_ERR(jit_fn_stats_get(f, NULL), JIT_EINVAL, "jit_fn_stats_get: out is NULL");

  const int64_t shape[1] = {3};
  const float v[3] = {1, 2, 3};
  jit_array *a = f32_array(ctx, 1, shape, v), *r = NULL;
  n_traces = 0;
  assert_int_equal(jit_call(f, &a, &r), JIT_OK);
  float got[3];
  assert_int_equal(jit_array_to_host(r, got, sizeof got), JIT_OK);
  assert_true(got[0] == 2 && got[1] == 6 && got[2] == 12);
  jit_array_free(r);
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 1);
  assert_int_equal(st.cache_misses, 1);
  assert_int_equal(st.cache_hits, 0);
  assert_int_equal(st.disk_cache_hits, 0);
  assert_int_equal(st.n_signatures, 1);
  assert_int_equal(st.n_kernels, 1); /* x * x + x: one fused loop */
  assert_true(st.trace_ms > 0);
  assert_true(st.passes_ms >= 0);
  assert_true(st.codegen_ms > 0 && st.llvm_ms > 0);
  assert_true(st.last_call_us > 0);
  /* the cold call's wall time includes tracing and passes */
  assert_true(st.last_call_us >= (st.trace_ms + st.passes_ms) * 1e3);
  double trace_ms = st.trace_ms;

  assert_int_equal(jit_call(f, &a, &r), JIT_OK);
  jit_array_free(r);
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 2);
  assert_int_equal(st.cache_hits, 1);
  assert_int_equal(st.cache_misses, 1);
  assert_int_equal(st.n_signatures, 1);
  assert_true(st.trace_ms == trace_ms); /* a hit adds no trace time */
  assert_true(st.last_call_us > 0);
  assert_int_equal(n_traces, 1);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* ---- dumps --------------------------------------------------------------------------------------- */
/* Runs what writes into a memory stream and returns the text (caller frees). Not inlined: at -O3
   GCC's -Wdangling-pointer mistakes the returned stream buffer for the address of the local. */
__attribute__((noinline)) static char *dump_text(jit_fn *f, jit_array *const *args, unsigned what, jit_status *st) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  *st = jit_fn_dump(f, args, what, m);
  fclose(m);
  return buf;
}

/* jit_precompile compiles without running; the next call is a cache hit that traces nothing. */
static void test_precompile(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "sq", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  const int64_t shape[1] = {3};
  const float v[3] = {1, 2, 3};
  jit_array *a = f32_array(ctx, 1, shape, v), *r = NULL;
  EXPECT_ERR(jit_precompile(NULL, &a), JIT_EINVAL, "jit_precompile: f is NULL");
  EXPECT_ERR(jit_precompile(f, NULL), JIT_EINVAL, "jit_precompile: sq: args is NULL");
  EXPECT_ERR(jit_precompile_static(f, NULL, 4, &a), JIT_EINVAL,
             "jit_precompile: sq: static_args is NULL for 4 bytes");
  n_traces = 0;
  assert_int_equal(jit_precompile(f, &a), JIT_OK);
  assert_int_equal(n_traces, 1);
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.cache_misses, 1);
  assert_int_equal(st.n_signatures, 1);
  assert_true(st.codegen_ms > 0 && st.llvm_ms > 0);
  assert_true(st.last_call_us == 0); /* nothing ran */
  assert_int_equal(jit_precompile(f, &a), JIT_OK); /* already compiled: a hit */
  assert_int_equal(jit_call(f, &a, &r), JIT_OK);
  assert_int_equal(n_traces, 1);
  float got[3];
  assert_int_equal(jit_array_to_host(r, got, sizeof got), JIT_OK);
  assert_true(got[0] == 2 && got[1] == 6 && got[2] == 12);
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 3);
  assert_int_equal(st.cache_hits, 2);
  jit_array_free(r);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static void test_dump(void **state) {
  (void)state;
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "sq", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  const int64_t s3[1] = {3}, s5[1] = {5}, s7[1] = {7};
  const float v[7] = {1, 2, 3, 4, 5, 6, 7};
  jit_array *a3 = f32_array(ctx, 1, s3, v), *a5 = f32_array(ctx, 1, s5, v);
  jit_array *a7 = f32_array(ctx, 1, s7, v), *r = NULL;
  jit_status st;

  char *text = dump_text(f, NULL, JIT_DUMP_TRACED, &st);
  assert_int_equal(st, JIT_EINVAL);
  expect_msg("jit_fn_dump: sq: no compiled signature yet");
  assert_string_equal(text, "");
  free(text);

  assert_int_equal(jit_call(f, &a3, &r), JIT_OK);
  jit_array_free(r);
  assert_int_equal(jit_call(f, &a5, &r), JIT_OK);
  jit_array_free(r);

  text = dump_text(f, NULL, JIT_DUMP_TRACED, &st);
  assert_int_equal(st, JIT_OK);
  const char *head = "// @sq traced\nfunc @sq(%0: f32[5]) -> f32[5] {\n";
  assert_true(strncmp(text, head, strlen(head)) == 0);
  assert_non_null(strstr(text, " = mul %0, %0 : f32[5]"));
  assert_non_null(strstr(text, " = add %1, %0 : f32[5]"));
  assert_non_null(strstr(text, "# tests/test_runtime.c:"));
  assert_null(strstr(text, "optimized"));
  free(text);

  text = dump_text(f, NULL, JIT_DUMP_TRACED | JIT_DUMP_OPTIMIZED, &st);
  assert_int_equal(st, JIT_OK);
  char *opt = strstr(text, "// @sq optimized\nfunc @sq(%0: f32[5]) -> f32[5] {\n");
  assert_non_null(opt);
  assert_true(opt > strstr(text, "// @sq traced"));
  assert_non_null(strstr(opt, "mul"));
  assert_non_null(strstr(opt, "add"));
  free(text);

  /* args select an older signature */
  text = dump_text(f, &a3, JIT_DUMP_OPTIMIZED, &st);
  assert_int_equal(st, JIT_OK);
  assert_non_null(strstr(text, "// @sq optimized\nfunc @sq(%0: f32[3]) -> f32[3] {"));
  free(text);
  text = dump_text(f, &a7, JIT_DUMP_TRACED, &st);
  assert_int_equal(st, JIT_EINVAL);
  expect_msg("jit_fn_dump: sq: no compiled signature for these args");
  assert_string_equal(text, "");
  free(text);
  jit_array *none[1] = {NULL};
  text = dump_text(f, none, JIT_DUMP_TRACED, &st);
  assert_int_equal(st, JIT_EINVAL);
  expect_msg("jit_fn_dump: sq: args[0] is NULL");
  free(text);

  /* codegen stages: the kernels, their C, the LLVM module */
  text = dump_text(f, NULL, JIT_DUMP_FUSED | JIT_DUMP_C | JIT_DUMP_LLVM, &st);
  assert_int_equal(st, JIT_OK);
  char *fused = strstr(text, "// @sq fused\n"), *c = strstr(text, "// @sq c\n");
  char *ll = strstr(text, "// @sq llvm\n");
  assert_true(fused && c && ll && fused < c && c < ll);
  assert_non_null(strstr(fused, "kernel k0 loop[1 x 5] reads %0 writes %2 {"));
  assert_non_null(strstr(c, "void tjit_k0(void *const *bufs, int64_t row_begin, int64_t row_end) {"));
  assert_non_null(strstr(ll, "define void @tjit_k0(ptr"));
  free(text);
  /* an unpartitioned signature's partitioned stage says so, then shows the one program */
  text = dump_text(f, NULL, JIT_DUMP_PARTITIONED, &st);
  assert_int_equal(st, JIT_OK);
  assert_non_null(strstr(text, "// @sq partitioned\n// not partitioned"));
  assert_non_null(strstr(text, "func @sq("));
  free(text);
  text = dump_text(f, NULL, 64, &st);
  assert_int_equal(st, JIT_EINVAL);
  expect_msg("jit_fn_dump: sq: unknown stage bits 0x40");
  free(text);
  EXPECT_ERR(jit_fn_dump(f, NULL, JIT_DUMP_TRACED, NULL), JIT_EINVAL, "jit_fn_dump: sq: out is NULL");
  EXPECT_ERR(jit_fn_dump(NULL, NULL, JIT_DUMP_TRACED, stdout), JIT_EINVAL, "jit_fn_dump: f is NULL");

  jit_array_free(a3);
  jit_array_free(a5);
  jit_array_free(a7);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static char *read_file(const char *path) {
  FILE *fp = fopen(path, "r");
  if (!fp) return NULL;
  char *buf = calloc(1, 1 << 16);
  assert_non_null(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, fp);
  buf[n] = '\0';
  fclose(fp);
  return buf;
}

static void test_dump_env_dir(void **state) {
  (void)state;
  char dir[] = "/tmp/tjit-dump-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char sub[128], path[256];
  snprintf(sub, sizeof sub, "%s/nested/deeper", dir); /* created on demand */
  setenv("TJIT_DUMP", "traced, optimized,fused,bogus", 1);
  setenv("TJIT_DUMP_DIR", sub, 1);

  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "my/fn", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  const int64_t s3[1] = {3}, s4[1] = {4};
  const float v[4] = {1, 2, 3, 4};
  jit_array *a3 = f32_array(ctx, 1, s3, v), *a4 = f32_array(ctx, 1, s4, v), *r = NULL;
  assert_int_equal(jit_call(f, &a3, &r), JIT_OK);
  jit_array_free(r);
  assert_int_equal(jit_call(f, &a3, &r), JIT_OK); /* a hit writes nothing new */
  jit_array_free(r);
  assert_int_equal(jit_call(f, &a4, &r), JIT_OK);
  jit_array_free(r);

  const char *want[4][2] = {{"sig0.traced", "f32[3]"}, {"sig0.optimized", "f32[3]"},
                            {"sig1.traced", "f32[4]"}, {"sig1.optimized", "f32[4]"}};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/my_fn.%s.tir", sub, want[i][0]);
    char *text = read_file(path);
    if (!text) print_error("missing %s\n", path);
    assert_non_null(text);
    char head[64];
    snprintf(head, sizeof head, "(%%0: %s) -> %s {\n", want[i][1], want[i][1]);
    assert_non_null(strstr(text, head));
    assert_non_null(strstr(text, "mul %0, %0"));
    free(text);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/my_fn.sig2.traced.tir", sub);
  assert_int_not_equal(access(path, F_OK), 0);
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/my_fn.sig%d.fused.txt", sub, i);
    char *text = read_file(path);
    if (!text) print_error("missing %s\n", path);
    assert_non_null(text);
    assert_non_null(strstr(text, "kernel k0 loop["));
    free(text);
    unlink(path);
  }

  /* a directory that cannot be written does not fail the call */
  setenv("TJIT_DUMP_DIR", "/proc/no/such/dir", 1);
  const int64_t s2[1] = {2};
  jit_array *a2 = f32_array(ctx, 1, s2, v);
  assert_int_equal(jit_call(f, &a2, &r), JIT_OK);
  float got[2];
  assert_int_equal(jit_array_to_host(r, got, sizeof got), JIT_OK);
  assert_true(got[0] == 2 && got[1] == 6);
  jit_array_free(r);

  unsetenv("TJIT_DUMP");
  unsetenv("TJIT_DUMP_DIR");
  jit_array_free(a2);
  jit_array_free(a3);
  jit_array_free(a4);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  snprintf(path, sizeof path, "%s/nested/deeper", dir);
  rmdir(path);
  snprintf(path, sizeof path, "%s/nested", dir);
  rmdir(path);
  assert_int_equal(rmdir(dir), 0); /* empty: no stray files */
}

/* Without TJIT_DUMP_DIR the dumps go to stderr, in jit_fn_dump's format. */
static void test_dump_env_stderr(void **state) {
  (void)state;
  char path[] = "/tmp/tjit-stderr-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  setenv("TJIT_DUMP", "optimized", 1);
  unsetenv("TJIT_DUMP_DIR");
  jit_ctx *ctx = new_ctx();
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "loud", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, square_plus, NULL, &o, &f), JIT_OK);
  const int64_t s3[1] = {3};
  const float v[3] = {1, 2, 3};
  jit_array *a = f32_array(ctx, 1, s3, v), *r = NULL;

  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  jit_status st = jit_call(f, &a, &r);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  unsetenv("TJIT_DUMP");
  assert_int_equal(st, JIT_OK);
  jit_array_free(r);

  char *text = read_file(path);
  unlink(path);
  assert_non_null(text);
  assert_non_null(strstr(text, "// @loud optimized\nfunc @loud(%0: f32[3]) -> f32[3] {"));
  assert_null(strstr(text, "traced"));
  free(text);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

static int clear_env(void **state) {
  (void)state;
  unsetenv("TJIT_DEVICES");
  unsetenv("TJIT_CACHE_DIR");
  unsetenv("TJIT_DUMP");
  unsetenv("TJIT_DUMP_DIR");
  n_traces = 0;
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_ctx_defaults, clear_env),
      cmocka_unit_test_setup(test_ctx_opts, clear_env),
      cmocka_unit_test_setup(test_ctx_bad_opts, clear_env),
      cmocka_unit_test_setup(test_ctx_env, clear_env),
      cmocka_unit_test_setup(test_status_strings, clear_env),
      cmocka_unit_test_setup(test_array_round_trip_every_dtype, clear_env),
      cmocka_unit_test_setup(test_array_empty, clear_env),
      cmocka_unit_test_setup(test_array_bad_inputs, clear_env),
      cmocka_unit_test_setup(test_compile_validation, clear_env),
      cmocka_unit_test_setup(test_call_values, clear_env),
      cmocka_unit_test_setup(test_call_validation, clear_env),
      cmocka_unit_test_setup(test_call_no_args, clear_env),
      cmocka_unit_test_setup(test_call_partial_failure, clear_env),
      cmocka_unit_test_setup(test_failed_trace_not_cached, clear_env),
      cmocka_unit_test_setup(test_stats, clear_env),
      cmocka_unit_test_setup(test_precompile, clear_env),
      cmocka_unit_test_setup(test_dump, clear_env),
      cmocka_unit_test_setup(test_dump_env_dir, clear_env),
      cmocka_unit_test_setup(test_dump_env_stderr, clear_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
