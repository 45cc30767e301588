/* epilogue.c: a dot kernel's elementwise epilogue (bias add, activation, residual, ...) run in the
 * matmul's store through its epilogue callback, saving the separate loop kernel's pass over the
 * dot's output. Only patterns whose inputs index by (row, column) simply are planned; the executor
 * keeps the loop kernel for the rest. Ops are emitted with the loop kernels' scalar emission
 * (lp_emit_ew), on whole vectors where that gives what each lane would (vector_safe), else lane by
 * lane. */
#include "codegen/epilogue.h"

#include <string.h>

static int op_index(const cg_epi_plan *pl, ir_ref v) {
  for (uint32_t i = 0; i < pl->n_ops; i++)
    if (pl->ops[i] == v) return (int)i;
  return -1;
}

static bool add_read(cg_epi_plan *pl, ir_ref v) {
  for (uint32_t i = 0; i < pl->n_reads; i++)
    if (pl->reads[i] == v) return true;
  if (pl->n_reads == CG_EPI_MAX_READS) return false;
  pl->reads[pl->n_reads++] = v;
  return true;
}

static bool contains(const ir_ref *a, uint32_t n, ir_ref v) {
  for (uint32_t i = 0; i < n; i++)
    if (a[i] == v) return true;
  return false;
}

/* Whether v is one of kernel k's materialized reads (k NULL: taken to be). */
static bool is_read(const fz_kernel *k, ir_ref v) { return !k || contains(k->reads, k->n_reads, v); }

