/* test_matmul.c: the generated matmul (codegen/matmul.c) against a float64 C reference: odd and
 * large shapes, batch dims, transposed and multiple contracting dims, every dtype, epilogues,
 * row splitting, bad descriptions; the precompiled core's kernels (gemm_core.h) bit for bit
 * against the generated ones, where the core runs; prints one-thread GFLOP/s against this run's FMA peak. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>

#include "codegen/core_dot.h"
#include "codegen/gemm_amx.h"
#include "codegen/gemm_core.h"
#include "codegen/gemm_skinny.h"
#include "codegen/llvm_jit.h"
#include "codegen/matmul.h"
#include "ir/ir.h"
#include "runtime/error.h"
#include "support/target_gate.h"

typedef void (*kernel_fn)(void *const *bufs, int64_t row_begin, int64_t row_end);

static cg_jit *g_jit;
static int g_vec_bytes; /* the register tile's vector size under test; 0: the target's */
/* per core ([0] AVX2, [1] AVX-512): */
static int g_core_checks[2]; /* kernels of the precompiled core checked against generated ones */
static int g_team_checks[2]; /* of them, run by a team sharing its packed rhs (gemm_core.h) */
static int g_pairs_checks;    /* bf16 dots by vdpbf16ps checked against the f32 kernel's */
static int g_amx_checks;      /* bf16 dots by AMX tiles (or their model) checked the same way */
static int g_skinny_checks;   /* AVX-512 core kernels of a few columns, unpacked (gemm_skinny.h) */
static bool g_core_expected[2]; /* a group ran where the core's kernels are checked */

/* The vector size of the target the JIT generates for ($TJIT_CPU, $TJIT_VECTOR_WIDTH). */
static int target_vec_bytes(void) { return cg_jit_target(g_jit)->vector_bytes; }

/* cg_matmul_desc_init for the width under test: every width's kernel runs on any x86-64 host. */
static void desc_init(cg_matmul_desc *d, const ir_type *lt, const ir_type *rt,
                      const ir_dot_dims *dd, uint32_t n_epi) {
  cg_matmul_desc_init(d, lt, rt, dd, n_epi, g_vec_bytes ? g_vec_bytes : target_vec_bytes());
}

static bool core_checked(int vec_bytes);

static int setup(void **state) {
  (void)state;
  if (cg_jit_create(3, &g_jit) != JIT_OK) return -1;
  if (g_vec_bytes == 32 || g_vec_bytes == 64) g_core_expected[g_vec_bytes == 64] |= core_checked(g_vec_bytes);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cg_jit_destroy(g_jit);
  return 0;
}

/* This thread's CPU time: on a shared 2-core machine, wall time mostly measures the neighbours. */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef jit_status (*emit_fn)(LLVMModuleRef m, const char *name, const cg_matmul_desc *d);

/* Builds the kernel of d (by emit) in a fresh module and loads it; *lib owns the code. */
static jit_status build_with(emit_fn emit, const cg_matmul_desc *d, cg_dylib **lib,
                             kernel_fn *fn) {
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("mm", c);
  void *obj = NULL;
  size_t len = 0;
  jit_status st = emit(m, "tjit_mm", d);
  if (st == JIT_OK)
    st = cg_optimize(g_jit, m);
  if (st != JIT_OK)
    fprintf(stderr, "build: %.300s\n", jit_last_error());
  if (st == JIT_OK)
    st = cg_emit_object(g_jit, m, &obj, &len);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  if (st == JIT_OK)
    st = cg_add_object(g_jit, obj, len, lib);
  free(obj);
  if (st == JIT_OK) {
    void *p = NULL;
    st = cg_lookup(*lib, "tjit_mm", &p);
    *fn = (kernel_fn)p;
  }
  return st;
}

static jit_status build(const cg_matmul_desc *d, cg_dylib **lib, kernel_fn *fn) {
  return build_with(cg_matmul_emit, d, lib, fn);
}

/* Whether the precompiled core's kernels are checked: on hosts that run it, against generated
   kernels that fuse their multiply-adds as it does (the target has FMA, as the runtime asks),
   for vectors the target has (the runtime plans its tiles for the target's). */
static bool core_checked(int vec_bytes) {
  const cg_target *t = cg_jit_target(g_jit);
  return gemm_core_runs_here(vec_bytes) && t->fma && vec_bytes <= t->vector_bytes;
}

/* A bf16 dot runs on the core only as a core_dot (no generated code calls it): its kernel_fn */
static core_dot *g_core_dot;
static void run_core_dot(void *const *bufs, int64_t lo, int64_t hi) {
  core_dot_run(g_core_dot, bufs, lo, hi);
}

/* d's kernel on the precompiled core (gemm_core.h), where core_checked and d has the core's
   form (*lib NULL for a bf16 dot: g_core_dot is its kernel); else *fn stays NULL. */
static void build_core(const cg_matmul_desc *d, cg_dylib **lib, kernel_fn *fn) {
  gemm_core_plan cp;
  *lib = NULL;
  *fn = NULL;
  if (core_checked(d->vec_bytes) && d->lhs.dtype == JIT_BF16) {
    assert_int_equal(core_dot_build(d, NULL, &g_core_dot), JIT_OK);
    if (g_core_dot) *fn = run_core_dot;
  } else if (core_checked(d->vec_bytes) && cg_matmul_core_plan(d, &cp)) {
    assert_int_equal(build_with(cg_matmul_core_emit, d, lib, fn), JIT_OK);
  }
}

typedef struct team_thread {
  kernel_fn fn;
  void **bufs;
  void *area;
  int64_t lo, hi;
} team_thread;

static void *team_thread_run(void *arg) {
  team_thread *t = arg;
  gemm_core_join_team(t->area);
  t->fn(t->bufs, t->lo, t->hi);
  gemm_core_join_team(NULL);
  return NULL;
}

/* Where d's plan takes a team: its kernel fn gives `want` (in bufs[out] = got) when two rows
   ranges share one packed rhs, run one after the other on this thread (a nested pool job) and
   on two threads at once (each with its own scratch). */
