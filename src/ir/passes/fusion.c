/* fusion.c: partitions an optimized function into kernels (codegen/kernel.h): groups of
 * instructions computed in one loop nest, so that only values read by several kernels or
 * returned reach memory. Not a rewriting pass: f is left as it is and the kernels refer to it.
 *
 * One backward sweep, consumer-driven as XLA's instruction fusion: when all users of an
 * instruction are in one kernel and read it at one index map that is legal there, it joins that
 * kernel; otherwise it becomes the root of a new kernel and its value is materialized.
 *   - params are buffers; consts and iotas are computed wherever they are read.
 *   - broadcast, transpose, slice, size-1 reshapes and concat are index maps; when their users
 *     are in several kernels they are duplicated into each (they cost nothing) and then read only
 *     buffers, consts and iotas. Concat always reads only those (computing every branch of a
 *     concat would waste work).
 *   - rev is an index map too (a negative scale).
 *   - a gather or pad is computed in its consumer's loop as an indexed load from its operand,
 *     which is materialized (its index depends on data); a gather's indices are computed inline
 *     when its index vector has one entry. A scatter is a kernel of its own over buffers.
 *   - any other reshape is a view: the bytes of its (materialized) operand under a new shape.
 *   - a reduction joins a kernel when it is read once per row of it (its map uses exactly the
 *     row dims): the kernel becomes a row kernel; a dot joins its epilogue at the identity map.
 *   - an elementwise op must not be recomputed for several loop points (its map uses every loop
 *     dim of extent > 1) unless it is cheap arithmetic recomputed only along inner dims (the
 *     emitters hoist row-invariant values), never along a row dim.
 *   - a returned value stays in a kernel (as a second output) when all its users are there and
 *     read it at the kernel's own index.
 *   - an elementwise value or a reduction read by several kernels is computed by the first of
 *     them to run, at its own index, and written there for the others (multi-output fusion),
 *     unless it is the epilogue of a dot with no other reader; a dot never joins a kernel with
 *     such a write.
 * Last, sibling column reductions that read a buffer in common merge into one kernel
 * (fusion_siblings.c).
 * Cost: O(instructions x users x rank).
 */
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"

/* A row of a row kernel is re-read from cache by each of its loops: keep it within L2. */
#define FZ_MAX_ROW_ELEMS 65536

enum { ST_NONE, ST_PARAM, ST_CHEAP, ST_DUP, ST_VIEW, ST_ROOT, ST_INLINE, ST_SCAN, ST_SCAN_OUT };

/* ---- index maps ------------------------------------------------------------------------------- */

static void set_entry(fz_map *m, int d, int src, int64_t scale, int64_t off) {
  m->src[d] = (int8_t)src;
  m->scale[d] = src == FZ_CONST ? 0 : scale;
  m->off[d] = off;
}

static bool is_move(ir_op op) {
  return op == IR_BROADCAST || op == IR_TRANSPOSE || op == IR_SLICE || op == IR_CONCAT ||
         op == IR_RESHAPE || op == IR_REV;
}

static bool is_reduce(ir_op op) { return (ir_op_flags[op] & IR_REDUCE) != 0; }

/* A reshape that only inserts or removes size-1 dims: the other dims keep their order. */
static bool reshape_is_trivial(const ir_type *a, const ir_type *r) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < r->rank && r->dims[j] == 1) j++;
    if (i == a->rank || j == r->rank) return i == a->rank && j == r->rank;
    if (a->dims[i] != r->dims[j]) return false;
    i++;
    j++;
  }
}

