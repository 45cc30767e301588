/* ops_index.c: tracing of indexing and the shape ops around it: take, take_along_axis,
 * scatter_add/set, dynamic_slice, dynamic_update_slice (all forms of the IR's one gather and one
 * scatter, as jnp's indexing is of lax.gather/scatter), pad and rev.
 * Negative indices count from the end (normalized by IR ops before the gather/scatter); what is
 * still out of range is clamped by a gather (mode clip) and dropped by a scatter (mode fill). */
#include <stdlib.h>
#include <string.h>

#include "trace/trace_internal.h"

static ir_ref convert(op_ctx *c, ir_ref x, jit_dtype dt) {
  if (x == IR_NOREF || op_type(c, x)->dtype == dt) return x;
  ir_type to = *op_type(c, x);
  to.dtype = dt;
  return op_emit(c, IR_CONVERT, 1, &x, NULL, &to);
}

/* The integer dtype indices of x along a dim of size n are computed in: the user's when it
   holds -n..n, else i64 (i32 for the 8-bit ones when n allows). */
static jit_dtype index_dtype(jit_dtype dt, int64_t n) {
  if (dt == JIT_I64 || dt == JIT_U64) return dt;
  if (n <= INT32_MAX && (dt == JIT_I8 || dt == JIT_U8 || dt == JIT_I32 || dt == JIT_U32))
    return dt == JIT_U32 ? dt : JIT_I32;
  return JIT_I64;
}

/* The indices idx as an instruction: a weak scalar (jit_scalar(t, 2)) is an i32, as a Python
   int index is in jnp. */
static ir_ref index_operand(op_ctx *c, jit_val idx) {
  trace_val *v = op_val(c, idx, "indices");
  if (!v) return IR_NOREF;
  return v->weak ? op_weak_as(c, v, JIT_I32) : v->ref;
}

/* idx (an integer array) checked, widened where needed and with negative entries counting
   from the end of a dim of size n. */
static ir_ref normalized_index(op_ctx *c, ir_ref idx, int64_t n) {
  if (idx == IR_NOREF) return idx;
  const ir_type *it = op_type(c, idx);
  if (!ir_dtype_is_int(it->dtype)) {
    op_fail(c, JIT_EDTYPE, "indices must be integers, got %s", trace_ty(it).s);
    return IR_NOREF;
  }
  idx = convert(c, idx, index_dtype(it->dtype, n));
  if (idx == IR_NOREF || ir_dtype_is_unsigned(op_type(c, idx)->dtype)) return idx;
  ir_type t = *op_type(c, idx);
  ir_ref zero = op_const(c, t.dtype, t.rank, t.dims, 0), size = op_const(c, t.dtype, t.rank, t.dims, (double)n);
  ir_attr lt = {0};
  lt.cmp = JIT_LT;
  ir_ref args[3] = {idx, zero};
  ir_ref neg = op_emit(c, IR_CMP, 2, args, &lt, NULL);
  args[0] = neg;
  args[1] = op_binary(c, IR_ADD, idx, size);
  args[2] = idx;
  return op_emit(c, IR_SELECT, 3, args, NULL, NULL);
}

/* The dimension numbers of x[idx] along axis (take / scatter along an axis): result dims
   x.shape[:axis] + idx.shape + x.shape[axis+1:]; the index vector is implicit (length 1). */
static void axis_dims(const ir_type *xt, int idx_rank, int axis, ir_gather *g) {
  memset(g, 0, sizeof *g);
  for (int d = 0; d < xt->rank; d++) {
    g->sizes[d] = d == axis ? 1 : xt->dims[d];
    if (d != axis) g->offset_dims.d[g->offset_dims.n++] = (uint8_t)(d < axis ? d : d - 1 + idx_rank);
  }
  g->collapsed.n = 1;
  g->collapsed.d[0] = (uint8_t)axis;
  g->start_map.n = 1;
  g->start_map.d[0] = (uint8_t)axis;
  g->index_dim = (uint8_t)idx_rank;
}

