/* windows.c: a reduce_window of a small window becomes the elementwise sum, max or min of
 * strided slices of its operand (padded with the reduction's identity), one slice per window
 * offset: fusion then computes it as one native loop over the result, reading each window
 * element through an index map (lax's reduce_window for small windows, as XLA's CPU emitter).
 * A select_and_scatter_add (a max-pool's VJP) of a small window becomes the same slices choosing
 * each window's element (XLA's select, in order), and one padded share per offset summed back.
 *
 * Needs: verified f. Keeps: every value's type; the result up to the rounding of a float sum
 * (each add rounds, where the interpreter sums in double); max and min exactly, NaN included.
 * select_and_scatter_add's sums where windows overlap add in offset order (the interpreter's in
 * window order). Windows of more than WINDOW_EXPAND_MAX elements, empty results and 64-bit ints
 * (whose identities a double constant cannot hold) stay ops of their own, run by the interpreter.
 * Cost: O(instructions + window elements) emitted; one rebuild when a window op changes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

#define WINDOW_EXPAND_MAX 32

static bool expandable(const ir_func *f, const ir_ins *in) {
  if (in->op != IR_REDUCE_WINDOW && in->op != IR_SELECT_SCATTER) return false;
  const ir_type *x = ir_type_of(f, in->args[0]);
  const ir_type *t = in->op == IR_SELECT_SCATTER ? ir_type_of(f, in->args[1]) : &f->types[in->ty];
  if (x->dtype == JIT_I64 || x->dtype == JIT_U64 || ir_type_numel(t) == 0) return false;
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) n *= in->attr.window.size[d];
  return n <= WINDOW_EXPAND_MAX;
}

static const char *const who = "windows";

static ir_ref emit(ir_func *nf, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *a,
                   ir_loc loc) {
  return pass_emit_inferred(nf, who, op, n, args, a, loc);
}

/* x padded as the window pads it, with the scalar value v of dtype dt (x itself without pads). */
static ir_ref pad_window(ir_func *nf, const ir_ins *in, ir_ref x, jit_dtype dt, double v) {
  const ir_window *w = &in->attr.window;
  ir_attr pa = {0};
  bool pad = false;
  if (x == IR_NOREF) return IR_NOREF;
  for (int d = 0; d < ir_type_of(nf, x)->rank; d++) {
    pa.pad.lo[d] = w->pad_lo[d];
    pa.pad.hi[d] = w->pad_hi[d];
    pad |= w->pad_lo[d] || w->pad_hi[d];
  }
  if (!pad) return x;
  ir_ref c = ir_emit_const(nf, ir_type_make(nf, dt, 0, NULL), v, in->loc);
  ir_ref args[2] = {x, c};
  return emit(nf, IR_PAD, 2, args, &pa, in->loc);
}

/* The window elements at offset k of every output position t: a strided slice of x. */
static ir_ref window_slice(ir_func *nf, const ir_ins *in, const ir_type *t, ir_ref x, const int64_t *k) {
  const ir_window *w = &in->attr.window;
  ir_attr sa = {0};
  for (int d = 0; d < t->rank; d++) {
    sa.slice.start[d] = k[d];
    sa.slice.limit[d] = k[d] + (t->dims[d] - 1) * w->stride[d] + 1;
    sa.slice.stride[d] = w->stride[d];
  }
  sa.remat = in->attr.remat;
  return emit(nf, IR_SLICE, 1, &x, &sa, in->loc);
}

/* The next window offset in row-major order; false after the last. */
static bool next_offset(const ir_window *w, int rank, int64_t *k) {
  int d = rank - 1;
  while (d >= 0 && ++k[d] == w->size[d]) k[d--] = 0;
  return d >= 0;
}

static ir_ref binop(ir_func *nf, const ir_ins *in, ir_op op, ir_ref a, ir_ref b) {
  ir_ref args[2] = {a, b};
  ir_attr at = {0};
  at.remat = in->attr.remat;
  return emit(nf, op, 2, args, &at, in->loc);
}

