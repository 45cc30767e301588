/* test_sharding.c: devices, meshes, partition specs, jit_device_put and resharding, gathering,
 * jit_call on committed args, and jit_array_visualize against tests/golden/visualize_*.txt. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "support/spmd_programs.h"
#include "tjit.h"

/* Fails (printing the message) unless the last error contains want. */
static void expect_msg(const char *want) {
  const char *got = jit_last_error();
  if (!got || !want || !strstr(got, want)) {
    print_error("last error \"%s\" does not contain \"%s\"\n", got ? got : "(null)",
                want ? want : "(null)");
    fail();
  }
}

#define EXPECT_ERR(call, status, msg)             \
  do {                                            \
    assert_int_equal((int)(call), (int)(status)); \
    expect_msg(msg);                              \
  } while (0)

/* A context with n virtual devices, one worker and no compiler (calls run the interpreter). */
static jit_ctx *ctx_n(int n) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = n;
  o.n_threads = 1;
  o.opt_level = 0;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  return ctx;
}

static jit_mesh *mesh_of(jit_ctx *ctx, int n_axes, const int64_t *sizes, const char *const *names,
                         const int *ids) {
  jit_mesh *m = NULL;
  if (jit_mesh_create(ctx, n_axes, sizes, names, ids, &m) != JIT_OK)
    print_error("jit_mesh_create: %s\n", jit_last_error());
  assert_non_null(m);
  return m;
}

static jit_sharding *spec_of(const jit_mesh *m, const char *spec) {
  jit_sharding *s = NULL;
  if (jit_sharding_create(m, spec, &s) != JIT_OK)
    print_error("jit_sharding_create(\"%s\"): %s\n", spec, jit_last_error());
  assert_non_null(s);
  return s;
}

static jit_array *put(const jit_array *a, const jit_sharding *s) {
  jit_array *b = NULL;
  if (jit_device_put(a, s, &b) != JIT_OK) print_error("jit_device_put: %s\n", jit_last_error());
  assert_non_null(b);
  return b;
}

static const char *const AB[2] = {"a", "b"};
static const char *const X[1] = {"x"};

/* ---- devices and meshes -------------------------------------------------------------------------- */
static void test_device_count(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  assert_int_equal(jit_device_count(ctx), 8);
  jit_ctx_destroy(ctx);
  assert_int_equal(jit_device_count(NULL), 0);
  setenv("TJIT_DEVICES", "4", 1);
  ctx = ctx_n(0);
  assert_int_equal(jit_device_count(ctx), 4);
  jit_ctx_destroy(ctx);
  unsetenv("TJIT_DEVICES");
}

static void test_mesh_errors(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(4);
  const int64_t s22[2] = {2, 2}, s24[2] = {2, 4}, s20[2] = {2, 0};
  jit_mesh *m = (jit_mesh *)&m;
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, AB, NULL, NULL), JIT_EINVAL,
             "jit_mesh_create: out is NULL");
  EXPECT_ERR(jit_mesh_create(NULL, 2, s22, AB, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: ctx is NULL");
  assert_null(m);
  EXPECT_ERR(jit_mesh_create(ctx, 0, s22, AB, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: n_axes is 0 (must be 1..8)");
  EXPECT_ERR(jit_mesh_create(ctx, 9, s22, AB, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: n_axes is 9 (must be 1..8)");
  EXPECT_ERR(jit_mesh_create(ctx, 2, NULL, AB, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_sizes is NULL");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, NULL, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names is NULL");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s20, AB, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis 'b' has size 0 (must be >= 1)");
  const char *null_name[2] = {"a", NULL}, *empty[2] = {"a", ""}, *dash[2] = {"a-b", "c"};
  const char *digit[2] = {"1x", "y"}, *under[2] = {"x", "_"}, *dup[2] = {"x", "x"};
  const char *longname[2] = {"x", "a234567890123456789012345678901234567890"};
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, null_name, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names[1] is NULL");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, empty, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names[1] is empty");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, dash, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names[0] = 'a-b' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, digit, NULL, &m), JIT_EINVAL,
             "axis_names[0] = '1x' is not an identifier");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, under, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names[1] = '_' is reserved (partition specs use it for 'not "
             "sharded')");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, dup, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis name 'x' is used twice (axes 0 and 1)");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, longname, NULL, &m), JIT_EINVAL,
             "jit_mesh_create: axis_names[1] is 40 bytes long (at most 31)");
  /* The product of the sizes is the number of devices (and of device ids read). */
  EXPECT_ERR(jit_mesh_create(ctx, 2, s24, AB, NULL, &m), JIT_ESHARDING,
             "jit_mesh_create: a mesh of 2x4 = 8 devices needs 8 devices but the context has 4 "
             "(TJIT_DEVICES or jit_ctx_opts.n_devices)");
  const int ids8[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_ERR(jit_mesh_create(ctx, 2, s24, AB, ids8, &m), JIT_ESHARDING,
             "jit_mesh_create: a mesh of 2x4 = 8 devices needs 8 distinct device ids but the "
             "context has only 4 devices");
  const int out_of_range[4] = {0, 4, 1, 2}, negative[4] = {0, 1, -1, 2}, repeated[4] = {3, 1, 2, 1};
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, AB, out_of_range, &m), JIT_ESHARDING,
             "jit_mesh_create: device_ids[1] = 4 is not a device of the context (ids 0..3; a mesh "
             "of 2x2 = 4 devices needs 4 device ids)");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, AB, negative, &m), JIT_ESHARDING,
             "jit_mesh_create: device_ids[2] = -1 is not a device of the context");
  EXPECT_ERR(jit_mesh_create(ctx, 2, s22, AB, repeated, &m), JIT_ESHARDING,
             "jit_mesh_create: device_ids[3] = 1 repeats device_ids[1] (a mesh of 2x2 = 4 devices "
             "needs 4 distinct device ids)");
  const int64_t huge[2] = {1 << 20, 1 << 20};
  EXPECT_ERR(jit_mesh_create(ctx, 2, huge, AB, NULL, &m), JIT_ESHARDING,
             "jit_mesh_create: a mesh of 1048576x1048576 devices is larger than 4096 devices");
  assert_null(m);
  jit_mesh_free(NULL);
  jit_ctx_destroy(ctx);
}

