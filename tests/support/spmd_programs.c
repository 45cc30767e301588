/* spmd_programs.c: the shared sharded programs of spmd_programs.h. */
#define _POSIX_C_SOURCE 200809L
#include "spmd_programs.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/sharding.h"
#include "support/optest.h"

/* ---- random data and shardings -------------------------------------------------------------- */
uint64_t sp_rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

size_t sp_type_bytes(const ir_type *t) { return (size_t)ir_type_numel(t) * jit_dtype_size(t->dtype); }

void sp_fill(const ir_type *t, void *buf, uint64_t *s) {
  int64_t n = ir_type_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(sp_rng(s) >> 11) * 0x1p-53;
    double v = ir_dtype_is_float(t->dtype) ? 4 * u - 2 : floor(8 * u) - 3;
    if (t->dtype == JIT_U8 || t->dtype == JIT_BOOL) v = fabs(v) > 1 ? 1 : 0;
    ir_store_f64(t->dtype, buf, i, v);
  }
}

static double tol_of(jit_dtype dt) {
  switch (dt) {
  case JIT_F64: return 1e-9;
  case JIT_F32: return 2e-4;
  case JIT_F16: return 2e-2;
  case JIT_BF16: return 6e-2;
  default: return 0;
  }
}

bool sp_close_enough(const ir_type *t, const void *got, const void *want, const char *what) {
  int64_t n = ir_type_numel(t);
  double tol = tol_of(t->dtype);
  for (int64_t i = 0; i < n; i++) {
    double a = ir_load_f64(t->dtype, got, i), b = ir_load_f64(t->dtype, want, i);
    if (isnan(a) && isnan(b)) continue;
    if (a == b) continue;
    if (!(fabs(a - b) <= tol * (1 + fabs(b)))) {
      print_error("%s: element %lld: got %.9g, want %.9g\n", what, (long long)i, a, b);
      return false;
    }
  }
  return true;
}

jit_sharding *sp_random_sharding(jit_mesh *m, const ir_type *t, uint64_t *s) {
  uint8_t n[JIT_MAX_RANK] = {0}, ax[JIT_MAX_RANK][JIT_MAX_MESH_AXES] = {{0}};
  unsigned used = 0;
  for (int d = 0; d < t->rank; d++) {
    int a = (int)(sp_rng(s) % (uint64_t)(m->n_axes + 1)) - 1;
    if (a < 0 || (used >> a & 1) || t->dims[d] % m->sizes[a]) continue;
    n[d] = 1;
    ax[d][0] = (uint8_t)a;
    used |= 1u << a;
    /* sometimes a second axis on the same dim (x+y) */
    int b = (int)(sp_rng(s) % (uint64_t)m->n_axes);
    if (sp_rng(s) % 3 == 0 && !(used >> b & 1) && t->dims[d] % (m->sizes[a] * m->sizes[b]) == 0) {
      ax[d][n[d]++] = (uint8_t)b;
      used |= 1u << b;
    }
  }
  jit_sharding *sh = NULL;
  assert_int_equal(sharding_new(m, t->rank, n, (const uint8_t(*)[JIT_MAX_MESH_AXES])ax, &sh), JIT_OK);
  return sh;
}