static void check_team_same(const cg_matmul_desc *d, kernel_fn fn, void **bufs, void *got,
                            const void *want, size_t ob, int64_t rows) {
  gemm_core_plan cp;
  gemm_core_sums sums;
  size_t flags = 0, tb = 0;
  if (cg_matmul_core_plan(d, &cp))
    tb = gemm_core_team_bytes(&cp, (int)jit_dtype_size(d->lhs.dtype), &flags);
  else if (cg_matmul_core_plan_bf16(d, &cp, &sums)) /* packed as f32 */
    tb = gemm_core_team_bytes(&cp, 4, &flags);
  if (!tb) return;
  g_team_checks[d->vec_bytes == 64]++;
  void *area = aligned_alloc(64, (tb + 63) / 64 * 64);
  size_t sb = (cg_matmul_scratch_bytes(d) + 63) / 64 * 64;
  void *scratch2 = aligned_alloc(64, sb ? sb : 64), *bufs2[16];
  assert_true(area && scratch2 && flags > 0 && flags < tb && d->scratch_buf < 16);
  int64_t r1 = rows / 2 + 1 < rows ? rows / 2 + 1 : rows;
  memset(area, 0, flags);
  memset(got, 0xEF, ob);
  team_thread first = {fn, bufs, area, r1, rows}, second = {fn, bufs, area, 0, r1};
  team_thread_run(&first);
  team_thread_run(&second);
  assert_memory_equal(got, want, ob);
  memset(area, 0x5A, tb); /* claims zeroed, the panel garbage */
  memset(area, 0, flags);
  memset(got, 0xEF, ob);
  for (int i = 0; i <= d->scratch_buf; i++) bufs2[i] = bufs[i];
  bufs2[d->scratch_buf] = scratch2;
  second.bufs = bufs2;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, team_thread_run, &second), 0);
  team_thread_run(&first);
  pthread_join(th, NULL);
  assert_memory_equal(got, want, ob);
  free(area);
  free(scratch2);
}

/* fn's output for d is `want` (ob bytes of bufs[out]) bit for bit, over all rows, over two row
   ranges split at a tile-unaligned row and in a team. */
static void check_bits(const cg_matmul_desc *d, kernel_fn fn, void **bufs, int out,
                       const void *want, size_t ob, int64_t rows) {
  void *saved = bufs[out], *got = malloc(ob);
  assert_non_null(got);
  memset(got, 0xEF, ob);
  bufs[out] = got;
  fn(bufs, 0, rows);
  assert_memory_equal(got, want, ob);
  memset(got, 0xEF, ob);
  int64_t r1 = rows / 3 + 1 < rows ? rows / 3 + 1 : rows;
  fn(bufs, r1, rows);
  fn(bufs, 0, r1);
  assert_memory_equal(got, want, ob);
  check_team_same(d, fn, bufs, got, want, ob, rows);
  bufs[out] = saved;
  free(got);
}

/* A bf16 dot whose products are not the f32 micro-kernel's: by vdpbf16ps (gemm_core_sums.pairs),
   where this host has it, or by AMX tiles (.amx), on their C model anywhere and on the
   instructions where this host runs them. Its own sums in another order, so within a bf16
   rounding (plus slack for cancellation) of the generated kernel's `want`, and the same bits
   however its rows are split or shared. */
static void check_other_sums(const cg_matmul_desc *d, void **bufs, int out, const void *want,
                             size_t ob, int64_t rows, bool pairs, gemm_amx_mode amx) {
  cg_matmul_desc dp = *d;
  dp.bf16_dot = pairs;
  dp.bf16_amx = amx;
  gemm_core_plan cp;
  gemm_core_sums sums;
  if (!cg_matmul_core_plan_bf16(&dp, &cp, &sums) || sums.amx != amx) return; /* AMX: not fits */
  assert_int_equal(core_dot_build(&dp, NULL, &g_core_dot), JIT_OK);
  if (!g_core_dot) return;
  if (amx) g_amx_checks++;
  else g_pairs_checks++;
  /* an AMX plan's blocks are its own (its scratch too: the runtime sizes it by the same desc) */
  size_t sb = (cg_matmul_scratch_bytes(&dp) + 63) / 64 * 64;
  void *saved = bufs[out], *saved_scratch = bufs[dp.scratch_buf], *mine = malloc(ob);
  void *scratch = aligned_alloc(64, sb ? sb : 64);
  assert_true(mine && scratch);
  bufs[dp.scratch_buf] = scratch;
  bufs[out] = mine;
  run_core_dot(bufs, 0, rows);
  bufs[out] = saved;
  for (size_t i = 0; i < ob / 2; i++) {
    double g = ir_load_f64(JIT_BF16, mine, (int64_t)i), w = ir_load_f64(JIT_BF16, want, (int64_t)i);
    if (!(fabs(g - w) <= fabs(w) / 128 + 1e-3))
      fail_msg("%s element %zu: %.9g, the f32 kernel's %.9g",
               amx == GEMM_AMX_HW ? "AMX" : amx ? "AMX (model)" : "vdpbf16ps", i, g, w);
  }
  check_bits(&dp, run_core_dot, bufs, out, mine, ob, rows);
  bufs[dp.scratch_buf] = saved_scratch;
  free(scratch);
  free(mine);
  core_dot_free(g_core_dot);
  g_core_dot = NULL;
}

static void check_pairs_close(const cg_matmul_desc *d, void **bufs, int out, const void *want,
                              size_t ob, int64_t rows) {
  if (d->lhs.dtype != JIT_BF16 || d->vec_bytes != 64 || !core_checked(64)) return;
  if (gemm_core_pairs_run_here()) check_other_sums(d, bufs, out, want, ob, rows, true, GEMM_AMX_OFF);
  check_other_sums(d, bufs, out, want, ob, rows, false, GEMM_AMX_MODEL);
  if (gemm_amx_runs_here()) check_other_sums(d, bufs, out, want, ob, rows, false, GEMM_AMX_HW);
}

/* The core's kernel for d gives the generated kernel's output `want` (ob bytes of bufs[out]) bit
   for bit, over all rows and over two row ranges split at a tile-unaligned row. */
static void check_core_same(const cg_matmul_desc *d, void **bufs, int out, const void *want,
                            size_t ob, int64_t rows) {
  cg_dylib *lib;
  kernel_fn fn;
  build_core(d, &lib, &fn);
  if (!fn) return;
  g_core_checks[d->vec_bytes == 64]++;
  gemm_core_plan cp;
  if (cg_matmul_core_plan(d, &cp) && gemm_skinny_applies(&cp, (int)jit_dtype_size(d->lhs.dtype)))
    g_skinny_checks++;
  check_bits(d, fn, bufs, out, want, ob, rows);
  cg_dylib_free(lib);
  core_dot_free(g_core_dot);
  g_core_dot = NULL;
  check_pairs_close(d, bufs, out, want, ob, rows);
}

/* ---- random data and the reference -------------------------------------------------------------
 */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* uniform in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / (double)(1ull << 52) - 1.0;
}

static void *rand_buf(jit_dtype dt, int64_t n) {
  void *p = malloc((size_t)(n ? n : 1) * jit_dtype_size(dt));
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++) {
    if (ir_dtype_is_float(dt))
      ir_store_f64(dt, p, i, urand());
    else if (dt == JIT_U8)
      ir_store_i64(dt, p, i, (int64_t)((urand() + 1) * 128));
    else
      ir_store_i64(dt, p, i, (int64_t)(urand() * (dt == JIT_I8 ? 128 : 1000)));
  }
  return p;
}

typedef struct layout { /* an operand's offsets for (batch, free, contract) multi-indices */
  int nb, nf, nc;
  int64_t bext[8], bstr[8], fext[8], fstr[8], cext[8], cstr[8];
} layout;

