/* test_shape.c: dtype helpers (names, parsing, 16-bit float rounding, buffer loads/stores) and
 * ir_infer_type's accepted and rejected cases for every op. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* ---- dtypes ------------------------------------------------------------------------------- */

static void test_dtype_names(void **state) {
  (void)state;
  assert_int_equal(jit_dtype_size(JIT_BOOL), 1);
  assert_int_equal(jit_dtype_size(JIT_BF16), 2);
  assert_int_equal(jit_dtype_size(JIT_I64), 8);
  assert_int_equal(jit_dtype_size((jit_dtype)99), 0);
  assert_string_equal(jit_dtype_name(JIT_BF16), "bf16");
  assert_string_equal(jit_dtype_name(JIT_U8), "u8");
  assert_string_equal(jit_dtype_name((jit_dtype)-1), "?");
  for (int d = JIT_BOOL; d <= JIT_C128; d++) {
    jit_dtype out = JIT_BOOL;
    const char *name = jit_dtype_name((jit_dtype)d);
    assert_true(ir_dtype_parse(name, strlen(name), &out));
    assert_int_equal(out, d);
    assert_true(ir_dtype_valid((jit_dtype)d));
  }
  jit_dtype out;
  assert_false(ir_dtype_parse("f3", 2, &out));
  assert_false(ir_dtype_parse("f322", 4, &out));
  assert_true(ir_dtype_parse("f32[3]", 3, &out)); /* only the first n bytes count */
  assert_int_equal(out, JIT_F32);
  assert_false(ir_dtype_valid((jit_dtype)(JIT_C128 + 1)));
  assert_int_equal(JIT_C64, 11); /* complex, appended after u64 */
  assert_int_equal(JIT_U32, 9); /* appended: earlier dtypes keep their numbers */
  assert_int_equal(jit_dtype_size(JIT_U32), 4);
  assert_int_equal(jit_dtype_size(JIT_U64), 8);
  assert_string_equal(jit_dtype_name(JIT_U64), "u64");
  assert_true(ir_dtype_is_int(JIT_U32) && ir_dtype_is_unsigned(JIT_U64));
  assert_false(ir_dtype_is_unsigned(JIT_I64));
  assert_true(ir_dtype_is_float(JIT_BF16));
  assert_false(ir_dtype_is_float(JIT_I32));
  assert_true(ir_dtype_is_int(JIT_U8));
  assert_false(ir_dtype_is_int(JIT_BOOL));
  assert_false(ir_dtype_is_float(JIT_BOOL));
}

