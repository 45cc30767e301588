/* floors.c: the machine's limits, measured in the same run as the workloads: a STREAM-like triad
 * on arrays far past L3 and a register-only FMA loop, each with 1 and 2 threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "bench.h"

#define TRIAD_N ((size_t)16 << 20) /* floats per array: 64 MiB each, 192 MiB in all */
#define MAX_THREADS 2

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- triad: a[i] = b[i] + s * c[i] ------------------------------------------------------------
   Bytes are counted as STREAM does: 12 per element (read b, read c, write a); the write-allocate
   read of a is not counted. Each thread first-touches the slice it later streams. The loop is
   written for the widest vectors the CPU has (the bench itself is built with plain -O2, which
   leaves it scalar: 18 against 26-35 GB/s on a 2-core Zen 3), and the arrays are advised to huge
   pages as the library's buffer pool advises its blocks, so both are measured under the same
   memory policy. Plain stores, as STREAM compiled by gcc: no streaming stores. */
typedef void (*triad_fn)(float *a, const float *b, const float *c, float s, size_t lo, size_t hi);

/* One body per vector width: GCC's vector types become the target's registers. */
#define TRIAD_FN(NAME, ATTR, BYTES)                                                               \
  ATTR static void NAME(float *restrict a, const float *restrict b, const float *restrict c,     \
                        float s, size_t lo, size_t hi) {                                         \
    typedef float vec __attribute__((vector_size(BYTES), aligned(4)));                           \
    const size_t lanes = (BYTES) / sizeof(float);                                                \
    size_t i = lo;                                                                               \
    for (; i + lanes <= hi; i += lanes)                                                          \
      *(vec *)(a + i) = *(const vec *)(b + i) + s * *(const vec *)(c + i);                       \
    for (; i < hi; i++) a[i] = b[i] + s * c[i];                                                  \
  }

TRIAD_FN(triad_generic, , 16)
#if defined(__x86_64__) || defined(__i386__)
TRIAD_FN(triad_avx2, __attribute__((target("avx2"))), 32)
TRIAD_FN(triad_avx512, __attribute__((target("avx512f"))), 64)
#endif

static triad_fn triad_pick(int max_bits, const char **isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (max_bits >= 512 && __builtin_cpu_supports("avx512f")) {
    *isa = "avx512f";
    return triad_avx512;
  }
  if (max_bits >= 256 && __builtin_cpu_supports("avx2")) {
    *isa = "avx2";
    return triad_avx2;
  }
#endif
  *isa = "sse2";
  return triad_generic;
}

/* 2 MiB aligned and advised to huge pages, as src/runtime/buffers.c does for large blocks. */
static float *triad_alloc(void) {
  void *p = NULL;
  size_t bytes = TRIAD_N * sizeof(float);
  if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE); /* advice only */
#endif
  return p;
}

typedef struct triad_team {
  triad_fn fn;
  float *a, *b, *c;
  int nth, reps;
  pthread_barrier_t bar;
  double *times;            /* reps wall times, written by thread 0 */
} triad_team;

typedef struct triad_arg {
  triad_team *team;
  int ith;
} triad_arg;

static void *triad_thread(void *p) {
  triad_arg *ta = p;
  triad_team *tm = ta->team;
  size_t lo = TRIAD_N * (size_t)ta->ith / (size_t)tm->nth;
  size_t hi = TRIAD_N * (size_t)(ta->ith + 1) / (size_t)tm->nth;
  float *restrict a = tm->a, *restrict b = tm->b, *restrict c = tm->c;
  for (size_t i = lo; i < hi; i++) {
    a[i] = 0.0f;
    b[i] = 1.0f + (float)(i & 7);
    c[i] = 0.5f;
  }
  const float s = 3.0f;
  for (int r = 0; r < tm->reps; r++) {
    pthread_barrier_wait(&tm->bar);
    double t0 = bench_now();
    tm->fn(a, b, c, s, lo, hi);
    pthread_barrier_wait(&tm->bar);
    if (ta->ith == 0) tm->times[r] = bench_now() - t0;
  }
  return NULL;
}