static bool same_dims(const ir_type *a, const ir_type *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Appends op v of a kernel to ops (*n of them), an epilogue over values of rt's shape: an
   elementwise op, a const, or a broadcast of a scalar (cols: or of an [N] vector along the
   columns); operands not in ops are reads (of rt's shape), which must be among the kernel's
   materialized `kreads` (NULL: any operand outside the kernel is one). A const operand not yet
   in ops is appended before v. False: no program or generated epilogue has a form for v. */
static bool add_op(cg_epi_plan *out, ir_ref *ops, uint32_t *n, ir_ref v, const ir_type *rt,
                   bool cols, const fz_kernel *kreads) {
  const ir_func *f = out->f;
  const ir_ins *in = &f->ins[v];
  if (*n >= CG_EPI_MAX_OPS) return false;
  if (v != out->dot && in->op != IR_CONST) {
    if (!same_dims(ir_type_of(f, v), rt)) return false;
    if (in->op == IR_BROADCAST) {
      ir_ref a = in->args[0];
      const ir_type *at = ir_type_of(f, a);
      if (kreads && f->ins[a].op == IR_CONST && at->rank == 0 && !contains(ops, *n, a) &&
          !add_op(out, ops, n, a, rt, cols, kreads))
        return false;
      if (contains(ops, *n, a)) {
        if (f->ins[a].op != IR_CONST) return false;
      } else {
        bool col = cols && at->rank == 1 && in->attr.dims.n == 1 && in->attr.dims.d[0] == rt->rank - 1;
        if (!(at->rank == 0 || col) || !is_read(kreads, a) || !add_read(out, a)) return false;
      }
    } else if (ir_op_flags[in->op] & IR_EW) {
      jit_dtype in_dt = ir_type_of(f, in->args[in->op == IR_SELECT ? 1 : 0])->dtype;
      if ((ir_op_flags[in->op] & IR_UNARY_F) && in->op != IR_FLOOR && !ir_dtype_is_float(in_dt))
        return false;
      for (uint32_t a = 0; a < in->n_args; a++) {
        ir_ref x = in->args[a];
        if (kreads && f->ins[x].op == IR_CONST && same_dims(ir_type_of(f, x), rt) &&
            !contains(ops, *n, x) && !add_op(out, ops, n, x, rt, cols, kreads))
          return false;
        if (contains(ops, *n, x) || (ops == out->post && x == out->reduce)) continue;
        if (!same_dims(ir_type_of(f, x), rt) || !is_read(kreads, x) || !add_read(out, x))
          return false;
      }
    } else {
      return false;
    }
  }
  if (*n >= CG_EPI_MAX_OPS) return false;
  ops[(*n)++] = v;
  return true;
}

/* The output's last dim is the matmul's N: exactly one free rhs dim (a conv in GEMM form has it:
   its out features). A grouped conv writes its output through strides (one column block per
   group): its epilogue runs as a loop kernel after it. */
static bool dot_takes_epilogue(const ir_func *f, ir_ref d) {
  const ir_ins *dot = &f->ins[d];
  const ir_type *dt = ir_type_of(f, d), *rhs = ir_type_of(f, dot->args[1]);
  return dt->rank >= 1 &&
         !(dot->op == IR_DOT && rhs->rank - dot->attr.dot.n_batch - dot->attr.dot.n_contract != 1) &&
         !(dot->op == IR_CONV && (dot->attr.conv.groups > 1 || dot->attr.conv.batch_groups > 1));
}

bool cg_epi_plan_make(const fz_prog *p, uint32_t ki, cg_epi_plan *out) {
  const ir_func *f = p->f;
  const fz_kernel *k = &p->kernels[ki];
  memset(out, 0, sizeof *out);
  if (k->kind != FZ_DOT || k->dot == IR_NOREF || k->n_writes != 1 || k->writes[0] != k->root ||
      k->root == k->dot || k->n_ops > CG_EPI_MAX_OPS)
    return false;
  const ir_type *dt = ir_type_of(f, k->dot), *rt = ir_type_of(f, k->root);
  if (!dot_takes_epilogue(f, k->dot) || !same_dims(dt, rt)) return false;
  out->f = f;
  out->dot = k->dot;
  out->root = k->root;
  out->n = dt->dims[dt->rank - 1];
  for (uint32_t i = 0; i < k->n_ops; i++)
    if (!add_op(out, out->ops, &out->n_ops, k->ops[i], rt, true, NULL)) return false;
  return op_index(out, k->dot) >= 0 && op_index(out, k->root) >= 0;
}

/* Whether any instruction outside kernel r, or a result of the function, reads value v. */
static bool read_outside(const ir_func *f, const fz_kernel *r, ir_ref v) {
  for (uint32_t i = 0; i < f->n_results; i++)
    if (f->results[i] == v) return true;
  for (ir_ref u = v + 1; u < f->n_ins; u++) {
    const ir_ins *in = &f->ins[u];
    for (uint32_t a = 0; a < in->n_args; a++)
      if (in->args[a] == v && !contains(r->ops, r->n_ops, u)) return true;
  }
  return false;
}

bool cg_epi_plan_reduce(const fz_prog *p, uint32_t ki, cg_epi_plan *out) {
  const ir_func *f = p->f;
  memset(out, 0, sizeof *out);
  if (ki + 1 >= p->n_kernels) return false;
  const fz_kernel *k = &p->kernels[ki], *r = &p->kernels[ki + 1];
  if (k->kind != FZ_DOT || k->dot == IR_NOREF || k->root != k->dot || k->n_writes != 1 ||
      k->writes[0] != k->dot || r->kind != FZ_ROW || r->n_writes != 1 || r->writes[0] != r->root)
    return false;
  const ir_type *dt = ir_type_of(f, k->dot), *ot = ir_type_of(f, r->root);
  if (!dot_takes_epilogue(f, k->dot) || f->ins[k->dot].op != IR_DOT || dt->rank < 2 ||
      (dt->dtype != JIT_F32 && dt->dtype != JIT_F64) || ot->rank != dt->rank - 1 ||
      read_outside(f, r, k->dot))
    return false;
  for (int d = 0; d < ot->rank; d++)
    if (ot->dims[d] != dt->dims[d]) return false;
  for (ir_ref v = k->root + 1; v < r->root; v++) /* a scan between would run after the sum */
    if (p->cls[v] == FZ_SCAN) return false;
  out->f = f;
  out->dot = k->dot;
  out->n = dt->dims[dt->rank - 1];
  out->reduces = true;
  out->reduce = out->out = IR_NOREF;
  out->ops[out->n_ops++] = k->dot;
  for (uint32_t i = 0; i < r->n_ops; i++) {
    ir_ref v = r->ops[i];
    const ir_ins *in = &f->ins[v];
    if (in->op == IR_CONST) continue; /* appended where an op reads it */
    if (in->op == IR_REDUCE_SUM) {
      if (out->reduce != IR_NOREF || in->attr.dims.n != 1 || in->attr.dims.d[0] != dt->rank - 1 ||
          op_index(out, in->args[0]) < 0)
        return false;
      out->reduce = v;
      out->root = in->args[0];
      continue;
    }
    /* by shape: an op on the rows' values may come before the sum (it cannot read it) */
    bool ok = same_dims(ir_type_of(f, v), dt) ? add_op(out, out->ops, &out->n_ops, v, dt, true, r)
                                              : add_op(out, out->post, &out->n_post, v, ot, false, r);
    if (!ok) return false;
  }
  out->out = out->n_post ? out->post[out->n_post - 1] : out->reduce;
  /* one more buffer than the reads: the sums' output */
  return out->reduce != IR_NOREF && out->out == r->root && out->n_reads < CG_EPI_MAX_READS;
}

/* ---- emission ------------------------------------------------------------------------------- */

typedef struct ev {
  LLVMValueRef v;
  bool uniform; /* a scalar, the same for every lane */
} ev;

static LLVMTypeRef ctype(LLVMContextRef c, jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return LLVMInt1TypeInContext(c);
  case JIT_I8:
  case JIT_U8: return LLVMInt8TypeInContext(c);
  case JIT_I32: return LLVMInt32TypeInContext(c);
  case JIT_I64: return LLVMInt64TypeInContext(c);
  case JIT_F64: return LLVMDoubleTypeInContext(c);
  default: return LLVMFloatTypeInContext(c);
  }
}

static LLVMTypeRef stype(LLVMContextRef c, jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return LLVMInt8TypeInContext(c);
  case JIT_F16: return LLVMHalfTypeInContext(c);
  case JIT_BF16: return LLVMInt16TypeInContext(c);
  default: return ctype(c, d);
  }
}

