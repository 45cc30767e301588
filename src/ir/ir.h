/* ir.h: tjit's SSA IR: the op table, types, instructions, functions, and the prototypes of
 * every file in src/ir/ (grouped under the file that defines them).
 *
 * Glossary: fn = ir_func, ins = instruction, ref = index of an instruction in its function
 * (its SSA value), ty = index of an interned ir_type, op = ir_op, loc = user file:line.
 * Invariants: operands refer to earlier instructions; the first n_params instructions are the
 * PARAMs in order; elementwise ops take operands of the result's exact shape (broadcasting is
 * explicit, through BROADCAST); ins pointers are invalidated by any emit, refs never are.
 */
#ifndef TJIT_IR_H
#define TJIT_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tjit.h"

#define IR_MAX_RANK JIT_MAX_RANK
#define IR_NOREF UINT32_MAX

/* ---- op table ----------------------------------------------------------------------------------
   _(NAME, n_operands (-1: variadic, >= 1), flags, "text name")
   Attributes each op uses (ir_attr member):
     Elementwise ops (IR_EW) follow lax's semantics (see interp.c); CLAMP's operands are lo, x,
     hi; ROUND rounds half to even; IS_FINITE gives bool. THREEFRY (u64 key, u64 counter) -> u64:
     threefry2x32 of the key words (hi, lo) on the counter words (hi, lo), see threefry.c.
     CONST value (a splat of any shape); IOTA axis (the counting dim); CMP cmp; TRANSPOSE dims
     (perm, n = rank); BROADCAST dims (operand dim i -> result dim dims.d[i], increasing; operand
     dim size equals the result's or is 1); REDUCE_* dims (reduced axes, increasing; the result
     drops them); SLICE slice; CONCAT axis; SORT axis and sort (see ir_sort); DOT dot (result dims = batch, lhs free, rhs free).
     GATHER (operand, indices) and SCATTER (operand, indices, updates) gather: XLA's dimension
     numbers (see ir_gather and gather.c); PAD (operand, scalar pad value) pad; REV dims (the
     reversed axes, increasing).
     SHARDING sharding: the identity, pinning its value's sharding (jit_with_sharding_constraint;
     the partitioner consumes it). ALL_REDUCE .. AXIS_INDEX coll: the collectives of a
     partitioned (per-device) function, see ir_coll; they need the function's mesh. SCAN scan (see ir_scan; any number of operands, 0 included); COND, WHILE cond (see
     ir_cond); GET axis (the index of the scan, cond or while result it reads). CONV (lhs, rhs)
     conv: lax.conv_general_dilated (see ir_conv and conv.c); REDUCE_WINDOW window: lax's
     reduce_window of sum, max or min; SELECT_SCATTER (operand, source) window: XLA's
     select_and_scatter_add, the VJP of a max / min window reduction (see ir_window).
     REAL, IMAG (complex -> its parts' float dtype), CONJ (complex), COMPLEX (re, im of f32 or
     f64 -> c64 or c128): complex values exist in traced IR only; ir_expand_complex rewrites
     them into real code before the interpreter and the compiler see them. FFT fft: lax.fft
     over the last fft.n_dims dims (see ir_fft and fft.c). */
#define IR_EW 1u        /* elementwise: operands and result have the same shape */
#define IR_COMM 2u      /* commutative binary op */
#define IR_UNARY_F 4u   /* float unary math (operand and result share a float dtype) */
#define IR_REDUCE 8u    /* reduction over attr.dims */

