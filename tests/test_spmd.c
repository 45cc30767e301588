/* test_spmd.c: the partitioned IR: text of collectives and sharding ops, and the partitioner
 * checked by running its per-device programs in the SPMD interpreter (threads + collectives)
 * against the interpreter on the global program, for random programs, meshes and shardings. */
#define _POSIX_C_SOURCE 200809L
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

#include "ir/collectives.h"
#include "ir/ir.h"
#include "ir/passes/passes.h"
#include "runtime/exec.h"
#include "runtime/sharding.h"
#include "support/randprog.h"
#include "support/roundtrip.h"
#include "support/spmd_programs.h"

static ir_func *parse1(const char *text) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  if (st != JIT_OK) fail_msg("parse: %s", jit_last_error());
  assert_int_equal(n, 1);
  ir_func *f = fs[0];
  free(fs);
  return f;
}

static void expect_parse_error(const char *text, const char *needle) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  assert_int_equal(ir_parse(text, strlen(text), &fs, &n), JIT_EINVAL);
  if (!strstr(jit_last_error(), needle)) fail_msg("error '%s' lacks '%s'", jit_last_error(), needle);
}

static const char every_collective[] =
    "func @local(%0: f32[4,6], %1: f32[8]) -> (f32[4,6], f32[8,6], f32[2,6], f32[2,12], f32[4,6], "
    "f32[2,6], i32[], f32[8], f32[4,6]) mesh[x=2,y=4] {\n"
    "  %2 = all_reduce %0 over=[x,y] kind=max : f32[4,6]\n"
    "  %3 = all_gather %0 over=[x] dim=0 : f32[8,6]\n"
    "  %4 = reduce_scatter %0 over=[x] kind=sum dim=0 : f32[2,6]\n"
    "  %5 = all_to_all %0 over=[x] dim=0 dim2=1 : f32[2,12]\n"
    "  %6 = collective_permute %0 over=[y] shift=-1 : f32[4,6]\n"
    "  %7 = shard_slice %0 over=[x] dim=0 : f32[2,6]\n"
    "  %8 = axis_index over=[y] : i32[]\n"
    "  %9 = sharding %1 {mesh[x=2,y=4] \"x+y\"} : f32[8]\n"
    "  %10 = all_reduce %0 over=[y] kind=min : f32[4,6]\n"
    "  return %2, %3, %4, %5, %6, %7, %8, %9, %10\n"
    "}\n";

static void test_text(void **state) {
  (void)state;
  ir_func *f = parse1(every_collective);
  assert_non_null(f->mesh);
  assert_int_equal(f->ins[3].attr.coll.group, 2);
  assert_int_equal(f->ins[2].attr.coll.group, 8);
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  assert_string_equal(text, every_collective);
  free(text);
  ir_func_free(f);

  expect_parse_error("func @f(%0: f32[4]) -> f32[4] {\n  %1 = all_reduce %0 over=[x] kind=sum : f32[4]\n"
                     "  return %1\n}\n",
                     "needs the function's mesh");
  expect_parse_error("func @f(%0: f32[4]) -> f32[4] mesh[x=2] {\n  %1 = all_reduce %0 over=[y] kind=sum : f32[4]\n"
                     "  return %1\n}\n",
                     "no mesh axis 'y'");
  expect_parse_error("func @f(%0: f32[4]) -> f32[4] mesh[x=2] {\n  %1 = all_gather %0 over=[x] dim=0 : f32[4]\n"
                     "  return %1\n}\n",
                     "differs from the inferred f32[8]");
  expect_parse_error("func @f(%0: f32[5]) -> f32[5] mesh[x=2] {\n  %1 = shard_slice %0 over=[x] dim=0 : f32[2]\n"
                     "  return %1\n}\n",
                     "does not split into 2 equal parts");
  expect_parse_error("func @f(%0: f32[4]) -> f32[4] mesh[x=2,x=2] {\n  return %0\n}\n", "given twice");
  expect_parse_error("func @f(%0: f32[4,2]) -> f32[4,2] {\n  %1 = sharding %0 {mesh[x=2] \"x\"} : f32[4,2]\n"
                     "  return %1\n}\n",
                     "rank 1");
  expect_parse_error("func @f(%0: f32[4]) -> f32[4] {\n  %1 = sharding %0 {mesh[x=2] \"z\"} : f32[4]\n"
                     "  return %1\n}\n",
                     "z");
}

