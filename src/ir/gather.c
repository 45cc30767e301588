/* gather.c: XLA's gather and scatter (general dimension numbers, see ir.h's ir_gather), lax.pad
 * and lax.rev: their type rules and the reference interpreter's semantics, one element at a time.
 *
 * Gather, per result index R: the batch position G is R without the offset dims; the index
 * vector at G gives the starts S (S[start_map[k]] = vector[k], 0 elsewhere), clamped to
 * [0, dim - size] per operand dim (CLIP), or zeros read when one is outside (FILL); the offsets
 * O are R's offset dims in order, placed at the operand's non-collapsed dims (0 at collapsed
 * ones); the result is operand[S + O]. Scatter walks the updates the same way, with the window
 * sizes taken from the updates' window dims.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"
#include "runtime/error.h"

#define FAIL(s, ...) ir_type_fail(why, why_n, s, __VA_ARGS__)

int64_t ir_gather_index_len(const ir_type *it, int index_dim) {
  return index_dim < it->rank ? it->dims[index_dim] : 1;
}

/* d lists distinct axes below n in increasing order. */
static bool increasing(const ir_dims *d, int n) {
  if (d->n > IR_MAX_RANK) return false;
  for (int i = 0; i < d->n; i++)
    if (d->d[i] >= n || (i && d->d[i] <= d->d[i - 1])) return false;
  return true;
}

static bool in_dims(const ir_dims *d, int x) {
  for (int i = 0; i < d->n; i++)
    if (d->d[i] == x) return true;
  return false;
}

/* The checks gather and scatter share: operand rank R, indices, collapsed dims, start map. */
static jit_status check_common(const ir_gather *g, const ir_type *ot, const ir_type *it,
                               char *why, size_t why_n) {
  if (!ir_dtype_is_int(it->dtype))
    return FAIL(JIT_EDTYPE, "indices must be integers, got %s", jit_dtype_name(it->dtype));
  if (g->index_dim > it->rank)
    return FAIL(JIT_ESHAPE, "index_dim %u out of range for indices of rank %d",
                (unsigned)g->index_dim, it->rank);
  if (g->mode > IR_INDEX_FILL) return FAIL(JIT_EINVAL, "bad mode %u", (unsigned)g->mode);
  if (!increasing(&g->collapsed, ot->rank))
    return FAIL(JIT_ESHAPE, "collapsed/inserted dims must be increasing operand dims (rank %d)",
                ot->rank);
  if (g->start_map.n > IR_MAX_RANK || ir_gather_index_len(it, g->index_dim) != g->start_map.n)
    return FAIL(JIT_ESHAPE, "start_map has %u entries for index vectors of length %lld",
                (unsigned)g->start_map.n, (long long)ir_gather_index_len(it, g->index_dim));
  for (int i = 0; i < g->start_map.n; i++) {
    if (g->start_map.d[i] >= ot->rank)
      return FAIL(JIT_ESHAPE, "start_map entry %u out of range for rank %d",
                  (unsigned)g->start_map.d[i], ot->rank);
    for (int j = 0; j < i; j++)
      if (g->start_map.d[j] == g->start_map.d[i])
        return FAIL(JIT_ESHAPE, "start_map names dim %u twice", (unsigned)g->start_map.d[i]);
  }
  return JIT_OK;
}

/* The indices' batch dims (all but index_dim) into dims; their count. */
static int batch_dims(const ir_type *it, int index_dim, int64_t *dims) {
  int n = 0;
  for (int i = 0; i < it->rank; i++)
    if (i != index_dim) dims[n++] = it->dims[i];
  return n;
}

