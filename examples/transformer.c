/* transformer.c: trains the one-block transformer of shared/bench/WORKLOADS.md's W10
 * (examples/transformer_model.h) for 50 SGD steps on a synthetic copy task: the label at position
 * t is the token at position t - LAG (0 for the first LAG positions), so the model must learn an
 * attention head that looks LAG tokens back. The weights are drawn by a jitted function of
 * jit_random_* ops; each step is one jitted function (weights, ids, labels) -> (updated weights,
 * loss) whose weight args are donated, so the update runs in place.
 *
 *   transformer          B=8, T=32, D=64, 4 heads, vocab 64: learns the copy in 50 steps (ctest)
 *   transformer --w10    W10's sizes: T=128, D=256, vocab 4096 (about 0.5 s a step on 2 cores);
 *                        in 50 steps it learns which tokens occur, the copy needs more steps
 *   --seed N             the weights' and the data's seed (default 1)
 *   --lr X, --clip X     SGD's learning rate (3) and the global gradient norm it clips to (1)
 *   --tokens N           the data's tokens are the first N of the vocabulary (64)
 *
 * Exit status 0 when the mean loss of the last 5 steps is under 0.7x that of the first 5. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tjit.h"
#include "transformer_model.h"

enum { STEPS = 50, LAG = 2, WINDOW = 5 };
#define REQUIRED_DROP 0.7 /* last-WINDOW mean loss / first-WINDOW mean loss must be below this */

static int check(jit_status st, const char *what) {
  if (st == JIT_OK) return 0;
  fprintf(stderr, "transformer: %s: %s: %s\n", what, jit_status_str(st), jit_last_error());
  return 1;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* A batch of the copy task: ids uniform over the first `tokens` of the vocabulary,
   labels[t] = ids[t - LAG]. */
static void copy_task_batch(const tf_config *c, int64_t tokens, uint64_t *state, int32_t *ids,
                            int32_t *labels) {
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t t = 0; t < c->seq; t++) {
      *state = *state * 6364136223846793005ull + 1442695040888963407ull;
      ids[b * c->seq + t] = (int32_t)((*state >> 33) % (uint64_t)tokens);
    }
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t t = 0; t < c->seq; t++)
      labels[b * c->seq + t] = t >= LAG ? ids[b * c->seq + t - LAG] : 0;
}

