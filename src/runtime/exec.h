/* exec.h: the executable of a compiled signature: its buffers (params, results, intermediates in
 * a scratch arena) and its steps (native kernel and matmul calls, interpreted fallbacks, copies),
 * run by one call of the signature's typed entry through libffi. */
#ifndef TJIT_RUNTIME_EXEC_H
#define TJIT_RUNTIME_EXEC_H

#include <stdio.h>

#include "ir/ir.h"
#include "tjit.h"

typedef struct exec exec;

typedef struct exec_stats {
  double codegen_ms; /* fusion, lowering, building the LLVM module */
  double llvm_ms;    /* optimizing, emitting the object, loading it, looking kernels up */
  double load_ms;    /* of llvm_ms: loading the object into ORC and looking its symbols up */
  int n_kernels;     /* kernels of the fused program (native or not) */
  int n_native;      /* native steps: loop kernels and matmul kernels */
  int disk_cache_hits; /* 1 when the object came from the disk cache */
  int disk_cache_lookups; /* objects looked for in the disk cache (0: the context has none) */
} exec_stats;

/* Fuses the optimized f, lowers and compiles every kernel it can (the rest are interpreted), takes
   the object from ctx's disk cache or compiles and stores it, and loads it into ctx's JIT. The
   executable keeps no pointer to f. */
jit_status exec_build(jit_ctx *ctx, const ir_func *f, exec **out, exec_stats *stats);
/* exec_build where bit p of donate says param p's buffer may be overwritten: results whose
   writing can reuse such a buffer safely are written into it (see exec_result_alias). */
jit_status exec_build_donating(jit_ctx *ctx, const ir_func *f, uint64_t donate, exec **out,
                               exec_stats *stats);
/* The param whose buffer result r is written into (its caller must pass that param's pointer as
   results[r] too, and gives the buffer to the result), or -1. */
int exec_result_alias(const exec *e, uint32_t r);
/* The most bytes of values the executable holds at once over its steps: intermediates from the
   step that first touches them to the last, results from their first write on (those written
   over a donated param excluded), params excluded. */
uint64_t exec_peak_bytes(const exec *e);

/* Runs on args[i] (the params' buffers) into results[i] (buffers of the results' byte sizes,
   distinct from each other and from the args, except that results[r] is args[p] when
   exec_result_alias(e, r) is p, and that results of one value of the function may be one
   buffer, as a scan's carry and its alias are). Safe to call from several threads at once. */
jit_status exec_run(exec *e, const void *const *args, void *const *results);

/* exec_run, told which contents the args hold (arg_ids[i]: args[i]'s jit_array serial, 0:
   unknown): a dot whose rhs is a param keeps that rhs packed over the runs on the same contents,
   from the second such run on (EXEC_KEEP_MAX bytes of such areas at most per executable). */
jit_status exec_run_ids(exec *e, const void *const *args, const uint64_t *arg_ids,
                        void *const *results);

/* exec_run as device `device` (0..n_devices-1) of a partitioned program, on that device's thread:
   kernels are not split over the pool, intermediates live in the device's own arena, and
   collectives go to the thread's ir_device (ir_set_thread_device). One run per device at a time.
   arg_ids as exec_run_ids' (the contents of the device's blocks), or NULL. */
jit_status exec_run_device(exec *e, int device, int n_devices, const void *const *args,
                           const uint64_t *arg_ids, void *const *results);

/* The bytes of the packed operands e and its nested bodies keep between runs. */
size_t exec_kept_bytes(const exec *e);

void exec_free(exec *e);

/* The JIT_DUMP_FUSED, JIT_DUMP_C or JIT_DUMP_LLVM stage of f, built afresh (any signature can be
   dumped, whatever opt_level compiled it). */
jit_status exec_dump(jit_ctx *ctx, const ir_func *f, unsigned stage, FILE *out);

#endif /* TJIT_RUNTIME_EXEC_H */
