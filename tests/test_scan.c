/* test_scan.c: jit_scan traced and run through jit_call, against plain C loops: cumulative sums
 * (forward, reverse), an RNN cell closing over its weights, nested scans capturing a value two
 * traces up, length 0 and 1, a scan without xs, the errors (carry type, xs sizes, counts), and
 * the fused dump of nested loops. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/optest.h"
#include "tjit.h"

/* ---- cumulative sum: carry += x_t, y_t = carry ------------------------------------------------ */
static void cumsum_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_add(t, carry[0], x[0]);
  y[0] = new_carry[0];
}

typedef struct scan_opts {
  int reverse;
  int64_t length;
} scan_opts;

static void cumsum_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const scan_opts *o = user;
  jit_scan(t, cumsum_body, NULL, 1, &args[0], 1, &args[1], o->length, o->reverse, &results[0], 1,
           &results[1]);
}

static void test_cumsum(void **state) {
  (void)state;
  for (int reverse = 0; reverse < 2; reverse++)
    for (int64_t len = 0; len <= 7; len += (len < 2 ? 1 : 5)) { /* 0, 1, 2, 7 */
      int64_t s0[1] = {4}, sx[2] = {len, 4};
      ot_array in[2] = {ot_random(JIT_F32, 1, s0, 1, -1, 1), ot_random(JIT_F32, 2, sx, 2, -1, 1)};
      ot_array out[2];
      scan_opts o = {reverse, -1};
      OT_ASSERT_OK(ot_run("cumsum", cumsum_fn, &o, 2, in, 2, out));
      ot_array want_c = ot_zeros(JIT_F32, 1, s0), want_y = ot_zeros(JIT_F32, 2, sx);
      for (int j = 0; j < 4; j++) want_c.v[j] = in[0].v[j];
      for (int64_t s = 0; s < len; s++) { /* the plain C loop, rounding to f32 like the IR */
        int64_t i = reverse ? len - 1 - s : s;
        for (int j = 0; j < 4; j++) {
          want_c.v[j] = (double)(float)(want_c.v[j] + in[1].v[i * 4 + j]);
          want_y.v[i * 4 + j] = want_c.v[j];
        }
      }
      assert_true(ot_expect("final carry", &out[0], &want_c));
      assert_true(ot_expect("ys", &out[1], &want_y));
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
}

/* the loop over steps is one native function of the signature's module (calling the body's
   entry per step), not a C loop around the runtime */
static void test_native_loop(void **state) {
  (void)state;
  int64_t s0[1] = {4}, sx[2] = {3, 4};
  ot_array in[2] = {ot_random(JIT_F32, 1, s0, 1, -1, 1), ot_random(JIT_F32, 2, sx, 2, -1, 1)};
  jit_array *a[2] = {ot_upload(&in[0]), ot_upload(&in[1])}, *r[2] = {NULL, NULL};
  scan_opts o = {0, -1};
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "cumsum", .n_args = 2, .n_results = 2};
  OT_ASSERT_OK(jit_compile(ot_ctx(), cumsum_fn, &o, &fo, &f));
  OT_ASSERT_OK(jit_call(f, a, r));
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_LLVM);
  assert_non_null(strstr(text, "define void @tjit_scan"));
  free(text);
  for (int i = 0; i < 2; i++) {
    jit_array_free(a[i]);
    jit_array_free(r[i]);
    ot_free(&in[i]);
  }
  jit_fn_free(f);
}

/* ---- RNN cell: h = tanh(h @ wh + x_t @ wx + b), y_t = h; wh, wx, b closed over ---------------- */
typedef struct rnn {
  jit_val wh, wx, b;
} rnn;

static void rnn_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                     jit_val *y, void *user) {
  const rnn *w = user;
  jit_val h = jit_tanh(t, jit_add(t, jit_add(t, jit_matmul(t, carry[0], w->wh),
                                             jit_matmul(t, x[0], w->wx)),
                                  w->b));
  new_carry[0] = h;
  y[0] = h;
}