static void test_mesh_ok(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s24[2] = {2, 4}, s2[1] = {2};
  jit_mesh *m = mesh_of(ctx, 2, s24, AB, NULL);
  char buf[256];
  mesh_format(m, buf, sizeof buf);
  assert_string_equal(buf, "mesh[a=2,b=4]");
  assert_int_equal(m->n_devices, 8);
  int64_t c[2];
  mesh_coords(m, 6, c);
  assert_int_equal(c[0], 1);
  assert_int_equal(c[1], 2);
  /* A subset of the devices, in any order. */
  const int ids[2] = {5, 2};
  jit_mesh *sub = mesh_of(ctx, 1, s2, X, ids);
  mesh_format(sub, buf, sizeof buf);
  assert_string_equal(buf, "mesh[x=2 devices=[5,2]]");
  mesh_format_ids(sub, 8, buf, sizeof buf);
  assert_string_equal(buf, "[5, 2]");
  assert_int_equal(mesh_position(sub, 2), 1);
  assert_int_equal(mesh_position(sub, 0), -1);
  assert_false(mesh_same_devices(m, sub));
  /* A long list is cut in messages. */
  mesh_format_ids(m, 3, buf, sizeof buf);
  assert_string_equal(buf, "[0, 1, 2, ...]");
  /* snprintf-like: the length is reported even when the buffer is too small. */
  assert_int_equal(mesh_format(m, buf, 4), (int)strlen("mesh[a=2,b=4]"));
  assert_string_equal(buf, "mes");
  jit_mesh_free(sub);
  jit_mesh_free(m);
  jit_ctx_destroy(ctx);
}

/* ---- partition specs ------------------------------------------------------------------------------ */
static void test_spec_errors(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s24[2] = {2, 4};
  jit_mesh *m = mesh_of(ctx, 2, s24, AB, NULL);
  jit_sharding *s = (jit_sharding *)&s;
  EXPECT_ERR(jit_sharding_create(m, "a", NULL), JIT_EINVAL, "jit_sharding_create: out is NULL");
  EXPECT_ERR(jit_sharding_create(NULL, "a", &s), JIT_EINVAL, "jit_sharding_create: mesh is NULL");
  assert_null(s);
  EXPECT_ERR(jit_sharding_create(m, NULL, &s), JIT_EINVAL, "jit_sharding_create: spec is NULL");
  EXPECT_ERR(jit_sharding_create(m, "a,c", &s), JIT_ESHARDING,
             "jit_sharding_create: spec \"a,c\": unknown mesh axis 'c' at position 2 (the mesh "
             "has axes a, b)");
  EXPECT_ERR(jit_sharding_create(m, "a+bb", &s), JIT_ESHARDING, "unknown mesh axis 'bb' at position 2");
  EXPECT_ERR(jit_sharding_create(m, "a, a", &s), JIT_ESHARDING,
             "jit_sharding_create: spec \"a, a\": mesh axis 'a' at position 3 is used twice (dims "
             "0 and 1); an axis may split only one dim, once");
  EXPECT_ERR(jit_sharding_create(m, "a+a", &s), JIT_ESHARDING,
             "spec \"a+a\": mesh axis 'a' at position 2 is used twice (dims 0 and 0)");
  EXPECT_ERR(jit_sharding_create(m, "a,,b", &s), JIT_EINVAL,
             "jit_sharding_create: spec \"a,,b\": empty entry for dim 1 at position 2");
  EXPECT_ERR(jit_sharding_create(m, ",a", &s), JIT_EINVAL, "empty entry for dim 0 at position 0");
  EXPECT_ERR(jit_sharding_create(m, "a, ", &s), JIT_EINVAL, "empty entry for dim 1 at position 3");
  EXPECT_ERR(jit_sharding_create(m, "a;b", &s), JIT_EINVAL,
             "jit_sharding_create: spec \"a;b\": unexpected character ';' at position 1 "
             "(expected ',', '+' or the end)");
  EXPECT_ERR(jit_sharding_create(m, "a b", &s), JIT_EINVAL,
             "unexpected character 'b' at position 2 (expected ',', '+' or the end)");
  EXPECT_ERR(jit_sharding_create(m, "a+", &s), JIT_EINVAL,
             "spec \"a+\": unexpected end of the spec at position 2 (expected a mesh axis name)");
  EXPECT_ERR(jit_sharding_create(m, "*", &s), JIT_EINVAL,
             "unexpected character '*' at position 0 (expected a mesh axis name or '_')");
  EXPECT_ERR(jit_sharding_create(m, "a,\x01", &s), JIT_EINVAL, "unexpected byte 0x01 at position 2");
  EXPECT_ERR(jit_sharding_create(m, "_+a", &s), JIT_EINVAL,
             "spec \"_+a\": '_' (not sharded) cannot be combined with mesh axes at position 0");
  EXPECT_ERR(jit_sharding_create(m, "a+_", &s), JIT_EINVAL,
             "'_' (not sharded) cannot be combined with mesh axes at position 2");
  EXPECT_ERR(jit_sharding_create(m, "_,_,_,_,_,_,_,_,_", &s), JIT_EINVAL,
             "spec \"_,_,_,_,_,_,_,_,_\" has more than 8 entries");
  assert_null(s);
  jit_sharding_free(NULL);
  jit_mesh_free(m);
  jit_ctx_destroy(ctx);
}

