/* test_llvm_jit.c: the LLVM wrapper alone, on modules built by hand: a loop that must vectorize
 * for the host, dylibs that share symbol names, objects reloaded in another JIT, broken input. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The tests' include path holds src/ and tests/; LLVM's headers come with the library's target
   only, so this test runs where the build gives it LLVM's include directory too. */
#if defined(__has_include)
#if __has_include(<llvm-c/Core.h>)
#define HAVE_LLVM_HEADERS 1
#endif
#endif

#ifdef HAVE_LLVM_HEADERS
#include "codegen/llvm_jit.h"
#include "runtime/error.h"
#include "support/target_gate.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void add_noalias(LLVMContextRef c, LLVMValueRef fn, unsigned param) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAddAttributeAtIndex(fn, param + 1, LLVMCreateEnumAttribute(c, kind, 0));
}

/* void NAME(float *restrict y, const float *restrict x, int64_t n): y[i] = x[i] * a + b */
static LLVMModuleRef build_saxpb(LLVMContextRef c, const char *name, float a, float b) {
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("saxpb", c);
  LLVMTypeRef f32 = LLVMFloatTypeInContext(c), i64 = LLVMInt64TypeInContext(c);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0);
  LLVMTypeRef params[3] = {ptr, ptr, i64};
  LLVMValueRef fn =
      LLVMAddFunction(m, name, LLVMFunctionType(LLVMVoidTypeInContext(c), params, 3, 0));
  add_noalias(c, fn, 0);
  add_noalias(c, fn, 1);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c, fn, "entry");
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(c, fn, "loop");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c, fn, "done");
  LLVMBuilderRef bld = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(bld, entry);
  LLVMValueRef y = LLVMGetParam(fn, 0), x = LLVMGetParam(fn, 1), n = LLVMGetParam(fn, 2);
  LLVMValueRef zero = LLVMConstInt(i64, 0, 0);
  LLVMBuildCondBr(bld, LLVMBuildICmp(bld, LLVMIntSGT, n, zero, "nonempty"), loop, done);
  LLVMPositionBuilderAtEnd(bld, loop);
  LLVMValueRef i = LLVMBuildPhi(bld, i64, "i");
  LLVMValueRef xi = LLVMBuildLoad2(bld, f32, LLVMBuildGEP2(bld, f32, x, &i, 1, "px"), "xi");
  LLVMValueRef v = LLVMBuildFMul(bld, xi, LLVMConstReal(f32, a), "ax");
  v = LLVMBuildFAdd(bld, v, LLVMConstReal(f32, b), "axb");
  LLVMBuildStore(bld, v, LLVMBuildGEP2(bld, f32, y, &i, 1, "py"));
  LLVMValueRef inext = LLVMBuildAdd(bld, i, LLVMConstInt(i64, 1, 0), "inext");
  LLVMBuildCondBr(bld, LLVMBuildICmp(bld, LLVMIntSLT, inext, n, "more"), loop, done);
  LLVMValueRef in_vals[2] = {zero, inext};
  LLVMBasicBlockRef in_blocks[2] = {entry, loop};
  LLVMAddIncoming(i, in_vals, in_blocks, 2);
  LLVMPositionBuilderAtEnd(bld, done);
  LLVMBuildRetVoid(bld);
  LLVMDisposeBuilder(bld);
  return m;
}

/* int64_t NAME(void) { return value; } */
static LLVMModuleRef build_const_fn(LLVMContextRef c, const char *name, int64_t value) {
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("constfn", c);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(c);
  LLVMValueRef fn = LLVMAddFunction(m, name, LLVMFunctionType(i64, NULL, 0, 0));
  LLVMBuilderRef bld = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(bld, LLVMAppendBasicBlockInContext(c, fn, "entry"));
  LLVMBuildRet(bld, LLVMConstInt(i64, (unsigned long long)value, 1));
  LLVMDisposeBuilder(bld);
  return m;
}

/* optimize -> emit -> add, the path every compile takes. */
static jit_status compile(cg_jit *jit, LLVMModuleRef m, cg_dylib **lib) {
  void *obj = NULL;
  size_t len = 0;
  jit_status st = cg_optimize(jit, m);
  if (st == JIT_OK) st = cg_emit_object(jit, m, &obj, &len);
  if (st == JIT_OK) st = cg_add_object(jit, obj, len, lib);
  free(obj);
  return st;
}

typedef void (*saxpb_fn)(float *, const float *, int64_t);
typedef int64_t (*const_fn)(void);

