/* fn.c: jitted functions: registration, the call path (key -> cache, trace + passes on a miss ->
 * run) and statistics. A lookup holds the function's lock briefly; a miss compiles under a
 * second lock of its own, so that other threads' hits and evictions never wait for a compile. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "trace/trace.h"

/* The jit_fns whose miss this thread is compiling, innermost first: a trace function that calls
   one of them again would wait forever on the lock it holds, so that call fails instead. */
typedef struct compile_frame {
  const jit_fn *f;
  struct compile_frame *up;
} compile_frame;
static _Thread_local compile_frame *compiling;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

jit_status jit_compile(jit_ctx *ctx, jit_trace_fn fn, void *user, const jit_fn_opts *opts,
                       jit_fn **out) {
  if (!out) return jit_error(JIT_EINVAL, "jit_compile: out is NULL");
  *out = NULL;
  if (!ctx) return jit_error(JIT_EINVAL, "jit_compile: ctx is NULL");
  if (!fn) return jit_error(JIT_EINVAL, "jit_compile: fn is NULL");
  if (!opts) return jit_error(JIT_EINVAL, "jit_compile: opts is NULL");
  const char *name = opts->name ? opts->name : "fn";
  if (opts->n_args < 0 || opts->n_args > JIT_MAX_FN_ARGS)
    return jit_error(JIT_EINVAL, "jit_compile: %s: n_args is %d (must be 0..%d)", name,
                     opts->n_args, JIT_MAX_FN_ARGS);
  if (opts->n_results < 1 || opts->n_results > JIT_MAX_FN_RESULTS)
    return jit_error(JIT_EINVAL, "jit_compile: %s: n_results is %d (must be 1..%d)", name,
                     opts->n_results, JIT_MAX_FN_RESULTS);
  if (opts->n_args < 64 && (opts->donate_mask >> opts->n_args) != 0)
    return jit_error(JIT_EINVAL, "jit_compile: %s: donate_mask 0x%llx names args past n_args = %d",
                     name, (unsigned long long)opts->donate_mask, opts->n_args);

  jit_fn *f = calloc(1, sizeof *f);
  if (!f) return jit_error(JIT_ENOMEM, "jit_compile: out of memory");
  f->name = strdup(name);
  if (!f->name) {
    free(f);
    return jit_error(JIT_ENOMEM, "jit_compile: out of memory");
  }
  if (pthread_mutex_init(&f->mu, NULL) != 0) {
    free(f->name);
    free(f);
    return jit_error(JIT_ENOMEM, "jit_compile: cannot create a mutex");
  }
  if (pthread_mutex_init(&f->compile_mu, NULL) != 0) {
    pthread_mutex_destroy(&f->mu);
    free(f->name);
    free(f);
    return jit_error(JIT_ENOMEM, "jit_compile: cannot create a mutex");
  }
  f->ctx = ctx;
  f->fn = fn;
  f->user = user;
  f->n_args = opts->n_args;
  f->n_results = opts->n_results;
  f->donate_mask = opts->donate_mask;
  *out = f;
  return JIT_OK;
}

void jit_fn_free(jit_fn *f) {
  if (!f) return;
  sig_lru_forget(f->ctx, f);
  sig_cache_free(&f->cache); /* a signature a call still runs is freed by that call */
  pthread_mutex_destroy(&f->compile_mu);
  pthread_mutex_destroy(&f->mu);
  free(f->name);
  free(f);
}

jit_status fn_check_args(const jit_fn *f, jit_array *const *args, const char *who) {
  if (f->n_args > 0 && !args)
    return jit_error(JIT_EINVAL, "%s: %s: args is NULL but the function takes %d", who, f->name,
                     f->n_args);
  for (int i = 0; i < f->n_args; i++) {
    if (!args[i]) return jit_error(JIT_EINVAL, "%s: %s: args[%d] is NULL", who, f->name, i);
    if (args[i]->ctx != f->ctx)
      return jit_error(JIT_EINVAL, "%s: %s: args[%d] belongs to another jit_ctx", who, f->name, i);
    if (args[i]->donated_to[0])
      return jit_error(JIT_EINVAL, "%s: args[%d] of '%s' was donated to an earlier call (of '%s')",
                       who, i, f->name, args[i]->donated_to);
  }
  return JIT_OK;
}

/* A donated array's buffer may be overwritten while the call runs: it must reach the call once.
   Refused (not copied) like XLA's "donate the same buffer twice", so that a call never silently
   loses the in-place update the caller asked for. */
