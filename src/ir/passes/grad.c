/* grad.c: reverse-mode differentiation over the IR (value_and_grad's transformation): the
 * forward pass of a traced body emitted once into the caller, then its VJP, as ordinary IR ops.
 *
 * What it does: emits body's instructions into dst (params mapped to the caller's args), then
 * walks them backwards keeping one cotangent per value (IR_NOREF: zero), seeded with 1 at the
 * scalar loss (result 0); each instruction's VJP rule adds its contribution to its operands'
 * cotangents. Only values that depend on a wrt param through float values get cotangents, so
 * integer and bool data, comparisons, floor, iota and constants emit nothing. The rules follow
 * JAX's (lax.py): max/min split ties half/half, reduce_max/min split evenly among the positions
 * equal to the result, pow's exponent derivative is guarded where the base is 0. The backward
 * instructions carry the location of the forward instruction they come from, so dumps and
 * errors point at the user's line; since they are plain IR, grad of grad and fusion need nothing
 * special.
 *
 * Checkpointing (remat): an instruction with a nonzero attr.remat is not kept for the backward
 * pass: the first backward rule that needs its value re-emits it (and, recursively, the tagged
 * instructions it depends on) from untagged values, under a fresh tag, so that CSE, which keys
 * on the tag, cannot merge the recomputation back into the forward value. jit_checkpoint tags a
 * region's instructions except its results; outside grad a tag changes nothing but CSE's key.
 * Tags are per function: body's tags are offset past dst's so that spliced regions stay apart.
 *
 * Needs: a verified body; args of body's param types in dst. Keeps: dst's existing refs.
 * Cost: O(body instructions) emitted forward, a few instructions per differentiated one
 * backward, plus the recomputed regions.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

typedef struct grad {
  ir_func *dst;
  const ir_func *body;
  ir_ty *tymap;      /* body ty -> dst ty */
  ir_ref *fwd;       /* body ref -> its forward value in dst */
  ir_ref *rc;        /* body ref -> its recomputation in dst (tagged refs; IR_NOREF: not yet) */
  ir_ref *ct;        /* body ref -> its cotangent in dst (IR_NOREF: zero) */
  bool *dep;         /* body ref is a float value that depends on a wrt param */
  ir_ref *stack;     /* scratch of primal() */
  uint32_t n_stack, cap_stack;
  uint32_t tag_base; /* added to body's remat tags */
  uint32_t rc_tag;   /* the tag of recomputed instructions */
  ir_loc loc;        /* of the forward instruction whose rule is being emitted */
  jit_status st;     /* sticky: the first failure */
} grad;

static const char *const who = "value_and_grad";

uint32_t ir_remat_max_tag(const ir_func *f) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < f->n_ins; i++)
    if (f->ins[i].attr.remat > m) m = f->ins[i].attr.remat;
  return m;
}

/* ---- emission helpers ------------------------------------------------------------------------
   Each returns IR_NOREF once g has failed, and accepts IR_NOREF operands in that state. */

static ir_type type_of(const grad *g, ir_ref r) { return *ir_type_of(g->dst, r); }

static ir_ref emit(grad *g, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *attr,
                   const ir_type *declared) {
  if (g->st != JIT_OK) return IR_NOREF;
  enum { MAX_OPERANDS = 16 }; /* a sort's keys and its permutation */
  const ir_type *tys[MAX_OPERANDS] = {0};
  ir_type copies[MAX_OPERANDS];
  if (n > MAX_OPERANDS) {
    g->st = jit_error(JIT_EINTERNAL, "%s: %s with %u operands", who, ir_op_name[op], n);
    return IR_NOREF;
  }
  for (uint32_t i = 0; i < n; i++) {
    copies[i] = type_of(g, args[i]);
    tys[i] = &copies[i];
  }
  ir_type out;
  char why[256];
  jit_status st = ir_infer_type(op, n, tys, attr, declared, &out, why, sizeof why);
  if (st != JIT_OK) {
    g->st = jit_error(JIT_EINTERNAL, "%s: backward %s: %s", who, ir_op_name[op], why);
    return IR_NOREF;
  }
  ir_ref r = ir_emit(g->dst, op, ir_type_intern(g->dst, &out), n, args, attr, g->loc);
  if (r == IR_NOREF) g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  return r;
}

static ir_ref cst(grad *g, const ir_type *like, double v) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_attr a = {0};
  a.value = v;
  return emit(g, IR_CONST, 0, NULL, &a, like);
}

/* A constant of r's type. */
static ir_ref cst_like(grad *g, ir_ref r, double v) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, r);
  return cst(g, &t, v);
}

static ir_ref un(grad *g, ir_op op, ir_ref a) { return emit(g, op, 1, &a, NULL, NULL); }

static ir_ref bin(grad *g, ir_op op, ir_ref a, ir_ref b) {
  ir_ref x[2] = {a, b};
  return emit(g, op, 2, x, NULL, NULL);
}

static ir_ref cmp(grad *g, jit_cmp_op dir, ir_ref a, ir_ref b) {
  ir_attr at = {0};
  at.cmp = dir;
  ir_ref x[2] = {a, b};
  return emit(g, IR_CMP, 2, x, &at, NULL);
}

static ir_ref sel(grad *g, ir_ref p, ir_ref a, ir_ref b) {
  ir_ref x[3] = {p, a, b};
  return emit(g, IR_SELECT, 3, x, NULL, NULL);
}

static ir_ref convert(grad *g, ir_ref a, jit_dtype dt) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a);
  if (t.dtype == dt) return a;
  t.dtype = dt;
  return emit(g, IR_CONVERT, 1, &a, NULL, &t);
}

/* a reshaped to t's dims (a itself when already there). */
static ir_ref reshape(grad *g, ir_ref a, int rank, const int64_t *dims) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a), to = {.dtype = t.dtype, .rank = rank};
  for (int i = 0; i < rank; i++) to.dims[i] = dims[i];
  if (ir_type_equal(&t, &to)) return a;
  return emit(g, IR_RESHAPE, 1, &a, NULL, &to);
}

static ir_ref transpose(grad *g, ir_ref a, int rank, const int *perm) {
  bool identity = true;
  ir_attr at = {0};
  at.dims.n = (uint8_t)rank;
  for (int i = 0; i < rank; i++) {
    at.dims.d[i] = (uint8_t)perm[i];
    if (perm[i] != i) identity = false;
  }
  return identity ? a : emit(g, IR_TRANSPOSE, 1, &a, &at, NULL);
}

/* a summed over the n increasing axes (a itself when n == 0). */
static ir_ref reduce_sum(grad *g, ir_ref a, int n, const int *axes) {
  if (n <= 0 || n > IR_MAX_RANK) return a; /* n > rank never happens: the types were verified */
  ir_attr at = {0};
  at.dims.n = (uint8_t)n;
  for (int i = 0; i < n && i < IR_MAX_RANK; i++) at.dims.d[i] = (uint8_t)axes[i];
  return emit(g, IR_REDUCE_SUM, 1, &a, &at, NULL);
}

/* a broadcast to `to`, a's dim i going to result dim dims[i]. */
static ir_ref broadcast(grad *g, ir_ref a, int n, const int *dims, const ir_type *to) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a);
  if (ir_type_equal(&t, to)) return a;
  ir_attr at = {0};
  at.dims.n = (uint8_t)n;
  for (int i = 0; i < n; i++) at.dims.d[i] = (uint8_t)dims[i];
  ir_type d = *to;
  d.dtype = t.dtype;
  return emit(g, IR_BROADCAST, 1, &a, &at, &d);
}

/* a[lo:hi] along axis, everything else whole. */
static ir_ref slice_axis(grad *g, ir_ref a, int axis, int64_t lo, int64_t hi) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a);
  if (lo == 0 && hi == t.dims[axis]) return a;
  ir_attr at = {0};
  for (int i = 0; i < t.rank; i++) {
    at.slice.start[i] = i == axis ? lo : 0;
    at.slice.limit[i] = i == axis ? hi : t.dims[i];
    at.slice.stride[i] = 1;
  }
  return emit(g, IR_SLICE, 1, &a, &at, NULL);
}

