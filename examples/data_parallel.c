/* data_parallel.c: pmap-style data-parallel training with jit_shard_map. The batch is split over
 * the "data" axis of a mesh of 4 CPU devices; each device computes the loss and gradient of a
 * linear model on its examples, jit_pmean averages the gradients over the axis, and every device
 * applies the same SGD update, so the weights stay replicated. Each step is checked against the
 * same step on the whole batch, unsharded. Exit status 0 when every step agrees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "linear_model.h"

enum { N = 256, D = 32, O = 8, STEPS = 20, DEVICES = 4 };

static int check(jit_status st, const char *what) {
  if (st == JIT_OK) return 0;
  fprintf(stderr, "data_parallel: %s: %s: %s\n", what, jit_status_str(st), jit_last_error());
  return 1;
}

int main(void) {
  int rc = 1;
  jit_ctx_opts co = jit_ctx_opts_default();
  co.n_devices = DEVICES;
  jit_ctx *ctx = NULL;
  jit_mesh *mesh = NULL;
  jit_fn *sharded = NULL, *plain = NULL;
  jit_array *w0 = NULL, *x = NULL, *y = NULL, *ws = NULL, *wp = NULL;
  static float wv[D * O], xv[N * D], yv[N * O];
  model_data(N, D, O, wv, xv, yv);
  static const char *const axis[1] = {"data"};
  const int64_t n_dev = DEVICES, sw[2] = {D, O}, sx[2] = {N, D}, sy[2] = {N, O};
  if (check(jit_ctx_create(&co, &ctx), "jit_ctx_create") ||
      check(jit_mesh_create(ctx, 1, &n_dev, axis, NULL, &mesh), "jit_mesh_create") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, sw, wv, &w0), "from_host") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, sx, xv, &x), "from_host") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, sy, yv, &y), "from_host"))
    goto done;
  model m = {mesh, 0.1};
  jit_fn_opts o = {.name = "train_step", .n_args = 3, .n_results = 2};
  if (check(jit_compile(ctx, step_sharded, &m, &o, &sharded), "jit_compile") ||
      check(jit_compile(ctx, step_plain, &m, &o, &plain), "jit_compile"))
    goto done;
  printf("data-parallel SGD on %d devices: %d examples, %d per device\n", DEVICES, N, N / DEVICES);
  printf("step   loss (sharded)   loss (one device)   max |w difference|\n");
  ws = w0;
  wp = w0;
  double worst = 0;
  for (int step = 0; step < STEPS; step++) {
    jit_array *rs[2] = {NULL, NULL}, *rp[2] = {NULL, NULL};
    if (check(jit_call(sharded, (jit_array *[]){ws, x, y}, rs), "sharded step") ||
        check(jit_call(plain, (jit_array *[]){wp, x, y}, rp), "plain step"))
      goto done;
    float ls = 0, lp = 0, a[D * O], b[D * O];
    jit_array_to_host(rs[1], &ls, sizeof ls);
    jit_array_to_host(rp[1], &lp, sizeof lp);
    jit_array_to_host(rs[0], a, sizeof a);
    jit_array_to_host(rp[0], b, sizeof b);
    double diff = 0;
    for (int i = 0; i < D * O; i++) diff = fmax(diff, fabs(a[i] - b[i]));
    worst = fmax(worst, diff);
    if (step % 4 == 0 || step == STEPS - 1) printf("%4d   %14.6f   %17.6f   %.2e\n", step, ls, lp, diff);
    if (ws != w0) jit_array_free(ws);
    if (wp != w0) jit_array_free(wp);
    ws = rs[0];
    wp = rp[0];
    jit_array_free(rs[1]);
    jit_array_free(rp[1]);
  }
  printf("the sharded and unsharded steps agree to %.2e %s\n", worst, worst < 1e-5 ? "(ok)" : "(WRONG)");
  printf("\nthe per-device program of the sharded step:\n");
  jit_fn_dump(sharded, NULL, JIT_DUMP_PARTITIONED, stdout);
  rc = worst < 1e-5 ? 0 : 1;
done:
  if (ws != w0) jit_array_free(ws);
  if (wp != w0) jit_array_free(wp);
  jit_array_free(w0);
  jit_array_free(x);
  jit_array_free(y);
  jit_fn_free(sharded);
  jit_fn_free(plain);
  jit_mesh_free(mesh);
  jit_ctx_destroy(ctx);
  return rc;
}
