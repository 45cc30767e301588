/* core_dot.c: a dot on the precompiled core with its epilogue as a program (see core_dot.h).
 * A program is a list of instructions over registers that each hold up to NV ymm vectors of a
 * register tile (the AVX2 core's whole 6 x 16 f32 tile, half of the AVX-512 core's 8 x 32), run one
 * instruction at a time over them: a few dozen vector operations per MR x NR x kc FMAs. 256-bit
 * vectors for both cores: AVX-512 hosts run them at full rate, and one copy of the programs (their
 * tanh, bf16 rounding) serves both. Like gemm_core.c, compiled with a target attribute and run
 * only where gemm_core_runs_here. A program that is a chain (each op takes the value before it
 * and leaves: is_chain) runs a row at a time with its vectors in registers (epi_chain), the same
 * operations; TJIT_GEMM_CORE=vm keeps every program on the register file, to compare the two.
 */
#include "codegen/core_dot.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/gemm_amx.h"
#include "codegen/llvm_math.h"
#include "codegen/matmul.h"
#include "ir/ir.h"
#include "runtime/error.h"

#define CORE __attribute__((target("avx2,fma")))
enum { NV = 16 }; /* vectors a register holds: rows of the tile at a time, as many as fit */

enum {
  MAX_INS = 64, /* an epilogue has at most CG_EPI_MAX_OPS ops, each with up to 3 loads */
};

typedef enum vm_op {
  VM_ACC,    /* the finished sums */
  VM_CONST,  /* k in every lane */
  VM_SCALAR, /* element 0 of read `read` in every lane */
  VM_COLS,   /* read `read` along the columns ([N], a broadcast bias) */
  VM_MAT,    /* read `read` at the tile's rows and columns ([rows, N]) */
  VM_ADD, VM_SUB, VM_MUL, VM_DIV, VM_MAX, VM_MIN, VM_NEG, VM_ABS,
  VM_CMP,    /* all-ones lanes where `cmp` holds (ordered, unordered for ne) */
  VM_SELECT, /* a where c is all-ones, else b */
  VM_TANH,   /* f32 only: llvm_math.c's tanh, operation for operation */
  VM_ROWS,   /* post ops: read `read` at the row ([rows], one value per row of the output) */
  VM_SQRT,
  VM_RSQRT,  /* post ops only: 1 / sqrt in double, rounded once, as emit_llvm.c's */
} vm_op;

typedef struct vm_ins {
  uint8_t op, cmp;
  int8_t a, b, c; /* operand registers */
  int8_t read;
  double k;
} vm_ins;

/* Register r is the result of instruction r. */
struct core_dot {
  gemm_core_plan plan;
  bool bf16;            /* bf16 operands and output (sums and program in f32) */
  gemm_core_sums sums;  /* bf16: where the core keeps partial sums */
  int es;       /* of the compute type: 4 or 8 */
  int64_t n;    /* the output's columns */
  int n_ins;    /* 0: no epilogue */
  int root;
  vm_ins ins[MAX_INS];
  /* a reducing epilogue (cg_epi_plan.reduces): root's values are summed over each row's valid
     columns, tile after tile in column order, into bufs[2 + red_read] (a partial row sum until
     the row's last tile); then the post program, one row at a time (register 0: the sum), makes
     the row's output of it */
  bool reduces;
  /* an f32 or bf16 program epi_chain runs (is_chain): its ops after the sums, in order, each
     operand a leaf's register or -1 for the value before it; mats: the leaves read per row */
  bool chain;
  bool chain512; /* a bf16 chain epi_chain runs on zmm (chain_tile512) */
  int n_steps, n_mats;
  struct chain_step {
    uint8_t op;
    int8_t a, b;
  } steps[MAX_INS];
  int8_t mats[MAX_INS];
  int red_read, n_post, post_root;
  vm_ins post[MAX_INS];
};

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- building ---- */

static int op_index(const cg_epi_plan *pl, ir_ref v) {
  for (uint32_t i = 0; i < pl->n_ops; i++)
    if (pl->ops[i] == v) return (int)i;
  return -1;
}

static int read_index(const cg_epi_plan *pl, ir_ref v) {
  for (uint32_t i = 0; i < pl->n_reads; i++)
    if (pl->reads[i] == v) return (int)i;
  return -1;
}

/* Appends an instruction; its register, or -1 when the program is full. */
static int emit(core_dot *c, vm_ins in) {
  if (c->n_ins >= MAX_INS) return -1;
  c->ins[c->n_ins] = in;
  return c->n_ins++;
}

static int emit_post(core_dot *c, vm_ins in) {
  if (c->n_post >= MAX_INS) return -1;
  c->post[c->n_post] = in;
  return c->n_post++;
}

static const uint8_t arith[IR_N_OPS] = {
    [IR_ADD] = VM_ADD, [IR_SUB] = VM_SUB, [IR_MUL] = VM_MUL, [IR_DIV] = VM_DIV,
    [IR_MAX] = VM_MAX, [IR_MIN] = VM_MIN, [IR_NEG] = VM_NEG, [IR_ABS] = VM_ABS,
    [IR_SQRT] = VM_SQRT, [IR_RSQRT] = VM_RSQRT};

static bool is_unary(uint8_t op) {
  return op == VM_NEG || op == VM_ABS || op == VM_SQRT || op == VM_RSQRT;
}

/* The register of value v as an operand of an elementwise op (a read is loaded at the tile's
   rows and columns, as the generated epilogue does); -1: not one the programs can take. */
static int operand(core_dot *c, const cg_epi_plan *pl, const int *reg, ir_ref v, jit_dtype want) {
  int oi = op_index(pl, v);
  if (oi >= 0) return reg[oi];
  int ri = read_index(pl, v);
  if (ri < 0 || ir_type_of(pl->f, v)->dtype != want) return -1;
  return emit(c, (vm_ins){.op = VM_MAT, .read = (int8_t)ri});
}

static int post_index(const cg_epi_plan *pl, ir_ref v) {
  for (uint32_t i = 0; i < pl->n_post; i++)
    if (pl->post[i] == v) return (int)i;
  return -1;
}

/* The register of v as an operand of a post op: the sum, an earlier post op, or a read of one
   value per row; -1: none the programs take. */
