/* subtrace.h: the machinery every transformation (vmap, value_and_grad, checkpoint, scan) uses:
 * trace the user's function into its own IR function, then splice IR back into the caller. */
#ifndef TJIT_SUBTRACE_H
#define TJIT_SUBTRACE_H

#include "trace/trace_internal.h"

/* Runs fn on fresh params of arg_types into a new function *out (the caller frees it), as a
   nested trace: own value table and tag, the parent's name and static args. On failure (an op
   inside fn, a result left unset, OOM) the inner message ("name: add at x.c:12: ...", or
   "name: vmap at x.c:7: result 0 was not set" for the request itself, named after c's op and
   location) becomes the parent's sticky error, *out is NULL and the status is returned. */
jit_status subtrace(op_ctx *c, jit_trace_fn fn, void *user, int n_args, const ir_type *arg_types,
                    int n_results, ir_func **out);

/* subtrace for a body that may use the enclosing traces' values (a scan's): those become extra
   params of *out before the declared ones; *captured (malloc'd, the caller frees it; NULL when
   none) holds their refs in c's function, *n_captured their count. */
jit_status subtrace_capturing(op_ctx *c, jit_trace_fn fn, void *user, int n_args,
                              const ir_type *arg_types, int n_results, ir_func **out,
                              ir_ref **captured, uint32_t *n_captured);

/* subtrace_capturing of n functions on the same args (a switch's branches, a while's predicate
   and body): fns[j] returns n_results[j] values into outs[j]. The values any of them captures
   become the first *n_captured params of every one of them (*captured: their refs in c's
   function, malloc'd, the caller frees it), so that they all take the same operands. On failure
   every outs[j] is NULL. */
jit_status subtrace_sharing(op_ctx *c, int n, const jit_trace_fn *fns, void *user, int n_args,
                            const ir_type *arg_types, const int *n_results, ir_func **outs,
                            ir_ref **captured, uint32_t *n_captured);

/* Emits op (COND or WHILE, attributes a but the body index) over operands with bodies[0..n) as
   its bodies (given to c's function, also on failure; a->cond.body set here) and one GET per
   result into results. JIT_ENOMEM recorded on c. */
jit_status subtrace_emit_bodies(op_ctx *c, ir_op op, ir_attr *a, ir_func **bodies, uint32_t n,
                                const ir_ref *operands, uint32_t n_operands, jit_val *results);

/* subtrace_capturing for a shard_map's body: fn sees per-device blocks, and collectives inside
   it (at any nesting depth) name mesh's axes. */
jit_status subtrace_manual(op_ctx *c, jit_trace_fn fn, void *user, int n_args,
                           const ir_type *arg_types, int n_results, const jit_mesh *mesh,
                           ir_func **out, ir_ref **captured, uint32_t *n_captured);

/* Copies body's instructions into the parent's function with param i mapped to args[i]
   (locations and attributes kept) and writes the refs of body's results to
   results[0..body->n_results). JIT_ENOMEM is recorded on c. */
/* The checks every transformation's entry makes on its caller's arguments (fn, counts, arrays);
   false after recording JIT_EINVAL. */
bool subtrace_check_call(op_ctx *c, jit_trace_fn fn, int n_args, const jit_val *args,
                         int n_results, const jit_val *results);
jit_status subtrace_inline(op_ctx *c, const ir_func *body, const ir_ref *args, ir_ref *results);

/* Resolves n handles to typed refs (weak scalars become f32) and copies their types into
   types (may be NULL). A bad handle is recorded on c as "argument i is ...". */
jit_status subtrace_args(op_ctx *c, int n, const jit_val *args, ir_ref *refs, ir_type *types);

/* results[i] = a new handle for refs[i]; on a failed trace, all are (jit_val){0}. */
void subtrace_results(op_ctx *c, int n, const ir_ref *refs, jit_val *results);

#endif /* TJIT_SUBTRACE_H */
