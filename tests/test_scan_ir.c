/* test_scan_ir.c: the SCAN / GET ops in the IR: text round trip (nested bodies), verifier rules,
 * parser errors, the interpreter against plain C loops, and the passes keeping bodies. */
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
#include "ir/passes/passes.h"
#include "support/roundtrip.h"

static ir_func *parse_one(const char *text) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  if (st != JIT_OK) fail_msg("parse failed: %s", jit_last_error());
  assert_int_equal(n, 1);
  ir_func *f = fs[0];
  free(fs);
  return f;
}

/* Parsing text fails with a message containing want. */
static void expect_parse_error(const char *text, const char *want) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  assert_int_not_equal(st, JIT_OK);
  assert_null(fs);
  if (!strstr(jit_last_error(), want)) fail_msg("error '%s' lacks '%s'", jit_last_error(), want);
}

/* cumulative sum over 5 rows of 3: carry = carry + x_t, y_t = carry */
static const char cumsum[] =
    "func @cumsum(%0: f32[3], %1: f32[5,3]) -> (f32[3], f32[5,3]) {\n"
    "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3], f32[5,3]) { # a.c:7\n"
    "    func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) {\n"
    "      %2 = add %0, %1 : f32[3]                                    # a.c:4\n"
    "      return %2, %2\n"
    "    }\n"
    "  }\n"
    "  %3 = get %2 index=0 : f32[3]\n"
    "  %4 = get %2 index=1 : f32[5,3]\n"
    "  return %3, %4\n"
    "}\n";

static void test_roundtrip_and_interp(void **state) {
  (void)state;
  for (int reverse = 0; reverse < 2; reverse++) {
    char text[2048];
    snprintf(text, sizeof text, "%s", cumsum);
    if (reverse) {
      snprintf(text, sizeof text,
               "func @cumsum(%%0: f32[3], %%1: f32[5,3]) -> (f32[3], f32[5,3]) {\n"
               "  %%2 = scan %%0, %%1 consts=0 carry=1 length=5 reverse=1 : (f32[3], f32[5,3]) {\n"
               "    func @body(%%0: f32[3], %%1: f32[3]) -> (f32[3], f32[3]) {\n"
               "      %%2 = add %%0, %%1 : f32[3]\n"
               "      return %%2, %%2\n"
               "    }\n"
               "  }\n"
               "  %%3 = get %%2 index=0 : f32[3]\n"
               "  %%4 = get %%2 index=1 : f32[5,3]\n"
               "  return %%3, %%4\n"
               "}\n");
    }
    ir_func *f = parse_one(text);
    assert_int_equal(f->n_bodies, 1);
    assert_ir_roundtrip(f);
    char *printed = ir_print_to_string(f);
    if (!reverse) assert_string_equal(printed, cumsum); /* the text form is exactly this */
    free(printed);

    float init[3] = {1, -2, 0.5f}, xs[15], fin[3], ys[15];
    for (int i = 0; i < 15; i++) xs[i] = (float)(i * 0.25 - 1);
    const void *args[2] = {init, xs};
    void *res[2] = {fin, ys};
    assert_int_equal(ir_interp(f, args, res), JIT_OK);
    float c[3] = {1, -2, 0.5f}; /* the plain C loop */
    for (int s = 0; s < 5; s++) {
      int t = reverse ? 4 - s : s;
      for (int j = 0; j < 3; j++) {
        c[j] += xs[t * 3 + j];
        assert_true(ys[t * 3 + j] == c[j]);
      }
    }
    for (int j = 0; j < 3; j++) assert_true(fin[j] == c[j]);
    ir_func_free(f);
  }
}

