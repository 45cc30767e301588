/* spmd_call.c: partitioned signatures: choosing the mesh, partitioning and compiling the
 * per-device program, and running it: every arg laid out as the partitioner wants, device d's
 * program on device thread d (its collectives meet the other devices' through shared memory),
 * the results returned as committed arrays. In a distributed context each rank runs the devices
 * it owns, and collectives between ranks go through MPI (runtime/transport_mpi.c). */
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "runtime/error.h"
#include "runtime/exec.h"
#include "runtime/pool.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "runtime/transport.h"

jit_status spmd_choose_mesh(const jit_ctx *ctx, const char *fn_name, int n_args,
                            jit_array *const *args, const ir_func *g, jit_mesh **out) {
  *out = NULL;
  for (int i = 0; i < n_args && !*out; i++)
    if (args[i]->sharding) *out = args[i]->sharding->mesh;
  for (uint32_t r = 0; r < g->n_ins; r++) {
    const ir_ins *in = &g->ins[r];
    jit_mesh *m = in->op == IR_SHARDING ? in->attr.sharding->mesh
                  : in->op == IR_SHARD_MAP && in->n_args + in->attr.smap.n_out > 0
                      ? in->attr.smap.specs[0]->mesh
                      : NULL;
    if (!m) continue;
    if (m->ctx != ctx)
      return jit_error(JIT_EINVAL, "jit_call: %s: a %s%s%s:%d uses a mesh of another jit_ctx",
                       fn_name, in->op == IR_SHARDING ? "sharding constraint" : "shard_map",
                       in->loc.file ? " at " : "", in->loc.file ? in->loc.file : "", in->loc.line);
    if (!*out) *out = m;
    else if (!mesh_equal(m, *out)) {
      char a[256], b[256];
      mesh_format(*out, a, sizeof a);
      mesh_format(m, b, sizeof b);
      return jit_error(JIT_ESHARDING,
                       "jit_call: %s: a %s%s%s:%d is over %s, but the call is partitioned over %s",
                       fn_name, in->op == IR_SHARDING ? "sharding constraint" : "shard_map",
                       in->loc.file ? " at " : "", in->loc.file ? in->loc.file : "",
                       in->loc.line, b, a);
    }
  }
  return JIT_OK;
}

jit_status spmd_compile(jit_ctx *ctx, jit_sig *s, jit_array *const *args, jit_mesh *mesh,
                        uint64_t donate, exec_stats *stats) {
  jit_status st = JIT_OK;
  jit_sharding *small[16] = {0}, **sh = small;
  ir_func *local = NULL;
  if (s->n_args > 16 && !(sh = calloc((size_t)s->n_args, sizeof *sh)))
    return jit_error(JIT_ENOMEM, "jit_call: out of memory");
  /* an arg on another mesh over the same devices is resharded onto this one, as JAX does */
  for (int i = 0; i < s->n_args; i++)
    sh[i] = args[i]->sharding && mesh_equal(args[i]->sharding->mesh, mesh) ? args[i]->sharding : NULL;
  uint64_t pt = prof_begin();
  TRY(ir_partition(s->optimized, mesh, sh, &s->spmd));
  prof_end(pt, "compile", "partition", 1, &(prof_arg){"devices", NULL, mesh->n_devices});
  if (ctx->dist && !mesh_all_local(mesh))
    TRY(dist_transport_new(ctx, mesh, s->spmd->local->mesh, &s->world));
  else
    TRY(coll_transport_shm_new(s->spmd->local->mesh, &s->world));
  if (ctx->opt_level > 0) {
    /* the pipeline once more on the per-device program (an inlined shard_map body, the gathers
       and slices), on a copy: the partitioned dump shows the partitioner's own output */
    local = ir_func_clone(s->spmd->local);
    if (!local) TRY(jit_error(JIT_ENOMEM, "jit_call: out of memory"));
    TRY(ir_optimize(local, 0, false));
    TRY(exec_build_donating(ctx, local, donate, &s->exe, stats));
  }
fail:
  ir_func_free(local);
  if (sh != small) free(sh);
  return st;
}

