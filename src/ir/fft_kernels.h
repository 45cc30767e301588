/* fft_kernels.h: the butterflies and runs of fft_engine.c in one precision, included once with
 * T = float, SFX = _f32 and once with T = double, SFX = _f64 (no other file includes it). Each
 * inner loop runs over S = stride * lanes contiguous elements with restrict pointers, so GCC
 * vectorizes it; CLONES gives AVX2 + FMA and AVX-512 versions chosen when the library loads. The
 * file undefines its parameters at its end. */
#define NAME2(a, b) a##b
#define NAME(a, b) NAME2(a, b)

/* The stages on whole 32-byte vectors, and on single elements for strides that are not. */
typedef T NAME(vec, SFX) __attribute__((vector_size(32), aligned(sizeof(T))));
#define V_ NAME(vec, SFX)
#define W_ ((int64_t)(32 / sizeof(T)))
#define VSFX NAME(SFX, _v)
#include "ir/fft_stages.h"
#undef V_
#undef W_
#undef VSFX
#define V_ T
#define W_ ((int64_t)1)
#define VSFX NAME(SFX, _1)
#include "ir/fft_stages.h"
#undef V_
#undef W_
#undef VSFX

/* The forward DFT of V lanes by p's Stockham stages, x -> y -> x ...; the result ends in x. */
static void NAME(stockham, SFX)(const fft_len *p, int64_t V, T *xr, T *xi, T *yr, T *yi) {
  int64_t S = V;
  for (int s = 0; s < p->n_stages; s++) {
    const fft_stage *st = &p->stages[s];
    const T *twr = st->tw_re, *twi = st->tw_im;
    if (S % (int64_t)(32 / sizeof(T))) {
      if (st->r == 4) NAME(stage4, NAME(SFX, _1))(st->m, S, twr, twi, xr, xi, yr, yi);
      else if (st->r == 2) NAME(stage2, NAME(SFX, _1))(st->m, S, twr, twi, xr, xi, yr, yi);
      else NAME(stage_any, NAME(SFX, _1))(st->r, st->m, S, twr, twi, st->cs, st->sn, xr, xi, yr, yi);
    } else {
      if (st->r == 4) NAME(stage4, NAME(SFX, _v))(st->m, S, twr, twi, xr, xi, yr, yi);
      else if (st->r == 2) NAME(stage2, NAME(SFX, _v))(st->m, S, twr, twi, xr, xi, yr, yi);
      else NAME(stage_any, NAME(SFX, _v))(st->r, st->m, S, twr, twi, st->cs, st->sn, xr, xi, yr, yi);
    }
    T *t = xr; xr = yr; yr = t;
    t = xi; xi = yi; yi = t;
    S *= st->r;
  }
  if (p->n_stages & 1) { /* the result is in the scratch: back into the caller's arrays */
    memcpy(yr, xr, (size_t)(p->n * V) * sizeof(T));
    memcpy(yi, xi, (size_t)(p->n * V) * sizeof(T));
  }
}

/* z *= (cr, ci) elementwise over a row of V lanes. */
CLONES static void NAME(chirp_mul, SFX)(int64_t V, T cr, T ci, const T *ar, const T *ai, T *zr,
                                        T *zi) { /* in place allowed: no restrict */
  for (int64_t v = 0; v < V; v++) {
    T xr = ar[v], xi = ai[v];
    zr[v] = xr * cr - xi * ci;
    zi[v] = xr * ci + xi * cr;
  }
}

/* Bluestein: X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), c_j = exp(-pi i j^2 / n), the sum a
   cyclic convolution of length m done by p->sub (bhat = FFT(conj c) / m, precomputed). */
static void NAME(bluestein, SFX)(const fft_len *p, int64_t V, T *re, T *im, T *s0, T *s1) {
  const T *cr = p->chirp_re, *ci = p->chirp_im, *br = p->bhat_re, *bi = p->bhat_im;
  int64_t n = p->n, m = p->sub->n;
  for (int64_t j = 0; j < n; j++) NAME(chirp_mul, SFX)(V, cr[j], ci[j], re + j * V, im + j * V, s0 + j * V, s1 + j * V);
  memset(s0 + n * V, 0, (size_t)((m - n) * V) * sizeof(T));
  memset(s1 + n * V, 0, (size_t)((m - n) * V) * sizeof(T));
  NAME(stockham, SFX)(p->sub, V, s0, s1, re, im);
  for (int64_t j = 0; j < m; j++) NAME(chirp_mul, SFX)(V, br[j], bi[j], s0 + j * V, s1 + j * V, s0 + j * V, s1 + j * V);
  NAME(stockham, SFX)(p->sub, V, s1, s0, im, re); /* inverse: (re, im) swapped */
  for (int64_t k = 0; k < n; k++) NAME(chirp_mul, SFX)(V, cr[k], ci[k], s0 + k * V, s1 + k * V, re + k * V, im + k * V);
}

