/* fma_expand.c: llvm.fma as Dekker's two-product plus a two-sum, for targets without FMA.
 *
 * fma(a, b, c) = (s, t) = two_sum(a*b, c); s + (t + e), e the exact error of a*b (Veltkamp's
 * split of a and b into halves whose products are exact). The result is within an ulp of the
 * correctly rounded fma and exact where the math library needs it to be (x - n*ln2_hi with the
 * product exact). Where the correction is not finite (a*b or the split overflowed, NaN), the
 * result is a*b + c, as fma's would be up to the rounding of a finite result. About 20 multiplies and adds per lane: only targets without FMA pay it. */
#include "codegen/fma_expand.h"

#include <stdbool.h>
#include <string.h>

typedef struct ex {
  LLVMBuilderRef b;
  LLVMTypeRef t; /* the call's type: float, double or a vector of them */
} ex;

static LLVMValueRef splat(ex *x, double v) {
  LLVMTypeRef el = LLVMGetTypeKind(x->t) == LLVMVectorTypeKind ? LLVMGetElementType(x->t) : x->t;
  LLVMValueRef k = LLVMConstReal(el, v);
  if (el == x->t) return k;
  unsigned n = LLVMGetVectorSize(x->t);
  LLVMValueRef ks[64];
  if (n > 64) return NULL;
  for (unsigned i = 0; i < n; i++) ks[i] = k;
  return LLVMConstVector(ks, n);
}

static LLVMValueRef mul(ex *x, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(x->b, a, b, ""); }
static LLVMValueRef add(ex *x, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(x->b, a, b, ""); }
static LLVMValueRef sub(ex *x, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(x->b, a, b, ""); }

/* Veltkamp: hi has the upper half of a's significand, a = hi + lo exactly. */
static void split(ex *x, LLVMValueRef a, LLVMValueRef k, LLVMValueRef *hi, LLVMValueRef *lo) {
  LLVMValueRef t = mul(x, k, a);
  *hi = sub(x, t, sub(x, t, a));
  *lo = sub(x, a, *hi);
}

static LLVMValueRef finite(ex *x, LLVMValueRef v, LLVMValueRef inf) {
  LLVMTypeRef fty = LLVMFunctionType(x->t, &x->t, 1, 0);
  LLVMModuleRef m = LLVMGetGlobalParent(LLVMGetBasicBlockParent(LLVMGetInsertBlock(x->b)));
  unsigned id = LLVMLookupIntrinsicID("llvm.fabs", 9);
  LLVMValueRef fabs = LLVMGetIntrinsicDeclaration(m, id, &x->t, 1);
  LLVMValueRef av = LLVMBuildCall2(x->b, fty, fabs, &v, 1, "");
  return LLVMBuildFCmp(x->b, LLVMRealOLT, av, inf, "");
}

static LLVMValueRef expand(ex *x, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
  LLVMTypeRef el = LLVMGetTypeKind(x->t) == LLVMVectorTypeKind ? LLVMGetElementType(x->t) : x->t;
  bool f64 = LLVMGetTypeKind(el) == LLVMDoubleTypeKind;
  LLVMValueRef k = splat(x, f64 ? 134217729.0 : 4097.0); /* 2^27 + 1, 2^12 + 1 */
  LLVMValueRef inf = splat(x, __builtin_inf());
  if (!k || !inf) return NULL;
  LLVMValueRef p = mul(x, a, b), ah, al, bh, bl;
  split(x, a, k, &ah, &al);
  split(x, b, k, &bh, &bl);
  LLVMValueRef e = add(x, add(x, add(x, sub(x, mul(x, ah, bh), p), mul(x, ah, bl)), mul(x, al, bh)),
                       mul(x, al, bl));
  LLVMValueRef s = add(x, p, c), bb = sub(x, s, p);
  LLVMValueRef t = add(x, sub(x, p, sub(x, s, bb)), sub(x, c, bb));
  /* the correction, unless it is zero (s keeps the sign of a zero result, as fma's) or not
     finite (a*b or the split overflowed, or NaN: fma's result is then a*b + c's) */
  LLVMValueRef corr = add(x, t, e);
  LLVMValueRef ok = LLVMBuildAnd(x->b, LLVMBuildFCmp(x->b, LLVMRealONE, corr, splat(x, 0.0), ""),
                                 finite(x, corr, inf), "");
  return LLVMBuildSelect(x->b, ok, add(x, s, corr), s, "fma");
}

static bool is_fma_call(LLVMValueRef in) {
  if (!LLVMIsACallInst(in)) return false;
  LLVMValueRef callee = LLVMGetCalledValue(in);
  if (!callee || !LLVMIsAFunction(callee)) return false;
  size_t n = 0;
  const char *name = LLVMGetValueName2(callee, &n);
  return n >= 9 && strncmp(name, "llvm.fma.", 9) == 0;
}

void cg_expand_fma(LLVMModuleRef m) {
  LLVMBuilderRef b = LLVMCreateBuilderInContext(LLVMGetModuleContext(m));
  if (!b) return; /* out of memory: the calls stay, correct and slow */
  for (LLVMValueRef fn = LLVMGetFirstFunction(m); fn; fn = LLVMGetNextFunction(fn))
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
      for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in;) {
        LLVMValueRef next = LLVMGetNextInstruction(in);
        if (is_fma_call(in)) {
          LLVMPositionBuilderBefore(b, in);
          ex x = {b, LLVMTypeOf(in)};
          LLVMValueRef r = expand(&x, LLVMGetOperand(in, 0), LLVMGetOperand(in, 1),
                                  LLVMGetOperand(in, 2));
          if (r) {
            LLVMReplaceAllUsesWith(in, r);
            LLVMInstructionEraseFromParent(in);
          }
        }
        in = next;
      }
  LLVMDisposeBuilder(b);
}