static void rnn_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  rnn w = {args[2], args[3], args[4]};
  jit_scan(t, rnn_body, &w, 1, &args[0], 1, &args[1], -1, 0, &results[0], 1, &results[1]);
}

static void test_rnn(void **state) {
  (void)state;
  enum { T = 6, B = 3, H = 5, D = 4 };
  int64_t sh[2] = {B, H}, sx[3] = {T, B, D}, swh[2] = {H, H}, swx[2] = {D, H}, sb[1] = {H};
  ot_array in[5] = {ot_random(JIT_F32, 2, sh, 11, -1, 1), ot_random(JIT_F32, 3, sx, 12, -1, 1),
                    ot_random(JIT_F32, 2, swh, 13, -0.5, 0.5),
                    ot_random(JIT_F32, 2, swx, 14, -0.5, 0.5), ot_random(JIT_F32, 1, sb, 15, -1, 1)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("rnn", rnn_fn, NULL, 5, in, 2, out));
  int64_t sy[3] = {T, B, H};
  ot_array want_h = ot_zeros(JIT_F32, 2, sh), want_y = ot_zeros(JIT_F32, 3, sy);
  double h[B * H];
  for (int i = 0; i < B * H; i++) h[i] = in[0].v[i];
  for (int t = 0; t < T; t++) {
    double nh[B * H];
    for (int b = 0; b < B; b++)
      for (int j = 0; j < H; j++) {
        double acc = in[4].v[j];
        for (int k = 0; k < H; k++) acc += h[b * H + k] * in[2].v[k * H + j];
        for (int k = 0; k < D; k++) acc += in[1].v[(t * B + b) * D + k] * in[3].v[k * H + j];
        nh[b * H + j] = tanh(acc);
      }
    memcpy(h, nh, sizeof h);
    for (int i = 0; i < B * H; i++) want_y.v[t * B * H + i] = h[i];
  }
  for (int i = 0; i < B * H; i++) want_h.v[i] = h[i];
  ot_tol tol = {1e-5, 1e-5}; /* f32 through a few steps of tanh and matmul */
  assert_true(ot_expect_tol("final h", &out[0], &want_h, NULL, tol));
  assert_true(ot_expect_tol("hs", &out[1], &want_y, NULL, tol));
  for (int i = 0; i < 5; i++) ot_free(&in[i]);
}

/* ---- nested: the inner body uses w, a value of the outermost trace ----------------------------- */
typedef struct nest {
  jit_val w;
} nest;

static void inner_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                       jit_val *y, void *user) {
  (void)y;
  const nest *n = user;
  new_carry[0] = jit_add(t, carry[0], jit_mul(t, n->w, x[0]));
}

static void outer_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                       jit_val *y, void *user) {
  jit_scan(t, inner_body, user, 1, carry, 1, x, -1, 0, new_carry, 0, NULL);
  y[0] = new_carry[0];
}

static void nest_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  nest n = {args[2]};
  jit_scan(t, outer_body, &n, 1, &args[0], 1, &args[1], -1, 1, &results[0], 1, &results[1]);
}

