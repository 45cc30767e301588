/* shape.c: every op's type rule: the result type from the operand types and attributes, with
 * every check; the tracer, the parser and the verifier all go through ir_infer_type.
 *
 * Dtype rules (bool; ints = i8 u8 i32 i64 u32 u64; floats = f16 bf16 f32 f64):
 *   float unary math (IR_UNARY_F: exp log sqrt rsqrt tanh logistic sin cos erf floor log1p
 *   expm1 ceil round erf_inv), is_finite (-> bool), atan2: floats
 *   neg, abs, sign: ints and floats      add sub mul div pow rem clamp: ints and floats, equal
 *   not and or xor: bool and ints        shifts: ints, equal dtypes           dtypes
 *   max, min: any dtype, equal dtypes    cmp: any dtype, equal dtypes -> bool
 *   select: bool predicate, branches of one dtype     convert: any -> any
 *   reduce_sum: ints and floats; reduce_max/min: any  dot: ints and floats, equal dtypes
 *   iota: ints and floats                const: any, the value must be exactly representable
 *   in an int or bool dtype (floats take any double; the interpreter rounds it)
 * Complex (c64 c128): neg add sub mul div exp log sqrt, abs (-> float), cmp eq/ne, select, convert, real imag conj,
 *   reduce_sum, dot, the structural ops, the sum collectives; complex(re, im) takes f32 or f64;
 *   every other op refuses complex operands with JIT_EINVAL, as jnp does
 * Reasons never name the op (callers prefix it) and name operand types as ir_format_type does.
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

/* A formatted type or list, held by value so that several fit in one printf call. */
typedef struct text {
  char s[224];
} text;

static text ty(const ir_type *t) {
  text r;
  ir_format_type(t, r.s, sizeof r.s);
  return r;
}

static text u8list(const uint8_t *d, int n) {
  text r;
  size_t len = 0;
  if (n > IR_MAX_RANK) n = IR_MAX_RANK; /* a corrupt count still prints the real entries */
  r.s[len++] = '[';
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(r.s + len, sizeof r.s - len, "%s%d", i ? "," : "", d[i]);
  snprintf(r.s + len, sizeof r.s - len, "]");
  return r;
}

jit_status ir_type_fail(char *why, size_t n, jit_status s, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return s;
}
#define FAIL(s, ...) ir_type_fail(why, why_n, s, __VA_ARGS__)

bool ir_value_fits(jit_dtype d, double v) {
  switch (d) {
  case JIT_BOOL: return v == 0 || v == 1;
  case JIT_I8: return v == floor(v) && v >= INT8_MIN && v <= INT8_MAX;
  case JIT_U8: return v == floor(v) && v >= 0 && v <= UINT8_MAX;
  case JIT_I32: return v == floor(v) && v >= INT32_MIN && v <= INT32_MAX;
  case JIT_I64: return v == floor(v) && v >= -0x1p63 && v < 0x1p63;
  case JIT_U32: return v == floor(v) && v >= 0 && v <= UINT32_MAX;
  case JIT_U64: return v == floor(v) && v >= 0 && v < 0x1p64;
  case JIT_F16:
  case JIT_BF16:
  case JIT_F32:
  case JIT_F64:
  case JIT_C64: /* a CONST of complex dtype is the splat (v, 0) */
  case JIT_C128: return true;
  }
  return false;
}

/* A well-formed type: known dtype, rank 0..IR_MAX_RANK, dims >= 0, and the product of the
   nonzero dims fits in int64 (so that no partial product in ir_type_numel overflows). */
static bool type_ok(const ir_type *t, const char **reason) {
  if (!ir_dtype_valid(t->dtype)) return *reason = "unknown dtype", false;
  if (t->rank < 0 || t->rank > IR_MAX_RANK) return *reason = "rank out of range", false;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return *reason = "negative dim", false;
    if (t->dims[i] == 0) continue;
    if (n > INT64_MAX / t->dims[i]) return *reason = "element count overflows", false;
    n *= t->dims[i];
  }
  return true;
}

static bool is_num(jit_dtype d) { return ir_dtype_is_int(d) || ir_dtype_is_float(d); }

