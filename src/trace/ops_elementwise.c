/* ops_elementwise.c: tracing of constants (scalar, full, iota) and elementwise ops: NumPy
 * broadcasting made explicit with BROADCAST, and weak scalars resolved against typed partners. */
#include <math.h>
#include <string.h>

#include "trace/trace_internal.h"

jit_val jit_scalar(jit_trace *t, double v) {
  op_ctx c;
  if (!op_begin(t, "scalar", &c)) return (jit_val){0};
  return op_weak_result(&c, v);
}

static bool check_dtype(op_ctx *c, jit_dtype dt) {
  if (ir_dtype_valid(dt)) return true;
  op_fail(c, JIT_EDTYPE, "unknown dtype %d", (int)dt);
  return false;
}

jit_val jit_full(jit_trace *t, jit_dtype dt, int rank, const int64_t *shape, double v) {
  op_ctx c;
  if (!op_begin(t, "full", &c) || !check_dtype(&c, dt) || !op_check_shape(&c, rank, shape))
    return (jit_val){0};
  if (!ir_value_fits(dt, v)) {
    op_fail(&c, JIT_EDTYPE, "value %s cannot take dtype %s", trace_num(v).s, jit_dtype_name(dt));
    return (jit_val){0};
  }
  return op_result(&c, op_const(&c, dt, rank, shape, v));
}

jit_val jit_iota(jit_trace *t, jit_dtype dt, int rank, const int64_t *shape, int dim) {
  op_ctx c;
  if (!op_begin(t, "iota", &c) || !check_dtype(&c, dt) || !op_check_shape(&c, rank, shape))
    return (jit_val){0};
  ir_type ty = {.dtype = dt, .rank = rank};
  for (int i = 0; i < rank; i++) ty.dims[i] = shape[i];
  ir_attr a = {0};
  a.axis = dim;
  return op_result(&c, op_emit(&c, IR_IOTA, 0, NULL, &a, &ty));
}

/* ---- the shared elementwise path --------------------------------------------------------- */

/* Checks the dtype rule on the operands as given, broadcasts them to their NumPy result shape,
   and emits op. */
static ir_ref elementwise(op_ctx *c, ir_op op, const ir_attr *attr, uint32_t n, ir_ref *refs) {
  ir_type tys[3];
  const ir_type *ptys[3];
  for (uint32_t i = 0; i < n; i++) {
    if (refs[i] == IR_NOREF) return IR_NOREF;
    tys[i] = *op_type(c, refs[i]); /* copies: emitting moves f->types */
    ptys[i] = &tys[i];
  }
  char why[512];
  jit_status st = ir_check_elementwise_dtypes(op, n, ptys, why, sizeof why);
  if (st != JIT_OK) {
    op_fail(c, st, "%s", why);
    return IR_NOREF;
  }
  int rank = 0;
  for (uint32_t i = 0; i < n; i++)
    if (tys[i].rank > rank) rank = tys[i].rank;
  int64_t dims[IR_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    /* NumPy: aligned from the right, sizes equal or 1; `from` is the operand that set the size */
    int64_t size = 1;
    uint32_t from = 0;
    for (uint32_t i = 0; i < n; i++) {
      int k = d - (rank - tys[i].rank);
      if (k < 0 || tys[i].dims[k] == 1) continue;
      if (size != 1 && tys[i].dims[k] != size) {
        op_fail(c, JIT_ESHAPE, "shapes do not broadcast: %s vs %s", trace_ty(&tys[from]).s,
                trace_ty(&tys[i]).s);
        return IR_NOREF;
      }
      size = tys[i].dims[k];
      from = i;
    }
    dims[d] = size;
  }
  for (uint32_t i = 0; i < n; i++)
    if ((refs[i] = op_broadcast(c, refs[i], rank, dims)) == IR_NOREF) return IR_NOREF;
  return op_emit(c, op, n, refs, attr, NULL);
}

static jit_val unary(jit_trace *t, const char *name, ir_op op, jit_val x) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  return op_result(&c, elementwise(&c, op, NULL, 1, &r));
}

#define UNARY(name, OP) \
  jit_val jit_##name(jit_trace *t, jit_val x) { return unary(t, #name, IR_##OP, x); }
