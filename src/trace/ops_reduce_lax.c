/* ops_reduce_lax.c: lax's further reductions (reduce_prod, reduce_and, reduce_or, argmax,
 * argmin) and cumulative ops (cumsum, cumprod, cummax, cummin), composed from IR ops so that
 * vmap, VJPs, sharding and fusion come from the rules those ops already have.
 *
 * argmax is a max reduction, a compare against it and a min reduction of the matching iota (the
 * first index); a NaN matches itself through x != x, so the first NaN wins, as jnp.argmax. The
 * cumulative ops are a Hillis-Steele parallel prefix: ceil(log2 n) steps, each combining the
 * running value with itself shifted by 2^k along the axis (slice + concat), every step one
 * vectorized, row-parallel loop instead of a serial one per row. */
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

static ir_ref emit2(op_ctx *c, ir_op op, ir_ref x, ir_ref y) {
  ir_ref a[2] = {x, y};
  return op_emit(c, op, 2, a, NULL, NULL);
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
  if (ir_dtype_is_float(xt.dtype)) hit = emit2(&c, IR_OR, hit, compare(&c, JIT_NE, r, r));
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
  int64_t n = xt->dims[ax];
  for (int64_t s = 1; s < n; s *= 2) y = emit2(&c, comb, y, shifted(&c, comb, y, ax, s, reverse != 0));
  return op_result(&c, y);
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
