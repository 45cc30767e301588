/* llvm_jit.c: LLVM 19 C API wrapper: host target machines, the new pass manager, object
 * emission to memory, and an ORC LLJIT with one JITDylib per compiled signature. */
#include "codegen/llvm_jit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen/fma_expand.h"
#include "codegen/gemm_core.h"
#include "codegen/target.h"
#include "runtime/error.h"

/* Target machines are not safe to use from two threads at once (ORC's own concurrent compiler
   makes one per compile for that reason), so each optimize/emit borrows one from this pool and
   gives it back; the pool grows to the number of threads that ever compiled at once. */
#define TM_POOL_MAX 16

struct cg_dylib {
  cg_jit *jit;
  LLVMOrcJITDylibRef jd;
  LLVMOrcResourceTrackerRef rt; /* tracks the object's code and symbols; NULL while spare */
  atomic_bool failed;           /* a lookup failed: whatever ORC left in the JITDylib after a failed
                                   link, it is not reused */
  cg_dylib *prev, *next; /* in jit->libs (or jit->spare), so that cg_jit_destroy frees them */
};

struct cg_jit {
  LLVMOrcLLJITRef lljit;
  LLVMTargetRef target;
  char *triple;      /* LLVMDisposeMessage'd */
  cg_target tgt;     /* what code is generated for */
  char *features;    /* malloc'd copy of cg_target_features */
  char vector_attr[8]; /* prefer-vector-width and min-legal-vector-width: the target's bits */
  char *data_layout; /* LLVMDisposeMessage'd */
  int opt_level;
  LLVMCodeGenOptLevel cg_level;
  pthread_mutex_t mu; /* guards tm_pool, n_tm, libs, spare */
  LLVMTargetMachineRef tm_pool[TM_POOL_MAX];
  int n_tm;
  cg_dylib *libs;
  /* Emptied JITDylibs, ready for the next object. ORC's C API cannot remove a JITDylib, so
     reusing them is what keeps a process that compiles and evicts signatures forever at a
     bounded number of them (the most ever alive at once). Singly linked through next. */
  cg_dylib *spare;
  atomic_uint_fast64_t next_lib_id; /* JITDylib names are "tjit.<id>", never reused */
};

static void dylib_give_back(cg_dylib *l);

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_failed;

static void init_native(void) {
  /* Both return nonzero on failure (no native target compiled into this LLVM). */
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) init_failed = 1;
}

/* Copies LLVM's message into the thread's error and disposes the error. */
static jit_status llvm_err(LLVMErrorRef e, const char *what) {
  char *msg = LLVMGetErrorMessage(e);
  jit_status st = jit_error(JIT_ECOMPILE, "%s: %s", what, msg ? msg : "(no message)");
  LLVMDisposeErrorMessage(msg);
  return st;
}

/* ORC reports failures of materialization here as well as to the lookup that triggered them;
   the library never prints, so this copy is dropped. */
static void drop_error(void *ctx, LLVMErrorRef e) {
  (void)ctx;
  LLVMConsumeError(e);
}

static LLVMTargetMachineRef tm_create(cg_jit *jit) {
  return LLVMCreateTargetMachine(jit->target, jit->triple, jit->tgt.cpu, jit->features, jit->cg_level,
                                 LLVMRelocPIC, LLVMCodeModelSmall);
}

static jit_status tm_get(cg_jit *jit, LLVMTargetMachineRef *tm) {
  pthread_mutex_lock(&jit->mu);
  *tm = jit->n_tm > 0 ? jit->tm_pool[--jit->n_tm] : NULL;
  pthread_mutex_unlock(&jit->mu);
  if (!*tm) *tm = tm_create(jit);
  if (!*tm) return jit_error(JIT_ECOMPILE, "llvm: cannot create a target machine for %s", jit->tgt.cpu);
  return JIT_OK;
}

static void tm_put(cg_jit *jit, LLVMTargetMachineRef tm) {
  pthread_mutex_lock(&jit->mu);
  if (jit->n_tm < TM_POOL_MAX) {
    jit->tm_pool[jit->n_tm++] = tm;
    tm = NULL;
  }
  pthread_mutex_unlock(&jit->mu);
  if (tm) LLVMDisposeTargetMachine(tm);
}

