#define _GNU_SOURCE
/* test_export_c.c: jit_fn_export_c: W2 (softmax over rows), W4 (an MLP layer pair) and every
 * inline transcendental exported as C, built with cc alone, run, and compared with jit_call; the
 * refusals (partitioned signatures, scans, bad arguments). Skipped when no cc exists. */
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
#include <unistd.h>

#include "support/optest.h"
#include "tjit.h"

static char dir[64];

static int make_dir(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/tjit_export_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

static bool have_cc(void) { return system("cc --version > /dev/null 2>&1") == 0; }

static jit_array *random_array(jit_ctx *c, jit_dtype dt, int rank, const int64_t *shape,
                               uint64_t seed, double lo, double hi) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  size_t es = jit_dtype_size(dt);
  unsigned char *v = malloc((size_t)(n ? n : 1) * es);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    double u = lo + (hi - lo) * (double)(seed >> 11) / 9007199254740992.0;
    if (dt == JIT_F32) ((float *)v)[i] = (float)u;
    else ((double *)v)[i] = u;
  }
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(c, dt, rank, shape, v, &a), JIT_OK);
  free(v);
  return a;
}

/* Writes a driver for NAME: reads the args from in.bin, calls NAME (twice at once from two threads
   when concurrent, which must agree), writes the results to out.bin. */
static void write_driver(const char *name, int n_args, jit_array *const *args, int n_results,
                         jit_array *const *results, bool concurrent) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s_main.c", dir, name);
  FILE *o = fopen(path, "w");
  assert_non_null(o);
  fprintf(o, "#include \"%s.h\"\n#include <pthread.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
          "#include <string.h>\n", name);
  fprintf(o, "static const size_t in_bytes[] = {");
  for (int i = 0; i < n_args; i++) fprintf(o, "%zu, ", jit_array_nbytes(args[i]));
  fprintf(o, "0};\nstatic const size_t out_bytes[] = {");
  for (int i = 0; i < n_results; i++) fprintf(o, "%zu, ", jit_array_nbytes(results[i]));
  fprintf(o, "0};\nenum { NA = %d, NR = %d };\n", n_args, n_results);
  fprintf(o,
          "static void *args[NA + 1], *res[2][NR];\n"
          "static void *run(void *p) { return (void *)(size_t)%s(args, res[(size_t)p]); }\n"
          "int main(int argc, char **argv) {\n"
          "  if (argc < 3) return 9;\n"
          "  FILE *in = fopen(argv[1], \"rb\"), *out = fopen(argv[2], \"wb\");\n"
          "  if (!in || !out) return 8;\n"
          "  for (int i = 0; i < NA; i++) {\n"
          "    args[i] = malloc(in_bytes[i] + 1);\n"
          "    if (fread(args[i], 1, in_bytes[i], in) != in_bytes[i]) return 7;\n"
          "  }\n"
          "  for (int k = 0; k < 2; k++)\n"
          "    for (int i = 0; i < NR; i++) res[k][i] = malloc(out_bytes[i] + 1);\n"
          "  if (%d) {\n"
          "    pthread_t t;\n"
          "    void *r0, *r1;\n"
          "    if (pthread_create(&t, NULL, run, (void *)1)) return 6;\n"
          "    r0 = run((void *)0);\n"
          "    pthread_join(t, &r1);\n"
          "    if (r0 || r1) return 5;\n"
          "    for (int i = 0; i < NR; i++) if (memcmp(res[0][i], res[1][i], out_bytes[i])) return 4;\n"
          "  } else if (run((void *)0)) {\n"
          "    return 5;\n"
          "  }\n"
          "  for (int i = 0; i < NR; i++) fwrite(res[0][i], 1, out_bytes[i], out);\n"
          "  fclose(in);\n"
          "  fclose(out);\n"
          "  return 0;\n"
          "}\n",
          name, concurrent ? 1 : 0);
  fclose(o);
}

