/* test_scan_grad.c: value_and_grad through scans, in f64 against central finite differences:
 * cumulative sums (forward, reverse, lengths 0..4), an RNN (forward, reverse, with its cell
 * checkpointed), nested scans; and the optimized IR: the backward scan reads the residuals the
 * forward scan stacked instead of recomputing the step, except inside a checkpointed cell. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/passes/passes.h"
#include "support/gradcheck.h"
#include "support/optest.h"
#include "support/roundtrip.h"
#include "tjit.h"
#include "trace/trace.h"

static jit_val sum_all(jit_trace *t, jit_val v, int rank) {
  int axes[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  return jit_reduce_sum(t, v, rank, axes);
}

/* sum(ys * ys) + sum(sin(final)): every result gets a cotangent that varies along it */
static jit_val loss_of(jit_trace *t, jit_val final, int final_rank, jit_val ys, int ys_rank) {
  return jit_add(t, sum_all(t, jit_mul(t, ys, ys), ys_rank), sum_all(t, jit_sin(t, final), final_rank));
}

/* ---- cumulative sum ------------------------------------------------------------------------------ */
static void cumsum_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                        jit_val *y, void *user) {
  (void)user;
  new_carry[0] = jit_add(t, carry[0], x[0]);
  y[0] = new_carry[0];
}

static void cumsum_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const int *reverse = user;
  jit_val c, ys;
  jit_scan(t, cumsum_body, NULL, 1, &args[0], 1, &args[1], -1, *reverse, &c, 1, &ys);
  results[0] = loss_of(t, c, 1, ys, 2);
}

static void test_cumsum(void **state) {
  (void)state;
  for (int reverse = 0; reverse < 2; reverse++)
    for (int64_t len = 0; len <= 4; len += 2 - (len == 0)) { /* 0, 1, 3 */
      int64_t s0[1] = {3}, sx[2] = {len, 3};
      ot_array in[2] = {ot_random(JIT_F64, 1, s0, 51, -1, 1), ot_random(JIT_F64, 2, sx, 52, -1, 1)};
      ot_loss_fn l = {cumsum_loss, &reverse, 2};
      ot_check_grad(reverse ? "cumsum_rev" : "cumsum", &l, in);
      ot_free(&in[0]);
      ot_free(&in[1]);
    }
}

/* ---- RNN: h = 0.9 tanh(h @ wh + x_t @ wx + b), y_t = h; the cell optionally checkpointed ---------- */
typedef struct rnn_cfg {
  int reverse, ckpt;
} rnn_cfg;

typedef struct rnn {
  jit_val wh, wx, b;
  const rnn_cfg *cfg;
} rnn;

/* args: h, x, wh, wx, b */
static void cell(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  (void)user;
  jit_val pre = jit_add(t, jit_add(t, jit_matmul(t, a[0], a[2]), jit_matmul(t, a[1], a[3])), a[4]);
  r[0] = jit_mul(t, jit_tanh(t, pre), jit_scalar(t, 0.9));
}

static void rnn_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                     jit_val *y, void *user) {
  const rnn *w = user;
  jit_val a[5] = {carry[0], x[0], w->wh, w->wx, w->b};
  if (w->cfg->ckpt)
    jit_checkpoint(t, cell, NULL, 5, a, 1, new_carry);
  else
    cell(t, a, new_carry, NULL);
  y[0] = new_carry[0];
}

/* args: h0 [B,H], xs [T,B,D], wh [H,H], wx [D,H], b [H] */
static void rnn_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  const rnn_cfg *cfg = user;
  rnn w = {args[2], args[3], args[4], cfg};
  jit_val h, ys;
  jit_scan(t, rnn_body, &w, 1, &args[0], 1, &args[1], -1, cfg->reverse, &h, 1, &ys);
  results[0] = loss_of(t, h, 2, ys, 3);
}

enum { T = 4, B = 2, H = 3, D = 2 };

static void rnn_inputs(ot_array *in, jit_dtype dt) {
  int64_t sh[2] = {B, H}, sx[3] = {T, B, D}, swh[2] = {H, H}, swx[2] = {D, H}, sb[1] = {H};
  in[0] = ot_random(dt, 2, sh, 61, -1, 1);
  in[1] = ot_random(dt, 3, sx, 62, -1, 1);
  in[2] = ot_random(dt, 2, swh, 63, -0.7, 0.7);
  in[3] = ot_random(dt, 2, swx, 64, -0.7, 0.7);
  in[4] = ot_random(dt, 1, sb, 65, -1, 1);
}

static void test_rnn(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    rnn_cfg cfg = {k & 1, k >> 1};
    ot_array in[5];
    rnn_inputs(in, JIT_F64);
    ot_loss_fn l = {rnn_loss, &cfg, 5};
    static const char *const names[] = {"rnn", "rnn_rev", "rnn_ckpt", "rnn_ckpt_rev"};
    ot_check_grad(names[k], &l, in);
    for (int i = 0; i < 5; i++) ot_free(&in[i]);
  }
}

