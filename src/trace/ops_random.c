/* ops_random.c: jax.random's functions, bit for bit, built from one THREEFRY op around iota
 * counters (JAX's partitionable layout, jax_threefry_partitionable = True, JAX >= 0.5).
 *
 * Element i (row-major flat index) of bits of shape S is threefry2x32(key, (i >> 32, i & ~0u)):
 * a u64 (y0 << 32) | y1 from which u32 bits take y0 ^ y1 and u64 bits the whole. Counters are
 * iotas, so vmap, sharding and fusion treat the draw like any elementwise op, and a sharded or
 * vmapped draw gives every element the bits of its global index, as JAX does. */
#include <math.h>

#include "trace/trace_internal.h"

/* ---- emission helpers (one op_ctx: every error names the public op) ---------------------- */

static ir_ref convert_to(op_ctx *c, ir_ref x, jit_dtype dt) {
  if (x == IR_NOREF) return x;
  ir_type to = *op_type(c, x);
  if (to.dtype == dt) return x;
  to.dtype = dt;
  return op_emit(c, IR_CONVERT, 1, &x, NULL, &to);
}

/* A constant of x's type. */
static ir_ref splat_like(op_ctx *c, ir_ref x, double v) {
  if (x == IR_NOREF) return x;
  const ir_type *t = op_type(c, x);
  ir_type copy = *t;
  return op_const(c, copy.dtype, copy.rank, copy.dims, v);
}

static ir_ref shift_right(op_ctx *c, ir_ref x, unsigned n) {
  return op_binary(c, IR_SHR_LOGICAL, x, splat_like(c, x, n));
}

/* The u32 words of a u64 value. */
static ir_ref hi_word(op_ctx *c, ir_ref y) { return convert_to(c, shift_right(c, y, 32), JIT_U32); }
static ir_ref lo_word(op_ctx *c, ir_ref y) { return convert_to(c, y, JIT_U32); }

/* Element k of a u32[2] key, as a u64 scalar. */
static ir_ref key_word(op_ctx *c, ir_ref key, int k) {
  ir_attr a = {0};
  a.slice.start[0] = k;
  a.slice.limit[0] = k + 1;
  a.slice.stride[0] = 1;
  ir_ref w = op_emit(c, IR_SLICE, 1, &key, &a, NULL);
  return convert_to(c, op_reshape(c, w, 0, NULL), JIT_U64);
}

/* The key as one u64 scalar (k0 << 32) | k1, after checking it is a u32[2]. */
static ir_ref packed_key(op_ctx *c, jit_val key) {
  ir_ref k = op_typed(c, key, "key");
  if (k == IR_NOREF) return k;
  const ir_type *t = op_type(c, k);
  if (t->dtype != JIT_U32 || t->rank != 1 || t->dims[0] != 2) {
    op_fail(c, t->dtype != JIT_U32 ? JIT_EDTYPE : JIT_ESHAPE,
            "a key is a u32[2] (jit_random_key, jit_random_split), got %s", trace_ty(t).s);
    return IR_NOREF;
  }
  ir_ref hi = key_word(c, k, 0);
  return op_binary(c, IR_OR, op_binary(c, IR_SHL, hi, splat_like(c, hi, 32)), key_word(c, k, 1));
}

/* The row-major flat index of every element of (rank, dims), as u64: sum of iota_d * stride_d. */
static ir_ref flat_index(op_ctx *c, int rank, const int64_t *dims) {
  ir_type ty = {.dtype = JIT_U64, .rank = rank};
  for (int d = 0; d < rank; d++) ty.dims[d] = dims[d];
  ir_ref sum = IR_NOREF;
  int64_t stride = 1;
  for (int d = rank; d-- > 0;) {
    if (dims[d] == 1) continue; /* index 0 there */
    ir_attr a = {0};
    a.axis = d;
    ir_ref term = op_emit(c, IR_IOTA, 0, NULL, &a, &ty);
    if (stride != 1) term = op_binary(c, IR_MUL, term, op_const(c, JIT_U64, rank, dims, (double)stride));
    sum = sum == IR_NOREF ? term : op_binary(c, IR_ADD, sum, term);
    if (dims[d] && stride > INT64_MAX / dims[d]) break; /* op_check_shape bounded the count */
    stride *= dims[d];
  }
  return sum != IR_NOREF ? sum : op_const(c, JIT_U64, rank, dims, 0);
}