/* consts, length 0 and 1, no xs, a nested scan */
static void test_nested_and_edges(void **state) {
  (void)state;
  /* outer: 4 steps over rows of xs [4,3,2]; inner: 3 steps over the row's [3,2] adding
     w * x into the carry; y = the inner carry after each outer step */
  const char *nested =
      "func @nest(%0: f32[2], %1: f32[4,3,2], %2: f32[2]) -> (f32[2], f32[4,2]) {\n"
      "  %3 = scan %2, %0, %1 consts=1 carry=1 length=4 : (f32[2], f32[4,2]) {\n"
      "    func @outer(%0: f32[2], %1: f32[2], %2: f32[3,2]) -> (f32[2], f32[2]) {\n"
      "      %3 = scan %0, %1, %2 consts=1 carry=1 length=3 : (f32[2]) {\n"
      "        func @inner(%0: f32[2], %1: f32[2], %2: f32[2]) -> f32[2] {\n"
      "          %3 = mul %0, %2 : f32[2]\n"
      "          %4 = add %1, %3 : f32[2]\n"
      "          return %4\n"
      "        }\n"
      "      }\n"
      "      %4 = get %3 index=0 : f32[2]\n"
      "      return %4, %4\n"
      "    }\n"
      "  }\n"
      "  %4 = get %3 index=0 : f32[2]\n"
      "  %5 = get %3 index=1 : f32[4,2]\n"
      "  return %4, %5\n"
      "}\n";
  ir_func *f = parse_one(nested);
  assert_ir_roundtrip(f);
  char *printed = ir_print_to_string(f);
  assert_string_equal(printed, nested);
  free(printed);
  float c0[2] = {1, 2}, xs[24], w[2] = {0.5f, -1}, fin[2], ys[8];
  for (int i = 0; i < 24; i++) xs[i] = (float)i;
  const void *args[3] = {c0, xs, w};
  void *res[2] = {fin, ys};
  assert_int_equal(ir_interp(f, args, res), JIT_OK);
  float c[2] = {1, 2};
  for (int t = 0; t < 4; t++)
    for (int u = 0; u < 3; u++)
      for (int j = 0; j < 2; j++) {
        c[j] += w[j] * xs[t * 6 + u * 2 + j];
        if (u == 2) assert_true(ys[t * 2 + j] == c[j]);
      }
  assert_true(fin[0] == c[0] && fin[1] == c[1]);
  ir_func *g = ir_func_clone(f); /* bodies are copied */
  assert_non_null(g);
  assert_int_equal(g->n_bodies, 1);
  assert_int_equal(g->bodies[0]->n_bodies, 1);
  assert_ir_roundtrip(g);
  ir_func_free(g);
  ir_func_free(f);

  /* length 0: the final carry is the init, ys are empty; no xs at all */
  f = parse_one("func @z(%0: f32[2]) -> (f32[2], f32[0,2]) {\n"
                "  %1 = scan %0 consts=0 carry=1 length=0 : (f32[2], f32[0,2]) {\n"
                "    func @b(%0: f32[2]) -> (f32[2], f32[2]) {\n"
                "      %1 = exp %0 : f32[2]\n"
                "      return %1, %0\n"
                "    }\n"
                "  }\n"
                "  %2 = get %1 index=0 : f32[2]\n"
                "  %3 = get %1 index=1 : f32[0,2]\n"
                "  return %2, %3\n"
                "}\n");
  assert_ir_roundtrip(f);
  float in2[2] = {3, 4}, out2[2] = {0, 0};
  const void *a1[1] = {in2};
  void *r1[2] = {out2, NULL};
  assert_int_equal(ir_interp(f, a1, r1), JIT_OK);
  assert_true(out2[0] == 3 && out2[1] == 4);
  ir_func_free(f);

  /* length 1, no operands at all: ys from a constant */
  f = parse_one("func @one() -> f32[1,2] {\n"
                "  %0 = scan consts=0 carry=0 length=1 : (f32[1,2]) {\n"
                "    func @b() -> f32[2] {\n"
                "      %0 = const 7 : f32[2]\n"
                "      return %0\n"
                "    }\n"
                "  }\n"
                "  %1 = get %0 index=0 : f32[1,2]\n"
                "  return %1\n"
                "}\n");
  assert_ir_roundtrip(f);
  float y1[2] = {0, 0};
  void *r2[1] = {y1};
  assert_int_equal(ir_interp(f, NULL, r2), JIT_OK);
  assert_true(y1[0] == 7 && y1[1] == 7);
  ir_func_free(f);
}

