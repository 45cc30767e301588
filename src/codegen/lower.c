/* lower.c: a fused kernel -> loop IR (codegen/kernel.h). Each value of the kernel is generated
 * at the index map it is read at, from the writes down to the loads:
 *   - a memo per (value, map, loop nest) computes nothing twice in one loop;
 *   - an instruction lands in the outermost open block where its operands exist, so values that
 *     do not depend on the inner loop are computed once per row, constants once per call;
 *   - a reduction read per row opens its own inner loop nest (a phase) in the row block, before
 *     the loop being generated when it is needed: softmax becomes max loop, sum loop, write loop;
 *   - a transcendental value a reduction loop computes and the write loop needs again is
 *     cached by the former and loaded back by the latter: in a row scratch array on the stack
 *     when the row is small (the output is then only written, and may stream), else in the
 *     output row;
 *   - index arithmetic is folded and CSE'd; LLVM strength-reduces what is left.
 * A 1-d space with few rows is split into rows of LP_BLOCK elements so that threads share it;
 * a reduction over leading axes runs in column mode (see write_columns).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "runtime/error.h"

#define LP_BLOCK 4096     /* elements per row when a long inner dim is split into rows */
#define LP_SPLIT_ROWS 16  /* split when the kernel has fewer rows than this */
#define LP_COLUMNS 256    /* output elements per row of a column reduction */
#define MAX_DEPTH (2 + IR_MAX_RANK)
#define LP_SCRATCH_BYTES (16 << 10) /* row scratch of a kernel: stays in L1 beside its rows */

typedef struct memo_ent {
  int32_t id;       /* -1: empty */
  ir_ref v;
  uint32_t phase;
  bool clamp;
  fz_map m;
} memo_ent;

typedef struct saved_nest {
  int depth;
  int32_t stack[MAX_DEPTH], fors[MAX_DEPTH];
  uint32_t phase;
  int n_inner;
  int32_t inner_idx[IR_MAX_RANK];
} saved_nest;

typedef struct lower {
  const fz_prog *p;
  const ir_func *f;
  const fz_kernel *k;
  lp_func *lf;
  int8_t *lvl;            /* per ins: the depth of the block it is in */
  int32_t stack[MAX_DEPTH];
  int32_t fors[MAX_DEPTH]; /* fors[d]: the LP_FOR whose body is stack[d] (d >= 2) */
  int depth;              /* open blocks: stack[0] entry, [1] row, [2..] loop bodies */
  int32_t *cse;           /* open addressing: ins ids, -1 empty */
  uint32_t cse_cap, cse_n;
  memo_ent *memo;
  uint32_t memo_cap, memo_n;
  uint32_t phase, next_phase;
  int n_inner;
  int32_t inner_idx[IR_MAX_RANK];
  int n_row;              /* row dims, including the split's block dim */
  int64_t row_ext[IR_MAX_RANK + 1];
  int32_t row_idx[IR_MAX_RANK + 1];
  ir_ref *reads;          /* buffers loaded from (bases), discovery order */
  uint32_t n_reads, cap_reads;
  struct cand *cand;      /* values the write loop will read that a reduction loop may cache */
  uint32_t n_cand, cap_cand;
  uint32_t write_phase;   /* the write loop's nest (0: none yet) */
  bool column;            /* column mode (write_columns) */
  bool cached[64];        /* cached[w]: write w's row holds a value cached by a reduction loop */
  int64_t scratch_bytes;  /* of the row scratch arrays so far */
  bool fma;               /* the target has exact fused multiply-adds (LP_QUOT needs them) */
  bool quot_on;           /* the write loop divides by a row's divisor with LP_QUOT (gen_quot) */
  int32_t quot_max[2], quot_min[2]; /* f32, f64: accumulators of |a|'s bits and of those - 1,
                                       or -1 (no LP_QUOT of that width yet) */
  int32_t quot_b_ok;      /* whether every divisor is in LP_QUOT's range (bool) */
  bool collecting;        /* prewalk's first pass: finding candidates, generating nothing */
  uint32_t walking;       /* the write whose value prewalk is walking */
  bool oom;
} lower;

/* ---- building ------------------------------------------------------------------------------------ */

