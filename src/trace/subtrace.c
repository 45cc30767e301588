/* subtrace.c: nested tracing for the transformations: a user function traced into its own IR
 * function (errors surfacing in the parent trace), and the splice of IR back into the parent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/subtrace.h"

bool subtrace_check_call(op_ctx *c, jit_trace_fn fn, int n_args, const jit_val *args,
                         int n_results, const jit_val *results) {
  if (!fn) return op_fail(c, JIT_EINVAL, "fn is NULL"), false;
  if (n_args < 0 || n_results < 0)
    return op_fail(c, JIT_EINVAL, "negative count (n_args %d, n_results %d)", n_args, n_results),
           false;
  bool a = n_args > 0 && !args;
  if (a || (n_results > 0 && !results))
    return op_fail(c, JIT_EINVAL, "%s is NULL (n_%s = %d)", a ? "args" : "results",
                   a ? "args" : "results", a ? n_args : n_results),
           false;
  return true;
}

static jit_status run_sub(op_ctx *c, jit_trace_fn fn, void *user, int n_args,
                          const ir_type *arg_types, int n_results, ir_func **out,
                          ir_ref **captured, uint32_t *n_captured, const jit_mesh *manual) {
  jit_trace *t = c->t;
  *out = NULL;
  if (t->status != JIT_OK) return t->status;
  if (!fn) return op_fail(c, JIT_EINVAL, "function is NULL");
  if (n_args < 0 || n_results < 0)
    return op_fail(c, JIT_EINVAL, "negative count (n_args %d, n_results %d)", n_args, n_results);
  trace_request req = {.name = t->name,
                       .fn = fn,
                       .user = user,
                       .n_args = n_args,
                       .n_results = n_results,
                       .arg_types = arg_types,
                       .static_args = t->req ? t->req->static_args : NULL,
                       .static_len = t->req ? t->req->static_len : 0,
                       .captured = captured,
                       .n_captured = n_captured,
                       .manual_mesh = manual};
  jit_status st = trace_run(&req, c, out);
  if (st != JIT_OK) {
    /* the inner message already names the user's op and line inside fn: adopt it verbatim */
    t->status = st;
    snprintf(t->msg, sizeof t->msg, "%s", jit_last_error());
  }
  return st;
}

jit_status subtrace(op_ctx *c, jit_trace_fn fn, void *user, int n_args, const ir_type *arg_types,
                    int n_results, ir_func **out) {
  return run_sub(c, fn, user, n_args, arg_types, n_results, out, NULL, NULL, NULL);
}

jit_status subtrace_capturing(op_ctx *c, jit_trace_fn fn, void *user, int n_args,
                              const ir_type *arg_types, int n_results, ir_func **out,
                              ir_ref **captured, uint32_t *n_captured) {
  *captured = NULL;
  *n_captured = 0;
  return run_sub(c, fn, user, n_args, arg_types, n_results, out, captured, n_captured, NULL);
}

jit_status subtrace_manual(op_ctx *c, jit_trace_fn fn, void *user, int n_args,
                           const ir_type *arg_types, int n_results, const jit_mesh *mesh,
                           ir_func **out, ir_ref **captured, uint32_t *n_captured) {
  *captured = NULL;
  *n_captured = 0;
  return run_sub(c, fn, user, n_args, arg_types, n_results, out, captured, n_captured, mesh);
}

jit_status subtrace_inline(op_ctx *c, const ir_func *body, const ir_ref *args, ir_ref *results) {
  jit_trace *t = c->t;
  if (t->status != JIT_OK) return t->status;
  ir_ref *map = malloc((body->n_ins ? body->n_ins : 1) * sizeof *map);
  if (!map) return op_fail(c, JIT_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < body->n_params; i++) map[i] = args[i];
  jit_status st = ir_copy_into(t->f, body, map);
  for (uint32_t i = 0; st == JIT_OK && i < body->n_results; i++) results[i] = map[body->results[i]];
  free(map);
  return st == JIT_OK ? JIT_OK : op_fail(c, JIT_ENOMEM, "out of memory");
}

jit_status subtrace_args(op_ctx *c, int n, const jit_val *args, ir_ref *refs, ir_type *types) {
  for (int i = 0; i < n; i++) {
    char what[32];
    snprintf(what, sizeof what, "argument %d", i);
    refs[i] = op_typed(c, args[i], what);
    if (refs[i] == IR_NOREF) return c->t->status != JIT_OK ? c->t->status : JIT_EINTERNAL;
    if (types) types[i] = *op_type(c, refs[i]);
  }
  return JIT_OK;
}

void subtrace_results(op_ctx *c, int n, const ir_ref *refs, jit_val *results) {
  for (int i = 0; i < n; i++)
    results[i] = c->t->status == JIT_OK ? op_result(c, refs[i]) : (jit_val){0};
  if (c->t->status != JIT_OK)
    for (int i = 0; i < n; i++) results[i] = (jit_val){0};
}
