/* test_compile_log.c: $TJIT_LOG_COMPILES (one stderr line per compile: key, phase times, kernels,
 * disk cache hit or miss) and $TJIT_EXPLAIN_CACHE_MISSES (one line per miss of a function that
 * has compiled signatures, naming the arg and what differs from the nearest one: shape, dtype,
 * sharding, static bytes). stderr is redirected to a file around the calls and read back. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/json.h"
#include "support/placement.h"
#include "tjit.h"

/* ---- capturing stderr ---------------------------------------------------------------------------- */

typedef struct capture {
  int saved; /* the real stderr */
  char path[64];
} capture;

static void capture_begin(capture *c) {
  fflush(stderr);
  snprintf(c->path, sizeof c->path, "/tmp/tjit_test_log_%d.txt", (int)getpid());
  int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  c->saved = dup(2);
  assert_true(c->saved >= 0);
  assert_int_equal(dup2(fd, 2), 2);
  close(fd);
}

/* What was written to stderr since capture_begin (malloc'd). */
static char *capture_end(capture *c) {
  fflush(stderr);
  assert_int_equal(dup2(c->saved, 2), 2);
  close(c->saved);
  char *s = js_read_file(c->path);
  assert_non_null(s);
  unlink(c->path);
  return s;
}

/* Ends the capture and asserts that stderr received exactly want. */
static void expect_stderr(capture *c, const char *want) {
  char *log = capture_end(c);
  assert_string_equal(log, want);
  free(log);
}

static int count_lines(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

/* ---- fixtures ------------------------------------------------------------------------------------ */

static jit_ctx *ctx_with(int devices, const char *cache_dir) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = devices;
  o.n_threads = 1;
  o.cache_dir = cache_dir;
  jit_ctx *c = NULL;
  assert_int_equal(jit_ctx_create(&o, &c), JIT_OK);
  return c;
}

static jit_array *zeros(jit_ctx *c, jit_dtype dt, int rank, const int64_t *shape) {
  static const double z[64] = {0};
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(c, dt, rank, shape, z, &a), JIT_OK);
  return a;
}

/* y = x * b + 1, b broadcast along x's rows and converted to x's dtype */
static void addmul(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val b = jit_convert(t, a[1], jit_val_dtype(t, a[0]));
  r[0] = jit_add(t, jit_mul(t, a[0], b), jit_scalar(t, 1.0));
}

static void call_once(jit_fn *f, jit_array *x, jit_array *b) {
  jit_array *args[2] = {x, b}, *y = NULL;
  jit_status st = jit_call(f, args, &y);
  if (st != JIT_OK) fail_msg("%s", jit_last_error());
  jit_array_free(y);
}

static void call_static(jit_fn *f, const void *st, size_t n, jit_array *x, jit_array *b) {
  jit_array *args[2] = {x, b}, *y = NULL;
  assert_int_equal(jit_call_static(f, st, n, args, &y), JIT_OK);
  jit_array_free(y);
}

/* A call with these static args writes nothing on stderr. */
static void assert_silent(jit_fn *f, const char *st, jit_array *x, jit_array *b) {
  capture cap;
  capture_begin(&cap);
  call_static(f, st, strlen(st), x, b);
  expect_stderr(&cap, "");
}

/* ---- tests --------------------------------------------------------------------------------------- */

