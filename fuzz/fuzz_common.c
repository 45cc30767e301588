/* fuzz_common.c: parsing, size caps and buffers for the IR fuzzers (fuzz_common.h). */
#include "fuzz_common.h"

#include <stdlib.h>
#include <string.h>

static bool small_enough(const ir_func *f, int64_t scan_budget) {
  if (f->n_ins > FUZZ_MAX_INS) return false;
  for (uint32_t t = 0; t < f->n_types; t++)
    if (ir_type_numel(&f->types[t]) > FUZZ_MAX_ELEMS) return false;
  for (uint32_t i = 0; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->op != IR_SCAN) continue;
    int64_t len = in->attr.scan.length;
    if (len < 0 || len > scan_budget) return false;
    if (in->attr.scan.body < f->n_bodies &&
        !small_enough(f->bodies[in->attr.scan.body], scan_budget / (len ? len : 1)))
      return false;
  }
  for (uint32_t b = 0; b < f->n_bodies; b++)
    if (!small_enough(f->bodies[b], scan_budget)) return false;
  return true;
}

bool fuzz_small_enough(const ir_func *f) { return small_enough(f, FUZZ_MAX_SCAN); }

bool fuzz_parse(const uint8_t *data, size_t size, ir_func ***fs, uint32_t *n) {
  *fs = NULL;
  *n = 0;
  if (size > FUZZ_MAX_TEXT) return false;
  return ir_parse((const char *)data, size, fs, n) == JIT_OK;
}

void fuzz_free_funcs(ir_func **fs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) ir_func_free(fs[i]);
  free(fs);
}

static size_t bytes_of(const ir_type *t) {
  return (size_t)ir_type_numel(t) * jit_dtype_size(t->dtype) + 1;
}

bool fuzz_buffers(const ir_func *f, uint64_t seed, void ***args, void ***results) {
  *args = calloc(f->n_params + 1, sizeof **args);
  *results = calloc(f->n_results + 1, sizeof **results);
  if (!*args || !*results) return false;
  for (uint32_t p = 0; p < f->n_params; p++) {
    const ir_type *t = ir_type_of(f, p);
    unsigned char *b = malloc(bytes_of(t));
    (*args)[p] = b;
    if (!b) return false;
    for (int64_t i = 0; i < ir_type_numel(t); i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      ir_store_f64(t->dtype, b, i, (double)(int)((seed >> 33) % 7) - 3); /* -3..3 */
    }
  }
  for (uint32_t r = 0; r < f->n_results; r++)
    if (!((*results)[r] = calloc(1, bytes_of(ir_type_of(f, f->results[r]))))) return false;
  return true;
}

void fuzz_free_buffers(const ir_func *f, void **args, void **results) {
  for (uint32_t p = 0; args && p < f->n_params; p++) free(args[p]);
  for (uint32_t r = 0; results && r < f->n_results; r++) free(results[r]);
  free(args);
  free(results);
}