static void test_nested(void **state) {
  (void)state;
  int64_t sc[1] = {2}, sx[3] = {4, 3, 2};
  ot_array in[3] = {ot_random(JIT_F32, 1, sc, 21, -1, 1), ot_random(JIT_F32, 3, sx, 22, -1, 1),
                    ot_random(JIT_F32, 1, sc, 23, -1, 1)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("nest", nest_fn, NULL, 3, in, 2, out));
  int64_t sy[2] = {4, 2};
  ot_array want_c = ot_zeros(JIT_F32, 1, sc), want_y = ot_zeros(JIT_F32, 2, sy);
  double c[2] = {in[0].v[0], in[0].v[1]};
  for (int s = 0; s < 4; s++) {
    int i = 3 - s; /* the outer scan runs in reverse */
    for (int u = 0; u < 3; u++)
      for (int j = 0; j < 2; j++)
        c[j] = (double)(float)(c[j] + (double)(float)(in[2].v[j] * in[1].v[i * 6 + u * 2 + j]));
    want_y.v[i * 2] = c[0];
    want_y.v[i * 2 + 1] = c[1];
  }
  want_c.v[0] = c[0];
  want_c.v[1] = c[1];
  assert_true(ot_expect("final", &out[0], &want_c));
  assert_true(ot_expect("ys", &out[1], &want_y));
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

/* the fused dump nests each body's kernels under its loop line, as the IR printer nests bodies */
static void test_fused_dump(void **state) {
  (void)state;
  int64_t sc[1] = {2}, sx[3] = {4, 3, 2};
  ot_array in[3] = {ot_random(JIT_F32, 1, sc, 21, -1, 1), ot_random(JIT_F32, 3, sx, 22, -1, 1),
                    ot_random(JIT_F32, 1, sc, 23, -1, 1)};
  jit_array *a[3], *r[2] = {NULL, NULL};
  for (int i = 0; i < 3; i++) a[i] = ot_upload(&in[i]);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "nest", .n_args = 3, .n_results = 2};
  OT_ASSERT_OK(jit_compile(ot_ctx(), nest_fn, NULL, &fo, &f));
  OT_ASSERT_OK(jit_call(f, a, r));
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_non_null(m);
  OT_ASSERT_OK(jit_fn_dump(f, NULL, JIT_DUMP_FUSED, m));
  fclose(m);
  static const char *const want[] = {
      "\n  loop %3 = scan %2, %0, %1 consts=1 carry=1 length=4 reverse=1 : (f32[2], f32[4,2]) {\n"
      "    func @nest(%0: f32[2], %1: f32[2], %2: f32[3,2]) -> (f32[2], f32[2]) {\n"
      "      loop %3 = scan %0, %1, %2 consts=1 carry=1 length=3 : (f32[2]) {\n"
      "        func @nest(%0: f32[2], %1: f32[2], %2: f32[2]) -> f32[2] {\n"
      "          kernel k0 loop[1 x 2] reads %0, %1, %2 writes %4 {\n"
      "            %3 = mul %0, %2 : f32[2]",
      "\n            %4 = add %1, %3 : f32[2]",
      "\n          }\n"
      "          return %4\n"
      "        }\n"
      "      }\n"
      "      return %4, %4\n"
      "    }\n"
      "  }\n"
      "  return %4, %5\n"
      "}\n"};
  const char *at = text;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *hit = strstr(at, want[i]);
    if (!hit) fail_msg("the fused dump lacks (after what matched)\n%s\nin\n%s", want[i], text);
    at = hit + strlen(want[i]);
  }
  free(text);
  for (int i = 0; i < 3; i++) {
    jit_array_free(a[i]);
    ot_free(&in[i]);
  }
  jit_array_free(r[0]);
  jit_array_free(r[1]);
  jit_fn_free(f);
}

/* ---- no xs: length steps of carry = carry * 2 + 1, y = carry ----------------------------------- */
static void double_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)x;
  (void)user;
  new_carry[0] = jit_add(t, jit_mul(t, carry[0], jit_scalar(t, 2)), jit_scalar(t, 1));
  y[0] = carry[0];
}

static void double_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_scan(t, double_body, NULL, 1, &args[0], 0, NULL, 5, 0, &results[0], 1, &results[1]);
}

static void test_no_xs(void **state) {
  (void)state;
  int64_t s1[1] = {3};
  double v[3] = {0, 1, -2};
  ot_array in = ot_values(JIT_F32, 1, s1, v);
  ot_array out[2];
  OT_ASSERT_OK(ot_run("double", double_fn, NULL, 1, &in, 2, out));
  int64_t sy[2] = {5, 3};
  ot_array want_c = ot_zeros(JIT_F32, 1, s1), want_y = ot_zeros(JIT_F32, 2, sy);
  for (int j = 0; j < 3; j++) {
    double c = v[j];
    for (int s = 0; s < 5; s++) {
      want_y.v[s * 3 + j] = c;
      c = c * 2 + 1;
    }
    want_c.v[j] = c;
  }
  assert_true(ot_expect("final", &out[0], &want_c));
  assert_true(ot_expect("ys", &out[1], &want_y));
  ot_free(&in);
}

