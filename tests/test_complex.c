/* test_complex.c: complex dtypes (c64, c128) through the public API: host layout, .npy, dumps,
 * the ops ir_expand_complex defines checked against C99 complex loops in double, compiled and
 * interpreted, under vmap and on a 2-device sharding, and the refusals at the user's line. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tjit.h"

#define THIS_FILE "tests/test_complex.c"
#define R 4 /* rows (divisible by the 2 devices of the sharded case) */
#define C 6
#define N (R * C)
#define N_OUT 14

/* ---- the traced function and its C99 reference ------------------------------------------------ */

/* a, b: [R, C] complex. Results:
   0 (a*b + conj(a)) / (b - 1.5)       1 sum over axis 1 of a*b          2 real(a)
   3 imag(b) * 2                       4 complex(imag(a), real(b))       5 a == a[::-1 rows] or a != b
   6 transpose(a)[1:5:2] ++ conj        7 a @ b^T ([R, R], four real dots)
   8 convert(convert(a, real), complex) + b[0, 0]
   9 exp(a)  10 log(b)  11 abs(a) (real)  12 sqrt(a) (both signs of both parts occur)
   13 cumsum(a, axis 1) */
static void body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val x = a[0], y = a[1];
  r[0] = jit_div(t, jit_add(t, jit_mul(t, x, y), jit_conj(t, x)), jit_sub(t, y, jit_scalar(t, 1.5)));
  r[1] = jit_reduce_sum(t, jit_mul(t, x, y), 1, (int[]){1});
  r[2] = jit_real(t, x);
  r[3] = jit_mul(t, jit_imag(t, y), jit_scalar(t, 2));
  r[4] = jit_complex(t, jit_imag(t, x), jit_real(t, y));
  r[5] = jit_or(t, jit_cmp(t, JIT_EQ, x, jit_rev(t, x, 1, (int[]){0})), jit_cmp(t, JIT_NE, x, y));
  jit_val xt = jit_transpose(t, x, (int[]){1, 0});
  jit_val s = jit_slice(t, xt, (int64_t[]){1, 0}, (int64_t[]){5, R}, (int64_t[]){2, 1});
  r[6] = jit_concat(t, 2, (jit_val[]){s, jit_conj(t, s)}, 0);
  r[7] = jit_matmul(t, x, jit_transpose(t, y, (int[]){1, 0}));
  /* real -> complex (x, 0) and complex -> real (the real part) */
  r[8] = jit_add(t, jit_convert(t, jit_convert(t, x, jit_val_dtype(t, r[2])), jit_val_dtype(t, x)),
                 jit_broadcast_to(t, jit_reshape(t, jit_slice(t, y, (int64_t[]){0, 0}, (int64_t[]){1, 1}, NULL), 0, NULL),
                                  2, (int64_t[]){R, C}));
  r[9] = jit_exp(t, x);
  r[10] = jit_log(t, y);
  r[11] = jit_abs(t, x);
  r[12] = jit_sqrt(t, x);
  r[13] = jit_cumsum(t, x, 1, 0);
}

typedef struct outs {
  double complex r0[N], r1[R], r4[N], r6[2 * 2 * R], r7[R * R], r8[N], r9[N], r10[N], r12[N], r13[N];
  double r2[N], r3[N], r11[N];
  unsigned char r5[N];
} outs;

static void reference(const double complex *a, const double complex *b, outs *o) {
  for (int i = 0; i < N; i++) {
    o->r0[i] = (a[i] * b[i] + conj(a[i])) / (b[i] - 1.5);
    o->r2[i] = creal(a[i]);
    o->r3[i] = cimag(b[i]) * 2;
    o->r4[i] = cimag(a[i]) + creal(b[i]) * I;
    int rev = (R - 1 - i / C) * C + i % C;
    o->r5[i] = a[i] == a[rev] || a[i] != b[i];
    o->r8[i] = creal(a[i]) + b[0];
    o->r9[i] = cexp(a[i]);
    o->r10[i] = clog(b[i]);
    o->r11[i] = cabs(a[i]);
    o->r12[i] = csqrt(a[i]);
    o->r13[i] = a[i] + (i % C ? o->r13[i - 1] : 0);
  }
  for (int i = 0; i < R; i++) {
    o->r1[i] = 0;
    for (int j = 0; j < C; j++) o->r1[i] += a[i * C + j] * b[i * C + j];
    for (int k = 0; k < R; k++) {
      double complex acc = 0;
      for (int j = 0; j < C; j++) acc += a[i * C + j] * b[k * C + j];
      o->r7[i * R + k] = acc;
    }
  }
  for (int half = 0; half < 2; half++) /* rows 1, 3 of a^T, then their conjugates */
    for (int p = 0; p < 2; p++)
      for (int q = 0; q < R; q++) {
        double complex v = a[q * C + (1 + 2 * p)];
        o->r6[(half * 2 + p) * R + q] = half ? conj(v) : v;
      }
}

