/* exec_entry.c: the typed C entry of a compiled signature, emitted into the signature's module:
 * one call (through a prepared ffi_cif) runs every step, so a warm call does no per-step dispatch.
 *
 *   void tjit_entry(void *param0, ..., void *result0, ..., exec_rt *rt)
 *
 * Buffer addresses are computed once from the params, the results and rt->scratch; small kernels
 * are called directly on the calling thread (no pool wake-up); kernels split over threads,
 * interpreted kernels and large dots go back to the runtime through rt->step. The text depends
 * only on the signature (no addresses), so the module stays a valid disk cache key.
 */
#include <stddef.h>
#include <stdlib.h>

#include "codegen/llvm_jit.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"

static LLVMValueRef byte_gep(LLVMBuilderRef b, LLVMTypeRef i8, LLVMTypeRef i64, LLVMValueRef p,
                             size_t off) {
  if (off == 0) return p;
  LLVMValueRef idx = LLVMConstInt(i64, off, 0);
  return LLVMBuildInBoundsGEP2(b, i8, p, &idx, 1, "");
}

static LLVMValueRef load_field(LLVMBuilderRef b, LLVMTypeRef i8, LLVMTypeRef i64, LLVMTypeRef ptr,
                               LLVMValueRef rt, size_t off, const char *name) {
  return LLVMBuildLoad2(b, ptr, byte_gep(b, i8, i64, rt, off), name);
}

jit_status exec_emit_entry(const exec *e, LLVMModuleRef m) {
  jit_status st = JIT_OK;
  LLVMContextRef c = LLVMGetModuleContext(m);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0), i8 = LLVMInt8TypeInContext(c);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(c), i64 = LLVMInt64TypeInContext(c);
  LLVMTypeRef vd = LLVMVoidTypeInContext(c);
  uint32_t n = e->n_params + e->n_results + 1;
  LLVMTypeRef *params = malloc(n * sizeof *params);
  LLVMValueRef *bv = malloc((e->n_bufs ? e->n_bufs : 1) * sizeof *bv);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  if (!params || !bv || !b) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory building the entry");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) params[i] = ptr;
  LLVMValueRef fn = LLVMAddFunction(m, EXEC_ENTRY_NAME, LLVMFunctionType(vd, params, n, 0));
  cg_set_nounwind(fn);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, fn, "entry"));

  LLVMValueRef rt = LLVMGetParam(fn, n - 1);
  LLVMValueRef scratch = load_field(b, i8, i64, ptr, rt, offsetof(exec_rt, scratch), "scratch");
  LLVMValueRef mms = load_field(b, i8, i64, ptr, rt, offsetof(exec_rt, mm_scratch), "mm_scratch");
  LLVMValueRef empty = load_field(b, i8, i64, ptr, rt, offsetof(exec_rt, empty), "empty");
  LLVMValueRef cb = load_field(b, i8, i64, ptr, rt, offsetof(exec_rt, step), "step");
  for (uint32_t i = 0; i < e->n_bufs; i++) {
    const ebuf *eb = &e->bufs[i];
    if (eb->bytes == 0) bv[i] = empty;
    else if (eb->kind == EB_PARAM) bv[i] = LLVMGetParam(fn, eb->index);
    else if (eb->kind == EB_RESULT) bv[i] = LLVMGetParam(fn, e->n_params + eb->index);
    else bv[i] = byte_gep(b, i8, i64, scratch, eb->off);
  }
  uint32_t max_bufs = 1;
  for (uint32_t s = 0; s < e->n_steps; s++)
    if (e->steps[s].n_bufs > max_bufs) max_bufs = e->steps[s].n_bufs;
  LLVMValueRef arr = LLVMBuildAlloca(b, LLVMArrayType(ptr, max_bufs), "bufs");

  LLVMTypeRef kty_params[3] = {ptr, i64, i64}, cty_params[3] = {ptr, i32, ptr};
  LLVMTypeRef kty = LLVMFunctionType(vd, kty_params, 3, 0), cty = LLVMFunctionType(vd, cty_params, 3, 0);
  for (uint32_t s = 0; s < e->n_steps; s++) {
    const estep *sp = &e->steps[s];
    if (sp->kind == ES_COPY) {
      /* a scan's carry and its alias (scan_plan) are one buffer: nothing to copy */
      LLVMValueRef dst = bv[sp->bufs[1]], src = bv[sp->bufs[0]];
      LLVMBasicBlockRef copy = LLVMAppendBasicBlockInContext(c, fn, "copy");
      LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(c, fn, "copied");
      LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntNE, dst, src, ""), copy, after);
      LLVMPositionBuilderAtEnd(b, copy);
      LLVMBuildMemCpy(b, dst, 1, src, 1, LLVMConstInt(i64, sp->bytes, 0));
      LLVMBuildBr(b, after);
      LLVMPositionBuilderAtEnd(b, after);
      continue;
    }
    for (uint32_t k = 0; k < sp->n_bufs; k++) {
      uint32_t id = sp->bufs[k];
      bool direct = sp->inline_run && !sp->core; /* a core_dot has no function to call */
      LLVMValueRef v = id != EXEC_MM_SCRATCH ? bv[id] : direct ? mms : LLVMConstNull(ptr);
      LLVMValueRef idx = LLVMConstInt(i64, k, 0);
      LLVMBuildStore(b, v, LLVMBuildInBoundsGEP2(b, ptr, arr, &idx, 1, ""));
    }
    if (sp->inline_run && !sp->core) {
      LLVMValueRef kfn = LLVMGetNamedFunction(m, sp->name);
      if (!kfn) {
        st = jit_error(JIT_EINTERNAL, "jit_call: the module has no kernel %s", sp->name);
        goto done;
      }
      LLVMValueRef a[3] = {arr, LLVMConstInt(i64, 0, 0), LLVMConstInt(i64, (unsigned long long)sp->rows, 0)};
      LLVMBuildCall2(b, kty, kfn, a, 3, "");
    } else {
      LLVMValueRef a[3] = {rt, LLVMConstInt(i32, s, 0), arr};
      LLVMBuildCall2(b, cty, cb, a, 3, "");
    }
  }
  LLVMBuildRetVoid(b);