static int32_t new_ins(lower *L, const lp_ins *in, int level) {
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

static int32_t new_block(lower *L) {
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
static int32_t emit_at(lower *L, lp_ins in, int level) {
  if (L->oom) return -1;
  int32_t id = new_ins(L, &in, level);
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
         x->cmp == y->cmp && x->a == y->a && x->b == y->b && x->c == y->c && x->buf == y->buf &&
         x->imm.i == y->imm.i;
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
static int level_of(const lower *L, int32_t id) { return id < 0 || L->oom ? 0 : L->lvl[id]; }

/* A pure instruction: reused when an equal one exists (it is then visible here: an instruction
   is placed by its operands, and an operand from a closed loop cannot be named again). */
static int32_t emit(lower *L, lp_ins in) {
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
  int la = level_of(L, in.a), lb = level_of(L, in.b), lc = level_of(L, in.c);
  if (la > level) level = la;
  if (lb > level) level = lb;
  if (lc > level) level = lc;
  int32_t id = emit_at(L, in, level);
  if (id < 0) return -1;
  L->cse[h] = id;
  L->cse_n++;
  return id;
}

static lp_ins mk(lp_op op, jit_dtype dt, int32_t a, int32_t b, int32_t c) {
  lp_ins in;
  memset(&in, 0, sizeof in);
  in.op = (uint8_t)op;
  in.dt = (uint8_t)dt;
  in.a = a;
  in.b = b;
  in.c = c;
  in.buf = -1;
  in.body = -1;
  return in;
}

static bool is_iconst(const lower *L, int32_t id, int64_t *v) {
  if (L->oom || id < 0 || L->lf->ins[id].op != LP_CONST || L->lf->ins[id].dt != JIT_I64) return false;
  *v = L->lf->ins[id].imm.i;
  return true;
}

static int32_t iconst(lower *L, int64_t v) {
  lp_ins in = mk(LP_CONST, JIT_I64, -1, -1, -1);
  in.imm.i = v;
  return emit(L, in);
}

/* Index arithmetic with the folds that keep the C dump readable. */
static int32_t iop(lower *L, lp_op op, int32_t a, int32_t b) {
  int64_t x = 0, y = 0;
  bool ca = is_iconst(L, a, &x), cb = is_iconst(L, b, &y);
  if (ca && cb) {
    switch (op) {
    case LP_IADD: return iconst(L, x + y);
    case LP_ISUB: return iconst(L, x - y);
    case LP_IMUL: return iconst(L, x * y);
    case LP_IDIV: return iconst(L, y ? x / y : 0); /* / 0: only in code that never runs */
    case LP_IREM: return iconst(L, y ? x % y : 0);
    case LP_IMIN: return iconst(L, x < y ? x : y);
    case LP_IMAX: return iconst(L, x > y ? x : y);
    case LP_ILT: {
      lp_ins c = mk(LP_CONST, JIT_BOOL, -1, -1, -1);
      c.imm.i = x < y;
      return emit(L, c);
    }
    default: break;
    }
  }
  if ((op == LP_IMIN || op == LP_IMAX) && a == b) return a;
  if (op == LP_ILT && a == b) {
    lp_ins c = mk(LP_CONST, JIT_BOOL, -1, -1, -1);
    return emit(L, c);
  }
  if (op == LP_IADD && ca && x == 0) return b;
  if ((op == LP_IADD || op == LP_ISUB) && cb && y == 0) return a;
  if (op == LP_IMUL && ((ca && x == 0) || (cb && y == 0))) return iconst(L, 0);
  if (op == LP_IMUL && ca && x == 1) return b;
  if (op == LP_IMUL && cb && y == 1) return a;
  if (op == LP_IDIV && cb && y == 1) return a;
  if ((op == LP_IADD || op == LP_IMUL) && ca && !cb) return emit(L, mk(op, JIT_I64, b, a, -1));
  return emit(L, mk(op, op == LP_ILT ? JIT_BOOL : JIT_I64, a, b, -1));
}

/* ---- indices ----------------------------------------------------------------------------------- */

static int32_t row_val(lower *L, int k) {
  if (L->row_idx[k] >= 0) return L->row_idx[k];
  int32_t r = emit(L, mk(LP_ROW, JIT_I64, -1, -1, -1));
  int64_t inner = 1;
  for (int j = k + 1; j < L->n_row; j++) inner *= L->row_ext[j];
  if (inner == 0) inner = 1; /* no rows at all: the kernel is never called */
  int32_t v = inner == 1 ? r : iop(L, LP_IDIV, r, iconst(L, inner));
  if (k > 0) v = iop(L, LP_IREM, v, iconst(L, L->row_ext[k]));
  return L->row_idx[k] = v;
}

static int32_t dim_index(lower *L, const fz_map *m, int d) {
  int src = m->src[d];
  if (src == FZ_CONST) return iconst(L, m->off[d]);
  int32_t base;
  if (src >= 0) {
    base = row_val(L, src);
  } else {
    int k = FZ_INNER_DIM(src);
    if (k >= L->n_inner) {
      L->oom = true;
      return -1;
    }
    base = L->inner_idx[k];
  }
  return iop(L, LP_IADD, iop(L, LP_IMUL, base, iconst(L, m->scale[d])), iconst(L, m->off[d]));
}

/* The element offset of value v (of v's own shape) read at m; row_part: within the row's part
   of v only (its dims that follow inner loops, as one array of their extents: a row scratch
   array's index). */
static int32_t offset_in(lower *L, ir_ref v, const fz_map *m, bool row_part) {
  const ir_type *t = ir_type_of(L->f, v);
  int32_t a = iconst(L, 0);
  int64_t stride = 1;
  for (int d = t->rank; d-- > 0;) {
    if (row_part && (m->src[d] == FZ_CONST || m->src[d] >= 0)) continue;
    if (t->dims[d] != 1) a = iop(L, LP_IADD, a, iop(L, LP_IMUL, dim_index(L, m, d), iconst(L, stride)));
    stride *= t->dims[d];
  }
  return a;
}

static int32_t address(lower *L, ir_ref v, const fz_map *m) { return offset_in(L, v, m, false); }

/* ---- loop nests -------------------------------------------------------------------------------- */

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
static void open_nest(lower *L, int n, const int32_t *trip, saved_nest *sv) {
  save_nest(L, sv);
  L->depth = 2;
  L->phase = ++L->next_phase;
  L->n_inner = n;
  for (int k = 0; k < n && !L->oom; k++) {
    int32_t body = new_block(L);
    if (body < 0) return;
    lp_ins var = mk(LP_VAR, JIT_I64, -1, -1, -1);
    int32_t vid = new_ins(L, &var, L->depth); /* lives in the body, at stack[depth] */
    lp_ins fo = mk(LP_FOR, JIT_I64, trip[k], vid, -1);
    fo.body = body;
    int32_t fid = vid >= 0 ? new_ins(L, &fo, L->depth - 1) : -1;
    if (fid < 0) return;
    L->lf->ins[vid].a = fid;
    L->fors[L->depth] = fid;
    L->stack[L->depth++] = body;
    L->inner_idx[k] = vid;
  }
}

/* Closes the loops opened by open_nest (placing each in its parent) and resumes what it suspended. */
static void close_nest(lower *L, const saved_nest *sv) {
  for (int d = L->depth - 1; d >= 2 && !L->oom; d--) append(L, L->stack[d - 1], L->fors[d]);
  load_nest(L, sv);
}

/* ---- values ------------------------------------------------------------------------------------- */

static uint64_t memo_hash(ir_ref v, uint32_t phase, bool clamp, const fz_map *m) {
  uint64_t h = 1469598103934665603ull;
  uint64_t head[] = {v, phase, clamp, (uint64_t)m->rank, (uint64_t)m->n_inner};
  for (size_t i = 0; i < 5; i++) h = (h ^ head[i]) * 1099511628211ull;
  for (int d = 0; d < m->rank; d++)
    h = (((h ^ (uint64_t)(uint8_t)m->src[d]) * 1099511628211ull ^ (uint64_t)m->scale[d]) *
             1099511628211ull ^
         (uint64_t)m->off[d]) *
        1099511628211ull;
  return h ^ (h >> 31);
}

static memo_ent *memo_slot(lower *L, ir_ref v, uint32_t phase, bool clamp, const fz_map *m) {
  if (2 * (L->memo_n + 1) > L->memo_cap) {
    uint32_t cap = L->memo_cap ? 2 * L->memo_cap : 256;
    memo_ent *t = malloc(cap * sizeof *t);
    if (!t) {
      L->oom = true;
      return NULL;
    }
    for (uint32_t i = 0; i < cap; i++) t[i].id = -1;
    for (uint32_t i = 0; i < L->memo_cap; i++) {
      memo_ent *e = &L->memo[i];
      if (e->id < 0) continue;
      uint32_t h = (uint32_t)memo_hash(e->v, e->phase, e->clamp, &e->m) & (cap - 1);
      while (t[h].id >= 0) h = (h + 1) & (cap - 1);
      t[h] = *e;
    }
    free(L->memo);
    L->memo = t;
    L->memo_cap = cap;
  }
  uint32_t h = (uint32_t)memo_hash(v, phase, clamp, m) & (L->memo_cap - 1);
  while (L->memo[h].id >= 0) {
    memo_ent *e = &L->memo[h];
    if (e->v == v && e->phase == phase && e->clamp == clamp && fz_map_equal(&e->m, m)) return e;
    h = (h + 1) & (L->memo_cap - 1);
  }
  return &L->memo[h];
}

static bool computed(const lower *L, ir_ref v) {
  const fz_kernel *k = L->k;
  if (v == k->dot) return false;
  uint32_t lo = 0, hi = k->n_ops;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (k->ops[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < k->n_ops && k->ops[lo] == v;
}

static void note_read(lower *L, ir_ref b) {
  for (uint32_t i = 0; i < L->n_reads; i++)
    if (L->reads[i] == b) return;
  if (!ir_grow((void **)&L->reads, &L->cap_reads, L->n_reads + 1, sizeof *L->reads)) {
    L->oom = true;
    return;
  }
  L->reads[L->n_reads++] = b;
}

static jit_status unsupported(const lower *L, ir_ref v) {
  const ir_ins *in = &L->f->ins[v];
  return jit_error(JIT_EUNSUPPORTED, "codegen: %%%u = %s on %s has no compiled form", v,
                   ir_op_name[in->op], jit_dtype_name(ir_type_of(L->f, in->args[0])->dtype));
}

/* The constant c of dtype dt as the loop IR holds it (floats rounded to dt). */
static int32_t value_const(lower *L, jit_dtype dt, double c) {
  lp_ins in = mk(LP_CONST, dt, -1, -1, -1);
  if (ir_dtype_is_float(dt)) {
    unsigned char tmp[8];
    ir_store_f64(dt, tmp, 0, c);
    in.imm.f = ir_load_f64(dt, tmp, 0);
  } else {
    unsigned char tmp[8];
    ir_store_f64(dt, tmp, 0, c);
    in.imm.i = dt == JIT_BOOL ? c != 0 : ir_load_i64(dt, tmp, 0);
  }
  return emit(L, in);
}

static jit_status gen(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out);

/* The identity of reduction comb (add, max, min) on dt, as a double that value_const stores
   saturated: the dtype's lowest / highest value for ints (2^63 and 2^64 saturate to the i64 and
   u64 limits). */
static double reduce_init(ir_op comb, jit_dtype dt) {
  if (comb == IR_ADD) return 0;
  if (comb == IR_MUL) return 1;
  bool mx = comb == IR_MAX;
  if (ir_dtype_is_float(dt)) return mx ? -INFINITY : INFINITY;
  if (dt == JIT_BOOL || ir_dtype_is_unsigned(dt)) return mx ? 0 : 0x1p64;
  if (dt == JIT_I8) return mx ? -128 : 127;
  if (dt == JIT_I32) return mx ? -2147483648.0 : 2147483647.0;
  return mx ? -0x1p63 : 0x1p63;
}

/* ---- caching a reduction loop's values in the output row --------------------------------------
   softmax's exp(x - max) is needed by the sum loop and again by the write loop. Rather than
   computing it twice, the sum loop also stores it into the output's row (in L1 by then), and
   the write loop loads it back: y = e / sum reads e from y. Done for transcendental values whose
   type and index map are those of an element-level output, one value per output. The values the
   write loop will read are found (prewalk) before any reduction loop is generated, so that the
   store is made while its loop is being built. */
typedef struct cand {
  ir_ref v;
  fz_map m;
  uint32_t owner;       /* a write whose value needs v: it loads v before storing itself */
  int32_t w;            /* the write caching it (owner), or -1 */
  int32_t scratch;      /* the row scratch array caching it, or -1 */
} cand;

static bool expensive(ir_op op) {
  switch (op) {
  case IR_EXP:
  case IR_LOG:
  case IR_TANH:
  case IR_LOGISTIC:
  case IR_ERF:
  case IR_SIN:
  case IR_COS:
  case IR_POW:
  case IR_LOG1P:
  case IR_EXPM1:
  case IR_ERF_INV:
  case IR_THREEFRY:
  case IR_ATAN2: return true;
  default: return false;
  }
}

static cand *find_cand(const lower *L, ir_ref v, const fz_map *m) {
  for (uint32_t i = 0; i < L->n_cand; i++)
    if (L->cand[i].v == v && fz_map_equal(&L->cand[i].m, m)) return &L->cand[i];
  return NULL;
}

static void add_cand(lower *L, ir_ref v, const fz_map *m, uint32_t owner) {
  if (find_cand(L, v, m)) return;
  if (!ir_grow((void **)&L->cand, &L->cap_cand, L->n_cand + 1, sizeof *L->cand)) {
    L->oom = true;
    return;
  }
  L->cand[L->n_cand++] = (cand){v, *m, owner, -1, -1};
}

/* Elements of the row's part of a value of type t read at m: its dims that follow inner loops. */
static int64_t row_len(const ir_type *t, const fz_map *m) {
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    if (m->src[d] != FZ_CONST && m->src[d] < 0) n *= t->dims[d];
  return n;
}

/* Scratch array s is named by buffer -2 - s until lp_lower numbers the buffers. */
static int32_t scratch_buf(int32_t s) { return -2 - s; }

/* Inside a reduction loop: caches v (just computed as id) in a new row scratch array when the
   kernel's scratch has room for it. */
static bool scratch_store(lower *L, cand *c, const ir_type *t, int32_t id) {
  lp_func *lf = L->lf;
  int64_t len = row_len(t, &c->m), bytes = len * (int64_t)jit_dtype_size(t->dtype);
  if (lf->n_scratch == LP_MAX_SCRATCH || bytes > LP_SCRATCH_BYTES - L->scratch_bytes)
    return false;
  int32_t s = (int32_t)lf->n_scratch++;
  lf->scratch_len[s] = len;
  lf->scratch_dt[s] = t->dtype;
  L->scratch_bytes += bytes;
  lp_ins st = mk(LP_STORE, t->dtype, offset_in(L, c->v, &c->m, true), id, -1);
  st.buf = scratch_buf(s);
  emit_at(L, st, L->depth - 1);
  c->scratch = s;
  return true;
}

/* Inside a reduction loop: v (just computed as id) is a candidate; store it into a row scratch
   array, else into an output with its type and map, if one is free. */
static void cache_store(lower *L, ir_ref v, const fz_map *m, int32_t id) {
  cand *c = find_cand(L, v, m);
  if (!c || c->w >= 0 || c->scratch >= 0) return;
  const fz_kernel *k = L->k;
  const ir_type *t = ir_type_of(L->f, v);
  if (scratch_store(L, c, t, id)) return;
  uint32_t w = c->owner;
  ir_ref wr = k->writes[w];
  if (w >= 64 || wr == k->dot || L->cached[w] || !ir_type_equal(ir_type_of(L->f, wr), t) ||
      !fz_map_equal(&k->write_maps[w], m))
    return;
  lp_ins st = mk(LP_STORE, t->dtype, address(L, wr, m), id, -1);
  st.buf = (int32_t)wr;
  emit_at(L, st, L->depth - 1);
  L->cached[w] = true;
  c->w = (int32_t)w;
}

/* In the write loop: v at m loaded back from the output that cached it, or -1. */
static int32_t from_cache(lower *L, ir_ref v, const fz_map *m) {
  cand *c = find_cand(L, v, m);
  if (c && c->scratch >= 0) {
    lp_ins ld = mk(LP_LOAD, ir_type_of(L->f, v)->dtype, offset_in(L, v, m, true), -1, -1);
    ld.buf = scratch_buf(c->scratch);
    return emit(L, ld);
  }
  if (!c || c->w < 0) return -1;
  ir_ref wr = L->k->writes[c->w];
  lp_ins ld = mk(LP_LOAD, ir_type_of(L->f, v)->dtype, address(L, wr, m), -1, -1);
  ld.buf = (int32_t)wr;
  return emit(L, ld);
}

static jit_status gen_reduce(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  jit_dtype dt = ir_type_of(L->f, v)->dtype;
  if (!fz_map_row_level(m))
    return jit_error(JIT_EINTERNAL, "codegen: reduction %%%u read inside a loop", v);
  ir_op comb = ir_reduce_combiner(in->op);
  double init = reduce_init(comb, dt);
  fz_map om;
  if (!fz_map_operand(L->f, v, 0, m, &om))
    return jit_error(JIT_EINTERNAL, "codegen: no map for the operand of %%%u", v);
  lp_ins acc = mk(LP_ACC, dt, value_const(L, dt, init), -1, -1);
  acc.ew = (uint8_t)comb;
  int32_t aid = emit_at(L, acc, 1);
  int32_t trip[IR_MAX_RANK];
  for (int k = 0; k < om.n_inner; k++) trip[k] = iconst(L, om.inner_ext[k]);
  saved_nest sv;
  open_nest(L, om.n_inner, trip, &sv);
  int32_t x = -1;
  jit_status st = gen(L, in->args[0], &om, clamp, &x);
  if (st == JIT_OK) {
    lp_ins add = mk(LP_ACC_ADD, dt, aid, x, -1);
    add.ew = (uint8_t)comb;
    emit_at(L, add, L->depth - 1);
  }
  close_nest(L, &sv);
  if (st != JIT_OK) return st;
  *out = emit_at(L, mk(LP_ACC_GET, dt, aid, -1, -1), 1);
  return JIT_OK;
}

static jit_status gen_concat(lower *L, ir_ref v, const fz_map *m, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  jit_dtype dt = ir_type_of(L->f, v)->dtype;
  int axis = (int)in->attr.axis;
  int32_t ia = dim_index(L, m, axis), acc = -1;
  int64_t end = ir_type_of(L->f, v)->dims[axis];
  for (uint32_t s = in->n_args; s-- > 0;) {
    int64_t len = ir_type_of(L->f, in->args[s])->dims[axis];
    end -= len;
    if (len == 0) continue;
    fz_map om;
    int32_t x;
    if (!fz_map_operand(L->f, v, s, m, &om))
      return jit_error(JIT_EINTERNAL, "codegen: no map for operand %u of %%%u", s, v);
    jit_status st = gen(L, in->args[s], &om, true, &x);
    if (st != JIT_OK) return st;
    if (acc < 0) {
      acc = x;
    } else {
      int32_t pred = iop(L, LP_ILT, ia, iconst(L, end + len));
      lp_ins sel = mk(LP_EW, dt, pred, x, acc);
      sel.ew = IR_SELECT;
      sel.in_dt = (uint8_t)dt;
      acc = emit(L, sel);
    }
  }
  /* every operand empty: so is the result, and this code never runs */
  *out = acc >= 0 ? acc : value_const(L, dt, 0);
  return JIT_OK;
}

/* ---- gather, pad, scatter: loads at data-dependent indices -------------------------------------- */

static int32_t ew_op(lower *L, ir_op op, jit_dtype dt, jit_dtype in_dt, int32_t a, int32_t b,
                     int32_t c) {
  lp_ins e = mk(LP_EW, dt, a, b, c);
  e.ew = (uint8_t)op;
  e.in_dt = (uint8_t)in_dt;
  return emit(L, e);
}

static int32_t and_ok(lower *L, int32_t ok, int32_t b) {
  return ok < 0 ? b : ew_op(L, IR_AND, JIT_BOOL, JIT_BOOL, ok, b, -1);
}

/* x clamped into [0, hi]; *ok (-1: true) ANDed with x being there already. */
static int32_t clamp_index(lower *L, int32_t x, int64_t hi, int32_t *ok) {
  int32_t c = iop(L, LP_IMIN, iop(L, LP_IMAX, x, iconst(L, 0)), iconst(L, hi < 0 ? 0 : hi));
  if (ok && c != x) {
    lp_ins eq = mk(LP_EW, JIT_BOOL, c, x, -1);
    eq.ew = IR_CMP;
    eq.cmp = JIT_EQ;
    eq.in_dt = JIT_I64;
    *ok = and_ok(L, *ok, emit(L, eq));
  }
  return c;
}

/* The window starts (per operand dim, clamped into [0, dim - win]) of a gather or scatter whose
   indices are read at im (entry 0 of each index vector); *ok: every start was in range. */
static jit_status window_starts(lower *L, ir_ref indices, const ir_gather *g, const ir_type *ot,
                                const int64_t *win, fz_map im, bool clamp, int32_t *start,
                                int32_t *ok) {
  const ir_type *it = ir_type_of(L->f, indices);
  for (int d = 0; d < ot->rank; d++) start[d] = iconst(L, 0);
  *ok = -1;
  for (int k = 0; k < g->start_map.n; k++) {
    if (g->index_dim < it->rank) im.off[g->index_dim] = k;
    int32_t x;
    jit_status st = gen(L, indices, &im, clamp, &x);
    if (st != JIT_OK) return st;
    if (it->dtype != JIT_I64) x = ew_op(L, IR_CONVERT, JIT_I64, it->dtype, x, -1, -1);
    int d = g->start_map.d[k];
    start[d] = clamp_index(L, x, ot->dims[d] - win[d], g->mode == IR_INDEX_FILL ? ok : NULL);
  }
  return JIT_OK;
}

/* The element offset in operand (type ot) of start + offsets, where offsets are value dims
   (result or updates, read at map m) in the positions offset_dims, placed at the operand's
   dims not in collapsed. */
static int32_t window_address(lower *L, const ir_gather *g, const ir_type *ot, const int32_t *start,
                              const fz_map *m) {
  int32_t idx[IR_MAX_RANK];
  for (int d = 0, w = 0; d < ot->rank; d++) {
    bool collapsed = false;
    for (int k = 0; k < g->collapsed.n; k++) collapsed |= g->collapsed.d[k] == d;
    idx[d] = collapsed ? start[d] : iop(L, LP_IADD, start[d], dim_index(L, m, g->offset_dims.d[w++]));
  }
  int32_t a = iconst(L, 0);
  int64_t stride = 1;
  for (int d = ot->rank; d-- > 0;) {
    a = iop(L, LP_IADD, a, iop(L, LP_IMUL, idx[d], iconst(L, stride)));
    stride *= ot->dims[d];
  }
  return a;
}

/* An element of buffer value v (through its base) at element offset a. */
static int32_t load_at(lower *L, ir_ref v, int32_t a, bool clamp) {
  const ir_type *t = ir_type_of(L->f, v);
  if (clamp) { /* a concat evaluates every operand at every point */
    int64_t n = ir_type_numel(t);
    a = iop(L, LP_IMIN, iop(L, LP_IMAX, a, iconst(L, 0)), iconst(L, n > 0 ? n - 1 : 0));
  }
  ir_ref b = L->p->base[v];
  note_read(L, b);
  lp_ins ld = mk(LP_LOAD, t->dtype, a, -1, -1);
  ld.buf = (int32_t)b;
  return emit(L, ld);
}

static jit_status gen_gather(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  const ir_gather *g = &in->attr.gather;
  const ir_type *ot = ir_type_of(L->f, in->args[0]), *rt = ir_type_of(L->f, v);
  fz_map im;
  fz_map_indices(g, ir_type_of(L->f, in->args[1]), rt, m, &im);
  int32_t start[IR_MAX_RANK], ok;
  jit_status st = window_starts(L, in->args[1], g, ot, g->sizes, im, clamp, start, &ok);
  if (st != JIT_OK) return st;
  int32_t x = load_at(L, in->args[0], window_address(L, g, ot, start, m), clamp);
  *out = ok < 0 ? x : ew_op(L, IR_SELECT, rt->dtype, rt->dtype, ok, x, value_const(L, rt->dtype, 0));
  return JIT_OK;
}

/* lax.pad: per dim, the operand index (o - lo) / (interior + 1) when that divides and lies in
   the operand, else the pad value. */
static jit_status gen_pad(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  const ir_pad *p = &in->attr.pad;
  const ir_type *ot = ir_type_of(L->f, in->args[0]), *rt = ir_type_of(L->f, v);
  fz_map pm = *m;
  pm.rank = 0;
  int32_t pad;
  jit_status st = gen(L, in->args[1], &pm, clamp, &pad);
  if (st != JIT_OK) return st;
  if (ir_type_numel(ot) == 0) { /* nothing but padding */
    *out = pad;
    return JIT_OK;
  }
  int32_t ok = -1, a = iconst(L, 0);
  int64_t stride = 1;
  for (int d = ot->rank; d-- > 0;) {
    int64_t step = p->interior[d] + 1, n = ot->dims[d];
    int32_t i = iop(L, LP_ISUB, dim_index(L, m, d), iconst(L, p->lo[d]));
    int32_t at = i;
    if (step > 1) {
      int32_t ic = iop(L, LP_IMAX, i, iconst(L, 0));
      int32_t rem = iop(L, LP_IREM, ic, iconst(L, step));
      lp_ins eq = mk(LP_EW, JIT_BOOL, rem, iconst(L, 0), -1);
      eq.ew = IR_CMP;
      eq.cmp = JIT_EQ;
      eq.in_dt = JIT_I64;
      ok = and_ok(L, ok, emit(L, eq));
      at = iop(L, LP_IDIV, ic, iconst(L, step));
      /* i < 0 maps to 0 here: the check below sees i itself */
      at = iop(L, LP_IADD, at, iop(L, LP_ISUB, i, iop(L, LP_IMAX, i, iconst(L, 0))));
    }
    int32_t c = clamp_index(L, at, n - 1, (p->lo[d] > 0 || p->hi[d] > 0 || step > 1) ? &ok : NULL);
    a = iop(L, LP_IADD, a, iop(L, LP_IMUL, c, iconst(L, stride)));
    stride *= n;
  }
  int32_t x = load_at(L, in->args[0], a, false);
  *out = ok < 0 ? x : ew_op(L, IR_SELECT, rt->dtype, rt->dtype, ok, x, pad);
  return JIT_OK;
}

static int32_t ew2(lower *L, ir_op op, jit_dtype dt, jit_dtype in_dt, int32_t a, int32_t b) {
  lp_ins in = mk(LP_EW, dt, a, b, -1);
  in.ew = (uint8_t)op;
  in.in_dt = (uint8_t)in_dt;
  return emit(L, in);
}

static int32_t bits_const(lower *L, jit_dtype ut, uint64_t v) {
  lp_ins in = mk(LP_CONST, ut, -1, -1, -1);
  in.imm.i = (int64_t)v;
  return emit(L, in);
}

static int32_t cmp_u(lower *L, jit_cmp_op c, jit_dtype ut, int32_t a, int32_t b) {
  lp_ins in = mk(LP_EW, JIT_BOOL, a, b, -1);
  in.ew = IR_CMP;
  in.in_dt = (uint8_t)ut;
  in.cmp = (uint8_t)c;
  return emit(L, in);
}

/* The bits of 2^e for a float of the width of unsigned dtype ut. */
static uint64_t pow2_bits(jit_dtype ut, int e) {
  return ut == JIT_U64 ? (uint64_t)(1023 + e) << 52 : (uint64_t)(127 + e) << 23;
}

/* a / b in the first write loop, for a divisor b of the row: a times 1 / b refined by one FMA
   step (3 FMAs where a vector division takes ~8 cycles of one divider; softmax's write loop was
   bound by it). The loop also gathers the largest and the smallest nonzero |a| so that
   write_values can redo, dividing, the rows where a or b is outside LP_QUOT's ranges. */
static int32_t gen_quot(lower *L, jit_dtype dt, int32_t a, int32_t b) {
  bool wide = dt == JIT_F64;
  jit_dtype ut = wide ? JIT_U64 : JIT_U32, ft = wide ? JIT_F64 : JIT_F32; /* f16/bf16: in f32 */
  int qb = wide ? LP_QUOT_QB64 : LP_QUOT_QB32;
  int32_t c = ew2(L, IR_DIV, ft, ft, value_const(L, ft, 1.0), b);
  int32_t q = emit(L, mk(LP_QUOT, dt, a, b, c));
  lp_ins mag = mk(LP_MAG_BITS, ut, a, -1, -1);
  mag.in_dt = (uint8_t)ft;
  int32_t ma = emit(L, mag);
  lp_ins mb_in = mag;
  mb_in.a = b;
  int32_t mb = emit(L, mb_in); /* b's check is the row's: it lands before the loop */
  int32_t off = ew2(L, IR_SUB, ut, ut, mb, bits_const(L, ut, pow2_bits(ut, -qb)));
  int32_t width = bits_const(L, ut, pow2_bits(ut, qb) - pow2_bits(ut, -qb));
  int32_t b_ok = cmp_u(L, JIT_LT, ut, off, width);
  L->quot_b_ok = L->quot_b_ok < 0 ? b_ok : ew2(L, IR_AND, JIT_BOOL, JIT_BOOL, L->quot_b_ok, b_ok);
  if (L->quot_max[wide] < 0) { /* in the row block, before the loop (placed when it closes) */
    lp_ins hi = mk(LP_ACC, ut, bits_const(L, ut, 0), -1, -1), lo = hi;
    hi.ew = IR_MAX;
    lo.a = bits_const(L, ut, wide ? UINT64_MAX : UINT32_MAX);
    lo.ew = IR_MIN;
    L->quot_max[wide] = emit_at(L, hi, 1);
    L->quot_min[wide] = emit_at(L, lo, 1);
  }
  /* a = 0 passes: its m - 1 wraps to the largest value */
  int32_t m1 = ew2(L, IR_SUB, ut, ut, ma, bits_const(L, ut, 1));
  lp_ins add = mk(LP_ACC_ADD, ut, L->quot_max[wide], ma, -1);
  add.ew = IR_MAX;
  emit_at(L, add, L->depth - 1);
  add.a = L->quot_min[wide];
  add.b = m1;
  add.ew = IR_MIN;
  emit_at(L, add, L->depth - 1);
  return q;
}

/* After the first write loop: whether the row must be written again, dividing. */
static int32_t quot_redo(lower *L) {
  int32_t bad = ew2(L, IR_NOT, JIT_BOOL, JIT_BOOL, L->quot_b_ok, -1);
  for (int wide = 0; wide < 2; wide++) {
    if (L->quot_max[wide] < 0) continue;
    jit_dtype ut = wide ? JIT_U64 : JIT_U32;
    int qa = wide ? LP_QUOT_QA64 : LP_QUOT_QA32;
    int32_t hi = emit_at(L, mk(LP_ACC_GET, ut, L->quot_max[wide], -1, -1), 1);
    int32_t lo = emit_at(L, mk(LP_ACC_GET, ut, L->quot_min[wide], -1, -1), 1);
    int32_t big = cmp_u(L, JIT_GE, ut, hi, bits_const(L, ut, pow2_bits(ut, qa)));
    int32_t small = cmp_u(L, JIT_LT, ut, lo, bits_const(L, ut, pow2_bits(ut, -qa) - 1));
    bad = ew2(L, IR_OR, JIT_BOOL, JIT_BOOL, bad, ew2(L, IR_OR, JIT_BOOL, JIT_BOOL, big, small));
  }
  return bad;
}

static jit_status gen(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  jit_status st = JIT_OK;
  /* row-level values are shared by a row's loops, except in column mode where a row dim
     follows the innermost loop */
  uint32_t phase = fz_map_row_level(m) && !L->column ? 0 : L->phase;
  memo_ent *e = memo_slot(L, v, phase, clamp, m);
  if (!e) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  if (e->id >= 0) {
    *out = e->id;
    return JIT_OK;
  }
  const ir_func *f = L->f;
  const ir_ins *in = &f->ins[v];
  const ir_type *t = ir_type_of(f, v);
  int32_t id = -1;
  if (phase && phase == L->write_phase && !clamp && computed(L, v) && expensive(in->op) &&
      (id = from_cache(L, v, m)) >= 0)
    goto done;
  if (!computed(L, v)) {
    ir_ref b = L->p->base[v];
    note_read(L, b);
    int32_t a = address(L, v, m);
    if (clamp) {
      int64_t n = ir_type_numel(t);
      a = iop(L, LP_IMIN, iop(L, LP_IMAX, a, iconst(L, 0)), iconst(L, n > 0 ? n - 1 : 0));
    }
    lp_ins ld = mk(LP_LOAD, t->dtype, a, -1, -1);
    ld.buf = (int32_t)b;
    id = emit(L, ld);
  } else if (ir_op_flags[in->op] & IR_EW) {
    int32_t x[3] = {-1, -1, -1};
    for (uint32_t k = 0; k < in->n_args && k < 3; k++) TRY(gen(L, in->args[k], m, clamp, &x[k]));
    jit_dtype in_dt = ir_type_of(f, in->args[in->op == IR_SELECT ? 1 : 0])->dtype;
    if ((ir_op_flags[in->op] & IR_UNARY_F) && in->op != IR_FLOOR && !ir_dtype_is_float(in_dt))
      return unsupported(L, v);
    /* folds on identical operands (that cc -Wall would otherwise point out in the C dump) */
    bool same = in->n_args >= 2 && x[in->n_args - 2] == x[in->n_args - 1];
    if (same && (in->op == IR_MAX || in->op == IR_MIN || in->op == IR_SELECT)) {
      id = x[in->n_args - 1];
      goto done;
    }
    if (same && in->op == IR_CMP && !ir_dtype_is_float(in_dt)) {
      jit_cmp_op c = in->attr.cmp;
      id = value_const(L, JIT_BOOL, c == JIT_EQ || c == JIT_LE || c == JIT_GE);
      goto done;
    }
    if (in->op == IR_DIV && L->quot_on && phase == L->write_phase && in_dt == t->dtype &&
        ir_dtype_is_float(t->dtype) && level_of(L, x[1]) <= 1 &&
        level_of(L, x[0]) > 1) {
      id = gen_quot(L, t->dtype, x[0], x[1]);
      goto done;
    }
    lp_ins ew = mk(LP_EW, t->dtype, x[0], x[1], x[2]);
    ew.ew = (uint8_t)in->op;
    ew.in_dt = (uint8_t)in_dt;
    ew.cmp = (uint8_t)in->attr.cmp;
    id = emit(L, ew);
  } else {
    switch (in->op) {
    case IR_CONST: id = value_const(L, t->dtype, in->attr.value); break;
    case IR_IOTA: {
      int32_t i = t->rank ? dim_index(L, m, (int)in->attr.axis) : iconst(L, 0);
      lp_ins cv = mk(LP_EW, t->dtype, i, -1, -1);
      cv.ew = IR_CONVERT;
      cv.in_dt = JIT_I64;
      id = emit(L, cv);
      break;
    }
    case IR_BROADCAST:
    case IR_TRANSPOSE:
    case IR_SLICE:
    case IR_REV:
    case IR_RESHAPE: {
      fz_map om;
      if (!fz_map_operand(f, v, 0, m, &om))
        return jit_error(JIT_EINTERNAL, "codegen: no map for the operand of %%%u", v);
      TRY(gen(L, in->args[0], &om, clamp, &id));
      break;
    }
    case IR_CONCAT: TRY(gen_concat(L, v, m, &id)); break;
    case IR_GATHER: TRY(gen_gather(L, v, m, clamp, &id)); break;
    case IR_PAD: TRY(gen_pad(L, v, m, clamp, &id)); break;
    case IR_REDUCE_SUM:
    case IR_REDUCE_MAX:
    case IR_REDUCE_MIN:
    case IR_REDUCE_PROD: TRY(gen_reduce(L, v, m, clamp, &id)); break;
    default: return unsupported(L, v);
    }
  }
  if (phase && phase != L->write_phase && !clamp && expensive(in->op) && id >= 0)
    cache_store(L, v, m, id);
done:
  if (L->oom || id < 0) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  /* the table may have grown while generating operands */
  e = memo_slot(L, v, phase, clamp, m);
  if (!e) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  e->v = v;
  e->phase = phase;
  e->clamp = clamp;
  e->m = *m;
  e->id = id;
  L->memo_n++;
  *out = id;
  return JIT_OK;
fail:
  return st;
}

/* Generates every reduction that the value v read at m needs, before the write loop opens: then
   the write loop finds their loops already there and can take values cached by them. */
static jit_status prewalk(lower *L, ir_ref v, const fz_map *m) {
  if (!computed(L, v)) return JIT_OK;
  uint32_t mark = L->collecting ? UINT32_MAX - 1 : UINT32_MAX; /* "walked" marks in the memo */
  memo_ent *e = memo_slot(L, v, mark, false, m);
  if (!e) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  if (e->id >= 0) return JIT_OK;
  e->v = v;
  e->phase = mark;
  e->clamp = false;
  e->m = *m;
  e->id = 0;
  L->memo_n++;
  const ir_ins *in = &L->f->ins[v];
  if (ir_op_flags[in->op] & IR_REDUCE) {
    if (L->collecting || !fz_map_row_level(m)) return JIT_OK; /* gen reports the latter */
    int32_t id;
    return gen(L, v, m, false, &id);
  }
  if (L->collecting && expensive(in->op) && !fz_map_row_level(m)) add_cand(L, v, m, L->walking);
  if (in->op == IR_CONCAT) return JIT_OK; /* reads only buffers and cheap values */
  for (uint32_t k = 0; k < in->n_args; k++) {
    fz_map om;
    if (!fz_map_operand(L->f, v, k, m, &om)) continue;
    jit_status st = prewalk(L, in->args[k], &om);
    if (st != JIT_OK) return st;
  }
  return JIT_OK;
}

/* ---- the kernel ------------------------------------------------------------------------------------ */

/* Elements a block touches per run: loops count their trip count (LP_BLOCK when not constant)
   times their body; what rows are split over threads by. */
static int64_t block_work(const lp_func *lf, int32_t block) {
  const lp_block *b = &lf->blocks[block];
  int64_t w = 1;
  for (uint32_t i = 0; i < b->n; i++) {
    const lp_ins *in = &lf->ins[b->ins[i]];
    if (in->op != LP_FOR) continue;
    const lp_ins *t = &lf->ins[in->a];
    int64_t trip = t->op == LP_CONST ? t->imm.i : LP_BLOCK;
    w += trip * block_work(lf, in->body);
  }
  return w;
}

void lp_free(lp_func *lf) {
  if (!lf) return;
  for (uint32_t i = 0; i < lf->n_blocks; i++) free(lf->blocks[i].ins);
  free(lf->blocks);
  free(lf->ins);
  free(lf->buf_refs);
  free(lf->buf_dt);
  free(lf);
}

static bool same_ins(const lp_ins *a, const lp_ins *b) {
  return a->op == b->op && a->dt == b->dt && a->in_dt == b->in_dt && a->ew == b->ew &&
         a->cmp == b->cmp && a->a == b->a && a->b == b->b && a->c == b->c && a->buf == b->buf &&
         a->body == b->body && a->imm.i == b->imm.i; /* a float's bits: -0 is not 0 */
}

bool lp_same_code(const lp_func *a, const lp_func *b) {
  if (a->n_bufs != b->n_bufs || a->n_reads != b->n_reads || a->n_ins != b->n_ins ||
      a->n_blocks != b->n_blocks || a->entry != b->entry || a->row != b->row ||
      a->n_rows != b->n_rows || a->row_work != b->row_work || a->stream_mask != b->stream_mask ||
      a->n_scratch != b->n_scratch ||
      memcmp(a->buf_dt, b->buf_dt, a->n_bufs * sizeof *a->buf_dt) != 0)
    return false;
  for (uint32_t s = 0; s < a->n_scratch; s++)
    if (a->scratch_len[s] != b->scratch_len[s] || a->scratch_dt[s] != b->scratch_dt[s])
      return false;
  for (uint32_t i = 0; i < a->n_ins; i++)
    if (!same_ins(&a->ins[i], &b->ins[i])) return false;
  for (uint32_t i = 0; i < a->n_blocks; i++)
    if (a->blocks[i].n != b->blocks[i].n ||
        memcmp(a->blocks[i].ins, b->blocks[i].ins, a->blocks[i].n * sizeof(int32_t)) != 0)
      return false;
  return true;
}

static bool has_reduce(const fz_kernel *k, const ir_func *f) {
  for (uint32_t i = 0; i < k->n_ops; i++)
    if (ir_op_flags[f->ins[k->ops[i]].op] & IR_REDUCE) return true;
  return false;
}

static int cmp_ref(const void *a, const void *b) {
  ir_ref x = *(const ir_ref *)a, y = *(const ir_ref *)b;
  return x < y ? -1 : x > y;
}

/* Opens the write loop (trip iterations; blk: the split's block, or -1; seldom: it seldom runs)
   and stores every element-level write in it. */
static jit_status write_loop(lower *L, int32_t trip, int32_t blk, bool seldom) {
  jit_status st = JIT_OK;
  const fz_kernel *k = L->k;
  saved_nest sv;
  open_nest(L, 1, &trip, &sv);
  if (seldom && !L->oom) L->lf->ins[L->fors[2]].imm.i = 1;
  L->write_phase = L->phase;
  if (blk >= 0) /* the split's block: element blk * LP_BLOCK + i */
    L->inner_idx[0] = iop(L, LP_IADD, iop(L, LP_IMUL, blk, iconst(L, LP_BLOCK)), L->inner_idx[0]);
  for (uint32_t w = 0; w < k->n_writes; w++) {
    ir_ref v = k->writes[w];
    const fz_map *m = &k->write_maps[w];
    if (v == k->dot || fz_map_row_level(m)) continue;
    int32_t x;
    TRY(gen(L, v, m, false, &x));
    lp_ins stv = mk(LP_STORE, ir_type_of(L->f, v)->dtype, address(L, v, m), x, -1);
    stv.buf = (int32_t)v;
    emit_at(L, stv, L->depth - 1);
  }
fail:
  close_nest(L, &sv);
  return st;
}

/* Whether the write loop may divide by LP_QUOT: it then runs a second time, with divisions, on
   the rows it flags, so it must not read what it writes (a value cached in the output row).
   Without FMA instructions llvm.fma is emulated to within an ulp (fma_expand.c): no LP_QUOT. */
static bool quot_allowed(const lower *L) {
  if (!L->fma) return false;
  for (uint32_t i = 0; i < L->n_cand; i++)
    if (L->cand[i].w >= 0) return false;
  return true;
}

/* Stores the row-level writes (in the row block, after the write loop if any). */
static jit_status write_row_values(lower *L) {
  const fz_kernel *k = L->k;
  for (uint32_t w = 0; w < k->n_writes; w++) {
    ir_ref v = k->writes[w];
    const fz_map *m = &k->write_maps[w];
    if (v == k->dot || !fz_map_row_level(m)) continue;
    int32_t x;
    jit_status st = gen(L, v, m, false, &x);
    if (st != JIT_OK) return st;
    lp_ins stv = mk(LP_STORE, ir_type_of(L->f, v)->dtype, address(L, v, m), x, -1);
    stv.buf = (int32_t)v;
    emit_at(L, stv, 1);
  }
  return JIT_OK;
}

static jit_status write_values(lower *L) {
  const fz_kernel *k = L->k;
  const fz_map rm = k->write_maps[k->n_writes - 1]; /* the root's: the kernel's loop space */
  bool split = false;
  int64_t n_inner = rm.n_inner ? rm.inner_ext[0] : 1;
  if (rm.n_inner == 1 && !has_reduce(k, L->f)) {
    int64_t rows = 1;
    for (int d = 0; d < L->n_row; d++) rows *= L->row_ext[d];
    split = rows < LP_SPLIT_ROWS && n_inner >= 2 * LP_BLOCK;
  }
  if (split) L->row_ext[L->n_row++] = (n_inner + LP_BLOCK - 1) / LP_BLOCK;
  L->lf->n_rows = 1;
  for (int d = 0; d < L->n_row; d++) L->lf->n_rows *= L->row_ext[d];

  for (int pass = 0; pass < 2; pass++) {
    L->collecting = pass == 0;
    for (uint32_t w = 0; w < k->n_writes; w++) {
      L->walking = w;
      if (k->writes[w] != k->dot) {
        jit_status st = prewalk(L, k->writes[w], &k->write_maps[w]);
        if (st != JIT_OK) return st;
      }
    }
  }
  L->collecting = false;

  /* element-level writes share one loop (none for a 0-d or reduction root) */
  bool any_elem = false;
  for (uint32_t w = 0; w < k->n_writes; w++)
    if (k->writes[w] != k->dot && !fz_map_row_level(&k->write_maps[w])) any_elem = true;
  if (any_elem) {
    int32_t trip, blk = -1;
    if (split) {
      blk = row_val(L, L->n_row - 1);
      int32_t start = iop(L, LP_IMUL, blk, iconst(L, LP_BLOCK));
      trip = iop(L, LP_IMIN, iop(L, LP_ISUB, iconst(L, n_inner), start), iconst(L, LP_BLOCK));
    } else {
      trip = iconst(L, n_inner);
    }
    L->quot_on = quot_allowed(L);
    L->quot_max[0] = L->quot_max[1] = L->quot_b_ok = -1;
    jit_status st = write_loop(L, trip, blk, false);
    L->quot_on = false;
    if (st == JIT_OK && (L->quot_max[0] >= 0 || L->quot_max[1] >= 0)) {
      /* the rows where a quotient may be off are written again, dividing: trip * redo */
      lp_ins cv = mk(LP_EW, JIT_I64, quot_redo(L), -1, -1);
      cv.ew = IR_CONVERT;
      cv.in_dt = JIT_BOOL;
      st = write_loop(L, iop(L, LP_IMUL, emit(L, cv), trip), blk, true);
    }
    if (st != JIT_OK) return st;
  }
  jit_status st = write_row_values(L);
  if (st != JIT_OK) return st;
  return L->oom ? jit_error(JIT_ENOMEM, "codegen: out of memory") : JIT_OK;
}

/* ---- column reductions ------------------------------------------------------------------------
   A reduction over leading axes (sum over the rows of x[N, M]) read as a row kernel would run
   one strided loop per output element. Instead each row of the kernel owns LP_COLUMNS outputs
   of the last kept dim: it sets them to the identity, then for every reduced index adds a
   contiguous strip of the operand into them (the output row stays in L1; the operand is read
   once, in order, vectorized along the kept dim). Sums of f16/bf16 would round at every step
   in the output, so they stay row reductions (accumulating in f32). */
static bool column_mode(const lower *L) {
  const fz_kernel *k = L->k;
  const ir_func *f = L->f;
  ir_ref r = k->root;
  const ir_ins *in = &f->ins[r];
  if (k->kind != FZ_ROW || k->n_writes != 1 || !(ir_op_flags[in->op] & IR_REDUCE) || k->n_row < 1)
    return false;
  for (uint32_t i = 0; i < k->n_ops; i++)
    if (k->ops[i] != r && (ir_op_flags[f->ins[k->ops[i]].op] & IR_REDUCE)) return false;
  jit_dtype dt = ir_type_of(f, r)->dtype;
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

static jit_status write_columns(lower *L) {
  jit_status st = JIT_OK;
  const fz_kernel *k = L->k;
  ir_ref r = k->root;
  const ir_ins *in = &L->f->ins[r];
  const fz_map *rm = &k->write_maps[0];
  jit_dtype dt = ir_type_of(L->f, r)->dtype;
  int c = L->n_row - 1;
  int64_t n = L->row_ext[c], b = n < LP_COLUMNS ? n : LP_COLUMNS;
  L->row_ext[c] = b ? (n + b - 1) / b : 0;
  L->lf->n_rows = 1;
  for (int d = 0; d < L->n_row; d++) L->lf->n_rows *= L->row_ext[d];
  fz_map om;
  if (!fz_map_operand(L->f, r, 0, rm, &om))
    return jit_error(JIT_EINTERNAL, "codegen: no map for the operand of %%%u", r);
  L->column = true;
  ir_op comb = ir_reduce_combiner(in->op);
  double init = reduce_init(comb, dt);
  int32_t start = iop(L, LP_IMUL, row_val(L, c), iconst(L, b));
  int32_t trip = iop(L, LP_IMIN, iop(L, LP_ISUB, iconst(L, n), start), iconst(L, b));
  saved_nest sv;
  /* the outputs of this row start at the identity */
  open_nest(L, 1, &trip, &sv);
  L->row_idx[c] = iop(L, LP_IADD, start, L->inner_idx[0]);
  lp_ins st0 = mk(LP_STORE, dt, address(L, r, rm), value_const(L, dt, init), -1);
  st0.buf = (int32_t)r;
  emit_at(L, st0, L->depth - 1);
  close_nest(L, &sv);
  /* then every reduced index adds its strip */
  int32_t trips[IR_MAX_RANK + 1];
  for (int i = 0; i < om.n_inner; i++) trips[i] = iconst(L, om.inner_ext[i]);
  trips[om.n_inner] = trip;
  open_nest(L, om.n_inner + 1, trips, &sv);
  L->row_idx[c] = iop(L, LP_IADD, start, L->inner_idx[om.n_inner]);
  int32_t x = -1;
  st = gen(L, in->args[0], &om, false, &x);
  if (st == JIT_OK) {
    int32_t a = address(L, r, rm);
    lp_ins ld = mk(LP_LOAD, dt, a, -1, -1); /* not CSE'd: the loop stores to it */
    ld.buf = (int32_t)r;
    int32_t acc = emit_at(L, ld, L->depth - 1);
    lp_ins ew = mk(LP_EW, dt, acc, x, -1);
    ew.ew = (uint8_t)comb;
    ew.in_dt = (uint8_t)dt;
    lp_ins stv = mk(LP_STORE, dt, a, emit(L, ew), -1);
    stv.buf = (int32_t)r;
    emit_at(L, stv, L->depth - 1);
  }
  close_nest(L, &sv);
  if (st == JIT_OK && L->oom) st = jit_error(JIT_ENOMEM, "codegen: out of memory");
  return st;
}

/* ---- scatter ------------------------------------------------------------------------------------
   A kernel of its own over buffers. Its rows are chunks of the operand's leading dim: row r
   copies its chunk of the operand into the result, then walks every update in order and
   combines those that land in its chunk. Each element is written by one row only, so rows may
   run on any threads, and duplicates combine in update order as in the interpreter. An update
   outside the chunk (or dropped) rewrites an element of the chunk with its own value. */
#define LP_SCATTER_CHUNKS 4

static jit_status write_scatter(lower *L) {
  const ir_ins *in = &L->f->ins[L->k->root];
  const ir_gather *g = &in->attr.gather;
  ir_ref r = L->k->root;
  const ir_type *ot = ir_type_of(L->f, r), *it = ir_type_of(L->f, in->args[1]),
                *ut = ir_type_of(L->f, in->args[2]);
  jit_dtype dt = ot->dtype;
  int64_t n0 = ot->rank ? ot->dims[0] : 1, inner = n0 ? ir_type_numel(ot) / n0 : 0;
  /* several chunks only when the copy outweighs the walks over the updates they repeat */
  int64_t chunks = ir_type_numel(ut) * LP_SCATTER_CHUNKS <= ir_type_numel(ot) ? LP_SCATTER_CHUNKS : 1;
  if (chunks > n0) chunks = n0;
  int64_t per = chunks ? (n0 + chunks - 1) / chunks : 0;
  L->n_row = 1;
  L->row_ext[0] = chunks;
  L->lf->n_rows = chunks;
  int32_t lo = iop(L, LP_IMUL, row_val(L, 0), iconst(L, per));
  int32_t hi = iop(L, LP_IMIN, iop(L, LP_IADD, lo, iconst(L, per)), iconst(L, n0));
  /* the chunk's copy */
  saved_nest sv;
  int32_t trip = iop(L, LP_IMUL, iop(L, LP_ISUB, hi, lo), iconst(L, inner));
  open_nest(L, 1, &trip, &sv);
  int32_t a = iop(L, LP_IADD, iop(L, LP_IMUL, lo, iconst(L, inner)), L->inner_idx[0]);
  lp_ins cp = mk(LP_STORE, dt, a, load_at(L, in->args[0], a, false), -1);
  cp.buf = (int32_t)r;
  emit_at(L, cp, L->depth - 1);
  close_nest(L, &sv);
  /* the updates, in order */
  /* types have at most IR_MAX_RANK dims; saying so lets GCC's -O3 see the arrays suffice */
  int ur = ut->rank < IR_MAX_RANK ? ut->rank : IR_MAX_RANK;
  int32_t trips[IR_MAX_RANK] = {0};
  for (int d = 0; d < ur; d++) trips[d] = iconst(L, ut->dims[d]);
  open_nest(L, ur, trips, &sv);
  fz_map um;
  memset(&um, 0, sizeof um);
  um.rank = ur;
  um.n_inner = ur;
  for (int d = 0; d < ur; d++) {
    um.src[d] = (int8_t)FZ_INNER(d);
    um.scale[d] = 1;
    um.inner_ext[d] = ut->dims[d];
  }
  int64_t win[IR_MAX_RANK];
  for (int d = 0, w = 0; d < ot->rank; d++) {
    bool inserted = false;
    for (int k = 0; k < g->collapsed.n; k++) inserted |= g->collapsed.d[k] == d;
    win[d] = inserted ? 1 : ut->dims[g->offset_dims.d[w++]];
  }
  fz_map im;
  fz_map_indices(g, it, ut, &um, &im);
  int32_t start[IR_MAX_RANK], ok;
  jit_status st = window_starts(L, in->args[1], g, ot, win, im, false, start, &ok);
  if (st != JIT_OK) {
    close_nest(L, &sv);
    return st;
  }
  int32_t target = window_address(L, g, ot, start, &um);
  /* in this row's chunk: lo * inner <= target < hi * inner */
  int32_t t0 = iop(L, LP_IMUL, lo, iconst(L, inner));
  int32_t rel = iop(L, LP_ISUB, target, t0);
  int32_t span = iop(L, LP_IMUL, iop(L, LP_ISUB, hi, lo), iconst(L, inner));
  lp_ins lt0 = mk(LP_ILT, JIT_BOOL, rel, iconst(L, 0), -1), ltn = mk(LP_ILT, JIT_BOOL, rel, span, -1);
  int32_t below = emit(L, lt0), inside = emit(L, ltn);
  int32_t in_chunk = ew_op(L, IR_AND, JIT_BOOL, JIT_BOOL, inside,
                           ew_op(L, IR_NOT, JIT_BOOL, JIT_BOOL, below, -1, -1), -1);
  ok = and_ok(L, ok, in_chunk);
  int32_t dst = ew_op(L, IR_SELECT, JIT_I64, JIT_I64, ok, target, t0);
  lp_ins ld = mk(LP_LOAD, dt, dst, -1, -1); /* not CSE'd: the loop stores to it */
  ld.buf = (int32_t)r;
  int32_t old = emit_at(L, ld, L->depth - 1);
  int32_t u = load_at(L, in->args[2], address(L, in->args[2], &um), false);
  int32_t val = g->combine == IR_COMBINE_ADD ? ew_op(L, IR_ADD, dt, dt, old, u, -1) : u;
  lp_ins stv = mk(LP_STORE, dt, dst, ew_op(L, IR_SELECT, dt, dt, ok, val, old), -1);
  stv.buf = (int32_t)r;
  emit_at(L, stv, L->depth - 1);
  close_nest(L, &sv);
  return L->oom ? jit_error(JIT_ENOMEM, "codegen: out of memory") : JIT_OK;
}

/* ---- prefetching the next row ------------------------------------------------------------------
   A row kernel of several phases (softmax: max, sum, write) reads its row from DRAM in the first
   and computes on the cached row in the others, with no DRAM traffic in flight meanwhile: the
   hardware prefetchers stop at the row's page and start again only on the next row's misses. So
   after the first phase the row block prefetches the next row of every input that phase reads
   whole (element row * C + j, j < C, of an input of at least LP_PREFETCH_TOTAL bytes), and
   memory overlaps the compute of the later phases. */
#define LP_PREFETCH_MIN 512          /* bytes of a row: below, the prefetchers keep up */
#define LP_PREFETCH_MAX (16 << 10)   /* above, the row would not stay in L1 */
#define LP_PREFETCH_TOTAL (4 << 20)  /* an input that small stays in the caches anyway */

/* Whether index x is row * c + var for the row index, the loop variable var and c. */
static bool row_major_index(const lp_func *lf, int32_t x, int32_t var, int64_t c, int32_t *row) {
  const lp_ins *in = &lf->ins[x];
  if (in->op != LP_IADD) return false;
  for (int side = 0; side < 2; side++) {
    int32_t v = side ? in->b : in->a, m = side ? in->a : in->b;
    const lp_ins *mul = &lf->ins[m];
    if (v != var || mul->op != LP_IMUL || lf->ins[mul->a].op != LP_ROW ||
        lf->ins[mul->b].op != LP_CONST || lf->ins[mul->b].imm.i != c)
      continue;
    *row = mul->a;
    return true;
  }
  return false;
}

/* Inserts instruction in (of the row block) at position *at of the row block. */
static int32_t insert_row(lower *L, lp_ins in, uint32_t *at) {
  int32_t id = new_ins(L, &in, 1);
  lp_block *b = &L->lf->blocks[L->lf->row];
  if (id < 0 || !ir_grow((void **)&b->ins, &b->cap, b->n + 1, sizeof *b->ins)) {
    L->oom = true;
    return -1;
  }
  memmove(b->ins + *at + 1, b->ins + *at, (b->n - *at) * sizeof *b->ins);
  b->ins[(*at)++] = id;
  b->n++;
  return id;
}

static void add_row_prefetch(lower *L) {
  lp_func *lf = L->lf;
  if (L->k->kind != FZ_ROW || L->oom) return;
  const lp_block *row = &lf->blocks[lf->row];
  int32_t first = -1;
  uint32_t at = 0, phases = 0;
  for (uint32_t i = 0; i < row->n; i++)
    if (lf->ins[row->ins[i]].op == LP_FOR && phases++ == 0) first = row->ins[i], at = i + 1;
  if (phases < 2) return;
  const lp_ins loop = lf->ins[first];
  int64_t c;
  if (!is_iconst(L, loop.a, &c)) return;
  int32_t done[8];
  int n_done = 0;
  const lp_block *body = &lf->blocks[loop.body];
  for (uint32_t i = 0; i < body->n && n_done < 8 && !L->oom; i++) {
    const lp_ins ld = lf->ins[body->ins[i]];
    int64_t bytes = c * (int64_t)jit_dtype_size(ld.dt);
    int32_t r;
    bool seen = false;
    for (int j = 0; j < n_done; j++) seen |= done[j] == ld.buf;
    if (ld.op != LP_LOAD || ld.buf < 0 || seen || bytes < LP_PREFETCH_MIN ||
        bytes > LP_PREFETCH_MAX ||
        (double)bytes * (double)lf->n_rows < LP_PREFETCH_TOTAL ||
        !row_major_index(lf, ld.a, loop.b, c, &r))
      continue;
    /* (row + 1) * c, then the prefetch, right after the first phase */
    lp_ins one = mk(LP_CONST, JIT_I64, -1, -1, -1), cc = one;
    one.imm.i = 1;
    cc.imm.i = c;
    int32_t k1 = insert_row(L, one, &at);
    int32_t next = insert_row(L, mk(LP_IADD, JIT_I64, r, k1, -1), &at);
    int32_t kc = insert_row(L, cc, &at);
    int32_t start = insert_row(L, mk(LP_IMUL, JIT_I64, next, kc, -1), &at);
    lp_ins pf = mk(LP_PREFETCH, ld.dt, start, -1, -1);
    pf.buf = ld.buf;
    pf.imm.i = c;
    insert_row(L, pf, &at);
    done[n_done++] = ld.buf;
  }
}

/* A value cached in a row scratch array that the write loop never loaded back (it loaded a
   value computed from it, cached too) loses its stores and its array. */
static void drop_unread_scratch(lower *L) {
  lp_func *lf = L->lf;
  bool read[LP_MAX_SCRATCH] = {false};
  for (uint32_t i = 0; i < lf->n_ins; i++)
    if (lf->ins[i].op == LP_LOAD && lf->ins[i].buf <= -2) read[-2 - lf->ins[i].buf] = true;
  int32_t to[LP_MAX_SCRATCH];
  uint32_t n = 0;
  for (uint32_t s = 0; s < lf->n_scratch; s++) {
    to[s] = read[s] ? (int32_t)n : -1;
    if (read[s]) {
      lf->scratch_len[n] = lf->scratch_len[s];
      lf->scratch_dt[n++] = lf->scratch_dt[s];
    }
  }
  lf->n_scratch = n;
  for (uint32_t bi = 0; bi < lf->n_blocks; bi++) {
    lp_block *b = &lf->blocks[bi];
    uint32_t k = 0;
    for (uint32_t j = 0; j < b->n; j++) {
      lp_ins *in = &lf->ins[b->ins[j]];
      if ((in->op == LP_LOAD || in->op == LP_STORE) && in->buf <= -2) {
        int32_t s = to[-2 - in->buf];
        if (s < 0) continue; /* a store nothing reads */
        in->buf = scratch_buf(s);
      }
      b->ins[k++] = b->ins[j];
    }
    b->n = k;
  }
}

jit_status lp_lower(const fz_prog *p, uint32_t ki, bool fma, lp_func **out) {
  jit_status st = JIT_OK;
  *out = NULL;
  const fz_kernel *k = &p->kernels[ki];
  for (uint32_t i = 0; i < k->n_ops; i++) {
    ir_op op = p->f->ins[k->ops[i]].op;
    /* a collective talks to the other devices through the runtime: the interpreter's hook */
    if (ir_op_is_collective(op) || op == IR_SHARDING)
      return jit_error(JIT_EUNSUPPORTED, "codegen: %%%u = %s runs in the runtime", k->ops[i],
                       ir_op_name[op]);
  }
  uint32_t n_writes = 0;
  for (uint32_t w = 0; w < k->n_writes; w++) n_writes += k->writes[w] != k->dot;
  if (n_writes == 0) return JIT_OK;
  lower L;
  memset(&L, 0, sizeof L);
  L.p = p;
  L.f = p->f;
  L.k = k;
  L.lf = calloc(1, sizeof *L.lf);
  if (!L.lf) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  snprintf(L.lf->name, sizeof L.lf->name, "tjit_k%u", ki);
  L.n_row = k->n_row;
  memcpy(L.row_ext, k->row_ext, sizeof k->row_ext);
  for (int d = 0; d < IR_MAX_RANK + 1; d++) L.row_idx[d] = -1;
  L.lf->entry = new_block(&L);
  L.lf->row = new_block(&L);
  L.stack[0] = L.lf->entry;
  L.stack[1] = L.lf->row;
  L.depth = 2;
  L.fma = fma;
  if (L.oom) TRY(jit_error(JIT_ENOMEM, "codegen: out of memory"));
  if (p->f->ins[k->root].op == IR_SCATTER) TRY(write_scatter(&L));
  else if (column_mode(&L)) TRY(write_columns(&L));
  else TRY(write_values(&L));
  drop_unread_scratch(&L);
  L.lf->row_work = block_work(L.lf, L.lf->row);
  add_row_prefetch(&L);
  if (L.oom) TRY(jit_error(JIT_ENOMEM, "codegen: out of memory"));

  /* buffers: reads in increasing order, then the writes; LOAD/STORE name them by index */
  lp_func *lf = L.lf;
  if (L.n_reads) qsort(L.reads, L.n_reads, sizeof *L.reads, cmp_ref);
  lf->n_reads = L.n_reads;
  lf->n_bufs = L.n_reads + n_writes;
  lf->buf_refs = malloc(lf->n_bufs * sizeof *lf->buf_refs);
  lf->buf_dt = malloc(lf->n_bufs * sizeof *lf->buf_dt);
  if (!lf->buf_refs || !lf->buf_dt) TRY(jit_error(JIT_ENOMEM, "codegen: out of memory"));
  uint32_t nb = 0;
  for (uint32_t i = 0; i < L.n_reads; i++) lf->buf_refs[nb++] = L.reads[i];
  for (uint32_t w = 0; w < k->n_writes; w++)
    if (k->writes[w] != k->dot) lf->buf_refs[nb++] = k->writes[w];
  for (uint32_t i = 0; i < nb; i++) lf->buf_dt[i] = ir_type_of(L.f, lf->buf_refs[i])->dtype;
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    lp_ins *in = &lf->ins[i];
    if (in->op != LP_LOAD && in->op != LP_STORE && in->op != LP_PREFETCH) continue;
    if (in->buf < 0) { /* row scratch s: after the buffers */
      in->buf = (int32_t)nb + (-2 - in->buf);
      continue;
    }
    /* a load may read a write's buffer: a value cached in the output row */
    uint32_t lo = in->op == LP_STORE ? lf->n_reads : 0, hi = nb;
    int32_t found = -1;
    for (uint32_t b = lo; b < hi; b++)
      if (lf->buf_refs[b] == (ir_ref)in->buf) found = (int32_t)b;
    if (found < 0) TRY(jit_error(JIT_EINTERNAL, "codegen: %s: a buffer without an index", lf->name));
    in->buf = found;
  }
  *out = lf;
  L.lf = NULL;
fail:
  lp_free(L.lf);
  free(L.lvl);
  free(L.cse);
  free(L.memo);
  free(L.reads);
  free(L.cand);
  return st;
}