/* Exports f on args, builds it with cc (flags added), runs it and compares each result with
   jit_call's: |c - jit| <= tol * (|jit| + 1). */
static void export_and_compare(jit_fn *f, const char *name, int n_args, jit_array *const *args,
                               int n_results, const char *flags, double tol) {
  jit_array *want[8] = {0};
  assert_int_equal(jit_call(f, args, want), JIT_OK);
  if (jit_fn_export_c(f, args, dir) != JIT_OK) fail_msg("%s: %s", name, jit_last_error());
  write_driver(name, n_args, args, n_results, want, strstr(flags, "THREADS") != NULL);
  char cmd[1024], in[128], out[128];
  snprintf(in, sizeof in, "%s/%s_in.bin", dir, name);
  snprintf(out, sizeof out, "%s/%s_out.bin", dir, name);
  FILE *fi = fopen(in, "wb");
  assert_non_null(fi);
  for (int i = 0; i < n_args; i++) {
    size_t n = jit_array_nbytes(args[i]);
    void *v = malloc(n + 1);
    assert_int_equal(jit_array_to_host(args[i], v, n), JIT_OK);
    assert_int_equal(fwrite(v, 1, n, fi), n);
    free(v);
  }
  fclose(fi);
  snprintf(cmd, sizeof cmd,
           "cd %s && cc -std=c11 -O2 -march=native -Wall -Wextra -Werror %s -o %s_bin %s.c %s_main.c "
           "-lm -pthread 2> %s_cc.log && ./%s_bin %s %s",
           dir, flags, name, name, name, name, name, in, out);
  int rc = system(cmd);
  if (rc != 0) {
    char log[160];
    snprintf(log, sizeof log, "cat %s/%s_cc.log >&2", dir, name);
    if (system(log) != 0) print_error("no log\n");
    fail_msg("%s: build or run failed (%d): %s", name, rc, cmd);
  }
  FILE *fo = fopen(out, "rb");
  assert_non_null(fo);
  for (int r = 0; r < n_results; r++) {
    size_t n = jit_array_nbytes(want[r]);
    unsigned char *got = malloc(n + 1), *ref = malloc(n + 1);
    assert_int_equal(fread(got, 1, n, fo), n);
    assert_int_equal(jit_array_to_host(want[r], ref, n), JIT_OK);
    bool f64 = jit_array_dtype(want[r]) == JIT_F64;
    size_t count = n / (f64 ? 8 : 4);
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
      double g = f64 ? ((double *)got)[i] : ((float *)got)[i];
      double w = f64 ? ((double *)ref)[i] : ((float *)ref)[i];
      double err = fabs(g - w) / (fabs(w) + 1);
      if (isnan(g) != isnan(w) || err > tol)
        fail_msg("%s: result %d element %zu: C %.17g, jit_call %.17g", name, r, i, g, w);
      if (err > worst) worst = err;
    }
    print_message("%s result %d: %zu elements, worst relative difference %.3g (bound %.3g)\n", name,
                  r, count, worst, tol);
    free(got);
    free(ref);
    jit_array_free(want[r]);
  }
  fclose(fo);
}

static void w2_softmax(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  const int64_t *s = jit_val_shape(t, a[0]);
  int64_t col[2] = {s[0], 1}, full[2] = {s[0], s[1]};
  jit_val m = jit_reshape(t, jit_reduce_max(t, a[0], 1, (const int[]){1}), 2, col);
  jit_val e = jit_exp(t, jit_sub(t, a[0], jit_broadcast_to(t, m, 2, full)));
  jit_val z = jit_reshape(t, jit_reduce_sum(t, e, 1, (const int[]){1}), 2, col);
  r[0] = jit_div(t, e, jit_broadcast_to(t, z, 2, full));
}

static void w4_mlp(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  jit_val h = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  r[0] = jit_add(t, jit_matmul(t, h, a[3]), a[4]);
}

