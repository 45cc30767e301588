/* fuzz_ir_interp.c: IR text -> parse -> verify -> the pass pipeline (verifying after each pass)
 * -> the reference interpreter, before and after the passes. A verified function that makes a
 * pass produce invalid IR (JIT_EINTERNAL) is a finding, like any crash, leak or UB. */
#include <stdlib.h>

#include "fuzz_common.h"
#include "ir/passes/passes.h"

static void interp(const ir_func *f) {
  void **args = NULL, **results = NULL;
  if (fuzz_buffers(f, 1, &args, &results))
    (void)ir_interp(f, (const void *const *)args, results);
  fuzz_free_buffers(f, args, results);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  if (!fuzz_parse(data, size, &fs, &n)) return 0;
  for (uint32_t i = 0; i < n; i++) {
    ir_func *f = fs[i];
    if (ir_verify(f, "fuzz") != JIT_OK || !fuzz_small_enough(f)) continue;
    interp(f);
    if (ir_optimize(f, 0, true) == JIT_EINTERNAL) abort();
    if (fuzz_small_enough(f)) interp(f);
  }
  fuzz_free_funcs(fs, n);
  return 0;
}
