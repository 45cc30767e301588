/* lower_internal.h: what the files of the lowering share (not an interface of the library):
 *   lower.c        values at their index maps, reductions, the write loops, lp_lower;
 *   lower_build.c  instructions (CSE'd, placed by their operands), indices, loop nests;
 *   lower_gather.c loads and stores at data-dependent indices (gather, pad, scatter);
 *   lower_post.c   passes over a lowered function (prefetches, unread scratch). */
#ifndef TJIT_CODEGEN_LOWER_INTERNAL_H
#define TJIT_CODEGEN_LOWER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "codegen/kernel.h"

#define LP_MAX_DEPTH (2 + IR_MAX_RANK)

typedef struct memo_ent {
  int32_t id;       /* -1: empty */
  ir_ref v;
  uint32_t phase;
  bool clamp;
  fz_map m;
} memo_ent;

typedef struct saved_nest {
  int depth;
  int32_t stack[LP_MAX_DEPTH], fors[LP_MAX_DEPTH];
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
  int32_t stack[LP_MAX_DEPTH];
  int32_t fors[LP_MAX_DEPTH]; /* fors[d]: the LP_FOR whose body is stack[d] (d >= 2) */
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
  bool col_tail;          /* write_columns' tail loop: col_red's value is col_sum */
  ir_ref col_red;
  int32_t col_sum;
  bool cached[64];        /* cached[w]: write w's row holds a value cached by a reduction loop */
  int64_t scratch_bytes;  /* of the row scratch arrays so far */
  int64_t row_work_min;   /* elements a row touches in loops whose trips are known only when it
                             runs (a scatter's chunk), which block_work would count as LP_BLOCK */
  bool fma;               /* the target has exact fused multiply-adds (LP_QUOT needs them) */
  bool quot_on;           /* the write loop divides by a row's divisor with LP_QUOT (gen_quot) */
  int32_t quot_max[2], quot_min[2]; /* f32, f64: accumulators of |a|'s bits and of those - 1,
                                       or -1 (no LP_QUOT of that width yet) */
  int32_t quot_b_ok;      /* whether every divisor is in LP_QUOT's range (bool) */
  bool collecting;        /* prewalk's first pass: finding candidates, generating nothing */
  uint32_t walking;       /* the write whose value prewalk is walking */
  bool oom;
} lower;

/* ---- instructions (lower_build.c) ------------------------------------------------------------ */

static inline lp_ins lw_mk(lp_op op, jit_dtype dt, int32_t a, int32_t b, int32_t c) {
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

/* Row scratch array s as a LOAD/STORE buffer (until lp_lower numbers the buffers). */
static inline int32_t lw_scratch_buf(int32_t s) { return -2 - s; }

int32_t lw_new_ins(lower *L, const lp_ins *in, int level);
int32_t lw_new_block(lower *L);
/* A side-effecting or stateful instruction, at an explicit depth. */
int32_t lw_emit_at(lower *L, lp_ins in, int level);
/* A pure instruction, reused when an equal one exists, placed in the outermost block where its
   operands are. */
int32_t lw_emit(lower *L, lp_ins in);
int lw_level_of(const lower *L, int32_t id);
bool lw_is_iconst(const lower *L, int32_t id, int64_t *v);
int32_t lw_iconst(lower *L, int64_t v);
/* Index arithmetic (LP_IADD ... LP_ILT), folded. */
int32_t lw_iop(lower *L, lp_op op, int32_t a, int32_t b);
/* The constant c of dtype dt as the loop IR holds it (floats rounded to dt). */
int32_t lw_value_const(lower *L, jit_dtype dt, double c);
/* An unsigned integer constant of dtype ut with the bits v. */
int32_t lw_bits_const(lower *L, jit_dtype ut, uint64_t v);
/* Elementwise op (ir_op) of result dtype dt on operands of dtype in_dt (b, c: -1 for none). */
int32_t lw_ew(lower *L, ir_op op, jit_dtype dt, jit_dtype in_dt, int32_t a, int32_t b, int32_t c);
/* The comparison a c b of operands of dtype in_dt, as a bool. */
int32_t lw_cmp(lower *L, jit_cmp_op c, jit_dtype in_dt, int32_t a, int32_t b);
/* An element of buffer value v (through its base) at element offset a, clamped into v if clamp. */
int32_t lw_load_at(lower *L, ir_ref v, int32_t a, bool clamp);
void lw_note_read(lower *L, ir_ref b);

/* ---- indices and loop nests (lower_build.c) -------------------------------------------------- */

int32_t lw_row_val(lower *L, int k);
int32_t lw_dim_index(lower *L, const fz_map *m, int d);
int32_t lw_offset_in(lower *L, ir_ref v, const fz_map *m, bool row_part);
int32_t lw_address(lower *L, ir_ref v, const fz_map *m);
void lw_open_nest(lower *L, int n, const int32_t *trip, saved_nest *sv);
void lw_close_nest(lower *L, const saved_nest *sv);

/* ---- the rest -------------------------------------------------------------------------------- */

/* Whether the kernel computes v (else it is read from a buffer) (lower.c). */
bool lw_computed(const lower *L, ir_ref v);
/* Value v read at m into *out (lower.c). */
jit_status lw_gen(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out);
/* lower_range.c: whether every element of float value v is <= 0 or NaN, as the IR computing
   it shows (x - max(x) with the max over axes holding x, -|x|, -(x x)). */
bool lw_at_most_zero(const ir_func *f, ir_ref v);
/* Whether every element of float value v is in [0, 1] or NaN: the exp of such a value. */
bool lw_in_unit_interval(const ir_func *f, ir_ref v);
jit_status lw_gen_gather(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out);
jit_status lw_gen_pad(lower *L, ir_ref v, const fz_map *m, bool clamp, int32_t *out);
jit_status lw_write_scatter(lower *L);
void lw_add_row_prefetch(lower *L);
void lw_add_stream_prefetch(lower *L);
void lw_drop_unread_scratch(lower *L);

#endif
