/* fuzz_ir_compile.c: IR text -> parse -> verify -> passes -> fusion, loop IR, LLVM, a native
 * kernel (exec_build) -> one run at the text's (capped) shapes. One context for the process. A
 * verified function that compiling calls invalid (JIT_EINTERNAL) is a finding, like any crash. */
#include <stdlib.h>

#include "fuzz_common.h"
#include "ir/passes/passes.h"
#include "runtime/exec.h"

static jit_ctx *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx) {
    jit_ctx_opts o = jit_ctx_opts_default();
    o.n_threads = 1;
    o.opt_level = 1; /* LLVM's quicker pipeline: more inputs per second */
    if (jit_ctx_create(&o, &ctx) != JIT_OK) abort();
  }
  ir_func **fs = NULL;
  uint32_t n = 0;
  if (!fuzz_parse(data, size, &fs, &n)) return 0;
  for (uint32_t i = 0; i < n; i++) {
    ir_func *f = fs[i];
    if (ir_verify(f, "fuzz") != JIT_OK || !fuzz_small_enough(f)) continue;
    if (ir_optimize(f, 0, true) == JIT_EINTERNAL) abort();
    if (!fuzz_small_enough(f)) continue;
    exec *e = NULL;
    exec_stats st;
    jit_status s = exec_build(ctx, f, &e, &st);
    if (s == JIT_EINTERNAL) abort();
    void **args = NULL, **results = NULL;
    if (s == JIT_OK && fuzz_buffers(f, 2, &args, &results))
      (void)exec_run(e, (const void *const *)args, results);
    fuzz_free_buffers(f, args, results);
    exec_free(e);
  }
  fuzz_free_funcs(fs, n);
  return 0;
}
