/* demo.c: trace an MLP layer and a softmax, print their IR and fused kernels, check the results
 * against plain C loops, and show what the signature cache buys: the cold call traces and
 * compiles, the warm one does neither. Then a sharded run: a matmul of a row-sharded by a
 * column-sharded array over 8 virtual devices, its per-device program and where its result lives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tjit.h"

enum { BATCH = 64, IN = 256, OUT = 128 };

/* relu(x @ w + b) */
static void mlp_layer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val h = jit_add(t, jit_matmul(t, a[0], a[1]), a[2]);
  r[0] = jit_relu(t, h);
}

/* softmax over the last axis, max-subtracted */
static void softmax(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int last = jit_val_rank(t, a[0]) - 1;
  int64_t kept[JIT_MAX_RANK];
  memcpy(kept, jit_val_shape(t, a[0]), sizeof(int64_t) * (size_t)(last + 1));
  kept[last] = 1;
  jit_val m = jit_reshape(t, jit_reduce_max(t, a[0], 1, &last), last + 1, kept);
  jit_val e = jit_exp(t, jit_sub(t, a[0], m));
  jit_val s = jit_reshape(t, jit_reduce_sum(t, e, 1, &last), last + 1, kept);
  r[0] = jit_div(t, e, s);
}

static int check(jit_status st, const char *what) {
  if (st == JIT_OK) return 0;
  fprintf(stderr, "demo: %s failed: %s: %s\n", what, jit_status_str(st), jit_last_error());
  return 1;
}

static float uniform(unsigned *state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) * (2.0 / 16777216.0) - 1.0);
}

static double max_rel_err(const float *got, const double *want, size_t n) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; i++) {
    err = fmax(err, fabs(got[i] - want[i]));
    norm = fmax(norm, fabs(want[i]));
  }
  return norm > 0 ? err / norm : err;
}

/* sin(x @ w) */
static void sin_matmul(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_sin(t, jit_matmul(t, a[0], a[1]));
}

/* JAX's sharding tutorial: x split by rows over "a", w by columns over "b", on a 4x2 mesh; the
   product is split both ways with no communication, and sin keeps that layout. */
static int sharded(void) {
  int rc = 1;
  jit_ctx_opts co = jit_ctx_opts_default();
  co.n_devices = 8;
  jit_ctx *ctx = NULL;
  jit_mesh *m = NULL;
  jit_sharding *rows = NULL, *cols = NULL;
  jit_array *x = NULL, *w = NULL, *px = NULL, *pw = NULL, *y = NULL;
  jit_fn *f = NULL;
  if (check(jit_ctx_create(&co, &ctx), "jit_ctx_create")) return 1;
  static const char *const names[] = {"a", "b"};
  const int64_t sizes[2] = {4, 2}, shape[2] = {16, 16};
  float xs[256], ws[256], ys[256];
  unsigned seed = 7;
  for (int i = 0; i < 256; i++) xs[i] = uniform(&seed), ws[i] = uniform(&seed);
  if (check(jit_mesh_create(ctx, 2, sizes, names, NULL, &m), "jit_mesh_create") ||
      check(jit_sharding_create(m, "a,_", &rows), "jit_sharding_create") ||
      check(jit_sharding_create(m, "_,b", &cols), "jit_sharding_create") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, shape, xs, &x), "from_host") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, shape, ws, &w), "from_host") ||
      check(jit_device_put(x, rows, &px), "jit_device_put") ||
      check(jit_device_put(w, cols, &pw), "jit_device_put"))
    goto done;
  printf("\n== sharded: sin(x @ w) over a 4x2 mesh of 8 CPU devices ==\nx, split by rows over a:\n");
  jit_array_visualize(px, stdout);
  printf("w, split by columns over b:\n");
  jit_array_visualize(pw, stdout);
  jit_fn_opts o = {.name = "sin_matmul", .n_args = 2, .n_results = 1};
  if (check(jit_compile(ctx, sin_matmul, NULL, &o, &f), "jit_compile") ||
      check(jit_call(f, (jit_array *[]){px, pw}, &y), "jit_call"))
    goto done;
  printf("the per-device program (JIT_DUMP_PARTITIONED): no collective is needed\n");
  jit_fn_dump(f, NULL, JIT_DUMP_PARTITIONED, stdout);
  printf("sin(x @ w), split both ways:\n");
  jit_array_visualize(y, stdout);
  if (check(jit_array_to_host(y, ys, sizeof ys), "to_host")) goto done;
  double err = 0;
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      double s = 0;
      for (int k = 0; k < 16; k++) s += (double)xs[i * 16 + k] * ws[k * 16 + j];
      err = fmax(err, fabs(ys[i * 16 + j] - sin(s)));
    }
  printf("max error against a C loop: %.2e %s\n", err, err < 1e-5 ? "(ok)" : "(WRONG)");
  rc = err < 1e-5 ? 0 : 1;
done:
  jit_array_free(y);
  jit_array_free(px);
  jit_array_free(pw);
  jit_array_free(x);
  jit_array_free(w);
  jit_sharding_free(rows);
  jit_sharding_free(cols);
  jit_mesh_free(m);
  jit_fn_free(f);
  jit_ctx_destroy(ctx);
  return rc;
}

