/* dce.c: dead-code elimination: drops every instruction no result depends on.
 *
 * What it does: marks the results live, then walks the instructions backwards marking the
 * operands of live ones (operands always precede their users, so one backward sweep is
 * complete), and rebuilds the function from the live instructions in their original order.
 * Nothing has side effects yet, so liveness is exactly "some result depends on it"; an op
 * with effects (a callback, a collective) would have to be marked live here.
 * Needs: operands refer to earlier refs. Keeps: order, types, locations, and every PARAM
 * (params are the signature, used or not). Leaves the function untouched (no rebuild) when
 * everything is live.
 * Cost: O(instructions + operands), one rebuild.
 */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

jit_status pass_dce(ir_func *f) {
  jit_status st = JIT_OK;
  ir_ref *map = NULL;
  bool *live = calloc(f->n_ins ? f->n_ins : 1, sizeof *live);
  if (!live) return jit_error(JIT_ENOMEM, "dce: out of memory");
  for (uint32_t i = 0; i < f->n_results; i++) live[f->results[i]] = true;
  uint32_t n_dead = 0;
  for (uint32_t i = f->n_ins; i-- > f->n_params;) {
    if (!live[i]) {
      n_dead++;
      continue;
    }
    const ir_ins *in = &f->ins[i];
    for (uint32_t k = 0; k < in->n_args; k++) live[in->args[k]] = true;
  }
  if (n_dead == 0) goto done;

  map = malloc(f->n_ins * sizeof *map);
  if (!map) {
    st = jit_error(JIT_ENOMEM, "dce: out of memory");
    goto done;
  }
  ir_func *nf = pass_rebuild_begin(f, map, "dce");
  if (!nf) {
    st = JIT_ENOMEM;
    goto done;
  }
  ir_ref *args = NULL;
  uint32_t cap = 0;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    map[i] = IR_NOREF;
    if (!live[i]) continue;
    const ir_ins *in = &f->ins[i];
    if (!pass_map_args(nf, in, map, &args, &cap)) break;
    map[i] = ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    if (map[i] == IR_NOREF) break;
  }
  free(args);
  st = pass_rebuild_end(f, nf, map, "dce");
done:
  free(map);
  free(live);
  return st;
}
