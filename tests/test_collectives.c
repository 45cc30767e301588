/* test_collectives.c: the shared-memory collectives (ir/collectives.h) on 1..8 threads,
 * each against a sequential reference written from ir_coll's definitions, repeated to shake out
 * races; plus the argument checks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ir/collectives.h"

enum { MAXN = 8, ROWS = 4, COLS = 8 }; /* operands are f32[ROWS, COLS] (i32 for the int case) */

typedef struct member {
  coll_group *g;
  int p;
  ir_op op;
  ir_coll c;
  ir_type t;
  float in[ROWS * COLS];
  float out[MAXN * ROWS * COLS];
  jit_status st;
} member;

static void *run(void *arg) {
  member *m = arg;
  m->st = coll_run(m->g, m->p, m->op, &m->c, &m->t, m->in, m->out);
  return NULL;
}

/* Runs op on n threads with operands filled from seed; members[] keep inputs and outputs. */
static void run_group(int n, ir_op op, ir_coll c, uint32_t seed, member *ms) {
  coll_group *g = NULL;
  assert_int_equal(coll_group_new(n, &g), JIT_OK);
  pthread_t th[MAXN];
  for (int p = 0; p < n; p++) {
    ms[p] = (member){.g = g, .p = p, .op = op, .c = c, .t = {.dtype = JIT_F32, .rank = 2, .dims = {ROWS, COLS}}};
    for (int i = 0; i < ROWS * COLS; i++) {
      seed = seed * 1664525u + 1013904223u;
      ms[p].in[i] = (float)((int)(seed >> 20) % 200 - 100) / 8.0f; /* exact in f32: sums are exact */
    }
  }
  for (int p = 0; p < n; p++) assert_int_equal(pthread_create(&th[p], NULL, run, &ms[p]), 0);
  for (int p = 0; p < n; p++) pthread_join(th[p], NULL);
  for (int p = 0; p < n; p++) assert_int_equal(ms[p].st, JIT_OK);
  coll_group_free(g);
}

static void test_all_reduce(void **state) {
  (void)state;
  static member ms[MAXN];
  for (int n = 1; n <= MAXN; n++)
    for (int kind = 0; kind < 3; kind++)
      for (int rep = 0; rep < 10; rep++) {
        ir_coll c = {.kind = (uint8_t)kind};
        run_group(n, IR_ALL_REDUCE, c, (uint32_t)(n * 100 + kind * 10 + rep), ms);
        for (int i = 0; i < ROWS * COLS; i++) {
          float want = ms[0].in[i];
          for (int q = 1; q < n; q++) {
            float x = ms[q].in[i];
            want = kind == IR_COLL_SUM ? want + x : kind == IR_COLL_MAX ? (x > want ? x : want)
                                                                        : (x < want ? x : want);
          }
          for (int p = 0; p < n; p++) assert_true(ms[p].out[i] == want);
        }
      }
}

static void test_gather_scatter_permute(void **state) {
  (void)state;
  static member ms[MAXN];
  for (int n = 1; n <= MAXN; n *= 2) {
    for (uint8_t dim = 0; dim < 2; dim++) {
      /* all_gather along dim: member q's block at position q of that dim */
      ir_coll c = {.dim = dim};
      run_group(n, IR_ALL_GATHER, c, 7u + n + dim, ms);
      int out_cols = dim == 1 ? COLS * n : COLS;
      for (int p = 0; p < n; p++)
        for (int q = 0; q < n; q++)
          for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < COLS; k++) {
              int orow = dim == 0 ? q * ROWS + r : r, ocol = dim == 1 ? q * COLS + k : k;
              assert_true(ms[p].out[orow * out_cols + ocol] == ms[q].in[r * COLS + k]);
            }
      /* reduce_scatter along dim: member p gets chunk p of the sum */
      if ((dim == 0 ? ROWS : COLS) % n) continue;
      ir_coll rs = {.dim = dim, .kind = IR_COLL_SUM};
      run_group(n, IR_REDUCE_SCATTER, rs, 11u + n + dim, ms);
      int pr = dim == 0 ? ROWS / n : ROWS, pc = dim == 1 ? COLS / n : COLS;
      for (int p = 0; p < n; p++)
        for (int r = 0; r < pr; r++)
          for (int k = 0; k < pc; k++) {
            int sr = dim == 0 ? p * pr + r : r, sk = dim == 1 ? p * pc + k : k;
            float want = 0;
            for (int q = 0; q < n; q++) want += ms[q].in[sr * COLS + sk];
            assert_true(ms[p].out[r * pc + k] == want);
          }
    }
    /* collective_permute by +1 and by -1 */
    for (int shift = -1; shift <= 1; shift += 2) {
      ir_coll c = {.shift = shift};
      run_group(n, IR_COLLECTIVE_PERMUTE, c, 13u + n, ms);
      for (int p = 0; p < n; p++) {
        int src = ((p - shift) % n + n) % n;
        assert_memory_equal(ms[p].out, ms[src].in, sizeof ms[p].in);
      }
    }
  }
}

