/* partition.c: sharding propagation and SPMD partitioning (GSPMD's scheme, simplified).
 *
 * Propagation gives every value of the global function a spec: per dim, the mesh axes that split
 * it. Seeds are the args' shardings and `sharding` ops (jit_with_sharding_constraint); specs then
 * flow forward from operands (an elementwise op takes its most sharded operand's spec, a dot its
 * operands' batch and free dims, a reduction its operand's kept dims, ...) and backward into
 * values nothing has decided yet (a param used with a sharded operand, a constant), a few rounds.
 * A dim is only split when its size divides evenly; what stays undecided is replicated.
 *
 * Partitioning then writes the per-device function. For each instruction with chosen spec S it
 * asks what its operands should look like to produce S cheaply (back()), reshards each operand
 * to that (all_gather what must be whole, shard_slice what must be split: no communication),
 * emits the op on local shapes, computes the spec that op really produces from those operands
 * (fwd(): a contraction or reduction over split dims leaves a partial sum, finished by an
 * all_reduce over those axes) and reshards that to S. So every choice is correct, whatever
 * propagation decided; propagation only makes the choices cheap.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

typedef struct spec {
  uint8_t n[IR_MAX_RANK];                     /* axes splitting each dim */
  uint8_t ax[IR_MAX_RANK][IR_MAX_MESH_AXES];  /* major first */
} spec;

static const spec replicated; /* all zero */

static void spec_of(const jit_sharding *s, spec *out) {
  *out = replicated;
  for (int d = 0; d < s->rank; d++) {
    out->n[d] = s->n_dim_axes[d];
    memcpy(out->ax[d], s->dim_axes[d], sizeof out->ax[d]);
  }
}

static bool spec_eq(const spec *a, const spec *b, int rank) {
  for (int d = 0; d < rank; d++)
    if (a->n[d] != b->n[d] || memcmp(a->ax[d], b->ax[d], a->n[d]) != 0) return false;
  return true;
}

static bool spec_any(const spec *s, int rank) {
  for (int d = 0; d < rank; d++)
    if (s->n[d]) return true;
  return false;
}

static unsigned spec_mask(const spec *s, int rank) {
  unsigned m = 0;
  for (int d = 0; d < rank; d++)
    for (int k = 0; k < s->n[d]; k++) m |= 1u << s->ax[d][k];
  return m;
}

static void copy_dim(spec *dst, int dd, const spec *src, int sd) {
  dst->n[dd] = src->n[sd];
  memcpy(dst->ax[dd], src->ax[sd], sizeof dst->ax[dd]);
}

static void clear_dim(spec *s, int d) {
  s->n[d] = 0;
  memset(s->ax[d], 0, sizeof s->ax[d]);
}

static bool increasing(const uint8_t *ax, int n) {
  for (int k = 1; k < n; k++)
    if (ax[k] <= ax[k - 1]) return false;
  return true;
}

static unsigned axes_mask(const uint8_t *ax, int n) {
  unsigned m = 0;
  for (int k = 0; k < n; k++) m |= 1u << ax[k];
  return m;
}

static jit_status oom(void) { return jit_error(JIT_ENOMEM, "partition: out of memory"); }

typedef struct part {
  const ir_func *f;
  jit_mesh *mesh;
  ir_mesh im;
  spec *sp;          /* per global value */
  bool *known;
  ir_func *g;        /* the local function */
  ir_ref *map;       /* global value -> its local block under sp[] */
  spec *lsp;         /* per local value: the spec of the global value it is a block of */
  uint32_t cap_lsp;
  struct { ir_ref global, local; spec s; } *memo; /* reshards made, to reuse */
  ir_ref **smap_out; /* per global SHARD_MAP: its inlined body's results (malloc'd) */
  spec **scan_res;   /* per global SCAN: the layouts its partitioned body gives its results */
  uint32_t n_memo, cap_memo;
} part;

static int64_t dim_parts(const part *P, const spec *s, int d) {
  int64_t n = 1;
  for (int k = 0; k < s->n[d]; k++) n *= P->im.sizes[s->ax[d][k]];
  return n;
}

/* Drops splits that cannot stand: an axis used twice (the later use goes) or a dim its axes do
   not divide evenly. */
static void fit(const part *P, const ir_type *t, spec *s) {
  unsigned used = 0;
  for (int d = 0; d < IR_MAX_RANK; d++) {
    if (d >= t->rank) {
      clear_dim(s, d);
      continue;
    }
    bool ok = true;
    for (int k = 0; k < s->n[d]; k++) {
      unsigned b = 1u << s->ax[d][k];
      if (s->ax[d][k] >= P->im.n_axes || (used & b)) ok = false;
    }
    if (ok && t->dims[d] % dim_parts(P, s, d) != 0) ok = false;
    if (!ok) clear_dim(s, d);
    else
      for (int k = 0; k < s->n[d]; k++) used |= 1u << s->ax[d][k];
  }
}

static void local_type(const part *P, const ir_type *t, const spec *s, ir_type *out) {
  *out = *t;
  for (int d = 0; d < t->rank; d++) out->dims[d] = t->dims[d] / dim_parts(P, s, d);
}

static const ir_type *gtype(const part *P, ir_ref r) { return ir_type_of(P->f, r); }

/* Bytes all devices receive to bring a value of type t from layout a to layout b: the gathers of
   the dims whose split changes (slicing moves nothing). The conflict resolver's measure. */
static double reshard_cost(const part *P, const ir_type *t, const spec *a, const spec *b) {
  if (spec_eq(a, b, t->rank)) return 0;
  spec g = *a;
  int64_t pa = 1, pg = 1, n = 1;
  for (int d = 0; d < t->rank; d++) {
    if (a->n[d] && (a->n[d] != b->n[d] || memcmp(a->ax[d], b->ax[d], a->n[d]))) clear_dim(&g, d);
    pa *= dim_parts(P, a, d);
    pg *= dim_parts(P, &g, d);
  }
  for (int x = 0; x < P->im.n_axes; x++) n *= P->im.sizes[x];
  double bytes = (double)ir_type_numel(t) * (double)jit_dtype_size(t->dtype);
  return (bytes / (double)pg - bytes / (double)pa) * (double)n;
}

/* The result dim of a reshape that carries operand dim d unchanged (same size, same number of
   elements before it), or -1. */
static int reshape_dim(const ir_type *from, const ir_type *to, int d) {
  int64_t before = 1;
  for (int i = 0; i < d; i++) before *= from->dims[i];
  int64_t acc = 1;
  for (int j = 0; j < to->rank; j++) {
    if (acc == before && to->dims[j] == from->dims[d]) return j;
    acc *= to->dims[j];
  }
  return -1;
}

