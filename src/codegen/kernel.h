/* kernel.h: what fusion hands to codegen (kernels: groups of IR instructions with a loop space)
 * and the loop-nest IR that lowering makes of each kernel and both emitters translate 1:1.
 *
 * Loop space of a kernel. Size-1 dims of the root (the group's last instruction) are dropped;
 * of the rest, an element-level root's last dim is the inner dim and the others are row dims; a
 * reduction root's dims are all row dims (and so are a loop kernel's when a reduction of its
 * shape joins it: sum(x) + 1). The kernel runs rows [row_begin, row_end) of the flattened row
 * dims; per row it runs one inner loop nest per reduction and one to write the element-level
 * outputs. Every value in a kernel is read through an index map from the loop indices, in which
 * each value dim follows one loop dim (or is a constant).
 */
#ifndef TJIT_CODEGEN_KERNEL_H
#define TJIT_CODEGEN_KERNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

/* ---- index maps --------------------------------------------------------------------------------
   Value dim d of a value read at map m: src[d] = k >= 0: scale * row_index[k] + off;
   src[d] = FZ_INNER(k): scale * inner_index[k] + off (inner dims of the loop nest that
   evaluates it: n_inner of them, extents inner_ext); src[d] = FZ_CONST: off. */
#define FZ_CONST (-1)
#define FZ_INNER(k) (-2 - (k))
#define FZ_INNER_DIM(src) (-2 - (src))

typedef struct fz_map {
  int rank;                       /* the value's rank */
  int n_inner;                    /* inner dims of the evaluating loop nest */
  int8_t src[IR_MAX_RANK];
  int64_t scale[IR_MAX_RANK], off[IR_MAX_RANK];
  int64_t inner_ext[IR_MAX_RANK]; /* n_inner extents */
} fz_map;

/* The map of operand `slot` of instruction u, when u is read at mu. False when no index map
   exists (a reshape that moves elements, a dot operand, an op that reads no operand). */
bool fz_map_operand(const ir_func *f, ir_ref u, uint32_t slot, const fz_map *mu, fz_map *out);
bool fz_map_equal(const fz_map *a, const fz_map *b);
/* The map of a gather's (scatter's) indices for entry 0 of each index vector, when its result
   (updates) of type vt is read at mv: the indices' batch dims follow vt's non-offset dims. */
void fz_map_indices(const ir_gather *g, const ir_type *it, const ir_type *vt, const fz_map *mv,
                    fz_map *out);
/* True when m reads no inner index. */
bool fz_map_row_level(const fz_map *m);

/* The default loop space of a kernel rooted at `root`: its row dims' extents, and the map at
   which the root is written (its inner dims are those of the write loop). */
void fz_space(const ir_func *f, ir_ref root, int *n_row, int64_t *row_ext, fz_map *root_map);

/* ---- kernels (fusion.c) ---------------------------------------------------------------------- */
typedef enum fz_kind {
  FZ_LOOP, /* elementwise, broadcasts, movement: one pass over the root's elements */
  FZ_ROW,  /* + reductions: per row, one inner loop per reduction, then the write loop */
  FZ_DOT   /* a dot and its elementwise epilogue */
} fz_kind;

typedef struct fz_kernel {
  fz_kind kind;
  ir_ref root;        /* the group's last instruction; its type is the loop space */
  ir_ref dot;         /* FZ_DOT: the dot; else IR_NOREF */
  ir_ref *ops;        /* instructions computed inside (increasing; consts, iotas and moves of
                         materialized values may also be in other kernels) */
  uint32_t n_ops;
  ir_ref *reads;      /* materialized values read (params, views, other kernels' writes) */
  uint32_t n_reads;
  ir_ref *writes;     /* values stored (increasing) */
  fz_map *write_maps; /* the map each write is evaluated at */
  uint32_t n_writes;
  int n_row;          /* row dims */
  int64_t row_ext[IR_MAX_RANK];
  int64_t rows, cols; /* as printed: rows x elements per row */
} fz_kernel;

typedef enum fz_class {
  FZ_DEAD,   /* not needed by a result */
  FZ_PARAM,  /* a parameter's buffer */
  FZ_MAT,    /* written to a buffer by kernel owner[] */
  FZ_VIEW,   /* a reshape of a buffer: the bytes of base[] */
  FZ_INLINE, /* computed inside the kernels that read it, never stored */
  FZ_SCAN    /* a loop run as a step of its own before the first kernel with a later root; it
                writes its GETs (FZ_MAT, owner -1) */
} fz_class;

typedef struct fz_prog {
  const ir_func *f;      /* the optimized function (not owned) */
  uint8_t *cls;          /* per ref: fz_class */
  int32_t *owner;        /* per ref: FZ_MAT: the writing kernel; else -1 */
  ir_ref *base;          /* per ref: the param or FZ_MAT value whose bytes it is (itself for those) */
  fz_kernel *kernels;    /* in execution order */
  uint32_t n_kernels;
} fz_prog;