/* a with `before` zeros in front of and `after` zeros behind it along axis. */
static ir_ref pad_axis(grad *g, ir_ref a, int axis, int64_t before, int64_t after) {
  if (g->st != JIT_OK || (before == 0 && after == 0)) return a;
  ir_ref parts[3];
  uint32_t n = 0;
  ir_type t = type_of(g, a);
  if (before) {
    t.dims[axis] = before;
    parts[n++] = cst(g, &t, 0);
  }
  parts[n++] = a;
  if (after) {
    t.dims[axis] = after;
    parts[n++] = cst(g, &t, 0);
  }
  ir_attr at = {0};
  at.axis = axis;
  return emit(g, IR_CONCAT, n, parts, &at, NULL);
}

/* ---- cotangents and primal values ----------------------------------------------------------- */

/* Adds c to the cotangent of body value r (when r needs one). */
static void accum(grad *g, ir_ref r, ir_ref c) {
  if (g->st != JIT_OK || !g->dep[r]) return;
  g->ct[r] = g->ct[r] == IR_NOREF ? c : bin(g, IR_ADD, g->ct[r], c);
}

static bool tagged(const grad *g, ir_ref r) {
  return r >= g->body->n_params && g->body->ins[r].attr.remat != 0;
}

static bool push(grad *g, ir_ref r) {
  if (g->n_stack == g->cap_stack) {
    uint32_t cap = g->cap_stack ? g->cap_stack * 2 : 64;
    ir_ref *s = realloc(g->stack, cap * sizeof *s);
    if (!s) {
      g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
      return false;
    }
    g->stack = s;
    g->cap_stack = cap;
  }
  g->stack[g->n_stack++] = r;
  return true;
}

/* Emits body instruction r into dst on operands ops, its remat tag given. */
static ir_ref copy_ins(grad *g, ir_ref r, const ir_ref *ops, uint32_t remat) {
  const ir_ins *in = &g->body->ins[r];
  ir_attr a;
  /* a scan gets its own copy of the loop's body; the scan's VJP rule replaces it with one that
     also stacks residuals when a gradient flows back through it */
  if (ir_attr_for_copy(g->dst, g->body, in, &a) != JIT_OK) {
    g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    return IR_NOREF;
  }
  a.remat = remat;
  ir_ref out = ir_emit(g->dst, in->op, g->tymap[in->ty], in->n_args, ops, &a, in->loc);
  if (out == IR_NOREF) g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
  return out;
}

/* The value of body ref r for the backward pass: its forward value, or for a checkpointed
   (tagged) value its recomputation, emitted here on first use with what it needs, operands
   first (an explicit stack: regions may be long chains). */
static ir_ref primal(grad *g, ir_ref r) {
  if (g->st != JIT_OK) return IR_NOREF;
  if (!tagged(g, r)) return g->fwd[r];
  if (g->rc[r] != IR_NOREF) return g->rc[r];
  ir_ref small[8], *ops = small;
  uint32_t cap = 8;
  g->n_stack = 0;
  if (!push(g, r)) return IR_NOREF;
  while (g->n_stack && g->st == JIT_OK) {
    ir_ref top = g->stack[g->n_stack - 1];
    if (g->rc[top] != IR_NOREF) {
      g->n_stack--;
      continue;
    }
    const ir_ins *in = &g->body->ins[top];
    bool ready = true;
    for (uint32_t k = 0; k < in->n_args; k++) {
      ir_ref a = in->args[k];
      if (tagged(g, a) && g->rc[a] == IR_NOREF) {
        ready = false;
        if (!push(g, a)) break;
      }
    }
    if (!ready) continue;
    g->n_stack--;
    if (in->n_args > cap) {
      ir_ref *grown = malloc(in->n_args * sizeof *grown);
      if (!grown) {
        g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
        break;
      }
      if (ops != small) free(ops);
      ops = grown;
      cap = in->n_args;
    }
    for (uint32_t k = 0; k < in->n_args; k++)
      ops[k] = tagged(g, in->args[k]) ? g->rc[in->args[k]] : g->fwd[in->args[k]];
    g->rc[top] = copy_ins(g, top, ops, g->rc_tag);
  }
  if (ops != small) free(ops);
  return g->st == JIT_OK ? g->rc[r] : IR_NOREF;
}

/* ---- VJP rules --------------------------------------------------------------------------------- */

/* max/min: the cotangent goes to the operand equal to the result, half to each on a tie. The
   operands alone decide which (max: self == y exactly when self >= other, NaNs and signed zeros
   included, since a NaN operand makes y NaN), so the backward pass does not read y: a relu's
   gradient reads its input, not also its output. */
static void vjp_minmax(grad *g, const ir_ins *in, ir_ref ct) {
  for (int k = 0; k < 2; k++) {
    ir_ref self = in->args[k], other = in->args[1 - k];
    if (!g->dep[self]) continue;
    ir_ref xs = primal(g, self), xo = primal(g, other);
    ir_ref one = cst_like(g, ct, 1), half = cst_like(g, ct, 0.5), zero = cst_like(g, ct, 0);
    jit_cmp_op wins = in->op == IR_MAX ? JIT_GT : JIT_LT;
    ir_ref w = sel(g, cmp(g, wins, xs, xo), one, sel(g, cmp(g, JIT_EQ, xs, xo), half, zero));
    accum(g, self, bin(g, IR_MUL, ct, w));
  }
}

static void vjp_pow(grad *g, const ir_ins *in, ir_ref ct, ir_ref y) {
  ir_ref a = primal(g, in->args[0]), b = primal(g, in->args[1]);
  ir_ref zero = cst_like(g, ct, 0), one = cst_like(g, ct, 1);
  if (g->dep[in->args[0]]) { /* b * a^(b-1), 0 where b == 0 */
    ir_ref jac = bin(g, IR_MUL, b, bin(g, IR_POW, a, bin(g, IR_SUB, b, one)));
    accum(g, in->args[0], bin(g, IR_MUL, ct, sel(g, cmp(g, JIT_EQ, b, zero), zero, jac)));
  }
  if (g->dep[in->args[1]]) { /* log(a) * a^b, with log(1) where a == 0 */
    ir_ref safe = sel(g, cmp(g, JIT_EQ, a, zero), one, a);
    accum(g, in->args[1], bin(g, IR_MUL, ct, bin(g, IR_MUL, un(g, IR_LOG, safe), y)));
  }
}

/* atan2(a, b): (b, -a) / (a^2 + b^2). */
static void vjp_atan2(grad *g, const ir_ins *in, ir_ref ct) {
  ir_ref a = primal(g, in->args[0]), b = primal(g, in->args[1]);
  ir_ref q = bin(g, IR_DIV, ct, bin(g, IR_ADD, bin(g, IR_MUL, a, a), bin(g, IR_MUL, b, b)));
  if (g->dep[in->args[0]]) accum(g, in->args[0], bin(g, IR_MUL, q, b));
  if (g->dep[in->args[1]]) accum(g, in->args[1], un(g, IR_NEG, bin(g, IR_MUL, q, a)));
}

/* rem(a, b) = a - b trunc(a/b): 1 for a, -trunc(a/b) = -sign(a/b) floor(abs(a/b)) for b (JAX's
   rule). */
static void vjp_rem(grad *g, const ir_ins *in, ir_ref ct) {
  accum(g, in->args[0], ct);
  if (!g->dep[in->args[1]]) return;
  ir_ref q = bin(g, IR_DIV, primal(g, in->args[0]), primal(g, in->args[1]));
  ir_ref t = bin(g, IR_MUL, un(g, IR_SIGN, q), un(g, IR_FLOOR, un(g, IR_ABS, q)));
  accum(g, in->args[1], un(g, IR_NEG, bin(g, IR_MUL, ct, t)));
}

/* clamp(lo, x, hi), JAX's rule: x gets ct where lo < x < hi, lo where lo > x and lo < hi, hi
   where hi < x. */