/* ---- IR patterns ------------------------------------------------------------------------------ */
const char *const sp_patterns[] = {
    "func @mm(%0: f32[8,12], %1: f32[12,4]) -> f32[8,4] {\n"
    "  %2 = dot %0, %1 contract=[1]x[0] : f32[8,4]\n  return %2\n}\n",
    "func @bmm(%0: f32[4,8,6], %1: f32[4,6,2]) -> f32[4,8,2] {\n"
    "  %2 = dot %0, %1 batch=[0]x[0] contract=[2]x[1] : f32[4,8,2]\n  return %2\n}\n",
    "func @softmax(%0: f32[8,16]) -> f32[8,16] {\n"
    "  %1 = reduce_max %0 axes=[1] : f32[8]\n"
    "  %2 = broadcast %1 dims=[0] : f32[8,16]\n"
    "  %3 = sub %0, %2 : f32[8,16]\n"
    "  %4 = exp %3 : f32[8,16]\n"
    "  %5 = reduce_sum %4 axes=[1] : f32[8]\n"
    "  %6 = broadcast %5 dims=[0] : f32[8,16]\n"
    "  %7 = div %4, %6 : f32[8,16]\n  return %7\n}\n",
    "func @moves(%0: f32[8,4], %1: f32[4,8]) -> (f32[4,8], f32[2,4,4], f32[8,8], f32[4,4]) {\n"
    "  %2 = transpose %0 perm=[1,0] : f32[4,8]\n"
    "  %3 = add %2, %1 : f32[4,8]\n"
    "  %4 = reshape %0 : f32[2,4,4]\n"
    "  %5 = concat %2, %1 axis=0 : f32[8,8]\n"
    "  %6 = slice %0 start=[2,0] limit=[6,4] stride=[1,1] : f32[4,4]\n"
    "  return %3, %4, %5, %6\n}\n",
    "func @rnn(%0: f32[4,8], %1: f32[6,4,8], %2: f32[8,8]) -> (f32[4,8], f32[6,4,8], f32[]) {\n"
    "  %3 = scan %2, %0, %1 consts=1 carry=1 length=6 : (f32[4,8], f32[6,4,8]) {\n"
    "      func @body(%0: f32[8,8], %1: f32[4,8], %2: f32[4,8]) -> (f32[4,8], f32[4,8]) {\n"
    "        %3 = dot %1, %0 contract=[1]x[0] : f32[4,8]\n"
    "        %4 = add %3, %2 : f32[4,8]\n"
    "        %5 = tanh %4 : f32[4,8]\n"
    "        return %5, %5\n"
    "      }\n"
    "  }\n"
    "  %4 = get %3 index=0 : f32[4,8]\n"
    "  %5 = get %3 index=1 : f32[6,4,8]\n"
    "  %6 = reduce_sum %5 axes=[0,1,2] : f32[]\n"
    "  return %4, %5, %6\n}\n",
    "func @mlp(%0: f32[8,16], %1: f32[16,8], %2: f32[8]) -> f32[] {\n"
    "  %3 = dot %0, %1 contract=[1]x[0] : f32[8,8]\n"
    "  %4 = broadcast %2 dims=[1] : f32[8,8]\n"
    "  %5 = add %3, %4 : f32[8,8]\n"
    "  %6 = max %5, %5 : f32[8,8]\n"
    "  %7 = reduce_sum %6 axes=[0,1] : f32[]\n  return %7\n}\n",
};
const int sp_n_patterns = (int)(sizeof sp_patterns / sizeof sp_patterns[0]);

/* ---- shard_map programs ----------------------------------------------------------------------- */
/* per block x_b [R/4, C]: colsum = psum(sum_0 x_b), mean = pmean(x_b), all = all_gather(x_b, 0),
   idx = axis_index * 1 laid out per device */
static void collectives_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_psum(t, jit_reduce_sum(t, a[0], 1, (const int[]){0}), "x");
  r[1] = jit_pmean(t, a[0], "x");
  r[2] = jit_all_gather(t, a[0], "x", 0);
  r[3] = jit_reshape(t, jit_convert(t, jit_axis_index(t, "x"), JIT_F32), 1, (const int64_t[]){1});
}

void sp_sm_collectives(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const char *in[1] = {"x,_"}, *out[4] = {"_", "_,_", "_,_", "x"};
  jit_shard_map(t, collectives_body, NULL, user, 1, a, in, 4, r, out);
}

void sp_check_sm_collectives(int rows, int cols, const float *x, const float *colsum,
                             const float *mean, const float *all, const float *idx) {
  int per = rows / 4;
  for (int j = 0; j < cols; j++) {
    double s = 0;
    for (int i = 0; i < rows; i++) s += x[i * cols + j];
    assert_true(fabs(colsum[j] - s) < 1e-4 * (1 + fabs(s)));
  }
  for (int i = 0; i < per; i++)
    for (int j = 0; j < cols; j++) {
      double s = 0;
      for (int d = 0; d < 4; d++) s += x[(d * per + i) * cols + j];
      assert_true(fabs(mean[i * cols + j] - s / 4) < 1e-5 * (1 + fabs(s)));
    }
  assert_memory_equal(all, x, (size_t)rows * (size_t)cols * sizeof *x);
  for (int d = 0; d < 4; d++) assert_true(idx[d] == (float)d);
}

