/* test_errors.c: bad input through the public API: every failing op and call must return its
 * status, name the op and this file's line in jit_last_error(), hand out nothing and leak nothing. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "support/optest.h"
#include "tjit.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
#define THIS_FILE "tests/test_errors.c"

/* The line of the op call that must fail: L(op(...)) sets it on the op's own line. */
static int err_line;
#define L(expr) (err_line = __LINE__, (expr))

/* Filled by the trace functions for the test to check afterwards. */
static jit_val saved_val;      /* a value of an earlier trace */
static uint32_t failed_id;     /* the id a failing op returned */
static int after_error_rank;   /* jit_val_rank of that id */

enum {
  E_ADD_SHAPES, E_ADD_DTYPES, E_EXP_INT, E_WEAK_HALF, E_FULL_RANK9, E_FULL_NEGDIM, E_FULL_NULLSHAPE,
  E_FULL_BADDT, E_FULL_VALUE, E_IOTA_DIM, E_IOTA_BOOL, E_RESHAPE_COUNT, E_RESHAPE_RANK9,
  E_RESHAPE_NEG, E_RESHAPE_TWO_INFER, E_TRANSPOSE_DUP, E_TRANSPOSE_RANGE, E_TRANSPOSE_NULL,
  E_BCAST_INCOMPAT, E_BCAST_LOWER_RANK, E_BCAST_NEGDIM, E_SLICE_LIMIT, E_SLICE_START_GT_LIMIT,
  E_SLICE_STRIDE0, E_SLICE_NEGSTART, E_SLICE_NULL, E_CONCAT_ZERO, E_CONCAT_SHAPES,
  E_CONCAT_DTYPES, E_CONCAT_AXIS, E_CONCAT_RANK0, E_CONCAT_NULL, E_REDUCE_AXIS, E_REDUCE_REPEAT,
  E_REDUCE_NULL, E_REDUCE_NEGCOUNT, E_REDUCE_BOOL, E_MATMUL_INNER, E_MATMUL_RANK0,
  E_MATMUL_DTYPES, E_MATMUL_BATCH, E_DOT_CONTRACT, E_DOT_RANGE, E_DOT_REPEAT, E_DOT_BATCH,
  E_DOT_NEGCOUNT, E_CMP_DTYPES, E_CMP_BADOP, E_SELECT_PRED, E_SELECT_BRANCHES, E_SELECT_SHAPES,
  E_CONVERT_BADDT, E_INVALID_VAL, E_FOREIGN_ID, E_OTHER_TRACE, E_NEG_BOOL, E_ADD_BOOL,
  E_STICKY, E_RESULT_UNSET, E_RESULT_UNSET_SECOND, E_TRACE_FAIL, E_TRACE_FAIL_AFTER,
  E_VMAP, E_GRAD, E_SCAN, E_CHECKPOINT, E_SHARDING, E_SHARD_MAP, E_PSUM, E_PMEAN, E_ALL_GATHER,
  E_AXIS_INDEX,
};

static void scan_body(jit_trace *t, const jit_val *carry, const jit_val *x, jit_val *new_carry,
                      jit_val *y, void *user) {
  new_carry[0] = carry[0];
}

static void inner_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) { r[0] = a[0]; }