static void test_spec_ok(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s24[2] = {2, 4};
  const char *names[2] = {"batch", "_m1"};
  jit_mesh *m = mesh_of(ctx, 2, s24, names, NULL);
  static const struct {
    const char *spec, *canon;
    int rank;
  } cases[] = {
      {"batch, _", "batch,_", 2},       {" _m1 , batch ", "_m1,batch", 2},
      {"batch + _m1", "batch+_m1", 1},  {"_m1+batch,_,_", "_m1+batch,_,_", 3},
      {"", "", 0},                      {"  ", "", 0},
      {"_", "_", 1},                    {"\tbatch\n", "batch", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    jit_sharding *s = spec_of(m, cases[i].spec);
    char buf[128];
    sharding_format_spec(s, buf, sizeof buf);
    assert_string_equal(buf, cases[i].canon);
    assert_int_equal(s->rank, cases[i].rank);
    jit_sharding_free(s);
  }
  jit_sharding *s = spec_of(m, "_m1+batch,_");
  assert_int_equal(s->n_dim_axes[0], 2);
  assert_int_equal(s->dim_axes[0][0], 1); /* major first, in the order written */
  assert_int_equal(s->dim_axes[0][1], 0);
  assert_int_equal(sharding_dim_parts(s, 0), 8);
  assert_int_equal(sharding_dim_parts(s, 1), 1);
  assert_false(sharding_is_replicated(s));
  /* Uneven splits (IR-level only) pad every part to ceil(n/p); the last parts are short. */
  const int64_t shape[2] = {20, 3};
  int64_t local[2], start[2], size[2];
  sharding_shard_shape(s, shape, local);
  assert_int_equal(local[0], 3);
  assert_int_equal(local[1], 3);
  /* Position p has batch = p / 4, _m1 = p % 4, and (_m1 major) part _m1 * 2 + batch. */
  sharding_shard_box(s, shape, 7, start, size); /* part 7 of 8: empty */
  assert_int_equal(start[0], 20);
  assert_int_equal(size[0], 0);
  sharding_shard_box(s, shape, 3, start, size); /* batch=0, _m1=3: part 6, rows 18..19 */
  assert_int_equal(start[0], 18);
  assert_int_equal(size[0], 2);
  sharding_shard_box(s, shape, 1, start, size); /* batch=0, _m1=1: part 2 */
  assert_int_equal(start[0], 6);
  assert_int_equal(size[0], 3);
  assert_int_equal(sharding_shard_index(s, 1, 0), 2);
  /* The mesh stays alive while a sharding refers to it. */
  jit_mesh_free(m);
  char buf[128];
  sharding_format(s, buf, sizeof buf);
  assert_string_equal(buf, "{mesh[batch=2,_m1=4] \"_m1+batch,_\"}");
  jit_sharding_free(s);
  jit_ctx_destroy(ctx);
}

static void test_sharding_text(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s24[2] = {2, 4}, s4[1] = {4};
  const int ids[4] = {3, 2, 1, 0};
  jit_mesh *m = mesh_of(ctx, 2, s24, AB, NULL), *r = mesh_of(ctx, 1, s4, X, ids);
  jit_sharding *ss[4] = {spec_of(m, "a,_"), spec_of(m, "b+a"), spec_of(r, "_,x,_"), spec_of(m, "")};
  const char *want[4] = {"{mesh[a=2,b=4] \"a,_\"}", "{mesh[a=2,b=4] \"b+a\"}",
                         "{mesh[x=4 devices=[3,2,1,0]] \"_,x,_\"}", "{mesh[a=2,b=4] \"\"}"};
  for (int i = 0; i < 4; i++) {
    char buf[256];
    sharding_format(ss[i], buf, sizeof buf);
    assert_string_equal(buf, want[i]);
    strcat(buf, " tail");
    jit_sharding *back = NULL;
    const char *end = NULL;
    assert_int_equal(sharding_parse_text(buf, &end, &back), JIT_OK);
    assert_string_equal(end, " tail");
    assert_null(back->mesh->ctx);
    assert_true(sharding_equal(back, ss[i]));
    assert_true(sharding_hash(back) == sharding_hash(ss[i]));
    jit_sharding_free(back);
  }
  assert_false(sharding_equal(ss[0], ss[1]));
  assert_false(sharding_equal(ss[0], NULL));
  assert_true(sharding_equal(NULL, NULL));
  jit_sharding *bad = NULL;
  EXPECT_ERR(sharding_parse_text("{mesh[x=2] x}", NULL, &bad), JIT_EINVAL,
             "sharding text \"{mesh[x=2] x}\": expected '\"' before the spec at position 11");
  EXPECT_ERR(sharding_parse_text("{mesh[x=2] \"y\"}", NULL, &bad), JIT_ESHARDING,
             "sharding text: spec \"y\": unknown mesh axis 'y'");
  EXPECT_ERR(sharding_parse_text("{mesh[x=2 devices=[0]] \"x\"}", NULL, &bad), JIT_EINVAL,
             "a mesh of 2 devices lists 1 device ids");
  EXPECT_ERR(sharding_parse_text("{mesh[x=2 devices=[1,1]] \"x\"}", NULL, &bad), JIT_ESHARDING,
             "repeats device_ids[0]");
  EXPECT_ERR(sharding_parse_text("mesh[x=2]", NULL, &bad), JIT_EINVAL, "expected '{' at position 0");
  assert_null(bad);
  for (int i = 0; i < 4; i++) jit_sharding_free(ss[i]);
  jit_mesh_free(m);
  jit_mesh_free(r);
  jit_ctx_destroy(ctx);
}

/* ---- placement ---------------------------------------------------------------------------------- */
static void test_device_put_errors(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8), *other = ctx_n(8);
  const int64_t s24[2] = {2, 4}, shape[2] = {6, 8}, v1[1] = {8};
  jit_mesh *m = mesh_of(ctx, 2, s24, AB, NULL), *mo = mesh_of(other, 2, s24, AB, NULL);
  jit_sharding *s = spec_of(m, "a,b"), *so = spec_of(mo, "a,b"), *s3 = spec_of(m, "a,b,_");
  jit_sharding *uneven = spec_of(m, "b,a"), *both = spec_of(m, "_,a+b");
  jit_array *a = sp_iota_f32(ctx, 2, shape), *b = (jit_array *)&b;
  EXPECT_ERR(jit_device_put(a, s, NULL), JIT_EINVAL, "jit_device_put: out is NULL");
  EXPECT_ERR(jit_device_put(NULL, s, &b), JIT_EINVAL, "jit_device_put: array is NULL");
  assert_null(b);
  EXPECT_ERR(jit_device_put(a, NULL, &b), JIT_EINVAL, "jit_device_put: sharding is NULL");
  EXPECT_ERR(jit_device_put(a, so, &b), JIT_EINVAL,
             "jit_device_put: the sharding's mesh belongs to another jit_ctx than the array");
  EXPECT_ERR(jit_device_put(a, s3, &b), JIT_ESHARDING,
             "jit_device_put: the sharding {mesh[a=2,b=4] \"a,b,_\"} has 3 spec entries but the "
             "array f32[6,8] has rank 2 (one entry per dim)");
  /* Uneven splits are rejected as JAX's device_put rejects them. */
  EXPECT_ERR(jit_device_put(a, uneven, &b), JIT_ESHARDING,
             "jit_device_put: the sharding {mesh[a=2,b=4] \"b,a\"} implies that the global size of "
             "dimension 0 should be divisible by 4 (mesh axes b), but it is equal to 6 (full "
             "shape f32[6,8])");
  jit_array *c = sp_iota_f32(ctx, 1, v1);
  jit_sharding *s1 = spec_of(m, "a+b");
  jit_array *ok = put(c, s1); /* 8 over 2x4: even */
  jit_array_free(ok);
  EXPECT_ERR(jit_device_put(a, both, &b), JIT_OK, "");
  jit_array_free(b);
  b = NULL;
  const int64_t v6[1] = {6};
  jit_array *d = sp_iota_f32(ctx, 1, v6);
  EXPECT_ERR(jit_device_put(d, s1, &b), JIT_ESHARDING,
             "divisible by 8 (mesh axes a+b), but it is equal to 6 (full shape f32[6])");
  assert_null(b);
  jit_sharding *ir = NULL;
  assert_int_equal(sharding_parse_text("{mesh[x=2] \"x\"}", NULL, &ir), JIT_OK);
  EXPECT_ERR(jit_device_put(c, ir, &b), JIT_EINVAL,
             "the sharding's mesh belongs to no jit_ctx (it was read from IR text)");
  jit_sharding_free(ir);
  jit_array *arrays[] = {a, c, d};
  jit_sharding *shardings[] = {s, so, s3, uneven, both, s1};
  for (size_t i = 0; i < 3; i++) jit_array_free(arrays[i]);
  for (size_t i = 0; i < 6; i++) jit_sharding_free(shardings[i]);
  jit_mesh_free(m);
  jit_mesh_free(mo);
  jit_ctx_destroy(ctx);
  jit_ctx_destroy(other);
}

