/* vmap.c: the batching transformation: emits into a destination function the batched version of
 * a traced body, one batching rule per op (jit_vmap's work; not a pass of the pipeline).
 *
 * What it does: walks the body once in order. Each body value is either unbatched (the same
 * value as in the body, emitted once) or batched with the batch dim at some position k of its
 * dst value. Rules keep the batch dim where it already is whenever the op allows it, so a
 * chain of elementwise ops, slices, reductions and dots emits no transposes; it moves only for
 * a reshape that mixes the dims on both sides of it (to 0), where two batched operands
 * disagree, and for the results (to out_axes). Dots take batched operands as dot batch dims
 * (one batched operand: its batch dim becomes a free dim), never a loop.
 * Needs: body verified; args typed as the params with the batch dim inserted at in_axes.
 * Keeps: every emitted instruction carries the location (and checkpoint tag, attr.remat) of the
 * body instruction it comes from; the ops that move results to out_axes carry the vmap's.
 * Cost: O(instructions), at most a few dst instructions per body instruction.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "ir/mesh_spec.h"
#include "runtime/error.h"

typedef struct vm {
  ir_func *dst;
  const ir_func *body;
  ir_ref *map;    /* body ref -> dst ref */
  int8_t *bd;     /* body ref -> batch dim in the dst value, -1: unbatched */
  int64_t batch;  /* the batch size */
  ir_loc loc;     /* location of what is being emitted */
  const char *op; /* the body op being batched, for messages */
  uint32_t remat; /* its checkpoint tag, kept by everything emitted for it */
  ir_ref **inlined; /* body ref of a COND batched over its index -> its results, inlined and
                     selected per example (malloc'd on first use, each batched at 0) */
  jit_status st;  /* the first failure (the last error holds its message) */
} vm;

static jit_status vfail(vm *v, jit_status s, const char *fmt, ...) JIT_PRINTF(3, 4);
static jit_status vfail(vm *v, jit_status s, const char *fmt, ...) {
  if (v->st != JIT_OK) return v->st;
  char reason[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  if (v->loc.file)
    jit_error(s, "%s at %s:%d: %s", v->op, v->loc.file, v->loc.line, reason);
  else
    jit_error(s, "%s: %s", v->op, reason);
  v->st = s;
  return s;
}

/* t with the batch dim inserted at k; false (recorded) if the rank would exceed the limit. */
static bool batched_type(vm *v, const ir_type *t, int k, ir_type *out) {
  if (t->rank + 1 > IR_MAX_RANK) {
    char s[128];
    ir_format_type(t, s, sizeof s);
    vfail(v, JIT_ESHAPE, "batching %s would need rank %d (at most %d)", s, t->rank + 1,
          IR_MAX_RANK);
    return false;
  }
  *out = (ir_type){.dtype = t->dtype, .rank = t->rank + 1};
  for (int i = 0, j = 0; i < out->rank; i++) out->dims[i] = i == k ? v->batch : t->dims[j++];
  return true;
}

/* Infers the type (declared where the op needs one) and emits at v->loc. */
static ir_ref emit(vm *v, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *attr,
                   const ir_type *declared) {
  if (v->st != JIT_OK) return IR_NOREF;
  const ir_type *tys[3] = {0}, **t = tys;
  if (n > 3 && !(t = malloc(n * sizeof *t))) {
    vfail(v, JIT_ENOMEM, "out of memory");
    return IR_NOREF;
  }
  for (uint32_t i = 0; i < n; i++) t[i] = ir_type_of(v->dst, args[i]);
  ir_type out;
  char why[512];
  ir_ref r = IR_NOREF;
  ir_attr a = {0};
  if (attr) a = *attr;
  a.remat = v->remat;
  attr = &a;
  jit_status st = ir_infer_type(op, n, t, attr, declared, &out, why, sizeof why);
  if (st != JIT_OK) {
    /* the body passed these rules: only the batched rank can break them */
    vfail(v, st == JIT_EINVAL ? JIT_EINTERNAL : st, "batched %s: %s", ir_op_name[op], why);
  } else {
    r = ir_emit(v->dst, op, ir_type_intern(v->dst, &out), n, args, attr, v->loc);
    if (r == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  }
  if (t != tys) free(t);
  return r;
}

/* x (batched at from) with its batch dim moved to position to. */
static ir_ref move_bdim(vm *v, ir_ref x, int from, int to) {
  if (from == to || x == IR_NOREF) return x;
  int rank = ir_type_of(v->dst, x)->rank;
  ir_attr a = {0};
  a.dims.n = (uint8_t)rank;
  for (int j = 0, i = 0; j < rank; j++) {
    if (j == to) {
      a.dims.d[j] = (uint8_t)from;
      continue;
    }
    if (i == from) i++;
    a.dims.d[j] = (uint8_t)i++;
  }
  return emit(v, IR_TRANSPOSE, 1, &x, &a, NULL);
}

/* Body value b as a dst value batched at k: broadcast when unbatched, moved when elsewhere. */
static ir_ref batched_at(vm *v, ir_ref b, int k) {
  if (v->st != JIT_OK) return IR_NOREF;
  ir_ref x = v->map[b];
  if (v->bd[b] >= 0) return move_bdim(v, x, v->bd[b], k);
  ir_type to, xt = *ir_type_of(v->dst, x);
  if (!batched_type(v, &xt, k, &to)) return IR_NOREF;
  ir_attr a = {0};
  a.dims.n = (uint8_t)xt.rank;
  for (int i = 0; i < xt.rank; i++) a.dims.d[i] = (uint8_t)(i < k ? i : i + 1);
  return emit(v, IR_BROADCAST, 1, &x, &a, &to);
}

/* Body dim d of a value batched at k, as a dst dim. */
static inline int shift(int d, int k) { return k >= 0 && d >= k ? d + 1 : d; }

/* ---- rules: each sets map[r] and bd[r] for body instruction r ------------------------------- */

static void copy_unbatched(vm *v, ir_ref r, const ir_ins *in) {
  ir_ref small[8], *args = small;
  if (in->n_args > 8 && !(args = malloc(in->n_args * sizeof *args))) {
    vfail(v, JIT_ENOMEM, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < in->n_args; i++) args[i] = v->map[in->args[i]];
  ir_ty ty = ir_type_intern(v->dst, &v->body->types[in->ty]);
  ir_attr attr;
  if (ir_attr_for_copy(v->dst, v->body, in, &attr) != JIT_OK) ty = UINT32_MAX;
  v->map[r] = ty == UINT32_MAX ? IR_NOREF : ir_emit(v->dst, in->op, ty, in->n_args, args, &attr, v->loc);
  if (v->map[r] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  v->bd[r] = -1;
  if (args != small) free(args);
}

/* Elementwise (incl. convert, cmp, select): every operand batched at the first batched
   operand's position. */
static void rule_elementwise(vm *v, ir_ref r, const ir_ins *in) {
  int k = -1;
  for (uint32_t i = 0; i < in->n_args && k < 0; i++) k = v->bd[in->args[i]];
  ir_ref args[3];
  for (uint32_t i = 0; i < in->n_args; i++) args[i] = batched_at(v, in->args[i], k);
  ir_type decl;
  if (!batched_type(v, &v->body->types[in->ty], k, &decl)) return;
  v->map[r] = emit(v, in->op, in->n_args, args, &in->attr, &decl);
  v->bd[r] = (int8_t)k;
}

static int64_t suffix_numel(const ir_type *t, int from) {
  int64_t n = 1;
  for (int i = from; i < t->rank; i++) n *= t->dims[i];
  return n;
}

/* Row-major order: with the batch dim at k in the operand and at j in the result, the reshape
   is the per-example one exactly when the dims after the batch hold as many elements on both
   sides. Such a j (k itself preferred) avoids a transpose; otherwise the batch dim moves to 0,
   where j = 0 always works. */
static void rule_reshape(vm *v, ir_ref r, const ir_ins *in) {
  const ir_type *from = &v->body->types[v->body->ins[in->args[0]].ty];
  const ir_type *to = &v->body->types[in->ty];
  int k = v->bd[in->args[0]], j = -1;
  int64_t after = suffix_numel(from, k);
  if (k <= to->rank && suffix_numel(to, k) == after) j = k;
  for (int i = 0; j < 0 && i <= to->rank; i++)
    if (suffix_numel(to, i) == after) j = i;
  ir_ref x = v->map[in->args[0]];
  if (j < 0) {
    x = move_bdim(v, x, k, 0);
    j = 0;
  }
  ir_type decl;
  if (!batched_type(v, to, j, &decl)) return;
  v->map[r] = emit(v, IR_RESHAPE, 1, &x, NULL, &decl);
  v->bd[r] = (int8_t)j;
}

/* The batch dim stays at k in the result: the other dims permute around it. */
static void rule_transpose(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]], n = in->attr.dims.n;
  ir_attr a = {0};
  a.dims.n = (uint8_t)(n + 1);
  for (int j = 0; j <= n; j++)
    a.dims.d[j] = (uint8_t)(j == k ? k : shift(in->attr.dims.d[j < k ? j : j - 1], k));
  v->map[r] = emit(v, IR_TRANSPOSE, 1, &v->map[in->args[0]], &a, NULL);
  v->bd[r] = (int8_t)k;
}

/* Operand batch dim k goes to the result position right after where operand dim k-1 goes, so
   the dims list stays increasing and no transpose is needed. */
static void rule_broadcast(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]], n = in->attr.dims.n;
  int q = k == 0 ? 0 : in->attr.dims.d[k - 1] + 1;
  ir_attr a = {0};
  a.dims.n = (uint8_t)(n + 1);
  for (int j = 0; j <= n; j++)
    a.dims.d[j] = (uint8_t)(j == k ? q : shift(in->attr.dims.d[j < k ? j : j - 1], q));
  ir_type decl;
  if (!batched_type(v, &v->body->types[in->ty], q, &decl)) return;
  v->map[r] = emit(v, IR_BROADCAST, 1, &v->map[in->args[0]], &a, &decl);
  v->bd[r] = (int8_t)q;
}

