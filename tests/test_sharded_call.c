/* test_sharded_call.c: jit_call partitioned over a mesh: committed args and sharding constraints
 * choose the mesh, every device runs its program on its own thread, results come back committed
 * with the partitioner's shardings and equal the unsharded call's; the cache keys on shardings;
 * bad constraints are errors naming the user's line. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "support/optest.h"
#include "support/spmd_programs.h"
#include "tjit.h"

static float *host(const jit_array *a) {
  float *v = malloc(jit_array_nbytes(a) + 4);
  assert_int_equal(jit_array_to_host(a, v, jit_array_nbytes(a)), JIT_OK);
  return v;
}

static void expect_close(const jit_array *got, const jit_array *want, double tol) {
  assert_int_equal(jit_array_nbytes(got), jit_array_nbytes(want));
  float *g = host(got), *w = host(want);
  size_t n = jit_array_nbytes(got) / 4;
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)g[i] - w[i]) <= tol * (1 + fabs((double)w[i]))))
      fail_msg("element %zu: got %.9g, want %.9g", i, g[i], w[i]);
  free(g);
  free(w);
}

static jit_mesh *mesh(jit_ctx *c, int n_axes, const int64_t *sizes) {
  static const char *const names[] = {"x", "y"};
  jit_mesh *m = NULL;
  assert_int_equal(jit_mesh_create(c, n_axes, sizes, names, NULL, &m), JIT_OK);
  return m;
}

static jit_array *put(const jit_array *a, const jit_mesh *m, const char *spec) {
  jit_sharding *s = NULL;
  assert_int_equal(jit_sharding_create(m, spec, &s), JIT_OK);
  jit_array *b = NULL;
  assert_int_equal(jit_device_put(a, s, &b), JIT_OK);
  jit_sharding_free(s);
  return b;
}

static const char *spec_of(const jit_array *a, char *buf, size_t n) {
  if (!a->sharding) return "(uncommitted)";
  sharding_format_spec(a->sharding, buf, n);
  return buf;
}

static void run_mlp(int opt) {
  jit_ctx *c = ot_ctx_with(8, 2, opt);
  const int64_t sx[2] = {64, 48}, sw[2] = {48, 32}, sb[1] = {32};
  jit_array *x = ot_f32_array(c, 2, sx, 1), *w = ot_f32_array(c, 2, sw, 2), *b = ot_f32_array(c, 1, sb, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 3, .n_results = 2};
  assert_int_equal(jit_compile(c, sp_mlp, NULL, &o, &f), JIT_OK);
  jit_array *want[2];
  assert_int_equal(jit_call(f, (jit_array *[]){x, w, b}, want), JIT_OK);
  assert_null(want[0]->sharding);

  static const struct {
    int n_axes;
    int64_t sizes[2];
    const char *sx, *sw; /* NULL: uncommitted */
    const char *want_y;  /* the result's spec */
  } cases[] = {
      {1, {2}, "x,_", NULL, "x,_"},        /* rows: no communication */
      {1, {4}, "x,_", "_,_", "x,_"},
      {1, {8}, "_,x", "x,_", "_,_"},       /* contracted dim split: an all-reduce */
      {2, {2, 4}, "x,_", "_,y", "x,y"},    /* JAX's tutorial: the 2-D result */
      {2, {4, 2}, "x+y,_", NULL, "x+y,_"},
      {1, {1}, "x,_", NULL, "x,_"},        /* one device */
  };
  uint64_t calls = 1;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    jit_mesh *m = mesh(c, cases[k].n_axes, cases[k].sizes);
    jit_array *px = put(x, m, cases[k].sx), *pw = cases[k].sw ? put(w, m, cases[k].sw) : w;
    jit_array *got[2];
    for (int rep = 0; rep < 2; rep++) { /* the second call is a cache hit */
      assert_int_equal(jit_call(f, (jit_array *[]){px, pw, b}, got), JIT_OK);
      calls++;
      char buf[64];
      assert_string_equal(spec_of(got[0], buf, sizeof buf), cases[k].want_y);
      expect_close(got[0], want[0], 1e-5);
      expect_close(got[1], want[1], 1e-4);
      jit_array_free(got[0]);
      jit_array_free(got[1]);
    }
    if (k == 2) { /* the contracted split: one all-reduce of the f32[64,32] dot over 8 devices */
      jit_fn_stats st;
      assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
      assert_int_equal(st.comm_bytes, 64 * 32 * 4 * 7 * 8);
    }
    if (pw != w) jit_array_free(pw);
    jit_array_free(px);
    jit_mesh_free(m);
  }
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.calls, calls);
  assert_int_equal(st.cache_misses, 1 + sizeof cases / sizeof cases[0]);
  jit_array_free(want[0]);
  jit_array_free(want[1]);
  jit_array_free(x);
  jit_array_free(w);
  jit_array_free(b);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

static void test_mlp_interpreted(void **state) {
  (void)state;
  run_mlp(0);
}

static void test_mlp_compiled(void **state) {
  (void)state;
  run_mlp(3);
}

