/* lower_build.c: the lowering's instruction builder (codegen/lower_internal.h). A pure
 * instruction is CSE'd and lands in the outermost open block where its operands exist; index
 * arithmetic is folded as it is built; loop nests open and close around the row block. */
#include <stdlib.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "runtime/error.h"

/* ---- building -------------------------------------------------------------------------------- */

int32_t lw_new_ins(lower *L, const lp_ins *in, int level) {
  lp_func *lf = L->lf;
  if (lf->n_ins == lf->cap_ins) {
    uint32_t cap = lf->cap_ins ? 2 * lf->cap_ins : 256;
    lp_ins *g = realloc(lf->ins, cap * sizeof *g);
    int8_t *gl = g ? realloc(L->lvl, cap) : NULL;
    if (g) lf->ins = g;
    if (!g || !gl) {
      L->oom = true;
      return -1;
    }
    L->lvl = gl;
    lf->cap_ins = cap;
  }
  int32_t id = (int32_t)lf->n_ins++;
  lf->ins[id] = *in;
  L->lvl[id] = (int8_t)level;
  return id;
}

int32_t lw_new_block(lower *L) {
  lp_func *lf = L->lf;
  if (!ir_grow((void **)&lf->blocks, &lf->cap_blocks, lf->n_blocks + 1, sizeof *lf->blocks)) {
    L->oom = true;
    return -1;
  }
  memset(&lf->blocks[lf->n_blocks], 0, sizeof lf->blocks[0]);
  return (int32_t)lf->n_blocks++;
}

static void append(lower *L, int32_t block, int32_t id) {
  lp_block *b = &L->lf->blocks[block];
  if (!ir_grow((void **)&b->ins, &b->cap, b->n + 1, sizeof *b->ins)) {
    L->oom = true;
    return;
  }
  b->ins[b->n++] = id;
}

/* A side-effecting or stateful instruction, at an explicit depth. */
int32_t lw_emit_at(lower *L, lp_ins in, int level) {
  if (L->oom) return -1;
  int32_t id = lw_new_ins(L, &in, level);
  if (id >= 0) append(L, L->stack[level], id);
  return id;
}

