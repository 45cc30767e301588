/* grad_scan.c: the reverse-mode rule of SCAN, for grad.c, as JAX's scan transpose. The step's
 * VJP is built as one function (the joint: value_and_grad of sum(new_carry * ct_c) +
 * sum(y * ct_y)) and partially evaluated: what it computes from the primal inputs alone (consts,
 * carry, x) is known and runs in the forward scan, which stacks the known values the rest needs
 * (the residuals) as extra ys; the backward scan runs in the opposite direction and computes
 * only what needs the cotangents, reading the residuals as xs. Two kinds of known values stay in
 * the backward body instead of being stacked: checkpointed ones (attr.remat: the memory for
 * compute trade jit_checkpoint asks for) and loop-invariant ones (from consts alone: hoist moves
 * them in front of the loop). A carry entering a step is stacked only when the backward reads it.
 *
 * Backward body params: the consts it reads, then its carries (the carries' cotangents, then an
 * accumulator per const), then its xs (the saved carries, the xs it reads, the residuals, the
 * ys' cotangents). Results: the cotangent of the step's carry in, each accumulator plus the
 * step's const cotangent, and (a y per step) the x's cotangent.
 * Cost: the joint is built and split once per differentiated scan, O(its instructions).
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
  const ir_type *tys[4] = {0};
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

/* sum(r_k * ct_k) over the float results of body, as one f32 scalar (its gradient is the VJP),
   then the body's results as they are (aux results: they locate the step in the VJP). */
ir_func *ir_vjp_loss_of(const ir_func *b, uint32_t n_in, ir_loc loc, jit_status *st) {
  ir_func *l = ir_func_new(b->name);
  ir_ref *map = malloc((b->n_ins + 1) * sizeof *map);
  ir_ref *cts = malloc((b->n_results + 1) * sizeof *cts);
  ir_ref *res = malloc((b->n_results + 1) * sizeof *res);
  if (!l || !map || !cts || !res) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t p = 0; p < n_in; p++) map[p] = ir_emit_param(l, ir_type_intern(l, ir_type_of(b, p)));
  for (uint32_t k = 0; k < b->n_results; k++)
    cts[k] = ir_emit_param(l, ir_type_intern(l, ir_type_of(b, b->results[k])));
  if (l->oom) *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (*st == JIT_OK && ir_copy_into(l, b, map) != JIT_OK)
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  ir_type f32 = {.dtype = JIT_F32, .rank = 0};
  ir_ref loss = zeros(l, &f32, loc, st);
  for (uint32_t k = 0; k < b->n_results && *st == JIT_OK; k++) {
    const ir_type *t = ir_type_of(b, b->results[k]);
    res[1 + k] = map[b->results[k]];
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
  res[0] = loss;
  if (*st == JIT_OK && ir_set_results(l, 1 + b->n_results, res) != JIT_OK)
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
done:
  free(map);
  free(cts);
  free(res);
  if (*st != JIT_OK) {
    ir_func_free(l);
    return NULL;
  }
  return l;
}

/* The step's whole VJP as one function (the joint), before partial evaluation. Params: consts,
   ct_c, acc, carry_t, x_t, ct_y; results: the cotangent of the carry in, each accumulator plus
   the step's const cotangent, the x's cotangent. aux[k] receives the joint's ref of the step's
   own result k. */