done:
  if (b) LLVMDisposeBuilder(b);
  free(params);
  free(bv);
  return st;
}

/* Slice t (an i64) of result k of a scan loop: outs[k] + t * ystep bytes. */
static LLVMValueRef slice(LLVMBuilderRef b, LLVMValueRef outs, uint32_t k, LLVMValueRef t,
                          size_t ystep) {
  LLVMContextRef c = LLVMGetTypeContext(LLVMTypeOf(outs));
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0), i8 = LLVMInt8TypeInContext(c);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(c);
  LLVMValueRef idx = LLVMConstInt(i64, k, 0);
  LLVMValueRef base = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, outs, &idx, 1, ""), "");
  LLVMValueRef off = LLVMBuildMul(b, t, LLVMConstInt(i64, ystep, 0), "");
  return LLVMBuildGEP2(b, i8, base, &off, 1, ""); /* t - 1 on the first step: never used */
}

/* The loop of scan step s (see scan_loop_fn): strides and counts are constants of the module,
   the body's entry and rt come in as arguments, so the text stays a valid disk cache key. */
jit_status exec_emit_scan_loop(const estep *s, LLVMModuleRef m) {
  const scan_plan *sp = s->scan;
  uint32_t na = s->n_args, nr = sp->n_results, nc = sp->n_carry, c0 = sp->n_consts;
  uint32_t n_entry = na + nr + 1;
  LLVMContextRef c = LLVMGetModuleContext(m);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0), i8 = LLVMInt8TypeInContext(c);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(c), vd = LLVMVoidTypeInContext(c);
  LLVMTypeRef *eparams = malloc(n_entry * sizeof *eparams);
  LLVMValueRef *args = malloc(n_entry * sizeof *args);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  if (!eparams || !args || !b) {
    free(eparams);
    free(args);
    if (b) LLVMDisposeBuilder(b);
    return jit_error(JIT_ENOMEM, "jit_call: out of memory building a scan loop");
  }
  for (uint32_t i = 0; i < n_entry; i++) eparams[i] = ptr;
  LLVMTypeRef ety = LLVMFunctionType(vd, eparams, n_entry, 0);
  LLVMTypeRef lparams[5] = {ptr, ptr, ptr, ptr, ptr};
  LLVMValueRef fn = LLVMAddFunction(m, s->name, LLVMFunctionType(vd, lparams, 5, 0));
  cg_set_nounwind(fn);
  LLVMValueRef ops = LLVMGetParam(fn, 0), outs = LLVMGetParam(fn, 1), cb = LLVMGetParam(fn, 2);
  LLVMValueRef entry = LLVMGetParam(fn, 3), rt = LLVMGetParam(fn, 4);
  LLVMBasicBlockRef bb_entry = LLVMAppendBasicBlockInContext(c, fn, "entry");
  LLVMBasicBlockRef bb_loop = LLVMAppendBasicBlockInContext(c, fn, "loop");
  LLVMBasicBlockRef bb_exit = LLVMAppendBasicBlockInContext(c, fn, "exit");
  LLVMPositionBuilderAtEnd(b, bb_entry);
  LLVMValueRef zero = LLVMConstInt(i64, 0, 0), one = LLVMConstInt(i64, 1, 0);
  LLVMValueRef len = LLVMConstInt(i64, (unsigned long long)sp->length, 0);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSGT, len, zero, ""), bb_loop, bb_exit);

  LLVMPositionBuilderAtEnd(b, bb_loop);
  LLVMValueRef step = LLVMBuildPhi(b, i64, "s");
  LLVMValueRef t = sp->reverse ? LLVMBuildSub(b, LLVMBuildSub(b, len, one, ""), step, "t") : step;
  LLVMValueRef par = LLVMBuildAnd(b, step, one, "");
  LLVMValueRef cur0 = LLVMBuildMul(b, par, LLVMConstInt(i64, nc, 0), "");
  LLVMValueRef nxt0 = LLVMBuildMul(b, LLVMBuildXor(b, par, one, ""), LLVMConstInt(i64, nc, 0), "");
  for (uint32_t i = 0; i < na; i++) {
    LLVMValueRef idx = LLVMConstInt(i64, i, 0);
    if (i >= c0 && i < c0 + nc && sp->alias[i - c0] >= 0) {
      /* the init (set 0) on the first step, then the slice the step before wrote */
      uint32_t y = (uint32_t)sp->alias[i - c0];
      LLVMValueRef k = LLVMConstInt(i64, i - c0, 0);
      LLVMValueRef init = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, cb, &k, 1, ""), "");
      LLVMValueRef before = LLVMBuildAdd(b, t, LLVMConstInt(i64, sp->reverse ? 1 : -1ULL, 1), "");
      LLVMValueRef prev = slice(b, outs, y, before, sp->ystep[y]);
      args[i] = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, step, zero, ""), init, prev, "");
      continue;
    }
    if (i >= c0 && i < c0 + nc) {
      LLVMValueRef k = LLVMBuildAdd(b, cur0, LLVMConstInt(i64, i - c0, 0), "");
      args[i] = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, cb, &k, 1, ""), "");
      continue;
    }
    LLVMValueRef base = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, ops, &idx, 1, ""), "");
    if (sp->xstep[i]) {
      LLVMValueRef off = LLVMBuildMul(b, t, LLVMConstInt(i64, sp->xstep[i], 0), "");
      base = LLVMBuildInBoundsGEP2(b, i8, base, &off, 1, "");
    }
    args[i] = base;
  }
  for (uint32_t k = 0; k < nr; k++) {
    if (k < nc && sp->alias[k] >= 0) { /* written into its alias's slice */
      args[na + k] = slice(b, outs, (uint32_t)sp->alias[k], t, sp->ystep[sp->alias[k]]);
      continue;
    }
    if (k < nc) {
      LLVMValueRef j = LLVMBuildAdd(b, nxt0, LLVMConstInt(i64, k, 0), "");
      args[na + k] = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, cb, &j, 1, ""), "");
      continue;
    }
    LLVMValueRef idx = LLVMConstInt(i64, k, 0);
    LLVMValueRef base = LLVMBuildLoad2(b, ptr, LLVMBuildInBoundsGEP2(b, ptr, outs, &idx, 1, ""), "");
    if (sp->ystep[k]) {
      LLVMValueRef off = LLVMBuildMul(b, t, LLVMConstInt(i64, sp->ystep[k], 0), "");
      base = LLVMBuildInBoundsGEP2(b, i8, base, &off, 1, "");
    }
    args[na + k] = base;
  }
  args[na + nr] = rt;
  LLVMBuildCall2(b, ety, entry, args, n_entry, "");
  LLVMValueRef next = LLVMBuildAdd(b, step, one, "");
  LLVMValueRef inc[2] = {zero, next};
  LLVMBasicBlockRef from[2] = {bb_entry, bb_loop};
  LLVMAddIncoming(step, inc, from, 2);
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, len, ""), bb_loop, bb_exit);
  LLVMPositionBuilderAtEnd(b, bb_exit);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  free(eparams);
  free(args);
  return JIT_OK;
}