static void rule_slice(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]], n = v->body->types[v->body->ins[in->args[0]].ty].rank;
  ir_attr a = {0};
  for (int j = 0; j <= n; j++) {
    int d = j < k ? j : j - 1;
    a.slice.start[j] = j == k ? 0 : in->attr.slice.start[d];
    a.slice.limit[j] = j == k ? v->batch : in->attr.slice.limit[d];
    a.slice.stride[j] = j == k ? 1 : in->attr.slice.stride[d];
  }
  v->map[r] = emit(v, IR_SLICE, 1, &v->map[in->args[0]], &a, NULL);
  v->bd[r] = (int8_t)k;
}

static void rule_concat(vm *v, ir_ref r, const ir_ins *in) {
  int k = -1;
  for (uint32_t i = 0; i < in->n_args && k < 0; i++) k = v->bd[in->args[i]];
  ir_ref *args = malloc(in->n_args * sizeof *args);
  if (!args) {
    vfail(v, JIT_ENOMEM, "out of memory");
    return;
  }
  for (uint32_t i = 0; i < in->n_args; i++) args[i] = batched_at(v, in->args[i], k);
  ir_attr a = {0};
  a.axis = shift((int)in->attr.axis, k);
  a.sort = in->attr.sort;
  v->map[r] = emit(v, in->op, in->n_args, args, &a, NULL);
  v->bd[r] = (int8_t)k;
  free(args);
}

static void rule_reduce(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]], before = 0;
  ir_attr a = {0};
  a.dims.n = in->attr.dims.n;
  for (int i = 0; i < in->attr.dims.n; i++) {
    a.dims.d[i] = (uint8_t)shift(in->attr.dims.d[i], k);
    before += in->attr.dims.d[i] < k;
  }
  v->map[r] = emit(v, in->op, 1, &v->map[in->args[0]], &a, NULL);
  v->bd[r] = (int8_t)(k - before);
}

/* ---- gather, scatter, pad, rev (JAX's rules in lax/slicing.py) ---------------------------------- */

static void rule_rev(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]];
  ir_attr a = {0};
  a.dims.n = in->attr.dims.n;
  for (int i = 0; i < a.dims.n; i++) a.dims.d[i] = (uint8_t)shift(in->attr.dims.d[i], k);
  v->map[r] = emit(v, IR_REV, 1, &v->map[in->args[0]], &a, NULL);
  v->bd[r] = (int8_t)k;
}

/* pad: the batch dim is not padded. A batched pad value: pad with 0, then select the pad value
   where a padded mask of ones is 0. */
static void rule_pad(vm *v, ir_ref r, const ir_ins *in) {
  const ir_type *xt = &v->body->types[v->body->ins[in->args[0]].ty], *rt = &v->body->types[in->ty];
  bool pv_batched = v->bd[in->args[1]] >= 0;
  int k = pv_batched ? 0 : v->bd[in->args[0]];
  ir_attr a = {0};
  for (int j = 0; j <= xt->rank; j++) {
    if (j == k) continue;
    int d = j < k ? j : j - 1;
    a.pad.lo[j] = in->attr.pad.lo[d];
    a.pad.hi[j] = in->attr.pad.hi[d];
    a.pad.interior[j] = in->attr.pad.interior[d];
  }
  ir_type scalar = {.dtype = xt->dtype}, decl;
  ir_ref args[2] = {batched_at(v, in->args[0], k), pv_batched ? IR_NOREF : v->map[in->args[1]]};
  if (pv_batched) {
    ir_attr z = {0};
    args[1] = emit(v, IR_CONST, 0, NULL, &z, &scalar);
  }
  ir_ref padded = emit(v, IR_PAD, 2, args, &a, NULL);
  v->bd[r] = (int8_t)k;
  if (!pv_batched) {
    v->map[r] = padded;
    return;
  }
  ir_type ones_t = *xt, off_t = {.dtype = JIT_BOOL};
  ones_t.dtype = JIT_BOOL;
  ir_attr one = {0}, bc = {0};
  one.value = 1;
  ir_ref mask_args[2] = {emit(v, IR_CONST, 0, NULL, &one, &ones_t), emit(v, IR_CONST, 0, NULL, &bc, &off_t)};
  ir_attr pa = in->attr;
  pa.remat = 0;
  ir_ref mask = emit(v, IR_PAD, 2, mask_args, &pa, NULL);
  if (!batched_type(v, rt, 0, &decl)) return;
  ir_type mdecl = decl;
  mdecl.dtype = JIT_BOOL;
  bc.dims.n = (uint8_t)rt->rank;
  for (int i = 0; i < rt->rank; i++) bc.dims.d[i] = (uint8_t)(i + 1);
  ir_ref sel[3] = {emit(v, IR_BROADCAST, 1, &mask, &bc, &mdecl), padded, IR_NOREF};
  ir_attr pb = {0};
  pb.dims.n = 1;
  sel[2] = emit(v, IR_BROADCAST, 1, &v->map[in->args[1]], &pb, &decl);
  v->map[r] = emit(v, IR_SELECT, 3, sel, NULL, NULL);
}

