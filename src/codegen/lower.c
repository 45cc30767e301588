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
 * a reduction over leading axes runs in column mode (see write_columns). The builder, gathers
 * and scatters, and the passes after lowering are in lower_build.c, lower_gather.c and
 * lower_post.c (lower_internal.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/lower_internal.h"
#include "runtime/error.h"

#define LP_BLOCK 4096     /* elements per row when a long inner dim is split into rows */
#define LP_SPLIT_ROWS 16  /* split when the kernel has fewer rows than this */
#define LP_COLUMNS 256    /* output elements per row of a column reduction */
#define LP_COLUMNS_MIN 64 /* ... and at least this many, when fewer rows would leave threads idle */
#define LP_COLUMN_ROWS 4  /* rows a column reduction is split into when its columns allow */
#define LP_SCRATCH_BYTES (16 << 10) /* row scratch of a kernel: stays in L1 beside its rows */

/* ---- values ---------------------------------------------------------------------------------- */

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

bool lw_computed(const lower *L, ir_ref v) {
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

static jit_status unsupported(const lower *L, ir_ref v) {
  const ir_ins *in = &L->f->ins[v];
  return jit_error(JIT_EUNSUPPORTED, "codegen: %%%u = %s on %s has no compiled form", v,
                   ir_op_name[in->op], jit_dtype_name(ir_type_of(L->f, in->args[0])->dtype));
}

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

/* A new row scratch array of len elements of dt (its index), or -1 when the kernel's scratch has
   no room for it. */
static int32_t new_scratch(lower *L, int64_t len, jit_dtype dt) {
  lp_func *lf = L->lf;
  int64_t bytes = len * (int64_t)jit_dtype_size(dt);
  if (lf->n_scratch == LP_MAX_SCRATCH || bytes > LP_SCRATCH_BYTES - L->scratch_bytes) return -1;
  int32_t s = (int32_t)lf->n_scratch++;
  lf->scratch_len[s] = len;
  lf->scratch_dt[s] = dt;
  L->scratch_bytes += bytes;
  return s;
}

/* Inside a reduction loop: caches v (just computed as id) in a new row scratch array when the
   kernel's scratch has room for it. */
static bool scratch_store(lower *L, cand *c, const ir_type *t, int32_t id) {
  int32_t s = new_scratch(L, row_len(t, &c->m), t->dtype);
  if (s < 0) return false;
  lp_ins st = lw_mk(LP_STORE, t->dtype, lw_offset_in(L, c->v, &c->m, true), id, -1);
  st.buf = lw_scratch_buf(s);
  lw_emit_at(L, st, L->depth - 1);
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
  lp_ins st = lw_mk(LP_STORE, t->dtype, lw_address(L, wr, m), id, -1);
  st.buf = (int32_t)wr;
  lw_emit_at(L, st, L->depth - 1);
  L->cached[w] = true;
  c->w = (int32_t)w;
}

/* In the write loop: v at m loaded back from the output that cached it, or -1. */
static int32_t from_cache(lower *L, ir_ref v, const fz_map *m) {
  cand *c = find_cand(L, v, m);
  if (c && c->scratch >= 0) {
    lp_ins ld = lw_mk(LP_LOAD, ir_type_of(L->f, v)->dtype, lw_offset_in(L, v, m, true), -1, -1);
    ld.buf = lw_scratch_buf(c->scratch);
    return lw_emit(L, ld);
  }
  if (!c || c->w < 0) return -1;
  ir_ref wr = L->k->writes[c->w];
  lp_ins ld = lw_mk(LP_LOAD, ir_type_of(L->f, v)->dtype, lw_address(L, wr, m), -1, -1);
  ld.buf = (int32_t)wr;
  return lw_emit(L, ld);
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
  lp_ins acc = lw_mk(LP_ACC, dt, lw_value_const(L, dt, init), -1, -1);
  acc.ew = (uint8_t)comb;
  int32_t aid = lw_emit_at(L, acc, 1);
  int32_t trip[IR_MAX_RANK];
  for (int k = 0; k < om.n_inner; k++) trip[k] = lw_iconst(L, om.inner_ext[k]);
  saved_nest sv;
  lw_open_nest(L, om.n_inner, trip, &sv);
  int32_t x = -1;
  jit_status st = lw_gen(L, in->args[0], &om, clamp, &x);
  if (st == JIT_OK) {
    lp_ins add = lw_mk(LP_ACC_ADD, dt, aid, x, -1);
    add.ew = (uint8_t)comb;
    lw_emit_at(L, add, L->depth - 1);
  }
  lw_close_nest(L, &sv);
  if (st != JIT_OK) return st;
  *out = lw_emit_at(L, lw_mk(LP_ACC_GET, dt, aid, -1, -1), 1);
  return JIT_OK;
}

static jit_status gen_concat(lower *L, ir_ref v, const fz_map *m, int32_t *out) {
  const ir_ins *in = &L->f->ins[v];
  jit_dtype dt = ir_type_of(L->f, v)->dtype;
  int axis = (int)in->attr.axis;
  int32_t ia = lw_dim_index(L, m, axis), acc = -1;
  int64_t end = ir_type_of(L->f, v)->dims[axis];
  for (uint32_t s = in->n_args; s-- > 0;) {
    int64_t len = ir_type_of(L->f, in->args[s])->dims[axis];
    end -= len;
    if (len == 0) continue;
    fz_map om;
    int32_t x;
    if (!fz_map_operand(L->f, v, s, m, &om))
      return jit_error(JIT_EINTERNAL, "codegen: no map for operand %u of %%%u", s, v);
    jit_status st = lw_gen(L, in->args[s], &om, true, &x);
    if (st != JIT_OK) return st;
    if (acc < 0) {
      acc = x;
    } else {
      int32_t pred = lw_iop(L, LP_ILT, ia, lw_iconst(L, end + len));
      acc = lw_ew(L, IR_SELECT, dt, dt, pred, x, acc);
    }
  }
  /* every operand empty: so is the result, and this code never runs */
  *out = acc >= 0 ? acc : lw_value_const(L, dt, 0);
  return JIT_OK;
}





/* The bits of 2^e for a float of the width of unsigned dtype ut. */
static uint64_t pow2_bits(jit_dtype ut, int e) {
  return ut == JIT_U64 ? (uint64_t)(1023 + e) << 52 : (uint64_t)(127 + e) << 23;
}

/* a / b in the first write loop, for a divisor b of the row: a times 1 / b refined by one FMA
   step (3 FMAs where a vector division takes ~8 cycles of one divider; softmax's write loop was
   bound by it). The loop also gathers the largest and the smallest nonzero |a| so that
   write_values can redo, dividing, the rows where a or b is outside LP_QUOT's ranges. An a known
   to lie in [0, 1] (unit: softmax's exp) is never too large and has no sign to clear. */
static int32_t gen_quot(lower *L, jit_dtype dt, int32_t a, int32_t b, bool unit) {
  bool wide = dt == JIT_F64;
  jit_dtype ut = wide ? JIT_U64 : JIT_U32, ft = wide ? JIT_F64 : JIT_F32; /* f16/bf16: in f32 */
  int qb = wide ? LP_QUOT_QB64 : LP_QUOT_QB32;
  int32_t c = lw_ew(L, IR_DIV, ft, ft, lw_value_const(L, ft, 1.0), b, -1);
  int32_t q = lw_emit(L, lw_mk(LP_QUOT, dt, a, b, c));
  lp_ins mag = lw_mk(LP_MAG_BITS, ut, a, -1, -1);
  mag.in_dt = (uint8_t)ft;
  mag.range = unit ? LP_RANGE_UNIT : LP_RANGE_ANY;
  int32_t ma = lw_emit(L, mag);
  lp_ins mb_in = mag;
  mb_in.range = LP_RANGE_ANY;
  mb_in.a = b;
  int32_t mb = lw_emit(L, mb_in); /* b's check is the row's: it lands before the loop */
  int32_t off = lw_ew(L, IR_SUB, ut, ut, mb, lw_bits_const(L, ut, pow2_bits(ut, -qb)), -1);
  int32_t width = lw_bits_const(L, ut, pow2_bits(ut, qb) - pow2_bits(ut, -qb));
  int32_t b_ok = lw_cmp(L, JIT_LT, ut, off, width);
  L->quot_b_ok =
      L->quot_b_ok < 0 ? b_ok : lw_ew(L, IR_AND, JIT_BOOL, JIT_BOOL, L->quot_b_ok, b_ok, -1);
  if (L->quot_max[wide] < 0) { /* in the row block, before the loop (placed when it closes) */
    lp_ins hi = lw_mk(LP_ACC, ut, lw_bits_const(L, ut, 0), -1, -1), lo = hi;
    hi.ew = IR_MAX;
    lo.a = lw_bits_const(L, ut, wide ? UINT64_MAX : UINT32_MAX);
    lo.ew = IR_MIN;
    L->quot_max[wide] = lw_emit_at(L, hi, 1);
    L->quot_min[wide] = lw_emit_at(L, lo, 1);
  }
  /* a = 0 passes: its m - 1 wraps to the largest value */
  int32_t m1 = lw_ew(L, IR_SUB, ut, ut, ma, lw_bits_const(L, ut, 1), -1);
  lp_ins add = lw_mk(LP_ACC_ADD, ut, L->quot_max[wide], ma, -1);
  add.ew = IR_MAX;
  if (!unit) lw_emit_at(L, add, L->depth - 1);
  add.a = L->quot_min[wide];
  add.b = m1;
  add.ew = IR_MIN;
  lw_emit_at(L, add, L->depth - 1);
  return q;
}

/* After the first write loop: whether the row must be written again, dividing. */
static int32_t quot_redo(lower *L) {
  int32_t bad = lw_ew(L, IR_NOT, JIT_BOOL, JIT_BOOL, L->quot_b_ok, -1, -1);
  for (int wide = 0; wide < 2; wide++) {
    if (L->quot_max[wide] < 0) continue;
    jit_dtype ut = wide ? JIT_U64 : JIT_U32;
    int qa = wide ? LP_QUOT_QA64 : LP_QUOT_QA32;
    int32_t hi = lw_emit_at(L, lw_mk(LP_ACC_GET, ut, L->quot_max[wide], -1, -1), 1);
    int32_t lo = lw_emit_at(L, lw_mk(LP_ACC_GET, ut, L->quot_min[wide], -1, -1), 1);
    int32_t big = lw_cmp(L, JIT_GE, ut, hi, lw_bits_const(L, ut, pow2_bits(ut, qa)));
    int32_t small = lw_cmp(L, JIT_LT, ut, lo, lw_bits_const(L, ut, pow2_bits(ut, -qa) - 1));
    int32_t out = lw_ew(L, IR_OR, JIT_BOOL, JIT_BOOL, big, small, -1);
    bad = lw_ew(L, IR_OR, JIT_BOOL, JIT_BOOL, bad, out, -1);
  }
  return bad;
}

jit_status lw_gen(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out) {
  jit_status st = JIT_OK;
  /* row-level values are shared by a row's loops, except in column mode where a row dim
     follows the innermost loop */
  uint32_t phase = fz_map_row_level(m) && !L->column ? 0 : L->phase;
  if (L->col_tail && v == L->col_red) {
    *out = L->col_sum;
    return JIT_OK;
  }
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
  if (phase && phase == L->write_phase && !clamp && lw_computed(L, v) && expensive(in->op) &&
      (id = from_cache(L, v, m)) >= 0)
    goto done;
  if (!lw_computed(L, v)) {
    id = lw_load_at(L, v, lw_address(L, v, m), clamp);
  } else if (ir_op_flags[in->op] & IR_EW) {
    int32_t x[3] = {-1, -1, -1};
    for (uint32_t k = 0; k < in->n_args && k < 3; k++) TRY(lw_gen(L, in->args[k], m, clamp, &x[k]));
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
      id = lw_value_const(L, JIT_BOOL, c == JIT_EQ || c == JIT_LE || c == JIT_GE);
      goto done;
    }
    if (in->op == IR_DIV && L->quot_on && phase == L->write_phase && in_dt == t->dtype &&
        ir_dtype_is_float(t->dtype) && lw_level_of(L, x[1]) <= 1 &&
        lw_level_of(L, x[0]) > 1) {
      id = gen_quot(L, t->dtype, x[0], x[1], lw_in_unit_interval(f, in->args[0]));
      goto done;
    }
    lp_ins ew = lw_mk(LP_EW, t->dtype, x[0], x[1], x[2]);
    ew.ew = (uint8_t)in->op;
    ew.in_dt = (uint8_t)in_dt;
    ew.cmp = (uint8_t)in->attr.cmp;
    if (in->op == IR_EXP && lw_at_most_zero(f, in->args[0])) ew.range = LP_RANGE_NONPOS;
    id = lw_emit(L, ew);
  } else {
    switch (in->op) {
    case IR_CONST: id = lw_value_const(L, t->dtype, in->attr.value); break;
    case IR_IOTA: {
      int32_t i = t->rank ? lw_dim_index(L, m, (int)in->attr.axis) : lw_iconst(L, 0);
      id = lw_ew(L, IR_CONVERT, t->dtype, JIT_I64, i, -1, -1);
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
      TRY(lw_gen(L, in->args[0], &om, clamp, &id));
      break;
    }
    case IR_CONCAT: TRY(gen_concat(L, v, m, &id)); break;
    case IR_GATHER: TRY(lw_gen_gather(L, v, m, clamp, &id)); break;
    case IR_PAD: TRY(lw_gen_pad(L, v, m, clamp, &id)); break;
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
  if (!lw_computed(L, v)) return JIT_OK;
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
    return lw_gen(L, v, m, false, &id);
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

/* ---- the kernel ------------------------------------------------------------------------------ */

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
         a->cmp == b->cmp && a->range == b->range && a->a == b->a && a->b == b->b &&
         a->c == b->c && a->buf == b->buf && a->body == b->body &&
         a->imm.i == b->imm.i; /* a float's bits: -0 is not 0 */
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
  lw_open_nest(L, 1, &trip, &sv);
  if (seldom && !L->oom) L->lf->ins[L->fors[2]].imm.i = 1;
  L->write_phase = L->phase;
  if (blk >= 0) /* the split's block: element blk * LP_BLOCK + i */
    L->inner_idx[0] =
        lw_iop(L, LP_IADD, lw_iop(L, LP_IMUL, blk, lw_iconst(L, LP_BLOCK)), L->inner_idx[0]);
  for (uint32_t w = 0; w < k->n_writes; w++) {
    ir_ref v = k->writes[w];
    const fz_map *m = &k->write_maps[w];
    if (v == k->dot || fz_map_row_level(m)) continue;
    int32_t x;
    TRY(lw_gen(L, v, m, false, &x));
    lp_ins stv = lw_mk(LP_STORE, ir_type_of(L->f, v)->dtype, lw_address(L, v, m), x, -1);
    stv.buf = (int32_t)v;
    lw_emit_at(L, stv, L->depth - 1);
  }
fail:
  lw_close_nest(L, &sv);
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
    jit_status st = lw_gen(L, v, m, false, &x);
    if (st != JIT_OK) return st;
    lp_ins stv = lw_mk(LP_STORE, ir_type_of(L->f, v)->dtype, lw_address(L, v, m), x, -1);
    stv.buf = (int32_t)v;
    lw_emit_at(L, stv, 1);
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
      blk = lw_row_val(L, L->n_row - 1);
      int32_t start = lw_iop(L, LP_IMUL, blk, lw_iconst(L, LP_BLOCK));
      int32_t left = lw_iop(L, LP_ISUB, lw_iconst(L, n_inner), start);
      trip = lw_iop(L, LP_IMIN, left, lw_iconst(L, LP_BLOCK));
    } else {
      trip = lw_iconst(L, n_inner);
    }
    L->quot_on = quot_allowed(L);
    L->quot_max[0] = L->quot_max[1] = L->quot_b_ok = -1;
    jit_status st = write_loop(L, trip, blk, false);
    L->quot_on = false;
    if (st == JIT_OK && (L->quot_max[0] >= 0 || L->quot_max[1] >= 0)) {
      /* the rows where a quotient may be off are written again, dividing: trip * redo */
      int32_t redo = lw_ew(L, IR_CONVERT, JIT_I64, JIT_BOOL, quot_redo(L), -1, -1);
      st = write_loop(L, lw_iop(L, LP_IMUL, redo, trip), blk, true);
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
   in the output, so they stay row reductions (accumulating in f32).
   The reduction may also be read by an elementwise tail of its own shape and dtype, the root:
   a bias's SGD update b - lr * sum(dy, 0) fused after its gradient. The sums then build up in a
   row scratch array (the output may share its buffer with b, a donated parameter, which the tail
   reads after), and a last loop over the row's outputs writes the tail of each. */
#define COLUMN_MAX_OPS 64 /* kernels with more ops stay row kernels (column_tail_ok's walk) */

/* Whether every op of the kernel that reads red, directly or through others, is elementwise
   with red's type, and the root is one of them. One pass: k->ops is increasing, so an op's
   operands inside the kernel come before it. */
static bool column_tail_ok(const ir_func *f, const fz_kernel *k, ir_ref red) {
  if (k->n_ops > COLUMN_MAX_OPS) return false;
  bool reads[COLUMN_MAX_OPS] = {false}, root_reads = false;
  const ir_type *rt = ir_type_of(f, red);
  for (uint32_t i = 0; i < k->n_ops; i++) {
    const ir_ins *in = &f->ins[k->ops[i]];
    for (uint32_t a = 0; a < in->n_args; a++) {
      reads[i] |= in->args[a] == red;
      for (uint32_t j = 0; j < i; j++) reads[i] |= reads[j] && in->args[a] == k->ops[j];
    }
    if (!reads[i]) continue;
    if (!(ir_op_flags[in->op] & IR_EW) || !ir_type_equal(ir_type_of(f, k->ops[i]), rt))
      return false;
    root_reads |= k->ops[i] == k->root;
  }
  return root_reads;
}

/* Whether the kernel runs in column mode, and the reductions it accumulates (reds[0..*n)):
   one, the root or what the root's tail reads; or several sibling reductions, each a write
   and none read by another op, over the same strips. */
static bool column_mode(const lower *L, ir_ref *reds, uint32_t *n) {
  const fz_kernel *k = L->k;
  const ir_func *f = L->f;
  if (k->kind != FZ_ROW || k->n_row < 1 || k->n_writes > FZ_COLUMN_SUMS_MAX) return false;
  uint32_t n_red = 0;
  for (uint32_t i = 0; i < k->n_ops; i++) {
    if (!(ir_op_flags[f->ins[k->ops[i]].op] & IR_REDUCE)) continue;
    if (n_red == FZ_COLUMN_SUMS_MAX) return false;
    reds[n_red++] = k->ops[i];
  }
  *n = n_red;
  if (k->n_writes == 1)
    return n_red == 1 && (reds[0] == k->root || column_tail_ok(f, k, reds[0])) &&
           fz_column_reduce(f, reds[0]);
  if (n_red != k->n_writes) return false;
  fz_map first;
  for (uint32_t w = 0; w < k->n_writes; w++) {
    fz_map om;
    if (reds[w] != k->writes[w] || !fz_column_reduce(f, reds[w]) ||
        !fz_map_row_level(&k->write_maps[w]) ||
        !fz_map_operand(f, reds[w], 0, &k->write_maps[w], &om))
      return false;
    if (w == 0) first = om;
    if (om.n_inner != first.n_inner) return false;
    for (int i = 0; i < om.n_inner; i++)
      if (om.inner_ext[i] != first.inner_ext[i]) return false;
  }
  return true;
}

/* reds[0..n): column_mode's reductions. One may be read by the root's tail (n == 1). */
static jit_status write_columns(lower *L, const ir_ref *reds, uint32_t n_sums) {
  jit_status st = JIT_OK;
  const fz_kernel *k = L->k;
  ir_ref r = k->root;
  bool tail = n_sums == 1 && reds[0] != r;
  jit_dtype dts[FZ_COLUMN_SUMS_MAX];
  fz_map rms[FZ_COLUMN_SUMS_MAX], oms[FZ_COLUMN_SUMS_MAX];
  int32_t sums[FZ_COLUMN_SUMS_MAX]; /* where each builds up: its output, or the tail's scratch */
  int c = L->n_row - 1;
  int64_t n = L->row_ext[c], b = n < LP_COLUMNS ? n : LP_COLUMNS, outer = 1;
  for (int d = 0; d < c; d++) outer *= L->row_ext[d];
  /* a bias's gradient (256 columns) is split for threads too: each row reads its columns of every
     reduced index, so the rows share the operand's lines, not its bytes */
  if (b > LP_COLUMNS_MIN && outer * ((n + b - 1) / b) < LP_COLUMN_ROWS) {
    int64_t want = (n + LP_COLUMN_ROWS - 1) / LP_COLUMN_ROWS;
    b = (want + 15) / 16 * 16;
    if (b < LP_COLUMNS_MIN) b = LP_COLUMNS_MIN;
  }
  L->row_ext[c] = b ? (n + b - 1) / b : 0;
  L->lf->n_rows = 1;
  for (int d = 0; d < L->n_row; d++) L->lf->n_rows *= L->row_ext[d];
  for (uint32_t s = 0; s < n_sums; s++) {
    /* a tail keeps the reduction's shape: the root's map is the reduction's */
    rms[s] = k->write_maps[tail ? 0 : s];
    dts[s] = ir_type_of(L->f, reds[s])->dtype;
    if (!fz_map_operand(L->f, reds[s], 0, &rms[s], &oms[s]))
      return jit_error(JIT_EINTERNAL, "codegen: no map for the operand of %%%u", reds[s]);
    sums[s] = (int32_t)reds[s];
  }
  if (tail) {
    int32_t sc = new_scratch(L, b, dts[0]); /* <= LP_COLUMNS elements: room in any kernel's scratch */
    if (sc < 0) return jit_error(JIT_EINTERNAL, "codegen: no row scratch left for column sums");
    sums[0] = lw_scratch_buf(sc);
  }
  L->column = true;
  int32_t start = lw_iop(L, LP_IMUL, lw_row_val(L, c), lw_iconst(L, b));
  /* a trip LLVM can see when every row has b columns (8 columns: one vector, no remainder loop) */
  int32_t trip = b && n % b == 0 ? lw_iconst(L, b)
                                 : lw_iop(L, LP_IMIN, lw_iop(L, LP_ISUB, lw_iconst(L, n), start),
                                          lw_iconst(L, b));
  saved_nest sv;
  /* the sums of this row start at the identity */
  lw_open_nest(L, 1, &trip, &sv);
  L->row_idx[c] = lw_iop(L, LP_IADD, start, L->inner_idx[0]);
  for (uint32_t s = 0; s < n_sums; s++) {
    ir_op comb = ir_reduce_combiner(L->f->ins[reds[s]].op);
    int32_t at = tail ? L->inner_idx[0] : lw_address(L, reds[s], &rms[s]);
    lp_ins st0 = lw_mk(LP_STORE, dts[s], at, lw_value_const(L, dts[s], reduce_init(comb, dts[s])), -1);
    st0.buf = sums[s];
    lw_emit_at(L, st0, L->depth - 1);
  }
  lw_close_nest(L, &sv);
  /* then every reduced index adds its strip to each sum */
  const fz_map *om = &oms[0];
  int32_t trips[IR_MAX_RANK + 1];
  for (int i = 0; i < om->n_inner; i++) trips[i] = lw_iconst(L, om->inner_ext[i]);
  trips[om->n_inner] = trip;
  lw_open_nest(L, om->n_inner + 1, trips, &sv);
  L->row_idx[c] = lw_iop(L, LP_IADD, start, L->inner_idx[om->n_inner]);
  for (uint32_t s = 0; s < n_sums && st == JIT_OK; s++) {
    int32_t x = -1;
    st = lw_gen(L, L->f->ins[reds[s]].args[0], &oms[s], false, &x);
    if (st != JIT_OK) break;
    ir_op comb = ir_reduce_combiner(L->f->ins[reds[s]].op);
    int32_t a = tail ? L->inner_idx[om->n_inner] : lw_address(L, reds[s], &rms[s]);
    lp_ins ld = lw_mk(LP_LOAD, dts[s], a, -1, -1); /* not CSE'd: the loop stores to it */
    ld.buf = sums[s];
    int32_t acc = lw_emit_at(L, ld, L->depth - 1);
    lp_ins stv = lw_mk(LP_STORE, dts[s], a, lw_ew(L, comb, dts[s], dts[s], acc, x, -1), -1);
    stv.buf = sums[s];
    lw_emit_at(L, stv, L->depth - 1);
  }
  lw_close_nest(L, &sv);
  if (st == JIT_OK && tail) { /* the tail of each output, from its column's sum */
    lw_open_nest(L, 1, &trip, &sv);
    L->row_idx[c] = lw_iop(L, LP_IADD, start, L->inner_idx[0]);
    lp_ins ld = lw_mk(LP_LOAD, dts[0], L->inner_idx[0], -1, -1);
    ld.buf = sums[0];
    L->col_sum = lw_emit_at(L, ld, L->depth - 1);
    L->col_red = reds[0];
    L->col_tail = true;
    int32_t y = -1;
    st = lw_gen(L, r, &rms[0], false, &y);
    L->col_tail = false;
    if (st == JIT_OK) {
      lp_ins sy = lw_mk(LP_STORE, dts[0], lw_address(L, r, &rms[0]), y, -1);
      sy.buf = (int32_t)r;
      lw_emit_at(L, sy, L->depth - 1);
    }
    lw_close_nest(L, &sv);
  }
  if (st == JIT_OK && L->oom) st = jit_error(JIT_ENOMEM, "codegen: out of memory");
  return st;
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
  L.lf->entry = lw_new_block(&L);
  L.lf->row = lw_new_block(&L);
  L.stack[0] = L.lf->entry;
  L.stack[1] = L.lf->row;
  L.depth = 2;
  L.fma = fma;
  ir_ref reds[FZ_COLUMN_SUMS_MAX];
  uint32_t n_sums = 0;
  if (L.oom) TRY(jit_error(JIT_ENOMEM, "codegen: out of memory"));
  if (p->f->ins[k->root].op == IR_SCATTER) TRY(lw_write_scatter(&L));
  else if (column_mode(&L, reds, &n_sums)) TRY(write_columns(&L, reds, n_sums));
  else TRY(write_values(&L));
  lw_drop_unread_scratch(&L);
  L.lf->row_work = block_work(L.lf, L.lf->row);
  if (L.lf->row_work < L.row_work_min) L.lf->row_work = L.row_work_min;
  lw_add_row_prefetch(&L);
  lw_add_stream_prefetch(&L);
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
  lf->row_inner = L.n_row >= 2 ? L.row_ext[L.n_row - 1] : 0;
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
