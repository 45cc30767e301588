/* fft_kernels.h: the butterflies and runs of fft_engine.c in one precision, included once with
 * T = float, SFX = _f32 and once with T = double, SFX = _f64 (no other file includes it). Each
 * inner loop runs over S = stride * lanes contiguous elements with restrict pointers, so GCC
 * vectorizes it; CLONES gives AVX2 + FMA and AVX-512 versions chosen when the library loads. */
#define NAME2(a, b) a##b
#define NAME(a, b) NAME2(a, b)

/* Radix-4 Stockham stage: y[q + S (4p + k)] = w^(pk) sum_j x[q + S (p + jm)] (-i)^(jk). */
CLONES static void NAME(stage4, SFX)(int64_t m, int64_t S, const T *twr, const T *twi,
                                     const T *restrict xr, const T *restrict xi, T *restrict yr,
                                     T *restrict yi) {
  for (int64_t p = 0; p < m; p++) {
    const T w1r = twr[3 * p], w1i = twi[3 * p], w2r = twr[3 * p + 1], w2i = twi[3 * p + 1];
    const T w3r = twr[3 * p + 2], w3i = twi[3 * p + 2];
    const T *a0r = xr + S * p, *a1r = xr + S * (p + m), *a2r = xr + S * (p + 2 * m), *a3r = xr + S * (p + 3 * m);
    const T *a0i = xi + S * p, *a1i = xi + S * (p + m), *a2i = xi + S * (p + 2 * m), *a3i = xi + S * (p + 3 * m);
    T *b0r = yr + S * 4 * p, *b1r = b0r + S, *b2r = b1r + S, *b3r = b2r + S;
    T *b0i = yi + S * 4 * p, *b1i = b0i + S, *b2i = b1i + S, *b3i = b2i + S;
    for (int64_t q = 0; q < S; q++) {
      T t0r = a0r[q] + a2r[q], t0i = a0i[q] + a2i[q], t1r = a0r[q] - a2r[q], t1i = a0i[q] - a2i[q];
      T t2r = a1r[q] + a3r[q], t2i = a1i[q] + a3i[q], t3r = a1r[q] - a3r[q], t3i = a1i[q] - a3i[q];
      T c1r = t1r + t3i, c1i = t1i - t3r; /* t1 - i t3 */
      T c2r = t0r - t2r, c2i = t0i - t2i;
      T c3r = t1r - t3i, c3i = t1i + t3r; /* t1 + i t3 */
      b0r[q] = t0r + t2r;
      b0i[q] = t0i + t2i;
      b1r[q] = c1r * w1r - c1i * w1i;
      b1i[q] = c1r * w1i + c1i * w1r;
      b2r[q] = c2r * w2r - c2i * w2i;
      b2i[q] = c2r * w2i + c2i * w2r;
      b3r[q] = c3r * w3r - c3i * w3i;
      b3i[q] = c3r * w3i + c3i * w3r;
    }
  }
}

CLONES static void NAME(stage2, SFX)(int64_t m, int64_t S, const T *twr, const T *twi,
                                     const T *restrict xr, const T *restrict xi, T *restrict yr,
                                     T *restrict yi) {
  for (int64_t p = 0; p < m; p++) {
    const T wr = twr[p], wi = twi[p];
    const T *a0r = xr + S * p, *a1r = xr + S * (p + m), *a0i = xi + S * p, *a1i = xi + S * (p + m);
    T *b0r = yr + S * 2 * p, *b1r = b0r + S, *b0i = yi + S * 2 * p, *b1i = b0i + S;
    for (int64_t q = 0; q < S; q++) {
      T dr = a0r[q] - a1r[q], di = a0i[q] - a1i[q];
      b0r[q] = a0r[q] + a1r[q];
      b0i[q] = a0i[q] + a1i[q];
      b1r[q] = dr * wr - di * wi;
      b1i[q] = dr * wi + di * wr;
    }
  }
}

/* Any radix r: b_k = sum_j a_j (cs[jr + k] + i sn[jr + k]), accumulated into y, then twiddled. */
CLONES static void NAME(stage_any, SFX)(int r, int64_t m, int64_t S, const T *twr, const T *twi,
                                        const T *cs, const T *sn, const T *restrict xr,
                                        const T *restrict xi, T *restrict yr, T *restrict yi) {
  for (int64_t p = 0; p < m; p++)
    for (int k = 0; k < r; k++) {
      T *br = yr + S * (r * p + k), *bi = yi + S * (r * p + k);
      for (int64_t q = 0; q < S; q++) br[q] = bi[q] = 0;
      for (int j = 0; j < r; j++) {
        const T c = cs[j * r + k], s = sn[j * r + k];
        const T *ar = xr + S * (p + j * m), *ai = xi + S * (p + j * m);
        for (int64_t q = 0; q < S; q++) {
          br[q] += ar[q] * c - ai[q] * s;
          bi[q] += ar[q] * s + ai[q] * c;
        }
      }
      if (k == 0) continue;
      const T wr = twr[p * (r - 1) + k - 1], wi = twi[p * (r - 1) + k - 1];
      for (int64_t q = 0; q < S; q++) {
        T vr = br[q], vi = bi[q];
        br[q] = vr * wr - vi * wi;
        bi[q] = vr * wi + vi * wr;
      }
    }
}

