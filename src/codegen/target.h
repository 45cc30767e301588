/* target.h: the CPU that codegen targets and the vector width it blocks for, chosen explicitly
 * (the host's by default, TJIT_CPU / TJIT_VECTOR_WIDTH to override) and read by everything that
 * depends on it: the target machine, the matmul tile, the vectorizer's width, the cache key. */
#ifndef TJIT_CODEGEN_TARGET_H
#define TJIT_CODEGEN_TARGET_H

#include <stdbool.h>

#include "tjit.h"

enum { CG_TARGET_NAME_MAX = 48 };

typedef struct cg_target {
  char cpu[CG_TARGET_NAME_MAX]; /* the LLVM CPU name handed to the target machine */
  bool is_host;                 /* cpu and features are the host's own (TJIT_CPU unset or "host") */
  int max_vector_bytes;         /* the widest vector registers the CPU has: 64, 32 or 16 */
  int vector_bytes;             /* what kernels block and vectorize for (<= max_vector_bytes) */
  bool fma;                     /* fused multiply-add instructions (every CPU from x86-64-v3) */
  bool bf16_dot;                /* avx512_bf16: vdpbf16ps */
  bool amx_bf16;                /* AMX-BF16 tiles */
} cg_target;

/* Resolves a target from a CPU name (NULL or "host": the host's) and a vector width in bits
   (0: the default, the CPU's widest). Unknown names, widths other than 128/256/512 or wider
   than the CPU's registers, and CPUs whose instructions this host cannot execute are JIT_EINVAL
   with a message naming the offending setting. Never passes an unknown name to LLVM (which
   would print a warning). */
jit_status cg_target_resolve(const char *cpu, int vector_bits, cg_target *out);

/* cg_target_resolve from $TJIT_CPU and $TJIT_VECTOR_WIDTH. */
jit_status cg_target_from_env(cg_target *out);

/* The feature string for LLVM's target machine: the host's own for the host, "" for a named
   CPU (its defaults). Valid until the next call from the same thread for named CPUs; the host's
   string lives for the process. */
const char *cg_target_features(const cg_target *t);

/* "znver3, 256-bit vectors (host)" style description, for dumps, bench headers and
   jit_ctx_target. */
void cg_target_describe(const cg_target *t, char *buf, int n);

/* Whether this host can run code generated for the named CPU NAME (the checks of
   cg_target_resolve, without the error): tests use it to skip targets they cannot execute. */
bool cg_target_runs_here(const char *name);

#endif /* TJIT_CODEGEN_TARGET_H */