/* A constraint alone partitions the call (its mesh is the call's). */
typedef struct constraint_user {
  jit_sharding *s;
} constraint_user;

static void constrained(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  constraint_user *u = user;
  jit_val y = jit_with_sharding_constraint(t, jit_exp(t, a[0]), u->s);
  r[0] = jit_reduce_sum(t, jit_mul(t, y, y), 1, (const int[]){1});
}

static void test_constraint(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(4, 2, 3);
  const int64_t sx[2] = {16, 8}, s4[1] = {4};
  jit_array *x = ot_f32_array(c, 2, sx, 9);
  jit_mesh *m = mesh(c, 1, s4);
  constraint_user u = {NULL};
  assert_int_equal(jit_sharding_create(m, "x,_", &u.s), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "constrained", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, constrained, &u, &o, &f), JIT_OK);
  jit_array *got[1];
  assert_int_equal(jit_call(f, (jit_array *[]){x}, got), JIT_OK);
  char buf[64];
  assert_string_equal(spec_of(got[0], buf, sizeof buf), "x");
  float *g = host(got[0]), *xv = host(x);
  for (int i = 0; i < 16; i++) {
    double want = 0;
    for (int j = 0; j < 8; j++) want += exp(2.0 * xv[i * 8 + j]);
    assert_true(fabs(g[i] - want) <= 1e-5 * want);
  }
  free(g);
  free(xv);
  /* the partitioned dump shows the per-device program */
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  assert_int_equal(jit_fn_dump(f, NULL, JIT_DUMP_PARTITIONED, mem), JIT_OK);
  fclose(mem);
  assert_non_null(strstr(text, "mesh[x=4]"));
  assert_non_null(strstr(text, "f32[4,8] {\"x,_\"}"));
  free(text);
  jit_array_free(got[0]);

  /* the wrong rank, an uneven split: errors at the user's line */
  jit_sharding_free(u.s);
  assert_int_equal(jit_sharding_create(m, "x", &u.s), JIT_OK);
  jit_fn_free(f);
  assert_int_equal(jit_compile(c, constrained, &u, &o, &f), JIT_OK);
  assert_int_equal(jit_call(f, (jit_array *[]){x}, got), JIT_ESHARDING);
  assert_non_null(strstr(jit_last_error(), "with_sharding_constraint at tests/test_sharded_call.c:"));
  assert_non_null(strstr(jit_last_error(), "has 1 entries for f32[16,8]"));
  jit_sharding_free(u.s);
  assert_int_equal(jit_sharding_create(m, "_,x", &u.s), JIT_OK);
  const int64_t sodd[2] = {16, 6};
  jit_array *odd = ot_f32_array(c, 2, sodd, 3);
  assert_int_equal(jit_call(f, (jit_array *[]){odd}, got), JIT_ESHARDING);
  assert_non_null(strstr(jit_last_error(), "splits dim 1 of f32[16,6] into 4 parts"));
  jit_array_free(odd);
  /* a constraint over another mesh than the committed args' */
  const int64_t s2[1] = {2};
  jit_mesh *m2 = mesh(c, 1, s2);
  jit_array *px = put(x, m2, "x,_");
  assert_int_equal(jit_call(f, (jit_array *[]){px}, got), JIT_ESHARDING);
  assert_non_null(strstr(jit_last_error(), "is over mesh[x=4]"));
  jit_array_free(px);
  jit_mesh_free(m2);
  jit_sharding_free(u.s);
  jit_fn_free(f);
  jit_mesh_free(m);
  jit_array_free(x);
  jit_ctx_destroy(c);
}

/* Constraints that need every resharding collective: the results equal the unsharded call's. */
static void test_every_reshard(void **state) {
  (void)state;
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *c = ot_ctx_with(4, 2, opt);
    const int64_t s4[1] = {4};
    jit_mesh *m = mesh(c, 1, s4);
    float want[SP_RESHARD_OUT], got[SP_RESHARD_OUT];
    sp_run_every_reshard(c, NULL, want);
    sp_run_every_reshard(c, m, got);
    sp_check_every_reshard(got, want);
    jit_mesh_free(m);
    jit_ctx_destroy(c);
  }
}

/* Host threads calling one partitioned function at once: each gets its own right answer (device
   jobs of a context run one at a time; each device keeps its own intermediates). */
typedef struct host_call {
  jit_fn *f;
  jit_array *x, *w, *b;
  const jit_array *want;
  int ok;
} host_call;

static void *host_main(void *arg) {
  host_call *h = arg;
  h->ok = 1;
  for (int i = 0; i < 20 && h->ok; i++) {
    jit_array *got[2];
    if (jit_call(h->f, (jit_array *[]){h->x, h->w, h->b}, got) != JIT_OK) {
      h->ok = 0;
      break;
    }
    float *g = host(got[0]), *w = host(h->want);
    for (size_t k = 0; k < jit_array_nbytes(got[0]) / 4; k++)
      if (fabs((double)g[k] - w[k]) > 1e-5 * (1 + fabs((double)w[k]))) h->ok = 0;
    free(g);
    free(w);
    jit_array_free(got[0]);
    jit_array_free(got[1]);
  }
  return NULL;
}

