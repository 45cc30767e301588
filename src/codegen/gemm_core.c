/* gemm_core.c: the precompiled matmul core for AVX2 + FMA and for AVX-512 (see gemm_core.h):
 * matmul.h's loops (jc over NC panels, pc over KC blocks, ic over MC blocks, the MR x NR register
 * tile) with packers that read the operands through their strides. Compiled with target attributes, not
 * with the build's flags, so the library still runs on hosts without AVX2 (the runtime only
 * calls it where gemm_core_runs_here), and with no ifunc resolver (which ran before
 * ThreadSanitizer's runtime was up, see fft_engine.c).
 */
#include "codegen/gemm_core.h"

#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "codegen/gemm_amx.h"
#include "codegen/gemm_skinny.h"
#include "ir/ir.h"

#define CORE __attribute__((target("avx2,fma")))
/* the 512-bit core's tiles, micro-kernels and loops; its packers are the AVX2 ones (a subset) */
#define CORE512 __attribute__((target("avx512f,avx2,fma")))
#define CORE512BF __attribute__((target("avx512f,avx512bf16,avx2,fma")))
#define MR GEMM_CORE_MR
#define MR512 GEMM_CORE512_MR

_Static_assert(sizeof(gemm_core_plan) == GEMM_CORE_PLAN_FIELDS * sizeof(int64_t),
               "the generated code passes the plan as an array of i64");

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

bool gemm_core_runs_here(int vector_bytes) {
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return vector_bytes == 64 ? avx2 && __builtin_cpu_supports("avx512f") : vector_bytes == 32 && avx2;
}

bool gemm_core_pairs_run_here(void) {
  return gemm_core_runs_here(64) && __builtin_cpu_supports("avx512bf16");
}

/* Packers, as the generated ones: the rhs KC x NC panel into NR-wide strips (strip j0 at
   j0 * kc, row k of it at k * NR), the lhs MC x KC block into MR-tall strips (strip i0 at
   i0 * kc, column k at k * MR); edges zero-padded so the micro-kernel always runs whole tiles.
   One packer does both: `n` elements across the strips at stride `ws`, kc along them at stride
   `ks`, strips W wide. src is the panel's (block's) first element.
   Three cases by the source's layout. Rows along the strips (ws == 1): each of the kc rows is
   read once, front to back, and dealt out to the strips; reading a strip at a time touched a new
   row, so a new page, on every access, and was a tenth of a large GEMM's time. Strips along k
   (ks == 1, a transposed operand): 8 x 8 (f32) or 4 x 4 (f64) blocks transposed in registers.
   Anything else element by element. */
#define DEFINE_PACK_ROWS(T, S, WIDEN, COPY, NAME, W)                                              \
  CORE static void NAME(T *restrict dst, const S *restrict src, int64_t ks, int64_t kc,           \
                        int64_t n) {                                                               \
    int64_t full = n - n % W;                                                                      \
    for (int64_t k = 0; k < kc; k++) {                                                             \
      const S *s = src + k * ks;                                                                   \
      T *d = dst + k * W;                                                                          \
      for (int64_t j0 = 0; j0 < full; j0 += W) COPY(d + j0 * kc, s + j0, W);                      \
      if (full < n)                                                                                \
        for (int64_t j = 0; j < W; j++) d[full * kc + j] = j < n - full ? WIDEN(s[full + j]) : 0;  \
    }                                                                                              \
  }

#define AS_IS(x) (x)
#define COPY_F32(d, s, w) memcpy(d, s, (w) * sizeof(float))
#define COPY_F64(d, s, w) memcpy(d, s, (w) * sizeof(double))

DEFINE_PACK_ROWS(float, float, AS_IS, COPY_F32, pack_rows_f32_16, 16)
DEFINE_PACK_ROWS(float, float, AS_IS, COPY_F32, pack_rows_f32_6, MR)
DEFINE_PACK_ROWS(double, double, AS_IS, COPY_F64, pack_rows_f64_8, 8)
DEFINE_PACK_ROWS(double, double, AS_IS, COPY_F64, pack_rows_f64_6, MR)
DEFINE_PACK_ROWS(float, float, AS_IS, COPY_F32, pack_rows_f32_32, 32)
DEFINE_PACK_ROWS(float, float, AS_IS, COPY_F32, pack_rows_f32_8, 8)
DEFINE_PACK_ROWS(double, double, AS_IS, COPY_F64, pack_rows_f64_16, 16)

