/* test_passes.c: the optimization passes: each rule of canonicalize, CSE and DCE on functions
 * built with the builder, the pipeline's switches, and a differential test of random programs. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir/ir.h"
#include "ir/passes/passes.h"
#include "support/roundtrip.h"

/* ---- building -------------------------------------------------------------------------------- */

#define NOLOC ((ir_loc){0})
#define DIMS(...) (const int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static ir_ty ty_dims(ir_func *f, jit_dtype dt, const int64_t *d, int rank) {
  ir_ty t = ir_type_make(f, dt, rank, d);
  assert_int_not_equal(t, UINT32_MAX);
  return t;
}
#define TY(f, dt, ...) ty_dims(f, dt, DIMS(__VA_ARGS__))
#define TY0(f, dt) ty_dims(f, dt, NULL, 0)

static ir_ref emit_at(ir_func *f, ir_op op, ir_ty t, uint32_t n, const ir_ref *args,
                      const ir_attr *a, ir_loc loc) {
  ir_ref r = ir_emit(f, op, t, n, args, a, loc);
  assert_int_not_equal(r, IR_NOREF);
  return r;
}
static ir_ref op1(ir_func *f, ir_op op, ir_ty t, ir_ref x) { return emit_at(f, op, t, 1, &x, NULL, NOLOC); }
static ir_ref op1a(ir_func *f, ir_op op, ir_ty t, ir_ref x, const ir_attr *a) {
  return emit_at(f, op, t, 1, &x, a, NOLOC);
}
static ir_ref op2(ir_func *f, ir_op op, ir_ty t, ir_ref x, ir_ref y) {
  ir_ref a[2] = {x, y};
  return emit_at(f, op, t, 2, a, NULL, NOLOC);
}
static ir_ref cst(ir_func *f, ir_ty t, double v) {
  ir_ref r = ir_emit_const(f, t, v, NOLOC);
  assert_int_not_equal(r, IR_NOREF);
  return r;
}
static ir_ref param(ir_func *f, ir_ty t) {
  ir_ref r = ir_emit_param(f, t);
  assert_int_not_equal(r, IR_NOREF);
  return r;
}
static void results(ir_func *f, uint32_t n, const ir_ref *r) {
  assert_int_equal(ir_set_results(f, n, r), JIT_OK);
  if (ir_verify(f, "test") != JIT_OK) fail_msg("built function does not verify: %s", jit_last_error());
}
static void result1(ir_func *f, ir_ref r) { results(f, 1, &r); }

static ir_attr dims_attr(int n, const uint8_t *d) {
  ir_attr a = {0};
  a.dims.n = (uint8_t)n;
  for (int i = 0; i < n; i++) a.dims.d[i] = d[i];
  return a;
}
#define DATTR(...) dims_attr((int)sizeof((uint8_t[]){__VA_ARGS__}), (const uint8_t[]){__VA_ARGS__})

/* ---- inspecting ------------------------------------------------------------------------------ */

/* Runs a pass by name with verification, then checks print(parse(print(f))) == print(f). */
static void run_pass(ir_func *f, const char *name) {
  if (ir_run_pass(f, name, true) != JIT_OK) fail_msg("%s: %s", name, jit_last_error());
  assert_ir_roundtrip(f);
}

static void expect_text(const ir_func *f, const char *want) {
  char *s = ir_print_to_string(f);
  if (strcmp(s, want) != 0) fail_msg("got:\n%s\nwant:\n%s", s, want);
  free(s);
}

static const ir_ins *result_ins(const ir_func *f, uint32_t i) { return &f->ins[f->results[i]]; }

/* ---- canonicalize ---------------------------------------------------------------------------- */

static void test_identities(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 4);
  ir_ref x = param(f, t), y = param(f, t);
  ir_ref zero = cst(f, t, 0), nzero = cst(f, t, -0.0), one = cst(f, t, 1);
  ir_ref r[7] = {
      op2(f, IR_ADD, t, x, zero), op2(f, IR_ADD, t, nzero, y), op2(f, IR_SUB, t, x, zero),
      op2(f, IR_MUL, t, one, y),  op2(f, IR_MUL, t, x, one),   op2(f, IR_DIV, t, y, one),
      op2(f, IR_SUB, t, zero, x), /* 0 - x is not x */
  };
  results(f, 7, r);
  run_pass(f, "canonicalize");
  const ir_ref want[6] = {x, y, x, y, x, y};
  for (int i = 0; i < 6; i++) assert_int_equal(f->results[i], want[i]);
  assert_int_equal(result_ins(f, 6)->op, IR_SUB);
  assert_int_equal(f->n_ins, 2 + 2); /* params, the const 0 and the sub */
  ir_func_free(f);
}

static void test_identity_int(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_I32, 2, 2);
  ir_ref x = param(f, t);
  ir_ref a = op2(f, IR_MUL, t, x, cst(f, t, 1));
  ir_ref b = op2(f, IR_DIV, t, a, cst(f, t, 1));
  ir_ref c = op2(f, IR_ADD, t, cst(f, t, 0), b);
  ir_ref d = op2(f, IR_MUL, t, c, cst(f, t, 2)); /* x * 2 stays */
  result1(f, d);
  run_pass(f, "canonicalize");
  expect_text(f, "func @f(%0: i32[2,2]) -> i32[2,2] {\n"
                 "  %1 = const 2 : i32[2,2]\n"
                 "  %2 = mul %0, %1 : i32[2,2]\n"
                 "  return %2\n"
                 "}\n");
  ir_func_free(f);
}

