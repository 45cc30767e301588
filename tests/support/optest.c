/* optest.c: the end-to-end op test harness (see optest.h). Everything here is written without
 * the library's helpers (its own f16/bf16 rounding included) so that references stay independent. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "support/optest.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static jit_ctx *shared_ctx;

int ot_setup(void **state) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2; /* the machine is shared; more threads only add noise */
  if (jit_ctx_create(&o, &shared_ctx) != JIT_OK) {
    fprintf(stderr, "jit_ctx_create: %s\n", jit_last_error());
    return -1;
  }
  return 0;
}

int ot_teardown(void **state) {
  jit_ctx_destroy(shared_ctx);
  shared_ctx = NULL;
  return 0;
}

jit_ctx *ot_ctx(void) {
  assert_non_null(shared_ctx);
  return shared_ctx;
}

jit_ctx *ot_ctx_with(int devices, int threads, int opt_level) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = threads;
  o.opt_level = opt_level;
  jit_ctx *c = NULL;
  assert_int_equal(jit_ctx_create(&o, &c), JIT_OK);
  return c;
}

static void probe_dot(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_matmul(t, a[0], a[1]);
}

bool ot_core_runs(jit_ctx *ctx) {
  const int64_t shape[2] = {16, 16};
  float zeros[16 * 16] = {0};
  jit_array *args[2] = {NULL, NULL};
  jit_fn *f = NULL;
  char *dump = NULL;
  size_t len = 0;
  bool runs = false;
  jit_fn_opts o = {.name = "core_probe", .n_args = 2, .n_results = 1};
  FILE *ms = open_memstream(&dump, &len);
  if (ms && jit_array_from_host(ctx, JIT_F32, 2, shape, zeros, &args[0]) == JIT_OK &&
      jit_array_from_host(ctx, JIT_F32, 2, shape, zeros, &args[1]) == JIT_OK &&
      jit_compile(ctx, probe_dot, NULL, &o, &f) == JIT_OK && jit_precompile(f, args) == JIT_OK &&
      jit_fn_dump(f, args, JIT_DUMP_LLVM, ms) == JIT_OK) {
    fflush(ms);
    runs = strstr(dump, "on the precompiled core") != NULL;
  }
  if (ms) fclose(ms);
  free(dump);
  jit_fn_free(f);
  for (int i = 0; i < 2; i++) jit_array_free(args[i]);
  return runs;
}

jit_array *ot_f32_array(jit_ctx *ctx, int rank, const int64_t *shape, uint64_t seed) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((double)(seed >> 40) / (double)(1ull << 24)) * 2 - 1;
  }
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, rank, shape, v, &a), JIT_OK);
  free(v);
  return a;
}

/* ---- shapes ------------------------------------------------------------------------------------ */
int64_t ot_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

void ot_unravel(int64_t flat, int rank, const int64_t *shape, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
}

int64_t ot_ravel(int rank, const int64_t *shape, const int64_t *idx) {
  int64_t f = 0;
  for (int i = 0; i < rank; i++) f = f * shape[i] + idx[i];
  return f;
}

bool ot_bcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rank_out,
                    int64_t *shape_out) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - ra), ib = i - (r - rb);
    int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    shape_out[i] = da == 1 ? db : da;
  }
  *rank_out = r;
  return true;
}

int64_t ot_bcast_src(const ot_array *a, int rank, const int64_t *idx) {
  int64_t f = 0;
  for (int i = 0; i < a->rank; i++) {
    int64_t j = idx[i + rank - a->rank];
    f = f * a->shape[i] + (a->shape[i] == 1 ? 0 : j);
  }
  return f;
}

const char *ot_shape_str(int rank, const int64_t *shape, char *buf, size_t n) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, n - k, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* ---- values ------------------------------------------------------------------------------------ */
bool ot_is_float(jit_dtype dt) {
  return dt == JIT_F16 || dt == JIT_BF16 || dt == JIT_F32 || dt == JIT_F64;
}

/* Rounds v to a binary format with p significand bits, minimum normal exponent emin and largest
   finite value maxv, to nearest even; exact because v / ulp only rescales by a power of two. */