/* r[j] = row j (8 floats along k) in, r[i] = column i out (element j from row j). */
CORE static inline void transpose8_f32(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The same for 4 x 4 doubles. */
CORE static inline void transpose4_f64(__m256d r[4]) {
  __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t0, t2, 0x20), r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  r[2] = _mm256_permute2f128_pd(t0, t2, 0x31), r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* 8 bf16 widened to the floats they are (a bf16 is the upper half of its float) */
CORE static inline __m256 widen8_bf16(const uint16_t *s) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Whole strips of a transposed source of S (f32, or bf16 widened as loaded), k in steps of the
   transpose (the rest of kc after them element by element): f32 strips of 8, 16 or 32 are 8-row
   blocks, of MR = 6 one block with two rows of zeros whose columns are stored 4 + 2 wide (an
   8-wide store would run past the block). */
#define DEFINE_PACK_COLS_F32(NAME, S, LOAD8)                                                       \
  CORE static int64_t NAME(float *restrict dst, const S *restrict s, int64_t ws, int64_t kc,       \
                           int W) {                                                                \
    int64_t k = 0;                                                                                 \
    for (; k + 8 <= kc; k += 8)                                                                    \
      for (int h = 0; h < W; h += 8) {                                                             \
        __m256 r[8];                                                                               \
        for (int j = 0; j < 8; j++)                                                                \
          r[j] = h + j < W ? LOAD8(s + (h + j) * ws + k) : _mm256_setzero_ps();                    \
        transpose8_f32(r);                                                                         \
        for (int i = 0; i < 8; i++) {                                                              \
          float *d = dst + (k + i) * W + h;                                                        \
          if (W - h >= 8) {                                                                        \
            _mm256_storeu_ps(d, r[i]);                                                             \
          } else {                                                                                 \
            _mm_storeu_ps(d, _mm256_castps256_ps128(r[i]));                                        \
            _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(r[i], 1));                       \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    return k;                                                                                      \
  }

DEFINE_PACK_COLS_F32(pack_cols_f32, float, _mm256_loadu_ps)
DEFINE_PACK_COLS_F32(pack_cols_bf16, uint16_t, widen8_bf16)

CORE static int64_t pack_cols_f64(double *restrict dst, const double *restrict s, int64_t ws,
                                  int64_t kc, int W) {
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4)
    for (int h = 0; h < W; h += 4) {
      if (W - h == 2) { /* MR = 6: rows 4 and 5, two by two */
        __m256d a = _mm256_loadu_pd(s + h * ws + k), b = _mm256_loadu_pd(s + (h + 1) * ws + k);
        __m256d lo = _mm256_unpacklo_pd(a, b), hi = _mm256_unpackhi_pd(a, b);
        _mm_storeu_pd(dst + k * W + h, _mm256_castpd256_pd128(lo));
        _mm_storeu_pd(dst + (k + 1) * W + h, _mm256_castpd256_pd128(hi));
        _mm_storeu_pd(dst + (k + 2) * W + h, _mm256_extractf128_pd(lo, 1));
        _mm_storeu_pd(dst + (k + 3) * W + h, _mm256_extractf128_pd(hi, 1));
        continue;
      }
      __m256d r[4];
      for (int j = 0; j < 4; j++) r[j] = _mm256_loadu_pd(s + (h + j) * ws + k);
      transpose4_f64(r);
      for (int i = 0; i < 4; i++) _mm256_storeu_pd(dst + (k + i) * W + h, r[i]);
    }
  return k;
}

/* w bf16 widened into floats: vectors of 8, then one by one */
CORE static inline void widen_bf16(float *d, const uint16_t *s, int w) {
  int j = 0;
  for (; j + 8 <= w; j += 8) _mm256_storeu_ps(d + j, widen8_bf16(s + j));
  for (; j < w; j++) d[j] = ir_bf16_to_f32(s[j]);
}

DEFINE_PACK_ROWS(float, uint16_t, ir_bf16_to_f32, widen_bf16, pack_rows_bf16_16, 16)
DEFINE_PACK_ROWS(float, uint16_t, ir_bf16_to_f32, widen_bf16, pack_rows_bf16_6, MR)
DEFINE_PACK_ROWS(float, uint16_t, ir_bf16_to_f32, widen_bf16, pack_rows_bf16_32, 32)
DEFINE_PACK_ROWS(float, uint16_t, ir_bf16_to_f32, widen_bf16, pack_rows_bf16_8, 8)

/* A packer of T strips from a source of S, each element WIDEN'd (bf16 to f32, or AS_IS). */
#define DEFINE_PACKER(T, S, WIDEN, NAME, W, ROWS, COLS)                                            \
  CORE static void NAME(T *restrict dst, const S *restrict src, int64_t ws, int64_t ks,            \
                        int64_t kc, int64_t n) {                                                   \
    if (ws == 1) {                                                                                 \
      ROWS(dst, src, ks, kc, n);                                                                   \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t j0 = 0; j0 < n; j0 += W, dst += kc * W) {                                         \
      int64_t w = min64(W, n - j0), k = 0;                                                         \
      const S *s = src + j0 * ws;                                                                  \
      if (ks == 1 && w == W) k = COLS(dst, s, ws, kc, W);                                          \
      for (; k < kc; k++)                                                                          \
        for (int64_t j = 0; j < W; j++) dst[k * W + j] = j < w ? WIDEN(s[j * ws + k * ks]) : 0;   \
    }                                                                                              \
  }

DEFINE_PACKER(float, float, AS_IS, pack_rhs_f32, 16, pack_rows_f32_16, pack_cols_f32)
DEFINE_PACKER(float, float, AS_IS, pack_lhs_f32, MR, pack_rows_f32_6, pack_cols_f32)
DEFINE_PACKER(double, double, AS_IS, pack_rhs_f64, 8, pack_rows_f64_8, pack_cols_f64)
DEFINE_PACKER(double, double, AS_IS, pack_lhs_f64, MR, pack_rows_f64_6, pack_cols_f64)
DEFINE_PACKER(float, uint16_t, ir_bf16_to_f32, pack_rhs_bf16, 16, pack_rows_bf16_16, pack_cols_bf16)
DEFINE_PACKER(float, uint16_t, ir_bf16_to_f32, pack_lhs_bf16, MR, pack_rows_bf16_6, pack_cols_bf16)
/* the 512-bit core's: MR512 = 8 rows, strips of 2 zmm */
DEFINE_PACKER(float, float, AS_IS, pack_rhs_f32_512, 32, pack_rows_f32_32, pack_cols_f32)
DEFINE_PACKER(float, float, AS_IS, pack_lhs_f32_512, MR512, pack_rows_f32_8, pack_cols_f32)
DEFINE_PACKER(double, double, AS_IS, pack_rhs_f64_512, 16, pack_rows_f64_16, pack_cols_f64)
DEFINE_PACKER(double, double, AS_IS, pack_lhs_f64_512, MR512, pack_rows_f64_8, pack_cols_f64)
DEFINE_PACKER(float, uint16_t, ir_bf16_to_f32, pack_rhs_bf16_512, 32, pack_rows_bf16_32,
              pack_cols_bf16)
DEFINE_PACKER(float, uint16_t, ir_bf16_to_f32, pack_lhs_bf16_512, MR512, pack_rows_bf16_8,
              pack_cols_bf16)

/* k steps of a micro-kernel: one per k, or one per pair of k (vdpbf16ps), or pairs in whole
   AMX tiles of 16 (the strips' tail zero pairs) */
#define KSTEPS_1(kc) (kc)
#define KSTEPS_PAIRS(kc) (((kc) + 1) / 2)
#define KSTEPS_AMX(kc) ((KSTEPS_PAIRS(kc) + GEMM_AMX_KPAIRS - 1) / GEMM_AMX_KPAIRS * GEMM_AMX_KPAIRS)

/* bf16 pairs for vdpbf16ps: element (k, j) of a strip W wide goes to the half k % 2 (low: even k)
   of the uint32 at (k / 2) * W + j, an odd kc's last pair with a zero high half; strip j0 at
   j0 * ceil(kc / 2). Rows along the strips (ws == 1, the usual rhs) interleave two rows at a
   time; pairs along k (ks == 1, the usual lhs) are 32-bit elements already, whose 8 x 8 blocks
   transpose as floats do; anything else element by element. */
static inline uint32_t pair_of(const uint16_t *s, int64_t ks, int64_t k, int64_t kc) {
  return s[k * ks] | (k + 1 < kc ? (uint32_t)s[(k + 1) * ks] << 16 : 0);
}

CORE static void pack_pairs(uint32_t *restrict dst, const uint16_t *restrict src, int64_t ws,
                            int64_t ks, int64_t kc, int64_t n, int W, int64_t kps) {
  int64_t kp = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += W, dst += kps * W) {
    int64_t w = min64(W, n - j0), q = 0;
    const uint16_t *s = src + j0 * ws;
    if (ws == 1 && w == W && W % 16 == 0) {
      for (; q < kp; q++) {
        const uint16_t *r0 = s + 2 * q * ks, *r1 = 2 * q + 1 < kc ? r0 + ks : NULL;
        for (int h = 0; h < W; h += 16) {
          __m256i a = _mm256_loadu_si256((const __m256i *)(r0 + h));
          __m256i b = r1 ? _mm256_loadu_si256((const __m256i *)(r1 + h)) : _mm256_setzero_si256();
          __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
          _mm256_storeu_si256((__m256i *)(dst + q * W + h), _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256((__m256i *)(dst + q * W + h + 8),
                              _mm256_permute2x128_si256(lo, hi, 0x31));
        }
      }
    } else if (ks == 1 && w == W && W % 8 == 0) {
      for (; 2 * q + 16 <= kc; q += 8)
        for (int h = 0; h < W; h += 8) {
          __m256 r[8];
          for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps((const float *)(s + (h + j) * ws + 2 * q));
          transpose8_f32(r);
          for (int i = 0; i < 8; i++) _mm256_storeu_ps((float *)(dst + (q + i) * W + h), r[i]);
        }
    }
    for (; q < kp; q++)
      for (int64_t j = 0; j < W; j++) dst[q * W + j] = j < w ? pair_of(s + j * ws, ks, 2 * q, kc) : 0;
    memset(dst + kp * W, 0, (size_t)((kps - kp) * W) * sizeof *dst);
  }
}

CORE static void pack_rhs_bf16dp_512(uint32_t *restrict dst, const uint16_t *restrict src,
                                     int64_t ws, int64_t ks, int64_t kc, int64_t n) {
  pack_pairs(dst, src, ws, ks, kc, n, 32, KSTEPS_PAIRS(kc));
}

CORE static void pack_lhs_bf16dp_512(uint32_t *restrict dst, const uint16_t *restrict src,
                                     int64_t ws, int64_t ks, int64_t kc, int64_t n) {
  pack_pairs(dst, src, ws, ks, kc, n, MR512, KSTEPS_PAIRS(kc));
}

/* AMX: the rhs as for vdpbf16ps (16 columns of a strip are one tile row of 64 bytes, the strip's
   rows 128 bytes apart), each strip KSTEPS_AMX(kc) pairs long; the lhs in strips of 32 rows,
   KSTEPS_AMX(kc) pairs long, laid out as gemm_amx_lhs_at says (tiles one after the other), rows
   past n and pairs past kc zero. */
CORE static void pack_rhs_bf16amx(uint32_t *restrict dst, const uint16_t *restrict src,
                                  int64_t ws, int64_t ks, int64_t kc, int64_t n) {
  pack_pairs(dst, src, ws, ks, kc, n, GEMM_AMX_NR, KSTEPS_AMX(kc));
}

CORE static void pack_lhs_bf16amx(uint32_t *restrict dst, const uint16_t *restrict src,
                                  int64_t ws, int64_t ks, int64_t kc, int64_t n) {
  enum { T = GEMM_AMX_KPAIRS };
  int64_t kp = KSTEPS_PAIRS(kc), kps = KSTEPS_AMX(kc);
  for (int64_t j0 = 0; j0 < n; j0 += GEMM_AMX_MR, dst += GEMM_AMX_MR * kps)
    for (int64_t i = 0; i < GEMM_AMX_MR; i++) {
      int64_t q = 0;
      if (j0 + i < n) {
        const uint16_t *s = src + (j0 + i) * ws;
        if (ks == 1) /* pairs along k are the row's bytes: 16 of them a tile row */
          for (; q + T <= kc / 2; q += T)
            memcpy(dst + gemm_amx_lhs_at(i, q), s + 2 * q, T * sizeof *dst);
        for (; q < kp; q++) dst[gemm_amx_lhs_at(i, q)] = pair_of(s, ks, 2 * q, kc);
      }
      for (; q < kps; q++) dst[gemm_amx_lhs_at(i, q)] = 0;
    }
}

/* The micro-kernels: MR x 2 vectors of accumulators over kc steps of a packed lhs strip and rhs
   strip, then (add) plus the ld-strided rows at dst, stored there. One FMA chain per element in
   k order, as the generated kernel's. ROWS lists the tile's rows: 6 with AVX2 (12 accumulators of
   16 ymm), 8 with AVX-512 (16 of 32 zmm). Meanwhile pf_lines cache lines from pf go to L2, one
   every 4 k steps (one more load beside 40 when the loads have a port to spare). */
#define ROWS6(X, ...) X(0, __VA_ARGS__) X(1, __VA_ARGS__) X(2, __VA_ARGS__) X(3, __VA_ARGS__)    \
  X(4, __VA_ARGS__) X(5, __VA_ARGS__)
#define ROWS8(X, ...) ROWS6(X, __VA_ARGS__) X(6, __VA_ARGS__) X(7, __VA_ARGS__)
#define MK_ZERO(i, V, ZERO) V c##i##0 = ZERO(), c##i##1 = ZERO();
#define MK_ROW(i, V, FMADD, BCAST)                                                                 \
  {                                                                                                \
    V ai = BCAST(a + i);                                                                           \
    c##i##0 = FMADD(ai, b0, c##i##0);                                                              \
    c##i##1 = FMADD(ai, b1, c##i##1);                                                              \
  }
#define MK_STORE_ROW(i, LOAD, STORE, ADD, W)                                                       \
  {                                                                                                \
    T *d = dst + i * ld;                                                                           \
    if (add) c##i##0 = ADD(c##i##0, LOAD(d)), c##i##1 = ADD(c##i##1, LOAD(d + W));                 \
    STORE(d, c##i##0);                                                                             \
    STORE(d + W, c##i##1);                                                                         \
  }
#define DEFINE_MICROKERNEL(ATTR, P, T_, SUF, ROWS, MR_, KSTEPS, V, W, ZERO, LOADA, LOADU, STOREU,   \
                           FMADD, BCAST, ADD)                                                      \
  ATTR static void mk_##SUF(int64_t kc, const P *restrict a, const P *restrict b,                 \
                            T_ *restrict dst, int64_t ld, int add, const char *pf,                 \
                            int64_t pf_lines) {                                                    \
    typedef T_ T;                                                                                  \
    ROWS(MK_ZERO, V, ZERO)                                                                         \
    int64_t steps = KSTEPS(kc), k = 0;                                                             \
    for (; k + 4 <= steps; k += 4) {                                                               \
      if (pf_lines > 0) {                                                                          \
        _mm_prefetch(pf, _MM_HINT_T1);                                                             \
        pf += 64, pf_lines--;                                                                      \
      }                                                                                            \
      _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++, a += MR_, b += 2 * W) {                  \
        V b0 = LOADA(b), b1 = LOADA(b + W);                                                        \
        ROWS(MK_ROW, V, FMADD, BCAST)                                                              \
      }                                                                                            \
    }                                                                                              \
    for (; k < steps; k++, a += MR_, b += 2 * W) {                                                 \
      V b0 = LOADA(b), b1 = LOADA(b + W);                                                          \
      ROWS(MK_ROW, V, FMADD, BCAST)                                                                \
    }                                                                                              \
    ROWS(MK_STORE_ROW, LOADU, STOREU, ADD, W)                                                      \
  }

CORE512 static inline __m512 bcast512_ps(const float *p) { return _mm512_set1_ps(*p); }
CORE512 static inline __m512d bcast512_pd(const double *p) { return _mm512_set1_pd(*p); }
/* a pair of bf16 (one lhs element's two k) in every lane, and 16 pairs of the rhs, as floats'
   bits: the micro-kernel's vectors are __m512 for both kinds */
CORE512 static inline __m512 bcast512_pair(const uint32_t *p) {
  return _mm512_castsi512_ps(_mm512_set1_epi32((int)*p));
}
CORE512 static inline __m512 load512_pairs(const uint32_t *p) {
  return _mm512_castsi512_ps(_mm512_load_si512(p));
}
/* c + a.lo * b.lo + a.hi * b.hi, lane by lane (bf16 products exact in f32, each add rounded;
   denormal inputs and results flushed: the instruction's rules) */
CORE512BF static inline __m512 dp512_pairs(__m512 a, __m512 b, __m512 c) {
  return _mm512_dpbf16_ps(c, (__m512bh)_mm512_castps_si512(a), (__m512bh)_mm512_castps_si512(b));
}

DEFINE_MICROKERNEL(CORE, float, float, f32, ROWS6, MR, KSTEPS_1, __m256, 8, _mm256_setzero_ps,
                   _mm256_load_ps, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
                   _mm256_broadcast_ss, _mm256_add_ps)
DEFINE_MICROKERNEL(CORE, double, double, f64, ROWS6, MR, KSTEPS_1, __m256d, 4, _mm256_setzero_pd,
                   _mm256_load_pd, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_fmadd_pd,
                   _mm256_broadcast_sd, _mm256_add_pd)
DEFINE_MICROKERNEL(CORE512, float, float, f32_512, ROWS8, MR512, KSTEPS_1, __m512, 16,
                   _mm512_setzero_ps, _mm512_load_ps, _mm512_loadu_ps, _mm512_storeu_ps,
                   _mm512_fmadd_ps, bcast512_ps, _mm512_add_ps)
DEFINE_MICROKERNEL(CORE512, double, double, f64_512, ROWS8, MR512, KSTEPS_1, __m512d, 8,
                   _mm512_setzero_pd, _mm512_load_pd, _mm512_loadu_pd, _mm512_storeu_pd,
                   _mm512_fmadd_pd, bcast512_pd, _mm512_add_pd)
DEFINE_MICROKERNEL(CORE512BF, uint32_t, float, bf16dp_512, ROWS8, MR512, KSTEPS_PAIRS, __m512, 16,
                   _mm512_setzero_ps, load512_pairs, _mm512_loadu_ps, _mm512_storeu_ps,
                   dp512_pairs, bcast512_pair, _mm512_add_ps)

/* One register tile at out (ld apart rows; rows x cols of it valid): straight from the registers
   into out when it is whole and no epilogue follows, else through a stack copy: the earlier K
   blocks' sums added to its valid part, then the epilogue or a plain copy into out. */
#define DEFINE_TILE(ATTR, P, T, SUF, MR, NR)                                                       \
  ATTR static void tile_##SUF(int64_t kc, const P *a, const P *b, T *out, int64_t ld,              \
                              int64_t rows, int64_t cols, int first, gemm_core_epi epi,            \
                              void *const *bufs, int64_t row, int64_t col, const char *pf,         \
                              int64_t pf_lines) {                                                  \
    for (int64_t i = 0; i < rows; i++) {                                                           \
      __builtin_prefetch(out + i * ld, 1, 3);                                                      \
      __builtin_prefetch(out + i * ld + NR - 1, 1, 3);                                             \
    }                                                                                              \
    if (rows == MR && cols == NR && !epi) {                                                        \
      mk_##SUF(kc, a, b, out, ld, !first, pf, pf_lines);                                         \
      return;                                                                                      \
    }                                                                                              \
    _Alignas(64) T tile[MR * NR];                                                                  \
    mk_##SUF(kc, a, b, tile, NR, 0, pf, pf_lines);                                                 \
    if (!first)                                                                                    \
      for (int64_t i = 0; i < rows; i++)                                                           \
        for (int64_t j = 0; j < cols; j++) tile[i * NR + j] += out[i * ld + j];                    \
    if (epi) {                                                                                     \
      epi(bufs, tile, row, rows, col);                                                             \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t i = 0; i < rows; i++) memcpy(out + i * ld, tile + i * NR, (size_t)cols * sizeof(T)); \
  }

