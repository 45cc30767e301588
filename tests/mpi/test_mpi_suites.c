/* test_mpi_suites.c: the programs of the single-process sharding suites (tests/support/
 * spmd_programs.c: test_spmd's IR patterns and random programs, test_shard_map's collectives,
 * 2-D mesh, vmap and data-parallel training, test_sharded_call's MLP and resharding collectives,
 * test_sharding's device_put round trips and visualize goldens), run by mpirun on 1, 2 and 4
 * ranks over a mesh of 4 global devices (1 process x 4 devices, 2 x 2 or 4 x 1). Every result
 * must equal, bit for bit, the same program on one process with 4 devices (the layouts fix the
 * reduction order), with the same committed sharding, and match the unsharded call on one device
 * (bit for bit where the partitioned program sums in the same order, else within f32 rounding,
 * as the single-process suites check). What cannot work across processes fails with a message. */
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

#include "mpi/mpi_world.h"
#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "support/randprog.h"
#include "support/spmd_programs.h"
#include "trace/trace.h"

/* ---- running a program on a context and gathering its results ------------------------------- */
enum { MAX_RESULTS = 8 };

typedef struct outcome {
  int n;
  void *data[MAX_RESULTS];
  size_t bytes[MAX_RESULTS];
  char spec[MAX_RESULTS][64]; /* the result's committed spec, "" when uncommitted */
} outcome;

static void outcome_free(outcome *o) {
  for (int k = 0; k < o->n; k++) free(o->data[k]);
  o->n = 0;
}

/* Compiles fn on c, calls it on args and gathers every result (jit_array_to_host is collective
   in a distributed context: every rank gets the whole array). */
static void call_gather(jit_ctx *c, jit_trace_fn fn, void *user, int n_args, jit_array *const *args,
                        int n_results, outcome *o) {
  jit_fn *f = NULL;
  jit_fn_opts fo = {.name = "suite", .n_args = n_args, .n_results = n_results};
  assert_int_equal(jit_compile(c, fn, user, &fo, &f), JIT_OK);
  jit_array *r[MAX_RESULTS] = {NULL};
  if (jit_call(f, args, r) != JIT_OK)
    fail_msg("rank %d of %d: %s", mw_rank, mw_ranks, jit_last_error());
  o->n = n_results;
  for (int k = 0; k < n_results; k++) {
    o->bytes[k] = jit_array_nbytes(r[k]);
    o->data[k] = malloc(o->bytes[k] + 1);
    assert_non_null(o->data[k]);
    if (jit_array_to_host(r[k], o->data[k], o->bytes[k]) != JIT_OK)
      fail_msg("rank %d: result %d: %s", mw_rank, k, jit_last_error());
    o->spec[k][0] = '\0';
    if (r[k]->sharding) sharding_format_spec(r[k]->sharding, o->spec[k], sizeof o->spec[k]);
    jit_array_free(r[k]);
  }
  jit_fn_free(f);
}

/* Distributed against one process of as many devices: the same bits, the same layouts. */
static void expect_same(const outcome *dist, const outcome *ref, const char *what) {
  assert_int_equal(dist->n, ref->n);
  for (int k = 0; k < ref->n; k++) {
    if (strcmp(dist->spec[k], ref->spec[k]) != 0)
      fail_msg("rank %d of %d: %s: result %d is committed as \"%s\", one process's as \"%s\"",
               mw_rank, mw_ranks, what, k, dist->spec[k], ref->spec[k]);
    assert_int_equal(dist->bytes[k], ref->bytes[k]);
    if (memcmp(dist->data[k], ref->data[k], ref->bytes[k]) != 0)
      fail_msg("rank %d of %d: %s: result %d differs from one process's", mw_rank, mw_ranks, what,
               k);
  }
}

/* A mesh over c's 4 (global) devices, or over the given ones; axes "x", "y". */
typedef struct mesh_shape {
  int n_axes;
  int64_t sizes[2];
  const int *ids;
} mesh_shape;

static const int last_and_first[2] = {MW_DEVICES - 1, 0};
static const mesh_shape meshes[] = {
    {1, {4, 1}, NULL},          /* 4 x 1 processes: a line across every rank */
    {2, {2, 2}, NULL},          /* 2 x 2 */
    {1, {2, 1}, last_and_first}, /* the last and the first devices: middle ranks hold nothing */
};