/* ---- a carry that is also an output: written into the output's slice, read back from it ---- */
/* carries c0 (aliased by y0, y1 also the same value), c1 (no output), c2 (passed through as it is,
   also y2); x_t [2] */
static void alias_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                       jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_add(t, jit_mul(t, carry[0], jit_scalar(t, 0.5)), x[0]);
  new_carry[1] = jit_add(t, carry[1], jit_mul(t, carry[0], x[0]));
  new_carry[2] = carry[2];
  y[0] = new_carry[0];
  y[1] = new_carry[0];
  y[2] = carry[2];
}

static void alias_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const scan_opts *o = user;
  jit_scan(t, alias_body, NULL, 3, &args[0], 1, &args[3], o->length, o->reverse, &results[0], 3,
           &results[3]);
}

/* one carry, one xs and 255 values the body closes over (consts of the scan, each used with x_t
   so that none is hoisted): the body's entry would take more than FFI_ENTRY_MAX_ARGS pointers, so
   the steps run from the runtime's C loop instead of a native one */
enum { WIDE_CONSTS = 255 };
typedef struct wide {
  jit_val v[WIDE_CONSTS];
} wide;

static void wide_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  const wide *w = user;
  jit_val c = jit_mul(t, carry[0], jit_scalar(t, 0.5));
  for (int i = 0; i < WIDE_CONSTS; i++) c = jit_add(t, c, jit_mul(t, w->v[i], x[0]));
  new_carry[0] = c;
  y[0] = c;
}

static void wide_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const scan_opts *o = user;
  wide w;
  for (int64_t i = 0; i < WIDE_CONSTS; i++)
    w.v[i] = jit_slice(t, args[2], (const int64_t[]){i}, (const int64_t[]){i + 1}, NULL);
  jit_scan(t, wide_body, &w, 1, &args[0], 1, &args[1], -1, o->reverse, &results[0], 1, &results[1]);
}