jit_status cg_jit_create(int opt_level, cg_jit **out) {
  cg_target t;
  if (!out) return jit_error(JIT_EINVAL, "cg_jit_create: out is NULL");
  *out = NULL;
  jit_status st = cg_target_from_env(&t);
  return st != JIT_OK ? st : cg_jit_create_for(opt_level, &t, out);
}

jit_status cg_jit_create_for(int opt_level, const cg_target *t, cg_jit **out) {
  jit_status st = JIT_OK;
  cg_jit *jit = NULL;
  char *err = NULL;
  LLVMTargetMachineRef tm = NULL;
  LLVMTargetDataRef td = NULL;
  LLVMOrcJITTargetMachineBuilderRef jtmb = NULL;
  LLVMOrcLLJITBuilderRef builder = NULL;
  LLVMErrorRef e;
  if (!out || !t) return jit_error(JIT_EINVAL, "cg_jit_create: NULL argument");
  *out = NULL;
  if (opt_level < 0 || opt_level > 3)
    return jit_error(JIT_EINVAL, "cg_jit_create: opt_level %d is not in 0..3", opt_level);
  pthread_once(&init_once, init_native);
  if (init_failed) return jit_error(JIT_ECOMPILE, "llvm: the native target is not available");

  jit = calloc(1, sizeof *jit);
  if (!jit) return jit_error(JIT_ENOMEM, "cg_jit_create: out of memory");
  pthread_mutex_init(&jit->mu, NULL);
  jit->opt_level = opt_level;
  static const LLVMCodeGenOptLevel levels[4] = {LLVMCodeGenLevelNone, LLVMCodeGenLevelLess,
                                                LLVMCodeGenLevelDefault,
                                                LLVMCodeGenLevelAggressive};
  jit->cg_level = levels[opt_level];
  jit->triple = LLVMGetDefaultTargetTriple();
  jit->tgt = *t;
  jit->features = strdup(cg_target_features(t));
  snprintf(jit->vector_attr, sizeof jit->vector_attr, "%d", t->vector_bytes * 8);
  if (!jit->triple || !jit->features) {
    st = jit_error(JIT_ENOMEM, "cg_jit_create: out of memory");
    goto fail;
  }
  if (LLVMGetTargetFromTriple(jit->triple, &jit->target, &err)) {
    st = jit_error(JIT_ECOMPILE, "llvm: no target for %s: %s", jit->triple, err ? err : "");
    goto fail;
  }
  TRY(tm_get(jit, &tm));
  td = LLVMCreateTargetDataLayout(tm);
  jit->data_layout = LLVMCopyStringRepOfTargetData(td);
  LLVMDisposeTargetData(td);
  tm_put(jit, tm);
  if (!jit->data_layout) {
    st = jit_error(JIT_ENOMEM, "cg_jit_create: out of memory");
    goto fail;
  }

  if ((e = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb))) {
    st = llvm_err(e, "llvm: detecting the host");
    goto fail;
  }
  builder = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, jtmb); /* takes jtmb */
  e = LLVMOrcCreateLLJIT(&jit->lljit, builder);                 /* takes builder, even on error */
  if (e) {
    jit->lljit = NULL;
    st = llvm_err(e, "llvm: creating the LLJIT");
    goto fail;
  }
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(jit->lljit), drop_error,
                                          NULL);
  *out = jit;
  return JIT_OK;
fail:
  LLVMDisposeMessage(err);
  cg_jit_destroy(jit);
  return st;
}