static void test_fold_elementwise(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 3), ti = TY(f, JIT_I32, 3), tb = TY(f, JIT_BOOL, 3);
  ir_ref x = param(f, t);
  ir_ref c2 = cst(f, t, 2), c3 = cst(f, t, 3.5);
  ir_ref m = op2(f, IR_MUL, t, c2, c3);                 /* 7 */
  ir_ref s = op2(f, IR_SUB, t, m, op1(f, IR_NEG, t, c2)); /* 7 - -2 = 9 */
  ir_ref e = op1(f, IR_EXP, t, cst(f, t, 0));           /* 1 */
  ir_ref cv = op1(f, IR_CONVERT, ti, c3);               /* 3 (truncates) */
  ir_attr lt = {0};
  lt.cmp = JIT_LT;
  ir_ref cargs[2] = {c2, c3};
  ir_ref cmp = emit_at(f, IR_CMP, tb, 2, cargs, &lt, NOLOC); /* true */
  ir_ref sum = op2(f, IR_ADD, t, x, s);                  /* x + 9 stays */
  ir_ref third = op2(f, IR_DIV, t, cst(f, t, 1), cst(f, t, 3)); /* rounded to f32 */
  ir_ref r[6] = {sum, e, cv, cmp, third, op2(f, IR_MUL, t, x, e)};
  results(f, 6, r);
  run_pass(f, "canonicalize");
  assert_int_equal(result_ins(f, 0)->op, IR_ADD);
  const ir_ins *k = &f->ins[result_ins(f, 0)->args[1]];
  assert_int_equal(k->op, IR_CONST);
  assert_true(k->attr.value == 9.0);
  assert_int_equal(result_ins(f, 1)->op, IR_CONST);
  assert_true(result_ins(f, 1)->attr.value == 1.0);
  assert_int_equal(result_ins(f, 2)->op, IR_CONST);
  assert_true(result_ins(f, 2)->attr.value == 3.0);
  assert_int_equal(result_ins(f, 2)->ty, ti);
  assert_int_equal(result_ins(f, 3)->op, IR_CONST);
  assert_true(result_ins(f, 3)->attr.value == 1.0);
  assert_int_equal(result_ins(f, 3)->ty, tb);
  assert_true(result_ins(f, 4)->attr.value == (double)(1.0f / 3.0f));
  assert_int_equal(f->results[5], x); /* x * exp(0) -> x * 1 -> x */
  ir_func_free(f);
}

static void test_fold_int_wraps(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY0(f, JIT_I32), t8 = TY0(f, JIT_U8);
  ir_ref a = op2(f, IR_MUL, t, cst(f, t, 65536), cst(f, t, 65536)); /* 2^32 wraps to 0 */
  ir_ref b = op2(f, IR_DIV, t, cst(f, t, 7), cst(f, t, 0));         /* the interpreter's -1 */
  ir_ref c = op1(f, IR_NEG, t8, cst(f, t8, 1));                     /* 255 */
  ir_ref r[3] = {a, b, c};
  results(f, 3, r);
  run_pass(f, "canonicalize");
  assert_true(result_ins(f, 0)->attr.value == 0);
  assert_true(result_ins(f, 1)->attr.value == -1);
  assert_true(result_ins(f, 2)->attr.value == 255);
  for (int i = 0; i < 3; i++) assert_int_equal(result_ins(f, i)->op, IR_CONST);
  ir_func_free(f);
}

static void test_select_and_neg(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F64, 2), tb = TY(f, JIT_BOOL, 2);
  ir_ref x = param(f, t), y = param(f, t), p = param(f, tb);
  ir_ref s1[3] = {cst(f, tb, 1), x, y}, s0[3] = {cst(f, tb, 0), x, y}, sp[3] = {p, y, y};
  ir_ref n3 = op1(f, IR_NEG, t, op1(f, IR_NEG, t, op1(f, IR_NEG, t, x)));
  ir_ref r[5] = {emit_at(f, IR_SELECT, t, 3, s1, NULL, NOLOC),
                 emit_at(f, IR_SELECT, t, 3, s0, NULL, NOLOC),
                 emit_at(f, IR_SELECT, t, 3, sp, NULL, NOLOC),
                 op1(f, IR_NEG, t, op1(f, IR_NEG, t, y)), n3};
  results(f, 5, r);
  run_pass(f, "canonicalize");
  assert_int_equal(f->results[0], x);
  assert_int_equal(f->results[1], y);
  assert_int_equal(f->results[2], y);
  assert_int_equal(f->results[3], y);
  assert_int_equal(result_ins(f, 4)->op, IR_NEG); /* neg neg neg x -> neg x */
  assert_int_equal(result_ins(f, 4)->args[0], x);
  assert_int_equal(f->n_ins, 4);
  ir_func_free(f);
}

static void test_reduce_fold(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 4, 3), t4 = TY(f, JIT_F32, 4), td = TY(f, JIT_F64, 3),
        td0 = TY0(f, JIT_F64), ti = TY(f, JIT_I32, 2, 5), ti0 = TY0(f, JIT_I32),
        te = TY(f, JIT_F32, 4, 0);
  ir_attr ax1 = DATTR(1), ax0 = DATTR(0), ax01 = DATTR(0, 1);
  ir_ref half = cst(f, t, 0.5);
  ir_ref r[9] = {
      op1a(f, IR_REDUCE_SUM, t4, half, &ax1),            /* 1.5 */
      op1a(f, IR_REDUCE_MAX, t4, half, &ax1),            /* 0.5 */
      op1a(f, IR_REDUCE_SUM, td0, cst(f, td, 0.1), &ax0), /* 3 * 0.1 is not exact: kept */
      op1a(f, IR_REDUCE_SUM, ti0, cst(f, ti, -3), &ax01), /* -30 */
      op1a(f, IR_REDUCE_MIN, t4, cst(f, te, 2), &ax1),   /* over nothing: kept */
      op1a(f, IR_REDUCE_SUM, td0, cst(f, td, 0.25), &ax0), /* 0.75 */
      op1a(f, IR_REDUCE_SUM, t4, cst(f, t, -INFINITY), &ax1),
      op1a(f, IR_REDUCE_MAX, t4, cst(f, t, NAN), &ax1),
      op1a(f, IR_REDUCE_SUM, t4, cst(f, t, -0.0), &ax1), /* the accumulator starts at +0 */
  };
  results(f, 9, r);
  run_pass(f, "canonicalize");
  const ir_op want_op[9] = {IR_CONST, IR_CONST, IR_REDUCE_SUM, IR_CONST, IR_REDUCE_MIN,
                            IR_CONST, IR_CONST, IR_CONST, IR_CONST};
  const double want_v[9] = {1.5, 0.5, 0, -30, 0, 0.75, -INFINITY, NAN, 0};
  assert_false(signbit(result_ins(f, 8)->attr.value));
  assert_true(isnan(result_ins(f, 7)->attr.value));
  for (int i = 0; i < 7; i++) {
    assert_int_equal(result_ins(f, i)->op, want_op[i]);
    if (want_op[i] == IR_CONST) assert_true(result_ins(f, i)->attr.value == want_v[i]);
  }
  assert_int_equal(result_ins(f, 0)->ty, t4);
  assert_int_equal(result_ins(f, 3)->ty, ti0);
  ir_func_free(f);
}

