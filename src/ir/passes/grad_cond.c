/* grad_cond.c: COND's reverse-mode rule (lax.switch's transpose, done as a rematerialization).
 *
 * What it does: the backward is a COND on the forward's index whose branch k takes the forward
 * args and the results' cotangents, recomputes branch k's forward and returns the cotangents of
 * the float args (ir_value_and_grad_sel of the branch's VJP loss, ir_vjp_loss_of). Nothing of the
 * forward branch is kept for it: JAX saves the chosen branch's residuals instead, which costs
 * memory for every branch's residual types; recomputing costs one more run of the branch.
 * Needs: in verified, ops its operands in dst. Cost: one backward body per branch.
 */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

static const char *const who = "value_and_grad";

/* Branch b's backward function: params na args then nr cotangents, results the cotangents of
   the args wrt marks. NULL with *st set on failure. */
static ir_func *backward_branch(const ir_func *b, uint32_t na, const bool *wrt, uint32_t n_wrt,
                                ir_loc loc, jit_status *st) {
  ir_func *l = ir_vjp_loss_of(b, na, loc, st);
  if (!l) return NULL;
  ir_func *bk = ir_func_new(b->name);
  uint32_t np = l->n_params;
  ir_ref *params = malloc((np + 1) * sizeof *params), *res = malloc((n_wrt + 2) * sizeof *res);
  bool *lw = calloc(np + 1, sizeof *lw);
  if (!bk || !params || !res || !lw) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t p = 0; p < np; p++) {
    params[p] = ir_emit_param(bk, ir_type_intern(bk, ir_type_of(l, p)));
    lw[p] = p < na && wrt[p];
  }
  if (bk->oom) *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (*st == JIT_OK) *st = ir_value_and_grad_sel(bk, l, params, lw, 0, res, loc);
  if (*st == JIT_OK && ir_set_results(bk, n_wrt, res + 1) != JIT_OK) /* res[0] is the loss */
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
done:
  ir_func_free(l);
  free(params);
  free(res);
  free(lw);
  if (*st != JIT_OK) {
    ir_func_free(bk);
    return NULL;
  }
  return bk;
}

jit_status ir_cond_vjp(ir_func *dst, const ir_func *src, const ir_ins *in, const ir_ref *ops,
                       const ir_ref *ct_results, ir_ref *ct_ops, ir_loc loc) {
  jit_status st = JIT_OK;
  const ir_func *b0 = ir_body(src, in);
  uint32_t na = in->n_args - 1, nr = b0->n_results, n = in->attr.cond.n_bodies, n_wrt = 0;
  bool *wrt = calloc(na + 1, sizeof *wrt);
  ir_ref *bops = malloc((1 + na + nr) * sizeof *bops);
  for (uint32_t i = 0; i < in->n_args; i++) ct_ops[i] = IR_NOREF;
  if (!wrt || !bops) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t i = 0; i < na; i++) n_wrt += wrt[i] = ir_dtype_is_float(ir_type_of(b0, i)->dtype);
  if (!n_wrt) goto done;
  bops[0] = ops[0];
  for (uint32_t i = 0; i < na; i++) bops[1 + i] = ops[1 + i];
  for (uint32_t k = 0; k < nr; k++) { /* a zero cotangent is a zero splat, folded in the branch */
    ir_ty ty = ir_type_intern(dst, ir_type_of(b0, b0->results[k]));
    bops[1 + na + k] = ct_results[k] != IR_NOREF ? ct_results[k] : ir_emit_const(dst, ty, 0, loc);
  }
  ir_attr a = {0};
  a.cond.n_bodies = n;
  for (uint32_t j = 0; j < n && st == JIT_OK; j++) {
    ir_func *bk = backward_branch(ir_body_at(src, in, j), na, wrt, n_wrt, loc, &st);
    uint32_t index = 0;
    if (bk && ir_add_body(dst, bk, &index) != JIT_OK) st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    if (j == 0) a.cond.body = index;
  }
  if (st != JIT_OK) goto done;
  ir_ty tty = ir_type_intern(dst, &(ir_type){.dtype = JIT_BOOL});
  ir_ref c = tty == UINT32_MAX ? IR_NOREF : ir_emit(dst, IR_COND, tty, 1 + na + nr, bops, &a, loc);
  for (uint32_t i = 0, k = 0; i < na && c != IR_NOREF; i++) {
    if (!wrt[i]) continue;
    ir_attr g = {0};
    g.axis = k++;
    ir_type t;
    ir_result_type(dst, &dst->ins[c], (uint32_t)g.axis, &t);
    ir_ty ty = ir_type_intern(dst, &t);
    ct_ops[1 + i] = ty == UINT32_MAX ? IR_NOREF : ir_emit(dst, IR_GET, ty, 1, &c, &g, loc);
  }
  if (c == IR_NOREF || dst->oom) st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
done:
  free(wrt);
  free(bops);
  return st;
}
