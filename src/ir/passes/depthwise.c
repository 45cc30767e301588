/* depthwise.c: a depthwise conv (feature_group_count = the lhs's features: one input feature per
 * group, M = out features / groups outputs each) of a small window becomes the sum over window
 * offsets of a strided slice of its padded lhs, laid out [batch, spatial..., feature], times that
 * offset's filter row broadcast over batch and positions. Fusion then computes it as one native
 * loop over the result, its innermost dim the features (vectors across channels, as XLA's CPU
 * emitter does for depthwise convs), where the batched GEMM of conv_layout would run one matmul
 * of a single column per feature. The VJP of such a conv wrt its filters (a conv with one batch
 * group per feature, as many output positions as the forward's window) becomes, per output
 * position, a product of a slice of its lhs with its rhs summed over batch and positions.
 *
 * A conv of a single input feature (groups = 1, one lhs feature: a first layer on grey images) is
 * depthwise too, one group with a multiplier of all its out features, and its filter gradient one
 * batch group; that gradient expands only for few out features (FILTER_GRAD_MAX_OUT), as the
 * expansion reads the rhs once per position where a GEMM reads it once. A conv of a few input
 * features (RGB) sums one term per window offset and feature (FEW_FEATURES).
 *
 * Needs: verified f. Keeps: every value's type; the result up to the rounding of the float sum
 * (each add rounds, in window order, where the interpreter sums in double; f16 and bf16 convs
 * multiply and sum in f32 and round once). Windows of more than
 * DEPTHWISE_EXPAND_MAX terms (offsets x features; filter gradients: positions), and empty
 * results, stay convs (conv_layout then gives them the batched GEMM's form). Cost: O(instructions + window
 * elements) emitted; one rebuild when a conv changes.
 */
#include "ir/passes/passes.h"
#include "runtime/error.h"

#define DEPTHWISE_EXPAND_MAX 49 /* up to 7x7: each offset is one more read of the lhs per output */
/* The filter gradient of a single-feature conv, its rhs the output gradient [batch, spatial...,
   out features]: 9 positions of 8 out features over 4096 12x12 images took 7.9 ms expanded against
   32 ms through the GEMM (whose tile pads the 8 columns to 32), 16 features 16.6 against 21.9 ms,
   32 features 26.3 against 25.8 (2 threads, Emerald Rapids). */
#define FILTER_GRAD_MAX_OUT 16
/* A conv of one group, at most FEW_FEATURES input features (a first layer on RGB or RGBA images)
   and FEW_FEATURES_MAX_OUT out features expands too, one term per window offset and feature (27
   for RGB 3x3). RGB 3x3 on 32x32 images, 2 threads: 256 images to 32 features 6.7-8.1 ms
   expanded against 11.2-12.4 through the GEMM (K = 27), 128 to 64 features 6.4-7.3 against
   7.4-7.9, 64 to 128 features about even (5-7 ms both ways). */
#define FEW_FEATURES 4
#define FEW_FEATURES_MAX_OUT 64

static const char *const who = "depthwise";

/* The first layers' expansions (one group) sum in the dtype, as the GEMM would not for f16 and
   bf16 (it accumulates in f32): those keep the GEMM. */
static bool wide_sums(jit_dtype dt) { return dt == JIT_F32 || dt == JIT_F64; }

/* The VJP of a depthwise conv wrt its filters: a conv with one lhs batch element per batch
   group (ir_conv_vjp_attrs swaps batch and features, so the groups are the forward's features),
   its output as many positions as the forward's window. One batch group of one element is also
   any conv of batch 1: it expands only with few out features, where a GEMM would be slower. */
static bool filter_grad(const ir_func *f, const ir_ins *in) {
  const ir_conv *c = &in->attr.conv;
  const ir_type *lt = ir_type_of(f, in->args[0]), *rt = ir_type_of(f, in->args[1]);
  const ir_type *ot = &f->types[in->ty];
  int64_t positions = 1;
  for (int i = 0; i < lt->rank - 2; i++) positions *= ot->dims[c->out[2 + i]];
  bool few_out = c->batch_groups > 1 || (wide_sums(lt->dtype) && rt->dims[c->rhs[0]] <= FILTER_GRAD_MAX_OUT);
  return c->groups == 1 && c->batch_groups == lt->dims[c->lhs[0]] && few_out &&
         positions <= DEPTHWISE_EXPAND_MAX;
}

