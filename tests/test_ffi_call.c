/* test_ffi_call.c: prepared libffi call sites: entries of 0..40 pointer arguments receive exactly
 * what was passed, host callbacks of mixed C signatures, bad signatures, and the per-call cost. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/ffi_call.h"

/* What the last called function received. */
static void *got[64];
static int got_n = -1;

/* f1..f40: `void fN(void *a0, ..., void *a(N-1))`, recording their arguments. */
#define PARAMS_1 void *a0
#define REC_1 got[0] = a0;
#define PARAMS_2 PARAMS_1, void *a1
#define REC_2 REC_1 got[1] = a1;
#define PARAMS_3 PARAMS_2, void *a2
#define REC_3 REC_2 got[2] = a2;
#define PARAMS_4 PARAMS_3, void *a3
#define REC_4 REC_3 got[3] = a3;
#define PARAMS_5 PARAMS_4, void *a4
#define REC_5 REC_4 got[4] = a4;
#define PARAMS_6 PARAMS_5, void *a5
#define REC_6 REC_5 got[5] = a5;
#define PARAMS_7 PARAMS_6, void *a6
#define REC_7 REC_6 got[6] = a6;
#define PARAMS_8 PARAMS_7, void *a7
#define REC_8 REC_7 got[7] = a7;
#define PARAMS_9 PARAMS_8, void *a8
#define REC_9 REC_8 got[8] = a8;
#define PARAMS_10 PARAMS_9, void *a9
#define REC_10 REC_9 got[9] = a9;
#define PARAMS_11 PARAMS_10, void *a10
#define REC_11 REC_10 got[10] = a10;
#define PARAMS_12 PARAMS_11, void *a11
#define REC_12 REC_11 got[11] = a11;
#define PARAMS_13 PARAMS_12, void *a12
#define REC_13 REC_12 got[12] = a12;
#define PARAMS_14 PARAMS_13, void *a13
#define REC_14 REC_13 got[13] = a13;
#define PARAMS_15 PARAMS_14, void *a14
#define REC_15 REC_14 got[14] = a14;
#define PARAMS_16 PARAMS_15, void *a15
#define REC_16 REC_15 got[15] = a15;
#define PARAMS_17 PARAMS_16, void *a16
#define REC_17 REC_16 got[16] = a16;
#define PARAMS_18 PARAMS_17, void *a17
#define REC_18 REC_17 got[17] = a17;
#define PARAMS_19 PARAMS_18, void *a18
#define REC_19 REC_18 got[18] = a18;
#define PARAMS_20 PARAMS_19, void *a19
#define REC_20 REC_19 got[19] = a19;
#define PARAMS_21 PARAMS_20, void *a20
#define REC_21 REC_20 got[20] = a20;
#define PARAMS_22 PARAMS_21, void *a21
#define REC_22 REC_21 got[21] = a21;
#define PARAMS_23 PARAMS_22, void *a22
#define REC_23 REC_22 got[22] = a22;
#define PARAMS_24 PARAMS_23, void *a23
#define REC_24 REC_23 got[23] = a23;
#define PARAMS_25 PARAMS_24, void *a24
#define REC_25 REC_24 got[24] = a24;
#define PARAMS_26 PARAMS_25, void *a25
#define REC_26 REC_25 got[25] = a25;
#define PARAMS_27 PARAMS_26, void *a26
#define REC_27 REC_26 got[26] = a26;
#define PARAMS_28 PARAMS_27, void *a27
#define REC_28 REC_27 got[27] = a27;
#define PARAMS_29 PARAMS_28, void *a28
#define REC_29 REC_28 got[28] = a28;
#define PARAMS_30 PARAMS_29, void *a29
#define REC_30 REC_29 got[29] = a29;
#define PARAMS_31 PARAMS_30, void *a30
#define REC_31 REC_30 got[30] = a30;
#define PARAMS_32 PARAMS_31, void *a31
#define REC_32 REC_31 got[31] = a31;
#define PARAMS_33 PARAMS_32, void *a32
#define REC_33 REC_32 got[32] = a32;
#define PARAMS_34 PARAMS_33, void *a33
#define REC_34 REC_33 got[33] = a33;
#define PARAMS_35 PARAMS_34, void *a34
#define REC_35 REC_34 got[34] = a34;
#define PARAMS_36 PARAMS_35, void *a35
#define REC_36 REC_35 got[35] = a35;
#define PARAMS_37 PARAMS_36, void *a36
#define REC_37 REC_36 got[36] = a36;
#define PARAMS_38 PARAMS_37, void *a37
#define REC_38 REC_37 got[37] = a37;
#define PARAMS_39 PARAMS_38, void *a38
#define REC_39 REC_38 got[38] = a38;
#define PARAMS_40 PARAMS_39, void *a39
#define REC_40 REC_39 got[39] = a39;
/* ARGS_N: p[0], ..., p[N-1], for direct calls of the same functions. */
#define ARGS_1 p[0]
#define ARGS_2 ARGS_1, p[1]
#define ARGS_3 ARGS_2, p[2]
#define ARGS_4 ARGS_3, p[3]
#define ARGS_5 ARGS_4, p[4]
#define ARGS_6 ARGS_5, p[5]
#define ARGS_7 ARGS_6, p[6]
#define ARGS_8 ARGS_7, p[7]
#define ARGS_9 ARGS_8, p[8]
#define ARGS_10 ARGS_9, p[9]
#define ARGS_11 ARGS_10, p[10]
#define ARGS_12 ARGS_11, p[11]
#define ARGS_13 ARGS_12, p[12]
#define ARGS_14 ARGS_13, p[13]
#define ARGS_15 ARGS_14, p[14]
#define ARGS_16 ARGS_15, p[15]
#define ARGS_17 ARGS_16, p[16]
#define ARGS_18 ARGS_17, p[17]
#define ARGS_19 ARGS_18, p[18]
#define ARGS_20 ARGS_19, p[19]
#define ARGS_21 ARGS_20, p[20]
#define ARGS_22 ARGS_21, p[21]
#define ARGS_23 ARGS_22, p[22]
#define ARGS_24 ARGS_23, p[23]
#define ARGS_25 ARGS_24, p[24]
#define ARGS_26 ARGS_25, p[25]
#define ARGS_27 ARGS_26, p[26]
#define ARGS_28 ARGS_27, p[27]
#define ARGS_29 ARGS_28, p[28]
#define ARGS_30 ARGS_29, p[29]
#define ARGS_31 ARGS_30, p[30]
#define ARGS_32 ARGS_31, p[31]
#define ARGS_33 ARGS_32, p[32]
#define ARGS_34 ARGS_33, p[33]
#define ARGS_35 ARGS_34, p[34]
#define ARGS_36 ARGS_35, p[35]
#define ARGS_37 ARGS_36, p[36]
#define ARGS_38 ARGS_37, p[37]
#define ARGS_39 ARGS_38, p[38]
#define ARGS_40 ARGS_39, p[39]
#define DEF(n) \
  static void f##n(PARAMS_##n) { got_n = n; REC_##n }