DEFINE_TILE(CORE, float, float, f32, MR, 16)
DEFINE_TILE(CORE, double, double, f64, MR, 8)
DEFINE_TILE(CORE512, float, float, f32_512, MR512, 32)
DEFINE_TILE(CORE512, double, double, f64_512, MR512, 16)
DEFINE_TILE(CORE512BF, uint32_t, float, bf16dp_512, MR512, 32)

/* AMX's register tile (gemm_amx.h), on the instructions or their model. A whole tile starts from
   the partial sums in out (a K block but the first) and ends there (a K block but the last, or no
   epilogue), loaded and stored by the tile instructions; an epilogue's tile and an edge tile end
   in a stack copy, as DEFINE_TILE's (the output here is always f32 sums: bf16 dots only). */
#define DEFINE_TILE_AMX(SUF, MODE)                                                                 \
  static void tile_##SUF(int64_t kc, const uint32_t *a, const uint32_t *b, float *out, int64_t ld, \
                         int64_t rows, int64_t cols, int first, gemm_core_epi epi,                 \
                         void *const *bufs, int64_t row, int64_t col, const char *pf,              \
                         int64_t pf_lines) {                                                       \
    _Alignas(64) float tile[GEMM_AMX_MR * GEMM_AMX_NR];                                            \
    bool whole = rows == GEMM_AMX_MR && cols == GEMM_AMX_NR;                                       \
    gemm_amx_block x = {.kp = KSTEPS_AMX(kc), .a = a, .b = b,                                      \
                        .c_in = first ? NULL : whole ? out : tile,                                 \
                        .c_in_ld = whole ? ld : GEMM_AMX_NR,                                       \
                        .c = whole && !epi ? out : tile, .c_ld = whole && !epi ? ld : GEMM_AMX_NR, \
                        .pf = pf, .pf_lines = pf_lines};                                           \
    if (!first && !whole) { /* the same sums as a whole tile's: an element's bits do not depend   \
                               on where a thread's rows begin */                                   \
      memset(tile, 0, sizeof tile);                                                                \
      for (int64_t i = 0; i < rows; i++)                                                           \
        memcpy(tile + i * GEMM_AMX_NR, out + i * ld, (size_t)cols * sizeof(float));                \
    }                                                                                              \
    gemm_amx_block_run(MODE, &x);                                                                  \
    if (whole && !epi) return;                                                                     \
    if (epi) {                                                                                     \
      epi(bufs, tile, row, rows, col);                                                             \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t i = 0; i < rows; i++)                                                             \
      memcpy(out + i * ld, tile + i * GEMM_AMX_NR, (size_t)cols * sizeof(float));                  \
  }