static bool expandable(const ir_func *f, const ir_ins *in) {
  if (in->op != IR_CONV) return false;
  const ir_conv *c = &in->attr.conv;
  const ir_type *lt = ir_type_of(f, in->args[0]), *rt = ir_type_of(f, in->args[1]);
  if (!ir_dtype_is_float(lt->dtype) || ir_type_numel(&f->types[in->ty]) == 0 ||
      rt->rank + 1 > IR_MAX_RANK)
    return false;
  if (filter_grad(f, in)) return true;
  int64_t features = lt->dims[c->lhs[1]];
  bool depthwise = c->groups == features && (c->groups > 1 || wide_sums(lt->dtype));
  bool few = c->groups == 1 && features <= FEW_FEATURES && wide_sums(lt->dtype) &&
             rt->dims[c->rhs[0]] <= FEW_FEATURES_MAX_OUT;
  if (c->batch_groups != 1 || !(depthwise || few)) return false;
  int64_t terms = depthwise ? 1 : features;
  for (int i = 0; i < lt->rank - 2; i++) terms *= rt->dims[c->rhs[2 + i]];
  return terms <= DEPTHWISE_EXPAND_MAX;
}

/* x with its dims permuted: result dim i is x's dim perm[i] (x itself for the identity). */
static ir_ref permute(ir_func *nf, const ir_ins *in, ir_ref x, int rank, const int *perm) {
  ir_attr ta = {0};
  ta.dims.n = (uint8_t)rank;
  bool identity = true;
  for (int i = 0; i < rank; i++) {
    ta.dims.d[i] = (uint8_t)perm[i];
    identity &= perm[i] == i;
  }
  ta.remat = in->attr.remat;
  return identity || x == IR_NOREF ? x : pass_emit_inferred(nf, who, IR_TRANSPOSE, 1, &x, &ta, in->loc);
}

/* x as dtype dt with the given dims (a RESHAPE, or a BROADCAST placing x's dim j at result dim
   at[j]); IR_NOREF on OOM or for an IR_NOREF x. */
static ir_ref declared(ir_func *nf, const ir_ins *in, ir_op op, ir_ref x, int rank,
                       const int64_t *dims, const int *at) {
  if (x == IR_NOREF) return IR_NOREF;
  const ir_type *xt = ir_type_of(nf, x);
  ir_attr a = {0};
  a.remat = in->attr.remat;
  if (op == IR_BROADCAST) {
    a.dims.n = (uint8_t)xt->rank;
    for (int j = 0; j < xt->rank; j++) a.dims.d[j] = (uint8_t)at[j];
  }
  ir_ty ty = ir_type_make(nf, xt->dtype, rank, dims);
  return ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, op, ty, 1, &x, &a, in->loc);
}

/* x converted to dt (x itself when it has dt). */
static ir_ref as_dtype(ir_func *nf, const ir_ins *in, ir_ref x, jit_dtype dt) {
  if (x == IR_NOREF) return IR_NOREF;
  const ir_type *xt = ir_type_of(nf, x);
  if (xt->dtype == dt) return x;
  ir_attr a = {0};
  a.remat = in->attr.remat;
  ir_ty ty = ir_type_make(nf, dt, xt->rank, xt->dims);
  return ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, IR_CONVERT, ty, 1, &x, &a, in->loc);
}

/* The dtype an expansion of dtype dt multiplies and sums in: f32 for f16 and bf16 (each product
   exact, the sum rounded once at the end, as the GEMM sums them and XLA's CPU convs do). */
static jit_dtype sum_dtype(jit_dtype dt) { return wide_sums(dt) ? dt : JIT_F32; }

static ir_ref binop(ir_func *nf, const ir_ins *in, ir_op op, ir_ref a, ir_ref b) {
  ir_ref args[2] = {a, b};
  ir_attr at = {0};
  at.remat = in->attr.remat;
  return pass_emit_inferred(nf, who, op, 2, args, &at, in->loc);
}

/* The filter gradient (filter_grad), one output position q at a time: the window of q, a strided
   slice of the padded lhs laid out [features, spatial..., group], times the rhs laid out
   [features, spatial..., group, M], summed over features and spatial dims; the positions'
   [G x M] rows are then concatenated. Each position reads both operands once, vectorized across
   groups (the forward's channels). */