static bool slice_full(const ir_slice *s, const ir_type *t, int d) {
  return s->start[d] == 0 && s->limit[d] == t->dims[d] && s->stride[d] == 1;
}

static bool is_ewise(ir_op op) { return (ir_op_flags[op] & IR_EW) != 0; }

/* What a scan's result k will be laid out as, before its body is partitioned: a carry keeps its
   init's layout; a y shaped like a carry is stacked from that carry's layout (an RNN's hidden
   states); other ys are replicated. */
static void scan_result_guess(const part *P, const ir_ins *sc, uint32_t k, spec *out) {
  const ir_func *b = ir_body(P->f, sc);
  uint32_t c0 = sc->attr.scan.n_consts, nc = sc->attr.scan.n_carry;
  *out = replicated;
  if (!b || k >= b->n_results) return;
  if (k < nc) {
    *out = P->sp[sc->args[c0 + k]];
    return;
  }
  const ir_type *y = ir_type_of(b, b->results[k]);
  for (uint32_t c = 0; c < nc; c++)
    if (ir_type_equal(y, ir_type_of(b, c0 + c))) {
      const spec *cs = &P->sp[sc->args[c0 + c]];
      for (int d = y->rank; d > 0; d--) copy_dim(out, d, cs, d - 1);
      clear_dim(out, 0);
      return;
    }
}

/* The spec op i produces from operands laid out as ops[k] (NULL: unknown, only while
   propagating; at least one is known). Axes of a reduced or contracted split are set in
   *partial. false: the op decides nothing from its operands (constants, iota). */
/* The dims operand k of rev, pad or gather shares with the result (same size, same elements
   along it): pairs (operand dim xd[j], result dim rd[j]); their count. Split alike, the op runs
   on local blocks with no communication: rev and pad on dims they leave alone, a gather on its
   indices' batch dims, and on the operand dims its windows take whole (an embedding table
   split along its features); a conv on the lhs's batch and (without groups) the rhs's output
   features; a window reduction on the dims its windows of 1 pass through; an fft on its batch
   dims (a split transformed dim is gathered first). Scatter and every
   other dim: replicated. */
static int index_pairs(const part *P, const ir_ins *in, uint32_t k, int *xd, int *rd) {
  int n = 0;
  const ir_type *x = gtype(P, in->args[k]);
  switch (in->op) {
  case IR_REV:
    for (int d = 0, q = 0; d < x->rank; d++) {
      if (q < in->attr.dims.n && in->attr.dims.d[q] == d) {
        q++;
        continue;
      }
      xd[n] = rd[n] = d, n++;
    }
    break;
  case IR_CONV: { /* lhs batch -> out batch; rhs out features -> out features (no groups) */
    const ir_conv *c = &in->attr.conv;
    if (k == 0 && c->batch_groups == 1) xd[n] = c->lhs[0], rd[n] = c->out[0], n++;
    if (k == 1 && c->groups == 1 && c->batch_groups == 1) xd[n] = c->rhs[0], rd[n] = c->out[1], n++;
    break;
  }
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: { /* the dims a window of 1 passes through */
    const ir_window *w = &in->attr.window;
    for (int d = 0; d < x->rank; d++)
      if (w->size[d] == 1 && w->stride[d] == 1 && !w->pad_lo[d] && !w->pad_hi[d]) xd[n] = rd[n] = d, n++;
    break;
  }
  case IR_FFT: /* the batch dims (before the last n_dims); the transformed dims whole */
    for (int d = 0; d < x->rank - in->attr.fft.n_dims; d++) xd[n] = rd[n] = d, n++;
    break;
  case IR_PAD:
    for (int d = 0; k == 0 && d < x->rank; d++)
      if (!in->attr.pad.lo[d] && !in->attr.pad.hi[d] && !in->attr.pad.interior[d]) xd[n] = rd[n] = d, n++;
    break;
  case IR_GATHER: {
    const ir_gather *g = &in->attr.gather;
    if (k == 0) {
      for (int d = 0, w = 0; d < x->rank; d++) {
        bool collapsed = false, started = false;
        for (int q = 0; q < g->collapsed.n; q++) collapsed |= g->collapsed.d[q] == d;
        for (int q = 0; q < g->start_map.n; q++) started |= g->start_map.d[q] == d;
        if (collapsed) continue;
        if (!started && g->sizes[d] == x->dims[d]) xd[n] = d, rd[n] = g->offset_dims.d[w], n++;
        w++;
      }
      break;
    }
    for (int r = 0, i = 0; r < P->f->types[in->ty].rank; r++) {
      bool off = false;
      for (int q = 0; q < g->offset_dims.n; q++) off |= g->offset_dims.d[q] == r;
      if (off) continue;
      if (i == g->index_dim) i++;
      xd[n] = i++, rd[n] = r, n++;
    }
    break;
  }
  default: break;
  }
  return n;
}

