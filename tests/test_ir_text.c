/* test_ir_text.c: the IR text form (printer, parser) and the verifier: round trips of every op,
 * attribute, dtype and odd constant, exact text, parser errors with line:col, broken invariants. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "support/roundtrip.h"

/* ---- building helpers ------------------------------------------------------------------------ */
static ir_ty ty_of(ir_func *f, jit_dtype dt, int rank, ...) {
  int64_t dims[IR_MAX_RANK] = {0};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, int64_t);
  va_end(ap);
  ir_ty t = ir_type_make(f, dt, rank, dims);
  assert_int_not_equal(t, UINT32_MAX);
  return t;
}
#define T(f, dt, ...) ty_of(f, dt, __VA_ARGS__)

static const ir_loc noloc = {0};

static ir_ref emit(ir_func *f, ir_op op, ir_ty ty, uint32_t n, const ir_ref *args, const ir_attr *a,
                   ir_loc loc) {
  ir_ref r = ir_emit(f, op, ty, n, args, a, loc);
  assert_int_not_equal(r, IR_NOREF);
  return r;
}

static ir_ref emit1(ir_func *f, ir_op op, ir_ty ty, ir_ref x) { return emit(f, op, ty, 1, &x, NULL, noloc); }
static ir_ref emit2(ir_func *f, ir_op op, ir_ty ty, ir_ref x, ir_ref y) {
  ir_ref a[2] = {x, y};
  return emit(f, op, ty, 2, a, NULL, noloc);
}

static ir_func **parse_ok(const char *text, uint32_t want_n) {
  ir_func **fs = NULL;
  uint32_t n = 99;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  if (st != JIT_OK) fail_msg("parse failed: %s\n%s", jit_last_error(), text);
  assert_int_equal(n, want_n);
  return fs;
}

static void free_funcs(ir_func **fs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) ir_func_free(fs[i]);
  free(fs);
}

/* Parses text, prints every function, and compares with want. */
static void assert_normalizes(const char *text, const char *want) {
  ir_func **fs = NULL;
  uint32_t n = 0;
  jit_status st = ir_parse(text, strlen(text), &fs, &n);
  if (st != JIT_OK) fail_msg("parse failed: %s", jit_last_error());
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(ir_print(fs[i], m), JIT_OK);
  fclose(m);
  free_funcs(fs, n);
  assert_string_equal(buf, want);
  free(buf);
}