/* Malformed text (random edits of valid functions with meshes, collectives, a shard_map and a
   scan) gets a status and a message, never a crash or a leak (the ASan build checks). */
static const char nested_text[] =
    "func @colsum(%0: f32[8,3], %1: f32[5,3]) -> (f32[3], f32[3]) {\n"
    "  %2 = shard_map %0 mesh[x=4] in=[\"x,_\"] out=[\"_\"] : (f32[3]) {\n"
    "      func @body(%0: f32[2,3]) -> f32[3] mesh[x=4] {\n"
    "        %1 = reduce_sum %0 axes=[0] : f32[3]\n"
    "        %2 = all_reduce %1 over=[x] kind=sum : f32[3]\n"
    "        return %2\n"
    "      }\n"
    "  }\n"
    "  %3 = get %2 index=0 : f32[3]\n"
    "  %4 = scan %1 consts=0 carry=0 length=5 : (f32[5,3]) {\n"
    "      func @step(%0: f32[3]) -> f32[3] {\n"
    "        %1 = sharding %0 {mesh[x=3] \"x\"} : f32[3]\n"
    "        return %1\n"
    "      }\n"
    "  }\n"
    "  %5 = get %4 index=0 : f32[5,3]\n"
    "  %6 = reduce_sum %5 axes=[0] : f32[3]\n"
    "  return %3, %6\n"
    "}\n";

static void test_malformed_text(void **state) {
  (void)state;
  static const char *const seeds[] = {every_collective, nested_text};
  static const char *const pieces[] = {"%", "[", "]", "{", "}", "\"", ",", "=", ":", "+", "_", "x",
                                       "0", "9", "-", "@", " ", "\n", "mesh", "over", "in=", "out=",
                                       "shard_map", "get", "scan", "func", "sharding", "kind=sum"};
  ir_func *f = parse1(nested_text); /* the seeds themselves are valid */
  assert_ir_roundtrip(f);
  ir_func_free(f);
  uint64_t s = 99;
  int parsed = 0;
  for (int i = 0; i < 3000; i++) {
    const char *seed = seeds[i % 2];
    size_t n = strlen(seed);
    char *t = malloc(n + 64 * 8 + 1);
    memcpy(t, seed, n + 1);
    int edits = 1 + (int)(sp_rng(&s) % 4);
    for (int e = 0; e < edits; e++) {
      size_t len = strlen(t), at = (size_t)(sp_rng(&s) % (len + 1));
      const char *p = pieces[sp_rng(&s) % (sizeof pieces / sizeof pieces[0])];
      if (sp_rng(&s) % 3 == 0 && len > 0) { /* delete a byte */
        memmove(t + at - (at == len), t + at + 1 - (at == len), len - at + (at == len));
      } else { /* insert a piece */
        size_t pl = strlen(p);
        memmove(t + at + pl, t + at, len - at + 1);
        memcpy(t + at, p, pl);
      }
    }
    ir_func **fs = NULL;
    uint32_t nf = 0;
    jit_status st = ir_parse(t, strlen(t), &fs, &nf);
    if (st == JIT_OK) {
      parsed++;
      for (uint32_t k = 0; k < nf; k++) ir_func_free(fs[k]);
      free(fs);
    } else {
      assert_int_not_equal(jit_last_error()[0], '\0');
    }
    free(t);
  }
  assert_true(parsed < 3000); /* the edits did break most of them */
}

/* ---- the SPMD differential test --------------------------------------------------------------- */

