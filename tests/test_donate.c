/* test_donate.c: donate_mask: results written over donated args' buffers (bit-identical to the
 * undonated call, in place where it is safe), donated arrays deleted afterwards, duplicates
 * refused, peak_bytes lowered, sharded donations shard by shard. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "support/optest.h"
#include "tjit.h"

static jit_array *copy_of(const jit_array *a) {
  void *v = malloc(jit_array_nbytes(a) + 1);
  assert_int_equal(jit_array_to_host(a, v, jit_array_nbytes(a)), JIT_OK);
  jit_array *b = NULL;
  assert_int_equal(jit_array_from_host(a->ctx, jit_array_dtype(a), jit_array_rank(a),
                                       jit_array_shape(a), v, &b), JIT_OK);
  free(v);
  return b;
}

static void expect_identical(const jit_array *got, const jit_array *want, const char *what) {
  size_t n = jit_array_nbytes(want);
  assert_int_equal(jit_array_nbytes(got), n);
  unsigned char *g = malloc(n + 1), *w = malloc(n + 1);
  assert_int_equal(jit_array_to_host(got, g, n), JIT_OK);
  assert_int_equal(jit_array_to_host(want, w, n), JIT_OK);
  if (memcmp(g, w, n) != 0) fail_msg("%s: the donated call's result differs", what);
  free(g);
  free(w);
}

static bool contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

/* ---- a W8-like SGD step: loss and new weights of a 2-layer MLP -------------------------------- */

static void mlp_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user; /* a: w1, b1, w2, b2, x, target */
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[4], a[0]), a[1]));
  jit_val y = jit_add(t, jit_matmul(t, h, a[2]), a[3]);
  jit_val d = jit_sub(t, y, a[5]);
  jit_val s = jit_reduce_sum(t, jit_mul(t, d, d), 2, (const int[]){0, 1});
  int64_t n = jit_val_shape(t, d)[0] * jit_val_shape(t, d)[1];
  r[0] = jit_mul(t, s, jit_scalar(t, 1.0 / (double)n));
}

static void sgd(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val vg[5];
  jit_value_and_grad(t, mlp_loss, user, 6, a, 0xF, 0, vg);
  r[0] = vg[0];
  for (int i = 0; i < 4; i++) r[1 + i] = jit_sub(t, a[i], jit_mul(t, jit_scalar(t, 0.05), vg[1 + i]));
}

typedef struct sgd_set {
  jit_array *a[6];
} sgd_set;

static sgd_set sgd_args(jit_ctx *c) {
  /* weights larger than the activations, as in W8 (whose peak is its weights' updates) */
  const int64_t sw1[2] = {64, 128}, sb1[1] = {128}, sw2[2] = {128, 64}, sb2[1] = {64};
  const int64_t sx[2] = {16, 64}, st[2] = {16, 64};
  sgd_set s = {{ot_f32_array(c, 2, sw1, 1), ot_f32_array(c, 1, sb1, 2), ot_f32_array(c, 2, sw2, 3),
                ot_f32_array(c, 1, sb2, 4), ot_f32_array(c, 2, sx, 5), ot_f32_array(c, 2, st, 6)}};
  return s;
}

