/* ops_reduce_lax.c: lax's further reductions (reduce_prod, reduce_and, reduce_or, argmax,
 * argmin) and cumulative ops (cumsum, cumprod, cummax, cummin), composed from IR ops so that
 * vmap, VJPs, sharding and fusion come from the rules those ops already have.
 *
 * argmax is a max reduction, a compare against it and a min reduction of the matching iota (the
 * first index); a NaN matches itself through x != x, so the first NaN wins, as jnp.argmax. The
 * cumulative ops are a blocked parallel prefix (see prefix()): within blocks and over block
 * totals, Hillis-Steele steps that combine the running value with itself shifted by 2^k along
 * the axis (slice + concat); every step is one vectorized, row-parallel loop, none a serial loop
 * per row. */
#include "trace/trace_internal.h"

jit_val jit_reduce_prod(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  op_ctx c;
  if (!op_begin(t, "reduce_prod", &c)) return (jit_val){0};
  return op_result(&c, op_reduce_axes(&c, IR_REDUCE_PROD, op_typed(&c, x, "operand"), n_axes, axes));
}

/* reduce_and / reduce_or of bools: min and max of the bools as u8 (a u8 partial result is what
   a sharded reduction's collective can finish), compared with 0. */
static jit_val reduce_bool(jit_trace *t, const char *name, ir_op op, jit_val x, int n_axes,
                           const int *axes) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  if (op_type(&c, r)->dtype != JIT_BOOL) {
    op_fail(&c, JIT_EDTYPE, "needs a bool operand, got %s", trace_ty(op_type(&c, r)).s);
    return (jit_val){0};
  }
  ir_type u8 = *op_type(&c, r);
  u8.dtype = JIT_U8;
  ir_ref m = op_reduce_axes(&c, op, op_emit(&c, IR_CONVERT, 1, &r, NULL, &u8), n_axes, axes);
  if (m == IR_NOREF) return (jit_val){0};
  ir_type bt = *op_type(&c, m);
  bt.dtype = JIT_BOOL;
  return op_result(&c, op_emit(&c, IR_CONVERT, 1, &m, NULL, &bt));
}

jit_val jit_reduce_and(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  return reduce_bool(t, "reduce_and", IR_REDUCE_MIN, x, n_axes, axes);
}
jit_val jit_reduce_or(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  return reduce_bool(t, "reduce_or", IR_REDUCE_MAX, x, n_axes, axes);
}

static ir_ref compare(op_ctx *c, jit_cmp_op dir, ir_ref x, ir_ref y) {
  ir_attr a = {0};
  a.cmp = dir;
  ir_ref xs[2] = {x, y};
  return op_emit(c, IR_CMP, 2, xs, &a, NULL);
}

/* The operand, its normalized axis, checked: the axis exists and has elements. */
static ir_ref axis_operand(op_ctx *c, jit_val x, int axis, int *ax) {
  ir_ref r = op_typed(c, x, "operand");
  if (r == IR_NOREF) return r;
  const ir_type *xt = op_type(c, r);
  if (!op_axis(axis, xt->rank, ax)) {
    op_fail(c, JIT_ESHAPE, "axis %d out of range for %s", axis, trace_ty(xt).s);
    return IR_NOREF;
  }
  return r;
}