static void test_vector_loop(void **state) {
  (void)state;
  double t0 = now_ms();
  cg_jit *jit = NULL;
  assert_int_equal(cg_jit_create(3, &jit), JIT_OK);
  double t1 = now_ms();
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = build_saxpb(c, "k", 2.0f, 1.0f);
  assert_int_equal(cg_optimize(jit, m), JIT_OK);
  double t2 = now_ms();
  char *text = cg_module_text(m);
  assert_non_null(text);
  /* the loop runs on the target's vectors, whatever LLVM's tuning for the CPU prefers */
  char want[32];
  snprintf(want, sizeof want, "<%d x float>", cg_jit_target(jit)->vector_bytes / 4);
  assert_non_null(strstr(text, want));
  assert_non_null(strstr(text, "target triple"));
  free(text);
  void *obj = NULL;
  size_t len = 0;
  assert_int_equal(cg_emit_object(jit, m, &obj, &len), JIT_OK);
  double t3 = now_ms();
  assert_true(len > 64);
  assert_memory_equal(obj, "\177ELF", 4);
  cg_dylib *lib = NULL;
  assert_int_equal(cg_add_object(jit, obj, len, &lib), JIT_OK);
  void *p = NULL;
  assert_int_equal(cg_lookup(lib, "k", &p), JIT_OK);
  double t4 = now_ms();
  saxpb_fn k = (saxpb_fn)(uintptr_t)p;
  enum { N = 1003 };
  float *x = malloc(N * sizeof *x), *y = malloc((N + 1) * sizeof *y);
  for (int i = 0; i < N; i++)
    x[i] = (float)i * 0.25f - 7.0f;
  y[N] = 42.0f;
  k(y, x, N);
  for (int i = 0; i < N; i++)
    assert_true(y[i] == x[i] * 2.0f + 1.0f);
  assert_true(y[N] == 42.0f); /* no write past n */
  y[0] = -5.0f;
  k(y, x, 0);
  assert_true(y[0] == -5.0f);
  k(y, x, 1);
  assert_true(y[0] == x[0] * 2.0f + 1.0f);
  print_message("[ info ] llvm %s, target %s: create %.2f ms, O3 %.2f ms, emit %.2f ms (%zu bytes), "
                "add+lookup %.2f ms\n",
                cg_llvm_version(), cg_jit_cpu(jit), t1 - t0, t2 - t1, t3 - t2, len, t4 - t3);
  /* The same again in a warm process: the first compile pays LLVM's one-time set-up. */
  LLVMModuleRef m2 = build_saxpb(c, "k2", 3.0f, 1.0f);
  cg_dylib *lib2 = NULL;
  void *obj2 = NULL;
  size_t len2 = 0;
  double u0 = now_ms();
  assert_int_equal(cg_optimize(jit, m2), JIT_OK);
  double u1 = now_ms();
  assert_int_equal(cg_emit_object(jit, m2, &obj2, &len2), JIT_OK);
  double u2 = now_ms();
  assert_int_equal(cg_add_object(jit, obj2, len2, &lib2), JIT_OK);
  assert_int_equal(cg_lookup(lib2, "k2", &p), JIT_OK);
  double u3 = now_ms();
  print_message("[ info ] second kernel: O3 %.2f ms, emit %.2f ms, add+lookup %.2f ms\n", u1 - u0,
                u2 - u1, u3 - u2);
  free(obj2);
  cg_dylib_free(lib2);
  LLVMDisposeModule(m2);
  free(x);
  free(y);
  free(obj);
  cg_dylib_free(lib);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  cg_jit_destroy(jit);
}

