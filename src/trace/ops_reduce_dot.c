/* ops_reduce_dot.c: tracing of reductions (NumPy axes, negatives allowed, any order), matmul
 * (NumPy semantics lowered onto DOT with explicit batch broadcasting) and dot_general (XLA's). */
#include "trace/trace_internal.h"

ir_ref op_reduce_axes(op_ctx *c, ir_op op, ir_ref r, int n_axes, const int *axes) {
  if (r == IR_NOREF) return IR_NOREF;
  if (n_axes < 0 || (n_axes > 0 && !axes)) {
    op_fail(c, JIT_EINVAL, n_axes < 0 ? "negative axis count %d" : "axes is NULL (n_axes = %d)",
            n_axes);
    return IR_NOREF;
  }
  const ir_type *xt = op_type(c, r);
  unsigned seen = 0;
  for (int i = 0; i < n_axes; i++) {
    int ax;
    if (!op_axis(axes[i], xt->rank, &ax) || (seen & (1u << ax))) {
      op_fail(c, JIT_ESHAPE, "axes %s: axis %d %s for %s", trace_intlist(n_axes, axes).s, axes[i],
              op_axis(axes[i], xt->rank, &ax) ? "repeated" : "out of range", trace_ty(xt).s);
      return IR_NOREF;
    }
    seen |= 1u << ax;
  }
  ir_attr a = {0};
  for (int d = 0; d < xt->rank; d++) /* the IR wants them increasing */
    if (seen & (1u << d)) a.dims.d[a.dims.n++] = (uint8_t)d;
  return op_emit(c, op, 1, &r, &a, NULL);
}

static jit_val reduce(jit_trace *t, const char *name, ir_op op, jit_val x, int n_axes,
                      const int *axes) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  return op_result(&c, op_reduce_axes(&c, op, op_typed(&c, x, "operand"), n_axes, axes));
}

jit_val jit_reduce_sum(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  return reduce(t, "reduce_sum", IR_REDUCE_SUM, x, n_axes, axes);
}
jit_val jit_reduce_max(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  return reduce(t, "reduce_max", IR_REDUCE_MAX, x, n_axes, axes);
}
jit_val jit_reduce_min(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  return reduce(t, "reduce_min", IR_REDUCE_MIN, x, n_axes, axes);
}

/* NumPy matmul: a 1-D lhs gets a leading 1 and a 1-D rhs a trailing 1 (both removed from the
   result), the leading (batch) dims broadcast against each other and become DOT batch dims. */
jit_val jit_matmul(jit_trace *t, jit_val a, jit_val b) {
  op_ctx c;
  if (!op_begin(t, "matmul", &c)) return (jit_val){0};
  ir_ref ra = op_typed(&c, a, "lhs"), rb = ra == IR_NOREF ? IR_NOREF : op_typed(&c, b, "rhs");
  if (rb == IR_NOREF) return (jit_val){0};
  ir_type at = *op_type(&c, ra), bt = *op_type(&c, rb);
  trace_text as = trace_ty(&at), bs = trace_ty(&bt);
  if (at.rank < 1 || bt.rank < 1) {
    op_fail(&c, JIT_ESHAPE, "operands must have rank >= 1: %s x %s", as.s, bs.s);
    return (jit_val){0};
  }
  if (at.dtype != bt.dtype) {
    op_fail(&c, JIT_EDTYPE, "dtypes differ: %s x %s", as.s, bs.s);
    return (jit_val){0};
  }
  if (at.dtype == JIT_BOOL) {
    op_fail(&c, JIT_EDTYPE, "needs int or float operands, got %s x %s", as.s, bs.s);
    return (jit_val){0};
  }
  ir_type pa = at, pb = bt; /* the operands after promoting 1-D ones to 2-D */
  if (at.rank == 1) pa = (ir_type){.dtype = at.dtype, .rank = 2, .dims = {1, at.dims[0]}};
  if (bt.rank == 1) pb = (ir_type){.dtype = bt.dtype, .rank = 2, .dims = {bt.dims[0], 1}};
  if (pa.dims[pa.rank - 1] != pb.dims[pb.rank - 2]) {
    op_fail(&c, JIT_ESHAPE, "contracting dims differ: %s x %s", as.s, bs.s);
    return (jit_val){0};
  }
  int na = pa.rank - 2, nb = pb.rank - 2, n = na > nb ? na : nb;
  int64_t ld[IR_MAX_RANK], rd[IR_MAX_RANK], od[IR_MAX_RANK];
  for (int d = 0; d < n; d++) {
    int ka = d - (n - na), kb = d - (n - nb);
    int64_t sa = ka >= 0 ? pa.dims[ka] : 1, sb = kb >= 0 ? pb.dims[kb] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      op_fail(&c, JIT_ESHAPE, "batch dims do not broadcast: %s x %s", as.s, bs.s);
      return (jit_val){0};
    }
    ld[d] = rd[d] = od[d] = sa == 1 ? sb : sa;
  }
  if (n == 0 && (at.rank == 1 || bt.rank == 1)) {
    /* a vector operand with no batch dims: contract it as it is, no unit dim to add and drop
       (a vmapped vector-matrix product is then one plain matrix product) */
    ir_attr attr = {0};
    attr.dot.n_contract = 1;
    attr.dot.lhs_contract[0] = (uint8_t)(at.rank - 1);
    attr.dot.rhs_contract[0] = 0;
    ir_ref args[2] = {ra, rb};
    return op_result(&c, op_emit(&c, IR_DOT, 2, args, &attr, NULL));
  }
  int64_t m = pa.dims[pa.rank - 2], k = pa.dims[pa.rank - 1], nn = pb.dims[pb.rank - 1];
  ld[n] = m, ld[n + 1] = k;
  rd[n] = k, rd[n + 1] = nn;
  ra = op_broadcast(&c, op_reshape(&c, ra, pa.rank, pa.dims), n + 2, ld);
  rb = op_broadcast(&c, op_reshape(&c, rb, pb.rank, pb.dims), n + 2, rd);
  if (ra == IR_NOREF || rb == IR_NOREF) return (jit_val){0};
  ir_attr attr = {0};
  attr.dot.n_batch = (uint8_t)n;
  for (int d = 0; d < n; d++) attr.dot.lhs_batch[d] = attr.dot.rhs_batch[d] = (uint8_t)d;
  attr.dot.n_contract = 1;
  attr.dot.lhs_contract[0] = (uint8_t)(n + 1);
  attr.dot.rhs_contract[0] = (uint8_t)n;
  ir_ref args[2] = {ra, rb};
  ir_ref r = op_emit(&c, IR_DOT, 2, args, &attr, NULL);
  int rank = n;
  if (at.rank > 1) od[rank++] = m;
  if (bt.rank > 1) od[rank++] = nn;
  return op_result(&c, op_reshape(&c, r, rank, od));
}