static void vjp_clamp(grad *g, const ir_ins *in, ir_ref ct) {
  ir_ref lo = primal(g, in->args[0]), x = primal(g, in->args[1]), hi = primal(g, in->args[2]);
  ir_ref zero = cst_like(g, ct, 0);
  if (g->dep[in->args[0]])
    accum(g, in->args[0],
          sel(g, bin(g, IR_AND, cmp(g, JIT_GT, lo, x), cmp(g, JIT_LT, lo, hi)), ct, zero));
  if (g->dep[in->args[1]])
    accum(g, in->args[1],
          sel(g, bin(g, IR_AND, cmp(g, JIT_GT, x, lo), cmp(g, JIT_LT, x, hi)), ct, zero));
  if (g->dep[in->args[2]]) accum(g, in->args[2], sel(g, cmp(g, JIT_LT, hi, x), ct, zero));
}

/* broadcast: sum over the result dims the operand lacks or stretched from 1, then reshape. */
static void vjp_broadcast(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_type *x = &g->body->types[g->body->ins[in->args[0]].ty];
  const ir_type *r = &g->body->types[in->ty];
  bool keep[IR_MAX_RANK] = {false};
  for (int i = 0; i < in->attr.dims.n; i++)
    if (x->dims[i] == r->dims[in->attr.dims.d[i]]) keep[in->attr.dims.d[i]] = true;
  int axes[IR_MAX_RANK], n = 0;
  for (int j = 0; j < r->rank; j++)
    if (!keep[j]) axes[n++] = j;
  accum(g, in->args[0], reshape(g, reduce_sum(g, ct, n, axes), x->rank, x->dims));
}

/* slice: the cotangent scattered back into zeros, dim by dim: a stride s > 1 interleaves s-1
   zero rows after each row (reshape, concat, reshape, slice: no scatter op needed), then zero
   blocks pad the front and the back. */
static void vjp_slice(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_type *x = &g->body->types[g->body->ins[in->args[0]].ty];
  const ir_slice *s = &in->attr.slice;
  ir_ref c = ct;
  if (ir_type_numel(&g->body->types[in->ty]) == 0) return; /* nothing flows back */
  for (int d = 0; d < x->rank && g->st == JIT_OK; d++) {
    ir_type t = type_of(g, c);
    int64_t m = t.dims[d], span = m;
    if (s->stride[d] > 1 && m > 1) {
      int64_t before = 1, after = 1, st = s->stride[d];
      for (int i = 0; i < d; i++) before *= t.dims[i];
      for (int i = d + 1; i < t.rank; i++) after *= t.dims[i];
      int64_t d4[4] = {before, m, 1, after}, d3[3] = {before, m * st, after};
      ir_ref r4 = reshape(g, c, 4, d4);
      ir_type z = type_of(g, r4);
      z.dims[2] = st - 1;
      ir_ref parts[2] = {r4, cst(g, &z, 0)};
      ir_attr at = {0};
      at.axis = 2;
      ir_ref wide = reshape(g, emit(g, IR_CONCAT, 2, parts, &at, NULL), 3, d3);
      span = (m - 1) * st + 1;
      ir_ref cut = slice_axis(g, wide, 1, 0, span);
      t.dims[d] = span;
      c = reshape(g, cut, t.rank, t.dims);
    }
    c = pad_axis(g, c, d, s->start[d], x->dims[d] - s->start[d] - span);
  }
  accum(g, in->args[0], c);
}

static void vjp_concat(grad *g, const ir_ins *in, ir_ref ct) {
  int axis = (int)in->attr.axis;
  int64_t off = 0;
  for (uint32_t k = 0; k < in->n_args; k++) {
    int64_t n = g->body->types[g->body->ins[in->args[k]].ty].dims[axis];
    if (g->dep[in->args[k]]) accum(g, in->args[k], slice_axis(g, ct, axis, off, off + n));
    off += n;
  }
}

/* ---- gather, scatter, pad, rev (JAX's transposes in lax/slicing.py and lax.py) ------------------ */

static const ir_type *body_type(const grad *g, ir_ref r) { return &g->body->types[g->body->ins[r].ty]; }

/* a summed over all its dims. */
static ir_ref sum_all(grad *g, ir_ref a) {
  int axes[IR_MAX_RANK], n = type_of(g, a).rank;
  for (int i = 0; i < n; i++) axes[i] = i;
  return reduce_sum(g, a, n, axes);
}

/* The gather that reads the windows a scatter with dimension numbers s writes, updates of type
   ut; the attributes into *out. */
static void gather_of_scatter(const ir_gather *s, const ir_type *x, const ir_type *ut, ir_attr *out) {
  memset(out, 0, sizeof *out);
  out->gather = *s;
  out->gather.combine = 0;
  for (int d = 0, w = 0; d < x->rank; d++) {
    bool inserted = false;
    for (int k = 0; k < s->collapsed.n; k++) inserted |= s->collapsed.d[k] == d;
    out->gather.sizes[d] = inserted ? 1 : ut->dims[s->offset_dims.d[w++]];
  }
}

/* gather: the cotangent added back into zeros at the windows it read, with the same mode (a
   clamped window is clamped again, a filled one dropped). */
static void vjp_gather(grad *g, const ir_ins *in, ir_ref ct) {
  ir_attr at = {0};
  at.gather = in->attr.gather;
  memset(at.gather.sizes, 0, sizeof at.gather.sizes);
  at.gather.combine = IR_COMBINE_ADD;
  ir_ref args[3] = {cst(g, body_type(g, in->args[0]), 0), primal(g, in->args[1]), ct};
  accum(g, in->args[0], emit(g, IR_SCATTER, 3, args, &at, NULL));
}

/* A gather of one element per row along one axis (take_along_axis with one index a row: a
   cross-entropy's label): the operand's cotangent is the row's cotangent where the axis position
   is the clamped index and 0 elsewhere, a select its readers fuse, rather than a scatter into
   zeros the size of the operand (W10's logits: 16 MiB written and read once). The same values: a
   scatter-add of one update per position into +0 adds 0 + ct, which only differs on a -0 (the
   x + 0 -> x caveat of canonicalize.c). The indices as take_along_axis emits them: along the
   index dim, the axis index, then an iota over each other dim of the operand longer than 1. */
static bool vjp_take_along(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_gather *ga = &in->attr.gather;
  const ir_type *xt = body_type(g, in->args[0]), *it = body_type(g, in->args[1]);
  const ir_ins *ix = &g->body->ins[in->args[1]];
  int r = xt->rank;
  if (ga->mode != IR_INDEX_CLIP || ga->offset_dims.n || ga->collapsed.n != r || r < 1 ||
      it->rank != r + 1 || ga->index_dim != r || it->dims[r] != ga->start_map.n ||
      !ir_dtype_is_float(xt->dtype))
    return false;
  int ax = ga->start_map.d[0], n_long = 0;
  const ir_ref *parts = ix->op == IR_CONCAT ? ix->args : &in->args[1];
  uint32_t n = ix->op == IR_CONCAT ? ix->n_args : 1;
  if (n != ga->start_map.n || it->dims[ax] != 1 || (ix->op == IR_CONCAT && ix->attr.axis != r))
    return false;
  for (int d = 0; d < r; d++) {
    if (d != ax && it->dims[d] != xt->dims[d]) return false;
    n_long += d != ax && xt->dims[d] > 1;
  }
  if (n != (uint32_t)n_long + 1 || body_type(g, parts[0])->dims[r] != 1) return false;
  for (uint32_t k = 1; k < n; k++) {
    const ir_ins *p = &g->body->ins[parts[k]];
    if (p->op != IR_IOTA || p->attr.axis != ga->start_map.d[k] || ga->start_map.d[k] == ax ||
        xt->dims[ga->start_map.d[k]] == 1 || body_type(g, parts[k])->dims[r] != 1)
      return false;
  }
  int kept[IR_MAX_RANK], nk = 0;
  int64_t kd[IR_MAX_RANK];
  for (int d = 0; d < r; d++)
    if (d != ax) kept[nk] = d, kd[nk++] = xt->dims[d];
  ir_ref idx = reshape(g, primal(g, parts[0]), nk, kd);
  if (g->st != JIT_OK) return true;
  ir_type ti = type_of(g, idx), xi = *xt;
  xi.dtype = ti.dtype;
  idx = bin(g, IR_MAX, bin(g, IR_MIN, idx, cst(g, &ti, (double)(xt->dims[ax] - 1))), cst(g, &ti, 0));
  ir_attr along = {0};
  along.axis = ax;
  ir_ref hit = cmp(g, JIT_EQ, emit(g, IR_IOTA, 0, NULL, &along, &xi), broadcast(g, idx, nk, kept, &xi));
  ir_ref row_ct = broadcast(g, reshape(g, ct, nk, kd), nk, kept, xt);
  accum(g, in->args[0], sel(g, hit, row_ct, cst(g, xt, 0)));
  return true;
}

