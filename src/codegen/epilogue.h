/* epilogue.h: a dot kernel's elementwise epilogue emitted into the matmul's store (one vector of
 * the dot's output at a time) instead of a separate loop kernel over the dot's buffer. */
#ifndef TJIT_CODEGEN_EPILOGUE_H
#define TJIT_CODEGEN_EPILOGUE_H

#include <stdbool.h>
#include <stdint.h>

#include <llvm-c/Core.h>

#include "codegen/kernel.h"
#include "codegen/matmul.h"

#define CG_EPI_MAX_OPS 32
#define CG_EPI_MAX_READS 8

/* How to run kernel ki's epilogue in the store: ops in order (the dot first), each an
   elementwise op, a const, or a broadcast of a read scalar / [N] vector along the columns; reads
   are the materialized values loaded (bufs[2 + i] in the default matmul layout). */
typedef struct cg_epi_plan {
  const ir_func *f;
  ir_ref dot, root;
  ir_ref ops[CG_EPI_MAX_OPS];
  uint32_t n_ops;
  ir_ref reads[CG_EPI_MAX_READS];
  uint32_t n_reads;
  int64_t n; /* columns */
  LLVMModuleRef m; /* set by cg_epi_desc */
  /* a reducing epilogue (cg_epi_plan_reduce; only the core's programs run one): root is summed
     over each row's columns into `reduce`, the post ops (in order) make `out` of each row's sum,
     and out is written to bufs[2 + n_reads]; the dot's own buffer (bufs[3 + n_reads]) only
     holds the sums of K blocks but the last */
  bool reduces;
  ir_ref reduce, out;
  ir_ref post[CG_EPI_MAX_OPS];
  uint32_t n_post;
} cg_epi_plan;

/* True when kernel ki (an FZ_DOT one) can run its epilogue in the matmul's store. */
bool cg_epi_plan_make(const fz_prog *p, uint32_t ki, cg_epi_plan *out);
/* True when kernel ki is a dot alone and kernel ki + 1 (a row kernel, the only reader of the
   dot) sums an elementwise epilogue of it over the last axis, with elementwise ops on the sums
   after: mean((x @ w - y)^2, axis=-1), a per-example loss. The sum then runs in the matmul's
   store too, and the [rows, N] values between are never written. */
bool cg_epi_plan_reduce(const fz_prog *p, uint32_t ki, cg_epi_plan *out);
/* d for the plan's dot with the epilogue (bufs lhs, rhs, reads..., out, scratch), emitted in m. */
void cg_epi_desc(cg_epi_plan *pl, LLVMModuleRef m, cg_matmul_desc *d, int vec_bytes);

/* emit_llvm.c: whether op ew is one of llvm_math.c's functions (cg_math_emit), straight-line code
   for any vector width. */
bool lp_ew_is_math(int ew);
/* emit_llvm.c: one elementwise op on scalars (see there). */
LLVMValueRef lp_emit_ew(LLVMBuilderRef b, LLVMModuleRef m, const lp_ins *in, LLVMValueRef x,
                        LLVMValueRef y, LLVMValueRef z);

#endif /* TJIT_CODEGEN_EPILOGUE_H */
