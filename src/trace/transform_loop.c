/* transform_loop.c: jit_fori_loop, a scan over the i32 counter values lower..upper-1 (so vmap,
 * value_and_grad and the native loop come from the scan's rules), and jit_while's entry point. */
#include <stdlib.h>

#include "trace/subtrace.h"

typedef struct fori_adapter {
  jit_fori_fn body;
  void *user;
} fori_adapter;

/* The fori body as a scan step: the counter arrives as the step's x slice. */
static void fori_step(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  (void)y;
  const fori_adapter *a = user;
  a->body(t, x[0], carry, new_carry, a->user);
}

void jit_fori_loop(jit_trace *t, int64_t lower, int64_t upper, jit_fori_fn body, void *user,
                   int n_carry, const jit_val *init, jit_val *final_carry) {
  op_ctx c;
  for (int i = 0; final_carry && i < n_carry; i++) final_carry[i] = (jit_val){0};
  if (!op_begin(t, "fori_loop", &c)) return;
  if (!body) {
    op_fail(&c, JIT_EINVAL, "body is NULL");
    return;
  }
  if (n_carry < 0 || (n_carry && (!init || !final_carry))) {
    op_fail(&c, JIT_EINVAL, n_carry < 0 ? "negative n_carry %d" : "init or final_carry is NULL "
            "(n_carry %d)", n_carry);
    return;
  }
  if (lower < INT32_MIN || lower > INT32_MAX || upper < INT32_MIN || upper > INT32_MAX) {
    op_fail(&c, JIT_EINVAL, "bounds [%lld, %lld) do not fit the i32 counter", (long long)lower,
            (long long)upper);
    return;
  }
  /* the counter values as the scan's xs: iota + lower (no iterations when upper <= lower) */
  int64_t n = upper > lower ? upper - lower : 0;
  ir_type ct = {.dtype = JIT_I32, .rank = 1, .dims = {n}};
  ir_attr ia = {0};
  ir_ref xs = op_emit(&c, IR_IOTA, 0, NULL, &ia, &ct);
  if (lower != 0 && xs != IR_NOREF) {
    ir_ref ops[2] = {xs, op_const(&c, JIT_I32, 1, &n, (double)lower)};
    xs = ops[1] == IR_NOREF ? IR_NOREF : op_emit(&c, IR_ADD, 2, ops, NULL, NULL);
  }
  jit_val x = op_result(&c, xs);
  if (t->status != JIT_OK) return;
  fori_adapter ad = {body, user};
  jit_scan(jit_trace_at(t, c.loc.file, c.loc.line), fori_step, &ad, n_carry, init, 1, &x, n, 0,
           final_carry, 0, NULL);
}

/* The predicate returns a bool scalar and the body the carries' types; false after recording. */
static bool check_while_bodies(op_ctx *c, ir_func *const *b, int n_carry, const ir_type *ct) {
  const ir_type *p = ir_type_of(b[0], b[0]->results[0]);
  if (p->dtype != JIT_BOOL || p->rank != 0) {
    op_fail(c, JIT_EDTYPE, "cond_fn returns %s: it must return a bool scalar", trace_ty(p).s);
    return false;
  }
  for (int i = 0; i < n_carry; i++) {
    const ir_type *out = ir_type_of(b[1], b[1]->results[i]);
    if (!ir_type_equal(out, &ct[i])) {
      op_fail(c, JIT_ESHAPE, "body_fn returns carry %d as %s, but the carry is %s (a carry must "
              "keep its dtype and shape)", i, trace_ty(out).s, trace_ty(&ct[i]).s);
      return false;
    }
  }
  return true;
}

void jit_while(jit_trace *t, jit_trace_fn cond_fn, jit_trace_fn body_fn, void *user, int n_carry,
               const jit_val *init, jit_val *final_carry) {
  op_ctx c;
  for (int i = 0; final_carry && i < n_carry; i++) final_carry[i] = (jit_val){0};
  if (!op_begin(t, "while_loop", &c)) return;
  if (!cond_fn || !body_fn) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", !cond_fn ? "cond_fn" : "body_fn");
    return;
  }
  if (n_carry < 1 || !init || !final_carry) {
    op_fail(&c, JIT_EINVAL, n_carry < 1 ? "n_carry is %d: a while loop needs a carry"
                                        : "init or final_carry is NULL (n_carry %d)", n_carry);
    return;
  }
  ir_ref *refs = malloc((size_t)n_carry * sizeof *refs), *captured = NULL, *operands = NULL;
  ir_type *types = malloc((size_t)n_carry * sizeof *types);
  ir_func *bodies[2] = {NULL, NULL};
  uint32_t n_captured = 0;
  const jit_trace_fn fns[2] = {cond_fn, body_fn};
  const int n_results[2] = {1, n_carry};
  if (!refs || !types) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_carry, init, refs, types) != JIT_OK ||
      subtrace_sharing(&c, 2, fns, user, n_carry, types, n_results, bodies, &captured, &n_captured) != JIT_OK ||
      !check_while_bodies(&c, bodies, n_carry, types))
    goto done;
  if (!(operands = malloc((n_captured + (size_t)n_carry) * sizeof *operands))) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < n_captured; i++) operands[i] = captured[i];
  for (int i = 0; i < n_carry; i++) operands[n_captured + (uint32_t)i] = refs[i];
  ir_attr a = {0};
  a.cond.n_consts = n_captured;
  subtrace_emit_bodies(&c, IR_WHILE, &a, bodies, 2, operands, n_captured + (uint32_t)n_carry, final_carry);
  bodies[0] = bodies[1] = NULL; /* the function owns them now */
done:
  ir_func_free(bodies[0]);
  ir_func_free(bodies[1]);
  if (t->status != JIT_OK)
    for (int i = 0; i < n_carry; i++) final_carry[i] = (jit_val){0};
  free(refs);
  free(types);
  free(captured);
  free(operands);
}
