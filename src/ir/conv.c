/* conv.c: CONV (lax.conv_general_dilated), REDUCE_WINDOW (lax.reduce_window) and SELECT_SCATTER
 * (XLA's select_and_scatter_add): their type rules and the interpreter's semantics, direct loops
 * in double over dense row-major buffers (see ir_conv and ir_window in ir.h). */
#include <math.h>
#include <string.h>

#include "ir/ir.h"

#define FAIL(s, ...) ir_type_fail(why, why_n, s, __VA_ARGS__)

int64_t ir_dilate(int64_t n, int64_t d) { return n == 0 ? 0 : 1 + d * (n - 1); }

int64_t ir_window_out(int64_t in, int64_t lo, int64_t hi, int64_t window, int64_t stride) {
  int64_t padded = in + lo + hi;
  return padded < window || stride < 1 ? 0 : (padded - window) / stride + 1;
}

/* Row-major element strides of t. */
static void strides_of(const ir_type *t, int64_t *s) {
  int64_t acc = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= t->dims[i];
  }
}

/* A list of rank distinct dims in [0, rank). */
static bool is_perm(const uint8_t *d, int rank) {
  bool seen[IR_MAX_RANK] = {false};
  for (int i = 0; i < rank; i++) {
    if (d[i] >= rank || seen[d[i]]) return false;
    seen[d[i]] = true;
  }
  return true;
}

static jit_status infer_conv(const ir_type *l, const ir_type *r, const ir_conv *c, ir_type *out,
                             char *why, size_t why_n) {
  int rank = l->rank, ns = rank - 2;
  if (rank < 3 || r->rank != rank)
    return FAIL(JIT_ESHAPE, "lhs and rhs need one rank of 3 or more (1 to %d spatial dims), got ranks %d and %d",
                IR_CONV_MAX_SPATIAL, l->rank, r->rank);
  if (l->dtype != r->dtype || !ir_dtype_is_float(l->dtype))
    return FAIL(JIT_EDTYPE, "lhs and rhs need one float dtype, got %s and %s",
                jit_dtype_name(l->dtype), jit_dtype_name(r->dtype));
  if (!is_perm(c->lhs, rank) || !is_perm(c->rhs, rank) || !is_perm(c->out, rank))
    return FAIL(JIT_EINVAL, "the lhs, rhs and out dim lists must each name every dim once");
  int64_t g = c->groups, bg = c->batch_groups;
  if (g < 1 || bg < 1 || (g > 1 && bg > 1))
    return FAIL(JIT_EINVAL, "feature_group_count %lld and batch_group_count %lld: both >= 1, one of them 1",
                (long long)g, (long long)bg);
  int64_t n = l->dims[c->lhs[0]], ci = l->dims[c->lhs[1]];
  int64_t co = r->dims[c->rhs[0]], ri = r->dims[c->rhs[1]];
  if (ci != ri * g)
    return FAIL(JIT_ESHAPE, "lhs features %lld != rhs in features %lld * feature_group_count %lld",
                (long long)ci, (long long)ri, (long long)g);
  if (co % g || co % bg || n % bg)
    return FAIL(JIT_ESHAPE, "rhs out features %lld (and lhs batch %lld) not divisible by the group count %lld",
                (long long)co, (long long)n, (long long)(g > 1 ? g : bg));
  out->dtype = l->dtype;
  out->rank = rank;
  out->dims[c->out[0]] = n / bg;
  out->dims[c->out[1]] = co;
  for (int i = 0; i < ns; i++) {
    if (c->stride[i] < 1 || c->lhs_dil[i] < 1 || c->rhs_dil[i] < 1)
      return FAIL(JIT_EINVAL, "spatial dim %d: stride %lld and dilations %lld, %lld must be >= 1", i,
                  (long long)c->stride[i], (long long)c->lhs_dil[i], (long long)c->rhs_dil[i]);
    int64_t in = ir_dilate(l->dims[c->lhs[2 + i]], c->lhs_dil[i]);
    if (in + c->pad_lo[i] + c->pad_hi[i] < 0)
      return FAIL(JIT_ESHAPE, "spatial dim %d: padding %lld, %lld crops more than the %lld elements",
                  i, (long long)c->pad_lo[i], (long long)c->pad_hi[i], (long long)in);
    int64_t k = ir_dilate(r->dims[c->rhs[2 + i]], c->rhs_dil[i]);
    out->dims[c->out[2 + i]] = ir_window_out(in, c->pad_lo[i], c->pad_hi[i], k, c->stride[i]);
  }
  return JIT_OK;
}