/* Copies the block at start (of shape size) between a global row-major buffer and a local one. */
static void copy_block(const ir_type *t, const int64_t *start, const int64_t *size, void *global,
                       void *local, bool to_local) {
  size_t es = jit_dtype_size(t->dtype);
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) n *= size[d];
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, g = 0, idx[IR_MAX_RANK];
    for (int d = t->rank; d-- > 0;) {
      idx[d] = r % size[d];
      r /= size[d];
    }
    for (int d = 0; d < t->rank; d++) g = g * t->dims[d] + start[d] + idx[d];
    if (to_local) memcpy((char *)local + i * (int64_t)es, (char *)global + g * (int64_t)es, es);
    else memcpy((char *)global + g * (int64_t)es, (char *)local + i * (int64_t)es, es);
  }
}

/* The compiled path: the local program built into an executable, each device on a thread of its
   own running exec_run_device, collectives through a world, as jit_call does. */
static jit_ctx *compiled_ctx;

typedef struct dev_run {
  exec *e;
  coll_world *w;
  int d, n;
  const void *const *args;
  void *const *res;
  jit_status st;
  char msg[256];
} dev_run;

static jit_status hook(void *ctx, int pos, ir_op op, const ir_coll *c, const ir_type *t,
                       const void *in, void *out) {
  return coll_world_run(ctx, pos, op, c, t, in, out);
}

static void *dev_main(void *arg) {
  dev_run *r = arg;
  ir_device dev = {r->d, hook, r->w};
  ir_set_thread_device(&dev);
  r->st = exec_run_device(r->e, r->d, r->n, r->args, NULL, r->res);
  if (r->st) snprintf(r->msg, sizeof r->msg, "%s", jit_last_error());
  ir_set_thread_device(NULL);
  return NULL;
}

static void run_compiled(const ir_spmd *p, const void ***largs, void ***lres, const char *what) {
  int nd = p->mesh->n_devices;
  exec *e = NULL;
  exec_stats es = {0};
  if (exec_build(compiled_ctx, p->local, &e, &es) != JIT_OK) fail_msg("%s: build: %s", what, jit_last_error());
  coll_world *w = NULL;
  assert_int_equal(coll_world_new(p->local->mesh, &w), JIT_OK);
  dev_run *runs = calloc((size_t)nd, sizeof *runs);
  pthread_t *th = calloc((size_t)nd, sizeof *th);
  for (int d = 0; d < nd; d++) {
    runs[d] = (dev_run){e, w, d, nd, largs[d], lres[d], JIT_OK, ""};
    assert_int_equal(pthread_create(&th[d], NULL, dev_main, &runs[d]), 0);
  }
  for (int d = 0; d < nd; d++) pthread_join(th[d], NULL);
  for (int d = 0; d < nd; d++)
    if (runs[d].st) fail_msg("%s: device %d: %s", what, d, runs[d].msg);
  free(runs);
  free(th);
  coll_world_free(w);
  exec_free(e);
}

/* Runs f globally and partitioned over m with the given arg shardings (in the SPMD interpreter,
   and compiled when asked); compares results. */