/* scatter-add: the operand's cotangent passes through, each update's is read back at its
   window. scatter-set: only the update that won a position gets its cotangent (found, as JAX
   does, by scattering the updates' ids the same way and reading them back), and the operand's
   is zero where it was overwritten. */
static void vjp_scatter(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_type *x = body_type(g, in->args[0]), *ut = body_type(g, in->args[2]);
  ir_ref idx = primal(g, in->args[1]), u = in->args[2];
  ir_attr ga;
  gather_of_scatter(&in->attr.gather, x, ut, &ga);
  ir_ref read[2] = {ct, idx};
  if (in->attr.gather.combine == IR_COMBINE_ADD) {
    accum(g, in->args[0], ct);
    if (g->dep[u]) accum(g, u, emit(g, IR_GATHER, 2, read, &ga, NULL));
    return;
  }
  jit_dtype it = ir_type_numel(ut) < INT32_MAX ? JIT_I32 : JIT_I64;
  int64_t n = ir_type_numel(ut);
  ir_type flat = {.dtype = it, .rank = 1, .dims = {n}}, xi = *x;
  xi.dtype = it;
  ir_attr io = {0};
  ir_ref ids = emit(g, IR_IOTA, 0, NULL, &io, &flat);
  ids = reshape(g, bin(g, IR_ADD, ids, cst(g, &flat, 1)), ut->rank, ut->dims); /* 1..n */
  ir_ref sargs[3] = {cst(g, &xi, 0), idx, ids};
  ir_attr sa = {0};
  sa.gather = in->attr.gather;
  ir_ref won = emit(g, IR_SCATTER, 3, sargs, &sa, NULL);
  if (g->dep[in->args[0]])
    accum(g, in->args[0], sel(g, cmp(g, JIT_EQ, won, cst_like(g, won, 0)), ct, cst_like(g, ct, 0)));
  if (g->dep[u]) {
    ir_ref back[2] = {won, idx};
    ir_ref mine = cmp(g, JIT_EQ, emit(g, IR_GATHER, 2, back, &ga, NULL), ids);
    ir_ref got = emit(g, IR_GATHER, 2, read, &ga, NULL);
    accum(g, u, sel(g, mine, got, cst_like(g, got, 0)));
  }
}

/* pad: the cotangent cropped back (a pad by -lo, -hi) and strided past the interior; the pad
   value's is everything else. */
static void vjp_pad(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_type *x = body_type(g, in->args[0]);
  const ir_pad *p = &in->attr.pad;
  ir_attr un_pad = {0}, sl = {0};
  for (int d = 0; d < x->rank; d++) {
    un_pad.pad.lo[d] = -p->lo[d];
    un_pad.pad.hi[d] = -p->hi[d];
    sl.slice.limit[d] = x->dims[d] ? (x->dims[d] - 1) * (p->interior[d] + 1) + 1 : 0;
    sl.slice.stride[d] = p->interior[d] + 1;
  }
  ir_ref args[2] = {ct, cst(g, body_type(g, in->args[1]), 0)};
  ir_ref cropped = emit(g, IR_PAD, 2, args, &un_pad, NULL);
  ir_ref dx = emit(g, IR_SLICE, 1, &cropped, &sl, NULL);
  if (g->dep[in->args[0]]) accum(g, in->args[0], dx);
  if (g->dep[in->args[1]]) accum(g, in->args[1], bin(g, IR_SUB, sum_all(g, ct), sum_all(g, dx)));
}

/* The dims of x kept by a reduction over axes (increasing). */
static int kept_dims(const ir_type *x, const ir_dims *axes, int *out) {
  int n = 0;
  for (int i = 0, k = 0; i < x->rank; i++) {
    if (k < axes->n && axes->d[k] == i)
      k++;
    else
      out[n++] = i;
  }
  return n;
}

/* reduce_prod: each element's cotangent is ct times the product of the others, which is
   prod / x without zeros, the product of the non-zeros at a lone zero, and 0 where two or more
   elements of the group are zero (what JAX's exclusive-cumprod rule computes). */
static void vjp_prod(grad *g, const ir_ins *in, ir_ref ct, int nk, const int *kept, ir_type *xt) {
  ir_ref xv = primal(g, in->args[0]);
  ir_ref zero = cst_like(g, xv, 0), one = cst_like(g, xv, 1);
  ir_ref is0 = cmp(g, JIT_EQ, xv, zero);
  ir_ref nz = sel(g, is0, one, xv);
  ir_attr at = {0};
  at.dims = in->attr.dims;
  ir_ref p = broadcast(g, emit(g, IR_REDUCE_PROD, 1, &nz, &at, NULL), nk, kept, xt);
  int axes[IR_MAX_RANK];
  for (int i = 0; i < in->attr.dims.n; i++) axes[i] = in->attr.dims.d[i];
  ir_ref z = broadcast(g, reduce_sum(g, convert(g, is0, xt->dtype), in->attr.dims.n, axes), nk,
                       kept, xt);
  ir_ref at_zero = sel(g, is0, sel(g, cmp(g, JIT_EQ, z, one), p, zero), zero);
  ir_ref others = sel(g, cmp(g, JIT_EQ, z, zero), bin(g, IR_DIV, p, nz), at_zero);
  accum(g, in->args[0], bin(g, IR_MUL, broadcast(g, ct, nk, kept, xt), others));
}

/* sort: the cotangent of the sorted operand, put back where each element came from. The
   permutation is the keys' sort of an iota; sorting ct by the permutation inverts it (no
   scatter needed). */
static void vjp_sort(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_sort *s = &in->attr.sort;
  ir_ref x = in->args[s->index];
  if (!g->dep[x]) return;
  ir_type it = type_of(g, ct);
  int64_t n = it.dims[in->attr.axis];
  it.dtype = n > INT32_MAX ? JIT_I64 : JIT_I32;
  ir_attr io = {0};
  io.axis = in->attr.axis;
  ir_ref keys[17];
  uint32_t nk = s->n_keys < 16 ? s->n_keys : 16;
  for (uint32_t k = 0; k < nk; k++) keys[k] = primal(g, in->args[k]);
  keys[nk] = emit(g, IR_IOTA, 0, NULL, &io, &it);
  ir_attr pa = {0};
  pa.axis = in->attr.axis;
  pa.sort = (ir_sort){(uint8_t)nk, (uint8_t)nk, s->descending};
  ir_ref perm = emit(g, IR_SORT, nk + 1, keys, &pa, NULL);
  ir_attr ua = {0};
  ua.axis = in->attr.axis;
  ua.sort = (ir_sort){1, 1, 0};
  ir_ref back[2] = {perm, ct};
  accum(g, x, emit(g, IR_SORT, 2, back, &ua, NULL));
}

