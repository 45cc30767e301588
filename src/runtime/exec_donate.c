/* exec_donate.c: which results of an executable are written into a donated param's buffer (XLA's
 * input_output_alias): the buffer assignment's half of donation; runtime/fn.c hands the buffer over.
 * Also the executable's peak of live bytes, which donation lowers.
 *
 * Result r may take param p's bytes when they have the same size and no step reads p after r is
 * first written. The step that first writes r may itself read p only when each element of p is
 * read once, in the iteration that overwrites it, before the store:
 *   - a loop kernel that reads p at exactly the element it stores r to, in the same block, before
 *     the store, and never reads r back. Its stores to r are redirected to p's slot, so that the
 *     compiled code sees one pointer and keeps the load before the store (two noalias pointers to
 *     one buffer would let LLVM reorder them);
 *   - a matmul whose fused epilogue reads p as a value of the output's shape, when the matmul
 *     stores each output element once (no partial sums kept in the output between K blocks).
 * Cost: O(steps x buffers) per candidate pair, once per compiled signature.
 */
#include <stdlib.h>

#include "codegen/epilogue.h"
#include "codegen/llvm_jit.h"
#include "codegen/kernel.h"
#include "codegen/matmul.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"
#include "runtime/runtime.h"

static bool step_touches(const estep *s, uint32_t buf) {
  for (uint32_t k = 0; k < s->n_bufs; k++)
    if (s->bufs[k] == buf) return true;
  return false;
}

/* The one slot of s in [lo, hi) that is buffer buf; -1 when none or several. */
static int32_t only_slot(const estep *s, uint32_t lo, uint32_t hi, uint32_t buf) {
  int32_t found = -1;
  for (uint32_t k = lo; k < hi && k < s->n_bufs; k++)
    if (s->bufs[k] == buf) {
      if (found >= 0) return -1;
      found = (int32_t)k;
    }
  return found;
}

/* The block of lf holding instruction id, and its position there; false when none does. */
static bool find_ins(const lp_func *lf, int32_t id, int32_t *block, uint32_t *pos) {
  for (uint32_t b = 0; b < lf->n_blocks; b++)
    for (uint32_t i = 0; i < lf->blocks[b].n; i++)
      if (lf->blocks[b].ins[i] == id) {
        *block = (int32_t)b;
        *pos = i;
        return true;
      }
  return false;
}

/* Whether lf may store slot w in place over slot rd (see the file's comment): one store to w,
   no load of w, and every load of rd at the store's address, in its block, before it. */
static bool in_place_safe(const lp_func *lf, int32_t rd, int32_t w) {
  int32_t store = -1;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    const lp_ins *in = &lf->ins[i];
    if (in->buf != w || (in->op != LP_LOAD && in->op != LP_STORE)) continue;
    if (in->op == LP_LOAD || store >= 0) return false;
    store = (int32_t)i;
  }
  int32_t sblock;
  uint32_t spos;
  if (store < 0 || !find_ins(lf, store, &sblock, &spos)) return false;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    const lp_ins *in = &lf->ins[i];
    if (in->op != LP_LOAD || in->buf != rd) continue;
    int32_t lblock;
    uint32_t lpos;
    if (in->a != lf->ins[store].a || !find_ins(lf, (int32_t)i, &lblock, &lpos) ||
        lblock != sblock || lpos > spos)
      return false;
  }
  return true;
}

/* Whether dot step s may store its output (buffer rb) over buffer pb: pb is not an operand of
   the product, its epilogue reads pb once, as a value of the output's shape (so at the element
   it stores), and the matmul stores each element once. The matmul kernel takes no noalias
   pointers, so it keeps that load before the store as written. */
static bool dot_in_place_safe(const estep *s, uint32_t pb, uint32_t rb, int vec_bytes) {
  if (!s->epi || s->epi->reduces || s->bufs[0] == pb || s->bufs[1] == pb) return false;
  const cg_epi_plan *pl = s->epi;
  uint32_t out = 2 + pl->n_reads;
  if (s->bufs[out] != rb || only_slot(s, 2, out, pb) < 0) return false;
  ir_ref read = pl->reads[only_slot(s, 2, out, pb) - 2];
  const ir_type *rt = ir_type_of(pl->f, read), *ot = ir_type_of(pl->f, pl->root);
  if (rt->rank != ot->rank) return false;
  for (int d = 0; d < rt->rank; d++)
    if (rt->dims[d] != ot->dims[d]) return false;
  for (uint32_t i = 0; i < pl->n_ops; i++) /* read as it is, not broadcast */
    if (pl->f->ins[pl->ops[i]].op == IR_BROADCAST && pl->f->ins[pl->ops[i]].args[0] == read)
      return false;
  cg_matmul_desc d;
  cg_epi_plan copy = *pl;
  cg_epi_desc(&copy, NULL, &d, vec_bytes);
  return cg_matmul_stores_once(&d);
}

static int32_t buffer_of(const exec *e, uint8_t kind, uint32_t index) {
  for (uint32_t b = 0; b < e->n_bufs; b++)
    if (e->bufs[b].kind == kind && e->bufs[b].index == index) return (int32_t)b;
  return -1;
}