/* Every shard buffer holds exactly its box of the global iota array. */
static void expect_shards(const jit_array *a) {
  const jit_sharding *s = a->sharding;
  assert_non_null(s);
  assert_null(a->data);
  for (int p = 0; p < s->mesh->n_devices; p++) {
    int64_t start[JIT_MAX_RANK], size[JIT_MAX_RANK], idx[JIT_MAX_RANK] = {0};
    sharding_shard_box(s, a->shape, p, start, size);
    const float *v = a->shards[p];
    size_t n = a->shard_nbytes / sizeof(float);
    for (size_t k = 0; k < n; k++) {
      int64_t flat = 0;
      for (int d = 0; d < a->rank; d++) flat = flat * a->shape[d] + start[d] + idx[d];
      if (v[k] != (float)flat) {
        print_error("shard %d element %zu is %g, want %lld\n", p, k, (double)v[k], (long long)flat);
        fail();
      }
      for (int d = a->rank - 1; d >= 0 && ++idx[d] == size[d]; d--) idx[d] = 0;
    }
  }
}

/* device_put from the host, then from every sharding to every other, on meshes of 1, 2, 4 and 8
   devices (1-D and 2-D, default and permuted device orders); each result gathers back intact. */
static void test_round_trips(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  sp_round_trips(ctx, 8, expect_shards);
  jit_ctx_destroy(ctx);
}