/* ---- comparing --------------------------------------------------------------------------------- */

static double tol_of(jit_dtype dt) { return dt == JIT_C64 || dt == JIT_F32 ? 2e-5 : 1e-12; }

/* result array x (complex of dtype dt, or its real parts' dtype) against want[0..n) */
static void check_cx(jit_array *x, const double complex *want, int n, jit_dtype dt, const char *what) {
  assert_int_equal(jit_array_dtype(x), dt);
  assert_int_equal(jit_array_nbytes(x), (size_t)n * jit_dtype_size(dt));
  double buf[2 * 128];
  assert_int_equal(jit_array_to_host(x, buf, sizeof buf), JIT_OK);
  const float *f = (const float *)buf;
  for (int i = 0; i < n; i++) {
    double re = dt == JIT_C64 ? f[2 * i] : buf[2 * i], im = dt == JIT_C64 ? f[2 * i + 1] : buf[2 * i + 1];
    double scale = 1 + cabs(want[i]);
    if (fabs(re - creal(want[i])) > tol_of(dt) * scale || fabs(im - cimag(want[i])) > tol_of(dt) * scale) {
      print_error("%s[%d] (%s): got %.17g%+.17gi, want %.17g%+.17gi\n", what, i, jit_dtype_name(dt),
                  re, im, creal(want[i]), cimag(want[i]));
      fail();
    }
  }
}

static void check_re(jit_array *x, const double *want, int n, jit_dtype dt, const char *what) {
  assert_int_equal(jit_array_dtype(x), dt);
  double buf[128];
  assert_int_equal(jit_array_to_host(x, buf, sizeof buf), JIT_OK);
  for (int i = 0; i < n; i++) {
    double got = dt == JIT_F32 ? ((const float *)buf)[i] : buf[i];
    if (fabs(got - want[i]) > tol_of(dt) * (1 + fabs(want[i]))) {
      print_error("%s[%d]: got %.17g, want %.17g\n", what, i, got, want[i]);
      fail();
    }
  }
}

static void check_outs(jit_array **res, const outs *o, jit_dtype dt) {
  jit_dtype part = dt == JIT_C64 ? JIT_F32 : JIT_F64;
  check_cx(res[0], o->r0, N, dt, "(a*b + conj a) / (b - 1.5)");
  check_cx(res[1], o->r1, R, dt, "reduce_sum");
  check_re(res[2], o->r2, N, part, "real");
  check_re(res[3], o->r3, N, part, "imag * 2");
  check_cx(res[4], o->r4, N, dt, "complex");
  unsigned char m[N];
  assert_int_equal(jit_array_to_host(res[5], m, sizeof m), JIT_OK);
  for (int i = 0; i < N; i++) assert_int_equal(m[i], o->r5[i]);
  check_cx(res[6], o->r6, 4 * R, dt, "transpose slice concat conj");
  check_cx(res[7], o->r7, R * R, dt, "matmul");
  check_cx(res[8], o->r8, N, dt, "convert");
  check_cx(res[9], o->r9, N, dt, "exp");
  check_cx(res[10], o->r10, N, dt, "log");
  check_re(res[11], o->r11, N, part, "abs");
  check_cx(res[12], o->r12, N, dt, "sqrt");
  check_cx(res[13], o->r13, N, dt, "cumsum");
}

/* inputs: values with both parts nonzero, a few equal to their row mirror */
static void inputs(double complex *a, double complex *b) {
  for (int i = 0; i < N; i++) {
    a[i] = (0.25 * (i % 7) - 0.6) + (0.5 - 0.125 * (i % 5)) * I;
    b[i] = (1.0 + 0.3 * (i % 4)) + (0.2 * (i % 3) - 0.35) * I;
  }
  a[2] = a[(R - 1) * C + 2]; /* row mirror equal */
  b[5] = a[5];
}

