/* workloads.c: the workloads of shared/bench/WORKLOADS.md as tjit trace functions, each with
 * its float64 reference in plain C and its floor (bytes moved or FLOPs per call). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "transformer_model.h"

#define MiB (1024.0 * 1024.0)

int64_t wl_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

int wl_n_results(const workload *w) { return w->n_results > 0 ? w->n_results : 1; }

/* splitmix64: seeded per (workload, argument), so every process draws the same data. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void wl_fill(const workload *w, int i, void *dst) {
  uint64_t s = 0x7431u;
  for (const char *c = w->data_id ? w->data_id : w->id; *c; c++) s = s * 131 + (uint64_t)*c;
  s = s * 131 + (uint64_t)i;
  const wl_arg *a = &w->args[i];
  int64_t n = wl_numel(a->rank, a->shape);
  for (int64_t k = 0; k < n; k++) {
    uint64_t bits = next_u64(&s) >> 40; /* 24 random bits */
    if (a->int_range > 0) {
      ((int32_t *)dst)[k] = (int32_t)(bits % (uint64_t)a->int_range);
      continue;
    }
    /* centred on half-steps: uniform over (-1, 1) and never exactly 0 */
    double u = ((double)bits + 0.5) / 8388608.0 - 1.0;
    float v = (float)a->offset + (float)(u * a->scale);
    ((float *)dst)[k] = a->bf16 ? wl_bf16_float(wl_bf16_bits(v)) : v;
  }
}

uint16_t wl_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if (f != f) return (uint16_t)(u >> 16 | 0x40);
  return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

float wl_bf16_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- W1 eltwise: y = tanh(0.5*x + 0.25) * (1/(1+exp(-x))) ------------------------------------ */
enum { W1_N = 16777216 };

static void w1_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val x = a[0];
  jit_val th = jit_tanh(t, jit_add(t, jit_mul(t, x, jit_scalar(t, 0.5)), jit_scalar(t, 0.25)));
  jit_val sg = jit_div(t, jit_scalar(t, 1.0), jit_add(t, jit_scalar(t, 1.0), jit_exp(t, jit_neg(t, x))));
  r[0] = jit_mul(t, th, sg);
}

static void w1_ref(const float *const *a, double *y) {
  for (int64_t i = 0; i < W1_N; i++) {
    double x = a[0][i];
    y[i] = tanh(0.5 * x + 0.25) * (1.0 / (1.0 + exp(-x)));
  }
}

/* ---- W2 softmax over axis 1, max-subtracted ---------------------------------------------------- */
enum { ROWS = 16384, COLS = 1024 };

/* A row statistic as [rows, 1], so that it broadcasts against [rows, cols]. */
static jit_val as_column(jit_trace *t, jit_val v, int64_t rows) {
  return jit_reshape(t, v, 2, (int64_t[]){rows, 1});
}

static void w2_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val x = a[0];
  int64_t rows = jit_val_shape(t, x) ? jit_val_shape(t, x)[0] : 0;
  int axis = 1;
  jit_val m = as_column(t, jit_reduce_max(t, x, 1, &axis), rows);
  jit_val e = jit_exp(t, jit_sub(t, x, m));
  jit_val s = as_column(t, jit_reduce_sum(t, e, 1, &axis), rows);
  r[0] = jit_div(t, e, s);
}

static void w2_ref(const float *const *a, double *y) {
  for (int64_t r = 0; r < ROWS; r++) {
    const float *x = a[0] + r * COLS;
    double *o = y + r * COLS;
    double m = -INFINITY, s = 0;
    for (int c = 0; c < COLS; c++) m = fmax(m, x[c]);
    for (int c = 0; c < COLS; c++) s += (o[c] = exp(x[c] - m));
    for (int c = 0; c < COLS; c++) o[c] /= s;
  }
}

/* ---- W3 layernorm over axis 1: (x - mean) / sqrt(var + 1e-5) * g + b -------------------------- */
static void w3_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val x = a[0], g = a[1], b = a[2];
  const int64_t *sh = jit_val_shape(t, x);
  int64_t rows = sh ? sh[0] : 0;
  double n = sh ? (double)sh[1] : 1;
  int axis = 1;
  jit_val mean = as_column(t, jit_div(t, jit_reduce_sum(t, x, 1, &axis), jit_scalar(t, n)), rows);
  jit_val d = jit_sub(t, x, mean);
  jit_val var = as_column(t, jit_div(t, jit_reduce_sum(t, jit_mul(t, d, d), 1, &axis), jit_scalar(t, n)), rows);
  jit_val y = jit_div(t, d, jit_sqrt(t, jit_add(t, var, jit_scalar(t, 1e-5))));
  r[0] = jit_add(t, jit_mul(t, y, g), b);
}

/* (x - mean) / sqrt(var + 1e-5) * g + b over each row of x [n, d], into y */
static void layernorm_f64(int64_t n, int64_t d, const double *x, const double *g, const double *b,
                          double *y) {
  for (int64_t i = 0; i < n; i++) {
    const double *r = x + i * d;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; j++) mean += r[j];
    mean /= (double)d;
    for (int64_t j = 0; j < d; j++) var += (r[j] - mean) * (r[j] - mean);
    double inv = 1.0 / sqrt(var / (double)d + 1e-5);
    for (int64_t j = 0; j < d; j++) y[i * d + j] = (r[j] - mean) * inv * g[j] + b[j];
  }
}