static jit_mesh *mesh_on(jit_ctx *c, const mesh_shape *ms, const char *const *names) {
  static const char *const xy[2] = {"x", "y"};
  jit_mesh *m = NULL;
  if (jit_mesh_create(c, ms->n_axes, ms->sizes, names ? names : xy, ms->ids, &m) != JIT_OK)
    fail_msg("jit_mesh_create: %s", jit_last_error());
  return m;
}

/* host[i] of type types[i] onto c: placed by specs[i] over m, or uncommitted (m or specs[i]
   NULL) */
static void upload(jit_ctx *c, jit_mesh *m, int n, const ir_type *const *types,
                   void *const *host, const char *const *specs, jit_array **out) {
  for (int i = 0; i < n; i++) {
    jit_array *h = NULL;
    assert_int_equal(jit_array_from_host(c, types[i]->dtype, types[i]->rank, types[i]->dims,
                                         host[i], &h), JIT_OK);
    out[i] = h;
    if (!m || !specs[i]) continue;
    jit_sharding *s = NULL;
    assert_int_equal(jit_sharding_create(m, specs[i], &s), JIT_OK);
    if (jit_device_put(h, s, &out[i]) != JIT_OK) fail_msg("%s", jit_last_error());
    jit_sharding_free(s);
    jit_array_free(h);
  }
}

static void free_arrays(int n, jit_array **a) {
  for (int i = 0; i < n; i++) jit_array_free(a[i]);
}

/* ---- IR programs: test_spmd's patterns and random programs ------------------------------------ */
/* f's args, filled from a seed (the same on every rank) */
typedef struct ir_args {
  uint32_t n;
  const ir_type *types[8];
  void *host[8];
} ir_args;

static void ir_args_fill(const ir_func *f, uint64_t seed, ir_args *a) {
  assert_true(f->n_params <= 8 && f->n_results <= MAX_RESULTS);
  a->n = f->n_params;
  for (uint32_t i = 0; i < a->n; i++) {
    a->types[i] = ir_type_of(f, i);
    a->host[i] = malloc(sp_type_bytes(a->types[i]) + 1);
    sp_fill(a->types[i], a->host[i], &seed);
  }
}

static void ir_args_free(ir_args *a) {
  for (uint32_t i = 0; i < a->n; i++) free(a->host[i]);
}

/* f (through trace_replay, as tjit-run runs dumps) on c, its args placed by specs over m (or
   uncommitted) */
static void run_ir(jit_ctx *c, const ir_func *f, const ir_args *a, jit_mesh *m,
                   const char *const *specs, outcome *o) {
  jit_array *args[8];
  upload(c, m, (int)a->n, a->types, a->host, specs, args);
  call_gather(c, trace_replay, (void *)f, (int)a->n, args, (int)f->n_results, o);
  free_arrays((int)a->n, args);
}

/* f partitioned over the mesh ms by the given specs of its args (fixed, or NULL: random specs,
   seeded, each arg left uncommitted with probability `uncommitted` in 4) on the distributed
   context and on one process: the same bits and result specs; and within f32 rounding of
   `unsharded` (a split reduction sums in parts, in another order than one device) */
static void check_ir(const ir_func *f, const ir_args *a, const outcome *unsharded,
                     const mesh_shape *ms, const char *const *fixed, uint64_t seed,
                     int uncommitted, const char *what) {
  char spec_text[8][64];
  const char *specs[8];
  uint64_t s = seed;
  jit_mesh *ref_mesh = mesh_on(mw_ref, ms, NULL), *dist_mesh = mesh_on(mw_dist, ms, NULL);
  for (uint32_t i = 0; i < a->n; i++) {
    specs[i] = fixed ? fixed[i] : NULL;
    if (fixed || sp_rng(&s) % 4 < (uint64_t)uncommitted) continue;
    jit_sharding *sh = sp_random_sharding(ref_mesh, a->types[i], &s);
    sharding_format_spec(sh, spec_text[i], sizeof spec_text[i]);
    specs[i] = spec_text[i];
    jit_sharding_free(sh);
  }
  outcome dist, ref;
  run_ir(mw_dist, f, a, dist_mesh, specs, &dist);
  run_ir(mw_ref, f, a, ref_mesh, specs, &ref);
  char msg[160];
  snprintf(msg, sizeof msg, "%s over %dx%d", what, (int)ms->sizes[0], (int)ms->sizes[1]);
  expect_same(&dist, &ref, msg);
  for (uint32_t k = 0; k < f->n_results; k++)
    if (!sp_close_enough(ir_type_of(f, f->results[k]), dist.data[k], unsharded->data[k], msg))
      fail_msg("rank %d: %s: result %u differs from the unsharded call's", mw_rank, msg, k);
  outcome_free(&dist);
  outcome_free(&ref);
  jit_mesh_free(ref_mesh);
  jit_mesh_free(dist_mesh);
}