/* Each case's failing op sits on one line inside L(). a[] are the case's args. */
static void err_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  int mode = *(const int *)user;
  static const int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, sneg[2] = {2, -3}, s4[1] = {4};
  static const int64_t s23[2] = {2, 3}, sm1[2] = {-1, -1}, sm2[2] = {-2, 3}, s3[1] = {3};
  static const int p00[2] = {0, 0}, p02[2] = {0, 2}, ax5[1] = {5}, ax11[2] = {1, 1};
  static const int c1[1] = {1}, c0[1] = {0}, c3[1] = {3}, b0[1] = {0}, dup[2] = {0, 0};
  static const int64_t st0[2] = {0, 0}, lim_big[2] = {2, 4}, st1[2] = {1, 0}, lim0[2] = {0, 3};
  static const int64_t stride0[2] = {1, 0}, stneg[2] = {-1, 0}, lim23[2] = {2, 3};
  int axes_any[1] = {0}, in_axes[1] = {0}, out_axes[1] = {0};
  jit_val v, xs[2];
  r[0] = a[0];
  switch (mode) {
  case E_ADD_SHAPES: r[0] = L(jit_add(t, a[0], a[1])); break;
  case E_ADD_DTYPES: r[0] = L(jit_add(t, a[0], a[1])); break;
  case E_EXP_INT: r[0] = L(jit_exp(t, a[0])); break;
  case E_WEAK_HALF: r[0] = L(jit_mul(t, a[0], jit_scalar(t, 0.5))); break;
  case E_FULL_RANK9: r[0] = L(jit_full(t, JIT_F32, 9, s9, 1)); break;
  case E_FULL_NEGDIM: r[0] = L(jit_full(t, JIT_F32, 2, sneg, 1)); break;
  case E_FULL_NULLSHAPE: r[0] = L(jit_full(t, JIT_F32, 2, NULL, 1)); break;
  case E_FULL_BADDT: r[0] = L(jit_full(t, (jit_dtype)42, 1, s4, 1)); break;
  case E_FULL_VALUE: r[0] = L(jit_full(t, JIT_U8, 1, s4, -1)); break;
  case E_IOTA_DIM: r[0] = L(jit_iota(t, JIT_I32, 2, s23, 2)); break;
  case E_IOTA_BOOL: r[0] = L(jit_iota(t, JIT_BOOL, 1, s4, 0)); break;
  case E_RESHAPE_COUNT: r[0] = L(jit_reshape(t, a[0], 1, s4)); break;
  case E_RESHAPE_RANK9: r[0] = L(jit_reshape(t, a[0], 9, s9)); break;
  case E_RESHAPE_NEG: r[0] = L(jit_reshape(t, a[0], 2, sm2)); break;
  case E_RESHAPE_TWO_INFER: r[0] = L(jit_reshape(t, a[0], 2, sm1)); break;
  case E_TRANSPOSE_DUP: r[0] = L(jit_transpose(t, a[0], p00)); break;
  case E_TRANSPOSE_RANGE: r[0] = L(jit_transpose(t, a[0], p02)); break;
  case E_TRANSPOSE_NULL: r[0] = L(jit_transpose(t, a[0], NULL)); break;
  case E_BCAST_INCOMPAT: r[0] = L(jit_broadcast_to(t, a[0], 1, s4)); break;
  case E_BCAST_LOWER_RANK: r[0] = L(jit_broadcast_to(t, a[0], 1, s3)); break;
  case E_BCAST_NEGDIM: r[0] = L(jit_broadcast_to(t, a[0], 2, sneg)); break;
  case E_SLICE_LIMIT: r[0] = L(jit_slice(t, a[0], st0, lim_big, NULL)); break;
  case E_SLICE_START_GT_LIMIT: r[0] = L(jit_slice(t, a[0], st1, lim0, NULL)); break;
  case E_SLICE_STRIDE0: r[0] = L(jit_slice(t, a[0], st0, lim23, stride0)); break;
  case E_SLICE_NEGSTART: r[0] = L(jit_slice(t, a[0], stneg, lim23, NULL)); break;
  case E_SLICE_NULL: r[0] = L(jit_slice(t, a[0], NULL, lim23, NULL)); break;
  case E_CONCAT_ZERO: r[0] = L(jit_concat(t, 0, a, 0)); break;
  case E_CONCAT_SHAPES: r[0] = L(jit_concat(t, 2, a, 0)); break;
  case E_CONCAT_DTYPES: r[0] = L(jit_concat(t, 2, a, 0)); break;
  case E_CONCAT_AXIS: r[0] = L(jit_concat(t, 2, a, 2)); break;
  case E_CONCAT_RANK0: r[0] = L(jit_concat(t, 2, a, 0)); break;
  case E_CONCAT_NULL: r[0] = L(jit_concat(t, 2, NULL, 0)); break;
  case E_REDUCE_AXIS: r[0] = L(jit_reduce_sum(t, a[0], 1, ax5)); break;
  case E_REDUCE_REPEAT: r[0] = L(jit_reduce_max(t, a[0], 2, ax11)); break;
  case E_REDUCE_NULL: r[0] = L(jit_reduce_min(t, a[0], 1, NULL)); break;
  case E_REDUCE_NEGCOUNT: r[0] = L(jit_reduce_sum(t, a[0], -1, axes_any)); break;
  case E_REDUCE_BOOL: r[0] = L(jit_reduce_sum(t, a[0], 1, axes_any)); break;
  case E_MATMUL_INNER: r[0] = L(jit_matmul(t, a[0], a[1])); break;
  case E_MATMUL_RANK0: r[0] = L(jit_matmul(t, a[0], a[1])); break;
  case E_MATMUL_DTYPES: r[0] = L(jit_matmul(t, a[0], a[1])); break;
  case E_MATMUL_BATCH: r[0] = L(jit_matmul(t, a[0], a[1])); break;
  case E_DOT_CONTRACT: r[0] = L(jit_dot_general(t, a[0], a[1], 0, NULL, NULL, 1, c1, c0)); break;
  case E_DOT_RANGE: r[0] = L(jit_dot_general(t, a[0], a[1], 0, NULL, NULL, 1, c3, c0)); break;
  case E_DOT_REPEAT: r[0] = L(jit_dot_general(t, a[0], a[1], 1, b0, b0, 1, c0, c0)); break;
  case E_DOT_BATCH: r[0] = L(jit_dot_general(t, a[0], a[1], 1, b0, b0, 1, c1, c1)); break;
  case E_DOT_NEGCOUNT: r[0] = L(jit_dot_general(t, a[0], a[1], 0, NULL, NULL, -1, dup, dup)); break;
  case E_CMP_DTYPES: r[0] = L(jit_cmp(t, JIT_LT, a[0], a[1])); break;
  case E_CMP_BADOP: r[0] = L(jit_cmp(t, (jit_cmp_op)9, a[0], a[1])); break;
  case E_SELECT_PRED: r[0] = L(jit_select(t, a[0], a[1], a[2])); break;
  case E_SELECT_BRANCHES: r[0] = L(jit_select(t, a[0], a[1], a[2])); break;
  case E_SELECT_SHAPES: r[0] = L(jit_select(t, a[0], a[1], a[2])); break;
  case E_CONVERT_BADDT: r[0] = L(jit_convert(t, a[0], (jit_dtype)-1)); break;
  case E_INVALID_VAL: r[0] = L(jit_add(t, a[0], (jit_val){0})); break;
  case E_FOREIGN_ID: r[0] = L(jit_neg(t, (jit_val){0x7fffffffu})); break;
  case E_OTHER_TRACE: r[0] = L(jit_add(t, a[0], saved_val)); break;
  case E_NEG_BOOL: r[0] = L(jit_neg(t, a[0])); break;
  case E_ADD_BOOL: r[0] = L(jit_add(t, a[0], a[1])); break;
  case E_STICKY:
    v = L(jit_add(t, a[0], a[1])); /* fails first: this is the error reported */
    failed_id = v.id;
    after_error_rank = jit_val_rank(t, v);
    v = jit_exp(t, jit_neg(t, v));
    v = jit_matmul(t, a[0], a[2]); /* would fail too, but the trace already failed */
    r[0] = jit_add(t, v, a[0]);
    break;
  case E_RESULT_UNSET: r[0] = (jit_val){0}; err_line = 0; break;
  case E_RESULT_UNSET_SECOND: err_line = 0; break;
  case E_TRACE_FAIL: L(jit_trace_fail(t, "the user gave up: custom reason")); break;
  case E_TRACE_FAIL_AFTER:
    r[0] = L(jit_add(t, a[0], a[1]));
    jit_trace_fail(t, "second failure must not replace the first");
    break;
  case E_VMAP: L(jit_vmap(t, inner_fn, NULL, 1, a, in_axes, 1, r, out_axes)); break;
  case E_GRAD: L(jit_value_and_grad(t, inner_fn, NULL, 1, a, 1, 0, xs)); r[0] = xs[0]; break;
  case E_SCAN: L(jit_scan(t, scan_body, NULL, 1, a, 0, NULL, -1, 0, r, 0, NULL)); break;
  case E_CHECKPOINT: L(jit_checkpoint(t, NULL, NULL, 1, a, 1, r)); break;
  case E_SHARDING: r[0] = L(jit_with_sharding_constraint(t, a[0], NULL)); break;
  case E_SHARD_MAP: L(jit_shard_map(t, inner_fn, NULL, NULL, 1, a, NULL, 1, r, NULL)); break;
  case E_PSUM: r[0] = L(jit_psum(t, a[0], "x")); break;
  case E_PMEAN: r[0] = L(jit_pmean(t, a[0], "x")); break;
  case E_ALL_GATHER: r[0] = L(jit_all_gather(t, a[0], "x", 0)); break;
  case E_AXIS_INDEX: r[0] = L(jit_axis_index(t, "x")); break;
  }
}