static bool fwd(const part *P, ir_ref i, const spec *const *ops, spec *out, unsigned *partial) {
  const ir_ins *in = &P->f->ins[i];
  const ir_type *t = gtype(P, i);
  *out = replicated;
  *partial = 0;
  switch (in->op) {
  case IR_CONST:
  case IR_IOTA: return false;
  case IR_SHARDING: spec_of(in->attr.sharding, out); break;
  case IR_GET: { /* a shard_map's result is laid out as its out-spec says */
    const ir_ins *sm = &P->f->ins[in->args[0]];
    if (sm->op == IR_SHARD_MAP) spec_of(sm->attr.smap.specs[sm->n_args + in->attr.axis], out);
    if (sm->op == IR_SCAN) scan_result_guess(P, sm, (uint32_t)in->attr.axis, out);
    break;
  }
  case IR_BROADCAST: {
    const ir_type *x = gtype(P, in->args[0]);
    if (ops[0])
      for (int d = 0; d < x->rank; d++)
        if (x->dims[d] == t->dims[in->attr.dims.d[d]]) copy_dim(out, in->attr.dims.d[d], ops[0], d);
    break;
  }
  case IR_TRANSPOSE:
    if (ops[0])
      for (int j = 0; j < t->rank; j++) copy_dim(out, j, ops[0], in->attr.dims.d[j]);
    break;
  case IR_RESHAPE: {
    const ir_type *x = gtype(P, in->args[0]);
    if (ops[0])
      for (int d = 0; d < x->rank; d++) {
        int j = ops[0]->n[d] ? reshape_dim(x, t, d) : -1;
        if (j >= 0) copy_dim(out, j, ops[0], d);
      }
    break;
  }
  case IR_SLICE:
    if (ops[0])
      for (int d = 0; d < t->rank; d++)
        if (slice_full(&in->attr.slice, gtype(P, in->args[0]), d)) copy_dim(out, d, ops[0], d);
    break;
  case IR_SORT: /* laid out as its operands, the sorted axis whole */
    for (uint32_t k = 0; k < in->n_args; k++)
      if (ops[k]) {
        *out = *ops[k];
        break;
      }
    clear_dim(out, (int)in->attr.axis);
    break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: {
    if (!ops[0]) break;
    const ir_type *x = gtype(P, in->args[0]);
    int j = 0;
    for (int d = 0, r = 0; d < x->rank; d++) {
      bool reduced = r < in->attr.dims.n && in->attr.dims.d[r] == d;
      if (reduced) {
        r++;
        for (int k = 0; k < ops[0]->n[d]; k++) *partial |= 1u << ops[0]->ax[d][k];
      } else {
        copy_dim(out, j++, ops[0], d);
      }
    }
    break;
  }
  case IR_DOT: {
    const ir_dot_dims *dd = &in->attr.dot;
    const ir_type *l = gtype(P, in->args[0]), *r = gtype(P, in->args[1]);
    bool lused[IR_MAX_RANK] = {0}, rused[IR_MAX_RANK] = {0};
    int j = 0;
    for (int b = 0; b < dd->n_batch; b++, j++) {
      lused[dd->lhs_batch[b]] = rused[dd->rhs_batch[b]] = true;
      if (ops[0] && ops[0]->n[dd->lhs_batch[b]]) copy_dim(out, j, ops[0], dd->lhs_batch[b]);
      else if (ops[1]) copy_dim(out, j, ops[1], dd->rhs_batch[b]);
    }
    for (int c = 0; c < dd->n_contract; c++) {
      lused[dd->lhs_contract[c]] = rused[dd->rhs_contract[c]] = true;
      const spec *a = ops[0], *b = ops[1];
      int ld = dd->lhs_contract[c], rd = dd->rhs_contract[c];
      if (a && b && a->n[ld] && a->n[ld] == b->n[rd] && !memcmp(a->ax[ld], b->ax[rd], a->n[ld]))
        for (int k = 0; k < a->n[ld]; k++) *partial |= 1u << a->ax[ld][k];
    }
    for (int d = 0; d < l->rank; d++)
      if (!lused[d]) {
        if (ops[0]) copy_dim(out, j, ops[0], d);
        j++;
      }
    for (int d = 0; d < r->rank; d++)
      if (!rused[d]) {
        if (ops[1]) copy_dim(out, j, ops[1], d);
        j++;
      }
    break;
  }
  case IR_REV:
  case IR_PAD:
  case IR_GATHER:
  case IR_CONV:
  case IR_FFT:
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER:
    for (uint32_t k = 0; k < (in->op == IR_PAD ? 1u : in->n_args); k++) {
      int xd[IR_MAX_RANK], rd[IR_MAX_RANK];
      int n = ops[k] ? index_pairs(P, in, k, xd, rd) : 0;
      for (int j = 0; j < n; j++)
        if (!out->n[rd[j]]) copy_dim(out, rd[j], ops[k], xd[j]);
    }
    break;
  case IR_CONCAT: {
    const spec *best = NULL;
    for (uint32_t k = 0; k < in->n_args && !best; k++) best = ops[k];
    if (best)
      for (int d = 0; d < t->rank; d++)
        if (d != in->attr.axis) copy_dim(out, d, best, d);
    break;
  }
  default:
    if (is_ewise(in->op)) { /* the operand layout the others reach cheapest (then the most split) */
      double best = -1;
      int64_t most = 0;
      for (uint32_t k = 0; k < in->n_args; k++) {
        if (!ops[k]) continue;
        double cost = 0;
        for (uint32_t q = 0; q < in->n_args; q++)
          if (ops[q]) cost += reshard_cost(P, gtype(P, in->args[q]), ops[q], ops[k]);
        int64_t parts = 1;
        for (int d = 0; d < t->rank; d++) parts *= dim_parts(P, ops[k], d);
        if (best < 0 || cost < best || (cost == best && parts > most)) {
          best = cost;
          most = parts;
          *out = *ops[k];
        }
      }
    }
    /* scans, gets and everything else: replicated */
    break;
  }
  fit(P, t, out);
  *partial &= ~spec_mask(out, t->rank);
  return true;
}

/* The layout operand k of op i should have for i to produce s; cur is the operand's own spec
   (a reduced or contracted dim keeps its split: the partial sum is cheaper than a gather). */