static void sgd_step_in_place(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(1, 2, 3);
  jit_fn *plain = NULL, *donating = NULL;
  jit_fn_opts o = {.name = "sgd", .n_args = 6, .n_results = 5};
  assert_int_equal(jit_compile(c, sgd, NULL, &o, &plain), JIT_OK);
  o.donate_mask = 0xF;
  assert_int_equal(jit_compile(c, sgd, NULL, &o, &donating), JIT_OK);
  sgd_set s = sgd_args(c), d;
  for (int i = 0; i < 6; i++) d.a[i] = i < 4 ? copy_of(s.a[i]) : s.a[i];

  /* several steps, each feeding the new weights back, as a training loop does */
  for (int step = 0; step < 3; step++) {
    jit_array *want[5], *got[5];
    void *before[4];
    for (int i = 0; i < 4; i++) before[i] = d.a[i]->data;
    assert_int_equal(jit_call(plain, s.a, want), JIT_OK);
    assert_int_equal(jit_call(donating, d.a, got), JIT_OK);
    for (int k = 0; k < 5; k++) expect_identical(got[k], want[k], "sgd");
    /* the weight matrices are updated in place: their gradient's matmul stores w - lr * g over
       w (each element once, after reading it) */
    assert_ptr_equal(got[1]->data, before[0]);
    assert_ptr_equal(got[3]->data, before[2]);
    for (int k = 1; k < 5; k++) {
      bool in_place = false;
      for (int i = 0; i < 4; i++) in_place |= got[k]->data == before[i];
      print_message("step %d: result %d %s\n", step, k, in_place ? "in place" : "in a new buffer");
    }
    jit_array *none[5];
    assert_int_equal(jit_call(donating, d.a, none), JIT_EINVAL);
    assert_string_equal(jit_last_error(), "jit_call: args[0] of 'sgd' was donated to an earlier "
                                          "call (of 'sgd')");
    assert_int_equal(jit_call(plain, d.a, none), JIT_EINVAL);
    assert_null(none[0]);
    for (int i = 0; i < 4; i++) {
      jit_array *out = NULL;
      float x;
      assert_true(d.a[i]->donated_to[0]);
      assert_int_equal(jit_array_to_host(d.a[i], &x, sizeof x), JIT_EINVAL);
      assert_true(contains(jit_last_error(), "donated to a call of 'sgd'"));
      jit_mesh *m = NULL;
      assert_int_equal(jit_mesh_create(c, 1, (const int64_t[]){1}, (const char *const[]){"x"}, NULL, &m), JIT_OK);
      jit_sharding *sh = NULL;
      assert_int_equal(jit_sharding_create(m, i % 2 ? "_" : "_,_", &sh), JIT_OK);
      assert_int_equal(jit_device_put(d.a[i], sh, &out), JIT_EINVAL);
      assert_true(contains(jit_last_error(), "donated"));
      assert_null(out);
      jit_sharding_free(sh);
      jit_mesh_free(m);
      jit_array_free(d.a[i]); /* still the caller's to free */
      jit_array_free(s.a[i]);
      s.a[i] = want[1 + i];
      d.a[i] = got[1 + i];
    }
    jit_array_free(want[0]);
    jit_array_free(got[0]);
  }

  /* peak_bytes: the in-place results take no bytes of their own */
  jit_fn_stats ps, ds;
  assert_int_equal(jit_fn_stats_get(plain, &ps), JIT_OK);
  assert_int_equal(jit_fn_stats_get(donating, &ds), JIT_OK);
  print_message("peak_bytes: %llu without donation, %llu with\n",
                (unsigned long long)ps.peak_bytes, (unsigned long long)ds.peak_bytes);
  assert_true(ds.peak_bytes < ps.peak_bytes);
  assert_true(ps.peak_bytes - ds.peak_bytes >= 64 * 128 * 4); /* a weight matrix at least */
  for (int i = 0; i < 4; i++) {
    jit_array_free(s.a[i]);
    jit_array_free(d.a[i]);
  }
  jit_array_free(s.a[4]);
  jit_array_free(s.a[5]);
  jit_fn_free(plain);
  jit_fn_free(donating);
  jit_ctx_destroy(c);
}

/* ---- functions where writing in place would be wrong, and ones where it is right --------------- */

static void ew(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  r[0] = jit_add(t, jit_mul(t, a[0], jit_scalar(t, 2)), jit_exp(t, a[0]));
}
static void transposed(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  r[0] = jit_add(t, jit_transpose(t, a[0], (const int[]){1, 0}), a[0]);
}
static void softmax(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  jit_val m = jit_reduce_max(t, a[0], 1, (const int[]){1});
  jit_val e = jit_exp(t, jit_sub(t, a[0], jit_broadcast_to(t, jit_reshape(t, m, 2, (const int64_t[]){64, 1}), 2, (const int64_t[]){64, 64})));
  jit_val s = jit_reduce_sum(t, e, 1, (const int[]){1});
  r[0] = jit_div(t, e, jit_broadcast_to(t, jit_reshape(t, s, 2, (const int64_t[]){64, 1}), 2, (const int64_t[]){64, 64}));
}
static void square_matmul(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  r[0] = jit_add(t, jit_matmul(t, a[0], a[0]), a[0]);
}
static void reversed_rows(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u; /* row i of the result is row 63 - i of x: a kernel that reads x elsewhere */
  jit_val lo = jit_slice(t, a[0], (const int64_t[]){32, 0}, (const int64_t[]){64, 64}, NULL);
  jit_val hi = jit_slice(t, a[0], (const int64_t[]){0, 0}, (const int64_t[]){32, 64}, NULL);
  r[0] = jit_concat(t, 2, (const jit_val[]){lo, hi}, 0);
}
static void two_results(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u; /* x read again after the first result is written */
  r[0] = jit_mul(t, a[0], a[0]);
  r[1] = jit_reduce_sum(t, jit_sin(t, a[0]), 1, (const int[]){1});
  r[2] = jit_add(t, a[1], jit_scalar(t, 1));
}
static void returns_arg(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  r[0] = a[0];
}