static ir_func *joint_vjp(const ir_func *b, uint32_t c0, uint32_t nc, uint32_t nx, ir_ref *aux,
                          uint32_t *rc_first, ir_loc loc, jit_status *st) {
  uint32_t ny = b->n_results - nc, n_in = c0 + nc + nx;
  ir_func *l = ir_vjp_loss_of(b, n_in, loc, st);
  ir_func *bb = ir_func_new(b->name);
  ir_ref *p = malloc((2 * c0 + 2 * nc + nx + ny + 1) * sizeof *p);
  ir_ref *largs = malloc((n_in + b->n_results + 1) * sizeof *largs);
  ir_ref *grads = malloc((1 + b->n_results + n_in + 1) * sizeof *grads);
  ir_ref *map = malloc((b->n_ins + 1) * sizeof *map), *res = malloc((nc + c0 + nx + 1) * sizeof *res);
  ir_ref *g_of = NULL;
  bool *wrt = NULL;
  if (*st != JIT_OK) goto fail;
  if (!bb || !p || !largs || !grads || !map || !res) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
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
  wrt = calloc(l->n_params + 1, sizeof *wrt);
  g_of = malloc((n_in + 1) * sizeof *g_of);
  if (!wrt || !g_of) {
    *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  bool any = false;
  for (uint32_t i = 0; i < n_in; i++) any |= wrt[i] = ir_dtype_is_float(ir_type_of(b, i)->dtype);
  for (uint32_t i = 0; i < n_in; i++) g_of[i] = IR_NOREF;
  /* bb has no tags of its own, so value_and_grad keeps l's on its forward copies and tags its
     recomputations above them */
  *rc_first = ir_remat_max_tag(l) + 1;
  if (any) {
    jit_status gs = ir_value_and_grad_sel(bb, l, largs, wrt, b->n_results, grads, loc);
    if (gs != JIT_OK) {
      *st = gs;
      goto fail;
    }
    memcpy(aux, grads + 1, b->n_results * sizeof *aux);
    uint32_t gi = 1 + b->n_results;
    for (uint32_t i = 0; i < n_in; i++)
      if (wrt[i]) g_of[i] = grads[gi++];
  } else { /* nothing to differentiate: the step itself, for the forward body */
    memcpy(map, largs, n_in * sizeof *map);
    if (ir_copy_into(bb, b, map) != JIT_OK) {
      *st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
      goto fail;
    }
    for (uint32_t r = 0; r < b->n_results; r++) aux[r] = map[b->results[r]];
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
  free(map);
  free(res);
  free(g_of);
  free(wrt);
  return bb;
fail:
  ir_func_free(l);
  ir_func_free(bb);
  free(p);
  free(largs);
  free(grads);
  free(map);
  free(res);
  free(g_of);
  free(wrt);
  return NULL;
}

/* ---- partial evaluation ------------------------------------------------------------------------ */

/* The joint split in two (see the top of the file). */
typedef struct split {
  ir_func *fwd;      /* params: the step's; results: the step's, the saved carries, the residuals */
  ir_func *bwd;      /* params: used consts, ct_c, acc, saved carries, used xs, residuals, ct_y */
  bool *used;        /* per joint param: the backward body reads it */
  uint32_t n_saved;  /* carries the forward scan stacks */
  uint32_t n_res;    /* residuals the backward body reads */
  uint32_t *res_at;  /* n_res: the forward scan's result holding each (a y of the step's own, or
                        one stacked after the saved carries) */
} split;

/* Emits src's instructions marked in keep (never its params) into dst in order, reading operands
   through map; map[i] receives the copy of instruction i. */
static jit_status copy_marked(ir_func *dst, const ir_func *src, const bool *keep, ir_ref *map) {
  if (ir_copy_marked(dst, src, keep, map) != JIT_OK) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  return JIT_OK;
}

static ir_ref param_like(ir_func *f, const ir_func *of, ir_ref r) {
  return ir_emit_param(f, ir_type_intern(f, ir_type_of(of, r)));
}

/* Splits the joint jt of step b (aux: b's results in jt). A value is known when it depends on
   the primal params alone (consts, carry_t, x_t), invariant when on the consts alone. The
   backward body keeps what the results need, except known values that are neither invariant
   nor checkpointed: those are cut as residuals, and the forward body computes them. A scan's
   token is never cut (its GETs are, unless checkpointed).
   Checkpointed means tagged, or computed from a recomputation: jt's instructions tagged
   rc_first or more are value_and_grad's recomputations of b's checkpointed values, and what
   a VJP rule derives from them (tanh's 1 - y^2) must be recomputed with them, else the forward
   would stack it and the checkpoint would save nothing. */
static jit_status split_joint(const ir_func *jt, const ir_func *b, uint32_t c0, uint32_t nc,
                              uint32_t nx, const ir_ref *aux, uint32_t rc_first, split *out) {
  jit_status st = JIT_OK;
  uint32_t n = jt->n_ins, np = jt->n_params, ny = b->n_results - nc;
  uint32_t carry0 = 2 * c0 + nc, x0 = carry0 + nc;
  bool *known = calloc(n, 1), *inv = calloc(n, 1), *need = calloc(n, 1), *in_bwd = calloc(n, 1),
       *res = calloc(n, 1), *in_fwd = calloc(n, 1), *rec = calloc(n, 1);
  ir_ref *map = malloc(n * sizeof *map), *rs = NULL;
  out->fwd = out->bwd = NULL;
  out->used = need;
  out->n_saved = out->n_res = 0;
  out->res_at = NULL;
  if (!known || !inv || !need || !in_bwd || !res || !in_fwd || !rec || !map) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = 0; i < n; i++) {
    const ir_ins *in = &jt->ins[i];
    if (i < np) {
      known[i] = i < c0 || (i >= carry0 && i < x0 + nx);
      inv[i] = i < c0;
      continue;
    }
    known[i] = inv[i] = true;
    rec[i] = in->attr.remat >= rc_first;
    for (uint32_t k = 0; k < in->n_args; k++) {
      known[i] &= known[in->args[k]];
      inv[i] &= inv[in->args[k]];
      rec[i] |= rec[in->args[k]];
    }
  }
  for (uint32_t r = 0; r < jt->n_results; r++) need[jt->results[r]] = true;
  for (uint32_t i = n; i-- > np;) {
    const ir_ins *in = &jt->ins[i];
    if (!need[i]) continue;
    if (known[i] && !inv[i] && !rec[i] && !in->attr.remat && in->op != IR_SCAN) {
      res[i] = in_fwd[i] = true;
      out->n_res++;
      continue;
    }
    in_bwd[i] = true;
    for (uint32_t k = 0; k < in->n_args; k++) need[in->args[k]] = true;
  }
  for (uint32_t r = 0; r < b->n_results; r++) in_fwd[aux[r]] = true;
  for (uint32_t i = n; i-- > np;) {
    const ir_ins *in = &jt->ins[i];
    if (!in_fwd[i]) continue;
    if (!known[i]) {
      st = jit_error(JIT_EINTERNAL, "%s: the step's forward reads a cotangent (%%%u)", who, i);
      goto fail;
    }
    for (uint32_t k = 0; k < in->n_args; k++) in_fwd[in->args[k]] = true;
  }
  for (uint32_t i = 0; i < nc; i++) out->n_saved += need[carry0 + i];

  /* the forward body: the step's params, the known part it needs, then its results */
  ir_func *f = out->fwd = ir_func_new(b->name);
  uint32_t n_rs = b->n_results + out->n_saved + out->n_res; /* for both bodies' results */
  if (n_rs < jt->n_results) n_rs = jt->n_results;
  rs = malloc((n_rs + 1) * sizeof *rs);
  if (!f || !rs) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = 0; i < np; i++) map[i] = IR_NOREF;
  for (uint32_t i = 0; i < c0; i++) map[i] = param_like(f, jt, i);
  for (uint32_t i = 0; i < nc + nx; i++) map[carry0 + i] = param_like(f, jt, carry0 + i);
  if (f->oom) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  TRY(copy_marked(f, jt, in_fwd, map));
  uint32_t k = 0;
  for (uint32_t r = 0; r < b->n_results; r++) rs[k++] = map[aux[r]];
  for (uint32_t i = 0; i < nc; i++)
    if (need[carry0 + i]) rs[k++] = map[carry0 + i];
  if (!(out->res_at = malloc((out->n_res + 1) * sizeof *out->res_at))) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = np, r = 0; i < n; i++) {
    if (!res[i]) continue;
    uint32_t at = UINT32_MAX;
    for (uint32_t j = 0; j < ny && at == UINT32_MAX; j++) /* the step's y: stacked already */
      if (aux[nc + j] == i) at = nc + j;
    if (at == UINT32_MAX) {
      at = k;
      rs[k++] = map[i];
    }
    out->res_at[r++] = at;
  }
  if (ir_set_results(f, k, rs) != JIT_OK) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }

  /* the backward body: what the joint's results need, the residuals read as xs */
  ir_func *g = out->bwd = ir_func_new(b->name);
  if (!g) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = 0; i < n; i++) map[i] = IR_NOREF;
  for (uint32_t i = 0; i < c0; i++)
    if (need[i]) map[i] = param_like(g, jt, i);
  for (uint32_t i = c0; i < carry0; i++) map[i] = param_like(g, jt, i); /* ct_c, acc */
  for (uint32_t i = carry0; i < x0 + nx; i++)
    if (need[i]) map[i] = param_like(g, jt, i);
  for (uint32_t i = np; i < n; i++)
    if (res[i]) map[i] = param_like(g, jt, i);
  for (uint32_t j = 0; j < ny; j++) map[x0 + nx + j] = param_like(g, jt, x0 + nx + j);
  if (g->oom) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  TRY(copy_marked(g, jt, in_bwd, map));
  for (uint32_t r = 0; r < jt->n_results; r++) rs[r] = map[jt->results[r]];
  if (ir_set_results(g, jt->n_results, rs) != JIT_OK)
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
fail:
  free(known);
  free(inv);
  free(in_bwd);
  free(res);
  free(in_fwd);
  free(rec);
  free(map);
  free(rs);
  if (st != JIT_OK) {
    ir_func_free(out->fwd);
    ir_func_free(out->bwd);
    free(out->used);
    free(out->res_at);
    out->fwd = out->bwd = NULL;
    out->used = NULL;
    out->res_at = NULL;
  }
  return st;
}