/* Arrays of every dtype, rank 0 and empty arrays also place and gather. */
static void test_put_shapes_and_dtypes(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(2);
  const int64_t s2[1] = {2};
  jit_mesh *m = mesh_of(ctx, 1, s2, X, NULL);
  jit_sharding *rep0 = spec_of(m, ""), *rowwise = spec_of(m, "x,_");
  double one = 3.5, back = 0;
  jit_array *scalar = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F64, 0, NULL, &one, &scalar), JIT_OK);
  jit_array *p = put(scalar, rep0);
  assert_int_equal(jit_array_to_host(p, &back, sizeof back), JIT_OK);
  assert_true(back == 3.5);
  jit_array_free(p);
  jit_array_free(scalar);
  const int64_t empty_shape[2] = {4, 0};
  jit_array *empty = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, empty_shape, NULL, &empty), JIT_OK);
  p = put(empty, rowwise);
  assert_int_equal(p->shard_nbytes, 0);
  assert_int_equal(jit_array_to_host(p, NULL, 0), JIT_OK);
  jit_array_free(p);
  jit_array_free(empty);
  const int64_t shape[2] = {4, 3};
  const jit_dtype dts[] = {JIT_BOOL, JIT_I8, JIT_U8, JIT_I32, JIT_I64, JIT_F16, JIT_BF16, JIT_F64};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    unsigned char in[96], out[96];
    for (int k = 0; k < 96; k++) in[k] = (unsigned char)(k * 7 + 1);
    jit_array *a = NULL;
    assert_int_equal(jit_array_from_host(ctx, dts[i], 2, shape, in, &a), JIT_OK);
    p = put(a, rowwise);
    size_t nb = jit_array_nbytes(a);
    assert_int_equal(p->shard_nbytes, nb / 2);
    assert_int_equal(jit_array_to_host(p, out, sizeof out), JIT_OK);
    assert_memory_equal(in, out, nb);
    EXPECT_ERR(jit_array_to_host(p, out, nb - 1), JIT_EINVAL, "is too small");
    jit_array_free(p);
    jit_array_free(a);
  }
  jit_sharding_free(rep0);
  jit_sharding_free(rowwise);
  jit_mesh_free(m);
  jit_ctx_destroy(ctx);
}

/* Resharding copies each destination shard from the overlapping source shards and counts the
   bytes that cross devices. */