static void make_layout(const ir_type *t, int nb, const uint8_t *bd, int nc, const uint8_t *cd,
                        layout *L) {
  int64_t str[8], s = 1;
  bool used[8] = {0};
  for (int i = t->rank - 1; i >= 0; i--) {
    str[i] = s;
    s *= t->dims[i];
  }
  memset(L, 0, sizeof *L);
  L->nb = nb;
  L->nc = nc;
  for (int i = 0; i < nb; i++) {
    L->bext[i] = t->dims[bd[i]];
    L->bstr[i] = str[bd[i]];
    used[bd[i]] = true;
  }
  for (int i = 0; i < nc; i++) {
    L->cext[i] = t->dims[cd[i]];
    L->cstr[i] = str[cd[i]];
    used[cd[i]] = true;
  }
  for (int i = 0; i < t->rank; i++)
    if (!used[i]) {
      L->fext[L->nf] = t->dims[i];
      L->fstr[L->nf++] = str[i];
    }
}

static int64_t off(int n, const int64_t *ext, const int64_t *str, int64_t idx) {
  int64_t o = 0;
  for (int d = n - 1; d >= 0; d--) {
    o += (idx % ext[d]) * str[d];
    idx /= ext[d];
  }
  return o;
}

typedef struct mcase {
  jit_dtype dt;
  ir_type lt, rt;
  ir_dot_dims dd;
} mcase;

static ir_type ty(jit_dtype dt, int rank, const int64_t *dims) {
  ir_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++)
    t.dims[i] = dims[i];
  return t;
}

/* Reference value of output element (row, col) (float dots: in double; ints: wrapping int64)
   and the sum of |products| (for the error bound). */
static void ref_elem(const mcase *c, const layout *L, const layout *R, const void *lhs,
                     const void *rhs, int64_t M, int64_t N, int64_t K, int64_t row, int64_t col,
                     double *val, double *sabs, int64_t *ival) {
  int64_t b = row / M, m = row % M;
  int64_t lo = off(L->nb, L->bext, L->bstr, b) + off(L->nf, L->fext, L->fstr, m);
  int64_t ro = off(R->nb, R->bext, R->bstr, b) + off(R->nf, R->fext, R->fstr, col);
  double s = 0, a = 0;
  uint64_t is = 0;
  for (int64_t k = 0; k < K; k++) {
    int64_t li = lo + off(L->nc, L->cext, L->cstr, k), ri = ro + off(R->nc, R->cext, R->cstr, k);
    if (ir_dtype_is_float(c->dt)) {
      double p = ir_load_f64(c->dt, lhs, li) * ir_load_f64(c->dt, rhs, ri);
      s += p;
      a += fabs(p);
    } else {
      is += (uint64_t)ir_load_i64(c->dt, lhs, li) * (uint64_t)ir_load_i64(c->dt, rhs, ri);
    }
  }
  *val = s;
  *sabs = a;
  *ival = (int64_t)is;
}

static double unit_roundoff(jit_dtype dt) {
  switch (dt) {
  case JIT_F64:
    return ldexp(1, -53);
  case JIT_F16:
    return ldexp(1, -11);
  case JIT_BF16:
    return ldexp(1, -8);
  default:
    return ldexp(1, -24);
  }
}

/* Checks out (of dtype out_dt) against the reference, through `post` (the epilogue's effect on
   a reference value, may be NULL) on every element or on `samples` random ones. */
static void check(const mcase *c, const void *lhs, const void *rhs, const void *out,
                  jit_dtype out_dt, double (*post)(double v, int64_t col, const void *ctx),
                  const void *ctx, int64_t samples) {
  cg_matmul_desc d;
  desc_init(&d, &c->lt, &c->rt, &c->dd, 0);
  int64_t B, M, N, K;
  assert_int_equal(cg_matmul_shape(&d, &B, &M, &N, &K), JIT_OK);
  layout L, R;
  make_layout(&c->lt, c->dd.n_batch, c->dd.lhs_batch, c->dd.n_contract, c->dd.lhs_contract, &L);
  make_layout(&c->rt, c->dd.n_batch, c->dd.rhs_batch, c->dd.n_contract, c->dd.rhs_contract, &R);
  int64_t total = B * M * N, n = samples && samples < total ? samples : total;
  double u =
      unit_roundoff(JIT_F32 == c->dt || c->dt == JIT_F16 || c->dt == JIT_BF16 ? JIT_F32 : c->dt);
  for (int64_t e = 0; e < n; e++) {
    int64_t idx = n == total ? e : (int64_t)((urand() + 1) / 2 * (double)total) % total;
    int64_t row = idx / N, col = idx % N;
    double v, sabs;
    int64_t iv;
    ref_elem(c, &L, &R, lhs, rhs, M, N, K, row, col, &v, &sabs, &iv);
    if (ir_dtype_is_float(c->dt)) {
      double tol = 2.0 * (double)(K + 1) * u * sabs + 1e-300;
      double ref = v;
      if (c->dt != JIT_F32 && c->dt != JIT_F64)
        tol += 2 * unit_roundoff(c->dt) * fabs(ref);
      if (post)
        ref = post(ref, col, ctx);
      if (out_dt != JIT_F32 && out_dt != JIT_F64 && ir_dtype_is_float(out_dt))
        tol += 2 * unit_roundoff(out_dt) * fabs(ref);
      double got = ir_load_f64(out_dt, out, idx);
      if (!(fabs(got - ref) <= tol)) {
        fprintf(stderr, "  out[%lld, %lld] = %.9g, want %.9g (tol %.3g), %s M=%lld N=%lld K=%lld\n",
                (long long)row, (long long)col, got, ref, tol, jit_dtype_name(c->dt), (long long)M,
                (long long)N, (long long)K);
        fail();
      }
    } else {
      void *w = malloc(8);
      assert_non_null(w);
      ir_store_i64(c->dt, w, 0, iv); /* wraps to the dtype, as the interpreter does */
      int64_t want = ir_load_i64(c->dt, w, 0);
      free(w);
      int64_t got = ir_load_i64(out_dt, out, idx);
      if (got != want) {
        fprintf(stderr, "  out[%lld, %lld] = %lld, want %lld (%s)\n", (long long)row,
                (long long)col, (long long)got, (long long)want, jit_dtype_name(c->dt));
        fail();
      }
    }
  }
}

/* Compiles and runs case c (no epilogue) over all rows, also in two row ranges split at a
   tile-unaligned row, and checks both. */