/* Body indices idx (batched or not) batched at 0 with an explicit index vector dim (*dim), led
   by a counter over the batch: each example then names its own operand slice. */
static ir_ref counted_indices(vm *v, ir_ref idx, int index_dim, int *dim) {
  ir_ref x = batched_at(v, idx, 0);
  if (x == IR_NOREF) return x;
  ir_type t = *ir_type_of(v->dst, x);
  *dim = index_dim + 1;
  if (*dim == t.rank) { /* the implicit trailing dim of length 1, made explicit */
    if (t.rank == IR_MAX_RANK) {
      vfail(v, JIT_ESHAPE, "batched indices would need rank %d (at most %d)", t.rank + 1, IR_MAX_RANK);
      return IR_NOREF;
    }
    t.dims[t.rank++] = 1;
    x = emit(v, IR_RESHAPE, 1, &x, NULL, &t);
  }
  if (jit_dtype_size(t.dtype) < 4) { /* room for the counter */
    t.dtype = JIT_I32;
    x = emit(v, IR_CONVERT, 1, &x, NULL, &t);
  }
  ir_type ct = t;
  ct.dims[*dim] = 1;
  ir_attr io = {0}, cat = {0};
  ir_ref parts[2] = {emit(v, IR_IOTA, 0, NULL, &io, &ct), x};
  cat.axis = *dim;
  return emit(v, IR_CONCAT, 2, parts, &cat, NULL);
}

/* The dims of d shifted past a new leading operand dim (lead: also the new dim 0 first). */
static ir_dims shifted(const ir_dims *d, bool lead) {
  ir_dims o = {0};
  if (lead) o.d[o.n++] = 0;
  for (int i = 0; i < d->n && o.n < IR_MAX_RANK; i++) o.d[o.n++] = (uint8_t)(d->d[i] + 1);
  return o;
}

/* gather and scatter: the operand (and updates) batched at 0. Batched indices get a counter
   (the operand's batch dim collapsed / inserted); otherwise the batch dim is a window dim of
   the whole batch. The result is batched at 0. */
static void rule_gather_scatter(vm *v, ir_ref r, const ir_ins *in) {
  const ir_gather *g = &in->attr.gather;
  bool scatter = in->op == IR_SCATTER, idx_batched = v->bd[in->args[1]] >= 0;
  bool x_batched = scatter || v->bd[in->args[0]] >= 0;
  ir_attr a = {0};
  ir_gather *n = &a.gather;
  *n = *g;
  ir_ref args[3] = {x_batched ? batched_at(v, in->args[0], 0) : v->map[in->args[0]],
                    v->map[in->args[1]], scatter ? batched_at(v, in->args[2], 0) : IR_NOREF};
  if (x_batched && !idx_batched) { /* the batch dim: a window over all of it */
    n->offset_dims = shifted(&g->offset_dims, true);
    n->collapsed = shifted(&g->collapsed, false);
    n->start_map = shifted(&g->start_map, false);
    n->sizes[0] = v->batch;
    for (int d = 0; d + 1 < IR_MAX_RANK; d++) n->sizes[d + 1] = g->sizes[d];
  } else if (!x_batched) { /* batched indices only: a leading batch dim of the result */
    args[1] = batched_at(v, in->args[1], 0);
    n->index_dim = (uint8_t)(g->index_dim + 1);
    n->offset_dims = shifted(&g->offset_dims, false);
  } else {
    int dim = 0;
    args[1] = counted_indices(v, in->args[1], g->index_dim, &dim);
    n->index_dim = (uint8_t)dim;
    n->offset_dims = shifted(&g->offset_dims, false);
    n->collapsed = shifted(&g->collapsed, true);
    n->start_map = shifted(&g->start_map, true);
    n->sizes[0] = 1;
    for (int d = 0; d + 1 < IR_MAX_RANK; d++) n->sizes[d + 1] = g->sizes[d];
  }
  if (scatter) memset(n->sizes, 0, sizeof n->sizes);
  v->map[r] = emit(v, in->op, scatter ? 3 : 2, args, &a, NULL);
  v->bd[r] = 0;
}

/* Index of dst dim k among the free dims (neither batch nor contracting) of a dot operand. */
static int free_index(int k, const uint8_t *batch, const uint8_t *contract, int nb, int nc) {
  int idx = 0;
  for (int d = 0; d < k; d++) {
    bool used = false;
    for (int i = 0; i < nb; i++) used |= batch[i] == d;
    for (int i = 0; i < nc; i++) used |= contract[i] == d;
    idx += !used;
  }
  return idx;
}

/* Both operands batched: the batch dims pair up as a new leading dot batch dim. One batched:
   its batch dim is one more free dim of that operand, so the other is not broadcast. */
static void rule_dot(vm *v, ir_ref r, const ir_ins *in) {
  const ir_dot_dims *d = &in->attr.dot;
  int kl = v->bd[in->args[0]], kr = v->bd[in->args[1]], nb = d->n_batch, nc = d->n_contract;
  int both = kl >= 0 && kr >= 0;
  ir_attr a = {0};
  a.dot.n_batch = (uint8_t)(nb + both);
  a.dot.n_contract = (uint8_t)nc;
  if (both) {
    a.dot.lhs_batch[0] = (uint8_t)kl;
    a.dot.rhs_batch[0] = (uint8_t)kr;
  }
  for (int i = 0; i < nb; i++) {
    a.dot.lhs_batch[i + both] = (uint8_t)shift(d->lhs_batch[i], kl);
    a.dot.rhs_batch[i + both] = (uint8_t)shift(d->rhs_batch[i], kr);
  }
  for (int i = 0; i < nc; i++) {
    a.dot.lhs_contract[i] = (uint8_t)shift(d->lhs_contract[i], kl);
    a.dot.rhs_contract[i] = (uint8_t)shift(d->rhs_contract[i], kr);
  }
  ir_ref args[2] = {v->map[in->args[0]], v->map[in->args[1]]};
  v->map[r] = emit(v, IR_DOT, 2, args, &a, NULL);
  if (both) {
    v->bd[r] = 0;
  } else if (kl >= 0) {
    v->bd[r] = (int8_t)(nb + free_index(kl, a.dot.lhs_batch, a.dot.lhs_contract, nb, nc));
  } else {
    int lhs_rank = v->body->types[v->body->ins[in->args[0]].ty].rank;
    v->bd[r] = (int8_t)(nb + (lhs_rank - nb - nc) +
                        free_index(kr, a.dot.rhs_batch, a.dot.rhs_contract, nb, nc));
  }
}