static void w3_ref(const float *const *a, double *y) {
  double g[COLS], b[COLS], x[COLS];
  for (int c = 0; c < COLS; c++) g[c] = a[1][c], b[c] = a[2][c];
  for (int64_t r = 0; r < ROWS; r++) {
    for (int c = 0; c < COLS; c++) x[c] = a[0][r * COLS + c];
    layernorm_f64(1, COLS, x, g, b, y + r * COLS);
  }
}

/* ---- W4 mlp: relu(x @ w1 + b1) @ w2 + b2 ------------------------------------------------------- */
enum { W4_B = 512, W4_D = 1024, W4_H = 4096 };

static void w4_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  r[0] = jit_add(t, jit_matmul(t, h, a[3]), a[4]);
}

/* c = a @ b in float64; a is float32 (af) or float64 (ad), b float32. i-k-j order streams b. */
static void matmul_f64(int64_t M, int64_t K, int64_t N, const float *af, const double *ad,
                       const float *bf, double *c) {
  for (int64_t i = 0; i < M; i++) {
    double *row = c + i * N;
    memset(row, 0, sizeof(double) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
      double av = af ? af[i * K + k] : ad[i * K + k];
      const float *bk = bf + k * N;
      for (int64_t j = 0; j < N; j++) row[j] += av * bk[j];
    }
  }
}

static void w4_ref(const float *const *a, double *y) {
  double *h = malloc(sizeof(double) * W4_B * W4_H);
  if (!h) {
    for (int64_t i = 0; i < (int64_t)W4_B * W4_D; i++) y[i] = NAN; /* fails the check visibly */
    return;
  }
  matmul_f64(W4_B, W4_D, W4_H, a[0], NULL, a[1], h);
  for (int64_t i = 0; i < W4_B; i++)
    for (int64_t j = 0; j < W4_H; j++) h[i * W4_H + j] = fmax(h[i * W4_H + j] + a[2][j], 0.0);
  matmul_f64(W4_B, W4_H, W4_D, NULL, h, a[3], y);
  for (int64_t i = 0; i < W4_B; i++)
    for (int64_t j = 0; j < W4_D; j++) y[i * W4_D + j] += a[4][j];
  free(h);
}

/* ---- W5 rnn_scan: h_{t+1} = tanh(h_t @ wh + x_t @ wx + b), all h --------------------------------- */
enum { W5_T = 1000, W5_B = 32, W5_H = 256 };
#define W5_WSCALE 0.0625 /* 1/sqrt(H): the recurrence stays stable */

typedef struct w5_weights {
  jit_val wh, wx, b;
} w5_weights;

static void w5_step(jit_trace *t, const jit_val *h, const jit_val *x, jit_val *nh, jit_val *y,
                    void *user) {
  const w5_weights *w = user;
  nh[0] = jit_tanh(t, jit_add(t, jit_add(t, jit_matmul(t, h[0], w->wh), jit_matmul(t, x[0], w->wx)),
                              w->b));
  y[0] = nh[0];
}

/* args: h0 [B,H], xs [T,B,H], wh [H,H], wx [H,H], b [H] */
static void w5_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  w5_weights w = {a[2], a[3], a[4]};
  jit_val last;
  jit_scan(t, w5_step, &w, 1, &a[0], 1, &a[1], -1, 0, &last, 1, &r[0]);
}

static void w5_ref(const float *const *a, double *hs) {
  double *h = malloc(sizeof(double) * W5_B * W5_H), *acc = malloc(sizeof(double) * W5_B * W5_H);
  if (!h || !acc) {
    free(h);
    free(acc);
    for (int64_t i = 0; i < (int64_t)W5_T * W5_B * W5_H; i++) hs[i] = NAN;
    return;
  }
  for (int64_t i = 0; i < W5_B * W5_H; i++) h[i] = a[0][i];
  for (int64_t t = 0; t < W5_T; t++) {
    for (int64_t i = 0; i < W5_B; i++) {
      double *row = acc + i * W5_H;
      for (int64_t j = 0; j < W5_H; j++) row[j] = a[4][j];
      for (int64_t k = 0; k < W5_H; k++) {
        double hk = h[i * W5_H + k], xk = a[1][(t * W5_B + i) * W5_H + k];
        const float *wh = a[2] + k * W5_H, *wx = a[3] + k * W5_H;
        for (int64_t j = 0; j < W5_H; j++) row[j] += hk * wh[j] + xk * wx[j];
      }
    }
    for (int64_t i = 0; i < W5_B * W5_H; i++) h[i] = hs[t * W5_B * W5_H + i] = tanh(acc[i]);
  }
  free(h);
  free(acc);
}

/* W5s: one step of W5 as a jitted function, called T times (what the scan saves). */
static void w5s_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  w5_weights w = {a[2], a[3], a[4]};
  jit_val y;
  w5_step(t, &a[0], &a[1], &r[0], &y, &w);
  (void)user;
}