/* x's axis for an indexing op (x of rank >= 1); false after recording the error. */
static bool index_axis(op_ctx *c, const ir_type *xt, int axis, int *out) {
  if (xt->rank == 0) {
    op_fail(c, JIT_ESHAPE, "cannot index a scalar (%s)", trace_ty(xt).s);
    return false;
  }
  if (!op_axis(axis, xt->rank, out)) {
    op_fail(c, JIT_ESHAPE, "axis %d out of range for %s", axis, trace_ty(xt).s);
    return false;
  }
  return true;
}

/* The type of x[idx] along axis. */
static bool take_type(op_ctx *c, const ir_type *xt, const ir_type *it, int axis, ir_type *out) {
  if (xt->rank - 1 + it->rank > IR_MAX_RANK) {
    op_fail(c, JIT_ESHAPE, "indexing %s with %s needs rank %d (at most %d)", trace_ty(xt).s,
            trace_ty(it).s, xt->rank - 1 + it->rank, IR_MAX_RANK);
    return false;
  }
  *out = (ir_type){.dtype = xt->dtype, .rank = xt->rank - 1 + it->rank};
  for (int d = 0, r = 0; d < xt->rank; d++) {
    if (d == axis)
      for (int k = 0; k < it->rank; k++) out->dims[r++] = it->dims[k];
    else
      out->dims[r++] = xt->dims[d];
  }
  return true;
}

