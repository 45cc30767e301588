/* ops_shape.c: tracing of data movement: reshape (with NumPy's -1), transpose, broadcast_to,
 * slice and concat. Axes in transpose's perm and concat's axis may be negative, as in NumPy. */
#include <stdlib.h>
#include <string.h>

#include "trace/trace_internal.h"

jit_val jit_reshape(jit_trace *t, jit_val x, int rank, const int64_t *shape) {
  op_ctx c;
  if (!op_begin(t, "reshape", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  if (rank < 0 || rank > JIT_MAX_RANK) {
    op_fail(&c, JIT_ESHAPE, "rank %d out of range 0..%d", rank, JIT_MAX_RANK);
    return (jit_val){0};
  }
  if (rank > 0 && !shape) {
    op_fail(&c, JIT_EINVAL, "shape is NULL");
    return (jit_val){0};
  }
  ir_type from = *op_type(&c, r), to = {.dtype = from.dtype, .rank = rank};
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < rank; i++) {
    to.dims[i] = shape[i];
    if (shape[i] == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (shape[i] < 0) {
      op_fail(&c, JIT_ESHAPE, "bad shape %s (dims >= 0, at most one -1) for %s",
              trace_i64list(rank, shape).s, trace_ty(&from).s);
      return (jit_val){0};
    }
    if (shape[i] && known > INT64_MAX / shape[i])
      known = -1;
    else if (known >= 0)
      known *= shape[i];
  }
  int64_t n = ir_type_numel(&from);
  if (infer >= 0) {
    if (known <= 0 || n % known != 0) {
      op_fail(&c, JIT_ESHAPE, "cannot reshape %s to %s", trace_ty(&from).s,
              trace_i64list(rank, shape).s);
      return (jit_val){0};
    }
    to.dims[infer] = n / known;
  } else if (known != n) {
    op_fail(&c, JIT_ESHAPE, "element counts differ: %s -> %s", trace_ty(&from).s,
            trace_i64list(rank, shape).s);
    return (jit_val){0};
  }
  return op_result(&c, op_emit(&c, IR_RESHAPE, 1, &r, NULL, &to));
}

jit_val jit_transpose(jit_trace *t, jit_val x, const int *perm) {
  op_ctx c;
  if (!op_begin(t, "transpose", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  const ir_type *xt = op_type(&c, r);
  if (xt->rank > 0 && !perm) {
    op_fail(&c, JIT_EINVAL, "perm is NULL");
    return (jit_val){0};
  }
  ir_attr a = {0};
  a.dims.n = (uint8_t)xt->rank;
  for (int i = 0; i < xt->rank; i++) {
    int p;
    if (!op_axis(perm[i], xt->rank, &p)) {
      op_fail(&c, JIT_ESHAPE, "perm %s is not a permutation of the dims of %s",
              trace_intlist(xt->rank, perm).s, trace_ty(xt).s);
      return (jit_val){0};
    }
    a.dims.d[i] = (uint8_t)p;
  }
  return op_result(&c, op_emit(&c, IR_TRANSPOSE, 1, &r, &a, NULL));
}

jit_val jit_broadcast_to(jit_trace *t, jit_val x, int rank, const int64_t *shape) {
  op_ctx c;
  if (!op_begin(t, "broadcast_to", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF || !op_check_shape(&c, rank, shape)) return (jit_val){0};
  ir_type xt = *op_type(&c, r), to = {.dtype = xt.dtype, .rank = rank};
  bool ok = xt.rank <= rank;
  for (int i = 0; i < rank; i++) {
    to.dims[i] = shape[i];
    int k = i - (rank - xt.rank);
    if (ok && k >= 0 && xt.dims[k] != 1 && xt.dims[k] != shape[i]) ok = false;
  }
  if (!ok) {
    op_fail(&c, JIT_ESHAPE, "cannot broadcast %s to shape %s", trace_ty(&xt).s,
            trace_i64list(rank, shape).s);
    return (jit_val){0};
  }
  ir_attr a = {0};
  a.dims.n = (uint8_t)xt.rank;
  for (int i = 0; i < xt.rank; i++) a.dims.d[i] = (uint8_t)(i + rank - xt.rank);
  return op_result(&c, op_emit(&c, IR_BROADCAST, 1, &r, &a, &to));
}

jit_val jit_slice(jit_trace *t, jit_val x, const int64_t *start, const int64_t *limit,
                  const int64_t *stride) {
  op_ctx c;
  if (!op_begin(t, "slice", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  int rank = op_type(&c, r)->rank;
  if (rank > 0 && (!start || !limit)) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", start ? "limit" : "start");
    return (jit_val){0};
  }
  ir_attr a = {0};
  for (int i = 0; i < rank; i++) {
    a.slice.start[i] = start[i];
    a.slice.limit[i] = limit[i];
    a.slice.stride[i] = stride ? stride[i] : 1;
  }
  return op_result(&c, op_emit(&c, IR_SLICE, 1, &r, &a, NULL));
}

jit_val jit_concat(jit_trace *t, int n, const jit_val *xs, int axis) {
  op_ctx c;
  if (!op_begin(t, "concat", &c)) return (jit_val){0};
  if (n < 1 || !xs) {
    op_fail(&c, JIT_EINVAL, n < 1 ? "needs at least one operand, got %d" : "xs is NULL (n = %d)",
            n);
    return (jit_val){0};
  }
  ir_ref *refs = malloc((size_t)n * sizeof *refs);
  ir_ref out = IR_NOREF;
  if (!refs) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    return (jit_val){0};
  }
  for (int i = 0; i < n; i++)
    if ((refs[i] = op_typed(&c, xs[i], "operand")) == IR_NOREF) goto done;
  const ir_type *first = op_type(&c, refs[0]);
  ir_attr a = {0};
  a.axis = axis;
  if (first->rank > 0) {
    int ax;
    if (!op_axis(axis, first->rank, &ax)) {
      op_fail(&c, JIT_ESHAPE, "axis %d out of range for %s", axis, trace_ty(first).s);
      goto done;
    }
    a.axis = ax;
  }
  out = op_emit(&c, IR_CONCAT, (uint32_t)n, refs, &a, NULL);
done:
  free(refs);
  return op_result(&c, out);
}
