/* stream.h: non-temporal (streaming) stores for kernels that write arrays past the last-level
 * cache (stream.c says when a store qualifies). */
#ifndef TJIT_CODEGEN_STREAM_H
#define TJIT_CODEGEN_STREAM_H

#include <stdint.h>

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>

#include "tjit.h"

/* In the optimized module m, marks the vector stores of kernel FN_NAME (signature
   void(void *const *bufs, int64_t, int64_t)) into buffers of BUF_MASK (bit k: bufs[k]) that it
   does not also load from as non-temporal and aligned to their size, where the offset from
   bufs[k] is a proven multiple of it, and adds an sfence before each return when any was marked. *marked (may be NULL): how many.
   Call it only on a function that runs when every bufs[k] of the mask is 64-byte aligned. A
   module for another target than x86-64 is left as it is. JIT_EINVAL: no such function. */
jit_status cg_stream_stores(LLVMModuleRef m, const char *fn_name, uint64_t buf_mask, int *marked);

#endif /* TJIT_CODEGEN_STREAM_H */