static void vjp_reduce(grad *g, const ir_ins *in, ir_ref ct, ir_ref y) {
  const ir_type *x = &g->body->types[g->body->ins[in->args[0]].ty];
  ir_type xt = *x;
  int kept[IR_MAX_RANK];
  int nk = kept_dims(x, &in->attr.dims, kept);
  if (in->op == IR_REDUCE_SUM) {
    accum(g, in->args[0], broadcast(g, ct, nk, kept, &xt));
    return;
  }
  if (in->op == IR_REDUCE_PROD) {
    vjp_prod(g, in, ct, nk, kept, &xt);
    return;
  }
  /* max/min: an even share to every position equal to the result */
  ir_ref xv = primal(g, in->args[0]);
  ir_ref hit = convert(g, cmp(g, JIT_EQ, xv, broadcast(g, y, nk, kept, &xt)), xt.dtype);
  int axes[IR_MAX_RANK];
  for (int i = 0; i < in->attr.dims.n; i++) axes[i] = in->attr.dims.d[i];
  ir_ref count = reduce_sum(g, hit, in->attr.dims.n, axes);
  ir_ref share = broadcast(g, bin(g, IR_DIV, ct, count), nk, kept, &xt);
  accum(g, in->args[0], bin(g, IR_MUL, share, hit));
}

/* dot: each operand's cotangent is a dot of the result's cotangent with the other operand,
   batch dims kept as batch dims. The lhs's is dot(ct, rhs) and the rhs's dot(lhs, ct), as JAX
   does, so that for a plain matmul both come out in the operand's layout; otherwise a transpose
   puts the dims back in place. */
static void vjp_dot(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_dot_dims *d = &in->attr.dot;
  int nb = d->n_batch, nc = d->n_contract;
  for (int side = 0; side < 2; side++) {
    ir_ref self = in->args[side], other = in->args[1 - side];
    if (!g->dep[self]) continue;
    const ir_type *st = &g->body->types[g->body->ins[self].ty];
    const ir_type *ot = &g->body->types[g->body->ins[other].ty];
    const uint8_t *sb = side ? d->rhs_batch : d->lhs_batch, *ob = side ? d->lhs_batch : d->rhs_batch;
    const uint8_t *sc = side ? d->rhs_contract : d->lhs_contract;
    const uint8_t *oc = side ? d->lhs_contract : d->rhs_contract;
    /* free dims of each side, increasing; ct is [batch, lhs free, rhs free] */
    bool sused[IR_MAX_RANK] = {false}, oused[IR_MAX_RANK] = {false};
    for (int i = 0; i < nb; i++) sused[sb[i]] = oused[ob[i]] = true;
    for (int i = 0; i < nc; i++) sused[sc[i]] = oused[oc[i]] = true;
    int sfree[IR_MAX_RANK], ofree[IR_MAX_RANK], nsf = 0, nof = 0;
    for (int i = 0; i < st->rank; i++)
      if (!sused[i]) sfree[nsf++] = i;
    for (int i = 0; i < ot->rank; i++)
      if (!oused[i]) ofree[nof++] = i;
    int other_at = side ? nb : nb + nsf; /* where other's free dims sit in ct */
    /* batch ct[i] x other[ob[i]]; contract ct's other-free dims with other's free dims */
    uint8_t cb[IR_MAX_RANK], ccon[IR_MAX_RANK], obat[IR_MAX_RANK], ocon[IR_MAX_RANK];
    for (int i = 0; i < nb; i++) {
      cb[i] = (uint8_t)i;
      obat[i] = ob[i];
    }
    for (int k = 0; k < nof; k++) {
      ccon[k] = (uint8_t)(other_at + k);
      ocon[k] = (uint8_t)ofree[k];
    }
    ir_attr at = {0};
    at.dot.n_batch = (uint8_t)nb;
    at.dot.n_contract = (uint8_t)nof;
    memcpy(side ? at.dot.rhs_batch : at.dot.lhs_batch, cb, (size_t)nb);
    memcpy(side ? at.dot.lhs_batch : at.dot.rhs_batch, obat, (size_t)nb);
    memcpy(side ? at.dot.rhs_contract : at.dot.lhs_contract, ccon, (size_t)nof);
    memcpy(side ? at.dot.lhs_contract : at.dot.rhs_contract, ocon, (size_t)nof);
    ir_ref po = primal(g, other);
    ir_ref x[2] = {side ? po : ct, side ? ct : po};
    ir_ref r = emit(g, IR_DOT, 2, x, &at, NULL);
    /* r is [batch, self free, other's contract dims in increasing order] for the lhs, and
       [batch, other's contract dims in increasing order, self free] for the rhs */
    int pos[IR_MAX_RANK];
    for (int i = 0; i < nb; i++) pos[sb[i]] = i;
    for (int k = 0; k < nsf; k++) pos[sfree[k]] = nb + (side ? nc : 0) + k;
    for (int i = 0; i < nc; i++) {
      int q = 0; /* rank of oc[i] among other's contract dims */
      for (int j = 0; j < nc; j++) q += oc[j] < oc[i];
      pos[sc[i]] = nb + (side ? 0 : nsf) + q;
    }
    accum(g, self, transpose(g, r, st->rank, pos));
  }
}

/* JAX's _reshape_axis_out_of: dim src of a (size n * m) split into (n, m) at src, n major. */
static ir_ref split_axis(grad *g, ir_ref a, int src, int64_t n) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a);
  int64_t d[IR_MAX_RANK];
  for (int i = 0, j = 0; i < t.rank; i++) {
    if (i == src) {
      d[j++] = n;
      d[j++] = t.dims[i] / n;
    } else {
      d[j++] = t.dims[i];
    }
  }
  return reshape(g, a, t.rank + 1, d);
}

/* JAX's _reshape_axis_into: dim src of a merged into dim dst (an index once src is removed), src
   the major part. */
static ir_ref merge_axis(grad *g, ir_ref a, int src, int dst) {
  if (g->st != JIT_OK) return IR_NOREF;
  ir_type t = type_of(g, a);
  int perm[IR_MAX_RANK], n = 0;
  int64_t d[IR_MAX_RANK] = {0};
  for (int i = 0; i < t.rank; i++)
    if (i != src) perm[n++] = i;
  for (int i = n; i > dst; i--) perm[i] = perm[i - 1];
  perm[dst] = src;
  for (int i = 0, j = 0; i < t.rank; i++)
    if (i != src) d[j++] = t.dims[i];
  d[dst] *= t.dims[src];
  return reshape(g, transpose(g, a, t.rank, perm), t.rank - 1, d);
}

/* XLA's conv VJPs (ir_conv_vjp_attrs): the lhs's through a conv of ct with the reversed kernel,
   the rhs's through a conv of the lhs with ct. */
static void vjp_conv(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_conv *c = &in->attr.conv;
  const ir_type *lt = body_type(g, in->args[0]), *rt = body_type(g, in->args[1]);
  ir_type ot = type_of(g, ct);
  if (ir_type_numel(&ot) == 0) return; /* no cotangent flows (JAX's Zero) */
  ir_attr fl = {0}, fr = {0};
  ir_conv_vjp_attrs(c, lt, rt, &ot, &fl.conv, &fr.conv);
  int rank = lt->rank;
  if (g->dep[in->args[0]]) {
    ir_ref w = primal(g, in->args[1]);
    int64_t groups = c->groups > 1 ? c->groups : c->batch_groups;
    if (groups > 1) w = merge_axis(g, split_axis(g, w, c->rhs[0], groups), c->rhs[0], c->rhs[1]);
    ir_attr rv = {0};
    for (int d = 0; d < rank; d++) /* the kernel's spatial dims, increasing */
      for (int i = 2; i < rank; i++)
        if (c->rhs[i] == d) rv.dims.d[rv.dims.n++] = (uint8_t)d;
    w = emit(g, IR_REV, 1, &w, &rv, NULL);
    ir_ref x[2] = {ct, w};
    ir_ref dl = emit(g, IR_CONV, 2, x, &fl, NULL);
    if (c->batch_groups > 1) dl = merge_axis(g, split_axis(g, dl, c->lhs[1], c->batch_groups), c->lhs[1], c->lhs[0]);
    accum(g, in->args[0], dl);
  }
  if (g->dep[in->args[1]]) {
    ir_ref x[2] = {primal(g, in->args[0]), ct};
    accum(g, in->args[1], emit(g, IR_CONV, 2, x, &fr, NULL));
  }
}

/* reduce_window's VJPs: a sum's cotangent spread back by a window sum over it padded (JAX's
   transpose rule: interior padding for the strides); a max's or min's scattered to the element
   each window selected (select_and_scatter_add). */