static int triad(triad_fn fn, int nth, int reps, double *best, double *median) {
  int rc = -1;
  triad_team tm = {.fn = fn, .nth = nth, .reps = reps};
  tm.a = triad_alloc();
  tm.b = triad_alloc();
  tm.c = triad_alloc();
  tm.times = calloc((size_t)reps, sizeof(double));
  pthread_t tid[MAX_THREADS];
  triad_arg args[MAX_THREADS];
  int started = 0;
  if (!tm.a || !tm.b || !tm.c || !tm.times) goto out;
  if (pthread_barrier_init(&tm.bar, NULL, (unsigned)nth) != 0) goto out;
  for (int i = 1; i < nth; i++) {
    args[i] = (triad_arg){&tm, i};
    if (pthread_create(&tid[i], NULL, triad_thread, &args[i]) != 0) break;
    started++;
  }
  if (started == nth - 1) {
    args[0] = (triad_arg){&tm, 0};
    triad_thread(&args[0]);
    rc = 0;
  } else {
    fprintf(stderr, "tjit-bench: cannot start triad threads\n");
    abort(); /* the started threads wait on a barrier that can never fill */
  }
  for (int i = 1; i < nth; i++) pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&tm.bar);
  double bytes = 3.0 * sizeof(float) * (double)TRIAD_N;
  qsort(tm.times, (size_t)reps, sizeof(double), cmp_double);
  *best = bytes / tm.times[0] / 1e9;
  *median = bytes / tm.times[reps / 2] / 1e9;
  if (tm.a[TRIAD_N - 1] != 1.0f + (float)((TRIAD_N - 1) & 7) + 1.5f) rc = -1; /* really ran */
out:
  free(tm.a);
  free(tm.b);
  free(tm.c);
  free(tm.times);
  return rc;
}

/* ---- FMA peak: acc = acc * m + k on independent accumulators, no memory traffic --------------
   2 FMA pipes x 4 cycles of latency = 8 in flight; more leave margin, but the accumulators plus m
   and k must fit the register file: 16 with AVX-512's 32 registers, 12 with AVX2's 16 (16 there
   spill in the loop and measured 58 instead of 101 GFLOP/s on a Zen 3 core). */
#define N_ACC 16
#define N_ACC_AVX2 12

typedef double (*fma_loop_fn)(long iters, double *flops_per_iter);

#if defined(__x86_64__) || defined(__i386__)
#define ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ACC16(X) ACC12(X) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) static double fma_avx512(long iters, double *fpi) {
  __m512 m = _mm512_set1_ps(0.99999994f), k = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 acc##i = _mm512_set1_ps(1.0f + (float)(i) * 1e-3f);
  ACC16(DECL)
#undef DECL
  for (long n = 0; n < iters; n++) {
#define STEP(i) acc##i = _mm512_fmadd_ps(acc##i, m, k);
    ACC16(STEP)
#undef STEP
  }
  __m512 s = acc0;
#define SUM(i) s = _mm512_add_ps(s, acc##i);
  ACC16(SUM)
#undef SUM
  *fpi = N_ACC * 16 * 2;
  return (double)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static double fma_avx2(long iters, double *fpi) {
  __m256 m = _mm256_set1_ps(0.99999994f), k = _mm256_set1_ps(1e-7f);
#define DECL(i) __m256 acc##i = _mm256_set1_ps(1.0f + (float)(i) * 1e-3f);
  ACC12(DECL)
#undef DECL
  for (long n = 0; n < iters; n++) {
#define STEP(i) acc##i = _mm256_fmadd_ps(acc##i, m, k);
    ACC12(STEP)
#undef STEP
  }
  __m256 s = acc0;
#define SUM(i) s = _mm256_add_ps(s, acc##i);
  ACC12(SUM)
#undef SUM
  float v[8];
  _mm256_storeu_ps(v, s);
  *fpi = N_ACC_AVX2 * 8 * 2;
  return (double)v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
#endif

/* Portable fallback: a multiply and an add, 2 FLOPs, on 4-lane vectors the compiler lowers. */
typedef float v4f __attribute__((vector_size(16)));
static double fma_generic(long iters, double *fpi) {
  v4f acc[N_ACC], m = {0.99999994f, 0.99999994f, 0.99999994f, 0.99999994f};
  v4f k = {1e-7f, 1e-7f, 1e-7f, 1e-7f};
  for (int i = 0; i < N_ACC; i++) acc[i] = m * (1.0f + (float)i * 1e-3f);
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < N_ACC; i++) acc[i] = acc[i] * m + k;
  double s = 0;
  for (int i = 0; i < N_ACC; i++) s += acc[i][0] + acc[i][1] + acc[i][2] + acc[i][3];
  *fpi = N_ACC * 4 * 2;
  return s;
}