static void NAME(run, SFX)(const fft_len *p, int64_t V, T *re, T *im, T *s0, T *s1) {
  if (p->sub) NAME(bluestein, SFX)(p, V, re, im, s0, s1);
  else NAME(stockham, SFX)(p, V, re, im, s0, s1);
}

/* ---- passes of an FFT op (see fft_pass in fft_engine.c): one unit = up to V lanes ---------------- */

#define VEC NAME(vec, SFX)
#define VW ((int64_t)(32 / sizeof(T)))
#define LDV(p) (*(const VEC *)(p))
#define STV(p, v) (*(VEC *)(p) = (v))
typedef ITYPE NAME(mask, SFX) __attribute__((vector_size(32)));
#define MASK NAME(mask, SFX)
/* lanes of a and b picked by the index list (MASK_EVEN etc.: comma lists): GCC's and clang's
   builtins differ (the fuzzers build the library with clang) */
#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (MASK){__VA_ARGS__})
#endif
#define UNIT static inline __attribute__((always_inline))

/* V interleaved complex values at src into re[0..V), im[0..V) (whole vectors by shuffles). */
UNIT void NAME(deint, SFX)(const T *src, int64_t V, T *re, T *im) {
  int64_t v = 0;
  for (; v + VW <= V; v += VW) {
    VEC a = LDV(src + 2 * v), b = LDV(src + 2 * v + VW);
    STV(re + v, SHUF(a, b, MASK_EVEN));
    STV(im + v, SHUF(a, b, MASK_ODD));
  }
  for (; v < V; v++) re[v] = src[2 * v], im[v] = src[2 * v + 1];
}

/* (re, im)[0..V) * (wr, wi) (wr == NULL: the scalar sc) interleaved into dst. */
UNIT void NAME(inter, SFX)(const T *re, const T *im, const T *wr, const T *wi, T sg, T sc, int64_t V, T *dst) {
  int64_t v = 0;
  for (; v + VW <= V; v += VW) {
    VEC r = LDV(re + v), i = LDV(im + v), a, b;
    if (wr) {
      VEC cr = LDV(wr + v), ci = LDV(wi + v) * sg;
      a = r * cr - i * ci, b = r * ci + i * cr;
    } else {
      a = r * sc, b = i * sc;
    }
    STV(dst + 2 * v, SHUF(a, b, MASK_LO));
    STV(dst + 2 * v + VW, SHUF(a, b, MASK_HI));
  }
  for (; v < V; v++) {
    T r = re[v], i = im[v];
    if (wr) dst[2 * v] = r * wr[v] - i * wi[v] * sg, dst[2 * v + 1] = r * wi[v] * sg + i * wr[v];
    else dst[2 * v] = r * sc, dst[2 * v + 1] = i * sc;
  }
}

/* Row r's first complex element and the stride between its elements, in complex elements. */
static inline int64_t NAME(row_base, SFX)(const fft_pass *ps, int64_t r) {
  return (r / ps->B) * ps->n * ps->B + r % ps->B;
}

/* V lanes rounded up to whole vectors; the lanes past V zeroed in re, im ([n][padded]). */
UNIT int64_t NAME(pad_lanes, SFX)(int64_t V, int64_t n, T *re, T *im) {
  const int64_t W = 32 / sizeof(T), P = (V + W - 1) / W * W;
  for (int64_t i = 0; P > V && i < n; i++)
    for (int64_t v = V; v < P; v++) re[i * P + v] = im[i * P + v] = 0;
  return P;
}

