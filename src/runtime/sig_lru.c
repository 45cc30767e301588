/* sig_lru.c: the bound on a context's compiled signatures: every cached signature of every jit_fn
 * is on one list; past TJIT_MAX_SIGNATURES the least recently called ones are evicted. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

/* Eviction picks the oldest stamp by a walk over the list: O(bound) per admission, which is
   microseconds against the milliseconds of the compile that caused it, and keeps warm calls free
   of any lock but their function's (a move-to-front list would need this lock on every call). */

jit_status sig_lru_init(jit_ctx *ctx) {
  int max = JIT_DEFAULT_MAX_SIGNATURES;
  const char *v = getenv("TJIT_MAX_SIGNATURES");
  if (v) {
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    /* a typo must not silently leave a long-running program without its bound */
    if (end == v || *end != '\0' || errno != 0 || n < 0 || n > INT_MAX)
      return jit_error(JIT_EINVAL,
                       "jit_ctx_create: TJIT_MAX_SIGNATURES='%s' is not a whole number >= 0", v);
    max = (int)n;
  }
  atomic_init(&ctx->max_sigs, max);
  return JIT_OK;
}

static void unlink_sig(jit_ctx *ctx, jit_sig *s) {
  if (s->lru_prev) s->lru_prev->lru_next = s->lru_next;
  else ctx->sigs = s->lru_next;
  if (s->lru_next) s->lru_next->lru_prev = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
  s->admitted = false;
  ctx->n_sigs--;
}

/* Removes least recently used signatures (never KEEP) until the bound holds; returns them linked
   through lru_next, each carrying the reference its cache held. Caller holds ctx->sigs_mu. */
static jit_sig *evict_locked(jit_ctx *ctx, const jit_sig *keep) {
  jit_sig *victims = NULL;
  int max = atomic_load(&ctx->max_sigs);
  while (max > 0 && ctx->n_sigs > max) {
    jit_sig *v = NULL;
    uint64_t oldest = UINT64_MAX;
    for (jit_sig *s = ctx->sigs; s; s = s->lru_next) {
      uint64_t t = atomic_load_explicit(&s->last_use, memory_order_relaxed);
      if (s != keep && t <= oldest) {
        oldest = t;
        v = s;
      }
    }
    if (!v) break;
    unlink_sig(ctx, v);
    /* The owner's lock is a leaf (held briefly, never while taking another), so waiting for it
       here cannot deadlock. A call that found v before this holds its own reference. */
    jit_fn *f = v->fn;
    pthread_mutex_lock(&f->mu);
    sig_cache_remove(&f->cache, v);
    f->stats.n_signatures = f->cache.n;
    pthread_mutex_unlock(&f->mu);
    v->lru_next = victims;
    victims = v;
  }
  return victims;
}

/* Frees what eviction took, outside every lock: removing code from LLVM takes its session lock. */
static void release(jit_sig *victims) {
  while (victims) {
    jit_sig *v = victims;
    victims = v->lru_next;
    v->lru_next = NULL;
    sig_unref(v);
  }
}

void sig_lru_touch(jit_ctx *ctx, jit_sig *s) {
  uint64_t now = atomic_fetch_add_explicit(&ctx->sig_clock, 1, memory_order_relaxed);
  atomic_store_explicit(&s->last_use, now, memory_order_relaxed);
}

void sig_lru_admit(jit_ctx *ctx, jit_sig *s) {
  sig_lru_touch(ctx, s);
  pthread_mutex_lock(&ctx->sigs_mu);
  s->lru_prev = NULL;
  s->lru_next = ctx->sigs;
  if (ctx->sigs) ctx->sigs->lru_prev = s;
  ctx->sigs = s;
  s->admitted = true;
  ctx->n_sigs++;
  jit_sig *victims = evict_locked(ctx, s);
  pthread_mutex_unlock(&ctx->sigs_mu);
  release(victims);
}

void sig_lru_forget(jit_ctx *ctx, const jit_fn *f) {
  pthread_mutex_lock(&ctx->sigs_mu);
  /* f's cache is stable here: its owner is freeing it, and evictions run under sigs_mu. */
  for (int i = 0; i < f->cache.n; i++)
    if (f->cache.order[i]->admitted) unlink_sig(ctx, f->cache.order[i]);
  pthread_mutex_unlock(&ctx->sigs_mu);
}

int sig_lru_set_max(jit_ctx *ctx, int max) {
  pthread_mutex_lock(&ctx->sigs_mu);
  int old = atomic_exchange(&ctx->max_sigs, max < 0 ? 0 : max);
  jit_sig *victims = evict_locked(ctx, NULL);
  pthread_mutex_unlock(&ctx->sigs_mu);
  release(victims);
  return old;
}