/* x (scalar or vector of the storage type of d) in the compute type. */
static LLVMValueRef widen(LLVMBuilderRef b, LLVMContextRef c, jit_dtype d, LLVMValueRef x,
                          unsigned w) {
  LLVMTypeRef f32 = LLVMFloatTypeInContext(c), i32 = LLVMInt32TypeInContext(c);
  if (w) f32 = LLVMVectorType(f32, w), i32 = LLVMVectorType(i32, w);
  if (d == JIT_F16) return LLVMBuildFPExt(b, x, f32, "");
  if (d == JIT_BF16) {
    LLVMValueRef z = LLVMBuildZExt(b, x, i32, "");
    LLVMValueRef k16 = LLVMConstInt(LLVMInt32TypeInContext(c), 16, 0), ks[16];
    if (w) {
      for (unsigned l = 0; l < w && l < 16; l++) ks[l] = k16;
      k16 = LLVMConstVector(ks, w);
    }
    return LLVMBuildBitCast(b, LLVMBuildShl(b, z, k16, ""), f32, "");
  }
  if (d == JIT_BOOL) return LLVMBuildICmp(b, LLVMIntNE, x, LLVMConstNull(LLVMTypeOf(x)), "");
  return x;
}

static LLVMValueRef splat(LLVMBuilderRef b, LLVMValueRef s, unsigned w) {
  LLVMContextRef c = LLVMGetTypeContext(LLVMTypeOf(s));
  LLVMValueRef v = LLVMGetUndef(LLVMVectorType(LLVMTypeOf(s), w));
  v = LLVMBuildInsertElement(b, v, s, LLVMConstInt(LLVMInt32TypeInContext(c), 0, 0), "");
  LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(LLVMInt32TypeInContext(c), w));
  return LLVMBuildShuffleVector(b, v, LLVMGetUndef(LLVMTypeOf(v)), zeros, "");
}

static LLVMValueRef buf_ptr(const cg_mm_epi *e, LLVMContextRef c, uint32_t ri) {
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0);
  LLVMValueRef idx = LLVMConstInt(LLVMInt64TypeInContext(c), 2 + ri, 0);
  return LLVMBuildLoad2(e->b, ptr, LLVMBuildInBoundsGEP2(e->b, ptr, e->bufs, &idx, 1, ""), "");
}

/* Elements base + col + lane of read ri (lanes past N read element N - 1 of the row instead:
   those lanes are never stored). */
