/* transform_scan.c: jit_scan's entry point: checks carries and xs, traces the body once on one
 * step's types (values of the enclosing traces it uses become loop invariants) and emits SCAN. */
#include <stdlib.h>

#include "trace/subtrace.h"

typedef struct scan_adapter {
  jit_scan_fn body;
  void *user;
  int n_carry;
} scan_adapter;

/* The body as a jit_trace_fn: params are the carries then the x slices, results the new carries
   then the y slices. */
static void run_body(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const scan_adapter *a = user;
  a->body(t, args, args + a->n_carry, results, results + a->n_carry, a->user);
}

/* The common length of the xs (or length itself when there are none); false after recording. */
static bool check_xs(op_ctx *c, int n_xs, const ir_type *xt, int64_t length, int64_t *out) {
  for (int i = 0; i < n_xs; i++) {
    if (xt[i].rank == 0) {
      op_fail(c, JIT_ESHAPE, "xs[%d] has type %s: a scanned array needs a leading dim", i,
              trace_ty(&xt[i]).s);
      return false;
    }
    if (xt[i].dims[0] != xt[0].dims[0]) {
      op_fail(c, JIT_ESHAPE, "xs have different leading sizes: xs[0] is %s, xs[%d] is %s",
              trace_ty(&xt[0]).s, i, trace_ty(&xt[i]).s);
      return false;
    }
  }
  if (n_xs == 0) {
    if (length < 0) {
      op_fail(c, JIT_EINVAL, "length %lld with no xs: a scan without xs needs length >= 0",
              (long long)length);
      return false;
    }
    *out = length;
    return true;
  }
  if (length >= 0 && length != xt[0].dims[0]) {
    op_fail(c, JIT_ESHAPE, "length %lld differs from the xs' leading size (xs[0] is %s)",
            (long long)length, trace_ty(&xt[0]).s);
    return false;
  }
  *out = xt[0].dims[0];
  return true;
}

/* The body's new carries have the carries' types; false after recording. */
static bool check_carries(op_ctx *c, const ir_func *b, int n_carry, const ir_type *ct) {
  for (int i = 0; i < n_carry; i++) {
    const ir_type *out = ir_type_of(b, b->results[i]);
    if (!ir_type_equal(out, &ct[i])) {
      op_fail(c, JIT_ESHAPE, "the body returns carry %d as %s, but the carry is %s (a carry must keep "
              "its dtype and shape)", i, trace_ty(out).s, trace_ty(&ct[i]).s);
      return false;
    }
  }
  return true;
}

/* Emits the scan and a get per result; false after recording. */
static bool emit_scan(op_ctx *c, ir_func *b, const ir_ref *operands, uint32_t n_consts, int n_carry,
                      int n_xs, int64_t length, int reverse, jit_val *final_carry, jit_val *ys) {
  ir_func *f = c->t->f;
  uint32_t n_results = b->n_results;
  ir_attr a = {0};
  a.scan.n_consts = n_consts;
  a.scan.n_carry = (uint32_t)n_carry;
  a.scan.length = length;
  a.scan.reverse = reverse != 0;
  if (ir_add_body(f, b, &a.scan.body) != JIT_OK) return op_fail(c, JIT_ENOMEM, "out of memory"), false;
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(f, &token);
  ir_ref s = tty == UINT32_MAX ? IR_NOREF
             : ir_emit(f, IR_SCAN, tty, n_consts + (uint32_t)(n_carry + n_xs), operands, &a, c->loc);
  if (s == IR_NOREF) return op_fail(c, JIT_ENOMEM, "out of memory"), false;
  for (uint32_t k = 0; k < n_results; k++) {
    ir_type rt;
    if (!ir_scan_result_type(f, &f->ins[s], k, &rt))
      return op_fail(c, JIT_ESHAPE, "y %u would exceed the maximum rank %d once stacked",
                     k - (uint32_t)n_carry, IR_MAX_RANK), false;
    ir_attr g = {0};
    g.axis = k;
    ir_ty ty = ir_type_intern(f, &rt);
    ir_ref r = ty == UINT32_MAX ? IR_NOREF : ir_emit(f, IR_GET, ty, 1, &s, &g, c->loc);
    jit_val v = op_result(c, r);
    if (k < (uint32_t)n_carry) final_carry[k] = v;
    else ys[k - (uint32_t)n_carry] = v;
  }
  return c->t->status == JIT_OK;
}

void jit_scan(jit_trace *t, jit_scan_fn body, void *user, int n_carry, const jit_val *init,
              int n_xs, const jit_val *xs, int64_t length, int reverse, jit_val *final_carry,
              int n_ys, jit_val *ys) {
  op_ctx c;
  ir_func *b = NULL;
  ir_ref *refs = NULL, *captured = NULL, *operands = NULL;
  ir_type *types = NULL;
  uint32_t n_captured = 0;
  for (int i = 0; final_carry && i < n_carry; i++) final_carry[i] = (jit_val){0};
  for (int i = 0; ys && i < n_ys; i++) ys[i] = (jit_val){0};
  if (!op_begin(t, "scan", &c)) return;
  if (!body) {
    op_fail(&c, JIT_EINVAL, "body is NULL");
    return;
  }
  if (n_carry < 0 || n_xs < 0 || n_ys < 0) {
    op_fail(&c, JIT_EINVAL, "negative count (n_carry %d, n_xs %d, n_ys %d)", n_carry, n_xs, n_ys);
    return;
  }
  if ((n_carry && (!init || !final_carry)) || (n_xs && !xs) || (n_ys && !ys)) {
    op_fail(&c, JIT_EINVAL, "%s is NULL", n_carry && !init ? "init" : n_carry && !final_carry
                                             ? "final_carry" : n_xs && !xs ? "xs" : "ys");
    return;
  }
  size_t n_in = (size_t)n_carry + (size_t)n_xs;
  refs = malloc((n_in ? n_in : 1) * sizeof *refs);
  types = malloc((n_in ? n_in : 1) * sizeof *types);
  if (!refs || !types) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  if (subtrace_args(&c, n_carry, init, refs, types) != JIT_OK) goto done;
  if (subtrace_args(&c, n_xs, xs, refs + n_carry, types + n_carry) != JIT_OK) goto done;
  int64_t len = 0;
  if (!check_xs(&c, n_xs, types + n_carry, length, &len)) goto done;
  for (int i = n_carry; i < (int)n_in; i++) { /* one step sees one slice of each x */
    for (int d = 0; d + 1 < types[i].rank; d++) types[i].dims[d] = types[i].dims[d + 1];
    types[i].dims[--types[i].rank] = 0;
  }
  scan_adapter ad = {body, user, n_carry};
  if (subtrace_capturing(&c, run_body, &ad, (int)n_in, types, n_carry + n_ys, &b, &captured,
                         &n_captured) != JIT_OK)
    goto done;
  if (!check_carries(&c, b, n_carry, types)) goto done;
  operands = malloc((n_captured + n_in + 1) * sizeof *operands);
  if (!operands) {
    op_fail(&c, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < n_captured; i++) operands[i] = captured[i];
  for (size_t i = 0; i < n_in; i++) operands[n_captured + i] = refs[i];
  if (n_carry + n_ys == 0) goto done; /* nothing to compute */
  ir_func *owned = b;
  b = NULL; /* emit_scan owns it from here, also on failure */
  emit_scan(&c, owned, operands, n_captured, n_carry, n_xs, len, reverse, final_carry, ys);
done:
  ir_func_free(b);
  free(refs);
  free(types);
  free(captured);
  free(operands);
}
