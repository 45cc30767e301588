/* exec_compile.c: turning a signature's LLVM modules into objects, several at once.
 *
 * A signature's code is split into parts: one module with its loop kernels and entry, and one
 * module (in an LLVMContext of its own) per matmul kernel. LLVM's time goes almost all into the
 * matmul kernels (W4: its two dots are ~90% of it), and parts in separate contexts may be
 * optimized and emitted on separate threads, so a signature with k dots compiles in about
 * max(part) instead of sum(parts) on a machine with the cores. Each part is its own disk-cache
 * entry, keyed by its own text: an identical matmul kernel in another signature hits.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/disk_cache.h"
#include "codegen/llvm_jit.h"
#include "runtime/error.h"
#include "runtime/exec_internal.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

typedef struct part_job {
  const exec *e;
  exec_part *parts;
  int n;
  atomic_int next; /* the next part a thread takes */
} part_job;

/* Optimizes and emits one part (not a disk-cache hit), storing the object in the disk cache. */
static jit_status compile_part(const exec *e, exec_part *p) {
  cg_jit *jit = e->ctx->jit;
  uint64_t pt = prof_begin();
  TRY_RET(cg_optimize_pipeline(jit, p->m, p->pipeline));
  if (p->after_optimize) TRY_RET(p->after_optimize(e, p->m));
  prof_end(pt, "compile", "llvm optimize", 1, &(prof_arg){"module", p->name, 0});
  pt = prof_begin();
  TRY_RET(cg_emit_object(jit, p->m, &p->obj, &p->len));
  prof_end(pt, "compile", "llvm emit", 2,
           (prof_arg[]){{"module", p->name, 0}, {"bytes", NULL, (int64_t)p->len}});
  if (p->key) {
    pt = prof_begin();
    cg_disk_cache_put(e->ctx->disk, p->key, p->key_len, p->obj, p->len);
    prof_end(pt, "compile", "disk cache store", 1, &(prof_arg){"bytes", NULL, (int64_t)p->len});
  }
  return JIT_OK;
}

/* Takes parts off the job until none is left; a failure keeps its message in the part, since
   the error text is per thread. */
static void *compile_worker(void *arg) {
  part_job *j = arg;
  for (;;) {
    int i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n) return NULL;
    exec_part *p = &j->parts[i];
    if (p->hit) continue;
    p->st = compile_part(j->e, p);
    if (p->st != JIT_OK) snprintf(p->msg, sizeof p->msg, "%s", jit_last_error());
  }
}

jit_status exec_compile_parts(const exec *e, exec_part *parts, int n, exec_stats *stats) {
  cg_jit *jit = e->ctx->jit;
  int to_compile = 0;
  for (int i = 0; i < n; i++) {
    exec_part *p = &parts[i];
    if (e->ctx->disk) {
      /* the key is the module before optimization (code generation rewrites it in place) and
         the pipeline that optimizes it, which may be lighter than the context's */
      char *text = cg_module_text(p->m);
      size_t len = text ? strlen(text) : 0;
      size_t cap = len + strlen(p->pipeline) + 16;
      char *keyed = text ? malloc(cap) : NULL;
      if (keyed) snprintf(keyed, cap, "; pipeline %s\n%s", p->pipeline, text);
      free(text);
      if (!keyed) return jit_error(JIT_ENOMEM, "jit_call: out of memory building the executable");
      jit_status st = cg_disk_cache_key(jit, keyed, &p->key, &p->key_len);
      free(keyed);
      if (st != JIT_OK) return st;
      uint64_t pt = prof_begin();
      p->hit = cg_disk_cache_get(e->ctx->disk, p->key, p->key_len, &p->obj, &p->len);
      prof_end(pt, "compile", "disk cache lookup", 1, &(prof_arg){"hit", NULL, p->hit});
      stats->disk_cache_lookups++;
      stats->disk_cache_hits += p->hit;
    }
    to_compile += !p->hit;
  }
  /* the calling thread is one of the compiling threads; the context's worker count bounds them
     (the workers themselves sleep while a signature compiles) */
  int threads = e->ctx->n_threads < to_compile ? e->ctx->n_threads : to_compile;
  part_job job = {.e = e, .parts = parts, .n = n};
  atomic_init(&job.next, 0);
  pthread_t tid[EXEC_MAX_COMPILE_THREADS];
  int started = 0;
  for (int t = 1; t < threads && t < EXEC_MAX_COMPILE_THREADS; t++) {
    if (pthread_create(&tid[started], NULL, compile_worker, &job) != 0) break; /* fewer, then */
    started++;
  }
  compile_worker(&job);
  for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
  for (int i = 0; i < n; i++)
    if (!parts[i].hit && parts[i].st != JIT_OK)
      return jit_error(parts[i].st, "%s", parts[i].msg);
  return JIT_OK;
}

void exec_parts_free(exec_part *parts, int n) {
  for (int i = 0; parts && i < n; i++) {
    if (parts[i].m) LLVMDisposeModule(parts[i].m);
    if (parts[i].c) LLVMContextDispose(parts[i].c);
    free(parts[i].key);
    free(parts[i].obj);
  }
  free(parts);
}
