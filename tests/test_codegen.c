/* test_codegen.c: the compiled path (fusion -> loop IR -> LLVM -> native kernels) against the
 * reference interpreter on random data: every op on every dtype, the fusion patterns, rows split
 * over threads, and a seeded random-program generator (TJIT_TEST_PROGRAMS=N programs, default
 * 1000; TJIT_TEST_SEED=S); the C dump of every kernel tested here must compile with cc -Wall -Werror.
 * Values computed only with ops that round exactly like the interpreter (everything but the
 * polynomial transcendentals and float sums) must match bit for bit; the others within a
 * per-dtype tolerance. NaN matches only NaN. */
#define _GNU_SOURCE /* open_memstream */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "codegen/kernel.h"
#include "codegen/llvm_jit.h"
#include "ir/ir.h"
#include "ir/passes/passes.h"
#include "runtime/exec.h"
#include "runtime/runtime.h"
#include "support/randprog.h"
#include "support/target_gate.h"

static jit_ctx *ctx;
static char *c_all;      /* every kernel's C text, renamed per program */
static size_t c_len, c_cap;
static int n_progs;      /* programs checked (numbers their C names) */
static size_t prelude_len;

/* ---- random numbers ------------------------------------------------------------------------------ */
static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unit(uint64_t *s) { return (double)(rng(s) >> 11) * 0x1p-53; }
static int64_t irange(uint64_t *s, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng(s) % (uint64_t)(hi - lo + 1));
}

/* ---- data ------------------------------------------------------------------------------------------ */
static const double special_f[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e30, -1e30, 1e-30,
                                   65504.0, 70000.0, 1e-7, 0.5, -0.5, 88.0, -104.0, 3e38};

static void fill(jit_dtype dt, void *buf, int64_t n, uint64_t *s, bool special) {
  for (int64_t i = 0; i < n; i++) {
    bool sp = special && rng(s) % 8 == 0;
    if (ir_dtype_is_float(dt)) {
      double v = sp ? special_f[rng(s) % (sizeof special_f / sizeof special_f[0])]
                    : -2 + 4 * unit(s);
      ir_store_f64(dt, buf, i, v);
    } else if (dt == JIT_BOOL) {
      ((uint8_t *)buf)[i] = rng(s) & 1;
    } else {
      int64_t v;
      if (dt == JIT_I8 || dt == JIT_U8) v = (int64_t)(rng(s) & 0xff);
      else if (sp) {
        static const int64_t ex[] = {0, -1, 1, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX};
        v = ex[rng(s) % 7];
      } else v = irange(s, -1000, 1000);
      ir_store_i64(dt, buf, i, v);
    }
  }
}

/* ---- comparing ------------------------------------------------------------------------------------- */
static double tol_of(jit_dtype dt) {
  switch (dt) {
  case JIT_F16: return 4e-3;
  case JIT_BF16: return 3e-2;
  case JIT_F64: return 1e-10;
  default: return 2e-5;
  }
}

/* exact: bit for bit (NaN as NaN); else |got - want| <= tol * (|want| + max |want|) */
static bool compare(const char *what, const ir_type *t, const void *got, const void *want,
                    bool exact) {
  int64_t n = ir_type_numel(t);
  double scale = 0;
  if (ir_dtype_is_float(t->dtype))
    for (int64_t i = 0; i < n; i++) {
      double w = ir_load_f64(t->dtype, want, i);
      if (isfinite(w) && fabs(w) > scale) scale = fabs(w);
    }
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    if (ir_dtype_is_float(t->dtype)) {
      double g = ir_load_f64(t->dtype, got, i), w = ir_load_f64(t->dtype, want, i);
      if (isnan(g) || isnan(w)) ok = isnan(g) && isnan(w);
      else if (exact || isinf(w) || isinf(g)) ok = g == w && signbit(g) == signbit(w);
      else ok = fabs(g - w) <= tol_of(t->dtype) * (fabs(w) + scale) + 1e-30;
    } else {
      ok = ir_load_i64(t->dtype, got, i) == ir_load_i64(t->dtype, want, i);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad) {
    char ts[128];
    ir_format_type(t, ts, sizeof ts);
    fprintf(stderr, "%s: %s: %lld of %lld elements differ (%s); first [%lld]: got %.9g, want %.9g\n",
            what, ts, (long long)bad, (long long)n, exact ? "exact" : "tolerance", (long long)first,
            ir_load_f64(t->dtype, got, first), ir_load_f64(t->dtype, want, first));
  }
  return bad == 0;
}

/* f's dump at stage (JIT_DUMP_C, JIT_DUMP_LLVM: every kernel), for what lowering chose. */
static char *dump_text(const ir_func *f, unsigned stage) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_non_null(m);
  assert_int_equal(exec_dump(ctx, f, stage, m), JIT_OK);
  fclose(m);
  return text;
}

static char *c_dump(const ir_func *f) { return dump_text(f, JIT_DUMP_C); }

/* Appends f's C dump to c_all with its kernels renamed p<N>_k<i>. */
static void collect_c(const ir_func *f) {
  char *text = c_dump(f);
  size_t len = strlen(text);
  assert_true(len >= prelude_len);
  char pre[16];
  snprintf(pre, sizeof pre, "p%d_k", n_progs);
  for (size_t i = prelude_len; i < len; i++) {
    if (c_len + 16 >= c_cap) {
      c_cap = c_cap ? 2 * c_cap : 1 << 20;
      c_all = realloc(c_all, c_cap);
      assert_non_null(c_all);
    }
    if (strncmp(text + i, "tjit_k", 6) == 0) {
      memcpy(c_all + c_len, pre, strlen(pre));
      c_len += strlen(pre);
      i += 5;
    } else {
      c_all[c_len++] = text[i];
    }
  }
  free(text);
}

static size_t type_bytes(const ir_type *t) {
  return (size_t)ir_type_numel(t) * jit_dtype_size(t->dtype);
}

/* Runs f's compiled path on args against the interpreter, or against given[] when not NULL (the
   results as the compiled code defines them). exact[r] (NULL: all) says which results must
   match bit for bit. Returns false (after printing f) on a mismatch. */
static bool check_args(ir_func *f, void *const *args, void *const *given, const bool *exact,
                       const char *what) {
  uint32_t nr = f->n_results;
  void *want[64], *got[64];
  bool ok = true;
  assert_true(nr <= 64);
  if (ir_verify(f, "test") != JIT_OK) {
    fprintf(stderr, "%s: invalid IR: %s\n", what, jit_last_error());
    ir_print(f, stderr);
    fail();
  }
  for (uint32_t r = 0; r < nr; r++) {
    size_t b = type_bytes(ir_type_of(f, f->results[r])) + 1;
    want[r] = malloc(b);
    got[r] = malloc(b);
    assert_true(want[r] && got[r]);
    memset(got[r], 0xa5, b);
  }
  for (uint32_t r = 0; given && r < nr; r++)
    memcpy(want[r], given[r], type_bytes(ir_type_of(f, f->results[r])));
  if (!given && ir_interp(f, (const void *const *)args, want) != JIT_OK) {
    fprintf(stderr, "%s: interp: %s\n", what, jit_last_error());
    fail();
  }
  exec *e = NULL;
  exec_stats st;
  jit_status rc = exec_build(ctx, f, &e, &st);
  if (rc == JIT_OK) rc = exec_run(e, (const void *const *)args, got);
  if (rc != JIT_OK) {
    fprintf(stderr, "%s: compiled: %s\n", what, jit_last_error());
    ir_print(f, stderr);
    ok = false;
  }
  for (uint32_t r = 0; r < nr && ok; r++) {
    char name[160];
    snprintf(name, sizeof name, "%s: result %u", what, r);
    if (!compare(name, ir_type_of(f, f->results[r]), got[r], want[r], exact ? exact[r] : true)) ok = false;
  }
  if (!ok) {
    ir_print(f, stderr);
    exec_dump(ctx, f, JIT_DUMP_FUSED, stderr);
    exec_dump(ctx, f, JIT_DUMP_C, stderr);
  }
  exec_free(e);
  collect_c(f);
  n_progs++;
  for (uint32_t r = 0; r < nr; r++) {
    free(want[r]);
    free(got[r]);
  }
  return ok;
}

/* check_args on random args (special: with NaN, inf, zeros and extremes among them). */
static bool check_exact(ir_func *f, uint64_t seed, const bool *exact, bool special, const char *what) {
  uint32_t np = f->n_params;
  void *args[64];
  uint64_t s = seed;
  assert_true(np <= 64);
  for (uint32_t i = 0; i < np; i++) {
    const ir_type *t = ir_type_of(f, i);
    args[i] = malloc(type_bytes(t) + 1);
    assert_non_null(args[i]);
    fill(t->dtype, args[i], ir_type_numel(t), &s, special);
  }
  bool ok = check_args(f, args, NULL, exact, what);
  for (uint32_t i = 0; i < np; i++) free(args[i]);
  return ok;
}

static ir_func *parse1(const char *text) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  if (ir_parse(text, strlen(text), &fs, &n) != JIT_OK) {
    fprintf(stderr, "parse: %s\n%s", jit_last_error(), text);
    fail();
  }
  assert_int_equal(n, 1);
  ir_func *f = fs[0];
  free(fs);
  return f;
}

