/* test_fft.c: jit_fft (lax.fft) of the four types in both precisions, over 1 to 3 dims and many
 * lengths (primes, odd, 1), compiled and interpreted, against a naive DFT in double; roundtrips;
 * long transforms (four-step, Bluestein) spot-checked bin by bin; VJPs by finite differences;
 * vmap; sharded batch and fft dims; bad input refused at the user's line; the IR text form. */
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

#include "tjit.h"
#include "support/gradcheck.h"
#include "support/roundtrip.h"

#define THIS_FILE "tests/test_fft.c"
#define PI 3.14159265358979323846

typedef struct spec {
  jit_fft_type type;
  int nd;
  int64_t len[3];
} spec;

static void fft_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const spec *s = user;
  r[0] = jit_fft(t, a[0], s->type, s->nd, s->len);
}

static jit_ctx *make_ctx(int opt_level, int n_devices) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.opt_level = opt_level;
  o.n_devices = n_devices;
  jit_ctx *ctx = NULL;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_OK);
  return ctx;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void) { /* in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

/* ---- the reference: naive DFTs in double ------------------------------------------------------ */

/* In place along axis ax of z (rank, dims): X_k = scale sum_j x_j exp(sign 2 pi i jk / n). */
static void dft_axis(double complex *z, int rank, const int64_t *d, int ax, int sign, double scale) {
  int64_t A = numel(ax, d), n = d[ax], B = numel(rank - ax - 1, d + ax + 1);
  double complex *line = malloc((size_t)n * sizeof *line), *out = malloc((size_t)n * sizeof *out);
  assert_non_null(line);
  assert_non_null(out);
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t j = 0; j < n; j++) line[j] = z[(a * n + j) * B + b];
      for (int64_t k = 0; k < n; k++) {
        double complex acc = 0;
        for (int64_t j = 0; j < n; j++) {
          double ang = sign * 2 * PI * (double)((j * k) % n) / (double)n;
          acc += line[j] * (cos(ang) + I * sin(ang));
        }
        out[k] = acc * scale;
      }
      for (int64_t k = 0; k < n; k++) z[(a * n + k) * B + b] = out[k];
    }
  free(line);
  free(out);
}

/* The expected result of s on x (complex, or real parts for RFFT) of rank, dims d; *out_n its
   element count. Returns a malloc'ed array (real results as complex with 0 imaginary parts). */
static double complex *reference(const spec *s, const double complex *x, int rank, const int64_t *d, int64_t *out_n) {
  int64_t od[8];
  memcpy(od, d, (size_t)rank * sizeof *d);
  int last = rank - 1;
  int64_t n = s->len[s->nd - 1], h = n / 2 + 1;
  if (s->type == JIT_IRFFT) od[last] = n;
  int64_t nx = numel(rank, d), no = numel(rank, od);
  /* work on the full (complex) array of the logical transform's shape */
  int64_t fd[8];
  memcpy(fd, d, (size_t)rank * sizeof *d);
  if (s->type == JIT_IRFFT) fd[last] = n;
  int64_t nf = numel(rank, fd);
  double complex *z = calloc((size_t)nf, sizeof *z);
  assert_non_null(z);
  if (s->type != JIT_IRFFT) {
    memcpy(z, x, (size_t)nx * sizeof *z);
    int sign = s->type == JIT_IFFT ? 1 : -1;
    for (int ax = last; ax > last - s->nd; ax--) dft_axis(z, rank, fd, ax, sign, s->type == JIT_IFFT ? 1.0 / (double)fd[ax] : 1);
  } else {
    /* numpy's irfftn: inverse DFTs over the other axes, then the Hermitian extension of the last */
    double complex *y = malloc((size_t)nx * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, (size_t)nx * sizeof *y);
    for (int ax = last - 1; ax > last - s->nd; ax--) dft_axis(y, rank, d, ax, 1, 1.0 / (double)d[ax]);
    int64_t rows = nx / h;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < n; k++) {
        int64_t kk = k < h ? k : n - k;
        double complex v = y[r * h + kk];
        if (kk == 0 || 2 * kk == n) v = creal(v);
        z[r * n + k] = k < h ? v : conj(v);
      }
    free(y);
    dft_axis(z, rank, fd, last, 1, 1.0 / (double)n);
    for (int64_t i = 0; i < nf; i++) z[i] = creal(z[i]);
  }
  if (s->type == JIT_RFFT) { /* keep the first n / 2 + 1 of the last axis */
    od[last] = h;
    no = numel(rank, od);
    for (int64_t r = 0; r < no / h; r++)
      for (int64_t k = 0; k < h; k++) z[r * h + k] = z[r * n + k];
  }
  *out_n = no;
  return z;
}