static int post_operand(core_dot *c, const cg_epi_plan *pl, const int *reg, ir_ref v,
                        jit_dtype want) {
  if (v == pl->reduce) return 0;
  int oi = post_index(pl, v);
  if (oi >= 0) return reg[oi];
  int ri = read_index(pl, v);
  if (ri < 0 || ir_type_of(pl->f, v)->dtype != want) return -1;
  return emit_post(c, (vm_ins){.op = VM_ROWS, .read = (int8_t)ri});
}

/* The instruction of arithmetic op in (arith[in->op] != 0) in the tile program or, post, in the
   post program; its register, or -1. */
static int emit_arith(core_dot *c, const cg_epi_plan *pl, const int *reg, const ir_ins *in,
                      jit_dtype dt, bool post) {
  bool unary = is_unary(arith[in->op]);
  if (in->n_args != (unary ? 1u : 2u)) return -1;
  int a = post ? post_operand(c, pl, reg, in->args[0], dt) : operand(c, pl, reg, in->args[0], dt);
  int b = unary ? a
          : post ? post_operand(c, pl, reg, in->args[1], dt)
                 : operand(c, pl, reg, in->args[1], dt);
  if (a < 0 || b < 0) return -1;
  vm_ins vi = {.op = arith[in->op], .a = (int8_t)a, .b = (int8_t)b};
  return post ? emit_post(c, vi) : emit(c, vi);
}

static bool build_program(core_dot *c, const cg_epi_plan *pl, jit_dtype dt) {
  int reg[CG_EPI_MAX_OPS];
  const ir_func *f = pl->f;
  for (uint32_t i = 0; i < pl->n_ops; i++) {
    ir_ref v = pl->ops[i];
    const ir_ins *in = &f->ins[v];
    jit_dtype d = ir_type_of(f, v)->dtype;
    int r = -1;
    if (v == pl->dot) {
      r = emit(c, (vm_ins){.op = VM_ACC});
    } else if (in->op == IR_CONST) {
      /* a bool const would need a mask register; none of the planned patterns makes one */
      if (d == dt) r = emit(c, (vm_ins){.op = VM_CONST, .k = in->attr.value});
    } else if (in->op == IR_BROADCAST) {
      int ai = op_index(pl, in->args[0]), ri = read_index(pl, in->args[0]);
      if (ai >= 0) r = reg[ai];
      else if (ri >= 0 && d == dt && ir_type_of(f, in->args[0])->dtype == dt)
        r = emit(c, (vm_ins){.op = ir_type_of(f, in->args[0])->rank == 0 ? VM_SCALAR : VM_COLS,
                             .read = (int8_t)ri});
    } else if (in->op == IR_CMP) {
      int a = operand(c, pl, reg, in->args[0], dt), b = operand(c, pl, reg, in->args[1], dt);
      if (ir_type_of(f, in->args[0])->dtype == dt && a >= 0 && b >= 0 && in->attr.cmp < 6)
        r = emit(c, (vm_ins){.op = VM_CMP, .cmp = (uint8_t)in->attr.cmp, .a = (int8_t)a,
                             .b = (int8_t)b});
    } else if (in->op == IR_SELECT) {
      int k = op_index(pl, in->args[0]); /* the condition: a CMP of the epilogue */
      int a = operand(c, pl, reg, in->args[1], dt), b = operand(c, pl, reg, in->args[2], dt);
      if (d == dt && k >= 0 && reg[k] >= 0 && c->ins[reg[k]].op == VM_CMP && a >= 0 && b >= 0)
        r = emit(c, (vm_ins){.op = VM_SELECT, .a = (int8_t)a, .b = (int8_t)b,
                             .c = (int8_t)reg[k]});
    } else if (in->op == IR_TANH && d == dt && (dt == JIT_F32 || dt == JIT_BF16)) {
      int a = operand(c, pl, reg, in->args[0], dt);
      if (a >= 0) r = emit(c, (vm_ins){.op = VM_TANH, .a = (int8_t)a});
    } else if (in->op < IR_N_OPS && arith[in->op] && arith[in->op] != VM_RSQRT && d == dt) {
      r = emit_arith(c, pl, reg, in, dt, false);
    }
    if (r < 0) return false;
    reg[i] = r;
  }
  int ri = op_index(pl, pl->root);
  if (ri < 0 || c->ins[reg[ri]].op == VM_CMP) return false;
  c->root = reg[ri];
  return true;
}

/* A value a chain reads rather than computes: once per tile (a const, a scalar, a column read)
   or once per row (a [rows, N] read). */
static bool is_leaf(uint8_t op) {
  return op == VM_CONST || op == VM_SCALAR || op == VM_COLS || op == VM_MAT;
}

/* Whether an f32 or bf16 dot's program is a chain: the sums, then ops that each take the value
   before them (as one operand or both) and leaves (consts, scalars, column reads, [rows, N]
   reads: a bias, a scale, a target), ending at the root, which a reducing epilogue sums over the
   row; its steps go to c->steps. TJIT_GEMM_CORE=vm runs every program on epi_f32 (to compare). */
static bool is_chain(core_dot *c) {
  c->n_steps = c->n_mats = 0;
  const char *env = getenv("TJIT_GEMM_CORE");
  if (c->es != 4 || c->n_ins < 1 || (env && strcmp(env, "vm") == 0)) return false;
  int value = -1;
  for (int r = 0; r < c->n_ins; r++) {
    const vm_ins *in = &c->ins[r];
    if (is_leaf(in->op)) {
      if (in->op == VM_MAT) c->mats[c->n_mats++] = (int8_t)r;
      continue;
    }
    switch ((vm_op)in->op) {
    case VM_ACC:
      if (value >= 0) return false;
      break;
    case VM_ADD:
    case VM_SUB:
    case VM_MUL:
    case VM_DIV:
    case VM_MAX:
    case VM_MIN: {
      bool a_value = in->a == value, b_value = in->b == value;
      if (value < 0 || !(a_value || b_value)) return false;
      if ((!a_value && !is_leaf(c->ins[in->a].op)) || (!b_value && !is_leaf(c->ins[in->b].op)))
        return false;
      break;
    }
    case VM_NEG:
    case VM_ABS:
    case VM_SQRT:
    case VM_TANH:
      if (value < 0 || in->a != value) return false;
      break;
    default: return false;
    }
    if (in->op != VM_ACC)
      c->steps[c->n_steps++] = (struct chain_step){
          .op = in->op, .a = (int8_t)(in->a == value ? -1 : in->a),
          .b = (int8_t)(is_unary(in->op) || in->op == VM_TANH || in->b == value ? -1 : in->b)};
    value = r;
  }
  return value == c->root;
}