static void test_bytes_moved(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s2[1] = {2}, shape[2] = {4, 4};
  const int rev[2] = {1, 0};
  jit_mesh *m = mesh_of(ctx, 1, s2, X, NULL), *mr = mesh_of(ctx, 1, s2, X, rev);
  jit_sharding *rows = spec_of(m, "x,_"), *cols = spec_of(m, "_,x"), *rep = spec_of(m, "_,_");
  jit_sharding *rows_rev = spec_of(mr, "x,_");
  jit_array *host = sp_iota_f32(ctx, 2, shape); /* 64 bytes; a half is 32 */
  jit_array *r = put(host, rows);
  /* From the host (device 0): device 1's half moves. */
  assert_int_equal(r->bytes_moved, 32);
  assert_int_equal(r->shard_nbytes, 32);
  /* Rows to columns: each device keeps the quarter it has and receives the other (half of each
     shard moves). */
  jit_array *c = put(r, cols);
  assert_int_equal(c->bytes_moved, 32);
  expect_shards(c);
  jit_array *rr = put(r, rows);
  assert_int_equal(rr->bytes_moved, 0);
  /* Sharded to replicated: each device receives the other half. */
  jit_array *full = put(r, rep);
  assert_int_equal(full->bytes_moved, 64);
  assert_int_equal(full->shard_nbytes, 64);
  /* Replicated to anything: every device already holds everything. */
  jit_array *back = put(full, cols);
  assert_int_equal(back->bytes_moved, 0);
  /* The same spec over the devices in the other order swaps the halves. */
  jit_array *swapped = put(r, rows_rev);
  assert_int_equal(swapped->bytes_moved, 64);
  expect_shards(swapped);
  sp_expect_iota(swapped);
  /* Onto other devices entirely: everything moves. */
  const int far_ids[2] = {6, 7};
  jit_mesh *far = mesh_of(ctx, 1, s2, X, far_ids);
  jit_sharding *far_rows = spec_of(far, "x,_");
  jit_array *moved = put(r, far_rows);
  assert_int_equal(moved->bytes_moved, 64);
  sp_expect_iota(moved);
  jit_array *arrays[] = {host, r, c, rr, full, back, swapped, moved};
  for (size_t i = 0; i < 8; i++) jit_array_free(arrays[i]);
  jit_sharding *ss[] = {rows, cols, rep, rows_rev, far_rows};
  for (size_t i = 0; i < 5; i++) jit_sharding_free(ss[i]);
  jit_mesh_free(m);
  jit_mesh_free(mr);
  jit_mesh_free(far);
  jit_ctx_destroy(ctx);
}

/* A committed array keeps its sharding (and mesh) alive after the user frees both. */
static void test_lifetimes(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(4);
  const int64_t s22[2] = {2, 2}, shape[2] = {4, 6};
  jit_mesh *m = mesh_of(ctx, 2, s22, AB, NULL);
  jit_sharding *s = spec_of(m, "b,a");
  jit_array *host = sp_iota_f32(ctx, 2, shape);
  jit_array *a = put(host, s);
  jit_sharding_free(s);
  jit_mesh_free(m);
  sp_expect_iota(a);
  assert_int_equal(array_mesh(a)->n_devices, 4);
  assert_null(array_mesh(host));
  jit_array_free(a);
  jit_array_free(host);
  jit_ctx_destroy(ctx);
}

/* ---- jit_call on committed arrays ----------------------------------------------------------------- */
static void fma_sin(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_mul(t, a[0], a[1]), jit_sin(t, a[0]));
  r[1] = jit_reduce_sum(t, a[1], 1, (const int[]){0});
}

static void call_sharded_at(int opt) {
  jit_ctx_opts co = jit_ctx_opts_default();
  co.n_devices = 8;
  co.n_threads = 2;
  co.opt_level = opt;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&co, &ctx), JIT_OK);
  const int64_t s24[2] = {2, 4}, shape[2] = {8, 8};
  jit_mesh *m = mesh_of(ctx, 2, s24, AB, NULL);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "fma_sin", .n_args = 2, .n_results = 2};
  assert_int_equal(jit_compile(ctx, fma_sin, NULL, &o, &f), JIT_OK);
  jit_array *x = sp_iota_f32(ctx, 2, shape), *y = sp_iota_f32(ctx, 2, shape);
  jit_array *want[2] = {NULL, NULL};
  assert_int_equal(jit_call(f, (jit_array *[]){x, y}, want), JIT_OK);
  float w0[64], w1[8];
  assert_int_equal(jit_array_to_host(want[0], w0, sizeof w0), JIT_OK);
  assert_int_equal(jit_array_to_host(want[1], w1, sizeof w1), JIT_OK);
  const char *specs[][2] = {{"a,b", "b,a"}, {"_,a+b", "a,_"}, {"_,_", "b,_"}, {NULL, "a,b"}};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    jit_sharding *sx = specs[i][0] ? spec_of(m, specs[i][0]) : NULL, *sy = spec_of(m, specs[i][1]);
    jit_array *px = sx ? put(x, sx) : x, *py = put(y, sy);
    jit_array *got[2] = {NULL, NULL};
    assert_int_equal(jit_call(f, (jit_array *[]){px, py}, got), JIT_OK);
    /* The call is partitioned over the args' mesh: results are committed to it. */
    assert_non_null(got[0]->sharding);
    assert_true(mesh_equal(got[0]->sharding->mesh, m));
    float g0[64], g1[8];
    assert_int_equal(jit_array_to_host(got[0], g0, sizeof g0), JIT_OK);
    assert_int_equal(jit_array_to_host(got[1], g1, sizeof g1), JIT_OK);
    assert_memory_equal(g0, w0, sizeof g0);
    assert_memory_equal(g1, w1, sizeof g1);
    jit_array_free(got[0]);
    jit_array_free(got[1]);
    if (px != x) jit_array_free(px);
    jit_array_free(py);
    jit_sharding_free(sx);
    jit_sharding_free(sy);
  }
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, 5);
  assert_true(opt == 0 ? st.n_kernels == 0 : st.n_kernels > 0); /* which path ran */
  jit_array_free(want[0]);
  jit_array_free(want[1]);
  jit_array_free(x);
  jit_array_free(y);
  jit_fn_free(f);
  jit_mesh_free(m);
  jit_ctx_destroy(ctx);
}