static void test_carry_as_output(void **state) {
  (void)state;
  for (int reverse = 0; reverse < 2; reverse++)
    for (int64_t len = 1; len <= 5; len++) {
      if (len == 4) continue;
      scan_opts o = {reverse, -1};
      int64_t sc[1] = {2}, sx[2] = {len, 2};
      ot_array in[4] = {ot_random(JIT_F32, 1, sc, 1, -1, 1), ot_random(JIT_F32, 1, sc, 2, -1, 1),
                        ot_random(JIT_F32, 1, sc, 3, -1, 1), ot_random(JIT_F32, 2, sx, 4, -1, 1)};
      ot_array out[6], want[6];
      OT_ASSERT_OK(ot_run("alias", alias_fn, &o, 4, in, 6, out));
      for (int k = 0; k < 3; k++) {
        want[k] = ot_zeros(JIT_F32, 1, sc);
        want[3 + k] = ot_zeros(JIT_F32, 2, sx);
      }
      for (int j = 0; j < 2; j++) {
        float c0 = (float)in[0].v[j], c1 = (float)in[1].v[j], c2 = (float)in[2].v[j];
        for (int64_t s = 0; s < len; s++) {
          int64_t tt = reverse ? len - 1 - s : s;
          float x = (float)in[3].v[tt * 2 + j];
          float n0 = c0 * 0.5f + x;
          c1 = c1 + c0 * x;
          c0 = n0;
          want[3].v[tt * 2 + j] = want[4].v[tt * 2 + j] = c0;
          want[5].v[tt * 2 + j] = c2;
        }
        want[0].v[j] = c0, want[1].v[j] = c1, want[2].v[j] = c2;
      }
      for (int k = 0; k < 6; k++) assert_true(ot_expect("alias", &out[k], &want[k]));
      for (int i = 0; i < 4; i++) ot_free(&in[i]);
    }
  for (int reverse = 0; reverse < 2; reverse++) {
    scan_opts o = {reverse, -1};
    enum { T = 3 };
    int64_t sc[1] = {2}, sx[2] = {T, 2};
    int64_t sv[1] = {WIDE_CONSTS};
    ot_array in[3] = {ot_random(JIT_F32, 1, sc, 7, -1, 1), ot_random(JIT_F32, 2, sx, 8, -1, 1),
                      ot_random(JIT_F32, 1, sv, 9, -0.01, 0.01)}, out[2];
    OT_ASSERT_OK(ot_run("wide", wide_fn, &o, 3, in, 2, out));
    ot_array want_c = ot_zeros(JIT_F32, 1, sc), want_y = ot_zeros(JIT_F32, 2, sx);
    for (int j = 0; j < 2; j++) {
      double c = in[0].v[j];
      for (int s = 0; s < T; s++) {
        int tt = reverse ? T - 1 - s : s;
        c *= 0.5;
        for (int i = 0; i < WIDE_CONSTS; i++) c += in[2].v[i] * in[1].v[tt * 2 + j];
        want_y.v[tt * 2 + j] = c;
      }
      want_c.v[j] = c;
    }
    ot_tol tol = {1e-5, 1e-5}; /* the sum's order is the compiler's */
    assert_true(ot_expect_tol("wide final", &out[0], &want_c, NULL, tol));
    assert_true(ot_expect_tol("wide ys", &out[1], &want_y, NULL, tol));
    for (int i = 0; i < 3; i++) ot_free(&in[i]);
  }
}

/* ---- vmap of scan: rnn over a batch of sequences, against the unbatched function per example --- */
/* args: h0 [B,H] (unbatched: every example starts alike), xs [N,T,B,D] (batched at 0), wh, wx, b
   (wx batched at 0: [N,D,H]) */
static void vmapped_rnn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_vmap(t, rnn_fn, NULL, 5, args, (const int[]){-1, 0, -1, 0, -1}, 2, results,
           (const int[]){0, 1});
}

static void test_vmap(void **state) {
  (void)state;
  enum { N = 3, T = 4, B = 2, H = 3, D = 2 };
  int64_t sh[2] = {B, H}, sx[4] = {N, T, B, D}, swh[2] = {H, H}, swx[3] = {N, D, H}, sb[1] = {H};
  ot_array in[5] = {ot_random(JIT_F32, 2, sh, 31, -1, 1), ot_random(JIT_F32, 4, sx, 32, -1, 1),
                    ot_random(JIT_F32, 2, swh, 33, -0.5, 0.5),
                    ot_random(JIT_F32, 3, swx, 34, -0.5, 0.5), ot_random(JIT_F32, 1, sb, 35, -1, 1)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("vrnn", vmapped_rnn, NULL, 5, in, 2, out));
  assert_int_equal(out[0].rank, 3); /* final h [N,B,H] */
  assert_int_equal(out[1].rank, 4); /* hs at out_axes 1: [T,N,B,H] */
  assert_true(out[1].shape[0] == T && out[1].shape[1] == N);
  for (int n = 0; n < N; n++) { /* example n alone through the unbatched function */
    int64_t sx1[3] = {T, B, D}, swx1[2] = {D, H};
    ot_array one[5] = {in[0], ot_zeros(JIT_F32, 3, sx1), in[2], ot_zeros(JIT_F32, 2, swx1), in[4]};
    memcpy(one[1].v, in[1].v + n * T * B * D, sizeof(double) * T * B * D);
    memcpy(one[3].v, in[3].v + n * D * H, sizeof(double) * D * H);
    ot_array ref[2];
    OT_ASSERT_OK(ot_run("rnn", rnn_fn, NULL, 5, one, 2, ref));
    for (int i = 0; i < B * H; i++) assert_true(fabs(out[0].v[n * B * H + i] - ref[0].v[i]) < 1e-6);
    for (int s = 0; s < T; s++)
      for (int i = 0; i < B * H; i++)
        assert_true(fabs(out[1].v[(s * N + n) * B * H + i] - ref[1].v[s * B * H + i]) < 1e-6);
    ot_free(&one[1]);
    ot_free(&one[3]);
    ot_free(&ref[0]);
    ot_free(&ref[1]);
  }
  ot_free(&out[0]);
  ot_free(&out[1]);
  for (int i = 0; i < 5; i++) ot_free(&in[i]);
}