UNARY(neg, NEG)
UNARY(abs, ABS)
UNARY(exp, EXP)
UNARY(log, LOG)
UNARY(sqrt, SQRT)
UNARY(rsqrt, RSQRT)
UNARY(tanh, TANH)
UNARY(logistic, LOGISTIC)
UNARY(sin, SIN)
UNARY(cos, COS)
UNARY(erf, ERF)
UNARY(floor, FLOOR)
UNARY(log1p, LOG1P)
UNARY(expm1, EXPM1)
UNARY(ceil, CEIL)
UNARY(round, ROUND)
UNARY(sign, SIGN)
UNARY(erf_inv, ERF_INV)
UNARY(is_finite, IS_FINITE)
UNARY(not, NOT)
#undef UNARY

/* real, imag, conj: of a complex operand the op; of a real one what jnp gives (x, 0, x). */
static jit_val complex_part(jit_trace *t, const char *name, ir_op op, jit_val x) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  ir_type ty = *op_type(&c, r);
  if (ir_dtype_is_complex(ty.dtype)) return op_result(&c, elementwise(&c, op, NULL, 1, &r));
  if (op == IR_IMAG) return op_result(&c, op_const(&c, ty.dtype, ty.rank, ty.dims, 0));
  return op_result(&c, r);
}

jit_val jit_real(jit_trace *t, jit_val x) { return complex_part(t, "real", IR_REAL, x); }
jit_val jit_imag(jit_trace *t, jit_val x) { return complex_part(t, "imag", IR_IMAG, x); }
jit_val jit_conj(jit_trace *t, jit_val x) { return complex_part(t, "conj", IR_CONJ, x); }

jit_val jit_relu(jit_trace *t, jit_val x) {
  op_ctx c;
  if (!op_begin(t, "relu", &c)) return (jit_val){0};
  ir_ref r[2] = {op_typed(&c, x, "operand"), IR_NOREF};
  if (r[0] == IR_NOREF) return (jit_val){0};
  ir_type ty = *op_type(&c, r[0]);
  r[1] = op_const(&c, ty.dtype, ty.rank, ty.dims, 0);
  return op_result(&c, elementwise(&c, IR_MAX, NULL, 2, r));
}

/* ---- binary ops and weak scalars ------------------------------------------------------------ */

/* Ops that only take integers (or bool): weak operands are folded as int64, not as doubles. */
static bool int_only(ir_op op) {
  return op == IR_AND || op == IR_OR || op == IR_XOR || op == IR_SHL || op == IR_SHR_LOGICAL ||
         op == IR_SHR_ARITH;
}

/* Weak operands only: the op is evaluated now, in double (in int64 for int_only ops, whose
   operands must then be integers), with the interpreter's own scalar semantics (so folding here
   and running later can never disagree). The result stays weak, but a comparison's is bool. */
static jit_val weak_fold(op_ctx *c, ir_op op, const ir_attr *attr, uint32_t n,
                         trace_val *const *v) {
  double operands[3];
  for (uint32_t i = 0; i < n; i++) operands[i] = v[i]->value;
  jit_dtype in = JIT_F64;
  if (int_only(op)) {
    in = JIT_I64;
    for (uint32_t i = 0; i < n; i++)
      if (!ir_value_fits(JIT_I64, operands[i])) {
        op_fail(c, JIT_EDTYPE, "weak scalar %s is not an integer", trace_num(operands[i]).s);
        return (jit_val){0};
      }
  }
  if (op == IR_CMP)
    return op_result(c, op_const(c, JIT_BOOL, 0, NULL,
                                 ir_eval_elementwise(op, attr, in, JIT_BOOL, operands)));
  return op_weak_result(c, ir_eval_elementwise(op, attr, in, in, operands));
}

/* An elementwise op of n operands (named by names) where weak scalars take the dtype of the
   first typed operand. */
