/* transformer_model.h: the model of shared/bench/WORKLOADS.md's W10 as tjit trace functions,
 * shared by examples/transformer.c (which trains it) and bench/workloads.c (which times one step).
 *
 * A one-block, pre-layernorm decoder: token embedding by jit_take plus a learned position
 * embedding, causal multi-head self-attention, a GELU(erf) MLP of width 4D, a final layernorm,
 * logits against a separate output matrix, and the mean cross-entropy of integer labels by
 * jit_take_along_axis. tf_step is one SGD step: value_and_grad of that loss with respect to every
 * weight, and w - lr * dL/dw for each. Header-only (static inline), so each program that includes
 * it compiles its own copy. */
#ifndef TJIT_TRANSFORMER_MODEL_H
#define TJIT_TRANSFORMER_MODEL_H

#include <math.h>
#include <stdint.h>

#include "tjit.h"

/* The weights, in the order of the step's args and results. */
enum {
  TF_WTE,            /* token embedding [V, D] */
  TF_WPE,            /* position embedding [T, D] */
  TF_LN1_G, TF_LN1_B, /* [D]: the layernorm before attention */
  TF_WQKV,           /* [D, 3D]: queries, keys and values of every head side by side */
  TF_WO,             /* [D, D]: attention output projection */
  TF_LN2_G, TF_LN2_B, /* [D]: the layernorm before the MLP */
  TF_W1, TF_B1,      /* [D, 4D], [4D] */
  TF_W2, TF_B2,      /* [4D, D], [D] */
  TF_LNF_G, TF_LNF_B, /* [D]: the final layernorm */
  TF_WOUT,           /* [D, V]: logits */
  TF_N_WEIGHTS
};
/* The step's args: the weights, then ids and labels (i32 [B, T]). Its results: the updated
   weights, then the loss (a f32 scalar). */
enum { TF_IDS = TF_N_WEIGHTS, TF_LABELS, TF_N_ARGS, TF_LOSS = TF_N_WEIGHTS, TF_N_RESULTS };

typedef struct tf_config {
  int64_t batch, seq, dim, heads, vocab;
  double lr;     /* SGD learning rate */
  double clip;   /* > 0: the gradients are scaled down to this global norm when above it */
  uint64_t seed; /* tf_init's key */
} tf_config;

/* Shape of weight w (rank 1 or 2 into shape[0..1]); returns the rank. */
static inline int tf_weight_shape(const tf_config *c, int w, int64_t shape[2]) {
  const int64_t D = c->dim;
  switch (w) {
  case TF_WTE: shape[0] = c->vocab, shape[1] = D; return 2;
  case TF_WPE: shape[0] = c->seq, shape[1] = D; return 2;
  case TF_WQKV: shape[0] = D, shape[1] = 3 * D; return 2;
  case TF_WO: shape[0] = D, shape[1] = D; return 2;
  case TF_W1: shape[0] = D, shape[1] = 4 * D; return 2;
  case TF_B1: shape[0] = 4 * D; return 1;
  case TF_W2: shape[0] = 4 * D, shape[1] = D; return 2;
  case TF_WOUT: shape[0] = D, shape[1] = c->vocab; return 2;
  default: shape[0] = D; return 1; /* layernorm gains and biases, b2 */
  }
}

/* How weight w starts: gains at 1, biases at 0, matrices uniform(-scale, scale) with scale =
   1/sqrt(fan-in). An embedding lookup is a one-hot matmul with one nonzero input: fan-in 1. */
static inline double tf_init_scale(const tf_config *c, int w, double *constant) {
  int64_t shape[2];
  *constant = (w == TF_LN1_G || w == TF_LN2_G || w == TF_LNF_G) ? 1.0 : 0.0;
  if (tf_weight_shape(c, w, shape) == 1) return 0.0;
  if (w == TF_WTE || w == TF_WPE) return 1.0;
  return 1.0 / sqrt((double)shape[0]);
}

/* tf_init's trace: no args; user is the config; one result per weight, drawn from
   jit_random_split(jit_random_key(seed), TF_N_WEIGHTS). */