static ir_ref expand(ir_func *nf, const ir_ins *in, const ir_type *t, ir_ref x) {
  const ir_window *w = &in->attr.window;
  int rank = t->rank;
  jit_dtype dt = ir_type_of(nf, x)->dtype;
  x = pad_window(nf, in, x, dt, ir_window_identity(w->kind, dt));
  if (x == IR_NOREF) return IR_NOREF;
  ir_op combine = w->kind == JIT_WINDOW_SUM ? IR_ADD : w->kind == JIT_WINDOW_MAX ? IR_MAX : IR_MIN;
  int64_t k[IR_MAX_RANK] = {0};
  ir_ref acc = IR_NOREF;
  do { /* window offsets in row-major order */
    ir_ref s = window_slice(nf, in, t, x, k);
    acc = acc == IR_NOREF ? s : binop(nf, in, combine, acc, s);
    if (acc == IR_NOREF) return IR_NOREF;
  } while (next_offset(w, rank, k));
  return acc;
}

/* Whether the windows tile x: each dim's stride is its window size, nothing is padded, the
   windows cover x, and x viewed with each window dim split in two (windows, offsets) has a
   rank the IR holds. Each element of x is then in one window, at one offset. */
static bool tiles_exactly(const ir_window *w, const ir_type *x, const ir_type *t) {
  int rank = x->rank;
  for (int d = 0; d < x->rank; d++) {
    if (w->stride[d] != w->size[d] || w->pad_lo[d] || w->pad_hi[d] ||
        t->dims[d] * w->size[d] != x->dims[d])
      return false;
    rank += w->size[d] > 1;
  }
  return rank <= IR_MAX_RANK;
}

/* The gradient of tiling windows (a 2x2 max-pool's): x viewed as [.., T, s, ..] (each window dim
   split into windows and offsets) is src where the window chose the element's own offset, else
   0, then viewed back. One loop over x, where one padded share per offset, summed, read every
   share at every element of x. */
static ir_ref tiled_shares(ir_func *nf, const ir_ins *in, const ir_type *xt, const ir_type *t,
                           ir_ref c, ir_ref src) {
  const ir_window *w = &in->attr.window;
  ir_loc loc = in->loc;
  ir_attr ra = {0}, ba = {0};
  ra.remat = ba.remat = in->attr.remat;
  int64_t dims[IR_MAX_RANK];
  int rank = 0, at[IR_MAX_RANK]; /* where offsets of dim d are in the split view (-1: none) */
  for (int d = 0; d < t->rank; d++) {
    ba.dims.d[ba.dims.n++] = (uint8_t)rank;
    dims[rank++] = t->dims[d];
    at[d] = w->size[d] > 1 ? rank : -1;
    if (at[d] >= 0) dims[rank++] = w->size[d];
  }
  ir_ty it = ir_type_make(nf, JIT_I32, rank, dims), vt = ir_type_make(nf, xt->dtype, rank, dims);
  /* the element's offset in row-major window order, as c counts them */
  ir_ref k = IR_NOREF;
  int64_t mult = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (at[d] < 0) continue;
    ir_attr ia = ra;
    ia.axis = at[d];
    ir_ref term = ir_emit(nf, IR_IOTA, it, 0, NULL, &ia, loc);
    if (mult > 1) term = binop(nf, in, IR_MUL, term, ir_emit_const(nf, it, (double)mult, loc));
    k = k == IR_NOREF ? term : binop(nf, in, IR_ADD, k, term);
    mult *= w->size[d];
  }
  if (k == IR_NOREF) k = ir_emit_const(nf, it, 0, loc);
  ir_attr eq = ra;
  eq.cmp = JIT_EQ;
  ir_ref cb = ir_emit(nf, IR_BROADCAST, it, 1, &c, &ba, loc);
  ir_ref sb = ir_emit(nf, IR_BROADCAST, vt, 1, &src, &ba, loc);
  ir_ref mine = emit(nf, IR_CMP, 2, (ir_ref[]){cb, k}, &eq, loc);
  ir_ref share = emit(nf, IR_SELECT, 3, (ir_ref[]){mine, sb, ir_emit_const(nf, vt, 0, loc)}, &ra, loc);
  if (share == IR_NOREF) return IR_NOREF;
  return ir_emit(nf, IR_RESHAPE, ir_type_make(nf, xt->dtype, xt->rank, xt->dims), 1, &share, &ra, loc);
}

/* select_and_scatter_add: per output position, the chosen offset c as XLA's select picks it
   (over the in-bounds offsets in order, a new element replaces the choice unless choice >= it
   (max) / <= it (min)); then each offset's share, select(c == k, source, 0), padded back into
   the operand's shape (interior padding for the strides) and summed. */