/* The program of a reducing epilogue's post ops: arithmetic on each row's sum, consts, scalars
   and per-row reads. */
static bool build_post(core_dot *c, const cg_epi_plan *pl, jit_dtype dt) {
  int reg[CG_EPI_MAX_OPS];
  const ir_func *f = pl->f;
  c->reduces = true;
  c->red_read = (int)pl->n_reads;
  emit_post(c, (vm_ins){.op = VM_ACC});
  for (uint32_t i = 0; i < pl->n_post; i++) {
    ir_ref v = pl->post[i];
    const ir_ins *in = &f->ins[v];
    jit_dtype d = ir_type_of(f, v)->dtype;
    int r = -1;
    if (d != dt) return false;
    if (in->op == IR_CONST) {
      r = emit_post(c, (vm_ins){.op = VM_CONST, .k = in->attr.value});
    } else if (in->op == IR_BROADCAST) {
      int ai = post_index(pl, in->args[0]), ri = read_index(pl, in->args[0]);
      if (ai >= 0) r = reg[ai];
      else if (ri >= 0 && ir_type_of(f, in->args[0])->rank == 0 &&
               ir_type_of(f, in->args[0])->dtype == dt)
        r = emit_post(c, (vm_ins){.op = VM_SCALAR, .read = (int8_t)ri});
    } else if (in->op < IR_N_OPS && arith[in->op]) {
      r = emit_arith(c, pl, reg, in, dt, true);
    }
    if (r < 0) return false;
    reg[i] = r;
  }
  c->post_root = pl->out == pl->reduce ? 0 : reg[pl->n_post - 1];
  return true;
}

jit_status core_dot_build(const cg_matmul_desc *d, const cg_epi_plan *pl, core_dot **out) {
  *out = NULL;
  gemm_core_plan p;
  gemm_core_sums sums = {0, 0, 0, 0, 0};
  bool bf16 = d->lhs.dtype == JIT_BF16;
  if (!gemm_core_runs_here(d->vec_bytes) ||
      !(bf16 ? cg_matmul_core_plan_bf16(d, &p, &sums) : cg_matmul_core_plan(d, &p)))
    return JIT_OK;
  core_dot *c = calloc(1, sizeof *c);
  if (!c) return jit_error(JIT_ENOMEM, "jit_call: out of memory planning a dot");
  c->plan = p;
  c->bf16 = bf16;
  c->sums = sums;
  if (sums.pairs && !gemm_core_pairs_run_here()) c->sums.pairs = 0;
  if (sums.amx == GEMM_AMX_HW && !gemm_amx_runs_here()) c->sums.amx = GEMM_AMX_OFF;
  c->es = bf16 ? 4 : (int)jit_dtype_size(d->lhs.dtype);
  c->n = p.N;
  if (pl && (!build_program(c, pl, d->lhs.dtype) ||
             (pl->reduces && (bf16 || !build_post(c, pl, d->lhs.dtype))))) {
    free(c);
    return JIT_OK;
  }
  if (bf16 && !pl) { /* the sums still become bf16: a program of the dot alone */
    c->ins[0] = (vm_ins){.op = VM_ACC};
    c->n_ins = 1;
    c->root = 0;
  }
  c->chain = is_chain(c);
  c->chain512 = c->chain && bf16 && c->n_steps && p.vec_bytes == 64 && d->bf16_cvt &&
                gemm_core_pairs_run_here();
  for (int i = 0; i < c->n_steps; i++)
    if (c->steps[i].op == VM_TANH) c->chain512 = false; /* tanh_f32 is 8 lanes */
  *out = c;
  return JIT_OK;
}

void core_dot_free(core_dot *c) { free(c); }

const gemm_core_plan *core_dot_plan(const core_dot *c) { return &c->plan; }