typedef struct fma_arg {
  fma_loop_fn fn;
  long iters;
  pthread_barrier_t *bar;
  double sink, fpi;
} fma_arg;

static void *fma_thread(void *p) {
  fma_arg *a = p;
  pthread_barrier_wait(a->bar);
  a->sink = a->fn(a->iters, &a->fpi);
  return NULL;
}

/* GFLOP/s of nth threads each running fn for iters iterations; best of 3. */
static double fma_run(fma_loop_fn fn, int nth, long iters) {
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nth);
    fma_arg args[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < nth; i++) args[i] = (fma_arg){.fn = fn, .iters = iters, .bar = &bar};
    for (int i = 1; i < nth; i++)
      if (pthread_create(&tid[i], NULL, fma_thread, &args[i]) != 0) {
        fprintf(stderr, "tjit-bench: cannot start FMA threads\n");
        abort();
      }
    double t0 = bench_now();
    fma_thread(&args[0]);
    for (int i = 1; i < nth; i++) pthread_join(tid[i], NULL);
    double dt = bench_now() - t0;
    pthread_barrier_destroy(&bar);
    double flops = 0;
    for (int i = 0; i < nth; i++) {
      flops += args[i].fpi * (double)iters;
      if (args[i].sink != args[i].sink) fprintf(stderr, "tjit-bench: FMA loop gave NaN\n");
    }
    if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
  }
  return best;
}

static fma_loop_fn fma_pick(int max_bits, const char **isa, int *accumulators) {
  *isa = "sse2 (mul+add)";
  *accumulators = N_ACC;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (max_bits >= 512 && __builtin_cpu_supports("avx512f")) {
    *isa = "avx512f";
    return fma_avx512;
  }
  if (max_bits >= 256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *isa = "avx2+fma";
    *accumulators = N_ACC_AVX2;
    return fma_avx2;
  }
#endif
  return fma_generic;
}

int floors_measure(int reps, int max_vector_bits, floor_result *out) {
  memset(out, 0, sizeof *out);
  int max_bits = max_vector_bits > 0 ? max_vector_bits : 512;
  out->max_bits = max_bits;
  out->triad_mib = (double)(TRIAD_N * sizeof(float)) / (1 << 20);
  triad_fn tfn = triad_pick(max_bits, &out->triad_isa);
  for (int t = 1; t <= MAX_THREADS; t++)
    if (triad(tfn, t, reps, &out->triad_gbs[t - 1], &out->triad_median[t - 1]) != 0) return -1;

  fma_loop_fn fn = fma_pick(max_bits, &out->fma_isa, &out->fma_accumulators);
  /* Calibrate to ~0.2 s per run so that frequency ramps and timer noise do not matter. */
  double fpi = 0, t0 = bench_now();
  volatile double sink = fn(200000, &fpi);
  (void)sink;
  double per_iter = (bench_now() - t0) / 200000;
  long iters = per_iter > 0 ? (long)(0.2 / per_iter) : 100000000L;
  if (iters < 100000) iters = 100000;
  out->fma_iters = iters;
  for (int t = 1; t <= MAX_THREADS; t++) out->fma_gflops[t - 1] = fma_run(fn, t, iters);
  return 0;
}

double floors_again(const floor_result *fl, bool bytes, int nth) {
  if (nth < 1 || nth > MAX_THREADS) return 0;
  if (bytes) {
    const char *isa;
    double best = 0, median = 0;
    return triad(triad_pick(fl->max_bits, &isa), nth, 3, &best, &median) == 0 ? best : 0;
  }
  const char *isa;
  int accumulators;
  fma_loop_fn fn = fma_pick(fl->max_bits, &isa, &accumulators);
  long iters = fl->fma_iters / 4;
  return fma_run(fn, nth, iters < 25000 ? 25000 : iters);
}