static double round_format(double v, int p, int emin, double maxv) {
  if (isnan(v) || isinf(v) || v == 0) return v;
  int e;
  frexp(fabs(v), &e);
  int lead = e - 1;
  if (lead < emin) lead = emin; /* subnormals share the smallest normal's ulp */
  double ulp = ldexp(1.0, lead - (p - 1));
  double r = nearbyint(v / ulp) * ulp;
  if (fabs(r) > maxv) return copysign(INFINITY, v);
  return r;
}

static int dt_bits(jit_dtype dt) {
  switch (dt) {
  case JIT_I8: case JIT_U8: return 8;
  case JIT_I32: case JIT_U32: return 32;
  default: return 64;
  }
}

double ot_int_min(jit_dtype dt) {
  switch (dt) {
  case JIT_I8: return -128;
  case JIT_U8: return 0;
  case JIT_I32: return -2147483648.0;
  case JIT_I64: return -9223372036854775808.0;
  case JIT_U32: case JIT_U64: return 0;
  case JIT_BOOL: return 0;
  default: return -INFINITY;
  }
}

double ot_int_max(jit_dtype dt) {
  switch (dt) {
  case JIT_I8: return 127;
  case JIT_U8: return 255;
  case JIT_I32: return 2147483647.0;
  case JIT_I64: return 9223372036854775807.0;
  case JIT_U32: return 4294967295.0;
  case JIT_U64: return 18446744073709551615.0;
  case JIT_BOOL: return 1;
  default: return INFINITY;
  }
}

double ot_round(jit_dtype dt, double v) {
  switch (dt) {
  case JIT_F64: return v;
  case JIT_F32: return (double)(float)v;
  case JIT_F16: return round_format(v, 11, -14, 65504.0);
  case JIT_BF16: return round_format(v, 8, -126, ldexp(255.0, 120));
  case JIT_BOOL: return v != 0;
  default: break;
  }
  if (isnan(v)) return 0;
  double t = trunc(v);
  if (dt == JIT_I64 || (dt == JIT_U64 && t >= 0)) return t; /* test values stay far inside */
  int bits = dt_bits(dt);
  double m = ldexp(1.0, bits);
  double w = fmod(t, m);
  if (w < 0) w += m;
  if (dt != JIT_U8 && dt != JIT_U32 && dt != JIT_U64 && w >= m / 2) w -= m;
  return w;
}

uint64_t ot_rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ot_rng_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * ((double)(ot_rng_next(s) >> 11) * 0x1.0p-53);
}

