/* w14.c: W14 of shared/bench/WORKLOADS.md, run as `mpirun -np 2 build/tjit-bench-w14`: W9's
 * y = x @ w (2048 x 2048, f32) with x split by rows over 2 processes of 1 device (1 thread) each
 * and w replicated, against the same matmul on 1 device of 1 thread in one process (rank 0, while
 * the other ranks wait). Prints the warm medians, the speedup, the bytes each rank sent during the
 * timed calls, and checks the distributed product against the 1-device one. Options: --reps N. */
#include <math.h>
#include <stdbool.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/runtime.h" /* dist_bytes_sent */
#include "tjit.h"

enum { N = 2048 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void fill(float *v, int64_t n, uint64_t seed) { /* uniform(-1, 1) */
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
}

static void matmul(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_matmul(t, a[0], a[1]);
}

#define CHECK(call)                                                                  \
  do {                                                                               \
    if ((call) != JIT_OK) {                                                          \
      fprintf(stderr, "w14: %s: %s\n", #call, jit_last_error());                    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
    }                                                                                \
  } while (0)

/* Median seconds of reps warm calls of f(args) (after 2 warm-ups: reps + 2 calls in all); the
   last result in *last. */
static double time_calls(jit_fn *f, jit_array **args, int reps, bool collective,
                         jit_array **last) {
  double *t = calloc((size_t)reps, sizeof *t);
  for (int i = 0; i < reps + 2; i++) {
    if (collective) MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    jit_array *r = NULL;
    CHECK(jit_call(f, args, &r));
    if (i >= 2) t[i - 2] = now_s() - t0;
    if (*last) jit_array_free(*last);
    *last = r;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double med = t[reps / 2];
  free(t);
  return med;
}

int main(int argc, char **argv) {
  int reps = 10;
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
  if (reps < 1) reps = 1;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = 1;
  o.n_threads = 1;
  o.distributed = 1;
  jit_ctx *dist = NULL;
  if (jit_ctx_create(&o, &dist) != JIT_OK) {
    fprintf(stderr, "w14: %s\n", jit_last_error());
    return 1;
  }
  int rank = jit_process_index(dist), np = jit_process_count(dist);
  if (np != 2 && rank == 0) fprintf(stderr, "w14: W14 is defined for 2 processes (got %d)\n", np);
  float *x = malloc(sizeof(float) * N * N), *w = malloc(sizeof(float) * N * N);
  float *y1 = malloc(sizeof(float) * N * N), *yd = malloc(sizeof(float) * N * N);
  if (!x || !w || !y1 || !yd) MPI_Abort(MPI_COMM_WORLD, 1);
  fill(x, (int64_t)N * N, 9);
  fill(w, (int64_t)N * N, 10);
  const int64_t shape[2] = {N, N};
  jit_fn_opts fo = {.name = "w14", .n_args = 2, .n_results = 1};

  /* 1 device of 1 thread, in rank 0 alone */
  double t1 = 0;
  if (rank == 0) {
    o.distributed = 0;
    jit_ctx *one = NULL;
    CHECK(jit_ctx_create(&o, &one));
    jit_array *args[2] = {NULL, NULL}, *y = NULL;
    CHECK(jit_array_from_host(one, JIT_F32, 2, shape, x, &args[0]));
    CHECK(jit_array_from_host(one, JIT_F32, 2, shape, w, &args[1]));
    jit_fn *f = NULL;
    CHECK(jit_compile(one, matmul, NULL, &fo, &f));
    t1 = time_calls(f, args, reps, false, &y);
    CHECK(jit_array_to_host(y, y1, sizeof(float) * N * N));
    jit_array_free(y);
    jit_array_free(args[0]);
    jit_array_free(args[1]);
    jit_fn_free(f);
    jit_ctx_destroy(one);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* np processes of 1 device each: x by rows from each process's own rows, w replicated */
  static const char *const names[1] = {"x"};
  jit_mesh *m = NULL;
  jit_sharding *rows = NULL, *repl = NULL;
  CHECK(jit_mesh_create(dist, 1, (const int64_t[]){np}, names, NULL, &m));
  CHECK(jit_sharding_create(m, "x,_", &rows));
  CHECK(jit_sharding_create(m, "_,_", &repl));
  jit_array *args[2] = {NULL, NULL}, *wh = NULL, *y = NULL;
  int64_t per = N / np;
  CHECK(jit_array_from_process_local(rows, JIT_F32, 2, shape, x + rank * per * N,
                                     sizeof(float) * (size_t)(per * N), &args[0]));
  CHECK(jit_array_from_host(dist, JIT_F32, 2, shape, w, &wh));
  CHECK(jit_device_put(wh, repl, &args[1]));
  jit_fn *f = NULL;
  CHECK(jit_compile(dist, matmul, NULL, &fo, &f));
  jit_array *warm = NULL;
  jit_array *wargs[2] = {args[0], args[1]};
  CHECK(jit_call(f, wargs, &warm)); /* compile outside the byte count */
  jit_array_free(warm);
  uint64_t sent0 = dist_bytes_sent(dist);
  double td = time_calls(f, args, reps, true, &y);
  uint64_t sent = dist_bytes_sent(dist) - sent0;
  uint64_t sent_g0 = dist_bytes_sent(dist);
  CHECK(jit_array_to_host(y, yd, sizeof(float) * N * N)); /* collective: every rank gets y */
  uint64_t sent_gather = dist_bytes_sent(dist) - sent_g0;

  unsigned long long *all = calloc(2 * (size_t)np, sizeof *all);
  if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
  unsigned long long mine[2] = {(unsigned long long)sent, (unsigned long long)sent_gather};
  MPI_Gather(mine, 2, MPI_UNSIGNED_LONG_LONG, all, 2, MPI_UNSIGNED_LONG_LONG, 0,
             MPI_COMM_WORLD);
  if (rank == 0) {
    double max_rel = 0;
    size_t differ = 0;
    for (int64_t i = 0; i < (int64_t)N * N; i++) {
      double d = fabs((double)yd[i] - (double)y1[i]) / fmax(1e-30, fabs((double)y1[i]));
      if (d > max_rel) max_rel = d;
      differ += yd[i] != y1[i];
    }
    double gflop = 2.0 * N * N * N * 1e-9;
    printf("W14 multiprocess_matmul, %d reps, warm medians (1 thread per process)\n", reps);
    printf("  1 process x 1 device : %8.1f ms  %6.1f GFLOP/s\n", t1 * 1e3, gflop / t1);
    printf("  %d processes x 1 device: %8.1f ms  %6.1f GFLOP/s\n", np, td * 1e3, gflop / td);
    printf("  speedup: %.2fx (target >= 1.8x)\n", t1 / td);
    for (int r = 0; r < np; r++)
      printf("  rank %d sent %llu bytes over %d calls (%.0f per call), %llu in the gathering "
             "jit_array_to_host\n", r, all[2 * r], reps + 2, (double)all[2 * r] / (reps + 2),
             all[2 * r + 1]);
    printf("  check against 1 device: %zu of %lld elements differ, max relative difference %.3g\n",
           differ, (long long)N * N, max_rel);
  }
  free(all);
  jit_array_free(y);
  jit_array_free(args[0]);
  jit_array_free(args[1]);
  jit_array_free(wh);
  jit_fn_free(f);
  jit_sharding_free(rows);
  jit_sharding_free(repl);
  jit_mesh_free(m);
  free(x);
  free(w);
  free(y1);
  free(yd);
  jit_ctx_destroy(dist);
  return 0;
}