/* Parses text, optionally runs the pipeline, checks it (all results exact or all tolerant). */
static void check_text(const char *text, bool exact, bool optimize, bool special, uint64_t seed) {
  ir_func *f = parse1(text);
  if (optimize) assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  bool ex[64];
  for (int i = 0; i < 64; i++) ex[i] = exact;
  bool ok = check_exact(f, seed, ex, special, f->name);
  ir_func_free(f);
  if (!ok) fail();
}

/* ---- every op on every dtype --------------------------------------------------------------------- */
static const jit_dtype floats[] = {JIT_F32, JIT_F64, JIT_F16, JIT_BF16};
static const jit_dtype ints[] = {JIT_I8, JIT_U8, JIT_I32, JIT_I64, JIT_U32, JIT_U64};
static const jit_dtype all_dt[] = {JIT_BOOL, JIT_I8, JIT_U8, JIT_I32, JIT_I64, JIT_U32, JIT_U64,
                                   JIT_F16, JIT_BF16, JIT_F32, JIT_F64};

static void test_unary_float(void **state) {
  (void)state;
  static const char *const ops[] = {"neg",   "abs",   "exp",   "log",  "sqrt", "rsqrt",
                                    "tanh",  "logistic", "sin", "cos", "erf", "floor",
                                    "log1p", "expm1", "ceil", "round", "sign", "erf_inv"};
  for (size_t d = 0; d < 4; d++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      const char *dt = jit_dtype_name(floats[d]);
      char text[512];
      snprintf(text, sizeof text,
               "func @%s_%s(%%0: %s[7,33]) -> %s[7,33] {\n  %%1 = %s %%0 : %s[7,33]\n  return %%1\n}\n",
               ops[o], dt, dt, dt, ops[o], dt);
      bool exact = strcmp(ops[o], "neg") == 0 || strcmp(ops[o], "abs") == 0 ||
                   strcmp(ops[o], "sqrt") == 0 || strcmp(ops[o], "rsqrt") == 0 ||
                   strcmp(ops[o], "floor") == 0 || strcmp(ops[o], "ceil") == 0 ||
                   strcmp(ops[o], "round") == 0 || strcmp(ops[o], "sign") == 0;
      /* sin/cos are accurate for |x| < 2^24 only (docs/MATH.md): no huge special values */
      bool trig = strcmp(ops[o], "sin") == 0 || strcmp(ops[o], "cos") == 0;
      check_text(text, exact, false, !trig, 1 + o);
    }
}

static void test_unary_int(void **state) {
  (void)state;
  static const char *const ops[] = {"neg", "abs", "sign", "not"};
  for (size_t d = 0; d < sizeof ints / sizeof ints[0]; d++)
    for (size_t o = 0; o < 4; o++) {
      const char *dt = jit_dtype_name(ints[d]);
      char text[512];
      snprintf(text, sizeof text,
               "func @%s_%s(%%0: %s[5,9]) -> %s[5,9] {\n  %%1 = %s %%0 : %s[5,9]\n  return %%1\n}\n",
               ops[o], dt, dt, dt, ops[o], dt);
      check_text(text, true, false, true, 7 + o);
    }
}

static void test_binary(void **state) {
  (void)state;
  static const char *const ops[] = {"add", "sub", "mul", "div", "max", "min", "pow", "rem",
                                    "atan2", "and", "or", "xor", "shift_left",
                                    "shift_right_logical", "shift_right_arithmetic"};
  for (size_t d = 0; d < sizeof all_dt / sizeof all_dt[0]; d++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      jit_dtype dtv = all_dt[d];
      bool bitwise = o >= 9 && o <= 11, shift = o >= 12;
      if (dtv == JIT_BOOL && o != 4 && o != 5 && !bitwise) continue; /* bool: max, min, and.. */
      if (ir_dtype_is_float(dtv) && (bitwise || shift)) continue;
      if (o == 8 && !ir_dtype_is_float(dtv)) continue; /* atan2: floats */
      const char *dt = jit_dtype_name(dtv);
      char text[512];
      snprintf(text, sizeof text,
               "func @%s_%s(%%0: %s[6,40], %%1: %s[6,40]) -> %s[6,40] {\n  %%2 = %s %%0, %%1 : %s[6,40]\n  return %%2\n}\n",
               ops[o], dt, dt, dt, dt, ops[o], dt);
      check_text(text, o != 8, false, true, 11 + o);
    }
}