static void back(const part *P, ir_ref i, const spec *s, uint32_t k, const spec *cur, spec *out) {
  const ir_ins *in = &P->f->ins[i];
  const ir_type *t = gtype(P, i), *x = gtype(P, in->args[k]);
  *out = replicated;
  switch (in->op) {
  case IR_SHARDING: fwd(P, i, NULL, out, &(unsigned){0}); break;
  case IR_SHARD_MAP: spec_of(in->attr.smap.specs[k], out); break;
  case IR_BROADCAST:
    for (int d = 0; d < x->rank; d++)
      if (x->dims[d] == t->dims[in->attr.dims.d[d]]) copy_dim(out, d, s, in->attr.dims.d[d]);
    break;
  case IR_TRANSPOSE:
    for (int j = 0; j < t->rank; j++) copy_dim(out, in->attr.dims.d[j], s, j);
    break;
  case IR_RESHAPE:
    for (int d = 0; d < x->rank; d++) {
      int j = reshape_dim(x, t, d);
      if (j >= 0) copy_dim(out, d, s, j);
    }
    break;
  case IR_SLICE:
    for (int d = 0; d < t->rank; d++)
      if (slice_full(&in->attr.slice, x, d)) copy_dim(out, d, s, d);
    break;
  case IR_CONCAT:
  case IR_SORT:
    for (int d = 0; d < t->rank; d++)
      if (d != in->attr.axis) copy_dim(out, d, s, d);
    break;
  case IR_REV:
  case IR_PAD:
  case IR_GATHER:
  case IR_CONV:
  case IR_FFT:
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: {
    int xd[IR_MAX_RANK], rd[IR_MAX_RANK], n = index_pairs(P, in, k, xd, rd);
    for (int j = 0; j < n; j++) copy_dim(out, xd[j], s, rd[j]);
    break;
  }
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: {
    unsigned used = spec_mask(s, t->rank);
    int j = 0;
    for (int d = 0, r = 0; d < x->rank; d++) {
      bool reduced = r < in->attr.dims.n && in->attr.dims.d[r] == d;
      if (!reduced) {
        copy_dim(out, d, s, j++);
        continue;
      }
      r++;
      bool clash = in->op == IR_REDUCE_PROD; /* no product collective: reduce whole dims */
      for (int q = 0; q < cur->n[d]; q++) clash |= (used >> cur->ax[d][q]) & 1;
      if (!clash) copy_dim(out, d, cur, d);
    }
    break;
  }
  case IR_DOT: {
    const ir_dot_dims *dd = &in->attr.dot;
    const ir_type *l = gtype(P, in->args[0]), *r = gtype(P, in->args[1]);
    const uint8_t *batch = k ? dd->rhs_batch : dd->lhs_batch;
    const uint8_t *contract = k ? dd->rhs_contract : dd->lhs_contract;
    const spec *sl = &P->sp[in->args[0]], *sr = &P->sp[in->args[1]];
    /* a contracted dim both operands already split alike stays split: the partial sum is
       finished by a reduce_scatter or all_reduce, cheaper than moving both operands */
    unsigned agreed = 0;
    for (int c = 0; c < dd->n_contract; c++) {
      int ld = dd->lhs_contract[c], rd = dd->rhs_contract[c];
      if (sl->n[ld] && sl->n[ld] == sr->n[rd] && !memcmp(sl->ax[ld], sr->ax[rd], sl->n[ld])) {
        copy_dim(out, contract[c], sl, ld);
        agreed |= axes_mask(sl->ax[ld], sl->n[ld]);
      }
    }
    spec so = *s; /* the result's layout without the agreed axes */
    for (int d = 0; d < t->rank; d++)
      if (axes_mask(so.ax[d], so.n[d]) & agreed) clear_dim(&so, d);
    bool used[IR_MAX_RANK] = {0};
    for (int b = 0; b < dd->n_batch; b++) {
      copy_dim(out, batch[b], &so, b);
      used[batch[b]] = true;
    }
    for (int c = 0; c < dd->n_contract; c++) used[contract[c]] = true;
    int j = dd->n_batch;
    if (k == 1) j += l->rank - dd->n_batch - dd->n_contract;
    for (int d = 0; d < x->rank; d++)
      if (!used[d]) copy_dim(out, d, &so, j++);
    /* the other contracted dims: split like the operand that is (the other is sliced, which
       moves nothing), unless that split's axes already lay out the result */
    unsigned taken = spec_mask(&so, t->rank) | agreed;
    for (int c = 0; c < dd->n_contract; c++) {
      int ld = dd->lhs_contract[c], rd = dd->rhs_contract[c];
      if (out->n[contract[c]]) continue;
      const spec *src = sl->n[ld] ? sl : sr;
      int sd = sl->n[ld] ? ld : rd;
      bool clash = false;
      for (int q = 0; q < src->n[sd]; q++) clash |= (taken >> src->ax[sd][q]) & 1;
      if (!clash) {
        copy_dim(out, contract[c], src, sd);
        for (int q = 0; q < src->n[sd]; q++) taken |= 1u << src->ax[sd][q];
      }
    }
    (void)r;
    (void)cur;
    break;
  }
  default:
    if (is_ewise(in->op)) *out = *s;
    break;
  }
  fit(P, x, out);
}

/* ---- propagation ------------------------------------------------------------------------------ */

static bool forward(part *P) {
  const ir_func *f = P->f;
  bool changed = false;
  const spec *small[8], **ops = small;
  for (ir_ref i = f->n_params; i < f->n_ins; i++) {
    const ir_ins *in = &f->ins[i];
    if (P->known[i]) continue;
    if (in->n_args > 8 && !(ops = malloc(in->n_args * sizeof *ops))) return changed;
    bool any = in->op == IR_SHARDING || in->op == IR_SHARD_MAP;
    for (uint32_t k = 0; k < in->n_args; k++) {
      ops[k] = P->known[in->args[k]] ? &P->sp[in->args[k]] : NULL;
      any |= ops[k] != NULL;
    }
    unsigned partial;
    if (any && fwd(P, i, ops, &P->sp[i], &partial)) P->known[i] = changed = true;
    if (ops != small) {
      free(ops);
      ops = small;
    }
  }
  return changed;
}

static bool backward(part *P) {
  const ir_func *f = P->f;
  bool changed = false;
  for (ir_ref i = f->n_ins; i-- > f->n_params;) {
    const ir_ins *in = &f->ins[i];
    if (!P->known[i] || in->op == IR_SCAN || in->op == IR_GET) continue;
    for (uint32_t k = 0; k < in->n_args; k++) {
      ir_ref a = in->args[k];
      if (P->known[a]) continue;
      spec want;
      back(P, i, &P->sp[i], k, &replicated, &want);
      if (!spec_any(&want, gtype(P, a)->rank)) continue;
      P->sp[a] = want;
      P->known[a] = changed = true;
    }
  }
  return changed;
}

/* A contraction or reduction over split dims leaves a partial sum. When a user wants the result
   split over some of the summed axes, the value takes that split: the partitioner then emits a
   reduce_scatter (each device sums only its part) instead of an all_reduce and a slice. */
static jit_status refine_partials(part *P) {
  const ir_func *f = P->f;
  unsigned *partial = calloc(f->n_ins ? f->n_ins : 1, sizeof *partial);
  if (!partial) return oom();
  for (ir_ref i = f->n_params; i < f->n_ins; i++) {
    ir_op op = f->ins[i].op;
    if (op != IR_DOT && op != IR_REDUCE_SUM && op != IR_REDUCE_MAX && op != IR_REDUCE_MIN) continue;
    const spec *ops[2] = {&P->sp[f->ins[i].args[0]], f->ins[i].n_args > 1 ? &P->sp[f->ins[i].args[1]] : NULL};
    spec nat;
    fwd(P, i, ops, &nat, &partial[i]);
  }
  for (ir_ref u = f->n_params; u < f->n_ins; u++) {
    const ir_ins *in = &f->ins[u];
    if (in->op == IR_SCAN || in->op == IR_GET || in->op == IR_SHARD_MAP) continue;
    for (uint32_t k = 0; k < in->n_args; k++) {
      ir_ref a = in->args[k];
      if (!partial[a]) continue;
      spec want;
      back(P, u, &P->sp[u], k, &P->sp[a], &want);
      const ir_type *t = gtype(P, a);
      unsigned used = spec_mask(&P->sp[a], t->rank);
      for (int d = 0; d < t->rank; d++) {
        unsigned m = axes_mask(want.ax[d], want.n[d]);
        if (!want.n[d] || P->sp[a].n[d] || (m & ~partial[a]) || (m & used)) continue;
        copy_dim(&P->sp[a], d, &want, d);
        used |= m;
        partial[a] &= ~m;
      }
    }
  }
  free(partial);
  return JIT_OK;
}

/* ---- the local function ------------------------------------------------------------------------ */


/* Emits op into the local function with spec s recorded for the dump; type from the shape rule
   (or `declared`). */