static inline void tf_init(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)a;
  const tf_config *c = user;
  jit_val keys = jit_random_split(t, jit_random_key(t, c->seed), TF_N_WEIGHTS);
  for (int w = 0; w < TF_N_WEIGHTS; w++) {
    int64_t shape[2];
    int rank = tf_weight_shape(c, w, shape);
    double constant, scale = tf_init_scale(c, w, &constant);
    if (scale == 0.0) {
      r[w] = jit_full(t, JIT_F32, rank, shape, constant);
      continue;
    }
    jit_val key = jit_reshape(t, jit_slice(t, keys, (const int64_t[]){w, 0},
                                           (const int64_t[]){w + 1, 2}, NULL),
                              1, (const int64_t[]){2});
    r[w] = jit_random_uniform(t, key, JIT_F32, rank, shape, -scale, scale);
  }
}

/* x [N, D] -> [N, 1]: a row statistic that broadcasts back against x. */
static inline jit_val tf_row_sum(jit_trace *t, jit_val x) {
  int last = jit_val_rank(t, x) - 1;
  const int64_t *s = jit_val_shape(t, x);
  int64_t kept[2] = {s ? s[0] : 0, 1};
  return jit_reshape(t, jit_reduce_sum(t, x, 1, &last), 2, kept);
}

/* (x - mean) / sqrt(var + 1e-5) * g + b over the last axis of x [N, D] */
static inline jit_val tf_layernorm(jit_trace *t, jit_val x, jit_val g, jit_val b) {
  const int64_t *s = jit_val_shape(t, x);
  jit_val inv_d = jit_scalar(t, 1.0 / (double)(s ? s[1] : 1));
  jit_val d = jit_sub(t, x, jit_mul(t, tf_row_sum(t, x), inv_d));
  jit_val var = jit_mul(t, tf_row_sum(t, jit_mul(t, d, d)), inv_d);
  jit_val y = jit_mul(t, d, jit_rsqrt(t, jit_add(t, var, jit_scalar(t, 1e-5))));
  return jit_add(t, jit_mul(t, y, g), b);
}

/* 0.5 x (1 + erf(x / sqrt 2)), jax.nn.gelu(approximate=False) */
static inline jit_val tf_gelu(jit_trace *t, jit_val x) {
  jit_val e = jit_erf(t, jit_mul(t, x, jit_scalar(t, 0.70710678118654752440) /* 1/sqrt 2 */));
  return jit_mul(t, jit_mul(t, x, jit_scalar(t, 0.5)), jit_add(t, e, jit_scalar(t, 1.0)));
}

/* column block [N, lo:lo+n] of x [N, M] as heads: [B, H, T, dh] */
static inline jit_val tf_heads(jit_trace *t, const tf_config *c, jit_val x, int64_t lo) {
  const int64_t N = c->batch * c->seq, D = c->dim, dh = D / c->heads;
  jit_val part = jit_slice(t, x, (const int64_t[]){0, lo}, (const int64_t[]){N, lo + D}, NULL);
  jit_val split = jit_reshape(t, part, 4, (const int64_t[]){c->batch, c->seq, c->heads, dh});
  return jit_transpose(t, split, (const int[]){0, 2, 1, 3});
}

/* causal self-attention of h [N, D] -> [N, D] (before the output projection) */
static inline jit_val tf_attention(jit_trace *t, const tf_config *c, jit_val h, jit_val wqkv) {
  const int64_t B = c->batch, T = c->seq, D = c->dim, H = c->heads;
  jit_val qkv = jit_matmul(t, h, wqkv);
  jit_val q = tf_heads(t, c, qkv, 0), k = tf_heads(t, c, qkv, D), v = tf_heads(t, c, qkv, 2 * D);
  const int batch[2] = {0, 1};
  jit_val s = jit_dot_general(t, q, k, 2, batch, batch, 1, (const int[]){3}, (const int[]){3});
  s = jit_mul(t, s, jit_scalar(t, 1.0 / sqrt((double)(D / H)))); /* [B, H, T, T] */
  const int64_t tt[2] = {T, T};
  jit_val causal = jit_cmp(t, JIT_GE, jit_iota(t, JIT_I32, 2, tt, 0), jit_iota(t, JIT_I32, 2, tt, 1));
  s = jit_select(t, causal, s, jit_scalar(t, -1e30)); /* [T, T] broadcasts over B, H */
  int last = 3;
  const int64_t col[4] = {B, H, T, 1};
  jit_val m = jit_reshape(t, jit_reduce_max(t, s, 1, &last), 4, col);
  jit_val e = jit_exp(t, jit_sub(t, s, m));
  jit_val p = jit_div(t, e, jit_reshape(t, jit_reduce_sum(t, e, 1, &last), 4, col));
  jit_val o = jit_dot_general(t, p, v, 2, batch, batch, 1, (const int[]){3}, (const int[]){2});
  o = jit_transpose(t, o, (const int[]){0, 2, 1, 3}); /* [B, T, H, dh] */
  return jit_reshape(t, o, 2, (const int64_t[]){B * T, D});
}

