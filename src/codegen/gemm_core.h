/* gemm_core.h: the precompiled half of a matmul. The packing loops and the register-blocked
 * micro-kernel of matmul.h's plan, compiled once with the library (for AVX2 + FMA, with 6 x 2 ymm
 * tiles, and for AVX-512, with 8 x 2 zmm tiles, as matmul.c's plan has them) instead of
 * per signature through LLVM, which spent 50-100 ms of optimisation and instruction selection on
 * each dot kernel of a cold compile. A signature's dot kernel is then a call of the core with its
 * plan as a constant, plus its fused epilogue (the only part that differs between signatures),
 * generated per signature and called once per finished register tile.
 *
 * The core follows the generated kernel's loops, block sizes and sum order exactly (zeroed
 * accumulators per K block, FMAs in k order, the block's sums added to the earlier blocks' in
 * the output), so both give bit-identical results and the runtime's decisions that depend on the
 * plan (scratch bytes, row grain, whether the output is stored once) hold for both.
 *
 * bf16 dots have two more micro-kernels: vdpbf16ps on bf16 pairs, and AMX tiles (gemm_amx.h) on the
 * same pairs, in the same loops.
 *
 * Generated code reaches the core by name (GEMM_CORE_F32_SYMBOL, ...): every JITDylib defines
 * those names as absolute symbols (llvm_jit.c), so cached objects link in any process. The names
 * carry the version of the plan's layout: change the layout, bump the version, and objects cached
 * by an older library miss (the name is in the module text, the disk-cache key) instead of
 * misreading their plan.
 */
#ifndef TJIT_CODEGEN_GEMM_CORE_H
#define TJIT_CODEGEN_GEMM_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Everything the core needs of one dot, as int64_t only, so that the generated code can pass a
   constant [GEMM_CORE_PLAN_FIELDS x i64] array for it. Element strides; the lhs is read at
   b * lhs_bs + m * lhs_ms + k * lhs_ks, the rhs at b * rhs_bs + k * rhs_ks + n * rhs_ns, the
   output written at b * out_bs + m * out_ld + n (rows of the call are b * M + m). */
typedef struct gemm_core_plan {
  int64_t B, M, N, K;
  int64_t lhs_bs, lhs_ms, lhs_ks;
  int64_t rhs_bs, rhs_ks, rhs_ns;
  int64_t out_bs, out_ld;
  int64_t kc, mc, nc;  /* block sizes (matmul.c's plan) */
  int64_t a_off, b_off; /* bytes into the scratch block of the packed lhs block and rhs panel */
  int64_t lhs_buf, rhs_buf, out_buf, scratch_buf; /* indices into the kernel's bufs */
  int64_t vec_bytes; /* 32: the AVX2 core (MR = 6), 64: the AVX-512 one (MR = 8) */
} gemm_core_plan;

enum { GEMM_CORE_PLAN_FIELDS = 22, GEMM_CORE_MR = 6, GEMM_CORE512_MR = 8 };

#define GEMM_CORE_F32_SYMBOL "tjit_gemm_core_v2_f32"
#define GEMM_CORE_F64_SYMBOL "tjit_gemm_core_v2_f64"

/* The tile's rows and columns (2 vectors) for vectors of vec_bytes (32 or 64). */
#define GEMM_CORE_MR_OF(vec_bytes) ((vec_bytes) == 64 ? GEMM_CORE512_MR : GEMM_CORE_MR)
#define GEMM_CORE_NR(vec_bytes, elem_bytes) (2 * (vec_bytes) / (elem_bytes))

/* A signature's epilogue: takes the finished sums of one register tile (row-major, MR rows of NR,
   `rows` of them valid) whose first element is output row `row` (b * M + m), column `col`, and
   stores what the fused elementwise ops make of them into the output. */
typedef void (*gemm_core_epi)(void *const *bufs, const void *tile, int64_t row, int64_t rows,
                              int64_t col);

/* The core: rows [row_begin, row_end) of the [B * M, N] output, as a generated dot kernel does
   (matmul.h), for f32 and f64 operands and output. epi NULL: the sums are stored as they are.
   Runs only where gemm_core_runs_here(p->vec_bytes). 64-byte plans of a few columns
   (gemm_skinny_applies) run unpacked, with the same bits. */
