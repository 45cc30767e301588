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