typedef struct arg_spec {
  jit_dtype dt;
  int rank;
  int64_t d[4];
} arg_spec;

typedef struct err_case {
  int mode;
  jit_status want;
  const char *op; /* the op the message must name (NULL: none) */
  int n_args, n_results;
  arg_spec args[3];
  const char *also; /* more text the message must hold: an operand's type, a value (or NULL) */
} err_case;

#define F32(...) {JIT_F32, N_OF(((int64_t[]){0, __VA_ARGS__})) - 1, {__VA_ARGS__}}
#define ARG(dt, ...) {dt, N_OF(((int64_t[]){0, __VA_ARGS__})) - 1, {__VA_ARGS__}}
#define SCALAR(dt) {dt, 0, {0}}

static const err_case cases[] = {
    {E_ADD_SHAPES, JIT_ESHAPE, "add", 2, 1, {F32(3), F32(4)}, "f32[4]"},
    {E_ADD_DTYPES, JIT_EDTYPE, "add", 2, 1, {F32(3), ARG(JIT_F64, 3)}, "f64[3]"},
    {E_EXP_INT, JIT_EDTYPE, "exp", 1, 1, {ARG(JIT_I32, 3)}, "i32[3]"},
    {E_WEAK_HALF, JIT_EDTYPE, "mul", 1, 1, {ARG(JIT_I32, 3)}, "0.5"},
    {E_FULL_RANK9, JIT_ESHAPE, "full", 1, 1, {F32(1)}, NULL},
    {E_FULL_NEGDIM, JIT_ESHAPE, "full", 1, 1, {F32(1)}, "-3"},
    {E_FULL_NULLSHAPE, JIT_EINVAL, "full", 1, 1, {F32(1)}, NULL},
    {E_FULL_BADDT, JIT_EDTYPE, "full", 1, 1, {F32(1)}, NULL},
    {E_FULL_VALUE, JIT_EDTYPE, "full", 1, 1, {F32(1)}, NULL},
    {E_IOTA_DIM, JIT_ESHAPE, "iota", 1, 1, {F32(1)}, NULL},
    {E_IOTA_BOOL, JIT_EDTYPE, "iota", 1, 1, {F32(1)}, NULL},
    {E_RESHAPE_COUNT, JIT_ESHAPE, "reshape", 1, 1, {F32(2, 3)}, "f32[2,3]"},
    {E_RESHAPE_RANK9, JIT_ESHAPE, "reshape", 1, 1, {F32(1)}, NULL},
    {E_RESHAPE_NEG, JIT_ESHAPE, "reshape", 1, 1, {F32(2, 3)}, NULL},
    {E_RESHAPE_TWO_INFER, JIT_ESHAPE, "reshape", 1, 1, {F32(2, 3)}, NULL},
    {E_TRANSPOSE_DUP, JIT_ESHAPE, "transpose", 1, 1, {F32(2, 3)}, "f32[2,3]"},
    {E_TRANSPOSE_RANGE, JIT_ESHAPE, "transpose", 1, 1, {F32(2, 3)}, NULL},
    {E_TRANSPOSE_NULL, JIT_EINVAL, "transpose", 1, 1, {F32(2, 3)}, NULL},
    {E_BCAST_INCOMPAT, JIT_ESHAPE, "broadcast_to", 1, 1, {F32(3)}, "f32[3]"},
    {E_BCAST_LOWER_RANK, JIT_ESHAPE, "broadcast_to", 1, 1, {F32(2, 3)}, NULL},
    {E_BCAST_NEGDIM, JIT_ESHAPE, "broadcast_to", 1, 1, {F32(3)}, NULL},
    {E_SLICE_LIMIT, JIT_ESHAPE, "slice", 1, 1, {F32(2, 3)}, "f32[2,3]"},
    {E_SLICE_START_GT_LIMIT, JIT_ESHAPE, "slice", 1, 1, {F32(2, 3)}, NULL},
    {E_SLICE_STRIDE0, JIT_ESHAPE, "slice", 1, 1, {F32(2, 3)}, NULL},
    {E_SLICE_NEGSTART, JIT_ESHAPE, "slice", 1, 1, {F32(2, 3)}, NULL},
    {E_SLICE_NULL, JIT_EINVAL, "slice", 1, 1, {F32(2, 3)}, NULL},
    {E_CONCAT_ZERO, JIT_EINVAL, "concat", 1, 1, {F32(2, 3)}, NULL},
    {E_CONCAT_SHAPES, JIT_ESHAPE, "concat", 2, 1, {F32(2, 3), F32(2, 4)}, "f32[2,4]"},
    {E_CONCAT_DTYPES, JIT_EDTYPE, "concat", 2, 1, {F32(2, 3), ARG(JIT_I32, 2, 3)}, "i32[2,3]"},
    {E_CONCAT_AXIS, JIT_ESHAPE, "concat", 2, 1, {F32(2, 3), F32(2, 3)}, NULL},
    {E_CONCAT_RANK0, JIT_ESHAPE, "concat", 2, 1, {SCALAR(JIT_F32), SCALAR(JIT_F32)}, NULL},
    {E_CONCAT_NULL, JIT_EINVAL, "concat", 1, 1, {F32(2)}, NULL},
    {E_REDUCE_AXIS, JIT_ESHAPE, "reduce_sum", 1, 1, {F32(2, 3)}, "f32[2,3]"},
    {E_REDUCE_REPEAT, JIT_ESHAPE, "reduce_max", 1, 1, {F32(2, 3)}, NULL},
    {E_REDUCE_NULL, JIT_EINVAL, "reduce_min", 1, 1, {F32(2, 3)}, NULL},
    {E_REDUCE_NEGCOUNT, JIT_EINVAL, "reduce_sum", 1, 1, {F32(2, 3)}, NULL},
    {E_REDUCE_BOOL, JIT_EDTYPE, "reduce_sum", 1, 1, {ARG(JIT_BOOL, 4)}, "bool[4]"},
    {E_MATMUL_INNER, JIT_ESHAPE, "matmul", 2, 1, {F32(2, 3), F32(4, 5)}, "f32[4,5]"},
    {E_MATMUL_RANK0, JIT_ESHAPE, "matmul", 2, 1, {SCALAR(JIT_F32), F32(3)}, NULL},
    {E_MATMUL_DTYPES, JIT_EDTYPE, "matmul", 2, 1, {F32(2, 3), ARG(JIT_F64, 3, 4)}, "f64[3,4]"},
    {E_MATMUL_BATCH, JIT_ESHAPE, "matmul", 2, 1, {F32(2, 2, 3), F32(3, 3, 4)}, NULL},
    {E_DOT_CONTRACT, JIT_ESHAPE, "dot_general", 2, 1, {F32(2, 3), F32(4, 5)}, "f32[4,5]"},
    {E_DOT_RANGE, JIT_ESHAPE, "dot_general", 2, 1, {F32(2, 3), F32(3, 5)}, NULL},
    {E_DOT_REPEAT, JIT_ESHAPE, "dot_general", 2, 1, {F32(2, 3), F32(2, 5)}, NULL},
    {E_DOT_BATCH, JIT_ESHAPE, "dot_general", 2, 1, {F32(2, 3, 4), F32(5, 3, 4)}, "f32[5,3,4]"},
    {E_DOT_NEGCOUNT, JIT_EINVAL, "dot_general", 2, 1, {F32(2, 3), F32(3, 5)}, NULL},
    {E_CMP_DTYPES, JIT_EDTYPE, "cmp", 2, 1, {F32(3), ARG(JIT_I32, 3)}, "i32[3]"},
    {E_CMP_BADOP, JIT_EINVAL, "cmp", 2, 1, {F32(3), F32(3)}, NULL},
    {E_SELECT_PRED, JIT_EDTYPE, "select", 3, 1, {F32(3), F32(3), F32(3)}, "f32[3]"},
    {E_SELECT_BRANCHES, JIT_EDTYPE, "select", 3, 1, {ARG(JIT_BOOL, 3), F32(3), ARG(JIT_F16, 3)}, "f16[3]"},
    {E_SELECT_SHAPES, JIT_ESHAPE, "select", 3, 1, {ARG(JIT_BOOL, 3), F32(4), F32(3)}, NULL},
    {E_CONVERT_BADDT, JIT_EDTYPE, "convert", 1, 1, {F32(3)}, NULL},
    {E_INVALID_VAL, JIT_EINVAL, "add", 1, 1, {F32(3)}, NULL},
    {E_FOREIGN_ID, JIT_EINVAL, "neg", 1, 1, {F32(3)}, NULL},
    {E_OTHER_TRACE, JIT_EINVAL, "add", 1, 1, {F32(3)}, NULL},
    {E_NEG_BOOL, JIT_EDTYPE, "neg", 1, 1, {ARG(JIT_BOOL, 3)}, NULL},
    {E_ADD_BOOL, JIT_EDTYPE, "add", 2, 1, {ARG(JIT_BOOL, 3), ARG(JIT_BOOL, 3)}, NULL},
    {E_STICKY, JIT_ESHAPE, "add", 3, 1, {F32(2, 3), F32(4), F32(5, 6)}, NULL},
    {E_RESULT_UNSET, JIT_EINVAL, "result 0", 1, 1, {F32(3)}, NULL},
    {E_RESULT_UNSET_SECOND, JIT_EINVAL, "result 1", 1, 2, {F32(3)}, NULL},
    {E_TRACE_FAIL, JIT_EINVAL, "the user gave up: custom reason", 1, 1, {F32(3)}, NULL},
    {E_TRACE_FAIL_AFTER, JIT_ESHAPE, "add", 2, 1, {F32(3), F32(4)}, NULL},
    {E_VMAP, JIT_ESHAPE, "vmap", 1, 1, {SCALAR(JIT_F32)}, "in_axes[0] = 0 out of range"},
    {E_GRAD, JIT_ESHAPE, "value_and_grad", 1, 1, {F32(3)}, "the loss (result 0) must be a scalar"},
    {E_SCAN, JIT_EINVAL, "scan", 1, 1, {F32(3)}, "a scan without xs needs length >= 0"},
    {E_CHECKPOINT, JIT_EINVAL, "checkpoint", 1, 1, {F32(3)}, "fn is NULL"},
    {E_SHARDING, JIT_EINVAL, "with_sharding_constraint", 1, 1, {F32(3)}, NULL},
    {E_SHARD_MAP, JIT_EINVAL, "shard_map", 1, 1, {F32(3)}, "mesh is NULL"},
    {E_PSUM, JIT_EINVAL, "psum", 1, 1, {F32(3)}, "used outside a shard_map body"},
    {E_PMEAN, JIT_EINVAL, "pmean", 1, 1, {F32(3)}, "used outside a shard_map body"},
    {E_ALL_GATHER, JIT_EINVAL, "all_gather", 1, 1, {F32(3)}, "used outside a shard_map body"},
    {E_AXIS_INDEX, JIT_EINVAL, "axis_index", 1, 1, {F32(3)}, "used outside a shard_map body"},
};