jit_val jit_take(jit_trace *t, jit_val x, jit_val idx, int axis) {
  op_ctx c;
  if (!op_begin(t, "take", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand"), ir = index_operand(&c, idx);
  if (xr == IR_NOREF || ir == IR_NOREF) return (jit_val){0};
  ir_type xt = *op_type(&c, xr), it = *op_type(&c, ir), rt;
  int ax;
  if (!index_axis(&c, &xt, axis, &ax) || !take_type(&c, &xt, &it, ax, &rt)) return (jit_val){0};
  if (xt.dims[ax] == 0) { /* nothing to take from: only an empty take is defined */
    if (ir_type_numel(&it) != 0) {
      op_fail(&c, JIT_ESHAPE, "cannot take %s entries from the empty axis %d of %s",
              trace_ty(&it).s, ax, trace_ty(&xt).s);
      return (jit_val){0};
    }
    return op_result(&c, op_const(&c, rt.dtype, rt.rank, rt.dims, 0));
  }
  ir_ref args[2] = {xr, normalized_index(&c, ir, xt.dims[ax])};
  if (args[1] == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  axis_dims(&xt, it.rank, ax, &a.gather);
  a.gather.mode = IR_INDEX_CLIP;
  return op_result(&c, op_emit(&c, IR_GATHER, 2, args, &a, NULL));
}

/* An integer iota of type t counting along dim d. */
static ir_ref iota(op_ctx *c, const ir_type *t, int d) {
  ir_attr a = {0};
  a.axis = d;
  return op_emit(c, IR_IOTA, 0, NULL, &a, t);
}

jit_val jit_take_along_axis(jit_trace *t, jit_val x, jit_val idx, int axis) {
  op_ctx c;
  if (!op_begin(t, "take_along_axis", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand"), ir = index_operand(&c, idx);
  if (xr == IR_NOREF || ir == IR_NOREF) return (jit_val){0};
  ir_type xt = *op_type(&c, xr), it = *op_type(&c, ir);
  int ax;
  if (!index_axis(&c, &xt, axis, &ax)) return (jit_val){0};
  if (it.rank != xt.rank) {
    op_fail(&c, JIT_ESHAPE, "indices %s must have the rank of the operand %s", trace_ty(&it).s,
            trace_ty(&xt).s);
    return (jit_val){0};
  }
  /* the result's shape: the other dims broadcast as in NumPy, the axis the indices' */
  ir_type bt = {.dtype = it.dtype, .rank = it.rank};
  for (int d = 0; d < xt.rank; d++) {
    int64_t a = xt.dims[d], b = it.dims[d];
    if (d != ax && a != b && a != 1 && b != 1) {
      op_fail(&c, JIT_ESHAPE, "indices %s do not broadcast against %s outside axis %d",
              trace_ty(&it).s, trace_ty(&xt).s, ax);
      return (jit_val){0};
    }
    bt.dims[d] = d == ax ? b : (a == 1 ? b : a);
  }
  if (xt.dims[ax] == 0 || ir_type_numel(&bt) == 0) {
    if (ir_type_numel(&bt) != 0) {
      op_fail(&c, JIT_ESHAPE, "cannot take %s entries from the empty axis %d of %s",
              trace_ty(&it).s, ax, trace_ty(&xt).s);
      return (jit_val){0};
    }
    return op_result(&c, op_const(&c, xt.dtype, bt.rank, bt.dims, 0));
  }
  /* index vectors (idx, iota over each other dim x really has): every operand dim collapsed */
  ir_ref idx_b = normalized_index(&c, op_broadcast(&c, ir, bt.rank, bt.dims), xt.dims[ax]);
  if (idx_b == IR_NOREF) return (jit_val){0};
  ir_type vt = *op_type(&c, idx_b);
  if (vt.rank == IR_MAX_RANK) {
    op_fail(&c, JIT_ESHAPE, "take_along_axis on rank %d needs rank %d index vectors (at most %d)",
            xt.rank, vt.rank + 1, IR_MAX_RANK);
    return (jit_val){0};
  }
  vt.dims[vt.rank++] = 1;
  ir_ref parts[IR_MAX_RANK];
  int n = 0;
  ir_attr a = {0};
  ir_gather *g = &a.gather;
  parts[n++] = op_reshape(&c, idx_b, vt.rank, vt.dims);
  g->start_map.d[g->start_map.n++] = (uint8_t)ax;
  for (int d = 0; d < xt.rank; d++) {
    g->sizes[d] = 1;
    g->collapsed.d[g->collapsed.n++] = (uint8_t)d;
    if (d == ax || xt.dims[d] == 1) continue; /* a broadcast dim of x starts at 0 */
    parts[n++] = iota(&c, &vt, d);
    g->start_map.d[g->start_map.n++] = (uint8_t)d;
  }
  ir_attr cat = {0};
  cat.axis = vt.rank - 1;
  ir_ref args[2] = {xr, n == 1 ? parts[0] : op_emit(&c, IR_CONCAT, (uint32_t)n, parts, &cat, NULL)};
  g->index_dim = (uint8_t)(vt.rank - 1);
  g->mode = IR_INDEX_CLIP;
  if (args[1] == IR_NOREF) return (jit_val){0};
  return op_result(&c, op_emit(&c, IR_GATHER, 2, args, &a, NULL));
}

static jit_val scatter_axis(jit_trace *t, const char *name, ir_combine comb, jit_val x,
                            jit_val idx, jit_val updates, int axis) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand"), ir = index_operand(&c, idx);
  trace_val *uv = op_val(&c, updates, "updates");
  if (xr == IR_NOREF || ir == IR_NOREF || !uv) return (jit_val){0};
  ir_type xt = *op_type(&c, xr), it = *op_type(&c, ir), ut;
  int ax;
  if (!index_axis(&c, &xt, axis, &ax) || !take_type(&c, &xt, &it, ax, &ut)) return (jit_val){0};
  ir_ref ur = uv->weak ? op_weak_as(&c, uv, xt.dtype) : uv->ref;
  if (ur == IR_NOREF) return (jit_val){0};
  const ir_type *given = op_type(&c, ur);
  bool fits = given->rank <= ut.rank;
  for (int i = 0; fits && i < given->rank; i++) {
    int64_t g = given->dims[i], w = ut.dims[ut.rank - given->rank + i];
    fits = g == w || g == 1;
  }
  if (!fits || given->dtype != xt.dtype) {
    op_fail(&c, fits ? JIT_EDTYPE : JIT_ESHAPE, "updates %s do not fit %s (indexing %s along axis %d)",
            trace_ty(given).s, trace_ty(&ut).s, trace_ty(&xt).s, ax);
    return (jit_val){0};
  }
  if (xt.dims[ax] == 0) /* every index is out of range: every update is dropped */
    return op_result(&c, xr);
  ir_ref args[3] = {xr, normalized_index(&c, ir, xt.dims[ax]), op_broadcast(&c, ur, ut.rank, ut.dims)};
  if (args[1] == IR_NOREF || args[2] == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  axis_dims(&xt, it.rank, ax, &a.gather);
  memset(a.gather.sizes, 0, sizeof a.gather.sizes);
  a.gather.mode = IR_INDEX_FILL;
  a.gather.combine = (uint8_t)comb;
  return op_result(&c, op_emit(&c, IR_SCATTER, 3, args, &a, NULL));
}

jit_val jit_scatter_add(jit_trace *t, jit_val x, jit_val idx, jit_val updates, int axis) {
  return scatter_axis(t, "scatter_add", IR_COMBINE_ADD, x, idx, updates, axis);
}

jit_val jit_scatter_set(jit_trace *t, jit_val x, jit_val idx, jit_val updates, int axis) {
  return scatter_axis(t, "scatter_set", IR_COMBINE_SET, x, idx, updates, axis);
}

/* The starts (one integer scalar per dim of x) as one index vector of a common dtype. */
static ir_ref start_vector(op_ctx *c, int rank, const jit_val *start) {
  if (!start) {
    op_fail(c, JIT_EINVAL, "start is NULL");
    return IR_NOREF;
  }
  ir_ref parts[IR_MAX_RANK];
  jit_dtype dt = JIT_I32;
  for (int d = 0; d < rank; d++) {
    trace_val *v = op_val(c, start[d], "start");
    if (!v) return IR_NOREF;
    parts[d] = v->weak ? op_weak_as(c, v, JIT_I64) : v->ref;
    if (parts[d] == IR_NOREF) return IR_NOREF;
    const ir_type *st = op_type(c, parts[d]);
    if (st->rank != 0 || !ir_dtype_is_int(st->dtype)) {
      op_fail(c, st->rank ? JIT_ESHAPE : JIT_EDTYPE, "start[%d] must be an integer scalar, got %s",
              d, trace_ty(st).s);
      return IR_NOREF;
    }
    if (st->dtype == JIT_I64 || st->dtype == JIT_U64 || st->dtype == JIT_U32) dt = JIT_I64;
  }
  int64_t one = 1;
  for (int d = 0; d < rank; d++) parts[d] = op_reshape(c, convert(c, parts[d], dt), 1, &one);
  if (rank == 1) return parts[0];
  ir_attr cat = {0};
  return op_emit(c, IR_CONCAT, (uint32_t)rank, parts, &cat, NULL);
}

/* Dimension numbers of a window of x at a start vector: every dim a window dim. */
static void window_dims(int rank, ir_gather *g) {
  memset(g, 0, sizeof *g);
  g->offset_dims.n = g->start_map.n = (uint8_t)rank;
  for (int d = 0; d < rank; d++) g->offset_dims.d[d] = g->start_map.d[d] = (uint8_t)d;
  g->index_dim = 0;
  g->mode = IR_INDEX_CLIP; /* XLA's clamp is dynamic_slice's */
}

jit_val jit_dynamic_slice(jit_trace *t, jit_val x, const jit_val *start, const int64_t *sizes) {
  op_ctx c;
  if (!op_begin(t, "dynamic_slice", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand");
  if (xr == IR_NOREF) return (jit_val){0};
  ir_type xt = *op_type(&c, xr);
  if (xt.rank == 0) return op_result(&c, xr);
  if (!sizes) {
    op_fail(&c, JIT_EINVAL, "sizes is NULL");
    return (jit_val){0};
  }
  for (int d = 0; d < xt.rank; d++)
    if (sizes[d] < 0 || sizes[d] > xt.dims[d]) {
      op_fail(&c, JIT_ESHAPE, "sizes %s do not fit in %s", trace_i64list(xt.rank, sizes).s,
              trace_ty(&xt).s);
      return (jit_val){0};
    }
  ir_ref args[2] = {xr, start_vector(&c, xt.rank, start)};
  if (args[1] == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  window_dims(xt.rank, &a.gather);
  memcpy(a.gather.sizes, sizes, (size_t)xt.rank * sizeof *sizes);
  return op_result(&c, op_emit(&c, IR_GATHER, 2, args, &a, NULL));
}

jit_val jit_dynamic_update_slice(jit_trace *t, jit_val x, jit_val update, const jit_val *start) {
  op_ctx c;
  if (!op_begin(t, "dynamic_update_slice", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand"), ur = op_typed(&c, update, "update");
  if (xr == IR_NOREF || ur == IR_NOREF) return (jit_val){0};
  ir_type xt = *op_type(&c, xr), ut = *op_type(&c, ur);
  bool fits = ut.rank == xt.rank;
  for (int d = 0; fits && d < xt.rank; d++) fits = ut.dims[d] <= xt.dims[d];
  if (!fits || ut.dtype != xt.dtype) {
    op_fail(&c, fits ? JIT_EDTYPE : JIT_ESHAPE, "update %s does not fit in %s", trace_ty(&ut).s,
            trace_ty(&xt).s);
    return (jit_val){0};
  }
  if (xt.rank == 0) return op_result(&c, ur);
  ir_ref args[3] = {xr, start_vector(&c, xt.rank, start), ur};
  if (args[1] == IR_NOREF) return (jit_val){0};
  ir_attr a = {0};
  window_dims(xt.rank, &a.gather); /* clip: the window is moved inside x, never dropped */
  a.gather.combine = IR_COMBINE_SET;
  return op_result(&c, op_emit(&c, IR_SCATTER, 3, args, &a, NULL));
}

jit_val jit_pad(jit_trace *t, jit_val x, jit_val pad_value, const int64_t *lo, const int64_t *hi,
                const int64_t *interior) {
  op_ctx c;
  if (!op_begin(t, "pad", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand");
  trace_val *pv = op_val(&c, pad_value, "pad_value");
  if (xr == IR_NOREF || !pv) return (jit_val){0};
  ir_type xt = *op_type(&c, xr);
  ir_ref pr = pv->weak ? op_weak_as(&c, pv, xt.dtype) : pv->ref;
  if (pr == IR_NOREF) return (jit_val){0};
  if (xt.rank > 0 && (!lo || !hi)) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", lo ? "hi" : "lo");
    return (jit_val){0};
  }
  ir_attr a = {0};
  for (int d = 0; d < xt.rank; d++) {
    a.pad.lo[d] = lo[d];
    a.pad.hi[d] = hi[d];
    a.pad.interior[d] = interior ? interior[d] : 0;
  }
  ir_ref args[2] = {xr, pr};
  return op_result(&c, op_emit(&c, IR_PAD, 2, args, &a, NULL));
}

jit_val jit_rev(jit_trace *t, jit_val x, int n_axes, const int *axes) {
  op_ctx c;
  if (!op_begin(t, "rev", &c)) return (jit_val){0};
  ir_ref xr = op_typed(&c, x, "operand");
  if (xr == IR_NOREF) return (jit_val){0};
  const ir_type *xt = op_type(&c, xr);
  if (n_axes < 0 || n_axes > xt->rank || (n_axes > 0 && !axes)) {
    op_fail(&c, JIT_EINVAL, "bad axes (n_axes %d) for %s", n_axes, trace_ty(xt).s);
    return (jit_val){0};
  }
  bool on[IR_MAX_RANK] = {0};
  for (int i = 0; i < n_axes; i++) {
    int d;
    if (!op_axis(axes[i], xt->rank, &d) || on[d]) {
      op_fail(&c, JIT_ESHAPE, "axes %s are not distinct dims of %s", trace_intlist(n_axes, axes).s,
              trace_ty(xt).s);
      return (jit_val){0};
    }
    on[d] = true;
  }
  ir_attr a = {0};
  for (int d = 0; d < xt->rank; d++)
    if (on[d]) a.dims.d[a.dims.n++] = (uint8_t)d;
  if (a.dims.n == 0) return op_result(&c, xr);
  return op_result(&c, op_emit(&c, IR_REV, 1, &xr, &a, NULL));
}
