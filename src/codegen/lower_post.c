/* lower_post.c: passes over a lowered function (codegen/lower_internal.h), run by lp_lower once
 * the loops are built: the next row's prefetch for multi-phase row kernels, a loop kernel's inputs
 * prefetched ahead of its loads, and dropping the row scratch arrays the write loop never read
 * back. */
#include "codegen/lower_internal.h"

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

/* Whether index x is row * c + var for the row index, the loop variable var and a constant c
   (*row: the row index's instruction). */
static bool row_major_index(const lp_func *lf, int32_t x, int32_t var, int64_t *c, int32_t *row) {
  const lp_ins *in = &lf->ins[x];
  if (in->op != LP_IADD) return false;
  for (int side = 0; side < 2; side++) {
    int32_t v = side ? in->b : in->a, m = side ? in->a : in->b;
    const lp_ins *mul = &lf->ins[m];
    if (v != var || mul->op != LP_IMUL || lf->ins[mul->a].op != LP_ROW ||
        lf->ins[mul->b].op != LP_CONST)
      continue;
    *c = lf->ins[mul->b].imm.i;
    *row = mul->a;
    return true;
  }
  return false;
}

/* Inserts instruction in at position *at of block bi (of nesting level `level`). */
static int32_t insert_in(lower *L, int32_t bi, int level, lp_ins in, uint32_t *at) {
  int32_t id = lw_new_ins(L, &in, level);
  lp_block *b = &L->lf->blocks[bi];
  if (id < 0 || !ir_grow((void **)&b->ins, &b->cap, b->n + 1, sizeof *b->ins)) {
    L->oom = true;
    return -1;
  }
  memmove(b->ins + *at + 1, b->ins + *at, (b->n - *at) * sizeof *b->ins);
  b->ins[(*at)++] = id;
  b->n++;
  return id;
}

static int32_t insert_row(lower *L, lp_ins in, uint32_t *at) {
  return insert_in(L, L->lf->row, 1, in, at);
}

void lw_add_row_prefetch(lower *L) {
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
  if (!lw_is_iconst(L, loop.a, &c)) return;
  int32_t done[8];
  int n_done = 0;
  const lp_block *body = &lf->blocks[loop.body];
  for (uint32_t i = 0; i < body->n && n_done < 8 && !L->oom; i++) {
    const lp_ins ld = lf->ins[body->ins[i]];
    int64_t bytes = c * (int64_t)jit_dtype_size(ld.dt);
    int32_t r;
    int64_t rc;
    bool seen = false;
    for (int j = 0; j < n_done; j++) seen |= done[j] == ld.buf;
    if (ld.op != LP_LOAD || ld.buf < 0 || seen || bytes < LP_PREFETCH_MIN ||
        bytes > LP_PREFETCH_MAX ||
        (double)bytes * (double)lf->n_rows < LP_PREFETCH_TOTAL ||
        !row_major_index(lf, ld.a, loop.b, &rc, &r) || rc != c)
      continue;
    /* (row + 1) * c, then the prefetch, right after the first phase */
    lp_ins one = lw_mk(LP_CONST, JIT_I64, -1, -1, -1), cc = one;
    one.imm.i = 1;
    cc.imm.i = c;
    int32_t k1 = insert_row(L, one, &at);
    int32_t next = insert_row(L, lw_mk(LP_IADD, JIT_I64, r, k1, -1), &at);
    int32_t kc = insert_row(L, cc, &at);
    int32_t start = insert_row(L, lw_mk(LP_IMUL, JIT_I64, next, kc, -1), &at);
    lp_ins pf = lw_mk(LP_PREFETCH, ld.dt, start, -1, -1);
    pf.buf = ld.buf;
    pf.imm.i = c;
    insert_row(L, pf, &at);
    done[n_done++] = ld.buf;
  }
}