/* ---- round trips ------------------------------------------------------------------------------ */
static void every_op_roundtrips(void **state) {
  (void)state;
  ir_func *f = ir_func_new("every_op");
  ir_ty f23 = T(f, JIT_F32, 2, 2, 3), f32x = T(f, JIT_F32, 2, 3, 2), b23 = T(f, JIT_BOOL, 2, 2, 3);
  ir_ref x = ir_emit_param(f, f23), y = ir_emit_param(f, f23);
  ir_ref p = ir_emit_param(f, b23);
  ir_ref m = ir_emit_param(f, T(f, JIT_F32, 3, 4, 2, 3));
  ir_ref n = ir_emit_param(f, T(f, JIT_F32, 3, 4, 3, 5));
  ir_ref iv = ir_emit_param(f, T(f, JIT_I32, 1, 3));
  ir_loc at = {"tests/test_ir_text.c", 42};
  ir_ref last = x;
  for (int op = IR_NEG; op <= IR_FLOOR; op++) last = emit1(f, (ir_op)op, f23, last);
  for (int op = IR_ADD; op <= IR_POW; op++) last = emit2(f, (ir_op)op, f23, last, y);
  ir_ref cmps[6];
  for (int c = JIT_EQ; c <= JIT_GE; c++) {
    ir_attr a = {0};
    a.cmp = (jit_cmp_op)c;
    ir_ref args[2] = {last, y};
    cmps[c] = emit(f, IR_CMP, b23, 2, args, &a, at);
  }
  ir_ref sargs[3] = {cmps[JIT_LT], last, x};
  ir_ref sel = emit(f, IR_SELECT, f23, 3, sargs, NULL, at);
  /* the lax parity ops: float math, sign, is_finite, bitwise on bool and u32, shifts, clamp */
  ir_ref fl = sel;
  for (int op = IR_LOG1P; op <= IR_SIGN; op++) fl = emit1(f, (ir_op)op, f23, fl);
  fl = emit2(f, IR_REM, f23, fl, y);
  fl = emit2(f, IR_ATAN2, f23, fl, y);
  ir_ref cl[3] = {x, fl, y};
  emit(f, IR_CLAMP, f23, 3, cl, NULL, at);
  ir_ref fin = emit1(f, IR_IS_FINITE, b23, fl);
  ir_ref bits = emit2(f, IR_AND, b23, emit1(f, IR_NOT, b23, p), fin);
  emit2(f, IR_XOR, b23, emit2(f, IR_OR, b23, bits, p), p);
  ir_ty u3 = T(f, JIT_U32, 1, 3);
  ir_ref u = emit1(f, IR_CONVERT, u3, iv);
  for (int op = IR_AND; op <= IR_SHR_ARITH; op++) u = emit2(f, (ir_op)op, u3, u, u);
  ir_ty u64x3 = T(f, JIT_U64, 1, 3);
  ir_ref u64 = emit1(f, IR_NOT, u64x3, emit1(f, IR_CONVERT, u64x3, u));
  emit2(f, IR_THREEFRY, u64x3, u64, u64);
  emit1(f, IR_CONVERT, T(f, JIT_F64, 2, 2, 3), sel);
  emit1(f, IR_CONVERT, T(f, JIT_F32, 1, 3), iv);
  emit1(f, IR_RESHAPE, T(f, JIT_F32, 1, 6), sel);
  emit1(f, IR_RESHAPE, T(f, JIT_F32, 4, 1, 2, 3, 1), sel);
  ir_attr tr = {0};
  tr.dims.n = 2;
  tr.dims.d[0] = 1;
  ir_ref t = emit(f, IR_TRANSPOSE, f32x, 1, &sel, &tr, noloc);
  ir_attr bc = {0};
  bc.dims.n = 2;
  bc.dims.d[0] = 0;
  bc.dims.d[1] = 2;
  emit(f, IR_BROADCAST, T(f, JIT_F32, 3, 3, 5, 2), 1, &t, &bc, noloc);
  ir_attr bc0 = {0};
  ir_ref s0 = ir_emit_const(f, T(f, JIT_F32, 0), 2.5, noloc);
  emit(f, IR_BROADCAST, f23, 1, &s0, &bc0, noloc);
  ir_attr sl = {0};
  sl.slice.start[0] = 1;
  sl.slice.limit[0] = 2;
  sl.slice.limit[1] = 3;
  sl.slice.stride[0] = 1;
  sl.slice.stride[1] = 2;
  emit(f, IR_SLICE, T(f, JIT_F32, 2, 1, 2), 1, &sel, &sl, noloc);
  ir_attr cc = {0};
  cc.axis = 1;
  ir_ref cargs[3] = {x, y, sel};
  emit(f, IR_CONCAT, T(f, JIT_F32, 2, 2, 9), 3, cargs, &cc, noloc);
  cc.axis = 0;
  emit(f, IR_CONCAT, f23, 1, cargs, &cc, noloc);
  ir_attr rd = {0};
  rd.dims.n = 2;
  rd.dims.d[0] = 0;
  rd.dims.d[1] = 2;
  emit(f, IR_REDUCE_SUM, T(f, JIT_F32, 1, 2), 1, &m, &rd, noloc);
  rd.dims.n = 1;
  emit(f, IR_REDUCE_MAX, T(f, JIT_F32, 2, 2, 3), 1, &m, &rd, noloc);
  rd.dims.n = 0;
  emit(f, IR_REDUCE_MIN, T(f, JIT_F32, 3, 4, 2, 3), 1, &m, &rd, noloc);
  rd.dims.n = 1;
  rd.dims.d[0] = 1;
  emit(f, IR_REDUCE_PROD, T(f, JIT_F32, 2, 4, 3), 1, &m, &rd, noloc);
  ir_attr so = {0};
  so.axis = 1;
  so.sort = (ir_sort){2, 2, 1};
  ir_ref sargs2[3] = {x, p, y};
  emit(f, IR_SORT, f23, 3, sargs2, &so, at);
  ir_attr dt = {0};
  dt.dot.n_batch = 1;
  dt.dot.n_contract = 1;
  dt.dot.lhs_contract[0] = 2;
  dt.dot.rhs_contract[0] = 1;
  ir_ref dargs[2] = {m, n};
  ir_ref d = emit(f, IR_DOT, T(f, JIT_F32, 3, 4, 2, 5), 2, dargs, &dt, at);
  ir_attr mm = {0};
  mm.dot.n_contract = 1;
  mm.dot.lhs_contract[0] = 1;
  ir_ref margs[2] = {x, t};
  emit(f, IR_DOT, T(f, JIT_F32, 2, 2, 2), 2, margs, &mm, noloc);
  ir_attr io = {0};
  io.axis = 1;
  emit(f, IR_IOTA, T(f, JIT_I64, 2, 2, 3), 0, NULL, &io, noloc);
  /* m[iv] along dim 0, added back into m; a pad with a crop and interior; a rev */
  ir_attr ga = {0};
  ga.gather.offset_dims = (ir_dims){2, {1, 2}};
  ga.gather.collapsed = (ir_dims){1, {0}};
  ga.gather.start_map = (ir_dims){1, {0}};
  ga.gather.index_dim = 1;
  ga.gather.sizes[0] = 1, ga.gather.sizes[1] = 2, ga.gather.sizes[2] = 3;
  ir_ref gargs[3] = {m, iv, IR_NOREF};
  gargs[2] = emit(f, IR_GATHER, T(f, JIT_F32, 3, 3, 2, 3), 2, gargs, &ga, at);
  memset(ga.gather.sizes, 0, sizeof ga.gather.sizes);
  ga.gather.combine = IR_COMBINE_ADD;
  ga.gather.mode = IR_INDEX_FILL;
  emit(f, IR_SCATTER, T(f, JIT_F32, 3, 4, 2, 3), 3, gargs, &ga, noloc);
  ir_attr pa = {0};
  pa.pad.lo[0] = 1, pa.pad.lo[1] = -1, pa.pad.hi[1] = 2, pa.pad.interior[0] = 1;
  ir_ref pargs[2] = {x, s0};
  emit(f, IR_PAD, T(f, JIT_F32, 2, 4, 4), 2, pargs, &pa, noloc);
  ir_attr ra = {0};
  ra.dims = (ir_dims){1, {1}};
  emit(f, IR_REV, f23, 1, &x, &ra, noloc);
  /* conv(m, m) over m's last dim; a max-pool of m and its select_and_scatter_add */
  ir_attr cv = {0};
  for (int i = 0; i < 3; i++) cv.conv.lhs[i] = cv.conv.rhs[i] = cv.conv.out[i] = (uint8_t)i;
  cv.conv.stride[0] = 2, cv.conv.pad_lo[0] = 1, cv.conv.pad_hi[0] = 2;
  cv.conv.lhs_dil[0] = 2, cv.conv.rhs_dil[0] = 1, cv.conv.groups = 1, cv.conv.batch_groups = 2;
  ir_ref cvargs[2] = {m, m};
  emit(f, IR_CONV, T(f, JIT_F32, 3, 2, 4, 3), 2, cvargs, &cv, at);
  ir_attr wa = {0};
  wa.window.kind = JIT_WINDOW_MAX;
  for (int i = 0; i < 3; i++) wa.window.size[i] = wa.window.stride[i] = i ? 2 : 1;
  wa.window.pad_lo[1] = 1, wa.window.pad_hi[2] = 1;
  ir_ref wargs[2] = {m, emit(f, IR_REDUCE_WINDOW, T(f, JIT_F32, 3, 4, 1, 2), 1, &m, &wa, noloc)};
  emit(f, IR_SELECT_SCATTER, T(f, JIT_F32, 3, 4, 2, 3), 2, wargs, &wa, noloc);
  ir_ref res[3] = {sel, d, cmps[JIT_GE]};
  assert_int_equal(ir_set_results(f, 3, res), JIT_OK);
  if (ir_verify(f, NULL) != JIT_OK) fail_msg("%s", jit_last_error());
  assert_ir_roundtrip(f);

  /* every op appears in the text (collectives live only in partitioned functions, whose text
     has a mesh: test_spmd_text covers them) */
  char *text = ir_print_to_string(f);
  for (int op = IR_CONST; op < IR_SHARDING; op++) {
    char needle[32];
    snprintf(needle, sizeof needle, " = %s ", ir_op_name[op]);
    if (!strstr(text, needle)) fail_msg("'%s' missing from\n%s", ir_op_name[op], text);
  }
  for (int c = 0; c < 6; c++) {
    static const char *const dirs[] = {"dir=eq", "dir=ne", "dir=lt", "dir=le", "dir=gt", "dir=ge"};
    assert_non_null(strstr(text, dirs[c]));
  }
  assert_non_null(strstr(text, " batch=[0]x[0] contract=[2]x[1] : f32[4,2,5]"));
  assert_non_null(strstr(text, " dims=[] : f32[2,3]"));
  assert_non_null(strstr(text, " axes=[] : f32[4,2,3]"));
  assert_non_null(strstr(text, " start=[1,0] limit=[2,3] stride=[1,2] : f32[1,2]"));
  assert_non_null(strstr(text, " offset_dims=[1,2] collapsed=[0] start_map=[0] index_dim=1 "
                               "sizes=[1,2,3] mode=clip : f32[3,2,3]"));
  assert_non_null(strstr(text, " window_dims=[1,2] inserted=[0] start_map=[0] index_dim=1 "
                               "combine=add mode=fill : f32[4,2,3]"));
  assert_non_null(strstr(text, " lo=[1,-1] hi=[0,2] interior=[1,0] : f32[4,4]"));
  assert_non_null(strstr(text, " axes=[1] : f32[2,3]"));
  assert_non_null(strstr(text, " lhs=[0,1,2] rhs=[0,1,2] out=[0,1,2] strides=[2] pad_lo=[1] "
                               "pad_hi=[2] lhs_dil=[2] rhs_dil=[1] groups=1 batch_groups=2 : f32[2,4,3]"));
  assert_non_null(strstr(text, " reduce=max window=[1,2,2] strides=[1,2,2] "
                               "pad_lo=[0,1,0] pad_hi=[0,0,1] : f32[4,1,2]"));
  assert_non_null(strstr(text, " = select_and_scatter_add %"));
  free(text);
  ir_func_free(f);
}