static void test_movement(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t234 = TY(f, JIT_F32, 2, 3, 4), t342 = TY(f, JIT_F32, 3, 4, 2), t423 = TY(f, JIT_F32, 4, 2, 3),
        t6_4 = TY(f, JIT_F32, 6, 4), t24 = TY(f, JIT_F32, 24), t4 = TY(f, JIT_F32, 4);
  ir_ref x = param(f, t234), v = param(f, t4);
  ir_attr p120 = DATTR(1, 2, 0), p012 = DATTR(0, 1, 2), p021 = DATTR(0, 2, 1);
  ir_ref tt = op1a(f, IR_TRANSPOSE, t423, op1a(f, IR_TRANSPOSE, t342, x, &p120), &p120);
  ir_ty t243 = TY(f, JIT_F32, 2, 4, 3);
  ir_ref back = op1a(f, IR_TRANSPOSE, t234, op1a(f, IR_TRANSPOSE, t243, x, &p021), &p021);
  ir_ref id = op1a(f, IR_TRANSPOSE, t234, x, &p012);
  ir_ref rr = op1(f, IR_RESHAPE, t24, op1(f, IR_RESHAPE, t6_4, x));
  ir_ref rself = op1(f, IR_RESHAPE, t234, op1(f, IR_RESHAPE, t24, x));
  ir_attr b_last = DATTR(2), b_id = DATTR(0, 1, 2);
  ir_ref bc = op1a(f, IR_BROADCAST, t234, cst(f, t4, 1.5), &b_last);
  ir_ref bid = op1a(f, IR_BROADCAST, t234, x, &b_id);
  ir_ty t34 = TY(f, JIT_F32, 3, 4);
  ir_ref bb = op1a(f, IR_BROADCAST, t234, op1a(f, IR_BROADCAST, t34, v, &(ir_attr){.dims = {1, {1}}}),
                   &(ir_attr){.dims = {2, {1, 2}}});
  ir_ref cv = op1(f, IR_CONVERT, t234, x);
  ir_attr sl = {0};
  for (int i = 0; i < 3; i++) {
    sl.slice.limit[i] = (int64_t[]){2, 3, 4}[i];
    sl.slice.stride[i] = 1;
  }
  ir_ref sfull = op1a(f, IR_SLICE, t234, x, &sl);
  sl.slice.start[2] = 1;
  ir_ty t233 = TY(f, JIT_F32, 2, 3, 3);
  ir_ref spart = op1a(f, IR_SLICE, t233, x, &sl);
  ir_ref cat1 = op1a(f, IR_CONCAT, t234, x, &(ir_attr){.axis = 1});
  ir_ty t8 = TY(f, JIT_F32, 8);
  ir_ref two[2] = {cst(f, t4, 2), cst(f, t4, 2)};
  ir_ref cat2 = emit_at(f, IR_CONCAT, t8, 2, two, &(ir_attr){.axis = 0}, NOLOC);
  ir_ref r[12] = {tt, back, id, rr, rself, bc, bid, bb, cv, sfull, spart, cat1};
  ir_ref r2[13];
  memcpy(r2, r, sizeof r);
  r2[12] = cat2;
  results(f, 13, r2);
  run_pass(f, "canonicalize");
  /* transpose(transpose(x, [1,2,0]), [1,2,0]) = transpose(x, [2,0,1]) */
  assert_int_equal(result_ins(f, 0)->op, IR_TRANSPOSE);
  assert_int_equal(result_ins(f, 0)->args[0], x);
  assert_int_equal(result_ins(f, 0)->attr.dims.d[0], 2);
  assert_int_equal(result_ins(f, 0)->attr.dims.d[1], 0);
  assert_int_equal(result_ins(f, 0)->attr.dims.d[2], 1);
  assert_int_equal(f->results[1], x);
  assert_int_equal(f->results[2], x);
  assert_int_equal(result_ins(f, 3)->op, IR_RESHAPE);
  assert_int_equal(result_ins(f, 3)->args[0], x);
  assert_int_equal(f->results[4], x);
  assert_int_equal(result_ins(f, 5)->op, IR_CONST);
  assert_true(result_ins(f, 5)->attr.value == 1.5);
  assert_int_equal(result_ins(f, 5)->ty, t234);
  assert_int_equal(f->results[6], x);
  /* broadcast(broadcast(v, [1]) : [3,4], [1,2]) = broadcast(v, [2]) : [2,3,4] */
  assert_int_equal(result_ins(f, 7)->op, IR_BROADCAST);
  assert_int_equal(result_ins(f, 7)->args[0], v);
  assert_int_equal(result_ins(f, 7)->attr.dims.n, 1);
  assert_int_equal(result_ins(f, 7)->attr.dims.d[0], 2);
  assert_int_equal(f->results[8], x);
  assert_int_equal(f->results[9], x);
  assert_int_equal(result_ins(f, 10)->op, IR_SLICE);
  assert_int_equal(f->results[11], x);
  assert_int_equal(result_ins(f, 12)->op, IR_CONST);
  assert_int_equal(result_ins(f, 12)->ty, t8);
  ir_func_free(f);
}

static void test_locations(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 2);
  ir_ref x = param(f, t);
  ir_ref a = emit_at(f, IR_CONST, t, 0, NULL, &(ir_attr){.value = 2}, (ir_loc){"a.c", 1});
  ir_ref b = emit_at(f, IR_CONST, t, 0, NULL, &(ir_attr){.value = 3}, (ir_loc){"a.c", 2});
  ir_ref ab[2] = {a, b};
  ir_ref s = emit_at(f, IR_ADD, t, 2, ab, NULL, (ir_loc){"b.c", 7});
  ir_ref xs[2] = {x, s};
  ir_ref m = emit_at(f, IR_MUL, t, 2, xs, NULL, (ir_loc){"b.c", 8});
  ir_ref m1[1] = {m};
  ir_ref nn = emit_at(f, IR_NEG, t, 1, m1, NULL, (ir_loc){"b.c", 9});
  ir_ref nn1[1] = {nn};
  ir_ref n2 = emit_at(f, IR_NEG, t, 1, nn1, NULL, (ir_loc){"b.c", 10});
  result1(f, n2);
  run_pass(f, "canonicalize");
  expect_text(f, "func @f(%0: f32[2]) -> f32[2] {\n"
                 "  %1 = const 5 : f32[2]                                           # b.c:7\n"
                 "  %2 = mul %0, %1 : f32[2]                                        # b.c:8\n"
                 "  return %2\n"
                 "}\n");
  ir_func_free(f);
}