static void keep_arg_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  saved_val = a[0];
  r[0] = jit_neg(t, a[0]);
}

/* Every trace-time case: the exact status, the message "errfn: OP at tests/test_errors.c:LINE: ...",
   no results handed out (ot_run checks), and nothing leaked (ASan). */
static void test_trace_errors(void **state) {
  bool ok = true;
  for (int c = 0; c < N_OF(cases); c++) {
    const err_case *ec = &cases[c];
    ot_array in[3], out[2];
    for (int i = 0; i < ec->n_args; i++)
      in[i] = ot_random(ec->args[i].dt, ec->args[i].rank, ec->args[i].d, (uint64_t)c, 0, 3);
    if (ec->mode == E_OTHER_TRACE) { /* a value of another (finished) trace */
      OT_ASSERT_OK(ot_run("keep", keep_arg_fn, NULL, 1, in, 1, out));
      ot_free(&out[0]);
    }
    err_line = -1;
    failed_id = 12345;
    jit_status st = ot_run("errfn", err_fn, (void *)&ec->mode, ec->n_args, in, ec->n_results, out);
    const char *msg = jit_last_error();
    bool this_ok = st == ec->want;
    if (!this_ok)
      print_error("case %d (mode %d): status %s, want %s (%s)\n", c, ec->mode, jit_status_str(st),
                  jit_status_str(ec->want), msg);
    if (this_ok && ec->mode != E_RESULT_UNSET && ec->mode != E_RESULT_UNSET_SECOND &&
        ec->mode != E_TRACE_FAIL && err_line <= 0) {
      print_error("case %d: the failing op was never reached\n", c);
      this_ok = false;
    }
    if (this_ok) this_ok = ot_error_has(ec->op, THIS_FILE, err_line);
    if (this_ok && ec->also) this_ok = ot_error_contains(ec->also);
    if (this_ok && strncmp(msg, "errfn", 5) != 0) {
      print_error("case %d: message \"%s\" does not start with the function's name\n", c, msg);
      this_ok = false;
    }
    if (this_ok && ec->mode == E_STICKY) {
      /* the first error is reported: not the exp or the matmul after it */
      this_ok = failed_id == 0 && after_error_rank == -1 && !strstr(msg, "matmul") &&
                !strstr(msg, "exp");
      if (!this_ok)
        print_error("sticky: failed op returned id %u, rank %d, message \"%s\"\n", failed_id,
                    after_error_rank, msg);
    }
    if (this_ok && ec->mode == E_TRACE_FAIL_AFTER && strstr(msg, "second failure")) {
      print_error("jit_trace_fail replaced the first error: \"%s\"\n", msg);
      this_ok = false;
    }
    ok &= this_ok;
    for (int i = 0; i < ec->n_args; i++) ot_free(&in[i]);
  }
  assert_true(ok);
}