/* ---- grad of scan: loss = sum(hs * hs) + sum(h_final) of the RNN, in f64, against central
   finite differences and the interpreter (opt_level 0 runs the same IR through the oracle) ---- */
static void rnn_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val r[2];
  rnn_fn(t, args, r, NULL);
  int all3[3] = {0, 1, 2}, all2[2] = {0, 1};
  results[0] = jit_add(t, jit_reduce_sum(t, jit_mul(t, r[1], r[1]), 3, all3),
                       jit_reduce_sum(t, r[0], 2, all2));
}

static void rnn_grad(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_value_and_grad(t, rnn_loss, NULL, 5, args, 0x1f, 0, results);
}

static double loss_at(jit_fn *f, ot_array *in) {
  jit_array *a[5], *r = NULL;
  for (int i = 0; i < 5; i++) a[i] = ot_upload(&in[i]);
  OT_ASSERT_OK(jit_call(f, a, &r));
  ot_array y = ot_download(r);
  double v = y.v[0];
  ot_free(&y);
  jit_array_free(r);
  for (int i = 0; i < 5; i++) jit_array_free(a[i]);
  return v;
}

static void test_grad(void **state) {
  (void)state;
  enum { T = 5, B = 2, H = 3, D = 2 };
  int64_t sh[2] = {B, H}, sx[3] = {T, B, D}, swh[2] = {H, H}, swx[2] = {D, H}, sb[1] = {H};
  ot_array in[5] = {ot_random(JIT_F64, 2, sh, 41, -1, 1), ot_random(JIT_F64, 3, sx, 42, -1, 1),
                    ot_random(JIT_F64, 2, swh, 43, -0.5, 0.5),
                    ot_random(JIT_F64, 2, swx, 44, -0.5, 0.5), ot_random(JIT_F64, 1, sb, 45, -1, 1)};
  ot_array out[6];
  OT_ASSERT_OK(ot_run("rnn_grad", rnn_grad, NULL, 5, in, 6, out));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "rnn_loss", .n_args = 5, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), rnn_loss, NULL, &o, &f));
  assert_true(fabs(out[0].v[0] - loss_at(f, in)) < 1e-12 * (1 + fabs(out[0].v[0])));
  const double eps = 1e-6;
  for (int a = 0; a < 5; a++) {
    assert_int_equal(out[1 + a].n, in[a].n);
    for (int64_t e = 0; e < in[a].n; e++) {
      double keep = in[a].v[e];
      in[a].v[e] = keep + eps;
      double up = loss_at(f, in);
      in[a].v[e] = keep - eps;
      double down = loss_at(f, in);
      in[a].v[e] = keep;
      double fd = (up - down) / (2 * eps), g = out[1 + a].v[e];
      if (fabs(fd - g) > 1e-6 * (1 + fabs(fd)))
        fail_msg("d loss / d arg %d [%lld]: grad %.12g, finite differences %.12g", a, (long long)e,
                 g, fd);
    }
  }
  jit_fn_free(f);
  for (int i = 0; i < 6; i++) ot_free(&out[i]);
  for (int i = 0; i < 5; i++) ot_free(&in[i]);
}