/* Runs f twice on args and prints its IR and the cold and warm call times. */
static int run_twice(jit_fn *f, jit_array *const *args, jit_array **out) {
  if (check(jit_call(f, args, out), "cold call")) return 1;
  jit_fn_stats cold;
  jit_fn_stats_get(f, &cold);
  jit_array_free(*out);
  if (check(jit_call(f, args, out), "warm call")) return 1;
  jit_fn_stats warm;
  jit_fn_stats_get(f, &warm);
  if (check(jit_fn_dump(f, NULL, JIT_DUMP_TRACED | JIT_DUMP_OPTIMIZED | JIT_DUMP_FUSED, stdout),
            "dump"))
    return 1;
  printf("cold call: %8.1f us (trace %.2f ms, passes %.2f ms, codegen %.2f ms, llvm %.2f ms, "
         "%d kernels)\n",
         cold.last_call_us, cold.trace_ms, cold.passes_ms, cold.codegen_ms, cold.llvm_ms,
         cold.n_kernels);
  printf("warm call: %8.1f us (cache hits %llu, misses %llu)\n", warm.last_call_us,
         (unsigned long long)warm.cache_hits, (unsigned long long)warm.cache_misses);
  return 0;
}

int main(void) {
  static float x[BATCH * IN], w[IN * OUT], b[OUT], y[BATCH * OUT];
  static double want[BATCH * OUT];
  unsigned seed = 42;
  for (size_t i = 0; i < BATCH * IN; i++) x[i] = uniform(&seed);
  for (size_t i = 0; i < IN * OUT; i++) w[i] = uniform(&seed) / 16;
  for (size_t i = 0; i < OUT; i++) b[i] = uniform(&seed);

  jit_ctx *ctx = NULL;
  jit_fn *layer = NULL, *smax = NULL;
  jit_array *ax = NULL, *aw = NULL, *ab = NULL, *ay = NULL, *ap = NULL;
  int rc = 1;
  if (check(jit_ctx_create(NULL, &ctx), "jit_ctx_create")) goto done;
  const int64_t xs[2] = {BATCH, IN}, ws[2] = {IN, OUT}, bs[1] = {OUT};
  if (check(jit_array_from_host(ctx, JIT_F32, 2, xs, x, &ax), "x") ||
      check(jit_array_from_host(ctx, JIT_F32, 2, ws, w, &aw), "w") ||
      check(jit_array_from_host(ctx, JIT_F32, 1, bs, b, &ab), "b"))
    goto done;

  printf("== mlp layer: relu(x @ w + b), x f32[%d,%d], w f32[%d,%d] ==\n", BATCH, IN, IN, OUT);
  jit_fn_opts lo = {.name = "mlp_layer", .n_args = 3, .n_results = 1};
  if (check(jit_compile(ctx, mlp_layer, NULL, &lo, &layer), "jit_compile")) goto done;
  jit_array *largs[3] = {ax, aw, ab};
  if (run_twice(layer, largs, &ay)) goto done;
  if (check(jit_array_to_host(ay, y, sizeof y), "to_host")) goto done;
  for (int i = 0; i < BATCH; i++)
    for (int j = 0; j < OUT; j++) {
      double s = b[j];
      for (int k = 0; k < IN; k++) s += (double)x[i * IN + k] * w[k * OUT + j];
      want[i * OUT + j] = s > 0 ? s : 0;
    }
  double e1 = max_rel_err(y, want, BATCH * OUT);
  printf("max relative error against a C loop: %.2e %s\n\n", e1, e1 < 1e-5 ? "(ok)" : "(WRONG)");

  printf("== softmax over axis 1 of f32[%d,%d] ==\n", BATCH, OUT);
  jit_fn_opts so = {.name = "softmax", .n_args = 1, .n_results = 1};
  if (check(jit_compile(ctx, softmax, NULL, &so, &smax), "jit_compile")) goto done;
  if (run_twice(smax, &ay, &ap)) goto done;
  if (check(jit_array_to_host(ap, x, sizeof(float) * BATCH * OUT), "to_host")) goto done;
  for (int i = 0; i < BATCH; i++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < OUT; j++) m = fmax(m, y[i * OUT + j]);
    for (int j = 0; j < OUT; j++) s += exp(y[i * OUT + j] - m);
    for (int j = 0; j < OUT; j++) want[i * OUT + j] = exp(y[i * OUT + j] - m) / s;
  }
  double e2 = max_rel_err(x, want, BATCH * OUT);
  printf("max relative error against a C loop: %.2e %s\n", e2, e2 < 1e-5 ? "(ok)" : "(WRONG)");
  rc = (e1 < 1e-5 && e2 < 1e-5) ? 0 : 1;
  if (sharded()) rc = 1;
done:
  jit_array_free(ap);
  jit_array_free(ay);
  jit_array_free(ab);
  jit_array_free(aw);
  jit_array_free(ax);
  jit_fn_free(smax);
  jit_fn_free(layer);
  jit_ctx_destroy(ctx);
  return rc;
}