/* ---- running and comparing --------------------------------------------------------------------- */

static bool is_c(jit_dtype dt) { return dt == JIT_C64 || dt == JIT_C128; }
static size_t el_size(jit_dtype dt) { return jit_dtype_size(dt); }

/* x (complex values, or reals in creal) as host bytes of dtype dt. */
static void *to_host(const double complex *x, int64_t n, jit_dtype dt) {
  unsigned char *b = malloc((size_t)n * el_size(dt) + 1);
  assert_non_null(b);
  for (int64_t i = 0; i < n; i++) {
    double re = creal(x[i]), im = cimag(x[i]);
    if (dt == JIT_C64) ((float *)b)[2 * i] = (float)re, ((float *)b)[2 * i + 1] = (float)im;
    else if (dt == JIT_C128) ((double *)b)[2 * i] = re, ((double *)b)[2 * i + 1] = im;
    else if (dt == JIT_F32) ((float *)b)[i] = (float)re;
    else ((double *)b)[i] = re;
  }
  return b;
}

static double complex elem(const void *b, jit_dtype dt, int64_t i) {
  if (dt == JIT_C64) return ((const float *)b)[2 * i] + I * ((const float *)b)[2 * i + 1];
  if (dt == JIT_C128) return ((const double *)b)[2 * i] + I * ((const double *)b)[2 * i + 1];
  if (dt == JIT_F32) return ((const float *)b)[i];
  return ((const double *)b)[i];
}

/* x rounded to dt's precision (what the transform actually sees). */
static void round_to(double complex *x, int64_t n, jit_dtype dt) {
  void *b = to_host(x, n, dt);
  for (int64_t i = 0; i < n; i++) x[i] = elem(b, dt, i);
  free(b);
}

static double tol_of(jit_dtype dt) { return dt == JIT_C64 || dt == JIT_F32 ? 3e-6 : 1e-13; }

/* got (an array of dtype dt, n elements) against want, the error relative to want's largest
   magnitude, with a bound growing as log n. */
static void compare(const void *got, jit_dtype dt, const double complex *want, int64_t n, int64_t len,
                    const char *what) {
  double big = 1e-300;
  for (int64_t i = 0; i < n; i++) big = fmax(big, cabs(want[i]));
  double bound = tol_of(dt) * (1 + log2((double)len + 1)) * big;
  for (int64_t i = 0; i < n; i++) {
    double complex g = elem(got, dt, i);
    if (!(cabs(g - want[i]) <= bound)) {
      print_error("%s: element %lld (%s): got %.9g%+.9gi, want %.9g%+.9gi (bound %.3g)\n", what,
                  (long long)i, jit_dtype_name(dt), creal(g), cimag(g), creal(want[i]), cimag(want[i]), bound);
      fail();
    }
  }
}

/* Runs s on a random input of dims d (the operand's) in dtype dt on ctx; checks against the
   reference. */
