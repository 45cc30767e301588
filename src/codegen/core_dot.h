/* core_dot.h: a dot that needs no LLVM at all. On the precompiled core (gemm_core.h) only the
 * fused epilogue was generated per signature, yet LLVM's fixed cost for that small module was
 * 10-12 ms of CPU per dot, most of a matmul signature's cold compile (W4: 14 of 15 ms). Where the
 * epilogue is arithmetic the core can run it as a small program over each finished tile: bias
 * adds, residuals, relu (max), clamps, compare and select (relu's gradient), in the dot's f32 or
 * f64. Each op is the IEEE operation the generated epilogue emits (max and min as llvm.maximum
 * and llvm.minimum: NaN wins, +0 > -0), so the two give the same bits; transcendental functions
 * keep the generated epilogue.
 *
 * A reducing program (cg_epi_plan_reduce) also sums the epilogue over each row's columns in the
 * store and runs arithmetic on the sums: a per-example loss mean((x @ w - y)^2, axis=-1) becomes
 * one step with no LLVM and no [rows, N] intermediate (W6's cold start 15-18 -> 2 ms). Its sums
 * are added in another order than the generated row kernel's (lanes, then tiles in column
 * order), so the two agree within that reordering, not bit for bit.
 */
#ifndef TJIT_CODEGEN_CORE_DOT_H
#define TJIT_CODEGEN_CORE_DOT_H

#include <stdint.h>
#include <stdio.h>

#include "codegen/epilogue.h"
#include "codegen/gemm_core.h"
#include "tjit.h"

typedef struct core_dot core_dot;

/* The dot of d (its epilogue pl, or NULL for none; d as cg_epi_desc gives it) as a core_dot, or
   *out NULL when it is not one: the core does not run d, or the epilogue has an op the programs
   lack. JIT_ENOMEM when memory runs out. */
jit_status core_dot_build(const cg_matmul_desc *d, const cg_epi_plan *pl, core_dot **out);
void core_dot_free(core_dot *c);

/* The plan the core runs c with (for the runtime's team area). */
const gemm_core_plan *core_dot_plan(const core_dot *c);

/* Prints c as LLVM IR comments (what a dump shows in place of the dot's module): the shape, and
   the epilogue program one instruction a line. */
void core_dot_print(const core_dot *c, const char *name, FILE *out);

/* Rows [rb, re) of c's output, as the dot's generated kernel would compute them (bufs: lhs, rhs,
   the epilogue's reads, out, this thread's scratch). */
void core_dot_run(const core_dot *c, void *const *bufs, int64_t rb, int64_t re);

#endif /* TJIT_CODEGEN_CORE_DOT_H */