static void test_cmp_select(void **state) {
  (void)state;
  static const char *const dirs[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  for (size_t d = 0; d < sizeof all_dt / sizeof all_dt[0]; d++)
    for (size_t c = 0; c < 6; c++) {
      const char *dt = jit_dtype_name(all_dt[d]);
      char text[768];
      snprintf(text, sizeof text,
               "func @cmp_%s(%%0: %s[3,50], %%1: %s[3,50]) -> (bool[3,50], %s[3,50]) {\n"
               "  %%2 = cmp %%0, %%1 dir=%s : bool[3,50]\n"
               "  %%3 = select %%2, %%0, %%1 : %s[3,50]\n"
               "  return %%2, %%3\n}\n",
               dt, dt, dt, dt, dirs[c], dt);
      check_text(text, true, false, true, 21 + c);
    }
}

static void test_convert_all_pairs(void **state) {
  (void)state;
  for (size_t a = 0; a < sizeof all_dt / sizeof all_dt[0]; a++)
    for (size_t b = 0; b < sizeof all_dt / sizeof all_dt[0]; b++) {
      const char *x = jit_dtype_name(all_dt[a]), *y = jit_dtype_name(all_dt[b]);
      char text[512];
      snprintf(text, sizeof text,
               "func @cvt_%s_%s(%%0: %s[4,33]) -> %s[4,33] {\n  %%1 = convert %%0 : %s[4,33]\n  return %%1\n}\n",
               x, y, x, y, y);
      check_text(text, true, false, true, 31 + a * 11 + b);
    }
}

static void test_const_iota(void **state) {
  (void)state;
  for (size_t d = 0; d < sizeof all_dt / sizeof all_dt[0]; d++) {
    jit_dtype dtv = all_dt[d];
    const char *dt = jit_dtype_name(dtv);
    char text[768];
    if (dtv == JIT_BOOL) {
      snprintf(text, sizeof text,
               "func @c_bool(%%0: bool[3,300]) -> (bool[3,300], bool[300]) {\n"
               "  %%1 = const 1 : bool[3,300]\n  %%2 = max %%0, %%1 : bool[3,300]\n"
               "  %%3 = const 0 : bool[300]\n  return %%2, %%3\n}\n");
    } else {
      snprintf(text, sizeof text,
               "func @iota_%s(%%0: %s[3,300]) -> (%s[3,300], %s[300], %s[]) {\n"
               "  %%1 = iota dim=1 : %s[3,300]\n  %%2 = add %%0, %%1 : %s[3,300]\n"
               "  %%3 = iota dim=0 : %s[300]\n  %%4 = const %s : %s[]\n  return %%2, %%3, %%4\n}\n",
               dt, dt, dt, dt, dt, dt, dt, dt,
               ir_dtype_is_float(dtv) ? "0.1" : ir_dtype_is_unsigned(dtv) ? "7" : "-7", dt);
    }
    check_text(text, true, false, false, 41 + d);
  }
}

/* clamp on every numeric dtype (bounds broadcast from scalars, NaN in any operand), is_finite */
static void test_clamp_is_finite(void **state) {
  (void)state;
  for (size_t d = 1; d < sizeof all_dt / sizeof all_dt[0]; d++) {
    const char *dt = jit_dtype_name(all_dt[d]);
    char text[1024];
    snprintf(text, sizeof text,
             "func @clamp_%s(%%0: %s[5,37], %%1: %s[5,37], %%2: %s[]) -> %s[5,37] {\n"
             "  %%3 = broadcast %%2 dims=[] : %s[5,37]\n"
             "  %%4 = clamp %%1, %%0, %%3 : %s[5,37]\n  return %%4\n}\n",
             dt, dt, dt, dt, dt, dt, dt);
    check_text(text, true, false, true, 61 + d);
    if (!ir_dtype_is_float(all_dt[d])) continue;
    snprintf(text, sizeof text,
             "func @fin_%s(%%0: %s[5,37]) -> bool[5,37] {\n"
             "  %%1 = is_finite %%0 : bool[5,37]\n  return %%1\n}\n", dt, dt);
    check_text(text, true, false, true, 71 + d);
  }
}

/* ---- movement ops ------------------------------------------------------------------------------ */
static void test_movement(void **state) {
  (void)state;
  /* transpose, broadcast, slice with strides, concat, reshapes (trivial and moving) */
  check_text("func @mv(%0: f32[4,6,5], %1: f32[6], %2: f32[5,6,4]) -> (f32[5,6,4], f32[4,6,5], f32[2,3,2], f32[9,6,5], f32[6,20], f32[4,1,6,5,1]) {\n"
             "  %3 = transpose %0 perm=[2,1,0] : f32[5,6,4]\n"
             "  %4 = add %3, %2 : f32[5,6,4]\n"
             "  %5 = broadcast %1 dims=[1] : f32[4,6,5]\n"
             "  %6 = mul %0, %5 : f32[4,6,5]\n"
             "  %7 = slice %0 start=[1,0,1] limit=[4,6,5] stride=[2,3,2] : f32[2,2,2]\n"
             "  %8 = concat %7, %7 axis=1 : f32[2,4,2]\n"
             "  %9 = slice %8 start=[0,1,0] limit=[2,4,2] stride=[1,1,1] : f32[2,3,2]\n"
             "  %10 = neg %0 : f32[4,6,5]\n"
             "  %11 = slice %6 start=[0,0,0] limit=[4,6,5] stride=[1,1,1] : f32[4,6,5]\n"
             "  %12 = concat %10, %11, %0 axis=0 : f32[12,6,5]\n"
             "  %13 = slice %12 start=[3,0,0] limit=[12,6,5] stride=[1,1,1] : f32[9,6,5]\n"
             "  %14 = transpose %6 perm=[1,0,2] : f32[6,4,5]\n"
             "  %15 = reshape %14 : f32[6,20]\n"
             "  %16 = exp %15 : f32[6,20]\n"
             "  %17 = reshape %0 : f32[4,1,6,5,1]\n"
             "  %18 = abs %17 : f32[4,1,6,5,1]\n"
             "  return %4, %6, %9, %13, %16, %18\n}\n",
             false, false, false, 51);
}

/* ---- fusion patterns ------------------------------------------------------------------------------ */
static const char softmax_ir[] =
    "func @softmax(%x: DT[ROWS,COLS]) -> DT[ROWS,COLS] {\n"
    "  %m = reduce_max %x axes=[1] : DT[ROWS]\n"
    "  %m2 = reshape %m : DT[ROWS,1]\n"
    "  %mb = broadcast %m2 dims=[0,1] : DT[ROWS,COLS]\n"
    "  %d = sub %x, %mb : DT[ROWS,COLS]\n"
    "  %e = exp %d : DT[ROWS,COLS]\n"
    "  %s = reduce_sum %e axes=[1] : DT[ROWS]\n"
    "  %s2 = reshape %s : DT[ROWS,1]\n"
    "  %sb = broadcast %s2 dims=[0,1] : DT[ROWS,COLS]\n"
    "  %y = div %e, %sb : DT[ROWS,COLS]\n"
    "  return %y\n"
    "}\n";

static const char layernorm_ir[] =
    "func @layernorm(%x: DT[ROWS,COLS], %g: DT[COLS], %b: DT[COLS]) -> DT[ROWS,COLS] {\n"
    "  %s = reduce_sum %x axes=[1] : DT[ROWS]\n"
    "  %n = const COLS : DT[ROWS]\n"
    "  %mean = div %s, %n : DT[ROWS]\n"
    "  %m2 = reshape %mean : DT[ROWS,1]\n"
    "  %mb = broadcast %m2 dims=[0,1] : DT[ROWS,COLS]\n"
    "  %xc = sub %x, %mb : DT[ROWS,COLS]\n"
    "  %sq = mul %xc, %xc : DT[ROWS,COLS]\n"
    "  %vs = reduce_sum %sq axes=[1] : DT[ROWS]\n"
    "  %var = div %vs, %n : DT[ROWS]\n"
    "  %eps = const 1e-5 : DT[ROWS]\n"
    "  %ve = add %var, %eps : DT[ROWS]\n"
    "  %rs = rsqrt %ve : DT[ROWS]\n"
    "  %r2 = reshape %rs : DT[ROWS,1]\n"
    "  %rb = broadcast %r2 dims=[0,1] : DT[ROWS,COLS]\n"
    "  %y = mul %xc, %rb : DT[ROWS,COLS]\n"
    "  %gb = broadcast %g dims=[1] : DT[ROWS,COLS]\n"
    "  %y2 = mul %y, %gb : DT[ROWS,COLS]\n"
    "  %bb = broadcast %b dims=[1] : DT[ROWS,COLS]\n"
    "  %y3 = add %y2, %bb : DT[ROWS,COLS]\n"
    "  return %y3\n"
    "}\n";

/* text with DT, ROWS, COLS replaced */
static char *subst(const char *tmpl, const char *dt, int64_t rows, int64_t cols) {
  size_t cap = strlen(tmpl) * 2 + 256, n = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  for (const char *p = tmpl; *p;) {
    char rep[32] = {0};
    size_t skip = 0;
    if (strncmp(p, "DT", 2) == 0) snprintf(rep, sizeof rep, "%s", dt), skip = 2;
    else if (strncmp(p, "ROWS", 4) == 0) snprintf(rep, sizeof rep, "%lld", (long long)rows), skip = 4;
    else if (strncmp(p, "COLS", 4) == 0) snprintf(rep, sizeof rep, "%lld", (long long)cols), skip = 4;
    if (skip) {
      memcpy(out + n, rep, strlen(rep));
      n += strlen(rep);
      p += skip;
    } else {
      out[n++] = *p++;
    }
  }
  out[n] = '\0';
  return out;
}

static void test_softmax_layernorm(void **state) {
  (void)state;
  static const struct { const char *dt; int64_t r, c; } cases[] = {
      {"f32", 16, 8}, {"f32", 3, 1000}, {"f32", 256, 1024}, {"f64", 5, 77},
      {"f16", 9, 64}, {"bf16", 4, 130}, {"f32", 1, 1},     {"f32", 0, 5},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *t = subst(softmax_ir, cases[i].dt, cases[i].r, cases[i].c);
    check_text(t, false, true, false, 61 + i);
    free(t);
    t = subst(layernorm_ir, cases[i].dt, cases[i].r, cases[i].c);
    check_text(t, false, true, false, 71 + i);
    free(t);
  }
}

static void test_reductions(void **state) {
  (void)state;
  /* trailing, leading, middle, all axes; several outputs; each reduction kind and dtype */
  static const char *const kinds[] = {"reduce_sum", "reduce_max", "reduce_min"};
  for (size_t d = 0; d < sizeof all_dt / sizeof all_dt[0]; d++)
    for (size_t k = 0; k < 3; k++) {
      jit_dtype dtv = all_dt[d];
      if (dtv == JIT_BOOL && k == 0) continue;
      const char *dt = jit_dtype_name(dtv);
      char text[1024];
      snprintf(text, sizeof text,
               "func @red_%s(%%0: %s[6,7,9]) -> (%s[6,7], %s[7,9], %s[6,9], %s[], %s[7]) {\n"
               "  %%1 = %s %%0 axes=[2] : %s[6,7]\n"
               "  %%2 = %s %%0 axes=[0] : %s[7,9]\n"
               "  %%3 = %s %%0 axes=[1] : %s[6,9]\n"
               "  %%4 = %s %%0 axes=[0,1,2] : %s[]\n"
               "  %%5 = %s %%0 axes=[0,2] : %s[7]\n"
               "  return %%1, %%2, %%3, %%4, %%5\n}\n",
               dt, dt, dt, dt, dt, dt, dt, kinds[k], dt, kinds[k], dt, kinds[k], dt, kinds[k], dt,
               kinds[k], dt);
      check_text(text, !(ir_dtype_is_float(dtv) && k == 0), false, true, 81 + k);
    }
}

static void test_row_patterns(void **state) {
  (void)state;
  /* logsumexp with the max and the sum as extra outputs; a reduction fed by a broadcast */
  check_text("func @lse(%x: f32[33,100], %b: f32[100]) -> (f32[33,100], f32[33], f32[33]) {\n"
             "  %bb = broadcast %b dims=[1] : f32[33,100]\n"
             "  %xb = add %x, %bb : f32[33,100]\n"
             "  %m = reduce_max %xb axes=[1] : f32[33]\n"
             "  %mb = broadcast %m dims=[0] : f32[33,100]\n"
             "  %d = sub %xb, %mb : f32[33,100]\n"
             "  %e = exp %d : f32[33,100]\n"
             "  %s = reduce_sum %e axes=[1] : f32[33]\n"
             "  %l = log %s : f32[33]\n"
             "  %lse = add %l, %m : f32[33]\n"
             "  %lb = broadcast %lse dims=[0] : f32[33,100]\n"
             "  %y = sub %xb, %lb : f32[33,100]\n"
             "  return %y, %m, %s\n}\n",
             false, true, false, 91);
  /* mean over the whole array subtracted from every element (a scalar read by every row) */
  check_text("func @center(%x: f32[20,30]) -> f32[20,30] {\n"
             "  %s = reduce_sum %x axes=[0,1] : f32[]\n"
             "  %n = const 600 : f32[]\n"
             "  %m = div %s, %n : f32[]\n"
             "  %mb = broadcast %m dims=[] : f32[20,30]\n"
             "  %y = sub %x, %mb : f32[20,30]\n"
             "  return %y\n}\n",
             false, true, false, 92);
  /* a row reduction of a transposed value, over a 3-d array with the reduced axis in the middle */
  check_text("func @midrow(%x: f32[5,40,6]) -> f32[5,40,6] {\n"
             "  %s = reduce_sum %x axes=[1] : f32[5,6]\n"
             "  %sb = broadcast %s dims=[0,2] : f32[5,40,6]\n"
             "  %y = div %x, %sb : f32[5,40,6]\n"
             "  return %y\n}\n",
             false, true, false, 93);
}

static void test_dot_epilogue(void **state) {
  (void)state;
  check_text(
      "func @mlp(%x: f32[8,16], %w1: f32[16,32], %b1: f32[32], %w2: f32[32,4], %b2: f32[4]) -> (f32[8,4], f32[8,32]) {\n"
      "  %h = dot %x, %w1 contract=[1]x[0] : f32[8,32]\n"
      "  %bb = broadcast %b1 dims=[1] : f32[8,32]\n"
      "  %h2 = add %h, %bb : f32[8,32]\n"
      "  %z = const 0 : f32[8,32]\n"
      "  %h3 = max %h2, %z : f32[8,32]\n"
      "  %y = dot %h3, %w2 contract=[1]x[0] : f32[8,4]\n"
      "  %bb2 = broadcast %b2 dims=[1] : f32[8,4]\n"
      "  %y2 = add %y, %bb2 : f32[8,4]\n"
      "  return %y2, %h\n}\n",
      false, true, false, 101); /* matmul kernels accumulate in f32 (interpreter: double) */
}

/* A row kernel keeps a transcendental value its reduction loop computed for the write loop in a
   row scratch array when the row fits (its output is then only written), else in the output. */
static void test_row_scratch(void **state) {
  (void)state;
  static const struct { int64_t r, c; bool scratch; } cases[] = {{64, 700, true}, {3, 8192, false}};
  for (size_t i = 0; i < 2; i++) {
    char *t = subst(softmax_ir, "f32", cases[i].r, cases[i].c);
    ir_func *f = parse1(t);
    free(t);
    assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
    char *c = c_dump(f), decl[32];
    snprintf(decl, sizeof decl, "float b2[%lld];", (long long)cases[i].c);
    assert_int_equal(strstr(c, decl) != NULL, cases[i].scratch);
    assert_int_equal(strstr(c, "= b1[") != NULL, !cases[i].scratch); /* the output read back */
    free(c);
    bool ok = check_exact(f, 131 + i, (bool[]){false}, false, f->name);
    ir_func_free(f);
    assert_true(ok);
  }
}

/* ---- column sums read by an elementwise tail (lower.c write_columns) ------------------------- */
/* A bias's SGD update b - lr * sum(dy, 0) fused after its gradient (and the like: a product
   summed, a max, three dims, f64) runs in column mode, its sums in a row scratch array of the
   row's columns: results against the interpreter, with rows of 256 columns and a ragged last one,
   and columns split into 4 rows for threads (300: 80 a row, the last 60; 256: 64 a row).
   A tail that is not elementwise with the sums' type, and a bf16 sum, stay row reductions. */
static void test_column_tails(void **state) {
  (void)state;
  static const struct {
    const char *text;
    const char *scratch; /* the row scratch the sums would have in the C dump */
    bool column;
  } cases[] = {
      {"func @bias_sgd(%b: f32[300], %dy: f32[70,300]) -> f32[300] {\n"
       "  %s = reduce_sum %dy axes=[0] : f32[300]\n"
       "  %lr = const 0.1 : f32[300]\n"
       "  %u = mul %s, %lr : f32[300]\n"
       "  %y = sub %b, %u : f32[300]\n"
       "  return %y\n}\n",
       "float b3[80];", true},
      {"func @bias256_sgd(%b: f32[256], %dy: f32[30,256]) -> f32[256] {\n"
       "  %s = reduce_sum %dy axes=[0] : f32[256]\n"
       "  %lr = const 0.1 : f32[256]\n"
       "  %u = mul %s, %lr : f32[256]\n"
       "  %y = sub %b, %u : f32[256]\n"
       "  return %y\n}\n",
       "float b3[64];", true},
      {"func @gain_sgd(%g: f32[40], %x: f32[33,40], %dy: f32[33,40]) -> f32[40] {\n"
       "  %p = mul %x, %dy : f32[33,40]\n"
       "  %s = reduce_sum %p axes=[0] : f32[40]\n"
       "  %lr = const 0.1 : f32[40]\n"
       "  %u = mul %s, %lr : f32[40]\n"
       "  %y = sub %g, %u : f32[40]\n"
       "  return %y\n}\n",
       "float b4[40];", true},
      {"func @max_tail(%b: f64[2,600], %x: f64[9,2,600]) -> f64[2,600] {\n"
       "  %m = reduce_max %x axes=[0] : f64[2,600]\n"
       "  %y = add %m, %b : f64[2,600]\n"
       "  %z = mul %y, %m : f64[2,600]\n"
       "  return %z\n}\n",
       "double b3[256];", true},
      {"func @pos_sgd(%p: f32[16,24], %dy: f32[5,16,24]) -> f32[16,24] {\n"
       "  %s = reduce_sum %dy axes=[0] : f32[16,24]\n"
       "  %y = sub %p, %s : f32[16,24]\n"
       "  return %y\n}\n",
       "float b3[24];", true},
      {"func @narrow_tail(%b: f32[64], %dy: f32[20,64]) -> f16[64] {\n"
       "  %s = reduce_sum %dy axes=[0] : f32[64]\n"
       "  %y = sub %b, %s : f32[64]\n"
       "  %z = convert %y : f16[64]\n"
       "  return %z\n}\n",
       "b3[64]", false},
      {"func @bf16_sum(%b: bf16[64], %dy: bf16[20,64]) -> bf16[64] {\n"
       "  %s = reduce_sum %dy axes=[0] : bf16[64]\n"
       "  %y = sub %b, %s : bf16[64]\n"
       "  return %y\n}\n",
       "b3[64]", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_func *f = parse1(cases[i].text);
    char *c = c_dump(f);
    bool column = strstr(c, cases[i].scratch) != NULL;
    if (column != cases[i].column) fprintf(stderr, "%s: column mode %d:\n%s", f->name, column, c);
    assert_int_equal(column, cases[i].column);
    free(c);
    /* NaN, inf and extremes only for the max: a sum that overflows in f32 depends on its order */
    bool max = strstr(cases[i].text, "reduce_max") != NULL;
    bool ok = check_exact(f, 141 + i, (bool[]){max}, max, f->name);
    ir_func_free(f);
    assert_true(ok);
  }
}

/* The same update with b donated: the output shares b's buffer, which the tail reads after every
   sum is complete. */
static void bias_sgd_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  int axis = 0;
  jit_val s = jit_reduce_sum(t, args[1], 1, &axis);
  results[0] = jit_sub(t, args[0], jit_mul(t, jit_scalar(t, 0.5), s));
}

static void test_column_tail_donated(void **state) {
  (void)state;
  enum { R = 37, C = 520 };
  float b[C], dy[R * C], want[C], got[C];
  for (int j = 0; j < C; j++) b[j] = (float)j * 0.25f - 10.0f;
  for (int i = 0; i < R * C; i++) dy[i] = (float)((i * 7919) % 101) * 0.125f - 6.0f;
  for (int j = 0; j < C; j++) { /* every partial sum exact in f32: multiples of 1/8 below 2^20 */
    float sum = 0;
    for (int i = 0; i < R; i++) sum += dy[i * C + j];
    want[j] = b[j] - 0.5f * sum;
  }
  jit_fn_opts o = {.name = "bias_sgd", .n_args = 2, .n_results = 1, .donate_mask = 1};
  jit_fn *f = NULL;
  assert_int_equal(jit_compile(ctx, bias_sgd_fn, NULL, &o, &f), JIT_OK);
  const int64_t sb[1] = {C}, sd[2] = {R, C};
  for (int call = 0; call < 2; call++) {
    jit_array *a[2] = {NULL, NULL}, *y = NULL;
    assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, sb, b, &a[0]), JIT_OK);
    assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, sd, dy, &a[1]), JIT_OK);
    const void *b_bytes = a[0]->data;
    assert_int_equal(jit_call(f, a, &y), JIT_OK);
    assert_ptr_equal(y->data, b_bytes); /* in place: the kernel's one store to y follows b's load */
    assert_int_equal(jit_array_to_host(y, got, sizeof got), JIT_OK);
    assert_memory_equal(got, want, sizeof got);
    jit_array_free(y);
    jit_array_free(a[0]); /* deleted by the call as donated: its handle is still ours to free */
    jit_array_free(a[1]);
  }
  jit_fn_free(f);
}