/* grad of grad: the forward scan that stacks residuals is differentiated in its turn */
static void rnn_grad_norm(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  jit_val r[6];
  jit_value_and_grad(t, rnn_loss, user, 5, args, 0x1f, 0, r);
  results[0] = jit_add(t, r[0], sum_all(t, jit_mul(t, r[3], r[3]), 2)); /* + |d loss / d wh|^2 */
}

static void test_grad_of_grad(void **state) {
  (void)state;
  for (int ckpt = 0; ckpt < 2; ckpt++) {
    rnn_cfg cfg = {0, ckpt};
    ot_array in[5];
    rnn_inputs(in, JIT_F64);
    ot_loss_fn l = {rnn_grad_norm, &cfg, 5};
    ot_check_grad(ckpt ? "rnn_gg_ckpt" : "rnn_gg", &l, in);
    for (int i = 0; i < 5; i++) ot_free(&in[i]);
  }
}

/* ---- nested: the outer step runs an inner scan over its x's rows ------------------------------ */
typedef struct nest {
  jit_val w;
} nest;

static void inner_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                       jit_val *y, void *user) {
  const nest *n = user;
  new_carry[0] = jit_tanh(t, jit_add(t, jit_mul(t, carry[0], n->w), x[0]));
  y[0] = jit_mul(t, new_carry[0], x[0]);
}

static void outer_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                       jit_val *y, void *user) {
  jit_val ys;
  jit_scan(t, inner_body, user, 1, carry, 1, x, -1, 0, new_carry, 1, &ys);
  y[0] = jit_exp(t, sum_all(t, ys, 2));
}

/* args: c0 [2], xs [4,3,2] (outer steps, inner steps, 2), w [2]; the outer scan runs in reverse */
static void nest_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  nest n = {args[2]};
  jit_val c, ys;
  jit_scan(t, outer_body, &n, 1, &args[0], 1, &args[1], -1, 1, &c, 1, &ys);
  results[0] = loss_of(t, c, 1, ys, 1);
}

static void test_nested(void **state) {
  (void)state;
  int64_t sc[1] = {2}, sx[3] = {4, 3, 2};
  ot_array in[3] = {ot_random(JIT_F64, 1, sc, 71, -1, 1), ot_random(JIT_F64, 3, sx, 72, -1, 1),
                    ot_random(JIT_F64, 1, sc, 73, -1, 1)};
  ot_loss_fn l = {nest_loss, NULL, 3};
  ot_check_grad("nest", &l, in);
  for (int i = 0; i < 3; i++) ot_free(&in[i]);
}

/* ---- the optimized IR -------------------------------------------------------------------------- */
static ir_func *optimized(const ot_loss_fn *l) {
  ot_array in[5];
  rnn_inputs(in, JIT_F32);
  ir_type ty[5];
  for (int i = 0; i < 5; i++) {
    ty[i] = (ir_type){.dtype = JIT_F32, .rank = in[i].rank};
    for (int d = 0; d < in[i].rank; d++) ty[i].dims[d] = in[i].shape[d];
    ot_free(&in[i]);
  }
  trace_request req = {.name = "g", .fn = ot_value_and_grad_fn, .user = (void *)l, .n_args = 5, .n_results = 6,
                       .arg_types = ty};
  ir_func *f = NULL;
  OT_ASSERT_OK(trace_function(&req, &f));
  OT_ASSERT_OK(ir_optimize(f, 0, true));
  assert_ir_roundtrip(f);
  return f;
}

/* The number of lines of f's text (nested bodies included) that apply op. */
static int count_in_text(const ir_func *f, const char *op) {
  char *text = ir_print_to_string(f), pat[32];
  int n = 0;
  snprintf(pat, sizeof pat, "= %s ", op);
  for (const char *p = text; (p = strstr(p, pat)); p++) n++;
  free(text);
  return n;
}

/* The top-level scan running in the given direction (f's only one). */
static const ir_func *scan_body(const ir_func *f, int reverse, const ir_ins **scan) {
  const ir_ins *found = NULL;
  for (uint32_t i = 0; i < f->n_ins; i++)
    if (f->ins[i].op == IR_SCAN && f->ins[i].attr.scan.reverse == reverse) {
      assert_null(found);
      found = &f->ins[i];
    }
  assert_non_null(found);
  *scan = found;
  return ir_scan_body(f, found);
}