/* ---- streaming a loop kernel's inputs ----------------------------------------------------------
   A loop kernel bound by its arithmetic (W1: a tanh and an exp an element) reads its inputs
   faster than the hardware prefetchers bring them in: on Emerald Rapids one core took 0.94 ns an
   element from DRAM against 0.65 with the data in L2, and 0.69 when each 64 bytes read asked for
   the line 4 KiB ahead. So each innermost loop without accumulators prefetches, every
   iteration, the element LP_STREAM_AHEAD bytes past the one it loads, for every input it reads
   contiguously over whole rows (row * c + j, j < c, rows after rows) of at least
   LP_PREFETCH_TOTAL bytes; the emitters issue it once per cache line's worth of iterations. */
#define LP_STREAM_AHEAD 4096

/* Whether loop trip t runs over a whole row of c elements: t = c, or min(c, n - row * c) (the
   last row of a split loop, shorter). */
static bool whole_row_trip(const lower *L, int32_t t, int64_t c) {
  int64_t v;
  if (lw_is_iconst(L, t, &v)) return v == c;
  const lp_ins *in = &L->lf->ins[t];
  return in->op == LP_IMIN &&
         ((lw_is_iconst(L, in->a, &v) && v == c) || (lw_is_iconst(L, in->b, &v) && v == c));
}

static void stream_loop(lower *L, int32_t for_id, int level) {
  lp_func *lf = L->lf;
  const lp_ins loop = lf->ins[for_id];
  const lp_block *body = &lf->blocks[loop.body];
  if (loop.imm.i == 1) return; /* seldom run */
  for (uint32_t i = 0; i < body->n; i++) {
    uint8_t op = lf->ins[body->ins[i]].op;
    if (op == LP_FOR || op == LP_ACC || op == LP_ACC_ADD || op == LP_PREFETCH) return;
  }
  int32_t done[8];
  int n_done = 0;
  for (uint32_t i = 0; i < body->n && n_done < 8 && !L->oom; i++) { /* body grows as we insert */
    const lp_ins ld = lf->ins[body->ins[i]];
    int64_t es = (int64_t)jit_dtype_size(ld.dt), c;
    int32_t r;
    bool seen = false;
    for (int j = 0; j < n_done; j++) seen |= done[j] == ld.buf;
    if (ld.op != LP_LOAD || ld.buf < 0 || seen || !row_major_index(lf, ld.a, loop.b, &c, &r) ||
        !whole_row_trip(L, loop.a, c) ||
        (double)(c * es) * (double)lf->n_rows < LP_PREFETCH_TOTAL)
      continue;
    lp_ins ahead = lw_mk(LP_CONST, JIT_I64, -1, -1, -1);
    ahead.imm.i = LP_STREAM_AHEAD / es;
    uint32_t at = i + 1;
    int32_t k = insert_in(L, loop.body, level, ahead, &at);
    int32_t x = insert_in(L, loop.body, level, lw_mk(LP_IADD, JIT_I64, ld.a, k, -1), &at);
    lp_ins pf = lw_mk(LP_PREFETCH, ld.dt, x, -1, -1);
    pf.buf = ld.buf;
    pf.imm.i = 1;
    insert_in(L, loop.body, level, pf, &at);
    i = at - 1;
    done[n_done++] = ld.buf;
  }
}

static void stream_block(lower *L, int32_t bi, int level) {
  for (uint32_t i = 0; i < L->lf->blocks[bi].n && !L->oom; i++) {
    int32_t id = L->lf->blocks[bi].ins[i];
    if (L->lf->ins[id].op != LP_FOR) continue;
    stream_block(L, L->lf->ins[id].body, level + 1);
    stream_loop(L, id, level + 1);
  }
}

void lw_add_stream_prefetch(lower *L) {
  if (L->k->kind == FZ_LOOP && !L->oom) stream_block(L, L->lf->row, 1);
}

/* A value cached in a row scratch array that the write loop never loaded back (it loaded a
   value computed from it, cached too) loses its stores and its array. */
void lw_drop_unread_scratch(lower *L) {
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
        in->buf = lw_scratch_buf(s);
      }
      b->ins[k++] = b->ins[j];
    }
    b->n = k;
  }
}