static jit_status emit(part *P, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *a,
                       const ir_type *declared, const spec *s, ir_loc loc, ir_ref *out) {
  ir_func *g = P->g;
  const ir_type *small[8] = {0}, **ts = small;
  if (n > 8 && !(ts = malloc(n * sizeof *ts))) return oom();
  for (uint32_t k = 0; k < n; k++) ts[k] = ir_type_of(g, args[k]);
  ir_type t;
  char why[256];
  jit_status st = ir_infer_type(op, n, ts, a, declared, &t, why, sizeof why);
  if (ts != small) free(ts);
  if (st != JIT_OK)
    return jit_error(JIT_EINTERNAL, "partition: @%s: local %s: %s", P->f->name, ir_op_name[op], why);
  if (declared && !ir_type_equal(&t, declared)) {
    char a1[96], a2[96];
    ir_format_type(&t, a1, sizeof a1);
    ir_format_type(declared, a2, sizeof a2);
    return jit_error(JIT_EINTERNAL, "partition: @%s: local %s makes %s, its layout says %s",
                     P->f->name, ir_op_name[op], a1, a2);
  }
  ir_ty ty = ir_type_intern(g, &t);
  *out = ty == UINT32_MAX ? IR_NOREF : ir_emit(g, op, ty, n, args, a, loc);
  if (*out == IR_NOREF) return oom();
  if (!ir_grow((void **)&P->lsp, &P->cap_lsp, g->n_ins, sizeof *P->lsp)) return oom();
  P->lsp[*out] = *s;
  return JIT_OK;
}

static jit_status coll(part *P, ir_op op, ir_ref x, unsigned axes, int dim, uint8_t kind,
                       const spec *s, ir_loc loc, ir_ref *out) {
  ir_attr a = {0};
  a.coll.axes = (uint8_t)axes;
  a.coll.group = (uint16_t)ir_mesh_group(&P->im, axes);
  a.coll.dim = (uint8_t)dim;
  a.coll.kind = kind;
  return emit(P, op, 1, &x, &a, NULL, s, loc, out);
}



/* The block of global value v under `to`, from its block x under `from`: gathers the dims that
   lose or change their split, then slices out the ones that gain one. */
static jit_status reshard(part *P, ir_ref v, ir_ref x, const spec *from, const spec *to,
                          ir_loc loc, ir_ref *out) {
  int rank = gtype(P, v)->rank;
  *out = x;
  if (spec_eq(from, to, rank)) return JIT_OK;
  for (uint32_t m = 0; m < P->n_memo; m++)
    if (P->memo[m].global == v && spec_eq(&P->memo[m].s, to, rank)) {
      *out = P->memo[m].local;
      return JIT_OK;
    }
  jit_status st = JIT_OK;
  spec cur = *from;
  /* a split that moves from dim e to dim d as it is: one all_to_all (each device sends the others
     only the pieces they keep) instead of a gather and a slice */
  for (int e = 0; e < rank; e++) {
    if (!cur.n[e] || !increasing(cur.ax[e], cur.n[e]) ||
        (cur.n[e] == to->n[e] && !memcmp(cur.ax[e], to->ax[e], cur.n[e])))
      continue;
    for (int d = 0; d < rank; d++) {
      if (d == e || cur.n[d] || to->n[d] != cur.n[e] || memcmp(to->ax[d], cur.ax[e], cur.n[e]))
        continue;
      ir_attr a = {0};
      a.coll.axes = (uint8_t)axes_mask(cur.ax[e], cur.n[e]);
      a.coll.group = (uint16_t)ir_mesh_group(&P->im, a.coll.axes);
      a.coll.dim = (uint8_t)d;
      a.coll.dim2 = (uint8_t)e;
      copy_dim(&cur, d, &cur, e);
      clear_dim(&cur, e);
      ir_ref x = *out;
      TRY(emit(P, IR_ALL_TO_ALL, 1, &x, &a, NULL, &cur, loc, out));
      break;
    }
  }
  for (int d = 0; d < rank; d++) {
    if (!cur.n[d] || (cur.n[d] == to->n[d] && !memcmp(cur.ax[d], to->ax[d], cur.n[d]))) continue;
    /* one gather when the split's order is the mesh's (a group's positions are row-major in
       mesh order), else one per axis, minor first */
    if (increasing(cur.ax[d], cur.n[d])) {
      unsigned m = axes_mask(cur.ax[d], cur.n[d]);
      clear_dim(&cur, d);
      TRY(coll(P, IR_ALL_GATHER, *out, m, d, 0, &cur, loc, out));
    } else {
      while (cur.n[d]) {
        unsigned m = 1u << cur.ax[d][cur.n[d] - 1];
        cur.ax[d][--cur.n[d]] = 0;
        TRY(coll(P, IR_ALL_GATHER, *out, m, d, 0, &cur, loc, out));
      }
    }
  }
  for (int d = 0; d < rank; d++) {
    if (!to->n[d] || cur.n[d]) continue;
    if (increasing(to->ax[d], to->n[d])) {
      copy_dim(&cur, d, to, d);
      TRY(coll(P, IR_SHARD_SLICE, *out, axes_mask(to->ax[d], to->n[d]), d, 0, &cur, loc, out));
    } else {
      for (int k = 0; k < to->n[d]; k++) {
        cur.ax[d][cur.n[d]++] = to->ax[d][k];
        TRY(coll(P, IR_SHARD_SLICE, *out, 1u << to->ax[d][k], d, 0, &cur, loc, out));
      }
    }
  }
  if (!ir_grow((void **)&P->memo, &P->cap_memo, P->n_memo + 1, sizeof *P->memo)) return oom();
  P->memo[P->n_memo].global = v;
  P->memo[P->n_memo].local = *out;
  P->memo[P->n_memo++].s = *to;
  return JIT_OK;
fail:
  return st;
}

static uint8_t reduce_kind(ir_op op) {
  return op == IR_REDUCE_MAX ? IR_COLL_MAX : op == IR_REDUCE_MIN ? IR_COLL_MIN : IR_COLL_SUM;
}

static jit_status partition_scan(part *P, ir_ref i, const ir_ref *args, const spec *req);

/* COND or WHILE i as it is, on replicated operands: every device runs the whole op (its bodies
   copied unpartitioned), and its results are replicated. */