static uint64_t ins_hash(const lp_ins *in) {
  uint64_t h = 1469598103934665603ull;
  const uint64_t v[] = {in->op, in->dt, in->in_dt, in->ew, in->cmp, (uint64_t)(uint32_t)in->a,
                        (uint64_t)(uint32_t)in->b, (uint64_t)(uint32_t)in->c,
                        (uint64_t)(uint32_t)in->buf, (uint64_t)in->imm.i};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) h = (h ^ v[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static bool ins_same(const lp_ins *x, const lp_ins *y) {
  return x->op == y->op && x->dt == y->dt && x->in_dt == y->in_dt && x->ew == y->ew &&
         x->cmp == y->cmp && x->range == y->range && x->a == y->a && x->b == y->b &&
         x->c == y->c && x->buf == y->buf && x->imm.i == y->imm.i;
}

static bool cse_grow(lower *L) {
  uint32_t cap = L->cse_cap ? 2 * L->cse_cap : 1024;
  int32_t *t = malloc(cap * sizeof *t);
  if (!t) return false;
  for (uint32_t i = 0; i < cap; i++) t[i] = -1;
  for (uint32_t i = 0; i < L->cse_cap; i++) {
    if (L->cse[i] < 0) continue;
    uint32_t h = (uint32_t)ins_hash(&L->lf->ins[L->cse[i]]) & (cap - 1);
    while (t[h] >= 0) h = (h + 1) & (cap - 1);
    t[h] = L->cse[i];
  }
  free(L->cse);
  L->cse = t;
  L->cse_cap = cap;
  return true;
}

/* (after a failed allocation, ids may name instructions that were never stored) */
int lw_level_of(const lower *L, int32_t id) { return id < 0 || L->oom ? 0 : L->lvl[id]; }

/* A pure instruction: reused when an equal one exists (it is then visible here: an instruction
   is placed by its operands, and an operand from a closed loop cannot be named again). */
int32_t lw_emit(lower *L, lp_ins in) {
  if (L->oom) return -1;
  if (2 * (L->cse_n + 1) > L->cse_cap && !cse_grow(L)) {
    L->oom = true;
    return -1;
  }
  uint32_t h = (uint32_t)ins_hash(&in) & (L->cse_cap - 1);
  while (L->cse[h] >= 0) {
    if (ins_same(&L->lf->ins[L->cse[h]], &in)) return L->cse[h];
    h = (h + 1) & (L->cse_cap - 1);
  }
  int level = in.op == LP_ROW ? 1 : 0;
  int la = lw_level_of(L, in.a), lb = lw_level_of(L, in.b), lc = lw_level_of(L, in.c);
  if (la > level) level = la;
  if (lb > level) level = lb;
  if (lc > level) level = lc;
  int32_t id = lw_emit_at(L, in, level);
  if (id < 0) return -1;
  L->cse[h] = id;
  L->cse_n++;
  return id;
}

bool lw_is_iconst(const lower *L, int32_t id, int64_t *v) {
  if (L->oom || id < 0 || L->lf->ins[id].op != LP_CONST || L->lf->ins[id].dt != JIT_I64) return false;
  *v = L->lf->ins[id].imm.i;
  return true;
}

int32_t lw_iconst(lower *L, int64_t v) {
  lp_ins in = lw_mk(LP_CONST, JIT_I64, -1, -1, -1);
  in.imm.i = v;
  return lw_emit(L, in);
}

/* Index arithmetic with the folds that keep the C dump readable. */
int32_t lw_iop(lower *L, lp_op op, int32_t a, int32_t b) {
  int64_t x = 0, y = 0;
  bool ca = lw_is_iconst(L, a, &x), cb = lw_is_iconst(L, b, &y);
  if (ca && cb) {
    switch (op) {
    case LP_IADD: return lw_iconst(L, x + y);
    case LP_ISUB: return lw_iconst(L, x - y);
    case LP_IMUL: return lw_iconst(L, x * y);
    case LP_IDIV: return lw_iconst(L, y ? x / y : 0); /* / 0: only in code that never runs */
    case LP_IREM: return lw_iconst(L, y ? x % y : 0);
    case LP_IMIN: return lw_iconst(L, x < y ? x : y);
    case LP_IMAX: return lw_iconst(L, x > y ? x : y);
    case LP_ILT: {
      lp_ins c = lw_mk(LP_CONST, JIT_BOOL, -1, -1, -1);
      c.imm.i = x < y;
      return lw_emit(L, c);
    }
    default: break;
    }
  }
  if ((op == LP_IMIN || op == LP_IMAX) && a == b) return a;
  if (op == LP_ILT && a == b) {
    lp_ins c = lw_mk(LP_CONST, JIT_BOOL, -1, -1, -1);
    return lw_emit(L, c);
  }
  if (op == LP_IADD && ca && x == 0) return b;
  if ((op == LP_IADD || op == LP_ISUB) && cb && y == 0) return a;
  if (op == LP_IMUL && ((ca && x == 0) || (cb && y == 0))) return lw_iconst(L, 0);
  if (op == LP_IMUL && ca && x == 1) return b;
  if (op == LP_IMUL && cb && y == 1) return a;
  if (op == LP_IDIV && cb && y == 1) return a;
  if ((op == LP_IADD || op == LP_IMUL) && ca && !cb)
    return lw_emit(L, lw_mk(op, JIT_I64, b, a, -1));
  return lw_emit(L, lw_mk(op, op == LP_ILT ? JIT_BOOL : JIT_I64, a, b, -1));
}

/* ---- indices --------------------------------------------------------------------------------- */

int32_t lw_row_val(lower *L, int k) {
  if (L->row_idx[k] >= 0) return L->row_idx[k];
  int32_t r = lw_emit(L, lw_mk(LP_ROW, JIT_I64, -1, -1, -1));
  int64_t inner = 1;
  for (int j = k + 1; j < L->n_row; j++) inner *= L->row_ext[j];
  if (inner == 0) inner = 1; /* no rows at all: the kernel is never called */
  int32_t v = inner == 1 ? r : lw_iop(L, LP_IDIV, r, lw_iconst(L, inner));
  if (k > 0) v = lw_iop(L, LP_IREM, v, lw_iconst(L, L->row_ext[k]));
  return L->row_idx[k] = v;
}

int32_t lw_dim_index(lower *L, const fz_map *m, int d) {
  int src = m->src[d];
  if (src == FZ_CONST) return lw_iconst(L, m->off[d]);
  int32_t base;
  if (src >= 0) {
    base = lw_row_val(L, src);
  } else {
    int k = FZ_INNER_DIM(src);
    if (k >= L->n_inner) {
      L->oom = true;
      return -1;
    }
    base = L->inner_idx[k];
  }
  int32_t scaled = lw_iop(L, LP_IMUL, base, lw_iconst(L, m->scale[d]));
  return lw_iop(L, LP_IADD, scaled, lw_iconst(L, m->off[d]));
}

/* The element offset of value v (of v's own shape) read at m; row_part: within the row's part
   of v only (its dims that follow inner loops, as one array of their extents: a row scratch
   array's index). */
int32_t lw_offset_in(lower *L, ir_ref v, const fz_map *m, bool row_part) {
  const ir_type *t = ir_type_of(L->f, v);
  int32_t a = lw_iconst(L, 0);
  int64_t stride = 1;
  for (int d = t->rank; d-- > 0;) {
    if (row_part && (m->src[d] == FZ_CONST || m->src[d] >= 0)) continue;
    if (t->dims[d] != 1)
      a = lw_iop(L, LP_IADD, a, lw_iop(L, LP_IMUL, lw_dim_index(L, m, d), lw_iconst(L, stride)));
    stride *= t->dims[d];
  }
  return a;
}

int32_t lw_address(lower *L, ir_ref v, const fz_map *m) { return lw_offset_in(L, v, m, false); }

/* ---- loop nests ------------------------------------------------------------------------------ */

static void save_nest(const lower *L, saved_nest *sv) {
  sv->depth = L->depth;
  memcpy(sv->stack, L->stack, sizeof sv->stack);
  memcpy(sv->fors, L->fors, sizeof sv->fors);
  sv->phase = L->phase;
  sv->n_inner = L->n_inner;
  memcpy(sv->inner_idx, L->inner_idx, sizeof sv->inner_idx);
}

static void load_nest(lower *L, const saved_nest *sv) {
  L->depth = sv->depth;
  memcpy(L->stack, sv->stack, sizeof L->stack);
  memcpy(L->fors, sv->fors, sizeof L->fors);
  L->phase = sv->phase;
  L->n_inner = sv->n_inner;
  memcpy(L->inner_idx, sv->inner_idx, sizeof L->inner_idx);
}

/* Opens n nested loops with the given trip counts, suspending any loops being generated: a
   phase always hangs off the row block. */
void lw_open_nest(lower *L, int n, const int32_t *trip, saved_nest *sv) {
  save_nest(L, sv);
  L->depth = 2;
  L->phase = ++L->next_phase;
  L->n_inner = n;
  for (int k = 0; k < n && !L->oom; k++) {
    int32_t body = lw_new_block(L);
    if (body < 0) return;
    lp_ins var = lw_mk(LP_VAR, JIT_I64, -1, -1, -1);
    int32_t vid = lw_new_ins(L, &var, L->depth); /* lives in the body, at stack[depth] */
    lp_ins fo = lw_mk(LP_FOR, JIT_I64, trip[k], vid, -1);
    fo.body = body;
    int32_t fid = vid >= 0 ? lw_new_ins(L, &fo, L->depth - 1) : -1;
    if (fid < 0) return;
    L->lf->ins[vid].a = fid;
    L->fors[L->depth] = fid;
    L->stack[L->depth++] = body;
    L->inner_idx[k] = vid;
  }
}

/* Closes the loops opened by lw_open_nest (placing each in its parent) and resumes what it
   suspended. */
void lw_close_nest(lower *L, const saved_nest *sv) {
  for (int d = L->depth - 1; d >= 2 && !L->oom; d--) append(L, L->stack[d - 1], L->fors[d]);
  load_nest(L, sv);
}

/* ---- values ---------------------------------------------------------------------------------- */

int32_t lw_value_const(lower *L, jit_dtype dt, double c) {
  lp_ins in = lw_mk(LP_CONST, dt, -1, -1, -1);
  unsigned char tmp[8];
  ir_store_f64(dt, tmp, 0, c);
  if (ir_dtype_is_float(dt)) in.imm.f = ir_load_f64(dt, tmp, 0);
  else in.imm.i = dt == JIT_BOOL ? c != 0 : ir_load_i64(dt, tmp, 0);
  return lw_emit(L, in);
}

int32_t lw_bits_const(lower *L, jit_dtype ut, uint64_t v) {
  lp_ins in = lw_mk(LP_CONST, ut, -1, -1, -1);
  in.imm.i = (int64_t)v;
  return lw_emit(L, in);
}

int32_t lw_ew(lower *L, ir_op op, jit_dtype dt, jit_dtype in_dt, int32_t a, int32_t b, int32_t c) {
  lp_ins in = lw_mk(LP_EW, dt, a, b, c);
  in.ew = (uint8_t)op;
  in.in_dt = (uint8_t)in_dt;
  return lw_emit(L, in);
}

int32_t lw_cmp(lower *L, jit_cmp_op c, jit_dtype in_dt, int32_t a, int32_t b) {
  lp_ins in = lw_mk(LP_EW, JIT_BOOL, a, b, -1);
  in.ew = IR_CMP;
  in.in_dt = (uint8_t)in_dt;
  in.cmp = (uint8_t)c;
  return lw_emit(L, in);
}

void lw_note_read(lower *L, ir_ref b) {
  for (uint32_t i = 0; i < L->n_reads; i++)
    if (L->reads[i] == b) return;
  if (!ir_grow((void **)&L->reads, &L->cap_reads, L->n_reads + 1, sizeof *L->reads)) {
    L->oom = true;
    return;
  }
  L->reads[L->n_reads++] = b;
}

int32_t lw_load_at(lower *L, ir_ref v, int32_t a, bool clamp) {
  const ir_type *t = ir_type_of(L->f, v);
  if (clamp) { /* a concat evaluates every operand at every point */
    int64_t n = ir_type_numel(t);
    a = lw_iop(L, LP_IMIN, lw_iop(L, LP_IMAX, a, lw_iconst(L, 0)), lw_iconst(L, n > 0 ? n - 1 : 0));
  }
  ir_ref b = L->p->base[v];
  lw_note_read(L, b);
  lp_ins ld = lw_mk(LP_LOAD, t->dtype, a, -1, -1);
  ld.buf = (int32_t)b;
  return lw_emit(L, ld);
}