/* ---- exp only added to a constant (emit_llvm.c lp_exp_only_summed) ------------------------------ */
/* 1 / (1 + exp(-x)), exp(x) - 1, and programs whose exp must stay exact: (1 + e) e scaled up (its
   results under the normal range then show), e also returned (a kernel of its own), added to 2^-50
   or to 0. The exact exp scales by 2^-64 (f64 2^-512) for x < 0, cg_math_emit_exp_summand never:
   that constant in the kernel's LLVM IR tells which one was emitted. x spans [-110, -80] (f32 exp's
   subnormal range and the summand's clamp), and [-2, 2] but where the results scale exp's smallest
   up; results against the interpreter. */
static void test_exp_summands(void **state) {
  (void)state;
  static const struct {
    const char *body, *results;
    bool summand, low; /* low: every x in [-110, -80] */
  } cases[] = {
      {"%n = neg %x : DT[512]\n  %e = exp %n : DT[512]\n  %c = const 1 : DT[512]\n"
       "  %d = add %c, %e : DT[512]\n  %y = div %c, %d : DT[512]\n",
       "%y", true, false},
      {"%e = exp %x : DT[512]\n  %c = const 1 : DT[512]\n  %y = sub %e, %c : DT[512]\n", "%y", true,
       false},
      {"%e = exp %x : DT[512]\n  %c = const 1 : DT[512]\n  %d = add %c, %e : DT[512]\n"
       "  %p = mul %d, %e : DT[512]\n  %k = const 1e30 : DT[512]\n  %y = mul %p, %k : DT[512]\n",
       "%y", false, true},
      {"%e = exp %x : DT[512]\n  %c = const 1 : DT[512]\n  %d = add %c, %e : DT[512]\n", "%d, %e",
       false, false},
      {"%e = exp %x : DT[512]\n  %c = const 8.8817841970012523e-16 : DT[512]\n"
       "  %y = add %e, %c : DT[512]\n",
       "%y", false, false},
      {"%e = exp %x : DT[512]\n  %c = const 0 : DT[512]\n  %y = add %c, %e : DT[512]\n", "%y",
       false, false},
  };
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      char tmpl[1024], *text;
      int nres = cases[i].results[2] == ',' ? 2 : 1;
      snprintf(tmpl, sizeof tmpl, "func @summand(%%x: DT[512]) -> (%s) {\n  %s  return %s\n}\n",
               nres == 2 ? "DT[512], DT[512]" : "DT[512]", cases[i].body, cases[i].results);
      text = subst(tmpl, d ? "f64" : "f32", 0, 0);
      ir_func *f = parse1(text);
      free(text);
      char *llvm = dump_text(f, JIT_DUMP_LLVM);
      bool exact_scale = strstr(llvm, d ? "0x1FF0000000000000" : "0x3BF0000000000000") != NULL;
      if (exact_scale == cases[i].summand) fprintf(stderr, "case %zu f%d:\n%s", i, d ? 64 : 32, llvm);
      assert_int_equal(exact_scale, !cases[i].summand);
      free(llvm);
      void *x = malloc(512 * (d ? 8 : 4));
      assert_non_null(x);
      for (int k = 0; k < 512; k++)
        ir_store_f64(d ? JIT_F64 : JIT_F32, x, k,
                     k < 256 || cases[i].low ? -110 + 30.0 * (k % 256) / 255
                                             : -2 + 4.0 * (k - 256) / 255);
      bool ok = check_args(f, (void *const[]){x}, NULL, (bool[]){false, false}, "summand");
      free(x);
      ir_func_free(f);
      assert_true(ok);
    }
}