static void run_case(const mcase *c) {
  cg_matmul_desc d;
  desc_init(&d, &c->lt, &c->rt, &c->dd, 0);
  int64_t B, M, N, K;
  assert_int_equal(cg_matmul_shape(&d, &B, &M, &N, &K), JIT_OK);
  cg_dylib *lib = NULL;
  kernel_fn fn = NULL;
  jit_status st = build(&d, &lib, &fn);
  assert_int_equal(st, JIT_OK);
  size_t es = jit_dtype_size(c->dt);
  void *lhs = rand_buf(c->dt, ir_type_numel(&c->lt)), *rhs = rand_buf(c->dt, ir_type_numel(&c->rt));
  size_t ob = (size_t)(B * M * N) * es + 1;
  unsigned char *out = malloc(ob), *out2 = malloc(ob);
  size_t sb = (cg_matmul_scratch_bytes(&d) + 63) / 64 * 64;
  void *scratch = aligned_alloc(64, sb ? sb : 64);
  assert_true(out && out2 && scratch);
  memset(out, 0xAB, ob);
  memset(out2, 0xCD, ob);
  void *bufs[4] = {lhs, rhs, out, scratch};
  int64_t rows = cg_matmul_rows(&d);
  assert_int_equal(rows, B * M);
  fn(bufs, 0, rows);
  assert_int_equal(out[ob - 1], 0xAB); /* nothing written past the end */
  check(c, lhs, rhs, out, c->dt, NULL, NULL, 0);
  /* rows [0, r1) and [r1, rows) in two calls: bit-identical */
  int64_t r1 = rows / 3 + 1 < rows ? rows / 3 + 1 : rows;
  bufs[2] = out2;
  fn(bufs, r1, rows);
  fn(bufs, 0, r1);
  assert_memory_equal(out, out2, ob - 1);
  check_core_same(&d, bufs, 2, out, ob - 1, rows);
  free(lhs);
  free(rhs);
  free(out);
  free(out2);
  free(scratch);
  cg_dylib_free(lib);
}

/* A plain [M, K] x [K, N]. */
static mcase mat(jit_dtype dt, int64_t M, int64_t K, int64_t N) {
  mcase c;
  memset(&c, 0, sizeof c);
  c.dt = dt;
  c.lt = ty(dt, 2, (int64_t[]){M, K});
  c.rt = ty(dt, 2, (int64_t[]){K, N});
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 1;
  c.dd.rhs_contract[0] = 0;
  return c;
}

static void test_small_shapes(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{1, 1, 1},   {7, 13, 11}, {1, 300, 1},  {2, 1, 33},
                                      {9, 17, 31}, {8, 0, 32},  {16, 64, 32}, {3, 5, 100},
                                      {0, 5, 7},   {3, 4, 0}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    mcase c = mat(JIT_F32, shapes[i][0], shapes[i][1], shapes[i][2]);
    run_case(&c);
  }
}

static void test_primes_and_blocks(void **state) {
  (void)state;
  /* primes; M, N, K just past multiples of MR (8), NR (32), MC (64), KC (1024), NC (1024) */
  static const int64_t shapes[][3] = {
      {97, 89, 101}, {65, 1025, 33}, {131, 2051, 67}, {9, 40, 1061}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    mcase c = mat(JIT_F32, shapes[i][0], shapes[i][1], shapes[i][2]);
    run_case(&c);
  }
}

/* The core's team (gemm_core.h) over groups, panels and K blocks: K past one block (a shorter
   second block), N across one group of strips and past one panel, f32 and f64. */
static void test_team_shapes(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{13, 2100, 70}, {20, 30, 600}, {31, 4500, 150}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    mcase c = mat(JIT_F32, shapes[i][0], shapes[i][1], shapes[i][2]);
    run_case(&c);
    c = mat(JIT_F64, shapes[i][0], shapes[i][1], shapes[i][2]);
    run_case(&c);
  }
}

static void test_large(void **state) {
  (void)state;
  mcase c = mat(JIT_F32, 512, 1024, 512);
  run_case(&c);
}

/* lhs [K, M] contracted on dim 0 and rhs [N, K] on dim 1 (transposed operands), then batched
   lhs [B, M, K] x rhs [B, K, N] */
static void transposed_and_batched(jit_dtype dt, int64_t B, int64_t K) {
  mcase c;
  memset(&c, 0, sizeof c);
  c.dt = dt;
  c.lt = ty(dt, 2, (int64_t[]){70, 45});
  c.rt = ty(dt, 2, (int64_t[]){37, 70});
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 0;
  c.dd.rhs_contract[0] = 1;
  run_case(&c);
  memset(&c, 0, sizeof c);
  c.dt = dt;
  c.lt = ty(dt, 3, (int64_t[]){B, 19, K});
  c.rt = ty(dt, 3, (int64_t[]){B, K, 41});
  c.dd.n_batch = 1;
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 2;
  c.dd.rhs_contract[0] = 1;
  run_case(&c);
}

/* Up to two strips of columns (N <= 2 NR: the AVX-512 core runs them unpacked, as
   gemm_skinny.h): edge rows of its 6-row tiles and 48-row groups, one to four vectors across,
   partial last vectors, k past its 128-k passes and past a K block (partial sums in the
   output), a batch, a transposed lhs (x^T dy: lhs [K, M]), f32 and f64. */
static void test_skinny_shapes(void **state) {
  (void)state;
  static const int64_t f32[][3] = {{1, 1, 33},     {5, 7, 48},     {6, 129, 49},  {47, 300, 64},
                                   {100, 1100, 40}, {13, 2100, 64}, {55, 128, 63}, {1, 3, 1},
                                   {49, 288, 4},    {7, 1100, 16},  {50, 129, 17}, {13, 300, 32}};
  static const int64_t f64[][3] = {{7, 13, 17}, {49, 1030, 32}, {30, 129, 24}, {2, 300, 31},
                                   {9, 40, 1},  {50, 1030, 8},  {13, 129, 9},  {6, 7, 16}};
  for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++) {
    mcase c = mat(JIT_F32, f32[i][0], f32[i][1], f32[i][2]);
    run_case(&c);
  }
  for (size_t i = 0; i < sizeof f64 / sizeof *f64; i++) {
    mcase c = mat(JIT_F64, f64[i][0], f64[i][1], f64[i][2]);
    run_case(&c);
  }
  transposed_and_batched(JIT_F32, 3, 140); /* its batch has N = 41 */
  static const struct {
    jit_dtype dt;
    int64_t K, M, N;
  } xt_dy[] = {{JIT_F32, 130, 45, 4}, {JIT_F32, 1100, 13, 40}, {JIT_F32, 70, 288, 10},
               {JIT_F64, 300, 20, 8}, {JIT_F64, 1030, 7, 13}};
  for (size_t i = 0; i < sizeof xt_dy / sizeof *xt_dy; i++) {
    mcase c = mat(xt_dy[i].dt, xt_dy[i].M, xt_dy[i].K, xt_dy[i].N);
    c.lt = ty(xt_dy[i].dt, 2, (int64_t[]){xt_dy[i].K, xt_dy[i].M});
    c.dd.lhs_contract[0] = 0;
    run_case(&c);
  }
}