bool fz_map_operand(const ir_func *f, ir_ref u, uint32_t slot, const fz_map *mu, fz_map *out) {
  const ir_ins *in = &f->ins[u];
  if (slot >= in->n_args) return false;
  const ir_type *at = ir_type_of(f, in->args[slot]), *ut = ir_type_of(f, u);
  fz_map m = *mu;
  m.rank = at->rank;
  if (ir_op_flags[in->op] & IR_EW) {
    if (at->rank != mu->rank) return false;
    *out = m;
    return true;
  }
  switch (in->op) {
  case IR_BROADCAST:
    for (int i = 0; i < at->rank; i++) {
      int j = in->attr.dims.d[i];
      if (at->dims[i] == 1)
        set_entry(&m, i, FZ_CONST, 0, 0);
      else
        set_entry(&m, i, mu->src[j], mu->scale[j], mu->off[j]);
    }
    break;
  case IR_TRANSPOSE:
    for (int i = 0; i < at->rank; i++) {
      int j = in->attr.dims.d[i];
      set_entry(&m, j, mu->src[i], mu->scale[i], mu->off[i]);
    }
    break;
  case IR_SLICE:
    for (int i = 0; i < at->rank; i++) {
      int64_t st = in->attr.slice.stride[i], lo = in->attr.slice.start[i];
      set_entry(&m, i, mu->src[i], mu->scale[i] * st, lo + st * mu->off[i]);
    }
    break;
  case IR_REV: /* x[n - 1 - i] in the reversed dims */
    for (int k = 0; k < in->attr.dims.n; k++) {
      int i = in->attr.dims.d[k];
      set_entry(&m, i, mu->src[i], -mu->scale[i], at->dims[i] - 1 - mu->off[i]);
    }
    break;
  case IR_PAD: /* the scalar pad value (the operand has no index map) */
    if (slot != 1) return false;
    break;
  case IR_GATHER: /* the indices, when each index vector has one entry */
    if (slot != 1 || ir_gather_index_len(at, in->attr.gather.index_dim) != 1) return false;
    fz_map_indices(&in->attr.gather, at, ut, mu, &m);
    break;
  case IR_RESHAPE: {
    if (!reshape_is_trivial(at, ut)) return false;
    int j = 0;
    for (int i = 0; i < at->rank; i++) {
      if (at->dims[i] == 1) {
        set_entry(&m, i, FZ_CONST, 0, 0);
        continue;
      }
      while (ut->dims[j] == 1) j++;
      set_entry(&m, i, mu->src[j], mu->scale[j], mu->off[j]);
      j++;
    }
    break;
  }
  case IR_CONCAT: {
    int axis = (int)in->attr.axis;
    int64_t off = 0;
    for (uint32_t k = 0; k < slot; k++) off += ir_type_of(f, in->args[k])->dims[axis];
    m.off[axis] -= off;
    break;
  }
  case IR_REDUCE_SUM:
  case IR_REDUCE_MAX:
  case IR_REDUCE_MIN:
  case IR_REDUCE_PROD: {
    const ir_dims *ax = &in->attr.dims;
    int k = 0, kept = 0;
    m.n_inner = 0;
    for (int i = 0; i < at->rank; i++) {
      if (k < ax->n && ax->d[k] == i) {
        k++;
        if (at->dims[i] == 1) {
          set_entry(&m, i, FZ_CONST, 0, 0);
        } else {
          m.inner_ext[m.n_inner] = at->dims[i];
          set_entry(&m, i, FZ_INNER(m.n_inner), 1, 0);
          m.n_inner++;
        }
      } else {
        set_entry(&m, i, mu->src[kept], mu->scale[kept], mu->off[kept]);
        kept++;
      }
    }
    break;
  }
  default: return false;
  }
  *out = m;
  return true;
}

void fz_map_indices(const ir_gather *g, const ir_type *it, const ir_type *vt, const fz_map *mv,
                    fz_map *out) {
  fz_map m = *mv;
  m.rank = it->rank;
  for (int r = 0, i = 0; r < vt->rank; r++) {
    bool off = false;
    for (int k = 0; k < g->offset_dims.n; k++) off |= g->offset_dims.d[k] == r;
    if (off) continue;
    if (i == g->index_dim) i++;
    set_entry(&m, i++, mv->src[r], mv->scale[r], mv->off[r]);
  }
  if (g->index_dim < it->rank) set_entry(&m, g->index_dim, FZ_CONST, 0, 0);
  *out = m;
}

bool fz_map_equal(const fz_map *a, const fz_map *b) {
  if (a->rank != b->rank || a->n_inner != b->n_inner) return false;
  for (int k = 0; k < a->n_inner; k++)
    if (a->inner_ext[k] != b->inner_ext[k]) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->src[d] != b->src[d] || a->scale[d] != b->scale[d] || a->off[d] != b->off[d])
      return false;
  return true;
}

bool fz_map_row_level(const fz_map *m) {
  for (int d = 0; d < m->rank; d++)
    if (m->src[d] <= FZ_INNER(0)) return false;
  return true;
}

void fz_space(const ir_func *f, ir_ref root, int *n_row, int64_t *row_ext, fz_map *root_map) {
  const ir_type *t = ir_type_of(f, root);
  int last = -1;
  if (!is_reduce(f->ins[root].op))
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d] != 1) last = d;
  memset(root_map, 0, sizeof *root_map);
  root_map->rank = t->rank;
  *n_row = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) {
      set_entry(root_map, d, FZ_CONST, 0, 0);
    } else if (d == last) {
      root_map->n_inner = 1;
      root_map->inner_ext[0] = t->dims[d];
      set_entry(root_map, d, FZ_INNER(0), 1, 0);
    } else {
      row_ext[*n_row] = t->dims[d];
      set_entry(root_map, d, *n_row, 1, 0);
      (*n_row)++;
    }
  }
}

bool fz_column_reduce(const ir_func *f, ir_ref red) {
  const ir_ins *in = &f->ins[red];
  if (!is_reduce(in->op)) return false;
  jit_dtype dt = ir_type_of(f, red)->dtype;
  if ((dt == JIT_F16 || dt == JIT_BF16) && in->op == IR_REDUCE_SUM) return false;
  const ir_type *at = ir_type_of(f, in->args[0]);
  int last = -1;
  for (int d = 0; d < at->rank; d++)
    if (at->dims[d] != 1) last = d;
  if (last < 0) return false;
  for (int i = 0; i < in->attr.dims.n; i++)
    if (in->attr.dims.d[i] == last) return false;
  return true;
}

/* ---- the sweep ------------------------------------------------------------------------------------ */

typedef struct group {
  fz_kind kind;
  ir_ref root, dot;
  int n_row;
  int64_t row_ext[IR_MAX_RANK];
  fz_map root_map;
  bool shares;   /* writes a value other kernels read too (shared_output) */
} group;

typedef struct fuse {
  const ir_func *f;
  uint32_t n;
  uint32_t *use_start; /* uses of v: use_user/use_slot[use_start[v] .. use_start[v+1]) */
  ir_ref *use_user;
  uint32_t *use_slot;
  uint8_t *st;
  bool *live;          /* a result depends on it */
  bool *result, *must_mat, *needs_leaf, *written;
  int32_t *grp;
  fz_map *map;
  group *groups;
  uint32_t n_groups;
} fuse;