static void test_same_symbol_two_dylibs(void **state) {
  (void)state;
  cg_jit *jit = NULL;
  assert_int_equal(cg_jit_create(2, &jit), JIT_OK);
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m1 = build_const_fn(c, "get", 1), m2 = build_const_fn(c, "get", 2);
  cg_dylib *l1 = NULL, *l2 = NULL, *l3 = NULL;
  assert_int_equal(compile(jit, m1, &l1), JIT_OK);
  assert_int_equal(compile(jit, m2, &l2), JIT_OK);
  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  assert_int_equal(cg_lookup(l1, "get", &p1), JIT_OK);
  assert_int_equal(cg_lookup(l2, "get", &p2), JIT_OK);
  assert_ptr_not_equal(p1, p2);
  assert_int_equal(((const_fn)(uintptr_t)p1)(), 1);
  assert_int_equal(((const_fn)(uintptr_t)p2)(), 2);
  /* Dropping one signature's code leaves the other's alone, and a new one can take the name. */
  cg_dylib_free(l1);
  assert_int_equal(((const_fn)(uintptr_t)p2)(), 2);
  LLVMModuleRef m3 = build_const_fn(c, "get", 3);
  assert_int_equal(compile(jit, m3, &l3), JIT_OK);
  assert_int_equal(cg_lookup(l3, "get", &p3), JIT_OK);
  assert_int_equal(((const_fn)(uintptr_t)p3)(), 3);
  /* A name the object does not define. */
  void *q = (void *)&q;
  assert_int_equal(cg_lookup(l2, "missing_symbol", &q), JIT_ECOMPILE);
  assert_null(q);
  assert_non_null(strstr(jit_last_error(), "missing_symbol"));
  assert_int_equal(((const_fn)(uintptr_t)p2)(), 2);
  cg_dylib_free(l2);
  /* l3 is left for cg_jit_destroy to free. */
  LLVMDisposeModule(m1);
  LLVMDisposeModule(m2);
  LLVMDisposeModule(m3);
  LLVMContextDispose(c);
  cg_jit_destroy(jit);
}

static void test_object_roundtrip(void **state) {
  (void)state;
  void *obj = NULL;
  size_t len = 0;
  {
    cg_jit *a = NULL;
    assert_int_equal(cg_jit_create(3, &a), JIT_OK);
    LLVMContextRef c = LLVMContextCreate();
    LLVMModuleRef m = build_saxpb(c, "kernel_0", -3.0f, 0.5f);
    assert_int_equal(cg_optimize(a, m), JIT_OK);
    assert_int_equal(cg_emit_object(a, m, &obj, &len), JIT_OK);
    LLVMDisposeModule(m);
    LLVMContextDispose(c);
    cg_jit_destroy(a);
  }
  /* A second JIT loads the bytes alone, as a disk cache hit does. */
  cg_jit *b = NULL;
  assert_int_equal(cg_jit_create(3, &b), JIT_OK);
  double t0 = now_ms();
  cg_dylib *lib = NULL;
  void *p = NULL;
  assert_int_equal(cg_add_object(b, obj, len, &lib), JIT_OK);
  memset(obj, 0, len); /* cg_add_object copied it */
  assert_int_equal(cg_lookup(lib, "kernel_0", &p), JIT_OK);
  double t1 = now_ms();
  float x[37], y[37];
  for (int i = 0; i < 37; i++)
    x[i] = (float)i;
  ((saxpb_fn)(uintptr_t)p)(y, x, 37);
  for (int i = 0; i < 37; i++)
    assert_true(y[i] == x[i] * -3.0f + 0.5f);
  print_message("[ info ] object reload: add+lookup %.2f ms\n", t1 - t0);
  /* Bytes that are no object file fail with a message at add or at lookup, never crash. */
  static const char junk[] = "\177ELF this is not an object file at all............";
  cg_dylib *bad = NULL;
  jit_status st = cg_add_object(b, junk, sizeof junk, &bad);
  if (st == JIT_OK) {
    st = cg_lookup(bad, "kernel_0", &p);
    cg_dylib_free(bad);
  } else {
    assert_null(bad);
  }
  assert_int_equal(st, JIT_ECOMPILE);
  assert_true(strlen(jit_last_error()) > 0);
  assert_int_equal(cg_add_object(b, junk, 0, &bad), JIT_ECOMPILE);
  free(obj);
  cg_dylib_free(lib);
  cg_jit_destroy(b);
}