/* threefry2x32(key, flat index) over (rank, dims): u64 (y0 << 32) | y1. */
static ir_ref draw(op_ctx *c, ir_ref key64, int rank, const int64_t *dims) {
  ir_ref ctr = flat_index(c, rank, dims);
  return op_binary(c, IR_THREEFRY, op_broadcast(c, key64, rank, dims), ctr);
}

/* JAX's _random_bits for width 32 (y0 ^ y1) or 64 (the whole draw). */
static ir_ref random_bits(op_ctx *c, ir_ref key64, unsigned width, int rank, const int64_t *dims) {
  ir_ref y = draw(c, key64, rank, dims);
  return width == 64 ? y : op_binary(c, IR_XOR, hi_word(c, y), lo_word(c, y));
}


/* ---- keys ---------------------------------------------------------------------------------- */

/* Two u32 scalars as a u32[2]. */
static ir_ref pair(op_ctx *c, ir_ref a, ir_ref b) {
  int64_t one = 1;
  ir_ref xs[2] = {op_reshape(c, a, 1, &one), op_reshape(c, b, 1, &one)};
  ir_attr at = {0};
  at.axis = 0;
  return op_emit(c, IR_CONCAT, 2, xs, &at, NULL);
}

jit_val jit_random_key(jit_trace *t, uint64_t seed) {
  op_ctx c;
  if (!op_begin(t, "random_key", &c)) return (jit_val){0};
  ir_ref hi = op_const(&c, JIT_U32, 0, NULL, (double)(seed >> 32));
  ir_ref lo = op_const(&c, JIT_U32, 0, NULL, (double)(seed & 0xffffffffu));
  return op_result(&c, pair(&c, hi, lo));
}

/* JAX's _threefry_split_foldlike: key i is the draw of counter i, words (y0, y1). */
jit_val jit_random_split(jit_trace *t, jit_val key, int64_t n) {
  op_ctx c;
  if (!op_begin(t, "random_split", &c)) return (jit_val){0};
  if (n < 0) {
    op_fail(&c, JIT_ESHAPE, "n = %lld keys: needs n >= 0", (long long)n);
    return (jit_val){0};
  }
  ir_ref k = packed_key(&c, key);
  ir_ref y = draw(&c, k, 1, &n);
  int64_t col[2] = {n, 1};
  ir_ref xs[2] = {op_reshape(&c, hi_word(&c, y), 2, col), op_reshape(&c, lo_word(&c, y), 2, col)};
  ir_attr a = {0};
  a.axis = 1;
  return op_result(&c, op_emit(&c, IR_CONCAT, 2, xs, &a, NULL));
}

/* JAX's threefry_fold_in: threefry2x32(key, (0, uint32(data))) is the new key. */
jit_val jit_random_fold_in(jit_trace *t, jit_val key, jit_val data) {
  op_ctx c;
  if (!op_begin(t, "random_fold_in", &c)) return (jit_val){0};
  trace_val *dv = op_val(&c, data, "data");
  if (!dv) return (jit_val){0};
  ir_ref d = dv->weak ? op_weak_as(&c, dv, JIT_I64) : op_typed(&c, data, "data");
  ir_ref k = packed_key(&c, key);
  if (d == IR_NOREF || k == IR_NOREF) return (jit_val){0};
  const ir_type *dt = op_type(&c, d);
  if (dt->rank != 0 || !ir_dtype_is_int(dt->dtype)) {
    op_fail(&c, dt->rank ? JIT_ESHAPE : JIT_EDTYPE, "data must be an integer scalar, got %s",
            trace_ty(dt).s);
    return (jit_val){0};
  }
  ir_ref ctr = convert_to(&c, convert_to(&c, d, JIT_U32), JIT_U64);
  ir_ref y = op_binary(&c, IR_THREEFRY, k, ctr);
  return op_result(&c, pair(&c, hi_word(&c, y), lo_word(&c, y)));
}

/* ---- draws --------------------------------------------------------------------------------- */

