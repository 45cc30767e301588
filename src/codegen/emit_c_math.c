/* emit_c_math.c: the JIT's inline transcendentals (llvm_math.c) as C functions, for exported C:
 * each is emitted once as scalar LLVM IR by cg_math_emit and that straight-line IR is printed as C
 * statement by statement, so the C computes what the JIT computes (the same reductions,
 * polynomials and fmas) without a second copy of the algorithms to keep in step.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "codegen/kernel.h"
#include "codegen/llvm_math.h"
#include "runtime/error.h"

typedef struct mp {
  FILE *out;
  LLVMValueRef *vals; /* instructions in order: vN is vals[N] */
  uint32_t n, cap;
  bool bad;           /* an instruction this printer does not know */
} mp;

static int val_index(const mp *p, LLVMValueRef v) {
  for (uint32_t i = 0; i < p->n; i++)
    if (p->vals[i] == v) return (int)i;
  return -1;
}

static bool is_f64(LLVMTypeRef t) { return LLVMGetTypeKind(t) == LLVMDoubleTypeKind; }
static bool is_float(LLVMTypeRef t) {
  return LLVMGetTypeKind(t) == LLVMFloatTypeKind || is_f64(t);
}
static const char *c_type(LLVMTypeRef t) {
  if (is_float(t)) return is_f64(t) ? "double" : "float";
  if (LLVMGetTypeKind(t) == LLVMIntegerTypeKind) {
    unsigned w = LLVMGetIntTypeWidth(t);
    return w == 1 ? "_Bool" : w == 64 ? "int64_t" : "int32_t";
  }
  return NULL;
}

/* An operand: x (the argument), vN, or a constant written exactly (hex floats). */
static void put_operand(mp *p, LLVMValueRef v) {
  if (LLVMIsAArgument(v)) {
    fputs("x", p->out);
  } else if (LLVMIsAConstantFP(v)) {
    LLVMBool lost;
    double d = LLVMConstRealGetDouble(v, &lost);
    if (isnan(d)) fprintf(p->out, "%sNAN", is_f64(LLVMTypeOf(v)) ? "(double)" : "");
    else if (isinf(d)) fprintf(p->out, "%sINFINITY", d < 0 ? "-" : "");
    else fprintf(p->out, "%a%s", d, is_f64(LLVMTypeOf(v)) ? "" : "f");
  } else if (LLVMIsAConstantInt(v)) {
    long long c = LLVMConstIntGetSExtValue(v);
    if (LLVMGetIntTypeWidth(LLVMTypeOf(v)) == 64) fprintf(p->out, "INT64_C(%lld)", c);
    else fprintf(p->out, "(int32_t)%lld", c);
  } else {
    int i = val_index(p, v);
    if (i < 0) p->bad = true;
    fprintf(p->out, "v%d", i);
  }
}

static void bin(mp *p, LLVMValueRef in, const char *op) {
  put_operand(p, LLVMGetOperand(in, 0));
  fprintf(p->out, " %s ", op);
  put_operand(p, LLVMGetOperand(in, 1));
}

/* Integer arithmetic that may wrap goes through the unsigned type of its width. */
static void wrap(mp *p, LLVMValueRef in, const char *op) {
  bool w64 = LLVMGetIntTypeWidth(LLVMTypeOf(in)) == 64;
  const char *u = w64 ? "uint64_t" : "uint32_t";
  fprintf(p->out, "(%s)((%s)", w64 ? "int64_t" : "int32_t", u);
  put_operand(p, LLVMGetOperand(in, 0));
  fprintf(p->out, " %s (%s)", op, u);
  put_operand(p, LLVMGetOperand(in, 1));
  fputs(")", p->out);
}