static void differential(void **state) {
  (void)state;
  static const struct {
    const char *name;
    jit_trace_fn fn;
    int n_args, n_results;
    int in_place; /* -1: either (the result is right both ways) */
  } cases[] = {
      {"ew", ew, 1, 1, 1},
      {"transposed", transposed, 1, 1, 0},
      {"softmax", softmax, 1, 1, -1},
      {"square_matmul", square_matmul, 1, 1, 0},
      {"reversed_rows", reversed_rows, 1, 1, 0},
      {"two_results", two_results, 2, 3, -1},
      {"returns_arg", returns_arg, 1, 1, -1},
  };
  const int64_t sx[2] = {64, 64};
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *c = ot_ctx_with(1, 2, opt);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      jit_fn *plain = NULL, *donating = NULL;
      jit_fn_opts o = {.name = cases[k].name, .n_args = cases[k].n_args, .n_results = cases[k].n_results};
      assert_int_equal(jit_compile(c, cases[k].fn, NULL, &o, &plain), JIT_OK);
      o.donate_mask = (1u << cases[k].n_args) - 1;
      assert_int_equal(jit_compile(c, cases[k].fn, NULL, &o, &donating), JIT_OK);
      jit_array *a[2] = {ot_f32_array(c, 2, sx, 10 + k), ot_f32_array(c, 2, sx, 20 + k)};
      jit_array *b[2] = {copy_of(a[0]), copy_of(a[1])};
      void *before = b[0]->data;
      jit_array *want[3] = {0}, *got[3] = {0};
      assert_int_equal(jit_call(plain, a, want), JIT_OK);
      if (jit_call(donating, b, got) != JIT_OK) fail_msg("%s: %s", cases[k].name, jit_last_error());
      for (int r = 0; r < cases[k].n_results; r++) expect_identical(got[r], want[r], cases[k].name);
      if (opt > 0 && cases[k].in_place >= 0 && (got[0]->data == before) != cases[k].in_place)
        fail_msg("%s: expected %s", cases[k].name, cases[k].in_place ? "in place" : "a new buffer");
      for (int i = 0; i < cases[k].n_args; i++) assert_true(b[i]->donated_to[0]);
      for (int r = 0; r < cases[k].n_results; r++) {
        jit_array_free(want[r]);
        jit_array_free(got[r]);
      }
      for (int i = 0; i < 2; i++) {
        jit_array_free(a[i]);
        jit_array_free(b[i]);
      }
      jit_fn_free(plain);
      jit_fn_free(donating);
    }
    jit_ctx_destroy(c);
  }
}

static void duplicates_refused(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(1, 1, 3);
  const int64_t sx[2] = {8, 8};
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "pair", .n_args = 2, .n_results = 3, .donate_mask = 1};
  assert_int_equal(jit_compile(c, two_results, NULL, &o, &f), JIT_OK);
  jit_array *x = ot_f32_array(c, 2, sx, 1), *r[3] = {0};
  /* a donated array also passed undonated */
  assert_int_equal(jit_call(f, (jit_array *[]){x, x}, r), JIT_EINVAL);
  assert_string_equal(jit_last_error(), "jit_call: pair: args[0] is also args[1], which is donated: "
                                        "a donated array may be passed only once");
  assert_null(r[0]);
  assert_false(x->donated_to[0]); /* refused before running: still the caller's */
  jit_fn_free(f);
  /* donated twice */
  o.donate_mask = 3;
  assert_int_equal(jit_compile(c, two_results, NULL, &o, &f), JIT_OK);
  assert_int_equal(jit_call(f, (jit_array *[]){x, x}, r), JIT_EINVAL);
  assert_true(contains(jit_last_error(), "a donated array may be passed only once"));
  float v[64];
  assert_int_equal(jit_array_to_host(x, v, sizeof v), JIT_OK);
  jit_array *y = ot_f32_array(c, 2, sx, 2);
  assert_int_equal(jit_call(f, (jit_array *[]){x, y}, r), JIT_OK);
  for (int k = 0; k < 3; k++) jit_array_free(r[k]);
  jit_array_free(x);
  jit_array_free(y);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

