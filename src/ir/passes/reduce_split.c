/* reduce_split.c: a long reduction into few outputs becomes two: the first keeps its leading
 * reduced axes, the second reduces them (XLA's tree reduction rewriter, for threads instead of
 * GPU blocks). A conv's filter gradient sums [4096, 12, 12, 8] into [8]: as one kernel that is
 * one row of 8 columns, a sequential chain of 589824 adds on one thread; split, the first sum
 * is [4096, 8] (4096 rows the threads share, 144 adds each) and the second sums 4096 x 8.
 * Float sums also round less: each partial sum is short.
 *
 * The second reduction is emitted just before the first instruction that reads the result, not
 * right after the first: sibling reductions of one operand (the nine offsets of a filter
 * gradient) then stay adjacent, and fusion merges their first halves into one kernel that reads
 * the operand once (fusion.c, merge_siblings).
 *
 * Needs: verified f. Keeps: every value's type; the result up to the rounding of a float sum or
 * product in another order (max and min exactly). f16 and bf16 sums and products stay whole:
 * kernels sum those in f32, and a split would round the partial sums to the dtype.
 * Cost: O(instructions); one rebuild when some reduction splits.
 */
#include <stdlib.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"

#define SPLIT_MIN_REDUCED 32768 /* elements summed into each output: shorter ones stay whole */
#define SPLIT_FEW_ROWS 16       /* ... and only when the kernel would have fewer rows than this */
#define SPLIT_KEEP 16           /* the first sum keeps leading axes up to this many rows ... */
#define SPLIT_MIN_KEEP 4        /* ... at least this many ... */
#define SPLIT_MIN_LEFT 8        /* ... and still reduces this many elements into each */
#define COLUMNS_PER_ROW 256     /* a column reduction's outputs per row (codegen/lower.c) */

static const char *const who = "reduce_split";

/* The axes the first reduction keeps, as a bit set (0: no split). */
static unsigned kept_axes(const ir_func *f, const ir_ins *in) {
  if (in->op != IR_REDUCE_SUM && in->op != IR_REDUCE_MAX && in->op != IR_REDUCE_MIN &&
      in->op != IR_REDUCE_PROD)
    return 0;
  const ir_type *x = ir_type_of(f, in->args[0]);
  bool sum = in->op == IR_REDUCE_SUM || in->op == IR_REDUCE_PROD;
  if (ir_dtype_is_complex(x->dtype) || x->dtype == JIT_BOOL ||
      (sum && (x->dtype == JIT_F16 || x->dtype == JIT_BF16)))
    return 0;
  bool reduced[IR_MAX_RANK] = {false};
  for (int k = 0; k < in->attr.dims.n; k++) reduced[in->attr.dims.d[k]] = true;
  int64_t n_reduced = 1, n_out = 1;
  int last = -1, last_reduced = -1;
  for (int d = 0; d < x->rank; d++) {
    if (x->dims[d] == 1) continue;
    last = d;
    if (reduced[d]) n_reduced *= x->dims[d], last_reduced = d;
    else n_out *= x->dims[d];
  }
  if (n_reduced < SPLIT_MIN_REDUCED || n_out == 0) return 0;
  /* the rows the whole reduction would run as: a column reduction (its last axis kept) has
     COLUMNS_PER_ROW outputs a row */
  int64_t rows = n_out;
  if (last >= 0 && !reduced[last]) {
    int64_t cols = x->dims[last];
    rows = n_out / cols * ((cols + COLUMNS_PER_ROW - 1) / COLUMNS_PER_ROW);
  }
  if (rows >= SPLIT_FEW_ROWS) return 0;
  unsigned keep = 0;
  int64_t kept = 1;
  for (int d = 0; d < last_reduced && kept < SPLIT_KEEP; d++) {
    if (!reduced[d] || x->dims[d] == 1) continue;
    if (n_reduced / (kept * x->dims[d]) < SPLIT_MIN_LEFT) break;
    keep |= 1u << d;
    kept *= x->dims[d];
  }
  return kept >= SPLIT_MIN_KEEP ? keep : 0;
}

/* The first reduction of in: its reduced axes but those of keep. */
static ir_ref first_half(ir_func *nf, const ir_ins *in, ir_ref x, unsigned keep) {
  ir_attr a = in->attr;
  a.dims.n = 0;
  for (int k = 0; k < in->attr.dims.n; k++)
    if (!(keep & (1u << in->attr.dims.d[k]))) a.dims.d[a.dims.n++] = in->attr.dims.d[k];
  return pass_emit_inferred(nf, who, in->op, 1, &x, &a, in->loc);
}