/* A failed signature is not cached as a success, and a good one of the same jit_fn still works. */
static void add_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = L(jit_add(t, a[0], a[1]));
}

static void test_error_then_success(void **state) {
  int64_t s3 = 3, s4 = 4;
  float x3[3] = {1, 2, 3}, x4[4] = {1, 2, 3, 4}, y[3];
  jit_array *a = NULL, *b = NULL, *c = NULL, *out = NULL;
  OT_ASSERT_OK(jit_array_from_host(ot_ctx(), JIT_F32, 1, &s3, x3, &a));
  OT_ASSERT_OK(jit_array_from_host(ot_ctx(), JIT_F32, 1, &s4, x4, &b));
  OT_ASSERT_OK(jit_array_from_host(ot_ctx(), JIT_F32, 1, &s3, x3, &c));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "adder", .n_args = 2, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ot_ctx(), add_fn, NULL, &o, &f));
  jit_array *bad[2] = {a, b}, *good[2] = {a, c};
  for (int round = 0; round < 2; round++) {
    out = (jit_array *)&o; /* must be overwritten (with NULL) on failure */
    assert_int_equal(jit_call(f, bad, &out), JIT_ESHAPE);
    assert_null(out);
    assert_true(ot_error_has("adder: add", THIS_FILE, err_line));
    assert_true(ot_error_contains("f32[3]"));
    assert_true(ot_error_contains("f32[4]"));
  }
  OT_ASSERT_OK(jit_call(f, good, &out));
  OT_ASSERT_OK(jit_array_to_host(out, y, sizeof y));
  assert_true(y[0] == 2 && y[1] == 4 && y[2] == 6);
  jit_array_free(out);
  jit_array_free(a);
  jit_array_free(b);
  jit_array_free(c);
  jit_fn_free(f);
}

