/* gemm_core.c: the precompiled matmul core for AVX2 + FMA (see gemm_core.h): matmul.h's loops
 * (jc over NC panels, pc over KC blocks, ic over MC blocks, the MR x NR register tile) with
 * packers that read the operands through their strides. Compiled with a target attribute, not
 * with the build's flags, so the library still runs on hosts without AVX2 (the runtime only
 * calls it where gemm_core_runs_here), and with no ifunc resolver (which ran before
 * ThreadSanitizer's runtime was up, see fft_engine.c).
 */
#include "codegen/gemm_core.h"

#include <immintrin.h>
#include <string.h>

#define CORE __attribute__((target("avx2,fma")))
#define MR GEMM_CORE_MR

_Static_assert(sizeof(gemm_core_plan) == GEMM_CORE_PLAN_FIELDS * sizeof(int64_t),
               "the generated code passes the plan as an array of i64");

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

bool gemm_core_runs_here(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Packers, as the generated ones: the rhs KC x NC panel into NR-wide strips (strip j0 at
   j0 * kc, row k of it at k * NR), the lhs MC x KC block into MR-tall strips (strip i0 at
   i0 * kc, column k at k * MR); edges zero-padded so the micro-kernel always runs whole tiles.
   One packer does both: `n` elements across the strips at stride `ws`, kc along them at stride
   `ks`, strips W wide. src is the panel's (block's) first element. A contiguous case (a row of
   the strip is one run of memory) and a transposed one (read along k instead). */
#define DEFINE_PACKER(T, NAME, W)                                                                  \
  CORE static void NAME(T *restrict dst, const T *restrict src, int64_t ws, int64_t ks,            \
                        int64_t kc, int64_t n) {                                                   \
    for (int64_t j0 = 0; j0 < n; j0 += W, dst += kc * W) {                                         \
      int64_t w = min64(W, n - j0);                                                                \
      const T *s = src + j0 * ws;                                                                  \
      if (w == W && ws == 1) {                                                                     \
        for (int64_t k = 0; k < kc; k++) memcpy(dst + k * W, s + k * ks, W * sizeof(T));           \
      } else if (ks == 1) {                                                                        \
        for (int64_t j = 0; j < W; j++)                                                            \
          for (int64_t k = 0; k < kc; k++) dst[k * W + j] = j < w ? s[j * ws + k] : 0;             \
      } else {                                                                                     \
        for (int64_t k = 0; k < kc; k++)                                                           \
          for (int64_t j = 0; j < W; j++) dst[k * W + j] = j < w ? s[k * ks + j * ws] : 0;         \
      }                                                                                            \
    }                                                                                              \
  }

DEFINE_PACKER(float, pack_rhs_f32, 16)
DEFINE_PACKER(float, pack_lhs_f32, MR)
DEFINE_PACKER(double, pack_rhs_f64, 8)
DEFINE_PACKER(double, pack_lhs_f64, MR)

/* The micro-kernels: MR x 2 vectors of accumulators over kc steps of a packed lhs strip and rhs
   strip, then (add) plus the ld-strided rows at dst, stored there. One FMA chain per element in
   k order, as the generated kernel's. */
#define MK_ROW(V, FMADD, BCAST, i)                                                                 \
  {                                                                                                \
    V ai = BCAST(a + i);                                                                           \
    c##i##0 = FMADD(ai, b0, c##i##0);                                                              \
    c##i##1 = FMADD(ai, b1, c##i##1);                                                              \
  }
#define MK_STORE_ROW(V, LOAD, STORE, ADD, W, i)                                                    \
  {                                                                                                \
    T *d = dst + i * ld;                                                                           \
    if (add) c##i##0 = ADD(c##i##0, LOAD(d)), c##i##1 = ADD(c##i##1, LOAD(d + W));                 \
    STORE(d, c##i##0);                                                                             \
    STORE(d + W, c##i##1);                                                                         \
  }
#define DEFINE_MICROKERNEL(T_, SUF, V, W, ZERO, LOADA, LOADU, STOREU, FMADD, BCAST, ADD)           \
  CORE static void mk_##SUF(int64_t kc, const T_ *restrict a, const T_ *restrict b,               \
                            T_ *restrict dst, int64_t ld, int add) {                               \
    typedef T_ T;                                                                                  \
    V c00 = ZERO(), c01 = ZERO(), c10 = ZERO(), c11 = ZERO(), c20 = ZERO(), c21 = ZERO();          \
    V c30 = ZERO(), c31 = ZERO(), c40 = ZERO(), c41 = ZERO(), c50 = ZERO(), c51 = ZERO();          \
    _Pragma("GCC unroll 4") for (int64_t k = 0; k < kc; k++, a += MR, b += 2 * W) {                \
      V b0 = LOADA(b), b1 = LOADA(b + W);                                                          \
      MK_ROW(V, FMADD, BCAST, 0) MK_ROW(V, FMADD, BCAST, 1) MK_ROW(V, FMADD, BCAST, 2)             \
      MK_ROW(V, FMADD, BCAST, 3) MK_ROW(V, FMADD, BCAST, 4) MK_ROW(V, FMADD, BCAST, 5)             \
    }                                                                                              \
    MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 0) MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 1)            \
    MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 2) MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 3)            \
    MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 4) MK_STORE_ROW(V, LOADU, STOREU, ADD, W, 5)            \
  }