/* host buffers of dtype dt (c64: rounded to float pairs) and the rounded values as double */
static void to_dtype(const double complex *x, jit_dtype dt, void *buf, double complex *rounded) {
  for (int i = 0; i < N; i++) {
    if (dt == JIT_C64) {
      float complex v = (float complex)x[i];
      memcpy((char *)buf + i * sizeof v, &v, sizeof v);
      rounded[i] = v;
    } else {
      memcpy((char *)buf + i * sizeof x[i], &x[i], sizeof x[i]);
      rounded[i] = x[i];
    }
  }
}

static jit_ctx *make_ctx(int opt_level, int n_devices) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.opt_level = opt_level;
  o.n_devices = n_devices;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  return ctx;
}

/* One run of body on both dtypes, against the reference; sharded: args on 2 devices, rows split. */
static void run_case(int opt_level, int n_devices) {
  jit_ctx *ctx = make_ctx(opt_level, n_devices);
  jit_dtype dts[2] = {JIT_C64, JIT_C128};
  for (int d = 0; d < 2; d++) {
    double complex a0[N], b0[N], a[N], b[N];
    double complex abuf[N], bbuf[N]; /* big enough for either dtype */
    inputs(a0, b0);
    to_dtype(a0, dts[d], abuf, a);
    to_dtype(b0, dts[d], bbuf, b);
    outs o;
    reference(a, b, &o);
    jit_array *args[2], *res[N_OUT] = {0};
    assert_int_equal(jit_array_from_host(ctx, dts[d], 2, (int64_t[]){R, C}, abuf, &args[0]), JIT_OK);
    assert_int_equal(jit_array_from_host(ctx, dts[d], 2, (int64_t[]){R, C}, bbuf, &args[1]), JIT_OK);
    jit_mesh *mesh = NULL;
    jit_sharding *sh = NULL;
    if (n_devices > 1) {
      assert_int_equal(jit_mesh_create(ctx, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &mesh), JIT_OK);
      assert_int_equal(jit_sharding_create(mesh, "x,_", &sh), JIT_OK);
      for (int k = 0; k < 2; k++) {
        jit_array *s = NULL;
        assert_int_equal(jit_device_put(args[k], sh, &s), JIT_OK);
        jit_array_free(args[k]);
        args[k] = s;
      }
    }
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "cx", .n_args = 2, .n_results = N_OUT};
    assert_int_equal(jit_compile(ctx, body, NULL, &fo, &f), JIT_OK);
    jit_status st = jit_call(f, args, res);
    if (st != JIT_OK) print_error("%s\n", jit_last_error());
    assert_int_equal(st, JIT_OK);
    check_outs(res, &o, dts[d]);
    for (int k = 0; k < N_OUT; k++) jit_array_free(res[k]);
    for (int k = 0; k < 2; k++) jit_array_free(args[k]);
    jit_fn_free(f);
    jit_sharding_free(sh);
    jit_mesh_free(mesh);
  }
  jit_ctx_destroy(ctx);
}

static void test_compiled(void **state) { (void)state; run_case(3, 1); }
static void test_interpreted(void **state) { (void)state; run_case(0, 1); }
static void test_sharded_compiled(void **state) { (void)state; run_case(3, 2); }
static void test_sharded_interpreted(void **state) { (void)state; run_case(0, 2); }

/* ---- vmap: body on a batch of 3 (in_axes 0 and 1), each example against the reference ---------- */
static void vmapped(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int out_axes[N_OUT] = {0};
  jit_vmap(t, body, NULL, 2, a, (int[]){0, 2}, N_OUT, r, out_axes);
}