void cg_jit_destroy(cg_jit *jit) {
  if (!jit) return;
  for (cg_dylib **list = &jit->libs; list; list = list == &jit->libs ? &jit->spare : NULL) {
    while (*list) {
      cg_dylib *l = *list;
      *list = l->next;
      if (l->rt) LLVMOrcReleaseResourceTracker(l->rt);
      free(l); /* the JITDylib goes with the LLJIT below */
    }
  }
  if (jit->lljit) {
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(jit->lljit);
    if (e) LLVMConsumeError(e);
  }
  for (int i = 0; i < jit->n_tm; i++)
    LLVMDisposeTargetMachine(jit->tm_pool[i]);
  LLVMDisposeMessage(jit->triple);
  free(jit->features);
  LLVMDisposeMessage(jit->data_layout);
  pthread_mutex_destroy(&jit->mu);
  free(jit);
}

int cg_jit_opt_level(const cg_jit *jit) { return jit->opt_level; }
const char *cg_jit_cpu(const cg_jit *jit) { return jit->tgt.cpu; }
const cg_target *cg_jit_target(const cg_jit *jit) { return &jit->tgt; }
const char *cg_jit_features(const cg_jit *jit) { return jit->features; }

static char llvm_version[32];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void set_version(void) {
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  snprintf(llvm_version, sizeof llvm_version, "%u.%u.%u", major, minor, patch);
}

const char *cg_llvm_version(void) {
  pthread_once(&version_once, set_version);
  return llvm_version;
}

/* Every defined function vectorizes for, and may use registers of, the target's vector width:
   LLVM's own choice follows the CPU's tuning (256 bits on Intel's AVX-512 cores, 512 on AMD's),
   which would make one host's kernels differ from another's with the same registers. */
static void set_vector_width(cg_jit *jit, LLVMModuleRef m) {
  LLVMContextRef c = LLVMGetModuleContext(m);
  unsigned n = (unsigned)strlen(jit->vector_attr);
  static const char *const keys[2] = {"prefer-vector-width", "min-legal-vector-width"};
  for (LLVMValueRef fn = LLVMGetFirstFunction(m); fn; fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn)) continue;
    for (int i = 0; i < 2; i++) {
      unsigned klen = (unsigned)strlen(keys[i]);
      LLVMAttributeRef a = LLVMCreateStringAttribute(c, keys[i], klen, jit->vector_attr, n);
      LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, a); /* replaces an earlier value */
    }
  }
}

/* Target triple, layout and vector width, then the verifier: LLVM aborts on some broken modules
   in its passes and code generator, so nothing unverified reaches them. */
static jit_status prepare(cg_jit *jit, LLVMModuleRef m, const char *what) {
  char *msg = NULL;
  LLVMSetTarget(m, jit->triple);
  LLVMSetDataLayout(m, jit->data_layout);
  set_vector_width(jit, m);
  if (!jit->tgt.fma) cg_expand_fma(m);
  if (LLVMVerifyModule(m, LLVMReturnStatusAction, &msg)) {
    jit_status st = jit_error(JIT_ECOMPILE, "%s: invalid LLVM module: %s", what,
                              msg && msg[0] ? msg : "(no message)");
    LLVMDisposeMessage(msg);
    return st;
  }
  LLVMDisposeMessage(msg);
  return JIT_OK;
}

jit_status cg_optimize(cg_jit *jit, LLVMModuleRef m) {
  return cg_optimize_at(jit, m, jit ? jit->opt_level : 0);
}

const char *cg_default_pipeline(int level) {
  static const char *const pipelines[4] = {"default<O0>", "default<O1>", "default<O2>",
                                           "default<O3>"};
  return pipelines[level < 0 ? 0 : level > 3 ? 3 : level];
}

jit_status cg_optimize_at(cg_jit *jit, LLVMModuleRef m, int level) {
  if (!jit || !m) return jit_error(JIT_EINVAL, "cg_optimize: NULL argument");
  if (level < 0 || level > jit->opt_level)
    return jit_error(JIT_EINVAL, "cg_optimize: level %d outside 0..%d", level, jit->opt_level);
  return cg_optimize_pipeline(jit, m, cg_default_pipeline(level));
}