static LLVMValueRef load_vec(const cg_mm_epi *e, const cg_epi_plan *pl, LLVMContextRef c,
                             uint32_t ri, LLVMValueRef base) {
  LLVMBuilderRef b = e->b;
  jit_dtype d = ir_type_of(pl->f, pl->reads[ri])->dtype;
  LLVMTypeRef st = stype(c, d), i64 = LLVMInt64TypeInContext(c);
  LLVMValueRef p = buf_ptr(e, c, ri);
  LLVMValueRef r;
  if (LLVMIsConstant(e->mask)) { /* a whole tile: every lane is in the row */
    LLVMValueRef i = LLVMBuildNSWAdd(b, base, e->col, "");
    LLVMValueRef q = LLVMBuildInBoundsGEP2(b, st, p, &i, 1, "");
    r = LLVMBuildLoad2(b, LLVMVectorType(st, e->width), q, "");
    LLVMSetAlignment(r, (unsigned)jit_dtype_size(d));
  } else {
    r = LLVMGetUndef(LLVMVectorType(st, e->width));
    for (unsigned l = 0; l < e->width; l++) {
      LLVMValueRef cl = LLVMBuildNSWAdd(b, e->col, LLVMConstInt(i64, l, 0), "");
      LLVMValueRef lt = LLVMBuildICmp(b, LLVMIntSLT, cl, LLVMConstInt(i64, (uint64_t)pl->n - 1, 0), "");
      cl = LLVMBuildSelect(b, lt, cl, LLVMConstInt(i64, (uint64_t)pl->n - 1, 0), "");
      LLVMValueRef i = LLVMBuildNSWAdd(b, base, cl, "");
      LLVMValueRef x = LLVMBuildLoad2(b, st, LLVMBuildInBoundsGEP2(b, st, p, &i, 1, ""), "");
      LLVMSetAlignment(x, (unsigned)jit_dtype_size(d));
      r = LLVMBuildInsertElement(b, r, x, LLVMConstInt(LLVMInt32TypeInContext(c), l, 0), "");
    }
  }
  return widen(b, c, d, r, e->width);
}

/* Whether lp_emit_ew gives op on a vector what it gives lane by lane: f32/f64 arithmetic,
   LLVM's overloaded intrinsics, and llvm_math's functions, which are straight-line code written
   for any width (the same operations per lane, so the same bits). Lane by lane, an epilogue's
   tanh cost W5's 32x256 steps 5 ns an element: the matmul part's pipeline has no SLP vectorizer
   to put the lanes back together. */
static bool vector_safe(const lp_ins *in) {
  if (in->dt != in->in_dt || (in->dt != JIT_F32 && in->dt != JIT_F64)) return false;
  switch ((ir_op)in->ew) {
  case IR_ADD:
  case IR_SUB:
  case IR_MUL:
  case IR_DIV:
  case IR_MAX:
  case IR_MIN:
  case IR_NEG:
  case IR_ABS:
  case IR_FLOOR:
  case IR_CEIL:
  case IR_ROUND:
  case IR_SQRT: return true;
  default: return lp_ew_is_math(in->ew);
  }
}