static void test_parse_errors(void **state) {
  (void)state;
  /* carry leaves the body with another type */
  expect_parse_error("func @e(%0: f32[3], %1: f32[5,3]) -> f32[3] {\n"
                     "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f64[3]) {\n"
                     "    func @body(%0: f32[3], %1: f32[3]) -> f64[3] {\n"
                     "      %2 = add %0, %1 : f32[3]\n"
                     "      %3 = convert %2 : f64[3]\n"
                     "      return %3\n"
                     "    }\n"
                     "  }\n"
                     "  %3 = get %2 index=0 : f32[3]\n"
                     "  return %3\n"
                     "}\n",
                     "carry 0 enters the body as f32[3] but leaves it as f64[3]");
  /* xs whose leading dim is not the length */
  expect_parse_error("func @e(%0: f32[3], %1: f32[4,3]) -> f32[3] {\n"
                     "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3]) {\n"
                     "    func @body(%0: f32[3], %1: f32[3]) -> f32[3] {\n"
                     "      %2 = add %0, %1 : f32[3]\n"
                     "      return %2\n"
                     "    }\n"
                     "  }\n"
                     "  %3 = get %2 index=0 : f32[3]\n"
                     "  return %3\n"
                     "}\n",
                     "xs operand 1 has type f32[4,3], whose leading dim is not length 5");
  /* listed types that the body does not make */
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=2 : (f32[4]) {\n"
                     "    func @body(%0: f32[3]) -> f32[3] {\n"
                     "      return %0\n"
                     "    }\n"
                     "  }\n"
                     "  %2 = get %1 index=0 : f32[3]\n"
                     "  return %2\n"
                     "}\n",
                     "scan result 0 is listed as f32[4], but the body makes it f32[3]");
  /* a scan token used by something other than get; get out of range; missing body; missing '}' */
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=2 : (f32[3]) {\n"
                     "    func @body(%0: f32[3]) -> f32[3] {\n"
                     "      return %0\n"
                     "    }\n"
                     "  }\n"
                     "  %2 = neg %1 : bool[]\n"
                     "  return %0\n"
                     "}\n",
                     "operand 0 is a scan, which only 'get' may read");
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=2 : (f32[3]) {\n"
                     "    func @body(%0: f32[3]) -> f32[3] {\n"
                     "      return %0\n"
                     "    }\n"
                     "  }\n"
                     "  %2 = get %1 index=1 : f32[3]\n"
                     "  return %2\n"
                     "}\n",
                     "index 1 is not a result of the scan");
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=2 : (f32[3]) {\n"
                     "  }\n"
                     "}\n",
                     "the scan's body");
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=2 : (f32[3]) {\n"
                     "    func @body(%0: f32[3]) -> f32[3] {\n"
                     "      return %0\n"
                     "    }\n"
                     "  %2 = get %1 index=0 : f32[3]\n",
                     "'}' after the scan's body");
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 carry=1 length=2 : (f32[3]) {\n",
                     "'scan' needs attribute 'consts'");
  expect_parse_error("func @e(%0: f32[3]) -> f32[3] {\n"
                     "  %1 = scan %0 consts=0 carry=1 length=-2 : (f32[3]) {\n",
                     "a length");
  /* hostile nesting is refused, not followed down the stack */
  size_t cap = 1 << 16, len = 0;
  char *deep = malloc(cap);
  assert_non_null(deep);
  for (int i = 0; i < 40; i++)
    len += (size_t)snprintf(deep + len, cap - len,
                            "func @f%d(%%0: f32[]) -> f32[] {\n"
                            "  %%1 = scan %%0 consts=0 carry=1 length=1 : (f32[]) {\n",
                            i);
  expect_parse_error(deep, "scans nested more than 32 deep");
  free(deep);
}

/* The passes keep (and recurse into nothing yet but keep valid) the bodies; dead scans go. */
static void test_passes_keep_bodies(void **state) {
  (void)state;
  ir_func *f = parse_one(cumsum);
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  assert_int_equal(f->n_bodies, 1);
  assert_ir_roundtrip(f);
  ir_func_free(f);
  /* only the final carry used: the scan stays (it makes it) */
  f = parse_one("func @c(%0: f32[3], %1: f32[5,3]) -> f32[3] {\n"
                "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3], f32[5,3]) {\n"
                "    func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) {\n"
                "      %2 = add %0, %1 : f32[3]\n"
                "      return %2, %2\n"
                "    }\n"
                "  }\n"
                "  %3 = get %2 index=0 : f32[3]\n"
                "  %4 = get %2 index=0 : f32[3]\n"
                "  %5 = add %3, %4 : f32[3]\n"
                "  return %5\n"
                "}\n");
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  char *text = ir_print_to_string(f);
  assert_non_null(strstr(text, "scan"));
  assert_null(strstr(text, "%4 = get")); /* CSE merged the two gets */
  free(text);
  ir_func_free(f);
  /* gets of different results, and two scans of equal text, are never merged */
  f = parse_one("func @n(%0: f32[3], %1: f32[5,3]) -> (f32[3], f32[5,3], f32[3]) {\n"
                "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3], f32[5,3]) {\n"
                "    func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) {\n"
                "      %2 = add %0, %1 : f32[3]\n"
                "      return %2, %1\n"
                "    }\n"
                "  }\n"
                "  %3 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3], f32[5,3]) {\n"
                "    func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) {\n"
                "      %2 = mul %0, %1 : f32[3]\n"
                "      return %2, %1\n"
                "    }\n"
                "  }\n"
                "  %4 = get %2 index=0 : f32[3]\n"
                "  %5 = get %2 index=1 : f32[5,3]\n"
                "  %6 = get %3 index=0 : f32[3]\n"
                "  return %4, %5, %6\n"
                "}\n");
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  text = ir_print_to_string(f);
  assert_non_null(strstr(text, "%3 = scan"));
  assert_non_null(strstr(text, "index=1"));
  free(text);
  ir_func_free(f);
  /* nothing used: DCE removes the scan */
  f = parse_one("func @d(%0: f32[3], %1: f32[5,3]) -> f32[3] {\n"
                "  %2 = scan %0, %1 consts=0 carry=1 length=5 : (f32[3], f32[5,3]) {\n"
                "    func @body(%0: f32[3], %1: f32[3]) -> (f32[3], f32[3]) {\n"
                "      %2 = add %0, %1 : f32[3]\n"
                "      return %2, %2\n"
                "    }\n"
                "  }\n"
                "  %3 = get %2 index=0 : f32[3]\n"
                "  return %0\n"
                "}\n");
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  text = ir_print_to_string(f);
  assert_null(strstr(text, "scan"));
  free(text);
  ir_func_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_and_interp),
      cmocka_unit_test(test_nested_and_edges),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_passes_keep_bodies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