static void w5s_ref(const float *const *a, double *h) {
  double *hs = malloc(sizeof(double) * W5_T * W5_B * W5_H);
  if (!hs) {
    for (int64_t i = 0; i < W5_B * W5_H; i++) h[i] = NAN;
    return;
  }
  w5_ref(a, hs);
  memcpy(h, hs + (int64_t)(W5_T - 1) * W5_B * W5_H, sizeof(double) * W5_B * W5_H);
  free(hs);
}

/* ---- W6 vmap_loss: l_i = mean((x_i @ w - y_i)^2), jit_vmap over i ------------------------------ */
enum { W6_N = 4096, W6_D = 512, W6_O = 64 };

/* One example: x_i [D], w [D,O], y_i [O] -> scalar. */
static void w6_example(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val d = jit_sub(t, jit_matmul(t, a[0], a[1]), a[2]);
  int axis = 0;
  r[0] = jit_div(t, jit_reduce_sum(t, jit_mul(t, d, d), 1, &axis), jit_scalar(t, W6_O));
}

static void w6_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_vmap(t, w6_example, NULL, 3, a, (const int[]){0, -1, 0}, 1, r, NULL);
}

/* W6b: the same loss batched by hand, l = mean((x @ w - y)^2, axis 1): what vmap should match. */
static void w6b_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val d = jit_sub(t, jit_matmul(t, a[0], a[1]), a[2]);
  int axis = 1;
  r[0] = jit_div(t, jit_reduce_sum(t, jit_mul(t, d, d), 1, &axis), jit_scalar(t, W6_O));
}

static void w6_ref(const float *const *a, double *l) {
  double row[W6_O];
  for (int64_t i = 0; i < W6_N; i++) {
    matmul_f64(1, W6_D, W6_O, a[0] + i * W6_D, NULL, a[1], row);
    double s = 0;
    for (int j = 0; j < W6_O; j++) {
      double d = row[j] - a[2][i * W6_O + j];
      s += d * d;
    }
    l[i] = s / W6_O;
  }
}

/* ---- W8 grad_mlp: value_and_grad of mean((mlp(x) - t)^2) wrt w1, w2 ----------------------------- */
/* args: x, w1, b1, w2, b2, t */
static void w8_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  jit_val d = jit_sub(t, jit_add(t, jit_matmul(t, h, a[3]), a[4]), a[5]);
  int axes[2] = {0, 1};
  r[0] = jit_div(t, jit_reduce_sum(t, jit_mul(t, d, d), 2, axes), jit_scalar(t, (double)W4_B * W4_D));
}

static void w8_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, w8_loss, NULL, 6, a, (UINT64_C(1) << 1) | (UINT64_C(1) << 3), 0, r);
}

/* c = a @ b, all float64, a [M,K] b [K,N]. */
static void matmul_dd(int64_t M, int64_t K, int64_t N, const double *a, const double *b, double *c) {
  for (int64_t i = 0; i < M; i++) {
    double *row = c + i * N;
    memset(row, 0, sizeof(double) * (size_t)N);
    for (int64_t k = 0; k < K; k++) {
      double av = a[i * K + k];
      if (av == 0) continue; /* relu zeros half of dh */
      const double *bk = b + k * N;
      for (int64_t j = 0; j < N; j++) row[j] += av * bk[j];
    }
  }
}

/* out [C,R] = transpose of a [R,C] (float32 or float64), in float64. */
static void transpose_d(int64_t R, int64_t C, const float *af, const double *ad, double *out) {
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < C; j++) out[j * R + i] = af ? af[i * C + j] : ad[i * C + j];
}

/* ref = [loss, dw1 (D*H), dw2 (H*D)]. */
static void w8_ref(const float *const *a, double *ref) {
  enum { B = W4_B, D = W4_D, H = W4_H };
  const int64_t n_out = (int64_t)1 + (int64_t)D * H * 2;
  double *h = malloc(sizeof(double) * B * H);      /* relu(x @ w1 + b1) */
  double *g = malloc(sizeof(double) * B * D);      /* d loss / d out */
  double *ht = malloc(sizeof(double) * H * B);
  double *w2t = malloc(sizeof(double) * D * H);
  double *dh = malloc(sizeof(double) * B * H);
  double *xt = malloc(sizeof(double) * D * B);
  if (!h || !g || !ht || !w2t || !dh || !xt) {
    for (int64_t i = 0; i < n_out; i++) ref[i] = NAN; /* fails the check visibly */
    goto done;
  }
  double *dw1 = ref + 1, *dw2 = ref + 1 + (int64_t)D * H;
  matmul_f64(B, D, H, a[0], NULL, a[1], h);
  for (int64_t i = 0; i < B; i++)
    for (int64_t j = 0; j < H; j++) h[i * H + j] = fmax(h[i * H + j] + a[2][j], 0.0);
  matmul_f64(B, H, D, NULL, h, a[3], g);
  double loss = 0;
  for (int64_t i = 0; i < B; i++)
    for (int64_t j = 0; j < D; j++) {
      double d = g[i * D + j] + a[4][j] - a[5][i * D + j];
      loss += d * d;
      g[i * D + j] = 2.0 * d / ((double)B * D);
    }
  ref[0] = loss / ((double)B * D);
  transpose_d(B, H, NULL, h, ht);
  matmul_dd(H, B, D, ht, g, dw2);                  /* dw2 = h^T @ g */
  transpose_d(H, D, a[3], NULL, w2t);
  matmul_dd(B, D, H, g, w2t, dh);                  /* dh = g @ w2^T, masked by relu */
  for (int64_t i = 0; i < (int64_t)B * H; i++)
    if (!(h[i] > 0)) dh[i] = 0;
  transpose_d(B, D, a[0], NULL, xt);
  matmul_dd(D, B, H, xt, dh, dw1);                 /* dw1 = x^T @ dh */
done:
  free(h);
  free(g);
  free(ht);
  free(w2t);
  free(dh);
  free(xt);
}