static ir_ref expand_filter_grad(ir_func *nf, const ir_func *f, const ir_ins *in, const ir_ref *ops) {
  const ir_conv *c = &in->attr.conv;
  const ir_type *rt = ir_type_of(f, in->args[1]), *ot = &f->types[in->ty];
  int rank = rt->rank, ns = rank - 2;
  int64_t G = c->batch_groups, M = rt->dims[c->rhs[0]] / G, F = rt->dims[c->rhs[1]];
  int perm[IR_MAX_RANK], spatial[IR_CONV_MAX_SPATIAL] = {0};
  perm[0] = c->lhs[1];
  for (int i = 0; i < ns; i++) perm[1 + i] = c->lhs[2 + i], spatial[i] = 1 + i;
  perm[rank - 1] = c->lhs[0];
  jit_dtype sdt = sum_dtype(ot->dtype);
  ir_ref xp = as_dtype(nf, in, pass_conv_pad_lhs(nf, who, in, permute(nf, in, ops[0], rank, perm), spatial, true), sdt);
  /* the rhs as [features, spatial..., G, M] */
  perm[0] = c->rhs[1];
  for (int i = 0; i < ns; i++) perm[1 + i] = c->rhs[2 + i];
  perm[rank - 1] = c->rhs[0];
  int64_t pdims[IR_MAX_RANK];
  pdims[0] = F;
  for (int i = 0; i < ns; i++) pdims[1 + i] = rt->dims[c->rhs[2 + i]];
  pdims[rank - 1] = G;
  pdims[rank] = M;
  ir_ref w = as_dtype(nf, in, declared(nf, in, IR_RESHAPE, permute(nf, in, ops[1], rank, perm), rank + 1, pdims, NULL), sdt);
  int64_t odims[IR_CONV_MAX_SPATIAL], positions = 1;
  for (int i = 0; i < ns; i++) positions *= odims[i] = ot->dims[c->out[2 + i]];
  ir_ref rows[DEPTHWISE_EXPAND_MAX];
  int xat[IR_MAX_RANK];
  for (int j = 0; j < rank; j++) xat[j] = j;
  ir_attr ra = {0};
  ra.remat = in->attr.remat;
  ra.dims.n = (uint8_t)(ns + 1);
  for (int j = 0; j <= ns; j++) ra.dims.d[j] = (uint8_t)j;
  int64_t q[IR_CONV_MAX_SPATIAL] = {0};
  for (int64_t p = 0; p < positions; p++) {
    ir_attr sa = {0};
    sa.remat = in->attr.remat;
    sa.slice.limit[0] = F;
    sa.slice.limit[rank - 1] = G;
    sa.slice.stride[0] = sa.slice.stride[rank - 1] = 1;
    for (int i = 0; i < ns; i++) {
      sa.slice.start[1 + i] = q[i] * c->stride[i];
      sa.slice.limit[1 + i] = sa.slice.start[1 + i] + (pdims[1 + i] - 1) * c->rhs_dil[i] + 1;
      sa.slice.stride[1 + i] = c->rhs_dil[i];
    }
    ir_ref s = xp == IR_NOREF ? IR_NOREF : pass_emit_inferred(nf, who, IR_SLICE, 1, &xp, &sa, in->loc);
    ir_ref prod = binop(nf, in, IR_MUL, declared(nf, in, IR_BROADCAST, s, rank + 1, pdims, xat), w);
    ir_ref sum = prod == IR_NOREF ? IR_NOREF : pass_emit_inferred(nf, who, IR_REDUCE_SUM, 1, &prod, &ra, in->loc);
    rows[p] = declared(nf, in, IR_RESHAPE, sum, 2, (const int64_t[]){1, G * M}, NULL);
    if (rows[p] == IR_NOREF) return IR_NOREF;
    for (int i = ns - 1; i >= 0 && ++q[i] == odims[i]; i--) q[i] = 0;
  }
  ir_ref y = rows[0];
  if (positions > 1) {
    ir_attr ca = {0};
    ca.remat = in->attr.remat;
    ca.axis = 0;
    ir_ty ty = ir_type_make(nf, sdt, 2, (const int64_t[]){positions, G * M});
    y = ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, IR_CONCAT, ty, (uint32_t)positions, rows, &ca, in->loc);
  }
  y = as_dtype(nf, in, y, ot->dtype);
  /* [1, out spatial..., G x M], then the asked layout */
  int64_t ydims[IR_MAX_RANK];
  ydims[0] = 1;
  for (int i = 0; i < ns; i++) ydims[1 + i] = odims[i];
  ydims[rank - 1] = G * M;
  y = declared(nf, in, IR_RESHAPE, y, rank, ydims, NULL);
  int back[IR_MAX_RANK];
  back[c->out[0]] = 0;
  back[c->out[1]] = rank - 1;
  for (int i = 0; i < ns; i++) back[c->out[2 + i]] = 1 + i;
  return permute(nf, in, y, rank, back);
}