static bool cheap_op(ir_op op) {
  switch (op) {
  case IR_NEG:
  case IR_ABS:
  case IR_ADD:
  case IR_SUB:
  case IR_MUL:
  case IR_MAX:
  case IR_MIN:
  case IR_CMP:
  case IR_SELECT:
  case IR_CONVERT:
  case IR_FLOOR:
  case IR_CEIL:
  case IR_ROUND:
  case IR_SIGN:
  case IR_IS_FINITE:
  case IR_NOT:
  case IR_AND:
  case IR_OR:
  case IR_XOR:
  case IR_SHL:
  case IR_SHR_LOGICAL:
  case IR_SHR_ARITH:
  case IR_CLAMP: return true;
  default: return false;
  }
}

/* Every loop dim of extent > 1 (rows; inner dims too when the map reads them) is used. */
static bool covers(const fz_map *m, const group *g) {
  bool row[IR_MAX_RANK] = {0}, inner[IR_MAX_RANK] = {0}, any_inner = false;
  for (int d = 0; d < m->rank; d++) {
    if (m->src[d] >= 0) row[m->src[d]] = true;
    if (m->src[d] <= FZ_INNER(0)) inner[FZ_INNER_DIM(m->src[d])] = any_inner = true;
  }
  for (int k = 0; k < g->n_row; k++)
    if (g->row_ext[k] > 1 && !row[k]) return false;
  if (any_inner)
    for (int k = 0; k < m->n_inner; k++)
      if (m->inner_ext[k] > 1 && !inner[k]) return false;
  return true;
}

/* Every row dim of extent > 1 is used: a value that leaves out only inner dims is computed once
   per row (the emitters hoist it out of the inner loop); one that leaves out a row dim would be
   computed again on every row of it (a 2x2 max-pool's gradient, viewed as windows x offsets,
   would compute each window's choice four times). */
static bool rows_covered(const fz_map *m, const group *g) {
  bool row[IR_MAX_RANK] = {0};
  for (int d = 0; d < m->rank; d++)
    if (m->src[d] >= 0) row[m->src[d]] = true;
  for (int k = 0; k < g->n_row; k++)
    if (g->row_ext[k] > 1 && !row[k]) return false;
  return true;
}

static bool all_const(const fz_map *m) {
  for (int d = 0; d < m->rank; d++)
    if (m->src[d] != FZ_CONST) return false;
  return true;
}

static bool same_dims(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* m reads a row-level value of v in row order: v's non-1 dims are the rows, in order. */
static bool row_identity(const fz_map *m, const ir_type *t, const group *g) {
  int k = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] == 1) {
      if (m->src[d] != FZ_CONST || m->off[d] != 0) return false;
      continue;
    }
    if (k >= g->n_row || m->src[d] != k || m->scale[d] != 1 || m->off[d] != 0 ||
        g->row_ext[k] != t->dims[d])
      return false;
    k++;
  }
  return k == g->n_row;
}

/* The single group all of v's users are in, and the one map they read v at. */
static bool users_agree(const fuse *z, ir_ref v, int32_t *g, fz_map *m) {
  *g = -1;
  bool seen = false;
  for (uint32_t k = z->use_start[v]; k < z->use_start[v + 1]; k++) {
    ir_ref u = z->use_user[k];
    if (!z->live[u]) continue;
    if (z->st[u] != ST_ROOT && z->st[u] != ST_INLINE) return false;
    if (*g >= 0 && z->grp[u] != *g) return false;
    fz_map mu;
    if (!fz_map_operand(z->f, u, z->use_slot[k], &z->map[u], &mu)) return false;
    if (seen && !fz_map_equal(&mu, m)) return false;
    seen = true;
    *g = z->grp[u];
    *m = mu;
  }
  return seen;
}

/* A dot, or a conv that runs as one (ir_conv_is_gemm): the matmul kernel computes it, with an
   elementwise epilogue fused into its store. */
static bool is_gemm(const ir_func *f, ir_ref v) {
  return f->ins[v].op == IR_DOT || (f->ins[v].op == IR_CONV && ir_conv_is_gemm(f, &f->ins[v]));
}

static jit_status new_group(fuse *z, ir_ref v) {
  group *grown = realloc(z->groups, (z->n_groups + 1) * sizeof *grown);
  if (!grown) return jit_error(JIT_ENOMEM, "fusion: out of memory");
  z->groups = grown;
  group *g = &z->groups[z->n_groups];
  memset(g, 0, sizeof *g);
  ir_op op = z->f->ins[v].op;
  bool gemm = is_gemm(z->f, v);
  g->kind = is_reduce(op) ? FZ_ROW : gemm ? FZ_DOT : FZ_LOOP;
  g->root = v;
  g->dot = gemm ? v : IR_NOREF;
  fz_space(z->f, v, &g->n_row, g->row_ext, &g->root_map);
  z->st[v] = ST_ROOT;
  z->grp[v] = (int32_t)z->n_groups++;
  z->map[v] = g->root_map;
  return JIT_OK;
}