#define IR_OPDEF(_)                                \
  _(PARAM, 0, 0, "param")                          \
  _(CONST, 0, 0, "const")                          \
  _(IOTA, 0, 0, "iota")                            \
  _(NEG, 1, IR_EW, "neg")                          \
  _(ABS, 1, IR_EW, "abs")                          \
  _(EXP, 1, IR_EW | IR_UNARY_F, "exp")             \
  _(LOG, 1, IR_EW | IR_UNARY_F, "log")             \
  _(SQRT, 1, IR_EW | IR_UNARY_F, "sqrt")           \
  _(RSQRT, 1, IR_EW | IR_UNARY_F, "rsqrt")         \
  _(TANH, 1, IR_EW | IR_UNARY_F, "tanh")           \
  _(LOGISTIC, 1, IR_EW | IR_UNARY_F, "logistic")   \
  _(SIN, 1, IR_EW | IR_UNARY_F, "sin")             \
  _(COS, 1, IR_EW | IR_UNARY_F, "cos")             \
  _(ERF, 1, IR_EW | IR_UNARY_F, "erf")             \
  _(FLOOR, 1, IR_EW | IR_UNARY_F, "floor")         \
  _(CONVERT, 1, IR_EW, "convert")                  \
  _(ADD, 2, IR_EW | IR_COMM, "add")                \
  _(SUB, 2, IR_EW, "sub")                          \
  _(MUL, 2, IR_EW | IR_COMM, "mul")                \
  _(DIV, 2, IR_EW, "div")                          \
  _(MAX, 2, IR_EW | IR_COMM, "max")                \
  _(MIN, 2, IR_EW | IR_COMM, "min")                \
  _(POW, 2, IR_EW, "pow")                          \
  _(CMP, 2, IR_EW, "cmp")                          \
  _(SELECT, 3, IR_EW, "select")                    \
  _(LOG1P, 1, IR_EW | IR_UNARY_F, "log1p")         \
  _(EXPM1, 1, IR_EW | IR_UNARY_F, "expm1")         \
  _(CEIL, 1, IR_EW | IR_UNARY_F, "ceil")           \
  _(ROUND, 1, IR_EW | IR_UNARY_F, "round")         \
  _(ERF_INV, 1, IR_EW | IR_UNARY_F, "erf_inv")     \
  _(SIGN, 1, IR_EW, "sign")                        \
  _(IS_FINITE, 1, IR_EW, "is_finite")              \
  _(NOT, 1, IR_EW, "not")                          \
  _(AND, 2, IR_EW | IR_COMM, "and")                \
  _(OR, 2, IR_EW | IR_COMM, "or")                  \
  _(XOR, 2, IR_EW | IR_COMM, "xor")                \
  _(SHL, 2, IR_EW, "shift_left")                   \
  _(SHR_LOGICAL, 2, IR_EW, "shift_right_logical")  \
  _(SHR_ARITH, 2, IR_EW, "shift_right_arithmetic") \
  _(REM, 2, IR_EW, "rem")                          \
  _(ATAN2, 2, IR_EW, "atan2")                      \
  _(CLAMP, 3, IR_EW, "clamp")                      \
  _(THREEFRY, 2, IR_EW, "threefry2x32")            \
  _(RESHAPE, 1, 0, "reshape")                      \
  _(TRANSPOSE, 1, 0, "transpose")                  \
  _(BROADCAST, 1, 0, "broadcast")                  \
  _(SLICE, 1, 0, "slice")                          \
  _(CONCAT, -1, 0, "concat")                       \
  _(GATHER, 2, 0, "gather")                        \
  _(SCATTER, 3, 0, "scatter")                      \
  _(PAD, 2, 0, "pad")                              \
  _(REV, 1, 0, "rev")                              \
  _(REDUCE_SUM, 1, IR_REDUCE, "reduce_sum")        \
  _(REDUCE_MAX, 1, IR_REDUCE, "reduce_max")        \
  _(REDUCE_MIN, 1, IR_REDUCE, "reduce_min")        \
  _(REDUCE_PROD, 1, IR_REDUCE, "reduce_prod")      \
  _(SORT, -1, 0, "sort")                           \
  _(DOT, 2, 0, "dot")                              \
  _(SHARDING, 1, 0, "sharding")                    \
  _(ALL_REDUCE, 1, 0, "all_reduce")                \
  _(ALL_GATHER, 1, 0, "all_gather")                \
  _(REDUCE_SCATTER, 1, 0, "reduce_scatter")        \
  _(ALL_TO_ALL, 1, 0, "all_to_all")                \
  _(COLLECTIVE_PERMUTE, 1, 0, "collective_permute")\
  _(SHARD_SLICE, 1, 0, "shard_slice")              \
  _(AXIS_INDEX, 0, 0, "axis_index")                \
  _(SCAN, -1, 0, "scan")                           \
  _(COND, -1, 0, "cond")                           \
  _(WHILE, -1, 0, "while")                         \
  _(GET, 1, 0, "get")                              \
  _(SHARD_MAP, -1, 0, "shard_map")                \
  _(CONV, 2, 0, "conv")                            \
  _(REDUCE_WINDOW, 1, 0, "reduce_window")          \
  _(SELECT_SCATTER, 2, 0, "select_and_scatter_add") \
  _(REAL, 1, IR_EW, "real")                        \
  _(IMAG, 1, IR_EW, "imag")                        \
  _(CONJ, 1, IR_EW, "conj")                        \
  _(COMPLEX, 2, IR_EW, "complex")                  \
  _(FFT, 1, 0, "fft")

typedef enum ir_op {
#define IR_OP_ENUM(name, arity, flags, text) IR_##name,
  IR_OPDEF(IR_OP_ENUM)
#undef IR_OP_ENUM
  IR_N_OPS
} ir_op;

extern const char *const ir_op_name[IR_N_OPS];  /* "add" */
extern const int ir_op_arity[IR_N_OPS];         /* -1: variadic */
extern const unsigned ir_op_flags[IR_N_OPS];    /* IR_EW | ... */

/* ---- types ------------------------------------------------------------------------------------- */
typedef uint32_t ir_ref; /* an instruction's index in its function = its SSA value */
typedef uint32_t ir_ty;  /* an interned type's index in its function: equal types, equal ty */

typedef struct ir_type {
  jit_dtype dtype;
  int rank;                    /* 0..IR_MAX_RANK */
  int64_t dims[IR_MAX_RANK];   /* each >= 0; entries past rank are 0 */
} ir_type;

typedef struct ir_loc {
  const char *file;            /* NULL: unknown; else a string owned by the function's arena */
  int line;
} ir_loc;

typedef struct ir_dot_dims {
  uint8_t n_batch, n_contract;
  uint8_t lhs_batch[IR_MAX_RANK], rhs_batch[IR_MAX_RANK];
  uint8_t lhs_contract[IR_MAX_RANK], rhs_contract[IR_MAX_RANK];
} ir_dot_dims;

typedef struct ir_slice {
  int64_t start[IR_MAX_RANK], limit[IR_MAX_RANK], stride[IR_MAX_RANK]; /* 0 <= start <= limit <= dim, stride >= 1 */
} ir_slice;

typedef struct ir_dims {
  uint8_t n;
  uint8_t d[IR_MAX_RANK];
} ir_dims;

/* A collective's attributes. The devices of a mesh form groups: the devices whose mesh
   coordinates differ only on the axes of `axes` (a bit mask of mesh axis indices). A device's
   position p in its group is its coordinates on those axes, row-major in mesh axis order; n is
   the group size. Semantics, all deterministic (reductions fold in position order 0..n-1):
     ALL_REDUCE       every member gets the elementwise reduction (kind) of all members' operands.
     ALL_GATHER       result = the members' operands concatenated along dim in position order.
     REDUCE_SCATTER   the reduction (kind) split into n equal chunks along dim; member p gets
                      chunk p (the operand's dim is n times the result's).
     ALL_TO_ALL       each member splits its operand into n chunks along dim; member p receives
                      chunk p of every member and concatenates them along dim2 in source order.
     COLLECTIVE_PERMUTE  member p's operand goes to member (p + shift) mod n.
     SHARD_SLICE      no communication: member p takes chunk p of n equal chunks along dim (how a
                      replicated value becomes a sharded one).
     AXIS_INDEX       no operand: the i32 scalar p.
   Text: `all_gather %3 over=[x,y] dim=0` (axis names of the function's mesh; group = n is implied
   by the mesh); kind=sum|max|min, dim2=, shift= where the op has them. */
