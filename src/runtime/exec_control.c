/* exec_control.c: the steps of lax.switch and lax.while_loop: the chosen branch's compiled
 * executable, or the compiled predicate and body in a loop. When every body has a native entry,
 * the step is one native function of the signature's module (control_fn) that picks the branch
 * or runs the loop and calls the bodies' entries directly: no dispatch per iteration. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "codegen/llvm_jit.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"

/* Pointer arrays for a body's args and results: small ones on the stack. */
typedef struct ptrs {
  const void *small_a[16];
  void *small_r[16];
  const void **a;
  void **r;
} ptrs;

static bool ptrs_init(ptrs *p, uint32_t na, uint32_t nr) {
  p->a = na > 16 ? malloc(na * sizeof *p->a) : p->small_a;
  p->r = nr > 16 ? malloc(nr * sizeof *p->r) : p->small_r;
  return p->a && p->r;
}

static void ptrs_free(ptrs *p) {
  if (p->a != p->small_a) free((void *)p->a);
  if (p->r != p->small_r) free(p->r);
}

/* s's native function with bodies lo..hi-1 prepared (the others are not called). */
static jit_status run_native(const estep *s, void *const *bufs, uint32_t lo, uint32_t hi) {
  enum { MAX_NATIVE = 64 };
  exec_rt rts[2];
  void *rtp[MAX_NATIVE] = {0}, *arena[2] = {0};
  void (*entries[MAX_NATIVE])(void) = {0};
  bool own[2] = {false, false};
  jit_status st = JIT_OK;
  uint32_t ready = lo;
  if (s->n_bodies > MAX_NATIVE || hi - lo > 2)
    return jit_error(JIT_EINTERNAL, "jit_call: %s: %u bodies", s->name, (unsigned)s->n_bodies);
  for (uint32_t j = 0; j < s->n_bodies; j++) entries[j] = s->bodies[j]->entry;
  for (; ready < hi; ready++) {
    if (!exec_rt_begin(s->bodies[ready], &rts[ready - lo], &arena[ready - lo], &own[ready - lo])) {
      st = JIT_ENOMEM;
      break;
    }
    rtp[ready] = &rts[ready - lo];
  }
  if (st == JIT_OK) s->native(bufs, entries, rtp);
  for (uint32_t j = lo; j < ready; j++) {
    if (st == JIT_OK) st = rts[j - lo].status;
    exec_rt_end(s->bodies[j], arena[j - lo], own[j - lo]);
  }
  return st;
}

jit_status exec_run_cond(const estep *s, void *const *bufs) {
  int32_t i;
  memcpy(&i, bufs[0], sizeof i);
  uint32_t j = i < 0 ? 0 : (uint32_t)i >= s->n_bodies ? s->n_bodies - 1 : (uint32_t)i; /* lax.switch clamps */
  uint32_t na = s->n_args - 1, nr = s->n_bufs - s->n_args;
  ptrs p;
  jit_status st = JIT_OK;
  if (!ptrs_init(&p, na, nr)) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
  } else {
    for (uint32_t k = 0; k < na; k++) p.a[k] = bufs[1 + k];
    for (uint32_t k = 0; k < nr; k++) p.r[k] = bufs[s->n_args + k];
    st = s->native ? run_native(s, bufs, j, j + 1) : exec_run(s->bodies[j], p.a, p.r);
  }
  ptrs_free(&p);
  return st;
}

/* The carries live in the result buffers; each iteration the body writes the scratch set, which
   is copied back (a body's results may not alias its params). */
jit_status exec_run_while(const exec *e, const estep *s, void *const *bufs) {
  uint32_t na = s->n_args, nk = s->n_consts, nc = na - nk;
  exec *b = s->bodies[1];
  ptrs p;
  jit_status st = JIT_OK;
  if (!ptrs_init(&p, na, nc)) {
    st = jit_error(JIT_ENOMEM, "jit_call: out of memory");
    goto done;
  }
  for (uint32_t k = 0; k < na; k++) p.a[k] = k < nk ? bufs[k] : bufs[na + k - nk];
  for (uint32_t k = 0; k < nc; k++) {
    p.r[k] = bufs[na + nc + k];
    memmove(bufs[na + k], bufs[nk + k], e->bufs[s->bufs[na + k]].bytes);
  }
  if (s->native) {
    st = run_native(s, bufs, 0, 2);
    goto done;
  }
  for (;;) {
    unsigned char go = 0; /* a bool is one byte */
    void *pr[1] = {&go};
    if ((st = exec_run(s->bodies[0], p.a, pr)) != JIT_OK || !go) break;
    if ((st = exec_run(b, p.a, p.r)) != JIT_OK) break;
    for (uint32_t k = 0; k < nc; k++) memcpy(bufs[na + k], p.r[k], e->bufs[s->bufs[na + k]].bytes);
  }
done:
  ptrs_free(&p);
  return st;
}

