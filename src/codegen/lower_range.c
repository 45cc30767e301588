/* lower_range.c: what the lowering knows of a value's range from the IR that computes it, for
 * emitters that have cheaper code for a narrower range (codegen/lower_internal.h). */
#include "codegen/lower_internal.h"

/* Whether b is max(a) broadcast back over the axes it reduced, so that every element of b is
   the maximum of a set of a's elements that holds the element of a at the same position:
   broadcast and reshape (ones inserted or dropped) of reduce_max(a). Walking from b towards the
   reduction, own[d] names the dim of a (and of b, which has a's shape) that dim d of the current
   value follows, or -1 for a dim of size 1. */
static bool is_own_max(const ir_func *f, ir_ref a, ir_ref b) {
  const ir_type *ta = ir_type_of(f, a);
  if (!ir_type_equal(ta, ir_type_of(f, b))) return false;
  int own[IR_MAX_RANK];
  for (int d = 0; d < ta->rank; d++) own[d] = ta->dims[d] == 1 ? -1 : d;
  ir_ref v = b;
  for (int depth = 0; depth < 8; depth++) {
    const ir_ins *in = &f->ins[v];
    const ir_type *t = ir_type_of(f, v);
    if (in->n_args < 1) return false;
    const ir_type *to = ir_type_of(f, in->args[0]);
    int next[IR_MAX_RANK];
    switch (in->op) {
    case IR_BROADCAST:
      for (int i = 0; i < to->rank; i++) next[i] = to->dims[i] == 1 ? -1 : own[in->attr.dims.d[i]];
      break;
    case IR_RESHAPE: { /* only ones inserted or dropped: the other dims pair up in order */
      int j = 0;
      for (int i = 0; i < to->rank; i++) {
        next[i] = -1;
        if (to->dims[i] == 1) continue;
        while (j < t->rank && t->dims[j] == 1) j++;
        if (j == t->rank || t->dims[j] != to->dims[i]) return false;
        next[i] = own[j++];
      }
      while (j < t->rank && t->dims[j] == 1) j++;
      if (j != t->rank) return false;
      break;
    }
    case IR_REDUCE_MAX: {
      if (in->args[0] != a) return false;
      /* result dim k is a's k-th dim outside the reduced ones */
      int k = 0;
      for (int d = 0, r = 0; d < ta->rank; d++) {
        if (r < in->attr.dims.n && in->attr.dims.d[r] == d) {
          r++;
          continue;
        }
        if (ta->dims[d] != 1 && own[k] != d) return false;
        k++;
      }
      return true;
    }
    default: return false;
    }
    for (int i = 0; i < to->rank; i++) own[i] = next[i];
    v = in->args[0];
  }
  return false;
}

bool lw_at_most_zero(const ir_func *f, ir_ref v) {
  const ir_ins *in = &f->ins[v];
  if (!ir_dtype_is_float(ir_type_of(f, v)->dtype)) return false;
  switch (in->op) {
  case IR_SUB: return is_own_max(f, in->args[0], in->args[1]); /* rounds to <= 0 */
  case IR_NEG: {
    const ir_ins *x = &f->ins[in->args[0]];
    return x->op == IR_ABS || (x->op == IR_MUL && x->args[0] == x->args[1]); /* -|x|, -(x x) */
  }
  default: return false;
  }
}

bool lw_in_unit_interval(const ir_func *f, ir_ref v) {
  const ir_ins *in = &f->ins[v];
  return ir_dtype_is_float(ir_type_of(f, v)->dtype) && in->op == IR_EXP &&
         lw_at_most_zero(f, in->args[0]);
}