typedef struct device_job {
  const jit_sig *s;
  int n;                    /* devices */
  const int *local;         /* the mesh positions this process runs, one per device thread */
  const void **args;        /* [device][param], n * n_params */
  const uint64_t *ids;      /* [param]: the contents of every device's block of it (exec_run_ids'
                               arg_ids: the arg's serial where the blocks are its own, 0 for a
                               copy made for this call) */
  void **results;           /* [device][result] */
  jit_status *status;
  char (*msg)[256];
} device_job;

static jit_status world_hook(void *ctx, int pos, ir_op op, const ir_coll *c, const ir_type *in_t,
                             const void *in, void *out) {
  uint64_t t0 = prof_begin();
  jit_status st = coll_transport_run(ctx, pos, op, c, in_t, in, out);
  if (t0) {
    size_t bytes = 0; /* axis_index has no operand */
    if (in_t) array_byte_size(in_t->dtype, in_t->rank, in_t->dims, &bytes);
    prof_end(t0, "collective", ir_op_name[op], 2,
             (prof_arg[]){{"device", NULL, pos}, {"bytes", NULL, (int64_t)bytes}});
  }
  return st;
}

static void run_device(void *arg, int ith, int nth) {
  (void)nth;
  device_job *j = arg;
  int d = j->local[ith];
  const jit_sig *s = j->s;
  uint32_t np = s->spmd->n_params, nr = s->spmd->n_results;
  ir_device dev = {d, world_hook, s->world};
  const ir_device *saved = ir_set_thread_device(&dev);
  const void *const *a = j->args + (size_t)d * np;
  void *const *r = j->results + (size_t)d * nr;
  uint64_t t0 = prof_begin();
  if (t0 && d > 0) prof_name_thread("device", d); /* device 0 runs on the calling thread */
  jit_status st = s->exe ? exec_run_device(s->exe, d, j->n, a, j->ids, r)
                          : ir_interp(s->spmd->local, a, r);
  prof_end(t0, "device", s->optimized->name, 1, &(prof_arg){"device", NULL, d});
  ir_set_thread_device(saved);
  j->status[d] = st;
  if (st != JIT_OK) {
    snprintf(j->msg[d], sizeof j->msg[0], "%s", jit_last_error());
    coll_transport_abort(s->world); /* the others must not wait for this device */
  }
}

/* Whether result r can take donor's shards as they are: they are the very blocks the devices
   read (not a resharded copy) and have r's size. */
static bool shards_adoptable(const jit_array *donor, const void *const *blocks, size_t stride,
                             const jit_array *r, int n) {
  if (!donor->shards || donor->shard_nbytes != r->shard_nbytes) return false;
  for (int d = 0; d < n; d++)
    if (blocks[(size_t)d * stride] != donor->shards[d]) return false;
  return true;
}

/* Points each device's param i at result k's own block, which the executable updates in place:
   donor's shards become the result's (swapped with the result's fresh ones, which donor gives
   back when it is deleted), or, when they cannot, the result's blocks start as copies. */
static void donate_blocks(jit_array *donor, jit_array *res, const void **args, size_t np, size_t i,
                          int n) {
  if (shards_adoptable(donor, args + i, np, res, n)) {
    /* the blocks with where they go back (a pool, or free() for jit_device_put's) */
    void **shards = res->shards;
    struct buf_pool *pool = res->shard_pool;
    size_t cap = res->shard_cap;
    res->shards = donor->shards;
    res->shard_pool = donor->shard_pool;
    res->shard_cap = donor->shard_cap;
    donor->shards = shards;
    donor->shard_pool = pool;
    donor->shard_cap = cap;
  } else {
    for (int d = 0; d < n; d++)
      if (res->shards[d]) memcpy(res->shards[d], args[(size_t)d * np + i], res->shard_nbytes);
  }
  for (int d = 0; d < n; d++) args[(size_t)d * np + i] = res->shards[d];
}