void core_dot_print(const core_dot *c, const char *name, FILE *out) {
  static const char *const names[] = {"acc", "const", "scalar", "cols", "mat",    "add",
                                      "sub", "mul",   "div",    "max",  "min",    "neg",
                                      "abs", "cmp",   "select", "tanh", "rows", "sqrt",
                                      "rsqrt"};
  static const char *const cmps[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  const gemm_core_plan *p = &c->plan;
  const char *kind = !c->bf16                          ? (c->es == 4 ? "f32" : "f64")
                     : c->sums.amx == GEMM_AMX_HW       ? "bf16 (AMX tiles, f32 sums)"
                     : c->sums.amx == GEMM_AMX_MODEL    ? "bf16 (AMX tiles modelled in C, f32 sums)"
                     : c->sums.pairs                    ? "bf16 (vdpbf16ps, f32 sums)"
                                                        : "bf16 (f32 micro-kernel, f32 sums)";
  fprintf(out, "; %s: %s dot [%lld x %lld x %lld] x %lld on the precompiled core (gemm_core.c),"
          " no generated code; epilogue program:%s\n", name, kind,
          (long long)p->M, (long long)p->N, (long long)p->K, (long long)p->B,
          c->n_ins ? "" : " none");
  for (int part = 0; part < 1 + c->reduces; part++) {
    const vm_ins *ins = part ? c->post : c->ins;
    int n = part ? c->n_post : c->n_ins, root = part ? c->post_root : c->root;
    if (part)
      fprintf(out, "; r%d summed over each row's columns into read%d, then per row:\n", c->root,
              c->red_read);
    for (int r = 0; r < n; r++) {
      const vm_ins *in = &ins[r];
      fprintf(out, ";   %s%d = %s", part ? "s" : "r", r, part && r == 0 ? "sum" : names[in->op]);
      const char *p = part ? "s" : "r";
      switch ((vm_op)in->op) {
      case VM_ACC: break;
      case VM_CONST: fprintf(out, " %.17g", in->k); break;
      case VM_SCALAR:
      case VM_COLS:
      case VM_ROWS:
      case VM_MAT: fprintf(out, " read%d", in->read); break;
      case VM_NEG:
      case VM_ABS:
      case VM_SQRT:
      case VM_RSQRT:
      case VM_TANH: fprintf(out, " %s%d", p, in->a); break;
      case VM_CMP: fprintf(out, " %s r%d, r%d", cmps[in->cmp], in->a, in->b); break;
      case VM_SELECT: fprintf(out, " r%d, r%d, r%d", in->c, in->a, in->b); break;
      default: fprintf(out, " %s%d, %s%d", p, in->a, p, in->b); break;
      }
      fputs(r == root && (part || !c->reduces) ? "  (stored)\n" : "\n", out);
    }
  }
  if (c->chain)
    fprintf(out, "; a chain: each row's vectors go through the ops in registers%s\n",
            c->chain512 ? " (zmm, rounded by vcvtneps2bf16)" : "");
}

/* ---- running ---- */

/* llvm_math.c's emit_tanh for f32, the same operations in the same order (its constants rounded
   to float as its kf does), so the same bits (test_exec compares them): see there for the
   method and its error. */

CORE static __m256 poly_f32(__m256 x, const double *c, int n) {
  __m256 r = _mm256_set1_ps((float)c[n - 1]);
  for (int i = n - 2; i >= 0; i--) r = _mm256_fmadd_ps(r, x, _mm256_set1_ps((float)c[i]));
  return r;
}

CORE static __m256 tanh_f32(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f), round_m = _mm256_set1_ps(12582912.0f);
  __m256 a = _mm256_andnot_ps(sign, x), a2 = _mm256_mul_ps(a, a);
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, a2), poly_f32(a2, cg_tanh32_p, 4), a);
  __m256 ac = _mm256_blendv_ps(a, _mm256_set1_ps(9.125f),
                               _mm256_cmp_ps(a, _mm256_set1_ps(9.125f), _CMP_GT_OQ));
  __m256 t = _mm256_fmadd_ps(ac, _mm256_set1_ps((float)(-2 * 1.4426950216293335)), round_m);
  __m256 nf = _mm256_sub_ps(t, round_m);
  __m256i mn = _mm256_sub_epi32(_mm256_castps_si256(round_m), _mm256_castps_si256(t));
  __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps((float)(0.5 * 0.6931471824645996)), ac);
  __m256 p = _mm256_fmadd_ps(r, poly_f32(r, cg_tanh32_e, 6), _mm256_set1_ps(1.0f));
  __m256 two_n = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(mn, _mm256_set1_epi32(127)), 23)); /* 2^-n */
  __m256 q = _mm256_div_ps(p, _mm256_add_ps(p, two_n));
  __m256 big = _mm256_fmadd_ps(q, _mm256_set1_ps(-2.0f), _mm256_set1_ps(1.0f));
  __m256 y = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.55f), _CMP_LT_OQ));
  return _mm256_or_ps(_mm256_andnot_ps(sign, y), _mm256_and_ps(sign, x)); /* copysign */
}

/* f64 programs have no tanh (the build refuses it) */
CORE static __m256d tanh_f64(__m256d x) { return x; }

/* bf16 values in f32 lanes, as matmul.c and emit_llvm.c's round_to: rounded to nearest even, a
   NaN quieted (bit 6 of its upper half set). */
CORE static __m256 round_bf16(__m256 x) {
  __m256i u = _mm256_castps_si256(x), hi = _mm256_srli_epi32(u, 16);
  __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
}

/* 8 bf16 at p widened; lanes outside mask (a partial tile) are zeros and never read */
CORE static __m256 load_bf16(const uint16_t *p, __m256i mask, bool whole) {
  if (whole)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
  _Alignas(32) int32_t m[8];
  _Alignas(32) float v[8];
  _mm256_store_si256((__m256i *)m, mask);
  for (int l = 0; l < 8; l++) v[l] = m[l] ? ir_bf16_to_f32(p[l]) : 0.0f;
  return _mm256_load_ps(v);
}

/* x (already bf16 values, or NaN) as bf16 at p, the lanes in mask */
CORE static void store_bf16(uint16_t *p, __m256i mask, bool whole, __m256 x) {
  __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(round_bf16(x)), 16);
  __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
  if (whole) {
    _mm_storeu_si128((__m128i *)p, h);
    return;
  }
  _Alignas(32) int32_t m[8];
  _Alignas(16) uint16_t v[8];
  _mm256_store_si256((__m256i *)m, mask);
  _mm_store_si128((__m128i *)v, h);
  for (int l = 0; l < 8; l++)
    if (m[l]) p[l] = v[l];
}

/* 8 bf16 values (each op's result rounded, or NaN quieted by that rounding) at p: their upper
   halves, no rounding again */
CORE static void store_bf16_exact(uint16_t *p, __m256 x) {
  __m256i hi = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
  _mm_storeu_si128((__m128i *)p,
                   _mm_packus_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
}

/* The program of the dot this thread runs (core_dot_run), for the core's epilogue callback. */
static _Thread_local const core_dot *running;

/* A reducing epilogue's pieces: a vector's lanes summed in a fixed tree (halves, then quarters,
   ...), and the post program on one row's sum, each op the IEEE operation of the row kernel it
   replaces (max and min as llvm.maximum and llvm.minimum). */
CORE static float hsum_f32(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

CORE static double hsum_f64(__m256d x) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

#define DEFINE_POST(T, SUF, ABS, SQRT)                                                             \
  static T post_max_##SUF(T x, T y) {                                                              \
    if (x != x || y != y) return x + y;                                                            \
    if (x == y) return signbit(x) ? y : x;                                                         \
    return x > y ? x : y;                                                                          \
  }                                                                                                \
  static T post_min_##SUF(T x, T y) {                                                              \
    if (x != x || y != y) return x + y;                                                            \
    if (x == y) return signbit(x) ? x : y;                                                         \
    return x < y ? x : y;                                                                          \
  }                                                                                                \
  static T post_##SUF(const core_dot *c, void *const *bufs, int64_t row, T sum) {                  \
    T r[MAX_INS];                                                                                  \
    for (int i = 0; i < c->n_post; i++) {                                                          \
      const vm_ins *in = &c->post[i];                                                              \
      switch ((vm_op)in->op) {                                                                     \
      case VM_ACC: r[i] = sum; break;                                                              \
      case VM_CONST: r[i] = (T)in->k; break;                                                       \
      case VM_SCALAR: r[i] = *(const T *)bufs[2 + in->read]; break;                                \
      case VM_ROWS: r[i] = ((const T *)bufs[2 + in->read])[row]; break;                            \
      case VM_ADD: r[i] = r[in->a] + r[in->b]; break;                                              \
      case VM_SUB: r[i] = r[in->a] - r[in->b]; break;                                              \
      case VM_MUL: r[i] = r[in->a] * r[in->b]; break;                                              \
      case VM_DIV: r[i] = r[in->a] / r[in->b]; break;                                              \
      case VM_MAX: r[i] = post_max_##SUF(r[in->a], r[in->b]); break;                               \
      case VM_MIN: r[i] = post_min_##SUF(r[in->a], r[in->b]); break;                               \
      case VM_NEG: r[i] = -r[in->a]; break;                                                        \
      case VM_ABS: r[i] = ABS(r[in->a]); break;                                                    \
      case VM_SQRT: r[i] = SQRT(r[in->a]); break;                                                  \
      case VM_RSQRT: r[i] = (T)(1.0 / sqrt((double)r[in->a])); break;                              \
      default: r[i] = 0; break; /* no post program has the others (build_post) */                 \
      }                                                                                            \
    }                                                                                              \
    return r[c->post_root];                                                                        \
  }