static void every_dtype_roundtrips(void **state) {
  (void)state;
  static const jit_dtype dts[] = {JIT_BOOL, JIT_I8, JIT_U8, JIT_I32, JIT_I64,
                                  JIT_F16,  JIT_BF16, JIT_F32, JIT_F64};
  static const char *const names[] = {"bool", "i8", "u8", "i32", "i64", "f16", "bf16", "f32", "f64"};
  ir_func *f = ir_func_new("dtypes");
  ir_ref res[9];
  for (int i = 0; i < 9; i++) {
    ir_ty t = T(f, dts[i], 2, 0, 3);
    ir_ref p = ir_emit_param(f, t);
    (void)p;
  }
  for (int i = 0; i < 9; i++) {
    res[i] = ir_emit_const(f, T(f, dts[i], 0), 1, noloc);
    assert_int_not_equal(res[i], IR_NOREF);
  }
  assert_int_equal(ir_set_results(f, 9, res), JIT_OK);
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  for (int i = 0; i < 9; i++) {
    char needle[32];
    snprintf(needle, sizeof needle, "%%%d: %s[0,3]", i, names[i]);
    if (!strstr(text, needle)) fail_msg("'%s' missing from\n%s", needle, text);
    char t[32];
    ir_type ty = {.dtype = dts[i]};
    assert_int_equal(ir_format_type(&ty, t, sizeof t), (int)strlen(names[i]) + 2);
    snprintf(needle, sizeof needle, "%s[]", names[i]);
    assert_string_equal(t, needle);
  }
  free(text);
  ir_func_free(f);
}

static void odd_constants_roundtrip(void **state) {
  (void)state;
  static const double vals[] = {0.0, -0.0, 0.1, 1e-300, -1e-300, 5e-324, DBL_MAX, -DBL_MAX,
                                DBL_MIN, 1e20, 123456789012345678.0, 0.30000000000000004,
                                1.0 / 3.0, -2.5, 3.0e-7, 65504.0};
  static const char *const want[] = {"0", "-0", "0.1", "1e-300", "-1e-300", "5e-324",
                                     "1.7976931348623157e+308", "-1.7976931348623157e+308",
                                     "2.2250738585072014e-308", "1e+20", "1.2345678901234568e+17",
                                     "0.30000000000000004", "0.3333333333333333", "-2.5", "3e-07",
                                     "65504"};
  ir_func *f = ir_func_new("consts");
  ir_ty s = T(f, JIT_F64, 0);
  size_t nv = sizeof vals / sizeof vals[0];
  for (size_t i = 0; i < nv; i++) ir_emit_const(f, s, vals[i], noloc);
  ir_emit_const(f, s, INFINITY, noloc);
  ir_emit_const(f, s, -INFINITY, noloc);
  ir_emit_const(f, s, NAN, noloc);
  ir_emit_const(f, T(f, JIT_I64, 1, 0), -3, noloc);
  ir_emit_const(f, T(f, JIT_I32, 0), 2147483647.0, noloc);
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  ir_func **fs = parse_ok(text, 1);
  for (size_t i = 0; i < nv; i++) {
    double v = fs[0]->ins[i].attr.value;
    /* bit-exact, so that -0.0 stays negative */
    assert_memory_equal(&v, &vals[i], sizeof v);
    char line[96];
    snprintf(line, sizeof line, "  %%%zu = const %s : f64[]\n", i, want[i]);
    if (!strstr(text, line)) fail_msg("missing '%s' in\n%s", line, text);
  }
  assert_true(isinf(fs[0]->ins[nv].attr.value) && fs[0]->ins[nv].attr.value > 0);
  assert_true(isinf(fs[0]->ins[nv + 1].attr.value) && fs[0]->ins[nv + 1].attr.value < 0);
  assert_true(isnan(fs[0]->ins[nv + 2].attr.value));
  assert_non_null(strstr(text, "const inf : f64[]\n"));
  assert_non_null(strstr(text, "const -inf : f64[]\n"));
  assert_non_null(strstr(text, "const nan : f64[]\n"));
  assert_non_null(strstr(text, "const -3 : i64[0]\n"));
  assert_non_null(strstr(text, "const 2147483647 : i32[]\n"));
  free_funcs(fs, 1);
  free(text);
  ir_func_free(f);
}

static void locations_roundtrip(void **state) {
  (void)state;
  ir_func *f = ir_func_new("locs");
  ir_ty t = T(f, JIT_F32, 1, 4);
  ir_ref x = ir_emit_param(f, t);
  ir_ref a = emit(f, IR_NEG, t, 1, &x, NULL, (ir_loc){"a.c", 1});
  ir_ref b = emit(f, IR_NEG, t, 1, &a, NULL, (ir_loc){NULL, 7}); /* no file: no location */
  ir_ref c = emit(f, IR_NEG, t, 1, &b, NULL, (ir_loc){"dir with space/b:c.c", 123456});
  char longname[120];
  memset(longname, 'x', sizeof longname - 3);
  memcpy(longname + sizeof longname - 3, ".c", 3);
  ir_ref d = emit(f, IR_ABS, t, 1, &c, NULL, (ir_loc){longname, 9});
  ir_ref e = emit(f, IR_ABS, t, 1, &d, NULL, (ir_loc){"a.c", 0});
  ir_ref g = emit(f, IR_ABS, t, 1, &e, NULL, (ir_loc){"", 5});
  ir_ref many[12];
  for (int i = 0; i < 12; i++) many[i] = g;
  ir_attr cc = {0};
  ir_ref h = emit(f, IR_CONCAT, T(f, JIT_F32, 1, 48), 12, many, &cc, (ir_loc){"long.c", 9});
  assert_int_equal(ir_set_results(f, 1, &h), JIT_OK);
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  ir_func **fs = parse_ok(text, 1);
  const ir_func *q = fs[0];
  assert_string_equal(q->ins[1].loc.file, "a.c");
  assert_int_equal(q->ins[1].loc.line, 1);
  assert_null(q->ins[2].loc.file);
  assert_string_equal(q->ins[3].loc.file, "dir with space/b:c.c");
  assert_int_equal(q->ins[3].loc.line, 123456);
  assert_string_equal(q->ins[4].loc.file, longname);
  assert_string_equal(q->ins[5].loc.file, "a.c");
  assert_int_equal(q->ins[5].loc.line, 0);
  assert_string_equal(q->ins[6].loc.file, "");
  /* a line longer than the location column gets exactly one space before '#' */
  assert_non_null(strstr(text, "%6, %6, %6 axis=0 : f32[48] # long.c:9\n"));
  char want[200];
  snprintf(want, sizeof want, "  %%4 = abs %%3 : f32[4]%44s# %s:9\n", "", longname);
  assert_non_null(strstr(text, want));
  free_funcs(fs, 1);
  free(text);
  ir_func_free(f);
}

