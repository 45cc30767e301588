/* ops_conv.c: lax.conv_general_dilated (jit_conv) with JAX's string dimension numbers, and
 * lax.reduce_window (jit_reduce_window) for sum, max and min: each one IR instruction. */
#include <string.h>

#include "trace/trace_internal.h"

/* The dims of spec (a string of rank letters) as XLA's list: the two named letters first (a, b:
   "NC" or "OI"), then the spatial letters in the order order_spec lists them (JAX sorts lhs and
   out spatial dims by their position in the rhs spec). False on a malformed spec. */
static bool spec_dims(const char *spec, int rank, char a, char b, const char *order_spec,
                      uint8_t *out) {
  if (!spec || (int)strlen(spec) != rank) return false;
  const char *pa = strchr(spec, a), *pb = strchr(spec, b);
  if (!pa || !pb) return false;
  out[0] = (uint8_t)(pa - spec);
  out[1] = (uint8_t)(pb - spec);
  int k = 2;
  for (int i = 0; i < rank; i++) {
    char ch = order_spec[i];
    if (ch == 'O' || ch == 'I') continue;
    const char *p = strchr(spec, ch);
    if (!p || ch == a || ch == b) return false;
    out[k++] = (uint8_t)(p - spec);
  }
  for (int i = 0; i < rank; i++) /* each letter once */
    if (strchr(spec + i + 1, spec[i])) return false;
  return k == rank;
}

jit_val jit_conv(jit_trace *t, jit_val lhs, jit_val rhs, const int64_t *strides,
                 const int64_t *pad_lo, const int64_t *pad_hi, const int64_t *lhs_dilation,
                 const int64_t *rhs_dilation, const char *lhs_spec, const char *rhs_spec,
                 const char *out_spec, int64_t feature_group_count) {
  op_ctx c;
  if (!op_begin(t, "conv", &c)) return (jit_val){0};
  ir_ref args[2] = {op_typed(&c, lhs, "lhs"), IR_NOREF};
  if (args[0] == IR_NOREF || (args[1] = op_typed(&c, rhs, "rhs")) == IR_NOREF) return (jit_val){0};
  int rank = op_type(&c, args[0])->rank;
  if (rank < 3 || rank > IR_CONV_MAX_SPATIAL + 2 || op_type(&c, args[1])->rank != rank) {
    op_fail(&c, JIT_ESHAPE, "lhs %s and rhs %s need one rank, 3..%d", trace_ty(op_type(&c, args[0])).s,
            trace_ty(op_type(&c, args[1])).s, IR_CONV_MAX_SPATIAL + 2);
    return (jit_val){0};
  }
  ir_attr a = {0};
  ir_conv *cv = &a.conv;
  if (!rhs_spec || (int)strlen(rhs_spec) != rank ||
      !spec_dims(rhs_spec, rank, 'O', 'I', rhs_spec, cv->rhs) ||
      !spec_dims(lhs_spec, rank, 'N', 'C', rhs_spec, cv->lhs) ||
      !spec_dims(out_spec, rank, 'N', 'C', rhs_spec, cv->out)) {
    op_fail(&c, JIT_EINVAL,
            "specs \"%s\", \"%s\", \"%s\" do not name %d dims (lhs N, C; rhs O, I; out N, C; the "
            "same spatial letters in each, each letter once)",
            lhs_spec ? lhs_spec : "(null)", rhs_spec ? rhs_spec : "(null)",
            out_spec ? out_spec : "(null)", rank);
    return (jit_val){0};
  }
  for (int i = 0; i < rank - 2; i++) {
    cv->stride[i] = strides ? strides[i] : 1;
    cv->pad_lo[i] = pad_lo ? pad_lo[i] : 0;
    cv->pad_hi[i] = pad_hi ? pad_hi[i] : 0;
    cv->lhs_dil[i] = lhs_dilation ? lhs_dilation[i] : 1;
    cv->rhs_dil[i] = rhs_dilation ? rhs_dilation[i] : 1;
  }
  cv->groups = feature_group_count;
  cv->batch_groups = 1;
  return op_result(&c, op_emit(&c, IR_CONV, 2, args, &a, NULL));
}

jit_val jit_reduce_window(jit_trace *t, jit_val x, jit_window_kind kind, const int64_t *window,
                          const int64_t *strides, const int64_t *pad_lo, const int64_t *pad_hi) {
  op_ctx c;
  if (!op_begin(t, "reduce_window", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  const ir_type *xt = op_type(&c, r);
  if (!window || (unsigned)kind > JIT_WINDOW_MIN) {
    op_fail(&c, JIT_EINVAL, "the window must be non-NULL and the kind sum, max or min");
    return (jit_val){0};
  }
  ir_attr a = {0};
  a.window.kind = (uint8_t)kind;
  for (int d = 0; d < xt->rank; d++) {
    a.window.size[d] = window[d];
    a.window.stride[d] = strides ? strides[d] : 1;
    a.window.pad_lo[d] = pad_lo ? pad_lo[d] : 0;
    a.window.pad_hi[d] = pad_hi ? pad_hi[d] : 0;
  }
  return op_result(&c, op_emit(&c, IR_REDUCE_WINDOW, 1, &r, &a, NULL));
}