/* ---- encoding: exactly representable doubles <-> the dtype's bytes --------------------------- */
static uint16_t f16_bits(double v) {
  uint16_t s = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  if (isnan(v)) return 0x7e00;
  if (isinf(a)) return s | 0x7c00;
  if (a == 0) return s;
  int e;
  double m = frexp(a, &e);
  int lead = e - 1;
  if (lead < -14) return (uint16_t)(s | (uint16_t)ldexp(a, 24));
  return (uint16_t)(s | (uint16_t)((lead + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}

static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp(m, -24);
  return s * ldexp(1024 + m, e - 25);
}

static uint16_t bf16_bits(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return 0x7fc0;
  return (uint16_t)(u >> 16);
}

static double bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void store(jit_dtype dt, void *buf, int64_t i, double v) {
  switch (dt) {
  case JIT_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
  case JIT_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case JIT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case JIT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case JIT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case JIT_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case JIT_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case JIT_F16: ((uint16_t *)buf)[i] = f16_bits(v); break;
  case JIT_BF16: ((uint16_t *)buf)[i] = bf16_bits(v); break;
  case JIT_F32: ((float *)buf)[i] = (float)v; break;
  case JIT_F64: ((double *)buf)[i] = v; break;
  case JIT_C64: ((float *)buf)[2 * i] = (float)v; ((float *)buf)[2 * i + 1] = 0; break;
  case JIT_C128: ((double *)buf)[2 * i] = v; ((double *)buf)[2 * i + 1] = 0; break;
  }
}

/* Bool is read as its raw byte, so that a library writing anything but 0/1 fails the compare. */
static double load(jit_dtype dt, const void *buf, int64_t i) {
  switch (dt) {
  case JIT_BOOL: return ((const uint8_t *)buf)[i];
  case JIT_I8: return ((const int8_t *)buf)[i];
  case JIT_U8: return ((const uint8_t *)buf)[i];
  case JIT_I32: return ((const int32_t *)buf)[i];
  case JIT_I64: return (double)((const int64_t *)buf)[i];
  case JIT_U32: return ((const uint32_t *)buf)[i];
  case JIT_U64: return (double)((const uint64_t *)buf)[i];
  case JIT_F16: return f16_value(((const uint16_t *)buf)[i]);
  case JIT_BF16: return bf16_value(((const uint16_t *)buf)[i]);
  case JIT_F32: return ((const float *)buf)[i];
  case JIT_F64: return ((const double *)buf)[i];
  case JIT_C64: return ((const float *)buf)[2 * i]; /* the real part (tests/test_complex.c */
  case JIT_C128: return ((const double *)buf)[2 * i]; /* checks complex values as pairs) */
  }
  return NAN;
}

/* ---- arrays -------------------------------------------------------------------------------------- */
ot_array ot_zeros(jit_dtype dt, int rank, const int64_t *shape) {
  ot_array a;
  memset(&a, 0, sizeof a);
  assert_true(rank >= 0 && rank <= JIT_MAX_RANK);
  a.dt = dt;
  a.rank = rank;
  for (int i = 0; i < rank; i++) a.shape[i] = shape[i];
  a.n = ot_numel(rank, shape);
  if (a.n > 0) {
    a.v = calloc((size_t)a.n, sizeof *a.v);
    assert_non_null(a.v);
  }
  return a;
}

ot_array ot_random(jit_dtype dt, int rank, const int64_t *shape, uint64_t seed, double lo,
                   double hi) {
  ot_array a = ot_zeros(dt, rank, shape);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  for (int64_t i = 0; i < a.n; i++) {
    if (dt == JIT_BOOL) {
      a.v[i] = (double)(ot_rng_next(&s) >> 63);
    } else if (ot_is_float(dt)) {
      a.v[i] = ot_round(dt, ot_rng_uniform(&s, lo, hi));
    } else {
      double span = floor(hi) - ceil(lo) + 1;
      a.v[i] = ceil(lo) + floor(ot_rng_uniform(&s, 0, span));
      if (a.v[i] > floor(hi)) a.v[i] = floor(hi);
    }
  }
  return a;
}

ot_array ot_values(jit_dtype dt, int rank, const int64_t *shape, const double *vals) {
  ot_array a = ot_zeros(dt, rank, shape);
  for (int64_t i = 0; i < a.n; i++) a.v[i] = ot_round(dt, vals[i]);
  return a;
}

void ot_free(ot_array *a) {
  free(a->v);
  a->v = NULL;
  a->n = 0;
}

jit_array *ot_upload(const ot_array *a) { return ot_upload_to(ot_ctx(), a); }

jit_array *ot_upload_to(jit_ctx *ctx, const ot_array *a) {
  size_t bytes = (size_t)a->n * jit_dtype_size(a->dt);
  unsigned char *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  for (int64_t i = 0; i < a->n; i++) store(a->dt, buf, i, a->v[i]);
  jit_array *j = NULL;
  jit_status st = jit_array_from_host(ctx, a->dt, a->rank, a->shape, buf, &j);
  free(buf);
  OT_ASSERT_OK(st);
  assert_int_equal(jit_array_dtype(j), a->dt);
  assert_int_equal(jit_array_rank(j), a->rank);
  return j;
}

ot_array ot_download(const jit_array *j) {
  assert_non_null(j);
  int rank = jit_array_rank(j);
  assert_true(rank >= 0 && rank <= JIT_MAX_RANK);
  const int64_t *shape = jit_array_shape(j);
  assert_true(rank == 0 || shape != NULL);
  for (int i = 0; i < rank; i++) assert_true(shape[i] >= 0);
  ot_array a = ot_zeros(jit_array_dtype(j), rank, shape);
  size_t bytes = (size_t)a.n * jit_dtype_size(a.dt);
  assert_int_equal(jit_array_nbytes(j), bytes);
  unsigned char *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  jit_status st = jit_array_to_host(j, buf, bytes);
  if (st == JIT_OK)
    for (int64_t i = 0; i < a.n; i++) a.v[i] = load(a.dt, buf, i);
  free(buf);
  if (st != JIT_OK) ot_free(&a);
  OT_ASSERT_OK(st);
  return a;
}

void ot_assert_ok(jit_status st, const char *what, const char *file, int line) {
  if (st == JIT_OK) return;
  print_error("%s:%d: %s returned %s: %s\n", file, line, what, jit_status_str(st),
              jit_last_error());
  fail();
}

char *ot_fn_dump(jit_fn *f, jit_array *const *args, unsigned what) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  jit_status st = jit_fn_dump(f, args, what, out);
  fclose(out);
  if (st != JIT_OK) free(text);
  OT_ASSERT_OK(st);
  return text;
}

/* ---- running ------------------------------------------------------------------------------------- */
static jit_status run_on(jit_ctx *ctx, const char *name, jit_trace_fn fn, void *user,
                         const void *static_args, size_t static_len, int n_args,
                         const ot_array *args, int n_results, ot_array *results) {
  jit_array *in[64] = {0}, *out[64] = {0};
  jit_fn *f = NULL;
  assert_true(n_args >= 0 && n_args <= 64 && n_results >= 0 && n_results <= 64);
  for (int i = 0; i < n_results; i++) memset(&results[i], 0, sizeof results[i]);
  for (int i = 0; i < n_args; i++) in[i] = ot_upload_to(ctx, &args[i]);
  jit_fn_opts o = {.name = name, .n_args = n_args, .n_results = n_results};
  jit_status st = jit_compile(ctx, fn, user, &o, &f);
  if (st == JIT_OK)
    st = static_len ? jit_call_static(f, static_args, static_len, in, out) : jit_call(f, in, out);
  bool unset = false;
  for (int i = 0; i < n_results; i++) {
    if (st == JIT_OK && out[i]) results[i] = ot_download(out[i]);
    if (st == JIT_OK && !out[i]) unset = true;
    if (st != JIT_OK && out[i]) unset = true; /* a failed call must not hand out results */
    jit_array_free(out[i]);
  }
  for (int i = 0; i < n_args; i++) jit_array_free(in[i]);
  jit_fn_free(f);
  if (unset) {
    print_error("%s: jit_call returned %s but results are %s\n", name, jit_status_str(st),
                st == JIT_OK ? "missing" : "set");
    fail();
  }
  return st;
}

jit_status ot_run_static(const char *name, jit_trace_fn fn, void *user, const void *static_args,
                         size_t static_len, int n_args, const ot_array *args, int n_results,
                         ot_array *results) {
  return run_on(ot_ctx(), name, fn, user, static_args, static_len, n_args, args, n_results, results);
}

jit_status ot_run_ctx(jit_ctx *ctx, const char *name, jit_trace_fn fn, void *user, int n_args,
                      const ot_array *args, int n_results, ot_array *results) {
  return run_on(ctx, name, fn, user, NULL, 0, n_args, args, n_results, results);
}

void ot_run_both(const char *name, jit_trace_fn fn, void *user, int n_args, const ot_array *args,
                 int n_results, ot_array *results) {
  OT_ASSERT_OK(ot_run(name, fn, user, n_args, args, n_results, results));
  jit_ctx *interp = ot_ctx_with(1, 1, 0);
  assert_non_null(interp);
  OT_ASSERT_OK(ot_run_ctx(interp, name, fn, user, n_args, args, n_results, results + n_results));
  jit_ctx_destroy(interp);
}

jit_status ot_run(const char *name, jit_trace_fn fn, void *user, int n_args, const ot_array *args,
                  int n_results, ot_array *results) {
  return ot_run_static(name, fn, user, NULL, 0, n_args, args, n_results, results);
}

jit_status ot_run_in(jit_ctx *ctx, const char *name, jit_trace_fn fn, void *user, int n_args,
                     const ot_array *args, int n_results, ot_array *results) {
  jit_ctx *saved = shared_ctx;
  shared_ctx = ctx;
  jit_status st = ot_run_static(name, fn, user, NULL, 0, n_args, args, n_results, results);
  shared_ctx = saved;
  return st;
}

/* ---- comparing ----------------------------------------------------------------------------------- */
ot_tol ot_tol_of(jit_dtype dt) {
  switch (dt) {
  case JIT_F64: return (ot_tol){1e-12, 1e-14};
  case JIT_F32: return (ot_tol){1e-6, 1e-6};
  case JIT_F16: return (ot_tol){0x1p-9, 1e-4};   /* 2..4 ulp */
  case JIT_BF16: return (ot_tol){0x1p-6, 1e-4};  /* 2..4 ulp */
  default: return (ot_tol){0, 0};
  }
}

static bool value_ok(jit_dtype dt, double got, double ref, double mag, ot_tol tol, double *bound) {
  *bound = 0;
  if (!ot_is_float(dt)) return got == ref;
  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
  if (isinf(ref) || isinf(got)) return got == ref;
  double scale = fabs(ref) > mag ? fabs(ref) : mag;
  *bound = tol.atol + tol.rtol * scale;
  return fabs(got - ref) <= *bound;
}

bool ot_close(const char *what, const ot_array *got, const ot_array *want, const double *mag,
              ot_tol tol) {
  char s1[128], s2[128];
  if (got->dt != want->dt || got->rank != want->rank ||
      memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)want->rank) != 0) {
    print_error("%s: got %s%s, want %s%s\n", what, jit_dtype_name(got->dt),
                ot_shape_str(got->rank, got->shape, s1, sizeof s1), jit_dtype_name(want->dt),
                ot_shape_str(want->rank, want->shape, s2, sizeof s2));
    return false;
  }
  int64_t bad = 0, first = -1;
  double first_got = 0, first_ref = 0, first_bound = 0;
  for (int64_t i = 0; i < want->n; i++) {
    double ref = ot_round(want->dt, want->v[i]), bound;
    if (!value_ok(want->dt, got->v[i], ref, mag ? fabs(mag[i]) : 0, tol, &bound)) {
      if (bad++ == 0) {
        first = i;
        first_got = got->v[i];
        first_ref = ref;
        first_bound = bound;
      }
    }
  }
  if (bad == 0) return true;
  int64_t idx[JIT_MAX_RANK];
  ot_unravel(first, want->rank, want->shape, idx);
  print_error("%s: %s%s: %lld of %lld elements differ; first at %s: got %.17g, want %.17g "
              "(tolerance %.3g)\n",
              what, jit_dtype_name(want->dt), ot_shape_str(want->rank, want->shape, s1, sizeof s1),
              (long long)bad, (long long)want->n, ot_shape_str(want->rank, idx, s2, sizeof s2),
              first_got, first_ref, first_bound);
  return false;
}

