/* ops_sort.c: lax.sort (several operands, lexicographic on the first n_keys, stable, NaN last)
 * and lax.top_k (the k largest along the last axis, largest first, ties by lower index), both on
 * the SORT op: one SORT per result, each the same order applied to another operand. */
#include "trace/trace_internal.h"

static ir_ref sort_one(op_ctx *c, uint32_t n, const ir_ref *xs, int axis, int n_keys, int index,
                       bool descending) {
  ir_attr a = {0};
  a.axis = axis;
  a.sort = (ir_sort){(uint8_t)n_keys, (uint8_t)index, descending};
  return op_emit(c, IR_SORT, n, xs, &a, NULL);
}

void jit_sort(jit_trace *t, int n, const jit_val *xs, int axis, int n_keys, jit_val *out) {
  op_ctx c;
  if (out && n > 0)
    for (int i = 0; i < n; i++) out[i] = (jit_val){0};
  if (!op_begin(t, "sort", &c)) return;
  if (!xs || !out || n < 1 || n > UINT8_MAX || n_keys < 1 || n_keys > n) {
    op_fail(&c, JIT_EINVAL, "n = %d operands (1..%d), n_keys = %d (1..n), xs and out non-NULL",
            n, UINT8_MAX, n_keys);
    return;
  }
  ir_ref refs[UINT8_MAX];
  for (int i = 0; i < n; i++)
    if ((refs[i] = op_typed(&c, xs[i], "operand")) == IR_NOREF) return;
  int ax;
  const ir_type *t0 = op_type(&c, refs[0]);
  if (!op_axis(axis, t0->rank, &ax)) {
    op_fail(&c, JIT_ESHAPE, "axis %d out of range for %s", axis, trace_ty(t0).s);
    return;
  }
  for (int i = 0; i < n; i++) {
    ir_ref r = sort_one(&c, (uint32_t)n, refs, ax, n_keys, i, false);
    if (r == IR_NOREF) return;
    out[i] = op_result(&c, r);
  }
}

void jit_top_k(jit_trace *t, jit_val x, int k, jit_val *values, jit_val *indices) {
  op_ctx c;
  if (values) *values = (jit_val){0};
  if (indices) *indices = (jit_val){0};
  if (!op_begin(t, "top_k", &c)) return;
  if (!values || !indices) {
    op_fail(&c, JIT_EINVAL, "values and indices must be non-NULL");
    return;
  }
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return;
  ir_type xt = *op_type(&c, r);
  if (xt.rank < 1 || k < 0 || k > xt.dims[xt.rank - 1]) {
    op_fail(&c, JIT_ESHAPE, "k = %d out of range for %s (0..the last dim)", k, trace_ty(&xt).s);
    return;
  }
  int ax = xt.rank - 1;
  if (xt.dims[ax] > INT32_MAX) {
    op_fail(&c, JIT_ESHAPE, "the last dim of %s does not fit i32 indices", trace_ty(&xt).s);
    return;
  }
  ir_type it = xt;
  it.dtype = JIT_I32;
  ir_attr io = {0};
  io.axis = ax;
  ir_ref ops[2] = {r, op_emit(&c, IR_IOTA, 0, NULL, &io, &it)};
  ir_attr sl = {0};
  for (int d = 0; d < xt.rank; d++) {
    sl.slice.limit[d] = xt.dims[d];
    sl.slice.stride[d] = 1;
  }
  sl.slice.limit[ax] = k;
  ir_ref v = sort_one(&c, 2, ops, ax, 1, 0, true);
  ir_ref i = sort_one(&c, 2, ops, ax, 1, 1, true);
  v = op_emit(&c, IR_SLICE, 1, &v, &sl, NULL);
  i = op_emit(&c, IR_SLICE, 1, &i, &sl, NULL);
  if (v == IR_NOREF || i == IR_NOREF) return;
  *values = op_result(&c, v);
  *indices = op_result(&c, i);
}