jit_status cg_optimize_pipeline(cg_jit *jit, LLVMModuleRef m, const char *pipeline) {
  jit_status st = JIT_OK;
  LLVMTargetMachineRef tm = NULL;
  LLVMPassBuilderOptionsRef opts = NULL;
  if (!jit || !m || !pipeline) return jit_error(JIT_EINVAL, "cg_optimize: NULL argument");
  int level = jit->opt_level;
  if (strncmp(pipeline, "default<O", 9) == 0 && pipeline[9] >= '0' && pipeline[9] <= '3')
    level = pipeline[9] - '0';
  TRY(prepare(jit, m, "cg_optimize"));
  TRY(tm_get(jit, &tm));
  opts = LLVMCreatePassBuilderOptions();
  /* SLP follows the context's level, not the module's: a lighter pipeline still packs the
     per-lane scalar code some epilogues leave into vectors */
  LLVMPassBuilderOptionsSetLoopVectorization(opts, level >= 2);
  LLVMPassBuilderOptionsSetSLPVectorization(opts, jit->opt_level >= 2);
  LLVMPassBuilderOptionsSetLoopUnrolling(opts, level >= 2);
  LLVMErrorRef e = LLVMRunPasses(m, pipeline, tm, opts);
  if (e) st = llvm_err(e, "cg_optimize");
fail:
  if (opts) LLVMDisposePassBuilderOptions(opts);
  if (tm) tm_put(jit, tm);
  return st;
}

jit_status cg_emit_object(cg_jit *jit, LLVMModuleRef m, void **obj, size_t *len) {
  jit_status st = JIT_OK;
  LLVMTargetMachineRef tm = NULL;
  LLVMMemoryBufferRef buf = NULL;
  char *msg = NULL;
  if (!jit || !m || !obj || !len) return jit_error(JIT_EINVAL, "cg_emit_object: NULL argument");
  *obj = NULL;
  *len = 0;
  TRY(prepare(jit, m, "cg_emit_object"));
  TRY(tm_get(jit, &tm));
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &msg, &buf)) {
    st = jit_error(JIT_ECOMPILE, "cg_emit_object: %s", msg ? msg : "(no message)");
    goto fail;
  }
  size_t n = LLVMGetBufferSize(buf);
  void *p = malloc(n ? n : 1);
  if (!p) {
    st = jit_error(JIT_ENOMEM, "cg_emit_object: out of memory (%zu bytes)", n);
    goto fail;
  }
  memcpy(p, LLVMGetBufferStart(buf), n);
  *obj = p;
  *len = n;
fail:
  LLVMDisposeMessage(msg);
  if (buf) LLVMDisposeMemoryBuffer(buf);
  if (tm) tm_put(jit, tm);
  return st;
}

/* Defines the library's functions that generated code calls by name (the precompiled matmul
   core) in jd, at their addresses in this process: objects name them, so one from the disk cache
   links in any process, and a program linking tjit statically need not export them. Defined
   under jd's default tracker, they stay when a signature's code leaves and the JITDylib is
   reused. */
static LLVMErrorRef define_library_symbols(cg_jit *jit, LLVMOrcJITDylibRef jd) {
  static const struct {
    const char *name;
    void (*fn)(const gemm_core_plan *, void *const *, int64_t, int64_t, gemm_core_epi);
  } syms[] = {{GEMM_CORE_F32_SYMBOL, tjit_gemm_core_f32}, {GEMM_CORE_F64_SYMBOL, tjit_gemm_core_f64}};
  enum { N_SYMS = sizeof syms / sizeof syms[0] };
  LLVMOrcCSymbolMapPair pairs[N_SYMS];
  for (int i = 0; i < N_SYMS; i++) {
    LLVMOrcExecutorAddress at;
    memcpy(&at, &(uintptr_t){(uintptr_t)syms[i].fn}, sizeof at);
    pairs[i].Name = LLVMOrcLLJITMangleAndIntern(jit->lljit, syms[i].name);
    pairs[i].Sym.Address = at;
    pairs[i].Sym.Flags.GenericFlags =
        LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
    pairs[i].Sym.Flags.TargetFlags = 0;
  }
  LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(pairs, N_SYMS);
  LLVMErrorRef e = LLVMOrcJITDylibDefine(jd, mu);
  if (e) LLVMOrcDisposeMaterializationUnit(mu);
  return e;
}