void tjit_gemm_core_f32(const gemm_core_plan *p, void *const *bufs, int64_t row_begin,
                        int64_t row_end, gemm_core_epi epi);
void tjit_gemm_core_f64(const gemm_core_plan *p, void *const *bufs, int64_t row_begin,
                        int64_t row_end, gemm_core_epi epi);

/* bf16 operands and output: packed as the f32 they widen to and run by the f32 micro-kernel;
   the output (bf16) cannot hold partial sums, so the sums of every K block but the last are kept
   in f32 in the thread's scratch, as the generated kernel keeps them (matmul.c's c_scratch):
   chunks of rc rows, c_ld floats a row, at c_off. Only from C (core_dot.c): no generated code
   calls it, so it has no versioned symbol. epi is never NULL (the sums must become bf16).
   pairs (AVX-512 plans only, where gemm_core_pairs_run_here): the operands are packed as bf16
   pairs along k and multiplied by vdpbf16ps, twice the products per instruction of the f32
   micro-kernel; its sums differ from the f32 kernel's in order (each k pair's odd product is added
   before its even one) and in flushing denormals, so they agree within f32 rounding, not bit for
   bit. amx (a gemm_amx_mode; plans where gemm_core_amx_fits): AMX tiles of 32 x 32 sums
   (gemm_amx.h), on the instructions (where gemm_amx_runs_here) or on their C model; the operands
   packed as bf16 pairs, the sums in tdpbf16ps's order, so within f32 rounding of the f32 kernel's.
   It takes precedence over pairs. */
typedef struct gemm_core_sums {
  int64_t c_off, c_ld, rc;
  int64_t pairs;
  int64_t amx;
} gemm_core_sums;

void tjit_gemm_core_bf16(const gemm_core_plan *p, const gemm_core_sums *sums, void *const *bufs,
                         int64_t row_begin, int64_t row_end, gemm_core_epi epi);

/* ---- a team: the threads of one job sharing the packed rhs ------------------------------------
   Split by rows over threads, each thread of a dot would pack the whole rhs for itself: twice the
   memory traffic of one thread (the rhs comes from DRAM) and twice its cache footprint, which cost
   a 2-thread GEMM an eighth of its speed here. A team packs the whole rhs once, into an area the
   threads share: each group of strips is packed by the first thread to need it (a claim by
   compare-exchange) while the others compute; a thread that needs a group being packed waits for
   it. A claimant never waits on anyone while it packs, so the team needs no barrier and is safe
   however the threads are scheduled, one after the other on one thread included (a nested pool
   job). The results are bit-identical to a thread packing for itself. */

/* The bytes of p's team area for packed elements of elem_bytes (4 for f32 and bf16 operands, 8
   for f64; 0: p does not take one: a batched dot,
   no contracted elements, or an rhs too large to pack whole), of which the first *flag_bytes are
   the claims that must be zero when a call starts. */
size_t gemm_core_team_bytes(const gemm_core_plan *p, int elem_bytes, size_t *flag_bytes);

/* The team this thread's next core calls join (a 64-byte aligned area of gemm_core_team_bytes,
   whose flag bytes were zeroed before any thread of the call joined), or NULL: none. Thread-local;
   the runtime sets it around a dot kernel's call and clears it after. */
void gemm_core_join_team(void *area);

/* Whether this host executes the instructions of the core for vectors of vector_bytes (32: AVX2
   and FMA, 64: those and AVX-512F). */
bool gemm_core_runs_here(int vector_bytes);

/* Whether the AMX core can run p: a 64-byte plan whose K blocks hold whole tiles of pairs and
   whose lhs block, in strips of 32 rows, fits the plan's lhs scratch (a few rows of a long K do
   not). */
bool gemm_core_amx_fits(const gemm_core_plan *p);

/* Whether this host executes the bf16 pair core (AVX-512F and AVX512_BF16). */
bool gemm_core_pairs_run_here(void);

/* Whether the pair core multiplies faster than the f32 micro-kernel on this host: measured once
   per process (~0.1 ms), false where it does not run. */
bool gemm_core_pairs_pay(void);

#endif /* TJIT_CODEGEN_GEMM_CORE_H */