static void check_case(jit_ctx *ctx, const spec *s, jit_dtype dt, int rank, const int64_t *d) {
  int64_t nx = numel(rank, d);
  double complex *x = malloc((size_t)(nx ? nx : 1) * sizeof *x);
  assert_non_null(x);
  for (int64_t i = 0; i < nx; i++) x[i] = uniform() + (is_c(dt) ? I * uniform() : 0);
  round_to(x, nx, dt);
  void *hx = to_host(x, nx, dt);
  jit_array *a = NULL, *r = NULL;
  assert_int_equal(jit_array_from_host(ctx, dt, rank, d, hx, &a), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "fft", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, fft_fn, (void *)s, &fo, &f), JIT_OK);
  jit_status st = jit_call(f, &a, &r);
  if (st != JIT_OK) print_error("%s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  int64_t no = 0;
  double complex *want = reference(s, x, rank, d, &no);
  jit_dtype odt = s->type == JIT_IRFFT ? (dt == JIT_C64 ? JIT_F32 : JIT_F64)
                  : s->type == JIT_RFFT ? (dt == JIT_F32 ? JIT_C64 : JIT_C128) : dt;
  assert_int_equal(jit_array_dtype(r), odt);
  assert_int_equal(jit_array_nbytes(r), (size_t)no * el_size(odt));
  void *got = malloc((size_t)no * el_size(odt) + 1);
  assert_non_null(got);
  assert_int_equal(jit_array_to_host(r, got, (size_t)no * el_size(odt)), JIT_OK);
  char what[128];
  snprintf(what, sizeof what, "type %d nd %d last dim %lld", (int)s->type, s->nd, (long long)d[rank - 1]);
  compare(got, odt, want, no, s->len[s->nd - 1] * (s->nd > 1 ? s->len[0] : 1), what);
  free(got);
  free(want);
  free(hx);
  free(x);
  jit_array_free(a);
  jit_array_free(r);
  jit_fn_free(f);
}

static const int64_t LENGTHS[] = {1, 2, 3, 5, 7, 8, 12, 17, 64, 97, 1000, 1024};
enum { N_LENGTHS = sizeof LENGTHS / sizeof LENGTHS[0] };

/* operand dims for s over a batch of `batch` rows */
static int dims_for(const spec *s, int64_t batch, int64_t *d) {
  int rank = 0;
  d[rank++] = batch;
  for (int i = 0; i < s->nd; i++) d[rank++] = s->len[i];
  if (s->type == JIT_IRFFT) d[rank - 1] = s->len[s->nd - 1] / 2 + 1;
  return rank;
}

static jit_dtype in_dtype(jit_fft_type t, bool dbl) {
  return t == JIT_RFFT ? (dbl ? JIT_F64 : JIT_F32) : (dbl ? JIT_C128 : JIT_C64);
}

static void one_dim(int opt_level) {
  jit_ctx *ctx = make_ctx(opt_level, 1);
  for (int type = JIT_FFT; type <= JIT_IRFFT; type++)
    for (int dbl = 0; dbl < 2; dbl++)
      for (int i = 0; i < N_LENGTHS; i++) {
        spec s = {(jit_fft_type)type, 1, {LENGTHS[i]}};
        int64_t d[4];
        int rank = dims_for(&s, 3, d); /* 3 rows: the real transforms pair rows, one left alone */
        check_case(ctx, &s, in_dtype(s.type, dbl), rank, d);
      }
  jit_ctx_destroy(ctx);
}

static void test_1d_compiled(void **state) { (void)state; one_dim(3); }
static void test_1d_interpreted(void **state) { (void)state; one_dim(0); }

static void multi_dim(int opt_level) {
  jit_ctx *ctx = make_ctx(opt_level, 1);
  static const int64_t shapes[][3] = {{4, 6, 0}, {5, 7, 0}, {3, 1, 0}, {8, 12, 0}, {17, 3, 0},
                                      {2, 3, 4}, {3, 5, 6}, {4, 1, 7}};
  for (int type = JIT_FFT; type <= JIT_IRFFT; type++)
    for (int dbl = 0; dbl < 2; dbl++)
      for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        spec s = {(jit_fft_type)type, shapes[k][2] ? 3 : 2, {shapes[k][0], shapes[k][1], shapes[k][2]}};
        int64_t d[5];
        int rank = dims_for(&s, 2, d);
        check_case(ctx, &s, in_dtype(s.type, dbl), rank, d);
      }
  jit_ctx_destroy(ctx);
}