static jit_status copy_replicated(part *P, ir_ref i, const ir_ref *args) {
  const ir_ins *in = &P->f->ins[i];
  ir_attr a;
  if (ir_attr_for_copy(P->g, P->f, in, &a) != JIT_OK) return oom();
  ir_ref r = ir_emit(P->g, in->op, ir_type_intern(P->g, gtype(P, i)), in->n_args, args, &a, in->loc);
  if (r == IR_NOREF || !ir_grow((void **)&P->lsp, &P->cap_lsp, P->g->n_ins, sizeof *P->lsp)) return oom();
  P->lsp[r] = replicated;
  P->map[i] = r;
  if (!P->scan_res && !(P->scan_res = calloc(P->f->n_ins, sizeof *P->scan_res))) return oom();
  uint32_t nr = ir_body(P->f, in)->n_results;
  if (!(P->scan_res[i] = calloc(nr + 1, sizeof *P->scan_res[i]))) return oom(); /* all replicated */
  return JIT_OK;
}

/* Copies shard_map i's body into the local function on its operands' blocks. */
static jit_status inline_shard_map(part *P, ir_ref i, const ir_ref *args) {
  const ir_func *f = P->f;
  const ir_ins *in = &f->ins[i];
  const ir_func *b = ir_body(f, in);
  if (!mesh_matches_ir(P->mesh, b->mesh))
    return jit_error(JIT_ESHARDING, "partition: @%s: %%%u: a shard_map over another mesh than the "
                     "call's", f->name, i);
  if (!P->smap_out && !(P->smap_out = calloc(f->n_ins, sizeof *P->smap_out))) return oom();
  ir_ref *map = malloc((b->n_ins ? b->n_ins : 1) * sizeof *map);
  ir_ref *res = malloc((b->n_results ? b->n_results : 1) * sizeof *res);
  if (!map || !res) {
    free(map);
    free(res);
    return oom();
  }
  for (uint32_t k = 0; k < b->n_params; k++) map[k] = args[k];
  uint32_t before = P->g->n_ins;
  jit_status st = ir_copy_into(P->g, b, map);
  for (uint32_t k = 0; k < b->n_results; k++) res[k] = map[b->results[k]];
  free(map);
  P->smap_out[i] = res;
  if (st != JIT_OK) return oom();
  if (!ir_grow((void **)&P->lsp, &P->cap_lsp, P->g->n_ins, sizeof *P->lsp)) return oom();
  for (uint32_t v = before; v < P->g->n_ins; v++) P->lsp[v] = replicated; /* no global spec */
  return JIT_OK;
}

/* The local form of global instruction i, with spec P->sp[i]. */
static jit_status rewrite(part *P, ir_ref i) {
  jit_status st = JIT_OK;
  const ir_func *f = P->f;
  const ir_ins *in = &f->ins[i];
  const spec *s = &P->sp[i];
  const ir_type *t = gtype(P, i);
  uint32_t n = in->n_args;
  ir_ref small_a[8], *args = small_a;
  spec small_r[8], *req = small_r;
  const spec *small_p[8], **reqp = small_p;
  if (n > 8 && (!(args = malloc(n * sizeof *args)) || !(req = malloc(n * sizeof *req)) ||
                !(reqp = malloc(n * sizeof *reqp))))
    TRY(oom());
  for (uint32_t k = 0; k < n; k++) {
    ir_ref a = in->args[k];
    if (in->op == IR_SCAN) { /* as they are, but each x whole along the steps */
      req[k] = P->sp[a];
      if (k >= in->attr.scan.n_consts + in->attr.scan.n_carry) clear_dim(&req[k], 0);
    } else if (in->op != IR_GET) {
      back(P, i, s, k, &P->sp[a], &req[k]);
    }
    reqp[k] = &req[k];
    if (in->op == IR_GET) args[k] = P->map[a]; /* the token, as it is */
    else TRY(reshard(P, a, P->map[a], &P->sp[a], &req[k], in->loc, &args[k]));
  }
  if (in->op == IR_SHARDING) {
    P->map[i] = args[0];
    goto done;
  }
  if (in->op == IR_SHARD_MAP) { /* the body is per-device code already: inlined on the blocks */
    TRY(inline_shard_map(P, i, args));
    P->map[i] = IR_NOREF;
    goto done;
  }
  if (in->op == IR_GET && f->ins[in->args[0]].op == IR_SHARD_MAP) {
    spec nat;
    unsigned partial;
    fwd(P, i, NULL, &nat, &partial);
    TRY(reshard(P, i, P->smap_out[in->args[0]][in->attr.axis], &nat, s, in->loc, &P->map[i]));
    goto done;
  }
  if (in->op == IR_SCAN) {
    TRY(partition_scan(P, i, args, req));
    goto done;
  }
  if (in->op == IR_COND || in->op == IR_WHILE) {
    TRY(copy_replicated(P, i, args)); /* its operands were made replicated (back's default) */
    goto done;
  }
  if (in->op == IR_GET) { /* a scan's result, laid out as its partitioned body made it */
    const ir_ins *ls = &P->g->ins[args[0]];
    const spec *nat = &P->scan_res[in->args[0]][in->attr.axis];
    ir_type lt;
    ir_attr ga = {0};
    ga.axis = in->attr.axis;
    ir_ty ty = ir_result_type(P->g, ls, (uint32_t)in->attr.axis, &lt) ? ir_type_intern(P->g, &lt) : UINT32_MAX;
    ir_ref r = ty == UINT32_MAX ? IR_NOREF : ir_emit(P->g, IR_GET, ty, 1, args, &ga, in->loc);
    if (r == IR_NOREF || !ir_grow((void **)&P->lsp, &P->cap_lsp, P->g->n_ins, sizeof *P->lsp))
      TRY(oom());
    P->lsp[r] = *nat;
    TRY(reshard(P, i, r, nat, s, in->loc, &P->map[i]));
    goto done;
  }
  spec nat;
  unsigned partial = 0;
  if (in->op == IR_CONST || in->op == IR_BROADCAST) nat = *s; /* made in place, any layout */
  else if (!fwd(P, i, reqp, &nat, &partial)) nat = replicated; /* iota */
  ir_attr a;
  TRY(ir_attr_for_copy(P->g, f, in, &a));
  ir_type lt;
  local_type(P, t, &nat, &lt);
  if (in->op == IR_SLICE)
    for (int d = 0; d < t->rank; d++)
      if (nat.n[d]) a.slice.limit[d] = lt.dims[d];
  if (in->op == IR_GATHER) { /* a window over a whole split dim takes the local dim whole */
    const ir_type *gx = gtype(P, in->args[0]), *lx = ir_type_of(P->g, args[0]);
    for (int d = 0; d < gx->rank; d++)
      if (a.gather.sizes[d] == gx->dims[d]) a.gather.sizes[d] = lx->dims[d];
  }
  ir_ref r;
  TRY(emit(P, in->op, n, args, &a, &lt, &nat, in->loc, &r));
  /* a partial sum whose result is wanted split over some of the summed axes: a reduce_scatter
     over those (each device sums only its part), then an all_reduce over the rest */
  for (int d = 0; partial && d < t->rank; d++) {
    unsigned m = axes_mask(s->ax[d], s->n[d]);
    if (!s->n[d] || nat.n[d] || (m & ~partial) || !increasing(s->ax[d], s->n[d])) continue;
    copy_dim(&nat, d, s, d);
    TRY(coll(P, IR_REDUCE_SCATTER, r, m, d, reduce_kind(in->op), &nat, in->loc, &r));
    partial &= ~m;
  }
  if (partial) TRY(coll(P, IR_ALL_REDUCE, r, partial, 0, reduce_kind(in->op), &nat, in->loc, &r));
  TRY(reshard(P, i, r, &nat, s, in->loc, &P->map[i]));
done:
fail:
  if (args != small_a) free(args);
  if (req != small_r) free(req);
  if (reqp != small_p) free(reqp);
  return st;
}

