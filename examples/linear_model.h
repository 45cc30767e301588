/* linear_model.h: the linear model that examples/data_parallel.c and mpi_data_parallel.c train by
 * data-parallel SGD: its loss, one device's step under jit_shard_map (gradients averaged over the
 * "data" axis by jit_pmean, so the weights stay replicated), the same step on the whole batch, and
 * the seeded data (y = x @ truth + noise). */
#ifndef LINEAR_MODEL_H
#define LINEAR_MODEL_H

#include "tjit.h"

typedef struct model {
  const jit_mesh *mesh;
  double lr;
} model;

/* loss = mean((x @ w - y)^2): args w, x, y */
static void loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val d = jit_sub(t, jit_matmul(t, a[1], a[0]), a[2]);
  const int64_t *s = jit_val_shape(t, d);
  jit_val sq = jit_reduce_sum(t, jit_mul(t, d, d), 2, (const int[]){0, 1});
  r[0] = jit_mul(t, sq, jit_scalar(t, 1.0 / (double)(s[0] * s[1])));
}

/* One device: its loss and gradient, averaged over "data", and the update. */
static void device_step(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const model *m = user;
  jit_val vg[2]; /* loss, d loss / d w */
  jit_value_and_grad(t, loss, NULL, 3, a, 1 /* wrt w */, 0, vg);
  jit_val g = jit_pmean(t, vg[1], "data");
  r[0] = jit_sub(t, a[0], jit_mul(t, g, jit_scalar(t, m->lr)));
  r[1] = jit_pmean(t, vg[0], "data");
}

static void step_sharded(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const model *m = user;
  const char *in[3] = {"_,_", "data,_", "data,_"}; /* w replicated, examples split */
  const char *out[2] = {"_,_", ""};                 /* new w and the loss, replicated */
  jit_shard_map(t, device_step, user, m->mesh, 3, a, in, 2, r, out);
}

static void step_plain(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const model *m = user;
  jit_val vg[2];
  jit_value_and_grad(t, loss, NULL, 3, a, 1, 0, vg);
  r[0] = jit_sub(t, a[0], jit_mul(t, vg[1], jit_scalar(t, m->lr)));
  r[1] = vg[0];
}

static float uniform(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (2.0 / 16777216.0) - 1.0);
}

/* w = 0 [d, o], x uniform [n, d], y = x @ truth + 0.01 noise [n, o]; the same in every process */
static void model_data(int n, int d, int o, float *w, float *x, float *y) {
  unsigned seed = 1;
  float *truth = w; /* drawn into w first, then w is zeroed: no second buffer */
  for (int i = 0; i < d * o; i++) truth[i] = uniform(&seed);
  for (int i = 0; i < n * d; i++) x[i] = uniform(&seed);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < o; j++) {
      double s = 0.01 * uniform(&seed);
      for (int k = 0; k < d; k++) s += (double)x[i * d + k] * truth[k * o + j];
      y[i * o + j] = (float)s;
    }
  for (int i = 0; i < d * o; i++) w[i] = 0;
}

#endif /* LINEAR_MODEL_H */