/* Only live users count: unoptimized IR may hold values nothing needs. */
static void mark_live(fuse *z) {
  const ir_func *f = z->f;
  for (uint32_t v = z->n; v-- > 0;) {
    if (z->result[v]) z->live[v] = true;
    if (!z->live[v]) continue;
    for (uint32_t a = 0; a < f->ins[v].n_args; a++) z->live[f->ins[v].args[a]] = true;
  }
}

static void mark_operands(fuse *z, ir_ref v, bool *flag) {
  const ir_ins *in = &z->f->ins[v];
  for (uint32_t k = 0; k < in->n_args; k++) flag[in->args[k]] = true;
}

/* Whether v may be computed inside group g at map m (and what joining changes). */
static bool legal(const fuse *z, ir_ref v, const group *g, const fz_map *m) {
  const ir_func *f = z->f;
  ir_op op = f->ins[v].op;
  if (is_reduce(op)) {
    if (g->kind == FZ_DOT || !fz_map_row_level(m) || !covers(m, g)) return false;
    int64_t out = ir_type_numel(ir_type_of(f, v));
    return ir_type_numel(ir_type_of(f, f->ins[v].args[0])) / (out ? out : 1) <= FZ_MAX_ROW_ELEMS;
  }
  if (is_gemm(f, v)) /* a dot kernel with one write runs on the precompiled core */
    return g->kind == FZ_LOOP && !g->shares && fz_map_equal(m, &g->root_map) &&
           same_dims(ir_type_of(f, v), ir_type_of(f, g->root));
  if (op == IR_CONST || op == IR_IOTA || is_move(op)) return true;
  return covers(m, g) || all_const(m) || (cheap_op(op) && rows_covered(m, g));
}

/* The map m with the write loop's inner dim 0 read as row dim nr. */
static fz_map inner_to_row(const fz_map *m, int nr) {
  fz_map r = *m;
  for (int d = 0; d < r.rank; d++)
    if (r.src[d] == FZ_INNER(0)) r.src[d] = (int8_t)nr;
  r.n_inner = 0;
  return r;
}

/* A reduction read element by element by a loop kernel with no reductions yet (sum(x) + 1):
   the kernel's inner dim becomes a row dim, so that the reduction is read once per row. Only
   when the reduction then covers every row (nothing is recomputed). */
static bool rows_for_reduce(fuse *z, ir_ref v, int32_t gi, fz_map *m) {
  group *g = &z->groups[gi];
  if (g->kind != FZ_LOOP || g->root_map.n_inner != 1 || fz_map_row_level(m) ||
      g->n_row >= IR_MAX_RANK)
    return false;
  for (int d = 0; d < m->rank; d++)
    if (m->src[d] < FZ_INNER(0)) return false; /* only the write loop's dim */
  group ng = *g;
  ng.row_ext[ng.n_row] = g->root_map.inner_ext[0];
  ng.n_row++;
  fz_map nm = inner_to_row(m, g->n_row);
  ng.root_map = inner_to_row(&g->root_map, g->n_row);
  if (!covers(&nm, &ng) || !legal(z, v, &ng, &nm)) return false;
  for (ir_ref u = v + 1; u < z->n; u++)
    if ((z->st[u] == ST_INLINE || z->st[u] == ST_ROOT) && z->grp[u] == gi)
      z->map[u] = inner_to_row(&z->map[u], g->n_row);
  *g = ng;
  *m = nm;
  return true;
}

/* A reduction over its operand's last axes, whose rows are contiguous (one over leading axes
   runs in column mode, codegen/lower.c, which a kernel of several writes does not). */
static bool reduces_rows(const ir_func *f, const ir_ins *in) {
  int rank = ir_type_of(f, in->args[0])->rank, n = in->attr.dims.n;
  for (int k = 0; k < n; k++)
    if (in->attr.dims.d[k] != rank - n + k) return false;
  return true;
}

static uint32_t live_users(const fuse *z, ir_ref v) {
  uint32_t n = 0;
  for (uint32_t k = z->use_start[v]; k < z->use_start[v + 1]; k++) n += z->live[z->use_user[k]];
  return n;
}

/* An elementwise value or a reduction read by several kernels: the first of them to run
   computes it at its own index (a reduction: once per row) and writes it for the others as a
   second output (XLA's multi-output fusion), instead of a kernel of its own that the first
   would read back. Not the epilogue of a dot that has no other reader (the dot kernel keeps
   it, with one write), and not into a dot kernel. */
static bool shared_output(fuse *z, ir_ref v, int32_t *gi, fz_map *m) {
  const ir_func *f = z->f;
  const ir_ins *in = &f->ins[v];
  if (!(ir_op_flags[in->op] & IR_EW) && !is_reduce(in->op)) return false;
  if (z->needs_leaf[v] || (is_reduce(in->op) && !reduces_rows(f, in))) return false;
  for (uint32_t a = 0; a < in->n_args; a++)
    if (is_gemm(f, in->args[a]) && live_users(z, in->args[a]) == 1) return false;
  int32_t first = -1;
  for (uint32_t k = z->use_start[v]; k < z->use_start[v + 1]; k++) {
    ir_ref u = z->use_user[k];
    if (!z->live[u]) continue;
    if (z->st[u] != ST_ROOT && z->st[u] != ST_INLINE) return false;
    if (first < 0 || z->groups[z->grp[u]].root < z->groups[first].root) first = z->grp[u];
  }
  if (first < 0) return false;
  group *g = &z->groups[first];
  if (g->kind == FZ_DOT) return false;
  bool seen = false;
  for (uint32_t k = z->use_start[v]; k < z->use_start[v + 1]; k++) {
    ir_ref u = z->use_user[k];
    if (!z->live[u] || z->grp[u] != first) continue;
    fz_map mu;
    if (!fz_map_operand(f, u, z->use_slot[k], &z->map[u], &mu)) return false;
    if (seen && !fz_map_equal(&mu, m)) return false;
    seen = true;
    *m = mu;
  }
  /* at the kernel's own index: its loop's point, or (a reduction) its row */
  const ir_type *t = ir_type_of(f, v);
  bool own = is_reduce(in->op)
                 ? fz_map_row_level(m) && row_identity(m, t, g)
                 : fz_map_equal(m, &g->root_map) && same_dims(t, ir_type_of(f, g->root));
  if (!own || !legal(z, v, g, m)) return false;
  g->shares = true;
  *gi = first;
  return true;
}