typedef enum ir_coll_kind { IR_COLL_SUM, IR_COLL_MAX, IR_COLL_MIN } ir_coll_kind;
typedef struct ir_coll {
  uint8_t axes;        /* bit i: mesh axis i is in the group */
  uint16_t group;      /* n: the product of those axes' sizes (the shape rules need it) */
  uint8_t kind;        /* ir_coll_kind: ALL_REDUCE, REDUCE_SCATTER */
  uint8_t dim;         /* ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL (split dim) */
  uint8_t dim2;        /* ALL_TO_ALL (concat dim) */
  int32_t shift;       /* COLLECTIVE_PERMUTE */
} ir_coll;

/* A loop (JAX's lax.scan). Operands: n_consts loop invariants, n_carry initial carries, then the
   xs, each with leading dim `length`. The body (f->bodies[body]) takes the consts, the carries and
   one slice of each x (the leading dim dropped) and returns the new carries (their types equal
   the carries') then one slice of each y. Step t (t = length-1 .. 0 when reverse) reads slice t of
   the xs and writes slice t of the ys. The scan's results are the final carries then the ys
   stacked along a new leading dim of size length (length 0: the initial carries, empty ys). A
   SCAN instruction's own type is the token bool[]: its results are read only through GET. */
typedef struct ir_scan {
  uint32_t body;       /* index into the function's bodies */
  uint32_t n_consts, n_carry;
  int64_t length;      /* >= 0 */
  uint8_t reverse;
} ir_scan;

/* lax.switch and lax.while_loop: their bodies are f->bodies[body .. body + n_bodies).
   COND: operand 0 is the i32 scalar branch index, clamped to [0, n_bodies) as lax.switch
   clamps it; the other operands are the args every branch body takes; the branches return
   results of equal types, the COND's results. WHILE: operands are n_consts loop invariants then
   the initial carries; bodies[body] (the predicate) takes the consts and carries and returns a
   bool scalar, bodies[body + 1] takes the same and returns the new carries; the results are the
   final carries (the inits when the predicate is false at once). Like SCAN, their own type is the
   token bool[] and their results are read through GET. */
typedef struct ir_cond {
  uint32_t body;       /* index of the first body */
  uint32_t n_bodies;   /* COND: branches (>= 1); WHILE: 2 */
  uint32_t n_consts;   /* WHILE */
} ir_cond;

/* jit_shard_map: the body (f->bodies[body], a per-device function with the mesh and its
   collectives) runs on every device of the mesh, on the blocks of the operands that in-spec i
   gives device d (specs[i], i < n_args); its result k is device d's block of the global result
   k laid out as out-spec specs[n_args + k]. Like SCAN, its own type is the token bool[] and its
   results are read through GET. specs is an array in the function's arena; the function holds a
   reference to each sharding (ir_emit copies the array and takes them). */
typedef struct ir_shard_map {
  uint32_t body;
  uint32_t n_out;
  struct jit_sharding **specs; /* n_args + n_out */
} ir_shard_map;

/* XLA's gather / scatter dimension numbers (see gather.c for the semantics). Indices: an integer
   array whose dim index_dim holds one index vector per position of its other (batch) dims;
   index_dim == its rank means a vector of length 1. Index vector entry k is the start in operand
   dim start_map.d[k] (other dims start at 0).
     GATHER: result dims = the indices' batch dims, in order, with the slice's non-collapsed dims
     at the positions offset_dims (increasing); sizes[d] is the slice's size in operand dim d
     (1 in the collapsed dims). Starts are clamped to [0, dim - size] (mode CLIP), or a slice
     with a start outside that range reads zeros (mode FILL).
     SCATTER: updates dims = the indices' batch dims with the window dims at the positions
     offset_dims (update_window_dims); the window spans the operand dims not in collapsed
     (inserted_window_dims), its sizes are the updates' window dims (1 in the inserted dims). The
     result is the operand with each update window combined (set or add) in at its start, in
     row-major order of the updates; a window with a start outside [0, dim - size] is dropped
     (mode FILL) or clamped (mode CLIP). */
typedef enum ir_index_mode { IR_INDEX_CLIP, IR_INDEX_FILL } ir_index_mode;
typedef enum ir_combine { IR_COMBINE_SET, IR_COMBINE_ADD } ir_combine;
typedef struct ir_gather {
  ir_dims offset_dims;       /* gather offset_dims / scatter update_window_dims (increasing) */
  ir_dims collapsed;         /* collapsed_slice_dims / inserted_window_dims (increasing) */
  ir_dims start_map;         /* start_index_map / scatter_dims_to_operand_dims (distinct) */
  uint8_t index_dim;         /* index_vector_dim: 0..indices rank */
  uint8_t mode;              /* ir_index_mode */
  uint8_t combine;           /* SCATTER: ir_combine */
  int64_t sizes[IR_MAX_RANK]; /* GATHER: slice_sizes, one per operand dim */
} ir_gather;

/* lax.pad: per dim, lo / hi elements of the pad value before / after (negative: cropped) and
   interior ones between neighbours (>= 0). Result dim = lo + hi + n + max(n - 1, 0) * interior. */
typedef struct ir_pad {
  int64_t lo[IR_MAX_RANK], hi[IR_MAX_RANK], interior[IR_MAX_RANK];
} ir_pad;