static void fcmp(mp *p, LLVMValueRef in) {
  static const char *const ordered[] = {[LLVMRealOEQ] = "==", [LLVMRealOGT] = ">",
                                        [LLVMRealOGE] = ">=", [LLVMRealOLT] = "<",
                                        [LLVMRealOLE] = "<=", [LLVMRealONE] = "!="};
  LLVMRealPredicate pr = LLVMGetFCmpPredicate(in);
  LLVMValueRef a = LLVMGetOperand(in, 0), b = LLVMGetOperand(in, 1);
  if (pr <= LLVMRealONE && pr >= LLVMRealOEQ) {
    if (pr == LLVMRealONE) { /* ordered and unequal: C's != is true for NaN */
      fputs("(", p->out); put_operand(p, a); fputs(" < ", p->out); put_operand(p, b);
      fputs(" || ", p->out); put_operand(p, a); fputs(" > ", p->out); put_operand(p, b);
      fputs(")", p->out);
      return;
    }
    bin(p, in, ordered[pr]);
    return;
  }
  /* unordered forms: true when either is NaN, else the ordered compare */
  static const char *const unordered[] = {[LLVMRealUEQ] = "==", [LLVMRealUGT] = ">",
                                          [LLVMRealUGE] = ">=", [LLVMRealULT] = "<",
                                          [LLVMRealULE] = "<=", [LLVMRealUNE] = "!="};
  fputs("(", p->out); put_operand(p, a); fputs(" != ", p->out); put_operand(p, a);
  fputs(" || ", p->out); put_operand(p, b); fputs(" != ", p->out); put_operand(p, b);
  if (pr >= LLVMRealUEQ && pr <= LLVMRealUNE) {
    fputs(" || ", p->out);
    bin(p, in, unordered[pr]);
  } else if (pr != LLVMRealUNO) {
    p->bad = true;
  }
  fputs(")", p->out);
}

static void icmp(mp *p, LLVMValueRef in) {
  static const char *const ops[] = {[LLVMIntEQ] = "==", [LLVMIntNE] = "!=", [LLVMIntSGT] = ">",
                                    [LLVMIntSGE] = ">=", [LLVMIntSLT] = "<", [LLVMIntSLE] = "<="};
  LLVMIntPredicate pr = LLVMGetICmpPredicate(in);
  if (pr != LLVMIntEQ && pr != LLVMIntNE && (pr < LLVMIntSGT || pr > LLVMIntSLE)) {
    p->bad = true;
    return;
  }
  bin(p, in, ops[pr]);
}

/* A call: an intrinsic (fma, fmuladd, fabs, rint, floor, copysign) or libm's erf (f64 erf, as the
   JIT). fmuladd is printed as fma, which is what the JIT's targets with FMA compute for it. */
static void call(mp *p, LLVMValueRef in) {
  LLVMValueRef fn = LLVMGetCalledValue(in);
  size_t len = 0;
  const char *name = LLVMGetValueName2(fn, &len);
  const char *s = is_f64(LLVMTypeOf(in)) ? "" : "f";
  static const char *const map[][2] = {{"llvm.fma.", "fma"},     {"llvm.fmuladd.", "fma"}, {"llvm.fabs.", "fabs"},
                                       {"llvm.rint.", "rint"},   {"llvm.floor.", "floor"},
                                       {"llvm.copysign.", "copysign"}, {"erf", "erf"}};
  const char *c = NULL;
  for (size_t i = 0; i < sizeof map / sizeof map[0] && !c; i++)
    if (strncmp(name, map[i][0], strlen(map[i][0])) == 0) c = map[i][1];
  if (!c) {
    p->bad = true;
    return;
  }
  fprintf(p->out, "%s%s(", c, s);
  unsigned n = (unsigned)LLVMGetNumArgOperands(in);
  for (unsigned i = 0; i < n; i++) {
    if (i) fputs(", ", p->out);
    put_operand(p, LLVMGetOperand(in, i));
  }
  fputs(")", p->out);
}