/* ---- the native functions ------------------------------------------------------------------ */

typedef struct emit_ctx {
  LLVMContextRef c;
  LLVMBuilderRef b;
  LLVMTypeRef ptr, i8, i32, i64, vd;
  LLVMValueRef bufs, entries, rts;
} emit_ctx;

static LLVMValueRef load_at(emit_ctx *x, LLVMValueRef base, uint32_t i) {
  LLVMValueRef idx = LLVMConstInt(x->i64, i, 0);
  return LLVMBuildLoad2(x->b, x->ptr, LLVMBuildInBoundsGEP2(x->b, x->ptr, base, &idx, 1, ""), "");
}

/* Calls body j's entry on args[0..n) then rts[j]; returns rts[j]->status == 0 as an i1. */
static LLVMValueRef call_body(emit_ctx *x, uint32_t j, LLVMValueRef *args, uint32_t n) {
  LLVMTypeRef *pt = malloc((n + 1) * sizeof *pt);
  if (!pt) return NULL;
  for (uint32_t i = 0; i <= n; i++) pt[i] = x->ptr;
  LLVMValueRef rt = load_at(x, x->rts, j);
  args[n] = rt;
  LLVMBuildCall2(x->b, LLVMFunctionType(x->vd, pt, n + 1, 0), load_at(x, x->entries, j), args, n + 1, "");
  free(pt);
  LLVMValueRef off = LLVMConstInt(x->i64, offsetof(exec_rt, status), 0);
  LLVMValueRef st = LLVMBuildLoad2(x->b, x->i32, LLVMBuildInBoundsGEP2(x->b, x->i8, rt, &off, 1, ""), "");
  return LLVMBuildICmp(x->b, LLVMIntEQ, st, LLVMConstInt(x->i32, 0, 0), "ok");
}

/* index clamped to [0, n), then one block per branch calling its entry */
static bool emit_cond(emit_ctx *x, const estep *s, LLVMValueRef fn, LLVMValueRef *args) {
  uint32_t na = s->n_args - 1, nr = s->n_bufs - s->n_args, n = s->n_bodies;
  LLVMValueRef i = LLVMBuildLoad2(x->b, x->i32, load_at(x, x->bufs, 0), "index");
  LLVMValueRef zero = LLVMConstInt(x->i32, 0, 0), last = LLVMConstInt(x->i32, n - 1, 0);
  i = LLVMBuildSelect(x->b, LLVMBuildICmp(x->b, LLVMIntSLT, i, zero, ""), zero, i, "");
  i = LLVMBuildSelect(x->b, LLVMBuildICmp(x->b, LLVMIntSGT, i, last, ""), last, i, "");
  for (uint32_t k = 0; k < na + nr; k++) args[k] = load_at(x, x->bufs, 1 + k);
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(x->c, fn, "exit");
  LLVMBasicBlockRef *bb = malloc(n * sizeof *bb);
  if (!bb) return false;
  for (uint32_t j = 0; j < n; j++) bb[j] = LLVMAppendBasicBlockInContext(x->c, fn, "branch");
  LLVMValueRef sw = LLVMBuildSwitch(x->b, i, bb[n - 1], n - 1);
  for (uint32_t j = 0; j + 1 < n; j++) LLVMAddCase(sw, LLVMConstInt(x->i32, j, 0), bb[j]);
  bool ok = true;
  for (uint32_t j = 0; j < n && ok; j++) {
    LLVMPositionBuilderAtEnd(x->b, bb[j]);
    ok = call_body(x, j, args, na + nr) != NULL;
    LLVMBuildBr(x->b, exit);
  }
  free(bb);
  LLVMPositionBuilderAtEnd(x->b, exit);
  return ok;
}