static void test_residuals_in_ir(void **state) {
  (void)state;
  rnn_cfg plain = {0, 0}, ckpt = {0, 1};
  ot_loss_fn lp = {rnn_loss, &plain, 5}, lc = {rnn_loss, &ckpt, 5};
  ir_func *fp = optimized(&lp), *fc = optimized(&lc);
  const ir_ins *fwd, *bwd;

  /* plain: the forward step stacks, besides h and y, the carry entering the step and the
     residual of tanh (1 - h^2); the backward step computes no tanh and reads them as xs */
  const ir_func *fb = scan_body(fp, 0, &fwd), *bb = scan_body(fp, 1, &bwd);
  assert_int_equal(count_in_text(fb, "tanh"), 1);
  assert_int_equal(count_in_text(bb, "tanh"), 0);
  assert_int_equal(count_in_text(fp, "tanh"), 1);
  assert_int_equal(fb->n_results, 4);
  assert_int_equal(bwd->n_args - bwd->attr.scan.n_consts - bwd->attr.scan.n_carry,
                   4 /* saved h, x, residual, ct_y */);

  /* checkpointed: the backward step recomputes the cell (tanh included) from the saved carry */
  fb = scan_body(fc, 0, &fwd);
  bb = scan_body(fc, 1, &bwd);
  assert_int_equal(count_in_text(fb, "tanh"), 1);
  assert_int_equal(count_in_text(bb, "tanh"), 1);
  assert_int_equal(count_in_text(fc, "tanh"), 2);
  assert_int_equal(fb->n_results, 3); /* h, y, the saved carry */
  ir_func_free(fp);
  ir_func_free(fc);
}

/* cumsum's backward needs nothing from the forward: it stacks no carry and no residual */
static void test_nothing_saved(void **state) {
  (void)state;
  int reverse = 0;
  ot_loss_fn l = {cumsum_loss, &reverse, 2};
  ir_type ty[2] = {{.dtype = JIT_F32, .rank = 1, .dims = {3}},
                   {.dtype = JIT_F32, .rank = 2, .dims = {5, 3}}};
  trace_request req = {.name = "g", .fn = ot_value_and_grad_fn, .user = &l, .n_args = 2, .n_results = 3,
                       .arg_types = ty};
  ir_func *f = NULL;
  OT_ASSERT_OK(trace_function(&req, &f));
  OT_ASSERT_OK(ir_optimize(f, 0, true));
  const ir_ins *fwd, *bwd;
  const ir_func *fb = scan_body(f, 0, &fwd), *bb = scan_body(f, 1, &bwd);
  assert_int_equal(fb->n_results, 2);
  assert_int_equal(bwd->n_args - bwd->attr.scan.n_consts - bwd->attr.scan.n_carry, 1 /* ct_y */);
  assert_int_equal(bb->n_params, bwd->n_args);
  ir_func_free(f);
}

/* A body that reads 70 values of the enclosing trace (70 consts: more operands than a 64-bit
   mask holds): the 70 entries of w, sliced outside the loop. loss = sum over steps of
   sum_i w_i * x_t, so d loss / d w_i = the sum of the xs. */
enum { MANY = 70 };

static void many_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  const jit_val *w = user;
  (void)y;
  jit_val acc = carry[0];
  for (int i = 0; i < MANY; i++) acc = jit_add(t, acc, jit_mul(t, w[i], x[0]));
  new_carry[0] = acc;
}

static void many_loss(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val w[MANY];
  for (int i = 0; i < MANY; i++) {
    const int64_t lo = i, hi = i + 1;
    w[i] = jit_reshape(t, jit_slice(t, args[1], &lo, &hi, NULL), 0, NULL);
  }
  jit_val c0 = jit_full(t, JIT_F64, 0, NULL, 0.0), fin;
  jit_scan(t, many_body, w, 1, &c0, 1, &args[0], -1, 0, &fin, 0, NULL);
  results[0] = fin;
}

static void many_vg(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_value_and_grad(t, many_loss, NULL, 2, args, 3, 0, results);
}

static void test_many_operands(void **state) {
  (void)state;
  ot_array in[2], out[3];
  const int64_t len = 5, nw = MANY;
  in[0] = ot_random(JIT_F64, 1, &len, 3, -1, 1);
  in[1] = ot_random(JIT_F64, 1, &nw, 4, -1, 1);
  OT_ASSERT_OK(ot_run("many", many_vg, NULL, 2, in, 3, out));
  double sx = 0, sw = 0;
  for (int t = 0; t < len; t++) sx += in[0].v[t];
  for (int i = 0; i < MANY; i++) sw += in[1].v[i];
  assert_true(fabs(out[0].v[0] - sw * sx) < 1e-12 * (1 + fabs(sw * sx)));
  for (int t = 0; t < len; t++) assert_true(fabs(out[1].v[t] - sw) < 1e-12 * (1 + fabs(sw)));
  for (int i = 0; i < MANY; i++) assert_true(fabs(out[2].v[i] - sx) < 1e-12 * (1 + fabs(sx)));
  for (int i = 0; i < 2; i++) ot_free(&in[i]);
  for (int i = 0; i < 3; i++) ot_free(&out[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_many_operands),
      cmocka_unit_test(test_cumsum),          cmocka_unit_test(test_rnn),
      cmocka_unit_test(test_nested),          cmocka_unit_test(test_grad_of_grad),
      cmocka_unit_test(test_residuals_in_ir),
      cmocka_unit_test(test_nothing_saved),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