DEFINE_POST(float, f32, fabsf, sqrtf)
DEFINE_POST(double, f64, fabs, sqrt)

/* One program over a tile, for f32 (8 lanes) and f64 (4 lanes): tile rows are NR = nvr W long
   (nvr: 2 or 4 ymm); the program runs over groups of NV / nvr rows, where vector j = i nvr + v
   is row g0 + i, columns v W ... Lanes past the row's valid columns are loaded as zeros
   (masked loads never touch them) and never stored; rows past `rows` are not computed. */
#define DEFINE_EPI(T, SUF, V, VI, W, LOADU, LOADV, LOAD1, STOREV, ROUND, SET1, ADD, SUB,          \
                   MUL, DIV, MAXV, MINV, AND, OR, XOR, ANDNOT, CMP, BLENDV, CASTI, SQRTV)           \
  CORE static V max_##SUF(V x, V y) { /* llvm.maximum: NaN if either is, +0 over -0 */             \
    V m = BLENDV(MAXV(x, y), AND(x, y), CMP(x, y, _CMP_EQ_OQ));                                    \
    return BLENDV(m, ADD(x, y), CMP(x, y, _CMP_UNORD_Q));                                          \
  }                                                                                                \
  CORE static V min_##SUF(V x, V y) {                                                              \
    V m = BLENDV(MINV(x, y), OR(x, y), CMP(x, y, _CMP_EQ_OQ));                                     \
    return BLENDV(m, ADD(x, y), CMP(x, y, _CMP_UNORD_Q));                                          \
  }                                                                                                \
  CORE static V cmp_##SUF(V x, V y, int cmp) {                                                     \
    switch (cmp) {                                                                                 \
    case 0: return CMP(x, y, _CMP_EQ_OQ);                                                          \
    case 1: return CMP(x, y, _CMP_NEQ_UQ);                                                         \
    case 2: return CMP(x, y, _CMP_LT_OQ);                                                          \
    case 3: return CMP(x, y, _CMP_LE_OQ);                                                          \
    case 4: return CMP(x, y, _CMP_GT_OQ);                                                          \
    default: return CMP(x, y, _CMP_GE_OQ);                                                         \
    }                                                                                              \
  }                                                                                                \
  CORE static void epi_##SUF(void *const *bufs, const void *tile_, int64_t row, int64_t rows,      \
                             int64_t col) {                                                        \
    const core_dot *c = running;                                                                   \
    const T *tile = tile_;                                                                         \
    int nr = (int)GEMM_CORE_NR(c->plan.vec_bytes, (int)sizeof(T)), nvr = nr / W;                   \
    int64_t n = c->n, cols = min64(nr, n - col);                                                   \
    VI mask[4];                                                                                    \
    for (int v = 0; v < nvr; v++) {                                                                \
      VI lanes = W == 8 ? _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) : _mm256_setr_epi64x(0, 1, 2, 3); \
      mask[v] = W == 8 ? _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(cols - v * W)), lanes)         \
                       : _mm256_cmpgt_epi64(_mm256_set1_epi64x(cols - v * W), lanes);            \
    }                                                                                              \
    bool whole = cols == nr;                                                                       \
    prefetch_next_strip(c, bufs, row, rows, col, nr);                                              \
    V reg[MAX_INS][NV];                                                                            \
    /* where each register's vectors are read: its own, or (the sums of an f32/f64 dot) the       \
       tile itself, whose group of rows is NV whole vectors, 64-byte aligned (DEFINE_TILE) */     \
    const V *src[MAX_INS];                                                                         \
    for (int r = 0; r < c->n_ins; r++) src[r] = reg[r];                                            \
    int group = NV / nvr; /* rows at a time; no j / nvr below: idiv was a tenth of a dot */        \
    for (int64_t g0 = 0; g0 < rows; g0 += group) {                                                 \
      int grows = (int)min64(group, rows - g0), nvec = grows * nvr;                                \
      for (int r = 0; r < c->n_ins; r++) {                                                         \
        const vm_ins *in = &c->ins[r];                                                             \
        V *o = reg[r];                                                                             \
        const V *a = src[in->a], *b = src[in->b];                                                  \
        switch ((vm_op)in->op) {                                                                   \
        case VM_ACC:                                                                               \
          if (!c->bf16) {                                                                          \
            src[r] = (const V *)(tile + g0 * nr);                                                  \
            break;                                                                                 \
          }                                                                                        \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(LOADU(tile + g0 * nr + j * W));              \
          break;                                                                                   \
        case VM_CONST:                                                                             \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(SET1((T)in->k));                             \
          break;                                                                                   \
        case VM_SCALAR:                                                                            \
          for (int j = 0; j < nvec; j++) o[j] = SET1(LOAD1(bufs[2 + in->read]));                   \
          break;                                                                                   \
        case VM_COLS: {                                                                            \
          const void *p = bufs[2 + in->read];                                                      \
          V cv[4];                                                                                 \
          for (int v = 0; v < nvr; v++) cv[v] = LOADV(p, col + v * W, mask[v], whole);             \
          for (int j = 0; j < nvec; j += nvr)                                                      \
            for (int v = 0; v < nvr; v++) o[j + v] = cv[v];                                        \
          break;                                                                                   \
        }                                                                                          \
        case VM_MAT: {                                                                             \
          const void *p = bufs[2 + in->read];                                                      \
          for (int i = 0; i < grows; i++)                                                          \
            for (int v = 0; v < nvr; v++)                                                          \
              o[i * nvr + v] = LOADV(p, (row + g0 + i) * n + col + v * W, mask[v], whole);         \
          break;                                                                                   \
        }                                                                                          \
        case VM_ADD:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(ADD(a[j], b[j]));                            \
          break;                                                                                   \
        case VM_SUB:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(SUB(a[j], b[j]));                            \
          break;                                                                                   \
        case VM_MUL:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(MUL(a[j], b[j]));                            \
          break;                                                                                   \
        case VM_DIV:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(DIV(a[j], b[j]));                            \
          break;                                                                                   \
        case VM_MAX:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = max_##SUF(a[j], b[j]);                             \
          break;                                                                                   \
        case VM_MIN:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = min_##SUF(a[j], b[j]);                             \
          break;                                                                                   \
        case VM_NEG:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = XOR(a[j], SET1((T)-0.0));                          \
          break;                                                                                   \
        case VM_ABS:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = ANDNOT(SET1((T)-0.0), a[j]);                       \
          break;                                                                                   \
        case VM_CMP:                                                                               \
          for (int j = 0; j < nvec; j++) o[j] = cmp_##SUF(a[j], b[j], in->cmp);                    \
          break;                                                                                   \
        case VM_SELECT:                                                                            \
          for (int j = 0; j < nvec; j++) o[j] = BLENDV(b[j], a[j], src[in->c][j]);                 \
          break;                                                                                   \
        case VM_TANH:                                                                              \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(tanh_##SUF(a[j]));                           \
          break;                                                                                   \
        case VM_SQRT:                                                                              \
          for (int j = 0; j < nvec; j++) o[j] = ROUND(SQRTV(a[j]));                                \
          break;                                                                                   \
        case VM_ROWS:                                                                              \
        case VM_RSQRT: break; /* post programs only */                                             \
        }                                                                                          \
      }                                                                                            \
      void *out = bufs[c->plan.out_buf];                                                           \
      const V *y = src[c->root];                                                                   \
      if (c->reduces) { /* invalid lanes count as +0, the sum's identity */                        \
        T *sums = bufs[2 + c->red_read];                                                           \
        for (int i = 0; i < grows; i++) {                                                          \
          V s = AND(y[i * nvr], CASTI(mask[0]));                                                   \
          for (int v = 1; v < nvr; v++) s = ADD(s, AND(y[i * nvr + v], CASTI(mask[v])));           \
          int64_t at = row + g0 + i;                                                               \
          T acc = (col == 0 ? (T)0 : sums[at]) + hsum_##SUF(s);                                    \
          sums[at] = col + nr >= n ? post_##SUF(c, bufs, at, acc) : acc;                           \
        }                                                                                          \
        continue;                                                                                  \
      }                                                                                            \
      for (int i = 0; i < grows; i++)                                                              \
        for (int v = 0; v < nvr; v++)                                                              \
          STOREV(out, (row + g0 + i) * n + col + v * W, mask[v], whole, y[i * nvr + v]);           \
    }                                                                                              \
  }

