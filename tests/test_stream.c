/* test_stream.c: streaming stores (codegen/stream.c): which stores the marker proves aligned, on
 * hand-written LLVM IR; and through jit_call, large outputs with and without provable alignment,
 * and a scan whose slices are misaligned, where the runtime runs the kernel on aligned copies. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/IRReader.h>

#include "codegen/stream.h"
#include "runtime/error.h"
#include "support/optest.h"
#include "tjit.h"
#include "support/target_gate.h"

/* ---- the marker on hand-written IR ---------------------------------------------------------- */

/* A kernel whose loop stores 8 floats at each of: bufs[1] + row*1024 + i (aligned), the same + 3
   (not), bufs[2] + row*1024 + i (aligned), bufs[0] + ... (aligned), bufs[3] + ... (aligned, but
   bufs[3] is also read), a scalar into bufs[1], and 4 floats at bufs[1] + i (16 bytes,
   aligned); i steps by 8 from 0. */
static const char *KERNEL_IR =
    "target triple = \"%s\"\n"
    "define void @k_nt(ptr %%bufs, i64 %%lo, i64 %%hi) {\n"
    "entry:\n"
    "  %%b0 = load ptr, ptr %%bufs\n"
    "  %%g1 = getelementptr inbounds i8, ptr %%bufs, i64 8\n"
    "  %%b1 = load ptr, ptr %%g1\n"
    "  %%g2 = getelementptr inbounds ptr, ptr %%bufs, i64 2\n"
    "  %%b2 = load ptr, ptr %%g2\n"
    "  %%g3 = getelementptr inbounds ptr, ptr %%bufs, i64 3\n"
    "  %%b3 = load ptr, ptr %%g3\n"
    "  %%row = shl i64 %%lo, 10\n"
    "  br label %%loop\n"
    "loop:\n"
    "  %%i = phi i64 [0, %%entry], [%%i.next, %%loop]\n"
    "  %%idx = add nsw i64 %%i, %%row\n"
    "  %%p1 = getelementptr inbounds float, ptr %%b1, i64 %%idx\n"
    "  store <8 x float> zeroinitializer, ptr %%p1, align 4\n"
    "  %%odd = add i64 %%idx, 3\n"
    "  %%p1o = getelementptr inbounds float, ptr %%b1, i64 %%odd\n"
    "  store <8 x float> zeroinitializer, ptr %%p1o, align 4\n"
    "  %%p2 = getelementptr inbounds float, ptr %%b2, i64 %%idx\n"
    "  store <8 x float> zeroinitializer, ptr %%p2, align 4\n"
    "  %%p0 = getelementptr inbounds float, ptr %%b0, i64 %%idx\n"
    "  store <8 x float> zeroinitializer, ptr %%p0, align 4\n"
    "  %%p3 = getelementptr inbounds float, ptr %%b3, i64 %%idx\n"
    "  %%v3 = load <8 x float>, ptr %%p3, align 4\n"
    "  store <8 x float> %%v3, ptr %%p3, align 4\n"
    "  %%s = getelementptr inbounds float, ptr %%b1, i64 %%i\n"
    "  store float 0.0, ptr %%s, align 4\n"
    "  store <4 x float> zeroinitializer, ptr %%s, align 4\n"
    "  %%i.next = add nuw i64 %%i, 8\n"
    "  %%c = icmp ult i64 %%i.next, %%hi\n"
    "  br i1 %%c, label %%loop, label %%done\n"
    "done:\n"
    "  ret void\n"
    "}\n";

static LLVMModuleRef parse_kernel(LLVMContextRef c, const char *triple) {
  char text[4096];
  snprintf(text, sizeof text, KERNEL_IR, triple);
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, strlen(text), "k");
  LLVMModuleRef m = NULL;
  char *err = NULL;
  if (LLVMParseIRInContext(c, buf, &m, &err)) { /* takes buf */
    fprintf(stderr, "parse: %s\n", err);
    LLVMDisposeMessage(err);
    return NULL;
  }
  return m;
}