static void vjp_reduce_window(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_window *w = &in->attr.window;
  const ir_type *xt = body_type(g, in->args[0]);
  ir_type ot = type_of(g, ct);
  if (w->kind != JIT_WINDOW_SUM) {
    ir_ref x[2] = {primal(g, in->args[0]), ct};
    accum(g, in->args[0], emit(g, IR_SELECT_SCATTER, 2, x, &in->attr, NULL));
    return;
  }
  ir_attr pa = {0}, sa = {0};
  sa.window.kind = JIT_WINDOW_SUM;
  for (int d = 0; d < xt->rank; d++) {
    int64_t lo = w->size[d] - 1 - w->pad_lo[d];
    pa.pad.lo[d] = lo;
    pa.pad.hi[d] = xt->dims[d] + w->size[d] - 1 - ir_dilate(ot.dims[d], w->stride[d]) - lo;
    pa.pad.interior[d] = ot.dims[d] ? w->stride[d] - 1 : 0;
    sa.window.size[d] = w->size[d];
    sa.window.stride[d] = 1;
  }
  ir_ref x[2] = {ct, cst(g, &(ir_type){.dtype = ot.dtype}, 0)};
  ir_ref padded = emit(g, IR_PAD, 2, x, &pa, NULL);
  accum(g, in->args[0], emit(g, IR_REDUCE_WINDOW, 1, &padded, &sa, NULL));
}

/* The cotangents of scan or cond i's results (summed over its GETs), then its backward. */
static void vjp_bodied(grad *g, ir_ref i) {
  const ir_ins *in = &g->body->ins[i];
  const ir_func *b = ir_body(g->body, in);
  ir_ref *ctr = malloc((b->n_results + 1) * sizeof *ctr), *ops = malloc((in->n_args + 1) * sizeof *ops);
  ir_ref *cto = malloc((in->n_args + 1) * sizeof *cto);
  if (!ctr || !ops || !cto) {
    g->st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t k = 0; k < b->n_results; k++) ctr[k] = IR_NOREF;
  /* the scan and cond rules differentiate float operands only: refuse rather than drop a
     complex value's cotangent */
  for (uint32_t k = 0; k < in->n_args; k++)
    if (ir_dtype_is_complex(g->body->types[g->body->ins[in->args[k]].ty].dtype) && g->dep[in->args[k]]) {
      g->st = jit_error(JIT_EUNSUPPORTED, "%s: %s of complex values has no gradient rule yet", who,
                        ir_op_name[in->op]);
      goto done;
    }
  for (ir_ref u = i + 1; u < g->body->n_ins; u++) {
    const ir_ins *gu = &g->body->ins[u];
    if (gu->op != IR_GET || gu->args[0] != i || g->ct[u] == IR_NOREF) continue;
    uint32_t k = (uint32_t)gu->attr.axis;
    ctr[k] = ctr[k] == IR_NOREF ? g->ct[u] : bin(g, IR_ADD, ctr[k], g->ct[u]);
  }
  for (uint32_t k = 0; k < in->n_args; k++) ops[k] = primal(g, in->args[k]);
  ir_ref fwd = in->op == IR_SCAN ? primal(g, i) : IR_NOREF; /* a cond recomputes its branch */
  if (g->st != JIT_OK) goto done;
  g->st = in->op == IR_SCAN ? ir_scan_vjp(g->dst, g->body, in, ops, fwd, ctr, cto, g->loc)
                            : ir_cond_vjp(g->dst, g->body, in, ops, ctr, cto, g->loc);
  for (uint32_t k = 0; k < in->n_args && g->st == JIT_OK; k++)
    if (cto[k] != IR_NOREF && g->dep[in->args[k]]) accum(g, in->args[k], cto[k]);
done:
  free(ctr);
  free(ops);
  free(cto);
}

/* Complex values follow JAX's convention: VJPs are the transposes of the linear maps without
   conjugation (so the rules of mul, div, exp, log, sqrt, dot hold for complex operands as they
   are), and the gradient of a real loss of z is dL/dx - i dL/dy. abs(z) (real) gets
   ct conj(z) / |z|: grad(abs)(3+4j) = 0.6-0.8j, as jax.grad gives. */
/* JAX's _fft_transpose_rule: FFT and IFFT are symmetric linear maps (their own transposes, no
   conjugation); RFFT's transpose is that of x -> fft(complex(x))[..., :n/2+1]: real(fft(ct
   padded with zeros to n)); IRFFT's is conj(rfft(ct) * mask / prod(lengths)), the mask 2 on the
   terms the half spectrum stands for twice (all but the DC and, for even n, the Nyquist term). */
static void vjp_fft(grad *g, const ir_ins *in, ir_ref ct) {
  const ir_fft *a = &in->attr.fft;
  ir_ref x0 = in->args[0];
  int64_t n = a->lengths[a->n_dims - 1], h = n / 2 + 1;
  if (a->type == IR_FFT_C2C || a->type == IR_IFFT_C2C) {
    accum(g, x0, emit(g, IR_FFT, 1, &ct, &in->attr, NULL));
    return;
  }
  if (a->type == IR_RFFT_R2C) {
    int last = type_of(g, ct).rank - 1;
    ir_attr fa = in->attr;
    fa.fft.type = IR_FFT_C2C;
    ir_ref padded = pad_axis(g, ct, last, 0, n - h);
    accum(g, x0, un(g, IR_REAL, emit(g, IR_FFT, 1, &padded, &fa, NULL)));
    return;
  }
  ir_attr ra = in->attr;
  ra.fft.type = IR_RFFT_R2C;
  ir_ref y = emit(g, IR_FFT, 1, &ct, &ra, NULL);
  if (g->st != JIT_OK) return;
  ir_type t = type_of(g, y);
  int last = t.rank - 1;
  int64_t odd = n % 2, widths[3] = {1, h - 2 + odd, 1 - odd};
  double values[3] = {1, 2, 1};
  ir_ref parts[3];
  uint32_t np = 0;
  for (int k = 0; k < 3; k++) {
    if (widths[k] <= 0) continue;
    t.dims[last] = widths[k];
    parts[np++] = cst(g, &t, values[k]);
  }
  ir_attr ca = {0};
  ca.axis = last;
  ir_ref mask = np == 1 ? parts[0] : emit(g, IR_CONCAT, np, parts, &ca, NULL);
  double scale = 1;
  for (int k = 0; k < a->n_dims; k++) scale *= (double)a->lengths[k];
  ir_ref scaled = bin(g, IR_MUL, bin(g, IR_MUL, y, mask), cst_like(g, y, 1 / scale));
  accum(g, x0, un(g, IR_CONJ, scaled));
}

static void vjp_complex_abs(grad *g, const ir_ins *in, ir_ref i, ir_ref ct) {
  ir_ref z = primal(g, in->args[0]);
  ir_ref q = bin(g, IR_DIV, ct, primal(g, i));
  ir_ref re = bin(g, IR_MUL, un(g, IR_REAL, z), q);
  ir_ref im = un(g, IR_NEG, bin(g, IR_MUL, un(g, IR_IMAG, z), q));
  accum(g, in->args[0], bin(g, IR_COMPLEX, re, im));
}

