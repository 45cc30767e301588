/* test_tjit_run.c: tjit-run ($TJIT_RUN, set by CMake) on what a program dumps: TJIT_DUMP files of
 * each stage and jit_fn_dump's text, with the program's inputs as .npy files (results equal to
 * jit_call's) and with random ones checked against the interpreter; bad inputs exit nonzero. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tjit.h"

static char dir[64];
static jit_ctx *ctx;

/* relu(x @ w + b) and, through a scan, the running sum of x's rows: a dot, a reduction-free
   epilogue, and a nested body that the dump must carry. */
static void add_row(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                    jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_add(t, carry[0], x[0]);
  y[0] = jit_tanh(t, new_carry[0]);
}

static void program(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  const int64_t row[1] = {8};
  jit_val zero = jit_full(t, JIT_F32, 1, row, 0.0), carry;
  jit_scan(t, add_row, NULL, 1, &zero, 1, &a[0], 6, 0, &carry, 1, &r[1]);
}

static const int64_t x_shape[2] = {6, 8}, w_shape[2] = {8, 5}, b_shape[1] = {5};
static jit_array *args[3], *want[2];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static jit_array *random_f32(int rank, const int64_t *shape, unsigned seed) {
  float v[64];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, rank, shape, v, &a), JIT_OK);
  return a;
}

/* The program, called once with dumps on: TJIT_DUMP files, jit_fn_dump's text, the inputs and
   the results jit_call gave. */
static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tjit_run_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  if (jit_ctx_create(NULL, &ctx) != JIT_OK) return -1;
  setenv("TJIT_DUMP", "traced,optimized,fused", 1);
  setenv("TJIT_DUMP_DIR", dir, 1);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "program", .n_args = 3, .n_results = 2};
  if (jit_compile(ctx, program, NULL, &o, &f) != JIT_OK) return -1;
  args[0] = random_f32(2, x_shape, 1);
  args[1] = random_f32(2, w_shape, 2);
  args[2] = random_f32(1, b_shape, 3);
  if (jit_call(f, args, want) != JIT_OK) return print_error("%s\n", jit_last_error()), -1;
  unsetenv("TJIT_DUMP");
  unsetenv("TJIT_DUMP_DIR");
  char p[256];
  path_in(p, sizeof p, "program.dump.txt");
  FILE *out = fopen(p, "w");
  if (!out || jit_fn_dump(f, NULL, JIT_DUMP_TRACED | JIT_DUMP_OPTIMIZED | JIT_DUMP_FUSED, out) != JIT_OK)
    return -1;
  fclose(out);
  jit_fn_free(f);
  static const char *const names[3] = {"x.npy", "w.npy", "b.npy"};
  for (int i = 0; i < 3; i++) {
    path_in(p, sizeof p, names[i]);
    if (jit_array_save_npy(args[i], p) != JIT_OK) return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) jit_array_free(args[i]);
  for (int i = 0; i < 2; i++) jit_array_free(want[i]);
  jit_ctx_destroy(ctx);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* Runs tjit-run with the arguments (relative paths are in dir); returns its exit status and its
   stdout and stderr together in *output (malloc'd). */
static int run_tool(char **output, const char *fmt, ...) {
  const char *tool = getenv("TJIT_RUN");
  if (!tool) {
    print_error("TJIT_RUN is not set (ctest sets it to tjit-run's path)\n");
    fail();
  }
  char args_text[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args_text, sizeof args_text, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, tool, args_text);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - 1 - n, p)) > 0) n += got;
  buf[n] = '\0';
  int status = pclose(p);
  *output = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_output(const char *out, const char *want_text) {
  if (!strstr(out, want_text)) {
    print_error("tjit-run's output lacks \"%s\":\n%s\n", want_text, out);
    fail();
  }
}

/* result k of a tjit-run --out-dir run equals jit_call's (the same pipeline compiled it). */
static void expect_same_results(const char *out_dir) {
  for (int k = 0; k < 2; k++) {
    char p[256], name[64];
    snprintf(name, sizeof name, "%s/out%d.npy", out_dir, k);
    path_in(p, sizeof p, name);
    jit_array *got = NULL;
    assert_int_equal(jit_array_load_npy(ctx, p, &got), JIT_OK);
    size_t nb = jit_array_nbytes(want[k]);
    assert_int_equal(jit_array_nbytes(got), nb);
    float a[64], b[64];
    assert_int_equal(jit_array_to_host(got, a, sizeof a), JIT_OK);
    assert_int_equal(jit_array_to_host(want[k], b, sizeof b), JIT_OK);
    for (size_t i = 0; i < nb / 4; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-6f * (1 + fabsf(b[i])));
    jit_array_free(got);
  }
}