static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static void test_marks_proven_stores(void **state) {
  (void)state;
  LLVMContextRef c = LLVMContextCreate();
  LLVMModuleRef m = parse_kernel(c, "x86_64-pc-linux-gnu");
  assert_non_null(m);
  int marked = -1;
  /* bufs 1, 2 and 3 may stream, 0 may not; 3 is read too */
  assert_int_equal(cg_stream_stores(m, "k_nt", 14, &marked), JIT_OK);
  /* p1, p2, and the 16-byte store at bufs[1] + i */
  assert_int_equal(marked, 3);
  char *text = LLVMPrintModuleToString(m);
  assert_int_equal(count(text, "!nontemporal"), 3);
  assert_int_equal(count(text, "align 32, !nontemporal"), 2);
  assert_int_equal(count(text, "align 16, !nontemporal"), 1);
  assert_int_equal(count(text, "call void @llvm.x86.sse.sfence()"), 1);
  assert_non_null(strstr(text, "ptr %p1o, align 4\n")); /* + 3 floats: not proven */
  assert_non_null(strstr(text, "ptr %p0, align 4\n"));  /* bufs[0] is not in the mask */
  assert_non_null(strstr(text, "ptr %p3, align 4\n"));  /* bufs[3] is read back */
  LLVMDisposeMessage(text);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
}

static void test_marks_nothing_elsewhere(void **state) {
  (void)state;
  LLVMContextRef c = LLVMContextCreate();
  /* another target: no x86 fence or stores */
  LLVMModuleRef m = parse_kernel(c, "aarch64-unknown-linux-gnu");
  assert_non_null(m);
  int marked = -1;
  assert_int_equal(cg_stream_stores(m, "k_nt", 6, &marked), JIT_OK);
  assert_int_equal(marked, 0);
  char *text = LLVMPrintModuleToString(m);
  assert_null(strstr(text, "nontemporal"));
  assert_null(strstr(text, "sfence"));
  LLVMDisposeMessage(text);
  LLVMDisposeModule(m);
  /* an empty mask marks nothing; a missing function and NULLs are errors */
  m = parse_kernel(c, "x86_64-pc-linux-gnu");
  assert_int_equal(cg_stream_stores(m, "k_nt", 0, &marked), JIT_OK);
  assert_int_equal(marked, 0);
  assert_int_equal(cg_stream_stores(m, "nope", 6, &marked), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "nope"));
  assert_int_equal(cg_stream_stores(NULL, "k_nt", 6, NULL), JIT_EINVAL);
  assert_int_equal(cg_stream_stores(m, NULL, 6, NULL), JIT_EINVAL);
  LLVMDisposeModule(m);
  LLVMContextDispose(c);
}

/* ---- through jit_call ---------------------------------------------------------------------- */

static jit_ctx *g_ctx;

static int setup(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2;
  return jit_ctx_create(&o, &g_ctx) == JIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  jit_ctx_destroy(g_ctx);
  return 0;
}

static float *rand_floats(int64_t n, uint64_t seed) {
  float *x = malloc((size_t)n * sizeof *x);
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
  }
  return x;
}

static void affine(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_mul(t, a[0], jit_scalar(t, 2.0)), jit_scalar(t, 1.0));
}

/* x - mean(x, axis 1): a row kernel (a reduction, then the element-level write) */
static void center(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  const int64_t *sh = jit_val_shape(t, a[0]);
  int axis = 1;
  jit_val mean = jit_div(t, jit_reduce_sum(t, a[0], 1, &axis), jit_scalar(t, (double)sh[1]));
  r[0] = jit_sub(t, a[0], jit_reshape(t, mean, 2, (int64_t[]){sh[0], 1}));
}

/* softmax over axis 1: its row kernel keeps exp(x - max) in a row scratch array, or in the
   output for rows too long for one, and divides it into the output */
static void softmax(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  const int64_t *sh = jit_val_shape(t, a[0]);
  int axis = 1;
  int64_t col[2] = {sh[0], 1};
  jit_val m = jit_reshape(t, jit_reduce_max(t, a[0], 1, &axis), 2, col);
  jit_val e = jit_exp(t, jit_sub(t, a[0], m));
  r[0] = jit_div(t, e, jit_reshape(t, jit_reduce_sum(t, e, 1, &axis), 2, col));
}

static bool g_prefetched; /* run_big's last kernel prefetches (llvm.prefetch in its dump) */

/* Runs fn on one f32 array of `shape`, checks every element against want(x, row, col, cols),
   and says whether its kernel streamed (the dump's nontemporal stores). */