/* An exp whose operand is <= 0 or NaN by the IR that computes it (lower_range.c) is emitted
   without exp's upper clamp (89, f64 710) and gives exp's results; operands that are not known
   so keep the general exp. */
static void test_exp_nonpos_operands(void **state) {
  (void)state;
  static const struct {
    const char *body; /* defines %a from %x and %y, DT[24,24] */
    bool nonpos;
  } cases[] = {
      {"%m = reduce_max %x axes=[1] : DT[24]\n  %m2 = reshape %m : DT[24,1]\n"
       "  %mb = broadcast %m2 dims=[0,1] : DT[24,24]\n  %a = sub %x, %mb : DT[24,24]\n",
       true},
      {"%m = reduce_max %x axes=[1] : DT[24]\n  %mb = broadcast %m dims=[0] : DT[24,24]\n"
       "  %a = sub %x, %mb : DT[24,24]\n",
       true},
      {"%m = reduce_max %x axes=[0] : DT[24]\n  %m2 = reshape %m : DT[1,24]\n"
       "  %mb = broadcast %m2 dims=[0,1] : DT[24,24]\n  %a = sub %x, %mb : DT[24,24]\n",
       true},
      {"%m = reduce_max %x axes=[0,1] : DT[]\n  %mb = broadcast %m dims=[] : DT[24,24]\n"
       "  %a = sub %x, %mb : DT[24,24]\n",
       true},
      {"%n = abs %x : DT[24,24]\n  %a = neg %n : DT[24,24]\n", true},
      {"%n = mul %x, %x : DT[24,24]\n  %a = neg %n : DT[24,24]\n", true},
      /* the max of another array, of the other axis, the difference the other way round */
      {"%m = reduce_max %y axes=[1] : DT[24]\n  %mb = broadcast %m dims=[0] : DT[24,24]\n"
       "  %a = sub %x, %mb : DT[24,24]\n",
       false},
      {"%m = reduce_max %x axes=[1] : DT[24]\n  %mb = broadcast %m dims=[1] : DT[24,24]\n"
       "  %a = sub %x, %mb : DT[24,24]\n",
       false},
      {"%m = reduce_max %x axes=[1] : DT[24]\n  %mb = broadcast %m dims=[0] : DT[24,24]\n"
       "  %a = sub %mb, %x : DT[24,24]\n",
       false},
      {"%m = reduce_min %x axes=[1] : DT[24]\n  %mb = broadcast %m dims=[0] : DT[24,24]\n"
       "  %a = sub %x, %mb : DT[24,24]\n",
       false},
      {"%n = mul %x, %y : DT[24,24]\n  %a = neg %n : DT[24,24]\n", false},
  };
  static const char *const dts[] = {"f32", "f64", "bf16"}; /* bf16 computes in f32 */
  for (int d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      char tmpl[1024];
      snprintf(tmpl, sizeof tmpl,
               "func @nonpos(%%x: DT[24,24], %%y: DT[24,24]) -> DT[24,24] {\n  %s"
               "  %%e = exp %%a : DT[24,24]\n  return %%e\n}\n",
               cases[i].body);
      char *text = subst(tmpl, dts[d], 0, 0);
      ir_func *f = parse1(text);
      free(text);
      char *llvm = dump_text(f, JIT_DUMP_LLVM);
      bool general = strstr(llvm, d == 1 ? "7.100000e+02" : "8.900000e+01") != NULL;
      if (general == cases[i].nonpos) fprintf(stderr, "case %zu %s:\n%s", i, dts[d], llvm);
      assert_int_equal(general, !cases[i].nonpos);
      free(llvm);
      bool ok = check_exact(f, 91 + i, (bool[]){false}, true, "nonpos") &&
                check_exact(f, 191 + i, (bool[]){false}, false, "nonpos");
      ir_func_free(f);
      assert_true(ok);
    }
}

/* ---- division by a row's divisor (lower.c gen_quot) -------------------------------------------- */
static const char quot_ir[] =
    "func @quot(%x: DT[ROWS,COLS], %s: DT[ROWS]) -> (DT[ROWS,COLS], DT[ROWS,COLS], DT[ROWS,COLS]) {\n"
    "  %sb = broadcast %s dims=[0] : DT[ROWS,COLS]\n"
    "  %y = div %x, %sb : DT[ROWS,COLS]\n"
    "  %c = const 3 : DT[ROWS,COLS]\n"
    "  %z = div %x, %c : DT[ROWS,COLS]\n"
    "  %w = sub %y, %x : DT[ROWS,COLS]\n" /* a quotient read by another op, not only stored */
    "  return %y, %z, %w\n}\n";

static double random_bits_float(jit_dtype dt, uint64_t *s) {
  uint64_t u = rng(s);
  if (dt == JIT_F64) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
  }
  uint32_t w = (uint32_t)u;
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}

/* Row r's dividends and divisor, by r % 10: in LP_QUOT's ranges (0, 2, 8: near their edges), or
   with one value outside them (a subnormal, inf, NaN, a zero or tiny divisor, ...). */
static void quot_row(jit_dtype dt, int64_t r, int64_t cols, uint64_t *s, double *x, double *sv) {
  bool wide = dt == JIT_F64;
  int qa = wide ? LP_QUOT_QA64 : LP_QUOT_QA32, qb = wide ? LP_QUOT_QB64 : LP_QUOT_QB32;
  double tiny = wide ? 0x1p-1030 : 0x1p-130; /* times unit(s): subnormal */
  int kind = (int)(r % 10);
  *sv = 0.5 + 2.5 * unit(s);
  for (int64_t c = 0; c < cols; c++) {
    double v = -2 + 4 * unit(s);
    if (kind == 1) v = ldexp(v, (int)irange(s, -qa - 12, qa + 12)); /* some past 2^+-QA */
    if (kind == 2 && rng(s) % 2) v = rng(s) % 2 ? 0.0 : -0.0;
    if (kind == 7) v = random_bits_float(dt, s);
    if (kind == 8) v = ldexp(1 + unit(s), rng(s) % 2 ? -qa : qa - 1) * (rng(s) % 2 ? 1 : -1);
    x[c] = v;
  }
  int64_t at = (int64_t)(rng(s) % (uint64_t)cols);
  switch (kind) {
  case 2: *sv = r / 10 % 2 ? -*sv : *sv; break;
  case 3:
    for (int64_t c = at % 7; c < cols; c += 7) x[c] = tiny * unit(s) * (rng(s) % 2 ? 1 : -1);
    break;
  case 4: x[at] = rng(s) % 2 ? INFINITY : NAN; break;
  case 5: *sv = 0.0; break;
  case 6: *sv = rng(s) % 2 ? ldexp(1, -qb - 1) : NAN; break;
  case 7: *sv = random_bits_float(dt, s); break;
  case 8: *sv = ldexp(1 + unit(s), rng(s) % 2 ? -qb : qb - 1) * (rng(s) % 2 ? 1 : -1); break;
  case 9: *sv = -INFINITY; break;
  default: break;
  }
}

/* f16/bf16 quotients are f32 quotients rounded to the dtype (kernel.h): quot_ir's results as
   the compiled code defines them, where the interpreter divides in double. */
static void want_narrow_quot(jit_dtype dt, int64_t rows, int64_t cols, void *const *args,
                             void **want) {
  for (int64_t r = 0; r < rows; r++) {
    float b = (float)ir_load_f64(dt, args[1], r);
    for (int64_t k = 0; k < cols; k++) {
      float a = (float)ir_load_f64(dt, args[0], r * cols + k);
      ir_store_f64(dt, want[0], r * cols + k, a / b);
      float y = (float)ir_load_f64(dt, want[0], r * cols + k);
      ir_store_f64(dt, want[1], r * cols + k, a / 3.0f);
      ir_store_f64(dt, want[2], r * cols + k, y - a);
    }
  }
}

