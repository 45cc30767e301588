/* conv_layout.c: gives each conv without groups the form the native GEMM runs (see
 * ir_conv_is_gemm): its padding and lhs dilation become an explicit PAD of the lhs (zeros, with
 * interior padding for the dilation) and its result comes out in [batch, spatial..., feature]
 * order, a TRANSPOSE restoring the layout asked for. The conv is then a GEMM over a strided view
 * of the padded lhs (codegen/matmul.c): M = batch x output positions, K = window x features,
 * N = output features.
 *
 * Needs: verified f. Keeps: every value's type and meaning (the interpreter gives the same
 * results before and after); locations. Grouped convs (feature or batch groups) stay as they are
 * and run through the interpreter. Leaves f untouched when no conv needs it.
 * Cost: O(instructions), one rebuild when a conv changes; at run time the PAD copies the lhs once.
 */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

/* A conv this pass rewrites: no groups, float, and not in GEMM form yet. */
static bool wants_rewrite(const ir_func *f, const ir_ins *in) {
  return in->op == IR_CONV && in->attr.conv.groups == 1 && in->attr.conv.batch_groups == 1 &&
         !ir_conv_is_gemm(f, in);
}

/* Emits op with its inferred type; IR_NOREF on failure (nf->oom, or the rule's refusal). */
static ir_ref emit(ir_func *nf, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *a,
                   ir_loc loc) {
  const ir_type *t[2] = {n > 0 ? ir_type_of(nf, args[0]) : NULL, n > 1 ? ir_type_of(nf, args[1]) : NULL};
  ir_type out;
  char why[256];
  if (ir_infer_type(op, n, t, a, NULL, &out, why, sizeof why) != JIT_OK) {
    jit_error(JIT_EINTERNAL, "conv_layout: %s: %s", ir_op_name[op], why);
    return IR_NOREF;
  }
  ir_ty ty = ir_type_intern(nf, &out);
  return ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, op, ty, n, args, a, loc);
}

static ir_ref rewrite(ir_func *nf, const ir_ins *in, ir_ref lhs, ir_ref rhs) {
  const ir_conv *c = &in->attr.conv;
  int rank = ir_type_of(nf, lhs)->rank, ns = rank - 2;
  ir_attr ca = in->attr;
  ir_conv *g = &ca.conv;
  bool pad = false;
  ir_attr pa = {0};
  for (int i = 0; i < ns; i++) {
    int d = c->lhs[2 + i];
    pa.pad.lo[d] = c->pad_lo[i];
    pa.pad.hi[d] = c->pad_hi[i];
    pa.pad.interior[d] = c->lhs_dil[i] - 1;
    pad |= c->pad_lo[i] || c->pad_hi[i] || c->lhs_dil[i] != 1;
    g->pad_lo[i] = g->pad_hi[i] = 0;
    g->lhs_dil[i] = 1;
  }
  if (pad) {
    ir_ref zero = ir_emit_const(nf, ir_type_make(nf, ir_type_of(nf, lhs)->dtype, 0, NULL), 0, in->loc);
    ir_ref pargs[2] = {lhs, zero};
    lhs = zero == IR_NOREF ? IR_NOREF : emit(nf, IR_PAD, 2, pargs, &pa, in->loc);
    if (lhs == IR_NOREF) return IR_NOREF;
  }
  /* the result as [batch, spatial..., feature], then transposed to the asked layout */
  g->out[0] = 0;
  g->out[1] = (uint8_t)(rank - 1);
  for (int i = 0; i < ns; i++) g->out[2 + i] = (uint8_t)(1 + i);
  ir_ref args[2] = {lhs, rhs};
  ir_ref y = emit(nf, IR_CONV, 2, args, &ca, in->loc);
  ir_attr ta = {0};
  ta.dims.n = (uint8_t)rank;
  bool identity = true;
  for (int i = 0; i < rank; i++) {
    ta.dims.d[c->out[i]] = g->out[i];
    identity &= c->out[i] == g->out[i];
  }
  ta.remat = in->attr.remat;
  return identity || y == IR_NOREF ? y : emit(nf, IR_TRANSPOSE, 1, &y, &ta, in->loc);
}

jit_status pass_conv_layout(ir_func *f) {
  bool any = false;
  for (uint32_t i = f->n_params; i < f->n_ins && !any; i++) any = wants_rewrite(f, &f->ins[i]);
  if (!any) return JIT_OK;
  jit_status st = JIT_OK;
  ir_ref *map = malloc(f->n_ins * sizeof *map);
  if (!map) return jit_error(JIT_ENOMEM, "conv_layout: out of memory");
  ir_func *nf = pass_rebuild_begin(f, map, "conv_layout");
  if (!nf) {
    free(map);
    return JIT_ENOMEM;
  }
  ir_ref *args = NULL;
  uint32_t cap = 0;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->n_args > cap) {
      ir_ref *a = realloc(args, in->n_args * sizeof *a);
      if (!a) {
        nf->oom = true;
        break;
      }
      args = a;
      cap = in->n_args;
    }
    for (uint32_t k = 0; k < in->n_args; k++) args[k] = map[in->args[k]];
    if (wants_rewrite(f, in)) {
      map[i] = rewrite(nf, in, args[0], args[1]);
      if (map[i] == IR_NOREF && !nf->oom) { /* a rule refused: a bug, reported as such */
        st = JIT_EINTERNAL;
        break;
      }
    } else { /* as dce copies: the same attributes, bodies moved at the end */
      map[i] = ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    }
    if (map[i] == IR_NOREF) break;
  }
  free(args);
  if (st != JIT_OK) {
    ir_func_free(nf);
    free(map);
    return st;
  }
  st = pass_rebuild_end(f, nf, map, "conv_layout");
  free(map);
  return st;
}
