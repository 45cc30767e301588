/* fft_engine.c: plans for one-dimensional FFTs of any length (see fft_engine.h): the factoring
 * into Stockham stages, twiddles (computed in double, stored in the plan's precision) and
 * Bluestein's chirp tables; the butterflies themselves are fft_kernels.h, compiled twice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/fft_engine.h"
#include "ir/ir.h"
#include "runtime/error.h"

/* Not under the sanitizers: an ifunc resolver runs while the dynamic loader relocates the
   program, before ASan's or TSan's runtime is up, and the instrumented resolver crashes there
   (every test of a -DTJIT_TSAN build died in stage4_f32_v's resolver). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#else
#define CLONES
#endif

typedef struct fft_stage {
  int r;               /* radix */
  int64_t m;           /* butterflies' span: the stage's length / r */
  void *tw_re, *tw_im; /* w^(pk), w = exp(-2 pi i / (r m)), at [p (r - 1) + k - 1] */
  void *cs, *sn;       /* radix other than 2 and 4: cos, -sin (2 pi jk / r) at [j r + k] */
} fft_stage;

enum { MAX_STAGES = 64 };
struct fft_len {
  int64_t n;
  bool dbl;
  int n_stages;
  fft_stage stages[MAX_STAGES];
  fft_len *sub;                     /* Bluestein: the power-of-two plan (else NULL) */
  void *chirp_re, *chirp_im;        /* exp(-pi i j^2 / n), n entries */
  void *bhat_re, *bhat_im;          /* FFT(conj chirp) / m, m entries */
};

/* One pass of an FFT op over its whole array: rows of length n transformed along one axis. */
enum { PASS_C2C, PASS_R2C, PASS_C2R, PASS_FOUR1, PASS_FOUR2 };
enum { MAX_LANES = 16 }; /* lanes per unit: 16 floats or 8 doubles fill two AVX2 / one AVX-512 vector */
typedef struct fft_pass {
  int kind;               /* PASS_* */
  bool inverse;
  int src, dst;           /* BUF_X, BUF_OUT, BUF_TMP */
  int64_t A, n, B;        /* the array as [A][n][B] complex (R2C / C2R: A rows of reals / halves) */
  int64_t n1, n2;         /* four-step: n = n1 n2, row as [n1][n2] */
  int64_t lanes;          /* lanes per unit */
  int64_t units;          /* the pass's work items, split over threads */
  double scale;           /* applied as the pass stores (1 / n on the inverse, else 1) */
  fft_len *len, *len2;    /* the transform (four-step: n1 and n2) */
  void *tw_re, *tw_im;    /* four-step: w_n^(j2 k1) at [k1 n2 + j2] */
} fft_pass;
enum { BUF_X, BUF_OUT, BUF_TMP };

/* the shuffles that split interleaved (re, im) vectors and join them back */
#define T float
#define SFX _f32
#define ITYPE int32_t
#define MASK_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#define MASK_ODD 1, 3, 5, 7, 9, 11, 13, 15
#define MASK_LO 0, 8, 1, 9, 2, 10, 3, 11
#define MASK_HI 4, 12, 5, 13, 6, 14, 7, 15
#include "ir/fft_kernels.h"
#define T double
#define SFX _f64
#define ITYPE int64_t
#define MASK_EVEN 0, 2, 4, 6
#define MASK_ODD 1, 3, 5, 7
#define MASK_LO 0, 4, 1, 5
#define MASK_HI 2, 6, 3, 7
#include "ir/fft_kernels.h"

static void *alloc_vals(bool dbl, int64_t n) { return malloc((size_t)(n ? n : 1) * (dbl ? 8 : 4)); }

static void put(bool dbl, void *a, int64_t i, double v) {
  if (dbl) ((double *)a)[i] = v;
  else ((float *)a)[i] = (float)v;
}

void fft_len_free(fft_len *p) {
  if (!p) return;
  for (int s = 0; s < p->n_stages; s++) {
    free(p->stages[s].tw_re);
    free(p->stages[s].tw_im);
    free(p->stages[s].cs);
    free(p->stages[s].sn);
  }
  fft_len_free(p->sub);
  free(p->chirp_re);
  free(p->chirp_im);
  free(p->bhat_re);
  free(p->bhat_im);
  free(p);
}

/* The radices of n (4s first, then 2, then odd primes), or false when a prime factor exceeds
   FFT_MAX_RADIX. */
