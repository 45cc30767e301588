/* fusion_siblings.c: sibling column reductions into one kernel (XLA's sibling multi-output
 * fusion). A conv's filter gradient is one sum per window offset, each over the product of the
 * output gradient with a slice of the input: nine kernels that each read the output gradient
 * again. Column reductions (codegen/lower.c's column mode) of one loop space that read a buffer
 * in common become one kernel with a column sum per reduction, which reads each buffer once.
 *
 * Kernels run in the order of their roots; the merged kernel runs where the later one did, so
 * the earlier one's inputs are ready, and a merge waits for no value: it is refused when the
 * later kernel, or a kernel or scan step in between, reads what the earlier one writes.
 * Cost: O(kernels x SIBLINGS_LOOK_BACK x (reads + writes)).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"

#define SIBLINGS_LOOK_BACK 32 /* earlier kernels looked at for each */

/* A kernel of column reductions only, each one of its writes: what a merge may join. */
static bool columns_only(const ir_func *f, const fz_kernel *k) {
  if (k->kind != FZ_ROW || k->dot != IR_NOREF || k->n_row < 1) return false;
  uint32_t n_red = 0;
  for (uint32_t i = 0; i < k->n_ops; i++)
    n_red += (ir_op_flags[f->ins[k->ops[i]].op] & IR_REDUCE) != 0;
  if (n_red != k->n_writes) return false;
  for (uint32_t w = 0; w < k->n_writes; w++)
    if (!fz_column_reduce(f, k->writes[w]) || !fz_map_row_level(&k->write_maps[w])) return false;
  return true;
}

/* The reduced extents of the root's operand in the loop nest of its strips. */
static bool strip_map(const ir_func *f, const fz_kernel *k, fz_map *om) {
  return fz_map_operand(f, k->root, 0, &k->write_maps[k->n_writes - 1], om);
}

static bool same_space(const ir_func *f, const fz_kernel *a, const fz_kernel *b) {
  if (a->n_row != b->n_row || a->n_writes + b->n_writes > FZ_COLUMN_SUMS_MAX) return false;
  for (int d = 0; d < a->n_row; d++)
    if (a->row_ext[d] != b->row_ext[d]) return false;
  fz_map ma, mb;
  if (!strip_map(f, a, &ma) || !strip_map(f, b, &mb) || ma.n_inner != mb.n_inner) return false;
  for (int i = 0; i < ma.n_inner; i++)
    if (ma.inner_ext[i] != mb.inner_ext[i]) return false;
  return true;
}

static bool reads_base(const fz_prog *p, const fz_kernel *k, ir_ref base) {
  for (uint32_t i = 0; i < k->n_reads; i++)
    if (p->base[k->reads[i]] == base) return true;
  return false;
}

static bool share_a_read(const fz_prog *p, const fz_kernel *a, const fz_kernel *b) {
  for (uint32_t i = 0; i < a->n_reads; i++)
    if (reads_base(p, b, p->base[a->reads[i]])) return true;
  return false;
}

/* Whether kernel ib, or something that runs after kernel ia and before it, reads a write of ia. */
static bool read_after(const fz_prog *p, uint32_t ia, uint32_t ib) {
  const fz_kernel *a = &p->kernels[ia];
  for (uint32_t w = 0; w < a->n_writes; w++) {
    for (uint32_t t = ia + 1; t <= ib; t++)
      if (reads_base(p, &p->kernels[t], a->writes[w])) return true;
    for (ir_ref s = a->root + 1; s < p->kernels[ib].root; s++) {
      if (p->cls[s] != FZ_SCAN) continue;
      const ir_ins *in = &p->f->ins[s];
      for (uint32_t x = 0; x < in->n_args; x++)
        if (p->base[in->args[x]] == a->writes[w]) return true;
    }
  }
  return false;
}