static void test_host_threads(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(4, 2, 3);
  const int64_t sx[2] = {64, 48}, sw[2] = {48, 32}, sb[1] = {32}, s4[1] = {4};
  jit_array *x = ot_f32_array(c, 2, sx, 1), *w = ot_f32_array(c, 2, sw, 2), *b = ot_f32_array(c, 1, sb, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 3, .n_results = 2};
  assert_int_equal(jit_compile(c, sp_mlp, NULL, &o, &f), JIT_OK);
  jit_array *want[2];
  assert_int_equal(jit_call(f, (jit_array *[]){x, w, b}, want), JIT_OK);
  jit_mesh *m = mesh(c, 1, s4);
  jit_array *px = put(x, m, "x,_");
  host_call h[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    h[i] = (host_call){f, px, w, b, want[0], 0};
    assert_int_equal(pthread_create(&th[i], NULL, host_main, &h[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) assert_true(h[i].ok);
  jit_array_free(want[0]);
  jit_array_free(want[1]);
  jit_array_free(px);
  jit_array_free(x);
  jit_array_free(w);
  jit_array_free(b);
  jit_mesh_free(m);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

/* A device keeps a dot's packed rhs over the calls on the same array, as jit_call's own runs do
   (exec_run.c team_area), its block of an uncommitted, a replicated or a column-sharded w alike
   (the last beside a replicated x, so that the partitioner keeps w's sharding);
   it must repack for another array, also one whose buffers land where the last one's were (freed,
   then taken from the pool) and one with the same bytes. Against the unpartitioned call. */
static void test_param_rhs_kept_on_devices(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(2, 2, 3);
  const int64_t sx[2] = {128, 256}, sw[2] = {256, 512}, sb[1] = {512}, s2[1] = {2};
  jit_array *x = ot_f32_array(c, 2, sx, 1), *b = ot_f32_array(c, 1, sb, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 3, .n_results = 2};
  assert_int_equal(jit_compile(c, sp_mlp, NULL, &o, &f), JIT_OK);
  jit_mesh *m = mesh(c, 1, s2);
  jit_array *px = put(x, m, "x,_"), *rx = put(x, m, "_,_");
  /* per round: w's contents (seed) and whether w is the previous round's array (the second
     call on an array makes the kept area, the third packs nothing) */
  static const struct { uint64_t seed; bool same_array; } rounds[] = {
      {10, false}, {10, true}, {10, true}, {11, false}, {11, true},
      {10, false}, {10, true}, {12, false}, {12, true}};
  static const char *const w_specs[] = {NULL, "_,_", "_,x"}; /* NULL: uncommitted */
  for (size_t k = 0; k < sizeof w_specs / sizeof w_specs[0]; k++) {
    jit_array *w = NULL, *pw = NULL, *want[2] = {NULL, NULL};
    for (size_t r = 0; r < sizeof rounds / sizeof rounds[0]; r++) {
      if (!rounds[r].same_array) {
        jit_array_free(pw != w ? pw : NULL); /* first: the new blocks may take its buffers */
        jit_array_free(w);
        jit_array_free(want[0]);
        jit_array_free(want[1]);
        w = ot_f32_array(c, 2, sw, rounds[r].seed);
        pw = w_specs[k] ? put(w, m, w_specs[k]) : w;
        assert_int_equal(jit_call(f, (jit_array *[]){x, w, b}, want), JIT_OK);
        assert_null(want[0]->sharding);
      }
      jit_array *got[2];
      jit_array *xk = k == 2 ? rx : px;
      assert_int_equal(jit_call(f, (jit_array *[]){xk, pw, b}, got), JIT_OK);
      assert_non_null(got[0]->sharding);
      expect_close(got[0], want[0], 1e-5);
      expect_close(got[1], want[1], 1e-4);
      jit_array_free(got[0]);
      jit_array_free(got[1]);
    }
    if (pw != w) jit_array_free(pw);
    jit_array_free(w);
    jit_array_free(want[0]);
    jit_array_free(want[1]);
  }
  /* each of the three partitioned signatures keeps a packing per device (the unpartitioned one
     only saw new arrays): w's [256, 512] twice for each replicated form, a [256, 256] block for
     each device of the sharded one, at least */
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  if (ot_core_runs(c))
    assert_true(st.kept_bytes >= (4 * 256 * 512 + 2 * 256 * 256) * sizeof(float));
  else assert_int_equal(st.kept_bytes, 0);
  jit_array_free(px);
  jit_array_free(rx);
  jit_array_free(x);
  jit_array_free(b);
  jit_mesh_free(m);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_interpreted),
      cmocka_unit_test(test_mlp_compiled),
      cmocka_unit_test(test_constraint),
      cmocka_unit_test(test_every_reshard),
      cmocka_unit_test(test_host_threads),
      cmocka_unit_test(test_param_rhs_kept_on_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