/* A 2-D mesh: psum over y only sums the blocks of one row of devices. */
static void rowsum_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_psum(t, a[0], "y");
  r[1] = jit_psum(t, a[0], "x,y");
}

void sp_sm_rowsum(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const char *in[1] = {"x,y"}, *out[2] = {"x,_", "_,_"};
  jit_shard_map(t, rowsum_body, NULL, user, 1, a, in, 2, r, out);
}

/* x f32[4, 8] (small integers: every sum is exact, in any order): block (i, j) is rows
   br*i.., cols bc*j..; psum over y adds the my blocks of a row of devices */
void sp_check_sm_rowsum(int64_t mx, int64_t my, const float *x, const float *rows,
                        const float *all) {
  int64_t br = 4 / mx, bc = 8 / my;
  for (int64_t row = 0; row < 4; row++)
    for (int64_t k = 0; k < bc; k++) {
      float s = 0;
      for (int64_t j = 0; j < my; j++) s += x[row * 8 + bc * j + k];
      assert_true(rows[row * bc + k] == s);
    }
  for (int64_t rr = 0; rr < br; rr++)
    for (int64_t k = 0; k < bc; k++) {
      float s = 0;
      for (int64_t i = 0; i < mx; i++)
        for (int64_t j = 0; j < my; j++) s += x[(br * i + rr) * 8 + bc * j + k];
      assert_true(all[rr * bc + k] == s);
    }
}

/* per example x [8]: blocks of 2 over x=4, s = psum(sum(block)) (the example's total) and the
   block times the device's index */
static void vm_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  r[0] = jit_psum(t, jit_reduce_sum(t, a[0], 1, (const int[]){0}), "x");
  r[1] = jit_mul(t, a[0], jit_convert(t, jit_axis_index(t, "x"), JIT_F32));
}

static void vm_example(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const char *in[1] = {"x"}, *out[2] = {"", "x"};
  jit_shard_map(t, vm_body, NULL, user, 1, a, in, 2, r, out);
}

/* vmap over the shard_map: the batch is a new unsplit dim of every block */
void sp_sm_vmap_outer(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_vmap(t, vm_example, user, 1, a, (const int[]){0}, 2, r, (const int[]){0, 0});
}

/* vmap inside the body: the collectives are batched */
static void vm_inner_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  jit_vmap(t, vm_body, user, 1, a, (const int[]){0}, 2, r, (const int[]){0, 0});
}

void sp_sm_vmap_inner(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const char *in[1] = {"_,x"}, *out[2] = {"_", "_,x"};
  jit_shard_map(t, vm_inner_body, NULL, user, 1, a, in, 2, r, out);
}

/* x holds small integers: the totals are exact in any order */
void sp_check_sm_vmap(int batch, const float *x, const float *tot, const float *scaled) {
  for (int b = 0; b < batch; b++) {
    float s = 0;
    for (int i = 0; i < 8; i++) s += x[b * 8 + i];
    assert_true(tot[b] == s);
    for (int i = 0; i < 8; i++) assert_true(scaled[b * 8 + i] == x[b * 8 + i] * (float)(i / 2));
  }
}

/* loss = mean((x @ w - y)^2) on one device's examples */
static void loss_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val d = jit_sub(t, jit_matmul(t, a[1], a[0]), a[2]);
  r[0] = jit_mul(t, jit_reduce_sum(t, jit_mul(t, d, d), 2, (const int[]){0, 1}),
                 jit_scalar(t, 1.0 / (double)(jit_val_shape(t, d)[0] * jit_val_shape(t, d)[1])));
}

static void step_body(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const sp_train *u = user;
  jit_val vg[2];
  jit_value_and_grad(t, loss_fn, NULL, 3, a, 1, 0, vg);
  jit_val g = jit_pmean(t, vg[1], "data");
  r[0] = jit_sub(t, a[0], jit_mul(t, g, jit_scalar(t, u->lr)));
  r[1] = jit_pmean(t, vg[0], "data");
}