/* ---- cse ------------------------------------------------------------------------------------- */

static void test_cse_basic(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 3), t2 = TY(f, JIT_F64, 3);
  ir_ref x = param(f, t), y = param(f, t);
  ir_ref xy[2] = {x, y}, yx[2] = {y, x};
  ir_ref a1 = emit_at(f, IR_ADD, t, 2, xy, NULL, (ir_loc){"a.c", 1});
  ir_ref a2 = emit_at(f, IR_ADD, t, 2, yx, NULL, (ir_loc){"a.c", 2}); /* commutes: = a1 */
  ir_ref s1 = op2(f, IR_SUB, t, x, y), s2 = op2(f, IR_SUB, t, y, x);  /* does not */
  ir_ref e1 = op1(f, IR_EXP, t, a1), e2 = op1(f, IR_EXP, t, a2);      /* = once a2 = a1 */
  ir_ref n1 = cst(f, t, NAN), n2 = cst(f, t, NAN);                    /* same bits: merge */
  ir_ref z1 = cst(f, t, 0.0), z2 = cst(f, t, -0.0);                   /* differ */
  ir_ref d1 = cst(f, t2, 0.0);                                        /* other type */
  ir_ref c1 = op1(f, IR_CONVERT, t2, x), c2 = op1(f, IR_CONVERT, t2, x);
  ir_ref r[11] = {a1, a2, s1, s2, e1, e2, n1, n2, z1, z2, d1};
  ir_ref r2[13];
  memcpy(r2, r, sizeof r);
  r2[11] = c1;
  r2[12] = c2;
  results(f, 13, r2);
  run_pass(f, "cse");
  assert_int_equal(f->results[0], f->results[1]);
  assert_string_equal(result_ins(f, 0)->loc.file, "a.c");
  assert_int_equal(result_ins(f, 0)->loc.line, 1); /* the first occurrence's location */
  assert_int_not_equal(f->results[2], f->results[3]);
  assert_int_equal(f->results[4], f->results[5]);
  assert_int_equal(f->results[6], f->results[7]);
  assert_int_not_equal(f->results[8], f->results[9]);
  assert_int_not_equal(f->results[8], f->results[10]);
  assert_int_equal(f->results[11], f->results[12]);
  assert_int_equal(f->n_ins, 2 + 1 + 2 + 1 + 1 + 2 + 1 + 1);
  ir_func_free(f);
}

static void test_cse_attrs_params(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 2, 3), tt = TY(f, JIT_F32, 3, 2), t2 = TY(f, JIT_F32, 2),
        t3 = TY(f, JIT_F32, 3), tb = TY(f, JIT_BOOL, 2, 3), t22 = TY(f, JIT_F32, 2, 2),
        ts = TY(f, JIT_F32, 2, 1);
  ir_ref x = param(f, t), y = param(f, t); /* two params of one type: never merged */
  ir_attr p10 = DATTR(1, 0), a0 = DATTR(0), a1 = DATTR(1);
  ir_ref tr1 = op1a(f, IR_TRANSPOSE, tt, x, &p10), tr2 = op1a(f, IR_TRANSPOSE, tt, x, &p10);
  ir_ref s1 = op1a(f, IR_REDUCE_SUM, t3, x, &a0), s2 = op1a(f, IR_REDUCE_SUM, t2, x, &a1);
  ir_ref m1 = op1a(f, IR_REDUCE_MAX, t2, x, &a1);
  ir_attr lt = {.cmp = JIT_LT}, gt = {.cmp = JIT_GT};
  ir_ref xy[2] = {x, y};
  ir_ref c1 = emit_at(f, IR_CMP, tb, 2, xy, &lt, NOLOC), c2 = emit_at(f, IR_CMP, tb, 2, xy, &gt, NOLOC),
         c3 = emit_at(f, IR_CMP, tb, 2, xy, &lt, NOLOC);
  ir_attr sl = {0};
  sl.slice.limit[0] = 2;
  sl.slice.limit[1] = 1;
  sl.slice.stride[0] = sl.slice.stride[1] = 1;
  ir_ref sl1 = op1a(f, IR_SLICE, ts, x, &sl);
  sl.slice.limit[2] = 99; /* past the rank: not part of the key */
  ir_ref sl2 = op1a(f, IR_SLICE, ts, x, &sl);
  ir_attr dt = {0};
  dt.dot.n_contract = 1;
  dt.dot.lhs_contract[0] = 1;
  dt.dot.rhs_contract[0] = 1;
  ir_ref d1 = emit_at(f, IR_DOT, t22, 2, xy, &dt, NOLOC), d2 = emit_at(f, IR_DOT, t22, 2, xy, &dt, NOLOC);
  ir_ref r[13] = {x, y, tr1, tr2, s1, s2, m1, c1, c2, c3, sl1, sl2, d1};
  ir_ref r2[14];
  memcpy(r2, r, sizeof r);
  r2[13] = d2;
  results(f, 14, r2);
  run_pass(f, "cse");
  assert_int_not_equal(f->results[0], f->results[1]);
  assert_int_equal(f->results[2], f->results[3]);
  assert_int_not_equal(f->results[4], f->results[5]);
  assert_int_not_equal(f->results[5], f->results[6]);
  assert_int_not_equal(f->results[7], f->results[8]);
  assert_int_equal(f->results[7], f->results[9]);
  assert_int_equal(f->results[10], f->results[11]);
  assert_int_equal(f->results[12], f->results[13]);
  ir_func_free(f);
}

/* ---- dce ------------------------------------------------------------------------------------- */

static void test_dce(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY(f, JIT_F32, 2);
  ir_ref x = param(f, t), unused = param(f, t);
  ir_ref dead = op1(f, IR_EXP, t, op1(f, IR_NEG, t, x));
  ir_ref live = op2(f, IR_ADD, t, x, x);
  (void)dead;
  (void)unused;
  result1(f, live);
  run_pass(f, "dce");
  expect_text(f, "func @f(%0: f32[2], %1: f32[2]) -> f32[2] {\n"
                 "  %2 = add %0, %0 : f32[2]\n"
                 "  return %2\n"
                 "}\n");
  /* Nothing dead: the function is left as it is. */
  ir_ins *before = f->ins;
  assert_int_equal(pass_dce(f), JIT_OK);
  assert_ptr_equal(f->ins, before);
  ir_func_free(f);
}

