/* fma_expand.h: llvm.fma without FMA instructions, as multiplies and adds that vectorize. */
#ifndef TJIT_CODEGEN_FMA_EXPAND_H
#define TJIT_CODEGEN_FMA_EXPAND_H

#include <llvm-c/Core.h>

/* Replaces every call to llvm.fma (f32 or f64, scalar or vector) in M by Dekker's exact product
   and Knuth's two-sum: a*b + c with the product's rounding error kept, so that the Cody-Waite
   reductions of llvm_math.c stay exact (about 20 operations a lane: llvm_math.c asks for llvm.fma
   only where it needs the exact product, and for llvm.fmuladd, a multiply and an add here,
   everywhere else). Needed on targets without FMA, where llvm.fma is a libm
   call per lane that keeps every loop holding one scalar. */
void cg_expand_fma(LLVMModuleRef m);

#endif /* TJIT_CODEGEN_FMA_EXPAND_H */