static void test_vmap(void **state) {
  (void)state;
  enum { B = 3 };
  jit_ctx *ctx = make_ctx(3, 1);
  double complex a[B][N], b[B][N], bt[R][C][B];
  for (int e = 0; e < B; e++) {
    inputs(a[e], b[e]);
    for (int i = 0; i < N; i++) {
      a[e][i] += 0.1 * e;
      b[e][i] -= 0.2 * I * e;
      bt[i / C][i % C][e] = b[e][i];
    }
  }
  jit_array *args[2], *res[N_OUT] = {0};
  assert_int_equal(jit_array_from_host(ctx, JIT_C128, 3, (int64_t[]){B, R, C}, a, &args[0]), JIT_OK);
  assert_int_equal(jit_array_from_host(ctx, JIT_C128, 3, (int64_t[]){R, C, B}, bt, &args[1]), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "cx_vmap", .n_args = 2, .n_results = N_OUT};
  assert_int_equal(jit_compile(ctx, vmapped, NULL, &fo, &f), JIT_OK);
  jit_status st = jit_call(f, args, res);
  if (st != JIT_OK) print_error("%s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  static double complex all0[B * N], all7[B * R * R];
  for (int e = 0; e < B; e++) {
    outs o;
    reference(a[e], b[e], &o);
    memcpy(all0 + e * N, o.r0, sizeof o.r0);
    memcpy(all7 + e * R * R, o.r7, sizeof o.r7);
  }
  check_cx(res[0], all0, B * N, JIT_C128, "vmap: (a*b + conj a) / (b - 1.5)");
  check_cx(res[7], all7, B * R * R, JIT_C128, "vmap: matmul");
  for (int k = 0; k < N_OUT; k++) jit_array_free(res[k]);
  for (int k = 0; k < 2; k++) jit_array_free(args[k]);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* ---- host side ---------------------------------------------------------------------------------- */

static void test_dtypes_and_host(void **state) {
  (void)state;
  assert_int_equal(jit_dtype_size(JIT_C64), 8);
  assert_int_equal(jit_dtype_size(JIT_C128), 16);
  assert_string_equal(jit_dtype_name(JIT_C64), "c64");
  assert_string_equal(jit_dtype_name(JIT_C128), "c128");
  jit_ctx *ctx = make_ctx(3, 1);
  float complex x[3] = {1 + 2 * I, -3.5f, 0.25f * I};
  double complex y[3] = {1e300 + 1e-300 * I, -0.0, NAN * I};
  jit_array *ax = NULL, *ay = NULL, *lx = NULL, *ly = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_C64, 1, (int64_t[]){3}, x, &ax), JIT_OK);
  assert_int_equal(jit_array_from_host(ctx, JIT_C128, 1, (int64_t[]){3}, y, &ay), JIT_OK);
  char px[] = "/tmp/tjit_cx64_XXXXXX", py[] = "/tmp/tjit_cx128_XXXXXX";
  int fx = mkstemp(px), fy = mkstemp(py);
  assert_true(fx >= 0 && fy >= 0);
  close(fx);
  close(fy);
  assert_int_equal(jit_array_save_npy(ax, px), JIT_OK);
  assert_int_equal(jit_array_save_npy(ay, py), JIT_OK);
  /* the header names NumPy's complex types */
  char head[128] = {0};
  FILE *fp = fopen(px, "rb");
  assert_non_null(fp);
  assert_true(fread(head, 1, sizeof head - 1, fp) > 0);
  fclose(fp);
  assert_non_null(strstr(head + 10, "'<c8'"));
  assert_int_equal(jit_array_load_npy(ctx, px, &lx), JIT_OK);
  assert_int_equal(jit_array_load_npy(ctx, py, &ly), JIT_OK);
  unlink(px);
  unlink(py);
  assert_int_equal(jit_array_dtype(lx), JIT_C64);
  assert_int_equal(jit_array_dtype(ly), JIT_C128);
  float complex bx[3];
  double complex by[3];
  assert_int_equal(jit_array_to_host(lx, bx, sizeof bx), JIT_OK);
  assert_int_equal(jit_array_to_host(ly, by, sizeof by), JIT_OK);
  assert_memory_equal(bx, x, sizeof x);
  assert_memory_equal(by, y, sizeof y);
  jit_array_free(ax);
  jit_array_free(ay);
  jit_array_free(lx);
  jit_array_free(ly);
  jit_ctx_destroy(ctx);
}

/* jit_full of a complex dtype is (v, 0); the traced dump shows complex types as a jaxpr does */
static void full_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, a[0], jit_full(t, JIT_C64, 1, (int64_t[]){2}, 3));
}