jit_status ir_scan_vjp(ir_func *dst, const ir_func *src, const ir_ins *in, const ir_ref *ops,
                       ir_ref fwd_scan, const ir_ref *ct_results, ir_ref *ct_ops, ir_loc loc) {
  jit_status st = JIT_OK;
  const ir_func *b = ir_scan_body(src, in);
  const ir_scan *sa = &in->attr.scan;
  uint32_t c0 = sa->n_consts, nc = sa->n_carry, nx = in->n_args - c0 - nc, ny = b->n_results - nc;
  uint32_t carry0 = 2 * c0 + nc, x0 = carry0 + nc;
  for (uint32_t i = 0; i < in->n_args; i++) ct_ops[i] = IR_NOREF;
  if (fwd_scan >= dst->n_ins || dst->ins[fwd_scan].op != IR_SCAN ||
      dst->ins[fwd_scan].attr.scan.body >= dst->n_bodies)
    return jit_error(JIT_EINTERNAL, "%s: backward scan: %%%u is no scan", who, (unsigned)fwd_scan);
  split sp = {0};
  ir_ref *aux = malloc((b->n_results + 1) * sizeof *aux), *a = NULL;
  uint32_t rc_first = 0;
  ir_func *jt = aux ? joint_vjp(b, c0, nc, nx, aux, &rc_first, loc, &st) : NULL;
  if (!aux) st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (st == JIT_OK) st = split_joint(jt, b, c0, nc, nx, aux, rc_first, &sp);
  ir_func_free(jt);
  free(aux);
  if (st != JIT_OK) return st;
  /* the forward scan now also stacks the saved carries and the residuals */
  uint32_t fb = dst->ins[fwd_scan].attr.scan.body;
  ir_func_free(dst->bodies[fb]);
  dst->bodies[fb] = sp.fwd;
  uint32_t n = c0 + nc + c0 + sp.n_saved + nx + sp.n_res + ny, k = 0, n_consts = 0;
  if (!(a = malloc((n + 1) * sizeof *a))) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = 0; i < c0; i++)
    if (sp.used[i]) {
      a[k++] = ops[i];
      n_consts++;
    }
  for (uint32_t i = 0; i < nc; i++) {
    ir_type t;
    ir_scan_result_type(src, in, i, &t);
    a[k++] = ct_results[i] != IR_NOREF ? ct_results[i] : zeros(dst, &t, loc, &st);
  }
  for (uint32_t i = 0; i < c0; i++) a[k++] = zeros(dst, ir_type_of(dst, ops[i]), loc, &st);
  for (uint32_t i = 0, j = 0; i < nc; i++)
    if (sp.used[carry0 + i]) a[k++] = get(dst, fwd_scan, b->n_results + j++, loc, &st);
  for (uint32_t i = 0; i < nx; i++)
    if (sp.used[x0 + i]) a[k++] = ops[c0 + nc + i];
  for (uint32_t r = 0; r < sp.n_res; r++)
    a[k++] = get(dst, fwd_scan, sp.res_at[r], loc, &st);
  for (uint32_t j = 0; j < ny; j++) {
    ir_type t;
    ir_scan_result_type(src, in, nc + j, &t);
    a[k++] = ct_results[nc + j] != IR_NOREF ? ct_results[nc + j] : zeros(dst, &t, loc, &st);
  }
  ir_attr at = {0};
  at.scan.n_consts = n_consts;
  at.scan.n_carry = nc + c0;
  at.scan.length = sa->length;
  at.scan.reverse = !sa->reverse;
  if (st != JIT_OK) goto fail;
  st = ir_add_body(dst, sp.bwd, &at.scan.body);
  sp.bwd = NULL; /* dst's now, also on failure */
  if (st != JIT_OK) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(dst, &token);
  ir_ref s = tty == UINT32_MAX ? IR_NOREF : ir_emit(dst, IR_SCAN, tty, k, a, &at, loc);
  if (s == IR_NOREF) {
    st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  for (uint32_t i = 0; i < nc; i++)
    if (ir_dtype_is_float(ir_type_of(b, c0 + i)->dtype)) ct_ops[c0 + i] = get(dst, s, i, loc, &st);
  for (uint32_t i = 0; i < c0; i++)
    if (ir_dtype_is_float(ir_type_of(b, i)->dtype)) ct_ops[i] = get(dst, s, nc + i, loc, &st);
  for (uint32_t i = 0; i < nx; i++)
    if (ir_dtype_is_float(ir_type_of(b, c0 + nc + i)->dtype))
      ct_ops[c0 + nc + i] = get(dst, s, nc + c0 + i, loc, &st);
fail:
  ir_func_free(sp.bwd);
  free(sp.used);
  free(sp.res_at);
  free(a);
  return st;
}