static void test_nd_compiled(void **state) { (void)state; multi_dim(3); }
static void test_nd_interpreted(void **state) { (void)state; multi_dim(0); }

/* ---- roundtrips: ifft(fft(x)) = x, irfft(rfft(x)) = x ---------------------------------------- */

static void roundtrip_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const int64_t *len = user;
  r[0] = jit_fft(t, jit_fft(t, a[0], JIT_FFT, 2, len), JIT_IFFT, 2, len);
  r[1] = jit_fft(t, jit_fft(t, a[1], JIT_RFFT, 2, len), JIT_IRFFT, 2, len);
}

static void test_roundtrip(void **state) {
  (void)state;
  static const int64_t lens[][2] = {{1, 1}, {3, 97}, {12, 1000}, {8, 1024}, {5, 17}};
  jit_ctx *ctx = make_ctx(3, 1);
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
    for (int dbl = 0; dbl < 2; dbl++) {
      int64_t d[3] = {2, lens[k][0], lens[k][1]}, n = numel(3, d);
      jit_dtype cdt = dbl ? JIT_C128 : JIT_C64, rdt = dbl ? JIT_F64 : JIT_F32;
      double complex *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
      assert_non_null(x);
      assert_non_null(y);
      for (int64_t i = 0; i < n; i++) x[i] = uniform() + I * uniform(), y[i] = uniform();
      round_to(x, n, cdt);
      round_to(y, n, rdt);
      void *hx = to_host(x, n, cdt), *hy = to_host(y, n, rdt);
      jit_array *a[2] = {0}, *r[2] = {0};
      assert_int_equal(jit_array_from_host(ctx, cdt, 3, d, hx, &a[0]), JIT_OK);
      assert_int_equal(jit_array_from_host(ctx, rdt, 3, d, hy, &a[1]), JIT_OK);
      jit_fn *f = NULL;
      jit_fn_opts fo = {.name = "roundtrip", .n_args = 2, .n_results = 2};
      assert_int_equal(jit_compile(ctx, roundtrip_fn, (void *)lens[k], &fo, &f), JIT_OK);
      assert_int_equal(jit_call(f, a, r), JIT_OK);
      void *g0 = malloc((size_t)n * el_size(cdt)), *g1 = malloc((size_t)n * el_size(rdt));
      assert_int_equal(jit_array_to_host(r[0], g0, (size_t)n * el_size(cdt)), JIT_OK);
      assert_int_equal(jit_array_to_host(r[1], g1, (size_t)n * el_size(rdt)), JIT_OK);
      compare(g0, cdt, x, n, lens[k][0] * lens[k][1], "ifft(fft(x))");
      compare(g1, rdt, y, n, lens[k][0] * lens[k][1], "irfft(rfft(x))");
      free(g0), free(g1), free(hx), free(hy), free(x), free(y);
      for (int i = 0; i < 2; i++) jit_array_free(a[i]), jit_array_free(r[i]);
      jit_fn_free(f);
    }
  jit_ctx_destroy(ctx);
}

/* ---- long transforms: the four-step split and Bluestein of a large prime, bins spot-checked ---- */

