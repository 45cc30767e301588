/* test_alloc_failures.c (built with -DTJIT_FAULT_INJECTION=ON only): representative programs --
 * trace + compile + call, vmap, grad, scan, a sharded call on 2 devices, the disk cache's store
 * and load, .npy save and load -- run once to count the library's allocations, then once per
 * allocation with that allocation failing. Every failure must come back as a status other than
 * JIT_OK with a message (or, where the library falls back, as JIT_OK with the right values);
 * nothing may crash or leak (run under ASan: .ci/run); and the same context must then run the
 * program successfully with the values of the first run. Allocations inside LLVM, libffi, stdio
 * and pthreads are not counted (src/runtime/fault_inject.h).
 * $TJIT_FAULT_STRIDE=K fails only every K-th allocation (a quicker pass); $TJIT_FAULT_ONLY=name
 * runs one program; $TJIT_FAULT_FROM=N starts at allocation N and $TJIT_FAULT_VERBOSE=1 names
 * each (to debug one failure). */
#define _GNU_SOURCE /* mkdtemp, nftw */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TJIT_FAULT_NO_REDIRECT /* the harness's own allocations are not counted */
#include "runtime/error.h"
#include "runtime/fault_inject.h"
#include "tjit.h"

enum { MAX_OUT = 4096 };

/* What a program run produced: its results' values, flattened. */
typedef struct outputs {
  float v[MAX_OUT];
  size_t n;
} outputs;

typedef struct program {
  const char *name;
  int n_devices;
  int n_threads;  /* 2: loop kernels compile as two LLVM modules on two threads */
  bool disk_cache;
  /* runs the whole program on ctx; the first failing status, everything freed on every path */
  jit_status (*run)(jit_ctx *ctx, const char *dir, outputs *out);
} program;

/* ---- helpers: every one returns a status and frees what it made on failure ------------------- */
static jit_status array(jit_ctx *c, int rank, const int64_t *shape, uint32_t seed, jit_array **out) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *h = malloc((size_t)n * sizeof *h);
  if (!h) return JIT_ENOMEM;
  for (int64_t i = 0; i < n; i++) h[i] = (float)((i * 37 + seed * 11) % 23) / 23.0f - 0.4f;
  jit_status st = jit_array_from_host(c, JIT_F32, rank, shape, h, out);
  free(h);
  return st;
}

static jit_status append(outputs *out, const jit_array *a) {
  size_t n = jit_array_nbytes(a) / sizeof(float);
  if (out->n + n > MAX_OUT) return JIT_EINVAL;
  jit_status st = jit_array_to_host(a, out->v + out->n, n * sizeof(float));
  out->n += n;
  return st;
}

/* traces fn, calls it on args, appends every result (twice: the second call is a cache hit) */
static jit_status call_and_collect(jit_ctx *c, jit_trace_fn fn, const char *name, int n_args,
                                   jit_array *const *args, int n_res, outputs *out) {
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = name, .n_args = n_args, .n_results = n_res};
  jit_status st = jit_compile(c, fn, NULL, &o, &f);
  for (int round = 0; round < 2 && st == JIT_OK; round++) {
    jit_array *r[4] = {NULL, NULL, NULL, NULL};
    st = jit_call(f, args, r);
    for (int k = 0; k < n_res; k++) {
      if (st == JIT_OK && round == 1) st = append(out, r[k]);
      jit_array_free(r[k]);
    }
  }
  jit_fn_free(f);
  return st;
}

/* makes n_args arrays of the given 2-d shapes, runs fn, frees them */
static jit_status run_on(jit_ctx *c, jit_trace_fn fn, const char *name, int n_args,
                         const int64_t (*shapes)[2], int n_res, outputs *out) {
  jit_array *a[4] = {NULL, NULL, NULL, NULL};
  jit_status st = JIT_OK;
  for (int i = 0; i < n_args && st == JIT_OK; i++) st = array(c, 2, shapes[i], (uint32_t)i + 1, &a[i]);
  if (st == JIT_OK) st = call_and_collect(c, fn, name, n_args, a, n_res, out);
  for (int i = 0; i < n_args; i++) jit_array_free(a[i]);
  return st;
}

/* ---- the programs ------------------------------------------------------------------------------ */
/* y = relu(x @ w + b): sin(y) and the sum of y */
static void mlp(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  r[0] = jit_sin(t, y);
  r[1] = jit_reduce_sum(t, y, 2, (const int[]){0, 1});
}
static const int64_t mlp_shapes[3][2] = {{8, 6}, {6, 5}, {1, 5}};

static jit_status prog_compile_call(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  return run_on(c, mlp, "mlp", 3, mlp_shapes, 2, out);
}

static void row_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_tanh(t, jit_matmul(t, a[0], a[1])); /* [6] @ [6,5] */
}
static void vmapped(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_vmap(t, row_fn, user, 2, a, (const int[]){0, -1}, 1, r, NULL);
}
static jit_status prog_vmap(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  return run_on(c, vmapped, "vmap", 2, mlp_shapes, 1, out);
}