/* The sorted union of two increasing lists (no duplicates within either). */
static ir_ref *merge_refs(const ir_ref *a, uint32_t na, const ir_ref *b, uint32_t nb, uint32_t *n) {
  ir_ref *out = malloc((na + nb ? na + nb : 1) * sizeof *out);
  if (!out) return NULL;
  uint32_t i = 0, j = 0, k = 0;
  while (i < na || j < nb) {
    if (j == nb || (i < na && a[i] < b[j])) out[k++] = a[i++];
    else if (i == na || b[j] < a[i]) out[k++] = b[j++];
    else out[k++] = a[i++], j++;
  }
  *n = k;
  return out;
}

/* Kernel a joins b (a runs first): b gets a's ops, reads and writes; a is left empty. */
static jit_status join(fz_prog *p, uint32_t ia, uint32_t ib) {
  fz_kernel *a = &p->kernels[ia], *b = &p->kernels[ib];
  uint32_t n_ops, n_reads, nw = a->n_writes + b->n_writes;
  ir_ref *ops = merge_refs(a->ops, a->n_ops, b->ops, b->n_ops, &n_ops);
  ir_ref *reads = merge_refs(a->reads, a->n_reads, b->reads, b->n_reads, &n_reads);
  ir_ref *writes = malloc(nw * sizeof *writes);
  fz_map *maps = malloc(nw * sizeof *maps);
  if (!ops || !reads || !writes || !maps) {
    free(ops);
    free(reads);
    free(writes);
    free(maps);
    return jit_error(JIT_ENOMEM, "fusion: out of memory merging sibling reductions");
  }
  /* a's writes all come before b's root, which stays last */
  uint32_t i = 0, j = 0, k = 0;
  while (i < a->n_writes || j < b->n_writes) {
    bool from_a = j == b->n_writes || (i < a->n_writes && a->writes[i] < b->writes[j]);
    writes[k] = from_a ? a->writes[i] : b->writes[j];
    maps[k++] = from_a ? a->write_maps[i++] : b->write_maps[j++];
  }
  for (uint32_t w = 0; w < a->n_writes; w++) p->owner[a->writes[w]] = (int32_t)ib;
  free(b->ops);
  free(b->reads);
  free(b->writes);
  free(b->write_maps);
  b->ops = ops;
  b->n_ops = n_ops;
  b->reads = reads;
  b->n_reads = n_reads;
  b->writes = writes;
  b->write_maps = maps;
  b->n_writes = nw;
  free(a->ops);
  free(a->reads);
  free(a->writes);
  free(a->write_maps);
  memset(a, 0, sizeof *a);
  a->root = IR_NOREF; /* gone: compact() drops it */
  return JIT_OK;
}

/* Drops the emptied kernels; owner[] follows the kernels' new indices (moved: room for one
   index per kernel). */
static void compact(fz_prog *p, int32_t *moved) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    moved[i] = p->kernels[i].root == IR_NOREF ? -1 : (int32_t)n;
    if (p->kernels[i].root != IR_NOREF) p->kernels[n++] = p->kernels[i];
  }
  for (ir_ref v = 0; v < p->f->n_ins; v++)
    if (p->owner[v] >= 0) p->owner[v] = moved[p->owner[v]];
  p->n_kernels = n;
}

jit_status fz_merge_siblings(fz_prog *p) {
  const ir_func *f = p->f;
  bool merged = false;
  int32_t *moved = malloc((p->n_kernels ? p->n_kernels : 1) * sizeof *moved);
  if (!moved) return jit_error(JIT_ENOMEM, "fusion: out of memory merging sibling reductions");
  for (uint32_t ib = 0; ib < p->n_kernels; ib++) {
    if (!columns_only(f, &p->kernels[ib])) continue;
    uint32_t lo = ib > SIBLINGS_LOOK_BACK ? ib - SIBLINGS_LOOK_BACK : 0;
    for (uint32_t ia = ib; ia-- > lo;) {
      const fz_kernel *a = &p->kernels[ia], *b = &p->kernels[ib];
      if (a->root == IR_NOREF || !columns_only(f, a) || !same_space(f, a, b) ||
          !share_a_read(p, a, b) || read_after(p, ia, ib))
        continue;
      jit_status st = join(p, ia, ib);
      if (st != JIT_OK) {
        free(moved);
        return st;
      }
      merged = true;
    }
  }
  if (merged) compact(p, moved);
  free(moved);
  return JIT_OK;
}