/* Ops given a NULL trace do nothing and return the invalid value; queries answer "invalid". */
static void test_null_trace(void **state) {
  static const int64_t s3[1] = {3};
  static const int perm[1] = {0};
  jit_val bogus = {7};
  assert_int_equal(jit_scalar(NULL, 1).id, 0);
  assert_int_equal(jit_full(NULL, JIT_F32, 1, s3, 0).id, 0);
  assert_int_equal(jit_iota(NULL, JIT_I32, 1, s3, 0).id, 0);
  assert_int_equal(jit_add(NULL, bogus, bogus).id, 0);
  assert_int_equal(jit_exp(NULL, bogus).id, 0);
  assert_int_equal(jit_transpose(NULL, bogus, perm).id, 0);
  assert_int_equal(jit_matmul(NULL, bogus, bogus).id, 0);
  assert_int_equal(jit_concat(NULL, 1, &bogus, 0).id, 0);
  assert_int_equal(jit_reduce_sum(NULL, bogus, 0, NULL).id, 0);
  assert_int_equal(jit_val_rank(NULL, bogus), -1);
  assert_null(jit_val_shape(NULL, bogus));
  jit_trace_fail(NULL, "nothing to fail");
  size_t len = 99;
  assert_null(jit_trace_static_args(NULL, &len));
  assert_int_equal(len, 0);
  assert_null(jit_trace_at(NULL, THIS_FILE, __LINE__));
}

/* ---- API calls outside tracing ------------------------------------------------------------------ */
static void ident_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  r[0] = jit_neg(t, a[0]);
}