bool ot_equal(const char *what, const ot_array *got, const ot_array *want) {
  return ot_close(what, got, want, NULL, ot_tol_of(want->dt));
}

bool ot_expect_tol(const char *what, ot_array *got, ot_array *want, const double *mag, ot_tol tol) {
  bool ok = ot_close(what, got, want, mag, tol);
  ot_free(got);
  ot_free(want);
  return ok;
}

bool ot_expect(const char *what, ot_array *got, ot_array *want) {
  return ot_expect_tol(what, got, want, NULL, ot_tol_of(want->dt));
}

/* ---- errors -------------------------------------------------------------------------------------- */
bool ot_error_contains(const char *s) {
  const char *msg = jit_last_error();
  if (msg && strstr(msg, s)) return true;
  print_error("last error \"%s\" does not contain \"%s\"\n", msg ? msg : "(null)", s);
  return false;
}

bool ot_error_has(const char *op, const char *file, int line) {
  const char *msg = jit_last_error();
  if (!msg) {
    print_error("jit_last_error() is NULL\n");
    return false;
  }
  if (op && !strstr(msg, op)) {
    print_error("last error \"%s\" does not name \"%s\"\n", msg, op);
    return false;
  }
  if (file && line > 0) {
    char loc[512];
    int n = snprintf(loc, sizeof loc, "%s:%d", file, line);
    const char *p = msg;
    while ((p = strstr(p, loc)) != NULL) {
      if (p[n] < '0' || p[n] > '9') return true; /* not a longer line number */
      p += n;
    }
    print_error("last error \"%s\" does not contain \"%s\"\n", msg, loc);
    return false;
  }
  return true;
}