static void test_layouts(void **state) {
  (void)state;
  mcase c;
  transposed_and_batched(JIT_F32, 3, 29);
  /* batch dims not leading, two of them: lhs [M, B1, K, B2], rhs [B2, N, B1, K] */
  memset(&c, 0, sizeof c);
  c.dt = JIT_F32;
  c.lt = ty(JIT_F32, 4, (int64_t[]){5, 2, 23, 3});
  c.rt = ty(JIT_F32, 4, (int64_t[]){3, 17, 2, 23});
  c.dd.n_batch = 2;
  c.dd.lhs_batch[0] = 1;
  c.dd.rhs_batch[0] = 2;
  c.dd.lhs_batch[1] = 3;
  c.dd.rhs_batch[1] = 0;
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 2;
  c.dd.rhs_contract[0] = 3;
  run_case(&c);
  /* two contracting dims in swapped orders and two free dims each:
     lhs [K1, M1, K2, M2], rhs [N1, K2, N2, K1] */
  memset(&c, 0, sizeof c);
  c.dt = JIT_F32;
  c.lt = ty(JIT_F32, 4, (int64_t[]){6, 4, 35, 3});
  c.rt = ty(JIT_F32, 4, (int64_t[]){5, 35, 7, 6});
  c.dd.n_contract = 2;
  c.dd.lhs_contract[0] = 0;
  c.dd.rhs_contract[0] = 3;
  c.dd.lhs_contract[1] = 2;
  c.dd.rhs_contract[1] = 1;
  run_case(&c);
  /* a vector dot: no free dims at all ([K] x [K] -> []) and a matrix-vector product */
  memset(&c, 0, sizeof c);
  c.dt = JIT_F32;
  c.lt = ty(JIT_F32, 1, (int64_t[]){300});
  c.rt = ty(JIT_F32, 1, (int64_t[]){300});
  c.dd.n_contract = 1;
  run_case(&c);
  memset(&c, 0, sizeof c);
  c.dt = JIT_F32;
  c.lt = ty(JIT_F32, 2, (int64_t[]){50, 70});
  c.rt = ty(JIT_F32, 1, (int64_t[]){70});
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 1;
  run_case(&c);
}

static void test_dtypes(void **state) {
  (void)state;
  /* bf16 (on the core: bf16 packers for rows, transposed rows and strided elements), K past one
     block in the batched case */
  transposed_and_batched(JIT_BF16, 2, 2100);
  /* odd K: vdpbf16ps's packers pad the last k pair (in one block, and in the last of three) */
  transposed_and_batched(JIT_BF16, 3, 29);
  mcase odd = mat(JIT_BF16, 37, 2 * 1024 + 3, 70);
  run_case(&odd);
  /* AMX (M fills whole 32-row tiles per block): three K blocks, edge tiles below and right,
     rows split inside a tile (an edge tile's sums must be a whole one's) */
  mcase amx = mat(JIT_BF16, 200, 2 * 1024 + 52, 70);
  run_case(&amx);
  static const jit_dtype dts[] = {JIT_F64, JIT_I32, JIT_I64, JIT_I8, JIT_U8, JIT_BF16, JIT_F16};
  for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
    mcase c = mat(dts[i], 23, 1100, 37); /* K > KC: partial sums in out or in scratch */
    run_case(&c);
    c = mat(dts[i], 9, 5, 18);
    run_case(&c);
  }
  /* a batched, transposed f64 case */
  mcase c;
  memset(&c, 0, sizeof c);
  c.dt = JIT_F64;
  c.lt = ty(JIT_F64, 3, (int64_t[]){40, 2, 21});
  c.rt = ty(JIT_F64, 3, (int64_t[]){2, 19, 40});
  c.dd.n_batch = 1;
  c.dd.lhs_batch[0] = 1;
  c.dd.rhs_batch[0] = 0;
  c.dd.n_contract = 1;
  c.dd.lhs_contract[0] = 0;
  c.dd.rhs_contract[0] = 2;
  run_case(&c);
}

/* ---- epilogues
 * ------------------------------------------------------------------------------------ */

typedef struct epi_ctx {
  int bias_buf;     /* bufs index of the f32 bias [N] */
  jit_dtype out_dt; /* f32: relu(x + bias); bf16: the same rounded; bool: x + bias > 0 */
  int calls;
  bool fail;
} epi_ctx;

static LLVMValueRef bias_relu(void *ctx, const cg_mm_epi *e) {
  epi_ctx *x = ctx;
  x->calls++;
  if (x->fail)
    return NULL;
  LLVMBuilderRef b = e->b;
  LLVMContextRef c = LLVMGetTypeContext(LLVMTypeOf(e->acc));
  LLVMTypeRef ptr = LLVMPointerTypeInContext(c, 0), f32 = LLVMFloatTypeInContext(c);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(c), i32 = LLVMInt32TypeInContext(c);
  LLVMTypeRef vt = LLVMVectorType(f32, e->width);
  LLVMValueRef idx = LLVMConstInt(i64, (unsigned)x->bias_buf, 0);
  LLVMValueRef bias = LLVMBuildLoad2(b, ptr, LLVMBuildGEP2(b, ptr, e->bufs, &idx, 1, ""), "bias");
  LLVMValueRef bp = LLVMBuildGEP2(b, f32, bias, (LLVMValueRef[]){e->col}, 1, "");
  LLVMModuleRef m = LLVMGetGlobalParent(LLVMGetBasicBlockParent(LLVMGetInsertBlock(b)));
  const char *nm = "llvm.masked.load";
  unsigned id = LLVMLookupIntrinsicID(nm, strlen(nm));
  LLVMTypeRef tys[2] = {vt, ptr};
  LLVMValueRef args[4] = {bp, LLVMConstInt(i32, 4, 0), e->mask, LLVMConstNull(vt)};
  LLVMValueRef bv = LLVMBuildCall2(b, LLVMIntrinsicGetType(c, id, tys, 2),
                                   LLVMGetIntrinsicDeclaration(m, id, tys, 2), args, 4, "");
  LLVMValueRef s = LLVMBuildFAdd(b, e->acc, bv, "");
  if (x->out_dt == JIT_BOOL)
    return LLVMBuildFCmp(b, LLVMRealOGT, s, LLVMConstNull(vt), "");
  LLVMValueRef pos = LLVMBuildFCmp(b, LLVMRealOGT, s, LLVMConstNull(vt), "");
  return LLVMBuildSelect(b, pos, s, LLVMConstNull(vt), "");
}

static double ref_bias_relu(double v, int64_t col, const void *ctx) {
  const float *bias = ctx;
  double s = v + bias[col];
  return s > 0 ? s : 0;
}

static double ref_bias_gt0(double v, int64_t col, const void *ctx) {
  const float *bias = ctx;
  return v + bias[col] > 0;
}