static jit_status check_donations(const jit_fn *f, jit_array *const *args) {
  for (int i = 0; i < f->n_args && i < 64; i++) {
    if (!(f->donate_mask >> i & 1)) continue;
    for (int j = 0; j < f->n_args; j++)
      if (j != i && args[j] == args[i])
        return jit_error(JIT_EINVAL,
                         "jit_call: %s: args[%d] is also args[%d], which is donated: a donated "
                         "array may be passed only once", f->name, j < i ? j : i, j < i ? i : j);
  }
  return JIT_OK;
}

static bool verify_passes(void) {
#ifndef NDEBUG
  return true;
#else
  const char *v = getenv("TJIT_VERIFY");
  return v && strcmp(v, "1") == 0;
#endif
}

/* The compile's profile span (named after the function, with the key) and its log line. */
static void note_compile(const jit_fn *f, const jit_sig *s, const exec_stats *es, uint64_t pt) {
  if (log_compiles_on()) log_compile(f, s, es);
  if (!pt) return;
  char *key = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&key, &len);
  if (m) {
    sig_describe(s, m);
    if (fclose(m) != 0) key = NULL;
  }
  char name[160];
  snprintf(name, sizeof name, "compile %s", f->name);
  prof_end(pt, "compile", name, 3,
           (prof_arg[]){{"fn", f->name, 0}, {"signature", key ? key : "?", 0},
                        {"kernels", NULL, es->n_kernels}});
  free(key);
}

/* Traces, optimizes and compiles a new signature and inserts it, with a reference for the
   caller besides the cache's. Caller holds f->compile_mu. */
static jit_status compile_sig(jit_fn *f, uint64_t hash, jit_array *const *args,
                              const void *static_args, size_t static_len, jit_sig **out) {
  jit_status st = JIT_OK;
  jit_sig *s = NULL;
  compile_frame frame = {f, compiling};
  compiling = &frame;
  uint64_t pt = prof_begin();
  TRY(sig_new(hash, f->n_args, args, static_args, static_len, &s));

  trace_request req = {
      .name = f->name,
      .fn = f->fn,
      .user = f->user,
      .n_args = f->n_args,
      .n_results = f->n_results,
      .arg_types = s->arg_types,
      .static_args = s->static_bytes,
      .static_len = s->static_len,
  };
  double t0 = now_ms();
  uint64_t ptt = prof_begin();
  TRY(trace_function(&req, &s->traced));
  prof_end(ptt, "compile", "trace", 1, &(prof_arg){"fn", f->name, 0});
  double t1 = now_ms();
  if (!s->traced || s->traced->n_params != (uint32_t)f->n_args ||
      s->traced->n_results != (uint32_t)f->n_results)
    TRY(jit_error(JIT_EINTERNAL, "jit_call: %s: the tracer returned a function of the wrong arity",
                  f->name));
  s->optimized = ir_func_clone(s->traced);
  if (!s->optimized) TRY(jit_error(JIT_ENOMEM, "jit_call: %s: out of memory", f->name));
  TRY(ir_optimize(s->optimized, 0, verify_passes()));
  if (f->ctx->dist) s->program_hash = dist_program_hash(s->optimized);
  double t2 = now_ms();
  s->trace_ms = t1 - t0;
  s->passes_ms = t2 - t1;
  exec_stats es = {0};
  jit_mesh *mesh = NULL;
  TRY(spmd_choose_mesh(f->ctx, f->name, f->n_args, args, s->optimized, &mesh));
  if (mesh) TRY(spmd_compile(f->ctx, s, args, mesh, f->donate_mask, &es));
  else if (f->ctx->opt_level > 0)
    TRY(exec_build_donating(f->ctx, s->optimized, f->donate_mask, &s->exe, &es));
  s->fn = f;
  size_t peak = s->exe ? exec_peak_bytes(s->exe)
                       : ir_peak_live_bytes(s->spmd ? s->spmd->local : s->optimized);

  pthread_mutex_lock(&f->mu);
  st = sig_cache_insert(&f->cache, s);
  if (st == JIT_OK) {
    atomic_fetch_add(&s->refs, 1); /* the caller's, besides the cache's */
    f->stats.n_signatures = f->cache.n;
    f->stats.trace_ms += s->trace_ms;
    f->stats.passes_ms += s->passes_ms;
    f->stats.codegen_ms += es.codegen_ms;
    f->stats.llvm_ms += es.llvm_ms;
    f->stats.n_kernels += es.n_kernels;
    f->stats.peak_bytes = peak;
    f->stats.comm_bytes = s->spmd ? s->spmd->comm_bytes : 0;
    f->stats.disk_cache_hits += (uint64_t)es.disk_cache_hits;
  }
  pthread_mutex_unlock(&f->mu);
  TRY(st);
  compiling = frame.up;
  dump_env(f, s);
  if (pt || log_compiles_on()) note_compile(f, s, &es, pt);
  sig_lru_admit(f->ctx, s);
  *out = s;
  return JIT_OK;
fail:
  compiling = frame.up;
  sig_free(s);
  return st;
}