/* A JITDylib that resolves process symbols (libc, libm) and the library's (define_library_symbols)
   and holds no signature's code yet: a spare one when there is one, else a new, uniquely named
   one. */
static jit_status dylib_take(cg_jit *jit, cg_dylib **out) {
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  LLVMErrorRef e;
  char name[40];
  pthread_mutex_lock(&jit->mu);
  cg_dylib *l = jit->spare;
  if (l) jit->spare = l->next;
  pthread_mutex_unlock(&jit->mu);
  if (l) {
    l->next = NULL;
    *out = l;
    return JIT_OK;
  }
  l = calloc(1, sizeof *l);
  if (!l) return jit_error(JIT_ENOMEM, "cg_add_object: out of memory");
  l->jit = jit;
  LLVMOrcExecutionSessionRef es = LLVMOrcLLJITGetExecutionSession(jit->lljit);
  snprintf(name, sizeof name, "tjit.%llu",
           (unsigned long long)atomic_fetch_add(&jit->next_lib_id, 1));
  if ((e = LLVMOrcExecutionSessionCreateJITDylib(es, &l->jd, name))) {
    free(l);
    return llvm_err(e, "cg_add_object: creating a JITDylib");
  }
  /* Kernels may call memset/memcpy (LLVM turns loops into them) or libm (f64 erf). */
  if ((e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
           &gen, LLVMOrcLLJITGetGlobalPrefix(jit->lljit), NULL, NULL))) {
    free(l); /* its JITDylib, without the generator, is never reused: it lives on, empty */
    return llvm_err(e, "cg_add_object: process symbols");
  }
  LLVMOrcJITDylibAddGenerator(l->jd, gen); /* takes gen */
  if ((e = define_library_symbols(jit, l->jd))) {
    free(l); /* as above */
    return llvm_err(e, "cg_add_object: the library's symbols");
  }
  *out = l;
  return JIT_OK;
}

jit_status cg_add_objects(cg_jit *jit, const void *const *objs, const size_t *lens, int n,
                          cg_dylib **lib) {
  jit_status st = JIT_OK;
  cg_dylib *l = NULL;
  LLVMErrorRef e;
  if (!jit || !objs || !lens || !lib || n < 1)
    return jit_error(JIT_EINVAL, "cg_add_object: NULL argument");
  *lib = NULL;
  for (int i = 0; i < n; i++)
    if (!objs[i] || lens[i] == 0) return jit_error(JIT_ECOMPILE, "cg_add_object: empty object");
  TRY(dylib_take(jit, &l));
  l->rt = LLVMOrcJITDylibCreateResourceTracker(l->jd); /* one for all: they leave together */
  for (int i = 0; i < n; i++) {
    LLVMMemoryBufferRef buf =
        LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)objs[i], lens[i], "tjit.object");
    if (!buf) {
      st = jit_error(JIT_ENOMEM, "cg_add_object: out of memory (%zu bytes)", lens[i]);
      goto fail;
    }
    if ((e = LLVMOrcLLJITAddObjectFileWithRT(jit->lljit, l->rt, buf))) { /* takes buf */
      st = llvm_err(e, "cg_add_object");
      goto fail;
    }
  }
  pthread_mutex_lock(&jit->mu);
  l->prev = NULL;
  l->next = jit->libs;
  if (jit->libs) jit->libs->prev = l;
  jit->libs = l;
  pthread_mutex_unlock(&jit->mu);
  *lib = l;
  return JIT_OK;
fail:
  if (l) dylib_give_back(l); /* NULL when dylib_take failed */
  return st;
}

jit_status cg_add_object(cg_jit *jit, const void *obj, size_t len, cg_dylib **lib) {
  if (!obj) return jit_error(JIT_EINVAL, "cg_add_object: NULL argument");
  return cg_add_objects(jit, &obj, &len, 1, lib);
}

/* Removes what l's tracker holds (the object's code memory goes back to the memory manager, its
   symbols leave the JITDylib) and puts l on the spare list. l is in neither list. */