/* lax.sort of operands of one shape (dtypes may differ) along attr.axis: the order is the
   lexicographic one of the first n_keys operands in lax's total order (NaN after everything,
   -0 before +0; descending: the reverse), stable (equal keys keep their order). The result is
   operand `index` reordered: a sort of n operands is n SORTs (CSE keeps one per index).
   Text: `sort %1, %2 axis=1 keys=1 index=0 [descending=1]`. */
typedef struct ir_sort {
  uint8_t n_keys;      /* 1..n_args */
  uint8_t index;       /* the operand the result is */
  uint8_t descending;  /* 0 or 1 */
} ir_sort;

/* lax.conv_general_dilated's attributes. Dim lists name the operands' and result's dims as XLA's
   ConvDimensionNumbers do: lhs = (batch, feature, spatial...), rhs = (out feature, in feature,
   spatial...), out = (batch, feature, spatial...); spatial dim i of the three corresponds, and
   the per-spatial-dim lists below are in that order (n spatial = rank - 2). With lhs spatial
   size x, window k: the dilated input is lhs_dil * (x - 1) + 1 long (0 when x = 0), padded by
   pad_lo / pad_hi (negative: cropped), the window rhs_dil * (k - 1) + 1; the output has
   (padded - window) / stride + 1 positions (0 when the window does not fit). Output feature o
   belongs to feature group o / (O / groups), which reads lhs features [g * I, (g + 1) * I)
   (I = rhs in features; lhs features = I * groups), and to batch group o / (O / batch_groups),
   which reads lhs batch [b * N', (b + 1) * N') (N' = the result's batch = lhs batch /
   batch_groups; batch groups come from the filter VJP of a grouped conv). One of groups and
   batch_groups is 1. Text: `conv %0, %1 lhs=[0,3,1,2] rhs=[3,2,0,1] out=[0,3,1,2]
   strides=[1,1] pad_lo=[1,1] pad_hi=[1,1] lhs_dil=[1,1] rhs_dil=[1,1] groups=1
   batch_groups=1`. */
#define IR_CONV_MAX_SPATIAL (IR_MAX_RANK - 2)
typedef struct ir_conv {
  uint8_t lhs[IR_MAX_RANK], rhs[IR_MAX_RANK], out[IR_MAX_RANK]; /* rank entries each */
  int64_t stride[IR_CONV_MAX_SPATIAL], pad_lo[IR_CONV_MAX_SPATIAL], pad_hi[IR_CONV_MAX_SPATIAL];
  int64_t lhs_dil[IR_CONV_MAX_SPATIAL], rhs_dil[IR_CONV_MAX_SPATIAL]; /* >= 1 */
  int64_t groups, batch_groups; /* >= 1 */
} ir_conv;

/* lax.reduce_window (REDUCE_WINDOW) and select_and_scatter_add (SELECT_SCATTER), per operand
   dim: the window's size (>= 1), its stride (>= 1) and the padding before / after (>= 0), filled
   with the kind's identity (0, -inf, +inf; the dtype's lowest / highest for ints). Result dim =
   (dim + lo + hi - size) / stride + 1 (0 when the window does not fit). SELECT_SCATTER: the
   result has the operand's shape; for each window position (source element, the source has
   REDUCE_WINDOW's result shape) the first in-bounds operand element of the window that is >= (max)
   / <= (min) every other is selected, and the source element added to it (all else 0).
   Text: `reduce_window %0 reduce=max window=[2,2] strides=[2,2] pad_lo=[0,0] pad_hi=[0,0]`. */
typedef struct ir_window {
  int64_t size[IR_MAX_RANK], stride[IR_MAX_RANK], pad_lo[IR_MAX_RANK], pad_hi[IR_MAX_RANK];
  uint8_t kind; /* jit_window_kind: SUM, MAX, MIN (SELECT_SCATTER: MAX or MIN) */
} ir_window;

/* lax.fft over the last n_dims (1..3) dims of lengths[0..n_dims): FFT, IFFT complex -> complex,
   RFFT real -> complex (the last dim n / 2 + 1), IRFFT complex -> real (lengths the result's
   dims; the imaginary parts of the DC and, for even n, the Nyquist terms are ignored, as
   numpy's). IFFT and IRFFT divide by the product of the lengths. pairs = 1 after
   ir_expand_complex: each complex operand or result is its real pair array (one more dim of 2).
   Text: `fft %0 type=rfft lengths=[8,4] pairs=0`. */
typedef enum { IR_FFT_C2C, IR_IFFT_C2C, IR_RFFT_R2C, IR_IRFFT_C2R } ir_fft_type; /* jit_fft_type's order */
#define IR_FFT_MAX_DIMS 3
typedef struct ir_fft {
  int64_t lengths[IR_FFT_MAX_DIMS]; /* n_dims entries, each >= 1 */
  uint8_t type;                     /* ir_fft_type */
  uint8_t n_dims;                   /* 1..3 */
  uint8_t pairs;                    /* 0: complex dtypes; 1: (re, im) pair arrays */
} ir_fft;

/* Per-op attributes; which member an op uses is said in the op table's comment. Always build
   one from a zeroed value (ir_attr a = {0};) so that unused bytes compare equal. */
