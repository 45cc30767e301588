/* ctx.c: the context: virtual device count, worker thread count, compile-cache directory and
 * optimization level, resolved once from the options and the TJIT_* environment; it owns the
 * thread pool, the LLJIT and the disk cache. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/disk_cache.h"
#include "codegen/llvm_jit.h"
#include "runtime/buffers.h"
#include "runtime/error.h"
#include "runtime/pool.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

jit_ctx_opts jit_ctx_opts_default(void) {
  jit_ctx_opts o = {0};
  o.opt_level = 3;
  return o;
}

/* $TJIT_DEVICES, when set, must be a whole decimal number in 1..JIT_MAX_DEVICES: a typo must not
   silently give one device, since sharded programs would then run unsharded. */
static jit_status env_devices(int *out) {
  const char *s = getenv("TJIT_DEVICES");
  *out = 1;
  if (!s) return JIT_OK;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < 1 || v > JIT_MAX_DEVICES)
    return jit_error(JIT_EINVAL, "jit_ctx_create: TJIT_DEVICES='%s' is not an integer in 1..%d", s,
                     JIT_MAX_DEVICES);
  *out = (int)v;
  return JIT_OK;
}

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  return n > INT_MAX ? INT_MAX : (int)n;
}

static void ctx_free(jit_ctx *ctx);

jit_status jit_ctx_create(const jit_ctx_opts *opts, jit_ctx **out) {
  jit_status st = JIT_OK;
  jit_ctx *ctx = NULL;
  if (!out) return jit_error(JIT_EINVAL, "jit_ctx_create: out is NULL");
  *out = NULL;
  jit_ctx_opts o = opts ? *opts : jit_ctx_opts_default();
  if (o.n_devices < 0 || o.n_devices > JIT_MAX_DEVICES)
    return jit_error(JIT_EINVAL, "jit_ctx_create: n_devices is %d (must be 0..%d)", o.n_devices,
                     JIT_MAX_DEVICES);
  if (o.n_threads < 0)
    return jit_error(JIT_EINVAL, "jit_ctx_create: n_threads is %d (must be >= 0)", o.n_threads);
  if (o.opt_level < 0 || o.opt_level > 3)
    return jit_error(JIT_EINVAL, "jit_ctx_create: opt_level is %d (must be 0..3)", o.opt_level);

  ctx = calloc(1, sizeof *ctx);
  if (!ctx) return jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory");
  pthread_mutex_init(&ctx->devices_mu, NULL);
  pthread_mutex_init(&ctx->sigs_mu, NULL);
  TRY(sig_lru_init(ctx));
  ctx->n_devices = o.n_devices;
  if (ctx->n_devices == 0) TRY(env_devices(&ctx->n_devices));
  TRY(dist_open(ctx, o.distributed)); /* collective when distributed: first, so all ranks reach it */
  ctx->n_threads = o.n_threads ? o.n_threads : online_cores();
  ctx->opt_level = o.opt_level;
  const char *dir = o.cache_dir ? o.cache_dir : getenv("TJIT_CACHE_DIR");
  if (dir && *dir) {
    ctx->cache_dir = strdup(dir);
    if (!ctx->cache_dir) TRY(jit_error(JIT_ENOMEM, "jit_ctx_create: out of memory"));
  }
  if (ctx->n_threads > POOL_MAX_THREADS) ctx->n_threads = POOL_MAX_THREADS;
  TRY(pool_create(ctx->n_threads, &ctx->pool));
  TRY(buf_pool_create(&ctx->buffers));
  if (ctx->opt_level > 0) {
    TRY(cg_jit_create(ctx->opt_level, &ctx->jit));
    cg_target_describe(cg_jit_target(ctx->jit), ctx->target, sizeof ctx->target);
  } else {
    snprintf(ctx->target, sizeof ctx->target, "none: opt_level 0 runs the interpreter");
  }
  if (ctx->jit && ctx->cache_dir) TRY(cg_disk_cache_open(ctx->cache_dir, &ctx->disk));
  prof_ctx_created(ctx);
  *out = ctx;
  return JIT_OK;
fail:
  ctx_free(ctx);
  return st;
}

void jit_ctx_destroy(jit_ctx *ctx) {
  if (!ctx) return;
  prof_ctx_destroyed(ctx); /* no call runs any more: every event of this context is recorded */
  ctx_free(ctx);
}

static void ctx_free(jit_ctx *ctx) {
  if (!ctx) return;
  cg_disk_cache_close(ctx->disk);
  cg_jit_destroy(ctx->jit);
  pool_destroy(ctx->pool);
  pool_destroy(ctx->devices);
  dist_close(ctx);
  pthread_mutex_destroy(&ctx->devices_mu);
  pthread_mutex_destroy(&ctx->sigs_mu);
  buf_pool_release(ctx->buffers); /* arrays still alive keep the cached blocks' pool */
  free(ctx->cache_dir);
  free(ctx);
}

int jit_device_count(const jit_ctx *ctx) { return ctx ? ctx->n_devices : 0; }

const char *jit_ctx_target(const jit_ctx *ctx) { return ctx ? ctx->target : ""; }

jit_status ctx_device_threads(jit_ctx *ctx, struct pool **out) {
  jit_status st = JIT_OK;
  pthread_mutex_lock(&ctx->devices_mu);
  if (!ctx->devices) st = pool_create(ctx->n_local_devices, &ctx->devices);
  *out = ctx->devices;
  pthread_mutex_unlock(&ctx->devices_mu);
  return st;
}