static void test_log_compiles(void **state) {
  (void)state;
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/tjit_test_log_cache_%d", (int)getpid());
  int64_t xs[2] = {4, 8}, bs[1] = {8};
  setenv("TJIT_LOG_COMPILES", "1", 1);
  capture cap;
  capture_begin(&cap);
  for (int round = 0; round < 2; round++) { /* the second context finds the object on disk */
    jit_ctx *c = ctx_with(1, dir);
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = "addmul", .n_args = 2, .n_results = 1};
    assert_int_equal(jit_compile(c, addmul, NULL, &o, &f), JIT_OK);
    jit_array *x = zeros(c, JIT_F32, 2, xs), *b = zeros(c, JIT_F32, 1, bs);
    call_once(f, x, b);
    call_once(f, x, b); /* a hit: no line */
    jit_array_free(x);
    jit_array_free(b);
    jit_fn_free(f);
    jit_ctx_destroy(c);
  }
  /* no disk cache at all */
  jit_ctx *c = ctx_with(1, NULL);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "addmul", .n_args = 2, .n_results = 1};
  assert_int_equal(jit_compile(c, addmul, NULL, &o, &f), JIT_OK);
  jit_array *x = zeros(c, JIT_F32, 2, xs), *b = zeros(c, JIT_F32, 1, bs);
  call_static(f, "ab", 2, x, b);
  char *log = capture_end(&cap);
  unsetenv("TJIT_LOG_COMPILES");
  assert_int_equal(count_lines(log, "tjit: compiled addmul sig0 (f32[4,8], f32[8])"), 3);
  assert_int_equal(count_lines(log, "\n"), 3);
  const char *first = strstr(log, "tjit: compiled");
  const char *eol = strchr(first, '\n');
  for (const char *k = first; k < eol; k++) assert_true(*k != '\0');
  static const char *const parts[] = {": trace ", " ms, passes ", " ms, codegen ", " ms, llvm ",
                                      " ms, load ", " ms; 1 kernel; disk cache miss\n"};
  const char *p = first;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    const char *q = strstr(p, parts[i]);
    if (!q || q > eol + 1) fail_msg("'%s' missing or out of order in: %.*s", parts[i], (int)(eol - first), first);
    p = q + strlen(parts[i]);
  }
  const char *second = strstr(eol, "tjit: compiled");
  assert_non_null(strstr(second, "; 1 kernel; disk cache hit\n"));
  assert_non_null(strstr(log, "(f32[4,8], f32[8]) static 2 bytes: trace "));
  assert_non_null(strstr(log, "; no disk cache\n"));
  free(log);

  assert_silent(f, "cd", x, b); /* not set: silent */
  jit_array_free(x);
  jit_array_free(b);
  jit_fn_free(f);
  jit_ctx_destroy(c);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_explain_misses(void **state) {
  (void)state;
  jit_ctx *c = ctx_with(2, NULL);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "addmul", .n_args = 2, .n_results = 1};
  assert_int_equal(jit_compile(c, addmul, NULL, &o, &f), JIT_OK);
  int64_t xs[2] = {4, 8}, x5[2] = {5, 8}, bs[1] = {8};
  jit_array *x = zeros(c, JIT_F32, 2, xs), *b = zeros(c, JIT_F32, 1, bs);
  jit_array *y5 = zeros(c, JIT_F32, 2, x5), *b64 = zeros(c, JIT_F64, 1, bs);
  jit_array *x64 = zeros(c, JIT_F64, 2, x5);
  setenv("TJIT_EXPLAIN_CACHE_MISSES", "1", 1);
  capture cap;

  capture_begin(&cap);
  call_once(f, x, b); /* the first compile: nothing to explain */
  call_once(f, x, b); /* a hit */
  expect_stderr(&cap, "");

  capture_begin(&cap);
  call_once(f, y5, b);
  expect_stderr(&cap, "tjit: cache miss for addmul (1 signature compiled); nearest is sig0: "
                      "arg 0 shape [4,8] -> [5,8]\n");

  /* sig1 (x [5,8]) is nearer than sig0: only arg 1's dtype differs */
  capture_begin(&cap);
  call_once(f, y5, b64);
  call_once(f, x64, b64);
  expect_stderr(&cap, "tjit: cache miss for addmul (2 signatures compiled); nearest is sig1: "
                      "arg 1 dtype f32 -> f64\n"
                      "tjit: cache miss for addmul (3 signatures compiled); nearest is sig2: "
                      "arg 0 dtype f32 -> f64\n");

  /* static bytes: the length, then the first byte that differs */
  capture_begin(&cap);
  call_static(f, "\x01\x02\x03\x04", 4, x, b);
  call_static(f, "\x01\x02\x03\x04\x05\x06", 6, x, b);
  call_static(f, "\x01\x02\x09\x04", 4, x, b);
  expect_stderr(&cap, "tjit: cache miss for addmul (4 signatures compiled); nearest is sig0: "
                      "static args length 0 -> 4 bytes\n"
                      "tjit: cache miss for addmul (5 signatures compiled); nearest is sig4: "
                      "static args length 4 -> 6 bytes\n"
                      "tjit: cache miss for addmul (6 signatures compiled); nearest is sig4: "
                      "static args byte 2 0x03 -> 0x09\n");

  /* a sharded arg */
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  jit_array *xsh = pl_put_rows(c, x, 2, &m, &s);
  capture_begin(&cap);
  call_once(f, xsh, b);
  expect_stderr(&cap, "tjit: cache miss for addmul (7 signatures compiled); nearest is sig0: "
                      "arg 0 sharding uncommitted -> {mesh[x=2] \"x,_\"}\n");
  unsetenv("TJIT_EXPLAIN_CACHE_MISSES");

  assert_silent(f, "zz", x, b); /* not set: silent */

  jit_array_free(xsh);
  jit_sharding_free(s);
  jit_mesh_free(m);
  jit_array_free(x);
  jit_array_free(b);
  jit_array_free(y5);
  jit_array_free(b64);
  jit_array_free(x64);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_log_compiles),
      cmocka_unit_test(test_explain_misses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