static bool factor(int64_t n, int *radix, int *count) {
  int c = 0;
  while (n % 4 == 0) radix[c++] = 4, n /= 4;
  while (n % 2 == 0) radix[c++] = 2, n /= 2;
  for (int f = 3; n > 1 && f <= FFT_MAX_RADIX; f += 2)
    while (n % f == 0) radix[c++] = f, n /= f;
  *count = c;
  return n == 1;
}

static bool make_stage(fft_stage *st, bool dbl, int r, int64_t m) {
  st->r = r;
  st->m = m;
  int64_t nt = m * (r - 1), len = m * r;
  st->tw_re = alloc_vals(dbl, nt);
  st->tw_im = alloc_vals(dbl, nt);
  if (!st->tw_re || !st->tw_im) return false;
  for (int64_t p = 0; p < m; p++)
    for (int k = 1; k < r; k++) {
      /* the angle's numerator reduced mod len keeps it exact for long transforms */
      double a = -2.0 * M_PI * (double)((p * k) % len) / (double)len;
      put(dbl, st->tw_re, p * (r - 1) + k - 1, cos(a));
      put(dbl, st->tw_im, p * (r - 1) + k - 1, sin(a));
    }
  if (r == 2 || r == 4) return true;
  st->cs = alloc_vals(dbl, (int64_t)r * r);
  st->sn = alloc_vals(dbl, (int64_t)r * r);
  if (!st->cs || !st->sn) return false;
  for (int j = 0; j < r; j++)
    for (int k = 0; k < r; k++) {
      double a = -2.0 * M_PI * (double)((j * k) % r) / r;
      put(dbl, st->cs, j * r + k, cos(a));
      put(dbl, st->sn, j * r + k, sin(a));
    }
  return true;
}

/* Bluestein's tables for p (length n): chirp, and bhat through a double plan of length m. */
static bool make_bluestein(fft_len *p) {
  int64_t n = p->n, m = 1;
  while (m < 2 * n - 1) m *= 2;
  p->sub = fft_len_new(m, p->dbl);
  fft_len *dp = fft_len_new(m, true);
  double *b = calloc((size_t)m * 4, sizeof *b);
  p->chirp_re = alloc_vals(p->dbl, n);
  p->chirp_im = alloc_vals(p->dbl, n);
  p->bhat_re = alloc_vals(p->dbl, m);
  p->bhat_im = alloc_vals(p->dbl, m);
  bool ok = p->sub && dp && b && p->chirp_re && p->chirp_im && p->bhat_re && p->bhat_im;
  if (ok) {
    double *br = b, *bi = b + m;
    int64_t e = 0; /* j^2 mod 2n, stepped by (j + 1)^2 - j^2 = 2j + 1 */
    for (int64_t j = 0; j < n; j++) {
      double a = -M_PI * (double)e / (double)n, c = cos(a), s = sin(a);
      put(p->dbl, p->chirp_re, j, c);
      put(p->dbl, p->chirp_im, j, s);
      br[j] = c, bi[j] = -s;
      if (j) br[m - j] = c, bi[m - j] = -s;
      e = (e + 2 * j + 1) % (2 * n);
    }
    fft_len_run(dp, 1, br, bi, b + 2 * m, b + 3 * m, false);
    for (int64_t j = 0; j < m; j++) {
      put(p->dbl, p->bhat_re, j, br[j] / (double)m);
      put(p->dbl, p->bhat_im, j, bi[j] / (double)m);
    }
  }
  fft_len_free(dp);
  free(b);
  return ok;
}

fft_len *fft_len_new(int64_t n, bool dbl) {
  fft_len *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->dbl = dbl;
  int radix[MAX_STAGES], count = 0;
  if (!factor(n, radix, &count)) {
    if (!make_bluestein(p)) goto fail;
    return p;
  }
  int64_t len = n;
  for (int s = 0; s < count; s++) {
    p->n_stages = s + 1;
    if (!make_stage(&p->stages[s], dbl, radix[s], len / radix[s])) goto fail;
    len /= radix[s];
  }
  return p;
fail:
  fft_len_free(p);
  return NULL;
}

int64_t fft_len_work(const fft_len *p) { return p->sub ? p->sub->n : p->n; }

void fft_len_run(const fft_len *p, int64_t V, void *re, void *im, void *s0, void *s1, bool inverse) {
  /* the inverse DFT is the forward one with re and im exchanged on the way in and out */
  void *r = inverse ? im : re, *i = inverse ? re : im;
  void *a = inverse ? s1 : s0, *b = inverse ? s0 : s1;
  if (p->dbl) run_f64(p, V, r, i, a, b);
  else run_f32(p, V, r, i, a, b);
}

