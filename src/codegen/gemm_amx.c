/* gemm_amx.c: the AMX register tile of the bf16 core and its C model (see gemm_amx.h). The loop
 * is written once (AMX_TILE_LOOP) over four operations and expanded twice: with the tile
 * instructions, compiled by target attribute as gemm_core.c's cores are, and with the model's
 * functions.
 */
#include "codegen/gemm_amx.h"

#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ir/ir.h"

#define AMX_ATTR __attribute__((target("amx-tile,amx-bf16")))

/* Every tile of the loop is 16 rows of 64 bytes: c0..c3 (tmm0-3) the sums, a0, a1 (tmm4, 5) the lhs
   strip's upper and lower 16 rows (1 KB each, contiguous), b0, b1 (tmm6, 7) 16 pairs of the rhs
   strip's left and right 16 columns (interleaved, 128 bytes a pair). */
enum { TILE_ROWS = 16, TILE_COLSB = 64, N_TILES = 8 };

/* ldtilecfg's operand (palette 1), as the SDM lays it out. */
typedef struct tile_config {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;
_Static_assert(sizeof(tile_config) == 64, "ldtilecfg reads 64 bytes");

static tile_config config_of_loop(void) {
  tile_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < N_TILES; t++) {
    c.colsb[t] = TILE_COLSB;
    c.rows[t] = TILE_ROWS;
  }
  return c;
}

/* The loop over kp pairs: per 16 pairs, two lhs and two rhs tiles and the four products; the
   sums start from x->c_in or zero and end in x->c; a share of x->pf's lines is prefetched into L2
   each step, so that all are by the end. */
#define AMX_TILE_LOOP(ZERO, LOAD, DP, STORE, S, x)                                                 \
  do {                                                                                             \
    const uint32_t *a = (x)->a, *b = (x)->b;                                                       \
    if ((x)->c_in) {                                                                               \
      LOAD(S, 0, (x)->c_in, (x)->c_in_ld * 4);                                                     \
      LOAD(S, 1, (x)->c_in + 16, (x)->c_in_ld * 4);                                                \
      LOAD(S, 2, (x)->c_in + 16 * (x)->c_in_ld, (x)->c_in_ld * 4);                                 \
      LOAD(S, 3, (x)->c_in + 16 * (x)->c_in_ld + 16, (x)->c_in_ld * 4);                            \
    } else {                                                                                       \
      ZERO(S, 0);                                                                                  \
      ZERO(S, 1);                                                                                  \
      ZERO(S, 2);                                                                                  \
      ZERO(S, 3);                                                                                  \
    }                                                                                              \
    int64_t steps = (x)->kp / GEMM_AMX_KPAIRS;                                                     \
    int64_t pf_each = steps ? ((x)->pf_lines + steps - 1) / steps : 0;                             \
    const char *pf = (x)->pf, *pf_end = pf ? pf + (x)->pf_lines * 64 : NULL;                       \
    for (int64_t q = 0; q < (x)->kp; q += GEMM_AMX_KPAIRS) {                                       \
      for (int64_t l = 0; l < pf_each && pf < pf_end; l++, pf += 64) __builtin_prefetch(pf, 0, 2);  \
      LOAD(S, 4, a + gemm_amx_lhs_at(0, q), GEMM_AMX_KPAIRS * 4);                                  \
      LOAD(S, 5, a + gemm_amx_lhs_at(16, q), GEMM_AMX_KPAIRS * 4);                                 \
      LOAD(S, 6, b + q * GEMM_AMX_NR, GEMM_AMX_NR * 4);                                            \
      LOAD(S, 7, b + q * GEMM_AMX_NR + 16, GEMM_AMX_NR * 4);                                       \
      DP(S, 0, 4, 6);                                                                              \
      DP(S, 1, 4, 7);                                                                              \
      DP(S, 2, 5, 6);                                                                              \
      DP(S, 3, 5, 7);                                                                              \
    }                                                                                              \
    STORE(S, 0, (x)->c, (x)->c_ld * 4);                                                            \
    STORE(S, 1, (x)->c + 16, (x)->c_ld * 4);                                                       \
    STORE(S, 2, (x)->c + 16 * (x)->c_ld, (x)->c_ld * 4);                                           \
    STORE(S, 3, (x)->c + 16 * (x)->c_ld + 16, (x)->c_ld * 4);                                      \
  } while (0)