static void f0(void) { got_n = 0; }
DEF(1) DEF(2) DEF(3) DEF(4) DEF(5) DEF(6) DEF(7) DEF(8) DEF(9) DEF(10)
DEF(11) DEF(12) DEF(13) DEF(14) DEF(15) DEF(16) DEF(17) DEF(18) DEF(19) DEF(20)
DEF(21) DEF(22) DEF(23) DEF(24) DEF(25) DEF(26) DEF(27) DEF(28) DEF(29) DEF(30)
DEF(31) DEF(32) DEF(33) DEF(34) DEF(35) DEF(36) DEF(37) DEF(38) DEF(39) DEF(40)

#define N_FNS 40
#define FN(n) (void (*)(void))f##n
static void (*const fns[N_FNS + 1])(void) = {
    FN(0),  FN(1),  FN(2),  FN(3),  FN(4),  FN(5),  FN(6),  FN(7),  FN(8),  FN(9),  FN(10),
    FN(11), FN(12), FN(13), FN(14), FN(15), FN(16), FN(17), FN(18), FN(19), FN(20), FN(21),
    FN(22), FN(23), FN(24), FN(25), FN(26), FN(27), FN(28), FN(29), FN(30), FN(31), FN(32),
    FN(33), FN(34), FN(35), FN(36), FN(37), FN(38), FN(39), FN(40)};

