/* mpi_data_parallel.c: data_parallel.c's SGD across processes. Run it with
 *   mpirun -np 2 build/mpi_data_parallel        (as root: --allow-run-as-root --oversubscribe)
 * Each MPI rank is one process of a distributed context with $TJIT_DEVICES devices (default 1);
 * the "data" axis spans every device of every rank. Each rank holds only its own examples
 * (jit_array_from_process_local), the weights are replicated, and jit_pmean averages the
 * gradients across processes. Every step is checked, on every rank, against the same step on the
 * whole batch in one process (a context of its own). Exit status 0 when every step agrees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "linear_model.h"

enum { N = 256, D = 32, O = 8, STEPS = 20 };

static int rank; /* this process, for messages */

static int check(jit_status st, const char *what) {
  if (st == JIT_OK) return 0;
  fprintf(stderr, "mpi_data_parallel [rank %d]: %s: %s: %s\n", rank, what, jit_status_str(st),
          jit_last_error());
  return 1;
}

/* This rank's rows of a [N, cols] array split over "data": its contiguous part, as the devices it
   owns hold it (device ids are global: rank r owns a contiguous run of them). */
static jit_status local_rows(const jit_sharding *s, int n_proc, const float *all, int cols,
                             jit_array **out) {
  int64_t shape[2] = {N, cols}, per = N / n_proc;
  return jit_array_from_process_local(s, JIT_F32, 2, shape, all + rank * per * cols,
                                      sizeof(float) * (size_t)(per * cols), out);
}

int main(void) {
  int rc = 1;
  jit_ctx_opts co = jit_ctx_opts_default();
  co.distributed = 1; /* every rank calls this collectively; devices per rank: $TJIT_DEVICES */
  jit_ctx *ctx = NULL, *one = NULL;
  jit_mesh *mesh = NULL;
  jit_sharding *rows = NULL, *repl = NULL;
  jit_fn *sharded = NULL, *plain = NULL;
  jit_array *w0h = NULL, *w0 = NULL, *x = NULL, *y = NULL, *ws = NULL;
  jit_array *w1 = NULL, *x1 = NULL, *y1 = NULL, *wp = NULL;
  static float wv[D * O], xv[N * D], yv[N * O];
  model_data(N, D, O, wv, xv, yv);
  if (check(jit_ctx_create(&co, &ctx), "jit_ctx_create")) return 1;
  rank = jit_process_index(ctx);
  int n_proc = jit_process_count(ctx);
  const int64_t n_dev = jit_device_count(ctx), sw[2] = {D, O}, sx[2] = {N, D}, sy[2] = {N, O};
  static const char *const axis[1] = {"data"};
  if (N % n_dev != 0) {
    fprintf(stderr, "mpi_data_parallel: %d examples do not split over %lld devices\n", N,
            (long long)n_dev);
    goto done;
  }
  /* the distributed side: each rank its examples, the weights replicated everywhere */
  if (check(jit_mesh_create(ctx, 1, &n_dev, axis, NULL, &mesh), "jit_mesh_create") ||
      check(jit_sharding_create(mesh, "data,_", &rows), "jit_sharding_create") ||
      check(jit_sharding_create(mesh, "_,_", &repl), "jit_sharding_create") ||
      check(local_rows(rows, n_proc, xv, D, &x), "jit_array_from_process_local") ||
      check(local_rows(rows, n_proc, yv, O, &y), "jit_array_from_process_local") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, sw, wv, &w0h), "from_host") ||
      check(jit_device_put(w0h, repl, &w0), "jit_device_put"))
    goto done;
  /* one process, one device, the whole batch: the reference */
  jit_ctx_opts oo = jit_ctx_opts_default();
  oo.n_devices = 1;
  if (check(jit_ctx_create(&oo, &one), "jit_ctx_create") ||
      check(jit_array_from_host(one, JIT_F32, 2, sw, wv, &w1), "from_host") ||
      check(jit_array_from_host(one, JIT_F32, 2, sx, xv, &x1), "from_host") ||
      check(jit_array_from_host(one, JIT_F32, 2, sy, yv, &y1), "from_host"))
    goto done;
  model m = {mesh, 0.1};
  jit_fn_opts o = {.name = "train_step", .n_args = 3, .n_results = 2};
  if (check(jit_compile(ctx, step_sharded, &m, &o, &sharded), "jit_compile") ||
      check(jit_compile(one, step_plain, &m, &o, &plain), "jit_compile"))
    goto done;
  if (rank == 0) {
    printf("data-parallel SGD over %d processes, %lld devices: %d examples, %lld per device\n",
           n_proc, (long long)n_dev, N, (long long)(N / n_dev));
    printf("step   loss (%d processes)   loss (one process)   max |w difference|\n", n_proc);
  }
  ws = w0;
  wp = w1;
  double worst = 0;
  for (int step = 0; step < STEPS; step++) {
    jit_array *rs[2] = {NULL, NULL}, *rp[2] = {NULL, NULL};
    if (check(jit_call(sharded, (jit_array *[]){ws, x, y}, rs), "sharded step") ||
        check(jit_call(plain, (jit_array *[]){wp, x1, y1}, rp), "one-process step"))
      goto done;
    float ls = 0, lp = 0, a[D * O], b[D * O];
    /* the sharded results span every process: every rank gathers them (collective) */
    if (check(jit_array_to_host(rs[1], &ls, sizeof ls), "to_host") ||
        check(jit_array_to_host(rs[0], a, sizeof a), "to_host") ||
        check(jit_array_to_host(rp[1], &lp, sizeof lp), "to_host") ||
        check(jit_array_to_host(rp[0], b, sizeof b), "to_host"))
      goto done;
    double diff = 0;
    for (int i = 0; i < D * O; i++) diff = fmax(diff, fabs(a[i] - b[i]));
    worst = fmax(worst, diff);
    if (rank == 0 && (step % 4 == 0 || step == STEPS - 1))
      printf("%4d   %17.6f   %18.6f   %.2e\n", step, ls, lp, diff);
    if (ws != w0) jit_array_free(ws);
    if (wp != w1) jit_array_free(wp);
    ws = rs[0];
    wp = rp[0];
    jit_array_free(rs[1]);
    jit_array_free(rp[1]);
  }
  printf("[rank %d] %d processes and one process agree to %.2e %s\n", rank, n_proc, worst,
         worst < 1e-5 ? "(ok)" : "(WRONG)");
  rc = worst < 1e-5 ? 0 : 1;
done:
  if (ws != w0) jit_array_free(ws);
  if (wp != w1) jit_array_free(wp);
  jit_array_free(w0h);
  jit_array_free(w0);
  jit_array_free(x);
  jit_array_free(y);
  jit_array_free(w1);
  jit_array_free(x1);
  jit_array_free(y1);
  jit_fn_free(sharded);
  jit_fn_free(plain);
  jit_sharding_free(rows);
  jit_sharding_free(repl);
  jit_mesh_free(mesh);
  jit_ctx_destroy(one);
  jit_ctx_destroy(ctx); /* collective: the last distributed context finalizes MPI */
  return rc;
}