static void results_and_params_roundtrip(void **state) {
  (void)state;
  /* no params, no results */
  ir_func *f = ir_func_new("empty");
  assert_ir_roundtrip(f);
  char *text = ir_print_to_string(f);
  assert_string_equal(text, "func @empty() -> () {\n  return\n}\n");
  free(text);
  ir_func_free(f);
  /* a param returned twice, a rank-0 param */
  f = ir_func_new("twice");
  ir_ref x = ir_emit_param(f, T(f, JIT_F32, 0));
  ir_ref r[2] = {x, x};
  assert_int_equal(ir_set_results(f, 2, r), JIT_OK);
  assert_ir_roundtrip(f);
  text = ir_print_to_string(f);
  assert_string_equal(text, "func @twice(%0: f32[]) -> (f32[], f32[]) {\n  return %0, %0\n}\n");
  free(text);
  ir_func_free(f);
}

/* ---- exact text ------------------------------------------------------------------------------- */
static void prints_mlp_exactly(void **state) {
  (void)state;
  ir_func *f = ir_func_new("mlp");
  ir_ty tx = T(f, JIT_F32, 2, 512, 1024), tw = T(f, JIT_F32, 2, 1024, 4096), tb = T(f, JIT_F32, 1, 4096);
  ir_ty ty = T(f, JIT_F32, 2, 512, 4096);
  ir_ref x = ir_emit_param(f, tx), w = ir_emit_param(f, tw), b = ir_emit_param(f, tb);
  ir_attr dot = {0};
  dot.dot.n_contract = 1;
  dot.dot.lhs_contract[0] = 1;
  ir_ref xw[2] = {x, w};
  ir_ref h = emit(f, IR_DOT, ty, 2, xw, &dot, (ir_loc){"examples/mlp.c", 12});
  ir_attr bc = {0};
  bc.dims.n = 1;
  bc.dims.d[0] = 1;
  ir_ref bb = emit(f, IR_BROADCAST, ty, 1, &b, &bc, (ir_loc){"examples/mlp.c", 13});
  ir_ref hb[2] = {h, bb};
  ir_ref s = emit(f, IR_ADD, ty, 2, hb, NULL, (ir_loc){"examples/mlp.c", 13});
  ir_ref z = ir_emit_const(f, ty, 0, (ir_loc){"examples/mlp.c", 13});
  ir_ref sz[2] = {s, z};
  ir_ref out = emit(f, IR_MAX, ty, 2, sz, NULL, (ir_loc){"examples/mlp.c", 13});
  assert_int_equal(ir_set_results(f, 1, &out), JIT_OK);
  char *text = ir_print_to_string(f);
  assert_string_equal(
      text,
      "func @mlp(%0: f32[512,1024], %1: f32[1024,4096], %2: f32[4096]) -> f32[512,4096] {\n"
      "  %3 = dot %0, %1 contract=[1]x[0] : f32[512,4096]                # examples/mlp.c:12\n"
      "  %4 = broadcast %2 dims=[1] : f32[512,4096]                      # examples/mlp.c:13\n"
      "  %5 = add %3, %4 : f32[512,4096]                                 # examples/mlp.c:13\n"
      "  %6 = const 0 : f32[512,4096]                                    # examples/mlp.c:13\n"
      "  %7 = max %5, %6 : f32[512,4096]                                 # examples/mlp.c:13\n"
      "  return %7\n"
      "}\n");
  free(text);
  assert_ir_roundtrip(f);
  ir_func_free(f);
}

static void normalizes_names_and_comments(void **state) {
  (void)state;
  assert_normalizes(
      "# leading comment\n"
      "\n"
      "func @g(%in.0: f32[2], %b_1: f32[2]) -> (f32[2], bool[2]) {   # header comment\n"
      "   %sum   =  add   %in.0 ,%b_1   :   f32[ 2 ]     #   x.c:5  \n"
      "\t%c = cmp %sum, %b_1 dir=gt : bool[2] # just a remark\n"
      "\n"
      "  return %sum, %c  # trailing\n"
      "}\r\n"
      "func @h() -> f32[] {\n"
      "  %k = const 1.50 : f32[]\n"
      "  return %k\n"
      "}",
      "func @g(%0: f32[2], %1: f32[2]) -> (f32[2], bool[2]) {\n"
      "  %2 = add %0, %1 : f32[2]                                        # x.c:5\n"
      "  %3 = cmp %2, %1 dir=gt : bool[2]\n"
      "  return %2, %3\n"
      "}\n"
      "func @h() -> f32[] {\n"
      "  %0 = const 1.5 : f32[]\n"
      "  return %0\n"
      "}\n");
  /* attributes in any order come out in the fixed order */
  assert_normalizes(
      "func @s(%0: f32[4,4]) -> f32[2,2] {\n"
      "  %1 = slice %0 stride=[2,2] start=[0,0] limit=[4,4] : f32[2,2]\n"
      "  return %1\n"
      "}\n",
      "func @s(%0: f32[4,4]) -> f32[2,2] {\n"
      "  %1 = slice %0 start=[0,0] limit=[4,4] stride=[2,2] : f32[2,2]\n"
      "  return %1\n"
      "}\n");
}

static void parses_empty_and_comment_only(void **state) {
  (void)state;
  const char *inputs[] = {"", "\n\n", "# nothing here\n  # at all", "   "};
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
    ir_func **fs = (ir_func **)1;
    uint32_t n = 7;
    assert_int_equal(ir_parse(inputs[i], strlen(inputs[i]), &fs, &n), JIT_OK);
    assert_int_equal(n, 0);
    free(fs);
  }
}