/* The forward DFT of V lanes by p's Stockham stages, x -> y -> x ...; the result ends in x. */
static void NAME(stockham, SFX)(const fft_len *p, int64_t V, T *xr, T *xi, T *yr, T *yi) {
  int64_t S = V;
  for (int s = 0; s < p->n_stages; s++) {
    const fft_stage *st = &p->stages[s];
    const T *twr = st->tw_re, *twi = st->tw_im;
    if (st->r == 4) NAME(stage4, SFX)(st->m, S, twr, twi, xr, xi, yr, yi);
    else if (st->r == 2) NAME(stage2, SFX)(st->m, S, twr, twi, xr, xi, yr, yi);
    else NAME(stage_any, SFX)(st->r, st->m, S, twr, twi, st->cs, st->sn, xr, xi, yr, yi);
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

/* Row r's first complex element and the stride between its elements, in complex elements. */
static inline int64_t NAME(row_base, SFX)(const fft_pass *ps, int64_t r) {
  return (r / ps->B) * ps->n * ps->B + r % ps->B;
}

/* C2C along an axis: rows r0 .. r0 + V of x, transformed into y (y == x allowed). */
static void NAME(unit_c2c, SFX)(const fft_pass *ps, int64_t r0, int64_t V, const T *x, T *y, T **w) {
  int64_t n = ps->n, B = ps->B;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  int64_t base[MAX_LANES];
  for (int64_t v = 0; v < V; v++) base[v] = 2 * NAME(row_base, SFX)(ps, r0 + v);
  /* rows along the last axis are read along each row; columns across the lanes */
  if (B == 1)
    for (int64_t v = 0; v < V; v++)
      for (int64_t i = 0; i < n; i++) re[i * V + v] = x[base[v] + 2 * i], im[i * V + v] = x[base[v] + 2 * i + 1];
  else
    for (int64_t i = 0; i < n; i++)
      for (int64_t v = 0; v < V; v++) re[i * V + v] = x[base[v] + 2 * i * B], im[i * V + v] = x[base[v] + 2 * i * B + 1];
  fft_len_run(ps->len, V, re, im, w[2], w[3], ps->inverse);
  if (B == 1)
    for (int64_t v = 0; v < V; v++)
      for (int64_t i = 0; i < n; i++) y[base[v] + 2 * i] = re[i * V + v] * sc, y[base[v] + 2 * i + 1] = im[i * V + v] * sc;
  else
    for (int64_t i = 0; i < n; i++)
      for (int64_t v = 0; v < V; v++) y[base[v] + 2 * i * B] = re[i * V + v] * sc, y[base[v] + 2 * i * B + 1] = im[i * V + v] * sc;
}

/* R2C along the last axis: real rows 2v, 2v + 1 of the unit as one complex lane z = a + ib;
   A_k = (Z_k + conj Z_(n-k)) / 2, B_k = (Z_k - conj Z_(n-k)) / 2i for k <= n / 2. */
static void NAME(unit_r2c, SFX)(const fft_pass *ps, int64_t r0, int64_t rows, const T *x, T *y, T **w) {
  int64_t n = ps->n, h = n / 2 + 1, V = (rows + 1) / 2;
  T *re = w[0], *im = w[1];
  for (int64_t v = 0; v < V; v++) {
    const T *a = x + (r0 + 2 * v) * n, *b = a + n;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t i = 0; i < n; i++) re[i * V + v] = a[i], im[i * V + v] = has_b ? b[i] : 0;
  }
  fft_len_run(ps->len, V, re, im, w[2], w[3], false);
  for (int64_t v = 0; v < V; v++) {
    T *da = y + 2 * (r0 + 2 * v) * h, *db = da + 2 * h;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t k = 0; k < h; k++) {
      int64_t kk = (n - k) % n;
      T ar = re[k * V + v], ai = im[k * V + v], cr = re[kk * V + v], ci = im[kk * V + v];
      da[2 * k] = (ar + cr) / 2, da[2 * k + 1] = (ai - ci) / 2;
      if (has_b) db[2 * k] = (ai + ci) / 2, db[2 * k + 1] = (cr - ar) / 2;
    }
  }
}