/* all_to_all: split rows (dim 0) into n chunks, member p gets chunk p of everyone, concatenated
   along columns (dim2 1) in source order. */
static void test_all_to_all(void **state) {
  (void)state;
  static member ms[MAXN];
  for (int n = 1; n <= 4; n *= 2) {
    ir_coll c = {.dim = 0, .dim2 = 1};
    run_group(n, IR_ALL_TO_ALL, c, 17u + n, ms);
    int chunk = ROWS / n, ocols = COLS * n;
    for (int p = 0; p < n; p++)
      for (int r = 0; r < chunk; r++)
        for (int q = 0; q < n; q++)
          for (int k = 0; k < COLS; k++)
            assert_true(ms[p].out[r * ocols + q * COLS + k] == ms[q].in[(p * chunk + r) * COLS + k]);
    ir_coll same = {.dim = 0, .dim2 = 0}; /* split and concat the same dim: a transpose of blocks */
    run_group(n, IR_ALL_TO_ALL, same, 19u + n, ms);
    for (int p = 0; p < n; p++)
      for (int q = 0; q < n; q++)
        for (int r = 0; r < chunk; r++)
          for (int k = 0; k < COLS; k++)
            assert_true(ms[p].out[(q * chunk + r) * COLS + k] == ms[q].in[(p * chunk + r) * COLS + k]);
  }
}

static void test_axis_index_and_errors(void **state) {
  (void)state;
  static member ms[MAXN];
  ir_coll c = {0};
  run_group(5, IR_AXIS_INDEX, c, 1, ms);
  for (int p = 0; p < 5; p++) {
    int32_t v;
    memcpy(&v, ms[p].out, sizeof v);
    assert_int_equal(v, p);
  }
  coll_group *g = NULL;
  assert_int_equal(coll_group_new(0, &g), JIT_EINVAL);
  assert_null(g);
  assert_int_equal(coll_group_new(3, &g), JIT_OK);
  ir_type t = {.dtype = JIT_F32, .rank = 2, .dims = {5, 2}};
  float in[10] = {0}, out[10];
  ir_coll rs = {.dim = 0};
  assert_int_equal(coll_run(g, 0, IR_REDUCE_SCATTER, &rs, &t, in, out), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "splits a dim of 5 into 3 parts"));
  assert_int_equal(coll_run(g, 3, IR_ALL_REDUCE, &rs, &t, in, out), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "position 3 outside the group of 3"));
  ir_coll bad = {.dim = 2};
  assert_int_equal(coll_run(g, 0, IR_ALL_GATHER, &bad, &t, in, out), JIT_EINVAL);
  assert_int_equal(coll_run(g, 0, IR_ADD, &bad, &t, in, out), JIT_EINVAL); /* refused, not waited on */
  assert_non_null(strstr(jit_last_error(), "'add' is not a collective"));
  coll_group_free(g);
  coll_group_free(NULL);
}

