/* grad_scan.c: the reverse-mode rule of SCAN, for grad.c. The forward scan also stacks the carry
 * entering each step (the residuals); the backward is a scan in the opposite direction whose body
 * recomputes the step from that carry and takes its vector-Jacobian product (a step-level
 * checkpoint: the body's intermediates are not stored across steps, only its carries).
 *
 * Backward body params: consts, then its carries (the carries' cotangents, then an accumulator
 * per const), then its xs (the saved carries, the xs, the ys' cotangents). Results: the cotangent
 * of the step's carry in, each accumulator plus the step's const cotangent, and (a y per step) the
 * x's cotangent. The VJP of the step is value_and_grad of sum(new_carry * ct_c) + sum(y * ct_y).
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

static const char *const who = "value_and_grad";

/* Emits with the shape rules; IR_NOREF (and *st set) on failure. */
static ir_ref put(ir_func *f, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *attr,
                  const ir_type *declared, ir_loc loc, jit_status *st) {
  if (*st != JIT_OK) return IR_NOREF;
  const ir_type *tys[4];
  ir_type copies[4];
  for (uint32_t i = 0; i < n && i < 4; i++) {
    copies[i] = *ir_type_of(f, args[i]);
    tys[i] = &copies[i];
  }
  ir_type out;
  char why[256];
  if (n > 4 || ir_infer_type(op, n, tys, attr, declared, &out, why, sizeof why) != JIT_OK) {
    *st = jit_error(JIT_EINTERNAL, "%s: backward scan: %s: %s", who, ir_op_name[op],
                    n > 4 ? "too many operands" : why);
    return IR_NOREF;
  }
  ir_ty ty = ir_type_intern(f, &out);
  ir_ref r = ty == UINT32_MAX ? IR_NOREF : ir_emit(f, op, ty, n, args, attr, loc);
  if (r == IR_NOREF) *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  return r;
}

static ir_ref zeros(ir_func *f, const ir_type *t, ir_loc loc, jit_status *st) {
  ir_attr a = {0};
  return put(f, IR_CONST, 0, NULL, &a, t, loc, st);
}

static ir_ref get(ir_func *f, ir_ref scan, uint32_t k, ir_loc loc, jit_status *st) {
  ir_type t;
  if (*st != JIT_OK) return IR_NOREF;
  if (!ir_scan_result_type(f, &f->ins[scan], k, &t)) {
    *st = jit_error(JIT_EINTERNAL, "%s: backward scan: no result %u", who, k);
    return IR_NOREF;
  }
  ir_attr a = {0};
  a.axis = k;
  ir_ty ty = ir_type_intern(f, &t);
  ir_ref r = ty == UINT32_MAX ? IR_NOREF : ir_emit(f, IR_GET, ty, 1, &scan, &a, loc);
  if (r == IR_NOREF) *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  return r;
}

ir_func *ir_scan_body_saving_carries(const ir_func *body, uint32_t n_consts, uint32_t n_carry) {
  ir_func *b = ir_func_clone(body);
  ir_ref *res = malloc((body->n_results + n_carry + 1) * sizeof *res);
  if (!b || !res) goto fail;
  memcpy(res, body->results, body->n_results * sizeof *res);
  for (uint32_t c = 0; c < n_carry; c++) res[body->n_results + c] = n_consts + c;
  if (ir_set_results(b, body->n_results + n_carry, res) != JIT_OK) goto fail;
  free(res);
  return b;
fail:
  free(res);
  ir_func_free(b);
  return NULL;
}