/* A committed arg's shards become the result's where the per-device blocks match. */
static void sharded(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(2, 2, 3);
  const int64_t sx[2] = {64, 64};
  jit_mesh *m = NULL;
  assert_int_equal(jit_mesh_create(c, 1, (const int64_t[]){2}, (const char *const[]){"x"}, NULL, &m), JIT_OK);
  static const char *const specs[] = {"x,_", "_,x", "_,_"};
  for (size_t k = 0; k < 3; k++) {
    jit_sharding *sh = NULL;
    assert_int_equal(jit_sharding_create(m, specs[k], &sh), JIT_OK);
    jit_array *h = ot_f32_array(c, 2, sx, 7 + k), *a = NULL, *b = NULL;
    assert_int_equal(jit_device_put(h, sh, &a), JIT_OK);
    assert_int_equal(jit_device_put(h, sh, &b), JIT_OK);
    jit_fn *plain = NULL, *donating = NULL;
    jit_fn_opts o = {.name = "ew", .n_args = 1, .n_results = 1};
    assert_int_equal(jit_compile(c, ew, NULL, &o, &plain), JIT_OK);
    o.donate_mask = 1;
    assert_int_equal(jit_compile(c, ew, NULL, &o, &donating), JIT_OK);
    void *before[2] = {b->shards[0], b->shards[1]};
    jit_array *want = NULL, *got = NULL;
    assert_int_equal(jit_call(plain, &a, &want), JIT_OK);
    assert_int_equal(jit_call(donating, &b, &got), JIT_OK);
    expect_identical(got, want, specs[k]);
    assert_non_null(got->shards);
    assert_ptr_equal(got->shards[0], before[0]);
    assert_ptr_equal(got->shards[1], before[1]);
    assert_true(b->donated_to[0]);
    assert_int_equal(jit_array_visualize(b, stdout), JIT_EINVAL);
    assert_true(contains(jit_last_error(), "donated"));
    jit_array_free(want);
    jit_array_free(got);
    jit_array_free(a);
    jit_array_free(b);
    jit_array_free(h);
    jit_fn_free(plain);
    jit_fn_free(donating);
    jit_sharding_free(sh);
  }
  /* a donation that cannot take the shards (an uncommitted arg in a partitioned call) copies */
  jit_sharding *sh = NULL;
  assert_int_equal(jit_sharding_create(m, "x,_", &sh), JIT_OK);
  jit_array *h = ot_f32_array(c, 2, sx, 3), *a = NULL, *u = copy_of(h);
  assert_int_equal(jit_device_put(h, sh, &a), JIT_OK);
  jit_fn *plain = NULL, *donating = NULL;
  jit_fn_opts o = {.name = "add", .n_args = 2, .n_results = 3};
  assert_int_equal(jit_compile(c, two_results, NULL, &o, &plain), JIT_OK);
  o.donate_mask = 2;
  assert_int_equal(jit_compile(c, two_results, NULL, &o, &donating), JIT_OK);
  jit_array *want[3], *got[3];
  assert_int_equal(jit_call(plain, (jit_array *[]){a, h}, want), JIT_OK);
  assert_int_equal(jit_call(donating, (jit_array *[]){a, u}, got), JIT_OK);
  for (int k = 0; k < 3; k++) {
    expect_identical(got[k], want[k], "uncommitted donor");
    jit_array_free(want[k]);
    jit_array_free(got[k]);
  }
  assert_true(u->donated_to[0]);
  jit_array_free(u);
  jit_array_free(a);
  jit_array_free(h);
  jit_fn_free(plain);
  jit_fn_free(donating);
  jit_sharding_free(sh);
  jit_mesh_free(m);
  jit_ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sgd_step_in_place),
      cmocka_unit_test(differential),
      cmocka_unit_test(duplicates_refused),
      cmocka_unit_test(sharded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
