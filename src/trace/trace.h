/* trace.h: what the runtime asks of the tracer: run a user's trace function on params of
 * given types and hand back the traced IR function (src/trace/). */
#ifndef TJIT_TRACE_H
#define TJIT_TRACE_H

#include "ir/ir.h"

typedef struct trace_request {
  const char *name;            /* the jit_fn's name: first word of every error message */
  jit_trace_fn fn;
  void *user;
  int n_args, n_results;
  const ir_type *arg_types;    /* n_args param types */
  const void *static_args;     /* visible to fn through jit_trace_static_args */
  size_t static_len;
  /* A sub-trace (scan's body) may use the enclosing traces' values: each becomes an extra param,
     placed BEFORE the declared ones, and *captured (malloc'd, the caller frees it) receives
     their refs in the parent trace's function, *n_captured their count. NULL: not allowed. */
  ir_ref **captured;
  uint32_t *n_captured;
  /* A shard_map's body: values are per-device blocks and jit_psum & co. name this mesh's axes
     (also from traces nested inside the body). NULL elsewhere. */
  const struct jit_mesh *manual_mesh;
} trace_request;

/* Runs req->fn once. On success *out is the traced function (params in arg order, results in
   result order; weakly typed results become f32). On failure returns the trace's sticky error
   (message "name: op at file:line: reason" in jit_last_error) and *out is NULL. */
jit_status trace_function(const trace_request *req, ir_func **out);

/* A jit_trace_fn whose user is a const ir_func * g: records g's instructions (locations and
   attributes kept) on args that must have g's param types. Registered with jit_compile (n_args =
   g's params, n_results = g's results), it makes parsed IR a jit_fn: how tjit-run runs dumps. */
void trace_replay(jit_trace *t, const jit_val *args, jit_val *results, void *user);

#endif /* TJIT_TRACE_H */