typedef struct ir_attr {
  double value;        /* CONST */
  int64_t axis;        /* IOTA, CONCAT, PARAM (its index) */
  jit_cmp_op cmp;      /* CMP */
  ir_dims dims;        /* TRANSPOSE, BROADCAST, REDUCE_* */
  ir_dot_dims dot;     /* DOT */
  ir_slice slice;      /* SLICE */
  ir_gather gather;    /* GATHER, SCATTER */
  ir_pad pad;          /* PAD */
  ir_coll coll;        /* ALL_REDUCE .. AXIS_INDEX */
  struct jit_sharding *sharding; /* SHARDING: the function holds a reference (see ir_func) */
  ir_scan scan;        /* SCAN */
  ir_cond cond;        /* COND, WHILE */
  ir_shard_map smap;   /* SHARD_MAP */
  ir_sort sort;        /* SORT (with axis) */
  ir_conv conv;        /* CONV */
  ir_window window;    /* REDUCE_WINDOW, SELECT_SCATTER */
  ir_fft fft;          /* FFT */
  uint32_t remat;      /* any op but PARAM: 0, or the checkpoint (remat) tag: the backward pass
                          recomputes the value instead of keeping it, CSE merges only equal
                          tags; printed "remat=N" after the op's attributes (see grad.c) */
} ir_attr;

typedef struct ir_ins {
  ir_op op;
  ir_ty ty;            /* result type */
  uint32_t n_args;
  ir_ref *args;        /* n_args operand refs, owned by the function's arena */
  ir_attr attr;
  ir_loc loc;
} ir_ins;

/* ---- arena (arena.c) --------------------------------------------------------------------------
   Bump allocation in chunks; memory lives until ir_arena_free. Returns NULL on overflow or OOM. */
typedef struct ir_arena_chunk ir_arena_chunk;
typedef struct ir_arena {
  ir_arena_chunk *head;  /* newest chunk first */
  size_t used, cap;      /* of the head chunk */
} ir_arena;
void *ir_arena_alloc(ir_arena *a, size_t n);           /* 16-byte aligned, zeroed */
void *ir_arena_array(ir_arena *a, size_t n, size_t size); /* checks n * size for overflow */
char *ir_arena_strdup(ir_arena *a, const char *s);
void  ir_arena_free(ir_arena *a);

/* ---- functions and the builder (ir.c) ---------------------------------------------------------- */
typedef struct ir_func {
  ir_arena arena;      /* owns names, file strings, operand lists */
  char *name;          /* without the '@' */
  ir_type *types;      /* interned types (malloc'd, grows) */
  uint32_t n_types, cap_types;
  ir_ins *ins;         /* instructions in definition order (malloc'd, grows) */
  uint32_t n_ins, cap_ins;
  uint32_t n_params;   /* the first n_params instructions are PARAMs */
  ir_ref *results;     /* n_results refs (malloc'd) */
  uint32_t n_results;
  const char *last_file; /* the newest loc file string in the arena: most locations repeat it */
  struct ir_func **bodies; /* the sub-functions SCANs run, owned (malloc'd array) */
  uint32_t n_bodies, cap_bodies;
  struct ir_mesh *mesh; /* the device mesh a partitioned function's collectives name (owned,
                          malloc'd); NULL: none */
  struct jit_sharding **held; /* references taken for SHARDING attrs, dropped when f is freed */
  uint32_t n_held, cap_held;
  bool oom;            /* an allocation failed: the function is unusable */
} ir_func;

/* A mesh as a partitioned function sees it: axis names and sizes (the device ids do not matter
   to the per-device program). Printed after the result types: `mesh[x=2,y=4]`. */
#define IR_MAX_MESH_AXES 8
typedef struct ir_mesh {
  int n_axes;
  int64_t sizes[IR_MAX_MESH_AXES];
  char names[IR_MAX_MESH_AXES][32];
} ir_mesh;
/* Gives f a copy of m (replacing any). JIT_ENOMEM. */
jit_status ir_set_mesh(ir_func *f, const ir_mesh *m);
/* The group size of a collective over the axes of mask in m (0: an axis out of range). */
int64_t ir_mesh_group(const ir_mesh *m, unsigned mask);
/* The binary op a reduction (IR_REDUCE) folds its elements with. */
static inline ir_op ir_reduce_combiner(ir_op op) {
  return op == IR_REDUCE_SUM ? IR_ADD : op == IR_REDUCE_MAX ? IR_MAX : op == IR_REDUCE_MIN ? IR_MIN : IR_MUL;
}
/* True for the ops whose result depends on the device (ALL_REDUCE .. AXIS_INDEX). */
static inline bool ir_op_is_collective(int op) { return op >= IR_ALL_REDUCE && op <= IR_AXIS_INDEX; }

/* Grows *p, an array of *cap elements of size bytes, to hold at least need (capacity doubles,
   from 16); false on overflow or OOM, *p and *cap unchanged. The growable arrays of every stage. */
bool     ir_grow(void **p, uint32_t *cap, uint32_t need, size_t size);
ir_func *ir_func_new(const char *name);                      /* NULL on OOM */
void     ir_func_free(ir_func *f);
/* Moves src's contents into dst (freeing dst's old contents) and frees src's shell: how a pass
   that rebuilt a function into a new one replaces the old. */
void     ir_func_replace(ir_func *dst, ir_func *src);
ir_ty    ir_type_intern(ir_func *f, const ir_type *t);       /* UINT32_MAX on OOM */
ir_ty    ir_type_make(ir_func *f, jit_dtype dt, int rank, const int64_t *dims);
static inline const ir_type *ir_type_of(const ir_func *f, ir_ref r) { return &f->types[f->ins[r].ty]; }
int64_t  ir_type_numel(const ir_type *t);                     /* product of dims; 1 for rank 0 */
bool     ir_type_equal(const ir_type *a, const ir_type *b);
/* Appends an instruction; copies args into the arena and loc.file into the arena (interned).
   attr may be NULL (all zero). Returns IR_NOREF on OOM (f->oom is then set). Does no checking:
   the tracer and the parser check, the verifier checks after passes. */
ir_ref   ir_emit(ir_func *f, ir_op op, ir_ty ty, uint32_t n_args, const ir_ref *args,
                 const ir_attr *attr, ir_loc loc);