/* Quotients by a row's divisor and by a constant take three FMAs, not a division; the results
   are the divisions' bit for bit, in rows where every value is in range and in rows where one
   is not (which are written again, dividing). */
static void test_row_divisor_quotients(void **state) {
  (void)state;
  static const struct { jit_dtype dt; int64_t r, c; } cases[] = {
      {JIT_F32, 40, 203}, {JIT_F64, 40, 203}, {JIT_F32, 10, 4100}, {JIT_F32, 2, 20000},
      {JIT_BF16, 40, 203}, {JIT_F16, 40, 203}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    jit_dtype dt = cases[i].dt;
    int64_t rows = cases[i].r, cols = cases[i].c;
    char *t = subst(quot_ir, jit_dtype_name(dt), rows, cols);
    ir_func *f = parse1(t);
    free(t);
    assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
    /* where the target has FMA instructions: without, llvm.fma is emulated to within an ulp */
    char *c = c_dump(f);
    bool fma = ctx->jit && cg_jit_target(ctx->jit)->fma;
    assert_int_equal(strstr(c, dt == JIT_F64 ? "tjit_quot_f64(v" : "tjit_quot_f32(v") != NULL, fma);
    if (fma && dt == JIT_BF16) assert_non_null(strstr(c, "tjit_rnd_bf16(tjit_quot_f32(v"));
    free(c);
    size_t es = jit_dtype_size(dt);
    void *args[2] = {malloc((size_t)(rows * cols) * es), malloc((size_t)rows * es)};
    double *row = malloc((size_t)cols * sizeof *row);
    assert_true(args[0] && args[1] && row);
    uint64_t s = 141 + i;
    for (int64_t r = 0; r < rows; r++) {
      double sv;
      /* the split case's two rows: in range, then not */
      quot_row(dt, rows == 2 ? 3 * r : r, cols, &s, row, &sv);
      for (int64_t k = 0; k < cols; k++) ir_store_f64(dt, args[0], r * cols + k, row[k]);
      ir_store_f64(dt, args[1], r, sv);
    }
    /* f32/f64 against the interpreter; f16/bf16 against f32 quotients rounded */
    bool narrow = dt != JIT_F32 && dt != JIT_F64;
    void *want[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3 && narrow; k++) {
      want[k] = malloc(type_bytes(ir_type_of(f, f->results[k])));
      assert_non_null(want[k]);
    }
    if (narrow) want_narrow_quot(dt, rows, cols, args, want);
    bool ok = check_args(f, args, narrow ? want : NULL, NULL, f->name);
    for (int k = 0; k < 3; k++) free(want[k]);
    free(args[0]);
    free(args[1]);
    free(row);
    ir_func_free(f);
    assert_true(ok);
  }
}

/* A quotient whose dividend is softmax's exp (in [0, 1]) skips the dividend's upper range check
   and its sign mask (gen_quot's unit): still each quotient is the division of the exp by the row's
   divisor bit for bit, in rows whose exps are subnormal or 0, hold a NaN or -inf, or whose
   divisor is out of LP_QUOT's range. */
static void test_unit_dividend_quotients(void **state) {
  (void)state;
  static const char text[] =
      "func @unitq(%x: DT[ROWS,COLS], %s: DT[ROWS]) -> (DT[ROWS,COLS], DT[ROWS,COLS]) {\n"
      "  %m = reduce_max %x axes=[1] : DT[ROWS]\n"
      "  %mb = broadcast %m dims=[0] : DT[ROWS,COLS]\n"
      "  %d = sub %x, %mb : DT[ROWS,COLS]\n"
      "  %e = exp %d : DT[ROWS,COLS]\n"
      "  %sb = broadcast %s dims=[0] : DT[ROWS,COLS]\n"
      "  %y = div %e, %sb : DT[ROWS,COLS]\n"
      "  return %e, %y\n}\n";
  enum { ROWS = 48, COLS = 301 };
  for (int wide = 0; wide < 2; wide++) {
    jit_dtype dt = wide ? JIT_F64 : JIT_F32;
    char *t = subst(text, jit_dtype_name(dt), ROWS, COLS);
    ir_func *f = parse1(t);
    free(t);
    size_t es = jit_dtype_size(dt);
    void *args[2] = {malloc(ROWS * COLS * es), malloc(ROWS * es)};
    void *got[2] = {malloc(ROWS * COLS * es), malloc(ROWS * COLS * es)};
    assert_true(args[0] && args[1] && got[0] && got[1]);
    uint64_t s = 17 + (uint64_t)wide;
    double span = wide ? 800 : 120; /* exps down through the subnormals to 0 */
    for (int64_t r = 0; r < ROWS; r++) {
      int kind = (int)(r % 8);
      for (int64_t k = 0; k < COLS; k++) {
        double v = kind == 1 || kind == 5 ? -span * unit(&s) : -2 + 4 * unit(&s);
        if (kind == 2 && k == 7) v = NAN;
        if (kind == 3 && k % 5 == 0) v = -INFINITY;
        ir_store_f64(dt, args[0], r * COLS + k, v);
      }
      static const double divisors[8] = {3.5, 0.75, -2.0, 1.0, 0x1p-30, 1e30, 0.0, NAN};
      ir_store_f64(dt, args[1], r, kind == 5 ? 1.25 : divisors[kind]);
    }
    exec *e = NULL;
    exec_stats st;
    assert_int_equal(exec_build(ctx, f, &e, &st), JIT_OK);
    assert_int_equal(exec_run(e, (const void *const *)args, got), JIT_OK);
    exec_free(e);
    /* the compiled exps, and each divided by its row's divisor */
    for (int64_t r = 0; r < ROWS; r++)
      for (int64_t k = 0; k < COLS; k++) {
        int64_t i = r * COLS + k;
        if (wide)
          ((double *)got[1])[i] = ((double *)got[0])[i] / ((double *)args[1])[r];
        else
          ((float *)got[1])[i] = ((float *)got[0])[i] / ((float *)args[1])[r];
      }
    bool ok = check_args(f, args, got, NULL, "unit dividend");
    for (int k = 0; k < 2; k++) free(args[k]), free(got[k]);
    ir_func_free(f);
    assert_true(ok);
  }
}

static void test_results_and_views(void **state) {
  (void)state;
  /* a param returned, a value returned twice, a view returned, a constant returned, empty arrays */
  check_text("func @res(%x: i32[4,6], %e: f32[0,3]) -> (i32[4,6], i32[24], i32[24], i32[4,6], f32[2], f32[0,3], f32[3,0]) {\n"
             "  %r = reshape %x : i32[24]\n"
             "  %n = neg %x : i32[4,6]\n"
             "  %c = const 2.5 : f32[2]\n"
             "  %t = transpose %e perm=[1,0] : f32[3,0]\n"
             "  return %x, %r, %r, %n, %c, %e, %t\n}\n",
             true, false, false, 111);
  /* rank 0 everywhere */
  check_text("func @scalar(%x: f32[], %y: f32[]) -> (f32[], f32[]) {\n"
             "  %a = add %x, %y : f32[]\n  %b = mul %a, %x : f32[]\n  return %b, %a\n}\n",
             true, false, false, 112);
}

/* Big enough for the rows to be split over the pool's threads. */
static void test_threads(void **state) {
  (void)state;
  char *t = subst(softmax_ir, "f32", 300, 700);
  check_text(t, false, true, false, 121);
  free(t);
  check_text("func @big(%x: f32[300000], %y: f32[300000]) -> f32[300000] {\n"
             "  %a = mul %x, %y : f32[300000]\n  %b = add %a, %x : f32[300000]\n  return %b\n}\n",
             true, false, false, 122);
  check_text("func @bigt(%x: f32[400,500]) -> f32[500,400] {\n"
             "  %t = transpose %x perm=[1,0] : f32[500,400]\n  %b = abs %t : f32[500,400]\n  return %b\n}\n",
             true, false, false, 123);
}

/* Whether text's kernels loop over rows as a nest: the outer loop's blocks (emit_row_nest) in
   the optimized module. */
static bool row_nested(const char *text) {
  ir_func *f = parse1(text);
  char *llvm = dump_text(f, JIT_DUMP_LLVM);
  bool nested = strstr(llvm, "rows.body") != NULL;
  free(llvm);
  ir_func_free(f);
  return nested;
}

/* Rows over several dims with short inner rows loop as a nest (emit_llvm.c row_nest): row
   s W + w, W = 9 here. The threads take chunks of 4729 rows (ROW_CHUNKS), so chunks start and
   end inside an outer row; every element must still be written once, exactly. An inner extent
   below ROW_NEST_MIN (3) and long inner rows (300) keep the flat loop. */
