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

/* b with params: the n_all values of all (its own captures cap[0..n_cap) among them) then its
   declared params; the result replaces *b. JIT_ENOMEM. */
static jit_status widen_params(ir_func **b, const ir_ref *cap, uint32_t n_cap, const ir_ref *all,
                               const ir_type *all_types, uint32_t n_all) {
  ir_func *f = *b, *nf = ir_func_new(f->name);
  ir_ref *map = malloc((f->n_ins ? f->n_ins : 1) * sizeof *map);
  ir_ref *res = malloc((f->n_results ? f->n_results : 1) * sizeof *res);
  jit_status st = JIT_ENOMEM;
  if (!nf || !map || !res) goto done;
  for (uint32_t k = 0; k < n_all; k++) {
    ir_ref p = ir_emit_param(nf, ir_type_intern(nf, &all_types[k]));
    for (uint32_t i = 0; i < n_cap; i++)
      if (cap[i] == all[k]) map[i] = p;
  }
  for (uint32_t i = n_cap; i < f->n_params; i++)
    map[i] = ir_emit_param(nf, ir_type_intern(nf, ir_type_of(f, i)));
  if (nf->oom || ir_copy_into(nf, f, map) != JIT_OK) goto done;
  for (uint32_t k = 0; k < f->n_results; k++) res[k] = map[f->results[k]];
  if (ir_set_results(nf, f->n_results, res) != JIT_OK) goto done;
  ir_func_free(f);
  *b = nf;
  nf = NULL;
  st = JIT_OK;
done:
  ir_func_free(nf);
  free(map);
  free(res);
  return st;
}

jit_status subtrace_sharing(op_ctx *c, int n, const jit_trace_fn *fns, void *user, int n_args,
                            const ir_type *arg_types, const int *n_results, ir_func **outs,
                            ir_ref **captured, uint32_t *n_captured) {
  jit_status st = JIT_OK;
  ir_ref **caps = calloc((size_t)n, sizeof *caps), *all = NULL;
  uint32_t *n_caps = calloc((size_t)n, sizeof *n_caps), n_all = 0, cap_all = 0;
  ir_type *all_types = NULL;
  *captured = NULL;
  *n_captured = 0;
  for (int j = 0; j < n; j++) outs[j] = NULL;
  if (!caps || !n_caps) {
    st = op_fail(c, JIT_ENOMEM, "out of memory");
    goto fail;
  }
  for (int j = 0; j < n; j++)
    if ((st = subtrace_capturing(c, fns[j], user, n_args, arg_types, n_results[j], &outs[j],
                                 &caps[j], &n_caps[j])) != JIT_OK)
      goto fail;
  for (int j = 0; j < n; j++) /* the union, in first-seen order */
    for (uint32_t i = 0; i < n_caps[j]; i++) {
      uint32_t k = 0;
      while (k < n_all && all[k] != caps[j][i]) k++;
      if (k < n_all) continue;
      if (!ir_grow((void **)&all, &cap_all, n_all + 1, sizeof *all)) {
        st = op_fail(c, JIT_ENOMEM, "out of memory");
        goto fail;
      }
      all[n_all++] = caps[j][i];
    }
  all_types = malloc((n_all ? n_all : 1) * sizeof *all_types);
  if (!all_types) {
    st = op_fail(c, JIT_ENOMEM, "out of memory");
    goto fail;
  }
  for (uint32_t k = 0; k < n_all; k++) all_types[k] = *op_type(c, all[k]);
  for (int j = 0; j < n; j++)
    if (widen_params(&outs[j], caps[j], n_caps[j], all, all_types, n_all) != JIT_OK) {
      st = op_fail(c, JIT_ENOMEM, "out of memory");
      goto fail;
    }
  *captured = all;
  *n_captured = n_all;
  all = NULL;
  goto done;
fail:
  for (int j = 0; j < n; j++) {
    ir_func_free(outs[j]);
    outs[j] = NULL;
  }
done:
  for (int j = 0; caps && j < n; j++) free(caps[j]);
  free(caps);
  free(n_caps);
  free(all);
  free(all_types);
  return st;
}

jit_status subtrace_emit_bodies(op_ctx *c, ir_op op, ir_attr *a, ir_func **bodies, uint32_t n,
                                const ir_ref *operands, uint32_t n_operands, jit_val *results) {
  ir_func *f = c->t->f;
  jit_status st = JIT_OK;
  for (uint32_t j = 0; j < n; j++) { /* consecutive: the op names the first and the count */
    uint32_t index = 0;
    if (st == JIT_OK) st = ir_add_body(f, bodies[j], &index);
    else ir_func_free(bodies[j]);
    if (j == 0) a->cond.body = index;
  }
  a->cond.n_bodies = n;
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(f, &token);
  ir_ref s = st != JIT_OK || tty == UINT32_MAX ? IR_NOREF
             : ir_emit(f, op, tty, n_operands, operands, a, c->loc);
  if (s == IR_NOREF) return op_fail(c, JIT_ENOMEM, "out of memory");
  uint32_t n_results = ir_body(f, &f->ins[s])->n_results;
  for (uint32_t k = 0; k < n_results; k++) {
    ir_type rt;
    ir_result_type(f, &f->ins[s], k, &rt);
    ir_attr g = {0};
    g.axis = k;
    ir_ty ty = ir_type_intern(f, &rt);
    results[k] = op_result(c, ty == UINT32_MAX ? IR_NOREF : ir_emit(f, IR_GET, ty, 1, &s, &g, c->loc));
  }
  return c->t->status;
}