static ir_ref rewrite(ir_func *nf, const ir_func *f, const ir_ins *in, const ir_ref *ops) {
  if (filter_grad(f, in)) return expand_filter_grad(nf, f, in, ops);
  const ir_conv *c = &in->attr.conv;
  const ir_type *rt = ir_type_of(f, in->args[1]), *ot = &f->types[in->ty];
  int rank = rt->rank, ns = rank - 2;
  int64_t C = c->groups, M = rt->dims[c->rhs[0]] / C, Fg = rt->dims[c->rhs[1]];
  /* the lhs as [batch, spatial..., feature], padded (lhs dilation as interior padding) */
  int perm[IR_MAX_RANK];
  perm[0] = c->lhs[0];
  for (int i = 0; i < ns; i++) perm[1 + i] = c->lhs[2 + i];
  perm[rank - 1] = c->lhs[1];
  ir_ref x = permute(nf, in, ops[0], rank, perm);
  int spatial[IR_CONV_MAX_SPATIAL] = {0};
  for (int i = 0; i < ns; i++) spatial[i] = 1 + i;
  jit_dtype sdt = sum_dtype(ot->dtype);
  ir_ref xp = as_dtype(nf, in, pass_conv_pad_lhs(nf, who, in, x, spatial, true), sdt);
  /* the filters as [window offsets, Fg in features per group, C, M] */
  for (int i = 0; i < ns; i++) perm[i] = c->rhs[2 + i];
  perm[ns] = c->rhs[1];
  perm[ns + 1] = c->rhs[0];
  int64_t window = 1;
  for (int i = 0; i < ns; i++) window *= rt->dims[c->rhs[2 + i]];
  ir_ref w = as_dtype(nf, in, declared(nf, in, IR_RESHAPE, permute(nf, in, ops[1], rank, perm), 4,
                                       (const int64_t[]){window, Fg, C, M}, NULL), sdt);
  /* the result as [batch, out spatial..., C, M]: M = 1 is a dim of one, merged at the end */
  int64_t rdims[IR_MAX_RANK];
  rdims[0] = ot->dims[c->out[0]];
  for (int i = 0; i < ns; i++) rdims[1 + i] = ot->dims[c->out[2 + i]];
  rdims[rank - 1] = C;
  rdims[rank] = M;
  int xat[IR_MAX_RANK], wat[2] = {rank - 1, rank};
  for (int j = 0; j < rank; j++) xat[j] = j;
  ir_ref acc = IR_NOREF;
  int64_t k[IR_CONV_MAX_SPATIAL] = {0};
  for (int64_t q = 0; q < window; q++) {
    for (int64_t fi = 0; fi < Fg; fi++) {
      /* group g's feature fi is the lhs's feature g Fg + fi */
      ir_attr sa = {0};
      sa.remat = in->attr.remat;
      sa.slice.limit[0] = rdims[0];
      sa.slice.stride[0] = 1;
      sa.slice.start[rank - 1] = fi;
      sa.slice.limit[rank - 1] = (C - 1) * Fg + fi + 1;
      sa.slice.stride[rank - 1] = Fg;
      for (int i = 0; i < ns; i++) {
        sa.slice.start[1 + i] = k[i] * c->rhs_dil[i];
        sa.slice.limit[1 + i] = sa.slice.start[1 + i] + (rdims[1 + i] - 1) * c->stride[i] + 1;
        sa.slice.stride[1 + i] = c->stride[i];
      }
      ir_ref s = xp == IR_NOREF ? IR_NOREF : pass_emit_inferred(nf, who, IR_SLICE, 1, &xp, &sa, in->loc);
      ir_attr wa = {0};
      wa.remat = in->attr.remat;
      wa.slice.start[0] = q;
      wa.slice.limit[0] = q + 1;
      wa.slice.start[1] = fi;
      wa.slice.limit[1] = fi + 1;
      wa.slice.limit[2] = C;
      wa.slice.limit[3] = M;
      for (int d = 0; d < 4; d++) wa.slice.stride[d] = 1;
      ir_ref wq = w == IR_NOREF ? IR_NOREF : pass_emit_inferred(nf, who, IR_SLICE, 1, &w, &wa, in->loc);
      wq = declared(nf, in, IR_RESHAPE, wq, 2, (const int64_t[]){C, M}, NULL);
      ir_ref term = binop(nf, in, IR_MUL, declared(nf, in, IR_BROADCAST, s, rank + 1, rdims, xat),
                          declared(nf, in, IR_BROADCAST, wq, rank + 1, rdims, wat));
      acc = acc == IR_NOREF ? term : binop(nf, in, IR_ADD, acc, term);
      if (acc == IR_NOREF) return IR_NOREF;
    }
    for (int i = ns - 1; i >= 0 && ++k[i] == rt->dims[c->rhs[2 + i]]; i--) k[i] = 0;
  }
  rdims[rank - 1] = C * M;
  ir_ref y = declared(nf, in, IR_RESHAPE, as_dtype(nf, in, acc, ot->dtype), rank, rdims, NULL);
  /* back to the asked layout: out dim c->out[j] is y's dim j's */
  int back[IR_MAX_RANK];
  back[c->out[0]] = 0;
  back[c->out[1]] = rank - 1;
  for (int i = 0; i < ns; i++) back[c->out[2 + i]] = 1 + i;
  return permute(nf, in, y, rank, back);
}

jit_status pass_depthwise(ir_func *f) { return pass_rewrite_each(f, who, expandable, rewrite); }
