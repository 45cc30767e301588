/* replay.c: a trace function that records a given IR function (one parsed from text) instead of
 * calling user code, so that dumped IR compiles through jit_compile like any traced function. */
#include <stdlib.h>

#include "trace/subtrace.h"

void trace_replay(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const ir_func *g = user;
  op_ctx c;
  ir_ref *refs = NULL, *out = NULL;
  int n_args = t ? t->req->n_args : 0, n_results = t ? t->req->n_results : 0;
  if (!op_begin(t, "replay", &c)) return;
  if (!g || g->n_params != (uint32_t)n_args || g->n_results != (uint32_t)n_results) {
    op_fail(&c, JIT_EINVAL, "@%s takes %u args and returns %u results, the jit_fn %d and %d",
            g ? g->name : "?", g ? g->n_params : 0, g ? g->n_results : 0, n_args, n_results);
    return;
  }
  refs = malloc((n_args ? (size_t)n_args : 1) * sizeof *refs);
  out = malloc((n_results ? (size_t)n_results : 1) * sizeof *out);
  if (!refs || !out) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_args, args, refs, NULL) != JIT_OK) goto done;
  /* The copied instructions keep g's types, which hold only for args of g's param types. */
  for (int i = 0; i < n_args; i++) {
    const ir_type *want = ir_type_of(g, (ir_ref)i), *got = op_type(&c, refs[i]);
    if (!ir_type_equal(want, got)) {
      op_fail(&c, JIT_EINVAL, "argument %d is %s; @%s's param %%%d is %s", i, trace_ty(got).s,
              g->name, i, trace_ty(want).s);
      goto done;
    }
  }
  subtrace_inline(&c, g, refs, out);
done:
  subtrace_results(&c, n_results, out, results);
  free(refs);
  free(out);
}
