/* windows.c: a reduce_window of a small window becomes the elementwise sum, max or min of
 * strided slices of its operand (padded with the reduction's identity), one slice per window
 * offset: fusion then computes it as one native loop over the result, reading each window
 * element through an index map (lax's reduce_window for small windows, as XLA's CPU emitter).
 *
 * Needs: verified f. Keeps: every value's type; the result up to the rounding of a float sum
 * (each add rounds, where the interpreter sums in double); max and min exactly, NaN included.
 * Windows of more than WINDOW_EXPAND_MAX elements, empty results, 64-bit ints (whose identities
 * a double constant cannot hold) and select_and_scatter_add stay ops of their own, run by the
 * interpreter.
 * Cost: O(instructions + window elements) emitted; one rebuild when a window op changes.
 */
#include <math.h>
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

#define WINDOW_EXPAND_MAX 32

static bool expandable(const ir_func *f, const ir_ins *in) {
  if (in->op != IR_REDUCE_WINDOW) return false;
  const ir_type *x = ir_type_of(f, in->args[0]), *t = &f->types[in->ty];
  if (x->dtype == JIT_I64 || x->dtype == JIT_U64 || ir_type_numel(t) == 0) return false;
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) n *= in->attr.window.size[d];
  return n <= WINDOW_EXPAND_MAX;
}

/* The identity of the window's reduction in dtype dt (the pad value). */
static double identity(uint8_t kind, jit_dtype dt) {
  if (kind == JIT_WINDOW_SUM) return 0;
  bool mx = kind == JIT_WINDOW_MAX;
  if (ir_dtype_is_float(dt)) return mx ? -INFINITY : INFINITY;
  switch (dt) {
  case JIT_I8: return mx ? INT8_MIN : INT8_MAX;
  case JIT_U8: return mx ? 0 : UINT8_MAX;
  case JIT_I32: return mx ? INT32_MIN : INT32_MAX;
  default: return mx ? 0 : UINT32_MAX; /* u32 */
  }
}

static ir_ref emit(ir_func *nf, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *a,
                   ir_loc loc) {
  const ir_type *t[2] = {ir_type_of(nf, args[0]), n > 1 ? ir_type_of(nf, args[1]) : NULL};
  ir_type out;
  char why[256];
  if (ir_infer_type(op, n, t, a, NULL, &out, why, sizeof why) != JIT_OK) {
    jit_error(JIT_EINTERNAL, "windows: %s: %s", ir_op_name[op], why);
    return IR_NOREF;
  }
  ir_ty ty = ir_type_intern(nf, &out);
  return ty == UINT32_MAX ? IR_NOREF : ir_emit(nf, op, ty, n, args, a, loc);
}

static ir_ref expand(ir_func *nf, const ir_ins *in, const ir_type *t, ir_ref x) {
  const ir_window *w = &in->attr.window;
  int rank = t->rank;
  ir_attr pa = {0};
  bool pad = false;
  for (int d = 0; d < rank; d++) {
    pa.pad.lo[d] = w->pad_lo[d];
    pa.pad.hi[d] = w->pad_hi[d];
    pad |= w->pad_lo[d] || w->pad_hi[d];
  }
  if (pad) {
    jit_dtype dt = ir_type_of(nf, x)->dtype;
    ir_ref v = ir_emit_const(nf, ir_type_make(nf, dt, 0, NULL), identity(w->kind, dt), in->loc);
    ir_ref args[2] = {x, v};
    x = v == IR_NOREF ? IR_NOREF : emit(nf, IR_PAD, 2, args, &pa, in->loc);
    if (x == IR_NOREF) return IR_NOREF;
  }
  ir_op combine = w->kind == JIT_WINDOW_SUM ? IR_ADD : w->kind == JIT_WINDOW_MAX ? IR_MAX : IR_MIN;
  int64_t k[IR_MAX_RANK] = {0};
  ir_ref acc = IR_NOREF;
  for (;;) { /* window offsets in row-major order */
    ir_attr sa = {0};
    for (int d = 0; d < rank; d++) {
      sa.slice.start[d] = k[d];
      sa.slice.limit[d] = k[d] + (t->dims[d] - 1) * w->stride[d] + 1;
      sa.slice.stride[d] = w->stride[d];
    }
    sa.remat = in->attr.remat;
    ir_ref s = emit(nf, IR_SLICE, 1, &x, &sa, in->loc);
    if (s == IR_NOREF) return IR_NOREF;
    ir_ref args[2] = {acc, s};
    ir_attr ca = {0};
    ca.remat = in->attr.remat;
    acc = acc == IR_NOREF ? s : emit(nf, combine, 2, args, &ca, in->loc);
    if (acc == IR_NOREF) return IR_NOREF;
    int d = rank - 1;
    while (d >= 0 && ++k[d] == w->size[d]) k[d--] = 0;
    if (d < 0) break;
  }
  return acc;
}

jit_status pass_windows(ir_func *f) {
  bool any = false;
  for (uint32_t i = f->n_params; i < f->n_ins && !any; i++) any = expandable(f, &f->ins[i]);
  if (!any) return JIT_OK;
  ir_ref *map = malloc(f->n_ins * sizeof *map);
  if (!map) return jit_error(JIT_ENOMEM, "windows: out of memory");
  ir_func *nf = pass_rebuild_begin(f, map, "windows");
  if (!nf) {
    free(map);
    return JIT_ENOMEM;
  }
  ir_ref *args = NULL;
  uint32_t cap = 0;
  jit_status st = JIT_OK;
  for (uint32_t i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (in->n_args > cap) {
      ir_ref *a = realloc(args, in->n_args * sizeof *a);
      if (!a) {
        nf->oom = true;
        break;
      }
      args = a;
      cap = in->n_args;
    }
    for (uint32_t k = 0; k < in->n_args; k++) args[k] = map[in->args[k]];
    if (expandable(f, in)) {
      map[i] = expand(nf, in, &f->types[in->ty], args[0]);
      if (map[i] == IR_NOREF && !nf->oom) { /* a rule refused: a bug, reported as such */
        st = JIT_EINTERNAL;
        break;
      }
    } else { /* as dce copies: the same attributes, bodies moved at the end */
      map[i] = ir_emit(nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    }
    if (map[i] == IR_NOREF) break;
  }
  free(args);
  if (st != JIT_OK) {
    ir_func_free(nf);
    free(map);
    return st;
  }
  st = pass_rebuild_end(f, nf, map, "windows");
  free(map);
  return st;
}