static jit_val argminmax(jit_trace *t, const char *name, ir_op reduce, jit_val x, int axis,
                         jit_dtype index_dtype) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  int ax;
  ir_ref r = axis_operand(&c, x, axis, &ax);
  if (r == IR_NOREF) return (jit_val){0};
  ir_type xt = *op_type(&c, r);
  if (!ir_dtype_is_int(index_dtype)) {
    op_fail(&c, JIT_EDTYPE, "index dtype must be an integer, got %s", jit_dtype_name(index_dtype));
    return (jit_val){0};
  }
  if (xt.dims[ax] == 0) {
    op_fail(&c, JIT_ESHAPE, "axis %d of %s is empty: no %s", axis, trace_ty(&xt).s, name);
    return (jit_val){0};
  }
  int axes[1] = {ax};
  int kept[IR_MAX_RANK];
  for (int d = 0, k = 0; d < xt.rank; d++)
    if (d != ax) kept[k++] = d;
  ir_ref m = op_reduce_axes(&c, reduce, r, 1, axes);
  /* m broadcast back along the axis */
  ir_attr b = {0};
  b.dims.n = (uint8_t)(xt.rank - 1);
  for (int k = 0; k < xt.rank - 1; k++) b.dims.d[k] = (uint8_t)kept[k];
  ir_ref mb = op_emit(&c, IR_BROADCAST, 1, &m, &b, &xt);
  ir_ref hit = compare(&c, JIT_EQ, r, mb);
  if (ir_dtype_is_float(xt.dtype)) hit = op_binary(&c, IR_OR, hit, compare(&c, JIT_NE, r, r));
  ir_type it = xt;
  it.dtype = index_dtype;
  ir_attr io = {0};
  io.axis = ax;
  ir_ref idx = op_emit(&c, IR_IOTA, 0, NULL, &io, &it);
  ir_ref none = op_const(&c, index_dtype, it.rank, it.dims, (double)xt.dims[ax]);
  ir_ref sel[3] = {hit, idx, none};
  ir_ref cand = op_emit(&c, IR_SELECT, 3, sel, NULL, NULL);
  return op_result(&c, op_reduce_axes(&c, IR_REDUCE_MIN, cand, 1, axes));
}

jit_val jit_argmax(jit_trace *t, jit_val x, int axis, jit_dtype index_dtype) {
  return argminmax(t, "argmax", IR_REDUCE_MAX, x, axis, index_dtype);
}
jit_val jit_argmin(jit_trace *t, jit_val x, int axis, jit_dtype index_dtype) {
  return argminmax(t, "argmin", IR_REDUCE_MIN, x, axis, index_dtype);
}

/* ---- cumulative ops -------------------------------------------------------------------------- */

/* x[lo:hi] along axis. */
static ir_ref slice_axis(op_ctx *c, ir_ref x, int axis, int64_t lo, int64_t hi) {
  const ir_type *t = op_type(c, x);
  ir_attr a = {0};
  for (int d = 0; d < t->rank; d++) {
    a.slice.limit[d] = t->dims[d];
    a.slice.stride[d] = 1;
  }
  a.slice.start[axis] = lo;
  a.slice.limit[axis] = hi;
  return op_emit(c, IR_SLICE, 1, &x, &a, NULL);
}

static ir_ref concat2(op_ctx *c, ir_ref a, ir_ref b, int axis) {
  ir_attr at = {0};
  at.axis = axis;
  ir_ref xs[2] = {a, b};
  return op_emit(c, IR_CONCAT, 2, xs, &at, NULL);
}

/* y shifted by s along axis (toward higher indices, or lower when reverse); the s positions
   left open hold the combiner's identity (sum, prod) or y's own values there (max and min are
   idempotent, and no integer bound need be a CONST). */
static ir_ref shifted(op_ctx *c, ir_op comb, ir_ref y, int axis, int64_t s, bool reverse) {
  ir_type t = *op_type(c, y);
  int64_t n = t.dims[axis];
  ir_ref fill;
  if (comb == IR_ADD || comb == IR_MUL) {
    t.dims[axis] = s;
    fill = op_const(c, t.dtype, t.rank, t.dims, comb == IR_ADD ? 0 : 1);
  } else {
    fill = reverse ? slice_axis(c, y, axis, n - s, n) : slice_axis(c, y, axis, 0, s);
  }
  return reverse ? concat2(c, slice_axis(c, y, axis, s, n), fill, axis)
                 : concat2(c, fill, slice_axis(c, y, axis, 0, n - s), axis);
}

/* Hillis-Steele: log2 n passes, each combining y with itself shifted by 2^k. */
static ir_ref prefix_steps(op_ctx *c, ir_op comb, ir_ref y, int axis, bool reverse) {
  int64_t n = y == IR_NOREF ? 0 : op_type(c, y)->dims[axis];
  for (int64_t s = 1; s < n; s *= 2) y = op_binary(c, comb, y, shifted(c, comb, y, axis, s, reverse));
  return y;
}

enum { CUM_BLOCK = 32 }; /* a longer axis is scanned in blocks of this many */

/* The blocked parallel prefix along a long axis: the axis split into nb blocks of CUM_BLOCK
   (zero padded at the end, at the start when reverse), a prefix within every block (5 passes),
   the prefix of the block totals (recursively, on 1/32 of the data), each block's total of the
   blocks before it combined into it (one pass): about 7 passes instead of log2 n. */