static void test_row_nests(void **state) {
  (void)state;
  static const char nest_ir[] =
      "func @nest(%x: f32[1201,4,5,8], %y: f32[1201,7,9,8]) -> f32[1201,7,9,8] {\n"
      "  %z = const 0 : f32[]\n"
      "  %p = pad %x, %z lo=[0,0,0,0] hi=[0,0,0,0] interior=[0,1,1,0] : f32[1201,7,9,8]\n"
      "  %a = add %p, %y : f32[1201,7,9,8]\n  return %a\n}\n";
  static const char flat_ir[] =
      "func @flat(%x: f32[1201,4,2,8], %y: f32[1201,7,3,8], %u: f32[40,9,300]) -> (f32[1201,7,3,8], f32[40,9,300]) {\n"
      "  %z = const 0 : f32[]\n"
      "  %p = pad %x, %z lo=[0,0,0,0] hi=[0,0,0,0] interior=[0,1,1,0] : f32[1201,7,3,8]\n"
      "  %a = add %p, %y : f32[1201,7,3,8]\n"
      "  %b = neg %u : f32[40,9,300]\n  return %a, %b\n}\n";
  check_text(nest_ir, true, false, true, 131);
  check_text(flat_ir, true, false, true, 132);
  assert_true(row_nested(nest_ir));
  assert_false(row_nested(flat_ir));
}

/* The most column sums one kernel of optimized f holds (1: no siblings merged). */
static uint32_t most_sums(const char *text) {
  ir_func *f = parse1(text);
  assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
  fz_prog *p = NULL;
  assert_int_equal(ir_fuse(f, &p), JIT_OK);
  uint32_t most = 0;
  for (uint32_t i = 0; i < p->n_kernels; i++)
    if (p->kernels[i].kind == FZ_ROW && p->kernels[i].n_writes > most) most = p->kernels[i].n_writes;
  fz_prog_free(p);
  ir_func_free(f);
  return most;
}

/* Sibling column reductions as one kernel of several sums (fusion_siblings.c, lower.c
   write_columns), after reduce_split: a conv's bias and filter gradients (f32: 1024 x 36
   positions, split into 1024 rows), and sums, maxima and minima of 300 columns, which rows of
   256 columns split unevenly (i32, exact). */
static void test_sibling_sums(void **state) {
  (void)state;
  static const char grads_ir[] =
      "func @grads(%dy: f32[1024,6,6,8], %p: f32[1024,8,8]) -> (f32[8], f32[8], f32[8], f32[8]) {\n"
      "  %b = reduce_sum %dy axes=[0,1,2] : f32[8]\n"
      "  %a0 = slice %p start=[0,0,0] limit=[1024,6,6] stride=[1,1,1] : f32[1024,6,6]\n"
      "  %w0 = broadcast %a0 dims=[0,1,2] : f32[1024,6,6,8]\n"
      "  %m0 = mul %w0, %dy : f32[1024,6,6,8]\n"
      "  %s0 = reduce_sum %m0 axes=[0,1,2] : f32[8]\n"
      "  %a1 = slice %p start=[0,1,2] limit=[1024,7,8] stride=[1,1,1] : f32[1024,6,6]\n"
      "  %w1 = broadcast %a1 dims=[0,1,2] : f32[1024,6,6,8]\n"
      "  %m1 = mul %w1, %dy : f32[1024,6,6,8]\n"
      "  %s1 = reduce_sum %m1 axes=[0,1,2] : f32[8]\n"
      "  %a2 = slice %p start=[0,2,1] limit=[1024,8,7] stride=[1,1,1] : f32[1024,6,6]\n"
      "  %w2 = broadcast %a2 dims=[0,1,2] : f32[1024,6,6,8]\n"
      "  %m2 = mul %w2, %dy : f32[1024,6,6,8]\n"
      "  %s2 = reduce_max %m2 axes=[0,1,2] : f32[8]\n"
      "  return %b, %s0, %s1, %s2\n}\n";
  static const char cols_ir[] =
      "func @cols(%x: i32[40,3,300], %y: i32[40,3,300]) -> (i32[300], i32[300], i32[300]) {\n"
      "  %s = reduce_sum %x axes=[0,1] : i32[300]\n"
      "  %xy = mul %x, %y : i32[40,3,300]\n"
      "  %m = reduce_max %xy axes=[0,1] : i32[300]\n"
      "  %n = reduce_min %x axes=[0,1] : i32[300]\n"
      "  return %s, %m, %n\n}\n";
  check_text(grads_ir, false, true, false, 151);
  check_text(cols_ir, true, true, true, 152);
  assert_int_equal(most_sums(grads_ir), 4);
  assert_int_equal(most_sums(cols_ir), 3);
}

/* The executable is reused by concurrent runs (the second gets its own scratch). */
static void test_run_twice(void **state) {
  (void)state;
  ir_func *f = parse1("func @f(%x: f32[64,64]) -> f32[64,64] {\n"
                      "  %e = exp %x : f32[64,64]\n  %t = transpose %e perm=[1,0] : f32[64,64]\n"
                      "  %y = add %e, %t : f32[64,64]\n  return %y\n}\n");
  exec *e = NULL;
  exec_stats st;
  assert_int_equal(exec_build(ctx, f, &e, &st), JIT_OK);
  assert_int_equal(st.n_kernels, 2);
  assert_int_equal(st.n_native, 2);
  float *x = malloc(64 * 64 * 4), *y1 = malloc(64 * 64 * 4), *y2 = malloc(64 * 64 * 4);
  uint64_t s = 5;
  fill(JIT_F32, x, 64 * 64, &s, false);
  const void *args[1] = {x};
  void *r1[1] = {y1}, *r2[1] = {y2};
  assert_int_equal(exec_run(e, args, r1), JIT_OK);
  assert_int_equal(exec_run(e, args, r2), JIT_OK);
  assert_memory_equal(y1, y2, 64 * 64 * 4);
  exec_free(e);
  free(x);
  free(y1);
  free(y2);
  ir_func_free(f);
}

/* ---- through the public API ------------------------------------------------------------------------ */
static void softmax_fn(jit_trace *t, const jit_val *args, jit_val *results, void *user) {
  (void)user;
  jit_val x = args[0];
  int axis = 1;
  const int64_t *sh = jit_val_shape(t, x);
  int64_t keep[2] = {sh[0], 1};
  jit_val m = jit_reshape(t, jit_reduce_max(t, x, 1, &axis), 2, keep);
  jit_val e = jit_exp(t, jit_sub(t, x, m));
  jit_val s = jit_reshape(t, jit_reduce_sum(t, e, 1, &axis), 2, keep);
  jit_val y = jit_div(t, e, s);
  /* a second result that needs an intermediate buffer: the column sums of y */
  results[0] = y;
  results[1] = jit_add(t, jit_reduce_sum(t, jit_transpose(t, y, (int[]){1, 0}), 1, &axis), jit_scalar(t, 1));
}

static void run_api(jit_ctx *c, jit_fn **fp, jit_array *x, float *y0, float *y1, size_t n0, size_t n1) {
  jit_array *r[2] = {NULL, NULL};
  if (!*fp) {
    jit_fn_opts o = {.name = "softmax", .n_args = 1, .n_results = 2};
    assert_int_equal(jit_compile(c, softmax_fn, NULL, &o, fp), JIT_OK);
  }
  jit_status st = jit_call(*fp, &x, r);
  if (st != JIT_OK) fprintf(stderr, "jit_call: %s\n", jit_last_error());
  assert_int_equal(st, JIT_OK);
  assert_int_equal(jit_array_to_host(r[0], y0, n0 * 4), JIT_OK);
  assert_int_equal(jit_array_to_host(r[1], y1, n1 * 4), JIT_OK);
  jit_array_free(r[0]);
  jit_array_free(r[1]);
}

/* The traced softmax: one row kernel (plus the column sums), the same values as opt_level 0. */
static void test_api_softmax(void **state) {
  (void)state;
  enum { R = 200, C = 333 };
  jit_ctx_opts o = jit_ctx_opts_default();
  o.opt_level = 0;
  jit_ctx *c0 = NULL;
  assert_int_equal(jit_ctx_create(&o, &c0), JIT_OK);
  float *xs = malloc(R * C * 4), *a0 = malloc(R * C * 4), *b0 = malloc(R * C * 4);
  float a1[C], b1[C];
  uint64_t s = 77;
  fill(JIT_F32, xs, R * C, &s, false);
  jit_array *x = NULL, *x0 = NULL;
  const int64_t shape[2] = {R, C};
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, shape, xs, &x), JIT_OK);
  assert_int_equal(jit_array_from_host(c0, JIT_F32, 2, shape, xs, &x0), JIT_OK);
  jit_fn *f = NULL, *f0 = NULL;
  run_api(ctx, &f, x, a0, a1, R * C, C);
  run_api(c0, &f0, x0, b0, b1, R * C, C);
  ir_type t = {JIT_F32, 2, {R, C}}, t1 = {JIT_F32, 1, {C}};
  assert_true(compare("api softmax", &t, a0, b0, false));
  assert_true(compare("api column sums", &t1, a1, b1, false));
  jit_fn_stats st;
  assert_int_equal(jit_fn_stats_get(f, &st), JIT_OK);
  assert_int_equal(st.n_kernels, 2);
  assert_true(st.codegen_ms > 0 && st.llvm_ms > 0);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_int_equal(jit_fn_dump(f, NULL, JIT_DUMP_FUSED, m), JIT_OK);
  fclose(m);
  assert_non_null(strstr(text, "kernel k0 row[200 x 333] reads %0 writes %"));
  assert_non_null(strstr(text, "kernel k1 row[333 x 200]"));
  free(text);
  /* a warm call gives the same values */
  run_api(ctx, &f, x, b0, b1, R * C, C);
  assert_memory_equal(a0, b0, R * C * 4);
  jit_array_free(x);
  jit_array_free(x0);
  jit_fn_free(f);
  jit_fn_free(f0);
  jit_ctx_destroy(c0);
  free(xs);
  free(a0);
  free(b0);
}