static void test_dce_no_results(void **state) {
  (void)state;
  ir_func *f = ir_func_new("f");
  ir_ty t = TY0(f, JIT_I32);
  param(f, t);
  cst(f, t, 3);
  results(f, 0, NULL);
  run_pass(f, "dce");
  assert_int_equal(f->n_ins, 1);
  assert_int_equal(f->n_params, 1);
  ir_func_free(f);
}

/* ---- pipeline -------------------------------------------------------------------------------- */

/* max(max(exp((x + 0) * 1), exp x), exp x), and a dead log: every pass has work. */
static ir_func *pipeline_input(void) {
  ir_func *f = ir_func_new("p");
  ir_ty t = TY(f, JIT_F32, 4);
  ir_ref x = param(f, t);
  ir_ref a = op2(f, IR_MUL, t, op2(f, IR_ADD, t, x, cst(f, t, 0)), cst(f, t, 1));
  ir_ref e1 = op1(f, IR_EXP, t, a), e2 = op1(f, IR_EXP, t, x), e3 = op1(f, IR_EXP, t, x);
  op1(f, IR_LOG, t, x); /* dead */
  result1(f, op2(f, IR_MAX, t, op2(f, IR_MAX, t, e1, e2), e3));
  return f;
}

static void test_pipeline(void **state) {
  (void)state;
  unsetenv("TJIT_DISABLE_PASSES");
  assert_string_equal(pass_names[PASS_CANONICALIZE], "canonicalize");
  assert_string_equal(pass_names[PASS_CSE], "cse");
  assert_string_equal(pass_names[PASS_DCE], "dce");

  ir_func *f = pipeline_input();
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  /* exp((x+0)*1) -> exp x (canonicalize), three exp x -> one (cse), then max(e, e) -> e (the
     second canonicalize) */
  expect_text(f, "func @p(%0: f32[4]) -> f32[4] {\n"
                 "  %1 = exp %0 : f32[4]\n"
                 "  return %1\n"
                 "}\n");
  ir_func_free(f);

  /* Without cse the three exps stay, and so do the maxes. */
  f = pipeline_input();
  assert_int_equal(ir_optimize(f, 1u << PASS_CSE, true), JIT_OK);
  assert_int_equal(f->n_ins, 6);
  ir_func_free(f);

  /* Everything off: untouched. */
  f = pipeline_input();
  uint32_t n = f->n_ins;
  assert_int_equal(ir_optimize(f, (1u << PASS_COUNT) - 1, true), JIT_OK);
  assert_int_equal(f->n_ins, n);
  ir_func_free(f);

  /* The environment adds to the mask. */
  setenv("TJIT_DISABLE_PASSES", "canonicalize, dce", 1);
  f = pipeline_input();
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  assert_int_equal(f->n_ins, n - 1); /* only cse ran: the two exp x merged, the log kept */
  ir_func_free(f);

  setenv("TJIT_DISABLE_PASSES", "cse,bogus", 1);
  f = pipeline_input();
  assert_int_equal(ir_optimize(f, 0, true), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "bogus"));
  assert_int_equal(f->n_ins, n);
  unsetenv("TJIT_DISABLE_PASSES");

  assert_int_equal(ir_run_pass(f, "nope", true), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "nope"));
  assert_int_equal(ir_run_pass(f, "pipeline", true), JIT_OK);
  assert_int_equal(f->n_ins, 2);
  ir_func_free(f);
}

/* ---- differential: random programs, interpreted before and after ----------------------------- */

typedef struct gen {
  uint64_t s;
  ir_func *f;
  jit_dtype dt;       /* the program's main dtype */
  ir_ref pool[96];    /* values that later ops may use */
  uint32_t n_pool;
  int line;
} gen;

