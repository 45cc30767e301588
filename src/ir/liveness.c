/* liveness.c: how many bytes of intermediate values a function keeps alive at once, over its
 * instruction order (what checkpointing reduces; the runtime's stats will report it). */
#include <stdlib.h>

#include "ir/ir.h"

static uint64_t bytes_of(const ir_func *f, ir_ref r) {
  const ir_type *t = ir_type_of(f, r);
  uint64_t n = (uint64_t)ir_type_numel(t), size = jit_dtype_size(t->dtype);
  return size && n > UINT64_MAX / size ? UINT64_MAX : n * size;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t ir_peak_live_bytes(const ir_func *f) {
  if (!f || f->n_ins == 0) return 0;
  /* last[r]: the index of r's last use (n_ins for a result); freed[i]: bytes dying after i */
  uint32_t *last = malloc(f->n_ins * sizeof *last);
  uint64_t *freed = calloc(f->n_ins, sizeof *freed);
  uint64_t live = 0, peak = 0;
  if (!last || !freed) {
    peak = UINT64_MAX; /* unknown: never report a misleadingly small peak */
    goto done;
  }
  for (uint32_t i = 0; i < f->n_ins; i++) last[i] = i;
  for (uint32_t i = 0; i < f->n_ins; i++)
    for (uint32_t k = 0; k < f->ins[i].n_args; k++)
      if (f->ins[i].args[k] < i && last[f->ins[i].args[k]] < i) last[f->ins[i].args[k]] = i;
  for (uint32_t i = 0; i < f->n_results; i++)
    if (f->results[i] < f->n_ins) last[f->results[i]] = f->n_ins;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    if (f->ins[i].op == IR_CONST) continue;
    uint64_t b = bytes_of(f, i);
    live = sat_add(live, b);
    if (last[i] < f->n_ins) freed[last[i]] = sat_add(freed[last[i]], b);
    if (live > peak) peak = live; /* i's result and its operands are all live while i runs */
    live -= freed[i] < live ? freed[i] : live;
  }
done:
  free(last);
  free(freed);
  return peak;
}