/* At opt_level 0 (the interpreter on every device) and 3 (compiled kernels on every device). */
static void test_call_sharded(void **state) {
  (void)state;
  call_sharded_at(0);
  call_sharded_at(3);
}

static void test_call_mismatched_devices(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(8);
  const int64_t s2[1] = {2}, s4[1] = {4}, s22[2] = {2, 2}, v8[1] = {8}, m44[2] = {4, 4};
  const int ids01[2] = {0, 1}, ids23[2] = {2, 3}, ids10[2] = {1, 0};
  jit_mesh *m01 = mesh_of(ctx, 1, s2, X, ids01), *m23 = mesh_of(ctx, 1, s2, X, ids23);
  jit_mesh *m10 = mesh_of(ctx, 1, s2, X, ids10);
  jit_sharding *s01 = spec_of(m01, "x"), *s23 = spec_of(m23, "x"), *s10 = spec_of(m10, "x");
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "main", .n_args = 2, .n_results = 2};
  assert_int_equal(jit_compile(ctx, fma_sin, NULL, &o, &f), JIT_OK);
  jit_array *x = sp_iota_f32(ctx, 1, v8), *y = sp_iota_f32(ctx, 1, v8);
  jit_array *x01 = put(x, s01), *y23 = put(y, s23), *y10 = put(y, s10), *y01 = put(y, s01);
  jit_array *r[2] = {(jit_array *)&r, (jit_array *)&r};
  EXPECT_ERR(jit_call(f, (jit_array *[]){x01, y23}, r), JIT_ESHARDING,
             "jit_call: main: Received incompatible devices for jitted computation. Got argument "
             "args[0] of main with shape f32[8] and device ids [0, 1] on platform CPU and "
             "argument args[1] of main with shape f32[8] and device ids [2, 3] on platform CPU");
  assert_null(r[0]);
  assert_null(r[1]);
  /* The same devices in another order are another device assignment, as in JAX. */
  EXPECT_ERR(jit_call(f, (jit_array *[]){x01, y10}, r), JIT_ESHARDING,
             "device ids [0, 1] on platform CPU and argument args[1] of main with shape f32[8] "
             "and device ids [1, 0]");
  /* Uncommitted args follow the committed ones; the same device list is fine. */
  assert_int_equal(jit_call(f, (jit_array *[]){x01, y}, r), JIT_OK);
  jit_array_free(r[0]);
  jit_array_free(r[1]);
  assert_int_equal(jit_call(f, (jit_array *[]){x01, y01}, r), JIT_OK);
  jit_array_free(r[0]);
  jit_array_free(r[1]);
  /* Meshes of other shapes over the same device list agree. */
  jit_mesh *m4 = mesh_of(ctx, 1, s4, X, NULL), *m22 = mesh_of(ctx, 2, s22, AB, NULL);
  jit_sharding *s4s = spec_of(m4, "x,_"), *s22s = spec_of(m22, "b,a");
  jit_array *a = sp_iota_f32(ctx, 2, m44), *b = sp_iota_f32(ctx, 2, m44);
  jit_array *pa = put(a, s4s), *pb = put(b, s22s);
  assert_int_equal(jit_call(f, (jit_array *[]){pa, pb}, r), JIT_OK);
  jit_array_free(r[0]);
  jit_array_free(r[1]);
  jit_array *arrays[] = {x, y, x01, y23, y10, y01, a, b, pa, pb};
  for (size_t i = 0; i < 10; i++) jit_array_free(arrays[i]);
  jit_sharding *ss[] = {s01, s23, s10, s4s, s22s};
  for (size_t i = 0; i < 5; i++) jit_sharding_free(ss[i]);
  jit_mesh *ms[] = {m01, m23, m10, m4, m22};
  for (size_t i = 0; i < 5; i++) jit_mesh_free(ms[i]);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* ---- visualize ----------------------------------------------------------------------------------- */
/* Visualizes a (f32 iota of the shape) placed by spec on the mesh (NULL spec: uncommitted) and
   compares with tests/golden/visualize_NAME.txt; TJIT_GOLDEN_UPDATE=1 rewrites the file. The
   goldens were checked against JAX's visualize_sharding code run on rich. */