/* ---- parser errors ---------------------------------------------------------------------------- */
typedef struct bad_case {
  const char *text;
  const char *msg;
} bad_case;

static const bad_case bad_cases[] = {
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = frob %0 : f32[4]\n  return %1\n}\n",
     "2:8: unknown op 'frob'"},
    {"func @f(%0: f32[4], %1: f32[4]) -> f32[4] {\n  %2 = add %0 %1 : f32[4]\n  return %2\n}\n",
     "2:15: expected ':' before the result type, found '%1'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = add %0 : f32[4]\n  return %1\n}\n",
     "2:8: 'add' takes 2 operands, found 1"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %0, %0 : f32[4]\n  return %1\n}\n",
     "2:8: 'neg' takes 1 operand, found 2"},
    {"func @f() -> f32[4] {\n  %1 = concat axis=0 : f32[4]\n  return %1\n}\n",
     "2:8: 'concat' takes at least 1 operand, found 0"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %9 : f32[4]\n  return %1\n}\n",
     "2:12: undefined value '%9'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %1 : f32[4]\n  return %1\n}\n",
     "2:12: undefined value '%1'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %0 = neg %0 : f32[4]\n  return %0\n}\n",
     "2:3: value '%0' is already defined"},
    {"func @f(%a: f32[4], %a: f32[4]) -> f32[4] {\n  return %a\n}\n",
     "1:21: value '%a' is already defined"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  return %1\n}\n", "2:10: undefined value '%1'"},
    {"func @f(%0: q32[4]) -> f32[4] {\n  return %0\n}\n",
     "1:13: unknown dtype 'q32' (expected bool, i8, u8, i32, i64, f16, bf16, f32 or f64)"},
    {"func @f(%0: f32) -> f32[4] {\n  return %0\n}\n", "1:16: expected '[' after the dtype, found ')'"},
    {"func @f(%0: f32[4,]) -> f32[4] {\n  return %0\n}\n", "1:19: expected a dimension size, found ']'"},
    {"func @f(%0: f32[4 4]) -> f32[4] {\n  return %0\n}\n",
     "1:19: expected ',' or ']' in the dims, found '4'"},
    {"func @f(%0: f32[-1]) -> f32[4] {\n  return %0\n}\n",
     "1:17: expected a dimension size >= 0, found '-1'"},
    {"func @f(%0: f32[1.5]) -> f32[4] {\n  return %0\n}\n", "1:17: expected a dimension size, found '1.5'"},
    {"func @f(%0: f32[99999999999999999999]) -> f32[4] {\n  return %0\n}\n",
     "1:17: expected a dimension size, found '99999999999999999999'"},
    {"func @f(%0: f32[1,2,3,4,5,6,7,8,9]) -> f32[] {\n  return %0\n}\n",
     "1:33: too many dims: the maximum rank is 8"},
    {"func @f(%0: f32[4294967296,4294967296]) -> f32[] {\n  return %0\n}\n",
     "1:28: the product of the dims overflows int64"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 perm=[1;0] : f32[3,2]\n  return %1\n}\n",
     "2:28: expected ',' or ']' in the list, found ';'"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 perm=[1,8] : f32[3,2]\n  return %1\n}\n",
     "2:29: expected an axis (0..7), found '8'"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 perm [1,0] : f32[3,2]\n  return %1\n}\n",
     "2:26: expected '=' after 'perm', found '['"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 perm=[1,0] perm=[1,0] : f32[3,2]\n  return %1\n}\n",
     "2:32: attribute 'perm' given twice"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 axes=[1,0] : f32[3,2]\n  return %1\n}\n",
     "2:21: unknown attribute 'axes' for 'transpose' (expected 'perm')"},
    {"func @f(%0: f32[2]) -> f32[2] {\n  %1 = neg %0 axes=[0] : f32[2]\n  return %1\n}\n",
     "2:15: 'neg' has no attributes, found 'axes'"},
    {"func @f(%0: f32[2,3]) -> f32[3,2] {\n  %1 = transpose %0 : f32[3,2]\n  return %1\n}\n",
     "2:21: 'transpose' needs attribute 'perm'"},
    {"func @f(%0: f32[4,4]) -> f32[2,2] {\n  %1 = slice %0 start=[0,0] : f32[2,2]\n  return %1\n}\n",
     "2:29: 'slice' needs attributes 'limit', 'stride'"},
    {"func @f(%0: f32[4,4]) -> f32[2,2] {\n  %1 = slice %0 start=[0] limit=[2,2] stride=[1,1] : f32[2,2]\n  return %1\n}\n",
     "2:23: 'start' needs 2 entries (the operand's rank)"},
    {"func @f(%0: f32[2,3], %1: f32[3,4]) -> f32[2,4] {\n  %2 = dot %0, %1 contract=[1]x[0,1] : f32[2,4]\n  return %2\n}\n",
     "2:28: 'contract' lists differ in length: 1 vs 2"},
    {"func @f(%0: f32[2,3], %1: f32[3,4]) -> f32[2,4] {\n  %2 = dot %0, %1 contract=[1],[0] : f32[2,4]\n  return %2\n}\n",
     "2:31: expected 'x' between the lhs and rhs lists, found ','"},
    {"func @f(%0: f32[1,3,4], %1: f32[2,3,1]) -> f32[1,2,4] {\n  %2 = conv %0, %1 lhs=[0,1,2] rhs=[0,1,2] out=[0,1,2] strides=[1] pad_lo=[0] pad_hi=[0] lhs_dil=[1] rhs_dil=[1] batch_groups=1 : f32[1,2,4]\n  return %2\n}\n",
     "2:129: 'conv' needs attribute 'groups'"},
    {"func @f(%0: f32[1,3,4], %1: f32[2,3,1]) -> f32[1,2,4] {\n  %2 = conv %0, %1 lhs=[0,1] rhs=[0,1,2] out=[0,1,2] strides=[1] pad_lo=[0] pad_hi=[0] lhs_dil=[1] rhs_dil=[1] groups=1 batch_groups=1 : f32[1,2,4]\n  return %2\n}\n",
     "2:30: a conv dim list needs 3 entries (the operand's rank)"},
    {"func @f(%0: f32[4]) -> f32[2] {\n  %1 = reduce_window %0 reduce=mean window=[2] strides=[2] pad_lo=[0] pad_hi=[0] : f32[2]\n  return %1\n}\n",
     "2:32: expected a reduction (sum, max or min), found 'mean'"},
    {"func @f(%0: f32[4]) -> f32[2] {\n  %1 = reduce_window %0 reduce=max window=[0] strides=[2] pad_lo=[0] pad_hi=[0] : f32[2]\n  return %1\n}\n",
     "2:3: reduce_window: dim 0: window 0 and stride 2 must be >= 1, pads 0, 0 >= 0"},
    {"func @f(%0: f32[2], %1: f32[2]) -> bool[2] {\n  %2 = cmp %0, %1 dir=lesser : bool[2]\n  return %2\n}\n",
     "2:23: expected a comparison (eq, ne, lt, le, gt or ge), found 'lesser'"},
    {"func @f() -> f32[] {\n  %0 = const : f32[]\n  return %0\n}\n",
     "2:14: expected a number after 'const', found ':'"},
    {"func @f() -> f32[] {\n  %0 = const 1e : f32[]\n  return %0\n}\n",
     "2:14: expected a number after 'const', found '1e'"},
    {"func @f() -> f32[] {\n  %0 = param : f32[]\n  return %0\n}\n",
     "2:8: params are declared in the function header, not in its body"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %0 : f32[4] junk\n  return %1\n}\n",
     "2:24: expected end of line after the result type, found 'junk'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %0 : f32[4]\n}\n",
     "3:1: expected an instruction ('%name = op ...') or 'return', found '}'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  return %0\n", "3:1: expected '}' after 'return', found end of input"},
    {"func @f(%0: f32[4]) -> (f32[4], f32[4]) {\n  return %0\n}\n",
     "2:3: return gives 1 value, but the header declares 2"},
    {"func @f(%0: f32[4]) -> f32[5] {\n  return %0\n}\n",
     "2:10: result 0 has type f32[4], but the header declares f32[5]"},
    {"func @f(%0: f32[4]) f32[4] {\n  return %0\n}\n", "1:21: expected '->' before the result types, found 'f32'"},
    {"func f(%0: f32[4]) -> f32[4] {\n  return %0\n}\n", "1:6: expected a function name ('@name'), found 'f'"},
    {"func @f(%0: f32[4]) -> f32[4] { return %0 }\n", "1:33: expected end of line after '{', found 'return'"},
    {"fun @f() -> () {\n  return\n}\n", "1:1: expected 'func', found 'fun'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg % : f32[4]\n  return %1\n}\n",
     "2:12: expected a value name after '%'"},
    {"func @f(0: f32[4]) -> f32[4] {\n  return %0\n}\n",
     "1:9: expected a param ('%name: type') or ')', found '0'"},
    {"func @f(%0: f32[4]) -> f32[4] {\n  %1 = neg %0 : f32[4]\n  return %1\n}\nfunc @g() -> () {\n  return\n}\n}\n",
     "8:1: expected 'func', found '}'"},
    /* shape rules, through the verifier, at the instruction */
    {"func @f(%0: f32[4], %1: f32[4]) -> f32[3] {\n  %2 = add %0, %1 : f32[3]\n  return %2\n}\n",
     "2:3: add: declared type f32[3] differs from the inferred f32[4]"},
    {"func @f(%0: f32[2,3], %1: f32[4,5]) -> f32[2,5] {\n  %2 = dot %0, %1 contract=[1]x[0] : f32[2,5]\n  return %2\n}\n",
     "2:3: dot: contracting dims differ: f32[2,3] x f32[4,5]"},
    {"func @f() -> i32[] {\n  %0 = const 0.5 : i32[]\n  return %0\n}\n", NULL},
    {"func @f() -> i32[2] {\n  %0 = iota dim=1 : i32[2]\n  return %0\n}\n", NULL},
};