static jit_status visit(fuse *z, ir_ref v) {
  const ir_func *f = z->f;
  const ir_ins *in = &f->ins[v];
  ir_op op = in->op;
  if (op == IR_PARAM) {
    z->st[v] = ST_PARAM;
    return JIT_OK;
  }
  if (!z->live[v]) {
    z->st[v] = ST_NONE;
    return JIT_OK;
  }
  if (op == IR_SCAN || op == IR_COND || op == IR_WHILE) {
    /* a step of its own, between kernels; its operands in buffers */
    z->st[v] = ST_SCAN;
    mark_operands(z, v, z->must_mat);
    return JIT_OK;
  }
  if (op == IR_GET) { /* written by its scan's step, read by kernels like a param */
    z->st[v] = ST_SCAN_OUT;
    return JIT_OK;
  }
  if (op == IR_SCATTER) {
    /* over buffers, but for a constant operand (a gather's gradient scatters into zeros): the
       kernel's copy of the operand stores the constant instead of reading a buffer of it */
    for (uint32_t k = 0; k < in->n_args; k++)
      if (k != 0 || f->ins[in->args[0]].op != IR_CONST) z->must_mat[in->args[k]] = true;
    return new_group(z, v);
  }
  if (op == IR_GATHER || op == IR_PAD) {
    /* read at indices that depend on data: from buffers (see fz_map_operand for the rest) */
    z->must_mat[in->args[0]] = true;
    if (op == IR_GATHER &&
        ir_gather_index_len(ir_type_of(f, in->args[1]), in->attr.gather.index_dim) != 1)
      z->must_mat[in->args[1]] = true;
  }
  if (op == IR_RESHAPE && !reshape_is_trivial(ir_type_of(f, in->args[0]), ir_type_of(f, v))) {
    z->st[v] = ST_VIEW;
    z->must_mat[in->args[0]] = true;
    return JIT_OK;
  }
  if (op == IR_CONST || op == IR_IOTA) {
    if (z->result[v] || z->must_mat[v]) return new_group(z, v);
    z->st[v] = ST_CHEAP;
    return JIT_OK;
  }
  int32_t gi = -1;
  fz_map m;
  bool agree = !z->must_mat[v] && !z->needs_leaf[v] && users_agree(z, v, &gi, &m);
  if (is_move(op)) {
    if (z->result[v] || z->must_mat[v]) {
      if (op == IR_CONCAT) mark_operands(z, v, z->needs_leaf);
      return new_group(z, v);
    }
    if (agree) {
      z->st[v] = ST_INLINE;
      z->grp[v] = gi;
      z->map[v] = m;
      if (op == IR_CONCAT) mark_operands(z, v, z->needs_leaf);
    } else {
      z->st[v] = ST_DUP;
      mark_operands(z, v, z->needs_leaf);
    }
    return JIT_OK;
  }
  if (ir_op_is_collective(op) || op == IR_SHARDING || op == IR_SORT ||
      (op == IR_CONV && !is_gemm(z->f, v)) || op == IR_REDUCE_WINDOW || op == IR_SELECT_SCATTER ||
      op == IR_FFT) {
    /* a kernel of its own (the runtime exchanges it between devices; a sort runs ir_sort_eval
       on whole rows, an fft its plan's passes; the others run through the interpreter): operands in buffers */
    mark_operands(z, v, z->must_mat);
    return new_group(z, v);
  }
  /* elementwise, reductions, dot */
  bool ok = agree && legal(z, v, &z->groups[gi], &m);
  if (agree && !ok && is_reduce(op)) ok = rows_for_reduce(z, v, gi, &m);
  if (ok && z->result[v]) {
    /* a second output of the kernel: only at the kernel's own index */
    const group *g = &z->groups[gi];
    const ir_type *t = ir_type_of(f, v);
    ok = (fz_map_equal(&m, &g->root_map) && same_dims(t, ir_type_of(f, g->root))) ||
         (fz_map_row_level(&m) && row_identity(&m, t, g));
    if (ok) z->written[v] = true;
  }
  if (!ok && !agree && shared_output(z, v, &gi, &m)) {
    ok = true;
    z->written[v] = true;
  }
  if (!ok) {
    jit_status st = new_group(z, v);
    if (st == JIT_OK && is_gemm(f, v)) mark_operands(z, v, z->must_mat);
    return st;
  }
  group *g = &z->groups[gi];
  z->st[v] = ST_INLINE;
  z->grp[v] = gi;
  z->map[v] = m;
  if (is_reduce(op)) g->kind = FZ_ROW;
  if (is_gemm(f, v)) {
    g->kind = FZ_DOT;
    g->dot = v;
    mark_operands(z, v, z->must_mat);
  }
  return JIT_OK;
}