jit_val jit_random_bits(jit_trace *t, jit_val key, jit_dtype dt, int rank, const int64_t *shape) {
  op_ctx c;
  if (!op_begin(t, "random_bits", &c)) return (jit_val){0};
  if (dt != JIT_U32 && dt != JIT_U64) {
    op_fail(&c, JIT_EDTYPE, "bits are u32 or u64, got %s", jit_dtype_name(dt));
    return (jit_val){0};
  }
  if (!op_check_shape(&c, rank, shape)) return (jit_val){0};
  ir_ref k = packed_key(&c, key);
  return op_result(&c, random_bits(&c, k, dt == JIT_U64 ? 64 : 32, rank, shape));
}

/* v rounded to dt, as JAX's np.array(v, dt). */
static double in_dtype(jit_dtype dt, double v) {
  return ir_eval_elementwise(IR_CONVERT, NULL, JIT_F64, dt, &v);
}

/* JAX's _uniform: the top nmant bits of an rng_bits-wide draw (the dtype's width, 8 for bf16:
   JAX draws at least 8 bits, truncating the u32 bits) as a float in [1, 2), minus 1 (here the
   mantissa times 2^-nmant: the same float, exactly), times (hi - lo) plus lo, at least lo. */
static ir_ref uniform(op_ctx *c, ir_ref key64, jit_dtype dt, int rank, const int64_t *shape,
                      double lo, double hi) {
  int nmant = dt == JIT_F64 ? 52 : dt == JIT_F32 ? 23 : dt == JIT_F16 ? 10 : 7;
  ir_ref m;
  if (dt == JIT_F64) {
    m = shift_right(c, random_bits(c, key64, 64, rank, shape), 64 - nmant);
  } else {
    unsigned rng_bits = dt == JIT_F32 ? 32 : dt == JIT_F16 ? 16 : 8;
    m = random_bits(c, key64, 32, rank, shape);
    if (rng_bits < 32) m = op_binary(c, IR_AND, m, splat_like(c, m, (1u << rng_bits) - 1));
    m = shift_right(c, m, rng_bits - (unsigned)nmant);
  }
  ir_ref u = op_binary(c, IR_MUL, convert_to(c, m, dt), splat_like(c, convert_to(c, m, dt), ldexp(1, -nmant)));
  double lo_d = in_dtype(dt, lo), hi_d = in_dtype(dt, hi);
  double diff[2] = {hi_d, lo_d};
  double scale = ir_eval_elementwise(IR_SUB, NULL, dt, dt, diff);
  /* XLA's CPU code contracts u * scale + lo into one fma: for the narrower floats the product is
     exact in f64 and the f64 sum rounds once more only when its exact value needs more than 53
     bits (|lo| and |u * scale| many binades apart); f64 itself is one multiply and one add, at
     most 1 ulp from JAX's fma unless scale is a power of two (lo = 0, hi = 1: exact). */
  ir_ref wide = dt == JIT_F64 ? u : convert_to(c, u, JIT_F64);
  ir_ref r = op_binary(c, IR_ADD, op_binary(c, IR_MUL, wide, splat_like(c, wide, scale)),
                   splat_like(c, wide, lo_d));
  r = convert_to(c, r, dt);
  return op_binary(c, IR_MAX, splat_like(c, r, lo_d), r);
}

static bool check_float(op_ctx *c, jit_dtype dt) {
  if (ir_dtype_is_float(dt)) return true;
  op_fail(c, JIT_EDTYPE, "needs a float dtype (f16, bf16, f32, f64), got %s", jit_dtype_name(dt));
  return false;
}

jit_val jit_random_uniform(jit_trace *t, jit_val key, jit_dtype dt, int rank, const int64_t *shape,
                           double lo, double hi) {
  op_ctx c;
  if (!op_begin(t, "random_uniform", &c)) return (jit_val){0};
  if (!check_float(&c, dt) || !op_check_shape(&c, rank, shape)) return (jit_val){0};
  ir_ref k = packed_key(&c, key);
  return op_result(&c, uniform(&c, k, dt, rank, shape, lo, hi));
}

/* XLA's ErfInv32 (Giles' single-precision approximation, what jax.lax.erf_inv runs on f32 on
   CPU): w = -log1p(-x^2); a degree-8 polynomial in w - 2.5 (w < 5) or sqrt(w) - 3, times x;
   +-1 -> +-inf. Built from IR ops so that f32 normals stay within an ulp or two of JAX's. */