static ir_ref prefix(op_ctx *c, ir_op comb, ir_ref y, int axis, bool reverse) {
  if (y == IR_NOREF) return y;
  ir_type t = *op_type(c, y);
  int64_t n = t.dims[axis], b = CUM_BLOCK;
  if (n <= 4 * b || t.rank >= IR_MAX_RANK) return prefix_steps(c, comb, y, axis, reverse);
  int64_t nb = (n + b - 1) / b, pad = nb * b - n;
  if (pad) {
    ir_type pt = t;
    pt.dims[axis] = pad;
    ir_ref z = op_const(c, t.dtype, pt.rank, pt.dims, 0);
    y = reverse ? concat2(c, z, y, axis) : concat2(c, y, z, axis);
  }
  /* [.., nb * b, ..] -> [.., nb, b, ..] */
  ir_type bt = {.dtype = t.dtype, .rank = t.rank + 1};
  for (int d = 0, k = 0; d < t.rank; d++) {
    if (d == axis) {
      bt.dims[k++] = nb;
      bt.dims[k++] = b;
    } else {
      bt.dims[k++] = t.dims[d];
    }
  }
  ir_ref local = prefix_steps(c, comb, op_reshape(c, y, bt.rank, bt.dims), axis + 1, reverse);
  ir_ref tot = slice_axis(c, local, axis + 1, reverse ? 0 : b - 1, reverse ? 1 : b);
  ir_type tt = t;
  tt.dims[axis] = nb;
  tot = prefix(c, comb, op_reshape(c, tot, tt.rank, tt.dims), axis, reverse);
  /* block j (j >= 1; reverse: j < nb - 1) takes the total through block j - 1 (j + 1) */
  ir_ref carry = reverse ? slice_axis(c, tot, axis, 1, nb) : slice_axis(c, tot, axis, 0, nb - 1);
  ir_type ct = bt;
  ct.dims[axis] = nb - 1;
  ir_attr ba = {0};
  ba.dims.n = (uint8_t)t.rank;
  for (int d = 0; d < t.rank; d++) ba.dims.d[d] = (uint8_t)(d <= axis ? d : d + 1);
  carry = op_emit(c, IR_BROADCAST, 1, &carry, &ba, &ct);
  ir_ref rest = reverse ? slice_axis(c, local, axis, 0, nb - 1) : slice_axis(c, local, axis, 1, nb);
  rest = op_binary(c, comb, rest, carry);
  ir_ref edge = reverse ? slice_axis(c, local, axis, nb - 1, nb) : slice_axis(c, local, axis, 0, 1);
  ir_ref whole = reverse ? concat2(c, rest, edge, axis) : concat2(c, edge, rest, axis);
  ir_type wt = t;
  wt.dims[axis] = nb * b;
  whole = op_reshape(c, whole, wt.rank, wt.dims);
  return pad ? slice_axis(c, whole, axis, reverse ? pad : 0, reverse ? nb * b : n) : whole;
}

static jit_val cumulative(jit_trace *t, const char *name, ir_op comb, jit_val x, int axis,
                          int reverse) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  int ax;
  ir_ref y = axis_operand(&c, x, axis, &ax);
  if (y == IR_NOREF) return (jit_val){0};
  const ir_type *xt = op_type(&c, y);
  if ((comb == IR_ADD || comb == IR_MUL) && xt->dtype == JIT_BOOL) {
    op_fail(&c, JIT_EDTYPE, "needs an int or float operand, got %s", trace_ty(xt).s);
    return (jit_val){0};
  }
  return op_result(&c, prefix(&c, comb, y, ax, reverse != 0));
}

jit_val jit_cumsum(jit_trace *t, jit_val x, int axis, int reverse) {
  return cumulative(t, "cumsum", IR_ADD, x, axis, reverse);
}
jit_val jit_cumprod(jit_trace *t, jit_val x, int axis, int reverse) {
  return cumulative(t, "cumprod", IR_MUL, x, axis, reverse);
}
jit_val jit_cummax(jit_trace *t, jit_val x, int axis, int reverse) {
  return cumulative(t, "cummax", IR_MAX, x, axis, reverse);
}
jit_val jit_cummin(jit_trace *t, jit_val x, int axis, int reverse) {
  return cumulative(t, "cummin", IR_MIN, x, axis, reverse);
}
