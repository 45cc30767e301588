/* test_trace.c: the tracer, driven through trace_function: the IR each op produces (printed and
 * compared as text), weak scalars, broadcasting, locations, and every bad-input case with its
 * status and exact message. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/roundtrip.h"
#include "trace/trace.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

/* "f32[3,4]" -> type */
static ir_type T(const char *s) {
  ir_type t;
  memset(&t, 0, sizeof t);
  const char *br = strchr(s, '[');
  assert_non_null(br);
  assert_true(ir_dtype_parse(s, (size_t)(br - s), &t.dtype));
  const char *p = br + 1;
  while (*p != ']') {
    char *end;
    t.dims[t.rank++] = strtoll(p, &end, 10);
    p = *end == ',' ? end + 1 : end;
  }
  return t;
}

/* Traces fn on args "f32[2];i32[]" (';'-separated, "" for none); returns the status and the
   function (NULL on failure). */
static jit_status run(const char *name, jit_trace_fn fn, void *user, const char *args,
                      int n_results, ir_func **out) {
  ir_type types[16];
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", args);
  for (char *save = NULL, *tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
    types[n++] = T(tok);
  trace_request req = {.name = name, .fn = fn, .user = user, .n_args = n,
                       .n_results = n_results, .arg_types = types};
  return trace_function(&req, out);
}

/* The printed function without location comments (checked separately). */
static char *text_of(const ir_func *f) {
  char *s = ir_print_to_string(f);
  char *w = s;
  for (char *r = s; *r;) {
    char *nl = strchr(r, '\n');
    size_t len = nl ? (size_t)(nl - r) : strlen(r);
    char *hash = memchr(r, '#', len);
    size_t keep = hash ? (size_t)(hash - r) : len;
    while (hash && keep > 0 && r[keep - 1] == ' ') keep--;
    memmove(w, r, keep);
    w += keep;
    if (nl) *w++ = '\n';
    r += len + (nl ? 1 : 0);
  }
  *w = '\0';
  return s;
}

/* Traces, checks the text (without locations) and the print/parse round trip. */
static void expect_ir(const char *name, jit_trace_fn fn, void *user, const char *args,
                      int n_results, const char *want) {
  ir_func *f = NULL;
  jit_status st = run(name, fn, user, args, n_results, &f);
  if (st != JIT_OK) fail_msg("trace failed (%d): %s", st, jit_last_error());
  assert_non_null(f);
  char *got = text_of(f);
  if (strcmp(got, want) != 0) {
    print_error("got:\n%s\nwant:\n%s\n", got, want);
    free(got);
    ir_func_free(f);
    fail_msg("IR differs");
  }
  free(got);
  assert_ir_roundtrip(f);
  ir_func_free(f);
}

/* ---- the IR of each op ------------------------------------------------------------------------ */

static int mlp_line;
static void mlp(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  jit_val h = jit_matmul(t, a[0], a[1]);
  mlp_line = __LINE__ + 1;
  r[0] = jit_relu(t, jit_add(t, h, a[2]));
}

static void test_mlp(void **state) {
  (void)state;
  expect_ir("mlp", mlp, NULL, "f32[512,1024];f32[1024,4096];f32[4096]", 1,
            "func @mlp(%0: f32[512,1024], %1: f32[1024,4096], %2: f32[4096]) -> f32[512,4096] {\n"
            "  %3 = dot %0, %1 contract=[1]x[0] : f32[512,4096]\n"
            "  %4 = broadcast %2 dims=[1] : f32[512,4096]\n"
            "  %5 = add %3, %4 : f32[512,4096]\n"
            "  %6 = const 0 : f32[512,4096]\n"
            "  %7 = max %5, %6 : f32[512,4096]\n"
            "  return %7\n"
            "}\n");
  /* locations: this file, relative to the source tree, and the line of each op */
  ir_func *f = NULL;
  assert_int_equal(run("mlp", mlp, NULL, "f32[512,1024];f32[1024,4096];f32[4096]", 1, &f), JIT_OK);
  assert_int_equal(f->n_ins, 8);
  for (uint32_t i = 0; i < 3; i++) assert_null(f->ins[i].loc.file);
  for (uint32_t i = 3; i < 8; i++) assert_string_equal(f->ins[i].loc.file, "tests/test_trace.c");
  assert_int_equal(f->ins[3].loc.line, mlp_line - 2);
  for (uint32_t i = 4; i < 8; i++) assert_int_equal(f->ins[i].loc.line, mlp_line);
  char *s = ir_print_to_string(f);
  char want[128];
  snprintf(want, sizeof want, "# tests/test_trace.c:%d\n", mlp_line - 2);
  assert_non_null(strstr(s, want));
  free(s);
  ir_func_free(f);
}

static int nest_line;
static void no_loc(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = (jit_add)(t, a[0], a[0]); /* the function itself, not the macro: no location */
  r[1] = jit_neg(t, a[0]);
  nest_line = __LINE__ + 1;
  r[2] = jit_sub(t, jit_exp(t, a[0]), jit_mul(t, jit_log(t, a[0]),
                                               jit_sin(t, a[0])));
}

static void test_locations(void **state) {
  (void)state;
  ir_func *f = NULL;
  assert_int_equal(run("no_loc", no_loc, NULL, "f32[2]", 3, &f), JIT_OK);
  assert_int_equal(f->n_ins, 8);
  assert_null(f->ins[1].loc.file);
  assert_string_equal(f->ins[2].loc.file, "tests/test_trace.c");
  assert_int_equal(f->ins[2].loc.line, nest_line - 2);
  /* nested macro calls: each op gets its own line, whatever order the compiler evaluates in */
  for (uint32_t i = 3; i < 8; i++) {
    ir_op op = f->ins[i].op;
    assert_int_equal(f->ins[i].loc.line, op == IR_SIN ? nest_line + 1 : nest_line);
  }
  assert_ir_roundtrip(f);
  ir_func_free(f);
}

typedef jit_val (*unary_fn)(jit_trace *, jit_val);
static const struct {
  unary_fn fn;
  const char *name;
} unaries[] = {
    {(jit_neg), "neg"},   {(jit_abs), "abs"},     {(jit_exp), "exp"},           {(jit_log), "log"},
    {(jit_sqrt), "sqrt"}, {(jit_rsqrt), "rsqrt"}, {(jit_tanh), "tanh"},         {(jit_logistic), "logistic"},
    {(jit_sin), "sin"},   {(jit_cos), "cos"},     {(jit_erf), "erf"},           {(jit_floor), "floor"},
};

static void unary_one(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = unaries[*(int *)u].fn(t, a[0]);
}

static void test_unary(void **state) {
  (void)state;
  for (int i = 0; i < N_OF(unaries); i++) {
    char want[256];
    snprintf(want, sizeof want,
             "func @u(%%0: bf16[2,3]) -> bf16[2,3] {\n  %%1 = %s %%0 : bf16[2,3]\n  return %%1\n}\n",
             unaries[i].name);
    expect_ir("u", unary_one, &i, "bf16[2,3]", 1, want);
    /* ints: only neg and abs */
    ir_func *f = NULL;
    jit_status st = run("u", unary_one, &i, "i32[4]", 1, &f);
    if (i < 2) {
      assert_int_equal(st, JIT_OK);
      assert_ir_roundtrip(f);
      ir_func_free(f);
    } else {
      assert_int_equal(st, JIT_EDTYPE);
      assert_null(f);
      char msg[128];
      snprintf(msg, sizeof msg, "u: %s: needs a float operand, got i32[4]", unaries[i].name);
      assert_string_equal(jit_last_error(), msg);
    }
  }
}

static void binaries(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_sub(t, a[0], a[1]);
  r[1] = jit_mul(t, a[1], a[0]);
  r[2] = jit_div(t, a[0], a[0]);
  r[3] = jit_max(t, a[0], a[1]);
  r[4] = jit_min(t, a[0], a[1]);
  r[5] = jit_pow(t, a[0], a[1]);
  r[6] = jit_cmp(t, JIT_LE, a[0], a[1]);
  r[7] = jit_select(t, r[6], a[0], a[1]);
  r[8] = jit_convert(t, a[0], JIT_F16);
}

static void test_binary(void **state) {
  (void)state;
  expect_ir("b", binaries, NULL, "f64[3];f64[2,1]", 9,
            "func @b(%0: f64[3], %1: f64[2,1]) -> (f64[2,3], f64[2,3], f64[3], f64[2,3], f64[2,3], "
            "f64[2,3], bool[2,3], f64[2,3], f16[3]) {\n"
            "  %2 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %3 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %4 = sub %2, %3 : f64[2,3]\n"
            "  %5 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %6 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %7 = mul %5, %6 : f64[2,3]\n"
            "  %8 = div %0, %0 : f64[3]\n"
            "  %9 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %10 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %11 = max %9, %10 : f64[2,3]\n"
            "  %12 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %13 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %14 = min %12, %13 : f64[2,3]\n"
            "  %15 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %16 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %17 = pow %15, %16 : f64[2,3]\n"
            "  %18 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %19 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %20 = cmp %18, %19 dir=le : bool[2,3]\n"
            "  %21 = broadcast %0 dims=[1] : f64[2,3]\n"
            "  %22 = broadcast %1 dims=[0,1] : f64[2,3]\n"
            "  %23 = select %20, %21, %22 : f64[2,3]\n"
            "  %24 = convert %0 : f16[3]\n"
            "  return %4, %7, %8, %11, %14, %17, %20, %23, %24\n"
            "}\n");
}

static void select_bcast(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_select(t, a[0], a[1], jit_scalar(t, 7));
  r[1] = jit_max(t, a[0], jit_scalar(t, 0));  /* bool max with a weak 0: false */
}

static void test_select_bool(void **state) {
  (void)state;
  expect_ir("s", select_bcast, NULL, "bool[2,1];i8[3]", 2,
            "func @s(%0: bool[2,1], %1: i8[3]) -> (i8[2,3], bool[2,1]) {\n"
            "  %2 = const 7 : i8[]\n"
            "  %3 = broadcast %0 dims=[0,1] : bool[2,3]\n"
            "  %4 = broadcast %1 dims=[1] : i8[2,3]\n"
            "  %5 = broadcast %2 dims=[] : i8[2,3]\n"
            "  %6 = select %3, %4, %5 : i8[2,3]\n"
            "  %7 = const 0 : bool[]\n"
            "  %8 = broadcast %7 dims=[] : bool[2,1]\n"
            "  %9 = max %0, %8 : bool[2,1]\n"
            "  return %6, %9\n"
            "}\n");
}

static void weak(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  jit_val two = jit_scalar(t, 2);
  r[0] = jit_add(t, a[0], two);                         /* takes i32 */
  r[1] = jit_mul(t, jit_scalar(t, 1.5), jit_scalar(t, 4)); /* weak 6, then f32 */
  r[2] = jit_cmp(t, JIT_GT, two, jit_scalar(t, 1));     /* bool constant */
  r[3] = jit_exp(t, two);                               /* no partner: f32 */
  r[4] = jit_sub(t, jit_scalar(t, 5), a[1]);            /* takes bf16 */
  r[5] = two;                                           /* already made f32 by exp */
}

static void test_weak(void **state) {
  (void)state;
  expect_ir("w", weak, NULL, "i32[2];bf16[]", 6,
            "func @w(%0: i32[2], %1: bf16[]) -> (i32[2], f32[], bool[], f32[], bf16[], f32[]) {\n"
            "  %2 = const 2 : i32[]\n"
            "  %3 = broadcast %2 dims=[] : i32[2]\n"
            "  %4 = add %0, %3 : i32[2]\n"
            "  %5 = const 1 : bool[]\n"
            "  %6 = const 2 : f32[]\n"
            "  %7 = exp %6 : f32[]\n"
            "  %8 = const 5 : bf16[]\n"
            "  %9 = sub %8, %1 : bf16[]\n"
            "  %10 = const 6 : f32[]\n"
            "  return %4, %10, %5, %7, %9, %6\n"
            "}\n");
}

static void consts(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_full(t, JIT_F32, 2, (int64_t[]){2, 3}, 0.25);
  r[1] = jit_full(t, JIT_U8, 0, NULL, 255);
  r[2] = jit_iota(t, JIT_I32, 2, (int64_t[]){2, 3}, 1);
  r[3] = jit_iota(t, JIT_F16, 1, (int64_t[]){0}, 0);
  r[4] = jit_scalar(t, -1e20);
}

static void test_constants(void **state) {
  (void)state;
  expect_ir("c", consts, NULL, "", 5,
            "func @c() -> (f32[2,3], u8[], i32[2,3], f16[0], f32[]) {\n"
            "  %0 = const 0.25 : f32[2,3]\n"
            "  %1 = const 255 : u8[]\n"
            "  %2 = iota dim=1 : i32[2,3]\n"
            "  %3 = iota dim=0 : f16[0]\n"
            "  %4 = const -1e+20 : f32[]\n"
            "  return %0, %1, %2, %3, %4\n"
            "}\n");
}

static void shapes(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_reshape(t, a[0], 3, (int64_t[]){3, -1, 2});
  r[1] = jit_transpose(t, a[0], (int[]){-1, 0, 1});
  r[2] = jit_broadcast_to(t, a[1], 3, (int64_t[]){5, 4, 3});
  r[3] = jit_slice(t, a[0], (int64_t[]){1, 0, 1}, (int64_t[]){2, 3, 4}, NULL);
  r[4] = jit_slice(t, a[0], (int64_t[]){0, 0, 0}, (int64_t[]){2, 3, 4}, (int64_t[]){1, 2, 3});
  r[5] = jit_concat(t, 3, (jit_val[]){a[0], a[0], a[0]}, -2);
  r[6] = jit_reshape(t, a[1], 0, NULL);
}

static void test_shape_ops(void **state) {
  (void)state;
  expect_ir("sh", shapes, NULL, "f32[2,3,4];f32[1]", 7,
            "func @sh(%0: f32[2,3,4], %1: f32[1]) -> (f32[3,4,2], f32[4,2,3], f32[5,4,3], "
            "f32[1,3,3], f32[2,2,2], f32[2,9,4], f32[]) {\n"
            "  %2 = reshape %0 : f32[3,4,2]\n"
            "  %3 = transpose %0 perm=[2,0,1] : f32[4,2,3]\n"
            "  %4 = broadcast %1 dims=[2] : f32[5,4,3]\n"
            "  %5 = slice %0 start=[1,0,1] limit=[2,3,4] stride=[1,1,1] : f32[1,3,3]\n"
            "  %6 = slice %0 start=[0,0,0] limit=[2,3,4] stride=[1,2,3] : f32[2,2,2]\n"
            "  %7 = concat %0, %0, %0 axis=1 : f32[2,9,4]\n"
            "  %8 = reshape %1 : f32[]\n"
            "  return %2, %3, %4, %5, %6, %7, %8\n"
            "}\n");
}

static void reductions(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_reduce_sum(t, a[0], 2, (int[]){-1, 0});
  r[1] = jit_reduce_max(t, a[0], 1, (int[]){1});
  r[2] = jit_reduce_min(t, a[0], 0, NULL);
  r[3] = jit_reduce_max(t, a[1], 3, (int[]){2, 1, 0});
}

static void test_reductions(void **state) {
  (void)state;
  expect_ir("r", reductions, NULL, "i64[2,3,4];bool[1,2,3]", 4,
            "func @r(%0: i64[2,3,4], %1: bool[1,2,3]) -> (i64[3], i64[2,4], i64[2,3,4], bool[]) {\n"
            "  %2 = reduce_sum %0 axes=[0,2] : i64[3]\n"
            "  %3 = reduce_max %0 axes=[1] : i64[2,4]\n"
            "  %4 = reduce_min %0 axes=[] : i64[2,3,4]\n"
            "  %5 = reduce_max %1 axes=[0,1,2] : bool[]\n"
            "  return %2, %3, %4, %5\n"
            "}\n");
}

static void mm(jit_trace *t, const jit_val *a, jit_val *r, void *u) { r[0] = jit_matmul(t, a[0], a[1]); }

static void test_matmul(void **state) {
  (void)state;
  expect_ir("m", mm, NULL, "f32[3];f32[3,4]", 1,
            "func @m(%0: f32[3], %1: f32[3,4]) -> f32[4] {\n"
            "  %2 = dot %0, %1 contract=[0]x[0] : f32[4]\n"
            "  return %2\n"
            "}\n");
  expect_ir("m", mm, NULL, "f32[2,3];f32[3]", 1,
            "func @m(%0: f32[2,3], %1: f32[3]) -> f32[2] {\n"
            "  %2 = dot %0, %1 contract=[1]x[0] : f32[2]\n"
            "  return %2\n"
            "}\n");
  expect_ir("m", mm, NULL, "i32[3];i32[3]", 1,
            "func @m(%0: i32[3], %1: i32[3]) -> i32[] {\n"
            "  %2 = dot %0, %1 contract=[0]x[0] : i32[]\n"
            "  return %2\n"
            "}\n");
  expect_ir("m", mm, NULL, "f32[2,1,3,4];f32[5,4,6]", 1,
            "func @m(%0: f32[2,1,3,4], %1: f32[5,4,6]) -> f32[2,5,3,6] {\n"
            "  %2 = broadcast %0 dims=[0,1,2,3] : f32[2,5,3,4]\n"
            "  %3 = broadcast %1 dims=[1,2,3] : f32[2,5,4,6]\n"
            "  %4 = dot %2, %3 batch=[0,1]x[0,1] contract=[3]x[2] : f32[2,5,3,6]\n"
            "  return %4\n"
            "}\n");
  expect_ir("m", mm, NULL, "f32[4];f32[2,4,5]", 1,
            "func @m(%0: f32[4], %1: f32[2,4,5]) -> f32[2,5] {\n"
            "  %2 = reshape %0 : f32[1,4]\n"
            "  %3 = broadcast %2 dims=[1,2] : f32[2,1,4]\n"
            "  %4 = dot %3, %1 batch=[0]x[0] contract=[2]x[1] : f32[2,1,5]\n"
            "  %5 = reshape %4 : f32[2,5]\n"
            "  return %5\n"
            "}\n");
}

static void dg(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = jit_dot_general(t, a[0], a[1], 1, (int[]){2}, (int[]){0}, 1, (int[]){0}, (int[]){2});
  r[1] = jit_dot_general(t, a[0], a[0], 0, NULL, NULL, 0, NULL, NULL);
}

static void test_dot_general(void **state) {
  (void)state;
  expect_ir("dg", dg, NULL, "f64[6,3,5];f64[5,4,6]", 2,
            "func @dg(%0: f64[6,3,5], %1: f64[5,4,6]) -> (f64[5,3,4], f64[6,3,5,6,3,5]) {\n"
            "  %2 = dot %0, %1 batch=[2]x[0] contract=[0]x[2] : f64[5,3,4]\n"
            "  %3 = dot %0, %0 contract=[]x[] : f64[6,3,5,6,3,5]\n"
            "  return %2, %3\n"
            "}\n");
}

/* ---- queries, static args ---------------------------------------------------------------------- */

typedef struct query {
  int rank, weak_rank, bad_rank;
  int64_t d0, d1;
  jit_dtype dt, weak_dt, bad_dt;
  const int64_t *bad_shape;
  const void *statics;
  size_t static_len;
} query;

static void queries(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  query *q = u;
  const int64_t *s = jit_val_shape(t, a[0]);
  r[0] = jit_neg(t, jit_transpose(t, a[0], (int[]){1, 0})); /* types grow: s must stay valid */
  r[0] = jit_convert(t, jit_reshape(t, r[0], 1, (int64_t[]){-1}), JIT_I64);
  q->d0 = s[0];
  q->d1 = s[1];
  q->rank = jit_val_rank(t, a[0]);
  q->dt = jit_val_dtype(t, r[0]);
  jit_val w = jit_scalar(t, 3);
  q->weak_rank = jit_val_rank(t, w);
  q->weak_dt = jit_val_dtype(t, w);
  assert_non_null(jit_val_shape(t, w));
  q->bad_rank = jit_val_rank(t, (jit_val){0});
  q->bad_dt = jit_val_dtype(t, (jit_val){12345});
  q->bad_shape = jit_val_shape(t, (jit_val){0});
  q->statics = jit_trace_static_args(t, &q->static_len);
}

static void test_queries(void **state) {
  (void)state;
  query q = {0};
  static const char statics[] = "abc";
  ir_type ty = T("f16[7,9]");
  trace_request req = {.name = "q", .fn = queries, .user = &q, .n_args = 1, .n_results = 1,
                       .arg_types = &ty, .static_args = statics, .static_len = 3};
  ir_func *f = NULL;
  assert_int_equal(trace_function(&req, &f), JIT_OK);
  assert_int_equal(q.rank, 2);
  assert_int_equal(q.d0, 7);
  assert_int_equal(q.d1, 9);
  assert_int_equal(q.dt, JIT_I64);
  assert_int_equal(q.weak_rank, 0);
  assert_int_equal(q.weak_dt, JIT_F32);
  assert_int_equal(q.bad_rank, -1);
  assert_string_equal(jit_dtype_name(q.bad_dt), "?");
  assert_null(q.bad_shape);
  assert_ptr_equal(q.statics, statics);
  assert_int_equal(q.static_len, 3);
  assert_ir_roundtrip(f);
  ir_func_free(f);
}

/* ---- errors -------------------------------------------------------------------------------------- */

typedef struct bad {
  int which;
  int line;        /* the line of the failing op, set on that same line */
  jit_val foreign; /* a value of another (finished) trace */
  jit_val after;   /* what an op returned after the failure */
  int after_rank;
} bad;
#define AT(b) ((b)->line = __LINE__)

static void bad_fn(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  bad *b = u;
  jit_val x = a[0], y = a[1], v = {0};
  int64_t sh[9] = {2, 3, 1, 1, 1, 1, 1, 1, 1};
  switch (b->which) {
  case 0: AT(b); v = jit_add(t, x, y); break;
  case 1: AT(b); v = jit_add(t, x, jit_convert(t, y, JIT_I32)); break;
  case 2: AT(b); v = jit_mul(t, x, (jit_val){0}); break;
  case 3: AT(b); v = jit_sub(t, b->foreign, x); break;
  case 4: AT(b); v = jit_exp(t, (jit_val){x.id + 1000}); break;
  case 5: AT(b); v = jit_full(t, JIT_F32, 2, NULL, 0); break;
  case 6: AT(b); v = jit_full(t, JIT_F32, 9, sh, 0); break;
  case 7: AT(b); v = jit_full(t, JIT_F32, -1, sh, 0); break;
  case 8: AT(b); v = jit_full(t, JIT_F32, 2, (int64_t[]){2, -3}, 0); break;
  case 9: AT(b); v = jit_full(t, JIT_I32, 1, sh, 0.5); break;
  case 10: AT(b); v = jit_full(t, (jit_dtype)20, 1, sh, 0); break;
  case 11: AT(b); v = jit_iota(t, JIT_I32, 2, sh, 2); break;
  case 12: AT(b); v = jit_iota(t, JIT_BOOL, 2, sh, 0); break;
  case 13: AT(b); v = jit_add(t, jit_convert(t, x, JIT_I32), jit_scalar(t, 0.5)); break;
  case 14: AT(b); v = jit_max(t, jit_convert(t, x, JIT_U8), jit_scalar(t, -100)); break;
  case 15: AT(b); v = jit_reshape(t, x, 2, (int64_t[]){4, 2}); break;
  case 16: AT(b); v = jit_reshape(t, x, 2, (int64_t[]){-1, -1}); break;
  case 17: AT(b); v = jit_reshape(t, x, 2, (int64_t[]){4, -1}); break;
  case 18: AT(b); v = jit_reshape(t, x, 1, NULL); break;
  case 19: AT(b); v = jit_reshape(t, x, 9, sh); break;
  case 20: AT(b); v = jit_transpose(t, x, (int[]){0, 0}); break;
  case 21: AT(b); v = jit_transpose(t, x, (int[]){0, 2}); break;
  case 22: AT(b); v = jit_transpose(t, x, NULL); break;
  case 23: AT(b); v = jit_broadcast_to(t, x, 2, (int64_t[]){3, 3}); break;
  case 24: AT(b); v = jit_broadcast_to(t, x, 1, (int64_t[]){3}); break;
  case 25: AT(b); v = jit_slice(t, x, (int64_t[]){0, 1}, (int64_t[]){2, 4}, NULL); break;
  case 26: AT(b); v = jit_slice(t, x, (int64_t[]){0, 0}, (int64_t[]){2, 3}, (int64_t[]){1, 0}); break;
  case 27: AT(b); v = jit_slice(t, x, NULL, (int64_t[]){2, 3}, NULL); break;
  case 28: AT(b); v = jit_concat(t, 0, a, 0); break;
  case 29: AT(b); v = jit_concat(t, 2, NULL, 0); break;
  case 30: AT(b); v = jit_concat(t, 2, (jit_val[]){x, y}, 0); break;
  case 31: AT(b); v = jit_concat(t, 2, (jit_val[]){x, jit_convert(t, x, JIT_F64)}, 0); break;
  case 32: AT(b); v = jit_concat(t, 2, (jit_val[]){x, x}, 2); break;
  case 33: AT(b); v = jit_reduce_sum(t, x, 2, (int[]){1, -1}); break;
  case 34: AT(b); v = jit_reduce_sum(t, x, 1, (int[]){-3}); break;
  case 35: AT(b); v = jit_reduce_sum(t, x, -1, NULL); break;
  case 36: AT(b); v = jit_reduce_sum(t, x, 1, NULL); break;
  case 37: AT(b); v = jit_reduce_sum(t, jit_cmp(t, JIT_EQ, x, x), 1, (int[]){0}); break;
  case 38: AT(b); v = jit_matmul(t, x, x); break;
  case 39: AT(b); v = jit_matmul(t, x, jit_convert(t, y, JIT_F64)); break;
  case 40: AT(b); v = jit_matmul(t, x, jit_scalar(t, 2)); break;
  case 41: AT(b); v = jit_matmul(t, jit_reshape(t, x, 3, (int64_t[]){2, 1, 3}),
                                 jit_broadcast_to(t, jit_transpose(t, x, (int[]){1, 0}), 3, (int64_t[]){3, 3, 2})); break;
  case 42: AT(b); v = jit_dot_general(t, x, x, 0, NULL, NULL, 1, (int[]){0}, (int[]){1}); break;
  case 43: AT(b); v = jit_dot_general(t, x, x, 0, NULL, NULL, 1, (int[]){2}, (int[]){1}); break;
  case 44: AT(b); v = jit_dot_general(t, x, x, 1, (int[]){0}, (int[]){0}, 1, (int[]){0}, (int[]){1}); break;
  case 45: AT(b); v = jit_dot_general(t, x, x, -1, NULL, NULL, 0, NULL, NULL); break;
  case 46: AT(b); v = jit_dot_general(t, x, x, 0, NULL, NULL, 1, NULL, (int[]){0}); break;
  case 47: AT(b); v = jit_dot_general(t, x, x, 3, (int[]){0, 1, 0}, (int[]){0, 1, 0}, 0, NULL, NULL); break;
  case 48: AT(b); v = jit_select(t, x, x, x); break;
  case 49: AT(b); v = jit_select(t, jit_cmp(t, JIT_LT, x, x), x, jit_convert(t, x, JIT_I8)); break;
  case 50: AT(b); v = jit_cmp(t, (jit_cmp_op)9, x, x); break;
  case 51: AT(b); v = jit_convert(t, x, (jit_dtype)-3); break;
  case 52: AT(b); jit_vmap(t, bad_fn, b, 1, a, (int[]){5}, 1, r, (int[]){0}); break;
  case 53: AT(b); jit_value_and_grad(t, bad_fn, b, 2, a, 4, 0, r); break; /* loss only */
  case 54: AT(b); jit_scan(t, NULL, b, 1, a, 1, a + 1, 2, 0, r, 1, r + 1); break;
  case 55: AT(b); jit_checkpoint(t, NULL, b, 2, a, 1, r); break;
  case 56: AT(b); v = jit_with_sharding_constraint(t, x, NULL); break;
  case 57: AT(b); jit_shard_map(t, bad_fn, b, NULL, 2, a, NULL, 2, r, NULL); break;
  case 58: AT(b); v = jit_psum(t, x, "i"); break;
  case 59: AT(b); v = jit_pmean(t, x, "i"); break;
  case 60: AT(b); v = jit_all_gather(t, x, "i", 0); break;
  case 61: AT(b); v = jit_axis_index(t, "i"); break;
  case 62: AT(b); jit_trace_fail(t, "my own reason"); break;
  case 63: (jit_trace_fail)(t, "no location"); b->line = 0; break;
  case 64: AT(b); v = jit_neg(t, jit_cmp(t, JIT_LT, x, x)); break;
  case 65: AT(b); v = jit_log(t, jit_convert(t, x, JIT_I64)); break;
  case 66: v = jit_add(t, x, x); r[1] = v; b->line = 0; break; /* result 0 unset */
  case 67: v = jit_add(t, x, x); r[0] = b->foreign; r[1] = v; b->line = 0; break;
  case 68: AT(b); v = jit_add(t, x, jit_matmul(t, x, y)); break;
  }
  if (b->which < 66 && b->which != 52 && b->which != 53 && b->which != 55 && b->which != 57) {
    /* sticky: the first error stays, later ops do nothing and return an invalid value */
    b->after = jit_reshape(t, x, 2, (int64_t[]){7, 7});
    b->after_rank = jit_val_rank(t, b->after);
    r[0] = v;
    r[1] = x;
  }
}

static void keep_value(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  *(jit_val *)u = a[0];
  r[0] = a[0];
}

static const struct {
  int which;
  jit_status st;
  const char *msg; /* %d: the line */
} bad_cases[] = {
    {0, JIT_ESHAPE, "bad: add at tests/test_trace.c:%d: shapes do not broadcast: f32[2,3] vs f32[3,2]"},
    {1, JIT_EDTYPE, "bad: add at tests/test_trace.c:%d: dtypes differ: f32[2,3] vs i32[3,2]"},
    {2, JIT_EINVAL, "bad: mul at tests/test_trace.c:%d: rhs is an invalid value (id 0)"},
    {3, JIT_EINVAL, "bad: sub at tests/test_trace.c:%d: lhs is not a value of this trace"},
    {4, JIT_EINVAL, "bad: exp at tests/test_trace.c:%d: operand is not a value of this trace"},
    {5, JIT_EINVAL, "bad: full at tests/test_trace.c:%d: shape is NULL"},
    {6, JIT_ESHAPE, "bad: full at tests/test_trace.c:%d: rank 9 out of range 0..8"},
    {7, JIT_ESHAPE, "bad: full at tests/test_trace.c:%d: rank -1 out of range 0..8"},
    {8, JIT_ESHAPE, "bad: full at tests/test_trace.c:%d: negative dim in shape [2,-3]"},
    {9, JIT_EDTYPE, "bad: full at tests/test_trace.c:%d: value 0.5 cannot take dtype i32"},
    {10, JIT_EDTYPE, "bad: full at tests/test_trace.c:%d: unknown dtype 20"},
    {11, JIT_ESHAPE, "bad: iota at tests/test_trace.c:%d: dim 2 out of range for i32[2,3]"},
    {12, JIT_EDTYPE, "bad: iota at tests/test_trace.c:%d: needs an int or float dtype, got bool[2,3]"},
    {13, JIT_EDTYPE, "bad: add at tests/test_trace.c:%d: weak scalar 0.5 cannot take dtype i32"},
    {14, JIT_EDTYPE, "bad: max at tests/test_trace.c:%d: weak scalar -100 cannot take dtype u8"},
    {15, JIT_ESHAPE, "bad: reshape at tests/test_trace.c:%d: element counts differ: f32[2,3] -> [4,2]"},
    {16, JIT_ESHAPE, "bad: reshape at tests/test_trace.c:%d: bad shape [-1,-1] (dims >= 0, at most one -1) for f32[2,3]"},
    {17, JIT_ESHAPE, "bad: reshape at tests/test_trace.c:%d: cannot reshape f32[2,3] to [4,-1]"},
    {18, JIT_EINVAL, "bad: reshape at tests/test_trace.c:%d: shape is NULL"},
    {19, JIT_ESHAPE, "bad: reshape at tests/test_trace.c:%d: rank 9 out of range 0..8"},
    {20, JIT_ESHAPE, "bad: transpose at tests/test_trace.c:%d: perm [0,0] is not a permutation of the dims of f32[2,3]"},
    {21, JIT_ESHAPE, "bad: transpose at tests/test_trace.c:%d: perm [0,2] is not a permutation of the dims of f32[2,3]"},
    {22, JIT_EINVAL, "bad: transpose at tests/test_trace.c:%d: perm is NULL"},
    {23, JIT_ESHAPE, "bad: broadcast_to at tests/test_trace.c:%d: cannot broadcast f32[2,3] to shape [3,3]"},
    {24, JIT_ESHAPE, "bad: broadcast_to at tests/test_trace.c:%d: cannot broadcast f32[2,3] to shape [3]"},
    {25, JIT_ESHAPE, "bad: slice at tests/test_trace.c:%d: dim 1: start 1, limit 4, stride 1 out of range for f32[2,3]"},
    {26, JIT_ESHAPE, "bad: slice at tests/test_trace.c:%d: dim 1: start 0, limit 3, stride 0 out of range for f32[2,3]"},
    {27, JIT_EINVAL, "bad: slice at tests/test_trace.c:%d: start is NULL"},
    {28, JIT_EINVAL, "bad: concat at tests/test_trace.c:%d: needs at least one operand, got 0"},
    {29, JIT_EINVAL, "bad: concat at tests/test_trace.c:%d: xs is NULL (n = 2)"},
    {30, JIT_ESHAPE, "bad: concat at tests/test_trace.c:%d: shapes differ outside axis 0: f32[2,3] vs f32[3,2]"},
    {31, JIT_EDTYPE, "bad: concat at tests/test_trace.c:%d: dtypes differ: f32[2,3] vs f64[2,3]"},
    {32, JIT_ESHAPE, "bad: concat at tests/test_trace.c:%d: axis 2 out of range for f32[2,3]"},
    {33, JIT_ESHAPE, "bad: reduce_sum at tests/test_trace.c:%d: axes [1,-1]: axis -1 repeated for f32[2,3]"},
    {34, JIT_ESHAPE, "bad: reduce_sum at tests/test_trace.c:%d: axes [-3]: axis -3 out of range for f32[2,3]"},
    {35, JIT_EINVAL, "bad: reduce_sum at tests/test_trace.c:%d: negative axis count -1"},
    {36, JIT_EINVAL, "bad: reduce_sum at tests/test_trace.c:%d: axes is NULL (n_axes = 1)"},
    {37, JIT_EDTYPE, "bad: reduce_sum at tests/test_trace.c:%d: needs an int or float operand, got bool[2,3]"},
    {38, JIT_ESHAPE, "bad: matmul at tests/test_trace.c:%d: contracting dims differ: f32[2,3] x f32[2,3]"},
    {39, JIT_EDTYPE, "bad: matmul at tests/test_trace.c:%d: dtypes differ: f32[2,3] x f64[3,2]"},
    {40, JIT_ESHAPE, "bad: matmul at tests/test_trace.c:%d: operands must have rank >= 1: f32[2,3] x f32[]"},
    {41, JIT_ESHAPE, "bad: matmul at tests/test_trace.c:%d: batch dims do not broadcast: f32[2,1,3] x f32[3,3,2]"},
    {42, JIT_ESHAPE, "bad: dot_general at tests/test_trace.c:%d: contracting dims differ: f32[2,3] x f32[2,3]"},
    {43, JIT_ESHAPE, "bad: dot_general at tests/test_trace.c:%d: lhs dim 2 out of range: f32[2,3] x f32[2,3]"},
    {44, JIT_ESHAPE, "bad: dot_general at tests/test_trace.c:%d: lhs dims batch=[0] contract=[0] invalid (out of range or repeated): f32[2,3] x f32[2,3]"},
    {45, JIT_EINVAL, "bad: dot_general at tests/test_trace.c:%d: negative dim count (n_batch -1, n_contract 0)"},
    {46, JIT_EINVAL, "bad: dot_general at tests/test_trace.c:%d: a contracting dim list is NULL"},
    {47, JIT_ESHAPE, "bad: dot_general at tests/test_trace.c:%d: 3 batch + 0 contracting dims exceed an operand's rank: f32[2,3] x f32[2,3]"},
    {48, JIT_EDTYPE, "bad: select at tests/test_trace.c:%d: predicate must be bool, got f32[2,3]"},
    {49, JIT_EDTYPE, "bad: select at tests/test_trace.c:%d: branch dtypes differ: f32[2,3] vs i8[2,3]"},
    {50, JIT_EINVAL, "bad: cmp at tests/test_trace.c:%d: unknown comparison 9"},
    {51, JIT_EDTYPE, "bad: convert at tests/test_trace.c:%d: unknown dtype -3"},
    {52, JIT_ESHAPE, "bad: vmap at tests/test_trace.c:%d: in_axes[0] = 5 out of range for arg 0 of type f32[2,3] (-1: not batched)"},
    {53, JIT_EINVAL, "bad: value_and_grad at tests/test_trace.c:%d: wrt_mask 0x4 selects argument 2, but n_args is 2"},
    {54, JIT_EINVAL, "bad: scan at tests/test_trace.c:%d: body is NULL"},
    {55, JIT_EINVAL, "bad: checkpoint at tests/test_trace.c:%d: fn is NULL"},
    {56, JIT_EINVAL, "bad: with_sharding_constraint at tests/test_trace.c:%d: sharding is NULL"},
    {57, JIT_EINVAL, "bad: shard_map at tests/test_trace.c:%d: mesh is NULL"},
    {58, JIT_EINVAL, "bad: psum at tests/test_trace.c:%d: used outside a shard_map body (no mesh axes are bound here)"},
    {59, JIT_EINVAL, "bad: pmean at tests/test_trace.c:%d: used outside a shard_map body (no mesh axes are bound here)"},
    {60, JIT_EINVAL, "bad: all_gather at tests/test_trace.c:%d: used outside a shard_map body (no mesh axes are bound here)"},
    {61, JIT_EINVAL, "bad: axis_index at tests/test_trace.c:%d: used outside a shard_map body (no mesh axes are bound here)"},
    {62, JIT_EINVAL, "bad at tests/test_trace.c:%d: my own reason"},
    {63, JIT_EINVAL, "bad: no location"},
    {64, JIT_EDTYPE, "bad: neg at tests/test_trace.c:%d: needs an int or float operand, got bool[2,3]"},
    {65, JIT_EDTYPE, "bad: log at tests/test_trace.c:%d: needs a float operand, got i64[2,3]"},
    {66, JIT_EINVAL, "bad: result 0 was not set"},
    {67, JIT_EINVAL, "bad: result 0 is not a value of this trace"},
    /* the inner op's failure is the one reported, with its own name */
    {68, JIT_ESHAPE, "bad: add at tests/test_trace.c:%d: shapes do not broadcast: f32[2,3] vs f32[2,2]"},
};

static void test_errors(void **state) {
  (void)state;
  bad b;
  memset(&b, 0, sizeof b);
  ir_func *f = NULL;
  assert_int_equal(run("keep", keep_value, &b.foreign, "f32[2,3]", 1, &f), JIT_OK);
  ir_func_free(f);
  for (int i = 0; i < N_OF(bad_cases); i++) {
    b.which = bad_cases[i].which;
    b.line = -1;
    b.after = (jit_val){99};
    b.after_rank = 99;
    f = (ir_func *)&b; /* must be reset to NULL */
    jit_status st = run("bad", bad_fn, &b, "f32[2,3];f32[3,2]", 2, &f);
    char want[512];
    snprintf(want, sizeof want, bad_cases[i].msg, b.line);
    if (st != bad_cases[i].st || strncmp(jit_last_error(), want, strlen(want)) != 0)
      fail_msg("case %d: status %d (want %d), message\n  '%s'\nwant\n  '%s'", b.which, st,
               bad_cases[i].st, jit_last_error(), want);
    assert_null(f);
    if (b.after.id != 99) {
      assert_int_equal(b.after.id, 0);
      assert_int_equal(b.after_rank, -1);
    }
  }
  /* the line numbers really are this file's (case 0 sits in bad_fn's switch) */
  b.which = 0;
  assert_int_equal(run("bad", bad_fn, &b, "f32[2,3];f32[3,2]", 2, &f), JIT_ESHAPE);
  assert_true(b.line > 300);
}

static void sets_results(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = r[1] = r[2] = r[3] = r[4] = (jit_val){77};
  jit_value_and_grad(t, sets_results, NULL, 3, a, 5 /* args 0 and 2 */, 1, r);
  memcpy(u, r, 5 * sizeof *r);
}

static void test_transform_results_invalidated(void **state) {
  (void)state;
  jit_val got[5];
  ir_func *f = NULL;
  assert_int_equal(run("g", sets_results, got, "f32[];f32[];i32[]", 5, &f), JIT_EDTYPE);
  for (int i = 0; i < 4; i++) assert_int_equal(got[i].id, 0); /* loss, 1 aux, 2 gradients */
  assert_int_equal(got[4].id, 77);
  assert_null(f);
  assert_non_null(strstr(jit_last_error(), "g: value_and_grad at tests/test_trace.c:"));
}

static void test_bad_requests(void **state) {
  (void)state;
  ir_func *f = (ir_func *)1;
  assert_int_equal(trace_function(NULL, &f), JIT_EINVAL);
  assert_null(f);
  trace_request req = {.name = "r", .fn = NULL, .n_args = 0, .n_results = 0};
  assert_int_equal(trace_function(&req, &f), JIT_EINVAL);
  req.fn = keep_value;
  assert_int_equal(trace_function(&req, NULL), JIT_EINVAL);
  req.n_args = 1;
  assert_int_equal(trace_function(&req, &f), JIT_EINVAL); /* arg_types NULL */
  ir_type bad_ty = T("f32[2]");
  bad_ty.dims[0] = -2;
  req.arg_types = &bad_ty;
  req.n_results = 1;
  assert_int_equal(trace_function(&req, &f), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "r: argument 0: "));
  assert_null(f);
  req.n_results = -1;
  assert_int_equal(trace_function(&req, &f), JIT_EINVAL);

  /* a NULL trace: every entry point returns an invalid value and does not crash */
  jit_trace *t = NULL;
  jit_val x = {5};
  assert_int_equal(jit_add(t, x, x).id, 0);
  assert_int_equal(jit_scalar(t, 1).id, 0);
  assert_int_equal(jit_reshape(t, x, 1, (int64_t[]){1}).id, 0);
  assert_int_equal(jit_matmul(t, x, x).id, 0);
  assert_int_equal(jit_concat(t, 1, &x, 0).id, 0);
  assert_int_equal(jit_val_rank(t, x), -1);
  assert_null(jit_val_shape(t, x));
  assert_null(jit_trace_at(t, "f", 1));
  size_t len = 9;
  assert_null(jit_trace_static_args(t, &len));
  assert_int_equal(len, 0);
  jit_trace_fail(t, "x");
  jit_val res[2] = {{3}, {4}};
  jit_vmap(t, keep_value, NULL, 1, &x, (int[]){0}, 2, res, (int[]){0, 0});
  assert_int_equal(res[0].id, 0);
  assert_int_equal(res[1].id, 0);
  assert_int_equal(jit_psum(t, x, "i").id, 0);
}