/* The [rows, N] reads of the tile in the next strip (same rows, the next nr columns), into L2.
   The core runs an MC block's tiles down one strip, then the next strip (gemm_core.c), so that
   tile comes mc / MR tiles later. Unfetched, each tile's rows came from DRAM when its sums were
   done: (x @ w) * h, [512, 1024] x [1024, 4096] f32 on the AVX2 core, one thread, took 54-55 ms
   with this against 56-59 (the dot alone 50), faster in 44 of 60 calls alternating in one
   process; on the AVX-512 core the difference is within noise. */
static void prefetch_next_strip(const core_dot *c, void *const *bufs, int64_t row, int64_t rows,
                                int64_t col, int nr) {
  int64_t next = col + nr, last = min64(next + nr, c->n) - 1;
  if (next >= c->n) return;
  size_t es = c->bf16 ? 2 : (size_t)c->es;
  for (int r = 0; r < c->n_ins; r++) {
    if (c->ins[r].op != VM_MAT) continue;
    const char *p = bufs[2 + c->ins[r].read];
    for (int64_t i = 0; i < rows; i++) {
      const char *at = p + (size_t)((row + i) * c->n) * es;
      __builtin_prefetch(at + (size_t)next * es, 0, 2);
      __builtin_prefetch(at + (size_t)last * es, 0, 2);
    }
  }
}

/* Element access of the program's reads and output: element idx of the buffer at base, a vector
   of W (the lanes in mask of a partial tile) or one; f32 programs of a bf16 dot (c->bf16) read
   and write bf16 and round what each op computes to bf16 as the generated epilogue does. */
#define F32_LOADV(base, idx, m, whole)                                                             \
  (c->bf16 ? load_bf16((const uint16_t *)(base) + (idx), m, whole)                                 \
   : (whole) ? _mm256_loadu_ps((const float *)(base) + (idx))                                      \
             : _mm256_maskload_ps((const float *)(base) + (idx), m))
#define F32_LOAD1(base) (c->bf16 ? ir_bf16_to_f32(*(const uint16_t *)(base)) : *(const float *)(base))
#define F32_STOREV(base, idx, m, whole, x)                                                         \
  (c->bf16 ? store_bf16((uint16_t *)(base) + (idx), m, whole, x)                                   \
   : (whole) ? _mm256_storeu_ps((float *)(base) + (idx), x)                                        \
             : _mm256_maskstore_ps((float *)(base) + (idx), m, x))
#define F32_ROUND(x) (c->bf16 ? round_bf16(x) : (x))
#define F64_LOADV(base, idx, m, whole)                                                             \
  ((whole) ? _mm256_loadu_pd((const double *)(base) + (idx))                                       \
           : _mm256_maskload_pd((const double *)(base) + (idx), m))
#define F64_LOAD1(base) (*(const double *)(base))
#define F64_STOREV(base, idx, m, whole, x)                                                         \
  ((whole) ? _mm256_storeu_pd((double *)(base) + (idx), x)                                         \
           : _mm256_maskstore_pd((double *)(base) + (idx), m, x))