static ir_func *parse_one(const char *text) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  if (ir_parse(text, strlen(text), &fs, &n) != JIT_OK) fail_msg("%s", jit_last_error());
  assert_int_equal(n, 1);
  ir_func *f = fs[0];
  free(fs);
  return f;
}

/* f over the meshes [0, n_meshes) by random specs, then by each of the n_fixed sets of specs
   over 4x1; its unsharded result computed once */
static void check_ir_meshes(const ir_func *f, uint64_t seed, size_t n_meshes, int uncommitted,
                            int n_fixed, const char *const (*fixed)[3], const char *what) {
  ir_args a;
  ir_args_fill(f, seed, &a);
  outcome unsharded;
  run_ir(mw_one, f, &a, NULL, NULL, &unsharded);
  for (size_t mi = 0; mi < n_meshes; mi++)
    check_ir(f, &a, &unsharded, &meshes[mi], NULL, seed * 7 + mi, uncommitted, what);
  for (int k = 0; k < n_fixed; k++) check_ir(f, &a, &unsharded, &meshes[0], fixed[k], 0, 0, what);
  outcome_free(&unsharded);
  ir_args_free(&a);
}

/* matmul, batched matmul, softmax, data movement, an RNN (scan with sharded carry and xs), an
   MLP: each over 4x1 and 2x2 (the RNN also over the first and last devices: test_mpi_dist runs
   the matmul there), its args committed by random specs */
static void test_patterns(void **state) {
  (void)state;
  for (int p = 0; p < sp_n_patterns; p++) {
    ir_func *f = parse_one(sp_patterns[p]);
    bool rnn = strcmp(f->name, "rnn") == 0;
    /* the RNN's carry (f32[4,8]) and xs (f32[6,4,8]) split by the batch, then by the hidden
       units (each step's matmul then needs a collective), the weights replicated or split */
    static const char *const rnn_specs[2][3] = {{"x,_", "_,x,_", "_,_"}, {"_,x", "_,_,x", "x,_"}};
    char what[64];
    snprintf(what, sizeof what, "pattern @%s", f->name);
    check_ir_meshes(f, 100 * (uint64_t)p, rnn ? 3 : 2, 0, rnn ? 2 : 0, rnn_specs, what);
    ir_func_free(f);
  }
}

/* test_spmd's random programs (of every dtype), some args uncommitted */
static void test_random_programs(void **state) {
  (void)state;
  for (uint64_t i = 0; i < 4; i++) {
    bool exact[8];
    uint32_t nr;
    ir_func *f = rp_random_program(7000 + i, exact, &nr);
    char what[64];
    snprintf(what, sizeof what, "random program %llu", (unsigned long long)(7000 + i));
    check_ir_meshes(f, 31 * i + 5, 1 + i % 2, 1, 0, NULL, what);
    ir_func_free(f);
  }
}

/* ---- shard_map with each collective ------------------------------------------------------------ */
/* fn over a mesh of c shaped ms with axis names names, on one f32 arg x of the given shape */
static void run_sm(jit_ctx *c, const mesh_shape *ms, const char *const *names, jit_trace_fn fn,
                   int rank, const int64_t *shape, const float *x, int n_results, outcome *o) {
  jit_mesh *m = mesh_on(c, ms, names);
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(c, JIT_F32, rank, shape, x, &a), JIT_OK);
  call_gather(c, fn, m, 1, &a, n_results, o);
  jit_array_free(a);
  jit_mesh_free(m);
}

/* on the distributed context and on one process: the same bits; then the distributed results
   are checked as test_shard_map checks them */
static void run_sm_both(const mesh_shape *ms, jit_trace_fn fn, int rank, const int64_t *shape,
                        const float *x, int n_results, const char *what, outcome *dist) {
  outcome ref;
  run_sm(mw_dist, ms, NULL, fn, rank, shape, x, n_results, dist);
  run_sm(mw_ref, ms, NULL, fn, rank, shape, x, n_results, &ref);
  expect_same(dist, &ref, what);
  outcome_free(&ref);
}

