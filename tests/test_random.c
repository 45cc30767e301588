/* test_random.c: jit_random_* against vectors computed with JAX 0.10.2 (jax.random with
 * jax_threefry_partitionable = True, its default; u64 and f64 with jax_enable_x64), bit for bit,
 * through the interpreter (opt_level 0) and compiled code, vmapped (against JAX's vmap) and
 * sharded over 2 devices (against the unsharded draw); plus the THREEFRY op's text form and
 * errors naming the user's line. JAX is not needed to run it: the vectors are literals. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir/ir.h"
#include "support/optest.h"
#include "tjit.h"

#define THIS_FILE "tests/test_random.c"

/* ---- one draw per test case ------------------------------------------------------------------ */

typedef enum kind { K_KEY, K_BITS, K_SPLIT, K_FOLD, K_UNIFORM, K_NORMAL, K_BERNOULLI } kind;

typedef struct draw {
  kind k;
  uint64_t seed;
  jit_dtype dt;      /* bits, uniform, normal */
  int rank;
  int64_t shape[3];  /* split: shape[0] = n */
  double lo, hi, p;  /* uniform; bernoulli */
  int64_t fold;      /* fold_in's data (an i32 scalar) */
  const char *spec;  /* non-NULL: the result constrained to this spec on mesh x=2 */
  jit_sharding *sharding;
} draw;

static void trace_draw(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  (void)args;
  draw *d = user;
  jit_val key = jit_random_key(t, d->seed), r = {0};
  switch (d->k) {
  case K_KEY: r = key; break;
  case K_BITS: r = jit_random_bits(t, key, d->dt, d->rank, d->shape); break;
  case K_SPLIT: r = jit_random_split(t, key, d->shape[0]); break;
  case K_FOLD: {
    int64_t one = 1;
    jit_val data = jit_reshape(t, jit_full(t, JIT_I32, 1, &one, (double)d->fold), 0, NULL);
    r = jit_random_fold_in(t, key, data);
    break;
  }
  case K_UNIFORM: r = jit_random_uniform(t, key, d->dt, d->rank, d->shape, d->lo, d->hi); break;
  case K_NORMAL: r = jit_random_normal(t, key, d->dt, d->rank, d->shape); break;
  case K_BERNOULLI: r = jit_random_bernoulli(t, key, d->p, d->rank, d->shape); break;
  }
  if (d->sharding) r = jit_with_sharding_constraint(t, r, d->sharding);
  res[0] = r;
}

/* Runs the draw on a context of `devices` devices at opt_level; the result's bytes into out
   (bytes of them). */
static void run_draw(draw *d, int devices, int opt_level, void *out, size_t bytes) {
  jit_ctx *ctx = ot_ctx_with(devices, 2, opt_level);
  jit_mesh *mesh = NULL;
  d->sharding = NULL;
  if (d->spec) {
    int64_t sizes[1] = {2};
    const char *names[1] = {"x"};
    OT_ASSERT_OK(jit_mesh_create(ctx, 1, sizes, names, NULL, &mesh));
    OT_ASSERT_OK(jit_sharding_create(mesh, d->spec, &d->sharding));
  }
  jit_fn_opts o = {.name = "draw", .n_args = 0, .n_results = 1};
  jit_fn *f = NULL;
  OT_ASSERT_OK(jit_compile(ctx, trace_draw, d, &o, &f));
  jit_array *r = NULL;
  OT_ASSERT_OK(jit_call(f, NULL, &r));
  assert_int_equal(jit_array_nbytes(r), bytes);
  OT_ASSERT_OK(jit_array_to_host(r, out, bytes));
  jit_array_free(r);
  jit_fn_free(f);
  jit_sharding_free(d->sharding);
  d->sharding = NULL;
  jit_mesh_free(mesh);
  jit_ctx_destroy(ctx);
}