jit_val jit_dot_general(jit_trace *t, jit_val a, jit_val b, int n_batch, const int *a_batch,
                        const int *b_batch, int n_contract, const int *a_contract,
                        const int *b_contract) {
  op_ctx c;
  if (!op_begin(t, "dot_general", &c)) return (jit_val){0};
  ir_ref ra = op_typed(&c, a, "lhs"), rb = ra == IR_NOREF ? IR_NOREF : op_typed(&c, b, "rhs");
  if (rb == IR_NOREF) return (jit_val){0};
  if (n_batch < 0 || n_contract < 0) {
    op_fail(&c, JIT_EINVAL, "negative dim count (n_batch %d, n_contract %d)", n_batch, n_contract);
    return (jit_val){0};
  }
  if ((n_batch > 0 && (!a_batch || !b_batch)) || (n_contract > 0 && (!a_contract || !b_contract))) {
    op_fail(&c, JIT_EINVAL, "%s dim list is NULL",
            n_batch > 0 && (!a_batch || !b_batch) ? "a batch" : "a contracting");
    return (jit_val){0};
  }
  const ir_type *at = op_type(&c, ra), *bt = op_type(&c, rb);
  trace_text as = trace_ty(at), bs = trace_ty(bt);
  if (n_batch + n_contract > at->rank || n_batch + n_contract > bt->rank) {
    op_fail(&c, JIT_ESHAPE, "%d batch + %d contracting dims exceed an operand's rank: %s x %s",
            n_batch, n_contract, as.s, bs.s);
    return (jit_val){0};
  }
  /* dims are taken as given (no negatives, unlike NumPy axes): XLA's dimension numbers */
  ir_attr attr = {0};
  attr.dot.n_batch = (uint8_t)n_batch;
  attr.dot.n_contract = (uint8_t)n_contract;
  for (int i = 0; i < n_batch + n_contract; i++) {
    int l = i < n_batch ? a_batch[i] : a_contract[i - n_batch];
    int r = i < n_batch ? b_batch[i] : b_contract[i - n_batch];
    if (l < 0 || l >= at->rank || r < 0 || r >= bt->rank) {
      op_fail(&c, JIT_ESHAPE, "%s dim %d out of range: %s x %s",
              l < 0 || l >= at->rank ? "lhs" : "rhs", l < 0 || l >= at->rank ? l : r, as.s, bs.s);
      return (jit_val){0};
    }
    if (i < n_batch) {
      attr.dot.lhs_batch[i] = (uint8_t)l;
      attr.dot.rhs_batch[i] = (uint8_t)r;
    } else {
      attr.dot.lhs_contract[i - n_batch] = (uint8_t)l;
      attr.dot.rhs_contract[i - n_batch] = (uint8_t)r;
    }
  }
  ir_ref args[2] = {ra, rb};
  return op_result(&c, op_emit(&c, IR_DOT, 2, args, &attr, NULL));
}