static void test_dumps_run_on_npy_inputs(void **state) {
  (void)state;
  static const char *const runs[] = {
      "program.sig0.traced.tir", "program.sig0.optimized.tir", "program.dump.txt",
      "program.dump.txt --stage traced",
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    char *out = NULL;
    int rc = run_tool(&out, "%s --in x.npy w.npy b.npy --out-dir res%zu --check --tol 1e-4 --iters 3",
                      runs[i], i);
    if (rc != 0) print_error("%s: exit %d\n%s\n", runs[i], rc, out);
    assert_int_equal(rc, 0);
    expect_output(out, "@program: 3 args, 2 results");
    expect_output(out, "cold ");
    expect_output(out, "(median of 3 calls");
    expect_output(out, "stats kernels ");
    expect_output(out, "check result 1 f32[6,8]: max abs error");
    free(out);
    char d[16];
    snprintf(d, sizeof d, "res%zu", i);
    expect_same_results(d);
  }
}

static void test_random_inputs_match_the_interpreter(void **state) {
  (void)state;
  char *out = NULL;
  int rc = run_tool(&out, "program.sig0.optimized.tir --random 42 --check --tol 1e-4 --iters 1 "
                          "--out r0.npy r1.npy");
  if (rc != 0) print_error("%s\n", out);
  assert_int_equal(rc, 0);
  expect_output(out, "result 1 -> r1.npy");
  expect_output(out, "check result 0 f32[6,5]");
  free(out);
  /* The same seed gives the same inputs, hence the same results. */
  rc = run_tool(&out, "program.sig0.traced.tir --random 42 --iters 0 --out s0.npy s1.npy");
  assert_int_equal(rc, 0);
  free(out);
  for (int k = 0; k < 2; k++) {
    char a[256], b[256], na[16], nb[16];
    snprintf(na, sizeof na, "r%d.npy", k);
    snprintf(nb, sizeof nb, "s%d.npy", k);
    path_in(a, sizeof a, na);
    path_in(b, sizeof b, nb);
    jit_array *x = NULL, *y = NULL;
    assert_int_equal(jit_array_load_npy(ctx, a, &x), JIT_OK);
    assert_int_equal(jit_array_load_npy(ctx, b, &y), JIT_OK);
    float u[64], v[64];
    assert_int_equal(jit_array_to_host(x, u, sizeof u), JIT_OK);
    assert_int_equal(jit_array_to_host(y, v, sizeof v), JIT_OK);
    assert_memory_equal(u, v, jit_array_nbytes(x));
    jit_array_free(x);
    jit_array_free(y);
  }
}

static void test_bad_inputs(void **state) {
  (void)state;
  char p[256];
  path_in(p, sizeof p, "broken.tir");
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs("func @g(%a: f32[3]) -> f32[3] {\n  %b = frobnicate %a : f32[3]\n  return %b\n}\n", f);
  fclose(f);
  static const struct {
    const char *args, *message;
    int rc;
  } cases[] = {
      {"program.sig0.traced.tir --in x.npy w.npy", "@program takes 3 inputs; 2 .npy files", 1},
      {"program.sig0.traced.tir --in w.npy x.npy b.npy",
       "input 0 (w.npy) is f32[8,5]; @program's param %0 is f32[6,8]", 1},
      {"program.sig0.traced.tir --in x.npy w.npy missing.npy", "missing.npy: cannot open", 1},
      {"program.sig0.traced.tir --random 1 --out only_one.npy", "returns 2 results; 1 --out", 1},
      {"broken.tir --random 1", "broken.tir:2:", 1},
      {"program.dump.txt --random 1 --stage fused", "runs the traced or optimized stage", 1},
      {"program.sig0.traced.tir", "give either --in FILES or --random SEED", 2},
      {"program.sig0.traced.tir --random 1 --tol 1", "--tol needs --check", 2},
      {"no_such.tir --random 1", "cannot open 'no_such.tir'", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    int rc = run_tool(&out, "%s", cases[i].args);
    if (rc != cases[i].rc) print_error("%s: exit %d\n%s\n", cases[i].args, rc, out);
    assert_int_equal(rc, cases[i].rc);
    expect_output(out, cases[i].message);
    free(out);
  }
}

/* Committed IR with `sharding` ops (tjit-opt's partitioning goldens): their meshes run on the
   context's first devices, and the partitioned program matches the interpreter. */
static void test_sharded_ir(void **state) {
  (void)state;
  const char *src = getenv("TJIT_SOURCE_DIR");
  static const char *const files[] = {"partition_dot_all_reduce.tir", "partition_scan.tir",
                                      "partition_shard_map.tir"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char *out = NULL;
    int rc = run_tool(&out, "%s/tests/ir/%s --random 3 --check --tol 1e-4 --iters 2 --out-dir sh%zu",
                      src ? src : ".", files[i], i);
    if (rc != 0) print_error("%s: exit %d\n%s\n", files[i], rc, out);
    assert_int_equal(rc, 0);
    expect_output(out, "check result 0");
    free(out);
  }
  char *out = NULL;
  int rc = run_tool(&out, "%s/tests/ir/partition_dot_all_reduce.tir --random 3 --devices 1",
                    src ? src : ".");
  assert_int_equal(rc, 1);
  expect_output(out, "@contracted's sharding needs 2 devices; the context has 1");
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dumps_run_on_npy_inputs),
      cmocka_unit_test(test_random_inputs_match_the_interpreter),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_sharded_ir),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