DEFINE_TILE_AMX(bf16amx, GEMM_AMX_HW)
DEFINE_TILE_AMX(bf16amx_model, GEMM_AMX_MODEL)
#define pack_rhs_bf16amx_model pack_rhs_bf16amx
#define pack_lhs_bf16amx_model pack_lhs_bf16amx

/* ---- teams (gemm_core.h) ---- */

enum {
  TEAM_GROUP_BYTES = 512,     /* of an rhs row per claim: 8 strips, whole cache lines of a row */
  TEAM_MAX_BYTES = 64 << 20,  /* above it each thread packs panels for itself, as alone */
  CLAIM_FREE = 0, CLAIM_PACKING = 1, CLAIM_PACKED = 2,
};

static _Thread_local void *core_team;

void gemm_core_join_team(void *area) { core_team = area; }

/* The team area's layout for p: K blocks of groups of strips, each group `group` strips of
   kce x NR elements (the last K block's strips are shorter, laid out at its own kc). */
typedef struct team_layout {
  int64_t n_kb, n_groups, group, kce, nr;
  size_t flag_bytes, bytes;
} team_layout;

static bool team_layout_of(const gemm_core_plan *p, int es, team_layout *t) {
  if (p->B != 1 || p->M <= 0 || p->N <= 0 || p->K <= 0 || p->kc <= 0 || (es != 4 && es != 8) ||
      (p->vec_bytes != 32 && p->vec_bytes != 64))
    return false;
  t->nr = GEMM_CORE_NR(p->vec_bytes, es);
  t->group = TEAM_GROUP_BYTES / (t->nr * es);
  t->kce = min64(p->kc, p->K);
  t->n_kb = (p->K + p->kc - 1) / p->kc;
  int64_t n_strips = (p->N + t->nr - 1) / t->nr;
  t->n_groups = (n_strips + t->group - 1) / t->group;
  double panel = (double)t->n_kb * (double)t->n_groups * (double)t->group * (double)t->kce *
                 (double)t->nr * es;
  t->flag_bytes = ((size_t)(t->n_kb * t->n_groups) * sizeof(atomic_int) + 63) / 64 * 64;
  if (panel + (double)t->flag_bytes > TEAM_MAX_BYTES) return false;
  t->bytes = t->flag_bytes + (size_t)panel;
  return true;
}