static void put_ins(mp *p, LLVMValueRef in) {
  LLVMOpcode op = LLVMGetInstructionOpcode(in);
  if (op == LLVMRet) {
    fputs("  return ", p->out);
    put_operand(p, LLVMGetOperand(in, 0));
    fputs(";\n", p->out);
    return;
  }
  const char *t = c_type(LLVMTypeOf(in));
  if (!t) {
    p->bad = true;
    return;
  }
  int id = (int)p->n;
  if (p->n == p->cap) {
    uint32_t cap = p->cap ? 2 * p->cap : 64;
    LLVMValueRef *g = realloc(p->vals, cap * sizeof *g);
    if (!g) {
      p->bad = true;
      return;
    }
    p->vals = g;
    p->cap = cap;
  }
  fprintf(p->out, "  const %s v%d = ", t, id);
  switch (op) {
  case LLVMFAdd: bin(p, in, "+"); break;
  case LLVMFSub: bin(p, in, "-"); break;
  case LLVMFMul: bin(p, in, "*"); break;
  case LLVMFDiv: bin(p, in, "/"); break;
  case LLVMFNeg: fputs("-", p->out); put_operand(p, LLVMGetOperand(in, 0)); break;
  case LLVMAdd: wrap(p, in, "+"); break;
  case LLVMSub: wrap(p, in, "-"); break;
  case LLVMMul: wrap(p, in, "*"); break;
  case LLVMShl: wrap(p, in, "<<"); break;
  case LLVMAnd: bin(p, in, "&"); break;
  case LLVMOr: bin(p, in, "|"); break;
  case LLVMXor: bin(p, in, "^"); break;
  case LLVMAShr: bin(p, in, ">>"); break; /* GCC and clang shift signed values arithmetically */
  case LLVMFCmp: fcmp(p, in); break;
  case LLVMICmp: icmp(p, in); break;
  case LLVMSelect:
    put_operand(p, LLVMGetOperand(in, 0));
    fputs(" ? ", p->out);
    put_operand(p, LLVMGetOperand(in, 1));
    fputs(" : ", p->out);
    put_operand(p, LLVMGetOperand(in, 2));
    break;
  case LLVMFPToSI:
  case LLVMSIToFP:
    fprintf(p->out, "(%s)", t);
    put_operand(p, LLVMGetOperand(in, 0));
    break;
  case LLVMBitCast:
    fprintf(p->out, "tjit_as_%s(", is_float(LLVMTypeOf(in)) ? t : is_f64(LLVMTypeOf(LLVMGetOperand(in, 0))) ? "bits64" : "bits32");
    put_operand(p, LLVMGetOperand(in, 0));
    fputs(")", p->out);
    break;
  case LLVMCall: call(p, in); break;
  default: p->bad = true; break;
  }
  fputs(";\n", p->out);
  p->vals[p->n++] = in;
}

static const char math_helpers[] =
    "static inline int32_t tjit_as_bits32(float f) { int32_t i; memcpy(&i, &f, 4); return i; }\n"
    "static inline int64_t tjit_as_bits64(double f) { int64_t i; memcpy(&i, &f, 8); return i; }\n"
    "static inline float tjit_as_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "static inline double tjit_as_double(int64_t i) { double f; memcpy(&f, &i, 8); return f; }\n";

jit_status lp_emit_c_math(FILE *out) {
  jit_status st = JIT_OK;
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("tjit_c_math", c);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  mp p = {out, NULL, 0, 0, false};
  fputs("/* The JIT's inline exp, log, tanh, logistic, erf, sin, cos (llvm_math.c), printed from its\n"
        "   LLVM IR: errors as docs/MATH.md states for the JIT. */\n", out);
  fputs(math_helpers, out);
  /* the seven the export inlines; log1p, expm1, erf_inv and atan2 still go through libm there */
  for (int f64 = 0; f64 < 2 && st == JIT_OK; f64++)
    for (int fn = 0; fn <= CG_MATH_COS && st == JIT_OK; fn++) {
      LLVMTypeRef t = f64 ? LLVMDoubleTypeInContext(c) : LLVMFloatTypeInContext(c);
      char name[48];
      snprintf(name, sizeof name, "tjit_%s_f%d", cg_math_name((cg_math_fn)fn), f64 ? 64 : 32);
      LLVMValueRef func = LLVMAddFunction(m, name, LLVMFunctionType(t, &t, 1, 0));
      LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, func, "entry"));
      LLVMValueRef r = cg_math_emit(b, (cg_math_fn)fn, LLVMGetParam(func, 0));
      if (!r) {
        st = jit_error(JIT_EINTERNAL, "codegen: no inline form of %s", name);
        break;
      }
      LLVMBuildRet(b, r);
      fprintf(out, "static inline %s %s(%s x) {\n", f64 ? "double" : "float", name,
              f64 ? "double" : "float");
      p.n = 0;
      LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(func);
      if (LLVMGetNextBasicBlock(bb)) p.bad = true; /* straight-line code only */
      for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in && !p.bad; in = LLVMGetNextInstruction(in))
        put_ins(&p, in);
      fputs("}\n", out);
      if (p.bad) st = jit_error(JIT_EINTERNAL, "codegen: %s has an instruction the C printer lacks", name);
    }
  free(p.vals);
  LLVMDisposeBuilder(b);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  if (st == JIT_OK && ferror(out)) st = jit_error(JIT_EIO, "codegen: writing C failed");
  return st;
}