int main(int argc, char **argv) {
  int64_t tokens = 64;
  tf_config c = {.batch = 8, .seq = 32, .dim = 64, .heads = 4, .vocab = 64,
                 .lr = 3.0, .clip = 1.0, .seed = 1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--w10") == 0) c.seq = 128, c.dim = 256, c.vocab = 4096;
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) c.seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--lr") == 0 && i + 1 < argc) c.lr = atof(argv[++i]);
    else if (strcmp(argv[i], "--clip") == 0 && i + 1 < argc) c.clip = atof(argv[++i]);
    else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) tokens = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: transformer [--w10] [--seed N] [--lr X] [--clip X] [--tokens N]\n");
      return 2;
    }
  }
  if (tokens < 1 || tokens > c.vocab) tokens = c.vocab;
  int rc = 1;
  jit_ctx *ctx = NULL;
  jit_fn *init = NULL, *step = NULL;
  jit_array *w[TF_N_WEIGHTS] = {NULL}, *ids = NULL, *labels = NULL;
  const size_t n_tok = (size_t)(c.batch * c.seq);
  int32_t *ids_h = malloc(n_tok * sizeof *ids_h), *labels_h = malloc(n_tok * sizeof *labels_h);
  double losses[STEPS];
  if (!ids_h || !labels_h) {
    fprintf(stderr, "transformer: out of memory\n");
    goto done;
  }
  if (check(jit_ctx_create(NULL, &ctx), "jit_ctx_create")) goto done;
  jit_fn_opts io = {.name = "tf_init", .n_args = 0, .n_results = TF_N_WEIGHTS};
  jit_fn_opts so = {.name = "tf_step", .n_args = TF_N_ARGS, .n_results = TF_N_RESULTS,
                    .donate_mask = (UINT64_C(1) << TF_N_WEIGHTS) - 1};
  if (check(jit_compile(ctx, tf_init, &c, &io, &init), "jit_compile(tf_init)") ||
      check(jit_compile(ctx, tf_step, &c, &so, &step), "jit_compile(tf_step)") ||
      check(jit_call(init, NULL, w), "tf_init"))
    goto done;
  /* the loss of a model that knows which tokens occur but not the copy: log(tokens) */
  const double baseline = log((double)tokens);
  printf("W10's model: B=%lld T=%lld D=%lld heads=%lld vocab=%lld, %.2f GFLOP per step; "
         "SGD lr %.2g, gradients clipped to norm %.2g\ncopy task: the label at position t is the "
         "token at t-%d, tokens drawn from the first %lld (log %lld = %.3f: the loss without the "
         "copy)\n", (long long)c.batch, (long long)c.seq, (long long)c.dim, (long long)c.heads,
         (long long)c.vocab, tf_step_flops(&c) * 1e-9, c.lr, c.clip, LAG, (long long)tokens,
         (long long)tokens, baseline);
  const int64_t bt[2] = {c.batch, c.seq};
  uint64_t data_state = c.seed * 0x9e3779b97f4a7c15ull + 1;
  double warm_ms = 0;
  for (int s = 0; s < STEPS; s++) {
    copy_task_batch(&c, tokens, &data_state, ids_h, labels_h);
    jit_array *args[TF_N_ARGS], *out[TF_N_RESULTS] = {NULL};
    if (check(jit_array_from_host(ctx, JIT_I32, 2, bt, ids_h, &ids), "ids") ||
        check(jit_array_from_host(ctx, JIT_I32, 2, bt, labels_h, &labels), "labels"))
      goto done;
    memcpy(args, w, sizeof w);
    args[TF_IDS] = ids;
    args[TF_LABELS] = labels;
    double t0 = now_ms();
    jit_status st = jit_call(step, args, out);
    double ms = now_ms() - t0;
    if (check(st, "tf_step")) goto done;
    for (int i = 0; i < TF_N_WEIGHTS; i++) { /* the donated arrays are deleted: free the handles */
      jit_array_free(w[i]);
      w[i] = out[i];
    }
    float loss = 0;
    st = jit_array_to_host(out[TF_LOSS], &loss, sizeof loss);
    jit_array_free(out[TF_LOSS]);
    jit_array_free(ids);
    jit_array_free(labels);
    ids = labels = NULL;
    if (check(st, "loss")) goto done;
    losses[s] = loss;
    if (s > 0) warm_ms += ms;
    if (s < WINDOW || s >= STEPS - WINDOW || s % 5 == 0)
      printf("step %2d  loss %.4f  %8.1f ms%s\n", s, loss, ms, s == 0 ? " (trace + compile + run)" : "");
  }
  double first = 0, last = 0;
  for (int i = 0; i < WINDOW; i++) first += losses[i] / WINDOW, last += losses[STEPS - WINDOW + i] / WINDOW;
  printf("mean loss of the first %d steps %.4f, of the last %d %.4f: %.2fx (must be < %.2f); "
         "%.1f ms per warm step\n", WINDOW, first, WINDOW, last, last / first, REQUIRED_DROP,
         warm_ms / (STEPS - 1));
  printf("the copy is %s: the last steps' loss is %.2fx log(tokens)\n",
         last < REQUIRED_DROP * baseline ? "learned" : "not learned yet", last / baseline);
  rc = last < REQUIRED_DROP * first ? 0 : 1;
  if (rc) fprintf(stderr, "transformer: the loss did not fall enough\n");
done:
  for (int i = 0; i < TF_N_WEIGHTS; i++) jit_array_free(w[i]);
  jit_array_free(ids);
  jit_array_free(labels);
  free(ids_h);
  free(labels_h);
  jit_fn_free(init);
  jit_fn_free(step);
  jit_ctx_destroy(ctx);
  return rc;
}