void sp_train_step_sharded(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  sp_train *u = user;
  const char *in[3] = {"_,_", "data,_", "data,_"}, *out[2] = {"_,_", ""};
  jit_shard_map(t, step_body, u, u->m, 3, a, in, 2, r, out);
}

void sp_train_step_plain(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const sp_train *u = user;
  jit_val vg[2];
  jit_value_and_grad(t, loss_fn, NULL, 3, a, 1, 0, vg);
  r[0] = jit_sub(t, a[0], jit_mul(t, vg[1], jit_scalar(t, u->lr)));
  r[1] = vg[0];
}

/* ---- partitioned calls ------------------------------------------------------------------------ */
void sp_mlp(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val y = jit_relu(t, jit_add(t, jit_matmul(t, a[0], a[1]), a[2]));
  r[0] = jit_sin(t, y);
  r[1] = jit_reduce_sum(t, y, 2, (const int[]){0, 1});
}

/* jit_with_sharding_constraint, or v as it is when s is NULL (the unsharded reference) */
static jit_val constrain(jit_trace *t, jit_val v, const jit_sharding *s) {
  return s ? jit_with_sharding_constraint(t, v, s) : v;
}

typedef struct reshard_user {
  jit_sharding *rows, *cols, *rep, *rep1; /* "x,_", "_,x", "_,_", "_"; NULL: no constraints */
} reshard_user;

static void every_reshard(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  const reshard_user *u = user;
  jit_val x = a[0], w = a[1];
  jit_val g = constrain(t, jit_exp(t, x), u->rows);
  r[0] = constrain(t, jit_add(t, g, g), u->rep);            /* all_gather */
  r[1] = constrain(t, jit_sin(t, g), u->cols);              /* all_to_all */
  jit_val h = constrain(t, jit_cos(t, x), u->rep);
  r[2] = constrain(t, jit_mul(t, h, h), u->rows);           /* shard_slice */
  jit_val wr = constrain(t, w, u->rows);
  jit_val p = jit_matmul(t, constrain(t, x, u->cols), wr);
  r[3] = constrain(t, p, u->rows);                          /* reduce_scatter */
  jit_val q = jit_matmul(t, constrain(t, jit_tanh(t, x), u->cols), wr);
  r[4] = constrain(t, q, u->rep);                           /* all_reduce */
  jit_val m = constrain(t, jit_abs(t, x), u->rows);
  r[5] = constrain(t, jit_reduce_max(t, m, 1, (const int[]){0}), u->rep1); /* all_reduce max */
}

static const char *const reshard_collectives[] = {"all_gather", "all_to_all", "shard_slice",
                                                  "reduce_scatter", "all_reduce", "kind=max"};

void sp_run_every_reshard(jit_ctx *c, const jit_mesh *m, float *out) {
  reshard_user u = {NULL, NULL, NULL, NULL};
  memset(out, 0, SP_RESHARD_OUT * sizeof *out); /* result 5 fills 8 of its 64 */
  if (m) {
    assert_int_equal(jit_sharding_create(m, "x,_", &u.rows), JIT_OK);
    assert_int_equal(jit_sharding_create(m, "_,x", &u.cols), JIT_OK);
    assert_int_equal(jit_sharding_create(m, "_,_", &u.rep), JIT_OK);
    assert_int_equal(jit_sharding_create(m, "_", &u.rep1), JIT_OK);
  }
  float v[2][64];
  uint64_t s = 11;
  const ir_type t = {.dtype = JIT_F32, .rank = 2, .dims = {8, 8}};
  jit_array *args[2] = {NULL, NULL}, *r[SP_RESHARD_RESULTS] = {NULL};
  for (int i = 0; i < 2; i++) {
    sp_fill(&t, v[i], &s);
    assert_int_equal(jit_array_from_host(c, JIT_F32, 2, (const int64_t[]){8, 8}, v[i], &args[i]),
                     JIT_OK);
  }
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "every_reshard", .n_args = 2, .n_results = SP_RESHARD_RESULTS};
  assert_int_equal(jit_compile(c, every_reshard, &u, &o, &f), JIT_OK);
  if (jit_call(f, args, r) != JIT_OK) fail_msg("every_reshard: %s", jit_last_error());
  for (int k = 0; k < SP_RESHARD_RESULTS; k++) {
    size_t n = k == 5 ? 8 : 64;
    if (jit_array_to_host(r[k], out + 64 * k, n * sizeof *out) != JIT_OK)
      fail_msg("every_reshard result %d: %s", k, jit_last_error());
    jit_array_free(r[k]);
  }
  if (m) { /* the partitioned program holds every collective it is meant to exercise */
    char *text = ot_fn_dump(f, args, JIT_DUMP_PARTITIONED);
    for (size_t i = 0; i < sizeof reshard_collectives / sizeof reshard_collectives[0]; i++)
      if (!strstr(text, reshard_collectives[i]))
        fail_msg("the partitioned every_reshard has no %s:\n%s", reshard_collectives[i], text);
    free(text);
  }
  jit_array_free(args[0]);
  jit_array_free(args[1]);
  jit_fn_free(f);
  jit_sharding *shardings[4] = {u.rows, u.cols, u.rep, u.rep1};
  for (int i = 0; i < 4; i++) jit_sharding_free(shardings[i]);
}