/* The second: the kept axes, where they are in the first's result. */
static ir_ref second_half(ir_func *nf, const ir_ins *in, ir_ref part, unsigned keep) {
  ir_attr a = in->attr;
  a.dims.n = 0;
  int gone = 0; /* reduced axes before d, which the first removed */
  for (int k = 0; k < in->attr.dims.n; k++) {
    int d = in->attr.dims.d[k];
    if (keep & (1u << d)) a.dims.d[a.dims.n++] = (uint8_t)(d - gone);
    else gone++;
  }
  ir_ref r = pass_emit_inferred(nf, who, in->op, 1, &part, &a, in->loc);
  if (r != IR_NOREF && ir_type_of(nf, r) != &nf->types[in->ty]) {
    jit_error(JIT_EINTERNAL, "%s: the halves of %s change its type", who, ir_op_name[in->op]);
    return IR_NOREF;
  }
  return r;
}

/* Moves a split reduction's result may go through before its first reader: they wait with it. */
static bool waits(const ir_ins *in) {
  return in->n_args == 1 && (in->op == IR_RESHAPE || in->op == IR_BROADCAST || in->op == IR_TRANSPOSE ||
                             in->op == IR_SLICE || in->op == IR_REV || in->op == IR_CONVERT);
}

typedef struct split {
  const ir_func *f;
  ir_func *nf;
  unsigned *keep;  /* per ref: the axes its first half keeps (0: not split) */
  bool *deferred;  /* split, or a move of a deferred value: emitted when first read */
  ir_ref *part;    /* a split reduction's first half */
  ir_ref *map;
} split;

/* Emits deferred x (and the deferred values it reads) if it is not yet. */
static jit_status place(split *S, ir_ref x) {
  if (!S->deferred[x] || S->map[x] != IR_NOREF) return JIT_OK;
  const ir_ins *in = &S->f->ins[x];
  if (S->keep[x]) {
    S->map[x] = second_half(S->nf, in, S->part[x], S->keep[x]);
  } else {
    jit_status st = place(S, in->args[0]);
    if (st != JIT_OK) return st;
    S->map[x] = ir_emit(S->nf, in->op, in->ty, 1, &S->map[in->args[0]], &in->attr, in->loc);
  }
  if (S->map[x] != IR_NOREF) return JIT_OK;
  return S->nf->oom || !S->keep[x] ? JIT_ENOMEM : JIT_EINTERNAL;
}

jit_status pass_reduce_split(ir_func *f) {
  uint32_t n = f->n_ins;
  split S = {.f = f};
  S.keep = calloc(n ? n : 1, sizeof *S.keep);
  if (!S.keep) return jit_error(JIT_ENOMEM, "%s: out of memory", who);
  bool any = false;
  for (uint32_t i = f->n_params; i < n; i++) any |= (S.keep[i] = kept_axes(f, &f->ins[i])) != 0;
  if (!any) {
    free(S.keep);
    return JIT_OK;
  }
  jit_status st = JIT_OK;
  ir_ref *args = NULL;
  uint32_t cap = 0;
  S.deferred = calloc(n, sizeof *S.deferred);
  S.part = malloc(n * sizeof *S.part);
  S.map = malloc(n * sizeof *S.map);
  if (S.deferred && S.part && S.map) S.nf = pass_rebuild_begin(f, S.map, who);
  else jit_error(JIT_ENOMEM, "%s: out of memory", who);
  if (!S.nf) {
    st = JIT_ENOMEM;
    goto done;
  }
  for (uint32_t i = f->n_params; i < n && st == JIT_OK; i++) {
    const ir_ins *in = &f->ins[i];
    S.map[i] = IR_NOREF;
    S.deferred[i] = S.keep[i] || (waits(in) && S.deferred[in->args[0]]);
    if (S.deferred[i] && !S.keep[i]) continue;
    for (uint32_t a = 0; a < in->n_args && st == JIT_OK; a++) st = place(&S, in->args[a]);
    if (st != JIT_OK || !pass_map_args(S.nf, in, S.map, &args, &cap)) break;
    if (S.keep[i]) {
      S.part[i] = first_half(S.nf, in, args[0], S.keep[i]);
      if (S.part[i] == IR_NOREF) st = S.nf->oom ? JIT_ENOMEM : JIT_EINTERNAL;
      continue;
    }
    S.map[i] = ir_emit(S.nf, in->op, in->ty, in->n_args, args, &in->attr, in->loc);
    if (S.map[i] == IR_NOREF) st = JIT_ENOMEM;
  }
  for (uint32_t r = 0; r < f->n_results && st == JIT_OK; r++) st = place(&S, f->results[r]);
  if (st == JIT_EINTERNAL) ir_func_free(S.nf);
  else st = pass_rebuild_end(f, S.nf, S.map, who); /* reports nf's OOM */
done:
  free(args);
  free(S.keep);
  free(S.deferred);
  free(S.part);
  free(S.map);
  return st;
}