/* ---- the plan of an FFT op: its passes ------------------------------------------------------------ */

enum { MAX_PASSES = 8 };
struct ir_fft_plan {
  bool dbl;
  int n_passes;
  fft_pass passes[MAX_PASSES];
  int64_t work;        /* the largest fft_len_work of the passes: each thread's scratch per lane */
  size_t tmp_bytes;    /* the run's tmp buffer */
};

/* Four-step above this length on the last axis: its lanes then span the columns, so every
   stage vectorizes and each transform fits in cache. */
enum { FOUR_STEP_MIN = 32768 };

void ir_fft_plan_free(ir_fft_plan *p) {
  if (!p) return;
  for (int k = 0; k < p->n_passes; k++) {
    fft_len_free(p->passes[k].len);
    fft_len_free(p->passes[k].len2);
    free(p->passes[k].tw_re);
    free(p->passes[k].tw_im);
  }
  free(p);
}

static fft_pass *new_pass(ir_fft_plan *p, int kind, bool inverse, int src, int dst) {
  fft_pass *ps = &p->passes[p->n_passes++];
  ps->kind = kind;
  ps->inverse = inverse;
  ps->src = src;
  ps->dst = dst;
  ps->lanes = p->dbl ? MAX_LANES / 2 : MAX_LANES;
  ps->scale = 1;
  return ps;
}

static int64_t prod(const int64_t *d, int from, int to) {
  int64_t v = 1;
  for (int i = from; i < to; i++) v *= d[i];
  return v;
}

static bool note_len(ir_fft_plan *p, fft_len *l) {
  if (!l) return false;
  if (fft_len_work(l) > p->work) p->work = fft_len_work(l);
  return true;
}

/* The largest divisor of n at most sqrt(n) when it is at least 64 (else 0). */
static int64_t four_step_split(int64_t n) {
  int64_t best = 0;
  for (int64_t d = 64; d * d <= n; d++)
    if (n % d == 0) best = d;
  return best;
}

static bool add_four_step(ir_fft_plan *p, int64_t A, int64_t n, int64_t n1, bool inverse, int src, int dst) {
  int64_t n2 = n / n1;
  fft_pass *a = new_pass(p, PASS_FOUR1, inverse, src, BUF_TMP);
  a->A = A, a->n = n, a->n1 = n1, a->n2 = n2;
  a->units = A * ((n2 + a->lanes - 1) / a->lanes);
  if (!note_len(p, a->len = fft_len_new(n1, p->dbl))) return false;
  a->tw_re = alloc_vals(p->dbl, n);
  a->tw_im = alloc_vals(p->dbl, n);
  if (!a->tw_re || !a->tw_im) return false;
  for (int64_t k = 0; k < n1; k++)
    for (int64_t j = 0; j < n2; j++) {
      double ang = -2.0 * M_PI * (double)((k * j) % n) / (double)n;
      put(p->dbl, a->tw_re, k * n2 + j, cos(ang));
      put(p->dbl, a->tw_im, k * n2 + j, sin(ang));
    }
  fft_pass *b = new_pass(p, PASS_FOUR2, inverse, BUF_TMP, dst);
  b->A = A, b->n = n, b->n1 = n1, b->n2 = n2;
  b->units = A * ((n1 + b->lanes - 1) / b->lanes);
  b->scale = inverse ? 1.0 / (double)n : 1;
  return note_len(p, b->len2 = fft_len_new(n2, p->dbl));
}

/* A complex transform along axis ax of the complex array of dims d (rank r). */
static bool add_c2c(ir_fft_plan *p, const int64_t *d, int r, int ax, bool inverse, int src, int dst) {
  int64_t A = prod(d, 0, ax), n = d[ax], B = prod(d, ax + 1, r);
  int64_t n1 = ax == r - 1 && n >= FOUR_STEP_MIN ? four_step_split(n) : 0;
  if (n1) return add_four_step(p, A, n, n1, inverse, src, dst);
  fft_pass *ps = new_pass(p, PASS_C2C, inverse, src, dst);
  ps->A = A, ps->n = n, ps->B = B;
  ps->units = (A * B + ps->lanes - 1) / ps->lanes;
  ps->scale = inverse ? 1.0 / (double)n : 1;
  return note_len(p, ps->len = fft_len_new(n, p->dbl));
}