/* C2C along an axis: rows r0 .. r0 + V of x, transformed into y (y == x allowed). */
UNIT void NAME(unit_c2c, SFX)(const fft_pass *ps, int64_t r0, int64_t V, const T *x, T *y, T **w) {
  int64_t n = ps->n, B = ps->B;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  int64_t base[MAX_LANES], P = NAME(pad_lanes, SFX)(V, n, re, im);
  for (int64_t v = 0; v < V; v++) base[v] = 2 * NAME(row_base, SFX)(ps, r0 + v);
  /* rows along the last axis are read along each row; columns across the lanes */
  if (B == 1)
    for (int64_t v = 0; v < V; v++)
      for (int64_t i = 0; i < n; i++) re[i * P + v] = x[base[v] + 2 * i], im[i * P + v] = x[base[v] + 2 * i + 1];
  else if (base[V - 1] == base[0] + 2 * (V - 1)) /* the lanes are neighbours along the row */
    for (int64_t i = 0; i < n; i++) NAME(deint, SFX)(x + base[0] + 2 * i * B, V, re + i * P, im + i * P);
  else
    for (int64_t i = 0; i < n; i++)
      for (int64_t v = 0; v < V; v++) re[i * P + v] = x[base[v] + 2 * i * B], im[i * P + v] = x[base[v] + 2 * i * B + 1];
  fft_len_run(ps->len, P, re, im, w[2], w[3], ps->inverse);
  if (B == 1)
    for (int64_t v = 0; v < V; v++)
      for (int64_t i = 0; i < n; i++) y[base[v] + 2 * i] = re[i * P + v] * sc, y[base[v] + 2 * i + 1] = im[i * P + v] * sc;
  else if (base[V - 1] == base[0] + 2 * (V - 1))
    for (int64_t i = 0; i < n; i++) NAME(inter, SFX)(re + i * P, im + i * P, NULL, NULL, 1, sc, V, y + base[0] + 2 * i * B);
  else
    for (int64_t i = 0; i < n; i++)
      for (int64_t v = 0; v < V; v++) y[base[v] + 2 * i * B] = re[i * P + v] * sc, y[base[v] + 2 * i * B + 1] = im[i * P + v] * sc;
}

/* R2C along the last axis: real rows 2v, 2v + 1 of the unit as one complex lane z = a + ib;
   A_k = (Z_k + conj Z_(n-k)) / 2, B_k = (Z_k - conj Z_(n-k)) / 2i for k <= n / 2. */
UNIT void NAME(unit_r2c, SFX)(const fft_pass *ps, int64_t r0, int64_t rows, const T *x, T *y, T **w) {
  int64_t n = ps->n, h = n / 2 + 1, V = (rows + 1) / 2;
  T *re = w[0], *im = w[1];
  int64_t P = NAME(pad_lanes, SFX)(V, n, re, im);
  for (int64_t v = 0; v < V; v++) {
    const T *a = x + (r0 + 2 * v) * n, *b = a + n;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t i = 0; i < n; i++) re[i * P + v] = a[i], im[i * P + v] = has_b ? b[i] : 0;
  }
  fft_len_run(ps->len, P, re, im, w[2], w[3], false);
  for (int64_t v = 0; v < V; v++) {
    T *da = y + 2 * (r0 + 2 * v) * h, *db = da + 2 * h;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t k = 0; k < h; k++) {
      int64_t kk = (n - k) % n;
      T ar = re[k * P + v], ai = im[k * P + v], cr = re[kk * P + v], ci = im[kk * P + v];
      da[2 * k] = (ar + cr) / 2, da[2 * k + 1] = (ai - ci) / 2;
      if (has_b) db[2 * k] = (ai + ci) / 2, db[2 * k + 1] = (cr - ar) / 2;
    }
  }
}

/* C2R along the last axis: Hermitian rows 2v, 2v + 1 (n / 2 + 1 terms, the DC's and even n's
   Nyquist term's imaginary parts dropped) extended to n terms, z = a + ib transformed back. */
UNIT void NAME(unit_c2r, SFX)(const fft_pass *ps, int64_t r0, int64_t rows, const T *x, T *y, T **w) {
  int64_t n = ps->n, h = n / 2 + 1, V = (rows + 1) / 2;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  int64_t P = NAME(pad_lanes, SFX)(V, n, re, im);
  for (int64_t v = 0; v < V; v++) {
    const T *a = x + 2 * (r0 + 2 * v) * h, *b = a + 2 * h;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t k = 0; k < n; k++) {
      int64_t kk = k < h ? k : n - k;
      T sg = k < h ? 1 : -1, keep = kk == 0 || 2 * kk == n ? 0 : 1;
      T ar = a[2 * kk], ai = a[2 * kk + 1] * sg * keep;
      T br = has_b ? b[2 * kk] : 0, bi = has_b ? b[2 * kk + 1] * sg * keep : 0;
      re[k * P + v] = ar - bi, im[k * P + v] = ai + br;
    }
  }
  fft_len_run(ps->len, P, re, im, w[2], w[3], true);
  for (int64_t v = 0; v < V; v++) {
    T *da = y + (r0 + 2 * v) * n, *db = da + n;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t i = 0; i < n; i++) {
      da[i] = re[i * P + v] * sc;
      if (has_b) db[i] = im[i * P + v] * sc;
    }
  }
}

/* Four-step, first half: row a as [n1][n2]; columns j2 .. j2 + V transformed over j1 (length
   n1) and multiplied by w_n^(j2 k1), written in place of the columns into y. */