static void test_shard_map_collectives(void **state) {
  (void)state;
  enum { R = 8, C = 3 };
  float x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (float)(i % 7) - 2.5f + 0.125f * (float)i;
  outcome o;
  run_sm_both(&meshes[0], sp_sm_collectives, 2, (const int64_t[]){R, C}, x, 4,
              "psum, pmean, all_gather, axis_index", &o);
  sp_check_sm_collectives(R, C, x, o.data[0], o.data[1], o.data[2], o.data[3]);
  outcome_free(&o);
}

static void test_shard_map_2d(void **state) {
  (void)state;
  float x[4 * 8];
  for (int i = 0; i < 32; i++) x[i] = (float)i;
  outcome o;
  run_sm_both(&meshes[1], sp_sm_rowsum, 2, (const int64_t[]){4, 8}, x, 2, "psum over y, x+y", &o);
  sp_check_sm_rowsum(2, 2, x, o.data[0], o.data[1]);
  outcome_free(&o);
}

static void test_vmap_of_shard_map(void **state) {
  (void)state;
  float x[3 * 8];
  for (int i = 0; i < 24; i++) x[i] = (float)(i * 3 % 11) - 4.0f;
  jit_trace_fn fns[2] = {sp_sm_vmap_outer, sp_sm_vmap_inner};
  for (int k = 0; k < 2; k++) {
    outcome o;
    run_sm_both(&meshes[0], fns[k], 2, (const int64_t[]){3, 8}, x, 2,
                k ? "vmap inside shard_map" : "vmap of shard_map", &o);
    sp_check_sm_vmap(3, x, o.data[0], o.data[1]);
    outcome_free(&o);
  }
}

/* ---- grad: a data-parallel training step, and grad through a sharded call ----------------- */
enum { TN = 32, TD = 6, TO = 2 };

/* 3 SGD steps, the weights fed back; x, y committed by rows over "data" when sharded (fn plain:
   grad through a partitioned call) or split by the shard_map (fn sharded); w_out the last
   weights, loss_out the 3 losses */
static void train(jit_ctx *c, jit_trace_fn fn, bool commit, float *w_out, float *loss_out) {
  static const char *const data[1] = {"data"};
  jit_mesh *m = c == mw_one ? NULL : mesh_on(c, &meshes[0], data); /* one device: no mesh */
  sp_train u = {m, 0.1f};
  float w[TD * TO], x[TN * TD], y[TN * TO];
  const ir_type tw = {.dtype = JIT_F32, .rank = 2, .dims = {TD, TO}};
  const ir_type tx = {.dtype = JIT_F32, .rank = 2, .dims = {TN, TD}};
  const ir_type ty = {.dtype = JIT_F32, .rank = 2, .dims = {TN, TO}};
  uint64_t s = 42;
  sp_fill(&tw, w, &s);
  sp_fill(&tx, x, &s);
  sp_fill(&ty, y, &s);
  const ir_type *types[3] = {&tw, &tx, &ty};
  const char *specs[3] = {"_,_", "data,_", "data,_"};
  jit_array *args[3];
  upload(c, commit ? m : NULL, 3, types, (void *const[]){w, x, y}, specs, args);
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "step", .n_args = 3, .n_results = 2};
  assert_int_equal(jit_compile(c, fn, &u, &o, &f), JIT_OK);
  for (int it = 0; it < 3; it++) {
    jit_array *r[2];
    if (jit_call(f, args, r) != JIT_OK) fail_msg("rank %d: step %d: %s", mw_rank, it, jit_last_error());
    assert_int_equal(jit_array_to_host(r[1], &loss_out[it], sizeof *loss_out), JIT_OK);
    jit_array_free(r[1]);
    jit_array_free(args[0]);
    args[0] = r[0];
  }
  assert_int_equal(jit_array_to_host(args[0], w_out, TD * TO * sizeof *w_out), JIT_OK);
  free_arrays(3, args);
  jit_fn_free(f);
  jit_mesh_free(m);
}