/* Runs a compiled signature into fresh result arrays (or donated args' buffers); on failure frees
   what it made. *consumed: the donated args' buffers were handed over or overwritten. */
static jit_status run_sig(jit_fn *f, const jit_sig *s, jit_array *const *args,
                          jit_array **results, bool *consumed) {
  jit_status st = JIT_OK;
  if (s->spmd) return spmd_run(f->ctx, s, f->n_args, args, f->n_results, results, consumed);
  const ir_func *g = s->optimized;
  const void *argp[JIT_MAX_FN_ARGS + 1];
  uint64_t ids[JIT_MAX_FN_ARGS + 1];
  void *resp[JIT_MAX_FN_RESULTS];
  for (int i = 0; i < f->n_args; i++) { /* all uncommitted */
    argp[i] = args[i]->data;
    ids[i] = args[i]->serial;
  }
  for (int i = 0; i < f->n_results; i++)
    if (exec_result_alias(s->exe, (uint32_t)i) < 0)
      TRY(array_new_type(f->ctx, ir_type_of(g, g->results[i]), &results[i]));
  /* only now, when nothing else can fail before the run, do results take donated buffers */
  *consumed = true;
  for (int i = 0; i < f->n_results; i++) {
    int p = exec_result_alias(s->exe, (uint32_t)i);
    if (p >= 0) TRY(array_adopt(args[p], ir_type_of(g, g->results[i]), &results[i]));
    resp[i] = results[i]->data;
  }
  if (s->exe) TRY(exec_run_ids(s->exe, argp, ids, resp));
  else TRY(ir_interp(g, argp, resp));
  return JIT_OK;
fail:
  for (int i = 0; i < f->n_results; i++) {
    jit_array_free(results[i]);
    results[i] = NULL;
  }
  return st;
}

/* Looks the key up under f->mu; on a hit takes a reference to the entry. */
static jit_sig *find_ref(jit_fn *f, uint64_t hash, jit_array *const *args, const void *static_args,
                         size_t static_len) {
  jit_sig *s = sig_cache_find(&f->cache, hash, f->n_args, args, static_args, static_len);
  if (s) atomic_fetch_add(&s->refs, 1);
  return s;
}

/* The checks every entry shares, then the signature args select: found in the cache or compiled
   now, with a reference the caller drops (sig_unref) when done with it. who names the entry in
   messages. A refusal before the lookup (bad args, a call from inside f's own trace, which holds
   f->compile_mu) leaves *s NULL and *counted false. */
static jit_status find_or_compile(jit_fn *f, const void *static_args, size_t static_len,
                                  jit_array *const *args, const char *who, jit_sig **out,
                                  bool *counted, bool *missed) {
  jit_status st = JIT_OK;
  if (static_len > 0 && !static_args)
    return jit_error(JIT_EINVAL, "%s: %s: static_args is NULL for %zu bytes", who, f->name,
                     static_len);
  TRY(fn_check_args(f, args, who));
  TRY(sharding_check_call(f->name, f->n_args, args)); /* committed args share one device list */
  for (compile_frame *c = compiling; c; c = c->up)
    if (c->f == f)
      return jit_error(JIT_EINVAL, "%s: %s: called from inside its own trace function", who,
                       f->name);

  uint64_t hash = sig_hash(f->n_args, args, static_args, static_len);
  *counted = true;
  /* Calls refused above are not counted: calls == cache_hits + cache_misses always holds. */
  pthread_mutex_lock(&f->mu);
  f->stats.calls++;
  jit_sig *s = find_ref(f, hash, args, static_args, static_len);
  if (s) f->stats.cache_hits++;
  pthread_mutex_unlock(&f->mu);
  if (!s) {
    /* Another thread may have compiled the key while this one waited for the compile lock. */
    pthread_mutex_lock(&f->compile_mu);
    pthread_mutex_lock(&f->mu);
    s = find_ref(f, hash, args, static_args, static_len);
    if (s) {
      f->stats.cache_hits++;
    } else {
      f->stats.cache_misses++;
      *missed = true;
      if (explain_misses_on()) explain_miss(f, args, static_args, static_len);
    }
    pthread_mutex_unlock(&f->mu);
    if (!s) st = compile_sig(f, hash, args, static_args, static_len, &s);
    pthread_mutex_unlock(&f->compile_mu);
  }
  if (st == JIT_OK) {
    sig_lru_touch(f->ctx, s);
    *out = s;
  }
  return st;
fail:
  return st;
}