/* C2R along the last axis: Hermitian rows 2v, 2v + 1 (n / 2 + 1 terms, the DC's and even n's
   Nyquist term's imaginary parts dropped) extended to n terms, z = a + ib transformed back. */
static void NAME(unit_c2r, SFX)(const fft_pass *ps, int64_t r0, int64_t rows, const T *x, T *y, T **w) {
  int64_t n = ps->n, h = n / 2 + 1, V = (rows + 1) / 2;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  for (int64_t v = 0; v < V; v++) {
    const T *a = x + 2 * (r0 + 2 * v) * h, *b = a + 2 * h;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t k = 0; k < n; k++) {
      int64_t kk = k < h ? k : n - k;
      T sg = k < h ? 1 : -1, keep = kk == 0 || 2 * kk == n ? 0 : 1;
      T ar = a[2 * kk], ai = a[2 * kk + 1] * sg * keep;
      T br = has_b ? b[2 * kk] : 0, bi = has_b ? b[2 * kk + 1] * sg * keep : 0;
      re[k * V + v] = ar - bi, im[k * V + v] = ai + br;
    }
  }
  fft_len_run(ps->len, V, re, im, w[2], w[3], true);
  for (int64_t v = 0; v < V; v++) {
    T *da = y + (r0 + 2 * v) * n, *db = da + n;
    bool has_b = 2 * v + 1 < rows;
    for (int64_t i = 0; i < n; i++) {
      da[i] = re[i * V + v] * sc;
      if (has_b) db[i] = im[i * V + v] * sc;
    }
  }
}

/* Four-step, first half: row a as [n1][n2]; columns j2 .. j2 + V transformed over j1 (length
   n1) and multiplied by w_n^(j2 k1), written in place of the columns into y. */
static void NAME(unit_four1, SFX)(const fft_pass *ps, int64_t a, int64_t j2, int64_t V, const T *x, T *y, T **w) {
  int64_t n1 = ps->n1, n2 = ps->n2;
  T *re = w[0], *im = w[1];
  const T *twr = ps->tw_re, *twi = ps->tw_im;
  x += 2 * a * ps->n;
  y += 2 * a * ps->n;
  for (int64_t i = 0; i < n1; i++)
    for (int64_t v = 0; v < V; v++) re[i * V + v] = x[2 * (i * n2 + j2 + v)], im[i * V + v] = x[2 * (i * n2 + j2 + v) + 1];
  fft_len_run(ps->len, V, re, im, w[2], w[3], ps->inverse);
  T sg = ps->inverse ? -1 : 1;
  for (int64_t k = 0; k < n1; k++)
    for (int64_t v = 0; v < V; v++) {
      T vr = re[k * V + v], vi = im[k * V + v];
      T wr = twr[k * n2 + j2 + v], wi = twi[k * n2 + j2 + v] * sg;
      y[2 * (k * n2 + j2 + v)] = vr * wr - vi * wi;
      y[2 * (k * n2 + j2 + v) + 1] = vr * wi + vi * wr;
    }
}

/* Four-step, second half: rows k1 .. k1 + V of row a's [n1][n2] transformed (length n2) and
   stored transposed: X[k1 + n1 k2]. */
static void NAME(unit_four2, SFX)(const fft_pass *ps, int64_t a, int64_t k1, int64_t V, const T *x, T *y, T **w) {
  int64_t n1 = ps->n1, n2 = ps->n2;
  T *re = w[0], *im = w[1], sc = (T)ps->scale;
  x += 2 * a * ps->n;
  y += 2 * a * ps->n;
  for (int64_t v = 0; v < V; v++) {
    const T *s = x + 2 * (k1 + v) * n2;
    for (int64_t j = 0; j < n2; j++) re[j * V + v] = s[2 * j], im[j * V + v] = s[2 * j + 1];
  }
  fft_len_run(ps->len2, V, re, im, w[2], w[3], ps->inverse);
  for (int64_t k = 0; k < n2; k++)
    for (int64_t v = 0; v < V; v++)
      y[2 * (k1 + v + n1 * k)] = re[k * V + v] * sc, y[2 * (k1 + v + n1 * k) + 1] = im[k * V + v] * sc;
}

/* Units u0 .. u1 of pass ps. */
static void NAME(run_units, SFX)(const fft_pass *ps, int64_t u0, int64_t u1, const void *x, void *y, T **w) {
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

#undef NAME
#undef NAME2