size_t gemm_core_team_bytes(const gemm_core_plan *p, int elem_bytes, size_t *flag_bytes) {
  team_layout t;
  *flag_bytes = 0;
  if (!team_layout_of(p, elem_bytes, &t)) return 0;
  *flag_bytes = t.flag_bytes;
  return t.bytes;
}

/* true: this thread claimed the group (free until now) and packs it, then calls team_done.
   false: the group is packed, by another thread, waited for here if it was packing it (a
   claimant is running: it claimed while running and packs without waiting on anyone). */
static bool team_claim(atomic_int *flag) {
  int seen = atomic_load_explicit(flag, memory_order_acquire);
  if (seen == CLAIM_PACKED) return false;
  int expect = CLAIM_FREE;
  if (seen == CLAIM_FREE &&
      atomic_compare_exchange_strong_explicit(flag, &expect, CLAIM_PACKING, memory_order_acquire,
                                              memory_order_acquire))
    return true;
  for (unsigned spin = 0; atomic_load_explicit(flag, memory_order_acquire) != CLAIM_PACKED; spin++)
    if (spin % 64 == 63) sched_yield(); /* the claimant may have been preempted */
    else _mm_pause();
  return false;
}

static void team_done(atomic_int *flag) {
  atomic_store_explicit(flag, CLAIM_PACKED, memory_order_release);
}