/* ---- building the program ------------------------------------------------------------------------- */

typedef struct refset {
  ir_ref *v;
  uint32_t n, cap;
} refset;

static bool refset_add(refset *s, ir_ref r) {
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? 2 * s->cap : 8;
    ir_ref *g = realloc(s->v, cap * sizeof *g);
    if (!g) return false;
    s->v = g;
    s->cap = cap;
  }
  s->v[s->n++] = r;
  return true;
}

static int cmp_ref(const void *a, const void *b) {
  ir_ref x = *(const ir_ref *)a, y = *(const ir_ref *)b;
  return x < y ? -1 : x > y;
}

/* Whether v is computed inside group gi (else it is read from a buffer). */
static bool computed_in(const fuse *z, ir_ref v, int32_t gi) {
  switch (z->st[v]) {
  case ST_CHEAP:
  case ST_DUP: return true;
  case ST_INLINE:
  case ST_ROOT: return z->grp[v] == gi;
  default: return false;
  }
}

/* Collects ops and reads of group gi by a walk from its writes. */
static jit_status collect(const fuse *z, int32_t gi, uint32_t *stamp, uint32_t mark,
                          fz_kernel *k) {
  jit_status st = JIT_OK;
  refset ops = {0}, reads = {0}, todo = {0};
  for (uint32_t w = 0; w < k->n_writes; w++) {
    if (stamp[k->writes[w]] == mark) continue;
    stamp[k->writes[w]] = mark;
    if (!refset_add(&todo, k->writes[w])) goto oom;
  }
  while (todo.n) {
    ir_ref v = todo.v[--todo.n];
    if (!computed_in(z, v, gi)) {
      if (!refset_add(&reads, v)) goto oom;
      continue;
    }
    if (!refset_add(&ops, v)) goto oom;
    const ir_ins *in = &z->f->ins[v];
    for (uint32_t a = 0; a < in->n_args; a++) {
      ir_ref x = in->args[a];
      if (stamp[x] == mark) continue;
      stamp[x] = mark;
      if (!refset_add(&todo, x)) goto oom;
    }
  }
  if (ops.n) qsort(ops.v, ops.n, sizeof *ops.v, cmp_ref);
  if (reads.n) qsort(reads.v, reads.n, sizeof *reads.v, cmp_ref);
  k->ops = ops.v;
  k->n_ops = ops.n;
  k->reads = reads.v;
  k->n_reads = reads.n;
  free(todo.v);
  return JIT_OK;
oom:
  free(ops.v);
  free(reads.v);
  free(todo.v);
  st = jit_error(JIT_ENOMEM, "fusion: out of memory");
  return st;
}

void fz_prog_free(fz_prog *p) {
  if (!p) return;
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    free(p->kernels[i].ops);
    free(p->kernels[i].reads);
    free(p->kernels[i].writes);
    free(p->kernels[i].write_maps);
  }
  free(p->kernels);
  free(p->cls);
  free(p->owner);
  free(p->base);
  free(p);
}