static void test_w2(void **state) {
  (void)state;
  if (!have_cc()) skip();
  jit_ctx *c = ot_ctx_with(1, 2, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "softmax_rows", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, w2_softmax, NULL, &o, &f), JIT_OK);
  jit_array *x = random_array(c, JIT_F32, 2, (const int64_t[]){96, 1000}, 1, -8, 8);
  /* exp within 1 ulp (docs/MATH.md); the sum over 1000 lanes is added in another order */
  export_and_compare(f, "softmax_rows", 1, &x, 1, "", 1e-5);
  jit_array_free(x);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

static void test_w4(void **state) {
  (void)state;
  if (!have_cc()) skip();
  jit_ctx *c = ot_ctx_with(1, 2, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "mlp", .n_args = 5, .n_results = 1};
  assert_int_equal(jit_compile(c, w4_mlp, NULL, &o, &f), JIT_OK);
  /* shapes that fill no tile exactly, and a K past one KC block */
  jit_array *a[5] = {random_array(c, JIT_F32, 2, (const int64_t[]){37, 300}, 1, -1, 1),
                     random_array(c, JIT_F32, 2, (const int64_t[]){300, 70}, 2, -0.1, 0.1),
                     random_array(c, JIT_F32, 1, (const int64_t[]){70}, 3, -1, 1),
                     random_array(c, JIT_F32, 2, (const int64_t[]){70, 45}, 4, -0.1, 0.1),
                     random_array(c, JIT_F32, 1, (const int64_t[]){45}, 5, -1, 1)};
  /* sums of 300 products in another order: W4's documented tolerance */
  export_and_compare(f, "mlp", 5, a, 1, "", 1e-4);
  export_and_compare(f, "mlp", 5, a, 1, "-DMLP_THREADS=3", 1e-4);
  for (int i = 0; i < 5; i++) jit_array_free(a[i]);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

static void all_math(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  r[0] = jit_exp(t, a[0]);
  r[1] = jit_log(t, jit_abs(t, a[0]));
  r[2] = jit_tanh(t, a[0]);
  r[3] = jit_logistic(t, a[0]);
  r[4] = jit_erf(t, a[0]);
  r[5] = jit_sin(t, a[0]);
  r[6] = jit_cos(t, a[0]);
  r[7] = jit_matmul(t, jit_transpose(t, a[1], (const int[]){1, 0}), a[1]);
}

/* The math printed from the JIT's own IR computes what the JIT does: a few ulp at most apart
   (GCC may contract a multiply and an add the JIT keeps apart). */
static void test_math(void **state) {
  (void)state;
  if (!have_cc()) skip();
  jit_ctx *c = ot_ctx_with(1, 1, 3);
  for (int f64 = 0; f64 < 2; f64++) {
    jit_dtype dt = f64 ? JIT_F64 : JIT_F32;
    const char *name = f64 ? "math64" : "math32";
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = name, .n_args = 2, .n_results = 8};
    assert_int_equal(jit_compile(c, all_math, NULL, &o, &f), JIT_OK);
    jit_array *a[2] = {random_array(c, dt, 1, (const int64_t[]){4099}, 9, -20, 20),
                       random_array(c, dt, 2, (const int64_t[]){13, 7}, 8, -1, 1)};
    export_and_compare(f, name, 2, a, 8, "", f64 ? 1e-14 : 1e-6);
    jit_array_free(a[0]);
    jit_array_free(a[1]);
    jit_fn_free(f);
  }
  jit_ctx_destroy(c);
}

/* gather (fused into its consumer), scatter-add, pad and rev: loads at indices read from data */
static void indexing(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  jit_val y = jit_take(t, a[0], a[1], 0);
  r[0] = jit_exp(t, y);
  r[1] = jit_rev(t, jit_scatter_add(t, a[0], a[1], y, 0), 1, (const int[]){1});
  r[2] = jit_pad(t, a[0], jit_scalar(t, 1.5), (const int64_t[]){1, -1}, (const int64_t[]){0, 2},
                 (const int64_t[]){1, 0});
}

