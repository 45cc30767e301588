/* cnn.c: trains a small convolutional net for 50 SGD steps on synthetic 12x12 images of four
 * classes: a horizontal, a vertical, a diagonal or an anti-diagonal bar of random length and
 * place, over uniform noise. The net is conv 3x3 (1 -> 8 features, SAME) + bias, relu, a 2x2
 * max-pool, a depthwise 3x3 conv (one filter per feature, feature_group_count 8, SAME) + bias,
 * relu, then a dense layer to the four logits and the mean softmax cross-entropy. Each step is
 * one jitted function (weights, images, labels) -> (updated weights, loss) whose weight args are
 * donated, so the update runs in place; a fresh batch is drawn on the host every step.
 *
 *   cnn             batch 32, lr 0.5 (ctest example_cnn; seeds 1-6 end at 0.05-0.23x)
 *   --seed N        the weights' and the data's seed (default 1)
 *   --lr X          SGD's learning rate
 *   --batch N       images per step
 *
 * Exit status 0 when the mean loss of the last 5 steps is under 0.5x that of the first 5. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tjit.h"

enum { STEPS = 50, WINDOW = 5, SIDE = 12, CLASSES = 4, F1 = 8, POOLED = SIDE / 2 };
#define REQUIRED_DROP 0.5 /* last-WINDOW mean loss / first-WINDOW mean loss must be below this */
#define NOISE 0.3         /* the images' uniform noise is in [-NOISE, NOISE] */

/* The weights, in the order of the step's args and results. */
enum {
  W_CONV,  /* [3, 3, 1, F1] HWIO */
  W_BCONV, /* [F1] */
  W_DW,    /* [3, 3, 1, F1] HWIO: one 3x3 filter per feature */
  W_BDW,   /* [F1] */
  W_DENSE, /* [POOLED * POOLED * F1, CLASSES] */
  W_BDENSE, /* [CLASSES] */
  N_WEIGHTS
};
/* The step's args: the weights, images f32 [B, SIDE, SIDE, 1] and labels i32 [B]; its results:
   the updated weights, then the loss (a f32 scalar). */
enum { A_IMAGES = N_WEIGHTS, A_LABELS, N_ARGS, R_LOSS = N_WEIGHTS, N_RESULTS };

typedef struct config {
  int64_t batch;
  double lr;
  uint64_t seed;
} config;

static int weight_shape(int w, int64_t shape[4]) {
  switch (w) {
  case W_CONV:
  case W_DW: shape[0] = shape[1] = 3, shape[2] = 1, shape[3] = F1; return 4;
  case W_DENSE: shape[0] = POOLED * POOLED * F1, shape[1] = CLASSES; return 2;
  case W_BDENSE: shape[0] = CLASSES; return 1;
  default: shape[0] = F1; return 1;
  }
}

/* Biases start at 0, the filters He-uniform (s = sqrt(6 / fan-in): they feed a relu), the dense
   matrix uniform(-s, s) with s = 1/sqrt(fan-in). */
static double init_scale(int w) {
  switch (w) {
  case W_CONV:
  case W_DW: return sqrt(6.0 / 9.0); /* fan-in 3 x 3 x 1 */
  case W_DENSE: return 1.0 / sqrt((double)(POOLED * POOLED * F1));
  default: return 0.0;
  }
}

static void cnn_init(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)a;
  const config *c = user;
  jit_val keys = jit_random_split(t, jit_random_key(t, c->seed), N_WEIGHTS);
  for (int w = 0; w < N_WEIGHTS; w++) {
    int64_t shape[4];
    int rank = weight_shape(w, shape);
    double s = init_scale(w);
    if (s == 0.0) {
      r[w] = jit_full(t, JIT_F32, rank, shape, 0.0);
      continue;
    }
    jit_val key = jit_reshape(t, jit_slice(t, keys, (const int64_t[]){w, 0},
                                           (const int64_t[]){w + 1, 2}, NULL),
                              1, (const int64_t[]){2});
    r[w] = jit_random_uniform(t, key, JIT_F32, rank, shape, -s, s);
  }
}

/* relu(conv(x, w) + b), a 3x3 SAME conv of NHWC x HWIO with `groups` feature groups */
static jit_val conv_relu(jit_trace *t, jit_val x, jit_val w, jit_val b, int64_t groups) {
  const int64_t one[2] = {1, 1};
  jit_val y = jit_conv(t, x, w, NULL, one, one, NULL, NULL, "NHWC", "HWIO", "NHWC", groups);
  return jit_max(t, jit_add(t, y, b), jit_scalar(t, 0.0));
}