/* The host's span of one jit_call: the function, whether its signature was cached, the status. */
static void prof_call(const jit_fn *f, uint64_t pt, bool missed, jit_status st) {
  char name[160];
  snprintf(name, sizeof name, "jit_call %s", f->name);
  prof_end(pt, "jit_call", name, 3,
           (prof_arg[]){{"fn", f->name, 0}, {"cache", missed ? "miss" : "hit", 0},
                        {"status", jit_status_str(st), 0}});
}

jit_status jit_call_static(jit_fn *f, const void *static_args, size_t static_len,
                           jit_array *const *args, jit_array **results) {
  double t0 = now_ms();
  uint64_t pt = prof_begin();
  if (!f) return jit_error(JIT_EINVAL, "jit_call: f is NULL");
  if (!results) return jit_error(JIT_EINVAL, "jit_call: %s: results is NULL", f->name);
  for (int i = 0; i < f->n_results; i++) results[i] = NULL;
  jit_sig *s = NULL;
  bool counted = false, missed = false;
  jit_status st = find_or_compile(f, static_args, static_len, args, "jit_call", &s, &counted,
                                  &missed);
  if (st == JIT_OK && f->donate_mask) st = check_donations(f, args);
  /* distributed: every rank's call is one collective call; none runs unless all can */
  bool dist = f->ctx->dist != NULL;
  if (dist) st = dist_call_begin(f->ctx, f->name, st, s ? s->hash : 0, s ? s->program_hash : 0);
  if (st == JIT_OK) {
    bool consumed = false;
    st = run_sig(f, s, args, results, &consumed);
    if (dist) st = dist_call_end(f->ctx, f->name, st);
    for (int i = 0; i < f->n_results && st != JIT_OK; i++) { /* another rank failed */
      jit_array_free(results[i]);
      results[i] = NULL;
    }
    /* a donated arg is deleted once its call ran, whether or not a result took its buffer (so
       the contract does not depend on shapes); a call refused before running keeps it */
    for (int i = 0; i < f->n_args && i < 64 && (st == JIT_OK || consumed); i++)
      if (f->donate_mask >> i & 1) array_delete_donated(args[i], f->name);
  }
  sig_unref(s); /* an eviction while it ran left the freeing to this call */
  if (pt) prof_call(f, pt, missed, st);
  if (!counted) return st;

  double us = (now_ms() - t0) * 1e3;
  pthread_mutex_lock(&f->mu);
  f->stats.last_call_us = us;
  pthread_mutex_unlock(&f->mu);
  return st;
}

jit_status jit_precompile_static(jit_fn *f, const void *static_args, size_t static_len,
                                 jit_array *const *args) {
  if (!f) return jit_error(JIT_EINVAL, "jit_precompile: f is NULL");
  jit_sig *s = NULL;
  bool counted = false, missed = false;
  jit_status st = find_or_compile(f, static_args, static_len, args, "jit_precompile", &s, &counted,
                                  &missed);
  sig_unref(s);
  return st;
}

jit_status fn_signature(jit_fn *f, jit_array *const *args, const char *who, jit_sig **out) {
  bool counted = false, missed = false;
  *out = NULL;
  return find_or_compile(f, NULL, 0, args, who, out, &counted, &missed);
}

jit_status jit_precompile(jit_fn *f, jit_array *const *args) {
  return jit_precompile_static(f, NULL, 0, args);
}

jit_status jit_call(jit_fn *f, jit_array *const *args, jit_array **results) {
  return jit_call_static(f, NULL, 0, args, results);
}

jit_status jit_fn_stats_get(const jit_fn *f, jit_fn_stats *out) {
  if (!f) return jit_error(JIT_EINVAL, "jit_fn_stats_get: f is NULL");
  if (!out) return jit_error(JIT_EINVAL, "jit_fn_stats_get: out is NULL");
  /* The lock is not part of f's observable state; stats are read under it for a consistent copy. */
  jit_fn *m = (jit_fn *)f;
  pthread_mutex_lock(&m->mu);
  *out = f->stats;
  out->kept_bytes = 0; /* the cached signatures' own, now (eviction takes its entry under mu) */
  for (int i = 0; i < f->cache.n; i++)
    if (f->cache.order[i]->exe) out->kept_bytes += exec_kept_bytes(f->cache.order[i]->exe);
  pthread_mutex_unlock(&m->mu);
  return JIT_OK;
}