/* ---- W7 dispatch: y = x + 1 ---------------------------------------------------------------------- */
static void w7_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_add(t, a[0], jit_scalar(t, 1.0));
}

static void w7_ref(const float *const *a, double *y) {
  for (int i = 0; i < 8; i++) y[i] = (double)a[0][i] + 1.0;
}

/* ---- W9 sharded_matmul: y = x @ w over a mesh of devices ------------------------------------------ */
enum { W9_N = 2048 };

static void w9_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_matmul(t, a[0], a[1]);
}

/* The float64 product takes seconds: the variants share their data, so it is made once. */
static void w9_ref(const float *const *a, double *y) {
  static double *memo;
  static float key[4];
  float k[4] = {a[0][0], a[0][W9_N * W9_N - 1], a[1][0], a[1][W9_N * W9_N - 1]};
  if (!memo || memcmp(k, key, sizeof k) != 0) {
    free(memo);
    memo = malloc(sizeof(double) * W9_N * W9_N);
    if (!memo) {
      for (int64_t i = 0; i < (int64_t)W9_N * W9_N; i++) y[i] = NAN;
      return;
    }
    matmul_f64(W9_N, W9_N, W9_N, a[0], NULL, a[1], memo);
    memcpy(key, k, sizeof k);
  }
  memcpy(y, memo, sizeof(double) * W9_N * W9_N);
}

/* ---- W10 transformer_step: value_and_grad + SGD of examples/transformer_model.h's model ---------- */
#define W10_LR 0.1 /* bench/peers/jax_w10.py's LR */
static const tf_config w10_config = {.batch = 8, .seq = 128, .dim = 256, .heads = 4, .vocab = 4096,
                                     .lr = W10_LR};

static void w10_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  tf_step(t, a, r, (void *)&w10_config);
}

/* The model's loss in float64 (transformer_model.h's tf_loss, loop by loop); NAN when out of
   memory. w: the weights in float64. */
static double w10_loss_f64(const tf_config *c, double *const *w, const int32_t *ids,
                           const int32_t *labels) {
  const int64_t B = c->batch, T = c->seq, N = B * T, D = c->dim, H = c->heads, dh = D / H,
                V = c->vocab, F = 4 * D;
  double *x = malloc(sizeof(double) * N * D), *h = malloc(sizeof(double) * N * D);
  double *big = malloc(sizeof(double) * N * (V > F ? V : F)); /* qkv, the MLP's hidden, logits */
  double *o = malloc(sizeof(double) * N * D), *p = malloc(sizeof(double) * T);
  double loss = NAN;
  if (!x || !h || !big || !o || !p) goto done;
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < D; j++) x[n * D + j] = w[TF_WTE][ids[n] * D + j] + w[TF_WPE][(n % T) * D + j];
  layernorm_f64(N, D, x, w[TF_LN1_G], w[TF_LN1_B], h);
  matmul_dd(N, D, 3 * D, h, w[TF_WQKV], big); /* q | k | v, heads side by side in each */
  for (int64_t b = 0; b < B; b++)
    for (int64_t hd = 0; hd < H; hd++)
      for (int64_t i = 0; i < T; i++) {
        const double *q = big + ((b * T + i) * 3 * D) + hd * dh;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) { /* causal: keys up to the query's position */
          const double *k = big + ((b * T + j) * 3 * D) + D + hd * dh;
          double s = 0;
          for (int64_t e = 0; e < dh; e++) s += q[e] * k[e];
          p[j] = s / sqrt((double)dh);
          m = fmax(m, p[j]);
        }
        for (int64_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - m));
        double *out = o + (b * T + i) * D + hd * dh;
        for (int64_t e = 0; e < dh; e++) out[e] = 0;
        for (int64_t j = 0; j <= i; j++) {
          const double *v = big + ((b * T + j) * 3 * D) + 2 * D + hd * dh;
          for (int64_t e = 0; e < dh; e++) out[e] += p[j] / sum * v[e];
        }
      }
  matmul_dd(N, D, D, o, w[TF_WO], h);
  for (int64_t i = 0; i < N * D; i++) x[i] += h[i];
  layernorm_f64(N, D, x, w[TF_LN2_G], w[TF_LN2_B], h);
  matmul_dd(N, D, F, h, w[TF_W1], big);
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < F; j++) {
      double u = big[n * F + j] + w[TF_B1][j];
      big[n * F + j] = 0.5 * u * (1.0 + erf(u / sqrt(2.0)));
    }
  matmul_dd(N, F, D, big, w[TF_W2], h);
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < D; j++) x[n * D + j] += h[n * D + j] + w[TF_B2][j];
  layernorm_f64(N, D, x, w[TF_LNF_G], w[TF_LNF_B], h);
  matmul_dd(N, D, V, h, w[TF_WOUT], big);
  loss = 0;
  for (int64_t n = 0; n < N; n++) {
    const double *l = big + n * V;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; j++) m = fmax(m, l[j]);
    for (int64_t j = 0; j < V; j++) sum += exp(l[j] - m);
    loss += m + log(sum) - l[labels[n]];
  }
  loss /= (double)N;