static bool run_big(jit_trace_fn fn, int rank, const int64_t *shape,
                    double (*want)(const float *x, int64_t row, int64_t col, int64_t cols)) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  int64_t cols = shape[rank - 1];
  float *x = rand_floats(n, 7), *y = malloc((size_t)n * sizeof *y);
  assert_non_null(y);
  jit_array *xa = NULL, *ya = NULL;
  assert_int_equal(jit_array_from_host(g_ctx, JIT_F32, rank, shape, x, &xa), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "big", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(g_ctx, fn, NULL, &o, &f), JIT_OK);
  for (int call = 0; call < 2; call++) { /* the second reuses the first's freed pages */
    assert_int_equal(jit_call(f, &xa, &ya), JIT_OK);
    assert_int_equal(jit_array_to_host(ya, y, (size_t)n * sizeof *y), JIT_OK);
    jit_array_free(ya);
    for (int64_t i = 0; i < n; i++) {
      double w = want(x, i / cols, i % cols, cols);
      if (!(fabs(y[i] - w) <= 1e-5 * (1 + fabs(w)))) {
        fprintf(stderr, "  y[%lld] = %.9g, want %.9g\n", (long long)i, y[i], w);
        fail();
      }
    }
  }
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_LLVM);
  bool streamed = strstr(text, "!nontemporal") != NULL;
  g_prefetched = strstr(text, "@llvm.prefetch") != NULL;
  assert_null(strstr(text, "_nt(")); /* one function per kernel: no plain twin beside it */
  free(text);
  jit_fn_free(f);
  jit_array_free(xa);
  free(x);
  free(y);
  return streamed;
}

static void exp_of(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_exp(t, a[0]);
}

static double want_exp(const float *x, int64_t row, int64_t col, int64_t cols) {
  return exp(x[row * cols + col]);
}

static double want_affine(const float *x, int64_t row, int64_t col, int64_t cols) {
  return (double)(x[row * cols + col] * 2.0f + 1.0f);
}

static double want_center(const float *x, int64_t row, int64_t col, int64_t cols) {
  static const float *last_x;
  static int64_t last_row = -1;
  static double mean;
  if (x != last_x || row != last_row) {
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += x[row * cols + c];
    mean = s / (double)cols;
    last_x = x;
    last_row = row;
  }
  return x[row * cols + col] - mean;
}

static double want_softmax(const float *x, int64_t row, int64_t col, int64_t cols) {
  static const float *last_x;
  static int64_t last_row = -1;
  static double m, s;
  if (x != last_x || row != last_row) {
    m = -INFINITY;
    s = 0;
    for (int64_t c = 0; c < cols; c++) m = fmax(m, x[row * cols + c]);
    for (int64_t c = 0; c < cols; c++) s += exp(x[row * cols + c] - m);
    last_x = x;
    last_row = row;
  }
  return exp(x[row * cols + col] - m) / s;
}

static void test_large_outputs_stream(void **state) {
  (void)state;
  /* 32 MiB outputs: an elementwise loop and a row kernel whose rows are 4 KiB */
  assert_true(run_big(affine, 1, (int64_t[]){(int64_t)8 << 20}, want_affine));
  assert_true(run_big(center, 2, (int64_t[]){8192, 1024}, want_center));
  /* rows of 1025 floats: no store offset is provably aligned, the kernel still runs right */
  assert_false(run_big(center, 2, (int64_t[]){8192, 1025}, want_center));
  /* a kernel bound by its math streams too */
  assert_true(run_big(exp_of, 1, (int64_t[]){(int64_t)8 << 20}, want_exp));
  /* softmax keeps exp(x - max) of a row of 4 KiB in a scratch array: its output only written */
  assert_true(run_big(softmax, 2, (int64_t[]){8192, 1024}, want_softmax));
  /* rows of 32 KiB keep it in the output, which the kernel reads back: it stays in the cache */
  assert_false(run_big(softmax, 2, (int64_t[]){1024, 8192}, want_softmax));
  /* below the threshold nothing streams */
  assert_false(run_big(affine, 1, (int64_t[]){(int64_t)1 << 20}, want_affine));
}

static void row_sum(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  int axis = 1;
  r[0] = jit_reduce_sum(t, a[0], 1, &axis);
}

static double want_row_sum(const float *x, int64_t row, int64_t col, int64_t cols) {
  (void)col;
  double s = 0;
  for (int64_t c = 0; c < cols; c++) s += x[row * cols + c];
  return s;
}

/* A row kernel of several phases over an input past the caches prefetches the next row after
   its first phase (lower_post.c); one phase or a small input does not. */
