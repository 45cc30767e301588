/* lower_gather.c: loads and stores at data-dependent indices (codegen/lower_internal.h):
 * gather and pad read through clamped indices, selecting the fill or pad value where the index
 * was out of range; scatter is a kernel of its own over chunks of its result. */
#include <string.h>

#include "codegen/lower_internal.h"
#include "runtime/error.h"

static int32_t and_ok(lower *L, int32_t ok, int32_t b) {
  return ok < 0 ? b : lw_ew(L, IR_AND, JIT_BOOL, JIT_BOOL, ok, b, -1);
}

/* x clamped into [0, hi]; *ok (-1: true) ANDed with x being there already. */
static int32_t clamp_index(lower *L, int32_t x, int64_t hi, int32_t *ok) {
  int32_t c =
      lw_iop(L, LP_IMIN, lw_iop(L, LP_IMAX, x, lw_iconst(L, 0)), lw_iconst(L, hi < 0 ? 0 : hi));
  if (ok && c != x) {
    *ok = and_ok(L, *ok, lw_cmp(L, JIT_EQ, JIT_I64, c, x));
  }
  return c;
}

/* The window starts (per operand dim, clamped into [0, dim - win]) of a gather or scatter whose
   indices are read at im (entry 0 of each index vector); *ok: every start was in range. */
static jit_status window_starts(lower *L, ir_ref indices, const ir_gather *g, const ir_type *ot,
                                const int64_t *win, fz_map im, bool clamp, int32_t *start,
                                int32_t *ok) {
  const ir_type *it = ir_type_of(L->f, indices);
  for (int d = 0; d < ot->rank; d++) start[d] = lw_iconst(L, 0);
  *ok = -1;
  for (int k = 0; k < g->start_map.n; k++) {
    if (g->index_dim < it->rank) im.off[g->index_dim] = k;
    int32_t x;
    jit_status st = lw_gen(L, indices, &im, clamp, &x);
    if (st != JIT_OK) return st;
    if (it->dtype != JIT_I64) x = lw_ew(L, IR_CONVERT, JIT_I64, it->dtype, x, -1, -1);
    int d = g->start_map.d[k];
    start[d] = clamp_index(L, x, ot->dims[d] - win[d], g->mode == IR_INDEX_FILL ? ok : NULL);
  }
  return JIT_OK;
}

/* The element offset in operand (type ot) of start + offsets, where offsets are value dims
   (result or updates, read at map m) in the positions offset_dims, placed at the operand's
   dims not in collapsed. */
static int32_t window_address(lower *L, const ir_gather *g, const ir_type *ot, const int32_t *start,
                              const fz_map *m) {
  int32_t idx[IR_MAX_RANK];
  for (int d = 0, w = 0; d < ot->rank; d++) {
    bool collapsed = false;
    for (int k = 0; k < g->collapsed.n; k++) collapsed |= g->collapsed.d[k] == d;
    idx[d] = collapsed ? start[d]
                       : lw_iop(L, LP_IADD, start[d], lw_dim_index(L, m, g->offset_dims.d[w++]));
  }
  int32_t a = lw_iconst(L, 0);
  int64_t stride = 1;
  for (int d = ot->rank; d-- > 0;) {
    a = lw_iop(L, LP_IADD, a, lw_iop(L, LP_IMUL, idx[d], lw_iconst(L, stride)));
    stride *= ot->dims[d];
  }
  return a;
}

jit_status lw_gen_gather(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  const ir_gather *g = &in->attr.gather;
  const ir_type *ot = ir_type_of(L->f, in->args[0]), *rt = ir_type_of(L->f, v);
  fz_map im;
  fz_map_indices(g, ir_type_of(L->f, in->args[1]), rt, m, &im);
  int32_t start[IR_MAX_RANK], ok;
  jit_status st = window_starts(L, in->args[1], g, ot, g->sizes, im, clamp, start, &ok);
  if (st != JIT_OK) return st;
  int32_t x = lw_load_at(L, in->args[0], window_address(L, g, ot, start, m), clamp);
  int32_t fill = lw_value_const(L, rt->dtype, 0);
  *out = ok < 0 ? x : lw_ew(L, IR_SELECT, rt->dtype, rt->dtype, ok, x, fill);
  return JIT_OK;
}

/* lax.pad: per dim, the operand index (o - lo) / (interior + 1) when that divides and lies in
   the operand, else the pad value. */
