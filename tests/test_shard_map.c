/* test_shard_map.c: jit_shard_map with jit_psum, jit_pmean, jit_all_gather and jit_axis_index:
 * results against plain C on 1-D and 2-D meshes, interpreted and compiled; the traced IR's
 * text round trip; a data-parallel training step against the unsharded one; errors. */
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

#include "ir/ir.h"
#include "support/roundtrip.h"
#include "support/spmd_programs.h"
#include "tjit.h"

static jit_ctx *ctx_of(int devices, int opt) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = 2;
  o.opt_level = opt;
  jit_ctx *c = NULL;
  assert_int_equal(jit_ctx_create(&o, &c), JIT_OK);
  return c;
}

static jit_mesh *mesh2(jit_ctx *c, int64_t x, int64_t y) {
  static const char *const names[] = {"x", "y"};
  const int64_t sizes[2] = {x, y};
  jit_mesh *m = NULL;
  assert_int_equal(jit_mesh_create(c, y ? 2 : 1, sizes, names, NULL, &m), JIT_OK);
  return m;
}

static jit_array *from(jit_ctx *c, int rank, const int64_t *shape, const float *v) {
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(c, JIT_F32, rank, shape, v, &a), JIT_OK);
  return a;
}

static void to(const jit_array *a, float *v, size_t n) {
  assert_int_equal(jit_array_to_host(a, v, n * sizeof *v), JIT_OK);
}

/* ---- collectives --------------------------------------------------------------------------- */
static void run_collectives(int opt) {
  jit_ctx *c = ctx_of(4, opt);
  jit_mesh *m = mesh2(c, 4, 0);
  enum { R = 8, C = 3 };
  float x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (float)(i % 7) - 2.5f + 0.125f * (float)i;
  jit_array *a = from(c, 2, (const int64_t[]){R, C}, x);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "collectives", .n_args = 1, .n_results = 4};
  assert_int_equal(jit_compile(c, sp_sm_collectives, m, &o, &f), JIT_OK);
  jit_array *r[4];
  if (jit_call(f, (jit_array *[]){a}, r) != JIT_OK) fail_msg("%s", jit_last_error());
  float colsum[C], mean[2 * C], all[R * C], idx[4];
  to(r[0], colsum, C);
  to(r[1], mean, 2 * C);
  to(r[2], all, R * C);
  to(r[3], idx, 4);
  sp_check_sm_collectives(R, C, x, colsum, mean, all, idx);

  /* the traced IR, with the nested per-device body, prints and parses back */
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  assert_int_equal(jit_fn_dump(f, NULL, JIT_DUMP_TRACED | JIT_DUMP_PARTITIONED, mem), JIT_OK);
  fclose(mem);
  assert_non_null(strstr(text, "shard_map %0 mesh[x=4] in=[\"x,_\"] out=[\"_\", \"_,_\", \"_,_\", \"x\"]"));
  assert_non_null(strstr(text, "all_reduce"));
  ir_func **fs = NULL;
  uint32_t n = 0;
  char *start = strstr(text, "func @");
  char *end = strstr(text, "// @collectives partitioned");
  assert_non_null(start);
  assert_non_null(end);
  if (ir_parse(start, (size_t)(end - start), &fs, &n) != JIT_OK) fail_msg("%s\n%s", jit_last_error(), text);
  assert_int_equal(n, 1);
  assert_ir_roundtrip(fs[0]);
  ir_func_free(fs[0]);
  free(fs);
  free(text);
  for (int k = 0; k < 4; k++) jit_array_free(r[k]);
  jit_array_free(a);
  jit_fn_free(f);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

static void test_collectives_interpreted(void **state) {
  (void)state;
  run_collectives(0);
}

static void test_collectives_compiled(void **state) {
  (void)state;
  run_collectives(3);
}