void sp_check_every_reshard(const float *got, const float *want) {
  for (int k = 0; k < SP_RESHARD_RESULTS; k++) {
    /* 3 and 4 sum a contracted dim split 4 ways: partial sums added in another order than one
       device's loop, so within f32 rounding; the rest is elementwise or a max: exact */
    const ir_type t = {.dtype = JIT_F32, .rank = 1, .dims = {k == 5 ? 8 : 64}};
    char what[48];
    snprintf(what, sizeof what, "every_reshard result %d", k);
    if (k == 3 || k == 4) assert_true(sp_close_enough(&t, got + 64 * k, want + 64 * k, what));
    else assert_memory_equal(got + 64 * k, want + 64 * k, (size_t)t.dims[0] * sizeof *got);
  }
}

/* ---- placement -------------------------------------------------------------------------------- */
jit_array *sp_iota_f32(jit_ctx *ctx, int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (float)i;
  jit_array *a = NULL;
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, rank, shape, v, &a), JIT_OK);
  free(v);
  return a;
}

void sp_expect_iota(const jit_array *a) {
  size_t n = jit_array_nbytes(a) / sizeof(float);
  float *v = malloc((n ? n : 1) * sizeof *v);
  assert_non_null(v);
  if (jit_array_to_host(a, v, n * sizeof *v) != JIT_OK) fail_msg("%s", jit_last_error());
  for (size_t i = 0; i < n; i++)
    if (v[i] != (float)i) {
      print_error("element %zu is %g\n", i, (double)v[i]);
      free(v);
      fail();
    }
  free(v);
}

static jit_array *put_or_fail(const jit_array *a, const jit_sharding *s) {
  jit_array *b = NULL;
  if (jit_device_put(a, s, &b) != JIT_OK) fail_msg("jit_device_put: %s", jit_last_error());
  return b;
}

/* The process that holds every device of m when it is another than this one (then this process
   can neither read nor reshard m's arrays), else -1 (in one process: always -1). */
static int other_owner(const jit_mesh *m) {
  int per = jit_device_count(m->ctx) / jit_process_count(m->ctx), owner = m->device_ids[0] / per;
  for (int i = 1; i < m->n_devices; i++)
    if (m->device_ids[i] / per != owner) return -1;
  return owner == jit_process_index(m->ctx) ? -1 : owner;
}

static void expect_elsewhere(jit_status st, int owner) {
  assert_int_equal(st, JIT_EINVAL);
  char want[64];
  snprintf(want, sizeof want, "lives on devices of process %d only", owner);
  if (!strstr(jit_last_error(), want)) fail_msg("\"%s\" lacks \"%s\"", jit_last_error(), want);
}