/* a weak value reaching a result becomes f32; a param passed through is returned as is */
static void passthrough(jit_trace *t, const jit_val *a, jit_val *r, void *u) {
  r[0] = a[0];
  r[1] = jit_scalar(t, 0.1);
  r[2] = a[0];
}

static void test_passthrough(void **state) {
  (void)state;
  expect_ir("p", passthrough, NULL, "u8[2]", 3,
            "func @p(%0: u8[2]) -> (u8[2], f32[], u8[2]) {\n"
            "  %1 = const 0.1 : f32[]\n"
            "  return %0, %1, %0\n"
            "}\n");
}

/* ---- two threads trace at once --------------------------------------------------------------- */

static void *trace_many(void *arg) {
  const char *types = arg;
  for (int i = 0; i < 200; i++) {
    ir_func *f = NULL;
    if (run("mlp", mlp, NULL, types, 1, &f) != JIT_OK) return "trace failed";
    bool ok = f->n_ins == 8 && f->n_results == 1;
    ir_func_free(f);
    if (!ok) return "wrong function";
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  pthread_t a, b;
  char ta[] = "f32[4,5];f32[5,6];f32[6]", tb[] = "f64[2,3];f64[3,7];f64[1]";
  assert_int_equal(pthread_create(&a, NULL, trace_many, ta), 0);
  assert_int_equal(pthread_create(&b, NULL, trace_many, tb), 0);
  void *ra, *rb;
  pthread_join(a, &ra);
  pthread_join(b, &rb);
  assert_null(ra);
  assert_null(rb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_locations),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_select_bool),
      cmocka_unit_test(test_weak),
      cmocka_unit_test(test_constants),
      cmocka_unit_test(test_shape_ops),
      cmocka_unit_test(test_reductions),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_dot_general),
      cmocka_unit_test(test_queries),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_transform_results_invalidated),
      cmocka_unit_test(test_bad_requests),
      cmocka_unit_test(test_passthrough),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