/* sum(r_k * ct_k) over the float results of body, as one f32 scalar: its gradient is the VJP. */
static ir_func *loss_of(const ir_func *b, uint32_t n_in, ir_loc loc, jit_status *st) {
  ir_func *l = ir_func_new(b->name);
  ir_ref *map = malloc((b->n_ins + 1) * sizeof *map);
  if (!l || !map) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t p = 0; p < n_in; p++) map[p] = ir_emit_param(l, ir_type_intern(l, ir_type_of(b, p)));
  ir_ref *cts = malloc((b->n_results + 1) * sizeof *cts);
  if (!cts) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t k = 0; k < b->n_results; k++)
    cts[k] = ir_emit_param(l, ir_type_intern(l, ir_type_of(b, b->results[k])));
  if (l->oom) *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (*st == JIT_OK && ir_copy_into(l, b, map) != JIT_OK)
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  ir_type f32 = {.dtype = JIT_F32, .rank = 0};
  ir_ref loss = zeros(l, &f32, loc, st);
  for (uint32_t k = 0; k < b->n_results && *st == JIT_OK; k++) {
    const ir_type *t = ir_type_of(b, b->results[k]);
    if (!ir_dtype_is_float(t->dtype)) continue;
    ir_ref x[2] = {map[b->results[k]], cts[k]};
    ir_ref s = put(l, IR_MUL, 2, x, NULL, NULL, loc, st);
    if (t->rank) {
      ir_attr a = {0};
      a.dims.n = (uint8_t)t->rank;
      for (int d = 0; d < t->rank; d++) a.dims.d[d] = (uint8_t)d;
      s = put(l, IR_REDUCE_SUM, 1, &s, &a, NULL, loc, st);
    }
    if (t->dtype != JIT_F32) s = put(l, IR_CONVERT, 1, &s, NULL, &f32, loc, st);
    ir_ref y[2] = {loss, s};
    loss = put(l, IR_ADD, 2, y, NULL, NULL, loc, st);
  }
  free(cts);
  if (*st == JIT_OK && ir_set_results(l, 1, &loss) != JIT_OK)
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
done:
  free(map);
  if (*st != JIT_OK) {
    ir_func_free(l);
    return NULL;
  }
  return l;
}

/* The backward body (see the top of the file). */
static ir_func *backward_body(const ir_func *b, uint32_t c0, uint32_t nc, uint32_t nx, ir_loc loc,
                              jit_status *st) {
  uint32_t ny = b->n_results - nc, n_in = c0 + nc + nx;
  ir_func *l = loss_of(b, n_in, loc, st);
  ir_func *bb = ir_func_new(b->name);
  ir_ref *p = malloc((2 * c0 + 2 * nc + nx + ny + 1) * sizeof *p);
  ir_ref *largs = malloc((n_in + b->n_results + 1) * sizeof *largs);
  ir_ref *grads = malloc((n_in + 2) * sizeof *grads), *res = malloc((nc + c0 + nx + 1) * sizeof *res);
  if (*st != JIT_OK) goto fail;
  if (!bb || !p || !largs || !grads || !res) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  /* params: consts, ct_c, acc, carry_t, x_t, ct_y */
  uint32_t k = 0;
  for (uint32_t i = 0; i < c0; i++) p[k++] = ir_emit_param(bb, ir_type_intern(bb, ir_type_of(b, i)));
  for (uint32_t i = 0; i < nc; i++) p[k++] = ir_emit_param(bb, ir_type_intern(bb, ir_type_of(b, c0 + i)));
  for (uint32_t i = 0; i < c0; i++) p[k++] = ir_emit_param(bb, ir_type_intern(bb, ir_type_of(b, i)));
  for (uint32_t i = 0; i < nc + nx; i++)
    p[k++] = ir_emit_param(bb, ir_type_intern(bb, ir_type_of(b, c0 + i)));
  for (uint32_t j = 0; j < ny; j++)
    p[k++] = ir_emit_param(bb, ir_type_intern(bb, ir_type_of(b, b->results[nc + j])));
  if (bb->oom) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  ir_ref *ct_c = p + c0, *acc = p + c0 + nc, *carry_t = p + 2 * c0 + nc, *x_t = carry_t + nc,
         *ct_y = x_t + nx;
  /* the loss's params: consts, carry, x, then a cotangent per body result */
  for (uint32_t i = 0; i < c0; i++) largs[i] = p[i];
  for (uint32_t i = 0; i < nc; i++) largs[c0 + i] = carry_t[i];
  for (uint32_t i = 0; i < nx; i++) largs[c0 + nc + i] = x_t[i];
  for (uint32_t i = 0; i < nc; i++) largs[n_in + i] = ct_c[i];
  for (uint32_t j = 0; j < ny; j++) largs[n_in + nc + j] = ct_y[j];
  uint64_t wrt = 0;
  for (uint32_t i = 0; i < n_in && i < 64; i++)
    if (ir_dtype_is_float(ir_type_of(b, i)->dtype)) wrt |= 1ull << i;
  if (n_in > 64) {
    *st = jit_error(JIT_EUNSUPPORTED, "%s: a scan with more than 64 consts, carries and xs", who);
    goto fail;
  }
  ir_ref g_of[64];
  for (uint32_t i = 0; i < n_in; i++) g_of[i] = IR_NOREF;
  if (wrt) {
    jit_status gs = ir_value_and_grad_into(bb, l, largs, wrt, 0, grads, loc);
    if (gs != JIT_OK) {
      *st = gs;
      goto fail;
    }
    uint32_t gi = 1;
    for (uint32_t i = 0; i < n_in; i++)
      if (wrt >> i & 1) g_of[i] = grads[gi++];
  }
  for (uint32_t i = 0; i < nc; i++)
    res[i] = g_of[c0 + i] != IR_NOREF ? g_of[c0 + i] : zeros(bb, ir_type_of(b, c0 + i), loc, st);
  for (uint32_t i = 0; i < c0; i++) {
    ir_ref x[2] = {acc[i], g_of[i]};
    res[nc + i] = g_of[i] != IR_NOREF ? put(bb, IR_ADD, 2, x, NULL, NULL, loc, st) : acc[i];
  }
  for (uint32_t i = 0; i < nx; i++)
    res[nc + c0 + i] = g_of[c0 + nc + i] != IR_NOREF ? g_of[c0 + nc + i]
                                                     : zeros(bb, ir_type_of(b, c0 + nc + i), loc, st);
  if (*st == JIT_OK && ir_set_results(bb, nc + c0 + nx, res) != JIT_OK)
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (*st != JIT_OK) goto fail;
  ir_func_free(l);
  free(p);
  free(largs);
  free(grads);
  free(res);
  return bb;
fail:
  ir_func_free(l);
  ir_func_free(bb);
  free(p);
  free(largs);
  free(grads);
  free(res);
  return NULL;
}