static void dylib_give_back(cg_dylib *l) {
  if (l->rt) {
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(l->rt);
    if (e) LLVMConsumeError(e);
    LLVMOrcReleaseResourceTracker(l->rt);
    l->rt = NULL;
  }
  cg_jit *jit = l->jit;
  if (atomic_load(&l->failed)) {
    free(l); /* its JITDylib lives on, empty or not, until cg_jit_destroy */
    return;
  }
  pthread_mutex_lock(&jit->mu);
  l->prev = NULL;
  l->next = jit->spare;
  jit->spare = l;
  pthread_mutex_unlock(&jit->mu);
}

void cg_dylib_free(cg_dylib *lib) {
  if (!lib) return;
  cg_jit *jit = lib->jit;
  pthread_mutex_lock(&jit->mu);
  if (lib->prev)
    lib->prev->next = lib->next;
  else
    jit->libs = lib->next;
  if (lib->next) lib->next->prev = lib->prev;
  pthread_mutex_unlock(&jit->mu);
  dylib_give_back(lib);
}

/* ORC's session lookup is asynchronous in general (it may finish on a materialization thread),
   so the caller waits on a condition variable for the handler. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  uint64_t addr;
  char *err; /* malloc'd copy of LLVM's message, or NULL */
  int err_nomem;
} lookup_wait;

static void lookup_done(LLVMErrorRef e, LLVMOrcCSymbolMapPairs res, size_t n, void *ctx) {
  lookup_wait *w = ctx;
  uint64_t addr = 0;
  char *err = NULL;
  int nomem = 0;
  if (e) {
    char *msg = LLVMGetErrorMessage(e);
    err = strdup(msg ? msg : "(no message)");
    nomem = !err;
    LLVMDisposeErrorMessage(msg);
  } else if (n > 0) {
    addr = res[0].Sym.Address;
  }
  pthread_mutex_lock(&w->mu);
  w->addr = addr;
  w->err = err;
  w->err_nomem = nomem;
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

jit_status cg_lookup(cg_dylib *lib, const char *name, void **fn) {
  jit_status st = JIT_OK;
  if (!lib || !name || !fn) return jit_error(JIT_EINVAL, "cg_lookup: NULL argument");
  *fn = NULL;
  cg_jit *jit = lib->jit;
  LLVMOrcCJITDylibSearchOrderElement order[1] = {
      {lib->jd, LLVMOrcJITDylibLookupFlagsMatchAllSymbols}};
  LLVMOrcCLookupSetElement sym[1] = {
      {LLVMOrcLLJITMangleAndIntern(jit->lljit, name), LLVMOrcSymbolLookupFlagsRequiredSymbol}};
  lookup_wait w = {.done = 0};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  /* The lookup takes over the reference MangleAndIntern returned. */
  LLVMOrcExecutionSessionLookup(LLVMOrcLLJITGetExecutionSession(jit->lljit),
                                LLVMOrcLookupKindStatic, order, 1, sym, 1, lookup_done, &w);
  pthread_mutex_lock(&w.mu);
  while (!w.done)
    pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  if (w.err || w.err_nomem) atomic_store(&lib->failed, true);
  if (w.err || w.err_nomem) {
    st = jit_error(JIT_ECOMPILE, "cg_lookup: %s: %s", name, w.err ? w.err : "out of memory");
  } else if (!w.addr) {
    st = jit_error(JIT_ECOMPILE, "cg_lookup: %s has address 0", name);
  } else {
    *fn = (void *)(uintptr_t)w.addr;
  }
  free(w.err);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  return st;
}

void cg_set_nounwind(LLVMValueRef fn) {
  LLVMContextRef c = LLVMGetModuleContext(LLVMGetGlobalParent(fn));
  unsigned kind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c, kind, 0));
}

char *cg_module_text(LLVMModuleRef m) {
  char *s = LLVMPrintModuleToString(m);
  if (!s) return NULL;
  char *copy = strdup(s);
  LLVMDisposeMessage(s);
  return copy;
}