/* Fusion's entry point ir_fuse is in ir/passes/passes.h. */
void fz_prog_free(fz_prog *p);
/* Whether reduction red runs in column mode as a kernel's write (codegen/lower.c): its
   operand's last non-1 axis is kept, and it is no f16/bf16 sum (those accumulate in f32). */
bool fz_column_reduce(const ir_func *f, ir_ref red);
/* Sibling column reductions of one loop space that read a buffer in common as one kernel
   (fusion_siblings.c; ir_fuse's last step), of up to FZ_COLUMN_SUMS_MAX sums (lower.c keeps
   each sum's strip loop in one nest). */
#define FZ_COLUMN_SUMS_MAX 16
jit_status fz_merge_siblings(fz_prog *p);
/* The function as kernels in execution order, each a group of the optimized IR's lines:
   `kernel k0 row[16384 x 1024] reads %0 writes %9 {` ... `}`; views as `view %3 = reshape ..`;
   a scan as `loop %5 = scan .. {`, its body's own fused dump nested inside, then `}`. */
jit_status fz_print(const fz_prog *p, FILE *out);

/* ---- loop IR (lower.c) ----------------------------------------------------------------------------
   A kernel function is  void NAME(void *const *bufs, int64_t row_begin, int64_t row_end):
   bufs[0..n_reads) are read, the rest written. Values are SSA, named by their index in ins[].
   Block `entry` runs once per call, block `row` once per row (LP_ROW is the row index), and
   an LP_FOR runs its body block `trip` times with LP_VAR b = 0, 1, ... An instruction uses only
   values defined before it in its block or in an enclosing block. Index values are JIT_I64 (a
   clamped concat operand's may be negative before its clamp). Float values of dtype f16/bf16 are computed in f32 (loads widen, every op
   result is rounded to the dtype, stores narrow); f32/f64 ops are IEEE ops of that width. */
typedef enum lp_op {
  LP_CONST,   /* imm (.f for float dtypes, .i otherwise) */
  LP_ROW,     /* the row index */
  LP_VAR,     /* the induction variable of an LP_FOR */
  LP_IADD,    /* index arithmetic on a, b (int64; IDIV/IREM operands are >= 0) */
  LP_ISUB,
  LP_IMUL,
  LP_IDIV,
  LP_IREM,
  LP_IMIN,
  LP_IMAX,
  LP_ILT,     /* a < b on indices, as bool */
  LP_LOAD,    /* element a of bufs[buf] (of dtype dt) */
  LP_STORE,   /* element a of bufs[buf] = b */
  LP_EW,      /* elementwise op ew on a (b, c): result dtype dt, operand dtype in_dt (select: the
                 branches'; the predicate is bool); with ir_eval_elementwise's semantics */
  LP_ACC,     /* an accumulator of dtype dt combining with ew (add/max/min), set to a */
  LP_ACC_ADD, /* accumulator a = ew(a, b) */
  LP_ACC_GET, /* accumulator a's value (rounded to dt) */
  LP_FOR,     /* run block body with LP_VAR b from 0 to trip count a - 1; imm.i = 1: a loop that
                 seldom runs (a row written again, lower.c), compiled small, not vectorized */
  LP_PREFETCH, /* a hint: bring elements [a, a + imm.i) of bufs[buf] (of dtype dt) into the cache;
                  a may be past the buffer's end (nothing is read or faults). In the body of an
                  innermost LP_FOR (imm.i = 1, a computed in the body by index arithmetic): an
                  emitter may issue it once per run of iterations, for the run's elements */
  LP_QUOT,    /* a / b given c = 1 / b (f32 or f64; for dt f16/bf16 computed in f32 and rounded):
                 q = a c refined by one FMA step, q + (a - b q) c (Markstein), with q's sign;
                 equal to a / b where a and b are in LP_QUOT's ranges (below), not always
                 elsewhere */
  LP_MAG_BITS, /* the bits of |a| (in_dt f32 or f64) as an unsigned integer of its width (dt) */
  LP_N_OPS
} lp_op;

/* LP_QUOT's ranges: a = 0 or |a| in [2^-QA, 2^QA), and |b| in [2^-QB, 2^QB). There 1 / b and
   the quotient are normal, nothing overflows, and the residual a - b q is a multiple of the
   smallest subnormal at least (QA + 2 QB + 2p - 1 <= the exponent range), so it is exact and
   Markstein's theorem makes the refined quotient the correctly rounded one; a zero quotient
   takes q's sign, as a / b's. Checked against division on 3e8 random f32 pairs, 2e8 at the
   ranges' edges and 1.5e8 f64 pairs. */
#define LP_QUOT_QA32 60
#define LP_QUOT_QB32 20
#define LP_QUOT_QA64 500
#define LP_QUOT_QB64 200