static void test_entry_arities(void **state) {
  (void)state;
  static char data[64];
  void *ptrs[N_FNS];
  for (int n = 0; n <= N_FNS; n++) {
    ffi_entry *e = NULL;
    assert_int_equal(ffi_entry_prepare(n, &e), JIT_OK);
    assert_non_null(e);
    assert_int_equal(ffi_entry_n_args(e), n);
    /* Distinct values per arity and position, including NULL and a non-dereferenceable one, so
       that a shifted or dropped argument (registers vs stack) shows. */
    for (int i = 0; i < n; i++)
      ptrs[i] = i == 0 ? NULL : i == 1 ? (void *)(uintptr_t)0xdeadbeefcafef00dull
                                       : (void *)&data[(i * 7 + n) % 64];
    memset(got, 0xab, sizeof got);
    got_n = -1;
    ffi_entry_call(e, fns[n], ptrs);
    assert_int_equal(got_n, n);
    for (int i = 0; i < n; i++) assert_ptr_equal(got[i], ptrs[i]);
    /* The same prepared entry again with other values: nothing was cached from the first call. */
    for (int i = 0; i < n; i++) ptrs[i] = (void *)&data[(63 - i) % 64];
    ffi_entry_call(e, fns[n], ptrs);
    for (int i = 0; i < n; i++) assert_ptr_equal(got[i], ptrs[i]);
    ffi_entry_free(e);
  }
}

static void test_entry_limits(void **state) {
  (void)state;
  ffi_entry *e = (ffi_entry *)(uintptr_t)1;
  assert_int_equal(ffi_entry_prepare(-1, &e), JIT_EINVAL);
  assert_null(e);
  assert_int_equal(ffi_entry_prepare(FFI_ENTRY_MAX_ARGS + 1, &e), JIT_EINVAL);
  assert_null(e);
  assert_non_null(strstr(jit_last_error(), "at most"));
  assert_int_equal(ffi_entry_prepare(FFI_ENTRY_MAX_ARGS, &e), JIT_OK);
  assert_int_equal(ffi_entry_n_args(e), FFI_ENTRY_MAX_ARGS);
  ffi_entry_free(e);
  ffi_entry_free(NULL);
}

/* ---- host callbacks ---------------------------------------------------------------------------- */

static double mixed(int a, double b, float c, int64_t d, char e) {
  return a * b + c + (double)d + e;
}
static float halve(float x) { return x * 0.5f; }
static uint8_t low_byte(uint32_t x) { return (uint8_t)x; }
static int8_t negate8(int8_t x) { return (int8_t)-x; }

typedef struct pt {
  double x;
  int32_t y;
} pt;
static pt pt_scale(pt p, int32_t k) {
  return (pt){p.x * k, p.y * k};
}

static int side_effect;
static void set_side(int v) { side_effect = v; }

/* Many args of mixed classes: 8 doubles fill the SSE registers, the rest go on the stack. */
static double many(double a0, double a1, double a2, double a3, double a4, double a5, double a6,
                   double a7, double a8, int i0, int i1, int i2, int i3, int i4, int i5, int i6) {
  return a0 + 2 * a1 + 3 * a2 + 4 * a3 + 5 * a4 + 6 * a5 + 7 * a6 + 8 * a7 + 9 * a8 +
         10 * i0 + 11 * i1 + 12 * i2 + 13 * i3 + 14 * i4 + 15 * i5 + 16 * i6;
}