/* ---- the instructions ----
 * Written as asm here, not GCC 12's intrinsics: its _tile_loadconfig tells the compiler that
 * ldtilecfg reads 8 bytes, so -O3 drops the stores of the other 56 (a garbage configuration, a #GP
 * on the first dot), and its _tile_loadd reads no memory at all as far as the compiler knows.
 * Each asm here names what it reads and writes: the configuration as a 64-byte operand, the tile
 * loads and stores as "memory". */

#define HW_ZERO(S, t) __asm__ volatile("tilezero %%tmm" #t ::)
#define HW_LOAD(S, t, p, stride)                                                                   \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(p), "r"((int64_t)(stride)) : "memory")
#define HW_DP(S, c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define HW_STORE(S, t, p, stride)                                                                  \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(p), "r"((int64_t)(stride)) : "memory")

AMX_ATTR static void tile_hw(const gemm_amx_block *x) {
  AMX_TILE_LOOP(HW_ZERO, HW_LOAD, HW_DP, HW_STORE, _, x);
}

AMX_ATTR void gemm_amx_begin(void) {
  tile_config cfg = config_of_loop();
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

AMX_ATTR void gemm_amx_end(void) { __asm__ volatile("tilerelease" ::); }

/* ---- the model: the hardware's sums over a configured register file ---- */

typedef struct model {
  tile_config cfg;
  uint8_t tile[N_TILES][TILE_ROWS][TILE_COLSB];
} model;

static float bf16_in(uint16_t h) { /* a denormal reads as zero */
  return ir_bf16_to_f32((h & 0x7f80) ? h : h & 0x8000);
}

static float flush(float x) {
  return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

/* A shape the hardware would fault on (a tile not configured, or products of tiles whose
   shapes disagree) leaves its destination NaN: it shows in every result the tile reaches. */
static void model_poison(model *m, int t) { memset(m->tile[t], 0xff, sizeof m->tile[t]); }

static void model_zero(model *m, int t) { memset(m->tile[t], 0, sizeof m->tile[t]); }

static void model_load(model *m, int t, const void *p, int64_t stride) {
  model_zero(m, t);
  if (!m->cfg.rows[t] || m->cfg.rows[t] > TILE_ROWS || m->cfg.colsb[t] > TILE_COLSB) {
    model_poison(m, t);
    return;
  }
  for (int r = 0; r < m->cfg.rows[t]; r++)
    memcpy(m->tile[t][r], (const char *)p + r * stride, m->cfg.colsb[t]);
}

static void model_store(model *m, int t, void *p, int64_t stride) {
  for (int r = 0; r < m->cfg.rows[t]; r++)
    memcpy((char *)p + r * stride, m->tile[t][r], m->cfg.colsb[t]);
}

static void model_dp(model *m, int dst, int ta, int tb) {
  const tile_config *c = &m->cfg;
  if (c->rows[dst] != c->rows[ta] || c->colsb[ta] / 4 != c->rows[tb] ||
      c->colsb[dst] != c->colsb[tb] || c->colsb[ta] % 4 || c->colsb[dst] % 4) {
    model_poison(m, dst);
    return;
  }
  /* As the hardware sums (measured on Emerald Rapids, bit for bit on random and hand-made tiles),
     not as the SDM's pseudo-code: per instruction, the even products and the odd ones in two
     sums of their own, in k order, each addition rounded and flushed; then the two added and
     that added to the destination. */
  for (int r = 0; r < c->rows[dst]; r++) {
    float tmp[TILE_COLSB / 4], even[TILE_COLSB / 4] = {0}, odd[TILE_COLSB / 4] = {0};
    memcpy(tmp, m->tile[dst][r], sizeof tmp);
    for (int k = 0; k < c->colsb[ta] / 4; k++) {
      uint16_t ap[2], bp[2];
      memcpy(ap, &m->tile[ta][r][4 * k], sizeof ap);
      for (int n = 0; n < c->colsb[dst] / 4; n++) {
        memcpy(bp, &m->tile[tb][k][4 * n], sizeof bp);
        even[n] = flush(even[n] + bf16_in(ap[0]) * bf16_in(bp[0]));
        odd[n] = flush(odd[n] + bf16_in(ap[1]) * bf16_in(bp[1]));
      }
    }
    for (int n = 0; n < c->colsb[dst] / 4; n++) tmp[n] = flush(tmp[n] + flush(even[n] + odd[n]));
    memcpy(m->tile[dst][r], tmp, sizeof tmp);
  }
}

#define MODEL_ZERO(S, t) model_zero(S, t)
#define MODEL_LOAD(S, t, p, stride) model_load(S, t, p, stride)
#define MODEL_DP(S, c, a, b) model_dp(S, c, a, b)
#define MODEL_STORE(S, t, p, stride) model_store(S, t, p, stride)

static void tile_model(const gemm_amx_block *x) {
  model m;
  m.cfg = config_of_loop();
  AMX_TILE_LOOP(MODEL_ZERO, MODEL_LOAD, MODEL_DP, MODEL_STORE, &m, x);
}

void gemm_amx_block_run(gemm_amx_mode mode, const gemm_amx_block *x) {
  if (mode == GEMM_AMX_HW) tile_hw(x);
  else tile_model(x);
}

void gemm_amx_tile(gemm_amx_mode mode, int64_t kp, const uint32_t *a, const uint32_t *b,
                   float *c) {
  gemm_amx_block x = {.kp = kp, .a = a, .b = b, .c = c, .c_ld = GEMM_AMX_NR};
  gemm_amx_block_run(mode, &x);
}

/* ---- does this host run it ---- */

/* CPUID.(7,0).EDX: AMX-BF16 (bit 22) and AMX-TILE (24); the OS enables XTILECFG and XTILEDATA in
   XCR0 (bits 17, 18); Linux 5.16+ hands out the 8 KiB of tile data per process on request. */
static bool cpu_and_os_have_amx(void) {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0, NULL) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(d >> 22 & 1) || !(d >> 24 & 1)) return false;
  __cpuid(1, a, b, c, d);
  if (!(c >> 27 & 1)) return false; /* no OSXSAVE: xgetbv would fault */
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if ((lo & 0x60000u) != 0x60000u) return false;
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* One tile of random bf16 in [-1, 1] (kp = 32) by the instructions and by the model: equal but
   for the order of roundings (a tile the hardware read or wrote differently is off by whole
   products). */
static bool hw_agrees_with_model(void) {
  enum { KP = 2 * GEMM_AMX_KPAIRS };
  static _Alignas(64) uint32_t a[GEMM_AMX_MR * KP], b[KP * GEMM_AMX_NR];
  static _Alignas(64) float got[GEMM_AMX_MR * GEMM_AMX_NR], want[GEMM_AMX_MR * GEMM_AMX_NR];
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < GEMM_AMX_MR * KP; i++) {
    uint32_t w = 0;
    for (int h = 0; h < 2; h++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      float f = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      w |= (u >> 16) << (16 * h);
    }
    a[i] = w;
    b[(i * 7) % (KP * GEMM_AMX_NR)] = w ^ 0x00010001u * (uint32_t)(i & 1);
  }
  gemm_amx_begin();
  gemm_amx_tile(GEMM_AMX_HW, KP, a, b, got);
  gemm_amx_end();
  gemm_amx_tile(GEMM_AMX_MODEL, KP, a, b, want);
  for (int i = 0; i < GEMM_AMX_MR * GEMM_AMX_NR; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f * (2 * KP)))
      return false;
  return true;
}

static bool amx_here;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void check_amx(void) { amx_here = cpu_and_os_have_amx() && hw_agrees_with_model(); }

bool gemm_amx_runs_here(void) {
  pthread_once(&amx_once, check_amx);
  return amx_here;
}