static void test_ctx_errors(void **state) {
  assert_int_equal(jit_ctx_create(NULL, NULL), JIT_EINVAL);
  assert_true(ot_error_contains("jit_ctx_create"));
  jit_ctx_opts o = jit_ctx_opts_default();
  jit_ctx *ctx = (jit_ctx *)&o;
  o.opt_level = 7;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_EINVAL);
  assert_null(ctx);
  assert_true(ot_error_contains("opt_level"));
  o = jit_ctx_opts_default();
  o.n_threads = -1;
  assert_int_equal(jit_ctx_create(&o, &ctx), JIT_EINVAL);
  assert_null(ctx);
  jit_ctx_destroy(NULL); /* a no-op, like free(NULL) */
  assert_int_equal(jit_dtype_size((jit_dtype)42), 0);
  assert_string_equal(jit_dtype_name((jit_dtype)42), "?");
  for (int s = JIT_OK; s <= JIT_EINTERNAL; s++) {
    assert_non_null(jit_status_str((jit_status)s));
    assert_true(strlen(jit_status_str((jit_status)s)) > 0);
    for (int u = JIT_OK; u < s; u++)
      assert_string_not_equal(jit_status_str((jit_status)s), jit_status_str((jit_status)u));
  }
}

static void test_array_errors(void **state) {
  jit_ctx *ctx = ot_ctx();
  float data[8] = {0};
  int64_t sh[9] = {2, 2, 2, 1, 1, 1, 1, 1, 1}, neg[2] = {2, -1};
  jit_array *a = (jit_array *)data;
  static const struct {
    int which;
    jit_status want;
    const char *mentions;
  } cases[] = {
      {0, JIT_EINVAL, "ctx"},   {1, JIT_ESHAPE, "rank"}, {2, JIT_ESHAPE, "rank"},
      {3, JIT_ESHAPE, "-1"},    {4, JIT_EINVAL, "data"}, {5, JIT_EINVAL, "shape"},
      {6, JIT_EINVAL, "dtype"},
  };
  for (int c = 0; c < N_OF(cases); c++) {
    jit_status st = JIT_OK;
    a = (jit_array *)data;
    switch (cases[c].which) {
    case 0: st = jit_array_from_host(NULL, JIT_F32, 1, sh, data, &a); break;
    case 1: st = jit_array_from_host(ctx, JIT_F32, 9, sh, data, &a); break;
    case 2: st = jit_array_from_host(ctx, JIT_F32, -1, sh, data, &a); break;
    case 3: st = jit_array_from_host(ctx, JIT_F32, 2, neg, data, &a); break;
    case 4: st = jit_array_from_host(ctx, JIT_F32, 2, sh, NULL, &a); break;
    case 5: st = jit_array_from_host(ctx, JIT_F32, 2, NULL, data, &a); break;
    case 6: st = jit_array_from_host(ctx, (jit_dtype)99, 1, sh, data, &a); break;
    }
    if (st != cases[c].want) print_error("from_host case %d: %s\n", c, jit_last_error());
    assert_int_equal(st, cases[c].want);
    assert_null(a);
    assert_true(ot_error_contains("jit_array_from_host"));
    assert_true(ot_error_contains(cases[c].mentions));
  }
  assert_int_equal(jit_array_from_host(ctx, JIT_F32, 1, sh, data, NULL), JIT_EINVAL);
  assert_true(ot_error_contains("jit_array_from_host"));

  /* to_host: a buffer one element short, NULL array, NULL destination */
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_F32, 3, sh, data, &a));
  assert_int_equal(jit_array_nbytes(a), 8 * sizeof(float));
  assert_int_equal(jit_array_to_host(a, data, 7 * sizeof(float)), JIT_EINVAL);
  assert_true(ot_error_contains("jit_array_to_host"));
  assert_true(ot_error_contains("f32[2,2,2]"));
  assert_int_equal(jit_array_to_host(a, data, 0), JIT_EINVAL);
  assert_int_equal(jit_array_to_host(a, NULL, sizeof data), JIT_EINVAL);
  assert_true(ot_error_contains("jit_array_to_host"));
  assert_int_equal(jit_array_to_host(NULL, data, sizeof data), JIT_EINVAL);
  assert_true(ot_error_contains("jit_array_to_host"));
  OT_ASSERT_OK(jit_array_to_host(a, data, sizeof data + 5)); /* bigger is fine */
  jit_array_free(a);
  jit_array_free(NULL);

  /* empty arrays need no data pointer and fill no bytes */
  int64_t empty[2] = {3, 0};
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_F64, 2, empty, NULL, &a));
  assert_int_equal(jit_array_nbytes(a), 0);
  OT_ASSERT_OK(jit_array_to_host(a, NULL, 0));
  jit_array_free(a);

  /* accessors on NULL */
  assert_int_equal(jit_array_rank(NULL), -1);
  assert_null(jit_array_shape(NULL));
  assert_int_equal(jit_array_nbytes(NULL), 0);
}

