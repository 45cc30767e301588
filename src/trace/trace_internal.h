/* trace_internal.h: the tracer's state (struct jit_trace) and the helpers every op file uses to
 * check handles, report sticky errors, resolve weak scalars and emit instructions. */
#ifndef TJIT_TRACE_INTERNAL_H
#define TJIT_TRACE_INTERNAL_H

#include "runtime/error.h"
#include "trace/trace.h"

/* A jit_val id is (tag << TRACE_INDEX_BITS) | index: the tag differs between traces, so that a
   handle from another trace is rejected instead of silently naming a wrong value. */
enum { TRACE_INDEX_BITS = 22, TRACE_TAG_MASK = 0x3ff, TRACE_MAX_LOCS = 32 };
#define TRACE_INDEX_MASK ((1u << TRACE_INDEX_BITS) - 1)

typedef struct trace_val {
  ir_ref ref;   /* the instruction; IR_NOREF for a weak scalar not yet made f32 */
  bool weak;    /* made by jit_scalar (or from two weak operands): takes a partner's dtype */
  double value; /* a weak scalar's value */
  const int64_t *shape; /* jit_val_shape's answer, copied once into the trace's arena */
} trace_val;

struct jit_trace {
  const trace_request *req;
  const char *name; /* the jit_fn's name, first word of every message */
  ir_func *f;       /* the function being built */
  ir_arena arena;   /* stable copies of shapes handed to the user */
  trace_val *vals;  /* vals[i] is the value of index i + 1 */
  uint32_t n_vals, cap_vals;
  uint32_t tag;      /* 1..TRACE_TAG_MASK */
  jit_status status; /* sticky: the first failure, JIT_OK until then */
  char msg[1024];    /* its message "name: op at file:line: reason" */
  /* Locations pushed by jit_trace_at, popped by the next op to begin. A stack, not one slot:
     in jit_relu(t, jit_add(t, a, b)) the compiler may evaluate relu's jit_trace_at before or
     after the whole inner call; pushes and pops nest like the calls, so each op gets its own
     location in either order. */
  ir_loc locs[TRACE_MAX_LOCS];
  int n_locs;
  /* A sub-trace's transformation ("vmap") and its location: errors about the request itself
     (bad params, results left unset) name them. NULL / unknown at top level. */
  const char *outer_op;
  ir_loc outer_loc;
  jit_trace *parent; /* the enclosing trace of a sub-trace (messages, captures) */
  /* Values of enclosing traces used here (when req->captured allows it), see trace_capture. */
  struct trace_capture *caps;
  uint32_t n_caps, cap_caps;
};

/* One captured value: the enclosing trace's handle and its ref in the parent trace's function,
   and here the placeholder param emitted where it was first used (made a real param when the
   trace ends) and its local handle. */
typedef struct trace_capture {
  jit_val outer;
  ir_ref outer_ref;
  ir_ref local_ref;
  jit_val local;
} trace_capture;

/* One public op in progress: its name for messages and the location it consumed. */
typedef struct op_ctx {
  jit_trace *t;
  const char *op; /* public name: "add", "matmul", "dot_general" */
  ir_loc loc;
} op_ctx;

/* A formatted type, by value so that several fit in one message. */
typedef struct trace_text {
  char s[224];
} trace_text;
trace_text trace_ty(const ir_type *t);
trace_text trace_num(double v);                    /* shortest text that reads back as v */
trace_text trace_i64list(int n, const int64_t *v); /* [2,-1,3] */
trace_text trace_intlist(int n, const int *v);

/* Starts op `op`: pops the pending location (none if the stack is empty). False (do nothing, return
   an invalid value) when t is NULL or already failed. */
bool op_begin(jit_trace *t, const char *op, op_ctx *c);
/* Records the sticky error "name: op at file:line: reason" (first error only); returns s. */
jit_status op_fail(op_ctx *c, jit_status s, const char *fmt, ...) JIT_PRINTF(3, 4);
/* The table entry of v, or NULL after recording JIT_EINVAL (what: "operand", "lhs", ...). */
trace_val *op_val(op_ctx *c, jit_val v, const char *what);
/* v as a typed instruction: weak scalars become f32 constants. IR_NOREF after an error. */
ir_ref op_typed(op_ctx *c, jit_val v, const char *what);
/* A weak scalar taking dtype dt (a rank-0 CONST); JIT_EDTYPE if its value does not fit. */
ir_ref op_weak_as(op_ctx *c, const trace_val *w, jit_dtype dt);
/* The type of an emitted instruction (valid until the next emit). */
static inline const ir_type *op_type(const op_ctx *c, ir_ref r) { return ir_type_of(c->t->f, r); }
/* Infers the result type (reporting the rule's reason on failure) and emits. IR_NOREF after an
   error (including JIT_ENOMEM). */
ir_ref op_emit(op_ctx *c, ir_op op, uint32_t n_args, const ir_ref *args, const ir_attr *attr,
               const ir_type *declared);
/* A two-operand op without attributes (the elementwise binaries). */
ir_ref op_binary(op_ctx *c, ir_op op, ir_ref x, ir_ref y);
ir_ref op_const(op_ctx *c, jit_dtype dt, int rank, const int64_t *dims, double v);
/* x broadcast NumPy-style (trailing dims aligned) to (rank, dims); x itself if already there.
   The caller has checked that the shapes are compatible. */
ir_ref op_broadcast(op_ctx *c, ir_ref x, int rank, const int64_t *dims);
ir_ref op_reshape(op_ctx *c, ir_ref x, int rank, const int64_t *dims);
/* A new handle for r / for a weak scalar; (jit_val){0} after an error. */
jit_val op_result(op_ctx *c, ir_ref r);
jit_val op_weak_result(op_ctx *c, double v);
/* Reduction op of r over NumPy-style axes (negative, any order; checked, made increasing).
   IR_NOREF after an error. */
ir_ref op_reduce_axes(op_ctx *c, ir_op op, ir_ref r, int n_axes, const int *axes);
/* Normalizes a NumPy-style axis in [-rank, rank) to [0, rank); false if out of range. */
bool op_axis(int axis, int rank, int *out);
/* trace_function, run as a sub-trace of outer's op when outer is not NULL (see subtrace.h). */
jit_status trace_run(const trace_request *req, const op_ctx *outer, ir_func **out);
/* Checks (rank, shape) given by the user: rank 0..8, shape non-NULL when rank > 0, dims >= 0. */
bool op_check_shape(op_ctx *c, int rank, const int64_t *shape);

#endif /* TJIT_TRACE_INTERNAL_H */