static jit_status make_sharding(part *P, const spec *s, int rank, jit_sharding **out) {
  return sharding_new(P->mesh, rank, s->n, (const uint8_t(*)[JIT_MAX_MESH_AXES])s->ax, out);
}

/* What each collective makes a device read from the others, times the devices. */
static uint64_t comm_bytes(const ir_func *g, int n_devices) {
  uint64_t total = 0;
  for (uint32_t r = 0; r < g->n_ins; r++) {
    const ir_ins *in = &g->ins[r];
    if (in->op == IR_SCAN && ir_body(g, in)) /* a loop's exchanges, every step */
      total += comm_bytes(ir_body(g, in), n_devices) * (uint64_t)in->attr.scan.length;
    if (!ir_op_is_collective(in->op) || !in->n_args) continue;
    const ir_type *t = ir_type_of(g, in->args[0]);
    uint64_t b = (uint64_t)ir_type_numel(t) * jit_dtype_size(t->dtype), n = in->attr.coll.group;
    switch (in->op) {
    case IR_ALL_REDUCE:
    case IR_ALL_GATHER: b *= n - 1; break;
    case IR_REDUCE_SCATTER:
    case IR_ALL_TO_ALL: b = b * (n - 1) / n; break;
    case IR_COLLECTIVE_PERMUTE: b = n > 1 ? b : 0; break;
    default: b = 0; break; /* shard_slice reads only its own */
    }
    total += b * (uint64_t)n_devices;
  }
  return total;
}

void ir_spmd_free(ir_spmd *p) {
  if (!p) return;
  ir_func_free(p->local);
  for (uint32_t i = 0; p->param_shardings && i < p->n_params; i++) sharding_unref(p->param_shardings[i]);
  for (uint32_t i = 0; p->result_shardings && i < p->n_results; i++)
    sharding_unref(p->result_shardings[i]);
  for (uint32_t i = 0; p->value_shardings && i < p->n_values; i++) sharding_unref(p->value_shardings[i]);
  free(p->param_shardings);
  free(p->result_shardings);
  free(p->value_shardings);
  if (p->mesh) jit_mesh_free(p->mesh);
  free(p);
}

static jit_status part_init(part *P, const ir_func *f, jit_mesh *mesh) {
  memset(P, 0, sizeof *P);
  P->f = f;
  P->mesh = mesh;
  mesh_to_ir(mesh, &P->im);
  uint32_t n = f->n_ins ? f->n_ins : 1;
  P->sp = calloc(n, sizeof *P->sp);
  P->known = calloc(n, sizeof *P->known);
  P->map = calloc(n, sizeof *P->map);
  return P->sp && P->known && P->map ? JIT_OK : oom();
}

static void part_free(part *P) {
  ir_func_free(P->g);
  free(P->sp);
  free(P->known);
  free(P->map);
  free(P->lsp);
  free(P->memo);
  for (uint32_t r = 0; P->smap_out && r < P->f->n_ins; r++) free(P->smap_out[r]);
  free(P->smap_out);
  for (uint32_t r = 0; P->scan_res && r < P->f->n_ins; r++) free(P->scan_res[r]);
  free(P->scan_res);
  memset(P, 0, sizeof *P);
}

/* Partitions P->f, its params' specs seeded (P->sp, P->known): propagation, then the local
   function P->g. Result k is resharded to want[k] where pinned[k] (pinned may be NULL); the
   results' layouts end in P->sp[f->results[k]]'s place: res_spec[k] (may be NULL). */