jit_status spmd_run(jit_ctx *ctx, const jit_sig *s, int n_args, jit_array *const *args,
                    int n_results, jit_array **results, bool *consumed) {
  jit_status st = JIT_OK;
  const ir_spmd *p = s->spmd;
  int n = p->mesh->n_devices;
  size_t np = (size_t)n_args, nr = (size_t)n_results;
  device_job j = {s, n, NULL, NULL, NULL, NULL, NULL, NULL};
  int *local = calloc((size_t)n, sizeof *local), n_local = 0;
  jit_array **tmp = calloc(np + 1, sizeof *tmp);
  j.args = calloc(np * (size_t)n + 1, sizeof *j.args);
  uint64_t ids[JIT_MAX_FN_ARGS + 1] = {0}; /* n_args <= JIT_MAX_FN_ARGS */
  j.ids = ids;
  j.results = calloc(nr * (size_t)n + 1, sizeof *j.results);
  j.status = calloc((size_t)n, sizeof *j.status);
  j.msg = calloc((size_t)n, sizeof *j.msg);
  const void **blocks = calloc((size_t)n, sizeof *blocks);
  for (int k = 0; k < n_results; k++) results[k] = NULL;
  if (!tmp || !j.args || !j.results || !j.status || !j.msg || !blocks || !local)
    TRY(jit_error(JIT_ENOMEM, "jit_call: out of memory"));
  for (int d = 0; d < n; d++)
    if (ctx_device_local(ctx, p->mesh->device_ids[d])) local[n_local++] = d;
  j.local = local;
  uint64_t pt = prof_begin();
  for (size_t i = 0; i < np; i++) {
    TRY(sharding_device_blocks(args[i], p->param_shardings[i], blocks, &tmp[i]));
    for (int d = 0; d < n; d++) j.args[(size_t)d * np + i] = blocks[d];
    ids[i] = tmp[i] ? 0 : args[i]->serial;
  }
  prof_end(pt, "copy", "lay out args", 1, &(prof_arg){"args", NULL, (int64_t)np});
  const ir_func *g = s->optimized;
  for (size_t k = 0; k < nr; k++) {
    TRY(array_new_committed(ctx, ir_type_of(g, g->results[k]), p->result_shardings[k], &results[k]));
  }
  *consumed = true;
  for (size_t k = 0; k < nr; k++) {
    int i = exec_result_alias(s->exe, (uint32_t)k);
    if (i >= 0) donate_blocks(args[i], results[k], j.args, np, (size_t)i, n);
    for (int d = 0; d < n; d++) j.results[(size_t)d * nr + k] = results[k]->shards[d];
  }
  pool *devices;
  TRY(ctx_device_threads(ctx, &devices));
  if (pool_n_threads(devices) < n_local)
    TRY(jit_error(JIT_EINTERNAL, "jit_call: %d device threads for %d devices of a mesh",
                  pool_n_threads(devices), n_local));
  if (n_local > 0) pool_run(devices, run_device, &j, n_local);
  /* the first failure is the cause; the others may only report that it aborted them */
  for (int k = 0; k < n_local && st == JIT_OK; k++)
    if (j.status[local[k]] != JIT_OK && !strstr(j.msg[local[k]], COLL_ABORTED_MSG))
      st = jit_error(j.status[local[k]], "%s", j.msg[local[k]]);
  for (int k = 0; k < n_local && st == JIT_OK; k++)
    if (j.status[local[k]] != JIT_OK) st = jit_error(j.status[local[k]], "%s", j.msg[local[k]]);
  if (st != JIT_OK) {
    dist_report_failure(ctx, st); /* other ranks' devices may be waiting for these */
    coll_transport_reset(s->world);
  }
fail:
  if (st != JIT_OK)
    for (int k = 0; k < n_results; k++) {
      jit_array_free(results[k]);
      results[k] = NULL;
    }
  for (size_t i = 0; tmp && i < np; i++) jit_array_free(tmp[i]);
  free(tmp);
  free(j.args);
  free(j.results);
  free(j.status);
  free(j.msg);
  free(blocks);
  free(local);
  return st;
}