static void loss(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val h = jit_tanh(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  r[0] = jit_reduce_sum(t, jit_mul(t, h, h), 2, (const int[]){0, 1});
}
static void grad_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_value_and_grad(t, loss, user, 3, a, 6, 0, r); /* loss, d/dw, d/db */
}
static jit_status prog_grad(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  return run_on(c, grad_fn, "grad", 3, mlp_shapes, 3, out);
}

static void scan_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_add(t, jit_mul(t, carry[0], jit_scalar(t, 0.5)), x[0]);
  y[0] = jit_sin(t, new_carry[0]);
}
static void scanned(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_val init = jit_reduce_sum(t, a[0], 1, (const int[]){0}); /* [6] */
  jit_scan(t, scan_body, user, 1, &init, 1, a, 8, 0, r, 1, r + 1);
}
static jit_status prog_scan(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  return run_on(c, scanned, "scan", 1, mlp_shapes, 2, out);
}

/* two kernels too large to run inline, a row and a column reduction: on two threads they
   compile as two modules */
static void two_kernels(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_reduce_sum(t, jit_mul(t, jit_tanh(t, a[0]), jit_scalar(t, 2.0)), 1, (const int[]){1});
  r[1] = jit_reduce_max(t, a[0], 1, (const int[]){0});
}
static jit_status prog_two_modules(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  static const int64_t shape[1][2] = {{256, 256}};
  return run_on(c, two_kernels, "two", 1, shape, 2, out);
}

/* the mlp with x split over a mesh of 2 devices: every device on its own thread */
static jit_status prog_sharded(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  static const char *const names[] = {"x"};
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  jit_array *a[3] = {NULL, NULL, NULL}, *x = NULL;
  jit_status st = jit_mesh_create(c, 1, (const int64_t[]){2}, names, NULL, &m);
  if (st == JIT_OK) st = jit_sharding_create(m, "x,_", &s);
  for (int i = 0; i < 3 && st == JIT_OK; i++) st = array(c, 2, mlp_shapes[i], (uint32_t)i + 1, &a[i]);
  if (st == JIT_OK) st = jit_device_put(a[0], s, &x);
  if (st == JIT_OK) st = call_and_collect(c, mlp, "sharded", 3, (jit_array *[]){x, a[1], a[2]}, 2, out);
  for (int i = 0; i < 3; i++) jit_array_free(a[i]);
  jit_array_free(x);
  jit_sharding_free(s);
  jit_mesh_free(m);
  return st;
}

/* the disk cache: the context's cache directory starts empty (store) or holds the entry (load) */
static jit_status prog_disk_cache(jit_ctx *c, const char *dir, outputs *out) {
  (void)dir;
  return run_on(c, mlp, "cached", 3, mlp_shapes, 2, out);
}

/* .npy: an array saved and loaded back */
static jit_status prog_npy(jit_ctx *c, const char *dir, outputs *out) {
  char path[512];
  snprintf(path, sizeof path, "%s/a.npy", dir);
  jit_array *a = NULL, *b = NULL;
  jit_status st = array(c, 2, mlp_shapes[0], 7, &a);
  if (st == JIT_OK) st = jit_array_save_npy(a, path);
  if (st == JIT_OK) st = jit_array_load_npy(c, path, &b);
  if (st == JIT_OK) st = append(out, b);
  jit_array_free(a);
  jit_array_free(b);
  return st;
}