static ir_ref expand_select(ir_func *nf, const ir_ins *in, const ir_type *t, ir_ref x, ir_ref src) {
  const ir_window *w = &in->attr.window;
  const ir_type xt = *ir_type_of(nf, x);
  int rank = t->rank;
  jit_dtype dt = xt.dtype;
  ir_loc loc = in->loc;
  ir_ty bt = ir_type_make(nf, JIT_BOOL, rank, t->dims), it = ir_type_make(nf, JIT_I32, rank, t->dims);
  ir_ty vt = ir_type_make(nf, dt, rank, t->dims);
  /* in-bounds: a padded splat of true */
  ir_ref valid = pad_window(nf, in, ir_emit_const(nf, ir_type_make(nf, JIT_BOOL, rank, xt.dims), 1, loc), JIT_BOOL, 0);
  ir_ref xp = pad_window(nf, in, x, dt, ir_window_identity(w->kind, dt));
  ir_ref has = ir_emit_const(nf, bt, 0, loc), cur = ir_emit_const(nf, vt, ir_window_identity(w->kind, dt), loc);
  ir_ref c = ir_emit_const(nf, it, -1, loc);
  ir_attr cmp = {0};
  cmp.cmp = w->kind == JIT_WINDOW_MAX ? JIT_GE : JIT_LE;
  cmp.remat = in->attr.remat;
  int64_t k[IR_MAX_RANK] = {0};
  int32_t index = 0;
  do {
    ir_ref v = window_slice(nf, in, t, xp, k), ok = window_slice(nf, in, t, valid, k);
    ir_ref args[3] = {cur, v, IR_NOREF};
    ir_attr ra = {0};
    ra.remat = in->attr.remat;
    ir_ref keep = emit(nf, IR_CMP, 2, args, &cmp, loc);
    ir_ref nkeep = emit(nf, IR_NOT, 1, &keep, &ra, loc), nhas = emit(nf, IR_NOT, 1, &has, &ra, loc);
    ir_ref take = binop(nf, in, IR_AND, ok, binop(nf, in, IR_OR, nhas, nkeep));
    ir_ref s1[3] = {take, v, cur}, s2[3] = {take, ir_emit_const(nf, it, index, loc), c};
    cur = emit(nf, IR_SELECT, 3, s1, &ra, loc);
    c = emit(nf, IR_SELECT, 3, s2, &ra, loc);
    has = binop(nf, in, IR_OR, has, ok);
    if (c == IR_NOREF || has == IR_NOREF) return IR_NOREF;
    index++;
  } while (next_offset(w, rank, k));
  if (tiles_exactly(w, &xt, t)) return tiled_shares(nf, in, &xt, t, c, src);
  ir_ref dx = IR_NOREF, zero = ir_emit_const(nf, ir_type_make(nf, dt, 0, NULL), 0, loc);
  ir_ref zeros = ir_emit_const(nf, vt, 0, loc);
  memset(k, 0, sizeof k);
  index = 0;
  do {
    ir_attr eq = {0}, pa = {0};
    eq.cmp = JIT_EQ;
    eq.remat = pa.remat = in->attr.remat;
    ir_ref a[3] = {c, ir_emit_const(nf, it, index++, loc), IR_NOREF};
    ir_ref mine = emit(nf, IR_CMP, 2, a, &eq, loc);
    ir_ref s3[3] = {mine, src, zeros};
    ir_ref share = emit(nf, IR_SELECT, 3, s3, &pa, loc);
    for (int d = 0; d < rank; d++) {
      pa.pad.lo[d] = k[d] - w->pad_lo[d];
      pa.pad.interior[d] = w->stride[d] - 1;
      pa.pad.hi[d] = xt.dims[d] - pa.pad.lo[d] - ((t->dims[d] - 1) * w->stride[d] + 1);
    }
    ir_ref p[2] = {share, zero};
    ir_ref back = emit(nf, IR_PAD, 2, p, &pa, loc);
    dx = dx == IR_NOREF ? back : binop(nf, in, IR_ADD, dx, back);
    if (dx == IR_NOREF) return IR_NOREF;
  } while (next_offset(w, rank, k));
  return dx;
}

static ir_ref rewrite(ir_func *nf, const ir_func *f, const ir_ins *in, const ir_ref *ops) {
  return in->op == IR_SELECT_SCATTER ? expand_select(nf, in, ir_type_of(f, in->args[1]), ops[0], ops[1])
                                     : expand(nf, in, &f->types[in->ty], ops[0]);
}

jit_status pass_windows(ir_func *f) { return pass_rewrite_each(f, who, expandable, rewrite); }