done:
  free(x);
  free(h);
  free(big);
  free(o);
  free(p);
  return loss;
}

/* The step's loss against w10_loss_f64, and its update against a float64 central difference:
   with g_i = (w_i - w'_i) / lr the gradient the step applied to weight i, the derivative of the
   float64 loss along d = (g_i / |g_i|^2 for each i) is sum_i <dL/dw_i, g_i> / |g_i|^2, which is
   1 per weight when every g_i is dL/dw_i, and moves away from it when one of them is wrong. */
static double w10_check(const void *const *args, const float *const *res, char *msg, size_t len) {
  const tf_config *c = &w10_config;
  double *w[TF_N_WEIGHTS] = {NULL}, *d[TF_N_WEIGHTS] = {NULL}, *probe[TF_N_WEIGHTS] = {NULL};
  int64_t n[TF_N_WEIGHTS];
  double err = INFINITY, d_norm2 = 0;
  int terms = 0;
  for (int i = 0; i < TF_N_WEIGHTS; i++) {
    int64_t shape[2];
    int rank = tf_weight_shape(c, i, shape);
    n[i] = wl_numel(rank, shape);
    w[i] = malloc(sizeof(double) * n[i]);
    d[i] = malloc(sizeof(double) * n[i]);
    probe[i] = malloc(sizeof(double) * n[i]);
    if (!w[i] || !d[i] || !probe[i]) {
      snprintf(msg, len, "out of memory for the check");
      goto done;
    }
    const float *w0 = args[i], *w1 = res[i];
    double g2 = 0;
    for (int64_t k = 0; k < n[i]; k++) {
      w[i][k] = w0[k];
      d[i][k] = ((double)w0[k] - (double)w1[k]) / c->lr;
      g2 += d[i][k] * d[i][k];
    }
    for (int64_t k = 0; k < n[i]; k++) d[i][k] = g2 > 0 ? d[i][k] / g2 : 0;
    terms += g2 > 0;
    d_norm2 += g2 > 0 ? 1.0 / g2 : 0;
  }
  const int32_t *ids = args[TF_IDS], *labels = args[TF_LABELS];
  double loss = w10_loss_f64(c, w, ids, labels);
  double h = 1e-3 / sqrt(d_norm2), lp = NAN, lm = NAN;
  for (int sign = 1; sign >= -1; sign -= 2) {
    for (int i = 0; i < TF_N_WEIGHTS; i++)
      for (int64_t k = 0; k < n[i]; k++) probe[i][k] = w[i][k] + sign * h * d[i][k];
    *(sign > 0 ? &lp : &lm) = w10_loss_f64(c, probe, ids, labels);
  }
  double deriv = (lp - lm) / (2 * h), loss_err = fabs(res[TF_LOSS][0] - loss) / fabs(loss);
  double grad_err = fabs(deriv - terms) / terms;
  err = fmax(loss_err, grad_err);
  snprintf(msg, len, "loss %.6f (float64 %.6f, rel.err %.1e); derivative along the update %.5f "
           "(%d if exact, rel.err %.1e)", res[TF_LOSS][0], loss, loss_err, deriv, terms, grad_err);
  if (!isfinite(err)) err = INFINITY;
done:
  for (int i = 0; i < TF_N_WEIGHTS; i++) {
    free(w[i]);
    free(d[i]);
    free(probe[i]);
  }
  return err;
}

/* ---- W11 conv3x3: relu(conv(x, w, SAME, NHWC/HWIO) + b) ------------------------------------------ */
enum { W11_N = 32, W11_HW = 56, W11_C = 64, W11_O = 64, W11_K = 3 };

static void w11_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int64_t pad[2] = {1, 1};
  jit_val y = jit_conv(t, a[0], a[1], NULL, pad, pad, NULL, NULL, "NHWC", "HWIO", "NHWC", 1);
  r[0] = jit_relu(t, jit_add(t, y, a[2]));
}

static void w11_ref(const float *const *a, double *y) {
  enum { N = W11_N, S = W11_HW, C = W11_C, O = W11_O, K = W11_K };
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < S; h++)
      for (int64_t w = 0; w < S; w++) {
        double *out = y + ((n * S + h) * S + w) * O;
        for (int o = 0; o < O; o++) out[o] = a[2][o];
        for (int kh = 0; kh < K; kh++)
          for (int kw = 0; kw < K; kw++) {
            int64_t ih = h + kh - 1, iw = w + kw - 1;
            if (ih < 0 || ih >= S || iw < 0 || iw >= S) continue;
            const float *x = a[0] + ((n * S + ih) * S + iw) * C;
            const float *wk = a[1] + (kh * K + kw) * C * O;
            for (int c = 0; c < C; c++)
              for (int o = 0; o < O; o++) out[o] += (double)x[c] * wk[c * O + o];
          }
        for (int o = 0; o < O; o++) out[o] = fmax(out[o], 0.0);
      }
}