/* The draw's bytes equal want's, interpreted and compiled. */
static void expect_bytes(draw *d, const void *want, size_t bytes) {
  unsigned char *got = malloc(bytes ? bytes : 1);
  assert_non_null(got);
  for (int opt = 0; opt <= 3; opt += 3) {
    memset(got, 0xa5, bytes);
    run_draw(d, 1, opt, got, bytes);
    if (memcmp(got, want, bytes) != 0) {
      for (size_t i = 0; i < bytes; i++)
        if (got[i] != ((const unsigned char *)want)[i]) {
          print_error("opt_level %d: byte %zu differs: %02x, want %02x\n", opt, i, got[i],
                      ((const unsigned char *)want)[i]);
          break;
        }
      fail();
    }
  }
  free(got);
}

#define EXPECT(d, want) expect_bytes(&(d), (want), sizeof(want))

/* ---- the op itself ----------------------------------------------------------------------------- */

static void test_threefry_scalar(void **state) {
  (void)state;
  /* jax.random.split(PRNGKey(0), 3): threefry2x32((0, 0), (0, i)) */
  assert_true(ir_threefry2x32(0, 0) == UINT64_C(0x6b20015999ba4efe));
  assert_true(ir_threefry2x32(0, 1) == UINT64_C(0x375f238fcddb151d));
  assert_true(ir_threefry2x32(0, 2) == UINT64_C(0xf71f4ea9a20e4081));
  /* fold_in(PRNGKey(42), 7): threefry2x32((0, 42), (0, 7)) */
  assert_true(ir_threefry2x32(42, 7) == UINT64_C(0x97d0552f51bf719f));
}

static void test_keys(void **state) {
  (void)state;
  draw d = {.k = K_KEY, .seed = (UINT64_C(1) << 40) + 7};
  const uint32_t want[] = {0x100u, 7u};
  EXPECT(d, want);
  d.seed = 42;
  const uint32_t want42[] = {0u, 42u};
  EXPECT(d, want42);
}

static void test_bits_u32(void **state) {
  (void)state;
  draw d = {.k = K_BITS, .seed = 0, .dt = JIT_U32, .rank = 1, .shape = {5}};
  const uint32_t k0[] = {0xf29a4fa7u, 0xfa843692u, 0x55110e28u, 0x77faa835u, 0x91e43bb7u};
  EXPECT(d, k0);
  draw d2 = {.k = K_BITS, .seed = 42, .dt = JIT_U32, .rank = 2, .shape = {2, 3}};
  const uint32_t k42[] = {0x7d1c13a2u, 0xae0730d9u, 0x9dc3f9f9u,
                          0x8f9ec1d7u, 0x735d7315u, 0x95fb4ed8u};
  EXPECT(d2, k42);
  draw d3 = {.k = K_BITS, .seed = 42, .dt = JIT_U32, .rank = 0};
  const uint32_t scalar[] = {0x7d1c13a2u};
  EXPECT(d3, scalar);
  draw d4 = {.k = K_BITS, .seed = (UINT64_C(1) << 40) + 7, .dt = JIT_U32, .rank = 1, .shape = {4}};
  const uint32_t big_seed[] = {0xa3ebd93bu, 0xc9bb76f9u, 0xbdce40e7u, 0x79042e1fu};
  EXPECT(d4, big_seed);
  draw d5 = {.k = K_BITS, .seed = 7, .dt = JIT_U32, .rank = 2, .shape = {0, 3}};
  uint32_t none[1];
  run_draw(&d5, 1, 3, none, 0);
}

/* A longer draw: the elements JAX gives at a few flat indices, and the xor of all 3000. */
static void test_bits_long(void **state) {
  (void)state;
  draw d = {.k = K_BITS, .seed = 42, .dt = JIT_U32, .rank = 2, .shape = {3, 1000}};
  uint32_t *got = malloc(3000 * sizeof *got);
  assert_non_null(got);
  for (int opt = 0; opt <= 3; opt += 3) {
    run_draw(&d, 1, opt, got, 3000 * sizeof *got);
    uint32_t x = 0;
    for (int i = 0; i < 3000; i++) x ^= got[i];
    assert_int_equal(got[0], 0x7d1c13a2u);
    assert_int_equal(got[1], 0xae0730d9u);
    assert_int_equal(got[999], 0x5dc2d15au);
    assert_int_equal(got[2999], 0x6a7ac4cbu);
    assert_int_equal(x, 0x4a318219u);
  }
  free(got);
}