/* ---- the harness ------------------------------------------------------------------------------ */
static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* empties dir (the cache's entries, saved files), keeping dir */
static void clear_dir(const char *dir) {
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  mkdir(dir, 0700);
}

static jit_status make_ctx(const program *p, const char *dir, jit_ctx **out) {
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_devices = p->n_devices;
  o.n_threads = p->n_threads;
  o.opt_level = 1; /* the same passes and kernels as 3, with LLVM's quicker pipeline */
  o.cache_dir = p->disk_cache ? dir : NULL;
  return jit_ctx_create(&o, out);
}

static bool same(const outputs *a, const outputs *b) {
  if (a->n != b->n) return false;
  for (size_t i = 0; i < a->n; i++)
    if (!(fabsf(a->v[i] - b->v[i]) <= 1e-5f * (1 + fabsf(b->v[i])))) return false;
  return true;
}

typedef struct tally {
  long failed, survived, absorbed; /* absorbed: the library fell back and returned the values */
} tally;
static tally total;

/* fails allocation n (0: none) of ctx creation + the program; checks the status, then that the
   same context (or a new one, when creating it failed) runs the program with the values want */
static void run_failing(const program *p, const char *dir, bool load, long n, const outputs *want) {
  if (!load) clear_dir(dir); /* the store case starts from an empty directory every time */
  if (getenv("TJIT_FAULT_VERBOSE")) fprintf(stderr, "%s: failing allocation %ld\n", p->name, n);
  jit_ctx *c = NULL;
  outputs *got = calloc(1, sizeof *got);
  assert_non_null(got);
  jit_error_clear();
  tjit_fault_arm(n);
  jit_status st = make_ctx(p, dir, &c);
  if (st == JIT_OK) st = p->run(c, dir, got);
  bool fired = tjit_fault_fired();
  tjit_fault_arm(0);
  if (fired) {
    total.failed++;
    if (st == JIT_OK) {
      if (!same(got, want))
        fail_msg("%s: allocation %ld failed, JIT_OK returned with wrong values", p->name, n);
      total.absorbed++;
    } else if (jit_last_error()[0] == '\0') {
      fail_msg("%s: allocation %ld failed: %s without a message", p->name, n, jit_status_str(st));
    }
  } else if (st != JIT_OK) {
    fail_msg("%s: no allocation failed (n=%ld) yet %s: %s", p->name, n, jit_status_str(st),
             jit_last_error());
  }
  if (!c && make_ctx(p, dir, &c) != JIT_OK) fail_msg("%s: context: %s", p->name, jit_last_error());
  if (!load) clear_dir(dir);
  got->n = 0;
  st = p->run(c, dir, got);
  if (st != JIT_OK)
    fail_msg("%s: after failing allocation %ld the next run fails: %s: %s", p->name, n,
             jit_status_str(st), jit_last_error());
  if (!same(got, want)) fail_msg("%s: after failing allocation %ld: wrong values", p->name, n);
  if (fired) total.survived++;
  jit_ctx_destroy(c);
  free(got);
}

static void run_program(const program *p) {
  const char *only = getenv("TJIT_FAULT_ONLY");
  if (only && strcmp(only, p->name) != 0) skip();
  const char *senv = getenv("TJIT_FAULT_STRIDE");
  long stride = senv ? atol(senv) : 1;
  if (stride < 1) stride = 1;
  char dir[] = "/tmp/tjit_fault_XXXXXX";
  assert_non_null(mkdtemp(dir));
  bool load = p->disk_cache && strstr(p->name, "load") != NULL;
  /* the reference run, counting; for the load case it also fills the cache */
  outputs *want = calloc(1, sizeof *want);
  assert_non_null(want);
  jit_ctx *c = NULL;
  tjit_fault_arm(0);
  assert_int_equal(make_ctx(p, dir, &c), JIT_OK);
  jit_status st = p->run(c, dir, want);
  if (st != JIT_OK) fail_msg("%s: %s", p->name, jit_last_error());
  jit_ctx_destroy(c);
  tjit_fault_arm(0);
  assert_int_equal(make_ctx(p, dir, &c), JIT_OK);
  outputs *again = calloc(1, sizeof *again);
  assert_non_null(again);
  if (!load) clear_dir(dir);
  assert_int_equal(p->run(c, dir, again), JIT_OK);
  long n_alloc = tjit_fault_count();
  jit_ctx_destroy(c);
  assert_true(same(again, want));
  free(again);
  long before = total.failed, absorbed = total.absorbed;
  const char *fenv = getenv("TJIT_FAULT_FROM");
  for (long n = fenv ? atol(fenv) : 1; n <= n_alloc + 2; n += stride) run_failing(p, dir, load, n, want);
  fprintf(stderr, "%-16s %5ld allocations, %5ld failed in turn, all survived (%ld by a fallback)\n",
          p->name, n_alloc, total.failed - before, total.absorbed - absorbed);
  clear_dir(dir);
  rmdir(dir);
  free(want);
}

static const program programs[] = {
    {"compile_call", 1, 1, false, prog_compile_call},
    {"vmap", 1, 1, false, prog_vmap},
    {"grad", 1, 1, false, prog_grad},
    {"scan", 1, 1, false, prog_scan},
    {"sharded_2dev", 2, 1, false, prog_sharded},
    {"disk_store", 1, 1, true, prog_disk_cache},
    {"disk_load", 1, 1, true, prog_disk_cache},
    {"npy", 1, 1, false, prog_npy},
    {"two_modules", 1, 2, false, prog_two_modules},
};

#define PROGRAM_TEST(i) \
  static void test_##i(void **state) { (void)state; run_program(&programs[i]); }
PROGRAM_TEST(0)
PROGRAM_TEST(1)
PROGRAM_TEST(2)
PROGRAM_TEST(3)
PROGRAM_TEST(4)
PROGRAM_TEST(5)
PROGRAM_TEST(6)
PROGRAM_TEST(7)
PROGRAM_TEST(8)

static void test_summary(void **state) {
  (void)state;
  fprintf(stderr, "allocation failures: %ld failed, %ld survived (%ld by a fallback), at %zu distinct "
          "call sites\n", total.failed, total.survived, total.absorbed, tjit_fault_sites());
  assert_int_equal(total.failed, total.survived);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_0), cmocka_unit_test(test_1), cmocka_unit_test(test_2),
      cmocka_unit_test(test_3), cmocka_unit_test(test_4), cmocka_unit_test(test_5),
      cmocka_unit_test(test_6), cmocka_unit_test(test_7), cmocka_unit_test(test_8),
      cmocka_unit_test(test_summary),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