/* The loss: args as the step's; result 0 the mean cross-entropy. */
static void cnn_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const config *c = user;
  const int64_t B = c->batch;
  jit_val h = conv_relu(t, a[A_IMAGES], a[W_CONV], a[W_BCONV], 1); /* [B, 12, 12, F1] */
  const int64_t win[4] = {1, 2, 2, 1};
  h = jit_reduce_window(t, h, JIT_WINDOW_MAX, win, win, NULL, NULL); /* [B, 6, 6, F1] */
  h = conv_relu(t, h, a[W_DW], a[W_BDW], F1);                        /* depthwise */
  h = jit_reshape(t, h, 2, (const int64_t[]){B, POOLED * POOLED * F1});
  jit_val logits = jit_add(t, jit_matmul(t, h, a[W_DENSE]), a[W_BDENSE]); /* [B, CLASSES] */
  int last = 1;
  const int64_t col[2] = {B, 1};
  jit_val z = jit_sub(t, logits, jit_reshape(t, jit_reduce_max(t, logits, 1, &last), 2, col));
  jit_val lse = jit_log(t, jit_reshape(t, jit_reduce_sum(t, jit_exp(t, z), 1, &last), 2, col));
  jit_val picked = jit_take_along_axis(t, z, jit_reshape(t, a[A_LABELS], 2, col), 1);
  const int both[2] = {0, 1};
  r[0] = jit_mul(t, jit_reduce_sum(t, jit_sub(t, lse, picked), 2, both),
                 jit_scalar(t, 1.0 / (double)B));
}

/* One SGD step: args weights..., images, labels; results updated weights..., loss. */
static void cnn_step(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const config *c = user;
  jit_val vg[1 + N_WEIGHTS]; /* the loss, then one gradient per weight */
  jit_value_and_grad(t, cnn_loss, user, N_ARGS, a, (UINT64_C(1) << N_WEIGHTS) - 1, 0, vg);
  jit_val lr = jit_scalar(t, c->lr);
  for (int w = 0; w < N_WEIGHTS; w++) r[w] = jit_sub(t, a[w], jit_mul(t, vg[1 + w], lr));
  r[R_LOSS] = vg[0];
}

static uint64_t next(uint64_t *state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return *state >> 33;
}

static double uniform(uint64_t *state) { return (double)next(state) / (double)(1ull << 31); }

/* A batch: image i has class labels[i]; a bar of 4 to 8 pixels of intensity 1 in that class's
   direction (row, column, diagonal, anti-diagonal) at a random place, plus noise. */
static void draw_batch(int64_t batch, uint64_t *state, float *images, int32_t *labels) {
  static const int dr[CLASSES] = {0, 1, 1, 1}, dc[CLASSES] = {1, 0, 1, -1};
  for (int64_t i = 0; i < batch; i++) {
    float *im = images + i * SIDE * SIDE;
    for (int p = 0; p < SIDE * SIDE; p++) im[p] = (float)((2 * uniform(state) - 1) * NOISE);
    int cls = (int)(next(state) % CLASSES), len = 4 + (int)(next(state) % 5);
    int r0 = (int)(next(state) % (uint64_t)(SIDE - len * dr[cls]));
    int c0 = dc[cls] < 0 ? len - 1 + (int)(next(state) % (uint64_t)(SIDE - len + 1))
                         : (int)(next(state) % (uint64_t)(SIDE - len * dc[cls]));
    for (int k = 0; k < len; k++) im[(r0 + k * dr[cls]) * SIDE + c0 + k * dc[cls]] += 1.0f;
    labels[i] = cls;
  }
}