static void test_long(void **state) {
  (void)state;
  /* 2^16 and 3 * 2^15 go four-step; 65537 is prime (Bluestein through 2^18) */
  static const int64_t lens[] = {65536, 98304, 65537};
  for (int opt = 0; opt <= 3; opt += 3) {
    jit_ctx *ctx = make_ctx(opt, 1);
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
      for (int type = JIT_FFT; type <= JIT_IFFT; type++) {
        int64_t n = lens[k];
        double complex *x = malloc((size_t)n * sizeof *x);
        assert_non_null(x);
        for (int64_t i = 0; i < n; i++) x[i] = uniform() + I * uniform();
        round_to(x, n, JIT_C64);
        void *hx = to_host(x, n, JIT_C64), *got = malloc((size_t)n * 8);
        jit_array *a = NULL, *r = NULL;
        assert_int_equal(jit_array_from_host(ctx, JIT_C64, 1, &n, hx, &a), JIT_OK);
        spec s = {(jit_fft_type)type, 1, {n}};
        jit_fn *f = NULL;
        jit_fn_opts fo = {.name = "long", .n_args = 1, .n_results = 1};
        assert_int_equal(jit_compile(ctx, fft_fn, &s, &fo, &f), JIT_OK);
        assert_int_equal(jit_call(f, &a, &r), JIT_OK);
        assert_int_equal(jit_array_to_host(r, got, (size_t)n * 8), JIT_OK);
        int sign = type == JIT_IFFT ? 1 : -1;
        double scale = type == JIT_IFFT ? 1.0 / (double)n : 1;
        for (int b = 0; b < 24; b++) {
          int64_t bin = b < 4 ? b * (n / 4) + (b == 3) : (int64_t)((uniform() + 1) / 2 * (double)n) % n;
          double complex acc = 0;
          for (int64_t j = 0; j < n; j++) {
            double ang = sign * 2 * PI * (double)((j * bin) % n) / (double)n;
            acc += x[j] * (cos(ang) + I * sin(ang));
          }
          acc *= scale;
          double complex g = elem(got, JIT_C64, bin);
          /* a bin of n random terms has magnitude ~ sqrt(n): the error is relative to that */
          double bound = 3e-6 * 17 * sqrt((double)n) * scale;
          if (!(cabs(g - acc) <= bound)) {
            print_error("n %lld type %d bin %lld: got %.9g%+.9gi want %.9g%+.9gi\n", (long long)n, type,
                        (long long)bin, creal(g), cimag(g), creal(acc), cimag(acc));
            fail();
          }
        }
        free(x), free(hx), free(got);
        jit_array_free(a), jit_array_free(r);
        jit_fn_free(f);
      }
    jit_ctx_destroy(ctx);
  }
}

/* ---- VJPs (JAX's transpose rules) against finite differences of real losses ------------------- */

/* cos(0.7 i + phase) over the flat index i of a value of t's shape (f64), a fixed weight. */
static jit_val weight(jit_trace *t, jit_val like, double phase) {
  int rank = jit_val_rank(t, like);
  const int64_t *sh = jit_val_shape(t, like);
  int64_t shape[8], n = 1;
  for (int i = 0; i < rank; i++) shape[i] = sh[i], n *= sh[i];
  jit_val i = jit_reshape(t, jit_iota(t, JIT_F64, 1, &n, 0), rank, shape);
  return jit_cos(t, jit_add(t, jit_mul(t, i, jit_scalar(t, 0.7)), jit_scalar(t, phase)));
}

static jit_val total(jit_trace *t, jit_val x) {
  int rank = jit_val_rank(t, x);
  int axes[8];
  for (int i = 0; i < rank; i++) axes[i] = i;
  return jit_reduce_sum(t, x, rank, axes);
}

/* loss = sum(re y w1 + im y w2 + |y|^2 w3) (real y: sum(y w1 + y^2 w3)), y = fft of the args
   (complex(a0, a1), or a0 alone for RFFT): linear terms catch a missing or extra conjugation */
static void fft_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const spec *s = user;
  jit_val x = s->type == JIT_RFFT ? a[0] : jit_complex(t, a[0], a[1]);
  jit_val y = jit_fft(t, x, s->type, s->nd, s->len);
  if (s->type == JIT_IRFFT) {
    r[0] = total(t, jit_add(t, jit_mul(t, y, weight(t, y, 0.1)), jit_mul(t, jit_mul(t, y, y), weight(t, y, 1.9))));
    return;
  }
  jit_val re = jit_real(t, y), im = jit_imag(t, y);
  jit_val sq = jit_add(t, jit_mul(t, re, re), jit_mul(t, im, im));
  r[0] = total(t, jit_add(t, jit_add(t, jit_mul(t, re, weight(t, re, 0.1)), jit_mul(t, im, weight(t, im, 0.8))),
                          jit_mul(t, sq, weight(t, sq, 1.9))));
}