static void run_epilogue(int64_t M, int64_t K, int64_t N, jit_dtype out_dt) {
  mcase c = mat(JIT_F32, M, K, N);
  cg_matmul_desc d;
  desc_init(&d, &c.lt, &c.rt, &c.dd, 1);
  epi_ctx ec = {2, out_dt, 0, false};
  d.epilogue = bias_relu;
  d.epilogue_ctx = &ec;
  d.out_dtype = out_dt;
  cg_dylib *lib = NULL;
  kernel_fn fn = NULL;
  assert_int_equal(build(&d, &lib, &fn), JIT_OK);
  assert_true(ec.calls >= 1);
  float *lhs = rand_buf(JIT_F32, M * K), *rhs = rand_buf(JIT_F32, K * N),
        *bias = rand_buf(JIT_F32, N);
  size_t ob = (size_t)(M * N) * jit_dtype_size(out_dt);
  void *out = malloc(ob + 1), *out2 = malloc(ob + 1);
  size_t sb = (cg_matmul_scratch_bytes(&d) + 63) / 64 * 64;
  void *scratch = aligned_alloc(64, sb ? sb : 64);
  assert_true(out && out2 && scratch);
  void *bufs[5] = {lhs, rhs, bias, out, scratch};
  fn(bufs, 0, M);
  if (out_dt == JIT_BOOL) {
    /* compare only where the sum is clearly away from 0 */
    layout L, R;
    make_layout(&c.lt, 0, NULL, 1, c.dd.lhs_contract, &L);
    make_layout(&c.rt, 0, NULL, 1, c.dd.rhs_contract, &R);
    for (int64_t i = 0; i < M * N; i++) {
      double v, sabs;
      int64_t iv;
      ref_elem(&c, &L, &R, lhs, rhs, M, N, K, i / N, i % N, &v, &sabs, &iv);
      if (fabs(v + bias[i % N]) > 1e-3 * sabs)
        assert_int_equal(((unsigned char *)out)[i], ref_bias_gt0(v, i % N, bias));
    }
  } else {
    check(&c, lhs, rhs, out, out_dt, ref_bias_relu, bias, 0);
  }
  bufs[3] = out2;
  fn(bufs, M / 2 + 3 < M ? M / 2 + 3 : M, M);
  fn(bufs, 0, M / 2 + 3 < M ? M / 2 + 3 : M);
  assert_memory_equal(out, out2, ob);
  check_core_same(&d, bufs, 3, out, ob, M);
  free(lhs);
  free(rhs);
  free(bias);
  free(out);
  free(out2);
  free(scratch);
  cg_dylib_free(lib);
}

/* The C model of AMX's tdpbf16ps (gemm_amx.h) on hand-made tiles: row i of a times column j of b,
   per 16 pairs the even products and the odd ones summed apart in k order, each addition rounded,
   then added to the sums; a bf16 denormal reads as zero and a denormal sum is flushed; zero pairs
   (a strip's padding) add nothing. Where AMX runs, the instructions give the model's bits. */
static uint32_t bf16_pair(float even, float odd) {
  uint32_t e, o;
  memcpy(&e, &even, 4);
  memcpy(&o, &odd, 4);
  return e >> 16 | (o >> 16) << 16;
}

/* Fills the stack below the caller with bytes no tile configuration has (palette 0xa5), so that a
   gemm_amx_begin that loads a configuration it did not wholly write faults here (GCC 12's
   _tile_loadconfig let -O3 drop 48 of its 64 bytes: it ran while the stack held an old one). */
static __attribute__((noinline)) void poison_stack(void) {
  volatile unsigned char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = 0xa5;
}

static void test_amx_model(void **state) {
  (void)state;
  enum { KP = 32 };
  static uint32_t a[GEMM_AMX_MR * KP], b[KP * GEMM_AMX_NR];
  static float c[GEMM_AMX_MR * GEMM_AMX_NR];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  for (int i = 0; i < GEMM_AMX_MR; i++)
    for (int q = 0; q < KP; q++) a[gemm_amx_lhs_at(i, q)] = bf16_pair((float)(i + 1), (float)(q % 3));
  for (int q = 0; q < KP; q++)
    for (int j = 0; j < GEMM_AMX_NR; j++) b[q * GEMM_AMX_NR + j] = bf16_pair(j == q ? 1.0f : 0.0f, 0.5f);
  gemm_amx_tile(GEMM_AMX_MODEL, KP, a, b, c);
  for (int i = 0; i < GEMM_AMX_MR; i++)
    for (int j = 0; j < GEMM_AMX_NR; j++) { /* (i + 1) [k pair j's even] + sum of (q % 3) / 2 */
      double odd = 0;
      for (int q = 0; q < KP; q++) odd += (q % 3) * 0.5;
      assert_true(c[i * GEMM_AMX_NR + j] == (float)(i + 1 + odd));
    }
  /* order: the evens 2^24 - 2^24 = 0 and the odds 1 + 1 = 2 apart give 2 (adding in k order,
     2^24 + 1 would round to 2^24 and give 1); denormals */
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  a[gemm_amx_lhs_at(0, 0)] = bf16_pair(16777216.0f, 1.0f);
  a[gemm_amx_lhs_at(0, 1)] = bf16_pair(-16777216.0f, 1.0f);
  b[0] = b[GEMM_AMX_NR] = bf16_pair(1.0f, 1.0f);
  uint32_t tiny = 0x00010001u; /* bf16 denormals */
  a[gemm_amx_lhs_at(1, 0)] = tiny;                 /* row 1 */
  b[1] = bf16_pair(0x1p100f, 0x1p100f);
  a[gemm_amx_lhs_at(2, 0)] = bf16_pair(0x1p-70f, 0.0f); /* row 2: 2^-140 is an f32 denormal */
  b[2] = bf16_pair(0x1p-70f, 0.0f);
  a[gemm_amx_lhs_at(3, 0)] = bf16_pair(0x1p-70f, 0.0f); /* row 3 col 2: 2^-140 then + 1 */
  a[gemm_amx_lhs_at(3, 1)] = bf16_pair(1.0f, 0.0f);
  b[GEMM_AMX_NR + 2] = bf16_pair(1.0f, 0.0f);
  /* row 4 col 3: evens 1.5 2^-126 - 2^-126 = 2^-127 flushed to 0, odds 2^-126: 2^-126 */
  a[gemm_amx_lhs_at(4, 0)] = bf16_pair(0x1.8p-63f, 0x1p-63f);
  a[gemm_amx_lhs_at(4, 1)] = bf16_pair(-0x1p-63f, 0.0f);
  b[3] = b[GEMM_AMX_NR + 3] = bf16_pair(0x1p-63f, 0x1p-63f);
  /* row 5 col 4: the even sum 1 + 2^-24 + 2^-24 stays 1, the odd 2^-24 + 2^-24 = 2^-23 is kept */
  a[gemm_amx_lhs_at(5, 0)] = bf16_pair(1.0f, 0x1p-12f);
  a[gemm_amx_lhs_at(5, 1)] = bf16_pair(0x1p-12f, 0x1p-12f);
  a[gemm_amx_lhs_at(5, 2)] = bf16_pair(0x1p-12f, 0.0f);
  b[4] = bf16_pair(1.0f, 0x1p-12f);
  b[GEMM_AMX_NR + 4] = b[2 * GEMM_AMX_NR + 4] = bf16_pair(0x1p-12f, 0x1p-12f);
  static float hand_hw[GEMM_AMX_MR * GEMM_AMX_NR];
  if (gemm_amx_runs_here()) {
    gemm_amx_begin();
    gemm_amx_tile(GEMM_AMX_HW, KP, a, b, hand_hw);
    gemm_amx_end();
  }
  gemm_amx_tile(GEMM_AMX_MODEL, KP, a, b, c);
  assert_true(c[0] == 2.0f);
  assert_true(c[4 * GEMM_AMX_NR + 3] == 0x1p-126f);
  assert_true(c[5 * GEMM_AMX_NR + 4] == 1.0f + 0x1p-23f);
  if (gemm_amx_runs_here()) assert_memory_equal(hand_hw, c, sizeof c);
  assert_true(c[GEMM_AMX_NR + 1] == 0.0f);  /* denormal operand read as 0 (else 2^-33) */
  assert_true(c[2 * GEMM_AMX_NR + 2] == 0.0f && !signbit(c[2 * GEMM_AMX_NR + 2]));
  assert_true(c[3 * GEMM_AMX_NR + 2] == 1.0f);
  /* where the instructions run, they give the model's bits on random data, small and large */
  if (gemm_amx_runs_here()) {
    static float hw[GEMM_AMX_MR * GEMM_AMX_NR];
    for (int i = 0; i < GEMM_AMX_MR * KP; i++)
      a[i] = bf16_pair((float)urand() * (i % 5 ? 1.0f : 0x1p-60f), (float)urand() * 1e3f);
    for (int i = 0; i < KP * GEMM_AMX_NR; i++)
      b[i] = bf16_pair((float)urand() * (i % 3 ? 1.0f : 0x1p-70f), (float)urand());
    poison_stack();
    gemm_amx_begin();
    gemm_amx_tile(GEMM_AMX_HW, KP, a, b, hw);
    gemm_amx_end();
    gemm_amx_tile(GEMM_AMX_MODEL, KP, a, b, c);
    assert_memory_equal(hw, c, sizeof c);
    /* and from sums in memory, rows 40 floats apart, to a strided destination */
    enum { LD = 40 };
    static float c_in[GEMM_AMX_MR * LD], hw2[GEMM_AMX_MR * LD], model2[GEMM_AMX_MR * LD];
    for (int i = 0; i < GEMM_AMX_MR * LD; i++) c_in[i] = (float)urand() * 3;
    memset(hw2, 0, sizeof hw2);
    memset(model2, 0, sizeof model2);
    gemm_amx_block x = {.kp = KP, .a = a, .b = b, .c_in = c_in, .c_in_ld = LD, .c = hw2, .c_ld = LD};
    gemm_amx_begin();
    gemm_amx_block_run(GEMM_AMX_HW, &x);
    gemm_amx_end();
    x.c = model2;
    gemm_amx_block_run(GEMM_AMX_MODEL, &x);
    assert_memory_equal(hw2, model2, sizeof hw2);
    assert_true(hw2[0] != hw[0] && hw2[GEMM_AMX_NR] == 0.0f); /* c_in was added; past col 31 untouched */
  }
}

