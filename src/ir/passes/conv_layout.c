/* conv_layout.c: gives each float conv the form the native GEMM runs (see
 * ir_conv_is_gemm): its lhs dilation becomes an explicit PAD of the lhs (zeros between its
 * elements; the conv keeps its edge padding, which the GEMM's view reads as zeros without a
 * copy) and its result comes out in [batch, spatial..., feature] order, a TRANSPOSE restoring
 * the layout asked for. The conv is then a GEMM over a strided view of the lhs
 * (codegen/matmul.c): M = batch x output positions, K = window x features, N = output features;
 * with feature or batch groups, a batched GEMM with the group as batch.
 *
 * Needs: verified f. Keeps: every value's type and meaning (the interpreter gives the same
 * results before and after); locations. Convs of more than 3 spatial dims (see
 * ir_conv_has_gemm_form) stay as they are and run through the interpreter. Leaves f untouched
 * when no conv needs it.
 * Cost: O(instructions), one rebuild when a conv changes; at run time a lhs-dilated conv's PAD
 * copies its lhs once.
 */
#include "ir/passes/passes.h"
#include "runtime/error.h"

/* A conv this pass rewrites: one the GEMM can run, not in its form yet. */
static bool wants_rewrite(const ir_func *f, const ir_ins *in) {
  return ir_conv_has_gemm_form(f, in) && !ir_conv_is_gemm(f, in);
}

static const char *const who = "conv_layout";

ir_ref pass_conv_pad_lhs(ir_func *nf, const char *pass, const ir_ins *in, ir_ref lhs, const int *spatial,
                         bool edges) {
  if (lhs == IR_NOREF) return IR_NOREF;
  const ir_conv *c = &in->attr.conv;
  int ns = ir_type_of(nf, lhs)->rank - 2;
  bool pad = false;
  ir_attr pa = {0};
  for (int i = 0; i < ns; i++) {
    int d = spatial[i];
    pa.pad.lo[d] = edges ? c->pad_lo[i] : 0;
    pa.pad.hi[d] = edges ? c->pad_hi[i] : 0;
    pa.pad.interior[d] = c->lhs_dil[i] - 1;
    pad |= pa.pad.lo[d] || pa.pad.hi[d] || c->lhs_dil[i] != 1;
  }
  if (!pad) return lhs;
  ir_ref zero = ir_emit_const(nf, ir_type_make(nf, ir_type_of(nf, lhs)->dtype, 0, NULL), 0, in->loc);
  ir_ref pargs[2] = {lhs, zero};
  return zero == IR_NOREF ? IR_NOREF : pass_emit_inferred(nf, pass, IR_PAD, 2, pargs, &pa, in->loc);
}

static ir_ref rewrite(ir_func *nf, const ir_func *f, const ir_ins *in, const ir_ref *ops) {
  (void)f;
  ir_ref rhs = ops[1];
  const ir_conv *c = &in->attr.conv;
  int rank = ir_type_of(nf, ops[0])->rank, ns = rank - 2;
  ir_attr ca = in->attr;
  ir_conv *g = &ca.conv;
  int spatial[IR_CONV_MAX_SPATIAL] = {0};
  for (int i = 0; i < ns; i++) {
    spatial[i] = c->lhs[2 + i];
    g->lhs_dil[i] = 1; /* the pads now count in the dilated lhs's positions, as they did */
  }
  ir_ref lhs = pass_conv_pad_lhs(nf, who, in, ops[0], spatial, false);
  if (lhs == IR_NOREF) return IR_NOREF;
  /* the result as [batch, spatial..., feature], then transposed to the asked layout */
  g->out[0] = 0;
  g->out[1] = (uint8_t)(rank - 1);
  for (int i = 0; i < ns; i++) g->out[2 + i] = (uint8_t)(1 + i);
  ir_ref args[2] = {lhs, rhs};
  ir_ref y = pass_emit_inferred(nf, who, IR_CONV, 2, args, &ca, in->loc);
  ir_attr ta = {0};
  ta.dims.n = (uint8_t)rank;
  bool identity = true;
  for (int i = 0; i < rank; i++) {
    ta.dims.d[c->out[i]] = g->out[i];
    identity &= c->out[i] == g->out[i];
  }
  ta.remat = in->attr.remat;
  return identity ? y : pass_emit_inferred(nf, who, IR_TRANSPOSE, 1, &y, &ta, in->loc);
}

jit_status pass_conv_layout(ir_func *f) { return pass_rewrite_each(f, who, wants_rewrite, rewrite); }