/* Facts about an operand that let an emitter use cheaper code with the same results. */
typedef enum lp_range {
  LP_RANGE_ANY,
  LP_RANGE_NONPOS, /* <= 0 or NaN: x - max(x) over axes holding x, -|x|, -(x x) (of an exp) */
  LP_RANGE_UNIT    /* in [0, 1] or NaN: such an exp's result (of LP_MAG_BITS: no sign to clear) */
} lp_range;

typedef struct lp_ins {
  uint8_t op;       /* lp_op */
  uint8_t dt;       /* result dtype (jit_dtype) */
  uint8_t in_dt;    /* LP_EW: operand dtype */
  uint8_t ew;       /* LP_EW, LP_ACC: ir_op */
  uint8_t cmp;      /* LP_EW cmp: jit_cmp_op */
  uint8_t range;    /* LP_EW, LP_MAG_BITS: what is known of operand a's values (lp_range) */
  int32_t a, b, c;  /* operand values (-1: none) */
  int32_t buf;      /* LP_LOAD, LP_STORE */
  int32_t body;     /* LP_FOR: block */
  union {
    double f;
    int64_t i;
  } imm;
} lp_ins;

typedef struct lp_block {
  int32_t *ins;     /* instruction ids in order */
  uint32_t n, cap;
} lp_block;

#define LP_MAX_SCRATCH 4

typedef struct lp_func {
  char name[32];        /* "tjit_k3" */
  uint32_t n_bufs, n_reads;
  ir_ref *buf_refs;     /* the IR value whose buffer each is (a view's base for views) */
  jit_dtype *buf_dt;
  lp_ins *ins;
  uint32_t n_ins, cap_ins;
  lp_block *blocks;
  uint32_t n_blocks, cap_blocks;
  int32_t entry, row;   /* blocks */
  int64_t n_rows;       /* the row range of a whole call: [0, n_rows) */
  int64_t row_inner;    /* the innermost row dim's extent when rows span several dims, else 0:
                           an emitter may loop over rows as a nest of that inner extent */
  int64_t row_work;     /* elements touched per row (for splitting rows over threads) */
  uint64_t stream_mask; /* bit k: bufs[k] may be written with streaming stores (see
                           codegen/stream.h), set by the runtime before emission */
  /* Row scratch: LOAD/STORE buffer n_bufs + s is a per-call array of scratch_len[s] elements of
     scratch_dt[s] (never handed in by the runtime) in which a reduction loop keeps a value of
     the row for the write loop, so that the output is only written. */
  uint32_t n_scratch;
  int64_t scratch_len[LP_MAX_SCRATCH];
  jit_dtype scratch_dt[LP_MAX_SCRATCH];
} lp_func;

/* Lowers kernel ki of p. fma: the target has fused multiply-add (LP_QUOT, which needs it exact,
   is used only then). *out is NULL when the kernel has nothing to loop over (a dot without
   epilogue). JIT_EUNSUPPORTED when an op/dtype has no compiled form (the kernel is then
   interpreted); JIT_ENOMEM. */
jit_status lp_lower(const fz_prog *p, uint32_t ki, bool fma, lp_func **out);
void lp_free(lp_func *lf);
/* Whether a and b are the same code but for their names (and the IR values their buffers hold):
   one function can run both. */
bool lp_same_code(const lp_func *a, const lp_func *b);

/* ---- emitters (emit_c.c, emit_llvm.c) ------------------------------------------------------------ */
/* The helpers every kernel's C text uses (includes, f16/bf16 conversions, XLA integer ops). */
jit_status lp_emit_c_prelude(FILE *out);
/* lf as a C function that compiles with cc -c -Wall -Werror after the prelude. */
jit_status lp_emit_c(const lp_func *lf, FILE *out);
/* The same; exported: a static function whose transcendentals call lp_emit_c_math's functions
   (the JIT's polynomials) instead of libm. */
jit_status lp_emit_c_kernel(const lp_func *lf, bool exported, FILE *out);
/* emit_c_math.c: tjit_exp_f32 .. tjit_cos_f64 as static C functions (after the prelude). */
jit_status lp_emit_c_math(FILE *out);
/* emit_c_matmul.c: tjit_grp, tjit_dot and tjit_dot_f32 / tjit_dot_f64 (after the prelude). */
jit_status lp_emit_c_matmul(FILE *out);

struct LLVMOpaqueContext;
struct LLVMOpaqueModule;
/* Builds one module holding every non-NULL fns[i] in context c. */
jit_status lp_emit_llvm(lp_func *const *fns, uint32_t n, struct LLVMOpaqueContext *c,
                        const char *module_name, struct LLVMOpaqueModule **out);
/* Whether instruction id of lf is an f32/f64 exp whose every use adds it to (or subtracts it from,
   or subtracts it from it) a constant of magnitude >= 2^-40: lp_emit_llvm then computes it with
   cg_math_emit_exp_summand (the same sums; the C emitters keep the exact exp). */
bool lp_exp_only_summed(const lp_func *lf, int32_t id);

#endif /* TJIT_CODEGEN_KERNEL_H */