static void vjp(grad *g, ir_ref i) {
  const ir_ins *in = &g->body->ins[i];
  ir_ref ct = g->ct[i];
  ir_ref x0 = in->args ? in->args[0] : IR_NOREF;
  switch (in->op) {
  case IR_NEG: accum(g, x0, un(g, IR_NEG, ct)); break;
  case IR_ABS: {
    if (ir_dtype_is_complex(g->body->types[g->body->ins[x0].ty].dtype)) {
      vjp_complex_abs(g, in, i, ct);
      break;
    }
    ir_ref x = primal(g, x0), zero = cst_like(g, ct, 0);
    ir_ref neg = sel(g, cmp(g, JIT_LT, x, zero), un(g, IR_NEG, ct), zero);
    accum(g, x0, sel(g, cmp(g, JIT_GT, x, zero), ct, neg));
    break;
  }
  case IR_EXP: accum(g, x0, bin(g, IR_MUL, ct, primal(g, i))); break;
  case IR_LOG: accum(g, x0, bin(g, IR_DIV, ct, primal(g, x0))); break;
  case IR_SQRT:
    accum(g, x0, bin(g, IR_DIV, bin(g, IR_MUL, ct, cst_like(g, ct, 0.5)), primal(g, i)));
    break;
  case IR_RSQRT: { /* -0.5 * y / x */
    ir_ref d = bin(g, IR_DIV, primal(g, i), primal(g, x0));
    accum(g, x0, bin(g, IR_MUL, ct, bin(g, IR_MUL, cst_like(g, ct, -0.5), d)));
    break;
  }
  case IR_TANH: {
    ir_ref y = primal(g, i);
    accum(g, x0, bin(g, IR_MUL, ct, bin(g, IR_SUB, cst_like(g, ct, 1), bin(g, IR_MUL, y, y))));
    break;
  }
  case IR_LOGISTIC: {
    ir_ref y = primal(g, i);
    ir_ref d = bin(g, IR_MUL, y, bin(g, IR_SUB, cst_like(g, ct, 1), y));
    accum(g, x0, bin(g, IR_MUL, ct, d));
    break;
  }
  case IR_SIN: accum(g, x0, bin(g, IR_MUL, ct, un(g, IR_COS, primal(g, x0)))); break;
  case IR_COS: accum(g, x0, un(g, IR_NEG, bin(g, IR_MUL, ct, un(g, IR_SIN, primal(g, x0))))); break;
  case IR_ERF: { /* 2/sqrt(pi) exp(-x^2) */
    ir_ref x = primal(g, x0);
    ir_ref e = un(g, IR_EXP, un(g, IR_NEG, bin(g, IR_MUL, x, x)));
    accum(g, x0, bin(g, IR_MUL, ct, bin(g, IR_MUL, cst_like(g, ct, 1.1283791670955126), e)));
    break;
  }
  case IR_LOG1P:
    accum(g, x0, bin(g, IR_DIV, ct, bin(g, IR_ADD, primal(g, x0), cst_like(g, ct, 1))));
    break;
  case IR_EXPM1:
    accum(g, x0, bin(g, IR_MUL, ct, bin(g, IR_ADD, primal(g, i), cst_like(g, ct, 1))));
    break;
  case IR_ERF_INV: { /* sqrt(pi)/2 exp(y^2) */
    ir_ref y = primal(g, i);
    ir_ref e = un(g, IR_EXP, bin(g, IR_MUL, y, y));
    accum(g, x0, bin(g, IR_MUL, ct, bin(g, IR_MUL, cst_like(g, ct, 0.88622692545275801), e)));
    break;
  }
  case IR_ATAN2: vjp_atan2(g, in, ct); break;
  case IR_REM: vjp_rem(g, in, ct); break;
  case IR_CLAMP: vjp_clamp(g, in, ct); break;
  case IR_CONVERT: /* float -> float (dep is false through ints and bool) */
    accum(g, x0, convert(g, ct, g->body->types[g->body->ins[x0].ty].dtype));
    break;
  case IR_ADD:
    accum(g, x0, ct);
    accum(g, in->args[1], ct);
    break;
  case IR_SUB:
    accum(g, x0, ct);
    if (g->dep[in->args[1]]) accum(g, in->args[1], un(g, IR_NEG, ct));
    break;
  case IR_MUL:
    if (g->dep[x0]) accum(g, x0, bin(g, IR_MUL, ct, primal(g, in->args[1])));
    if (g->dep[in->args[1]]) accum(g, in->args[1], bin(g, IR_MUL, primal(g, x0), ct));
    break;
  case IR_DIV: {
    ir_ref b = primal(g, in->args[1]);
    if (g->dep[x0]) accum(g, x0, bin(g, IR_DIV, ct, b));
    if (g->dep[in->args[1]]) { /* -ct * a / b^2 */
      ir_ref num = bin(g, IR_MUL, un(g, IR_NEG, ct), primal(g, x0));
      accum(g, in->args[1], bin(g, IR_DIV, num, bin(g, IR_MUL, b, b)));
    }
    break;
  }
  case IR_MAX:
  case IR_MIN: vjp_minmax(g, in, ct); break;
  case IR_POW: vjp_pow(g, in, ct, primal(g, i)); break;
  case IR_SELECT: {
    ir_ref p = primal(g, x0), zero = cst_like(g, ct, 0);
    if (g->dep[in->args[1]]) accum(g, in->args[1], sel(g, p, ct, zero));
    if (g->dep[in->args[2]]) accum(g, in->args[2], sel(g, p, zero, ct));
    break;
  }
  case IR_RESHAPE: {
    const ir_type *x = &g->body->types[g->body->ins[x0].ty];
    accum(g, x0, reshape(g, ct, x->rank, x->dims));
    break;
  }
  case IR_TRANSPOSE: {
    int inv[IR_MAX_RANK];
    for (int k = 0; k < in->attr.dims.n; k++) inv[in->attr.dims.d[k]] = k;
    accum(g, x0, transpose(g, ct, in->attr.dims.n, inv));
    break;
  }
  case IR_BROADCAST: vjp_broadcast(g, in, ct); break;
  case IR_SLICE: vjp_slice(g, in, ct); break;
  case IR_CONCAT: vjp_concat(g, in, ct); break;
  case IR_GATHER:
    if (!vjp_take_along(g, in, ct)) vjp_gather(g, in, ct);
    break;
  case IR_SCATTER: vjp_scatter(g, in, ct); break;
  case IR_PAD: vjp_pad(g, in, ct); break;
  case IR_REV: {
    ir_attr ra = {0};
    ra.dims = in->attr.dims;
    accum(g, x0, emit(g, IR_REV, 1, &ct, &ra, NULL));
    break;
  }
  case IR_SORT: vjp_sort(g, in, ct); break;
  case IR_REDUCE_SUM: vjp_reduce(g, in, ct, IR_NOREF); break;
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: vjp_reduce(g, in, ct, primal(g, i)); break;
  case IR_DOT: vjp_dot(g, in, ct); break;
  case IR_CONV: vjp_conv(g, in, ct); break;
  case IR_FFT: vjp_fft(g, in, ct); break;
  case IR_REDUCE_WINDOW: vjp_reduce_window(g, in, ct); break;
  case IR_SELECT_SCATTER:
    if (g->st == JIT_OK)
      g->st = jit_error(JIT_EUNSUPPORTED, "%s: select_and_scatter_add (a max-pool's VJP) has no VJP of its own yet", who);
    break;
  case IR_GET: /* marks its scan or cond: its rule gathers its GETs' cotangents */
    if (g->ct[x0] == IR_NOREF) g->ct[x0] = ct;
    break;
  case IR_SCAN:
  case IR_COND: vjp_bodied(g, i); break;
  case IR_REAL: accum(g, x0, bin(g, IR_COMPLEX, ct, cst_like(g, ct, 0))); break;
  case IR_IMAG: accum(g, x0, bin(g, IR_COMPLEX, cst_like(g, ct, 0), un(g, IR_NEG, ct))); break;
  case IR_CONJ: accum(g, x0, un(g, IR_CONJ, ct)); break;
  case IR_COMPLEX:
    if (g->dep[x0]) accum(g, x0, un(g, IR_REAL, ct));
    if (g->dep[in->args[1]]) accum(g, in->args[1], un(g, IR_NEG, un(g, IR_IMAG, ct)));
    break;
  case IR_SHARDING: /* the cotangent is laid out like the value, as JAX does */
    accum(g, x0, emit(g, IR_SHARDING, 1, &ct, &in->attr, NULL));
    break;
  default: break; /* param, const, iota, cmp, floor, ceil, round, sign: no cotangent flows */
  }
}

/* Whether a value of op computed from dependent operands carries a derivative. */
static bool differentiable(ir_op op) {
  switch (op) {
  case IR_PARAM:
  case IR_CONST:
  case IR_IOTA:
  case IR_CMP:
  case IR_FLOOR:
  case IR_CEIL:
  case IR_ROUND:
  case IR_SIGN: return false; /* piecewise constant: zero derivative, as JAX's */
  default: return true;
  }
}