jit_status lw_gen_pad(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  const ir_pad *p = &in->attr.pad;
  const ir_type *ot = ir_type_of(L->f, in->args[0]), *rt = ir_type_of(L->f, v);
  fz_map pm = *m;
  pm.rank = 0;
  int32_t pad;
  jit_status st = lw_gen(L, in->args[1], &pm, clamp, &pad);
  if (st != JIT_OK) return st;
  if (ir_type_numel(ot) == 0) { /* nothing but padding */
    *out = pad;
    return JIT_OK;
  }
  int32_t ok = -1, a = lw_iconst(L, 0);
  int64_t stride = 1;
  for (int d = ot->rank; d-- > 0;) {
    int64_t step = p->interior[d] + 1, n = ot->dims[d];
    int32_t i = lw_iop(L, LP_ISUB, lw_dim_index(L, m, d), lw_iconst(L, p->lo[d]));
    int32_t at = i;
    if (step > 1) {
      int32_t ic = lw_iop(L, LP_IMAX, i, lw_iconst(L, 0));
      int32_t rem = lw_iop(L, LP_IREM, ic, lw_iconst(L, step));
      ok = and_ok(L, ok, lw_cmp(L, JIT_EQ, JIT_I64, rem, lw_iconst(L, 0)));
      at = lw_iop(L, LP_IDIV, ic, lw_iconst(L, step));
      /* i < 0 maps to 0 here: the check below sees i itself */
      at = lw_iop(L, LP_IADD, at, lw_iop(L, LP_ISUB, i, lw_iop(L, LP_IMAX, i, lw_iconst(L, 0))));
    }
    int32_t c = clamp_index(L, at, n - 1, (p->lo[d] > 0 || p->hi[d] > 0 || step > 1) ? &ok : NULL);
    a = lw_iop(L, LP_IADD, a, lw_iop(L, LP_IMUL, c, lw_iconst(L, stride)));
    stride *= n;
  }
  int32_t x = lw_load_at(L, in->args[0], a, false);
  *out = ok < 0 ? x : lw_ew(L, IR_SELECT, rt->dtype, rt->dtype, ok, x, pad);
  return JIT_OK;
}
/* ---- scatter ------------------------------------------------------------------------------------
   A kernel of its own over buffers. Its rows are chunks of the operand's leading dim: row r
   copies its chunk of the operand into the result (stores it, for a constant operand, which
   fusion.c gives no buffer), then walks every update in order and combines those that land in
   its chunk. Each element is written by one row only, so rows may run on any threads, and
   duplicates combine in update order as in the interpreter. An update outside the chunk (or
   dropped) rewrites an element of the chunk with its own value. */
#define LP_SCATTER_CHUNKS 4

/* Whether the updates' innermost dim is a window dim placed at the operand's last dim (stride 1)
   of an operand of rank >= 2 (whose chunks split dim 0, so that whether an update lands in the
   chunk does not depend on it). */
static bool inner_window_contiguous(const ir_gather *g, const ir_type *ot, const ir_type *ut) {
  if (ot->rank < 2 || ut->rank < 1 || g->offset_dims.n < 1) return false;
  int last_window = g->offset_dims.d[g->offset_dims.n - 1]; /* placed at the last uncollapsed dim */
  bool last_collapsed = false;
  for (int k = 0; k < g->collapsed.n; k++) last_collapsed |= g->collapsed.d[k] == ot->rank - 1;
  return !last_collapsed && last_window == ut->rank - 1;
}