static uint64_t rnd64(gen *g) { /* splitmix64 */
  uint64_t z = (g->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int rnd(gen *g, int n) { return n <= 1 ? 0 : (int)(rnd64(g) % (uint64_t)n); }

static ir_type type_at(gen *g, ir_ref r) { return *ir_type_of(g->f, r); }
static bool numeric(jit_dtype d) { return d != JIT_BOOL; }

static ir_ref gen_emit(gen *g, ir_op op, uint32_t n, const ir_ref *args, const ir_attr *a,
                       const ir_type *declared) {
  ir_type ts[4];
  const ir_type *tp[4];
  assert_true(n <= 4);
  for (uint32_t i = 0; i < n; i++) {
    ts[i] = type_at(g, args[i]);
    tp[i] = &ts[i];
  }
  ir_type out;
  char why[256];
  if (ir_infer_type(op, n, tp, a, declared, &out, why, sizeof why) != JIT_OK)
    fail_msg("generator made a bad %s: %s", ir_op_name[op], why);
  ir_loc loc = rnd(g, 3) ? (ir_loc){"gen.c", ++g->line} : NOLOC;
  ir_ref r = emit_at(g->f, op, ir_type_intern(g->f, &out), n, args, a, loc);
  if (g->n_pool < sizeof g->pool / sizeof g->pool[0]) g->pool[g->n_pool++] = r;
  return r;
}

static ir_ref pick(gen *g) { return g->pool[rnd(g, (int)g->n_pool)]; }
static ir_ref pick_numeric(gen *g) {
  for (int tries = 0; tries < 8; tries++) {
    ir_ref r = pick(g);
    if (numeric(type_at(g, r).dtype)) return r;
  }
  return IR_NOREF;
}

static double gen_value(gen *g, jit_dtype dt) {
  static const double fv[] = {0, 1, -1, 2, 0.5, 3, -2.5, 0.25, -0.0};
  if (dt == JIT_BOOL) return rnd(g, 2);
  if (ir_dtype_is_int(dt)) return rnd(g, 7) - 3;
  return fv[rnd(g, (int)(sizeof fv / sizeof fv[0]))];
}

static ir_ref gen_const(gen *g, const ir_type *t) {
  ir_attr a = {0};
  a.value = gen_value(g, t->dtype);
  return gen_emit(g, IR_CONST, 0, NULL, &a, t);
}

static ir_type random_type(gen *g, jit_dtype dt) {
  ir_type t = {.dtype = dt, .rank = rnd(g, 4)};
  for (int i = 0; i < t.rank; i++) t.dims[i] = rnd(g, 40) == 0 ? 0 : 1 + rnd(g, 4);
  return t;
}

/* A value of type t: an existing one when there is, else a constant. */
static ir_ref value_of_type(gen *g, const ir_type *t) {
  ir_ref cands[96];
  int n = 0;
  for (uint32_t i = 0; i < g->n_pool; i++) {
    ir_type u = type_at(g, g->pool[i]);
    if (ir_type_equal(&u, t)) cands[n++] = g->pool[i];
  }
  if (n && rnd(g, 4)) return cands[rnd(g, n)];
  return gen_const(g, t);
}

static void gen_unary(gen *g) {
  ir_ref x = pick_numeric(g);
  if (x == IR_NOREF) return;
  ir_type t = type_at(g, x);
  static const ir_op fops[] = {IR_NEG, IR_ABS, IR_EXP, IR_LOG, IR_SQRT, IR_RSQRT, IR_TANH,
                               IR_LOGISTIC, IR_SIN, IR_COS, IR_ERF, IR_FLOOR};
  ir_op op = ir_dtype_is_float(t.dtype) ? fops[rnd(g, 12)] : rnd(g, 2) ? IR_NEG : IR_ABS;
  gen_emit(g, op, 1, &x, NULL, NULL);
}

static void gen_binary(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  ir_ref args[2] = {x, value_of_type(g, &t)};
  if (rnd(g, 2)) {
    ir_ref s = args[0];
    args[0] = args[1];
    args[1] = s;
  }
  static const ir_op ops[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_MAX, IR_MIN, IR_POW};
  ir_op op = numeric(t.dtype) ? ops[rnd(g, 7)] : rnd(g, 2) ? IR_MAX : IR_MIN;
  gen_emit(g, op, 2, args, NULL, NULL);
}

static void gen_identity(gen *g) { /* shapes the canonicalizer should see through */
  ir_ref x = pick_numeric(g);
  if (x == IR_NOREF) return;
  ir_type t = type_at(g, x);
  switch (rnd(g, 5)) {
  case 0: {
    ir_ref a[2] = {x, gen_const(g, &t)};
    g->f->ins[a[1]].attr.value = rnd(g, 2) ? 0 : 1;
    gen_emit(g, rnd(g, 2) ? IR_ADD : IR_MUL, 2, a, NULL, NULL);
    break;
  }
  case 1: gen_emit(g, IR_NEG, 1, (ir_ref[]){gen_emit(g, IR_NEG, 1, &x, NULL, NULL)}, NULL, NULL); break;
  case 2: gen_emit(g, IR_CONVERT, 1, &x, NULL, &t); break;
  case 3: gen_emit(g, IR_RESHAPE, 1, &x, NULL, &t); break;
  default: {
    ir_attr a = {0};
    a.dims.n = (uint8_t)t.rank;
    for (int i = 0; i < t.rank; i++) a.dims.d[i] = (uint8_t)i;
    gen_emit(g, rnd(g, 2) ? IR_TRANSPOSE : IR_BROADCAST, 1, &x, &a, &t);
  }
  }
}

static void gen_cmp_select(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  ir_attr a = {0};
  a.cmp = (jit_cmp_op)rnd(g, 6);
  ir_ref c[2] = {x, value_of_type(g, &t)};
  ir_ref p = gen_emit(g, IR_CMP, 2, c, &a, NULL);
  if (rnd(g, 4) == 0) return;
  if (rnd(g, 5) == 0) { /* a constant predicate */
    ir_type tb = type_at(g, p);
    p = gen_const(g, &tb);
  }
  ir_ref s[3] = {p, rnd(g, 2) ? x : value_of_type(g, &t), value_of_type(g, &t)};
  gen_emit(g, IR_SELECT, 3, s, NULL, NULL);
}

static void gen_convert(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  static const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_I32, JIT_BOOL};
  t.dtype = rnd(g, 3) ? g->dt : dts[rnd(g, 4)];
  gen_emit(g, IR_CONVERT, 1, &x, NULL, &t);
}

static void gen_broadcast(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  int extra = rnd(g, 3);
  if (t.rank + extra > 4) extra = 4 - t.rank;
  ir_type o = {.dtype = t.dtype, .rank = t.rank + extra};
  ir_attr a = {0};
  a.dims.n = (uint8_t)t.rank;
  /* Choose which result dims the operand's dims land on, in increasing order. */
  int placed = 0;
  for (int j = 0; j < o.rank; j++) {
    int left = o.rank - j, need = t.rank - placed;
    bool take = need > 0 && (need == left || rnd(g, 2));
    if (take) {
      a.dims.d[placed] = (uint8_t)j;
      o.dims[j] = t.dims[placed] == 1 && rnd(g, 2) ? 1 + rnd(g, 3) : t.dims[placed];
      placed++;
    } else {
      o.dims[j] = 1 + rnd(g, 3);
    }
  }
  gen_emit(g, IR_BROADCAST, 1, &x, &a, &o);
}

static void gen_reshape(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  int64_t n = ir_type_numel(&t);
  ir_type o = {.dtype = t.dtype, .rank = 1 + rnd(g, 3)};
  for (int i = 0; i < o.rank; i++) o.dims[i] = 1;
  if (n == 0) {
    o.dims[rnd(g, o.rank)] = 0;
  } else {
    for (int64_t p = 2; n > 1; p++)
      while (n % p == 0) {
        o.dims[rnd(g, o.rank)] *= p;
        n /= p;
      }
    if (o.rank == 1 && o.dims[0] == 1 && rnd(g, 2)) o.rank = 0;
  }
  gen_emit(g, IR_RESHAPE, 1, &x, NULL, &o);
}

static void gen_transpose(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  ir_attr a = {0};
  a.dims.n = (uint8_t)t.rank;
  for (int i = 0; i < t.rank; i++) a.dims.d[i] = (uint8_t)i;
  for (int i = t.rank - 1; i > 0; i--) {
    int j = rnd(g, i + 1);
    uint8_t s = a.dims.d[i];
    a.dims.d[i] = a.dims.d[j];
    a.dims.d[j] = s;
  }
  gen_emit(g, IR_TRANSPOSE, 1, &x, &a, NULL);
}

static void gen_reduce(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  ir_attr a = {0};
  for (int i = 0; i < t.rank; i++)
    if (rnd(g, 2)) a.dims.d[a.dims.n++] = (uint8_t)i;
  ir_op op = numeric(t.dtype) && rnd(g, 2) ? IR_REDUCE_SUM : rnd(g, 2) ? IR_REDUCE_MAX : IR_REDUCE_MIN;
  gen_emit(g, op, 1, &x, &a, NULL);
}

static void gen_slice(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  ir_attr a = {0};
  bool full = rnd(g, 4) == 0;
  for (int i = 0; i < t.rank; i++) {
    int64_t d = t.dims[i];
    /* Mostly non-empty: start < limit when the dim allows. */
    a.slice.start[i] = full || d == 0 ? 0 : rnd(g, (int)d);
    a.slice.limit[i] = full || d == 0 ? d : a.slice.start[i] + 1 + rnd(g, (int)(d - a.slice.start[i]));
    a.slice.stride[i] = full ? 1 : 1 + rnd(g, 2);
  }
  gen_emit(g, IR_SLICE, 1, &x, &a, NULL);
}

static void gen_concat(gen *g) {
  ir_ref x = pick(g);
  ir_type t = type_at(g, x);
  if (t.rank == 0) return;
  ir_attr a = {0};
  a.axis = rnd(g, t.rank);
  ir_ref args[4] = {x};
  uint32_t n = 1 + (uint32_t)rnd(g, 3);
  for (uint32_t k = 1; k < n; k++) {
    args[k] = x;
    for (int tries = 0; tries < 6; tries++) { /* one that differs only along the axis */
      ir_ref y = pick(g);
      ir_type u = type_at(g, y);
      bool ok = u.dtype == t.dtype && u.rank == t.rank;
      for (int i = 0; ok && i < t.rank; i++) ok = i == a.axis || u.dims[i] == t.dims[i];
      if (ok) {
        args[k] = y;
        break;
      }
    }
  }
  gen_emit(g, IR_CONCAT, n, args, &a, NULL);
}

static void gen_dot(gen *g) {
  ir_ref x = pick_numeric(g);
  if (x == IR_NOREF) return;
  ir_type t = type_at(g, x);
  if (t.rank < 1 || t.rank > 2) return;
  int ca = rnd(g, t.rank);
  ir_ref y = x;
  int cb = ca;
  for (int tries = 0; tries < 8; tries++) {
    ir_ref z = pick(g);
    ir_type u = type_at(g, z);
    if (u.dtype != t.dtype || u.rank < 1 || u.rank > 2) continue;
    int k = rnd(g, u.rank);
    if (u.dims[k] == t.dims[ca]) {
      y = z;
      cb = k;
      break;
    }
  }
  ir_type u = type_at(g, y);
  ir_attr a = {0};
  a.dot.n_contract = 1;
  a.dot.lhs_contract[0] = (uint8_t)ca;
  a.dot.rhs_contract[0] = (uint8_t)cb;
  if (t.rank == 2 && u.rank == 2 && ca == 1 && cb == 1 && t.dims[0] == u.dims[0] && rnd(g, 2)) {
    a.dot.n_batch = 1; /* lhs_batch = rhs_batch = [0] */
  }
  ir_ref args[2] = {x, y};
  gen_emit(g, IR_DOT, 2, args, &a, NULL);
}

static void gen_duplicate(gen *g) { /* CSE's food: an exact copy of an earlier instruction */
  ir_ref x = pick(g);
  if (x < g->f->n_params) return;
  ir_ins in = g->f->ins[x];
  ir_ref args[4];
  if (in.n_args > 4) return;
  if (in.n_args) memcpy(args, in.args, in.n_args * sizeof *args);
  ir_type t = type_at(g, x);
  if (in.op == IR_ADD || in.op == IR_MUL) { /* commuted */
    ir_ref s = args[0];
    args[0] = args[1];
    args[1] = s;
  }
  gen_emit(g, in.op, in.n_args, args, &in.attr, &t);
}

static void gen_iota(gen *g) {
  ir_type t = random_type(g, g->dt);
  if (t.rank == 0) t.rank = 1, t.dims[0] = 3;
  ir_attr a = {0};
  a.axis = rnd(g, t.rank);
  gen_emit(g, IR_IOTA, 0, NULL, &a, &t);
}

static ir_func *gen_program(uint64_t seed) {
  gen g = {.s = seed};
  char name[32];
  snprintf(name, sizeof name, "rand%llu", (unsigned long long)seed);
  g.f = ir_func_new(name);
  assert_non_null(g.f);
  static const jit_dtype dts[] = {JIT_F32, JIT_F64, JIT_I32};
  g.dt = dts[rnd(&g, 3)];
  int n_params = 1 + rnd(&g, 3);
  for (int i = 0; i < n_params; i++) {
    ir_type t = random_type(&g, rnd(&g, 5) ? g.dt : dts[rnd(&g, 3)]);
    g.pool[g.n_pool++] = param(g.f, ir_type_intern(g.f, &t));
  }
  int n_ops = 4 + rnd(&g, 36);
  for (int i = 0; i < n_ops; i++) {
    switch (rnd(&g, 15)) {
    case 0: {
      ir_type t = rnd(&g, 2) ? type_at(&g, pick(&g)) : random_type(&g, g.dt);
      gen_const(&g, &t);
      break;
    }
    case 1: gen_unary(&g); break;
    case 2:
    case 3: gen_binary(&g); break;
    case 4: gen_identity(&g); break;
    case 5: gen_cmp_select(&g); break;
    case 6: gen_convert(&g); break;
    case 7: gen_broadcast(&g); break;
    case 8: gen_reshape(&g); break;
    case 9: gen_transpose(&g); break;
    case 10: gen_reduce(&g); break;
    case 11: gen_slice(&g); break;
    case 12: gen_concat(&g); break;
    case 13: gen_dot(&g); break;
    default: rnd(&g, 2) ? gen_duplicate(&g) : gen_iota(&g); break;
    }
  }
  /* Results: values nothing uses yet (latest first), so that most of the program is live. */
  bool *used = calloc(g.f->n_ins, sizeof *used);
  assert_non_null(used);
  for (uint32_t i = 0; i < g.f->n_ins; i++)
    for (uint32_t k = 0; k < g.f->ins[i].n_args; k++) used[g.f->ins[i].args[k]] = true;
  ir_ref res[3];
  uint32_t n_res = 0, want = 1 + (uint32_t)rnd(&g, 3);
  for (uint32_t i = g.f->n_ins; i-- > g.f->n_params && n_res < want;)
    if (!used[i] && rnd(&g, 5)) res[n_res++] = i;
  free(used);
  if (n_res == 0) res[n_res++] = g.pool[g.n_pool - 1];
  results(g.f, n_res, res);
  return g.f;
}

typedef struct buffers {
  uint32_t n;
  void **p;
} buffers;

static buffers alloc_buffers(const ir_func *f, uint32_t n, const ir_ref *refs) {
  buffers b = {n, calloc(n ? n : 1, sizeof(void *))};
  assert_non_null(b.p);
  for (uint32_t i = 0; i < n; i++) {
    const ir_type *t = ir_type_of(f, refs[i]);
    size_t bytes = (size_t)ir_type_numel(t) * jit_dtype_size(t->dtype);
    b.p[i] = calloc(bytes ? bytes : 1, 1);
    assert_non_null(b.p[i]);
  }
  return b;
}

static void free_buffers(buffers *b) {
  for (uint32_t i = 0; i < b->n; i++) free(b->p[i]);
  free(b->p);
}

static buffers random_args(const ir_func *f, uint64_t seed) {
  ir_ref refs[8];
  for (uint32_t i = 0; i < f->n_params; i++) refs[i] = i;
  buffers b = alloc_buffers(f, f->n_params, refs);
  gen g = {.s = seed ^ 0x5eedull};
  for (uint32_t i = 0; i < f->n_params; i++) {
    const ir_type *t = ir_type_of(f, i);
    for (int64_t k = 0; k < ir_type_numel(t); k++) {
      double v = ir_dtype_is_float(t->dtype) ? (double)(rnd(&g, 1 << 20) - (1 << 19)) / (1 << 18)
                                             : rnd(&g, 9) - 4;
      ir_store_f64(t->dtype, b.p[i], k, v);
    }
  }
  return b;
}

static void dump(const char *what, const ir_func *f) {
  fprintf(stderr, "---- %s\n", what);
  ir_print(f, stderr);
}

/* NaN matches NaN; -0.0 matches +0.0 (the documented x+0 caveat); otherwise exact. */
static bool same_results(const ir_func *f, const buffers *a, const buffers *b, char *why, size_t n) {
  for (uint32_t i = 0; i < f->n_results; i++) {
    const ir_type *t = ir_type_of(f, f->results[i]);
    for (int64_t k = 0; k < ir_type_numel(t); k++) {
      double x = ir_load_f64(t->dtype, a->p[i], k), y = ir_load_f64(t->dtype, b->p[i], k);
      bool ok = ir_dtype_is_float(t->dtype) ? (isnan(x) && isnan(y)) || x == y
                                            : ir_load_i64(t->dtype, a->p[i], k) ==
                                                  ir_load_i64(t->dtype, b->p[i], k);
      if (!ok) {
        snprintf(why, n, "result %u element %lld: %.17g before, %.17g after", i, (long long)k, x, y);
        return false;
      }
    }
  }
  return true;
}

static void differential(uint64_t seed, const char *pass, int *changed) {
  ir_func *f = gen_program(seed);
  if (ir_verify(f, "gen") != JIT_OK) {
    dump("generated", f);
    fail_msg("seed %llu: %s", (unsigned long long)seed, jit_last_error());
  }
  buffers args = random_args(f, seed);
  buffers want = alloc_buffers(f, f->n_results, f->results);
  if (ir_interp(f, (const void *const *)args.p, want.p) != JIT_OK) {
    dump("generated", f);
    fail_msg("seed %llu: interp: %s", (unsigned long long)seed, jit_last_error());
  }
  ir_func *g = ir_func_clone(f);
  assert_non_null(g);
  jit_status st = pass ? ir_run_pass(g, pass, true) : ir_optimize(g, 0, true);
  if (st != JIT_OK) {
    dump("before", f);
    dump("after", g);
    fail_msg("seed %llu, %s: %s", (unsigned long long)seed, pass ? pass : "pipeline", jit_last_error());
  }
  assert_int_equal(g->n_params, f->n_params);
  assert_int_equal(g->n_results, f->n_results);
  assert_true(g->n_ins <= f->n_ins); /* every pass only shrinks */
  if (g->n_ins < f->n_ins) ++*changed;
  for (uint32_t i = 0; i < f->n_results; i++)
    assert_true(ir_type_equal(ir_type_of(f, f->results[i]), ir_type_of(g, g->results[i])));
  assert_ir_roundtrip(g);

  buffers got = alloc_buffers(g, g->n_results, g->results);
  if (ir_interp(g, (const void *const *)args.p, got.p) != JIT_OK) {
    dump("after", g);
    fail_msg("seed %llu: interp after %s: %s", (unsigned long long)seed, pass ? pass : "pipeline",
             jit_last_error());
  }
  char why[160];
  if (!same_results(f, &want, &got, why, sizeof why)) {
    dump("before", f);
    dump("after", g);
    fail_msg("seed %llu, %s: %s", (unsigned long long)seed, pass ? pass : "pipeline", why);
  }
  free_buffers(&got);
  free_buffers(&want);
  free_buffers(&args);
  ir_func_free(g);
  ir_func_free(f);
}

/* 400 programs by default; $TJIT_TEST_PROGRAMS=N runs more (a soak run). */
static void test_differential(void **state) {
  (void)state;
  unsetenv("TJIT_DISABLE_PASSES");
  int n_programs = getenv("TJIT_TEST_PROGRAMS") ? atoi(getenv("TJIT_TEST_PROGRAMS")) : 400;
  const char *passes[] = {"canonicalize", "cse", "dce", NULL};
  for (int p = 0; p < 4; p++) {
    int changed = 0;
    for (uint64_t seed = 1; seed <= (uint64_t)n_programs; seed++) differential(seed, passes[p], &changed);
    /* The generator feeds every pass something to do in a good share of programs. */
    if (changed < n_programs / 10)
      fail_msg("%s changed only %d of %d programs", passes[p] ? passes[p] : "pipeline", changed,
               n_programs);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identities),      cmocka_unit_test(test_identity_int),
      cmocka_unit_test(test_fold_elementwise), cmocka_unit_test(test_fold_int_wraps),
      cmocka_unit_test(test_select_and_neg),  cmocka_unit_test(test_reduce_fold),
      cmocka_unit_test(test_movement),        cmocka_unit_test(test_locations),
      cmocka_unit_test(test_cse_basic),       cmocka_unit_test(test_cse_attrs_params),
      cmocka_unit_test(test_dce),             cmocka_unit_test(test_dce_no_results),
      cmocka_unit_test(test_pipeline),        cmocka_unit_test(test_differential),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