static void test_grad(void **state) {
  (void)state;
  static const int64_t lens[][2] = {{5, 0}, {8, 0}, {1, 0}, {3, 4}, {2, 7}};
  for (int type = JIT_FFT; type <= JIT_IRFFT; type++)
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      spec s = {(jit_fft_type)type, lens[k][1] ? 2 : 1, {lens[k][0], lens[k][1]}};
      int64_t d[4];
      int rank = dims_for(&s, 2, d);
      ot_array in[2] = {ot_random(JIT_F64, rank, d, 31 + k, -1, 1), ot_random(JIT_F64, rank, d, 57 + k, -1, 1)};
      ot_loss_fn l = {fft_loss, &s, type == JIT_RFFT ? 1 : 2};
      char name[64];
      snprintf(name, sizeof name, "fft type %d lengths %lld,%lld", type, (long long)lens[k][0], (long long)lens[k][1]);
      ot_check_grad(name, &l, in);
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
}

/* ---- vmap: the batch dim inside the transformed dims moves to the front ---------------------- */

static void vmapped(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const int *axes = user;
  static spec s = {JIT_FFT, 1, {6}};
  jit_vmap(t, fft_fn, &s, 1, a, &axes[0], 1, r, &axes[1]);
}

static void test_vmap(void **state) {
  (void)state;
  enum { L = 6, NB = 3 };
  jit_ctx *ctx = make_ctx(3, 1);
  double complex x[L * NB];
  for (int i = 0; i < L * NB; i++) x[i] = uniform() + I * uniform();
  round_to(x, L * NB, JIT_C128);
  /* in_axes 1 of [L, NB] (batched along the transformed dim of the body's [L]) and in_axes 0
     of [NB, L], out_axes 0 */
  for (int in_axis = 0; in_axis < 2; in_axis++) {
    int axes[2] = {in_axis, 0};
    int64_t d[2] = {in_axis ? L : NB, in_axis ? NB : L};
    double complex rows[L * NB];
    for (int b = 0; b < NB; b++)
      for (int j = 0; j < L; j++) rows[b * L + j] = in_axis ? x[j * NB + b] : x[b * L + j];
    void *hx = to_host(x, L * NB, JIT_C128);
    jit_array *a = NULL, *r = NULL;
    assert_int_equal(jit_array_from_host(ctx, JIT_C128, 2, d, hx, &a), JIT_OK);
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "vmap_fft", .n_args = 1, .n_results = 1};
    assert_int_equal(jit_compile(ctx, vmapped, axes, &fo, &f), JIT_OK);
    assert_int_equal(jit_call(f, &a, &r), JIT_OK);
    spec s = {JIT_FFT, 1, {L}};
    int64_t no = 0, rd[2] = {NB, L};
    double complex *want = reference(&s, rows, 2, rd, &no);
    double complex got[L * NB];
    assert_int_equal(jit_array_to_host(r, got, sizeof got), JIT_OK);
    compare(got, JIT_C128, want, no, L, "vmap(fft)");
    free(want);
    free(hx);
    jit_array_free(a);
    jit_array_free(r);
    jit_fn_free(f);
  }
  jit_ctx_destroy(ctx);
}

/* ---- sharding: split batch dims stay split; a split transformed dim is gathered --------------- */