#define F64_ROUND(x) (x)

DEFINE_EPI(float, f32, __m256, __m256i, 8, _mm256_loadu_ps, F32_LOADV, F32_LOAD1, F32_STOREV,
           F32_ROUND, _mm256_set1_ps, _mm256_add_ps, _mm256_sub_ps,
           _mm256_mul_ps, _mm256_div_ps, _mm256_max_ps, _mm256_min_ps, _mm256_and_ps,
           _mm256_or_ps, _mm256_xor_ps, _mm256_andnot_ps, _mm256_cmp_ps, _mm256_blendv_ps,
           _mm256_castsi256_ps, _mm256_sqrt_ps)
DEFINE_EPI(double, f64, __m256d, __m256i, 4, _mm256_loadu_pd, F64_LOADV, F64_LOAD1, F64_STOREV,
           F64_ROUND, _mm256_set1_pd, _mm256_add_pd, _mm256_sub_pd,
           _mm256_mul_pd, _mm256_div_pd, _mm256_max_pd, _mm256_min_pd, _mm256_and_pd,
           _mm256_or_pd, _mm256_xor_pd, _mm256_andnot_pd, _mm256_cmp_pd, _mm256_blendv_pd,
           _mm256_castsi256_pd, _mm256_sqrt_pd)

/* A chain's whole tile, a row at a time, its vectors carried through the chain in registers:
   the same operations as epi_f32's (rounded to bf16 where it rounds) and a reduction's sums in
   its order, without its register file in memory, which made a bias + relu epilogue as slow as
   the AMX dot it follows and W6's loss a tenth of its dot. nvr: the row's vectors (2 or 4);
   bf16: the dot's kind (both constants where it is inlined). */
CORE static inline __attribute__((always_inline)) void chain_tile(
    const core_dot *c, const int nvr, const bool bf16, void *const *bufs, const float *tile,
    int64_t row, int64_t rows, int64_t col) {
  const int64_t nr = nvr * 8, n = c->n;
  const __m256i all = _mm256_set1_epi32(-1);
  __m256 leaf[MAX_INS][4];
  for (int r = 0; r < c->n_ins; r++) {
    const vm_ins *in = &c->ins[r];
    const void *p = bufs[2 + in->read];
    for (int v = 0; v < nvr; v++)
      switch ((vm_op)in->op) {
      case VM_CONST:
        leaf[r][v] = _mm256_set1_ps((float)in->k);
        if (bf16) leaf[r][v] = round_bf16(leaf[r][v]);
        break;
      case VM_SCALAR:
        leaf[r][v] =
            _mm256_set1_ps(bf16 ? ir_bf16_to_f32(*(const uint16_t *)p) : *(const float *)p);
        break;
      case VM_COLS:
        leaf[r][v] = bf16 ? load_bf16((const uint16_t *)p + col + v * 8, all, true)
                          : _mm256_loadu_ps((const float *)p + col + v * 8);
        break;
      default: break;
      }
  }
  if (c->n_mats) prefetch_next_strip(c, bufs, row, rows, col, (int)nr);
  for (int64_t i = 0; i < rows; i++) {
    int64_t at = (row + i) * n + col;
    for (int m = 0; m < c->n_mats; m++) {
      const void *p = bufs[2 + c->ins[c->mats[m]].read];
      _Pragma("GCC unroll 4") for (int v = 0; v < nvr; v++)
        leaf[c->mats[m]][v] = bf16 ? load_bf16((const uint16_t *)p + at + v * 8, all, true)
                                   : _mm256_loadu_ps((const float *)p + at + v * 8);
    }
    __m256 x[4];
    _Pragma("GCC unroll 4") for (int v = 0; v < nvr; v++) {
      x[v] = _mm256_loadu_ps(tile + i * nr + v * 8);
      if (bf16 && c->n_steps) x[v] = round_bf16(x[v]);
    }
    for (int s = 0; s < c->n_steps; s++) {
      const struct chain_step *st = &c->steps[s];
      _Pragma("GCC unroll 4") for (int v = 0; v < nvr; v++) {
        __m256 a = st->a < 0 ? x[v] : leaf[st->a][v], b = st->b < 0 ? x[v] : leaf[st->b][v], y;
        switch ((vm_op)st->op) {
        case VM_ADD: y = _mm256_add_ps(a, b); break;
        case VM_SUB: y = _mm256_sub_ps(a, b); break;
        case VM_MUL: y = _mm256_mul_ps(a, b); break;
        case VM_DIV: y = _mm256_div_ps(a, b); break;
        case VM_SQRT: y = _mm256_sqrt_ps(a); break;
        case VM_TANH: y = tanh_f32(a); break;
        case VM_MAX: x[v] = max_f32(a, b); continue;
        case VM_MIN: x[v] = min_f32(a, b); continue;
        case VM_NEG: x[v] = _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); continue;
        case VM_ABS: x[v] = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); continue;
        default: continue; /* not in a chain (is_chain) */
        }
        x[v] = bf16 ? round_bf16(y) : y;
      }
    }
    if (c->reduces) { /* epi_f32's sum: the row's vectors in order, the lanes in hsum's tree */
      __m256 s = x[0];
      _Pragma("GCC unroll 4") for (int v = 1; v < nvr; v++) s = _mm256_add_ps(s, x[v]);
      float *sums = bufs[2 + c->red_read];
      float acc = (col == 0 ? 0.0f : sums[row + i]) + hsum_f32(s);
      sums[row + i] = col + nr >= n ? post_f32(c, bufs, row + i, acc) : acc;
      continue;
    }
    void *out = bufs[c->plan.out_buf];
    _Pragma("GCC unroll 4") for (int v = 0; v < nvr; v++) {
      if (bf16 && c->n_steps) store_bf16_exact((uint16_t *)out + at + v * 8, x[v]);
      else if (bf16) store_bf16((uint16_t *)out + at + v * 8, all, true, x[v]);
      else _mm256_storeu_ps((float *)out + at + v * 8, x[v]);
    }
  }
}

/* ---- a bf16 chain on zmm (c->chain512: AVX-512 BF16 hosts) ----
   vcvtneps2bf16 rounds as round_bf16 does (to nearest even, a NaN quieted by bit 6 of its upper
   half) but flushes f32 denormal inputs to zero, so a vector with a denormal lane rounds the
   integer way; every other one is a single instruction where round_bf16 is eight. */
