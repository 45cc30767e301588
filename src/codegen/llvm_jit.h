/* llvm_jit.h: the only door to LLVM's optimizer, object emitter and ORC LLJIT; codegen builds a
 * module, then cg_optimize -> cg_emit_object -> cg_add_object -> cg_lookup (objects are cacheable).
 */
#ifndef TJIT_CODEGEN_LLVM_JIT_H
#define TJIT_CODEGEN_LLVM_JIT_H

#include <stddef.h>

#include <llvm-c/Core.h>

#include "codegen/target.h"
#include "tjit.h"

/* One LLJIT plus host target machines; one per jit_ctx. All functions taking a cg_jit may be
   called from several threads at once. Each module must be built in its own LLVMContextRef
   (an LLVMContext is single-threaded); the wrapper never shares one between calls. */
typedef struct cg_jit cg_jit;

/* The code of one compiled signature: a JITDylib of its own, so that kernels of different
   signatures may use the same symbol names and one signature's code can be dropped alone. */
typedef struct cg_dylib cg_dylib;

/* opt_level 0..3: the pass pipeline default<ON> and the code generator's level (0 None,
   1 Less, 2 Default, 3 Aggressive). Values outside 0..3 are JIT_EINVAL. Code is generated for
   target T (cg_jit_create: the one $TJIT_CPU and $TJIT_VECTOR_WIDTH choose, see target.h). */
jit_status cg_jit_create(int opt_level, cg_jit **out);
jit_status cg_jit_create_for(int opt_level, const cg_target *t, cg_jit **out);
/* Frees the LLJIT and every cg_dylib still alive (their handles become invalid). NULL is a no-op.
 */
void cg_jit_destroy(cg_jit *jit);
int cg_jit_opt_level(const cg_jit *jit);

/* Sets M's target triple and data layout, gives its functions the target's vector width
   (prefer-vector-width, min-legal-vector-width), verifies M (a broken module is JIT_ECOMPILE
   with the verifier's message) and runs default<ON> for the target CPU. */
jit_status cg_optimize(cg_jit *jit, LLVMModuleRef m);
/* cg_optimize with default<O{level}> for the pass pipeline (level 0..the context's own); the
   code generator keeps the context's level. */
jit_status cg_optimize_at(cg_jit *jit, LLVMModuleRef m, int level);
/* cg_optimize with PIPELINE, a pass pipeline in opt's -passes syntax (e.g. "default<O2>" or
   "function(sroa,instcombine)"); a malformed one is JIT_ECOMPILE with LLVM's message. */
jit_status cg_optimize_pipeline(cg_jit *jit, LLVMModuleRef m, const char *pipeline);
/* default<O{level}> as a pipeline string (level clamped to 0..3). */
const char *cg_default_pipeline(int level);

/* Emits M as a relocatable host object into malloc'd memory (*obj, *len; free() it). Code
   generation rewrites M in place: take cg_module_text (for hashing) before this call. */
jit_status cg_emit_object(cg_jit *jit, LLVMModuleRef m, void **obj, size_t *len);

/* Loads an object (copied; the caller keeps obj) into an empty JITDylib of its own that also
   resolves symbols of the process (libc, libm). A malformed object may only fail at the
   first cg_lookup, which then reports JIT_ECOMPILE. */
jit_status cg_add_object(cg_jit *jit, const void *obj, size_t len, cg_dylib **lib);
/* cg_add_object of n objects into one JITDylib: they link to each other's symbols and are
   removed together. */
jit_status cg_add_objects(cg_jit *jit, const void *const *objs, const size_t *lens, int n,
                          cg_dylib **lib);
/* Address of the function or global NAME (the IR name, unmangled) in LIB; links on first use. */
jit_status cg_lookup(cg_dylib *lib, const char *name, void **fn);
/* Removes LIB's code and data (its code memory goes back to LLVM's memory manager) and frees the
   handle; pointers from cg_lookup die with it. NULL is a no-op. ORC's C API cannot remove a
   JITDylib, so the emptied one is kept and given to a later cg_add_object: the number of
   JITDylibs is the most ever alive at once, not the number ever loaded. */
void cg_dylib_free(cg_dylib *lib);

/* The module's textual IR, malloc'd (free() it), or NULL when out of memory. */
char *cg_module_text(LLVMModuleRef m);

/* Marks generated function fn as never unwinding. Every function tjit generates must be: one
   that calls another is not inferred so, and LLVM then gives it an .eh_frame entry, which ORC
   registers with libgcc; under ASan with slow unwinding (fast_unwind_on_malloc=0, the MPI
   tests'), libgcc sorting that entry on the next malloc's unwind mallocs under its own lock and
   deadlocks. */
void cg_set_nounwind(LLVMValueRef fn);

/* Strings for cache keys, valid until cg_jit_destroy / forever: the target CPU name
   ("znver5"), its feature string ("+avx512f,..." for the host, "" for a named CPU), and
   "19.1.7" for the linked LLVM. */
const char *cg_jit_cpu(const cg_jit *jit);
const char *cg_jit_features(const cg_jit *jit);
const char *cg_llvm_version(void);

/* The target code is generated for: its vector_bytes is what generated code that blocks for
   registers (the matmul tile) sizes itself by. Valid until cg_jit_destroy. */
const cg_target *cg_jit_target(const cg_jit *jit);

#endif /* TJIT_CODEGEN_LLVM_JIT_H */