ir_ref   ir_emit_param(ir_func *f, ir_ty ty);                 /* must precede other emits */
ir_ref   ir_emit_const(ir_func *f, ir_ty ty, double value, ir_loc loc);
jit_status ir_set_results(ir_func *f, uint32_t n, const ir_ref *refs);
/* Copies f (same refs, same types, bodies copied too): for keeping the traced IR while passes
   change a copy. */
ir_func *ir_func_clone(const ir_func *f);
/* Moves src's bodies to dst, which has none (a rebuilt function whose SCANs keep their body
   indices); src is left with none. */
void ir_move_bodies(ir_func *dst, ir_func *src);
/* Gives body to f (f frees it from now on, also on failure); its index in *index. JIT_ENOMEM. */
jit_status ir_add_body(ir_func *f, ir_func *body, uint32_t *index);
/* in's attributes for a copy of in (an instruction of src) emitted into dst: a SCAN's or
   SHARD_MAP's body is cloned into dst and the copy's body index rewritten; a collective gives
   dst src's mesh when dst has none. JIT_ENOMEM (dst->oom set). */
jit_status ir_attr_for_copy(ir_func *dst, const ir_func *src, const ir_ins *in, ir_attr *out);
/* Emits src's instructions (not its params) into dst in order: map[0..src->n_params) are the
   dst refs src's params read as, and map[i] receives the copy of src's instruction i (types
   interned, locations and attributes kept, scan bodies cloned). JIT_ENOMEM (dst->oom set). */
jit_status ir_copy_into(ir_func *dst, const ir_func *src, ir_ref *map);
/* ir_copy_into of the instructions keep marks only (keep NULL: all). */
jit_status ir_copy_marked(ir_func *dst, const ir_func *src, const bool *keep, ir_ref *map);
/* The body of a SCAN instruction, or NULL when its index is out of range. */
const ir_func *ir_scan_body(const ir_func *f, const ir_ins *scan);
/* The body of a SCAN or SHARD_MAP, the first branch of a COND, the loop body of a WHILE: the one
   whose results give the op's result types (NULL: another op, or out of range). */
const ir_func *ir_body(const ir_func *f, const ir_ins *in);
/* The number of bodies in runs (SCAN, SHARD_MAP: 1; COND: its branches; WHILE: 2; others 0) and
   body j of them in order (NULL when out of range). */
uint32_t ir_n_bodies(const ir_ins *in);
const ir_func *ir_body_at(const ir_func *f, const ir_ins *in, uint32_t j);
/* True for the ops with bodies, whose results are read through GET. */
static inline bool ir_op_has_body(int op) {
  return op == IR_SCAN || op == IR_SHARD_MAP || op == IR_COND || op == IR_WHILE;
}
/* Result k of a SCAN, SHARD_MAP, COND or WHILE (what GET index=k reads); false when out of range. */
bool ir_result_type(const ir_func *f, const ir_ins *in, uint32_t k, ir_type *out);
/* Result k of a SCAN: final carry k, or y (k - n_carry) stacked over length. false when k or the
   body is out of range. */
bool ir_scan_result_type(const ir_func *f, const ir_ins *scan, uint32_t k, ir_type *out);

/* ---- dtypes (dtype.c) ---------------------------------------------------------------------- */
bool   ir_dtype_is_float(jit_dtype d);     /* f16 bf16 f32 f64 */
bool   ir_dtype_is_int(jit_dtype d);       /* i8 u8 i32 i64 u32 u64 (not bool) */
bool   ir_dtype_is_unsigned(jit_dtype d);  /* u8 u32 u64 */
bool   ir_dtype_valid(jit_dtype d);
bool   ir_dtype_is_complex(jit_dtype d);   /* c64 c128 */
/* The dtype of a complex dtype's parts (c64 -> f32, c128 -> f64); d itself when not complex. */
jit_dtype ir_dtype_complex_part(jit_dtype d);
/* The complex dtype whose parts are f (f32 -> c64, f64 -> c128; the others widen to c64 as jnp's
   f16 + 0j does). */
jit_dtype ir_dtype_complex_of(jit_dtype f);
bool   ir_dtype_parse(const char *s, size_t n, jit_dtype *out); /* "f32" -> JIT_F32 */
float    ir_f16_to_f32(uint16_t h);
uint16_t ir_f32_to_f16(float f);           /* round to nearest even; overflow -> inf */
/* inline: the GEMM core's packers widen bf16 operands element by element at their edges */
static inline float ir_bf16_to_f32(uint16_t h) {
  union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
  return v.f;
}
uint16_t ir_f32_to_bf16(float f);          /* round to nearest even; NaN stays NaN */
/* Element i of a buffer of dtype d, as a double (ints exactly up to 2^53). */
double ir_load_f64(jit_dtype d, const void *buf, int64_t i);
/* floats truncate toward 0; a u64 comes as its bits (values past INT64_MAX read negative) */
int64_t ir_load_i64(jit_dtype d, const void *buf, int64_t i);
/* Stores v rounded to d: floats round (f16/bf16 through f32), ints truncate toward zero and
   saturate (NaN -> 0), bool = (v != 0). */
void   ir_store_f64(jit_dtype d, void *buf, int64_t i, double v);
void   ir_store_i64(jit_dtype d, void *buf, int64_t i, int64_t v); /* ints wrap to width */

/* ---- threefry (threefry.c) -------------------------------------------------------------------
   Random123's threefry2x32 with 20 rounds, as JAX's threefry2x32_p: key = (k0 << 32) | k1,
   count = (x0 << 32) | x1; returns (y0 << 32) | y1. */
uint64_t ir_threefry2x32(uint64_t key, uint64_t count);

/* ---- sorting (sort.c) --------------------------------------------------------------------------
   SORT on dense row-major buffers: ops[i] holds operand i (type t[i], all one shape), out gets
   operand s->index reordered along axis. The interpreter's and compiled code's one sort (a
   stable merge sort of each row's indices). JIT_ENOMEM. */
