/* gemm_skinny.c: dots of up to two strips of columns on AVX-512 without packing (gemm_skinny.h).
 * Compiled with a target attribute as gemm_core.c is, and called only from its entries, which
 * run only where the host has AVX-512F.
 */
#include "codegen/gemm_skinny.h"

#include <immintrin.h>

#define SKINNY __attribute__((target("avx512f,avx2,fma")))

enum {
  SK_MR = 6,    /* rows of a tile: 6 x 4 = 24 accumulators, 4 rhs vectors and a broadcast */
  SK_NV = 4,    /* vectors across a tile: 2 NR columns */
  SK_KB = 128,  /* k of a pass: 128 rhs rows of 2 NR = 32 KiB, read from L1 by every tile */
  SK_ROWS = 48, /* rows of a group (8 tiles), whose sums (12 KiB) wait between passes */
};

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

bool gemm_skinny_applies(const gemm_core_plan *p, int es) {
  if (p->vec_bytes != 64 || (es != 4 && es != 8)) return false;
  int64_t nr = GEMM_CORE_NR(64, es);
  return p->N <= 2 * nr && p->K > 0 && p->M > 0 && p->B > 0 && p->kc > 0 &&
         (p->lhs_ks == 1 || p->lhs_ms == 1) && p->rhs_ns == 1;
}

/* PASS: kn steps of k for one tile of `rows` rows and nv vectors (lhs element (i, k) at
   a + i * lda + k * lks: lks 1, or a transposed lhs (x^T dy: lda 1), rhs row k at b + k * ldb, the lanes of its last vector in `last`), its accumulators taken from
   and left in sums (SK_MR x SK_NV vectors; from zero when !cont). Rows past `rows` read row 0
   and are not used.
   FINISH: the tile's sums of a finished K block into the output: plus the earlier blocks' sums
   when !first, then through the epilogue (NR columns at a time, as the packed core's tiles) or
   stored. */
/* pass_'s cases for nv vectors across: masked or not, lhs k stride 1 (a constant) or not */
#define SKINNY_CASE(SUF, NV, MASKED, STRIDED)                                                      \
  case NV * 4 + MASKED * 2 + STRIDED:                                                              \
    pass_of_##SUF(NV, MASKED, kn, a, lda, STRIDED ? lks : 1, b, ldb, last, rows, sums, cont);      \
    break;
#define SKINNY_CASES(SUF, NV)                                                                      \
  SKINNY_CASE(SUF, NV, 0, 0) SKINNY_CASE(SUF, NV, 0, 1) SKINNY_CASE(SUF, NV, 1, 0)               \
  SKINNY_CASE(SUF, NV, 1, 1)