/* A scan with a batched operand: every carry is batched (unbatched inits broadcast), each
   batched const and x keeps its batch (an x's moves to dim 1, so that its slices have it at 0),
   and the body is vmapped into a new body whose results are all batched at 0. The scan's token
   is marked batched (bd 0): its GETs are batched at 0 (carries) or 1 (ys). */
static void rule_scan(vm *v, ir_ref r, const ir_ins *in) {
  const ir_scan *sa = &in->attr.scan;
  const ir_func *b = ir_scan_body(v->body, in);
  uint32_t na = in->n_args, c0 = sa->n_consts, nc = sa->n_carry;
  ir_ref *ops = malloc((na + 1) * sizeof *ops), *bp = malloc((na + 1) * sizeof *bp);
  ir_ref *res = malloc((b->n_results + 1) * sizeof *res);
  int *in_axes = malloc((na + 1) * sizeof *in_axes), *out_axes = calloc(b->n_results + 1, sizeof(int));
  ir_func *nb = ir_func_new(b->name);
  if (!ops || !bp || !res || !in_axes || !out_axes || !nb) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < na && v->st == JIT_OK; i++) {
    ir_ref a = in->args[i];
    bool carry = i >= c0 && i < c0 + nc, x = i >= c0 + nc;
    in_axes[i] = carry || v->bd[a] >= 0 ? 0 : -1;
    if (in_axes[i] < 0) ops[i] = v->map[a];
    else if (x) ops[i] = move_bdim(v, v->map[a], v->bd[a], 1);
    else ops[i] = batched_at(v, a, 0);
    /* the new body's param: the old one's type, batched at 0 when the operand is */
    ir_type pt = *ir_type_of(b, i), bt = pt;
    if (in_axes[i] == 0 && !batched_type(v, &pt, 0, &bt)) break;
    ir_ty ty = ir_type_intern(nb, &bt);
    bp[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(nb, ty);
    if (bp[i] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  }
  if (v->st != JIT_OK) goto done;
  jit_status st = ir_vmap_into(nb, b, bp, in_axes, v->batch, out_axes, res, in->loc);
  if (st != JIT_OK) {
    v->st = st; /* the message (the body's op and line) is already the last error */
    goto done;
  }
  if (ir_set_results(nb, b->n_results, res) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  ir_attr a = in->attr;
  a.remat = v->remat;
  ir_func *owned = nb;
  nb = NULL;
  if (ir_add_body(v->dst, owned, &a.scan.body) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  v->map[r] = ir_emit(v->dst, IR_SCAN, ir_type_intern(v->dst, &v->body->types[in->ty]), na, ops,
                      &a, v->loc);
  if (v->map[r] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  v->bd[r] = 0;
done:
  ir_func_free(nb);
  free(ops);
  free(bp);
  free(res);
  free(in_axes);
  free(out_axes);
}

/* Body params batched at 0 where in_axes says, into nb (a body being built); false (recorded)
   on failure. */
static bool batched_params(vm *v, ir_func *nb, const ir_func *b, const int *in_axes, ir_ref *bp) {
  for (uint32_t i = 0; i < b->n_params; i++) {
    ir_type pt = *ir_type_of(b, i), bt = pt;
    if (in_axes[i] == 0 && !batched_type(v, &pt, 0, &bt)) return false;
    ir_ty ty = ir_type_intern(nb, &bt);
    bp[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(nb, ty);
    if (bp[i] == IR_NOREF) return vfail(v, JIT_ENOMEM, "out of memory"), false;
  }
  return true;
}

/* nb's body: b vmapped on nb's params (batched as in_axes says), every result batched at 0. */
static bool vmap_body(vm *v, ir_func *nb, const ir_func *b, const int *in_axes, ir_loc loc) {
  ir_ref *bp = malloc((b->n_params + 1) * sizeof *bp), *res = malloc((b->n_results + 1) * sizeof *res);
  int *out_axes = calloc(b->n_results + 1, sizeof *out_axes);
  bool ok = bp && res && out_axes;
  if (!ok) vfail(v, JIT_ENOMEM, "out of memory");
  ok = ok && batched_params(v, nb, b, in_axes, bp);
  if (ok) {
    jit_status st = ir_vmap_into(nb, b, bp, in_axes, v->batch, out_axes, res, loc);
    if (st != JIT_OK) v->st = st; /* the message (the body's op and line) is the last error */
    else if (ir_set_results(nb, b->n_results, res) != JIT_OK) vfail(v, JIT_ENOMEM, "out of memory");
    ok = v->st == JIT_OK;
  }
  free(bp);
  free(res);
  free(out_axes);
  return ok;
}

/* in's operands from `first` on for a batched body: batched ones at 0, in_axes accordingly;
   with all_batched, operands from `from_all` on are batched even when they are not. */
static void batched_operands(vm *v, const ir_ins *in, uint32_t first, uint32_t from_all, ir_ref *ops,
                             int *in_axes) {
  for (uint32_t i = first; i < in->n_args; i++) {
    ir_ref a = in->args[i];
    in_axes[i - first] = i >= from_all || v->bd[a] >= 0 ? 0 : -1;
    ops[i] = in_axes[i - first] < 0 ? v->map[a] : batched_at(v, a, 0);
  }
}

/* Emits op over ops with the new bodies nbs[0..n) (taken, also on failure); map[r], bd[r] = 0. */
static void emit_with_bodies(vm *v, ir_ref r, const ir_ins *in, ir_func **nbs, uint32_t n, const ir_ref *ops) {
  ir_attr a = in->attr;
  a.remat = v->remat;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t index = 0;
    if (v->st == JIT_OK && ir_add_body(v->dst, nbs[j], &index) != JIT_OK) vfail(v, JIT_ENOMEM, "out of memory");
    else if (v->st != JIT_OK) ir_func_free(nbs[j]);
    nbs[j] = NULL;
    if (j == 0) a.cond.body = index;
  }
  if (v->st != JIT_OK) return;
  v->map[r] = ir_emit(v->dst, in->op, ir_type_intern(v->dst, &v->body->types[in->ty]), in->n_args, ops,
                      &a, v->loc);
  if (v->map[r] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  v->bd[r] = 0;
}

/* An i32[batch] or bool[batch] value p (batched at 0) broadcast to t batched at 0. */
static ir_ref lanes_as(vm *v, ir_ref p, const ir_type *t) {
  ir_type to;
  if (!batched_type(v, t, 0, &to)) return IR_NOREF;
  to.dtype = ir_type_of(v->dst, p)->dtype;
  if (to.rank == 1) return p;
  ir_attr a = {0};
  a.dims.n = 1;
  return emit(v, IR_BROADCAST, 1, &p, &a, &to);
}

/* A COND over a batched index runs every branch and selects per example (JAX's rule): the
   branches are inlined, batched at 0, and result k = branch idx's, idx clamped to [0, n). */
static void cond_select(vm *v, ir_ref r, const ir_ins *in) {
  uint32_t n = in->attr.cond.n_bodies, na = in->n_args - 1;
  const ir_func *b0 = ir_body(v->body, in);
  uint32_t nr = b0->n_results;
  ir_ref *args = malloc((na + 1) * sizeof *args), *res = malloc((nr + 1) * sizeof *res);
  ir_ref *acc = malloc((nr + 1) * sizeof *acc);
  int *in_axes = malloc((na + 1) * sizeof *in_axes), *out_axes = calloc(nr + 1, sizeof *out_axes);
  if (!v->inlined && !(v->inlined = calloc(v->body->n_ins, sizeof *v->inlined))) goto nomem;
  if (!args || !res || !acc || !in_axes || !out_axes) goto nomem;
  for (uint32_t i = 0; i < na; i++) {
    ir_ref a = in->args[1 + i];
    in_axes[i] = v->bd[a] >= 0 ? 0 : -1;
    args[i] = in_axes[i] < 0 ? v->map[a] : batched_at(v, a, 0);
  }
  ir_ref idx = batched_at(v, in->args[0], 0);
  if (v->st != JIT_OK) goto done;
  int64_t bdim = v->batch;
  ir_ty it = ir_type_make(v->dst, JIT_I32, 1, &bdim);
  ir_ref lo[2] = {idx, ir_emit_const(v->dst, it, 0, v->loc)};
  idx = emit(v, IR_MAX, 2, lo, NULL, NULL);
  ir_ref hi[2] = {idx, ir_emit_const(v->dst, it, (double)(n - 1), v->loc)};
  idx = emit(v, IR_MIN, 2, hi, NULL, NULL);
  for (uint32_t j = n; j-- > 0 && v->st == JIT_OK;) { /* last branch first: the default */
    jit_status st = ir_vmap_into(v->dst, ir_body_at(v->body, in, j), args, in_axes, v->batch,
                                 out_axes, res, in->loc);
    if (st != JIT_OK) {
      v->st = st;
      break;
    }
    if (j == n - 1) {
      memcpy(acc, res, nr * sizeof *acc);
      continue;
    }
    ir_attr eq = {0};
    eq.cmp = JIT_EQ;
    ir_ref cj[2] = {idx, ir_emit_const(v->dst, it, (double)j, v->loc)};
    ir_ref pick = emit(v, IR_CMP, 2, cj, &eq, NULL);
    for (uint32_t k = 0; k < nr; k++) {
      ir_ref sel[3] = {lanes_as(v, pick, ir_type_of(b0, b0->results[k])), res[k], acc[k]};
      acc[k] = emit(v, IR_SELECT, 3, sel, NULL, NULL);
    }
  }
  if (v->st == JIT_OK) {
    v->inlined[r] = acc;
    acc = NULL;
    v->map[r] = IR_NOREF; /* its GETs read v->inlined */
    v->bd[r] = 0;
  }
  goto done;
nomem:
  vfail(v, JIT_ENOMEM, "out of memory");
done:
  free(args);
  free(res);
  free(acc);
  free(in_axes);
  free(out_axes);
}

/* A COND with a batched operand. An unbatched index picks one branch for all examples: each
   branch is vmapped into a new body (results batched at 0). A batched index: cond_select. */
static void rule_cond(vm *v, ir_ref r, const ir_ins *in) {
  if (v->bd[in->args[0]] >= 0) {
    cond_select(v, r, in);
    return;
  }
  uint32_t n = in->attr.cond.n_bodies;
  ir_ref *ops = malloc((in->n_args + 1) * sizeof *ops);
  int *in_axes = malloc((in->n_args + 1) * sizeof *in_axes);
  ir_func **nbs = calloc(n, sizeof *nbs);
  if (!ops || !in_axes || !nbs) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  ops[0] = v->map[in->args[0]];
  batched_operands(v, in, 1, in->n_args, ops, in_axes);
  for (uint32_t j = 0; j < n && v->st == JIT_OK; j++) {
    const ir_func *b = ir_body_at(v->body, in, j);
    if (!(nbs[j] = ir_func_new(b->name))) vfail(v, JIT_ENOMEM, "out of memory");
    else vmap_body(v, nbs[j], b, in_axes, in->loc);
  }
  emit_with_bodies(v, r, in, nbs, n, ops);
done:
  for (uint32_t j = 0; nbs && j < n; j++) ir_func_free(nbs[j]);
  free(nbs);
  free(ops);
  free(in_axes);
}

/* bool[batch] -> bool[]: whether any example's predicate holds. */
static ir_ref any_lane(vm *v, ir_ref p) {
  ir_type i32 = *ir_type_of(v->dst, p);
  i32.dtype = JIT_I32;
  ir_ref x = emit(v, IR_CONVERT, 1, &p, NULL, &i32);
  ir_attr a = {0};
  a.dims.n = 1;
  x = emit(v, IR_REDUCE_MAX, 1, &x, &a, NULL);
  ir_attr ne = {0};
  ne.cmp = JIT_NE;
  ir_ref z[2] = {x, ir_emit_const(v->dst, ir_type_intern(v->dst, &(ir_type){.dtype = JIT_I32}), 0, v->loc)};
  return emit(v, IR_CMP, 2, z, &ne, NULL);
}

/* A WHILE with a batched operand: every carry batched at 0; the loop runs while any example's
   predicate holds, and an example whose predicate is false keeps its carries (JAX's rule). The
   new predicate is any(pred); the new body recomputes pred per example and selects. */
static void rule_while(vm *v, ir_ref r, const ir_ins *in) {
  const ir_func *pred = ir_body_at(v->body, in, 0), *body = ir_body_at(v->body, in, 1);
  uint32_t na = in->n_args, nk = in->attr.cond.n_consts, nc = na - nk;
  ir_ref *ops = malloc((na + 1) * sizeof *ops), *bp = malloc((na + 1) * sizeof *bp);
  ir_ref *res = malloc((nc + 1) * sizeof *res);
  int *in_axes = malloc((na + 1) * sizeof *in_axes), zero[1] = {0};
  ir_func *nbs[2] = {ir_func_new(pred->name), ir_func_new(body->name)};
  if (!ops || !bp || !res || !in_axes || !nbs[0] || !nbs[1]) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  batched_operands(v, in, 0, nk, ops, in_axes);
  for (int j = 0; j < 2 && v->st == JIT_OK; j++) {
    vm w = {.dst = nbs[j], .body = v->body, .batch = v->batch, .loc = in->loc, .op = "while"};
    if (!batched_params(v, nbs[j], pred, in_axes, bp)) break;
    ir_ref p;
    jit_status st = ir_vmap_into(nbs[j], pred, bp, in_axes, v->batch, zero, &p, in->loc);
    if (st == JIT_OK && j == 0) {
      p = any_lane(&w, p);
      st = w.st != JIT_OK ? w.st : ir_set_results(nbs[0], 1, &p);
    } else if (st == JIT_OK) {
      int *out_axes = calloc(nc + 1, sizeof *out_axes);
      st = out_axes ? ir_vmap_into(nbs[1], body, bp, in_axes, v->batch, out_axes, res, in->loc)
                    : vfail(v, JIT_ENOMEM, "out of memory");
      free(out_axes);
      for (uint32_t k = 0; k < nc && st == JIT_OK; k++) { /* finished examples keep their carries */
        ir_ref sel[3] = {lanes_as(&w, p, ir_type_of(body, body->results[k])), res[k], bp[nk + k]};
        res[k] = emit(&w, IR_SELECT, 3, sel, NULL, NULL);
        st = w.st;
      }
      if (st == JIT_OK) st = ir_set_results(nbs[1], nc, res);
    }
    if (st != JIT_OK) v->st = st;
  }
  emit_with_bodies(v, r, in, nbs, 2, ops);
done:
  ir_func_free(nbs[0]);
  ir_func_free(nbs[1]);
  free(ops);
  free(bp);
  free(res);
  free(in_axes);
}

/* A result of a batched scan (carries batched at 0, stacked ys at 1) or shard_map (at 0). */
static void rule_get(vm *v, ir_ref r, const ir_ins *in) {
  if (v->inlined && v->inlined[in->args[0]]) { /* a COND selected per example */
    v->map[r] = v->inlined[in->args[0]][in->attr.axis];
    v->bd[r] = 0;
    return;
  }
  ir_ref s = v->map[in->args[0]];
  ir_type t;
  if (!ir_result_type(v->dst, &v->dst->ins[s], (uint32_t)in->attr.axis, &t)) {
    vfail(v, JIT_EINTERNAL, "batched %s has no result %lld", ir_op_name[v->dst->ins[s].op],
          (long long)in->attr.axis);
    return;
  }
  ir_attr a = in->attr;
  a.remat = v->remat;
  v->map[r] = ir_emit(v->dst, IR_GET, ir_type_intern(v->dst, &t), 1, &s, &a, v->loc);
  if (v->map[r] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  const ir_ins *src = &v->body->ins[in->args[0]];
  v->bd[r] = (int8_t)(src->op != IR_SCAN || (uint64_t)in->attr.axis < src->attr.scan.n_carry ? 0 : 1);
}

/* s with an unsplit dim inserted at k (a batch dim), or NULL after recording the failure. */
static jit_sharding *with_unsplit_dim(vm *v, const jit_sharding *s, int k) {
  uint8_t n[JIT_MAX_RANK] = {0}, ax[JIT_MAX_RANK][JIT_MAX_MESH_AXES] = {{0}};
  if (s->rank + 1 > JIT_MAX_RANK) {
    vfail(v, JIT_ESHAPE, "a batched sharding would exceed rank %d", JIT_MAX_RANK);
    return NULL;
  }
  for (int d = 0, o = 0; d <= s->rank; d++) {
    if (d == k) continue;
    n[d] = s->n_dim_axes[o];
    memcpy(ax[d], s->dim_axes[o], sizeof ax[d]);
    o++;
  }
  jit_sharding *bs = NULL;
  if (sharding_new(s->mesh, s->rank + 1, n, (const uint8_t(*)[JIT_MAX_MESH_AXES])ax, &bs) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    return NULL;
  }
  return bs;
}

/* The constraint gains the batch dim, not split (JAX's vmap of with_sharding_constraint). */
static void rule_sharding(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]];
  jit_sharding *bs = with_unsplit_dim(v, in->attr.sharding, k);
  if (!bs) return;
  ir_attr a = in->attr;
  a.sharding = bs;
  ir_ref x = v->map[in->args[0]];
  v->map[r] = emit(v, IR_SHARDING, 1, &x, &a, NULL); /* the function takes its own reference */
  v->bd[r] = (int8_t)k;
  sharding_unref(bs);
}

/* A collective on a batched operand: the same exchange, its dims past the batch dim shifted. */
static void rule_collective(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]];
  if (!v->dst->mesh && v->body->mesh && ir_set_mesh(v->dst, v->body->mesh) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    return;
  }
  ir_attr a = in->attr;
  a.remat = v->remat;
  a.coll.dim = (uint8_t)shift(a.coll.dim, k);
  a.coll.dim2 = (uint8_t)shift(a.coll.dim2, k);
  ir_ref x = v->map[in->args[0]];
  v->map[r] = emit(v, in->op, 1, &x, &a, NULL);
  v->bd[r] = (int8_t)k;
}

/* A shard_map with a batched operand: batched operands bring their batch dim to 0, where every
   spec gains an unsplit dim, and the body is vmapped into a new one whose results are all
   batched at 0 (JAX's vmap of shard_map). */
static void rule_shard_map(vm *v, ir_ref r, const ir_ins *in) {
  const ir_shard_map *sm = &in->attr.smap;
  const ir_func *b = ir_body(v->body, in);
  uint32_t na = in->n_args, no = sm->n_out;
  ir_ref *ops = malloc((na + 1) * sizeof *ops), *bp = malloc((na + 1) * sizeof *bp);
  ir_ref *res = malloc((no + 1) * sizeof *res);
  int *in_axes = malloc((na + 1) * sizeof *in_axes), *out_axes = calloc(no + 1, sizeof(int));
  jit_sharding **specs = calloc(na + no + 1, sizeof *specs);
  ir_func *nb = ir_func_new(b->name);
  if (!ops || !bp || !res || !in_axes || !out_axes || !specs || !nb ||
      (b->mesh && ir_set_mesh(nb, b->mesh) != JIT_OK)) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < na && v->st == JIT_OK; i++) {
    ir_ref a = in->args[i];
    in_axes[i] = v->bd[a] >= 0 ? 0 : -1;
    ops[i] = in_axes[i] < 0 ? v->map[a] : batched_at(v, a, 0);
    specs[i] = in_axes[i] < 0 ? sharding_ref(sm->specs[i]) : with_unsplit_dim(v, sm->specs[i], 0);
    ir_type pt = *ir_type_of(b, i), bt = pt;
    if (in_axes[i] == 0 && !batched_type(v, &pt, 0, &bt)) break;
    ir_ty ty = ir_type_intern(nb, &bt);
    bp[i] = ty == UINT32_MAX ? IR_NOREF : ir_emit_param(nb, ty);
    if (bp[i] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  }
  for (uint32_t k = 0; k < no && v->st == JIT_OK; k++)
    specs[na + k] = with_unsplit_dim(v, sm->specs[na + k], 0);
  if (v->st != JIT_OK) goto done;
  jit_status st = ir_vmap_into(nb, b, bp, in_axes, v->batch, out_axes, res, in->loc);
  if (st != JIT_OK) {
    v->st = st; /* the message (the body's op and line) is already the last error */
    goto done;
  }
  if (ir_set_results(nb, no, res) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  ir_attr a = in->attr;
  a.remat = v->remat;
  a.smap.specs = specs; /* the function copies the array and takes its own references */
  ir_func *owned = nb;
  nb = NULL;
  if (ir_add_body(v->dst, owned, &a.smap.body) != JIT_OK) {
    vfail(v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  v->map[r] = ir_emit(v->dst, IR_SHARD_MAP, ir_type_intern(v->dst, &v->body->types[in->ty]), na,
                      ops, &a, v->loc);
  if (v->map[r] == IR_NOREF) vfail(v, JIT_ENOMEM, "out of memory");
  v->bd[r] = 0;
done:
  for (uint32_t i = 0; specs && i < na + no; i++) sharding_unref(specs[i]);
  free(specs);
  ir_func_free(nb);
  free(ops);
  free(bp);
  free(res);
  free(in_axes);
  free(out_axes);
}

/* ---- conv and windows (JAX's rules in lax/convolution.py, lax/windowed_reductions.py) ------ */

/* x reshaped to dims (rank n) of its dtype. */
static ir_ref reshape_to(vm *v, ir_ref x, int n, const int64_t *dims) {
  if (v->st != JIT_OK) return IR_NOREF;
  ir_type t = {.dtype = ir_type_of(v->dst, x)->dtype, .rank = n};
  for (int i = 0; i < n; i++) t.dims[i] = dims[i];
  return emit(v, IR_RESHAPE, 1, &x, NULL, &t);
}

/* x (batched at k) with its batch dim merged into its dim d (a dim of the unbatched value), as
   the major (or minor) part. */
static ir_ref fold_bdim(vm *v, ir_ref x, int k, int d, bool major) {
  x = move_bdim(v, x, k, major ? d : d + 1);
  if (v->st != JIT_OK) return IR_NOREF;
  const ir_type *t = ir_type_of(v->dst, x);
  int64_t dims[IR_MAX_RANK] = {0};
  for (int i = 0, j = 0; i < t->rank; i++)
    if (i == d + 1) dims[j - 1] *= t->dims[i];
    else dims[j++] = t->dims[i];
  return reshape_to(v, x, t->rank - 1, dims);
}

/* y's dim d split into (batch, rest) (major) or (rest, batch); the batch dim's position in *bd. */
static ir_ref unfold_bdim(vm *v, ir_ref y, int d, bool major, int8_t *bd) {
  if (v->st != JIT_OK) return IR_NOREF;
  const ir_type *t = ir_type_of(v->dst, y);
  int64_t dims[IR_MAX_RANK];
  if (t->rank + 1 > IR_MAX_RANK) {
    vfail(v, JIT_ESHAPE, "batching would need rank %d (at most %d)", t->rank + 1, IR_MAX_RANK);
    return IR_NOREF;
  }
  for (int i = 0, j = 0; i < t->rank; i++) {
    if (i == d) {
      dims[j++] = major ? v->batch : t->dims[i] / v->batch;
      dims[j++] = major ? t->dims[i] / v->batch : v->batch;
    } else {
      dims[j++] = t->dims[i];
    }
  }
  *bd = (int8_t)(major ? d : d + 1);
  return reshape_to(v, y, t->rank + 1, dims);
}

/* x's dim d (of size groups * m, here with the batch B at d just before it) as (groups, B, m)
   merged: the batch goes inside each group (minor = false: from (B, groups, m)). inverse = true
   goes back from a merged (groups, B, m) dim d to (B, groups * m) with the batch at d. */
static ir_ref regroup(vm *v, ir_ref x, int d, int64_t groups, bool inverse) {
  if (v->st != JIT_OK) return IR_NOREF;
  ir_type t = *ir_type_of(v->dst, x);
  int64_t B = v->batch, m = (inverse ? t.dims[d] / B : t.dims[d + 1]) / groups;
  if (t.rank + 2 > IR_MAX_RANK) {
    vfail(v, JIT_ESHAPE, "batching a grouped conv would need rank %d (at most %d)", t.rank + 2, IR_MAX_RANK);
    return IR_NOREF;
  }
  int64_t dims[IR_MAX_RANK] = {0};
  int n = 0;
  for (int i = 0; i < t.rank; i++) {
    if (i == d) {
      int64_t first = inverse ? groups : B, second = inverse ? B : groups;
      dims[n++] = first;
      dims[n++] = second;
      dims[n++] = m;
      if (!inverse) i++; /* (B, groups * m) spans dims d, d + 1 */
    } else {
      dims[n++] = t.dims[i];
    }
  }
  x = reshape_to(v, x, n, dims);
  ir_attr a = {0}; /* swap dims d and d + 1 */
  a.dims.n = (uint8_t)n;
  for (int i = 0; i < n; i++) a.dims.d[i] = (uint8_t)(i == d ? d + 1 : i == d + 1 ? d : i);
  x = emit(v, IR_TRANSPOSE, 1, &x, &a, NULL);
  if (v->st != JIT_OK) return IR_NOREF;
  t = *ir_type_of(v->dst, x);
  n = 0;
  for (int i = 0; i < t.rank; i++) {
    if (i == d) {
      dims[n++] = inverse ? t.dims[d] : t.dims[d] * t.dims[d + 1] * t.dims[d + 2];
      if (inverse) dims[n++] = t.dims[d + 1] * t.dims[d + 2];
      i += 2;
    } else {
      dims[n++] = t.dims[i];
    }
  }
  return reshape_to(v, x, n, dims);
}

/* The batch folds into the lhs's batch dim (lhs batched), the rhs's out features (rhs batched,
   inside each group), or both operands' features as more feature groups (both). */
static void rule_conv(vm *v, ir_ref r, const ir_ins *in) {
  int lk = v->bd[in->args[0]], rk = v->bd[in->args[1]];
  ir_attr a = in->attr;
  const ir_conv *c = &in->attr.conv;
  ir_ref x[2];
  if (lk >= 0 && rk < 0) {
    x[0] = fold_bdim(v, v->map[in->args[0]], lk, c->lhs[0], false);
    x[1] = v->map[in->args[1]];
    ir_ref y = emit(v, IR_CONV, 2, x, &a, NULL);
    v->map[r] = unfold_bdim(v, y, c->out[0], false, &v->bd[r]);
    return;
  }
  if (lk < 0) {
    int64_t groups = c->groups > 1 ? c->groups : c->batch_groups;
    x[0] = v->map[in->args[0]];
    x[1] = regroup(v, move_bdim(v, v->map[in->args[1]], rk, c->rhs[0]), c->rhs[0], groups, false);
    ir_ref y = emit(v, IR_CONV, 2, x, &a, NULL);
    v->map[r] = regroup(v, y, c->out[1], groups, true);
    v->bd[r] = (int8_t)c->out[1];
    return;
  }
  if (c->batch_groups > 1) {
    vfail(v, JIT_EUNSUPPORTED, "no batching rule for a conv with batch groups and both operands batched");
    return;
  }
  x[0] = fold_bdim(v, v->map[in->args[0]], lk, c->lhs[1], true);
  x[1] = fold_bdim(v, v->map[in->args[1]], rk, c->rhs[0], true);
  a.conv.groups = c->groups * v->batch;
  ir_ref y = emit(v, IR_CONV, 2, x, &a, NULL);
  v->map[r] = unfold_bdim(v, y, c->out[1], true, &v->bd[r]);
}

/* A window of 1 over the batch dim. */
static void rule_window(vm *v, ir_ref r, const ir_ins *in) {
  int k = -1;
  for (uint32_t i = 0; i < in->n_args && k < 0; i++) k = v->bd[in->args[i]];
  ir_ref x[2];
  for (uint32_t i = 0; i < in->n_args; i++) x[i] = batched_at(v, in->args[i], k);
  ir_attr a = {0};
  const ir_window *w = &in->attr.window;
  a.window.kind = w->kind;
  for (int j = 0, d = 0; j < IR_MAX_RANK; j++) {
    bool b = j == k;
    a.window.size[j] = b ? 1 : w->size[d];
    a.window.stride[j] = b ? 1 : w->stride[d];
    a.window.pad_lo[j] = b ? 0 : w->pad_lo[d];
    a.window.pad_hi[j] = b ? 0 : w->pad_hi[d];
    if (!b && ++d == IR_MAX_RANK) break;
  }
  v->map[r] = emit(v, in->op, in->n_args, x, &a, NULL);
  v->bd[r] = (int8_t)k;
}

/* FFT runs over the last n_dims dims: a batch dim among them moves to the front (JAX's rule). */
static void rule_fft(vm *v, ir_ref r, const ir_ins *in) {
  int k = v->bd[in->args[0]], rank = ir_type_of(v->dst, v->map[in->args[0]])->rank;
  if (k > rank - 1 - in->attr.fft.n_dims) k = 0;
  ir_ref x = batched_at(v, in->args[0], k);
  v->map[r] = emit(v, IR_FFT, 1, &x, &in->attr, NULL);
  v->bd[r] = (int8_t)k;
}

static void batch_ins(vm *v, ir_ref r) {
  const ir_ins *in = &v->body->ins[r];
  bool any = false;
  for (uint32_t i = 0; i < in->n_args; i++) any |= v->bd[in->args[i]] >= 0;
  v->loc = in->loc;
  v->op = ir_op_name[in->op];
  v->remat = in->attr.remat;
  if (!any) { /* also CONST and IOTA: the same value for every example */
    copy_unbatched(v, r, in);
    return;
  }
  switch (in->op) {
  case IR_RESHAPE: rule_reshape(v, r, in); break;
  case IR_TRANSPOSE: rule_transpose(v, r, in); break;
  case IR_BROADCAST: rule_broadcast(v, r, in); break;
  case IR_SLICE: rule_slice(v, r, in); break;
  case IR_CONCAT: rule_concat(v, r, in); break;
  case IR_REV: rule_rev(v, r, in); break;
  case IR_PAD: rule_pad(v, r, in); break;
  case IR_GATHER:
  case IR_SCATTER: rule_gather_scatter(v, r, in); break;
  case IR_SORT: rule_concat(v, r, in); break; /* every operand batched at one dim */
  case IR_FFT: rule_fft(v, r, in); break;
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: rule_reduce(v, r, in); break;
  case IR_DOT: rule_dot(v, r, in); break;
  case IR_CONV: rule_conv(v, r, in); break;
  case IR_REDUCE_WINDOW:
  case IR_SELECT_SCATTER: rule_window(v, r, in); break;
  case IR_SCAN: rule_scan(v, r, in); break;
  case IR_GET: rule_get(v, r, in); break;
  case IR_COND: rule_cond(v, r, in); break;
  case IR_WHILE: rule_while(v, r, in); break;
  case IR_SHARDING: rule_sharding(v, r, in); break;
  case IR_SHARD_MAP: rule_shard_map(v, r, in); break;
  default:
    if (ir_op_is_collective(in->op))
      rule_collective(v, r, in);
    else if (ir_op_flags[in->op] & IR_EW)
      rule_elementwise(v, r, in);
    else
      vfail(v, JIT_EUNSUPPORTED, "no batching rule for %s", ir_op_name[in->op]);
    break;
  }
}

jit_status ir_vmap_into(ir_func *dst, const ir_func *body, const ir_ref *args, const int *in_axes,
                        int64_t batch, const int *out_axes, ir_ref *results, ir_loc loc) {
  vm v = {.dst = dst, .body = body, .batch = batch, .loc = loc, .op = "vmap"};
  size_t n = body->n_ins ? body->n_ins : 1;
  v.map = malloc(n * sizeof *v.map);
  v.bd = malloc(n);
  if (!v.map || !v.bd) {
    vfail(&v, JIT_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t p = 0; p < body->n_params; p++) {
    const ir_type *pt = &body->types[body->ins[p].ty], *at = ir_type_of(dst, args[p]);
    ir_type want = *pt;
    if (in_axes[p] >= 0 && !batched_type(&v, pt, in_axes[p], &want)) goto done;
    if (!ir_type_equal(&want, at)) {
      char ws[128], as[128];
      ir_format_type(&want, ws, sizeof ws);
      ir_format_type(at, as, sizeof as);
      vfail(&v, JIT_EINTERNAL, "argument %u is %s, expected %s", p, as, ws);
      goto done;
    }
    v.map[p] = args[p];
    v.bd[p] = (int8_t)in_axes[p];
  }
  for (uint32_t r = body->n_params; r < body->n_ins && v.st == JIT_OK; r++) batch_ins(&v, r);
  v.loc = loc;
  v.op = "vmap";
  v.remat = 0;
  for (uint32_t i = 0; i < body->n_results && v.st == JIT_OK; i++) {
    int rank = body->types[body->ins[body->results[i]].ty].rank;
    if (out_axes[i] < 0 || out_axes[i] > rank) {
      vfail(&v, JIT_ESHAPE, "out_axes[%u] = %d out of range for a result of rank %d", i,
            out_axes[i], rank);
      break;
    }
    results[i] = batched_at(&v, body->results[i], out_axes[i]);
  }
done:
  /* it points into body's arena, which a later body may reuse at the same address */
  if (v.st == JIT_OK && dst->oom) vfail(&v, JIT_ENOMEM, "out of memory");
  for (uint32_t i = 0; v.inlined && i < body->n_ins; i++) free(v.inlined[i]);
  free(v.inlined);
  free(v.map);
  free(v.bd);
  return v.st;
}
