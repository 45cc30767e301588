/* transform_vmap.c: jit_vmap's entry point: checks the axes and batch sizes, traces fn on one
 * example into a sub-function and splices its batched version (src/ir/passes/vmap.c) in. */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "trace/subtrace.h"

/* The normalized in_axes (-1: unbatched) and the common batch size; false after recording. */
static bool check_in_axes(op_ctx *c, int n_args, const ir_type *types, const int *in_axes,
                          int *axes, int64_t *batch) {
  int first = -1;
  for (int i = 0; i < n_args; i++) {
    int ax = in_axes ? in_axes[i] : 0;
    axes[i] = -1;
    if (ax == -1) continue;
    if (!op_axis(ax, types[i].rank, &axes[i])) {
      op_fail(c, JIT_ESHAPE,
              "in_axes[%d] = %d out of range for arg %d of type %s (-1: not batched)", i, ax, i,
              trace_ty(&types[i]).s);
      return false;
    }
    int64_t size = types[i].dims[axes[i]];
    if (first < 0) {
      first = i;
      *batch = size;
    } else if (size != *batch) {
      op_fail(c, JIT_ESHAPE,
              "batched args disagree on the batch size: arg %d has %lld at axis %d, arg %d has "
              "%lld at axis %d",
              first, (long long)*batch, axes[first], i, (long long)size, axes[i]);
      return false;
    }
  }
  if (first < 0) {
    op_fail(c, JIT_EINVAL, "no batched argument (%s)",
            n_args ? "every in_axes entry is -1" : "n_args is 0");
    return false;
  }
  return true;
}

void jit_vmap(jit_trace *t, jit_trace_fn fn, void *user, int n_args, const jit_val *args,
              const int *in_axes, int n_results, jit_val *results, const int *out_axes) {
  op_ctx c;
  ir_func *body = NULL;
  ir_ref *refs = NULL, *out = NULL;
  ir_type *types = NULL;
  int *axes = NULL, *oaxes = NULL;
  if (results)
    for (int i = 0; i < n_results; i++) results[i] = (jit_val){0};
  if (!op_begin(t, "vmap", &c)) return;
  if (!subtrace_check_call(&c, fn, n_args, args, n_results, results)) return;
  size_t na = n_args ? (size_t)n_args : 1, nr = n_results ? (size_t)n_results : 1;
  refs = malloc(na * sizeof *refs);
  types = malloc(na * sizeof *types);
  axes = malloc(na * sizeof *axes);
  out = malloc(nr * sizeof *out);
  oaxes = malloc(nr * sizeof *oaxes);
  if (!refs || !types || !axes || !out || !oaxes) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  int64_t batch = 0;
  if (subtrace_args(&c, n_args, args, refs, types) != JIT_OK) goto done;
  if (!check_in_axes(&c, n_args, types, in_axes, axes, &batch)) goto done;

  for (int i = 0; i < n_args; i++) { /* one example's type: drop the batch dim */
    if (axes[i] < 0) continue;
    for (int d = axes[i]; d + 1 < types[i].rank; d++) types[i].dims[d] = types[i].dims[d + 1];
    types[i].dims[--types[i].rank] = 0;
  }
  if (subtrace(&c, fn, user, n_args, types, n_results, &body) != JIT_OK) goto done;

  for (int i = 0; i < n_results; i++) {
    const ir_type *rt = &body->types[body->ins[body->results[i]].ty];
    int ax = out_axes ? out_axes[i] : 0;
    if (!op_axis(ax, rt->rank + 1, &oaxes[i])) {
      op_fail(&c, JIT_ESHAPE, "out_axes[%d] = %d out of range for result %d of type %s", i, ax,
              i, trace_ty(rt).s);
      goto done;
    }
  }
  jit_status st = ir_vmap_into(t->f, body, refs, axes, batch, oaxes, out, c.loc);
  if (st != JIT_OK) {
    op_fail(&c, st, "%s", jit_last_error());
    goto done;
  }
  subtrace_results(&c, n_results, out, results);
done:
  ir_func_free(body);
  free(refs);
  free(types);
  free(axes);
  free(out);
  free(oaxes);
}
