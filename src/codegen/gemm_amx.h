/* gemm_amx.h: the register tile of the bf16 core on AMX (gemm_core.c's bf16 AMX core): a 32 x 32
 * block of f32 sums as four 16 x 16 AMX tiles, fed by two lhs and two rhs tiles of 16 bf16 pairs
 * along k (tdpbf16ps: 16 x 16 x 32 products an instruction, against 16 x 2 of vdpbf16ps).
 *
 * The same loop runs on the tile instructions where the host executes them (gemm_amx_runs_here)
 * and on a C model of them anywhere (the sums in the order and rounding measured on the
 * hardware, with the tile configuration's checks the hardware faults on), so that the core's packing, loops, edges
 * and epilogues are tested on every AVX-512 host (the core's plans are the AVX-512 ones), and an
 * AMX host checks its own instructions against the model once (gemm_amx_runs_here) before any
 * dot uses them.
 */
#ifndef TJIT_CODEGEN_GEMM_AMX_H
#define TJIT_CODEGEN_GEMM_AMX_H

#include <stdbool.h>
#include <stdint.h>

enum {
  GEMM_AMX_MR = 32,    /* rows of the register tile (two 16-row tiles) */
  GEMM_AMX_NR = 32,    /* its columns (two 16-column tiles) */
  GEMM_AMX_KPAIRS = 16 /* bf16 pairs along k per instruction */
};

/* How the tile instructions run: on the host's AMX, or modelled in C. */
typedef enum gemm_amx_mode { GEMM_AMX_OFF = 0, GEMM_AMX_HW = 1, GEMM_AMX_MODEL = 2 } gemm_amx_mode;

/* Where pair q of row i of a 32-row lhs strip is: in blocks of 16 pairs, each block 32 rows of 16
   pairs (two 16 x 64-byte tiles, one after the other), so that a tile is 1 KB read front to back. */
static inline int64_t gemm_amx_lhs_at(int64_t i, int64_t q) {
  return q / GEMM_AMX_KPAIRS * (GEMM_AMX_MR * GEMM_AMX_KPAIRS) + i * GEMM_AMX_KPAIRS +
         q % GEMM_AMX_KPAIRS;
}

/* c[32 x 32] (row-major, 32 floats a row) = the sums over kp pairs (a multiple of 16) of
   a[32 x kp] (pair q of row i at a + gemm_amx_lhs_at(i, q): the low half of each uint32 is the
   even k) times b[kp x 32] (pair q of column j at b + q * 32 + j), in tdpbf16ps's order and
   rounding as the hardware does it (not the SDM's pseudo-code, which adds each product to the
   destination in turn): for each 16 pairs, per element, the 16 even products summed in k order
   and the 16 odd ones likewise, each addition rounded (the products are exact), then
   c + (even + odd); bf16 denormals read as zero and f32 denormal sums flushed.
   GEMM_AMX_HW only between gemm_amx_begin and gemm_amx_end on the calling thread. */
void gemm_amx_tile(gemm_amx_mode mode, int64_t kp, const uint32_t *a, const uint32_t *b, float *c);

/* gemm_amx_tile's loop in full: the sums start from c_in (32 x 32 f32, rows c_in_ld floats
   apart), or zero where it is NULL, and end in c (rows c_ld floats apart; c may be c_in), and
   pf_lines cache lines from pf (the next strip) are prefetched into L2 over the loop. */
typedef struct gemm_amx_block {
  int64_t kp;
  const uint32_t *a, *b;
  const float *c_in;
  int64_t c_in_ld;
  float *c;
  int64_t c_ld;
  const char *pf;
  int64_t pf_lines;
} gemm_amx_block;
void gemm_amx_block_run(gemm_amx_mode mode, const gemm_amx_block *x);

/* Loads the tile configuration on this thread / releases the tiles (GEMM_AMX_HW only). */
void gemm_amx_begin(void);
void gemm_amx_end(void);

/* Whether this host runs AMX-BF16: the CPU has it, the OS saves the tile state, Linux granted this
   process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM), and a tile of the instructions gave the
   model's sums (within rounding, so that an AMX that orders its additions otherwise still runs)
   on random data. Checked once per process. */
bool gemm_amx_runs_here(void);

#endif /* TJIT_CODEGEN_GEMM_AMX_H */