static void test_host_fn(void **state) {
  (void)state;
  ffi_host_fn *h = NULL;
  {
    ffi_type *args[5] = {&ffi_type_sint, &ffi_type_double, &ffi_type_float, &ffi_type_sint64,
                         &ffi_type_schar};
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_double, 5, args, &h), JIT_OK);
    args[0] = &ffi_type_void; /* the array was copied */
    int a = -3;
    double b = 1.5, r = 0;
    float c = 0.25f;
    int64_t d = (int64_t)1 << 40;
    char e = 7;
    void *av[5] = {&a, &b, &c, &d, &e};
    ffi_host_fn_call(h, (void (*)(void))mixed, &r, av);
    assert_true(r == mixed(a, b, c, d, e));
    ffi_host_fn_free(h);
  }
  {
    ffi_type *args[1] = {&ffi_type_float};
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_float, 1, args, &h), JIT_OK);
    float x = 3.0f, r = 0;
    void *av[1] = {&x};
    ffi_host_fn_call(h, (void (*)(void))halve, &r, av);
    assert_true(r == 1.5f);
    ffi_host_fn_free(h);
  }
  {
    /* Narrow integral results come back widened to ffi_arg. */
    ffi_type *args[1] = {&ffi_type_uint32};
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_uint8, 1, args, &h), JIT_OK);
    uint32_t x = 0x12345678u;
    ffi_arg r = 0;
    void *av[1] = {&x};
    ffi_host_fn_call(h, (void (*)(void))low_byte, &r, av);
    assert_int_equal((uint8_t)r, 0x78);
    ffi_host_fn_free(h);
    args[0] = &ffi_type_sint8;
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_sint8, 1, args, &h), JIT_OK);
    int8_t y = 5;
    av[0] = &y;
    ffi_host_fn_call(h, (void (*)(void))negate8, &r, av);
    assert_int_equal((int8_t)(ffi_sarg)r, -5);
    ffi_host_fn_free(h);
  }
  {
    ffi_type *elems[3] = {&ffi_type_double, &ffi_type_sint32, NULL};
    ffi_type pt_type = {.size = 0, .alignment = 0, .type = FFI_TYPE_STRUCT, .elements = elems};
    ffi_type *args[2] = {&pt_type, &ffi_type_sint32};
    assert_int_equal(ffi_host_fn_prepare(&pt_type, 2, args, &h), JIT_OK);
    assert_int_equal(pt_type.size, sizeof(pt)); /* libffi laid the struct out like the compiler */
    pt p = {2.5, -4}, r = {0, 0};
    int32_t k = 3;
    void *av[2] = {&p, &k};
    ffi_host_fn_call(h, (void (*)(void))pt_scale, &r, av);
    assert_true(r.x == 7.5);
    assert_int_equal(r.y, -12);
    ffi_host_fn_free(h);
  }
  {
    ffi_type *args[1] = {&ffi_type_sint};
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, 1, args, &h), JIT_OK);
    int v = 99;
    void *av[1] = {&v};
    ffi_host_fn_call(h, (void (*)(void))set_side, NULL, av);
    assert_int_equal(side_effect, 99);
    ffi_host_fn_free(h);
  }
  {
    ffi_type *args[16];
    double d[9];
    int iv[7];
    void *av[16];
    for (int i = 0; i < 9; i++) {
      args[i] = &ffi_type_double;
      d[i] = 0.5 * (i + 1);
      av[i] = &d[i];
    }
    for (int i = 0; i < 7; i++) {
      args[9 + i] = &ffi_type_sint;
      iv[i] = -i * 3 + 1;
      av[9 + i] = &iv[i];
    }
    assert_int_equal(ffi_host_fn_prepare(&ffi_type_double, 16, args, &h), JIT_OK);
    double r = 0;
    ffi_host_fn_call(h, (void (*)(void))many, &r, av);
    assert_true(r == many(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], iv[0], iv[1], iv[2],
                          iv[3], iv[4], iv[5], iv[6]));
    ffi_host_fn_free(h);
  }
}