static void test_full_and_dump(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx(3, 1);
  float complex x[2] = {1 + 2 * I, -1 - 1 * I}, out[2];
  jit_array *a = NULL, *r = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_C64, 1, (int64_t[]){2}, x, &a), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "full", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, full_fn, NULL, &fo, &f), JIT_OK);
  assert_int_equal(jit_call(f, &a, &r), JIT_OK);
  assert_int_equal(jit_array_to_host(r, out, sizeof out), JIT_OK);
  assert_true(out[0] == 4 + 2 * I && out[1] == 2 - 1 * I);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_int_equal(jit_fn_dump(f, &a, JIT_DUMP_TRACED, m), JIT_OK);
  fclose(m);
  assert_non_null(strstr(text, "c64[2]"));
  free(text);
  /* the kernels are those of the real expansion: (re, im) pairs f32[2,2], no complex type */
  m = open_memstream(&text, &len);
  assert_int_equal(jit_fn_dump(f, &a, JIT_DUMP_FUSED, m), JIT_OK);
  fclose(m);
  assert_non_null(strstr(text, "f32[2,2]"));
  assert_null(strstr(text, "c64"));
  free(text);
  jit_array_free(r);
  jit_array_free(a);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
}

/* sqrt, abs and log at the awkward points: 0, the negative real axis (both zeros of im), huge
   and tiny parts (the scaled hypot neither overflows nor underflows), against C99 */
static void special_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_sqrt(t, a[0]);
  r[1] = jit_abs(t, a[0]);
  r[2] = jit_log(t, a[0]);
}

static void test_special_values(void **state) {
  (void)state;
  enum { K = 8 };
  double complex z[K] = {0, -4, -4 - 0.0 * I, 3 + 4 * I, 1e300 + 1e300 * I, 3e-310 + 4e-310 * I,
                         -2e-5 - 7 * I, 9 * I};
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = make_ctx(opt, 1);
    jit_array *a = NULL, *res[3] = {0};
    assert_int_equal(jit_array_from_host(ctx, JIT_C128, 1, (int64_t[]){K}, z, &a), JIT_OK);
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "special", .n_args = 1, .n_results = 3};
    assert_int_equal(jit_compile(ctx, special_fn, NULL, &fo, &f), JIT_OK);
    assert_int_equal(jit_call(f, &a, res), JIT_OK);
    double complex s[K], lg[K];
    double m[K];
    for (int i = 0; i < K; i++) {
      s[i] = csqrt(z[i]);
      m[i] = cabs(z[i]);
      lg[i] = i == 0 ? 0 : clog(z[i]); /* log 0 = -inf: checked apart */
    }
    check_cx(res[0], s, K, JIT_C128, "sqrt");
    double got[K];
    assert_int_equal(jit_array_to_host(res[1], got, sizeof got), JIT_OK);
    for (int i = 0; i < K; i++) assert_true(fabs(got[i] - m[i]) <= 1e-15 * m[i]);
    double complex l[K];
    assert_int_equal(jit_array_to_host(res[2], l, sizeof l), JIT_OK);
    assert_true(isinf(creal(l[0])) && creal(l[0]) < 0);
    l[0] = 0;
    for (int i = 0; i < K; i++) assert_true(cabs(l[i] - lg[i]) <= 1e-14 * (1 + cabs(lg[i])));
    for (int k = 0; k < 3; k++) jit_array_free(res[k]);
    jit_array_free(a);
    jit_fn_free(f);
    jit_ctx_destroy(ctx);
  }
}

/* ---- scan: a complex carry (running product) and complex ys (its conjugate per step) ---------- */
static void step(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                 jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_mul(t, carry[0], x[0]);
  y[0] = jit_conj(t, new_carry[0]);
}

static void scan_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val init = jit_full(t, JIT_C128, 1, (int64_t[]){C}, 1);
  jit_scan(t, step, NULL, 1, &init, 1, a, R, 0, &r[0], 1, &r[1]);
}