static void test_indexing(void **state) {
  (void)state;
  if (!have_cc()) skip();
  jit_ctx *c = ot_ctx_with(1, 2, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "indexing", .n_args = 2, .n_results = 3};
  assert_int_equal(jit_compile(c, indexing, NULL, &o, &f), JIT_OK);
  int32_t iv[9] = {3, -1, 40, 0, 3, -50, 7, 7, 2};
  jit_array *a[2] = {random_array(c, JIT_F32, 2, (const int64_t[]){9, 33}, 11, -1, 1), NULL};
  assert_int_equal(jit_array_from_host(c, JIT_I32, 1, (const int64_t[]){9}, iv, &a[1]), JIT_OK);
  export_and_compare(f, "indexing", 2, a, 3, "", 1e-6);
  jit_array_free(a[0]);
  jit_array_free(a[1]);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

static void scan_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *nc, jit_val *y,
                      void *u) {
  (void)u;
  nc[0] = jit_add(t, carry[0], x[0]);
  y[0] = nc[0];
}
static void cumsum(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  (void)u;
  jit_val init = jit_full(t, JIT_F32, 1, (const int64_t[]){4}, 0);
  jit_scan(t, scan_body, NULL, 1, &init, 1, a, 8, 0, &r[1], 1, &r[0]);
}

static void test_refusals(void **state) {
  (void)state;
  jit_ctx *c = ot_ctx_with(2, 1, 3);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "softmax_rows", .n_args = 1, .n_results = 1};
  assert_int_equal(jit_compile(c, w2_softmax, NULL, &o, &f), JIT_OK);
  jit_array *x = random_array(c, JIT_F32, 2, (const int64_t[]){8, 8}, 1, -1, 1);
  assert_int_equal(jit_fn_export_c(NULL, &x, dir), JIT_EINVAL);
  assert_int_equal(jit_fn_export_c(f, &x, NULL), JIT_EINVAL);
  assert_string_equal(jit_last_error(), "jit_fn_export_c: softmax_rows: dir is NULL");
  assert_int_equal(jit_fn_export_c(f, NULL, dir), JIT_EINVAL);
  assert_int_equal(jit_fn_export_c(f, &x, "/nonexistent/dir"), JIT_EIO);
  assert_non_null(strstr(jit_last_error(), "cannot create /nonexistent/dir/softmax_rows.h"));
  /* a partitioned signature */
  jit_mesh *m = NULL;
  jit_sharding *s = NULL;
  jit_array *xs = NULL;
  assert_int_equal(jit_mesh_create(c, 1, (const int64_t[]){2}, (const char *const[]){"x"}, NULL, &m), JIT_OK);
  assert_int_equal(jit_sharding_create(m, "x,_", &s), JIT_OK);
  assert_int_equal(jit_device_put(x, s, &xs), JIT_OK);
  assert_int_equal(jit_fn_export_c(f, &xs, dir), JIT_EUNSUPPORTED);
  assert_non_null(strstr(jit_last_error(), "partitioned"));
  jit_fn_free(f);
  /* a scan */
  o = (jit_fn_opts){.name = "cumsum", .n_args = 1, .n_results = 2};
  assert_int_equal(jit_compile(c, cumsum, NULL, &o, &f), JIT_OK);
  jit_array *xt = random_array(c, JIT_F32, 2, (const int64_t[]){8, 4}, 2, -1, 1);
  assert_int_equal(jit_fn_export_c(f, &xt, dir), JIT_EUNSUPPORTED);
  assert_non_null(strstr(jit_last_error(), "scan"));
  jit_array_free(xt);
  jit_array_free(xs);
  jit_array_free(x);
  jit_sharding_free(s);
  jit_mesh_free(m);
  jit_fn_free(f);
  jit_ctx_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_w2),
      cmocka_unit_test(test_w4),
      cmocka_unit_test(test_math),
      cmocka_unit_test(test_indexing),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