static void test_bits_u64(void **state) {
  (void)state;
  draw d = {.k = K_BITS, .seed = (UINT64_C(1) << 40) + 7, .dt = JIT_U64, .rank = 1, .shape = {4}};
  const uint64_t want[] = {0xa5714b60069a925bull, 0x3dec4eb0f4573849ull, 0x3a740ba887ba4b4full,
                           0x6f8598b61681b6a9ull};
  EXPECT(d, want);
  draw d2 = {.k = K_BITS, .seed = 0, .dt = JIT_U64, .rank = 2, .shape = {2, 2}};
  const uint64_t want2[] = {0x6b20015999ba4efeull, 0x375f238fcddb151dull, 0xf71f4ea9a20e4081ull,
                            0x9312778be4e8dfbeull};
  EXPECT(d2, want2);
}

static void test_split_fold_in(void **state) {
  (void)state;
  draw d = {.k = K_SPLIT, .seed = 0, .shape = {3}};
  const uint32_t s0[] = {0x6b200159u, 0x99ba4efeu, 0x375f238fu, 0xcddb151du, 0xf71f4ea9u, 0xa20e4081u};
  EXPECT(d, s0);
  d.seed = 42;
  d.shape[0] = 2;
  const uint32_t s42[] = {0x6d3e048fu, 0x1022172du, 0x03d7b32du, 0xadd083f4u};
  EXPECT(d, s42);
  draw f = {.k = K_FOLD, .seed = 42, .fold = 7};
  const uint32_t f7[] = {0x97d0552fu, 0x51bf719fu};
  EXPECT(f, f7);
  f.seed = 0;
  f.fold = -1; /* jnp.uint32(int32(-1)) = 0xffffffff */
  const uint32_t fm1[] = {0x2c4e0437u, 0xe1e32d13u};
  EXPECT(f, fm1);
  f.fold = 0x12345678;
  const uint32_t fx[] = {0x9afc364au, 0x7fc9e7beu};
  EXPECT(f, fx);
}

static void test_uniform(void **state) {
  (void)state;
  draw d = {.k = K_UNIFORM, .seed = 0, .dt = JIT_F32, .rank = 1, .shape = {6}, .lo = 0, .hi = 1};
  const uint32_t u0[] = {0x3f729a4eu, 0x3f7a8436u, 0x3eaa221cu, 0x3eeff550u, 0x3f11e43au, 0x3e2979a0u};
  EXPECT(d, u0);
  draw d2 = {.k = K_UNIFORM, .seed = 42, .dt = JIT_F32, .rank = 1, .shape = {8}, .lo = -2.5, .hi = 3.7};
  const uint32_t u42[] = {0x3f07ae08u, 0x3fdb7cadu, 0x3fa912b3u, 0x3f7a71d8u,
                          0x3e9686b6u, 0x3f90f171u, 0xc00250ccu, 0x401392aau};
  EXPECT(d2, u42);
  draw h = {.k = K_UNIFORM, .seed = 42, .dt = JIT_F16, .rank = 1, .shape = {5}, .lo = 0, .hi = 1};
  const uint16_t f16[] = {0x2ce0, 0x3218, 0x3bce, 0x3a0e, 0x3730};
  EXPECT(h, f16);
  h.dt = JIT_BF16;
  const uint16_t bf16[] = {0x3f22, 0x3f58, 0x3f78, 0x3f56, 0x3da0};
  EXPECT(h, bf16);
  draw w = {.k = K_UNIFORM, .seed = (UINT64_C(1) << 40) + 7, .dt = JIT_F64, .rank = 1, .shape = {4},
            .lo = 0, .hi = 1};
  const uint64_t f64[] = {0x3fe4ae296c00d352ull, 0x3fcef627587a2b98ull, 0x3fcd3a05d443dd20ull,
                          0x3fdbe1662d85a06cull};
  EXPECT(w, f64);
  w.lo = -1;
  w.hi = 5;
  const uint64_t f64b[] = {0x4007053e22013cfbull, 0x3fdce276096e82c8ull, 0x3fd7ae117ccb9760ull,
                           0x3ff9d219444870a2ull};
  EXPECT(w, f64b);
}