static void parser_errors_have_line_and_column(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case *c = &bad_cases[i];
    ir_func **fs = (ir_func **)1;
    uint32_t n = 7;
    jit_status st = ir_parse(c->text, strlen(c->text), &fs, &n);
    if (st != JIT_EINVAL) fail_msg("case %zu: status %d, wanted JIT_EINVAL\n%s", i, (int)st, c->text);
    assert_null(fs);
    assert_int_equal(n, 0);
    if (c->msg) {
      if (strcmp(jit_last_error(), c->msg) != 0)
        fail_msg("case %zu:\n  got  %s\n  want %s", i, jit_last_error(), c->msg);
    } else {
      int line, col, used = 0;
      if (sscanf(jit_last_error(), "%d:%d: %n", &line, &col, &used) != 2 || used == 0)
        fail_msg("case %zu: no line:col in '%s'", i, jit_last_error());
      assert_int_equal(line, 2);
    }
  }
}

static void parser_handles_odd_bytes(void **state) {
  (void)state;
  /* a NUL inside the text, bytes >= 0x80, and a length that stops mid-token */
  static const char with_nul[] = "func @f() -> () {\n  re\0turn\n}\n";
  ir_func **fs;
  uint32_t n;
  assert_int_equal(ir_parse(with_nul, sizeof with_nul - 1, &fs, &n), JIT_EINVAL);
  assert_string_equal(jit_last_error(), "2:3: expected an instruction ('%name = op ...') or 'return', found 're'");
  const char *hi = "func @f() -> () {\n  \xff\xfe\n}\n";
  assert_int_equal(ir_parse(hi, strlen(hi), &fs, &n), JIT_EINVAL);
  assert_string_equal(jit_last_error(),
                      "2:3: expected an instruction ('%name = op ...') or 'return', found byte 0xff");
  const char *ok = "func @f() -> () {\n  return\n}\n";
  for (size_t len = 0; len + 1 < strlen(ok); len++) {
    jit_status st = ir_parse(ok, len, &fs, &n);
    if (len == 0) {
      assert_int_equal(st, JIT_OK);
      free(fs);
    } else {
      assert_int_equal(st, JIT_EINVAL);
    }
  }
  assert_int_equal(ir_parse(ok, strlen(ok) - 1, &fs, &n), JIT_OK); /* no final newline */
  free_funcs(fs, n);
  /* a comment on the last line, with no newline after it */
  const char *last = "func @f(%0: f32[]) -> f32[] {\n  return %0\n} # z.c:3";
  assert_int_equal(ir_parse(last, strlen(last), &fs, &n), JIT_OK);
  free_funcs(fs, n);
  const char *cut = "func @f(%0: f32[]) -> f32[] {\n  %1 = neg %0 : f32[] # z.c:3";
  assert_int_equal(ir_parse(cut, strlen(cut), &fs, &n), JIT_EINVAL);
  assert_string_equal(jit_last_error(),
                      "2:30: expected an instruction ('%name = op ...') or 'return', found end of input");
}

/* Random mutations of valid text: the parser must never crash, and whatever it accepts must
   print, parse back, and print identically; whatever it rejects must say where. */