static void test_compile_errors(void **state) {
  jit_ctx *ctx = ot_ctx();
  jit_fn_opts o = {.name = "f", .n_args = 1, .n_results = 1};
  jit_fn *f = (jit_fn *)&o;
  assert_int_equal(jit_compile(NULL, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_null(f);
  assert_true(ot_error_contains("jit_compile"));
  assert_int_equal(jit_compile(ctx, NULL, NULL, &o, &f), JIT_EINVAL);
  assert_true(ot_error_contains("jit_compile"));
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, NULL, &f), JIT_EINVAL);
  assert_true(ot_error_contains("jit_compile"));
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, NULL), JIT_EINVAL);
  assert_true(ot_error_contains("jit_compile"));
  o.n_args = -1;
  f = (jit_fn *)&o;
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_null(f);
  assert_true(ot_error_contains("jit_compile"));
  assert_true(ot_error_contains("n_args"));
  o.n_args = 1;
  o.n_results = -2;
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_true(ot_error_contains("n_results"));
  o.n_results = 0;
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_true(ot_error_contains("n_results"));
  o.n_results = 1;
  o.n_args = 100000;
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_true(ot_error_contains("n_args"));
  o.n_args = 1;
  o.donate_mask = 4; /* arg 2 of a one-arg function */
  assert_int_equal(jit_compile(ctx, ident_fn, NULL, &o, &f), JIT_EINVAL);
  assert_true(ot_error_contains("donate_mask"));
  jit_fn_free(NULL);
}

/* jit_call calls this function's own jit_fn from inside its trace: an error, not a deadlock. */
static void recursive_fn(jit_trace *t, const jit_val *a, jit_val *r, void *user) {
  void **ctxv = user;
  jit_fn *self = ctxv[0];
  jit_array *arg = ctxv[1], *res = NULL;
  *(jit_status *)ctxv[2] = jit_call(self, &arg, &res);
  jit_array_free(res);
  r[0] = a[0];
}

static void test_call_errors(void **state) {
  jit_ctx *ctx = ot_ctx();
  int64_t s2[1] = {2};
  float x[2] = {1, 2};
  jit_array *a = NULL, *b = NULL, *res[2] = {NULL, NULL};
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_F32, 1, s2, x, &a));
  OT_ASSERT_OK(jit_array_from_host(ctx, JIT_F32, 1, s2, x, &b));
  jit_fn *f = NULL;
  jit_fn_opts o = {.name = "callee", .n_args = 2, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ctx, add_fn, NULL, &o, &f));
  jit_array *args[2] = {a, b}, *half_null[2] = {a, NULL};

  assert_int_equal(jit_call(NULL, args, res), JIT_EINVAL);
  assert_true(ot_error_contains("jit_call"));
  assert_int_equal(jit_call(f, args, NULL), JIT_EINVAL);
  assert_true(ot_error_contains("jit_call"));
  assert_true(ot_error_contains("results"));
  assert_int_equal(jit_call(f, NULL, res), JIT_EINVAL);
  assert_true(ot_error_contains("jit_call"));
  assert_true(ot_error_contains("args"));
  assert_null(res[0]);
  assert_int_equal(jit_call(f, half_null, res), JIT_EINVAL);
  assert_true(ot_error_contains("args[1]"));
  assert_null(res[0]);
  assert_int_equal(jit_call_static(f, NULL, 8, args, res), JIT_EINVAL);
  assert_true(ot_error_contains("static"));
  assert_null(res[0]);

  /* an arg from another context */
  jit_ctx *other = NULL;
  OT_ASSERT_OK(jit_ctx_create(NULL, &other));
  jit_array *foreign = NULL;
  OT_ASSERT_OK(jit_array_from_host(other, JIT_F32, 1, s2, x, &foreign));
  jit_array *mixed[2] = {a, foreign};
  assert_int_equal(jit_call(f, mixed, res), JIT_EINVAL);
  assert_true(ot_error_contains("args[1]"));
  assert_null(res[0]);
  jit_array_free(foreign);
  jit_ctx_destroy(other);

  /* the good call still works after all of that */
  OT_ASSERT_OK(jit_call(f, args, res));
  jit_array_free(res[0]);
  res[0] = NULL;

  /* stats and dump on NULL */
  jit_fn_stats stats;
  assert_int_equal(jit_fn_stats_get(NULL, &stats), JIT_EINVAL);
  assert_int_equal(jit_fn_stats_get(f, NULL), JIT_EINVAL);
  jit_fn_free(f);

  /* a trace function that calls its own jit_fn */
  jit_status inner = JIT_OK;
  void *ctxv[3] = {NULL, a, &inner};
  jit_fn_opts ro = {.name = "recursive", .n_args = 1, .n_results = 1};
  OT_ASSERT_OK(jit_compile(ctx, recursive_fn, ctxv, &ro, &f));
  ctxv[0] = f;
  OT_ASSERT_OK(jit_call(f, &a, res));
  assert_int_equal(inner, JIT_EINVAL);
  jit_array_free(res[0]);
  jit_fn_free(f);
  jit_array_free(a);
  jit_array_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_errors),   cmocka_unit_test(test_error_then_success),
      cmocka_unit_test(test_ctx_errors),     cmocka_unit_test(test_array_errors),
      cmocka_unit_test(test_compile_errors), cmocka_unit_test(test_call_errors),
      cmocka_unit_test(test_null_trace),
  };
  return cmocka_run_group_tests(tests, ot_setup, ot_teardown);
}