/* NaN, signed zeros and infinities reduce exactly as the interpreter folds them. */
static void test_all_reduce_special(void **state) {
  (void)state;
  static const float vals[] = {NAN, -0.0f, 0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, 3.5f};
  static member ms[MAXN];
  for (int n = 2; n <= 4; n++)
    for (int kind = 0; kind < 3; kind++) {
      ir_coll c = {.kind = (uint8_t)kind};
      run_group(n, IR_ALL_REDUCE, c, 1u, ms); /* fills, runs; refill below and run again */
      coll_group *g = NULL;
      assert_int_equal(coll_group_new(n, &g), JIT_OK);
      pthread_t th[MAXN];
      uint32_t seed = (uint32_t)(n * 7 + kind);
      for (int p = 0; p < n; p++) {
        ms[p].g = g;
        for (int i = 0; i < ROWS * COLS; i++) {
          seed = seed * 1664525u + 1013904223u;
          ms[p].in[i] = vals[(seed >> 24) % 8];
        }
      }
      for (int p = 0; p < n; p++) assert_int_equal(pthread_create(&th[p], NULL, run, &ms[p]), 0);
      for (int p = 0; p < n; p++) pthread_join(th[p], NULL);
      ir_op op = kind == IR_COLL_SUM ? IR_ADD : kind == IR_COLL_MAX ? IR_MAX : IR_MIN;
      for (int i = 0; i < ROWS * COLS; i++) {
        double acc = ms[0].in[i];
        for (int q = 1; q < n; q++) {
          double x[2] = {acc, ms[q].in[i]};
          acc = ir_eval_elementwise(op, NULL, JIT_F32, JIT_F32, x);
        }
        float want = (float)acc, got = ms[0].out[i];
        for (int p = 0; p < n; p++) assert_memory_equal(&ms[p].out[i], &got, sizeof got);
        if (isnan(want)) assert_true(isnan(got));
        else assert_memory_equal(&got, &want, sizeof got);
      }
      coll_group_free(g);
    }
}

/* A device that fails aborts the world: its peers' collectives fail instead of waiting for it,
   and after a reset the world works again. */
typedef struct world_member {
  coll_world *w;
  int d;
  bool fail;
  jit_status st;
  float in[4], out[4];
} world_member;

static void *world_run(void *arg) {
  world_member *m = arg;
  ir_coll c = {.axes = 1, .group = 4, .kind = IR_COLL_SUM};
  ir_type t = {.dtype = JIT_F32, .rank = 1, .dims = {4}};
  if (m->fail) {
    coll_world_abort(m->w);
    m->st = JIT_ENOMEM;
    return NULL;
  }
  m->st = coll_world_run(m->w, m->d, IR_ALL_REDUCE, &c, &t, m->in, m->out);
  return NULL;
}

static void test_world_abort(void **state) {
  (void)state;
  ir_mesh mesh = {.n_axes = 1, .sizes = {4}, .names = {"x"}};
  coll_world *w = NULL;
  assert_int_equal(coll_world_new(&mesh, &w), JIT_OK);
  for (int round = 0; round < 2; round++) {
    world_member ms[4];
    pthread_t th[4];
    for (int d = 0; d < 4; d++) {
      ms[d] = (world_member){w, d, round == 0 && d == 2, JIT_OK, {1, 2, 3, (float)d}, {0}};
      assert_int_equal(pthread_create(&th[d], NULL, world_run, &ms[d]), 0);
    }
    for (int d = 0; d < 4; d++) pthread_join(th[d], NULL);
    if (round == 0) {
      for (int d = 0; d < 4; d++) assert_int_not_equal(ms[d].st, JIT_OK);
      coll_world_reset(w);
    } else {
      for (int d = 0; d < 4; d++) {
        assert_int_equal(ms[d].st, JIT_OK);
        assert_true(ms[d].out[0] == 4 && ms[d].out[3] == 6);
      }
    }
  }
  coll_world_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce),
      cmocka_unit_test(test_gather_scatter_permute),
      cmocka_unit_test(test_all_to_all),
      cmocka_unit_test(test_axis_index_and_errors),
      cmocka_unit_test(test_all_reduce_special),
      cmocka_unit_test(test_world_abort),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