static int check(jit_status st, const char *what) {
  if (st == JIT_OK) return 0;
  fprintf(stderr, "cnn: %s: %s: %s\n", what, jit_status_str(st), jit_last_error());
  return 1;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
  config c = {.batch = 32, .lr = 0.5, .seed = 1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) c.seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--lr") == 0 && i + 1 < argc) c.lr = atof(argv[++i]);
    else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) c.batch = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: cnn [--seed N] [--lr X] [--batch N]\n");
      return 2;
    }
  }
  if (c.batch < 1) c.batch = 1;
  int rc = 1;
  jit_ctx *ctx = NULL;
  jit_fn *init = NULL, *step = NULL;
  jit_array *w[N_WEIGHTS] = {NULL}, *images = NULL, *labels = NULL;
  float *images_h = malloc((size_t)c.batch * SIDE * SIDE * sizeof *images_h);
  int32_t *labels_h = malloc((size_t)c.batch * sizeof *labels_h);
  double losses[STEPS];
  if (!images_h || !labels_h) {
    fprintf(stderr, "cnn: out of memory\n");
    goto done;
  }
  if (check(jit_ctx_create(NULL, &ctx), "jit_ctx_create")) goto done;
  jit_fn_opts io = {.name = "cnn_init", .n_args = 0, .n_results = N_WEIGHTS};
  jit_fn_opts so = {.name = "cnn_step", .n_args = N_ARGS, .n_results = N_RESULTS,
                    .donate_mask = (UINT64_C(1) << N_WEIGHTS) - 1};
  if (check(jit_compile(ctx, cnn_init, &c, &io, &init), "jit_compile(cnn_init)") ||
      check(jit_compile(ctx, cnn_step, &c, &so, &step), "jit_compile(cnn_step)") ||
      check(jit_call(init, NULL, w), "cnn_init"))
    goto done;
  printf("conv 3x3 1->%d + relu, max-pool 2x2, depthwise 3x3 (%d groups) + relu, dense %d->%d, "
         "cross-entropy; batch %lld of %dx%d images, SGD lr %.2g (log %d = %.3f: chance)\n",
         F1, F1, POOLED * POOLED * F1, CLASSES, (long long)c.batch, SIDE, SIDE, c.lr, CLASSES,
         log((double)CLASSES));
  const int64_t ishape[4] = {c.batch, SIDE, SIDE, 1}, lshape[1] = {c.batch};
  uint64_t data_state = c.seed * 0x9e3779b97f4a7c15ull + 1;
  double warm_ms = 0;
  for (int s = 0; s < STEPS; s++) {
    draw_batch(c.batch, &data_state, images_h, labels_h);
    jit_array *args[N_ARGS], *out[N_RESULTS] = {NULL};
    if (check(jit_array_from_host(ctx, JIT_F32, 4, ishape, images_h, &images), "images") ||
        check(jit_array_from_host(ctx, JIT_I32, 1, lshape, labels_h, &labels), "labels"))
      goto done;
    memcpy(args, w, sizeof w);
    args[A_IMAGES] = images;
    args[A_LABELS] = labels;
    double t0 = now_ms();
    jit_status st = jit_call(step, args, out);
    double ms = now_ms() - t0;
    if (check(st, "cnn_step")) goto done;
    for (int i = 0; i < N_WEIGHTS; i++) { /* the donated arrays are deleted: free the handles */
      jit_array_free(w[i]);
      w[i] = out[i];
    }
    float loss = 0;
    st = jit_array_to_host(out[R_LOSS], &loss, sizeof loss);
    jit_array_free(out[R_LOSS]);
    jit_array_free(images);
    jit_array_free(labels);
    images = labels = NULL;
    if (check(st, "loss")) goto done;
    losses[s] = loss;
    if (s > 0) warm_ms += ms;
    if (s < WINDOW || s >= STEPS - WINDOW || s % 5 == 0)
      printf("step %2d  loss %.4f  %7.2f ms%s\n", s, loss, ms, s == 0 ? " (trace + compile + run)" : "");
  }
  double first = 0, last = 0;
  for (int i = 0; i < WINDOW; i++) first += losses[i] / WINDOW, last += losses[STEPS - WINDOW + i] / WINDOW;
  printf("mean loss of the first %d steps %.4f, of the last %d %.4f: %.2fx (must be < %.2f); "
         "%.2f ms per warm step\n", WINDOW, first, WINDOW, last, last / first, REQUIRED_DROP,
         warm_ms / (STEPS - 1));
  rc = last < REQUIRED_DROP * first ? 0 : 1;
  if (rc) fprintf(stderr, "cnn: the loss did not fall enough\n");
done:
  for (int i = 0; i < N_WEIGHTS; i++) jit_array_free(w[i]);
  jit_array_free(images);
  jit_array_free(labels);
  free(images_h);
  free(labels_h);
  jit_fn_free(init);
  jit_fn_free(step);
  jit_ctx_destroy(ctx);
  return rc;
}