/* A real <-> half-complex transform along the last axis of A rows of length n. */
static bool add_real(ir_fft_plan *p, int kind, int64_t A, int64_t n, int src, int dst) {
  fft_pass *ps = new_pass(p, kind, kind == PASS_C2R, src, dst);
  ps->A = A, ps->n = n, ps->B = 1;
  ps->units = (A + 2 * ps->lanes - 1) / (2 * ps->lanes);
  ps->scale = kind == PASS_C2R ? 1.0 / (double)n : 1;
  return note_len(p, ps->len = fft_len_new(n, p->dbl));
}

jit_status ir_fft_plan_new(const ir_fft *a, const ir_type *xt, const ir_type *ot, ir_fft_plan **out) {
  *out = NULL;
  ir_fft_plan *p = calloc(1, sizeof *p);
  if (!p) return jit_error(JIT_ENOMEM, "fft: out of memory");
  /* the complex side's dims (its pair axis dropped): the operand's for FFT, IFFT, IRFFT */
  bool real_in = a->type == IR_RFFT_R2C, real_out = a->type == IR_IRFFT_C2R;
  const ir_type *ct = real_in ? ot : xt;
  int r = ct->rank - 1, nd = a->n_dims;
  int64_t d[IR_MAX_RANK];
  for (int i = 0; i < r; i++) d[i] = ct->dims[i];
  p->dbl = (real_in ? xt : ot)->dtype == JIT_F64 || ct->dtype == JIT_F64;
  bool ok = true;
  if (prod(d, 0, r) == 0 || r < nd) {
    /* nothing to transform */
  } else if (a->type == IR_FFT_C2C || a->type == IR_IFFT_C2C) {
    bool inv = a->type == IR_IFFT_C2C;
    for (int ax = r - 1; ok && ax >= r - nd; ax--)
      ok = add_c2c(p, d, r, ax, inv, ax == r - 1 ? BUF_X : BUF_OUT, BUF_OUT);
  } else if (real_in) {
    ok = add_real(p, PASS_R2C, prod(d, 0, r - 1), a->lengths[nd - 1], BUF_X, BUF_OUT);
    for (int ax = r - 2; ok && ax >= r - nd; ax--) ok = add_c2c(p, d, r, ax, false, BUF_OUT, BUF_OUT);
  } else if (real_out) {
    for (int ax = r - 2; ok && ax >= r - nd; ax--)
      ok = add_c2c(p, d, r, ax, true, ax == r - 2 ? BUF_X : BUF_TMP, BUF_TMP);
    if (ok) ok = add_real(p, PASS_C2R, prod(d, 0, r - 1), a->lengths[nd - 1], nd > 1 ? BUF_TMP : BUF_X, BUF_OUT);
  }
  /* tmp: the four-step's intermediate (the whole complex array) or IRFFT's complex passes */
  size_t el = p->dbl ? 8 : 4;
  p->tmp_bytes = (size_t)prod(d, 0, r) * 2 * el;
  if (!ok) {
    ir_fft_plan_free(p);
    return jit_error(JIT_ENOMEM, "fft: out of memory");
  }
  *out = p;
  return JIT_OK;
}

int ir_fft_plan_passes(const ir_fft_plan *p) { return p->n_passes; }
size_t ir_fft_plan_tmp_bytes(const ir_fft_plan *p) { return p->tmp_bytes; }
int64_t ir_fft_plan_units(const ir_fft_plan *p, int pass) { return p->passes[pass].units; }

size_t ir_fft_plan_scratch_bytes(const ir_fft_plan *p) {
  return 4 * (size_t)(p->work * (p->dbl ? MAX_LANES / 2 : MAX_LANES)) * (p->dbl ? 8 : 4);
}

void ir_fft_plan_run(const ir_fft_plan *p, int pass, const void *x, void *out, void *tmp,
                     void *scratch, int ith, int nth) {
  const fft_pass *ps = &p->passes[pass];
  int64_t u0 = ps->units * ith / nth, u1 = ps->units * (ith + 1) / nth;
  if (u0 >= u1) return;
  size_t one = ir_fft_plan_scratch_bytes(p) / 4;
  unsigned char *w = scratch;
  void *bufs[3] = {(void *)x, out, tmp};
  if (p->dbl) {
    double *ws[4] = {(double *)w, (double *)(w + one), (double *)(w + 2 * one), (double *)(w + 3 * one)};
    run_units_f64(ps, u0, u1, bufs[ps->src], bufs[ps->dst], ws);
  } else {
    float *ws[4] = {(float *)w, (float *)(w + one), (float *)(w + 2 * one), (float *)(w + 3 * one)};
    run_units_f32(ps, u0, u1, bufs[ps->src], bufs[ps->dst], ws);
  }
}
