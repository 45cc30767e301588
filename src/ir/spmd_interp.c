/* spmd_interp.c: the interpreter on every device of a mesh: one thread per device (a collective
 * waits for its whole group), the collectives exchanged through a coll_world. The oracle of
 * partitioned execution (ir_interp_spmd) and how the interpreter evaluates a shard_map. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ir/collectives.h"
#include "ir/mesh_spec.h"
#include "ir/passes/passes.h"
#include "runtime/error.h"

typedef struct spmd_run {
  pthread_mutex_t mu; /* the start gate: no device runs before all threads exist */
  pthread_cond_t cv;
  int gate;           /* 0: closed, 1: run, -1: give up */
  const ir_func *local;
  coll_world *w;
  const void *const *const *args;
  void *const *const *results;
  jit_status *status;
  char (*msg)[256];
} spmd_run;

typedef struct spmd_thread {
  spmd_run *run;
  int pos;
} spmd_thread;

static jit_status world_hook(void *ctx, int pos, ir_op op, const ir_coll *c, const ir_type *in_t,
                             const void *in, void *out) {
  return coll_world_run(ctx, pos, op, c, in_t, in, out);
}

static void *spmd_device(void *arg) {
  spmd_thread *t = arg;
  spmd_run *r = t->run;
  pthread_mutex_lock(&r->mu);
  while (r->gate == 0) pthread_cond_wait(&r->cv, &r->mu);
  int gate = r->gate;
  pthread_mutex_unlock(&r->mu);
  if (gate < 0) return NULL;
  ir_device dev = {t->pos, world_hook, r->w};
  jit_status st = ir_interp_device(r->local, &dev, r->args[t->pos], r->results[t->pos]);
  r->status[t->pos] = st;
  if (st != JIT_OK) {
    snprintf(r->msg[t->pos], sizeof r->msg[0], "%s", jit_last_error());
    coll_world_abort(r->w); /* the others must not wait for this device */
  }
  return NULL;
}

/* local (which has its mesh) on each of the mesh's devices: args[d] / results[d] per device. */
static jit_status run_devices(const ir_func *local, const void *const *const *args,
                              void *const *const *results) {
  if (!local->mesh) return jit_error(JIT_EINVAL, "interp_spmd: @%s has no mesh", local->name);
  coll_world *w = NULL;
  jit_status st = coll_world_new(local->mesh, &w);
  if (st != JIT_OK) return st;
  int n = coll_world_devices(w);
  spmd_run run = {.local = local, .w = w, .args = args, .results = results,
                  .status = calloc((size_t)n, sizeof(jit_status)),
                  .msg = calloc((size_t)n, sizeof *run.msg)};
  pthread_mutex_init(&run.mu, NULL);
  pthread_cond_init(&run.cv, NULL);
  spmd_thread *ts = calloc((size_t)n, sizeof *ts);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  int started = 0;
  if (!run.status || !run.msg || !ts || !th) {
    st = jit_error(JIT_ENOMEM, "interp_spmd: out of memory");
    goto out;
  }
  for (int d = 0; d < n; d++) {
    ts[d] = (spmd_thread){&run, d};
    if (d > 0 && pthread_create(&th[d], NULL, spmd_device, &ts[d]) != 0) break;
    started = d + 1;
  }
  /* devices run only all together (a collective waits for its whole group) */
  pthread_mutex_lock(&run.mu);
  run.gate = started < n ? -1 : 1;
  pthread_cond_broadcast(&run.cv);
  pthread_mutex_unlock(&run.mu);
  if (started == n) spmd_device(&ts[0]);
  for (int d = 1; d < started; d++) pthread_join(th[d], NULL);
  if (started < n) {
    st = jit_error(JIT_EINTERNAL, "interp_spmd: cannot start %d device threads", n);
    goto out;
  }
  for (int d = 0; d < n && st == JIT_OK; d++) /* the cause first, then the aborted */
    if (run.status[d] != JIT_OK && !strstr(run.msg[d], COLL_ABORTED_MSG))
      st = jit_error(run.status[d], "%s", run.msg[d]);
  for (int d = 0; d < n && st == JIT_OK; d++)
    if (run.status[d] != JIT_OK) st = jit_error(run.status[d], "%s", run.msg[d]);
out:
  pthread_mutex_destroy(&run.mu);
  pthread_cond_destroy(&run.cv);
  coll_world_free(w);
  free(run.status);
  free(run.msg);
  free(ts);
  free(th);
  return st;
}