static void test_sharded(void **state) {
  (void)state;
  enum { ROWS = 4, L = 16 };
  static const char *const specs[] = {"x,_", "_,x"};
  static const spec kinds[] = {{JIT_FFT, 1, {L}}, {JIT_RFFT, 1, {L}}, {JIT_IFFT, 2, {ROWS, L}}};
  jit_ctx *ctx = make_ctx(3, 2);
  jit_mesh *mesh = NULL;
  assert_int_equal(jit_mesh_create(ctx, 1, (int64_t[]){2}, (const char *[]){"x"}, NULL, &mesh), JIT_OK);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (int sp = 0; sp < 2; sp++) {
      const spec *s = &kinds[k];
      jit_dtype dt = in_dtype(s->type, false);
      int64_t d[2] = {ROWS, L};
      double complex x[ROWS * L];
      for (int i = 0; i < ROWS * L; i++) x[i] = uniform() + (is_c(dt) ? I * uniform() : 0);
      round_to(x, ROWS * L, dt);
      void *hx = to_host(x, ROWS * L, dt);
      jit_sharding *sh = NULL;
      jit_array *a0 = NULL, *a = NULL, *r = NULL;
      assert_int_equal(jit_sharding_create(mesh, specs[sp], &sh), JIT_OK);
      assert_int_equal(jit_array_from_host(ctx, dt, 2, d, hx, &a0), JIT_OK);
      assert_int_equal(jit_device_put(a0, sh, &a), JIT_OK);
      jit_fn *f = NULL;
      jit_fn_opts fo = {.name = "sharded_fft", .n_args = 1, .n_results = 1};
      assert_int_equal(jit_compile(ctx, fft_fn, (void *)s, &fo, &f), JIT_OK);
      jit_status st = jit_call(f, &a, &r);
      if (st != JIT_OK) print_error("%s\n", jit_last_error());
      assert_int_equal(st, JIT_OK);
      int64_t no = 0;
      double complex *want = reference(s, x, 2, d, &no);
      jit_dtype odt = s->type == JIT_RFFT ? JIT_C64 : dt;
      double complex got[ROWS * L];
      assert_int_equal(jit_array_to_host(r, got, (size_t)no * el_size(odt)), JIT_OK);
      compare(got, odt, want, no, L, specs[sp]);
      free(want);
      free(hx);
      jit_array_free(a0);
      jit_array_free(a);
      jit_array_free(r);
      jit_sharding_free(sh);
      jit_fn_free(f);
    }
  jit_mesh_free(mesh);
  jit_ctx_destroy(ctx);
}

/* ---- bad input: refused at the user's line --------------------------------------------------- */

static int refused_line;
static void refused_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int which = *(const int *)user;
  int64_t n = 8, wrong = 7, two[2] = {2, 8}, many[4] = {1, 1, 2, 8};
  jit_val re = jit_real(t, a[0]);
  switch (which) {
  case 0: refused_line = __LINE__; r[0] = jit_fft(t, re, JIT_FFT, 1, &n); break;        /* real operand */
  case 1: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_RFFT, 1, &n); break;     /* complex to rfft */
  case 2: refused_line = __LINE__; r[0] = jit_fft(t, re, JIT_IRFFT, 1, &n); break;      /* real to irfft */
  case 3: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_FFT, 0, &n); break;      /* n_dims 0 */
  case 4: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_FFT, 4, many); break;    /* n_dims 4 */
  case 5: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_FFT, 1, &wrong); break;  /* length != dim */
  case 6: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_IFFT, 2, two); break;    /* rank 1 < 2 */
  case 7: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_IRFFT, 1, &n); break;    /* 8 is not 8/2+1 */
  case 8: refused_line = __LINE__; r[0] = jit_fft(t, a[0], (jit_fft_type)9, 1, &n); break;
  default: refused_line = __LINE__; r[0] = jit_fft(t, a[0], JIT_FFT, 1, NULL); break;
  }
}