static jit_val nary(jit_trace *t, const char *name, ir_op op, jit_cmp_op cmp, uint32_t n,
                    const jit_val *xs, const char *const *names) {
  op_ctx c;
  if (!op_begin(t, name, &c)) return (jit_val){0};
  if (op == IR_CMP && (unsigned)cmp > JIT_GE) {
    op_fail(&c, JIT_EINVAL, "unknown comparison %d", (int)cmp);
    return (jit_val){0};
  }
  trace_val *v[3];
  int typed = -1;
  for (uint32_t i = 0; i < n; i++) {
    if (!(v[i] = op_val(&c, xs[i], names[i]))) return (jit_val){0};
    if (typed < 0 && !v[i]->weak) typed = (int)i;
  }
  ir_attr attr = {0};
  attr.cmp = cmp;
  if (typed < 0) return weak_fold(&c, op, &attr, n, v);
  ir_ref r[3];
  for (uint32_t i = 0; i < n; i++)
    r[i] = v[i]->weak ? op_weak_as(&c, v[i], op_type(&c, v[typed]->ref)->dtype) : v[i]->ref;
  return op_result(&c, elementwise(&c, op, &attr, n, r));
}

static jit_val binary(jit_trace *t, const char *name, ir_op op, jit_cmp_op cmp, jit_val a,
                      jit_val b) {
  static const char *const names[2] = {"lhs", "rhs"};
  const jit_val xs[2] = {a, b};
  return nary(t, name, op, cmp, 2, xs, names);
}

#define BINARY(name, OP)                                   \
  jit_val jit_##name(jit_trace *t, jit_val a, jit_val b) { \
    return binary(t, #name, IR_##OP, JIT_EQ, a, b);        \
  }
BINARY(add, ADD)
BINARY(sub, SUB)
BINARY(mul, MUL)
BINARY(div, DIV)
BINARY(max, MAX)
BINARY(min, MIN)
BINARY(pow, POW)
BINARY(rem, REM)
BINARY(atan2, ATAN2)
BINARY(and, AND)
BINARY(or, OR)
BINARY(xor, XOR)
BINARY(shift_left, SHL)
BINARY(shift_right_logical, SHR_LOGICAL)
BINARY(shift_right_arithmetic, SHR_ARITH)
#undef BINARY

jit_val jit_complex(jit_trace *t, jit_val re, jit_val im) {
  return binary(t, "complex", IR_COMPLEX, JIT_EQ, re, im);
}

jit_val jit_cmp(jit_trace *t, jit_cmp_op op, jit_val a, jit_val b) {
  return binary(t, "cmp", IR_CMP, op, a, b);
}

jit_val jit_clamp(jit_trace *t, jit_val lo, jit_val x, jit_val hi) {
  static const char *const names[3] = {"lo", "operand", "hi"};
  const jit_val xs[3] = {lo, x, hi};
  return nary(t, "clamp", IR_CLAMP, JIT_EQ, 3, xs, names);
}

jit_val jit_select(jit_trace *t, jit_val pred, jit_val a, jit_val b) {
  op_ctx c;
  if (!op_begin(t, "select", &c)) return (jit_val){0};
  trace_val *vp = op_val(&c, pred, "predicate");
  trace_val *va = vp ? op_val(&c, a, "on_true") : NULL, *vb = va ? op_val(&c, b, "on_false") : NULL;
  if (!vb) return (jit_val){0};
  /* a weak branch takes the other branch's dtype; the predicate has no partner */
  bool wa = va->weak && !vb->weak, wb = vb->weak && !va->weak;
  ir_ref r[3];
  r[0] = op_typed(&c, pred, "predicate");
  r[1] = wa ? op_weak_as(&c, va, op_type(&c, vb->ref)->dtype) : op_typed(&c, a, "on_true");
  r[2] = wb ? op_weak_as(&c, vb, op_type(&c, va->ref)->dtype) : op_typed(&c, b, "on_false");
  return op_result(&c, elementwise(&c, IR_SELECT, NULL, 3, r));
}

jit_val jit_convert(jit_trace *t, jit_val x, jit_dtype dt) {
  op_ctx c;
  if (!op_begin(t, "convert", &c) || !check_dtype(&c, dt)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  ir_type to = *op_type(&c, r);
  to.dtype = dt;
  return op_result(&c, op_emit(&c, IR_CONVERT, 1, &r, NULL, &to));
}