jit_status ir_interp_spmd(const ir_spmd *p, const void *const *const *args,
                          void *const *const *results) {
  if (!p || !p->local || !p->mesh || !args || !results)
    return jit_error(JIT_EINVAL, "interp_spmd: NULL program, args or results");
  return run_devices(p->local, args, results);
}

/* Between a global row-major array of type t and a dense local block of shape size at start. */
static void copy_block(const ir_type *t, const int64_t *start, const int64_t *size,
                       unsigned char *global, unsigned char *local, bool to_local) {
  static const int64_t origin[IR_MAX_RANK];
  size_t es = jit_dtype_size(t->dtype);
  if (to_local)
    sharding_copy_box((char *)local, size, origin, (const char *)global, t->dims, start, size,
                      t->rank, es);
  else
    sharding_copy_box((char *)global, t->dims, start, (const char *)local, size, origin, size,
                      t->rank, es);
}

static size_t bytes_of(const ir_type *t) { return (size_t)ir_type_numel(t) * jit_dtype_size(t->dtype); }

jit_status ir_eval_shard_map(const ir_func *f, const ir_ins *in, const void *const *ops,
                             unsigned char *out, const size_t *off) {
  const ir_func *b = ir_body(f, in);
  const ir_shard_map *a = &in->attr.smap;
  jit_status st = JIT_OK;
  uint32_t na = in->n_args, nr = b->n_results;
  int n = (int)ir_mesh_group(b->mesh, (1u << b->mesh->n_axes) - 1);
  const void **args = calloc((size_t)n * na + 1, sizeof *args);
  void **res = calloc((size_t)n * nr + 1, sizeof *res);
  const void **argp = calloc((size_t)n + 1, sizeof *argp);
  void **resp = calloc((size_t)n + 1, sizeof *resp);
  if (!args || !res || !argp || !resp) {
    st = jit_error(JIT_ENOMEM, "interp: @%s: shard_map: out of memory", f->name);
    goto done;
  }
  for (int d = 0; d < n && st == JIT_OK; d++) {
    for (uint32_t i = 0; i < na; i++) {
      const ir_type *g = ir_type_of(f, in->args[i]), *l = ir_type_of(b, i);
      unsigned char *blk = malloc(bytes_of(l) + 1);
      args[(size_t)d * na + i] = blk;
      if (!blk) {
        st = jit_error(JIT_ENOMEM, "interp: @%s: shard_map: out of memory", f->name);
        break;
      }
      int64_t start[IR_MAX_RANK], size[IR_MAX_RANK];
      sharding_shard_box(a->specs[i], g->dims, d, start, size);
      copy_block(g, start, size, (unsigned char *)ops[i], blk, true);
    }
    for (uint32_t k = 0; k < nr && st == JIT_OK; k++) {
      res[(size_t)d * nr + k] = malloc(bytes_of(ir_type_of(b, b->results[k])) + 1);
      if (!res[(size_t)d * nr + k]) st = jit_error(JIT_ENOMEM, "interp: @%s: shard_map: out of memory", f->name);
    }
    argp[d] = args + (size_t)d * na;
    resp[d] = res + (size_t)d * nr;
  }
  if (st == JIT_OK)
    st = run_devices(b, (const void *const *const *)argp, (void *const *const *)resp);
  /* each device's block of each result into place (replicas write the same bytes) */
  for (uint32_t k = 0; k < nr && st == JIT_OK; k++) {
    ir_type g;
    ir_result_type(f, in, k, &g);
    for (int d = 0; d < n; d++) {
      int64_t start[IR_MAX_RANK], size[IR_MAX_RANK];
      sharding_shard_box(a->specs[na + k], g.dims, d, start, size);
      copy_block(&g, start, size, out + off[k], res[(size_t)d * nr + k], false);
    }
  }
done:
  for (size_t i = 0; args && i < (size_t)n * na; i++) free((void *)args[i]);
  for (size_t i = 0; res && i < (size_t)n * nr; i++) free(res[i]);
  free(args);
  free(res);
  free(argp);
  free(resp);
  return st;
}