/* ---- W12 fft: y = fft(x), x c64 [2^20]; y2 = rfft2(r), r f32 [1024,1024] ---------------------------- */
enum { W12_N = 1048576, W12_R = 1024 };

static void w12_trace(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int64_t n = W12_N, rr[2] = {W12_R, W12_R};
  r[0] = jit_fft(t, a[0], JIT_FFT, 1, &n);
  r[1] = jit_fft(t, a[1], JIT_RFFT, 2, rr);
}

/* In-place radix-2 DFT (exponent sign -) of n (a power of two) points spaced by stride. */
static void fft_f64(double *re, double *im, int64_t n, int64_t stride) {
  for (int64_t i = 1, j = 0; i < n; i++) { /* bit-reversed order */
    int64_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double tr = re[i * stride], ti = im[i * stride];
      re[i * stride] = re[j * stride], im[i * stride] = im[j * stride];
      re[j * stride] = tr, im[j * stride] = ti;
    }
  }
  for (int64_t len = 2; len <= n; len *= 2)
    for (int64_t k = 0; k < len / 2; k++) {
      double a = -2 * 3.14159265358979323846 * (double)k / (double)len, wr = cos(a), wi = sin(a);
      for (int64_t s = 0; s < n; s += len) {
        int64_t p = (s + k) * stride, q = (s + k + len / 2) * stride;
        double xr = re[q] * wr - im[q] * wi, xi = re[q] * wi + im[q] * wr;
        re[q] = re[p] - xr, im[q] = im[p] - xi;
        re[p] += xr, im[p] += xi;
      }
    }
}

static void w12_ref(const float *const *a, double *y) {
  enum { N = W12_N, R = W12_R, H = W12_R / 2 + 1 };
  double *re = malloc(sizeof(double) * N), *im = malloc(sizeof(double) * N);
  if (!re || !im) {
    free(re), free(im);
    for (int64_t i = 0; i < 2 * N + 2 * R * H; i++) y[i] = NAN;
    return;
  }
  for (int64_t i = 0; i < N; i++) re[i] = a[0][2 * i], im[i] = a[0][2 * i + 1];
  fft_f64(re, im, N, 1);
  for (int64_t i = 0; i < N; i++) y[2 * i] = re[i], y[2 * i + 1] = im[i];
  y += 2 * N;
  for (int64_t i = 0; i < R * R; i++) re[i] = a[1][i], im[i] = 0;
  for (int64_t i = 0; i < R; i++) fft_f64(re + i * R, im + i * R, R, 1);
  for (int64_t j = 0; j < H; j++) fft_f64(re + j, im + j, R, R);
  for (int64_t i = 0; i < R; i++)
    for (int64_t j = 0; j < H; j++) y[2 * (i * H + j)] = re[i * R + j], y[2 * (i * H + j) + 1] = im[i * R + j];
  free(re);
  free(im);
}

/* ---- the table ------------------------------------------------------------------------------------ */
#define ARG1(n) {1, {(n), 0, 0}, 1.0}
#define ARG2(r, c) {2, {(r), (c), 0}, 1.0}
#define ARG3(a, b, c) {3, {(a), (b), (c)}, 1.0}
/* W10's weights (transformer_model.h's tf_init_scale) and its i32 ids and labels */
#define W10_MAT(r, c, s) {2, {(r), (c), 0}, (s)}
#define W10_VEC(n, constant) {1, {(n), 0, 0}, 0.0, (constant)}
#define W10_TOKENS {2, {8, 128, 0}, 0.0, 0.0, 4096}
#define ARG4(a, b, c, d) {4, {(a), (b), (c), (d)}, 1.0}
#define BF16_ARG1(n) {1, {(n), 0, 0}, 1.0, .bf16 = 1}
#define BF16_ARG2(r, c) {2, {(r), (c), 0}, 1.0, .bf16 = 1}