/* The strip of a panel (strips first .. first + n - 1) where a team's thread starts packing
   it: the threads arrive at a panel together, and packing its groups in one order on demand,
   one packed each group while the others waited for it. Before computing a panel, each now
   packs (or finds packed) all its groups, starting at the group its share of the rows points
   to (its rows begin at rb of M), so they pack different groups at once. The tiles still run
   in column order, which a reducing epilogue relies on. */
static int64_t team_rotation(const team_layout *t, int64_t rb, int64_t M, int64_t first,
                             int64_t n) {
  int64_t s = (int64_t)((double)rb / (double)M * (double)n);
  s -= (first + s) % t->group; /* to the start of its group */
  return s < 0 ? 0 : s;
}

/* matmul.c's emit_body, in C: chunks of rows never across a batch; the epilogue runs in the last
   K block only (and is given the finished sums). T is the packed (compute) type, S the operands'
   (bf16 operands are packed as f32: a bf16 is the upper half of its float, so the f32
   micro-kernel and tiles run them unchanged and the packers read half the bytes). The sums of
   K blocks but the last go to the output, or with sums (an output that cannot hold them: bf16)
   to f32 scratch in chunks of sums->rc rows, as the generated kernel keeps them. */
#define DEFINE_CORE(ATTR, P, T, S, SUF, TILE, MR, NR, KSTEPS)                                      \
  /* The packed strip of team t holding global strip `strip` of K block kb (a block of kc), packed \
     first if its group is not yet. */                                                             \
  ATTR static const P *team_strip_##SUF(const team_layout *t, char *area, const gemm_core_plan *p, \
                                        const S *rhs, int64_t kb, int64_t kc, int64_t strip) {     \
    int64_t g = strip / t->group;                                                                  \
    P *base = (P *)(area + t->flag_bytes) + (kb * t->n_groups + g) * t->group * t->kce * NR;       \
    atomic_int *flag = (atomic_int *)area + kb * t->n_groups + g;                                  \
    if (team_claim(flag)) {                                                                        \
      int64_t j0 = g * t->group * NR;                                                              \
      pack_rhs_##SUF(base, rhs + kb * p->kc * p->rhs_ks + j0 * p->rhs_ns, p->rhs_ns, p->rhs_ks,    \
                     kc, min64(t->group * NR, p->N - j0));                                         \
      team_done(flag);                                                                             \
    }                                                                                              \
    return base + (strip - g * t->group) * KSTEPS(kc) * NR;                                        \
  }                                                                                                \
  ATTR static void core_##SUF(const gemm_core_plan *p, const gemm_core_sums *sums,                 \
                              void *const *bufs, int64_t rb, int64_t re, gemm_core_epi epi) {      \
    if (p->M <= 0 || p->N <= 0 || p->B <= 0) return;                                              \
    const S *lhs = bufs[p->lhs_buf], *rhs = bufs[p->rhs_buf];                                      \
    char *scratch = bufs[p->scratch_buf];                                                          \
    P *ap = (P *)(scratch + p->a_off), *bp = (P *)(scratch + p->b_off);                            \
    /* where the sums go: row m, column n of the chunk at c[(m - crow0) * cld + n - ccol0] */      \
    T *c = sums ? (T *)(scratch + sums->c_off) : (T *)bufs[p->out_buf];                            \
    int64_t cld = sums ? sums->c_ld : p->out_ld, rc = sums ? sums->rc : INT64_MAX / 4;             \
    team_layout t;                                                                                 \
    char *team = core_team && team_layout_of(p, sizeof(P), &t) ? core_team : NULL;                 \
    int64_t kend = p->K > 0 ? p->K : 1; /* K = 0: one block of zeros, through the epilogue */     \
    for (int64_t r = rb; r < re;) {                                                                \
      int64_t bi = r / p->M, brow = bi * p->M, m0 = r - brow;                                      \
      int64_t m1 = min64(min64(p->M, re - brow), m0 + rc);                                         \
      const S *lhs_b = lhs + bi * p->lhs_bs, *rhs_b = rhs + bi * p->rhs_bs;                        \
      T *c_b = sums ? c : c + bi * p->out_bs;                                                      \
      int64_t crow0 = sums ? m0 : 0;                                                               \
      for (int64_t jc = 0; jc < p->N; jc += p->nc) {                                               \
        int64_t nc = min64(p->nc, p->N - jc), ccol = sums ? 0 : jc;                                \
        for (int64_t pc = 0; pc < kend; pc += p->kc) {                                             \
          int64_t kc = min64(p->kc, p->K - pc);                                                    \
          int first = pc == 0;                                                                     \
          gemm_core_epi last_epi = pc + p->kc >= p->K ? epi : NULL;                                \
          if (!team)                                                                               \
            pack_rhs_##SUF(bp, rhs_b + pc * p->rhs_ks + jc * p->rhs_ns, p->rhs_ns, p->rhs_ks, kc,  \
                           nc);                                                                    \
          if (team) {                                                                              \
            int64_t n_strips = (nc + NR - 1) / NR;                                                 \
            int64_t rot = team_rotation(&t, rb, p->M, jc / NR, n_strips);                          \
            for (int64_t s = 0; s < n_strips; s++)                                                 \
              team_strip_##SUF(&t, team, p, rhs_b, pc / p->kc, kc, jc / NR + (s + rot) % n_strips); \
          }                                                                                        \
          for (int64_t ic = m0; ic < m1; ic += p->mc) {                                            \
            int64_t mc = min64(p->mc, m1 - ic);                                                    \
            pack_lhs_##SUF(ap, lhs_b + ic * p->lhs_ms + pc * p->lhs_ks, p->lhs_ms, p->lhs_ks, kc,  \
                           mc);                                                                    \
            for (int64_t jr = 0; jr < nc; jr += NR) {                                              \
              const P *b = team ? team_strip_##SUF(&t, team, p, rhs_b, pc / p->kc, kc,             \
                                                   (jc + jr) / NR)                                 \
                                : bp + jr * KSTEPS(kc);                                            \
              /* The next strip of the panel goes to L2 while this one's tiles run, a slice    \
                 (whole lines) a tile; unfetched, its first tile would wait on L3 for every line \
                 of it (7-16% of [256..512, K] x [K, 4096] dots here). Packed already: a team   \
                 packs all of a panel's groups before its tiles. */                                \
              const char *next = NULL;                                                             \
              if (jr + NR < nc)                                                                    \
                next = (const char *)(team ? team_strip_##SUF(&t, team, p, rhs_b, pc / p->kc, kc,  \
                                                              (jc + jr) / NR + 1)                  \
                                           : bp + (jr + NR) * KSTEPS(kc));                         \
              int64_t strip_lines = (KSTEPS(kc) * NR * (int64_t)sizeof(P) + 63) / 64;              \
              int64_t n_tiles = (mc + MR - 1) / MR;                                                \
              int64_t slice = (strip_lines + n_tiles - 1) / n_tiles;                               \
              for (int64_t ir = 0; ir < mc; ir += MR) {                                            \
                int64_t first_line = ir / MR * slice;                                              \
                int64_t pf_lines = next ? min64(slice, strip_lines - first_line) : 0;              \
                TILE(kc, ap + ir * KSTEPS(kc), b, c_b + (ic - crow0 + ir) * cld + ccol + jr,       \
                     cld, min64(MR, mc - ir), min64(NR, nc - jr), first, last_epi, bufs,           \
                     brow + ic + ir, jc + jr, pf_lines > 0 ? next + first_line * 64 : NULL,        \
                     pf_lines);                                                                    \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
      r = brow + m1;                                                                               \
    }                                                                                              \
  }

DEFINE_CORE(CORE, float, float, float, f32, tile_f32, MR, 16, KSTEPS_1)
DEFINE_CORE(CORE, double, double, double, f64, tile_f64, MR, 8, KSTEPS_1)
DEFINE_CORE(CORE, float, float, uint16_t, bf16, tile_f32, MR, 16, KSTEPS_1)
DEFINE_CORE(CORE512, float, float, float, f32_512, tile_f32_512, MR512, 32, KSTEPS_1)
DEFINE_CORE(CORE512, double, double, double, f64_512, tile_f64_512, MR512, 16, KSTEPS_1)
DEFINE_CORE(CORE512, float, float, uint16_t, bf16_512, tile_f32_512, MR512, 32, KSTEPS_1)
DEFINE_CORE(CORE512BF, uint32_t, float, uint16_t, bf16dp_512, tile_bf16dp_512, MR512, 32,
            KSTEPS_PAIRS)
DEFINE_CORE(CORE, uint32_t, float, uint16_t, bf16amx, tile_bf16amx, GEMM_AMX_MR, GEMM_AMX_NR,
            KSTEPS_AMX)
DEFINE_CORE(CORE, uint32_t, float, uint16_t, bf16amx_model, tile_bf16amx_model, GEMM_AMX_MR,
            GEMM_AMX_NR, KSTEPS_AMX)

/* The entries pick the core of the plan's vector width (matmul.c made the plan for it), and for
   64-byte vectors the unpacked one for dots of a few columns (gemm_skinny.h). */
void tjit_gemm_core_f32(const gemm_core_plan *p, void *const *bufs, int64_t rb, int64_t re,
                        gemm_core_epi epi) {
  if (gemm_skinny_applies(p, 4)) gemm_skinny_f32(p, bufs, rb, re, epi);
  else if (p->vec_bytes == 64) core_f32_512(p, NULL, bufs, rb, re, epi);
  else core_f32(p, NULL, bufs, rb, re, epi);
}

void tjit_gemm_core_f64(const gemm_core_plan *p, void *const *bufs, int64_t rb, int64_t re,
                        gemm_core_epi epi) {
  if (gemm_skinny_applies(p, 8)) gemm_skinny_f64(p, bufs, rb, re, epi);
  else if (p->vec_bytes == 64) core_f64_512(p, NULL, bufs, rb, re, epi);
  else core_f64(p, NULL, bufs, rb, re, epi);
}

void tjit_gemm_core_bf16(const gemm_core_plan *p, const gemm_core_sums *sums, void *const *bufs,
                         int64_t rb, int64_t re, gemm_core_epi epi) {
  if (sums->amx == GEMM_AMX_HW) {
    gemm_amx_begin();
    core_bf16amx(p, sums, bufs, rb, re, epi);
    gemm_amx_end();
  } else if (sums->amx == GEMM_AMX_MODEL) core_bf16amx_model(p, sums, bufs, rb, re, epi);
  else if (p->vec_bytes == 64 && sums->pairs) core_bf16dp_512(p, sums, bufs, rb, re, epi);
  else if (p->vec_bytes == 64) core_bf16_512(p, sums, bufs, rb, re, epi);
  else core_bf16(p, sums, bufs, rb, re, epi);
}

bool gemm_core_amx_fits(const gemm_core_plan *p) {
  if (p->vec_bytes != 64 || p->K <= 0 || p->kc <= 0 || p->mc <= 0) return false;
  int64_t kce = min64(p->kc, p->K);
  int64_t a_bytes = (p->mc + GEMM_AMX_MR - 1) / GEMM_AMX_MR * GEMM_AMX_MR * KSTEPS_AMX(kce) * 4;
  return KSTEPS_AMX(kce) <= kce && p->nc % GEMM_AMX_NR == 0 && a_bytes <= p->b_off - p->a_off;
}

/* ---- is vdpbf16ps worth it here ---- */

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds for 16 independent chains of `steps` vdpbf16ps (pairs) or vfmadd231ps, the best of 5. */
CORE512BF static double time_chains(bool pairs, int steps) {
  double best = 1e30;
  for (int run = 0; run < 5; run++) {
    __m512 c[16], a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-9f);
    for (int i = 0; i < 16; i++) c[i] = _mm512_setzero_ps();
    double t0 = now_seconds();
    for (int k = 0; k < steps; k++) {
      if (pairs) {
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) c[i] = dp512_pairs(a, b, c[i]);
      } else {
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) c[i] = _mm512_fmadd_ps(a, b, c[i]);
      }
      __asm__ volatile("" : "+v"(a)); /* a new operand each step: no hoisting, no folding */
    }
    double t = now_seconds() - t0;
    for (int i = 1; i < 16; i++) c[0] = _mm512_add_ps(c[0], c[i]);
    volatile float sink = _mm512_reduce_add_ps(c[0]);
    (void)sink;
    if (t < best) best = t;
  }
  return best;
}

/* Measured, not looked up by vendor or model: the instruction does twice an FMA's products, but
   the Emerald Rapids host of 2026-11-27 issued it at a quarter of the FMA's rate (1.3 against
   5.3 G instructions/s: half the products a cycle), where the f32 micro-kernel is the faster;
   a CPU that issues it as fast as an FMA gets twice the products. Pairs must beat the FMAs by a
   margin, since they pack as much. */
bool gemm_core_pairs_pay(void) {
  static atomic_int known; /* 0: not measured, 1: no, 2: yes */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k) return k == 2;
  bool pay = false;
  if (gemm_core_pairs_run_here()) {
    double dp = time_chains(true, 1000), fma = time_chains(false, 1000);
    pay = dp < 1.5 * fma; /* per instruction: 2x the products, so 1.5x the time is still ahead */
  }
  atomic_store_explicit(&known, pay ? 2 : 1, memory_order_relaxed);
  return pay;
}