static jit_status infer_window(ir_op op, uint32_t n_args, const ir_type *const *args,
                               const ir_window *w, ir_type *out, char *why, size_t why_n) {
  const ir_type *x = args[0];
  bool scatter = op == IR_SELECT_SCATTER;
  if (w->kind > JIT_WINDOW_MIN || (scatter && w->kind == JIT_WINDOW_SUM))
    return FAIL(JIT_EINVAL, "reduction kind %u is not %s", w->kind, scatter ? "max or min" : "sum, max or min");
  if (x->dtype == JIT_BOOL || !ir_dtype_valid(x->dtype) || ir_dtype_is_complex(x->dtype) ||
      ((scatter || w->kind == JIT_WINDOW_SUM) && !ir_dtype_is_float(x->dtype) && !ir_dtype_is_int(x->dtype)))
    return FAIL(JIT_EDTYPE, "needs an int or float operand, got %s", jit_dtype_name(x->dtype));
  ir_type r = {.dtype = x->dtype, .rank = x->rank};
  for (int d = 0; d < x->rank; d++) {
    if (w->size[d] < 1 || w->stride[d] < 1 || w->pad_lo[d] < 0 || w->pad_hi[d] < 0)
      return FAIL(JIT_EINVAL, "dim %d: window %lld and stride %lld must be >= 1, pads %lld, %lld >= 0", d,
                  (long long)w->size[d], (long long)w->stride[d], (long long)w->pad_lo[d],
                  (long long)w->pad_hi[d]);
    r.dims[d] = ir_window_out(x->dims[d], w->pad_lo[d], w->pad_hi[d], w->size[d], w->stride[d]);
  }
  if (!scatter) {
    *out = r;
    return JIT_OK;
  }
  if (n_args != 2 || !ir_type_equal(args[1], &r))
    return FAIL(JIT_ESHAPE, "the source must have the window reduction's type");
  *out = *x;
  return JIT_OK;
}

jit_status ir_infer_conv_op(ir_op op, uint32_t n_args, const ir_type *const *args,
                            const ir_attr *attr, ir_type *out, char *why, size_t why_n) {
  if (op == IR_CONV) return infer_conv(args[0], args[1], &attr->conv, out, why, why_n);
  return infer_window(op, n_args, args, &attr->window, out, why, why_n);
}

bool ir_conv_has_gemm_form(const ir_func *f, const ir_ins *in) {
  if (in->op != IR_CONV) return false;
  const ir_type *lt = ir_type_of(f, in->args[0]);
  /* the GEMM's lhs view is [batch, out spatial..., window..., features] (a group is a dot batch
     dim outside the view) */
  return ir_dtype_is_float(lt->dtype) && 2 * (lt->rank - 2) + 2 <= IR_MAX_RANK;
}

bool ir_conv_is_gemm(const ir_func *f, const ir_ins *in) {
  const ir_conv *c = &in->attr.conv;
  const ir_type *lt = ir_type_of(f, in->args[0]);
  int rank = lt->rank, ns = rank - 2;
  if (!ir_conv_has_gemm_form(f, in) || c->out[0] != 0 || c->out[1] != rank - 1) return false;
  for (int i = 0; i < ns; i++)
    if (c->out[2 + i] != 1 + i || c->lhs_dil[i] != 1) return false;
  return true;
}

/* ---- interpreter ------------------------------------------------------------------------------ */

/* The row-major index of the multi-index idx (rank entries) in a type of strides s. */
static int64_t flat(const int64_t *idx, const int64_t *s, int rank) {
  int64_t o = 0;
  for (int i = 0; i < rank; i++) o += idx[i] * s[i];
  return o;
}