static void test_scan(void **state) {
  (void)state;
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = make_ctx(opt, 1);
    double complex a[N], b[N], prod[C], ys[N];
    inputs(a, b);
    for (int j = 0; j < C; j++) prod[j] = 1;
    for (int i = 0; i < R; i++)
      for (int j = 0; j < C; j++) {
        prod[j] *= a[i * C + j];
        ys[i * C + j] = conj(prod[j]);
      }
    jit_array *x = NULL, *res[2] = {0};
    assert_int_equal(jit_array_from_host(ctx, JIT_C128, 2, (int64_t[]){R, C}, a, &x), JIT_OK);
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "scan", .n_args = 1, .n_results = 2};
    assert_int_equal(jit_compile(ctx, scan_fn, NULL, &fo, &f), JIT_OK);
    jit_status st = jit_call(f, &x, res);
    if (st != JIT_OK) print_error("%s\n", jit_last_error());
    assert_int_equal(st, JIT_OK);
    check_cx(res[0], prod, C, JIT_C128, "scan carry");
    check_cx(res[1], ys, N, JIT_C128, "scan ys");
    for (int k = 0; k < 2; k++) jit_array_free(res[k]);
    jit_array_free(x);
    jit_fn_free(f);
    jit_ctx_destroy(ctx);
  }
}

/* ---- gradients: JAX's convention (dL/dx - i dL/dy for a real loss L of z = x + iy) ----------- */

/* losses of z (c128 [2]), each summed over z's elements:
   0 |z|^2 = real(z conj z)   1 |z|   2 real(exp(z) * w) + imag(log(z) / w)
   3 real(sqrt(z)) * imag(z) + real(z @ z)  4 imag(complex(real z, real z * 2) * conj(z)) */
static void loss_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int which = *(const int *)user;
  jit_val z = a[0], w = jit_complex(t, jit_full(t, JIT_F64, 1, (int64_t[]){2}, 0.5),
                                   jit_full(t, JIT_F64, 1, (int64_t[]){2}, -1.25));
  jit_val v;
  switch (which) {
  case 0: v = jit_real(t, jit_mul(t, z, jit_conj(t, z))); break;
  case 1: v = jit_abs(t, z); break;
  case 2: v = jit_add(t, jit_real(t, jit_mul(t, jit_exp(t, z), w)), jit_imag(t, jit_div(t, jit_log(t, z), w))); break;
  case 3:
    v = jit_add(t, jit_mul(t, jit_real(t, jit_sqrt(t, z)), jit_imag(t, z)),
                jit_broadcast_to(t, jit_real(t, jit_matmul(t, z, z)), 1, (int64_t[]){2}));
    break;
  default:
    v = jit_imag(t, jit_mul(t, jit_complex(t, jit_real(t, z), jit_mul(t, jit_real(t, z), jit_scalar(t, 2))),
                            jit_conj(t, z)));
    break;
  }
  r[0] = jit_reduce_sum(t, v, 1, (int[]){0});
}

static void grad_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, loss_fn, user, 1, a, 1, 0, r);
}

/* The loss of z in C99, for the finite differences. */
static double loss_c(int which, const double complex *z) {
  double complex w = 0.5 - 1.25 * I;
  double s = 0;
  for (int i = 0; i < 2; i++) {
    switch (which) {
    case 0: s += creal(z[i] * conj(z[i])); break;
    case 1: s += cabs(z[i]); break;
    case 2: s += creal(cexp(z[i]) * w) + cimag(clog(z[i]) / w); break;
    case 3: s += creal(csqrt(z[i])) * cimag(z[i]) + creal(z[0] * z[0] + z[1] * z[1]); break;
    default: s += cimag((creal(z[i]) + 2 * creal(z[i]) * I) * conj(z[i])); break;
    }
  }
  return s;
}

