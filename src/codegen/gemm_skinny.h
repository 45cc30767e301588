/* gemm_skinny.h: the AVX-512 core's dots of a few columns, without packing.
 *
 * A dot whose output has no more columns than two register tiles' strips (NR each) (W6's
 * per-example loss: [4096, 512] x [512, 64]; a classifier's logits, [4096, 288] x [288, 4])
 * spends as much on packing its lhs as on its multiply-adds: every lhs element is packed once
 * and multiplied by only 64 columns (by 32, 28 of them zeros, for 4 columns). Here the
 * lhs is read where it is (rows contiguous along k), broadcast into tiles of 6 rows x 4 vectors
 * (all the columns at once), and the rhs rows are read where they are too, in passes of 128 k
 * whose rhs rows (32 KiB) stay in L1 while a group of rows goes through them; a tile's sums wait
 * between passes in a stack buffer, so each is still one FMA chain in k order.
 *
 * Bit-identical to the packed core (gemm_core.h) and to the generated kernels: the same K blocks
 * of the plan (a chain from zero per block, added to the earlier blocks' sums in the output), and
 * the epilogue is given the same register tiles (NR columns, in column order for each row).
 */
#ifndef TJIT_CODEGEN_GEMM_SKINNY_H
#define TJIT_CODEGEN_GEMM_SKINNY_H

#include <stdbool.h>

#include "codegen/gemm_core.h"

/* Whether p (elements of es bytes: 4 or 8) runs here rather than on the packed core: a 64-byte
   vector plan, N <= 2 NR, K > 0, the lhs contiguous along k or along m (a transposed lhs: a
   dense layer's weight gradient x^T dy, whose broadcasts then read consecutive rows' elements
   of one k), and the rhs contiguous along n. */
bool gemm_skinny_applies(const gemm_core_plan *p, int es);

/* Rows [row_begin, row_end) of p's output as tjit_gemm_core_f32/_f64 make them, where
   gemm_skinny_applies and the host runs the 64-byte core. */
void gemm_skinny_f32(const gemm_core_plan *p, void *const *bufs, int64_t row_begin,
                     int64_t row_end, gemm_core_epi epi);
void gemm_skinny_f64(const gemm_core_plan *p, void *const *bufs, int64_t row_begin,
                     int64_t row_end, gemm_core_epi epi);

#endif /* TJIT_CODEGEN_GEMM_SKINNY_H */