static void test_malformed_module(void **state) {
  (void)state;
  cg_jit *jit = NULL;
  assert_int_equal(cg_jit_create(3, &jit), JIT_OK);
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("broken", c);
  LLVMTypeRef i32 = LLVMInt32TypeInContext(c);
  LLVMValueRef fn = LLVMAddFunction(m, "broken", LLVMFunctionType(i32, NULL, 0, 0));
  LLVMBuilderRef bld = LLVMCreateBuilderInContext(c);
  LLVMPositionBuilderAtEnd(bld, LLVMAppendBasicBlockInContext(c, fn, "entry"));
  LLVMBuildAdd(bld, LLVMConstInt(i32, 1, 0), LLVMConstInt(i32, 2, 0), "x"); /* no terminator */
  LLVMDisposeBuilder(bld);
  jit_error_clear();
  assert_int_equal(cg_optimize(jit, m), JIT_ECOMPILE);
  assert_non_null(strstr(jit_last_error(), "terminator"));
  void *obj = (void *)&obj;
  size_t len = 7;
  jit_error_clear();
  assert_int_equal(cg_emit_object(jit, m, &obj, &len), JIT_ECOMPILE);
  assert_null(obj);
  assert_int_equal(len, 0);
  assert_non_null(strstr(jit_last_error(), "broken"));
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  /* Bad arguments. */
  cg_jit *none = (cg_jit *)&none;
  assert_int_equal(cg_jit_create(4, &none), JIT_EINVAL);
  assert_null(none);
  assert_int_equal(cg_jit_create(-1, &none), JIT_EINVAL);
  assert_int_equal(cg_jit_create(0, NULL), JIT_EINVAL);
  assert_int_equal(cg_optimize(jit, NULL), JIT_EINVAL);
  assert_int_equal(cg_lookup(NULL, "k", &obj), JIT_EINVAL);
  cg_dylib_free(NULL);
  cg_jit_destroy(NULL);
  cg_jit_destroy(jit);
}

static void test_opt_levels(void **state) {
  (void)state;
  for (int lvl = 0; lvl <= 3; lvl++) {
    cg_jit *jit = NULL;
    assert_int_equal(cg_jit_create(lvl, &jit), JIT_OK);
    assert_int_equal(cg_jit_opt_level(jit), lvl);
    LLVMContextRef c = LLVMContextCreate();
    LLVMModuleRef m = build_saxpb(c, "k", 0.5f, -1.0f);
    cg_dylib *lib = NULL;
    void *p = NULL;
    assert_int_equal(compile(jit, m, &lib), JIT_OK);
    assert_int_equal(cg_lookup(lib, "k", &p), JIT_OK);
    float x[20], y[20];
    for (int i = 0; i < 20; i++)
      x[i] = (float)(i * i);
    ((saxpb_fn)(uintptr_t)p)(y, x, 20);
    for (int i = 0; i < 20; i++)
      assert_true(y[i] == x[i] * 0.5f - 1.0f);
    LLVMDisposeModule(m);
    LLVMContextDispose(c);
    cg_dylib_free(lib);
    cg_jit_destroy(jit);
  }
  assert_non_null(strstr(cg_llvm_version(), "19."));
}

/* Several threads compile, load and call through one cg_jit at once. */
typedef struct {
  cg_jit *jit;
  int id;
  jit_status st;
  int wrong;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  for (int round = 0; round < 3 && a->st == JIT_OK; round++) {
    LLVMContextRef c = LLVMContextCreate();
    float scale = (float)(a->id * 10 + round);
    LLVMModuleRef m = build_saxpb(c, "k", scale, 1.0f);
    cg_dylib *lib = NULL;
    void *fn = NULL;
    a->st = compile(a->jit, m, &lib);
    if (a->st == JIT_OK) a->st = cg_lookup(lib, "k", &fn);
    if (a->st == JIT_OK) {
      float x[50], y[50];
      for (int i = 0; i < 50; i++)
        x[i] = (float)i;
      ((saxpb_fn)(uintptr_t)fn)(y, x, 50);
      for (int i = 0; i < 50; i++)
        a->wrong += y[i] != x[i] * scale + 1.0f;
    }
    cg_dylib_free(lib);
    LLVMDisposeModule(m);
    LLVMContextDispose(c);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  cg_jit *jit = NULL;
  assert_int_equal(cg_jit_create(3, &jit), JIT_OK);
  enum { T = 4 };
  pthread_t th[T];
  worker_arg args[T];
  for (int t = 0; t < T; t++) {
    args[t] = (worker_arg){.jit = jit, .id = t + 1};
    assert_int_equal(pthread_create(&th[t], NULL, worker, &args[t]), 0);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(args[t].st, JIT_OK);
    assert_int_equal(args[t].wrong, 0);
  }
  cg_jit_destroy(jit);
}

int main(void) {
  tt_skip_unrunnable_target();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vector_loop),      cmocka_unit_test(test_same_symbol_two_dylibs),
      cmocka_unit_test(test_object_roundtrip), cmocka_unit_test(test_malformed_module),
      cmocka_unit_test(test_opt_levels),       cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* !HAVE_LLVM_HEADERS */

static void test_llvm_headers_missing(void **state) {
  (void)state;
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_llvm_headers_missing)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