void sp_round_trips(jit_ctx *ctx, int max_devices, void (*check_shards)(const jit_array *)) {
  static const struct {
    int n_axes;
    int64_t sizes[3];
    int ids[8];
    bool permuted;
    const char *specs[10];
  } meshes[] = {
      {1, {1}, {0}, false, {"a,_,_", "_,a,_", "_,_,_"}},
      {1, {2}, {0}, false, {"a,_,_", "_,a,_", "_,_,a", "_,_,_"}},
      {1, {2}, {1, 0}, true, {"a,_,_", "_,_,a", "_,_,_"}},
      {2, {2, 2}, {0}, false, {"a,b,_", "b,a,_", "a+b,_,_", "_,b+a,_", "a,_,_", "_,_,b", "_,_,_"}},
      {1, {4}, {3, 0, 2, 1}, true, {"a,_,_", "_,a,_", "_,_,_"}},
      {2, {2, 4}, {0}, false, {"a,b,_", "b,a,_", "_,a+b,_", "b+a,_,_", "a,_,_", "_,b,_", "_,_,_"}},
      {2, {4, 2}, {7, 6, 5, 4, 3, 2, 1, 0}, true, {"a,b,_", "b,_,a", "a+b,_,_", "_,_,_"}},
      {3, {2, 2, 2}, {0}, false, {"a,b,c", "c,b,a", "a+b+c,_,_", "_,c+a,b", "a,_,_"}},
  };
  const char *names[3] = {"a", "b", "c"};
  const int64_t shape[3] = {8, 16, 8};
  jit_array *host = sp_iota_f32(ctx, 3, shape);
  for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
    int64_t n_devices = 1;
    for (int k = 0; k < meshes[i].n_axes; k++) n_devices *= meshes[i].sizes[k];
    if (n_devices > max_devices) continue;
    jit_mesh *m = NULL;
    if (jit_mesh_create(ctx, meshes[i].n_axes, meshes[i].sizes, names,
                        meshes[i].permuted ? meshes[i].ids : NULL, &m) != JIT_OK)
      fail_msg("jit_mesh_create: %s", jit_last_error());
    int n_specs = 0, owner = other_owner(m);
    jit_sharding *ss[10];
    jit_array *placed[10];
    while (meshes[i].specs[n_specs]) {
      assert_int_equal(jit_sharding_create(m, meshes[i].specs[n_specs], &ss[n_specs]), JIT_OK);
      placed[n_specs] = put_or_fail(host, ss[n_specs]);
      if (check_shards) check_shards(placed[n_specs]);
      if (owner < 0) {
        sp_expect_iota(placed[n_specs]);
      } else {
        void *v = malloc(jit_array_nbytes(host));
        assert_non_null(v);
        jit_status st = jit_array_to_host(placed[n_specs], v, jit_array_nbytes(host));
        free(v);
        expect_elsewhere(st, owner);
      }
      n_specs++;
    }
    for (int x = 0; x < n_specs; x++)
      for (int y = 0; y < n_specs; y++) {
        if (owner >= 0) {
          jit_array *r = NULL;
          expect_elsewhere(jit_device_put(placed[x], ss[y], &r), owner);
          assert_null(r);
          continue;
        }
        jit_array *r = put_or_fail(placed[x], ss[y]);
        if (check_shards) check_shards(r);
        sp_expect_iota(r);
        /* Putting an array where it already is moves nothing. */
        if (x == y) assert_int_equal(r->bytes_moved, 0);
        jit_array_free(r);
      }
    for (int k = 0; k < n_specs; k++) {
      jit_array_free(placed[k]);
      jit_sharding_free(ss[k]);
    }
    jit_mesh_free(m);
  }
  jit_array_free(host);
}

static char *read_text(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  char chunk[4096];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0) fwrite(chunk, 1, k, mem);
  fclose(fp);
  fclose(mem);
  return buf;
}

void sp_expect_visualize_golden(const jit_array *a, const char *name) {
  char *got = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&got, &len);
  assert_non_null(mem);
  assert_int_equal(jit_array_visualize(a, mem), JIT_OK);
  fclose(mem);
  const char *src = getenv("TJIT_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/golden/visualize_%s.txt", src ? src : ".", name);
  const char *update = getenv("TJIT_GOLDEN_UPDATE");
  if (update && strcmp(update, "1") == 0) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fwrite(got, 1, len, fp);
    fclose(fp);
  }
  char *want = read_text(path);
  if (!want) print_error("cannot read %s\n", path);
  assert_non_null(want);
  if (strcmp(got, want) != 0) print_error("%s: got\n%swant\n%s", name, got, want);
  assert_string_equal(got, want);
  free(want);
  free(got);
}