static void test_refusals(void **state) {
  (void)state;
  jit_ctx *ctx = make_ctx(3, 1);
  float complex x[8] = {1, 2};
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_C64, 1, (int64_t[]){8}, x, &a), JIT_OK);
  static const jit_status want[] = {JIT_EDTYPE, JIT_EDTYPE, JIT_EDTYPE, JIT_EINVAL, JIT_EINVAL,
                                    JIT_ESHAPE, JIT_ESHAPE, JIT_ESHAPE, JIT_EINVAL, JIT_EINVAL};
  for (int which = 0; which < 10; which++) {
    jit_fn *f = NULL;
    jit_fn_opts fo = {.name = "refused", .n_args = 1, .n_results = 1};
    assert_int_equal(jit_compile(ctx, refused_fn, &which, &fo, &f), JIT_OK);
    jit_array *r = NULL;
    jit_status st = jit_call(f, &a, &r);
    char where[64];
    snprintf(where, sizeof where, "%s:%d", THIS_FILE, refused_line);
    if (st != want[which] || !strstr(jit_last_error(), where) || !strstr(jit_last_error(), "fft")) {
      print_error("case %d: status %d, '%s' (want %d naming %s)\n", which, st, jit_last_error(), want[which], where);
      fail();
    }
    assert_null(r);
    jit_fn_free(f);
  }
  /* the C export has no FFT (nor complex values): refused, not miscompiled */
  int64_t n = 8;
  spec s = {JIT_FFT, 1, {n}};
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "exported", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(ctx, fft_fn, &s, &fo, &f), JIT_OK);
  assert_int_equal(jit_fn_export_c(f, &a, "/tmp"), JIT_EUNSUPPORTED);
  jit_fn_free(f);
  jit_array_free(a);
  jit_ctx_destroy(ctx);
}

/* ---- IR text: printed, parsed back, printed the same; malformed attributes refused ----------- */

static void test_ir_text(void **state) {
  (void)state;
  const char *text =
      "func @f(%0: c64[2,8,6], %1: f64[3,10]) -> (c64[2,8,6], f64[3,6,2], f32[2,8,10]) {\n"
      "  %2 = fft %0 type=ifft lengths=[8,6] pairs=0 : c64[2,8,6]\n"
      "  %3 = fft %1 type=rfft lengths=[10] pairs=1 : f64[3,6,2]\n"
      "  %4 = fft %0 type=irfft lengths=[8,10] pairs=0 : f32[2,8,10]\n"
      "  return %2, %3, %4\n"
      "}\n";
  ir_func **fs = NULL;
  uint32_t n = 0;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  if (st != JIT_OK) print_error("%s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  assert_int_equal(n, 1);
  char *printed = ir_print_to_string(fs[0]);
  assert_non_null(strstr(printed, "fft %0 type=ifft lengths=[8,6] pairs=0 : c64[2,8,6]"));
  assert_non_null(strstr(printed, "type=irfft lengths=[8,10] pairs=0 : f32[2,8,10]"));
  assert_ir_roundtrip(fs[0]);
  free(printed);
  ir_func_free(fs[0]);
  free(fs);
  static const char *const bad[] = {
      "func @f(%0: c64[8]) -> c64[8] {\n  %1 = fft %0 type=dft lengths=[8] pairs=0 : c64[8]\n  return %1\n}\n",
      "func @f(%0: c64[8]) -> c64[8] {\n  %1 = fft %0 type=fft lengths=[0] pairs=0 : c64[8]\n  return %1\n}\n",
      "func @f(%0: c64[8]) -> c64[8] {\n  %1 = fft %0 type=fft lengths=[1,1,1,8] pairs=0 : c64[8]\n  return %1\n}\n",
      "func @f(%0: c64[8]) -> c64[8] {\n  %1 = fft %0 type=fft lengths=[8] : c64[8]\n  return %1\n}\n",
      "func @f(%0: c64[8]) -> c64[8] {\n  %1 = fft %0 type=fft lengths=[4] pairs=0 : c64[8]\n  return %1\n}\n",
      "func @f(%0: f32[8]) -> f32[8] {\n  %1 = fft %0 type=fft lengths=[8] pairs=0 : f32[8]\n  return %1\n}\n",
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    fs = NULL;
    assert_int_equal(ir_parse(bad[k], strlen(bad[k]), &fs, &n), JIT_EINVAL);
    assert_non_null(strstr(jit_last_error(), "2:")); /* the position of the fault */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_1d_compiled),  cmocka_unit_test(test_1d_interpreted),
      cmocka_unit_test(test_nd_compiled),  cmocka_unit_test(test_nd_interpreted),
      cmocka_unit_test(test_roundtrip),    cmocka_unit_test(test_long),
      cmocka_unit_test(test_grad),         cmocka_unit_test(test_vmap),
      cmocka_unit_test(test_sharded),      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_ir_text),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