/* Distance in ulp of two finite floats of one sign. */
static int64_t ulp_f32(float a, float b) {
  int32_t x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  if ((x < 0) != (y < 0)) return INT64_MAX;
  return llabs((long long)x - y);
}

static void test_normal_bernoulli(void **state) {
  (void)state;
  draw d = {.k = K_NORMAL, .seed = 0, .dt = JIT_F32, .rank = 1, .shape = {6}};
  const uint32_t bits[] = {0x3fcfb2bdu, 0x40019df0u, 0xbede0017u, 0xbda10222u, 0x3e34512cu, 0xbf78dad7u};
  float got[6];
  for (int opt = 0; opt <= 3; opt += 3) {
    run_draw(&d, 1, opt, got, sizeof got);
    for (int i = 0; i < 6; i++) {
      float want;
      memcpy(&want, &bits[i], 4);
      if (ulp_f32(got[i], want) > 2) {
        print_error("opt %d: normal[%d] = %.9g, JAX %.9g\n", opt, i, got[i], want);
        fail();
      }
    }
  }
  draw w = {.k = K_NORMAL, .seed = (UINT64_C(1) << 40) + 7, .dt = JIT_F64, .rank = 1, .shape = {4}};
  const double n64[] = {0.3752426302724837, -0.7002454547989816, -0.7443472400565624,
                        -0.1620524602378798};
  double g64[4];
  run_draw(&w, 1, 3, g64, sizeof g64);
  for (int i = 0; i < 4; i++) assert_true(fabs(g64[i] - n64[i]) <= 1e-14 * fabs(n64[i]));
  draw b = {.k = K_BERNOULLI, .seed = 42, .p = 0.3, .rank = 1, .shape = {16}};
  const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 1, 0};
  EXPECT(b, want);
}

/* ---- vmap and sharding --------------------------------------------------------------------------- */

static void bits3(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  (void)user;
  int64_t s = 3;
  res[0] = jit_random_bits(t, args[0], JIT_U32, 1, &s);
}

static void vmapped(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  (void)args;
  (void)user;
  jit_val keys = jit_random_split(t, jit_random_key(t, 0), 4);
  int in_axes[1] = {0}, out_axes[1] = {0};
  jit_vmap(t, bits3, NULL, 1, &keys, in_axes, 1, res, out_axes);
}

/* jax.vmap(lambda k: jax.random.bits(k, (3,), jnp.uint32))(jax.random.split(PRNGKey(0), 4)) */
static void test_vmap(void **state) {
  (void)state;
  const uint32_t want[] = {0xd7a1e7e1u, 0x2eb05e5cu, 0x3a2859ecu, 0x01de0365u, 0x05592150u, 0x94d85fc8u,
                           0xe706ef41u, 0xe98c062du, 0x574ee690u, 0x44596d6au, 0xbbe429eeu, 0xf4273345u};
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = ot_ctx_with(1, 2, opt);
    jit_fn_opts o = {.name = "vmapped", .n_args = 0, .n_results = 1};
    jit_fn *f = NULL;
    OT_ASSERT_OK(jit_compile(ctx, vmapped, NULL, &o, &f));
    jit_array *r = NULL;
    OT_ASSERT_OK(jit_call(f, NULL, &r));
    uint32_t got[12];
    OT_ASSERT_OK(jit_array_to_host(r, got, sizeof got));
    assert_memory_equal(got, want, sizeof want);
    jit_array_free(r);
    jit_fn_free(f);
    jit_ctx_destroy(ctx);
  }
}

/* Sharded over 2 devices along either dim, every element gets the bits of its global index. */
static void test_sharded(void **state) {
  (void)state;
  static const char *const specs[] = {"x,_", "_,x"};
  for (int s = 0; s < 2; s++) {
    draw d = {.k = K_BITS, .seed = 42, .dt = JIT_U32, .rank = 2, .shape = {6, 10}};
    uint32_t whole[60], sharded[60];
    run_draw(&d, 1, 3, whole, sizeof whole);
    d.spec = specs[s];
    run_draw(&d, 2, 3, sharded, sizeof sharded);
    assert_memory_equal(whole, sharded, sizeof whole);
    draw u = {.k = K_UNIFORM, .seed = 3, .dt = JIT_F32, .rank = 2, .shape = {4, 8}, .lo = -1, .hi = 1};
    float uw[32], us[32];
    run_draw(&u, 1, 3, uw, sizeof uw);
    u.spec = specs[s];
    run_draw(&u, 2, 3, us, sizeof us);
    assert_memory_equal(uw, us, sizeof uw);
  }
}