#define CORE512BF __attribute__((target("avx512f,avx512bf16,avx2,fma")))

CORE512BF static __m512 widen_bf16_512(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

CORE512BF static __m512 round_bf16_512(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000)) &
                       _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff));
  if (!denormal) return widen_bf16_512((__m256i)_mm512_cvtneps_pbh(x));
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i bias =
      _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), hi, _mm512_set1_epi32(0x40));
  return _mm512_castsi512_ps(_mm512_slli_epi32(r, 16));
}

/* llvm.maximum / llvm.minimum, as max_f32 and min_f32 */
CORE512BF static __m512 extreme_512(__m512 x, __m512 y, bool max) {
  __m512i xi = _mm512_castps_si512(x), yi = _mm512_castps_si512(y);
  __m512 m = max ? _mm512_max_ps(x, y) : _mm512_min_ps(x, y);
  __m512 tie = _mm512_castsi512_ps(max ? _mm512_and_si512(xi, yi) : _mm512_or_si512(xi, yi));
  m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ), m, tie);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q), m, _mm512_add_ps(x, y));
}

/* chain_tile for a bf16 dot's whole 32-column tiles with ops (c->n_steps), 16 lanes a vector:
   the same values */
CORE512BF static void chain_tile512(const core_dot *c, void *const *bufs, const float *tile,
                                    int64_t row, int64_t rows, int64_t col) {
  enum { NVR = 2 };
  const int64_t n = c->n;
  const __m512i sign = _mm512_set1_epi32(INT32_MIN);
  __m512 leaf[MAX_INS][NVR];
  for (int r = 0; r < c->n_ins; r++) {
    const vm_ins *in = &c->ins[r];
    const uint16_t *p = bufs[2 + in->read];
    for (int v = 0; v < NVR; v++)
      switch ((vm_op)in->op) {
      case VM_CONST: leaf[r][v] = round_bf16_512(_mm512_set1_ps((float)in->k)); break;
      case VM_SCALAR: leaf[r][v] = _mm512_set1_ps(ir_bf16_to_f32(*p)); break;
      case VM_COLS:
        leaf[r][v] = widen_bf16_512(_mm256_loadu_si256((const __m256i *)(p + col + v * 16)));
        break;
      default: break;
      }
  }
  if (c->n_mats) prefetch_next_strip(c, bufs, row, rows, col, 32);
  uint16_t *out = bufs[c->plan.out_buf];
  for (int64_t i = 0; i < rows; i++) {
    int64_t at = (row + i) * n + col;
    for (int m = 0; m < c->n_mats; m++) {
      const uint16_t *p = bufs[2 + c->ins[c->mats[m]].read];
      for (int v = 0; v < NVR; v++)
        leaf[c->mats[m]][v] =
            widen_bf16_512(_mm256_loadu_si256((const __m256i *)(p + at + v * 16)));
    }
    __m512 x[NVR];
    for (int v = 0; v < NVR; v++) x[v] = round_bf16_512(_mm512_loadu_ps(tile + i * 32 + v * 16));
    for (int s = 0; s < c->n_steps; s++) {
      const struct chain_step *st = &c->steps[s];
      for (int v = 0; v < NVR; v++) {
        __m512 a = st->a < 0 ? x[v] : leaf[st->a][v], b = st->b < 0 ? x[v] : leaf[st->b][v];
        __m512i ai = _mm512_castps_si512(a);
        switch ((vm_op)st->op) {
        case VM_ADD: x[v] = round_bf16_512(_mm512_add_ps(a, b)); break;
        case VM_SUB: x[v] = round_bf16_512(_mm512_sub_ps(a, b)); break;
        case VM_MUL: x[v] = round_bf16_512(_mm512_mul_ps(a, b)); break;
        case VM_DIV: x[v] = round_bf16_512(_mm512_div_ps(a, b)); break;
        case VM_SQRT: x[v] = round_bf16_512(_mm512_sqrt_ps(a)); break;
        case VM_MAX: x[v] = extreme_512(a, b, true); break;
        case VM_MIN: x[v] = extreme_512(a, b, false); break;
        case VM_NEG: x[v] = _mm512_castsi512_ps(_mm512_xor_si512(ai, sign)); break;
        case VM_ABS: x[v] = _mm512_castsi512_ps(_mm512_andnot_si512(sign, ai)); break;
        default: break; /* not in a chain512 (core_dot_build) */
        }
      }
    }
    /* bf16 values already (each op rounded): their upper halves */
    for (int v = 0; v < NVR; v++)
      _mm256_storeu_si256((__m256i *)(out + at + v * 16),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x[v]), 16)));
  }
}

/* Whole tiles of a chain (the core's 16 or 32 columns); edge tiles go to epi_f32. */
CORE static void epi_chain(void *const *bufs, const void *tile, int64_t row, int64_t rows,
                           int64_t col) {
  const core_dot *c = running;
  int64_t nr = GEMM_CORE_NR(c->plan.vec_bytes, 4);
  if (c->n - col < nr || (nr != 16 && nr != 32)) epi_f32(bufs, tile, row, rows, col);
  else if (nr == 32 && c->chain512) chain_tile512(c, bufs, tile, row, rows, col);
  else if (nr == 32 && c->bf16) chain_tile(c, 4, true, bufs, tile, row, rows, col);
  else if (nr == 32) chain_tile(c, 4, false, bufs, tile, row, rows, col);
  else if (c->bf16) chain_tile(c, 2, true, bufs, tile, row, rows, col);
  else chain_tile(c, 2, false, bufs, tile, row, rows, col);
}

void core_dot_run(const core_dot *c, void *const *bufs, int64_t rb, int64_t re) {
  const core_dot *was = running;
  running = c;
  if (c->bf16)
    tjit_gemm_core_bf16(&c->plan, &c->sums, bufs, rb, re, c->chain ? epi_chain : epi_f32);
  else if (c->es == 4)
    tjit_gemm_core_f32(&c->plan, bufs, rb, re, !c->n_ins ? NULL : c->chain ? epi_chain : epi_f32);
  else tjit_gemm_core_f64(&c->plan, bufs, rb, re, c->n_ins ? epi_f64 : NULL);
  running = was;
}
