/* transform.c: the entry points not implemented yet (shard_map and its collectives): each
 * records JIT_EUNSUPPORTED. */
#include "trace/trace_internal.h"

/* Records "not implemented yet" (unless the trace already failed) and invalidates n results. */
static void unsupported(jit_trace *t, const char *name, jit_val *results, int n) {
  op_ctx c;
  for (int i = 0; results && i < n; i++) results[i] = (jit_val){0};
  if (op_begin(t, name, &c)) op_fail(&c, JIT_EUNSUPPORTED, "not implemented yet");
}

void jit_shard_map(jit_trace *t, jit_trace_fn fn, void *user, const jit_mesh *m, int n_args,
                   const jit_val *args, const char *const *in_specs, int n_results,
                   jit_val *results, const char *const *out_specs) {
  unsupported(t, "shard_map", results, n_results);
}

jit_val jit_psum(jit_trace *t, jit_val x, const char *axis) {
  unsupported(t, "psum", NULL, 0);
  return (jit_val){0};
}

jit_val jit_pmean(jit_trace *t, jit_val x, const char *axis) {
  unsupported(t, "pmean", NULL, 0);
  return (jit_val){0};
}

jit_val jit_all_gather(jit_trace *t, jit_val x, const char *axis, int dim) {
  unsupported(t, "all_gather", NULL, 0);
  return (jit_val){0};
}

jit_val jit_axis_index(jit_trace *t, const char *axis) {
  unsupported(t, "axis_index", NULL, 0);
  return (jit_val){0};
}