static jit_status infer_gather(const ir_type *ot, const ir_type *it, const ir_gather *g,
                               ir_type *out, char *why, size_t why_n) {
  jit_status st = check_common(g, ot, it, why, why_n);
  if (st) return st;
  int64_t bd[IR_MAX_RANK];
  int nb = batch_dims(it, g->index_dim, bd);
  int n_off = ot->rank - g->collapsed.n;
  if (g->offset_dims.n != n_off)
    return FAIL(JIT_ESHAPE, "%u offset_dims for %d non-collapsed operand dims",
                (unsigned)g->offset_dims.n, n_off);
  int rank = nb + n_off;
  if (rank > IR_MAX_RANK) return FAIL(JIT_ESHAPE, "result rank %d exceeds %d", rank, IR_MAX_RANK);
  if (!increasing(&g->offset_dims, rank))
    return FAIL(JIT_ESHAPE, "offset_dims must be increasing dims of the result (rank %d)", rank);
  for (int d = 0; d < ot->rank; d++) {
    if (g->sizes[d] < 0 || g->sizes[d] > ot->dims[d])
      return FAIL(JIT_ESHAPE, "slice size %lld out of range for dim %d of size %lld",
                  (long long)g->sizes[d], d, (long long)ot->dims[d]);
    if (in_dims(&g->collapsed, d) && g->sizes[d] != 1)
      return FAIL(JIT_ESHAPE, "collapsed dim %d has slice size %lld (must be 1)", d,
                  (long long)g->sizes[d]);
  }
  *out = (ir_type){.dtype = ot->dtype, .rank = rank};
  int b = 0, od = 0; /* the next batch dim, the next operand dim to look at */
  for (int r = 0; r < rank; r++) {
    if (in_dims(&g->offset_dims, r)) {
      while (in_dims(&g->collapsed, od)) od++;
      out->dims[r] = g->sizes[od++];
    } else {
      out->dims[r] = bd[b++];
    }
  }
  return JIT_OK;
}

/* The window size of each operand dim of a scatter: the updates' window dims in order at the
   non-inserted dims, 1 at inserted ones. */
static void scatter_window(const ir_gather *g, const ir_type *ot, const ir_type *ut, int64_t *w) {
  int k = 0;
  for (int d = 0; d < ot->rank; d++)
    w[d] = in_dims(&g->collapsed, d) ? 1 : ut->dims[g->offset_dims.d[k++]];
}

static jit_status infer_scatter(const ir_type *ot, const ir_type *it, const ir_type *ut,
                                const ir_gather *g, ir_type *out, char *why, size_t why_n) {
  jit_status st = check_common(g, ot, it, why, why_n);
  if (st) return st;
  if (ut->dtype != ot->dtype)
    return FAIL(JIT_EDTYPE, "updates dtype %s differs from the operand's %s",
                jit_dtype_name(ut->dtype), jit_dtype_name(ot->dtype));
  if (g->combine > IR_COMBINE_ADD) return FAIL(JIT_EINVAL, "bad combiner %u", (unsigned)g->combine);
  if (g->combine == IR_COMBINE_ADD && ot->dtype == JIT_BOOL)
    return FAIL(JIT_EDTYPE, "add needs an int or float operand, got bool");
  int64_t bd[IR_MAX_RANK];
  int nb = batch_dims(it, g->index_dim, bd);
  int n_win = ot->rank - g->collapsed.n;
  if (g->offset_dims.n != n_win)
    return FAIL(JIT_ESHAPE, "%u window_dims for %d non-inserted operand dims",
                (unsigned)g->offset_dims.n, n_win);
  if (ut->rank != nb + n_win)
    return FAIL(JIT_ESHAPE, "updates of rank %d, expected %d (%d batch + %d window dims)", ut->rank,
                nb + n_win, nb, n_win);
  if (!increasing(&g->offset_dims, ut->rank))
    return FAIL(JIT_ESHAPE, "window_dims must be increasing dims of the updates (rank %d)",
                ut->rank);
  int b = 0;
  for (int r = 0; r < ut->rank; r++)
    if (!in_dims(&g->offset_dims, r) && ut->dims[r] != bd[b++])
      return FAIL(JIT_ESHAPE, "updates dim %d is %lld, the indices' batch dim is %lld", r,
                  (long long)ut->dims[r], (long long)bd[b - 1]);
  int64_t w[IR_MAX_RANK];
  scatter_window(g, ot, ut, w);
  for (int d = 0; d < ot->rank; d++)
    if (w[d] > ot->dims[d])
      return FAIL(JIT_ESHAPE, "window size %lld exceeds operand dim %d of size %lld",
                  (long long)w[d], d, (long long)ot->dims[d]);
  *out = *ot;
  return JIT_OK;
}

