/* fft_stages.h: the Stockham stages of fft_kernels.h on V_ (a 32-byte vector of W_ elements of T,
 * or T itself with W_ = 1 for strides S that are not whole vectors), named with suffix VSFX.
 * Loads and stores are unaligned; q steps over S in W_. Included only by fft_kernels.h. */
#define LD(p) (*(const V_ *)(p))
#define ST(p, v) (*(V_ *)(p) = (v))

/* Radix-4 Stockham stage: y[q + S (4p + k)] = w^(pk) sum_j x[q + S (p + jm)] (-i)^(jk). */
CLONES static void NAME(stage4, VSFX)(int64_t m, int64_t S, const T *twr, const T *twi,
                                     const T *xr, const T *xi, T *yr, T *yi) {
  const int64_t W = W_;
  for (int64_t p = 0; p < m; p++) {
    const T w1r = twr[3 * p], w1i = twi[3 * p], w2r = twr[3 * p + 1], w2i = twi[3 * p + 1];
    const T w3r = twr[3 * p + 2], w3i = twi[3 * p + 2];
    const T *a0r = xr + S * p, *a1r = xr + S * (p + m), *a2r = xr + S * (p + 2 * m), *a3r = xr + S * (p + 3 * m);
    const T *a0i = xi + S * p, *a1i = xi + S * (p + m), *a2i = xi + S * (p + 2 * m), *a3i = xi + S * (p + 3 * m);
    T *b0r = yr + S * 4 * p, *b1r = b0r + S, *b2r = b1r + S, *b3r = b2r + S;
    T *b0i = yi + S * 4 * p, *b1i = b0i + S, *b2i = b1i + S, *b3i = b2i + S;
    for (int64_t q = 0; q < S; q += W) {
      V_ t0r = LD(a0r + q) + LD(a2r + q), t0i = LD(a0i + q) + LD(a2i + q);
      V_ t1r = LD(a0r + q) - LD(a2r + q), t1i = LD(a0i + q) - LD(a2i + q);
      V_ t2r = LD(a1r + q) + LD(a3r + q), t2i = LD(a1i + q) + LD(a3i + q);
      V_ t3r = LD(a1r + q) - LD(a3r + q), t3i = LD(a1i + q) - LD(a3i + q);
      V_ c1r = t1r + t3i, c1i = t1i - t3r; /* t1 - i t3 */
      V_ c2r = t0r - t2r, c2i = t0i - t2i;
      V_ c3r = t1r - t3i, c3i = t1i + t3r; /* t1 + i t3 */
      ST(b0r + q, t0r + t2r);
      ST(b0i + q, t0i + t2i);
      ST(b1r + q, c1r * w1r - c1i * w1i);
      ST(b1i + q, c1r * w1i + c1i * w1r);
      ST(b2r + q, c2r * w2r - c2i * w2i);
      ST(b2i + q, c2r * w2i + c2i * w2r);
      ST(b3r + q, c3r * w3r - c3i * w3i);
      ST(b3i + q, c3r * w3i + c3i * w3r);
    }
  }
}

CLONES static void NAME(stage2, VSFX)(int64_t m, int64_t S, const T *twr, const T *twi,
                                     const T *xr, const T *xi, T *yr, T *yi) {
  const int64_t W = W_;
  for (int64_t p = 0; p < m; p++) {
    const T wr = twr[p], wi = twi[p];
    const T *a0r = xr + S * p, *a1r = xr + S * (p + m), *a0i = xi + S * p, *a1i = xi + S * (p + m);
    T *b0r = yr + S * 2 * p, *b1r = b0r + S, *b0i = yi + S * 2 * p, *b1i = b0i + S;
    for (int64_t q = 0; q < S; q += W) {
      V_ dr = LD(a0r + q) - LD(a1r + q), di = LD(a0i + q) - LD(a1i + q);
      ST(b0r + q, LD(a0r + q) + LD(a1r + q));
      ST(b0i + q, LD(a0i + q) + LD(a1i + q));
      ST(b1r + q, dr * wr - di * wi);
      ST(b1i + q, dr * wi + di * wr);
    }
  }
}

/* Any radix r: b_k = sum_j a_j (cs[jr + k] + i sn[jr + k]), accumulated into y, then twiddled. */
CLONES static void NAME(stage_any, VSFX)(int r, int64_t m, int64_t S, const T *twr, const T *twi,
                                        const T *cs, const T *sn, const T *xr, const T *xi, T *yr,
                                        T *yi) {
  const int64_t W = W_;
  for (int64_t p = 0; p < m; p++)
    for (int k = 0; k < r; k++) {
      T *br = yr + S * (r * p + k), *bi = yi + S * (r * p + k);
      const T wr = k ? twr[p * (r - 1) + k - 1] : 1, wi = k ? twi[p * (r - 1) + k - 1] : 0;
      for (int64_t q = 0; q < S; q += W) {
        V_ accr = {0}, acci = {0};
        for (int j = 0; j < r; j++) {
          const T c = cs[j * r + k], s = sn[j * r + k];
          V_ ar = LD(xr + S * (p + j * m) + q), ai = LD(xi + S * (p + j * m) + q);
          accr += ar * c - ai * s;
          acci += ar * s + ai * c;
        }
        ST(br + q, accr * wr - acci * wi);
        ST(bi + q, accr * wi + acci * wr);
      }
    }
}

#undef LD
#undef ST