/* ---- the transformation ------------------------------------------------------------------- */

static jit_status check(const ir_func *body, const bool *wrt, uint32_t n_aux) {
  if (body->n_results < 1 + (uint64_t)n_aux)
    return jit_error(JIT_EINVAL, "%s: the function has %u results, fewer than 1 + %u aux", who,
                     (unsigned)body->n_results, (unsigned)n_aux);
  bool any = false;
  for (uint32_t p = 0; p < body->n_params; p++) any |= wrt[p];
  if (!any) return jit_error(JIT_EINVAL, "%s: wrt_mask selects no argument", who);
  const ir_type *loss = ir_type_of(body, body->results[0]);
  char buf[96];
  if (loss->rank != 0) {
    ir_format_type(loss, buf, sizeof buf);
    return jit_error(JIT_ESHAPE, "%s: the loss (result 0) must be a scalar, got %s", who, buf);
  }
  if (!ir_dtype_is_float(loss->dtype)) {
    ir_format_type(loss, buf, sizeof buf);
    return jit_error(JIT_EDTYPE, "%s: the loss (result 0) must be a float, got %s", who, buf);
  }
  for (uint32_t p = 0; p < body->n_params; p++) {
    const ir_type *t = ir_type_of(body, p);
    if (wrt[p] && !ir_dtype_is_float(t->dtype) && !ir_dtype_is_complex(t->dtype)) {
      ir_format_type(t, buf, sizeof buf);
      return jit_error(JIT_EDTYPE, "%s: argument %u is %s: only float and complex arguments have gradients",
                       who, (unsigned)p, buf);
    }
  }
  return JIT_OK;
}

jit_status ir_value_and_grad_into(ir_func *dst, const ir_func *body, const ir_ref *args,
                                  uint64_t wrt_mask, uint32_t n_aux, ir_ref *results, ir_loc loc) {
  if (body->n_params < 64 && wrt_mask >> body->n_params)
    return jit_error(JIT_EINVAL, "%s: wrt_mask %#llx selects an argument past the %u given", who,
                     (unsigned long long)wrt_mask, (unsigned)body->n_params);
  bool small[64] = {0}, *wrt = body->n_params <= 64 ? small : calloc(body->n_params, sizeof *wrt);
  if (!wrt) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  for (uint32_t p = 0; p < body->n_params; p++) wrt[p] = p < 64 && (wrt_mask >> p & 1);
  jit_status st = ir_value_and_grad_sel(dst, body, args, wrt, n_aux, results, loc);
  if (wrt != small) free(wrt);
  return st;
}

jit_status ir_value_and_grad_sel(ir_func *dst, const ir_func *body, const ir_ref *args,
                                 const bool *wrt, uint32_t n_aux, ir_ref *results, ir_loc loc) {
  jit_status st = check(body, wrt, n_aux);
  if (st != JIT_OK) return st;
  grad g = {.dst = dst, .body = body, .loc = loc};
  size_t n = body->n_ins ? body->n_ins : 1;
  g.tymap = malloc((body->n_types ? body->n_types : 1) * sizeof *g.tymap);
  g.fwd = malloc(n * sizeof *g.fwd);
  g.rc = malloc(n * sizeof *g.rc);
  g.ct = malloc(n * sizeof *g.ct);
  g.dep = calloc(n, sizeof *g.dep);
  if (!g.tymap || !g.fwd || !g.rc || !g.ct || !g.dep) {
    g.st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
    goto done;
  }
  for (uint32_t i = 0; i < body->n_types; i++) {
    g.tymap[i] = ir_type_intern(dst, &body->types[i]);
    if (g.tymap[i] == UINT32_MAX) {
      g.st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
      goto done;
    }
  }
  g.tag_base = ir_remat_max_tag(dst);
  uint32_t body_max = ir_remat_max_tag(body);
  if (g.tag_base > UINT32_MAX - body_max - 1) {
    g.st = jit_error(JIT_EUNSUPPORTED, "%s: too many checkpointed regions", who);
    goto done;
  }
  g.rc_tag = g.tag_base + body_max + 1;

  /* forward, once; dep marks what the cotangent must reach */
  for (uint32_t i = 0; i < body->n_ins; i++) {
    const ir_ins *in = &body->ins[i];
    g.rc[i] = g.ct[i] = IR_NOREF;
    /* a scan's token is bool[]: what matters is whether its results carry derivatives */
    jit_dtype dt = body->types[in->ty].dtype;
    bool fl = ir_op_has_body(in->op) || ir_dtype_is_float(dt) || ir_dtype_is_complex(dt);
    if (i < body->n_params) {
      g.fwd[i] = args[i];
      g.dep[i] = fl && wrt[i];
      continue;
    }
    for (uint32_t k = 0; k < in->n_args; k++) {
      if (in->args[k] >= i) {
        g.st = jit_error(JIT_EINTERNAL, "%s: %%%u uses %%%u, defined later", who, (unsigned)i,
                         (unsigned)in->args[k]);
        goto done;
      }
      if (g.dep[in->args[k]]) g.dep[i] = fl && differentiable(in->op);
    }
    if (g.dep[i] && in->op == IR_WHILE) { /* JAX's reason, for the same limitation */
      g.st = in->loc.file
                 ? jit_error(JIT_EUNSUPPORTED, "%s: while_loop at %s:%d: Reverse-mode differentiation "
                             "does not work for lax.while_loop or lax.fori_loop with dynamic start/stop "
                             "values. Try using lax.scan, or lax.fori_loop with static trip count",
                             who, in->loc.file, in->loc.line)
                 : jit_error(JIT_EUNSUPPORTED, "%s: Reverse-mode differentiation does not work for "
                             "lax.while_loop or lax.fori_loop with dynamic start/stop values. Try using "
                             "lax.scan, or lax.fori_loop with static trip count", who);
      goto done;
    }
    if (g.dep[i] && (ir_op_is_collective(in->op) || in->op == IR_SHARD_MAP)) {
      g.st = jit_error(JIT_EUNSUPPORTED, "%s: differentiating through %s is not supported yet "
                       "(take the gradient inside the shard_map body, then reduce it)", who,
                       ir_op_name[in->op]);
      goto done;
    }
    ir_ref small[8], *ops = small;
    if (in->n_args > 8 && !(ops = malloc(in->n_args * sizeof *ops))) {
      g.st = jit_error(JIT_ENOMEM, "%s: out of memory", who);
      goto done;
    }
    for (uint32_t k = 0; k < in->n_args; k++) ops[k] = g.fwd[in->args[k]];
    g.fwd[i] = copy_ins(&g, i, ops, in->attr.remat ? in->attr.remat + g.tag_base : 0);
    if (ops != small) free(ops);
    if (g.st != JIT_OK) goto done;
  }

  /* backward */
  ir_ref loss = body->results[0];
  if (g.dep[loss]) {
    g.loc = loss < body->n_params ? loc : body->ins[loss].loc;
    g.ct[loss] = cst(&g, &body->types[body->ins[loss].ty], 1);
  }
  for (uint32_t i = body->n_ins; i-- > body->n_params && g.st == JIT_OK;) {
    if (g.ct[i] == IR_NOREF || !g.dep[i]) continue;
    g.loc = body->ins[i].loc;
    vjp(&g, i);
  }
  if (g.st != JIT_OK) goto done;

  g.loc = loc;
  uint32_t k = 0;
  for (uint32_t i = 0; i <= n_aux; i++) results[k++] = g.fwd[body->results[i]];
  for (uint32_t p = 0; p < body->n_params; p++) {
    if (!wrt[p]) continue;
    results[k++] = g.ct[p] != IR_NOREF ? g.ct[p] : cst(&g, &body->types[body->ins[p].ty], 0);
  }

done:
  free(g.stack);
  free(g.tymap);
  free(g.fwd);
  free(g.rc);
  free(g.ct);
  free(g.dep);
  return g.st;
}