/* The loss: args as tf_step's (weights, ids, labels); result 0 the mean cross-entropy. */
static inline void tf_loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const tf_config *c = user;
  const int64_t B = c->batch, T = c->seq, N = B * T, D = c->dim, V = c->vocab;
  jit_val x = jit_take(t, a[TF_WTE], a[TF_IDS], 0); /* [B, T, D] */
  x = jit_reshape(t, jit_add(t, x, a[TF_WPE]), 2, (const int64_t[]){N, D});
  jit_val h = tf_layernorm(t, x, a[TF_LN1_G], a[TF_LN1_B]);
  x = jit_add(t, x, jit_matmul(t, tf_attention(t, c, h, a[TF_WQKV]), a[TF_WO]));
  h = tf_layernorm(t, x, a[TF_LN2_G], a[TF_LN2_B]);
  h = tf_gelu(t, jit_add(t, jit_matmul(t, h, a[TF_W1]), a[TF_B1]));
  x = jit_add(t, x, jit_add(t, jit_matmul(t, h, a[TF_W2]), a[TF_B2]));
  h = tf_layernorm(t, x, a[TF_LNF_G], a[TF_LNF_B]);
  jit_val logits = jit_matmul(t, h, a[TF_WOUT]); /* [N, V] */
  int last = 1;
  jit_val m = jit_reshape(t, jit_reduce_max(t, logits, 1, &last), 2, (const int64_t[]){N, 1});
  jit_val z = jit_sub(t, logits, m);
  jit_val lse = jit_log(t, tf_row_sum(t, jit_exp(t, z)));
  jit_val labels = jit_reshape(t, a[TF_LABELS], 2, (const int64_t[]){N, 1});
  jit_val picked = jit_take_along_axis(t, z, labels, 1); /* [N, 1] */
  jit_val nll = jit_sub(t, lse, picked);
  const int both[2] = {0, 1};
  r[0] = jit_mul(t, jit_reduce_sum(t, nll, 2, both), jit_scalar(t, 1.0 / (double)N));
  (void)V;
}

/* One SGD step: args weights..., ids, labels; results updated weights..., loss. */
static inline void tf_step(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const tf_config *c = user;
  jit_val vg[1 + TF_N_WEIGHTS]; /* loss, then one gradient per weight */
  jit_value_and_grad(t, tf_loss, user, TF_N_ARGS, a, (UINT64_C(1) << TF_N_WEIGHTS) - 1, 0, vg);
  jit_val lr = jit_scalar(t, c->lr);
  if (c->clip > 0) { /* optax.clip_by_global_norm: lr * min(1, clip / |g|) */
    jit_val norm2 = jit_scalar(t, 0.0);
    for (int w = 0; w < TF_N_WEIGHTS; w++) {
      int rank = jit_val_rank(t, vg[1 + w]);
      const int axes[2] = {0, 1};
      norm2 = jit_add(t, norm2, jit_reduce_sum(t, jit_mul(t, vg[1 + w], vg[1 + w]), rank, axes));
    }
    jit_val scale = jit_min(t, jit_scalar(t, 1.0), jit_mul(t, jit_scalar(t, c->clip), jit_rsqrt(t, norm2)));
    lr = jit_mul(t, lr, scale);
  }
  for (int w = 0; w < TF_N_WEIGHTS; w++) r[w] = jit_sub(t, a[w], jit_mul(t, vg[1 + w], lr));
  r[TF_LOSS] = vg[0];
}

/* FLOPs of one step: forward matmuls (QKV, output projection, MLP, attention's two batched
   products, logits) and twice that backward (both operands' gradients). */
static inline double tf_step_flops(const tf_config *c) {
  const double N = (double)(c->batch * c->seq), D = (double)c->dim, T = (double)c->seq;
  double fwd = 2 * N * D * (3 * D + D + 8 * D) + 2 * 2 * N * T * D + 2 * N * D * (double)c->vocab;
  return 3 * fwd;
}

#endif /* TJIT_TRANSFORMER_MODEL_H */