static jit_status infer_pad(const ir_type *ot, const ir_type *pt, const ir_pad *p, ir_type *out,
                            char *why, size_t why_n) {
  if (pt->rank != 0) return FAIL(JIT_ESHAPE, "the pad value must be a scalar, got rank %d", pt->rank);
  if (pt->dtype != ot->dtype)
    return FAIL(JIT_EDTYPE, "pad value dtype %s differs from the operand's %s",
                jit_dtype_name(pt->dtype), jit_dtype_name(ot->dtype));
  *out = *ot;
  for (int d = 0; d < ot->rank; d++) {
    int64_t n = ot->dims[d], in = p->interior[d], lo = p->lo[d], hi = p->hi[d];
    const int64_t lim = INT64_C(1) << 48;
    if (in < 0 || in > lim || lo < -lim || lo > lim || hi < -lim || hi > lim)
      return FAIL(JIT_ESHAPE, "dim %d: pad lo=%lld hi=%lld interior=%lld out of range", d,
                  (long long)lo, (long long)hi, (long long)in);
    int64_t len = n + (n > 0 ? (n - 1) * in : 0);
    if (n > lim / (in + 1)) return FAIL(JIT_ESHAPE, "dim %d: padded size overflows", d);
    int64_t r = lo + hi + len;
    if (r < 0)
      return FAIL(JIT_ESHAPE, "dim %d: lo=%lld hi=%lld crop more than its %lld elements", d,
                  (long long)lo, (long long)hi, (long long)len);
    out->dims[d] = r;
  }
  return JIT_OK;
}

jit_status ir_infer_index_op(ir_op op, uint32_t n_args, const ir_type *const *args,
                             const ir_attr *attr, ir_type *out, char *why, size_t why_n) {
  switch (op) {
  case IR_GATHER: return infer_gather(args[0], args[1], &attr->gather, out, why, why_n);
  case IR_SCATTER:
    return infer_scatter(args[0], args[1], args[2], &attr->gather, out, why, why_n);
  case IR_PAD: return infer_pad(args[0], args[1], &attr->pad, out, why, why_n);
  case IR_REV:
    if (!increasing(&attr->dims, args[0]->rank))
      return FAIL(JIT_ESHAPE, "axes must be increasing dims of the operand (rank %d)",
                  args[0]->rank);
    *out = *args[0];
    return JIT_OK;
  default: break;
  }
  (void)n_args;
  return FAIL(JIT_EINTERNAL, "not an indexing op");
}

/* ---- semantics ------------------------------------------------------------------------------- */

static void strides(const ir_type *t, int64_t *s) {
  int64_t m = 1;
  for (int d = t->rank; d-- > 0;) {
    s[d] = m;
    m *= t->dims[d];
  }
}

/* Advances the row-major multi-index idx over dims; false after the last. */
static bool next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int d = rank; d-- > 0;) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

/* The starts of the window at batch position pos (the indices' index with index_dim skipped):
   false when one is outside [0, dim - win] and mode is FILL; clamped otherwise. */
static bool window_start(const ir_gather *g, const ir_type *ot, const ir_type *it,
                         const void *indices, const int64_t *pos, const int64_t *win,
                         int64_t *start) {
  int64_t istr[IR_MAX_RANK + 1];
  strides(it, istr);
  int64_t base = 0;
  int b = 0;
  for (int d = 0; d < it->rank; d++)
    if (d != g->index_dim) base += pos[b++] * istr[d];
  for (int d = 0; d < ot->rank; d++) start[d] = 0;
  bool ok = true;
  for (int k = 0; k < g->start_map.n; k++) {
    int64_t at = base + (g->index_dim < it->rank ? k * istr[g->index_dim] : 0);
    int64_t v = ir_load_i64(it->dtype, indices, at);
    int d = g->start_map.d[k];
    int64_t hi = ot->dims[d] - win[d];
    if (v < 0 || v > hi) {
      ok = false;
      v = v < 0 ? 0 : hi;
    }
    start[d] = v;
  }
  return ok || g->mode == IR_INDEX_CLIP;
}

/* Splits index idx of the gather's result (the scatter's updates) into the batch position (its
   dims not in offset_dims) and the window offsets, placed at the operand dims not collapsed. */
static void split_index(const ir_gather *g, int rank, const int64_t *idx, int op_rank,
                        int64_t *pos, int64_t *off) {
  int b = 0, w = 0;
  for (int d = 0; d < op_rank; d++) off[d] = 0;
  for (int r = 0; r < rank; r++) {
    if (in_dims(&g->offset_dims, r)) {
      while (in_dims(&g->collapsed, w)) w++;
      off[w++] = idx[r];
    } else {
      pos[b++] = idx[r];
    }
  }
}

