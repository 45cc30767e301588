/* ops_sharding.c: jit_with_sharding_constraint, a `sharding` op that pins its value's layout for
 * the partitioner (and makes the call partitioned over its mesh). */
#include "runtime/sharding.h"
#include "trace/trace_internal.h"

jit_val jit_with_sharding_constraint(jit_trace *t, jit_val x, const jit_sharding *s) {
  op_ctx c;
  if (!op_begin(t, "with_sharding_constraint", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  if (!s) {
    op_fail(&c, JIT_EINVAL, "sharding is NULL");
    return (jit_val){0};
  }
  const ir_type *xt = op_type(&c, r);
  if (s->rank != xt->rank) {
    char spec[256];
    sharding_format_spec(s, spec, sizeof spec);
    op_fail(&c, JIT_ESHARDING, "the spec \"%s\" has %d entries for %s", spec, s->rank,
            trace_ty(xt).s);
    return (jit_val){0};
  }
  for (int d = 0; d < s->rank; d++) {
    int64_t parts = sharding_dim_parts(s, d);
    if (xt->dims[d] % parts) {
      char spec[256];
      sharding_format_spec(s, spec, sizeof spec);
      op_fail(&c, JIT_ESHARDING, "the spec \"%s\" splits dim %d of %s into %lld parts, which "
              "does not divide it", spec, d, trace_ty(xt).s, (long long)parts);
      return (jit_val){0};
    }
  }
  ir_attr a = {0};
  a.sharding = (jit_sharding *)s; /* the function takes its own reference */
  return op_result(&c, op_emit(&c, IR_SHARDING, 1, &r, &a, NULL));
}