/* loop: pred(consts, carries, &go); stop unless go; body(consts, carries, scratch); copy back */
static bool emit_while(emit_ctx *x, const estep *s, const exec *e, LLVMValueRef fn, LLVMValueRef *args) {
  uint32_t na = s->n_args, nc = na - s->n_consts;
  LLVMValueRef go = LLVMBuildAlloca(x->b, x->i8, "go");
  LLVMValueRef *ptrs = malloc((na + nc + 1) * sizeof *ptrs);
  if (!ptrs) return false;
  for (uint32_t k = 0; k < s->n_consts; k++) ptrs[k] = load_at(x, x->bufs, k);
  /* ptrs: consts, then the carries (the result buffers, bufs[na..]), then the scratch set */
  for (uint32_t k = s->n_consts; k < na + nc; k++) ptrs[k] = load_at(x, x->bufs, k + nc);
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(x->c, fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(x->c, fn, "body");
  LLVMBasicBlockRef copy = LLVMAppendBasicBlockInContext(x->c, fn, "copy");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(x->c, fn, "exit");
  LLVMBuildBr(x->b, loop);
  LLVMPositionBuilderAtEnd(x->b, loop);
  memcpy(args, ptrs, na * sizeof *args);
  args[na] = go;
  LLVMValueRef ok = call_body(x, 0, args, na + 1);
  bool good = ok != NULL;
  if (good) {
    LLVMValueRef g = LLVMBuildICmp(x->b, LLVMIntNE, LLVMBuildLoad2(x->b, x->i8, go, ""),
                                   LLVMConstInt(x->i8, 0, 0), "");
    LLVMBuildCondBr(x->b, LLVMBuildAnd(x->b, ok, g, ""), body, exit);
    LLVMPositionBuilderAtEnd(x->b, body);
    memcpy(args, ptrs, (na + nc) * sizeof *args);
    ok = call_body(x, 1, args, na + nc);
    good = ok != NULL;
  }
  if (good) {
    LLVMBuildCondBr(x->b, ok, copy, exit);
    LLVMPositionBuilderAtEnd(x->b, copy);
    for (uint32_t k = 0; k < nc; k++) {
      size_t bytes = e->bufs[s->bufs[na + k]].bytes;
      if (bytes) LLVMBuildMemCpy(x->b, ptrs[s->n_consts + k], 1, ptrs[na + k], 1, LLVMConstInt(x->i64, bytes, 0));
    }
    LLVMBuildBr(x->b, loop);
  }
  free(ptrs);
  LLVMPositionBuilderAtEnd(x->b, exit);
  return good;
}

jit_status exec_emit_control(const estep *s, const exec *e, LLVMModuleRef m) {
  emit_ctx x;
  x.c = LLVMGetModuleContext(m);
  x.ptr = LLVMPointerTypeInContext(x.c, 0);
  x.i8 = LLVMInt8TypeInContext(x.c);
  x.i32 = LLVMInt32TypeInContext(x.c);
  x.i64 = LLVMInt64TypeInContext(x.c);
  x.vd = LLVMVoidTypeInContext(x.c);
  LLVMTypeRef params[3] = {x.ptr, x.ptr, x.ptr};
  LLVMValueRef fn = LLVMAddFunction(m, s->name, LLVMFunctionType(x.vd, params, 3, 0));
  cg_set_nounwind(fn);
  x.bufs = LLVMGetParam(fn, 0);
  x.entries = LLVMGetParam(fn, 1);
  x.rts = LLVMGetParam(fn, 2);
  x.b = LLVMCreateBuilderInContext(x.c);
  LLVMValueRef *args = malloc((s->n_bufs + 2) * sizeof *args);
  bool ok = x.b && args;
  if (ok) {
    LLVMPositionBuilderAtEnd(x.b, LLVMAppendBasicBlockInContext(x.c, fn, "entry"));
    ok = s->kind == ES_COND ? emit_cond(&x, s, fn, args) : emit_while(&x, s, e, fn, args);
    if (ok) LLVMBuildRetVoid(x.b);
  }
  if (x.b) LLVMDisposeBuilder(x.b);
  free(args);
  return ok ? JIT_OK : jit_error(JIT_ENOMEM, "jit_call: out of memory building %s", s->name);
}