/* Whether result buffer rb may live in param buffer pb; *rewrite: the step whose stores must
   move to pb's slot (-1: none). */
static bool may_alias(const exec *e, lp_func *const *lfs, uint32_t rb, uint32_t pb, int32_t *rewrite) {
  uint32_t first_write = UINT32_MAX, last_read = 0;
  bool read = false;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    if (first_write == UINT32_MAX && step_touches(&e->steps[i], rb)) first_write = i;
    if (step_touches(&e->steps[i], pb)) last_read = i, read = true;
  }
  *rewrite = -1;
  if (first_write == UINT32_MAX) return false; /* written by no step: nothing to gain */
  if (!read || last_read < first_write) return true;
  if (last_read > first_write) return false;
  const estep *s = &e->steps[first_write];
  if (s->kind == ES_DOT)
    return dot_in_place_safe(s, pb, rb, e->ctx->jit ? cg_jit_target(e->ctx->jit)->vector_bytes : 16);
  const lp_func *lf = s->kind == ES_KERNEL ? lfs[s->kernel] : NULL;
  if (!lf) return false;
  int32_t rd = only_slot(s, 0, lf->n_reads, pb), w = only_slot(s, lf->n_reads, s->n_bufs, rb);
  if (rd < 0 || w < 0 || only_slot(s, lf->n_reads, s->n_bufs, pb) >= 0) return false;
  if (!in_place_safe(lf, rd, w)) return false;
  *rewrite = (int32_t)first_write;
  return true;
}

/* Redirects step si's stores from result buffer rb's slot to param buffer pb's. */
static void redirect_stores(exec *e, lp_func *const *lfs, uint32_t si, uint32_t rb, uint32_t pb) {
  estep *s = &e->steps[si];
  lp_func *lf = lfs[s->kernel];
  int32_t rd = only_slot(s, 0, lf->n_reads, pb), w = only_slot(s, lf->n_reads, s->n_bufs, rb);
  for (uint32_t i = 0; i < lf->n_ins; i++)
    if (lf->ins[i].op == LP_STORE && lf->ins[i].buf == w) lf->ins[i].buf = rd;
  /* the stores now go to a buffer the kernel reads: none of them may stream */
  lf->stream_mask &= ~((uint64_t)1 << w);
  s->stream_mask = lf->stream_mask;
}

jit_status exec_plan_donations(exec *e, const ir_func *f, lp_func *const *lfs, uint64_t donate) {
  e->result_alias = malloc((f->n_results ? f->n_results : 1) * sizeof *e->result_alias);
  if (!e->result_alias) return jit_error(JIT_ENOMEM, "jit_call: out of memory building the executable");
  for (uint32_t r = 0; r < f->n_results; r++) e->result_alias[r] = -1;
  uint64_t taken = 0;
  /* first the pairs where r's writer reads p (an update p -> p'), then any that fit */
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t r = 0; r < f->n_results; r++) {
      int32_t rb = buffer_of(e, EB_RESULT, r);
      if (e->result_alias[r] >= 0 || rb < 0 || !e->bufs[rb].bytes) continue;
      for (uint32_t p = 0; p < f->n_params && p < 64; p++) {
        int32_t pb = buffer_of(e, EB_PARAM, p), rewrite = -1;
        if (!(donate >> p & 1) || (taken >> p & 1) || pb < 0 ||
            e->bufs[pb].bytes != e->bufs[rb].bytes)
          continue;
        if (!may_alias(e, lfs, (uint32_t)rb, (uint32_t)pb, &rewrite)) continue;
        if (pass == 0 && rewrite < 0) continue;
        if (rewrite >= 0) redirect_stores(e, lfs, (uint32_t)rewrite, (uint32_t)rb, (uint32_t)pb);
        e->result_alias[r] = (int32_t)p;
        taken |= (uint64_t)1 << p;
        break;
      }
    }
  return JIT_OK;
}

int exec_result_alias(const exec *e, uint32_t r) {
  return e && e->result_alias && r < e->n_results ? e->result_alias[r] : -1;
}

uint64_t exec_peak_bytes(const exec *e) {
  uint32_t n = e->n_bufs;
  uint32_t *first = malloc((n ? n : 1) * sizeof *first), *last = malloc((n ? n : 1) * sizeof *last);
  uint64_t peak = 0;
  if (!first || !last) {
    peak = UINT64_MAX;
    goto done;
  }
  exec_buffer_lifetimes(e, first, last);
  for (uint32_t b = 0; b < n; b++)
    if (e->bufs[b].kind == EB_RESULT) last[b] = UINT32_MAX; /* the caller's from then on */
  for (uint32_t i = 0; i < e->n_steps; i++) {
    uint64_t live = 0;
    for (uint32_t b = 0; b < n; b++) {
      const ebuf *eb = &e->bufs[b];
      if (eb->kind == EB_PARAM || first[b] > i || last[b] < i) continue;
      if (eb->kind == EB_RESULT && exec_result_alias(e, eb->index) >= 0) continue;
      live += eb->bytes;
    }
    if (live > peak) peak = live;
  }
done:
  free(first);
  free(last);
  return peak;
}