static void test_next_row_prefetch(void **state) {
  (void)state;
  run_big(softmax, 2, (int64_t[]){8192, 1024}, want_softmax);
  assert_true(g_prefetched);
  run_big(center, 2, (int64_t[]){8192, 1025}, want_center);
  assert_true(g_prefetched);
  run_big(center, 2, (int64_t[]){64, 1024}, want_center); /* 256 KiB */
  assert_false(g_prefetched);
  /* one phase, a row sum: run here, since its output has one value per row (run_big checks
     outputs of its input's shape) */
  int64_t shape[2] = {8192, 1024};
  float *x = rand_floats(shape[0] * shape[1], 7), *y = malloc(8192 * sizeof *y);
  assert_non_null(y);
  jit_array *xa = NULL, *ya = NULL;
  assert_int_equal(jit_array_from_host(g_ctx, JIT_F32, 2, shape, x, &xa), JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "row_sum", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(g_ctx, row_sum, NULL, &o, &f), JIT_OK);
  assert_int_equal(jit_call(f, &xa, &ya), JIT_OK);
  assert_int_equal(jit_array_to_host(ya, y, 8192 * sizeof *y), JIT_OK);
  for (int64_t r = 0; r < 8192; r++) {
    double w = want_row_sum(x, r, 0, 1024);
    if (!(fabs(y[r] - w) <= 1e-4 * (1 + fabs(w)))) fail_msg("row %lld: %g, want %g", (long long)r, y[r], w);
  }
  char *text = ot_fn_dump(f, NULL, JIT_DUMP_LLVM);
  assert_null(strstr(text, "@llvm.prefetch"));
  free(text);
  jit_fn_free(f);
  jit_array_free(xa);
  jit_array_free(ya);
  free(x);
  free(y);
}

/* ---- a loop kernel's inputs prefetched ahead (lower_post.c, emit_llvm.c emit_streamed) ------ */

/* x + x, and x > 0 as a second result: a loop kernel loading one dtype and storing it and bool */
static void twice_and_sign(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, a[0], a[0]);
  r[1] = jit_cmp(t, JIT_GT, a[0], jit_convert(t, jit_scalar(t, 0.0), jit_val_dtype(t, a[0])));
}

/* x[:, :half] + 1: the loop reads half of each row */
static void left_half(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  const int64_t *sh = jit_val_shape(t, a[0]);
  jit_val h = jit_slice(t, a[0], (int64_t[]){0, 0}, (int64_t[]){sh[0], sh[1] / 2}, NULL);
  r[0] = jit_add(t, h, jit_scalar(t, 1.0));
}

static bool g_full_width; /* prefetches()'s last kernel loads f32 in vectors of the target's width */

/* Whether the optimized module text loads f32 (dt) in vectors as wide as the context's target
   says its vectors are ("..., 256-bit vectors"); true for other dtypes. */
static bool full_width_loads(const char *text, jit_dtype dt) {
  if (dt != JIT_F32) return true;
  const char *t = jit_ctx_target(ot_ctx()), *bits = strstr(t, "-bit vectors");
  assert_non_null(bits);
  while (bits > t && bits[-1] >= '0' && bits[-1] <= '9') bits--;
  char want[48];
  snprintf(want, sizeof want, "load <%d x float>", atoi(bits) / 32);
  return strstr(text, want) != NULL;
}

/* Runs fn (n_results results) compiled and on the interpreter on a random array of dtype dt and
   shape, expects equal results, and says whether the compiled code prefetches. */
static bool prefetches(jit_trace_fn fn, int n_results, jit_dtype dt, int rank, const int64_t *shape) {
  ot_array x = ot_random(dt, rank, shape, 5, -50, 50), res[4];
  ot_run_both("prefetch", fn, NULL, 1, &x, n_results, res);
  for (int i = 0; i < n_results; i++) {
    assert_true(ot_equal("compiled against the interpreter", &res[i], &res[n_results + i]));
    ot_free(&res[i]);
    ot_free(&res[n_results + i]);
  }
  jit_array *xa = ot_upload(&x);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "prefetch", .n_args = 1, .n_results = n_results};
  OT_ASSERT_OK(jit_compile(ot_ctx(), fn, NULL, &o, &f));
  OT_ASSERT_OK(jit_precompile(f, &xa));
  char *text = ot_fn_dump(f, &xa, JIT_DUMP_LLVM);
  bool found = strstr(text, "@llvm.prefetch") != NULL;
  g_full_width = full_width_loads(text, dt);
  free(text);
  jit_fn_free(f);
  jit_array_free(xa);
  ot_free(&x);
  return found;
}