static void test_training(void **state) {
  (void)state;
  float w[4][TD * TO], loss[4][3];
  train(mw_one, sp_train_step_plain, false, w[0], loss[0]); /* the unsharded reference */
  jit_trace_fn fns[2] = {sp_train_step_sharded, sp_train_step_plain};
  for (int k = 0; k < 2; k++) {
    train(mw_dist, fns[k], k == 1, w[1], loss[1]);
    train(mw_ref, fns[k], k == 1, w[2], loss[2]);
    if (memcmp(w[1], w[2], sizeof w[1]) || memcmp(loss[1], loss[2], sizeof loss[1]))
      fail_msg("rank %d of %d: %s: the weights or losses differ from one process's", mw_rank,
               mw_ranks, k ? "grad through a sharded call" : "data-parallel shard_map");
    /* the mean of 4 per-device means (or a contracted batch dim split 4 ways) sums in another
       order than one device: within f32 rounding, as test_shard_map allows */
    for (int i = 0; i < TD * TO; i++) assert_true(fabsf(w[1][i] - w[0][i]) <= 1e-5f);
    for (int it = 0; it < 3; it++)
      assert_true(fabsf(loss[1][it] - loss[0][it]) <= 1e-5f * (1 + fabsf(loss[0][it])));
  }
}

/* ---- partitioned calls -------------------------------------------------------------------------- */
/* test_sharded_call's MLP under committed layouts: the same result specs and bits as one
   process, the unsharded values within f32 rounding (a split contracted dim) */
static void test_mlp(void **state) {
  (void)state;
  static const struct {
    int mesh;
    const char *specs[3];
  } cases[] = {
      {0, {"_,x", "x,_", NULL}}, /* contracted dim split: an all_reduce across processes */
      {1, {"x,_", "_,y", "_"}},  /* JAX's tutorial: the 2-D result */
      {2, {"x,_", NULL, NULL}},  /* 2 devices on the first and last processes */
  };
  const ir_type tx = {.dtype = JIT_F32, .rank = 2, .dims = {16, 12}};
  const ir_type tw = {.dtype = JIT_F32, .rank = 2, .dims = {12, 8}};
  const ir_type tb = {.dtype = JIT_F32, .rank = 1, .dims = {8}};
  const ir_type *types[3] = {&tx, &tw, &tb};
  float x[16 * 12], w[12 * 8], b[8];
  uint64_t s = 3;
  sp_fill(&tx, x, &s);
  sp_fill(&tw, w, &s);
  sp_fill(&tb, b, &s);
  void *const host[3] = {x, w, b};
  jit_array *args[3];
  outcome want;
  upload(mw_one, NULL, 3, types, host, NULL, args);
  call_gather(mw_one, sp_mlp, NULL, 3, args, 2, &want);
  free_arrays(3, args);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    outcome o[2];
    jit_ctx *ctxs[2] = {mw_dist, mw_ref};
    for (int c = 0; c < 2; c++) {
      jit_mesh *m = mesh_on(ctxs[c], &meshes[cases[k].mesh], NULL);
      upload(ctxs[c], m, 3, types, host, cases[k].specs, args);
      call_gather(ctxs[c], sp_mlp, NULL, 3, args, 2, &o[c]);
      free_arrays(3, args);
      jit_mesh_free(m);
    }
    char what[32];
    snprintf(what, sizeof what, "mlp case %zu", k);
    expect_same(&o[0], &o[1], what);
    const ir_type ty = {.dtype = JIT_F32, .rank = 2, .dims = {16, 8}}, t0 = {.dtype = JIT_F32};
    assert_true(sp_close_enough(&ty, o[0].data[0], want.data[0], what));
    assert_true(sp_close_enough(&t0, o[0].data[1], want.data[1], what));
    outcome_free(&o[0]);
    outcome_free(&o[1]);
  }
  outcome_free(&want);
}

/* all_gather, all_to_all, shard_slice, reduce_scatter, all_reduce (sum and max) across
   processes */
static void test_every_reshard(void **state) {
  (void)state;
  float want[SP_RESHARD_OUT], got[SP_RESHARD_OUT], ref[SP_RESHARD_OUT];
  sp_run_every_reshard(mw_one, NULL, want);
  jit_mesh *dm = mesh_on(mw_dist, &meshes[0], NULL), *rm = mesh_on(mw_ref, &meshes[0], NULL);
  sp_run_every_reshard(mw_dist, dm, got);
  sp_run_every_reshard(mw_ref, rm, ref);
  for (int i = 0; i < SP_RESHARD_OUT; i++)
    if (memcmp(&got[i], &ref[i], sizeof got[i]) != 0)
      fail_msg("rank %d of %d: the resharding collectives differ from one process's: result %d "
               "element %d is %.9g, not %.9g", mw_rank, mw_ranks, i / 64, i % 64, got[i], ref[i]);
  sp_check_every_reshard(got, want);
  jit_mesh_free(dm);
  jit_mesh_free(rm);
}