jit_status lw_write_scatter(lower *L) {
  const ir_ins *in = &L->f->ins[L->k->root];
  const ir_gather *g = &in->attr.gather;
  ir_ref r = L->k->root;
  const ir_type *ot = ir_type_of(L->f, r), *it = ir_type_of(L->f, in->args[1]),
                *ut = ir_type_of(L->f, in->args[2]);
  jit_dtype dt = ot->dtype;
  int64_t n0 = ot->rank ? ot->dims[0] : 1, inner = n0 ? ir_type_numel(ot) / n0 : 0;
  /* several chunks only when the copy outweighs the walks over the updates they repeat */
  int64_t chunks = ir_type_numel(ut) * LP_SCATTER_CHUNKS <= ir_type_numel(ot) ? LP_SCATTER_CHUNKS : 1;
  if (chunks > n0) chunks = n0;
  int64_t per = chunks ? (n0 + chunks - 1) / chunks : 0;
  if (per) chunks = (n0 + per - 1) / per; /* no chunk past the end (5 rows: 3 chunks of 2, 2, 1) */
  L->n_row = 1;
  L->row_ext[0] = chunks;
  L->lf->n_rows = chunks;
  L->row_work_min = per * inner + ir_type_numel(ut); /* its copy, its walk over the updates */
  int32_t lo = lw_iop(L, LP_IMUL, lw_row_val(L, 0), lw_iconst(L, per));
  int32_t hi = lw_iop(L, LP_IMIN, lw_iop(L, LP_IADD, lo, lw_iconst(L, per)), lw_iconst(L, n0));
  /* the chunk's copy */
  saved_nest sv;
  int32_t trip = lw_iop(L, LP_IMUL, lw_iop(L, LP_ISUB, hi, lo), lw_iconst(L, inner));
  lw_open_nest(L, 1, &trip, &sv);
  int32_t a = lw_iop(L, LP_IADD, lw_iop(L, LP_IMUL, lo, lw_iconst(L, inner)), L->inner_idx[0]);
  const ir_ins *operand = &L->f->ins[in->args[0]];
  int32_t x = operand->op == IR_CONST && lw_computed(L, in->args[0])
                  ? lw_value_const(L, dt, operand->attr.value) /* fusion.c: no buffer of it */
                  : lw_load_at(L, in->args[0], a, false);
  lp_ins cp = lw_mk(LP_STORE, dt, a, x, -1);
  cp.buf = (int32_t)r;
  lw_emit_at(L, cp, L->depth - 1);
  lw_close_nest(L, &sv);
  /* the updates, in order */
  /* types have at most IR_MAX_RANK dims; saying so lets GCC's -O3 see the arrays suffice */
  int ur = ut->rank < IR_MAX_RANK ? ut->rank : IR_MAX_RANK;
  int32_t trips[IR_MAX_RANK] = {0};
  for (int d = 0; d < ur; d++) trips[d] = lw_iconst(L, ut->dims[d]);
  lw_open_nest(L, ur, trips, &sv);
  fz_map um;
  memset(&um, 0, sizeof um);
  um.rank = ur;
  um.n_inner = ur;
  for (int d = 0; d < ur; d++) {
    um.src[d] = (int8_t)FZ_INNER(d);
    um.scale[d] = 1;
    um.inner_ext[d] = ut->dims[d];
  }
  int64_t win[IR_MAX_RANK];
  for (int d = 0, w = 0; d < ot->rank; d++) {
    bool inserted = false;
    for (int k = 0; k < g->collapsed.n; k++) inserted |= g->collapsed.d[k] == d;
    win[d] = inserted ? 1 : ut->dims[g->offset_dims.d[w++]];
  }
  fz_map im;
  fz_map_indices(g, it, ut, &um, &im);
  int32_t start[IR_MAX_RANK], ok;
  jit_status st = window_starts(L, in->args[1], g, ot, win, im, false, start, &ok);
  if (st != JIT_OK) {
    lw_close_nest(L, &sv);
    return st;
  }
  int32_t target = window_address(L, g, ot, start, &um);
  /* An update whose innermost index w runs along the operand's last dim lands at at + w, where
     at and whether it lands do not depend on w: one that does not land then rewrites t0 + w (in
     the chunk's first row) instead of t0, so that the address is affine in w and the loop
     vectorizes (an embedding's gradient: 16 elements a step instead of 1). */
  bool affine = inner_window_contiguous(g, ot, ut);
  int32_t w = affine ? L->inner_idx[ur - 1] : -1;
  int32_t at = affine ? lw_iop(L, LP_ISUB, target, w) : target;
  /* in this row's chunk: lo * inner <= at < hi * inner */
  int32_t t0 = lw_iop(L, LP_IMUL, lo, lw_iconst(L, inner));
  int32_t rel = lw_iop(L, LP_ISUB, at, t0);
  int32_t span = lw_iop(L, LP_IMUL, lw_iop(L, LP_ISUB, hi, lo), lw_iconst(L, inner));
  int32_t below = lw_emit(L, lw_mk(LP_ILT, JIT_BOOL, rel, lw_iconst(L, 0), -1));
  int32_t inside = lw_emit(L, lw_mk(LP_ILT, JIT_BOOL, rel, span, -1));
  int32_t in_chunk = lw_ew(L, IR_AND, JIT_BOOL, JIT_BOOL, inside,
                           lw_ew(L, IR_NOT, JIT_BOOL, JIT_BOOL, below, -1, -1), -1);
  ok = and_ok(L, ok, in_chunk);
  int32_t dst = lw_ew(L, IR_SELECT, JIT_I64, JIT_I64, ok, at, t0);
  if (affine) dst = lw_iop(L, LP_IADD, dst, w);
  lp_ins ld = lw_mk(LP_LOAD, dt, dst, -1, -1); /* not CSE'd: the loop stores to it */
  ld.buf = (int32_t)r;
  int32_t old = lw_emit_at(L, ld, L->depth - 1);
  int32_t u = lw_load_at(L, in->args[2], lw_address(L, in->args[2], &um), false);
  int32_t val = g->combine == IR_COMBINE_ADD ? lw_ew(L, IR_ADD, dt, dt, old, u, -1) : u;
  lp_ins stv = lw_mk(LP_STORE, dt, dst, lw_ew(L, IR_SELECT, dt, dt, ok, val, old), -1);
  stv.buf = (int32_t)r;
  lw_emit_at(L, stv, L->depth - 1);
  lw_close_nest(L, &sv);
  return L->oom ? jit_error(JIT_ENOMEM, "codegen: out of memory") : JIT_OK;
}