static bool check_partitioned(const ir_func *f, jit_mesh *m, jit_sharding *const *arg_sh,
                              uint64_t seed, bool compiled, const char *what) {
  bool ok = true;
  uint32_t np = f->n_params, nr = f->n_results;
  int nd = m->n_devices;
  uint64_t s = seed;
  void **gargs = calloc(np + 1, sizeof *gargs), **gres = calloc(nr + 1, sizeof *gres);
  void **pres = calloc(nr + 1, sizeof *pres);
  for (uint32_t i = 0; i < np; i++) {
    gargs[i] = malloc(sp_type_bytes(ir_type_of(f, i)) + 1);
    sp_fill(ir_type_of(f, i), gargs[i], &s);
  }
  for (uint32_t k = 0; k < nr; k++) {
    gres[k] = malloc(sp_type_bytes(ir_type_of(f, f->results[k])) + 1);
    pres[k] = calloc(1, sp_type_bytes(ir_type_of(f, f->results[k])) + 1);
  }
  assert_int_equal(ir_interp(f, (const void *const *)gargs, gres), JIT_OK);

  ir_spmd *p = NULL;
  jit_status st = ir_partition(f, m, arg_sh, &p);
  if (st != JIT_OK) fail_msg("%s: partition: %s", what, jit_last_error());
  st = ir_verify(p->local, "partition");
  if (st != JIT_OK) {
    ir_print(f, stderr);
    ir_spmd_print(p, stderr);
    fail_msg("%s: %s", what, jit_last_error());
  }
  /* per device: its blocks of the args, buffers for its results */
  const void ***largs = calloc((size_t)nd, sizeof *largs);
  void ***lres = calloc((size_t)nd, sizeof *lres);
  for (int d = 0; d < nd; d++) {
    largs[d] = calloc(np + 1, sizeof **largs);
    lres[d] = calloc(nr + 1, sizeof **lres);
    for (uint32_t i = 0; i < np; i++) {
      const ir_type *t = ir_type_of(f, i);
      int64_t start[IR_MAX_RANK], size[IR_MAX_RANK];
      sharding_shard_box(p->param_shardings[i], t->dims, d, start, size);
      void *b = malloc(sp_type_bytes(ir_type_of(p->local, i)) + 1);
      copy_block(t, start, size, gargs[i], b, true);
      largs[d][i] = b;
    }
    for (uint32_t k = 0; k < nr; k++)
      lres[d][k] = malloc(sp_type_bytes(ir_type_of(p->local, p->local->results[k])) + 1);
  }
  for (int pass = 0; pass < (compiled ? 2 : 1) && ok; pass++) {
  if (pass == 0) {
    st = ir_interp_spmd(p, (const void *const *const *)largs, (void *const *const *)lres);
    if (st != JIT_OK) fail_msg("%s: interp_spmd: %s", what, jit_last_error());
  } else {
    run_compiled(p, largs, lres, what);
  }
  for (uint32_t k = 0; k < nr && ok; k++) {
    const ir_type *t = ir_type_of(f, f->results[k]);
    for (int d = 0; d < nd; d++) {
      int64_t start[IR_MAX_RANK], size[IR_MAX_RANK];
      sharding_shard_box(p->result_shardings[k], t->dims, d, start, size);
      copy_block(t, start, size, pres[k], lres[d][k], false);
    }
    char msg[128];
    snprintf(msg, sizeof msg, "%s: result %u (%s)", what, k, pass ? "compiled" : "interpreted");
    ok = sp_close_enough(t, pres[k], gres[k], msg);
  }
  }
  if (!ok) {
    ir_print(f, stderr);
    ir_spmd_print(p, stderr);
  }
  for (int d = 0; d < nd; d++) {
    for (uint32_t i = 0; i < np; i++) free((void *)largs[d][i]);
    for (uint32_t k = 0; k < nr; k++) free(lres[d][k]);
    free(largs[d]);
    free(lres[d]);
  }
  free(largs);
  free(lres);
  for (uint32_t i = 0; i < np; i++) free(gargs[i]);
  for (uint32_t k = 0; k < nr; k++) {
    free(gres[k]);
    free(pres[k]);
  }
  free(gargs);
  free(gres);
  free(pres);
  ir_spmd_free(p);
  return ok;
}

typedef struct mesh_shape {
  int n;
  int64_t sizes[2];
} mesh_shape;
static const mesh_shape meshes[] = {{1, {1}}, {1, {2}}, {1, {4}}, {1, {8}},
                                    {2, {2, 2}}, {2, {2, 4}}, {2, {4, 2}}};

static jit_mesh *make_mesh(const mesh_shape *ms) {
  static const char *const names[] = {"x", "y"};
  jit_mesh *m = NULL;
  assert_int_equal(mesh_new(NULL, 0, ms->n, ms->sizes, names, NULL, "test", &m), JIT_OK);
  return m;
}