/* ---- placement ---------------------------------------------------------------------------------- */
/* test_sharding's device_put round trips on every mesh of at most 4 devices, across processes */
static void test_round_trips(void **state) {
  (void)state;
  sp_round_trips(mw_dist, MW_DEVICES, NULL);
}

/* A global array draws as test_sharding's golden of the same layout, on every rank (the drawing
   needs only the sharding, which every rank knows) */
static void test_visualize(void **state) {
  (void)state;
  static const char *const ab[2] = {"a", "b"};
  static const int perm[4] = {3, 1, 2, 0};
  const mesh_shape ms = {2, {2, 2}, perm};
  jit_ctx *ctxs[2] = {mw_dist, mw_ref};
  for (int c = 0; c < 2; c++) {
    jit_mesh *m = mesh_on(ctxs[c], &ms, ab);
    jit_array *host = sp_iota_f32(ctxs[c], 2, (const int64_t[]){4, 4}), *a = NULL;
    jit_sharding *s = NULL;
    assert_int_equal(jit_sharding_create(m, "a,b", &s), JIT_OK);
    assert_int_equal(jit_device_put(host, s, &a), JIT_OK);
    sp_expect_visualize_golden(a, "mesh2x2_permuted");
    jit_array_free(a);
    jit_array_free(host);
    jit_sharding_free(s);
    jit_mesh_free(m);
  }
}

/* ---- what one process holds alone -------------------------------------------------------------- */
static void sin_plus(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_add(t, jit_sin(t, a[0]), a[0]);
}

/* A call over process 0's devices alone is still every rank's call (the others run nothing);
   only process 0 reads its result, the others are told whose it is; a donated arg is consumed
   on every rank. */
static void test_one_process_mesh(void **state) {
  (void)state;
  static const int dev0[1] = {0};
  const mesh_shape ms = {1, {1, 1}, dev0};
  static const char *const x[1] = {"x"};
  jit_mesh *m = mesh_on(mw_dist, &ms, x);
  jit_sharding *s = NULL;
  assert_int_equal(jit_sharding_create(m, "x,_", &s), JIT_OK);
  jit_array *h = sp_iota_f32(mw_dist, 2, (const int64_t[]){4, 4}), *a = NULL, *r = NULL;
  assert_int_equal(jit_device_put(h, s, &a), JIT_OK);
  for (int donate = 0; donate < 2; donate++) {
    jit_fn *f = NULL;
    jit_fn_opts o = {.name = "sin_plus", .n_args = 1, .n_results = 1, .donate_mask = (uint64_t)donate};
    assert_int_equal(jit_compile(mw_dist, sin_plus, NULL, &o, &f), JIT_OK);
    if (jit_call(f, &a, &r) != JIT_OK) fail_msg("rank %d: %s", mw_rank, jit_last_error());
    float got[16], want[16];
    jit_status st = jit_array_to_host(r, got, sizeof got);
    if (mw_rank == 0) {
      assert_int_equal(st, JIT_OK);
      for (int i = 0; i < 16; i++) want[i] = sinf((float)i) + (float)i;
      for (int i = 0; i < 16; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-5f * (1 + want[i]));
    } else {
      assert_int_equal(st, JIT_EINVAL);
      assert_non_null(strstr(jit_last_error(), "lives on devices of process 0 only"));
    }
    if (donate) { /* the donated arg is gone on every rank: using it again is an error */
      jit_array *again = NULL;
      assert_int_equal(jit_call(f, &a, &again), JIT_EINVAL);
      assert_non_null(strstr(jit_last_error(), "donated"));
    }
    jit_array_free(r);
    jit_fn_free(f);
  }
  jit_array_free(a);
  jit_array_free(h);
  jit_sharding_free(s);
  jit_mesh_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_patterns),
      cmocka_unit_test(test_random_programs),
      cmocka_unit_test(test_shard_map_collectives),
      cmocka_unit_test(test_shard_map_2d),
      cmocka_unit_test(test_vmap_of_shard_map),
      cmocka_unit_test(test_training),
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_every_reshard),
      cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_visualize),
      cmocka_unit_test(test_one_process_mesh),
  };
  /* compiled kernels on every device; the interpreter under the sanitizers, where each compile
     takes seconds (4 ranks compiling ~80 signatures each outran the 300 s bound on 2 cores):
     there the compiled path across processes is test_mpi_dist's and test_mpi_transport's */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  int opt_level = 0;
#else
  int opt_level = 3;
#endif
  return mw_main("test_mpi_suites", opt_level, tests, sizeof tests / sizeof tests[0]);
}