static bool same_shape(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* The elementwise ops on complex operands: those ir_expand_complex defines (jnp's set). */
static bool complex_elementwise(ir_op op) {
  switch (op) {
  case IR_NEG:
  case IR_ADD:
  case IR_SUB:
  case IR_MUL:
  case IR_DIV:
  case IR_CMP: /* eq and ne only: infer_elementwise checks, it has the attributes */
  case IR_REAL:
  case IR_IMAG:
  case IR_CONJ:
  case IR_ABS: /* -> the parts' float dtype */
  case IR_EXP:
  case IR_LOG:
  case IR_SQRT: return true;
  default: return false;
  }
}

jit_status ir_check_elementwise_dtypes(ir_op op, uint32_t n_args, const ir_type *const *args,
                                       char *why, size_t why_n) {
  if ((unsigned)op >= IR_N_OPS || !(ir_op_flags[op] & IR_EW))
    return FAIL(JIT_EINVAL, "not an elementwise op");
  if (ir_op_arity[op] != (int)n_args)
    return FAIL(JIT_EINVAL, "takes %d operands, got %u", ir_op_arity[op], n_args);
  const ir_type *a = args[0];
  if (op != IR_CONVERT && op != IR_SELECT)
    for (uint32_t k = 0; k < n_args; k++)
      if (ir_dtype_is_complex(args[k]->dtype) && !complex_elementwise(op))
        return FAIL(JIT_EINVAL, "is not defined for complex operands (%s)", ty(args[k]).s);
  switch (op) {
  case IR_REAL:
  case IR_IMAG:
  case IR_CONJ:
    if (!ir_dtype_is_complex(a->dtype))
      return FAIL(JIT_EDTYPE, "needs a complex operand, got %s", ty(a).s);
    return JIT_OK;
  case IR_COMPLEX:
    if ((a->dtype != JIT_F32 && a->dtype != JIT_F64) || args[1]->dtype != a->dtype)
      return FAIL(JIT_EDTYPE, "needs two f32 or two f64 operands, got %s and %s", ty(a).s,
                  ty(args[1]).s);
    return JIT_OK;
  case IR_CONVERT: return JIT_OK;
  case IR_NEG:
  case IR_ABS:
  case IR_SIGN:
    if (!is_num(a->dtype) && !(op != IR_SIGN && ir_dtype_is_complex(a->dtype)))
      return FAIL(JIT_EDTYPE, "needs an int or float operand, got %s", ty(a).s);
    return JIT_OK;
  case IR_SELECT:
    if (a->dtype != JIT_BOOL) return FAIL(JIT_EDTYPE, "predicate must be bool, got %s", ty(a).s);
    if (args[1]->dtype != args[2]->dtype)
      return FAIL(JIT_EDTYPE, "branch dtypes differ: %s vs %s", ty(args[1]).s, ty(args[2]).s);
    return JIT_OK;
  default: break;
  }
  if ((ir_op_flags[op] & IR_UNARY_F) || op == IR_IS_FINITE) {
    if (!ir_dtype_is_float(a->dtype) && !ir_dtype_is_complex(a->dtype))
      return FAIL(JIT_EDTYPE, "needs a float operand, got %s", ty(a).s);
    return JIT_OK;
  }
  if (op == IR_NOT) {
    if (a->dtype != JIT_BOOL && !ir_dtype_is_int(a->dtype))
      return FAIL(JIT_EDTYPE, "needs a bool or int operand, got %s", ty(a).s);
    return JIT_OK;
  }
  /* binary: add sub mul div pow max min cmp rem atan2, bitwise, shifts; clamp (lo, x, hi) */
  for (uint32_t k = 1; k < n_args; k++)
    if (args[k]->dtype != a->dtype)
      return FAIL(JIT_EDTYPE, "dtypes differ: %s vs %s", ty(a).s, ty(args[k]).s);
  switch (op) {
  case IR_MAX:
  case IR_MIN:
  case IR_CMP: return JIT_OK;
  case IR_MUL:
  case IR_DIV:
  case IR_ADD:
  case IR_SUB:
    if (ir_dtype_is_complex(a->dtype)) return JIT_OK;
    break;
  case IR_AND:
  case IR_OR:
  case IR_XOR:
    if (a->dtype != JIT_BOOL && !ir_dtype_is_int(a->dtype))
      return FAIL(JIT_EDTYPE, "needs bool or int operands, got %s", ty(a).s);
    return JIT_OK;
  case IR_SHL:
  case IR_SHR_LOGICAL:
  case IR_SHR_ARITH:
    if (!ir_dtype_is_int(a->dtype))
      return FAIL(JIT_EDTYPE, "needs int operands, got %s", ty(a).s);
    return JIT_OK;
  case IR_THREEFRY:
    if (a->dtype != JIT_U64) return FAIL(JIT_EDTYPE, "needs u64 operands, got %s", ty(a).s);
    return JIT_OK;
  case IR_ATAN2:
    if (!ir_dtype_is_float(a->dtype))
      return FAIL(JIT_EDTYPE, "needs float operands, got %s", ty(a).s);
    return JIT_OK;
  default: break;
  }
  if (!is_num(a->dtype)) return FAIL(JIT_EDTYPE, "needs int or float operands, got %s", ty(a).s);
  return JIT_OK;
}

static jit_status infer_elementwise(ir_op op, uint32_t n_args, const ir_type *const *args,
                                    const ir_attr *attr, const ir_type *declared, ir_type *out,
                                    char *why, size_t why_n) {
  jit_status st = ir_check_elementwise_dtypes(op, n_args, args, why, why_n);
  if (st != JIT_OK) return st;
  if (op == IR_CMP && (unsigned)attr->cmp > JIT_GE)
    return FAIL(JIT_EINVAL, "unknown comparison %d", (int)attr->cmp);
  if (op == IR_CMP && ir_dtype_is_complex(args[0]->dtype) && attr->cmp != JIT_EQ &&
      attr->cmp != JIT_NE)
    return FAIL(JIT_EINVAL, "complex values have no order: only eq and ne compare %s",
                ty(args[0]).s);
  for (uint32_t i = 1; i < n_args; i++)
    if (!same_shape(args[0], args[i]))
      return FAIL(JIT_ESHAPE, "shapes differ: %s vs %s", ty(args[0]).s, ty(args[i]).s);
  *out = *args[op == IR_SELECT ? 1 : 0];
  if (op == IR_CMP || op == IR_IS_FINITE) out->dtype = JIT_BOOL;
  if (op == IR_REAL || op == IR_IMAG || op == IR_ABS) out->dtype = ir_dtype_complex_part(out->dtype);
  if (op == IR_COMPLEX) out->dtype = ir_dtype_complex_of(out->dtype);
  if (op == IR_CONVERT) {
    if (!declared) return FAIL(JIT_EINVAL, "needs a result type");
    if (!same_shape(args[0], declared))
      return FAIL(JIT_ESHAPE, "result shape differs: %s -> %s", ty(args[0]).s, ty(declared).s);
    out->dtype = declared->dtype;
  }
  return JIT_OK;
}

static jit_status infer_transpose(const ir_type *a, const ir_attr *attr, ir_type *out, char *why,
                                  size_t why_n) {
  const ir_dims *p = &attr->dims;
  bool seen[IR_MAX_RANK] = {0}, ok = p->n == a->rank;
  for (int i = 0; ok && i < p->n; i++) {
    if (p->d[i] >= a->rank || seen[p->d[i]])
      ok = false;
    else
      seen[p->d[i]] = true;
  }
  if (!ok)
    return FAIL(JIT_ESHAPE, "perm %s is not a permutation of the dims of %s", u8list(p->d, p->n).s,
                ty(a).s);
  out->dtype = a->dtype;
  out->rank = a->rank;
  for (int i = 0; i < a->rank; i++) out->dims[i] = a->dims[p->d[i]];
  return JIT_OK;
}

static jit_status infer_broadcast(const ir_type *a, const ir_attr *attr, const ir_type *r,
                                  ir_type *out, char *why, size_t why_n) {
  const ir_dims *d = &attr->dims;
  if (r->dtype != a->dtype)
    return FAIL(JIT_EDTYPE, "result dtype differs: %s -> %s", ty(a).s, ty(r).s);
  if (d->n != a->rank)
    return FAIL(JIT_ESHAPE, "dims %s need one entry per operand dim: %s -> %s",
                u8list(d->d, d->n).s, ty(a).s, ty(r).s);
  for (int i = 0; i < d->n; i++) {
    if (d->d[i] >= r->rank || (i > 0 && d->d[i] <= d->d[i - 1]))
      return FAIL(JIT_ESHAPE, "dims %s must be increasing and below the result rank: %s -> %s",
                  u8list(d->d, d->n).s, ty(a).s, ty(r).s);
    if (a->dims[i] != 1 && a->dims[i] != r->dims[d->d[i]])
      return FAIL(JIT_ESHAPE, "operand dim %d does not fit result dim %d: %s -> %s", i, d->d[i],
                  ty(a).s, ty(r).s);
  }
  *out = *r;
  return JIT_OK;
}

static jit_status infer_slice(const ir_type *a, const ir_attr *attr, ir_type *out, char *why,
                              size_t why_n) {
  const ir_slice *s = &attr->slice;
  *out = *a;
  for (int i = 0; i < a->rank; i++) {
    int64_t b = s->start[i], e = s->limit[i], st = s->stride[i];
    if (b < 0 || b > e || e > a->dims[i] || st < 1)
      return FAIL(JIT_ESHAPE, "dim %d: start %lld, limit %lld, stride %lld out of range for %s", i,
                  (long long)b, (long long)e, (long long)st, ty(a).s);
    out->dims[i] = (e - b) / st + ((e - b) % st != 0);
  }
  return JIT_OK;
}

static jit_status infer_concat(uint32_t n, const ir_type *const *args, const ir_attr *attr,
                               ir_type *out, char *why, size_t why_n) {
  const ir_type *a = args[0];
  if (a->rank < 1) return FAIL(JIT_ESHAPE, "cannot concatenate rank-0 values: %s", ty(a).s);
  if (attr->axis < 0 || attr->axis >= a->rank)
    return FAIL(JIT_ESHAPE, "axis %lld out of range for %s", (long long)attr->axis, ty(a).s);
  int axis = (int)attr->axis;
  *out = *a;
  for (uint32_t k = 1; k < n; k++) {
    const ir_type *b = args[k];
    if (b->dtype != a->dtype) return FAIL(JIT_EDTYPE, "dtypes differ: %s vs %s", ty(a).s, ty(b).s);
    bool ok = b->rank == a->rank;
    for (int i = 0; ok && i < a->rank; i++)
      if (i != axis && b->dims[i] != a->dims[i]) ok = false;
    if (!ok)
      return FAIL(JIT_ESHAPE, "shapes differ outside axis %d: %s vs %s", axis, ty(a).s, ty(b).s);
    if (out->dims[axis] > INT64_MAX - b->dims[axis])
      return FAIL(JIT_ESHAPE, "result size overflows");
    out->dims[axis] += b->dims[axis];
  }
  return JIT_OK;
}

static jit_status infer_reduce(ir_op op, const ir_type *a, const ir_attr *attr, ir_type *out,
                               char *why, size_t why_n) {
  const ir_dims *d = &attr->dims;
  if (op != IR_REDUCE_SUM && ir_dtype_is_complex(a->dtype))
    return FAIL(JIT_EINVAL, "is not defined for complex operands (%s)", ty(a).s);
  if ((op == IR_REDUCE_SUM || op == IR_REDUCE_PROD) && !is_num(a->dtype) &&
      !ir_dtype_is_complex(a->dtype))
    return FAIL(JIT_EDTYPE, "needs an int or float operand, got %s", ty(a).s);
  bool ok = d->n <= a->rank;
  for (int i = 0; ok && i < d->n; i++)
    if (d->d[i] >= a->rank || (i > 0 && d->d[i] <= d->d[i - 1])) ok = false;
  if (!ok)
    return FAIL(JIT_ESHAPE, "axes %s must be increasing and below the rank of %s",
                u8list(d->d, d->n).s, ty(a).s);
  out->dtype = a->dtype;
  out->rank = 0;
  for (int i = 0, k = 0; i < a->rank; i++) {
    if (k < d->n && d->d[k] == i)
      k++;
    else
      out->dims[out->rank++] = a->dims[i];
  }
  return JIT_OK;
}

static jit_status infer_sort(uint32_t n_args, const ir_type *const *args, const ir_attr *attr,
                             ir_type *out, char *why, size_t why_n) {
  const ir_sort *s = &attr->sort;
  if (n_args < 1) return FAIL(JIT_EINVAL, "needs at least one operand");
  if (s->n_keys < 1 || s->n_keys > n_args || s->index >= n_args || s->descending > 1)
    return FAIL(JIT_EINVAL, "keys=%u index=%u descending=%u for %u operands", s->n_keys, s->index,
                s->descending, n_args);
  if (args[0]->rank < 1 || attr->axis < 0 || attr->axis >= args[0]->rank)
    return FAIL(JIT_ESHAPE, "axis %lld out of range for %s", (long long)attr->axis, ty(args[0]).s);
  for (uint32_t i = 0; i < n_args; i++) {
    if (!same_shape(args[0], args[i]))
      return FAIL(JIT_ESHAPE, "operand shapes differ: %s vs %s", ty(args[0]).s, ty(args[i]).s);
    if (!ir_dtype_valid(args[i]->dtype))
      return FAIL(JIT_EDTYPE, "operand %u has no valid dtype", i);
    if (ir_dtype_is_complex(args[i]->dtype))
      return FAIL(JIT_EINVAL, "complex values have no order (operand %u is %s)", i, ty(args[i]).s);
  }
  *out = *args[s->index];
  return JIT_OK;
}

/* Checks one side's batch + contracting dim lists: in range and no dim used twice. */
static bool dot_side_ok(const ir_type *t, int nb, const uint8_t *b, int nc, const uint8_t *c,
                        bool *used) {
  for (int i = 0; i < nb + nc; i++) {
    int d = i < nb ? b[i] : c[i - nb];
    if (d >= t->rank || used[d]) return false;
    used[d] = true;
  }
  return true;
}

static jit_status infer_dot(const ir_type *l, const ir_type *r, const ir_attr *attr, ir_type *out,
                            char *why, size_t why_n) {
  const ir_dot_dims *d = &attr->dot;
  text ls = ty(l), rs = ty(r);
  if (l->dtype != r->dtype) return FAIL(JIT_EDTYPE, "dtypes differ: %s x %s", ls.s, rs.s);
  if (!is_num(l->dtype) && !ir_dtype_is_complex(l->dtype))
    return FAIL(JIT_EDTYPE, "needs int, float or complex operands, got %s x %s", ls.s, rs.s);
  int nb = d->n_batch, nc = d->n_contract;
  bool lused[IR_MAX_RANK] = {0}, rused[IR_MAX_RANK] = {0};
  if (nb + nc > l->rank || !dot_side_ok(l, nb, d->lhs_batch, nc, d->lhs_contract, lused))
    return FAIL(JIT_ESHAPE,
                "lhs dims batch=%s contract=%s invalid (out of range or repeated): %s x %s",
                u8list(d->lhs_batch, nb).s, u8list(d->lhs_contract, nc).s, ls.s, rs.s);
  if (nb + nc > r->rank || !dot_side_ok(r, nb, d->rhs_batch, nc, d->rhs_contract, rused))
    return FAIL(JIT_ESHAPE,
                "rhs dims batch=%s contract=%s invalid (out of range or repeated): %s x %s",
                u8list(d->rhs_batch, nb).s, u8list(d->rhs_contract, nc).s, ls.s, rs.s);
  for (int i = 0; i < nb; i++)
    if (l->dims[d->lhs_batch[i]] != r->dims[d->rhs_batch[i]])
      return FAIL(JIT_ESHAPE, "batch dims differ: %s x %s", ls.s, rs.s);
  for (int i = 0; i < nc; i++)
    if (l->dims[d->lhs_contract[i]] != r->dims[d->rhs_contract[i]])
      return FAIL(JIT_ESHAPE, "contracting dims differ: %s x %s", ls.s, rs.s);
  int rank = nb + (l->rank - nb - nc) + (r->rank - nb - nc);
  if (rank > IR_MAX_RANK)
    return FAIL(JIT_ESHAPE, "result rank %d exceeds %d: %s x %s", rank, IR_MAX_RANK, ls.s, rs.s);
  out->dtype = l->dtype;
  for (int i = 0; i < nb; i++) out->dims[out->rank++] = l->dims[d->lhs_batch[i]];
  for (int i = 0; i < l->rank; i++)
    if (!lused[i]) out->dims[out->rank++] = l->dims[i];
  for (int i = 0; i < r->rank; i++)
    if (!rused[i]) out->dims[out->rank++] = r->dims[i];
  return JIT_OK;
}

/* The collectives' rules: see ir_coll in ir.h. */
static jit_status infer_collective(ir_op op, const ir_type *x, const ir_attr *attr, ir_type *out,
                                   char *why, size_t why_n) {
  const ir_coll *c = &attr->coll;
  if (c->group < 1) return FAIL(JIT_EINVAL, "group size %u (must be >= 1)", (unsigned)c->group);
  if (!c->axes) return FAIL(JIT_EINVAL, "names no mesh axis");
  if (op == IR_AXIS_INDEX) {
    *out = (ir_type){.dtype = JIT_I32, .rank = 0};
    return JIT_OK;
  }
  *out = *x;
  bool has_dim = op == IR_ALL_GATHER || op == IR_REDUCE_SCATTER || op == IR_ALL_TO_ALL ||
                 op == IR_SHARD_SLICE;
  if (has_dim && c->dim >= x->rank)
    return FAIL(JIT_ESHAPE, "dim %u out of range for %s", (unsigned)c->dim, ty(x).s);
  if ((op == IR_ALL_REDUCE || op == IR_REDUCE_SCATTER) && c->kind > IR_COLL_MIN)
    return FAIL(JIT_EINVAL, "unknown reduction kind %u", (unsigned)c->kind);
  if ((op == IR_ALL_REDUCE || op == IR_REDUCE_SCATTER) && x->dtype == JIT_BOOL)
    return FAIL(JIT_EDTYPE, "cannot reduce %s", ty(x).s);
  if ((op == IR_ALL_REDUCE || op == IR_REDUCE_SCATTER) && c->kind != IR_COLL_SUM &&
      ir_dtype_is_complex(x->dtype))
    return FAIL(JIT_EINVAL, "complex values have no order: cannot take the max or min of %s",
                ty(x).s);
  int64_t n = c->group;
  switch (op) {
  case IR_ALL_GATHER:
    if (x->dims[c->dim] > INT64_MAX / n) return FAIL(JIT_ESHAPE, "result dim overflows");
    out->dims[c->dim] *= n;
    break;
  case IR_REDUCE_SCATTER:
  case IR_SHARD_SLICE:
    if (x->dims[c->dim] % n)
      return FAIL(JIT_ESHAPE, "dim %u of %s does not split into %lld equal parts", (unsigned)c->dim,
                  ty(x).s, (long long)n);
    out->dims[c->dim] /= n;
    break;
  case IR_ALL_TO_ALL:
    if (c->dim2 >= x->rank)
      return FAIL(JIT_ESHAPE, "dim2 %u out of range for %s", (unsigned)c->dim2, ty(x).s);
    if (x->dims[c->dim] % n)
      return FAIL(JIT_ESHAPE, "dim %u of %s does not split into %lld equal parts", (unsigned)c->dim,
                  ty(x).s, (long long)n);
    out->dims[c->dim] /= n;
    if (out->dims[c->dim2] > INT64_MAX / n) return FAIL(JIT_ESHAPE, "result dim overflows");
    out->dims[c->dim2] *= n;
    break;
  default: break;
  }
  return JIT_OK;
}

jit_status ir_infer_type(ir_op op, uint32_t n_args, const ir_type *const *args, const ir_attr *attr,
                         const ir_type *declared, ir_type *out, char *why, size_t why_n) {
  static const ir_attr zero_attr;
  const char *reason = NULL;
  if (why && why_n) why[0] = '\0';
  memset(out, 0, sizeof *out);
  if ((unsigned)op >= IR_N_OPS) return FAIL(JIT_EINVAL, "unknown op %d", (int)op);
  int arity = ir_op_arity[op];
  if (arity >= 0 ? n_args != (uint32_t)arity : n_args < 1)
    return FAIL(JIT_EINVAL, "takes %s%d operands, got %u", arity < 0 ? "at least " : "",
                arity < 0 ? 1 : arity, n_args);
  if (n_args && !args) return FAIL(JIT_EINVAL, "missing operands");
  for (uint32_t i = 0; i < n_args; i++) {
    if (!args[i]) return FAIL(JIT_EINVAL, "missing operand %u", i);
    if (!type_ok(args[i], &reason)) return FAIL(JIT_EINVAL, "operand %u: %s", i, reason);
  }
  if (declared && !type_ok(declared, &reason)) return FAIL(JIT_EINVAL, "result type: %s", reason);
  if (!attr) attr = &zero_attr;

  jit_status st = JIT_OK;
  switch (op) {
  case IR_PARAM:
  case IR_CONST:
  case IR_IOTA:
  case IR_RESHAPE:
  case IR_BROADCAST:
    if (!declared) return FAIL(JIT_EINVAL, "needs a result type");
    break;
  default: break;
  }
  switch (op) {
  case IR_PARAM: *out = *declared; break;
  case IR_CONST:
    if (!ir_value_fits(declared->dtype, attr->value))
      return FAIL(JIT_EDTYPE, "value %.17g is not a %s", attr->value,
                  jit_dtype_name(declared->dtype));
    *out = *declared;
    break;
  case IR_IOTA:
    if (!is_num(declared->dtype))
      return FAIL(JIT_EDTYPE, "needs an int or float dtype, got %s", ty(declared).s);
    if (attr->axis < 0 || attr->axis >= declared->rank)
      return FAIL(JIT_ESHAPE, "dim %lld out of range for %s", (long long)attr->axis,
                  ty(declared).s);
    *out = *declared;
    break;
  case IR_RESHAPE:
    if (declared->dtype != args[0]->dtype)
      return FAIL(JIT_EDTYPE, "result dtype differs: %s -> %s", ty(args[0]).s, ty(declared).s);
    if (ir_type_numel(declared) != ir_type_numel(args[0]))
      return FAIL(JIT_ESHAPE, "element counts differ: %s -> %s", ty(args[0]).s, ty(declared).s);
    *out = *declared;
    break;
  case IR_TRANSPOSE: st = infer_transpose(args[0], attr, out, why, why_n); break;
  case IR_BROADCAST: st = infer_broadcast(args[0], attr, declared, out, why, why_n); break;
  case IR_SLICE: st = infer_slice(args[0], attr, out, why, why_n); break;
  case IR_CONCAT: st = infer_concat(n_args, args, attr, out, why, why_n); break;
  case IR_GATHER:
  case IR_SCATTER:
  case IR_PAD:
  case IR_REV: st = ir_infer_index_op(op, n_args, args, attr, out, why, why_n); break;
  case IR_SORT: st = infer_sort(n_args, args, attr, out, why, why_n); break;
  case IR_FFT: st = ir_infer_fft(args[0], &attr->fft, out, why, why_n); break;
  case IR_CONV:
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: st = ir_infer_conv_op(op, n_args, args, attr, out, why, why_n); break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: st = infer_reduce(op, args[0], attr, out, why, why_n); break;
  case IR_DOT: st = infer_dot(args[0], args[1], attr, out, why, why_n); break;
  case IR_SHARDING:
    if (!attr->sharding) return FAIL(JIT_EINVAL, "has no sharding");
    if (attr->sharding->rank != args[0]->rank)
      return FAIL(JIT_ESHAPE, "a sharding of rank %d for %s", attr->sharding->rank, ty(args[0]).s);
    *out = *args[0];
    break;
  default:
    if (ir_op_is_collective(op)) {
      st = infer_collective(op, n_args ? args[0] : NULL, attr, out, why, why_n);
      break;
    }
    if (!(ir_op_flags[op] & IR_EW)) return FAIL(JIT_EINTERNAL, "no type rule");
    st = infer_elementwise(op, n_args, args, attr, declared, out, why, why_n);
    break;
  }
  if (st != JIT_OK) return st;
  /* zero dims past the rank, so that results compare equal field by field */
  for (int i = out->rank; i < IR_MAX_RANK; i++) out->dims[i] = 0;
  if (!type_ok(out, &reason)) return FAIL(JIT_ESHAPE, "result type: %s", reason);
  return JIT_OK;
}