UNIT void NAME(unit_four1, SFX)(const fft_pass *ps, int64_t a, int64_t j2, int64_t V, const T *x, T *y, T **w) {
  int64_t n1 = ps->n1, n2 = ps->n2;
  T *re = w[0], *im = w[1];
  const T *twr = ps->tw_re, *twi = ps->tw_im;
  x += 2 * a * ps->n;
  y += 2 * a * ps->n;
  int64_t P = NAME(pad_lanes, SFX)(V, n1, re, im);
  /* rows n2 apart: fetched ahead, the hardware's stride prefetch does not follow 1000 streams */
  enum { AHEAD = 8 };
  for (int64_t i = 0; i < n1; i++) {
    if (i + AHEAD < n1) {
      __builtin_prefetch(x + 2 * ((i + AHEAD) * n2 + j2));
      __builtin_prefetch(x + 2 * ((i + AHEAD) * n2 + j2) + 16);
    }
    NAME(deint, SFX)(x + 2 * (i * n2 + j2), V, re + i * P, im + i * P);
  }
  fft_len_run(ps->len, P, re, im, w[2], w[3], ps->inverse);
  T sg = ps->inverse ? -1 : 1;
  for (int64_t k = 0; k < n1; k++) {
    if (k + AHEAD < n1) {
      __builtin_prefetch(twr + (k + AHEAD) * n2 + j2);
      __builtin_prefetch(twi + (k + AHEAD) * n2 + j2);
      __builtin_prefetch(y + 2 * ((k + AHEAD) * n2 + j2), 1);
      __builtin_prefetch(y + 2 * ((k + AHEAD) * n2 + j2) + 16, 1);
    }
    NAME(inter, SFX)(re + k * P, im + k * P, twr + k * n2 + j2, twi + k * n2 + j2, sg, 1, V, y + 2 * (k * n2 + j2));
  }
}

/* Four-step, second half: rows k1 .. k1 + V of row a's [n1][n2] transformed (length n2) and
   stored transposed: X[k1 + n1 k2]. */
UNIT void NAME(unit_four2, SFX)(const fft_pass *ps, int64_t a, int64_t k1, int64_t V, const T *x, T *y, T **w) {
  int64_t n1 = ps->n1, n2 = ps->n2;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  x += 2 * a * ps->n;
  y += 2 * a * ps->n;
  int64_t P = NAME(pad_lanes, SFX)(V, n2, re, im);
  for (int64_t v = 0; v < V; v++) {
    const T *s = x + 2 * (k1 + v) * n2;
    for (int64_t j = 0; j < n2; j++) re[j * P + v] = s[2 * j], im[j * P + v] = s[2 * j + 1];
  }
  fft_len_run(ps->len2, P, re, im, w[2], w[3], ps->inverse);
  for (int64_t k = 0; k < n2; k++) NAME(inter, SFX)(re + k * P, im + k * P, NULL, NULL, 1, sc, V, y + 2 * (k1 + n1 * k));
}

/* Units u0 .. u1 of pass ps. */
CLONES static void NAME(run_units, SFX)(const fft_pass *ps, int64_t u0, int64_t u1, const void *x, void *y, T **w) {
  int64_t L = ps->lanes;
  for (int64_t u = u0; u < u1; u++) {
    switch (ps->kind) {
    case PASS_C2C: {
      int64_t rows = ps->A * ps->B, r0 = u * L;
      NAME(unit_c2c, SFX)(ps, r0, rows - r0 < L ? rows - r0 : L, x, y, w);
      break;
    }
    case PASS_R2C:
    case PASS_C2R: {
      int64_t rows = ps->A, r0 = u * 2 * L, k = rows - r0 < 2 * L ? rows - r0 : 2 * L;
      if (ps->kind == PASS_R2C) NAME(unit_r2c, SFX)(ps, r0, k, x, y, w);
      else NAME(unit_c2r, SFX)(ps, r0, k, x, y, w);
      break;
    }
    case PASS_FOUR1: {
      int64_t per = (ps->n2 + L - 1) / L, a = u / per, j2 = (u % per) * L;
      NAME(unit_four1, SFX)(ps, a, j2, ps->n2 - j2 < L ? ps->n2 - j2 : L, x, y, w);
      break;
    }
    default: {
      int64_t per = (ps->n1 + L - 1) / L, a = u / per, k1 = (u % per) * L;
      NAME(unit_four2, SFX)(ps, a, k1, ps->n1 - k1 < L ? ps->n1 - k1 : L, x, y, w);
      break;
    }
    }
  }
}

#undef VEC
#undef VW
#undef LDV
#undef STV
#undef MASK
#undef SHUF
#undef UNIT
#undef NAME
#undef NAME2
/* the instantiation's parameters, so the next one defines them afresh */
#undef T
#undef SFX
#undef ITYPE
#undef MASK_EVEN
#undef MASK_ODD
#undef MASK_LO
#undef MASK_HI