void ir_eval_gather(const ir_attr *a, const ir_type *ot, const void *operand, const ir_type *it,
                    const void *indices, const ir_type *rt, void *out) {
  const ir_gather *g = &a->gather;
  size_t es = jit_dtype_size(rt->dtype);
  int64_t n = ir_type_numel(rt), ostr[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
  strides(ot, ostr);
  for (int64_t e = 0; e < n; e++, next_index(rt->rank, rt->dims, idx)) {
    int64_t pos[IR_MAX_RANK], off[IR_MAX_RANK], start[IR_MAX_RANK];
    split_index(g, rt->rank, idx, ot->rank, pos, off);
    unsigned char *dst = (unsigned char *)out + (size_t)e * es;
    if (!window_start(g, ot, it, indices, pos, g->sizes, start)) {
      memset(dst, 0, es); /* zero in every dtype (f16/bf16 bits included) */
      continue;
    }
    int64_t src = 0;
    for (int d = 0; d < ot->rank; d++) src += (start[d] + off[d]) * ostr[d];
    memcpy(dst, (const unsigned char *)operand + (size_t)src * es, es);
  }
}

void ir_eval_scatter(const ir_attr *a, const ir_type *ot, const void *operand, const ir_type *it,
                     const void *indices, const ir_type *ut, const void *updates, void *out) {
  const ir_gather *g = &a->gather;
  jit_dtype dt = ot->dtype;
  size_t es = jit_dtype_size(dt);
  int64_t n = ir_type_numel(ut), ostr[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, win[IR_MAX_RANK];
  if (out != operand) memcpy(out, operand, (size_t)ir_type_numel(ot) * es);
  strides(ot, ostr);
  scatter_window(g, ot, ut, win);
  for (int64_t e = 0; e < n; e++, next_index(ut->rank, ut->dims, idx)) {
    int64_t pos[IR_MAX_RANK], off[IR_MAX_RANK], start[IR_MAX_RANK];
    split_index(g, ut->rank, idx, ot->rank, pos, off);
    if (!window_start(g, ot, it, indices, pos, win, start)) continue; /* dropped */
    int64_t dst = 0;
    for (int d = 0; d < ot->rank; d++) dst += (start[d] + off[d]) * ostr[d];
    if (g->combine == IR_COMBINE_SET)
      memcpy((unsigned char *)out + (size_t)dst * es, (const unsigned char *)updates + (size_t)e * es, es);
    else if (ir_dtype_is_float(dt))
      ir_store_f64(dt, out, dst, ir_load_f64(dt, out, dst) + ir_load_f64(dt, updates, e));
    else /* ints wrap */
      ir_store_i64(dt, out, dst,
                   (int64_t)((uint64_t)ir_load_i64(dt, out, dst) + (uint64_t)ir_load_i64(dt, updates, e)));
  }
}

void ir_eval_pad(const ir_attr *a, const ir_type *ot, const void *operand, const void *pad_value,
                 const ir_type *rt, void *out) {
  const ir_pad *p = &a->pad;
  size_t es = jit_dtype_size(rt->dtype);
  int64_t n = ir_type_numel(rt), ostr[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
  strides(ot, ostr);
  for (int64_t e = 0; e < n; e++, next_index(rt->rank, rt->dims, idx)) {
    const unsigned char *src = pad_value;
    int64_t at = 0;
    for (int d = 0; d < rt->rank && src; d++) {
      int64_t i = idx[d] - p->lo[d], step = p->interior[d] + 1;
      if (i < 0 || i % step != 0 || i / step >= ot->dims[d]) {
        at = -1;
        break;
      }
      at += i / step * ostr[d];
    }
    if (at >= 0) src = (const unsigned char *)operand + (size_t)at * es;
    memcpy((unsigned char *)out + (size_t)e * es, src, es);
  }
}

void ir_eval_rev(const ir_attr *a, const ir_type *ot, const void *operand, void *out) {
  size_t es = jit_dtype_size(ot->dtype);
  int64_t n = ir_type_numel(ot), ostr[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
  strides(ot, ostr);
  for (int64_t e = 0; e < n; e++, next_index(ot->rank, ot->dims, idx)) {
    int64_t src = 0;
    for (int d = 0; d < ot->rank; d++)
      src += (in_dims(&a->dims, d) ? ot->dims[d] - 1 - idx[d] : idx[d]) * ostr[d];
    memcpy((unsigned char *)out + (size_t)e * es, (const unsigned char *)operand + (size_t)src * es, es);
  }
}