/* A 2-D mesh: psum over y only sums the blocks of one row of devices. */
static void test_2d_mesh(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(8, 3);
  jit_mesh *m = mesh2(c, 2, 4);
  float x[4 * 8];
  for (int i = 0; i < 32; i++) x[i] = (float)i;
  jit_array *a = from(c, 2, (const int64_t[]){4, 8}, x);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "rowsum", .n_args = 1, .n_results = 2};
  assert_int_equal(jit_compile(c, sp_sm_rowsum, m, &o, &f), JIT_OK);
  jit_array *r[2];
  if (jit_call(f, (jit_array *[]){a}, r) != JIT_OK) fail_msg("%s", jit_last_error());
  float got[4 * 2], all[2 * 2];
  to(r[0], got, 8);
  to(r[1], all, 4);
  sp_check_sm_rowsum(2, 4, x, got, all);
  jit_array_free(r[0]);
  jit_array_free(r[1]);
  jit_array_free(a);
  jit_fn_free(f);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

/* ---- data-parallel training: per-device gradients, pmean over "data", SGD ------------------ */
static void test_data_parallel_training(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(4, 3);
  static const char *const names[] = {"data"};
  jit_mesh *m = NULL;
  assert_int_equal(jit_mesh_create(c, 1, (const int64_t[]){4}, names, NULL, &m), JIT_OK);
  sp_train u = {m, 0.1f};
  enum { N = 32, D = 6, O = 2 };
  float w[D * O], x[N * D], y[N * O];
  uint64_t s = 42;
  for (int i = 0; i < D * O; i++) w[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) / 8388608.0f - 0.5f;
  for (int i = 0; i < N * D; i++) x[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) / 8388608.0f - 0.5f;
  for (int i = 0; i < N * O; i++) y[i] = (float)((s = s * 6364136223846793005ull + 1) >> 41) / 8388608.0f - 0.5f;
  jit_array *wa = from(c, 2, (const int64_t[]){D, O}, w), *xa = from(c, 2, (const int64_t[]){N, D}, x);
  jit_array *ya = from(c, 2, (const int64_t[]){N, O}, y);
  jit_fn *fs = NULL, *fp = NULL;
  jit_fn_opts o = {.name = "step", .n_args = 3, .n_results = 2};
  assert_int_equal(jit_compile(c, sp_train_step_sharded, &u, &o, &fs), JIT_OK);
  assert_int_equal(jit_compile(c, sp_train_step_plain, &u, &o, &fp), JIT_OK);
  jit_array *ws = wa, *wp = wa;
  for (int it = 0; it < 5; it++) { /* 5 steps each way, the weights fed back */
    jit_array *rs[2], *rp[2];
    if (jit_call(fs, (jit_array *[]){ws, xa, ya}, rs) != JIT_OK) fail_msg("%s", jit_last_error());
    assert_int_equal(jit_call(fp, (jit_array *[]){wp, xa, ya}, rp), JIT_OK);
    float ls, lp, a1[D * O], a2[D * O];
    to(rs[1], &ls, 1);
    to(rp[1], &lp, 1);
    to(rs[0], a1, D * O);
    to(rp[0], a2, D * O);
    /* equal-sized shards: the mean of the per-device means is the global mean */
    assert_true(fabs(ls - lp) <= 1e-5 * (1 + fabs(lp)));
    for (int i = 0; i < D * O; i++) assert_true(fabs(a1[i] - a2[i]) <= 1e-5);
    if (ws != wa) jit_array_free(ws);
    if (wp != wa) jit_array_free(wp);
    ws = rs[0];
    wp = rp[0];
    jit_array_free(rs[1]);
    jit_array_free(rp[1]);
  }
  jit_array_free(ws);
  jit_array_free(wp);
  jit_array_free(wa);
  jit_array_free(xa);
  jit_array_free(ya);
  jit_fn_free(fs);
  jit_fn_free(fp);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

/* ---- vmap and shard_map ----------------------------------------------------------------------- */
static void test_vmap(void **state) {
  (void)state;
  for (int opt = 0; opt <= 3; opt += 3)
    for (int which = 0; which < 2; which++) {
      jit_ctx *c = ctx_of(4, opt);
      jit_mesh *m = mesh2(c, 4, 0);
      float x[3 * 8];
      for (int i = 0; i < 24; i++) x[i] = (float)(i * 3 % 11) - 4.0f;
      jit_array *a = from(c, 2, (const int64_t[]){3, 8}, x), *r[2];
      jit_fn *f = NULL;
      jit_fn_opts o = {.name = "vm", .n_args = 1, .n_results = 2};
      assert_int_equal(jit_compile(c, which ? sp_sm_vmap_inner : sp_sm_vmap_outer, m, &o, &f), JIT_OK);
      if (jit_call(f, (jit_array *[]){a}, r) != JIT_OK) fail_msg("%d/%d: %s", opt, which, jit_last_error());
      float tot[3], scaled[24];
      to(r[0], tot, 3);
      to(r[1], scaled, 24);
      sp_check_sm_vmap(3, x, tot, scaled);
      jit_array_free(r[0]);
      jit_array_free(r[1]);
      jit_array_free(a);
      jit_fn_free(f);
      jit_mesh_free(m);
      jit_ctx_destroy(c);
    }
}

/* ---- errors ----------------------------------------------------------------------------------- */
typedef struct bad {
  jit_mesh *m;
  int which;
} bad;

static void bad_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const bad *b = user;
  r[0] = b->which == 0 ? jit_psum(t, a[0], "z") : a[0];
}