static ir_ref erf_inv_f32(op_ctx *c, ir_ref x) {
  static const float lt5[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                               -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                               -0.00417768164f,  0.246640727f,    1.50140941f};
  static const float ge5[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                               -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                               0.00943887047f,   1.00167406f,     2.83297682f};
  ir_ref nx2 = op_emit(c, IR_NEG, 1, (ir_ref[]){op_binary(c, IR_MUL, x, x)}, NULL, NULL);
  ir_ref l = op_emit(c, IR_LOG1P, 1, &nx2, NULL, NULL);
  ir_ref w = op_emit(c, IR_NEG, 1, &l, NULL, NULL);
  ir_attr lt = {0};
  lt.cmp = JIT_LT;
  ir_ref small = op_emit(c, IR_CMP, 2, (ir_ref[]){w, splat_like(c, w, 5)}, &lt, NULL);
  ir_ref sq = op_emit(c, IR_SQRT, 1, &w, NULL, NULL);
  ir_ref arg[3] = {small, op_binary(c, IR_SUB, w, splat_like(c, w, 2.5)),
                   op_binary(c, IR_SUB, sq, splat_like(c, w, 3))};
  w = op_emit(c, IR_SELECT, 3, arg, NULL, NULL);
  ir_ref p = IR_NOREF;
  for (int i = 0; i < 9; i++) {
    ir_ref k[3] = {small, splat_like(c, x, lt5[i]), splat_like(c, x, ge5[i])};
    ir_ref coef = op_emit(c, IR_SELECT, 3, k, NULL, NULL);
    p = i == 0 ? coef : op_binary(c, IR_ADD, coef, op_binary(c, IR_MUL, p, w));
  }
  ir_ref result = op_binary(c, IR_MUL, p, x);
  ir_ref ax = op_emit(c, IR_ABS, 1, &x, NULL, NULL);
  ir_attr eq = {0};
  eq.cmp = JIT_EQ;
  ir_ref edge[3] = {op_emit(c, IR_CMP, 2, (ir_ref[]){ax, splat_like(c, x, 1)}, &eq, NULL),
                    op_binary(c, IR_MUL, x, splat_like(c, x, INFINITY)), result};
  return op_emit(c, IR_SELECT, 3, edge, NULL, NULL);
}

/* JAX's _normal_real: sqrt(2) erf_inv(u), u uniform in (-1, 1) (lo = nextafter(-1, 0)). */
jit_val jit_random_normal(jit_trace *t, jit_val key, jit_dtype dt, int rank, const int64_t *shape) {
  op_ctx c;
  if (!op_begin(t, "random_normal", &c)) return (jit_val){0};
  if (!check_float(&c, dt) || !op_check_shape(&c, rank, shape)) return (jit_val){0};
  int nmant = dt == JIT_F64 ? 52 : dt == JIT_F32 ? 23 : dt == JIT_F16 ? 10 : 7;
  ir_ref k = packed_key(&c, key);
  ir_ref u = uniform(&c, k, dt, rank, shape, -1 + ldexp(1, -nmant - 1), 1);
  ir_ref e = dt == JIT_F32 ? erf_inv_f32(&c, u) : op_emit(&c, IR_ERF_INV, 1, &u, NULL, NULL);
  return op_result(&c, op_binary(&c, IR_MUL, splat_like(&c, e, in_dtype(dt, sqrt(2.0))), e));
}

/* JAX's _bernoulli: uniform f32 in [0, 1) < p (p an f32, as JAX's default dtype makes it). */
jit_val jit_random_bernoulli(jit_trace *t, jit_val key, double p, int rank, const int64_t *shape) {
  op_ctx c;
  if (!op_begin(t, "random_bernoulli", &c)) return (jit_val){0};
  if (!op_check_shape(&c, rank, shape)) return (jit_val){0};
  ir_ref k = packed_key(&c, key);
  ir_ref u = uniform(&c, k, JIT_F32, rank, shape, 0, 1);
  ir_attr a = {0};
  a.cmp = JIT_LT;
  ir_ref xs[2] = {u, splat_like(&c, u, in_dtype(JIT_F32, p))};
  return op_result(&c, op_emit(&c, IR_CMP, 2, xs, &a, NULL));
}