static void test_epilogue(void **state) {
  (void)state;
  run_epilogue(37, 1300, 75, JIT_F32); /* partial sums in out, epilogue after the last block */
  run_epilogue(5, 7, 3, JIT_F32);
  run_epilogue(530, 1030, 35, JIT_BF16); /* partial sums in scratch, rows in chunks */
  run_epilogue(20, 30, 40, JIT_BOOL);
  run_epilogue(53, 1100, 40, JIT_F32); /* unpacked on AVX-512 (gemm_skinny.h), two K blocks */
  run_epilogue(61, 1100, 10, JIT_F32); /* ... one vector across */
  run_epilogue(50, 200, 64, JIT_F32);
}

/* ---- bad descriptions
 * ------------------------------------------------------------------------------- */

static void test_errors(void **state) {
  (void)state;
  mcase c = mat(JIT_F32, 4, 5, 6);
  cg_matmul_desc d;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("bad", ctx);
  /* contracting dims of different sizes */
  c.rt.dims[0] = 4;
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  assert_int_equal(cg_matmul_emit(m, "a", &d), JIT_EINVAL);
  assert_int_equal(cg_matmul_scratch_bytes(&d), 0);
  assert_int_equal(cg_matmul_rows(&d), 0);
  /* dtypes differ; a bool dot; out dtype without an epilogue; clashing buffers */
  c = mat(JIT_F32, 4, 5, 6);
  c.rt.dtype = JIT_F64;
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  assert_int_equal(cg_matmul_emit(m, "b", &d), JIT_EINVAL);
  c = mat(JIT_BOOL, 4, 5, 6);
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  assert_int_equal(cg_matmul_emit(m, "c", &d), JIT_EINVAL);
  c = mat(JIT_F32, 4, 5, 6);
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  d.out_dtype = JIT_F64;
  assert_int_equal(cg_matmul_emit(m, "d", &d), JIT_EINVAL);
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  d.out_buf = d.lhs_buf;
  assert_int_equal(cg_matmul_emit(m, "e", &d), JIT_EINVAL);
  /* an epilogue that gives up, and one of the wrong type */
  epi_ctx ec = {2, JIT_F32, 0, true};
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 1, target_vec_bytes());
  d.epilogue = bias_relu;
  d.epilogue_ctx = &ec;
  assert_int_equal(cg_matmul_emit(m, "f", &d), JIT_EUNSUPPORTED);
  assert_non_null(strstr(jit_last_error(), "epilogue"));
  ec.fail = false;
  d.out_dtype = JIT_F64;
  assert_int_equal(cg_matmul_emit(m, "g", &d), JIT_EUNSUPPORTED);
  /* a vector size the tile has no plan for */
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  d.vec_bytes = 24;
  assert_int_equal(cg_matmul_emit(m, "h", &d), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "vector size 24"));
  assert_int_equal(cg_matmul_scratch_bytes(&d), 0);
  LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
}

/* ---- speed
 * --------------------------------------------------------------------------------------- */

/* GFLOP/s of a register-only loop of independent FMAs on the host's vectors (the FMA peak of
   one thread): 24 accumulators of 32 zmm registers, 12 of 16 ymm (more would spill). */