jit_status ir_sort_eval(const ir_type *const *t, uint32_t n_ops, const void *const *ops, int axis,
                        const ir_sort *s, void *out);

/* ---- FFT (fft.c, fft_engine.c) -----------------------------------------------------------------
   FFT's type rule (x: the operand); JIT_EINVAL / JIT_EDTYPE / JIT_ESHAPE with the reason. */
jit_status ir_infer_fft(const ir_type *x, const ir_fft *a, ir_type *out, char *why, size_t why_n);
extern const char *const ir_fft_type_name[4]; /* "fft", "ifft", "rfft", "irfft" */
/* FFT with pairs = 1 on dense row-major buffers (f32 or f64 parts; the transform runs in that
   precision, twiddles computed in double): the interpreter's and compiled code's one FFT.
   JIT_ENOMEM. */
jit_status ir_fft_eval(const ir_fft *a, const ir_type *xt, const void *x, const ir_type *ot, void *out);
/* The same FFT prepared once (lengths' twiddles, four-step tables) and run in passes, each split
   over threads: pass k's share ith of nth may run once pass k - 1 finished on every thread. tmp
   holds ir_fft_plan_tmp_bytes. A plan is read-only while it runs. JIT_ENOMEM. */
typedef struct ir_fft_plan ir_fft_plan;
jit_status ir_fft_plan_new(const ir_fft *a, const ir_type *xt, const ir_type *ot, ir_fft_plan **out);
void       ir_fft_plan_free(ir_fft_plan *p);
int        ir_fft_plan_passes(const ir_fft_plan *p);
int64_t    ir_fft_plan_units(const ir_fft_plan *p, int pass); /* work items: at most this many threads */
size_t     ir_fft_plan_tmp_bytes(const ir_fft_plan *p);
size_t     ir_fft_plan_scratch_bytes(const ir_fft_plan *p); /* each running thread's own */
/* scratch: ir_fft_plan_scratch_bytes of thread ith's own, 64-byte aligned */
void       ir_fft_plan_run(const ir_fft_plan *p, int pass, const void *x, void *out, void *tmp,
                           void *scratch, int ith, int nth);

/* ---- printer (print.c) ---------------------------------------------------------------------------
   The text form of DESIGN.md; values renumbered densely; print(parse(print(f))) == print(f). */
jit_status ir_print(const ir_func *f, FILE *out);
/* ir_print with a note after the type of each of f's values (params included; not in scan
   bodies): note writes it (e.g. a sharding) into buf[0..n), or leaves buf empty. The result is
   for reading: the parser does not take notes back. */
typedef void (*ir_note_fn)(void *ctx, ir_ref r, char *buf, size_t n);
jit_status ir_print_annotated(const ir_func *f, FILE *out, ir_note_fn note, void *ctx);
void       ir_print_type(const ir_type *t, FILE *out);      /* f32[512,1024] */
int        ir_format_type(const ir_type *t, char *buf, size_t n); /* snprintf-like */

/* ---- parser (parse.c) -------------------------------------------------------------------------
   Parses one or more functions. On malformed input returns JIT_EINVAL and writes
   "line:col: message" into the thread's last error; never crashes. */
jit_status ir_parse(const char *text, size_t len, ir_func ***out_funcs, uint32_t *out_n);

/* ---- verifier (verify.c) ---------------------------------------------------------------------
   Checks every invariant above and each op's type rule; JIT_EINTERNAL with the pass name, the
   op, the ref and its location in the last error when one is broken. pass may be NULL. */
jit_status ir_verify(const ir_func *f, const char *pass);
/* Checks instruction r alone, assuming refs before r passed (the parser checks each instruction
   as it reads it). JIT_OK, or JIT_EINTERNAL (JIT_ENOMEM) with the reason in why[0..why_n);
   does not touch the last error. */
jit_status ir_verify_ins(const ir_func *f, ir_ref r, char *why, size_t why_n);

/* ---- shape rules (shape.c) --------------------------------------------------------------------
   Infer each op's result type from operand types and attributes; shared by the tracer, the
   parser and the verifier. On failure return JIT_ESHAPE/JIT_EDTYPE/JIT_EINVAL and write a short
   reason (no location) into why[0..why_n). */
/* What a type rule returns on a refusal: s, with the reason written into why[0..n) (when
   non-NULL). */
jit_status ir_type_fail(char *why, size_t n, jit_status s, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 4, 5)))
#endif
    ;
jit_status ir_infer_type(ir_op op, uint32_t n_args, const ir_type *const *args,
                         const ir_attr *attr, const ir_type *declared /* RESHAPE, CONVERT, CONST,
                         IOTA, BROADCAST: the result type given */, ir_type *out,
                         char *why, size_t why_n);
/* The dtype rule alone of an elementwise op (IR_EW), on operands whose shapes may still differ:
   the tracer reports dtype errors on the user's types before it broadcasts them. */
jit_status ir_check_elementwise_dtypes(ir_op op, uint32_t n_args, const ir_type *const *args,
                                       char *why, size_t why_n);
/* v is exactly a value of dtype d: ints and bool need an integral value in range (bool: 0 or
   1); floats take any double (rounded when stored). */
bool ir_value_fits(jit_dtype d, double v);

/* ---- interpreter (interp.c) -----------------------------------------------------------------
   Evaluates f directly: float math in double (rounded to each value's dtype after every op),
   integer math in int64 (wrapped to the dtype). args[i] / results[i] point to dense row-major
   host buffers of the params' / results' types (16-bit floats as their bits). */
jit_status ir_interp(const ir_func *f, const void *const *args, void *const *results);
/* ir_interp as one device of a mesh: collectives call dev->collective (e.g. coll_world_run)
   with dev->position. Without a device, a collective is JIT_EUNSUPPORTED. */