static double complex run_grad(jit_ctx *ctx, int which, const double complex *z, double complex *g) {
  jit_array *a = NULL, *res[2] = {0};
  assert_int_equal(jit_array_from_host(ctx, JIT_C128, 1, (int64_t[]){2}, z, &a), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "grad", .n_args = 1, .n_results = 2};
  assert_int_equal(jit_compile(ctx, grad_fn, &which, &fo, &f), JIT_OK);
  jit_status st = jit_call(f, &a, res);
  if (st != JIT_OK) print_error("%s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  double loss;
  assert_int_equal(jit_array_to_host(res[0], &loss, sizeof loss), JIT_OK);
  assert_int_equal(jit_array_dtype(res[1]), JIT_C128);
  assert_int_equal(jit_array_to_host(res[1], g, 2 * sizeof *g), JIT_OK);
  assert_true(fabs(loss - loss_c(which, z)) <= 1e-12 * (1 + fabs(loss)));
  for (int k = 0; k < 2; k++) jit_array_free(res[k]);
  jit_array_free(a);
  jit_fn_free(f);
  return g[0];
}

static void test_grad_known_values(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx(3, 1);
  double complex z[2] = {3 + 4 * I, 3 + 4 * I}, g[2];
  run_grad(ctx, 0, z, g); /* jax.grad(lambda z: abs(z)**2)(3+4j) = 6-8j */
  assert_true(cabs(g[0] - (6 - 8 * I)) < 1e-12 && cabs(g[1] - (6 - 8 * I)) < 1e-12);
  run_grad(ctx, 1, z, g); /* jax.grad(abs)(3+4j) = 0.6-0.8j */
  assert_true(cabs(g[0] - (0.6 - 0.8 * I)) < 1e-12 && cabs(g[1] - (0.6 - 0.8 * I)) < 1e-12);
  jit_ctx_destroy(ctx);
}

static void test_grad_finite_differences(void **state) {
  (void)state;
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = make_ctx(opt, 1);
    double complex z[2] = {0.7 - 1.1 * I, -1.3 + 0.4 * I};
    for (int which = 0; which < 5; which++) {
      double complex g[2];
      run_grad(ctx, which, z, g);
      for (int i = 0; i < 2; i++) {
        /* dL/dx - i dL/dy by central differences */
        const double h = 1e-6;
        double d[2];
        for (int part = 0; part < 2; part++) {
          double complex zp[2] = {z[0], z[1]}, zm[2] = {z[0], z[1]};
          double complex step = part ? h * I : h;
          zp[i] += step;
          zm[i] -= step;
          d[part] = (loss_c(which, zp) - loss_c(which, zm)) / (2 * h);
        }
        double complex want = d[0] - d[1] * I;
        if (cabs(g[i] - want) > 1e-6 * (1 + cabs(want))) {
          print_error("loss %d, z[%d]: got %.12g%+.12gi, want %.12g%+.12gi\n", which, i, creal(g[i]),
                      cimag(g[i]), creal(want), cimag(want));
          fail();
        }
      }
    }
    jit_ctx_destroy(ctx);
  }
}

/* ---- refusals: ops jnp does not define on complex values fail at the user's line -------------- */
static int refused_line;
static void refused_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int which = *(const int *)user;
  switch (which) {
  case 0: refused_line = __LINE__; r[0] = jit_max(t, a[0], a[0]); break;
  case 1: refused_line = __LINE__; r[0] = jit_cmp(t, JIT_LT, a[0], a[0]); break;
  case 2: refused_line = __LINE__; r[0] = jit_reduce_max(t, a[0], 1, (int[]){0}); break;
  case 3: refused_line = __LINE__; r[0] = jit_tanh(t, a[0]); break;
  default: refused_line = __LINE__; r[0] = jit_complex(t, a[0], a[0]); break; /* complex parts */
  }
}

static void test_refusals(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx(3, 1);
  float complex x[2] = {1, 2};
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_C64, 1, (int64_t[]){2}, x, &a), JIT_OK);
  for (int which = 0; which < 5; which++) {
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "refused", .n_args = 1, .n_results = 1};
    assert_int_equal(jit_compile(ctx, refused_fn, &which, &fo, &f), JIT_OK);
    jit_array *r = NULL;
    jit_status st = jit_call(f, &a, &r);
    assert_int_equal(st, JIT_EINVAL);
    char where[64];
    snprintf(where, sizeof where, "%s:%d", THIS_FILE, refused_line);
    if (!strstr(jit_last_error(), where)) {
      print_error("case %d: '%s' does not name %s\n", which, jit_last_error(), where);
      fail();
    }
    assert_null(r);
    jit_fn_free(f);
  }
  jit_array_free(a);
  jit_ctx_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtypes_and_host),
      cmocka_unit_test(test_full_and_dump),
      cmocka_unit_test(test_compiled),
      cmocka_unit_test(test_interpreted),
      cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_sharded_compiled),
      cmocka_unit_test(test_sharded_interpreted),
      cmocka_unit_test(test_special_values),
      cmocka_unit_test(test_scan),
      cmocka_unit_test(test_grad_known_values),
      cmocka_unit_test(test_grad_finite_differences),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