/* Steps idx (rank entries, extents dims) to the next row-major position; false past the end. */
static bool next_index(int64_t *idx, const int64_t *dims, int rank) {
  for (int i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

void ir_eval_conv(const ir_conv *c, const ir_type *lt, const void *lhs, const ir_type *rt,
                  const void *rhs, const ir_type *ot, void *out) {
  int rank = ot->rank, ns = rank - 2;
  int64_t ls[IR_MAX_RANK], rs[IR_MAX_RANK], os[IR_MAX_RANK];
  strides_of(lt, ls);
  strides_of(rt, rs);
  strides_of(ot, os);
  int64_t n_out = ir_type_numel(ot);
  if (n_out == 0) return;
  int64_t co = rt->dims[c->rhs[0]], ri = rt->dims[c->rhs[1]];
  int64_t per_g = co / c->groups, per_bg = co / c->batch_groups, nb = ot->dims[c->out[0]];
  int64_t kdims[IR_CONV_MAX_SPATIAL];
  for (int i = 0; i < ns; i++) kdims[i] = rt->dims[c->rhs[2 + i]];
  int64_t oi[IR_MAX_RANK] = {0};
  do {
    int64_t n = oi[c->out[0]], o = oi[c->out[1]];
    int64_t lb = (o / per_bg) * nb + n, f0 = (o / per_g) * ri;
    double acc = 0;
    int64_t k[IR_CONV_MAX_SPATIAL] = {0}, lpos[IR_CONV_MAX_SPATIAL];
    bool any = ns == 0 || ir_type_numel(rt) > 0;
    while (any) {
      bool inside = true;
      for (int i = 0; i < ns && inside; i++) {
        int64_t p = oi[c->out[2 + i]] * c->stride[i] + k[i] * c->rhs_dil[i] - c->pad_lo[i];
        if (p < 0 || p % c->lhs_dil[i]) inside = false;
        else if ((lpos[i] = p / c->lhs_dil[i]) >= lt->dims[c->lhs[2 + i]]) inside = false;
      }
      if (inside) {
        int64_t lo = lb * ls[c->lhs[0]], ro = o * rs[c->rhs[0]];
        for (int i = 0; i < ns; i++) {
          lo += lpos[i] * ls[c->lhs[2 + i]];
          ro += k[i] * rs[c->rhs[2 + i]];
        }
        for (int64_t f = 0; f < ri; f++)
          acc += ir_load_f64(lt->dtype, lhs, lo + (f0 + f) * ls[c->lhs[1]]) *
                 ir_load_f64(rt->dtype, rhs, ro + f * rs[c->rhs[1]]);
      }
      any = ns > 0 && next_index(k, kdims, ns);
    }
    ir_store_f64(ot->dtype, out, flat(oi, os, rank), acc);
  } while (next_index(oi, ot->dims, rank));
}

double ir_window_identity(uint8_t kind, jit_dtype d) {
  if (kind == JIT_WINDOW_SUM) return 0;
  bool mx = kind == JIT_WINDOW_MAX;
  if (ir_dtype_is_float(d)) return mx ? -INFINITY : INFINITY;
  switch (d) {
  case JIT_I8: return mx ? INT8_MIN : INT8_MAX;
  case JIT_U8: return mx ? 0 : UINT8_MAX;
  case JIT_I32: return mx ? INT32_MIN : INT32_MAX;
  case JIT_U32: return mx ? 0 : UINT32_MAX;
  case JIT_I64: return mx ? (double)INT64_MIN : (double)INT64_MAX;
  default: return mx ? 0 : (double)UINT64_MAX;
  }
}

/* Visits the window of output position oi: calls fn for each in-bounds operand element (its
   flat index). Returns false when fn stops it. */
typedef bool (*window_fn)(void *ctx, int64_t flat_index);
static void each_in_window(const ir_window *w, const ir_type *xt, const int64_t *xs,
                           const int64_t *oi, window_fn fn, void *ctx) {
  int rank = xt->rank;
  int64_t k[IR_MAX_RANK] = {0};
  for (;;) {
    bool inside = true;
    int64_t at = 0;
    for (int d = 0; d < rank && inside; d++) {
      int64_t p = oi[d] * w->stride[d] + k[d] - w->pad_lo[d];
      if (p < 0 || p >= xt->dims[d]) inside = false;
      at += p * xs[d];
    }
    if (inside && !fn(ctx, at)) return;
    if (!next_index(k, w->size, rank)) return;
  }
}

typedef struct fold {
  uint8_t kind;
  jit_dtype dt;
  const void *x;
  double acc;
  int64_t best; /* SELECT_SCATTER: the selected element, -1: none yet */
} fold;

static bool fold_one(void *ctx, int64_t at) {
  fold *f = ctx;
  double v = ir_load_f64(f->dt, f->x, at);
  if (f->kind == JIT_WINDOW_SUM) f->acc += v;
  else if (f->kind == JIT_WINDOW_MAX) f->acc = isnan(v) || v > f->acc ? v : f->acc;
  else f->acc = isnan(v) || v < f->acc ? v : f->acc;
  return !isnan(f->acc) || f->kind == JIT_WINDOW_SUM;
}

void ir_eval_reduce_window(const ir_window *w, const ir_type *xt, const void *x,
                           const ir_type *ot, void *out) {
  int64_t xs[IR_MAX_RANK], os[IR_MAX_RANK], oi[IR_MAX_RANK] = {0};
  strides_of(xt, xs);
  strides_of(ot, os);
  if (ir_type_numel(ot) == 0) return;
  bool ints = !ir_dtype_is_float(xt->dtype);
  do {
    fold f = {w->kind, xt->dtype, x, ir_window_identity(w->kind, xt->dtype), -1};
    if (ints && w->kind == JIT_WINDOW_SUM) { /* exact, wrapping: sum as uint64 (no UB) */
      uint64_t s = 0;
      int64_t k[IR_MAX_RANK] = {0};
      do {
        bool inside = true;
        int64_t at = 0;
        for (int d = 0; d < xt->rank && inside; d++) {
          int64_t p = oi[d] * w->stride[d] + k[d] - w->pad_lo[d];
          inside = p >= 0 && p < xt->dims[d];
          at += p * xs[d];
        }
        if (inside) s += (uint64_t)ir_load_i64(xt->dtype, x, at);
      } while (next_index(k, w->size, xt->rank));
      ir_store_i64(ot->dtype, out, flat(oi, os, ot->rank), (int64_t)s);
      continue;
    }
    each_in_window(w, xt, xs, oi, fold_one, &f);
    ir_store_f64(ot->dtype, out, flat(oi, os, ot->rank), f.acc);
  } while (next_index(oi, ot->dims, ot->rank));
}

/* XLA's select: keep the current choice while it is >= (max) / <= (min) the new element. */
static bool select_one(void *ctx, int64_t at) {
  fold *f = ctx;
  double v = ir_load_f64(f->dt, f->x, at);
  bool keep = f->best >= 0 && (f->kind == JIT_WINDOW_MAX ? f->acc >= v : f->acc <= v);
  if (!keep) {
    f->best = at;
    f->acc = v;
  }
  return true;
}

void ir_eval_select_scatter(const ir_window *w, const ir_type *xt, const void *x,
                            const ir_type *st, const void *src, void *out) {
  int64_t xs[IR_MAX_RANK], ss[IR_MAX_RANK], oi[IR_MAX_RANK] = {0};
  strides_of(xt, xs);
  strides_of(st, ss);
  int64_t n = ir_type_numel(xt);
  for (int64_t i = 0; i < n; i++) ir_store_f64(xt->dtype, out, i, 0);
  if (ir_type_numel(st) == 0) return;
  do {
    fold f = {w->kind, xt->dtype, x, 0, -1};
    each_in_window(w, xt, xs, oi, select_one, &f);
    if (f.best < 0) continue;
    double s = ir_load_f64(st->dtype, src, flat(oi, ss, st->rank));
    ir_store_f64(xt->dtype, out, f.best, ir_load_f64(xt->dtype, out, f.best) + s);
  } while (next_index(oi, st->dims, st->rank));
}

/* ---- VJP attributes ---------------------------------------------------------------------------- */

/* A dim list with its first two entries swapped (JAX's _conv_spec_transpose). */
static void spec_transpose(const uint8_t *in, int rank, uint8_t *out) {
  memcpy(out, in, (size_t)rank);
  out[0] = in[1];
  out[1] = in[0];
}

void ir_conv_vjp_attrs(const ir_conv *c, const ir_type *lt, const ir_type *rt, const ir_type *ot,
                       ir_conv *for_lhs, ir_conv *for_rhs) {
  int rank = lt->rank, ns = rank - 2;
  memset(for_lhs, 0, sizeof *for_lhs);
  memset(for_rhs, 0, sizeof *for_rhs);
  /* d_lhs = conv(ct, rev(rhs)) with the output's spec as lhs, the rhs's features swapped */
  memcpy(for_lhs->lhs, c->out, (size_t)rank);
  spec_transpose(c->rhs, rank, for_lhs->rhs);
  memcpy(for_lhs->out, c->lhs, (size_t)rank);
  for_lhs->groups = c->groups > 1 ? c->groups : c->batch_groups;
  for_lhs->batch_groups = 1;
  /* d_rhs = conv(lhs, ct) with batch and features swapped on all three */
  spec_transpose(c->lhs, rank, for_rhs->lhs);
  spec_transpose(c->out, rank, for_rhs->rhs);
  spec_transpose(c->rhs, rank, for_rhs->out);
  for_rhs->groups = c->batch_groups;
  for_rhs->batch_groups = c->groups;
  for (int i = 0; i < ns; i++) {
    int64_t in = ir_dilate(lt->dims[c->lhs[2 + i]], c->lhs_dil[i]);
    int64_t k = ir_dilate(rt->dims[c->rhs[2 + i]], c->rhs_dil[i]);
    int64_t out = ir_dilate(ot->dims[c->out[2 + i]], c->stride[i]);
    int64_t before = k - c->pad_lo[i] - 1;
    for_lhs->stride[i] = c->lhs_dil[i];
    for_lhs->lhs_dil[i] = c->stride[i];
    for_lhs->rhs_dil[i] = c->rhs_dil[i];
    for_lhs->pad_lo[i] = before;
    for_lhs->pad_hi[i] = in + k - 1 - out - before;
    for_rhs->stride[i] = c->rhs_dil[i];
    for_rhs->lhs_dil[i] = c->lhs_dil[i];
    for_rhs->rhs_dil[i] = c->stride[i];
    for_rhs->pad_lo[i] = c->pad_lo[i];
    for_rhs->pad_hi[i] = (out - in) + (k - c->pad_lo[i] - 1);
  }
}