typedef struct ir_device {
  int position;  /* in the mesh, row-major */
  jit_status (*collective)(void *ctx, int position, ir_op op, const ir_coll *c,
                           const ir_type *in_t, const void *in, void *out);
  void *ctx;
} ir_device;
jit_status ir_interp_device(const ir_func *f, const ir_device *dev, const void *const *args,
                            void *const *results);
/* A SHARD_MAP instruction in of f, evaluated as the interpreter does (spmd_interp.c):
   ops[i] = operand i's global bytes, result k written at out + off[k]. */
jit_status ir_eval_shard_map(const ir_func *f, const ir_ins *in, const void *const *ops,
                             unsigned char *out, const size_t *off);
/* Makes dev the device every ir_interp on this thread runs as (NULL: none); returns the previous
   one. How a device thread of the runtime runs a compiled program's interpreted collectives. */
const ir_device *ir_set_thread_device(const ir_device *dev);
/* One element of an elementwise op (IR_EW flag) with the interpreter's exact semantics, for
   constant folding: operands are values of dtype in_dt (as doubles), the result is rounded to
   out_dt. CONVERT, CMP (attr->cmp) and SELECT (operand 0 is the predicate) included. */
double ir_eval_elementwise(ir_op op, const ir_attr *attr, jit_dtype in_dt, jit_dtype out_dt,
                           const double *operands);

/* ---- gather, scatter, pad, rev (gather.c) ---------------------------------------------------
   Their type rules (ir_infer_type's, same contract) and the interpreter's semantics (on dense
   row-major buffers of the given types; the attributes already checked by the type rule). */
jit_status ir_infer_index_op(ir_op op, uint32_t n_args, const ir_type *const *args,
                             const ir_attr *attr, ir_type *out, char *why, size_t why_n);
void ir_eval_gather(const ir_attr *a, const ir_type *ot, const void *operand, const ir_type *it,
                    const void *indices, const ir_type *rt, void *out);
void ir_eval_scatter(const ir_attr *a, const ir_type *ot, const void *operand, const ir_type *it,
                     const void *indices, const ir_type *ut, const void *updates, void *out);
void ir_eval_pad(const ir_attr *a, const ir_type *ot, const void *operand, const void *pad_value,
                 const ir_type *rt, void *out);
void ir_eval_rev(const ir_attr *a, const ir_type *ot, const void *operand, void *out);
/* The length of the index vector of indices type it (1 when index_dim == its rank). */
int64_t ir_gather_index_len(const ir_type *it, int index_dim);

/* ---- convolution and windows (conv.c) ----------------------------------------------------------
   CONV's, REDUCE_WINDOW's and SELECT_SCATTER's type rules (ir_infer_type's contract) and the
   interpreter's semantics on dense row-major buffers (attributes already checked by the rule;
   sums in double). */
jit_status ir_infer_conv_op(ir_op op, uint32_t n_args, const ir_type *const *args,
                            const ir_attr *attr, ir_type *out, char *why, size_t why_n);
void ir_eval_conv(const ir_conv *c, const ir_type *lt, const void *lhs, const ir_type *rt,
                  const void *rhs, const ir_type *ot, void *out);
void ir_eval_reduce_window(const ir_window *w, const ir_type *xt, const void *x,
                           const ir_type *ot, void *out);
void ir_eval_select_scatter(const ir_window *w, const ir_type *xt, const void *x,
                            const ir_type *st, const void *src, void *out);
/* CONV instruction in runs as one GEMM over a strided view of its lhs (codegen/matmul.c), a
   batched one with the group as batch when it has feature or batch groups: no lhs dilation
   (padding is read as zeros by the view's bounds), a float dtype, the result laid out
   [batch, spatial..., feature] (passes/conv_layout.c puts convs in this form). */
bool ir_conv_is_gemm(const ir_func *f, const ir_ins *in);
/* Whether conv_layout can give CONV instruction in that form: a float dtype and at most 3
   spatial dims (the view's rank, 2 x spatial + 2, must fit IR_MAX_RANK). */
bool ir_conv_has_gemm_form(const ir_func *f, const ir_ins *in);
/* The identity of a window reduction of kind (jit_window_kind) in dtype d: 0, -inf / +inf, an
   int dtype's lowest / highest value (u64's highest rounds up as a double). */
double ir_window_identity(uint8_t kind, jit_dtype d);
/* The output size of one window dim (the rule above; 0 when the window does not fit). */
int64_t ir_window_out(int64_t in, int64_t lo, int64_t hi, int64_t window, int64_t stride);
/* 1 + d * (n - 1), or 0 for n = 0: a dim of n elements dilated by d. */
int64_t ir_dilate(int64_t n, int64_t d);
/* The attributes of the convs that give CONV c's VJPs, XLA's rules (lt, rt, ot: its lhs, rhs and
   result types): d_lhs = conv(ct, rev(rhs')) with for_lhs, rhs' = the rhs with its out features
   split into (groups, O / groups) and the groups moved in front of its in features when c has
   feature (or batch) groups, the result's batch groups moved back likewise; d_rhs = conv(lhs, ct)
   with for_rhs. */
void ir_conv_vjp_attrs(const ir_conv *c, const ir_type *lt, const ir_type *rt, const ir_type *ot,
                       ir_conv *for_lhs, ir_conv *for_rhs);

/* ---- liveness (liveness.c) -------------------------------------------------------------------
   The bytes of live intermediate values at the peak of f's instruction order: a value is live
   from its definition to its last use (results to the end). PARAMs (the caller's buffers) and
   CONSTs (splats, never materialized) are excluded; results are included. */
uint64_t ir_peak_live_bytes(const ir_func *f);

#endif /* TJIT_IR_H */