/* ---- the op's text form and errors ------------------------------------------------------------- */

static void test_threefry_text(void **state) {
  (void)state;
  const char *text = "func @tf(%0: u64[3], %1: u64[3]) -> u64[3] {\n"
                     "  %2 = threefry2x32 %0, %1 : u64[3]\n"
                     "  return %2\n"
                     "}\n";
  ir_func **fs = NULL;
  uint32_t n = 0;
  OT_ASSERT_OK(ir_parse(text, strlen(text), &fs, &n));
  assert_int_equal(n, 1);
  OT_ASSERT_OK(ir_verify(fs[0], NULL));
  uint64_t key[3] = {0, 42, UINT64_MAX}, ctr[3] = {2, 7, UINT64_C(1) << 63}, out[3];
  const void *args[2] = {key, ctr};
  void *res[1] = {out};
  OT_ASSERT_OK(ir_interp(fs[0], args, res));
  assert_true(out[0] == UINT64_C(0xf71f4ea9a20e4081));
  assert_true(out[1] == UINT64_C(0x97d0552f51bf719f));
  assert_true(out[2] == ir_threefry2x32(UINT64_MAX, UINT64_C(1) << 63));
  ir_func_free(fs[0]);
  free(fs);
  const char *bad = "func @tf(%0: u32[3], %1: u32[3]) -> u32[3] {\n"
                    "  %2 = threefry2x32 %0, %1 : u32[3]\n"
                    "  return %2\n"
                    "}\n";
  assert_int_equal(ir_parse(bad, strlen(bad), &fs, &n), JIT_EINVAL);
  assert_true(ot_error_contains("u64"));
}

static int bad_line;
static void bad_key(jit_trace *t, const jit_val *args, jit_val *res, void *user) {
  (void)args;
  int64_t s[1] = {3};
  jit_val k = *(int *)user == 0 ? jit_full(t, JIT_I32, 1, (int64_t[]){2}, 0)
                                : jit_random_key(t, 1);
  bad_line = __LINE__ + 1;
  res[0] = *(int *)user == 2 ? jit_random_uniform(t, k, JIT_I32, 1, s, 0, 1) : jit_random_bits(t, k, *(int *)user == 1 ? JIT_F32 : JIT_U32, 1, s);
}

static void test_errors(void **state) {
  (void)state;
  static const char *const want[] = {"a key is a u32[2]", "bits are u32 or u64", "needs a float dtype"};
  static const jit_status codes[] = {JIT_EDTYPE, JIT_EDTYPE, JIT_EDTYPE};
  for (int which = 0; which < 3; which++) {
    jit_fn_opts o = {.name = "bad", .n_args = 0, .n_results = 1};
    jit_fn *f = NULL;
    OT_ASSERT_OK(jit_compile(ot_ctx(), bad_key, &which, &o, &f));
    jit_array *r = NULL;
    assert_int_equal(jit_call(f, NULL, &r), codes[which]);
    assert_true(ot_error_has(which == 2 ? "random_uniform" : "random_bits", THIS_FILE, bad_line));
    assert_true(ot_error_contains(want[which]));
    jit_fn_free(f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threefry_scalar), cmocka_unit_test(test_keys),
      cmocka_unit_test(test_bits_u32),        cmocka_unit_test(test_bits_long),
      cmocka_unit_test(test_bits_u64),        cmocka_unit_test(test_split_fold_in),
      cmocka_unit_test(test_uniform),         cmocka_unit_test(test_normal_bernoulli),
      cmocka_unit_test(test_vmap),            cmocka_unit_test(test_sharded),
      cmocka_unit_test(test_threefry_text),   cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