static jit_status build_prog(fuse *z, fz_prog *p) {
  const ir_func *f = z->f;
  uint32_t n = z->n, ng = z->n_groups;
  jit_status st = JIT_OK;
  int32_t *order = malloc((ng ? ng : 1) * sizeof *order), *kidx = malloc((ng ? ng : 1) * sizeof *kidx);
  uint32_t *stamp = calloc(n ? n : 1, sizeof *stamp);
  p->cls = calloc(n ? n : 1, 1);
  p->owner = malloc((n ? n : 1) * sizeof *p->owner);
  p->base = malloc((n ? n : 1) * sizeof *p->base);
  p->kernels = calloc(ng ? ng : 1, sizeof *p->kernels);
  if (!order || !kidx || !stamp || !p->cls || !p->owner || !p->base || !p->kernels) goto oom;
  /* the sweep made groups in decreasing order of their roots */
  for (uint32_t i = 0; i < ng; i++) order[i] = (int32_t)(ng - 1 - i);
  for (uint32_t i = 0; i < ng; i++) kidx[order[i]] = (int32_t)i;
  p->n_kernels = ng;

  for (ir_ref v = 0; v < n; v++) {
    p->owner[v] = -1;
    p->base[v] = v;
    switch (z->st[v]) {
    case ST_PARAM: p->cls[v] = FZ_PARAM; break;
    case ST_ROOT:
      p->cls[v] = FZ_MAT;
      p->owner[v] = kidx[z->grp[v]];
      break;
    case ST_INLINE:
      p->cls[v] = z->written[v] ? FZ_MAT : FZ_INLINE;
      if (z->written[v]) p->owner[v] = kidx[z->grp[v]];
      break;
    case ST_CHEAP:
    case ST_DUP: p->cls[v] = FZ_INLINE; break;
    case ST_SCAN: p->cls[v] = FZ_SCAN; break;
    case ST_SCAN_OUT: p->cls[v] = FZ_MAT; break; /* owner -1: its scan's step writes it */
    case ST_VIEW:
      p->cls[v] = FZ_VIEW;
      p->base[v] = p->base[f->ins[v].args[0]];
      break;
    default: p->cls[v] = FZ_DEAD; break;
    }
  }

  for (uint32_t i = 0; i < ng; i++) {
    const group *g = &z->groups[order[i]];
    fz_kernel *k = &p->kernels[i];
    k->kind = g->kind;
    k->root = g->root;
    k->dot = g->dot;
    k->n_row = g->n_row;
    memcpy(k->row_ext, g->row_ext, sizeof k->row_ext);
    uint32_t nw = 1;
    for (ir_ref v = 0; v < g->root; v++)
      if (z->written[v] && z->grp[v] == order[i]) nw++;
    k->writes = malloc(nw * sizeof *k->writes);
    k->write_maps = malloc(nw * sizeof *k->write_maps);
    if (!k->writes || !k->write_maps) goto oom;
    for (ir_ref v = 0; v < g->root; v++)
      if (z->written[v] && z->grp[v] == order[i]) {
        k->write_maps[k->n_writes] = z->map[v];
        k->writes[k->n_writes++] = v;
      }
    k->write_maps[k->n_writes] = g->root_map;
    k->writes[k->n_writes++] = g->root;
    TRY(collect(z, order[i], stamp, i + 1, k));
    k->rows = 1;
    for (int d = 0; d < k->n_row; d++) k->rows *= k->row_ext[d];
    if (is_reduce(f->ins[g->root].op)) {
      int64_t out = ir_type_numel(ir_type_of(f, g->root));
      k->cols = out ? ir_type_numel(ir_type_of(f, f->ins[g->root].args[0])) / out : 0;
    } else if (g->root_map.n_inner) {
      k->cols = g->root_map.inner_ext[0];
    } else {
      /* a reduction with an epilogue: the reduction's length per row */
      k->cols = 1;
      for (uint32_t i = 0; i < k->n_ops; i++) {
        ir_ref r = k->ops[i];
        if (!is_reduce(f->ins[r].op)) continue;
        int64_t out = ir_type_numel(ir_type_of(f, r));
        k->cols = out ? ir_type_numel(ir_type_of(f, f->ins[r].args[0])) / out : 0;
        break;
      }
    }
  }
  free(order);
  free(kidx);
  free(stamp);
  return JIT_OK;
oom:
  st = jit_error(JIT_ENOMEM, "fusion: out of memory");
fail:
  free(order);
  free(kidx);
  free(stamp);
  return st;
}

jit_status ir_fuse(const ir_func *f, fz_prog **out) {
  jit_status st = JIT_OK;
  *out = NULL;
  fuse z = {.f = f, .n = f->n_ins};
  uint32_t n = f->n_ins, nn = n ? n : 1;
  fz_prog *p = calloc(1, sizeof *p);
  uint32_t n_uses = 0;
  for (uint32_t i = 0; i < n; i++) n_uses += f->ins[i].n_args;
  z.use_start = calloc(n + 1, sizeof *z.use_start);
  z.use_user = malloc((n_uses ? n_uses : 1) * sizeof *z.use_user);
  z.use_slot = malloc((n_uses ? n_uses : 1) * sizeof *z.use_slot);
  z.st = calloc(nn, 1);
  z.live = calloc(nn, sizeof(bool));
  z.result = calloc(nn, sizeof(bool));
  z.must_mat = calloc(nn, sizeof(bool));
  z.needs_leaf = calloc(nn, sizeof(bool));
  z.written = calloc(nn, sizeof(bool));
  z.grp = malloc(nn * sizeof *z.grp);
  z.map = calloc(nn, sizeof *z.map);
  if (!p || !z.use_start || !z.use_user || !z.use_slot || !z.st || !z.live || !z.result || !z.must_mat ||
      !z.needs_leaf || !z.written || !z.grp || !z.map) {
    st = jit_error(JIT_ENOMEM, "fusion: out of memory");
    goto fail;
  }
  p->f = f;
  for (uint32_t i = 0; i < n; i++) {
    z.grp[i] = -1;
    for (uint32_t a = 0; a < f->ins[i].n_args; a++) {
      if (f->ins[i].args[a] >= i) {
        st = jit_error(JIT_EINTERNAL, "fusion: @%s: %%%u uses a later value", f->name, i);
        goto fail;
      }
      z.use_start[f->ins[i].args[a] + 1]++;
    }
  }
  for (uint32_t i = 0; i < n; i++) z.use_start[i + 1] += z.use_start[i];
  {
    uint32_t *fill = calloc(nn, sizeof *fill);
    if (!fill) {
      st = jit_error(JIT_ENOMEM, "fusion: out of memory");
      goto fail;
    }
    for (uint32_t i = 0; i < n; i++)
      for (uint32_t a = 0; a < f->ins[i].n_args; a++) {
        ir_ref x = f->ins[i].args[a];
        uint32_t k = z.use_start[x] + fill[x]++;
        z.use_user[k] = i;
        z.use_slot[k] = a;
      }
    free(fill);
  }
  for (uint32_t r = 0; r < f->n_results; r++) {
    if (f->results[r] >= n) {
      st = jit_error(JIT_EINTERNAL, "fusion: @%s: result %u refers to no value", f->name, r);
      goto fail;
    }
    z.result[f->results[r]] = true;
  }
  mark_live(&z);
  for (uint32_t i = n; i-- > 0;) TRY(visit(&z, i));
  TRY(build_prog(&z, p));
  TRY(fz_merge_siblings(p));
  *out = p;
  p = NULL;
fail:
  fz_prog_free(p);
  free(z.use_start);
  free(z.use_user);
  free(z.use_slot);
  free(z.st);
  free(z.live);
  free(z.result);
  free(z.must_mat);
  free(z.needs_leaf);
  free(z.written);
  free(z.grp);
  free(z.map);
  free(z.groups);
  return st;
}