jit_status ir_scan_vjp(ir_func *dst, const ir_func *src, const ir_ins *in, const ir_ref *ops,
                       ir_ref fwd_scan, const ir_ref *ct_results, ir_ref *ct_ops, ir_loc loc) {
  jit_status st = JIT_OK;
  const ir_func *b = ir_scan_body(src, in);
  const ir_scan *sa = &in->attr.scan;
  uint32_t c0 = sa->n_consts, nc = sa->n_carry, nx = in->n_args - c0 - nc, ny = b->n_results - nc;
  for (uint32_t i = 0; i < in->n_args; i++) ct_ops[i] = IR_NOREF;
  ir_func *bb = backward_body(b, c0, nc, nx, loc, &st);
  if (!bb) return st;
  uint32_t n = c0 + nc + c0 + nc + nx + ny;
  ir_ref *a = malloc((n + 1) * sizeof *a);
  if (!a) {
    ir_func_free(bb);
    return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  }
  uint32_t k = 0;
  for (uint32_t i = 0; i < c0; i++) a[k++] = ops[i];
  for (uint32_t i = 0; i < nc; i++) {
    ir_type t;
    ir_scan_result_type(src, in, i, &t);
    a[k++] = ct_results[i] != IR_NOREF ? ct_results[i] : zeros(dst, &t, loc, &st);
  }
  for (uint32_t i = 0; i < c0; i++) a[k++] = zeros(dst, ir_type_of(dst, ops[i]), loc, &st);
  for (uint32_t i = 0; i < nc; i++) a[k++] = get(dst, fwd_scan, b->n_results + i, loc, &st);
  for (uint32_t i = 0; i < nx; i++) a[k++] = ops[c0 + nc + i];
  for (uint32_t j = 0; j < ny; j++) {
    ir_type t;
    ir_scan_result_type(src, in, nc + j, &t);
    a[k++] = ct_results[nc + j] != IR_NOREF ? ct_results[nc + j] : zeros(dst, &t, loc, &st);
  }
  ir_attr at = {0};
  at.scan.n_consts = c0;
  at.scan.n_carry = nc + c0;
  at.scan.length = sa->length;
  at.scan.reverse = !sa->reverse;
  if (st != JIT_OK || ir_add_body(dst, bb, &at.scan.body) != JIT_OK) {
    if (st != JIT_OK) ir_func_free(bb);
    free(a);
    return st != JIT_OK ? st : jit_error(JIT_ENOMEM, "%s: out of memory", who);
  }
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(dst, &token);
  ir_ref s = tty == UINT32_MAX ? IR_NOREF : ir_emit(dst, IR_SCAN, tty, n, a, &at, loc);
  free(a);
  if (s == IR_NOREF) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  for (uint32_t i = 0; i < nc; i++)
    if (ir_dtype_is_float(ir_type_of(b, c0 + i)->dtype)) ct_ops[c0 + i] = get(dst, s, i, loc, &st);
  for (uint32_t i = 0; i < c0; i++)
    if (ir_dtype_is_float(ir_type_of(b, i)->dtype)) ct_ops[i] = get(dst, s, nc + i, loc, &st);
  for (uint32_t i = 0; i < nx; i++)
    if (ir_dtype_is_float(ir_type_of(b, c0 + nc + i)->dtype))
      ct_ops[c0 + nc + i] = get(dst, s, nc + c0 + i, loc, &st);
  return st;
}
