/* transform_cond.c: jit_switch and jit_cond: every branch traced once on the args (values of
 * enclosing traces they use become extra args of all of them), then one COND op whose results
 * are read through GET. lax.cond(pred, t, f) is lax.switch(i32(pred), [f, t]). */
#include <stdio.h>
#include <stdlib.h>

#include "trace/subtrace.h"

/* The branches' results have branch 0's types; false after recording JIT_EINVAL. */
static bool check_branch_types(op_ctx *c, ir_func *const *b, int n, const char *const *names) {
  for (int j = 1; j < n; j++)
    for (uint32_t k = 0; k < b[0]->n_results; k++) {
      const ir_type *t0 = ir_type_of(b[0], b[0]->results[k]), *tj = ir_type_of(b[j], b[j]->results[k]);
      if (!ir_type_equal(t0, tj)) {
        op_fail(c, JIT_EINVAL, "%s returns result %u as %s but %s returns it as %s (every branch "
                "must return the same types)", names[j], k, trace_ty(tj).s, names[0], trace_ty(t0).s);
        return false;
      }
    }
  return true;
}

/* The switch over index (an i32 scalar ref) once the request is checked. */
static void emit_switch(op_ctx *c, ir_ref index, int n, const jit_trace_fn *fns,
                        const char *const *names, void *user, int n_args, const jit_val *args,
                        int n_results, jit_val *results) {
  size_t na = n_args ? (size_t)n_args : 1;
  ir_ref *refs = malloc(na * sizeof *refs), *captured = NULL, *operands = NULL;
  ir_type *types = malloc(na * sizeof *types);
  ir_func **bodies = calloc((size_t)n, sizeof *bodies);
  int *n_res = malloc((size_t)n * sizeof *n_res);
  uint32_t n_captured = 0;
  if (!refs || !types || !bodies || !n_res) {
    op_fail(c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(c, n_args, args, refs, types) != JIT_OK) goto done;
  for (int j = 0; j < n; j++) n_res[j] = n_results;
  if (subtrace_sharing(c, n, fns, user, n_args, types, n_res, bodies, &captured, &n_captured) != JIT_OK)
    goto done;
  if (!check_branch_types(c, bodies, n, names)) goto done;
  operands = malloc((1 + n_captured + na) * sizeof *operands);
  if (!operands) {
    op_fail(c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  operands[0] = index;
  for (uint32_t i = 0; i < n_captured; i++) operands[1 + i] = captured[i];
  for (int i = 0; i < n_args; i++) operands[1 + n_captured + (uint32_t)i] = refs[i];
  ir_attr a = {0};
  subtrace_emit_bodies(c, IR_COND, &a, bodies, (uint32_t)n, operands, 1 + n_captured + (uint32_t)n_args,
                       results);
  for (int j = 0; j < n; j++) bodies[j] = NULL; /* the function owns them now */
done:
  for (int j = 0; bodies && j < n; j++) ir_func_free(bodies[j]);
  if (c->t->status != JIT_OK)
    for (int k = 0; k < n_results; k++) results[k] = (jit_val){0};
  free(refs);
  free(types);
  free(bodies);
  free(n_res);
  free(captured);
  free(operands);
}

/* Common checks; false after recording. */
static bool check_request(op_ctx *c, int n_args, const jit_val *args, int n_results, jit_val *results) {
  if (n_args < 0 || n_results < 0)
    return op_fail(c, JIT_EINVAL, "negative count (n_args %d, n_results %d)", n_args, n_results), false;
  if ((n_args && !args) || (n_results && !results))
    return op_fail(c, JIT_EINVAL, "%s is NULL", n_args && !args ? "args" : "results"), false;
  return true;
}

/* v as an i32 scalar ref (a weak scalar takes i32; other integer or bool scalars convert);
   IR_NOREF after recording. */
static ir_ref index_ref(op_ctx *c, jit_val v, const char *what, bool want_bool) {
  trace_val *tv = op_val(c, v, what);
  if (!tv) return IR_NOREF;
  ir_ref r = tv->weak && tv->ref == IR_NOREF ? op_weak_as(c, tv, want_bool ? JIT_BOOL : JIT_I32) : tv->ref;
  if (r == IR_NOREF) return IR_NOREF;
  ir_type t = *op_type(c, r);
  bool ok = t.rank == 0 && (want_bool ? t.dtype == JIT_BOOL : ir_dtype_is_int(t.dtype));
  if (!ok) {
    op_fail(c, JIT_EDTYPE, "%s has type %s: it must be a%s scalar", what, trace_ty(&t).s,
            want_bool ? " bool" : "n integer");
    return IR_NOREF;
  }
  if (t.dtype == JIT_I32) return r;
  ir_type i32 = {.dtype = JIT_I32, .rank = 0};
  return op_emit(c, IR_CONVERT, 1, &r, NULL, &i32);
}

void jit_switch(jit_trace *t, jit_val index, int n_branches, const jit_trace_fn *branches,
                void *user, int n_args, const jit_val *args, int n_results, jit_val *results) {
  op_ctx c;
  for (int k = 0; results && k < n_results; k++) results[k] = (jit_val){0};
  if (!op_begin(t, "switch", &c)) return;
  if (n_branches < 1 || !branches) {
    op_fail(&c, JIT_EINVAL, n_branches < 1 ? "n_branches is %d: a switch needs a branch"
                                           : "branches is NULL (n_branches %d)", n_branches);
    return;
  }
  for (int j = 0; j < n_branches; j++)
    if (!branches[j]) {
      op_fail(&c, JIT_EINVAL, "branch %d is NULL", j);
      return;
    }
  if (!check_request(&c, n_args, args, n_results, results)) return;
  ir_ref i = index_ref(&c, index, "index", false);
  if (i == IR_NOREF) return;
  char (*names)[24] = malloc((size_t)n_branches * sizeof *names);
  const char **np = malloc((size_t)n_branches * sizeof *np);
  if (!names || !np) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
  } else {
    for (int j = 0; j < n_branches; j++) {
      snprintf(names[j], sizeof names[j], "branch %d", j);
      np[j] = names[j];
    }
    emit_switch(&c, i, n_branches, branches, np, user, n_args, args, n_results, results);
  }
  free(names);
  free(np);
}

void jit_cond(jit_trace *t, jit_val pred, jit_trace_fn true_fn, jit_trace_fn false_fn, void *user,
              int n_args, const jit_val *args, int n_results, jit_val *results) {
  op_ctx c;
  for (int k = 0; results && k < n_results; k++) results[k] = (jit_val){0};
  if (!op_begin(t, "cond", &c)) return;
  if (!true_fn || !false_fn) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", !true_fn ? "true_fn" : "false_fn");
    return;
  }
  if (!check_request(&c, n_args, args, n_results, results)) return;
  ir_ref i = index_ref(&c, pred, "pred", true);
  if (i == IR_NOREF) return;
  const jit_trace_fn fns[2] = {false_fn, true_fn};
  const char *const names[2] = {"false_fn", "true_fn"};
  emit_switch(&c, i, 2, fns, names, user, n_args, args, n_results, results);
}