static LLVMValueRef epilogue(void *ctx, const cg_mm_epi *e) {
  cg_epi_plan *pl = ctx;
  const ir_func *f = pl->f;
  LLVMBuilderRef b = e->b;
  LLVMContextRef c = LLVMGetModuleContext(pl->m);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(c), i64 = LLVMInt64TypeInContext(c);
  ev vals[CG_EPI_MAX_OPS];
  LLVMValueRef rowbase = LLVMBuildNSWMul(b, e->row, LLVMConstInt(i64, (uint64_t)pl->n, 0), "");
  for (uint32_t i = 0; i < pl->n_ops; i++) {
    ir_ref v = pl->ops[i];
    const ir_ins *in = &f->ins[v];
    jit_dtype d = ir_type_of(f, v)->dtype;
    ev *o = &vals[i];
    if (v == pl->dot) {
      o->v = e->acc;
      o->uniform = false;
    } else if (in->op == IR_CONST) {
      o->uniform = true;
      if (ir_dtype_is_float(d)) {
        lp_ins cv;
        memset(&cv, 0, sizeof cv);
        cv.op = LP_EW;
        cv.ew = IR_CONVERT;
        cv.dt = (uint8_t)d;
        cv.in_dt = JIT_F64;
        o->v = lp_emit_ew(b, pl->m, &cv, LLVMConstReal(LLVMDoubleTypeInContext(c), in->attr.value),
                          NULL, NULL);
        if (!o->v) return NULL;
      } else if (d == JIT_BOOL) {
        o->v = LLVMConstInt(ctype(c, d), in->attr.value != 0, 0);
      } else {
        o->v = LLVMConstInt(ctype(c, d), (unsigned long long)(long long)in->attr.value, 1);
      }
    } else if (in->op == IR_BROADCAST) {
      ir_ref a = in->args[0];
      int ai = op_index(pl, a);
      if (ai >= 0) {
        *o = vals[ai];
      } else {
        uint32_t ri = 0;
        while (pl->reads[ri] != a) ri++;
        if (ir_type_of(f, a)->rank == 0) {
          LLVMValueRef x = LLVMBuildLoad2(b, stype(c, d), buf_ptr(e, c, ri), "");
          LLVMSetAlignment(x, (unsigned)jit_dtype_size(d));
          o->v = widen(b, c, d, x, 0);
          o->uniform = true;
        } else {
          o->v = load_vec(e, pl, c, ri, LLVMConstInt(i64, 0, 0));
          o->uniform = false;
        }
      }
    } else {
      ev x[3];
      memset(x, 0, sizeof x);
      bool all_uniform = true;
      for (uint32_t k = 0; k < in->n_args && k < 3; k++) {
        int ai = op_index(pl, in->args[k]);
        if (ai >= 0) {
          x[k] = vals[ai];
        } else {
          uint32_t ri = 0;
          while (pl->reads[ri] != in->args[k]) ri++;
          x[k].v = load_vec(e, pl, c, ri, rowbase);
        }
        all_uniform &= x[k].uniform;
      }
      lp_ins op;
      memset(&op, 0, sizeof op);
      op.op = LP_EW;
      op.dt = (uint8_t)d;
      op.in_dt = (uint8_t)ir_type_of(f, in->args[in->op == IR_SELECT ? 1 : 0])->dtype;
      op.ew = (uint8_t)in->op;
      op.cmp = (uint8_t)in->attr.cmp;
      if (all_uniform || vector_safe(&op)) {
        for (uint32_t k = 0; k < in->n_args && !all_uniform; k++)
          if (x[k].uniform) x[k].v = splat(b, x[k].v, e->width);
        o->v = lp_emit_ew(b, pl->m, &op, x[0].v, x[1].v, x[2].v);
        o->uniform = all_uniform;
      } else {
        LLVMValueRef r = NULL;
        for (unsigned l = 0; l < e->width; l++) {
          LLVMValueRef lane = LLVMConstInt(i32, l, 0), s[3] = {NULL, NULL, NULL};
          for (uint32_t k = 0; k < in->n_args && k < 3; k++)
            s[k] = x[k].uniform ? x[k].v : LLVMBuildExtractElement(b, x[k].v, lane, "");
          LLVMValueRef y = lp_emit_ew(b, pl->m, &op, s[0], s[1], s[2]);
          if (!y) return NULL;
          if (!r) r = LLVMGetUndef(LLVMVectorType(LLVMTypeOf(y), e->width));
          r = LLVMBuildInsertElement(b, r, y, lane, "");
        }
        o->v = r;
        o->uniform = false;
      }
      if (!o->v) return NULL;
    }
  }
  ev *r = &vals[op_index(pl, pl->root)];
  return r->uniform ? splat(b, r->v, e->width) : r->v;
}

void cg_epi_desc(cg_epi_plan *pl, LLVMModuleRef m, cg_matmul_desc *d, int vec_bytes) {
  cg_matmul_desc_from_ir(d, pl->f, pl->dot, pl->n_reads + pl->reduces, vec_bytes);
  pl->m = m;
  d->out_dtype = ir_type_of(pl->f, pl->reduces ? pl->dot : pl->root)->dtype;
  d->epilogue = epilogue;
  d->epilogue_ctx = pl;
}