static const char *const seeds[] = {
    "func @mlp(%0: f32[8,16], %1: f32[16,4], %2: f32[4]) -> f32[8,4] {\n"
    "  %3 = dot %0, %1 contract=[1]x[0] : f32[8,4]                    # m.c:12\n"
    "  %4 = broadcast %2 dims=[1] : f32[8,4]\n"
    "  %5 = add %3, %4 : f32[8,4]\n"
    "  %6 = const 0 : f32[8,4]\n"
    "  %7 = max %5, %6 : f32[8,4]\n"
    "  return %7\n"
    "}\n",
    "func @g(%0: f32[2,3], %1: bool[2,3], %2: f32[4,2,3]) -> (f32[1,2], f32[4,3], f32[3,2]) {\n"
    "  %3 = slice %0 start=[1,0] limit=[2,3] stride=[1,2] : f32[1,2]\n"
    "  %4 = reduce_sum %2 axes=[1] : f32[4,3]\n"
    "  %5 = select %1, %0, %0 : f32[2,3]\n"
    "  %6 = transpose %5 perm=[1,0] : f32[3,2]\n"
    "  %7 = concat %0, %5 axis=0 : f32[4,3]\n"
    "  %8 = iota dim=0 : i32[5]\n"
    "  %9 = cmp %0, %5 dir=ne : bool[2,3]\n"
    "  %10 = const -inf : f32[]\n"
    "  return %3, %4, %6\n"
    "}\n",
};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

static void fuzz_parser(void **state) {
  (void)state;
  static const char *const pieces[] = {"%", "@", "[", "]", ",", ":", "=", "->", "#", "\n", " ", "-",
                                       "0", "9", "99999999999999999999", "x", "f32", "bool", "e",
                                       "inf", "nan", "{", "}", "(", ")", "return", "func", "%3",
                                       "%0", "add", "dims=[0]", "\0", "\xff", ".", "1e+", "-1"};
  char buf[2048];
  int accepted = 0;
  for (int iter = 0; iter < 4000; iter++) {
    const char *seed = seeds[rnd() % 2];
    size_t len = strlen(seed);
    memcpy(buf, seed, len);
    int n_mut = 1 + (int)(rnd() % 4);
    for (int k = 0; k < n_mut; k++) {
      size_t at = len ? rnd() % len : 0;
      switch (rnd() % 4) {
      case 0: /* delete a run */ {
        size_t n = 1 + rnd() % 6;
        if (at + n > len) n = len - at;
        memmove(buf + at, buf + at + n, len - at - n);
        len -= n;
        break;
      }
      case 1: /* insert a piece */ {
        const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
        size_t n = strlen(p);
        if (n == 0) n = 1; /* the "\0" piece */
        if (len + n >= sizeof buf) break;
        memmove(buf + at + n, buf + at, len - at);
        memcpy(buf + at, p, n);
        len += n;
        break;
      }
      case 2: /* overwrite a byte */
        if (len) buf[at] = (char)(rnd() & 0xff);
        break;
      default: /* duplicate a run (e.g. a whole line) */ {
        size_t n = 1 + rnd() % 40;
        if (at + n > len) n = len - at;
        if (len + n >= sizeof buf) break;
        memmove(buf + at + n, buf + at, len - at);
        len += n;
        break;
      }
      }
    }
    ir_func **fs = NULL;
    uint32_t nf = 0;
    jit_status st = ir_parse(buf, len, &fs, &nf);
    if (st == JIT_OK) {
      accepted++;
      for (uint32_t i = 0; i < nf; i++) assert_ir_roundtrip(fs[i]);
      free_funcs(fs, nf);
    } else {
      assert_int_equal(st, JIT_EINVAL);
      int line, col, used = 0;
      if (sscanf(jit_last_error(), "%d:%d: %n", &line, &col, &used) != 2 || used == 0 || line < 1 ||
          col < 1)
        fail_msg("no line:col in '%s'", jit_last_error());
    }
  }
  assert_true(accepted > 0);
}

/* ---- verifier --------------------------------------------------------------------------------- */
static void assert_verify_fails(const ir_func *f, const char *pass, const char *want) {
  assert_int_equal(ir_verify(f, pass), JIT_EINTERNAL);
  if (strcmp(jit_last_error(), want) != 0)
    fail_msg("\n  got  %s\n  want %s", jit_last_error(), want);
}

/* f(x: f32[4]) with y = neg x; the cases below break it in one way each. */
static ir_func *small_func(ir_ty *t4) {
  ir_func *f = ir_func_new("v");
  *t4 = T(f, JIT_F32, 1, 4);
  ir_ref x = ir_emit_param(f, *t4);
  ir_ref y = emit(f, IR_NEG, *t4, 1, &x, NULL, (ir_loc){"v.c", 3});
  assert_int_equal(ir_set_results(f, 1, &y), JIT_OK);
  assert_int_equal(ir_verify(f, "build"), JIT_OK);
  return f;
}

