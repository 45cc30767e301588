/* bench.h: what the files of tjit-bench share: the machine's floors (floors.c), the workloads
 * of shared/bench/WORKLOADS.md with their float64 references (workloads.c), small helpers. */
#ifndef TJIT_BENCH_H
#define TJIT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tjit.h"

/* ---- helpers (main.c) ------------------------------------------------------------------------ */
double bench_now(void); /* seconds, CLOCK_MONOTONIC */
/* 64-byte aligned, or NULL; free with free(). */
void *bench_alloc(size_t bytes);

/* ---- floors (floors.c) ----------------------------------------------------------------------- */
typedef struct floor_result {
  double triad_gbs[2];      /* best STREAM-like triad with 1 and 2 threads, GB/s (10^9 B/s) */
  double triad_median[2];   /* median over the repetitions, GB/s */
  double fma_gflops[2];     /* register-only FMA loop with 1 and 2 threads, GFLOP/s */
  const char *fma_isa;      /* "avx512f", "avx2+fma" or "sse2 (mul+add)" */
  double triad_mib;         /* size of each of the three arrays, MiB */
  const char *triad_isa;    /* vectors of the triad loop: "avx512f", "avx2" or "sse2" */
  int fma_accumulators;     /* independent vector accumulators per thread */
  int max_bits;             /* the vector width both were measured at (floors_again's too) */
  long fma_iters;           /* FMA loop iterations per thread in one run (~0.2 s) */
} floor_result;

/* Measures both floors; reps = triad repetitions per thread count. max_vector_bits (256, 512;
   0: the host's widest) caps the vectors the floors use, so that a target narrower than the host
   (TJIT_CPU=x86-64-v3 on an AVX-512 machine) is measured against what its code could reach.
   0 on success. */
int floors_measure(int reps, int max_vector_bits, floor_result *out);
/* One floor measured again, as it is next to a workload's timed calls: the triad's best of 3
   (bytes) or the FMA loop's best of 3 runs of a quarter of fl's length, with nth threads, at fl's
   vector width. A shared host's speed moves by tens of percent over minutes, so a workload is
   also held against the floor measured just before and after it. GB/s or GFLOP/s; 0 on failure. */
double floors_again(const floor_result *fl, bool bytes, int nth);

/* ---- workloads (workloads.c) ------------------------------------------------------------------ */
/* FLOOR_FLOPS_1T: FLOPs against one thread's FMA peak (a sequential loop such as W5's). */
typedef enum { FLOOR_BYTES, FLOOR_FLOPS, FLOOR_LATENCY, FLOOR_FLOPS_1T } floor_kind;

#define WL_MAX_ARGS 17    /* W10: 15 weights, ids, labels */
#define WL_MAX_RESULTS 16 /* W10: 15 updated weights, the loss */

typedef struct wl_arg {
  int rank;
  int64_t shape[4];
  double scale;             /* filled with offset + uniform(-1, 1) * scale */
  double offset;
  int64_t int_range;        /* > 0: an i32 arg, uniform over [0, int_range), not a f32 one */
  int complex_pairs;        /* 1: a c64 arg, shape's last dim of 2 its (re, im) float pairs */
  int bf16;                 /* 1: a bf16 arg: its float32 data rounded to bf16 (what the
                               reference reads), uploaded as bf16 */
} wl_arg;

typedef struct workload {
  const char *id;           /* "W1" */
  const char *name;         /* "eltwise" */
  const char *na;           /* non-NULL: cannot be expressed yet; why ("needs issue 5: scan") */
  const char *note;         /* non-NULL: how it is written today, shown under the table */
  floor_kind kind;
  double amount;            /* bytes moved or FLOPs per call (0 for FLOOR_LATENCY) */
  double tol;               /* max ||y - ref|| / ||ref|| */
  int n_args;
  wl_arg args[WL_MAX_ARGS];
  int n_results;             /* 0 means 1 */
  int out_rank[WL_MAX_RESULTS];
  int64_t out_shape[WL_MAX_RESULTS][4];
  jit_trace_fn trace;
  /* chain > 0: one timed unit is args[1]'s leading size of jit_calls of a one-step function:
     call t takes slice t of args[1] in its place and, as args[0], the previous call's result 0
     (args[0] itself for t = 0); the last call's result is checked. */
  int chain;
  /* Placement: devices / threads of the context (0: its defaults); mesh > 0: a 1-D mesh "x" of
     that many devices, and args[i] put on it as specs[i] says (NULL: left uncommitted). */
  int devices, threads, mesh;
  const char *specs[WL_MAX_ARGS];
  const char *data_id;      /* non-NULL: the args' data is seeded by this id (variants share it) */
  /* bit i: args[i] is donated and replaced by result i for the next call (a training step fed
     its own updated weights); the first call's results are checked against the original args */
  uint64_t donate_mask;
  /* ref for every element of every result, in float64, from the same float32 inputs: the
     results one after the other, each in row-major order. The check is per result. */
  void (*reference)(const float *const *args, double *ref);
  /* instead of reference: checks the results (as float32, in order) against the args itself;
     returns the relative error to compare with tol, with what it measured in msg */
  double (*check)(const void *const *args, const float *const *results, char *msg, size_t len);
  const char *peer;         /* non-NULL: the script in bench/peers that times it in JAX */
  uint32_t complex_results; /* bit k: result k is c64, out_shape[k]'s last dim of 2 its pairs */
  uint32_t bf16_results;    /* bit k: result k is bf16 (checked as the float32 it widens to) */
} workload;

extern const workload bench_workloads[];
extern const int bench_n_workloads;

int64_t wl_numel(int rank, const int64_t *shape);
int wl_n_results(const workload *w);
/* Fills dst with the seeded data of argument i of w (the same in every process): float32 offset +
   uniform(-1, 1) * scale (rounded to the nearest bf16 for a bf16 arg), or int32 uniform over
   [0, int_range). */
void wl_fill(const workload *w, int i, void *dst);

/* bf16 <-> float32: the bf16 bits of f rounded to nearest even (NaN stays NaN), and back. */
uint16_t wl_bf16_bits(float f);
float wl_bf16_float(uint16_t b);

#endif /* TJIT_BENCH_H */