/* ---- a body that returns a captured value as it is: ys = the value stacked ------------------ */
static void echo_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  (void)x;
  new_carry[0] = jit_add(t, carry[0], jit_scalar(t, 1));
  y[0] = *(const jit_val *)user;
}

static void echo_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_scan(t, echo_body, (void *)&args[1], 1, &args[0], 0, NULL, 3, 0, &results[0], 1, &results[1]);
}

static void test_captured_result(void **state) {
  (void)state;
  int64_t s1[1] = {1}, s2[1] = {2};
  double c0[1] = {0}, w[2] = {5, -6};
  ot_array in[2] = {ot_values(JIT_F32, 1, s1, c0), ot_values(JIT_F32, 1, s2, w)};
  ot_array out[2];
  OT_ASSERT_OK(ot_run("echo", echo_fn, NULL, 2, in, 2, out));
  int64_t sy[2] = {3, 2};
  double c3[1] = {3}, ys[6] = {5, -6, 5, -6, 5, -6};
  ot_array want_c = ot_values(JIT_F32, 1, s1, c3), want_y = ot_values(JIT_F32, 2, sy, ys);
  assert_true(ot_expect("final", &out[0], &want_c));
  assert_true(ot_expect("ys", &out[1], &want_y));
  ot_free(&in[0]);
  ot_free(&in[1]);
}

/* ---- errors ---------------------------------------------------------------------------------- */
static int bad_line;

static void f64_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                     jit_val *y, void *user) {
  (void)x;
  (void)y;
  (void)user;
  new_carry[0] = jit_convert(t, carry[0], JIT_F64);
}

static void bad_carry_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  bad_line = __LINE__ + 1;
  jit_scan(t, f64_body, NULL, 1, &args[0], 1, &args[1], -1, 0, &results[0], 0, NULL);
}

static void bad_xs_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val xs[2] = {args[1], args[2]};
  jit_val y[2];
  bad_line = __LINE__ + 1;
  jit_scan(t, cumsum_body, NULL, 1, &args[0], 2, xs, -1, 0, &results[0], 1, y);
}

static void bad_length_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val y;
  bad_line = __LINE__ + 1;
  jit_scan(t, cumsum_body, NULL, 1, &args[0], 1, &args[1], 9, 0, &results[0], 1, &y);
}

static void test_errors(void **state) {
  (void)state;
  int64_t s0[1] = {4}, sx[2] = {3, 4}, sx2[2] = {2, 4};
  ot_array in[3] = {ot_random(JIT_F32, 1, s0, 1, -1, 1), ot_random(JIT_F32, 2, sx, 2, -1, 1),
                    ot_random(JIT_F32, 2, sx2, 3, -1, 1)};
  ot_array out[1];
  assert_int_equal(ot_run("bad_carry", bad_carry_fn, NULL, 2, in, 1, out), JIT_ESHAPE);
  assert_true(ot_error_has("the body returns carry 0 as f64[4], but the carry is f32[4]",
                           "tests/test_scan.c", bad_line));
  assert_int_equal(ot_run("bad_xs", bad_xs_fn, NULL, 3, in, 1, out), JIT_ESHAPE);
  assert_true(ot_error_has("xs have different leading sizes: xs[0] is f32[3,4], xs[1] is f32[2,4]",
                           "tests/test_scan.c", bad_line));
  assert_int_equal(ot_run("bad_length", bad_length_fn, NULL, 2, in, 1, out), JIT_ESHAPE);
  assert_true(ot_error_has("length 9 differs from the xs' leading size", "tests/test_scan.c",
                           bad_line));
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cumsum), cmocka_unit_test(test_native_loop), cmocka_unit_test(test_rnn),
      cmocka_unit_test(test_carry_as_output),   cmocka_unit_test(test_nested),
      cmocka_unit_test(test_no_xs),  cmocka_unit_test(test_errors), cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_grad), cmocka_unit_test(test_captured_result),
      cmocka_unit_test(test_fused_dump),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