static jit_status run_part(part *P, const bool *pinned, const spec *want, spec *res_spec) {
  jit_status st = JIT_OK;
  const ir_func *f = P->f;
  uint32_t n = f->n_ins;
  for (uint32_t r = 0; r < n; r++) {
    const ir_ins *in = &f->ins[r];
    if (in->op != IR_SHARDING) continue;
    if (!mesh_matches_ir(in->attr.sharding->mesh, &P->im))
      return jit_error(JIT_ESHARDING, "partition: @%s: %%%u: a sharding over another mesh", f->name, r);
  }
  for (uint32_t k = 0; pinned && k < f->n_results; k++) /* a hint: the end reshards anyway */
    if (pinned[k] && !P->known[f->results[k]]) {
      P->sp[f->results[k]] = want[k];
      P->known[f->results[k]] = true;
    }
  for (int round = 0; round < 4; round++) {
    bool changed = forward(P);
    changed |= backward(P);
    if (!changed) break;
  }
  forward(P);
  TRY(refine_partials(P));

  P->g = ir_func_new(f->name);
  if (!P->g || ir_set_mesh(P->g, &P->im) != JIT_OK) TRY(oom());
  for (uint32_t i = 0; i < f->n_params; i++) {
    ir_type lt;
    local_type(P, gtype(P, i), &P->sp[i], &lt);
    ir_ty ty = ir_type_intern(P->g, &lt);
    P->map[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(P->g, ty);
    if (P->map[i] == IR_NOREF || !ir_grow((void **)&P->lsp, &P->cap_lsp, P->g->n_ins, sizeof *P->lsp))
      TRY(oom());
    P->lsp[P->map[i]] = P->sp[i];
  }
  for (ir_ref i = f->n_params; i < n; i++) TRY(rewrite(P, i));
  ir_ref *res = malloc((f->n_results ? f->n_results : 1) * sizeof *res);
  if (!res) TRY(oom());
  for (uint32_t k = 0; k < f->n_results && st == JIT_OK; k++) {
    ir_ref v = f->results[k];
    res[k] = P->map[v];
    spec got = P->sp[v];
    if (pinned && pinned[k]) {
      st = reshard(P, v, P->map[v], &P->sp[v], &want[k], (ir_loc){0}, &res[k]);
      got = want[k];
    }
    if (res_spec) res_spec[k] = got;
  }
  if (st == JIT_OK) st = ir_set_results(P->g, f->n_results, res);
  free(res);
  TRY(st);
  if (P->g->oom) TRY(oom());
fail:
  return st;
}

/* A scan with its body partitioned too: the operands keep their layouts (each x whole along the
   steps), the body's params get the matching per-step layouts, and its carries leave the body as
   they entered it (the loop carries one layout). */
static jit_status partition_scan(part *P, ir_ref i, const ir_ref *args, const spec *req) {
  jit_status st = JIT_OK;
  const ir_ins *in = &P->f->ins[i];
  const ir_func *b = ir_body(P->f, in);
  uint32_t c0 = in->attr.scan.n_consts, nc = in->attr.scan.n_carry, nr = b->n_results;
  part B;
  memset(&B, 0, sizeof B);
  bool *pin = calloc(nr + 1, sizeof *pin);
  spec *want = calloc(nr + 1, sizeof *want), *res = calloc(nr + 1, sizeof *res);
  if (!pin || !want || !res) {
    st = oom();
    goto out;
  }
  if ((st = part_init(&B, b, P->mesh)) != JIT_OK) goto out;
  for (uint32_t k = 0; k < in->n_args; k++) {
    spec ps = req[k];
    if (k >= c0 + nc) { /* one step's slice: the time dim dropped */
      for (int d = 0; d + 1 < IR_MAX_RANK; d++) copy_dim(&ps, d, &req[k], d + 1);
      clear_dim(&ps, IR_MAX_RANK - 1);
    }
    fit(&B, ir_type_of(b, k), &ps);
    B.sp[k] = ps;
    B.known[k] = true;
  }
  for (uint32_t c = 0; c < nc; c++) {
    pin[c] = true;
    want[c] = B.sp[c0 + c];
  }
  if ((st = run_part(&B, pin, want, res)) != JIT_OK) goto out;
  uint32_t idx;
  ir_func *lb = B.g;
  B.g = NULL;
  if ((st = ir_add_body(P->g, lb, &idx)) != JIT_OK) goto out;
  ir_attr a = in->attr;
  a.scan.body = idx;
  ir_type token = {.dtype = JIT_BOOL, .rank = 0};
  ir_ty tty = ir_type_intern(P->g, &token);
  ir_ref r = tty == UINT32_MAX ? IR_NOREF : ir_emit(P->g, IR_SCAN, tty, in->n_args, args, &a, in->loc);
  if (r == IR_NOREF || !ir_grow((void **)&P->lsp, &P->cap_lsp, P->g->n_ins, sizeof *P->lsp)) {
    st = oom();
    goto out;
  }
  P->lsp[r] = replicated;
  P->map[i] = r;
  if (!P->scan_res && !(P->scan_res = calloc(P->f->n_ins, sizeof *P->scan_res))) {
    st = oom();
    goto out;
  }
  for (uint32_t k = nc; k < nr; k++) { /* stacked ys: a new, whole leading dim */
    spec y = res[k];
    for (int d = IR_MAX_RANK - 1; d > 0; d--) copy_dim(&res[k], d, &y, d - 1);
    clear_dim(&res[k], 0);
  }
  P->scan_res[i] = res;
  res = NULL;
out:
  part_free(&B);
  free(pin);
  free(want);
  free(res);
  return st;
}

jit_status ir_partition(const ir_func *f, jit_mesh *mesh, jit_sharding *const *arg_shardings,
                        ir_spmd **out) {
  jit_status st = JIT_OK;
  *out = NULL;
  if (!f || !mesh) return jit_error(JIT_EINVAL, "partition: no function or no mesh");
  part P;
  ir_spmd *p = calloc(1, sizeof *p);
  if (!p) return oom();
  p->mesh = mesh_ref(mesh);
  TRY(part_init(&P, f, mesh));
  for (uint32_t i = 0; i < f->n_params; i++) {
    const jit_sharding *a = arg_shardings ? arg_shardings[i] : NULL;
    if (!a) continue;
    if (a->mesh != mesh && !mesh_equal(a->mesh, mesh))
      TRY(jit_error(JIT_ESHARDING, "partition: @%s: arg %u is sharded over another mesh", f->name, i));
    if (a->rank != gtype(&P, i)->rank)
      TRY(jit_error(JIT_ESHARDING, "partition: @%s: arg %u has a sharding of rank %d for %d dims",
                    f->name, i, a->rank, gtype(&P, i)->rank));
    spec_of(a, &P.sp[i]);
    fit(&P, gtype(&P, i), &P.sp[i]);
    P.known[i] = true;
  }
  TRY(run_part(&P, NULL, NULL, NULL));

  p->n_params = f->n_params;
  p->n_results = f->n_results;
  p->n_values = P.g->n_ins;
  p->param_shardings = calloc(f->n_params ? f->n_params : 1, sizeof *p->param_shardings);
  p->result_shardings = calloc(f->n_results ? f->n_results : 1, sizeof *p->result_shardings);
  p->value_shardings = calloc(p->n_values ? p->n_values : 1, sizeof *p->value_shardings);
  if (!p->param_shardings || !p->result_shardings || !p->value_shardings) TRY(oom());
  for (uint32_t i = 0; i < f->n_params; i++)
    TRY(make_sharding(&P, &P.sp[i], gtype(&P, i)->rank, &p->param_shardings[i]));
  for (uint32_t k = 0; k < f->n_results; k++)
    TRY(make_sharding(&P, &P.sp[f->results[k]], gtype(&P, f->results[k])->rank,
                      &p->result_shardings[k]));
  for (uint32_t v = 0; v < p->n_values; v++) {
    const ir_type *lt = ir_type_of(P.g, v);
    if (ir_op_has_body(P.g->ins[v].op) || !spec_any(&P.lsp[v], lt->rank)) continue;
    TRY(make_sharding(&P, &P.lsp[v], lt->rank, &p->value_shardings[v]));
  }
  p->comm_bytes = comm_bytes(P.g, mesh->n_devices);
  p->local = P.g;
  P.g = NULL;
  *out = p;
  p = NULL;
fail:
  part_free(&P);
  ir_spmd_free(p);
  return st;
}

static void note_sharding(void *ctx, ir_ref r, char *buf, size_t n) {
  const ir_spmd *p = ctx;
  char spec_text[256];
  if (r >= p->n_values || !p->value_shardings[r]) return;
  if (sharding_format_spec(p->value_shardings[r], spec_text, sizeof spec_text) >= (int)sizeof spec_text)
    return;
  snprintf(buf, n, "{\"%s\"}", spec_text);
}

jit_status ir_spmd_print(const ir_spmd *p, FILE *out) {
  return ir_print_annotated(p->local, out, note_sharding, (void *)p);
}