DEFINE_MICROKERNEL(float, f32, __m256, 8, _mm256_setzero_ps, _mm256_load_ps, _mm256_loadu_ps,
                   _mm256_storeu_ps, _mm256_fmadd_ps, _mm256_broadcast_ss, _mm256_add_ps)
DEFINE_MICROKERNEL(double, f64, __m256d, 4, _mm256_setzero_pd, _mm256_load_pd, _mm256_loadu_pd,
                   _mm256_storeu_pd, _mm256_fmadd_pd, _mm256_broadcast_sd, _mm256_add_pd)

/* One register tile at out (ld apart rows; rows x cols of it valid): straight from the registers
   into out when it is whole and no epilogue follows, else through a stack copy: the earlier K
   blocks' sums added to its valid part, then the epilogue or a plain copy into out. */
#define DEFINE_TILE(T, SUF, NR)                                                                    \
  CORE static void tile_##SUF(int64_t kc, const T *a, const T *b, T *out, int64_t ld,              \
                              int64_t rows, int64_t cols, int first, gemm_core_epi epi,            \
                              void *const *bufs, int64_t row, int64_t col) {                       \
    for (int64_t i = 0; i < rows; i++) {                                                           \
      __builtin_prefetch(out + i * ld, 1, 3);                                                      \
      __builtin_prefetch(out + i * ld + NR - 1, 1, 3);                                             \
    }                                                                                              \
    if (rows == MR && cols == NR && !epi) {                                                        \
      mk_##SUF(kc, a, b, out, ld, !first);                                                         \
      return;                                                                                      \
    }                                                                                              \
    _Alignas(64) T tile[MR * NR];                                                                  \
    mk_##SUF(kc, a, b, tile, NR, 0);                                                               \
    if (!first)                                                                                    \
      for (int64_t i = 0; i < rows; i++)                                                           \
        for (int64_t j = 0; j < cols; j++) tile[i * NR + j] += out[i * ld + j];                    \
    if (epi) {                                                                                     \
      epi(bufs, tile, row, rows, col);                                                             \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t i = 0; i < rows; i++) memcpy(out + i * ld, tile + i * NR, (size_t)cols * sizeof(T)); \
  }

DEFINE_TILE(float, f32, 16)
DEFINE_TILE(double, f64, 8)

/* matmul.c's emit_body, in C: chunks of rows never across a batch; the epilogue runs in the last
   K block only (and is given the finished sums). */
#define DEFINE_CORE(T, SUF, NR)                                                                    \
  CORE void tjit_gemm_core_##SUF(const gemm_core_plan *p, void *const *bufs, int64_t rb,           \
                                 int64_t re, gemm_core_epi epi) {                                  \
    if (p->M <= 0 || p->N <= 0 || p->B <= 0) return;                                               \
    const T *lhs = bufs[p->lhs_buf], *rhs = bufs[p->rhs_buf];                                      \
    T *out = bufs[p->out_buf];                                                                     \
    char *scratch = bufs[p->scratch_buf];                                                          \
    T *ap = (T *)(scratch + p->a_off), *bp = (T *)(scratch + p->b_off);                            \
    int64_t kend = p->K > 0 ? p->K : 1; /* K = 0: one block of zeros, through the epilogue */     \
    for (int64_t r = rb; r < re;) {                                                                \
      int64_t bi = r / p->M, brow = bi * p->M, m0 = r - brow, m1 = min64(p->M, re - brow);         \
      const T *lhs_b = lhs + bi * p->lhs_bs, *rhs_b = rhs + bi * p->rhs_bs;                        \
      T *out_b = out + bi * p->out_bs;                                                             \
      for (int64_t jc = 0; jc < p->N; jc += p->nc) {                                               \
        int64_t nc = min64(p->nc, p->N - jc);                                                      \
        for (int64_t pc = 0; pc < kend; pc += p->kc) {                                             \
          int64_t kc = min64(p->kc, p->K - pc);                                                    \
          int first = pc == 0;                                                                     \
          gemm_core_epi last_epi = pc + p->kc >= p->K ? epi : NULL;                                \
          pack_rhs_##SUF(bp, rhs_b + pc * p->rhs_ks + jc * p->rhs_ns, p->rhs_ns, p->rhs_ks, kc,    \
                         nc);                                                                      \
          for (int64_t ic = m0; ic < m1; ic += p->mc) {                                            \
            int64_t mc = min64(p->mc, m1 - ic);                                                    \
            pack_lhs_##SUF(ap, lhs_b + ic * p->lhs_ms + pc * p->lhs_ks, p->lhs_ms, p->lhs_ks, kc,  \
                           mc);                                                                    \
            for (int64_t jr = 0; jr < nc; jr += NR)                                                \
              for (int64_t ir = 0; ir < mc; ir += MR)                                              \
                tile_##SUF(kc, ap + ir * kc, bp + jr * kc,                                         \
                           out_b + (ic + ir) * p->out_ld + jc + jr, p->out_ld,                     \
                           min64(MR, mc - ir), min64(NR, nc - jr), first, last_epi, bufs,          \
                           brow + ic + ir, jc + jr);                                               \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
      r = brow + m1;                                                                               \
    }                                                                                              \
  }

DEFINE_CORE(float, f32, 16)
DEFINE_CORE(double, f64, 8)