const workload bench_workloads[] = {
    {.id = "W1", .name = "eltwise", .kind = FLOOR_BYTES, .amount = 128 * MiB, .tol = 1e-4,
     .n_args = 1, .args = {ARG1(W1_N)}, .out_rank = {1}, .out_shape = {{W1_N}},
     .trace = w1_trace, .reference = w1_ref,
     .peer = "jax_w1.py"},
    {.id = "W2", .name = "softmax", .kind = FLOOR_BYTES, .amount = 128 * MiB, .tol = 1e-4,
     .n_args = 1, .args = {ARG2(ROWS, COLS)}, .out_rank = {2}, .out_shape = {{ROWS, COLS}},
     .trace = w2_trace, .reference = w2_ref,
     .peer = "jax_w2.py"},
    {.id = "W3", .name = "layernorm", .kind = FLOOR_BYTES, .amount = 128 * MiB, .tol = 1e-4,
     .n_args = 3, .args = {ARG2(ROWS, COLS), ARG1(COLS), ARG1(COLS)}, .out_rank = {2},
     .out_shape = {{ROWS, COLS}}, .trace = w3_trace, .reference = w3_ref,
     .peer = "jax_w3.py"},
    {.id = "W4", .name = "mlp", .kind = FLOOR_FLOPS,
     .amount = 2.0 * 2 * W4_B * W4_D * W4_H, .tol = 1e-4, .n_args = 5,
     .args = {ARG2(W4_B, W4_D), ARG2(W4_D, W4_H), ARG1(W4_H), ARG2(W4_H, W4_D), ARG1(W4_D)},
     .out_rank = {2}, .out_shape = {{W4_B, W4_D}}, .trace = w4_trace, .reference = w4_ref,
     .peer = "jax_w4.py"},
    {.id = "W5", .name = "rnn_scan", .kind = FLOOR_FLOPS_1T, .amount = 2.0 * 2 * W5_T * W5_B * W5_H * W5_H,
     .tol = 1e-3, .note = "W5 is one jit_scan over T=1000 steps; its %floor is of one thread's FMA peak",
     .n_args = 5,
     .args = {ARG2(W5_B, W5_H), ARG3(W5_T, W5_B, W5_H), {2, {W5_H, W5_H, 0}, W5_WSCALE},
              {2, {W5_H, W5_H, 0}, W5_WSCALE}, ARG1(W5_H)},
     .out_rank = {3}, .out_shape = {{W5_T, W5_B, W5_H}}, .trace = w5_trace, .reference = w5_ref,
     .peer = "jax_w5.py"},
    {.id = "W5s", .name = "rnn_steps", .kind = FLOOR_FLOPS_1T,
     .amount = 2.0 * 2 * W5_T * W5_B * W5_H * W5_H, .tol = 1e-3, .chain = 1,
     .note = "W5s is W5's step jitted alone and called 1000 times from C (h fed back), timed in "
             "the same run: what one scan saves",
     .n_args = 5,
     .args = {ARG2(W5_B, W5_H), ARG3(W5_T, W5_B, W5_H), {2, {W5_H, W5_H, 0}, W5_WSCALE},
              {2, {W5_H, W5_H, 0}, W5_WSCALE}, ARG1(W5_H)},
     .out_rank = {2}, .out_shape = {{W5_B, W5_H}}, .trace = w5s_trace, .reference = w5s_ref},
    {.id = "W6", .name = "vmap_loss", .kind = FLOOR_FLOPS, .amount = 2.0 * W6_N * W6_D * W6_O,
     .tol = 1e-4, .note = "W6 is jit_vmap of the one-example loss over x and y (w unbatched); "
                          "W6b is the same loss batched by hand, timed in the same run",
     .n_args = 3, .args = {ARG2(W6_N, W6_D), ARG2(W6_D, W6_O), ARG2(W6_N, W6_O)},
     .out_rank = {1}, .out_shape = {{W6_N}}, .trace = w6_trace, .reference = w6_ref,
     .peer = "jax_w6.py"},
    {.id = "W6b", .name = "vmap_loss_hand", .kind = FLOOR_FLOPS, .amount = 2.0 * W6_N * W6_D * W6_O,
     .tol = 1e-4, .n_args = 3, .args = {ARG2(W6_N, W6_D), ARG2(W6_D, W6_O), ARG2(W6_N, W6_O)},
     .out_rank = {1}, .out_shape = {{W6_N}}, .trace = w6b_trace, .reference = w6_ref},
    {.id = "W7", .name = "dispatch", .kind = FLOOR_LATENCY, .tol = 1e-4, .n_args = 1,
     .args = {ARG1(8)}, .out_rank = {1}, .out_shape = {{8}}, .trace = w7_trace, .reference = w7_ref},
    {.id = "W8", .name = "grad_mlp", .kind = FLOOR_FLOPS, .amount = 21.5e9, .tol = 1e-3,
     .n_args = 6,
     .args = {ARG2(W4_B, W4_D), ARG2(W4_D, W4_H), ARG1(W4_H), ARG2(W4_H, W4_D), ARG1(W4_D),
              ARG2(W4_B, W4_D)},
     .n_results = 3, .out_rank = {0, 2, 2}, .out_shape = {{0}, {W4_D, W4_H}, {W4_H, W4_D}},
     .trace = w8_trace, .reference = w8_ref, .peer = "jax_w8.py"},
    {.id = "W9", .name = "sharded_matmul", .kind = FLOOR_FLOPS, .amount = 2.0 * W9_N * W9_N * W9_N,
     .tol = 1e-4, .devices = 2, .threads = 2, .mesh = 2, .specs = {"x,_", NULL}, .data_id = "W9",
     .note = "W9: x committed as \"x,_\" over 2 devices, w uncommitted (replicated); W9x1 is the "
             "same matmul on 1 device of 1 thread, W9r splits the contracted dim (x \"_,x\", "
             "w \"x,_\"), one all-reduce; W9's peer is torch's (and numpy's) single matmul on 2 "
             "threads (bench/peers/torch_w9.py: needs torch beside JAX in --peers' interpreter)",
     .n_args = 2, .args = {ARG2(W9_N, W9_N), ARG2(W9_N, W9_N)}, .out_rank = {2},
     .out_shape = {{W9_N, W9_N}}, .trace = w9_trace, .reference = w9_ref, .peer = "torch_w9.py"},
    {.id = "W9x1", .name = "matmul_1dev", .kind = FLOOR_FLOPS, .amount = 2.0 * W9_N * W9_N * W9_N,
     .tol = 1e-4, .devices = 1, .threads = 1, .data_id = "W9",
     .n_args = 2, .args = {ARG2(W9_N, W9_N), ARG2(W9_N, W9_N)}, .out_rank = {2},
     .out_shape = {{W9_N, W9_N}}, .trace = w9_trace, .reference = w9_ref},
    {.id = "W9r", .name = "sharded_contract", .kind = FLOOR_FLOPS, .amount = 2.0 * W9_N * W9_N * W9_N,
     .tol = 1e-4, .devices = 2, .threads = 2, .mesh = 2, .specs = {"_,x", "x,_"}, .data_id = "W9",
     .n_args = 2, .args = {ARG2(W9_N, W9_N), ARG2(W9_N, W9_N)}, .out_rank = {2},
     .out_shape = {{W9_N, W9_N}}, .trace = w9_trace, .reference = w9_ref},
    {.id = "W10", .name = "transformer", .kind = FLOOR_FLOPS, /* tf_step_flops: 11.7 GFLOP */
     .amount = 3.0 * (2.0 * 1024 * 256 * 12 * 256 + 4.0 * 1024 * 128 * 256 + 2.0 * 1024 * 256 * 4096),
     .tol = 1e-3, .donate_mask = (UINT64_C(1) << TF_N_WEIGHTS) - 1, .peer = "jax_w10.py",
     .note = "W10: one SGD step (lr 0.1) of examples/transformer_model.h's model (W10 plus a learned "
             "position embedding), weights donated and fed back; checked by a float64 forward "
             "and a central difference along the update",
     .n_args = TF_N_ARGS,
     .args = {W10_MAT(4096, 256, 1.0), W10_MAT(128, 256, 1.0), W10_VEC(256, 1), W10_VEC(256, 0),
              W10_MAT(256, 768, 0.0625), W10_MAT(256, 256, 0.0625), W10_VEC(256, 1),
              W10_VEC(256, 0), W10_MAT(256, 1024, 0.0625), W10_VEC(1024, 0),
              W10_MAT(1024, 256, 0.03125), W10_VEC(256, 0), W10_VEC(256, 1), W10_VEC(256, 0),
              W10_MAT(256, 4096, 0.0625), W10_TOKENS, W10_TOKENS},
     .n_results = TF_N_RESULTS,
     .out_rank = {2, 2, 1, 1, 2, 2, 1, 1, 2, 1, 2, 1, 1, 1, 2, 0},
     .out_shape = {{4096, 256}, {128, 256}, {256}, {256}, {256, 768}, {256, 256}, {256}, {256},
                   {256, 1024}, {1024}, {1024, 256}, {256}, {256}, {256}, {256, 4096}, {0}},
     .trace = w10_trace, .check = w10_check},
    {.id = "W11", .name = "conv3x3", .kind = FLOOR_FLOPS,
     .amount = 2.0 * W11_N * W11_HW * W11_HW * W11_O * W11_K * W11_K * W11_C, .tol = 1e-4,
     .note = "W11 is jit_conv (SAME as pads 1) with the bias and relu after it",
     .n_args = 3, .args = {ARG4(W11_N, W11_HW, W11_HW, W11_C), ARG4(W11_K, W11_K, W11_C, W11_O), ARG1(W11_O)},
     .out_rank = {4}, .out_shape = {{W11_N, W11_HW, W11_HW, W11_O}}, .trace = w11_trace,
     .reference = w11_ref},
    {.id = "W12", .name = "fft", .kind = FLOOR_FLOPS, .amount = 2 * 5.0 * W12_N * 20, .tol = 1e-5,
     .note = "W12: jit_fft FFT of c64 [2^20] and RFFT over both dims of f32 [1024,1024] in one "
             "function, 5 N log2 N FLOP each (N = 2^20); the peer times jnp.fft and numpy.fft",
     .n_args = 2, .args = {{2, {W12_N, 2, 0}, 1.0, 0.0, 0, 1}, ARG2(W12_R, W12_R)},
     .n_results = 2, .out_rank = {2, 3}, .out_shape = {{W12_N, 2}, {W12_R, W12_R / 2 + 1, 2}},
     .complex_results = 3, .trace = w12_trace, .reference = w12_ref, .peer = "w12_fft.py"},
    {.id = "W13", .name = "mlp_bf16", .kind = FLOOR_FLOPS, .amount = 2.0 * 2 * W4_B * W4_D * W4_H,
     .tol = 1e-2, .data_id = "W4",
     .note = "W13 is W4's function on bf16 arrays (W4's data rounded to bf16): each dot sums in "
             "f32 and rounds its result to bf16, as XLA's; checked against the float64 W4 of the "
             "rounded inputs (the hidden layer and the result are rounded to bf16 in tjit)",
     .n_args = 5,
     .args = {BF16_ARG2(W4_B, W4_D), BF16_ARG2(W4_D, W4_H), BF16_ARG1(W4_H), BF16_ARG2(W4_H, W4_D),
              BF16_ARG1(W4_D)},
     .out_rank = {2}, .out_shape = {{W4_B, W4_D}}, .bf16_results = 1, .trace = w4_trace,
     .reference = w4_ref, .peer = "jax_w13.py"},
};
const int bench_n_workloads = (int)(sizeof bench_workloads / sizeof bench_workloads[0]);