#define DEFINE_SKINNY(T, SUF, V, W, MASK, LOADU, MASKZ_LOADU, STOREU, MASK_STOREU, SET1, FMADD,    \
                      ADD, ZERO)                                                                   \
  SKINNY static inline __attribute__((always_inline)) void pass_of_##SUF(                         \
      const int nv, const int masked, int64_t kn, const T *a, int64_t lda, const int64_t lks,      \
      const T *b, int64_t ldb, MASK last, int rows, T *restrict sums, int cont) {                  \
    const T *ar[SK_MR];                                                                            \
    for (int i = 0; i < SK_MR; i++) ar[i] = a + (i < rows ? i : 0) * lda;                          \
    V c[SK_MR][SK_NV];                                                                             \
    _Pragma("GCC unroll 6") for (int i = 0; i < SK_MR; i++)                                        \
      _Pragma("GCC unroll 4") for (int j = 0; j < nv; j++)                                         \
        c[i][j] = cont ? LOADU(sums + (i * SK_NV + j) * W) : ZERO();                               \
    _Pragma("GCC unroll 4") for (int64_t k = 0; k < kn; k++) {                                     \
      const T *bk = b + k * ldb;                                                                   \
      V bv[SK_NV];                                                                                 \
      _Pragma("GCC unroll 4") for (int j = 0; j < nv; j++)                                         \
        bv[j] = j < nv - 1 || !masked ? LOADU(bk + j * W) : MASKZ_LOADU(last, bk + j * W);         \
      _Pragma("GCC unroll 6") for (int i = 0; i < SK_MR; i++) {                                    \
        V ai = SET1(ar[i][k * lks]);                                                               \
        _Pragma("GCC unroll 4") for (int j = 0; j < nv; j++) c[i][j] = FMADD(ai, bv[j], c[i][j]);  \
      }                                                                                            \
    }                                                                                              \
    _Pragma("GCC unroll 6") for (int i = 0; i < SK_MR; i++)                                        \
      _Pragma("GCC unroll 4") for (int j = 0; j < nv; j++)                                         \
        STOREU(sums + (i * SK_NV + j) * W, c[i][j]);                                               \
  }                                                                                                \
  /* 1 to 4 vectors across (as N needs): no multiply-adds of a vector of zeros; the last         \
     vector unmasked when the columns fill it (GCC moved the mask into k2 every k step, on a port  \
     the FMAs use: W6's dot on one thread 1.75 -> 1.68 ms with this and the k loop unrolled); an   \
     lhs k stride of 1 as a constant, so only a transposed lhs pays for its multiply */            \
  SKINNY static void pass_##SUF(int nv, int64_t kn, const T *a, int64_t lda, int64_t lks,         \
                                const T *b, int64_t ldb, MASK last, int rows, T *restrict sums,    \
                                int cont) {                                                        \
    int masked = last != (MASK)~0;                                                                 \
    switch (nv * 4 + masked * 2 + (lks != 1)) {                                                    \
      SKINNY_CASES(SUF, 4)                                                                         \
      SKINNY_CASES(SUF, 3)                                                                         \
      SKINNY_CASES(SUF, 2)                                                                         \
      SKINNY_CASES(SUF, 1)                                                                         \
    }                                                                                              \
  }                                                                                                \
  SKINNY static void finish_##SUF(const gemm_core_plan *p, void *const *bufs, const T *sums,     \
                                  int nv, MASK last, int rows, T *out, int64_t row, int first,     \
                                  gemm_core_epi epi) {                                             \
    /* for the epilogue, the packed core's tiles: MR512 rows of NR, one a strip, past N zero */    \
    _Alignas(64) T tile[2][GEMM_CORE512_MR * 2 * W];                                               \
    for (int i = 0; i < rows; i++)                                                                 \
      for (int j = 0; j < SK_NV; j++) {                                                            \
        T *t = tile[j / 2] + (i * 2 + j % 2) * W, *o = out + i * p->out_ld + j * W;                \
        if (j >= nv) {                                                                             \
          if (epi) STOREU(t, ZERO());                                                              \
          continue;                                                                                \
        }                                                                                          \
        MASK m = j == nv - 1 ? last : (MASK)~0;                                                    \
        V v = LOADU(sums + (i * SK_NV + j) * W);                                                   \
        if (!first) v = ADD(v, MASKZ_LOADU(m, o));                                                 \
        if (epi) STOREU(t, v);                                                                     \
        else MASK_STOREU(o, m, v);                                                                 \
      }                                                                                            \
    if (epi) { /* column order within each row, as the packed core: a reducing epilogue's sum */  \
      epi(bufs, tile[0], row, rows, 0);                                                            \
      if (nv > 2) epi(bufs, tile[1], row, rows, 2 * W); /* the packed core's strips: up to N */  \
    }                                                                                              \
  }                                                                                                \
  void gemm_skinny_##SUF(const gemm_core_plan *p, void *const *bufs, int64_t rb, int64_t re,      \
                         gemm_core_epi epi) {                                                      \
    const T *lhs = bufs[p->lhs_buf], *rhs = bufs[p->rhs_buf];                                      \
    T *out = bufs[p->out_buf];                                                                     \
    int nv = (int)((p->N + W - 1) / W);                                                            \
    MASK last = (MASK)(~0ull >> (64 - (p->N - (nv - 1) * W)));                                     \
    _Alignas(64) T sums[SK_ROWS / SK_MR][SK_MR * SK_NV * W];                                       \
    for (int64_t r = rb; r < re;) {                                                                \
      int64_t bi = r / p->M, brow = bi * p->M, m1 = min64(p->M, re - brow);                        \
      const T *lhs_b = lhs + bi * p->lhs_bs, *rhs_b = rhs + bi * p->rhs_bs;                        \
      T *out_b = out + bi * p->out_bs;                                                             \
      for (int64_t g = r - brow; g < m1; g += SK_ROWS) {                                           \
        int64_t g1 = min64(g + SK_ROWS, m1);                                                       \
        for (int64_t pc = 0; pc < p->K; pc += p->kc) {                                             \
          int64_t kc = min64(p->kc, p->K - pc);                                                    \
          gemm_core_epi last_epi = pc + p->kc >= p->K ? epi : NULL;                                \
          for (int64_t k0 = 0; k0 < kc; k0 += SK_KB) {                                             \
            int64_t kn = min64(SK_KB, kc - k0);                                                    \
            for (int64_t i = g; i < g1; i += SK_MR) {                                              \
              int rows = (int)min64(SK_MR, g1 - i);                                                \
              T *s = sums[(i - g) / SK_MR];                                                        \
              pass_##SUF(nv, kn, lhs_b + i * p->lhs_ms + (pc + k0) * p->lhs_ks, p->lhs_ms,         \
                         p->lhs_ks, rhs_b + (pc + k0) * p->rhs_ks, p->rhs_ks, last, rows, s,       \
                         k0 > 0);                                                                  \
              if (k0 + kn == kc)                                                                   \
                finish_##SUF(p, bufs, s, nv, last, rows, out_b + i * p->out_ld, brow + i,          \
                             pc == 0, last_epi);                                                   \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
      r = brow + m1;                                                                               \
    }                                                                                              \
  }

DEFINE_SKINNY(float, f32, __m512, 16, __mmask16, _mm512_loadu_ps, _mm512_maskz_loadu_ps,
              _mm512_storeu_ps, _mm512_mask_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps,
              _mm512_add_ps, _mm512_setzero_ps)
DEFINE_SKINNY(double, f64, __m512d, 8, __mmask8, _mm512_loadu_pd, _mm512_maskz_loadu_pd,
              _mm512_storeu_pd, _mm512_mask_storeu_pd, _mm512_set1_pd, _mm512_fmadd_pd,
              _mm512_add_pd, _mm512_setzero_pd)