static double fma_peak(void) {
  const unsigned lanes = (unsigned)target_vec_bytes() / 4;
  const int nacc = lanes == 16 ? 24 : 12;
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = LLVMModuleCreateWithNameInContext("peak", c);
  LLVMTypeRef f32 = LLVMFloatTypeInContext(c), i64 = LLVMInt64TypeInContext(c);
  LLVMTypeRef vt = LLVMVectorType(f32, lanes), ptr = LLVMPointerTypeInContext(c, 0);
  LLVMTypeRef params[2] = {i64, ptr};
  LLVMValueRef fn =
      LLVMAddFunction(m, "peak", LLVMFunctionType(LLVMVoidTypeInContext(c), params, 2, 0));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c, fn, "entry");
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(c, fn, "loop");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c, fn, "done");
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMBuildBr(b, loop);
  LLVMPositionBuilderAtEnd(b, loop);
  enum { NACC = 24 };
  LLVMValueRef i = LLVMBuildPhi(b, i64, "i"), acc[NACC], next[NACC];
  LLVMValueRef mulv[16], addv[16];
  for (unsigned l = 0; l < lanes; l++) {
    mulv[l] = LLVMConstReal(f32, 0.9999);
    addv[l] = LLVMConstReal(f32, 1e-4);
  }
  LLVMValueRef mul = LLVMConstVector(mulv, lanes), add = LLVMConstVector(addv, lanes);
  unsigned id = LLVMLookupIntrinsicID("llvm.fma", 8);
  LLVMValueRef fma = LLVMGetIntrinsicDeclaration(m, id, &vt, 1);
  LLVMTypeRef fty = LLVMIntrinsicGetType(c, id, &vt, 1);
  for (int a = 0; a < nacc; a++)
    acc[a] = LLVMBuildPhi(b, vt, "");
  for (int a = 0; a < nacc; a++) {
    next[a] = LLVMBuildCall2(b, fty, fma, (LLVMValueRef[]){acc[a], mul, add}, 3, "");
  }
  LLVMValueRef i1 = LLVMBuildAdd(b, i, LLVMConstInt(i64, 1, 0), "");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, i1, LLVMGetParam(fn, 0), ""), loop, done);
  LLVMValueRef zero = LLVMConstInt(i64, 0, 0), vz = LLVMConstNull(vt);
  LLVMAddIncoming(i, (LLVMValueRef[]){zero, i1}, (LLVMBasicBlockRef[]){entry, loop}, 2);
  for (int a = 0; a < nacc; a++)
    LLVMAddIncoming(acc[a], (LLVMValueRef[]){vz, next[a]}, (LLVMBasicBlockRef[]){entry, loop}, 2);
  LLVMPositionBuilderAtEnd(b, done);
  LLVMValueRef s = next[0];
  for (int a = 1; a < nacc; a++)
    s = LLVMBuildFAdd(b, s, next[a], "");
  LLVMBuildStore(b, s, LLVMGetParam(fn, 1));
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  void *obj = NULL;
  size_t len = 0;
  cg_dylib *lib = NULL;
  void *p = NULL;
  jit_status st = cg_optimize(g_jit, m);
  if (st != JIT_OK)
    fprintf(stderr, "peak: %.300s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  assert_int_equal(cg_emit_object(g_jit, m, &obj, &len), JIT_OK);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
  assert_int_equal(cg_add_object(g_jit, obj, len, &lib), JIT_OK);
  free(obj);
  assert_int_equal(cg_lookup(lib, "peak", &p), JIT_OK);
  void (*f)(int64_t, float *) = (void (*)(int64_t, float *))p;
  float sink[16] __attribute__((aligned(64)));
  int64_t n = 2000000;
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now_ms();
    f(n, sink);
    double t = now_ms() - t0;
    if (t < best)
      best = t;
  }
  cg_dylib_free(lib);
  return (double)n * nacc * lanes * 2 / (best * 1e6);
}

static void test_speed(void **state) {
  (void)state;
  int64_t M = 512, K = 1024, N = 4096;
  mcase c = mat(JIT_F32, M, K, N);
  cg_matmul_desc d;
  cg_matmul_desc_init(&d, &c.lt, &c.rt, &c.dd, 0, target_vec_bytes());
  cg_dylib *lib = NULL;
  kernel_fn fn = NULL;
  double t0 = now_ms();
  assert_int_equal(build(&d, &lib, &fn), JIT_OK);
  double compile_ms = now_ms() - t0;
  float *lhs = rand_buf(JIT_F32, M * K), *rhs = rand_buf(JIT_F32, K * N);
  float *out = malloc((size_t)(M * N) * 4);
  void *scratch = aligned_alloc(64, (cg_matmul_scratch_bytes(&d) + 63) / 64 * 64);
  assert_true(out && scratch);
  void *bufs[4] = {lhs, rhs, out, scratch};
  double best = 1e30;
  for (int r = 0; r < 4; r++) {
    t0 = now_ms();
    fn(bufs, 0, M);
    double t = now_ms() - t0;
    if (t < best)
      best = t;
  }
  check(&c, lhs, rhs, out, JIT_F32, NULL, NULL, 2000);
  double gf = 2.0 * (double)M * (double)K * (double)N / (best * 1e6), peak = fma_peak();
  printf("matmul f32 %lldx%lldx%lld, 1 thread: %.1f GFLOP/s (%.1f ms), FMA peak %.1f GFLOP/s: "
         "%.0f%% (compile %.1f ms, scratch %zu KiB)\n",
         (long long)M, (long long)K, (long long)N, gf, best, peak, 100 * gf / peak, compile_ms,
         cg_matmul_scratch_bytes(&d) >> 10);
  free(lhs);
  free(rhs);
  free(out);
  free(scratch);
  cg_dylib_free(lib);
}

int main(void) {
  tt_skip_unrunnable_target();
  /* every shape with each register tile: AVX-512's 8 x 2 zmm, AVX2's 6 x 2 ymm, SSE's 6 x 2 xmm */
  const struct CMUnitTest tiles[] = {
      cmocka_unit_test(test_small_shapes), cmocka_unit_test(test_primes_and_blocks),
      cmocka_unit_test(test_large),        cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_team_shapes),  cmocka_unit_test(test_skinny_shapes),
      cmocka_unit_test(test_dtypes),       cmocka_unit_test(test_epilogue),
      cmocka_unit_test(test_amx_model),
  };
  static const struct {
    int bytes;
    const char *name;
  } widths[] = {{64, "tile for 64-byte vectors"}, {32, "tile for 32-byte vectors"},
                {16, "tile for 16-byte vectors"}};
  int failed = 0;
  for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
    g_vec_bytes = widths[w].bytes;
    failed += cmocka_run_group_tests_name(widths[w].name, tiles, setup, teardown);
  }
  g_vec_bytes = 0;
  for (int wide = 0; wide < 2; wide++)
    if (g_core_expected[wide] && (g_core_checks[wide] < 20 || g_team_checks[wide] < 10)) {
      fprintf(stderr, "only %d kernels of the %s core were checked, %d of them in teams\n",
              g_core_checks[wide], wide ? "AVX-512" : "AVX2", g_team_checks[wide]);
      failed++;
    }
  if (g_core_expected[1] && g_skinny_checks < 12) {
    fprintf(stderr, "only %d dots of a few columns (gemm_skinny.h) were checked\n", g_skinny_checks);
    failed++;
  }
  if (g_core_expected[1] && g_amx_checks < 4) {
    fprintf(stderr, "only %d bf16 dots by AMX tiles were checked\n", g_amx_checks);
    failed++;
  }
  if (g_core_expected[1] && gemm_core_pairs_run_here() && g_pairs_checks < 4) {
    fprintf(stderr, "only %d bf16 dots by vdpbf16ps were checked\n", g_pairs_checks);
    failed++;
  }
  const struct CMUnitTest target[] = {cmocka_unit_test(test_errors), cmocka_unit_test(test_speed)};
  failed += cmocka_run_group_tests_name("target's tile", target, setup, teardown);
  return failed;
}