/* A loop kernel reading whole rows of an input past the caches prefetches it ahead of its loads,
   in runs of a cache line of its narrowest element, with a scalar tail (lengths that are no
   multiple of a run); same values as the interpreter for every dtype width. The runs of f32 are
   vector code of the target's full width (emit_llvm.c keeps LLVM from unrolling them before it
   vectorizes them). A small input, or a loop over part of each row, does not prefetch. */
static void test_loop_kernel_prefetch(void **state) {
  (void)state;
  const int64_t flat = ((int64_t)5 << 20) + 37;
  const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_BF16, JIT_I8, JIT_I32};
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    assert_true(prefetches(twice_and_sign, 2, dts[i], 1, &flat));
    assert_true(g_full_width);
  }
  assert_true(prefetches(twice_and_sign, 2, JIT_F32, 2, (int64_t[]){1100, 1000}));
  assert_true(g_full_width);
  assert_false(prefetches(twice_and_sign, 2, JIT_F32, 1, (int64_t[]){(int64_t)1 << 18}));
  assert_false(prefetches(left_half, 1, JIT_F32, 2, (int64_t[]){2048, 1024}));
}

static void double_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)user;
  new_carry[0] = carry[0];
  y[0] = jit_mul(t, x[0], jit_scalar(t, 2.0));
}

static void scan_double(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_scan(t, double_body, NULL, 1, &a[0], 1, &a[1], -1, 0, &r[0], 1, &r[1]);
}

/* Each step writes a 32 MiB + 4 byte slice of ys, so step 1's slice starts 4 bytes past an
   aligned address: the kernel's streaming stores would fault there, so the runtime runs it on an
   aligned copy of the slice and copies it back. */
static void test_misaligned_slices_realigned(void **state) {
  (void)state;
  const int64_t len = ((int64_t)8 << 20) + 1, steps = 3;
  float *xs = rand_floats(steps * len, 11), *ys = malloc((size_t)(steps * len) * sizeof *ys);
  assert_non_null(ys);
  float c0 = 0.5f;
  jit_array *args[2] = {NULL, NULL}, *res[2] = {NULL, NULL};
  assert_int_equal(jit_array_from_host(g_ctx, JIT_F32, 0, NULL, &c0, &args[0]), JIT_OK);
  assert_int_equal(jit_array_from_host(g_ctx, JIT_F32, 2, (int64_t[]){steps, len}, xs, &args[1]),
                   JIT_OK);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "scan_double", .n_args = 2, .n_results = 2};
  assert_int_equal(jit_compile(g_ctx, scan_double, NULL, &o, &f), JIT_OK);
  assert_int_equal(jit_call(f, args, res), JIT_OK);
  assert_int_equal(jit_array_to_host(res[1], ys, (size_t)(steps * len) * sizeof *ys), JIT_OK);
  for (int64_t i = 0; i < steps * len; i++)
    if (ys[i] != xs[i] * 2.0f) {
      fprintf(stderr, "  ys[%lld] = %.9g, want %.9g\n", (long long)i, ys[i], xs[i] * 2.0f);
      fail();
    }
  for (int i = 0; i < 2; i++) {
    jit_array_free(args[i]);
    jit_array_free(res[i]);
  }
  jit_fn_free(f);
  free(xs);
  free(ys);
}

int main(void) {
  tt_skip_unrunnable_target();
  const struct CMUnitTest marker[] = {
      cmocka_unit_test(test_marks_proven_stores),
      cmocka_unit_test(test_marks_nothing_elsewhere),
  };
  const struct CMUnitTest calls[] = {
      cmocka_unit_test(test_large_outputs_stream),
      cmocka_unit_test(test_next_row_prefetch),
      cmocka_unit_test(test_misaligned_slices_realigned),
  };
  const struct CMUnitTest loops[] = {
      cmocka_unit_test(test_loop_kernel_prefetch),
  };
  int failed = cmocka_run_group_tests_name("marker", marker, NULL, NULL);
  failed += cmocka_run_group_tests_name("jit_call", calls, setup, teardown);
  failed += cmocka_run_group_tests_name("loop kernels", loops, ot_setup, ot_teardown);
  return failed;
}