typedef struct hammer {
  jit_fn *f;
  jit_array *x;
  const float *want0, *want1;
  int ok;
} hammer;

static void *hammer_thread(void *arg) {
  hammer *h = arg;
  enum { R = 200, C = 333 };
  float *y0 = malloc(R * C * 4), y1[C];
  h->ok = 1;
  for (int i = 0; i < 10 && y0; i++) {
    jit_array *r[2] = {NULL, NULL};
    if (jit_call(h->f, &h->x, r) != JIT_OK || jit_array_to_host(r[0], y0, R * C * 4) != JIT_OK ||
        jit_array_to_host(r[1], y1, C * 4) != JIT_OK || memcmp(y0, h->want0, R * C * 4) != 0 ||
        memcmp(y1, h->want1, C * 4) != 0)
      h->ok = 0;
    jit_array_free(r[0]);
    jit_array_free(r[1]);
  }
  free(y0);
  return NULL;
}

/* 8 host threads call one jit_fn at once: the same results (scratch is per run when shared). */
static void test_api_threads(void **state) {
  (void)state;
  enum { R = 200, C = 333, T = 8 };
  float *xs = malloc(R * C * 4), *w0 = malloc(R * C * 4), w1[C];
  uint64_t s = 78;
  fill(JIT_F32, xs, R * C, &s, false);
  jit_array *x = NULL;
  const int64_t shape[2] = {R, C};
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 2, shape, xs, &x), JIT_OK);
  jit_fn *f = NULL;
  run_api(ctx, &f, x, w0, w1, R * C, C);
  pthread_t th[T];
  hammer h[T];
  for (int i = 0; i < T; i++) {
    h[i] = (hammer){f, x, w0, w1, 0};
    assert_int_equal(pthread_create(&th[i], NULL, hammer_thread, &h[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(h[i].ok, 1);
  }
  jit_array_free(x);
  jit_fn_free(f);
  free(xs);
  free(w0);
}


/* Keeps a failing random program as tests/regress-style text: the header line says how to check
   it again (seed of the data, whether it is optimized first, special values, which results are
   exact), then the program as the generator made it, before any pass. Into $TJIT_REGRESS_DIR
   (default /tmp); test_regress_corpus replays the ones committed to tests/regress. */
static void keep_failing_program(uint64_t seed, bool optimize, bool special) {
  bool exact[8];
  uint32_t nr;
  ir_func *f = rp_random_program(seed, exact, &nr);
  const char *dir = getenv("TJIT_REGRESS_DIR");
  char path[512];
  snprintf(path, sizeof path, "%s/randprog_%llu.tir", dir ? dir : "/tmp", (unsigned long long)seed);
  FILE *out = fopen(path, "w");
  if (out) {
    fprintf(out, "# regress: seed=%llu optimize=%d special=%d exact=", (unsigned long long)seed,
            optimize, special);
    for (uint32_t r = 0; r < nr; r++) fputc(exact[r] ? '1' : '0', out);
    fputs("\n# a random program (tests/support/randprog.c) on which the compiled path and the "
          "interpreter differed\n", out);
    ir_print(f, out);
    fclose(out);
    fprintf(stderr, "kept in %s\n", path);
  }
  ir_func_free(f);
}

/* $TJIT_TEST_PROGRAMS programs (default 1000) from seed $TJIT_TEST_SEED (default 1); stops after
   $TJIT_TEST_MAX_FAILURES failures (default 5), keeping each failing program (above). */
static void test_random_programs(void **state) {
  (void)state;
  const char *env = getenv("TJIT_TEST_PROGRAMS");
  long n = env ? atol(env) : 1000;
  const char *senv = getenv("TJIT_TEST_SEED");
  uint64_t base = senv ? strtoull(senv, NULL, 10) : 1;
  const char *fenv = getenv("TJIT_TEST_MAX_FAILURES");
  int max_failures = fenv ? atoi(fenv) : 5;
  int failures = 0;
  time_t t0 = time(NULL);
  for (long i = 0; i < n && failures < max_failures; i++) {
    bool exact[8];
    uint32_t nr;
    uint64_t seed = base + (uint64_t)i;
    ir_func *f = rp_random_program(seed, exact, &nr);
    char what[64];
    snprintf(what, sizeof what, "random program seed %llu", (unsigned long long)seed);
    bool optimize = seed % 2 == 0;
    if (optimize) assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
    /* optimizing may drop or share results; the exactness of each stays with its index */
    /* special values (inf, NaN, 1e30) only for integer programs: the float generator keeps
       values within the bounds where the approximations are accurate */
    bool special = seed % 4 == 1 && !ir_dtype_is_float(ir_type_of(f, 0)->dtype);
    if (!check_exact(f, seed, exact, special, what)) {
      failures++;
      keep_failing_program(seed, optimize, special);
    }
    ir_func_free(f);
    if (n > 1000 && i % 1000 == 999) {
      fprintf(stderr, "%ld programs, %d failed, %lds\n", i + 1, failures, (long)(time(NULL) - t0));
      if (i + 1 < n) c_len = 0; /* millions of programs: keep the C of the last thousand */
    }
  }
  assert_int_equal(failures, 0);
}

/* Replays every tests/regress file, the random programs that once failed, as they were checked. */
static void test_regress_corpus(void **state) {
  (void)state;
  const char *src = getenv("TJIT_SOURCE_DIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/tests/regress", src ? src : ".");
  DIR *d = opendir(dir);
  if (!d) fail_msg("no regression corpus in %s", dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".tir") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char *text = NULL;
    size_t cap = 0;
    ssize_t got = getdelim(&text, &cap, '\0', in);
    fclose(in);
    assert_true(got > 0);
    unsigned long long seed;
    int optimize, special;
    char exact_s[16];
    if (sscanf(text, "# regress: seed=%llu optimize=%d special=%d exact=%15[01]", &seed, &optimize,
               &special, exact_s) != 4)
      fail_msg("%s: no '# regress: seed=S optimize=0|1 special=0|1 exact=1..' first line", path);
    bool exact[64];
    for (int r = 0; r < 64; r++) exact[r] = r < (int)strlen(exact_s) ? exact_s[r] == '1' : true;
    ir_func *f = parse1(text);
    free(text);
    if (optimize) assert_int_equal(ir_optimize(f, 0, true), JIT_OK);
    bool ok = check_exact(f, seed, exact, special != 0, path);
    ir_func_free(f);
    if (!ok) fail_msg("%s differs from the interpreter again", path);
    n++;
  }
  closedir(d);
  fprintf(stderr, "%d programs of the regression corpus\n", n);
}

/* ---- the C dumps compile ------------------------------------------------------------------------- */
static void test_c_dump_compiles(void **state) {
  (void)state;
  if (system("cc --version >/dev/null 2>&1") != 0) {
    fprintf(stderr, "no cc: skipping the C dump compile check\n");
    skip();
  }
  assert_true(c_len > 0);
  char path[] = "/tmp/tjit_c_dump_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *out = fdopen(fd, "w");
  assert_non_null(out);
  assert_int_equal(lp_emit_c_prelude(out), JIT_OK);
  assert_int_equal(fwrite(c_all, 1, c_len, out), c_len);
  fclose(out);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cc -std=c11 -c -Wall -Werror -x c %s -o /dev/null", path);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "the C dump of %d programs does not compile: kept in %s\n", n_progs, path);
  else unlink(path);
  assert_int_equal(rc, 0);
}

static int setup(void **state) {
  (void)state;
  jit_ctx_opts o = jit_ctx_opts_default();
  o.n_threads = 2;
  if (jit_ctx_create(&o, &ctx) != JIT_OK) return -1;
  char *text = NULL;
  FILE *m = open_memstream(&text, &prelude_len);
  if (!m) return -1;
  lp_emit_c_prelude(m);
  fclose(m);
  free(text);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  jit_ctx_destroy(ctx);
  free(c_all);
  return 0;
}

int main(void) {
  tt_skip_unrunnable_target();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_float),       cmocka_unit_test(test_unary_int),
      cmocka_unit_test(test_binary),            cmocka_unit_test(test_cmp_select),
      cmocka_unit_test(test_convert_all_pairs), cmocka_unit_test(test_const_iota),
      cmocka_unit_test(test_clamp_is_finite),
      cmocka_unit_test(test_movement),          cmocka_unit_test(test_softmax_layernorm),
      cmocka_unit_test(test_reductions),        cmocka_unit_test(test_row_patterns),
      cmocka_unit_test(test_dot_epilogue),      cmocka_unit_test(test_results_and_views),
      cmocka_unit_test(test_row_scratch),
      cmocka_unit_test(test_column_tails),
      cmocka_unit_test(test_column_tail_donated),
      cmocka_unit_test(test_row_divisor_quotients),
      cmocka_unit_test(test_unit_dividend_quotients),
      cmocka_unit_test(test_exp_summands),
      cmocka_unit_test(test_exp_nonpos_operands),
      cmocka_unit_test(test_sibling_sums),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_row_nests),
      cmocka_unit_test(test_run_twice),
      cmocka_unit_test(test_api_softmax),       cmocka_unit_test(test_api_threads),
      cmocka_unit_test(test_random_programs),   cmocka_unit_test(test_regress_corpus),
      cmocka_unit_test(test_c_dump_compiles),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