static void test_random_programs(void **state) {
  (void)state;
  const char *env = getenv("TJIT_TEST_PROGRAMS");
  long n = env ? atol(env) / 4 : 250;
  int failures = 0;
  for (long i = 0; i < n && failures < 3; i++) {
    uint64_t seed = 7000 + (uint64_t)i, s = seed;
    bool exact[8];
    uint32_t nr;
    ir_func *f = rp_random_program(seed, exact, &nr);
    assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
    jit_mesh *m = make_mesh(&meshes[sp_rng(&s) % (sizeof meshes / sizeof meshes[0])]);
    jit_sharding *sh[8] = {0};
    for (uint32_t a = 0; a < f->n_params; a++)
      if (sp_rng(&s) % 4) sh[a] = sp_random_sharding(m, ir_type_of(f, a), &s);
    char what[64];
    snprintf(what, sizeof what, "random program %llu", (unsigned long long)seed);
    /* compiling costs ~50 ms a program: every third one also runs compiled */
    if (!check_partitioned(f, m, sh, seed, i % 3 == 0, what)) failures++;
    for (uint32_t a = 0; a < f->n_params; a++) sharding_unref(sh[a]);
    jit_mesh_free(m);
    ir_func_free(f);
  }
  assert_int_equal(failures, 0);
}

/* Hand-picked patterns: each with every sharding of its args over 1-D and 2-D meshes. */
static void test_patterns(void **state) {
  (void)state;
  for (size_t pi = 0; pi < (size_t)sp_n_patterns; pi++) {
    ir_func *f = parse1(sp_patterns[pi]);
    for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; mi++) {
      jit_mesh *m = make_mesh(&meshes[mi]);
      for (uint64_t trial = 0; trial < 12; trial++) {
        uint64_t s = pi * 1000 + mi * 100 + trial;
        jit_sharding *sh[8] = {0};
        for (uint32_t a = 0; a < f->n_params; a++) sh[a] = sp_random_sharding(m, ir_type_of(f, a), &s);
        char what[96];
        snprintf(what, sizeof what, "@%s mesh %zu trial %llu", f->name, mi, (unsigned long long)trial);
        assert_true(check_partitioned(f, m, sh, s, trial < 3, what));
        for (uint32_t a = 0; a < f->n_params; a++) sharding_unref(sh[a]);
      }
      jit_mesh_free(m);
    }
    ir_func_free(f);
  }
}

/* JAX's tutorial: a row-sharded lhs times a column-sharded rhs is the 2-D sharding, with no
   communication; sin keeps its operand's sharding. */
static void test_no_communication(void **state) {
  (void)state;
  ir_func *f = parse1("func @f(%0: f32[8,4], %1: f32[4,8]) -> f32[8,8] {\n"
                      "  %2 = dot %0, %1 contract=[1]x[0] : f32[8,8]\n"
                      "  %3 = sin %2 : f32[8,8]\n  return %3\n}\n");
  jit_mesh *m = make_mesh(&meshes[5]);
  jit_sharding *sh[2] = {NULL, NULL};
  assert_int_equal(sharding_parse(m, "x,_", "t", &sh[0]), JIT_OK);
  assert_int_equal(sharding_parse(m, "_,y", "t", &sh[1]), JIT_OK);
  ir_spmd *p = NULL;
  assert_int_equal(ir_partition(f, m, sh, &p), JIT_OK);
  for (uint32_t r = 0; r < p->local->n_ins; r++)
    assert_false(ir_op_is_collective(p->local->ins[r].op));
  char spec[64];
  sharding_format_spec(p->result_shardings[0], spec, sizeof spec);
  assert_string_equal(spec, "x,y");
  ir_spmd_free(p);
  sharding_unref(sh[0]);
  sharding_unref(sh[1]);
  jit_mesh_free(m);
  ir_func_free(f);
}

static int setup(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2;
  return jit_ctx_create(&o, &compiled_ctx) == JIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  jit_ctx_destroy(compiled_ctx);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text),
      cmocka_unit_test(test_malformed_text),
      cmocka_unit_test(test_no_communication),
      cmocka_unit_test(test_patterns),
      cmocka_unit_test(test_random_programs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