/* ---- printing --------------------------------------------------------------------------------------
   Instruction lines are the printer's own (ir_print into memory, one line per instruction), so
   the fused dump uses the optimized dump's numbering and format. */

static const char *const kind_names[] = {"loop", "row", "dot"};

static void print_list(FILE *out, const char *what, const ir_ref *v, uint32_t n) {
  fprintf(out, " %s", what);
  for (uint32_t i = 0; i < n; i++) fprintf(out, "%s%%%u", i ? ", " : " ", (unsigned)v[i]);
}

/* Line s (up to its newline) after indent spaces, then a newline. */
static void put_line(FILE *out, int indent, const char *s) {
  fprintf(out, "%*s", indent, "");
  fwrite(s, 1, strcspn(s, "\n"), out);
  fputc('\n', out);
}

/* p's dump with every line indented by indent: a scan's body is fused and printed the same way
   inside its loop line, two deeper than the loop, as the IR printer nests bodies (and as exec.c
   compiles a body: fused on its own, kernels numbered from k0). */
static jit_status print_prog(const fz_prog *p, FILE *out, int indent) {
  const ir_func *f = p->f;
  char *text = NULL;
  size_t len = 0;
  jit_status st = JIT_OK;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return jit_error(JIT_ENOMEM, "fusion: out of memory printing");
  st = ir_print(f, mem);
  if (fclose(mem) != 0 && st == JIT_OK) st = jit_error(JIT_ENOMEM, "fusion: out of memory printing");
  if (st != JIT_OK) {
    free(text);
    return st;
  }
  /* line i of text: the header, then instructions n_params.., then return and } */
  uint32_t n_lines = 0;
  for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
  const char **line = malloc((n_lines + 1) * sizeof *line);
  if (!line) {
    free(text);
    return jit_error(JIT_ENOMEM, "fusion: out of memory printing");
  }
  /* the header, each top-level instruction's line (a scan's body, nested deeper, is skipped),
     then the return and the closing brace */
  uint32_t li = 0;
  line[li++] = text;
  for (size_t i = 0; i + 1 < len; i++)
    if (text[i] == '\n' && (strncmp(text + i + 1, "  %", 3) == 0 || i + 1 >= len - 2 ||
                            strncmp(text + i + 1, "  return", 8) == 0))
      line[li++] = text + i + 1;
#define LINE_OF(r) line[1 + (r) - f->n_params]
  put_line(out, indent, line[0]);
  uint32_t ki = 0;
  for (ir_ref v = f->n_params; v < f->n_ins && st == JIT_OK; v++) {
    /* kernels in execution order (by root), views where they are defined */
    if (ki < p->n_kernels && p->kernels[ki].root == v) {
      const fz_kernel *k = &p->kernels[ki];
      fprintf(out, "%*s  kernel k%u %s[%lld x %lld]", indent, "", ki, kind_names[k->kind],
              (long long)k->rows, (long long)k->cols);
      if (k->n_reads) print_list(out, "reads", k->reads, k->n_reads);
      print_list(out, "writes", k->writes, k->n_writes);
      fputs(" {\n", out);
      for (uint32_t i = 0; i < k->n_ops; i++) put_line(out, indent + 2, LINE_OF(k->ops[i]));
      fprintf(out, "%*s  }\n", indent, "");
      ki++;
    }
    if (p->cls[v] == FZ_VIEW) {
      fprintf(out, "%*s  view", indent, "");
      put_line(out, 0, LINE_OF(v) + 1);
    }
    if (p->cls[v] == FZ_SCAN) { /* its line up to the body's opening brace, then the body */
      const char *l = LINE_OF(v) + 1, *brace = strstr(l, ") {");
      fprintf(out, "%*s  %s", indent, "", f->ins[v].op == IR_SCAN ? "loop" : ir_op_name[f->ins[v].op]);
      fwrite(l, 1, brace ? (size_t)(brace - l + 1) : strcspn(l, "\n"), out);
      fputs(" {\n", out);
      for (uint32_t j = 0; j < ir_n_bodies(&f->ins[v]) && st == JIT_OK; j++) {
        fz_prog *bp = NULL; /* a cond's branches, a while's predicate and body, in order */
        st = ir_fuse(ir_body_at(f, &f->ins[v], j), &bp);
        if (st == JIT_OK) st = print_prog(bp, out, indent + 4);
        fz_prog_free(bp);
      }
      fprintf(out, "%*s  }\n", indent, "");
    }
  }
  for (uint32_t i = 1 + f->n_ins - f->n_params; i < li && st == JIT_OK; i++)
    put_line(out, indent, line[i]);
#undef LINE_OF
  free(line);
  free(text);
  return st;
}

jit_status fz_print(const fz_prog *p, FILE *out) {
  jit_status st = print_prog(p, out, 0);
  if (st == JIT_OK && ferror(out)) return jit_error(JIT_EIO, "fusion: writing the fused dump failed");
  return st;
}