static void bad_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const bad *b = user;
  const char *in_ok[1] = {"x"}, *in_rank[1] = {"x,_"}, *in_twice[1] = {"x+x"}, *out[1] = {"x"};
  const char *const *in = b->which == 1 ? in_rank : b->which == 2 ? in_twice : in_ok;
  jit_shard_map(t, bad_body, user, b->m, 1, a, in, 1, r, out);
}

static void test_errors(void **state) {
  (void)state;
  jit_ctx *c = ctx_of(4, 3);
  bad b = {mesh2(c, 4, 0), 0};
  jit_fn_opts o = {.name = "bad", .n_args = 1, .n_results = 1};
  static const struct {
    int64_t n;
    jit_status st;
    const char *msg;
  } cases[] = {
      {8, JIT_EINVAL, "psum at tests/test_shard_map.c:"},
      {8, JIT_ESHARDING, "in_specs[0] \"x,_\" has 2 entries for f32[8]"},
      {8, JIT_ESHARDING, "in_specs[0]: spec \"x+x\": mesh axis 'x'"},
      {6, JIT_ESHARDING, "splits dim 0 of f32[6] into 4 parts"},
  };
  for (int k = 0; k < 4; k++) {
    b.which = k == 3 ? 0 : k;
    jit_fn *f = NULL;
    assert_int_equal(jit_compile(c, bad_outer, &b, &o, &f), JIT_OK);
    float v[8] = {0};
    jit_array *a = from(c, 1, &cases[k].n, v), *r[1];
    jit_status st = jit_call(f, (jit_array *[]){a}, r);
    if (st != cases[k].st || !strstr(jit_last_error(), cases[k].msg))
      fail_msg("case %d: %s: %s (want %s)", k, jit_status_str(st), jit_last_error(), cases[k].msg);
    if (k == 0) assert_non_null(strstr(jit_last_error(), "no mesh axis 'z' (the mesh has 'x')"));
    jit_array_free(a);
    jit_fn_free(f);
  }
  /* a mesh of another context */
  jit_ctx *other = ctx_of(4, 3);
  jit_mesh_free(b.m);
  b.m = mesh2(other, 4, 0);
  b.which = 3;
  jit_fn *f = NULL;
  assert_int_equal(jit_compile(c, bad_outer, &b, &o, &f), JIT_OK);
  float v[8] = {0};
  const int64_t n8 = 8;
  jit_array *a = from(c, 1, &n8, v), *r[1];
  assert_int_equal(jit_call(f, (jit_array *[]){a}, r), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "uses a mesh of another jit_ctx"));
  jit_array_free(a);
  jit_fn_free(f);
  jit_mesh_free(b.m);
  jit_ctx_destroy(other);
  jit_ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_interpreted),
      cmocka_unit_test(test_collectives_compiled),
      cmocka_unit_test(test_2d_mesh),
      cmocka_unit_test(test_data_parallel_training),
      cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