static void test_host_fn_bad(void **state) {
  (void)state;
  ffi_host_fn *h = (ffi_host_fn *)(uintptr_t)1;
  ffi_type *args[2] = {&ffi_type_sint, NULL};
  assert_int_equal(ffi_host_fn_prepare(NULL, 0, NULL, &h), JIT_EINVAL);
  assert_null(h);
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, -1, args, &h), JIT_EINVAL);
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, FFI_ENTRY_MAX_ARGS + 1, args, &h),
                   JIT_EINVAL);
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, 2, args, &h), JIT_EINVAL);
  assert_non_null(strstr(jit_last_error(), "argument 1"));
  args[1] = &ffi_type_void;
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, 2, args, &h), JIT_EINVAL);
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, 1, NULL, &h), JIT_EINVAL);
  /* A struct type with no elements is libffi's FFI_BAD_TYPEDEF. */
  ffi_type *none[1] = {NULL};
  ffi_type empty = {.size = 0, .alignment = 0, .type = FFI_TYPE_STRUCT, .elements = none};
  assert_int_equal(ffi_host_fn_prepare(&empty, 0, NULL, &h), JIT_EINVAL);
  assert_null(h);
  ffi_host_fn_free(NULL);
  /* No args at all is a valid signature. */
  assert_int_equal(ffi_host_fn_prepare(&ffi_type_void, 0, NULL, &h), JIT_OK);
  ffi_host_fn_call(h, (void (*)(void))f0, NULL, NULL);
  assert_int_equal(got_n, 0);
  ffi_host_fn_free(h);
}

/* ---- cost --------------------------------------------------------------------------------------- */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Calls fN directly CALLS times with p[0..N-1], through a volatile pointer so nothing inlines. */
#define DIRECT_LOOP(n)                                  \
  do {                                                  \
    void (*volatile direct)(PARAMS_##n) = f##n;         \
    for (int k = 0; k < CALLS; k++) direct(ARGS_##n);   \
  } while (0)

/* Median over 7 rounds of ns per call of fN, through ffi_entry_call and directly. */
static void measure(int n, double *ffi_ns, double *direct_ns) {
  enum { ROUNDS = 7, CALLS = 200000 };
  ffi_entry *e = NULL;
  assert_int_equal(ffi_entry_prepare(n, &e), JIT_OK);
  void *p[N_FNS];
  for (int i = 0; i < n; i++) p[i] = &p[i];
  double rf[ROUNDS], rd[ROUNDS];
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now_ns();
    for (int k = 0; k < CALLS; k++) ffi_entry_call(e, fns[n], p);
    double t1 = now_ns();
    if (n == 3) DIRECT_LOOP(3);
    else if (n == 8) DIRECT_LOOP(8);
    else DIRECT_LOOP(40);
    double t2 = now_ns();
    rf[r] = (t1 - t0) / CALLS;
    rd[r] = (t2 - t1) / CALLS;
  }
  qsort(rf, ROUNDS, sizeof rf[0], cmp_d);
  qsort(rd, ROUNDS, sizeof rd[0], cmp_d);
  *ffi_ns = rf[ROUNDS / 2];
  *direct_ns = rd[ROUNDS / 2];
  assert_int_equal(got_n, n);
  assert_ptr_equal(got[n - 1], &p[n - 1]);
  ffi_entry_free(e);
}

static void test_call_cost(void **state) {
  (void)state;
  static const int ns[] = {3, 8, 40};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    double f = 0, d = 0;
    measure(ns[i], &f, &d);
    print_message("[ info ] %2d pointer args: ffi_entry_call %.1f ns/call, direct call %.1f ns\n",
                  ns[i], f, d);
    /* Informational only: speed is judged by bench/ (W7), never asserted in a test. */
    assert_true(f > 0 && d > 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_entry_arities), cmocka_unit_test(test_entry_limits),
      cmocka_unit_test(test_host_fn),       cmocka_unit_test(test_host_fn_bad),
      cmocka_unit_test(test_call_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