static void expect_golden(const char *name, int n_axes, const int64_t *sizes, const int *ids,
                          const char *spec, int rank, const int64_t *shape) {
  jit_ctx *ctx = ctx_n(16);
  const char *names[3] = {"a", "b", "c"};
  jit_array *host = sp_iota_f32(ctx, rank, shape), *a = host;
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  if (spec) {
    m = mesh_of(ctx, n_axes, sizes, names, ids);
    s = spec_of(m, spec);
    a = put(host, s);
  }
  sp_expect_visualize_golden(a, name);
  if (a != host) jit_array_free(a);
  jit_array_free(host);
  jit_sharding_free(s);
  jit_mesh_free(m);
  jit_ctx_destroy(ctx);
}

/* The layouts of JAX's sharding tutorial ("Distributed arrays and automatic parallelization"),
   whose 8192x8192 array draws as this 8x8 one does. */
static void test_visualize_tutorial(void **state) {
  (void)state;
  const int64_t m42[2] = {4, 2}, m24[2] = {2, 4}, sq[2] = {8, 8};
  static const struct {
    const char *name, *spec;
    bool mesh42;
  } cases[] = {
      {"mesh4x2_a_b", "a,b", true},        {"mesh4x2_b_a", "b,a", true},
      {"mesh4x2_a_none", "a,_", true},     {"mesh4x2_none_b", "_,b", true},
      {"mesh4x2_none_a", "_,a", true},     {"mesh4x2_ab_none", "a+b,_", true},
      {"mesh4x2_replicated", "_,_", true}, {"mesh2x4_a_b", "a,b", false},
      {"mesh2x4_b_a", "b,a", false},       {"mesh2x4_a_none", "a,_", false},
      {"mesh2x4_none_b", "_,b", false},    {"mesh2x4_replicated", "_,_", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    expect_golden(cases[i].name, 2, cases[i].mesh42 ? m42 : m24, NULL, cases[i].spec, 2, sq);
}

static void test_visualize_more(void **state) {
  (void)state;
  const int64_t m22[2] = {2, 2}, m24[2] = {2, 4}, m8[1] = {8}, m16[1] = {16};
  const int64_t sq4[2] = {4, 4}, sq8[2] = {8, 8}, wide[2] = {8, 128}, v8[1] = {8}, v16[1] = {16};
  const int perm[4] = {3, 1, 2, 0};
  expect_golden("mesh2x2_permuted", 2, m22, perm, "a,b", 2, sq4);
  /* Wide arrays: rich shrinks the columns to the 80-column console and the labels vanish. */
  expect_golden("wide_2x4_none_b", 2, m24, NULL, "_,b", 2, wide);
  expect_golden("1d_8", 1, m8, NULL, "a", 1, v8);
  expect_golden("1d_replicated", 1, m8, NULL, "_", 1, v8);
  expect_golden("1d_2x4_b", 2, m24, NULL, "b", 1, v16);
  /* 16 columns do not fit: rich wraps and ellipsizes the labels. */
  expect_golden("1d_16", 1, m16, NULL, "a", 1, v16);
  expect_golden("uncommitted_2d", 0, NULL, NULL, NULL, 2, sq8);
  expect_golden("uncommitted_1d", 0, NULL, NULL, NULL, 1, v8);
}

static void test_visualize_errors(void **state) {
  (void)state;
  jit_ctx *ctx = ctx_n(2);
  const int64_t s3[3] = {2, 2, 2}, empty[2] = {0, 4};
  jit_array *a = sp_iota_f32(ctx, 3, s3), *e = sp_iota_f32(ctx, 2, empty), *z = sp_iota_f32(ctx, 0, NULL);
  EXPECT_ERR(jit_array_visualize(a, stdout), JIT_EUNSUPPORTED,
             "jit_array_visualize: only 1-D and 2-D arrays can be visualized (as in "
             "jax.debug.visualize_array_sharding); got f32[2,2,2]");
  EXPECT_ERR(jit_array_visualize(z, stdout), JIT_EUNSUPPORTED, "got f32[]");
  EXPECT_ERR(jit_array_visualize(e, stdout), JIT_EUNSUPPORTED,
             "jit_array_visualize: cannot visualize the empty array f32[0,4]");
  EXPECT_ERR(jit_array_visualize(NULL, stdout), JIT_EINVAL, "jit_array_visualize: array is NULL");
  EXPECT_ERR(jit_array_visualize(a, NULL), JIT_EINVAL, "jit_array_visualize: out is NULL");
  jit_array_free(a);
  jit_array_free(e);
  jit_array_free(z);
  jit_ctx_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_count),
      cmocka_unit_test(test_mesh_errors),
      cmocka_unit_test(test_mesh_ok),
      cmocka_unit_test(test_spec_errors),
      cmocka_unit_test(test_spec_ok),
      cmocka_unit_test(test_sharding_text),
      cmocka_unit_test(test_device_put_errors),
      cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_put_shapes_and_dtypes),
      cmocka_unit_test(test_bytes_moved),
      cmocka_unit_test(test_lifetimes),
      cmocka_unit_test(test_call_sharded),
      cmocka_unit_test(test_call_mismatched_devices),
      cmocka_unit_test(test_visualize_tutorial),
      cmocka_unit_test(test_visualize_more),
      cmocka_unit_test(test_visualize_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