static void verifier_catches_broken_invariants(void **state) {
  (void)state;
  ir_ty t4;
  ir_func *f;

  f = small_func(&t4); /* operand refers to a later value */
  f->ins[1].args[0] = 1;
  assert_verify_fails(f, "cse", "verify after cse: @v %1 = neg at v.c:3: operand 0 is %1, which is not defined before %1");
  ir_func_free(f);

  f = small_func(&t4); /* operand far out of range, no pass name */
  f->ins[1].args[0] = 77;
  assert_verify_fails(f, NULL, "verify: @v %1 = neg at v.c:3: operand 0 is %77, which is not defined before %1");
  ir_func_free(f);

  f = small_func(&t4); /* wrong arity */
  f->ins[1].n_args = 0;
  assert_verify_fails(f, "dce", "verify after dce: @v %1 = neg at v.c:3: 'neg' takes 1 operand, has 0");
  ir_func_free(f);

  f = small_func(&t4); /* type index out of range; no location */
  f->ins[1].ty = 5;
  f->ins[1].loc.file = NULL;
  assert_verify_fails(f, "p", "verify after p: @v %1 = neg: type #5 does not exist (the function has 1 types)");
  ir_func_free(f);

  f = small_func(&t4); /* declared type differs from the inferred one */
  f->ins[1].ty = T(f, JIT_F32, 1, 5);
  assert_verify_fails(f, "p", "verify after p: @v %1 = neg at v.c:3: declared type f32[5] differs from the inferred f32[4]");
  ir_func_free(f);

  f = small_func(&t4); /* dtype rule */
  f->ins[1].op = IR_EXP;
  f->types[t4].dtype = JIT_I32;
  assert_int_equal(ir_verify(f, "p"), JIT_EINTERNAL);
  assert_non_null(strstr(jit_last_error(), "verify after p: @v %1 = exp at v.c:3: "));
  ir_func_free(f);

  f = small_func(&t4); /* result out of range */
  f->results[0] = 2;
  assert_verify_fails(f, "p", "verify after p: @v: result 0 is %2, but the function has 2 values");
  ir_func_free(f);

  f = small_func(&t4); /* param index wrong */
  f->ins[0].attr.axis = 3;
  assert_verify_fails(f, "p", "verify after p: @v %0 = param: param 0 has index 3");
  ir_func_free(f);

  f = small_func(&t4); /* more params claimed than there are */
  f->n_params = 2;
  assert_verify_fails(f, "p", "verify after p: @v %1 = neg at v.c:3: instruction 1 is 'neg', but the first 2 must be params");
  ir_func_free(f);

  f = small_func(&t4);
  f->n_params = 3;
  assert_verify_fails(f, "p", "verify after p: @v: 3 params but only 2 instructions");
  ir_func_free(f);

  f = small_func(&t4); /* a param in the body */
  ir_emit(f, IR_PARAM, t4, 0, NULL, NULL, noloc);
  assert_verify_fails(f, "p", "verify after p: @v %2 = param: param after the first 1 instructions (the params)");
  ir_func_free(f);

  f = small_func(&t4); /* not an op */
  f->ins[1].op = (ir_op)200;
  assert_verify_fails(f, "p", "verify after p: @v %1 at v.c:3: op #200 is not an op");
  ir_func_free(f);

  f = small_func(&t4); /* a malformed type */
  f->types[t4].dims[0] = -4;
  assert_verify_fails(f, "p", "verify after p: @v %0 = param: bad result type: dim 0 is negative (-4)");
  ir_func_free(f);

  f = small_func(&t4);
  f->types[t4].rank = 9;
  assert_verify_fails(f, "p", "verify after p: @v %0 = param: bad result type: rank 9 is outside 0..8");
  ir_func_free(f);

  f = small_func(&t4); /* variadic with no operands */
  ir_attr cc = {0};
  ir_emit(f, IR_CONCAT, t4, 0, NULL, &cc, noloc);
  assert_verify_fails(f, "p", "verify after p: @v %2 = concat: 'concat' takes at least 1 operand, has 0");
  ir_func_free(f);

  f = small_func(&t4); /* a shape rule failure: transpose perm of the wrong length */
  ir_attr tr = {0};
  tr.dims.n = 2;
  tr.dims.d[0] = 1;
  ir_ref x = 0;
  ir_emit(f, IR_TRANSPOSE, t4, 1, &x, &tr, (ir_loc){"w.c", 8});
  assert_int_equal(ir_verify(f, "p"), JIT_EINTERNAL);
  assert_non_null(strstr(jit_last_error(), "verify after p: @v %2 = transpose at w.c:8: "));
  ir_func_free(f);

  f = small_func(&t4); /* an allocation failed while building */
  f->oom = true;
  assert_verify_fails(f, "p", "verify after p: @v: ran out of memory while being built");
  ir_func_free(f);
}

static void parser_reports_verifier_reason_at_instruction(void **state) {
  (void)state;
  const char *text =
      "func @f(%0: f32[4]) -> f32[4] {\n"
      "  %1 = neg %0 : f32[4]\n"
      "\n"
      "  %2 = reshape %1 : f32[5]          # r.c:9\n"
      "  return %1\n"
      "}\n";
  ir_func **fs;
  uint32_t n;
  assert_int_equal(ir_parse(text, strlen(text), &fs, &n), JIT_EINVAL);
  assert_string_equal(jit_last_error(), "4:3: reshape: element counts differ: f32[4] -> f32[5]");
}

/* ---- printer details -------------------------------------------------------------------------- */
static void format_type_is_snprintf_like(void **state) {
  (void)state;
  ir_type t = {.dtype = JIT_BF16, .rank = 3, .dims = {512, 0, 7}};
  char buf[64];
  assert_int_equal(ir_format_type(&t, buf, sizeof buf), 13);
  assert_string_equal(buf, "bf16[512,0,7]");
  char small[6];
  assert_int_equal(ir_format_type(&t, small, sizeof small), 13);
  assert_string_equal(small, "bf16[");
  assert_int_equal(ir_format_type(&t, NULL, 0), 13);
  ir_type big = {.dtype = JIT_I64, .rank = 8};
  for (int i = 0; i < 8; i++) big.dims[i] = INT64_MAX;
  char huge[256];
  int w = ir_format_type(&big, huge, sizeof huge);
  assert_int_equal(w, (int)strlen(huge));
  assert_int_equal(w, 4 + 8 * 19 + 7 + 1);

  char *out = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&out, &len);
  ir_print_type(&t, m);
  fclose(m);
  assert_string_equal(out, "bf16[512,0,7]");
  free(out);
}

static void print_reports_write_errors(void **state) {
  (void)state;
  ir_ty t4;
  ir_func *f = small_func(&t4);
  FILE *ro = fopen("/dev/null", "r");
  assert_non_null(ro);
  assert_int_equal(ir_print(f, ro), JIT_EIO);
  assert_non_null(strstr(jit_last_error(), "ir_print"));
  fclose(ro);
  ir_func_free(f);
}

static void large_function_roundtrips(void **state) {
  (void)state;
  /* many values and a long concat: the name map grows, long lines print through */
  ir_func *f = ir_func_new("large");
  ir_ty t = T(f, JIT_F32, 1, 2);
  ir_ref x = ir_emit_param(f, t);
  enum { N = 3000 };
  ir_ref *refs = malloc(N * sizeof *refs);
  assert_non_null(refs);
  ir_ref last = x;
  for (int i = 0; i < N; i++) refs[i] = last = emit(f, i % 2 ? IR_NEG : IR_EXP, t, 1, &last, NULL, (ir_loc){"big.c", i});
  ir_attr cc = {0};
  ir_ref cat = emit(f, IR_CONCAT, T(f, JIT_F32, 1, 2 * 400), 400, refs, &cc, (ir_loc){"big.c", 1});
  free(refs);
  assert_int_equal(ir_set_results(f, 1, &cat), JIT_OK);
  assert_ir_roundtrip(f);
  ir_func_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_op_roundtrips),
      cmocka_unit_test(every_dtype_roundtrips),
      cmocka_unit_test(odd_constants_roundtrip),
      cmocka_unit_test(locations_roundtrip),
      cmocka_unit_test(results_and_params_roundtrip),
      cmocka_unit_test(prints_mlp_exactly),
      cmocka_unit_test(normalizes_names_and_comments),
      cmocka_unit_test(parses_empty_and_comment_only),
      cmocka_unit_test(parser_errors_have_line_and_column),
      cmocka_unit_test(parser_handles_odd_bytes),
      cmocka_unit_test(fuzz_parser),
      cmocka_unit_test(verifier_catches_broken_invariants),
      cmocka_unit_test(parser_reports_verifier_reason_at_instruction),
      cmocka_unit_test(format_type_is_snprintf_like),
      cmocka_unit_test(print_reports_write_errors),
      cmocka_unit_test(large_function_roundtrips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