static float bits_f(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static void test_f16(void **state) {
  (void)state;
  assert_int_equal(ir_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(ir_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(ir_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(ir_f32_to_f16(65519.0f), 0x7bff); /* just below the rounding boundary */
  assert_int_equal(ir_f32_to_f16(65520.0f), 0x7c00); /* ties to even -> inf */
  assert_int_equal(ir_f32_to_f16(1e10f), 0x7c00);
  assert_int_equal(ir_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(ir_f32_to_f16(-0.0f), 0x8000);
  uint16_t n = ir_f32_to_f16(NAN);
  assert_true((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
  assert_true(isnan(ir_f16_to_f32(n)));
  assert_true(isnan(ir_f16_to_f32(ir_f32_to_f16(bits_f(0x7f800001)))));  /* payload in low bits */
  /* ties to even: 1 + 2^-11 lies between 1 and 1 + 2^-10 */
  assert_int_equal(ir_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  assert_int_equal(ir_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_int_equal(ir_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  /* subnormals: 2^-24 is the smallest */
  assert_int_equal(ir_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(ir_f32_to_f16(0x1p-25f), 0x0000);              /* tie -> even 0 */
  assert_int_equal(ir_f32_to_f16(0x1.8p-24f), 0x0002);            /* 1.5 ulp tie -> 2 */
  assert_int_equal(ir_f32_to_f16(0x1p-25f + 0x1p-40f), 0x0001);
  assert_int_equal(ir_f32_to_f16(0x1p-14f), 0x0400);              /* smallest normal */
  assert_int_equal(ir_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);   /* rounds up into normal */
  assert_int_equal(ir_f32_to_f16(0x1p-30f), 0x0000);
  assert_int_equal(ir_f32_to_f16(bits_f(1)), 0x0000);             /* f32 subnormal */
  assert_true(ir_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(ir_f16_to_f32(0x83ff) == -0x3ffp-24f);
  assert_true(ir_f16_to_f32(0x7c00) == INFINITY);
  assert_true(ir_f16_to_f32(0x3555) == 0x1.554p-2f);
  /* every finite f16 survives f16 -> f32 -> f16 */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
    assert_int_equal(ir_f32_to_f16(ir_f16_to_f32((uint16_t)h)), h);
  }
}

static void test_bf16(void **state) {
  (void)state;
  assert_int_equal(ir_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(ir_f32_to_bf16(bits_f(0x3f808000)), 0x3f80); /* tie -> even */
  assert_int_equal(ir_f32_to_bf16(bits_f(0x3f818000)), 0x3f82); /* tie -> even (up) */
  assert_int_equal(ir_f32_to_bf16(bits_f(0x3f808001)), 0x3f81);
  assert_int_equal(ir_f32_to_bf16(bits_f(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
  assert_int_equal(ir_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(ir_f32_to_bf16(-INFINITY), 0xff80);
  uint16_t n = ir_f32_to_bf16(bits_f(0x7f800001)); /* a NaN whose payload is all in low bits */
  assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
  assert_int_equal(ir_f32_to_bf16(bits_f(1)), 0x0000);          /* tiny subnormal */
  assert_int_equal(ir_f32_to_bf16(bits_f(0x00018000)), 0x0002); /* subnormal tie -> even */
  assert_true(ir_bf16_to_f32(0x4049) == 3.140625f);
  assert_true(ir_bf16_to_f32(0x0001) == bits_f(0x00010000));
}

static void test_load_store(void **state) {
  (void)state;
  unsigned char buf[64];
  ir_store_f64(JIT_I8, buf, 0, 300.7);
  assert_int_equal(((int8_t *)buf)[0], 127);
  ir_store_f64(JIT_I8, buf, 1, -2.9);
  assert_int_equal(((int8_t *)buf)[1], -2);
  ir_store_f64(JIT_U8, buf, 0, -5);
  assert_int_equal(buf[0], 0);
  ir_store_f64(JIT_I32, buf, 1, NAN);
  assert_int_equal(((int32_t *)buf)[1], 0);
  ir_store_f64(JIT_I64, buf, 1, 1e30);
  assert_true(((int64_t *)buf)[1] == INT64_MAX);
  ir_store_f64(JIT_I64, buf, 1, -1e30);
  assert_true(((int64_t *)buf)[1] == INT64_MIN);
  ir_store_f64(JIT_BOOL, buf, 3, 0.25);
  assert_int_equal(buf[3], 1);
  ir_store_f64(JIT_F16, buf, 1, 1.0 / 3);
  assert_int_equal(((uint16_t *)buf)[1], 0x3555);
  assert_true(ir_load_f64(JIT_F16, buf, 1) == 0x1.554p-2);
  ir_store_f64(JIT_BF16, buf, 2, 3.14159);
  assert_int_equal(((uint16_t *)buf)[2], 0x4049);
  ir_store_f64(JIT_F32, buf, 0, 0.1);
  assert_true(ir_load_f64(JIT_F32, buf, 0) == (double)0.1f);
  ir_store_f64(JIT_F64, buf, 3, -0.1);
  assert_true(ir_load_f64(JIT_F64, buf, 3) == -0.1);
  assert_int_equal(ir_load_i64(JIT_F64, buf, 3), 0);
  ir_store_f64(JIT_F64, buf, 0, 1e300);
  assert_true(ir_load_i64(JIT_F64, buf, 0) == INT64_MAX);
  ir_store_f64(JIT_F64, buf, 0, -7.9);
  assert_int_equal(ir_load_i64(JIT_F64, buf, 0), -7);

  ir_store_i64(JIT_I8, buf, 0, 200); /* ints wrap */
  assert_int_equal(((int8_t *)buf)[0], -56);
  assert_int_equal(ir_load_i64(JIT_I8, buf, 0), -56);
  ir_store_i64(JIT_U8, buf, 0, -1);
  assert_int_equal(ir_load_i64(JIT_U8, buf, 0), 255);
  ir_store_i64(JIT_I32, buf, 0, INT64_C(0x100000005));
  assert_int_equal(ir_load_i64(JIT_I32, buf, 0), 5);
  ir_store_i64(JIT_I64, buf, 1, INT64_MIN);
  assert_true(ir_load_i64(JIT_I64, buf, 1) == INT64_MIN);
  ir_store_i64(JIT_BOOL, buf, 0, -3);
  assert_int_equal(ir_load_i64(JIT_BOOL, buf, 0), 1);
  ir_store_i64(JIT_F32, buf, 0, (INT64_C(1) << 24) + 1); /* rounds to even */
  assert_true(ir_load_f64(JIT_F32, buf, 0) == 16777216.0);
  ir_store_i64(JIT_F64, buf, 0, -12345);
  assert_true(ir_load_f64(JIT_F64, buf, 0) == -12345.0);
  ir_store_i64(JIT_BF16, buf, 0, 257);
  assert_true(ir_load_f64(JIT_BF16, buf, 0) == 256.0);
  ir_store_i64(JIT_F16, buf, 0, 2049);
  assert_true(ir_load_f64(JIT_F16, buf, 0) == 2048.0);
  assert_true(ir_load_f64(JIT_I64, &(int64_t){-(INT64_C(1) << 53)}, 0) == -0x1p53);
}

static void test_value_fits(void **state) {
  (void)state;
  assert_true(ir_value_fits(JIT_BOOL, 1));
  assert_false(ir_value_fits(JIT_BOOL, 2));
  assert_false(ir_value_fits(JIT_I32, 0.5));
  assert_false(ir_value_fits(JIT_I32, NAN));
  assert_false(ir_value_fits(JIT_I32, INFINITY));
  assert_true(ir_value_fits(JIT_I32, -2147483648.0));
  assert_false(ir_value_fits(JIT_I32, 2147483648.0));
  assert_false(ir_value_fits(JIT_U8, -1));
  assert_true(ir_value_fits(JIT_U8, 255));
  assert_false(ir_value_fits(JIT_I8, 128));
  assert_false(ir_value_fits(JIT_I64, 0x1p63));
  assert_true(ir_value_fits(JIT_I64, -0x1p63));
  assert_true(ir_value_fits(JIT_F16, 1e10));
  assert_true(ir_value_fits(JIT_F32, NAN));
  assert_false(ir_value_fits((jit_dtype)42, 0));
}

/* ---- ir_infer_type -------------------------------------------------------------------------- */

/* "f32[3,4]" -> type; the test's own tiny parser, so that cases read like the IR text. */
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

typedef struct result {
  jit_status st;
  char text[512]; /* the result type, or the reason */
} result;

static result infer(ir_op op, const char *a, const char *b, const char *c, const ir_attr *attr,
                    const char *declared) {
  ir_type ts[3], d, out;
  const ir_type *args[3];
  const char *srcs[3] = {a, b, c};
  uint32_t n = 0;
  for (int i = 0; i < 3 && srcs[i]; i++, n++) {
    ts[i] = T(srcs[i]);
    args[i] = &ts[i];
  }
  if (declared) d = T(declared);
  result r;
  r.st = ir_infer_type(op, n, args, attr, declared ? &d : NULL, &out, r.text, sizeof r.text);
  if (r.st == JIT_OK) {
    ir_format_type(&out, r.text, sizeof r.text);
    for (int i = out.rank; i < IR_MAX_RANK; i++) assert_true(out.dims[i] == 0);
  }
  return r;
}

#define OK(want, op, a, b, c, attr, decl)                                                        \
  do {                                                                                           \
    result r_ = infer(op, a, b, c, attr, decl);                                                  \
    if (r_.st != JIT_OK) fail_msg("line %d: %s failed: %s", __LINE__, ir_op_name[op], r_.text); \
    assert_string_equal(r_.text, want);                                                          \
  } while (0)

#define BAD(status, needle, op, a, b, c, attr, decl)                                              \
  do {                                                                                            \
    result r_ = infer(op, a, b, c, attr, decl);                                                   \
    if (r_.st != (status) || !strstr(r_.text, needle))                                            \
      fail_msg("line %d: %s gave status %d (want %d), reason '%s' (want '%s')", __LINE__,         \
               ir_op_name[op], r_.st, status, r_.st == JIT_OK ? "(ok)" : r_.text, needle);        \
  } while (0)

static ir_attr dims_attr(int n, const int *d) {
  ir_attr a;
  memset(&a, 0, sizeof a);
  a.dims.n = (uint8_t)n;
  for (int i = 0; i < n; i++) a.dims.d[i] = (uint8_t)d[i];
  return a;
}
#define DIMS(...) dims_attr(sizeof((int[]){__VA_ARGS__}) / sizeof(int), (int[]){__VA_ARGS__})

static void test_infer_leaves(void **state) {
  (void)state;
  ir_attr a = {0};
  OK("f32[2,3]", IR_PARAM, NULL, NULL, NULL, NULL, "f32[2,3]");
  BAD(JIT_EINVAL, "result type", IR_PARAM, NULL, NULL, NULL, NULL, NULL);
  BAD(JIT_EINVAL, "takes 0 operands", IR_PARAM, "f32[]", NULL, NULL, NULL, "f32[]");
  BAD(JIT_EINVAL, "negative dim", IR_PARAM, NULL, NULL, NULL, NULL, "f32[2,-1]");
  ir_type big = T("f32[]");
  big.rank = 9;
  ir_type out;
  char why[128];
  assert_int_equal(ir_infer_type(IR_PARAM, 0, NULL, NULL, &big, &out, why, sizeof why), JIT_EINVAL);
  assert_non_null(strstr(why, "rank"));
  big.rank = 2;
  big.dims[0] = big.dims[1] = INT64_C(1) << 40;
  assert_int_equal(ir_infer_type(IR_PARAM, 0, NULL, NULL, &big, &out, why, sizeof why), JIT_EINVAL);
  assert_non_null(strstr(why, "overflow"));
  big.dtype = (jit_dtype)77;
  big.rank = 0;
  assert_int_equal(ir_infer_type(IR_PARAM, 0, NULL, NULL, &big, &out, why, sizeof why), JIT_EINVAL);
  assert_int_equal(ir_infer_type((ir_op)999, 0, NULL, NULL, NULL, &out, why, sizeof why), JIT_EINVAL);

  a.value = 0.5;
  OK("f32[4]", IR_CONST, NULL, NULL, NULL, &a, "f32[4]");
  BAD(JIT_EDTYPE, "0.5", IR_CONST, NULL, NULL, NULL, &a, "i32[4]");
  a.value = 2;
  BAD(JIT_EDTYPE, "bool", IR_CONST, NULL, NULL, NULL, &a, "bool[]");
  a.value = 1;
  OK("bool[]", IR_CONST, NULL, NULL, NULL, &a, "bool[]");
  a.value = 255;
  OK("u8[0]", IR_CONST, NULL, NULL, NULL, &a, "u8[0]");
  a.value = 256;
  BAD(JIT_EDTYPE, "u8", IR_CONST, NULL, NULL, NULL, &a, "u8[]");
  a.value = NAN;
  OK("f64[]", IR_CONST, NULL, NULL, NULL, &a, "f64[]");
  BAD(JIT_EDTYPE, "i64", IR_CONST, NULL, NULL, NULL, &a, "i64[]");
  BAD(JIT_EINVAL, "result type", IR_CONST, NULL, NULL, NULL, &a, NULL);

  a.value = 0;
  a.axis = 1;
  OK("i32[2,3]", IR_IOTA, NULL, NULL, NULL, &a, "i32[2,3]");
  OK("bf16[2,3]", IR_IOTA, NULL, NULL, NULL, &a, "bf16[2,3]");
  BAD(JIT_EDTYPE, "bool[2,3]", IR_IOTA, NULL, NULL, NULL, &a, "bool[2,3]");
  a.axis = 2;
  BAD(JIT_ESHAPE, "dim 2 out of range for i32[2,3]", IR_IOTA, NULL, NULL, NULL, &a, "i32[2,3]");
  a.axis = -1;
  BAD(JIT_ESHAPE, "dim -1", IR_IOTA, NULL, NULL, NULL, &a, "i32[2,3]");
  a.axis = 0;
  BAD(JIT_ESHAPE, "out of range", IR_IOTA, NULL, NULL, NULL, &a, "i32[]");
}

static void test_infer_elementwise(void **state) {
  (void)state;
  for (int op = 0; op < IR_N_OPS; op++) {
    if (!(ir_op_flags[op] & IR_UNARY_F)) continue;
    OK("f16[3]", (ir_op)op, "f16[3]", NULL, NULL, NULL, NULL);
    BAD(JIT_EDTYPE, "needs a float operand, got i32[3]", (ir_op)op, "i32[3]", NULL, NULL, NULL, NULL);
    BAD(JIT_EDTYPE, "bool[]", (ir_op)op, "bool[]", NULL, NULL, NULL, NULL);
  }
  OK("i8[2]", IR_NEG, "i8[2]", NULL, NULL, NULL, NULL);
  OK("u8[2]", IR_ABS, "u8[2]", NULL, NULL, NULL, NULL);
  OK("f64[]", IR_ABS, "f64[]", NULL, NULL, NULL, NULL);
  BAD(JIT_EDTYPE, "bool[2]", IR_NEG, "bool[2]", NULL, NULL, NULL, NULL);
  BAD(JIT_EINVAL, "takes 1 operands, got 2", IR_NEG, "f32[2]", "f32[2]", NULL, NULL, NULL);

  const ir_op arith[] = {IR_ADD, IR_SUB, IR_MUL, IR_DIV, IR_POW};
  for (size_t i = 0; i < sizeof arith / sizeof *arith; i++) {
    OK("i64[2,3]", arith[i], "i64[2,3]", "i64[2,3]", NULL, NULL, NULL);
    OK("bf16[]", arith[i], "bf16[]", "bf16[]", NULL, NULL, NULL);
    BAD(JIT_EDTYPE, "bool[2]", arith[i], "bool[2]", "bool[2]", NULL, NULL, NULL);
    BAD(JIT_EDTYPE, "dtypes differ: f32[2] vs f64[2]", arith[i], "f32[2]", "f64[2]", NULL, NULL, NULL);
    BAD(JIT_ESHAPE, "shapes differ: f32[2] vs f32[3]", arith[i], "f32[2]", "f32[3]", NULL, NULL, NULL);
    BAD(JIT_ESHAPE, "shapes differ: f32[2] vs f32[1,2]", arith[i], "f32[2]", "f32[1,2]", NULL, NULL, NULL);
    BAD(JIT_EINVAL, "takes 2 operands", arith[i], "f32[2]", NULL, NULL, NULL, NULL);
  }
  OK("bool[4]", IR_MAX, "bool[4]", "bool[4]", NULL, NULL, NULL);
  OK("bool[4]", IR_MIN, "bool[4]", "bool[4]", NULL, NULL, NULL);
  BAD(JIT_EDTYPE, "dtypes differ", IR_MIN, "bool[4]", "u8[4]", NULL, NULL, NULL);

  ir_attr a = {0};
  a.cmp = JIT_GE;
  OK("bool[4]", IR_CMP, "f32[4]", "f32[4]", NULL, &a, NULL);
  OK("bool[]", IR_CMP, "bool[]", "bool[]", NULL, &a, NULL);
  BAD(JIT_EDTYPE, "i32[4] vs i64[4]", IR_CMP, "i32[4]", "i64[4]", NULL, &a, NULL);
  a.cmp = (jit_cmp_op)6;
  BAD(JIT_EINVAL, "comparison", IR_CMP, "f32[4]", "f32[4]", NULL, &a, NULL);

  OK("i32[2]", IR_SELECT, "bool[2]", "i32[2]", "i32[2]", NULL, NULL);
  BAD(JIT_EDTYPE, "predicate must be bool, got f32[2]", IR_SELECT, "f32[2]", "f32[2]", "f32[2]", NULL, NULL);
  BAD(JIT_EDTYPE, "branch dtypes differ: i32[2] vs f32[2]", IR_SELECT, "bool[2]", "i32[2]", "f32[2]", NULL, NULL);
  BAD(JIT_ESHAPE, "shapes differ: bool[3] vs i32[2]", IR_SELECT, "bool[3]", "i32[2]", "i32[2]", NULL, NULL);
  BAD(JIT_ESHAPE, "shapes differ", IR_SELECT, "bool[2]", "i32[2]", "i32[1]", NULL, NULL);

  OK("i8[2,3]", IR_CONVERT, "f32[2,3]", NULL, NULL, NULL, "i8[2,3]");
  OK("bool[]", IR_CONVERT, "bf16[]", NULL, NULL, NULL, "bool[]");
  BAD(JIT_ESHAPE, "result shape differs: f32[2,3] -> i8[3,2]", IR_CONVERT, "f32[2,3]", NULL, NULL, NULL, "i8[3,2]");
  BAD(JIT_EINVAL, "result type", IR_CONVERT, "f32[2,3]", NULL, NULL, NULL, NULL);

  /* ir_check_elementwise_dtypes alone ignores shapes */
  ir_type x = T("f32[3]"), y = T("f32[2,1]"), z = T("i32[3]");
  const ir_type *xy[2] = {&x, &y}, *xz[2] = {&x, &z};
  char why[256];
  assert_int_equal(ir_check_elementwise_dtypes(IR_ADD, 2, xy, why, sizeof why), JIT_OK);
  assert_int_equal(ir_check_elementwise_dtypes(IR_ADD, 2, xz, why, sizeof why), JIT_EDTYPE);
  assert_int_equal(ir_check_elementwise_dtypes(IR_DOT, 2, xy, why, sizeof why), JIT_EINVAL);
}

static void test_infer_reshape_transpose(void **state) {
  (void)state;
  OK("f32[6]", IR_RESHAPE, "f32[2,3]", NULL, NULL, NULL, "f32[6]");
  OK("f32[]", IR_RESHAPE, "f32[1,1]", NULL, NULL, NULL, "f32[]");
  OK("f32[0,5]", IR_RESHAPE, "f32[5,0]", NULL, NULL, NULL, "f32[0,5]");
  BAD(JIT_ESHAPE, "element counts differ: f32[2,3] -> f32[5]", IR_RESHAPE, "f32[2,3]", NULL, NULL, NULL, "f32[5]");
  BAD(JIT_EDTYPE, "result dtype differs", IR_RESHAPE, "f32[2,3]", NULL, NULL, NULL, "i32[6]");
  BAD(JIT_EINVAL, "result type", IR_RESHAPE, "f32[2,3]", NULL, NULL, NULL, NULL);

  ir_attr p = DIMS(1, 2, 0);
  OK("f32[3,4,2]", IR_TRANSPOSE, "f32[2,3,4]", NULL, NULL, &p, NULL);
  p = DIMS(0, 0, 1);
  BAD(JIT_ESHAPE, "perm [0,0,1] is not a permutation of the dims of f32[2,3,4]", IR_TRANSPOSE, "f32[2,3,4]", NULL, NULL, &p, NULL);
  p = DIMS(0, 3, 1);
  BAD(JIT_ESHAPE, "perm [0,3,1]", IR_TRANSPOSE, "f32[2,3,4]", NULL, NULL, &p, NULL);
  p = DIMS(1, 0);
  BAD(JIT_ESHAPE, "permutation", IR_TRANSPOSE, "f32[2,3,4]", NULL, NULL, &p, NULL);
  p.dims.n = 0;
  OK("i8[]", IR_TRANSPOSE, "i8[]", NULL, NULL, &p, NULL);
  OK("i8[]", IR_TRANSPOSE, "i8[]", NULL, NULL, NULL, NULL);
}

static void test_infer_broadcast(void **state) {
  (void)state;
  ir_attr d = DIMS(1);
  OK("f32[2,3]", IR_BROADCAST, "f32[3]", NULL, NULL, &d, "f32[2,3]");
  OK("f32[2,3]", IR_BROADCAST, "f32[1]", NULL, NULL, &d, "f32[2,3]");
  d = DIMS(0);
  OK("f32[2,3]", IR_BROADCAST, "f32[2]", NULL, NULL, &d, "f32[2,3]");
  BAD(JIT_ESHAPE, "operand dim 0 does not fit result dim 0: f32[3] -> f32[2,3]", IR_BROADCAST, "f32[3]", NULL, NULL, &d, "f32[2,3]");
  d = DIMS(1, 0);
  BAD(JIT_ESHAPE, "increasing", IR_BROADCAST, "f32[3,2]", NULL, NULL, &d, "f32[2,3]");
  d = DIMS(0, 2);
  BAD(JIT_ESHAPE, "increasing", IR_BROADCAST, "f32[2,3]", NULL, NULL, &d, "f32[2,3]");
  d = DIMS(0);
  BAD(JIT_ESHAPE, "one entry per operand dim", IR_BROADCAST, "f32[2,3]", NULL, NULL, &d, "f32[2,3]");
  BAD(JIT_EDTYPE, "result dtype differs: f32[2] -> f64[2,3]", IR_BROADCAST, "f32[2]", NULL, NULL, &d, "f64[2,3]");
  BAD(JIT_EINVAL, "result type", IR_BROADCAST, "f32[2]", NULL, NULL, &d, NULL);
  d.dims.n = 0;
  OK("u8[4,5]", IR_BROADCAST, "u8[]", NULL, NULL, &d, "u8[4,5]");
  OK("u8[]", IR_BROADCAST, "u8[]", NULL, NULL, &d, "u8[]");
}

static void test_infer_slice(void **state) {
  (void)state;
  ir_attr a = {0};
  a.slice.start[0] = 1, a.slice.limit[0] = 7, a.slice.stride[0] = 2;
  a.slice.start[1] = 0, a.slice.limit[1] = 4, a.slice.stride[1] = 1;
  OK("f32[3,4]", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.stride[0] = 4; /* 1, 5 */
  OK("f32[2,4]", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.start[0] = a.slice.limit[0] = 8; /* empty at the end */
  OK("f32[0,4]", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.limit[0] = 9;
  BAD(JIT_ESHAPE, "dim 0: start 8, limit 9, stride 4 out of range for f32[8,4]", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.start[0] = 3, a.slice.limit[0] = 2;
  BAD(JIT_ESHAPE, "dim 0", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.start[0] = -1, a.slice.limit[0] = 2;
  BAD(JIT_ESHAPE, "start -1", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  a.slice.start[0] = 0, a.slice.stride[1] = 0;
  BAD(JIT_ESHAPE, "dim 1: start 0, limit 4, stride 0", IR_SLICE, "f32[8,4]", NULL, NULL, &a, NULL);
  OK("f32[]", IR_SLICE, "f32[]", NULL, NULL, NULL, NULL);
}

static void test_infer_concat(void **state) {
  (void)state;
  ir_attr a = {0};
  a.axis = 1;
  OK("f32[2,7]", IR_CONCAT, "f32[2,3]", "f32[2,4]", NULL, &a, NULL);
  OK("f32[2,7]", IR_CONCAT, "f32[2,3]", "f32[2,0]", "f32[2,4]", &a, NULL);
  OK("f32[2,3]", IR_CONCAT, "f32[2,3]", NULL, NULL, &a, NULL);
  BAD(JIT_ESHAPE, "shapes differ outside axis 1: f32[2,3] vs f32[3,4]", IR_CONCAT, "f32[2,3]", "f32[3,4]", NULL, &a, NULL);
  BAD(JIT_ESHAPE, "shapes differ outside axis 1: f32[2,3] vs f32[2,3,1]", IR_CONCAT, "f32[2,3]", "f32[2,3,1]", NULL, &a, NULL);
  BAD(JIT_EDTYPE, "dtypes differ: f32[2,3] vs i32[2,4]", IR_CONCAT, "f32[2,3]", "i32[2,4]", NULL, &a, NULL);
  a.axis = 2;
  BAD(JIT_ESHAPE, "axis 2 out of range for f32[2,3]", IR_CONCAT, "f32[2,3]", "f32[2,3]", NULL, &a, NULL);
  a.axis = -1;
  BAD(JIT_ESHAPE, "axis -1 out of range", IR_CONCAT, "f32[2,3]", "f32[2,3]", NULL, &a, NULL);
  a.axis = 0;
  BAD(JIT_ESHAPE, "rank-0", IR_CONCAT, "f32[]", "f32[]", NULL, &a, NULL);
  BAD(JIT_EINVAL, "at least 1", IR_CONCAT, NULL, NULL, NULL, &a, NULL);
}

static void test_infer_reduce(void **state) {
  (void)state;
  ir_attr d = DIMS(0, 2);
  OK("f32[3]", IR_REDUCE_SUM, "f32[2,3,4]", NULL, NULL, &d, NULL);
  OK("bool[3]", IR_REDUCE_MAX, "bool[2,3,4]", NULL, NULL, &d, NULL);
  OK("bool[3]", IR_REDUCE_MIN, "bool[2,3,4]", NULL, NULL, &d, NULL);
  BAD(JIT_EDTYPE, "bool[2,3,4]", IR_REDUCE_SUM, "bool[2,3,4]", NULL, NULL, &d, NULL);
  d = DIMS(2, 0);
  BAD(JIT_ESHAPE, "axes [2,0] must be increasing and below the rank of f32[2,3,4]", IR_REDUCE_MAX, "f32[2,3,4]", NULL, NULL, &d, NULL);
  d = DIMS(1, 1);
  BAD(JIT_ESHAPE, "axes [1,1]", IR_REDUCE_SUM, "f32[2,3,4]", NULL, NULL, &d, NULL);
  d = DIMS(3);
  BAD(JIT_ESHAPE, "axes [3]", IR_REDUCE_MIN, "f32[2,3,4]", NULL, NULL, &d, NULL);
  d = DIMS(0, 1, 2);
  OK("i32[]", IR_REDUCE_SUM, "i32[2,3,4]", NULL, NULL, &d, NULL);
  d.dims.n = 0;
  OK("i32[2,3,4]", IR_REDUCE_SUM, "i32[2,3,4]", NULL, NULL, &d, NULL);
  d.dims.n = 9;
  BAD(JIT_ESHAPE, "axes", IR_REDUCE_SUM, "i32[2,3,4]", NULL, NULL, &d, NULL);
}

static ir_attr dot_attr(int nb, const int *lb, const int *rb, int nc, const int *lc, const int *rc) {
  ir_attr a;
  memset(&a, 0, sizeof a);
  a.dot.n_batch = (uint8_t)nb;
  a.dot.n_contract = (uint8_t)nc;
  for (int i = 0; i < nb; i++) a.dot.lhs_batch[i] = (uint8_t)lb[i], a.dot.rhs_batch[i] = (uint8_t)rb[i];
  for (int i = 0; i < nc; i++)
    a.dot.lhs_contract[i] = (uint8_t)lc[i], a.dot.rhs_contract[i] = (uint8_t)rc[i];
  return a;
}

static void test_infer_dot(void **state) {
  (void)state;
  ir_attr a = dot_attr(0, NULL, NULL, 1, (int[]){1}, (int[]){0});
  OK("f32[512,4096]", IR_DOT, "f32[512,1024]", "f32[1024,4096]", NULL, &a, NULL);
  BAD(JIT_ESHAPE, "contracting dims differ: f32[512,1024] x f32[512,4096]", IR_DOT, "f32[512,1024]", "f32[512,4096]", NULL, &a, NULL);
  BAD(JIT_EDTYPE, "dtypes differ: f32[2,3] x f64[3,4]", IR_DOT, "f32[2,3]", "f64[3,4]", NULL, &a, NULL);
  BAD(JIT_EDTYPE, "bool[2,3] x bool[3,4]", IR_DOT, "bool[2,3]", "bool[3,4]", NULL, &a, NULL);
  OK("i8[2,4]", IR_DOT, "i8[2,3]", "i8[3,4]", NULL, &a, NULL);
  /* batch dims first, then lhs free, then rhs free, each in order */
  a = dot_attr(1, (int[]){2}, (int[]){0}, 1, (int[]){0}, (int[]){2});
  OK("f32[5,3,4]", IR_DOT, "f32[6,3,5]", "f32[5,4,6]", NULL, &a, NULL);
  BAD(JIT_ESHAPE, "batch dims differ: f32[6,3,5] x f32[4,4,6]", IR_DOT, "f32[6,3,5]", "f32[4,4,6]", NULL, &a, NULL);
  a = dot_attr(1, (int[]){0}, (int[]){0}, 1, (int[]){0}, (int[]){1});
  BAD(JIT_ESHAPE, "lhs dims batch=[0] contract=[0]", IR_DOT, "f32[3,3]", "f32[3,3]", NULL, &a, NULL);
  a = dot_attr(0, NULL, NULL, 1, (int[]){0}, (int[]){2});
  BAD(JIT_ESHAPE, "rhs dims batch=[] contract=[2]", IR_DOT, "f32[3,3]", "f32[3,3]", NULL, &a, NULL);
  a = dot_attr(0, NULL, NULL, 3, (int[]){0, 1, 0}, (int[]){0, 1, 0});
  BAD(JIT_ESHAPE, "lhs dims", IR_DOT, "f32[3,3]", "f32[3,3]", NULL, &a, NULL);
  a = dot_attr(0, NULL, NULL, 0, NULL, NULL); /* outer product */
  OK("f32[2,3,4]", IR_DOT, "f32[2]", "f32[3,4]", NULL, &a, NULL);
  a = dot_attr(0, NULL, NULL, 1, (int[]){0}, (int[]){0});
  OK("f64[]", IR_DOT, "f64[7]", "f64[7]", NULL, &a, NULL);
  /* free dims of both sides exceed the maximum rank */
  ir_type l = T("f32[1,1,1,1,1]"), r = T("f32[1,1,1,1,1]"), out;
  const ir_type *lr[2] = {&l, &r};
  char why[256];
  a = dot_attr(0, NULL, NULL, 0, NULL, NULL);
  assert_int_equal(ir_infer_type(IR_DOT, 2, lr, &a, NULL, &out, why, sizeof why), JIT_ESHAPE);
  assert_non_null(strstr(why, "result rank 10 exceeds 8"));
  /* a NULL why buffer is allowed */
  assert_int_equal(ir_infer_type(IR_DOT, 2, lr, &a, NULL, &out, NULL, 0), JIT_ESHAPE);
  assert_int_equal(ir_infer_type(IR_DOT, 1, lr, &a, NULL, &out, why, sizeof why), JIT_EINVAL);
  const ir_type *withnull[2] = {&l, NULL};
  assert_int_equal(ir_infer_type(IR_DOT, 2, withnull, &a, NULL, &out, why, sizeof why), JIT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_names),
      cmocka_unit_test(test_f16),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_load_store),
      cmocka_unit_test(test_value_fits),
      cmocka_unit_test(test_infer_leaves),
      cmocka_unit_test(test_infer_elementwise),
      cmocka_unit_test(test_infer_reshape_transpose),
      cmocka_unit_test(test_infer_broadcast),
      cmocka_unit_test(test_infer_slice),
      cmocka_unit_test(test_infer_concat),
      cmocka_unit_test(test_infer_reduce),
      cmocka_unit_test(test_infer_dot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
