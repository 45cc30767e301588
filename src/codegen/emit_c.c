/* emit_c.c: loop IR -> C text: each kernel as the C function it is (JIT_DUMP_C, and exported C),
 * compiling with cc -c -Wall -Werror after the prelude. Semantics are those of the LLVM emitter,
 * except that in dumps transcendentals call libm where LLVM inlines polynomials (so the last bits
 * may differ); exported kernels call the JIT's polynomials (emit_c_math.c). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernel.h"
#include "runtime/error.h"

static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <string.h>\n"
    "\n"
    "/* 16-bit floats are computed in float and rounded to nearest even after every op. */\n"
    "static inline uint32_t tjit_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }\n"
    "static inline float tjit_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static inline float tjit_f16_to_f32(uint16_t h) {\n"
    "  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;\n"
    "  if (e == 0) { float v = (float)m * 0x1p-24f; return s ? -v : v; }\n"
    "  if (e == 31) return tjit_float(s | 0x7f800000u | (m << 13));\n"
    "  return tjit_float(s | ((e + 112) << 23) | (m << 13));\n"
    "}\n"
    "static inline uint16_t tjit_f32_to_f16(float f) {\n"
    "  uint32_t x = tjit_bits(f), a = x & 0x7fffffffu;\n"
    "  uint16_t s = (uint16_t)((x >> 16) & 0x8000);\n"
    "  if (a >= 0x7f800000u) return a == 0x7f800000u ? (uint16_t)(s | 0x7c00) : (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff));\n"
    "  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00);\n"
    "  if (a < 0x38800000u) {\n"
    "    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;\n"
    "    if (e == 0 || sh > 24) return s;\n"
    "    uint32_t r = mant >> sh, rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);\n"
    "    if (rem > half || (rem == half && (r & 1))) r++;\n"
    "    return (uint16_t)(s | r);\n"
    "  }\n"
    "  uint32_t v = a - (112u << 23), r = v >> 13, rem = v & 0x1fff;\n"
    "  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;\n"
    "  return (uint16_t)(s | r);\n"
    "}\n"
    "static inline float tjit_bf16_to_f32(uint16_t h) { return tjit_float((uint32_t)h << 16); }\n"
    "static inline uint16_t tjit_f32_to_bf16(float f) {\n"
    "  uint32_t x = tjit_bits(f);\n"
    "  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);\n"
    "  x += 0x7fffu + ((x >> 16) & 1);\n"
    "  return (uint16_t)(x >> 16);\n"
    "}\n"
    "static inline float tjit_rnd_f16(float f) { return tjit_f16_to_f32(tjit_f32_to_f16(f)); }\n"
    "static inline float tjit_rnd_bf16(float f) { return tjit_bf16_to_f32(tjit_f32_to_bf16(f)); }\n"
    "/* max/min propagate NaN and order -0 < +0 */\n"
    "static inline double tjit_max(double a, double b) {\n"
    "  if (a != a) return a;\n"
    "  if (b != b) return b;\n"
    "  if (a != b) return a > b ? a : b;\n"
    "  return signbit(a) ? b : a;\n"
    "}\n"
    "static inline double tjit_min(double a, double b) {\n"
    "  if (a != a) return a;\n"
    "  if (b != b) return b;\n"
    "  if (a != b) return a < b ? a : b;\n"
    "  return signbit(a) ? a : b;\n"
    "}\n"
    "/* a / b given c = 1 / b where a and b are in range (codegen/kernel.h LP_QUOT) */\n"
    "static inline float tjit_quot_f32(float a, float b, float c) {\n"
    "  float q = a * c;\n"
    "  return copysignf(fmaf(fmaf(-q, b, a), c, q), q);\n"
    "}\n"
    "static inline double tjit_quot_f64(double a, double b, double c) {\n"
    "  double q = a * c;\n"
    "  return copysign(fma(fma(-q, b, a), c, q), q);\n"
    "}\n"
    "static inline uint64_t tjit_bits64(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }\n"
    "/* float -> int truncates toward zero and saturates; NaN -> 0 */\n"
    "static inline int64_t tjit_f2i(double v, double lo, double hi, int64_t ilo, int64_t ihi) {\n"
    "  if (v != v) return 0;\n"
    "  if (v <= lo) return ilo;\n"
    "  if (v >= hi) return ihi;\n"
    "  return (int64_t)v;\n"
    "}\n"
    "/* integer division: x / 0 = -1, INT_MIN / -1 = INT_MIN (wrapped by the caller) */\n"
    "static inline uint64_t tjit_sdiv(int64_t a, int64_t b) {\n"
    "  if (b == 0) return UINT64_MAX;\n"
    "  if (b == -1) return 0u - (uint64_t)a;\n"
    "  return (uint64_t)(a / b);\n"
    "}\n"
    "static inline uint64_t tjit_ipow(int64_t a, int64_t b) {\n"
    "  if (b < 0) return a == 1 ? 1u : a == -1 ? ((b & 1) ? UINT64_MAX : 1u) : 0u;\n"
    "  uint64_t r = 1, x = (uint64_t)a;\n"
    "  for (; b; b >>= 1) {\n"
    "    if (b & 1) r *= x;\n"
    "    x *= x;\n"
    "  }\n"
    "  return r;\n"
    "}\n"
    "/* float -> u64 truncates toward zero and saturates; NaN and negatives -> 0 */\n"
    "static inline uint64_t tjit_f2u(double v) {\n"
    "  if (!(v > 0)) return 0;\n"
    "  if (v >= 18446744073709551616.0) return UINT64_MAX;\n"
    "  return (uint64_t)v;\n"
    "}\n"
    "/* integer remainder: x % 0 = x, INT_MIN % -1 = 0 */\n"
    "static inline int64_t tjit_srem(int64_t a, int64_t b) {\n"
    "  if (b == 0) return a;\n"
    "  if (b == -1) return 0;\n"
    "  return a % b;\n"
    "}\n"
    "/* threefry2x32 (JAX's): key and counter words packed (hi << 32) | lo */\n"
    "static inline uint64_t tjit_threefry(uint64_t key, uint64_t count) {\n"
    "  static const unsigned rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};\n"
    "  uint32_t ks[3] = {(uint32_t)(key >> 32), (uint32_t)key, 0};\n"
    "  ks[2] = ks[0] ^ ks[1] ^ 0x1BD11BDAu;\n"
    "  uint32_t x0 = (uint32_t)(count >> 32) + ks[0], x1 = (uint32_t)count + ks[1];\n"
    "  for (unsigned g = 0; g < 5; g++) {\n"
    "    for (unsigned r = 0; r < 4; r++) {\n"
    "      unsigned n = rot[g & 1][r];\n"
    "      x0 += x1;\n"
    "      x1 = ((x1 << n) | (x1 >> (32 - n))) ^ x0;\n"
    "    }\n"
    "    x0 += ks[(g + 1) % 3];\n"
    "    x1 += ks[(g + 2) % 3] + g + 1;\n"
    "  }\n"
    "  return (uint64_t)x0 << 32 | x1;\n"
    "}\n"
    "/* lax.clamp on integers, in the signed or unsigned 64-bit type that holds the dtype */\n"
    "static inline int64_t tjit_sclamp(int64_t lo, int64_t x, int64_t hi) {\n"
    "  x = x < lo ? lo : x;\n"
    "  return x > hi ? hi : x;\n"
    "}\n"
    "static inline uint64_t tjit_uclamp(uint64_t lo, uint64_t x, uint64_t hi) {\n"
    "  x = x < lo ? lo : x;\n"
    "  return x > hi ? hi : x;\n"
    "}\n"
    "/* erf^-1: Giles' single-precision approximation, one Newton step on erf (erfc near 1) */\n"
    "static inline double tjit_erfinv(double y) {\n"
    "  double a = fabs(y), w = -log((1 - a) * (1 + a)), p;\n"
    "  if (a >= 1 || y == 0 || y != y) return a == 1 ? copysign(INFINITY, y) : a > 1 ? NAN : y;\n"
    "  if (w < 5) {\n"
    "    w -= 2.5;\n"
    "    p = ((((((((2.81022636e-08 * w + 3.43273939e-07) * w - 3.5233877e-06) * w\n"
    "      - 4.39150654e-06) * w + 0.00021858087) * w - 0.00125372503) * w - 0.00417768164) * w\n"
    "      + 0.246640727) * w + 1.50140941);\n"
    "  } else {\n"
    "    w = sqrt(w) - 3;\n"
    "    p = ((((((((-0.000200214257 * w + 0.000100950558) * w + 0.00134934322) * w\n"
    "      - 0.00367342844) * w + 0.00573950773) * w - 0.0076224613) * w + 0.00943887047) * w\n"
    "      + 1.00167406) * w + 2.83297682);\n"
    "  }\n"
    "  double x = p * a, slope = 1.1283791670955126 * exp(-x * x);\n"
    "  if (slope > 0) x -= (a < 0.5 ? erf(x) - a : (1 - a) - erfc(x)) / slope;\n"
    "  return copysign(x, y);\n"
    "}\n"
    "\n";

jit_status lp_emit_c_prelude(FILE *out) {
  if (fputs(prelude, out) < 0) return jit_error(JIT_EIO, "codegen: writing C failed");
  return JIT_OK;
}

static const char *ctype(jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return "_Bool";
  case JIT_I8: return "int8_t";
  case JIT_U8: return "uint8_t";
  case JIT_I32: return "int32_t";
  case JIT_I64: return "int64_t";
  case JIT_U32: return "uint32_t";
  case JIT_U64: return "uint64_t";
  case JIT_F16:
  case JIT_BF16:
  case JIT_F32: return "float";
  default: return "double";
  }
}

/* The element type of a buffer as stored. */
static const char *stype(jit_dtype d) {
  switch (d) {
  case JIT_BOOL: return "uint8_t";
  case JIT_F16:
  case JIT_BF16: return "uint16_t";
  default: return ctype(d);
  }
}

static bool is_f(jit_dtype d) { return ir_dtype_is_float(d); }
static bool narrow(jit_dtype d) { return d == JIT_F16 || d == JIT_BF16; }
static const char *fsuf(jit_dtype d) { return d == JIT_F64 ? "" : "f"; }

typedef struct cw {
  const lp_func *lf;
  FILE *out;
  bool *live;
  bool inline_math; /* transcendentals call the tjit_NAME_f32/f64 of lp_emit_c_math, not libm */
} cw;

static void indent(cw *w, int depth) {
  for (int i = 0; i < depth; i++) fputs("  ", w->out);
}

static void put_const(cw *w, const lp_ins *in) {
  jit_dtype d = in->dt;
  FILE *o = w->out;
  if (is_f(d)) {
    double v = in->imm.f;
    const char *cast = d == JIT_F64 ? "" : "(float)";
    if (isnan(v)) fprintf(o, "%sNAN", cast);
    else if (isinf(v)) fprintf(o, "%s%sINFINITY", cast, v < 0 ? "-" : "");
    else {
      char buf[48];
      snprintf(buf, sizeof buf, "%.17g", v);
      if (!strpbrk(buf, ".e")) strcat(buf, ".0");
      fprintf(o, "%s%s", buf, fsuf(d));
    }
    return;
  }
  int64_t v = in->imm.i;
  if (v == INT64_MIN) fprintf(o, "(%s)(-9223372036854775807 - 1)", ctype(d));
  else if (d == JIT_I64) fprintf(o, "INT64_C(%" PRId64 ")", v);
  else if (d == JIT_U64) fprintf(o, "UINT64_C(%" PRIu64 ")", (uint64_t)v);
  else fprintf(o, "(%s)%" PRId64, ctype(d), v);
}

/* Wraps an expression producing a value of dtype d computed in float so that it is rounded. */
static void open_round(cw *w, jit_dtype d) {
  if (d == JIT_F16) fputs("tjit_rnd_f16(", w->out);
  if (d == JIT_BF16) fputs("tjit_rnd_bf16(", w->out);
}
static void close_round(cw *w, jit_dtype d) {
  if (narrow(d)) fputs(")", w->out);
}

static const char *libm_name(ir_op op) {
  switch (op) {
  case IR_EXP: return "exp";
  case IR_LOG: return "log";
  case IR_SQRT: return "sqrt";
  case IR_TANH: return "tanh";
  case IR_SIN: return "sin";
  case IR_COS: return "cos";
  case IR_ERF: return "erf";
  case IR_FLOOR: return "floor";
  case IR_CEIL: return "ceil";
  case IR_ROUND: return "nearbyint"; /* ties to even in the default rounding mode */
  case IR_LOG1P: return "log1p";
  case IR_EXPM1: return "expm1";
  default: return NULL;
  }
}

static void int_limits(jit_dtype d, const char **lo, const char **hi, const char **ilo,
                       const char **ihi) {
  switch (d) {
  case JIT_I8: *lo = "-128.0"; *hi = "127.0"; *ilo = "INT8_MIN"; *ihi = "INT8_MAX"; break;
  case JIT_U8: *lo = "0.0"; *hi = "255.0"; *ilo = "0"; *ihi = "UINT8_MAX"; break;
  case JIT_I32: *lo = "-2147483648.0"; *hi = "2147483647.0"; *ilo = "INT32_MIN"; *ihi = "INT32_MAX"; break;
  case JIT_U32: *lo = "0.0"; *hi = "4294967295.0"; *ilo = "0"; *ihi = "UINT32_MAX"; break;
  default: *lo = "-9223372036854775808.0"; *hi = "9223372036854775808.0"; *ilo = "INT64_MIN"; *ihi = "INT64_MAX"; break;
  }
}

static void put_convert(cw *w, jit_dtype from, jit_dtype to, int32_t a) {
  FILE *o = w->out;
  if (to == JIT_BOOL) {
    fprintf(o, "v%d != 0", a);
  } else if (is_f(from) && is_f(to)) {
    open_round(w, to);
    fprintf(o, "(%s)v%d", ctype(to), a);
    close_round(w, to);
  } else if (is_f(from) && to == JIT_U64) {
    fprintf(o, "tjit_f2u((double)v%d)", a);
  } else if (is_f(from)) {
    const char *lo, *hi, *ilo, *ihi;
    int_limits(to, &lo, &hi, &ilo, &ihi);
    fprintf(o, "(%s)tjit_f2i((double)v%d, %s, %s, %s, %s)", ctype(to), a, lo, hi, ilo, ihi);
  } else if (is_f(to)) {
    open_round(w, to);
    /* int64 -> double -> float, as the interpreter rounds it */
    fprintf(o, "(%s)(double)v%d", ctype(to), a);
    close_round(w, to);
  } else {
    fprintf(o, "(%s)(uint64_t)v%d", ctype(to), a);
  }
}

static void put_ew_float(cw *w, const lp_ins *in) {
  FILE *o = w->out;
  jit_dtype d = in->dt;
  const char *s = fsuf(d);
  ir_op op = in->ew;
  int32_t a = in->a, b = in->b;
  switch (op) {
  case IR_NEG: fprintf(o, "-v%d", a); return;
  case IR_ABS: fprintf(o, "fabs%s(v%d)", s, a); return;
  case IR_MAX:
  case IR_MIN:
    fprintf(o, "(%s)tjit_%s(v%d, v%d)", ctype(d), op == IR_MAX ? "max" : "min", a, b);
    return;
  case IR_FLOOR:
  case IR_CEIL:
  case IR_ROUND: fprintf(o, "%s%s(v%d)", libm_name(op), s, a); return;
  case IR_SIGN:
    fprintf(o, "v%d != v%d || v%d == 0 ? v%d : copysign%s(1, v%d)", a, a, a, a, s, a);
    return;
  default: break;
  }
  open_round(w, d);
  switch (op) {
  case IR_ADD: fprintf(o, "v%d + v%d", a, b); break;
  case IR_SUB: fprintf(o, "v%d - v%d", a, b); break;
  case IR_MUL: fprintf(o, "v%d * v%d", a, b); break;
  case IR_DIV: fprintf(o, "v%d / v%d", a, b); break;
  case IR_POW: fprintf(o, "(%s)pow((double)v%d, (double)v%d)", ctype(d), a, b); break;
  case IR_RSQRT: fprintf(o, "(%s)(1.0 / sqrt((double)v%d))", ctype(d), a); break;
  case IR_EXP: case IR_LOG: case IR_TANH: case IR_LOGISTIC: case IR_ERF: case IR_SIN: case IR_COS:
    if (w->inline_math) {
      fprintf(o, "tjit_%s_f%d(v%d)", ir_op_name[op], d == JIT_F64 ? 64 : 32, a);
      break;
    }
    if (op == IR_LOGISTIC) fprintf(o, "1.0%s / (1.0%s + exp%s(-v%d))", s, s, s, a);
    else fprintf(o, "%s%s(v%d)", libm_name(op), s, a);
    break;
  case IR_REM: fprintf(o, "fmod%s(v%d, v%d)", s, a, b); break;
  case IR_ATAN2: fprintf(o, "atan2%s(v%d, v%d)", s, a, b); break;
  case IR_ERF_INV: fprintf(o, "(%s)tjit_erfinv((double)v%d)", ctype(d), a); break;
  default: fprintf(o, "%s%s(v%d)", libm_name(op) ? libm_name(op) : "?", s, a); break;
  }
  close_round(w, d);
}

static void put_ew_int(cw *w, const lp_ins *in) {
  FILE *o = w->out;
  jit_dtype d = in->dt;
  const char *t = ctype(d);
  int32_t a = in->a, b = in->b;
  if (d == JIT_BOOL) {
    switch (in->ew) {
    case IR_ADD:
    case IR_MAX: fprintf(o, "v%d | v%d", a, b); return;
    case IR_SUB: fprintf(o, "v%d ^ v%d", a, b); return;
    case IR_MUL:
    case IR_MIN: fprintf(o, "v%d & v%d", a, b); return;
    case IR_DIV: fprintf(o, "v%d ? v%d : 1", b, a); return;
    case IR_POW: fprintf(o, "v%d | !v%d", a, b); return;
    case IR_NOT: fprintf(o, "!v%d", a); return;
    case IR_AND: fprintf(o, "v%d & v%d", a, b); return;
    case IR_OR: fprintf(o, "v%d | v%d", a, b); return;
    case IR_XOR: fprintf(o, "v%d ^ v%d", a, b); return;
    default: fprintf(o, "v%d", a); return; /* neg, abs, floor */
    }
  }
  bool u = ir_dtype_is_unsigned(d);
  unsigned bits = (unsigned)jit_dtype_size(d) * 8;
  switch (in->ew) {
  case IR_NEG: fprintf(o, "(%s)(0u - (uint64_t)v%d)", t, a); return;
  case IR_SIGN:
    if (u) fprintf(o, "(%s)(v%d != 0)", t, a);
    else fprintf(o, "(%s)((v%d > 0) - (v%d < 0))", t, a, a);
    return;
  case IR_NOT: fprintf(o, "(%s)~(uint64_t)v%d", t, a); return;
  case IR_AND: fprintf(o, "(%s)(v%d & v%d)", t, a, b); return;
  case IR_OR: fprintf(o, "(%s)(v%d | v%d)", t, a, b); return;
  case IR_XOR: fprintf(o, "(%s)(v%d ^ v%d)", t, a, b); return;
  case IR_THREEFRY: fprintf(o, "tjit_threefry(v%d, v%d)", a, b); return;
  /* amounts outside [0, bits) as XLA, never C's undefined shifts */
  case IR_SHL:
    fprintf(o, "(uint64_t)v%d < %u ? (%s)((uint64_t)v%d << v%d) : 0", b, bits, t, a, b);
    return;
  case IR_SHR_LOGICAL:
    fprintf(o, "(uint64_t)v%d < %u ? (%s)((uint%u_t)v%d >> v%d) : 0", b, bits, t, bits, a, b);
    return;
  case IR_SHR_ARITH:
    fprintf(o, "(%s)((int%u_t)v%d >> ((uint64_t)v%d < %u ? v%d : %u))", t, bits, a, b, bits, b,
            bits - 1);
    return;
  case IR_REM:
    if (u) fprintf(o, "v%d ? (%s)(v%d %% v%d) : v%d", b, t, a, b, a);
    else fprintf(o, "(%s)tjit_srem(v%d, v%d)", t, a, b);
    return;
  case IR_ABS:
    if (u) fprintf(o, "v%d", a);
    else fprintf(o, "v%d < 0 ? (%s)(0u - (uint64_t)v%d) : v%d", a, t, a, a);
    return;
  case IR_FLOOR: fprintf(o, "v%d", a); return;
  case IR_ADD: fprintf(o, "(%s)((uint64_t)v%d + (uint64_t)v%d)", t, a, b); return;
  case IR_SUB: fprintf(o, "(%s)((uint64_t)v%d - (uint64_t)v%d)", t, a, b); return;
  case IR_MUL: fprintf(o, "(%s)((uint64_t)v%d * (uint64_t)v%d)", t, a, b); return;
  case IR_DIV:
    if (u) fprintf(o, "(%s)(v%d ? v%d / v%d : (%s)~(%s)0)", t, b, a, b, t, t);
    else fprintf(o, "(%s)tjit_sdiv(v%d, v%d)", t, a, b);
    return;
  case IR_POW: fprintf(o, "(%s)tjit_ipow(v%d, v%d)", t, a, b); return;
  case IR_MAX:
  case IR_MIN: fprintf(o, "v%d %s v%d ? v%d : v%d", a, in->ew == IR_MAX ? ">" : "<", b, a, b); return;
  default: fprintf(o, "0 /* ? */"); return;
  }
}

static void put_ew(cw *w, const lp_ins *in) {
  FILE *o = w->out;
  static const char *const cmp_ops[] = {"==", "!=", "<", "<=", ">", ">="};
  switch (in->ew) {
  case IR_SELECT: fprintf(o, "v%d ? v%d : v%d", in->a, in->b, in->c); return;
  case IR_CMP: fprintf(o, "v%d %s v%d", in->a, cmp_ops[in->cmp % 6], in->b); return;
  case IR_CONVERT: put_convert(w, in->in_dt, in->dt, in->a); return;
  case IR_IS_FINITE: fprintf(o, "isfinite(v%d)", in->a); return;
  case IR_CLAMP:
    if (is_f(in->dt))
      fprintf(o, "(%s)tjit_min(tjit_max(v%d, v%d), v%d)", ctype(in->dt), in->b, in->a, in->c);
    else
      fprintf(o, "(%s)tjit_%cclamp(v%d, v%d, v%d)", ctype(in->dt),
              ir_dtype_is_unsigned(in->dt) ? 'u' : 's', in->a, in->b, in->c);
    return;
  default: break;
  }
  if (is_f(in->dt)) put_ew_float(w, in);
  else put_ew_int(w, in);
}

static void put_block(cw *w, int32_t block, int depth);

static void put_ins(cw *w, int32_t id, int depth) {
  const lp_func *lf = w->lf;
  const lp_ins *in = &lf->ins[id];
  FILE *o = w->out;
  if (!w->live[id]) return;
  jit_dtype d = in->dt;
  static const char *const iops[] = {[LP_IADD] = "+", [LP_ISUB] = "-", [LP_IMUL] = "*",
                                     [LP_IDIV] = "/", [LP_IREM] = "%", [LP_ILT] = "<"};
  indent(w, depth);
  switch ((lp_op)in->op) {
  case LP_CONST:
    fprintf(o, "const %s v%d = ", ctype(d), id);
    put_const(w, in);
    fputs(";\n", o);
    return;
  case LP_ROW: fprintf(o, "int64_t v%d = r;\n", id); return;
  case LP_VAR: return;
  case LP_IADD:
  case LP_ISUB:
  case LP_IMUL:
  case LP_IDIV:
  case LP_IREM:
  case LP_ILT:
    fprintf(o, "%s v%d = v%d %s v%d;\n", ctype(d), id, in->a, iops[in->op], in->b);
    return;
  case LP_IMIN:
  case LP_IMAX:
    fprintf(o, "int64_t v%d = v%d %s v%d ? v%d : v%d;\n", id, in->a, in->op == LP_IMIN ? "<" : ">",
            in->b, in->a, in->b);
    return;
  case LP_LOAD:
    fprintf(o, "%s v%d = ", ctype(d), id);
    if (d == JIT_F16) fprintf(o, "tjit_f16_to_f32(b%d[v%d]);\n", in->buf, in->a);
    else if (d == JIT_BF16) fprintf(o, "tjit_bf16_to_f32(b%d[v%d]);\n", in->buf, in->a);
    else if (d == JIT_BOOL) fprintf(o, "b%d[v%d] != 0;\n", in->buf, in->a);
    else fprintf(o, "b%d[v%d];\n", in->buf, in->a);
    return;
  case LP_STORE:
    if (d == JIT_F16) fprintf(o, "b%d[v%d] = tjit_f32_to_f16(v%d);\n", in->buf, in->a, in->b);
    else if (d == JIT_BF16) fprintf(o, "b%d[v%d] = tjit_f32_to_bf16(v%d);\n", in->buf, in->a, in->b);
    else fprintf(o, "b%d[v%d] = v%d;\n", in->buf, in->a, in->b);
    return;
  case LP_EW:
    fprintf(o, "%s v%d = ", ctype(d), id);
    put_ew(w, in);
    fputs(";\n", o);
    return;
  case LP_ACC:
    fprintf(o, "%s v%d = v%d;\n", ctype(d), id, in->a);
    return;
  case LP_ACC_ADD:
    if (in->ew == IR_ADD && is_f(d)) fprintf(o, "v%d += v%d;\n", in->a, in->b);
    else if (in->ew == IR_MUL && is_f(d)) fprintf(o, "v%d *= v%d;\n", in->a, in->b);
    else if (in->ew == IR_MUL) fprintf(o, "v%d = (%s)((uint64_t)v%d * (uint64_t)v%d);\n", in->a, ctype(d), in->a, in->b);
    else if (is_f(d)) fprintf(o, "v%d = (%s)tjit_%s(v%d, v%d);\n", in->a, ctype(d), in->ew == IR_MAX ? "max" : "min", in->a, in->b);
    else if (d == JIT_BOOL) fprintf(o, "v%d %s= v%d;\n", in->a, in->ew == IR_MIN ? "&" : "|", in->b);
    else if (in->ew == IR_ADD) fprintf(o, "v%d = (%s)((uint64_t)v%d + (uint64_t)v%d);\n", in->a, ctype(d), in->a, in->b);
    else fprintf(o, "v%d = v%d %s v%d ? v%d : v%d;\n", in->a, in->b, in->ew == IR_MAX ? ">" : "<", in->a, in->b, in->a);
    return;
  case LP_ACC_GET:
    fprintf(o, "%s v%d = ", ctype(d), id);
    open_round(w, d);
    fprintf(o, "v%d", in->a);
    close_round(w, d);
    fputs(";\n", o);
    return;
  case LP_FOR:
    fprintf(o, "for (int64_t v%d = 0; v%d < v%d; v%d++) {\n", in->b, in->b, in->a, in->b);
    put_block(w, in->body, depth + 1);
    indent(w, depth);
    fputs("}\n", o);
    return;
  case LP_QUOT:
    fprintf(o, "%s v%d = ", ctype(d), id);
    open_round(w, d);
    fprintf(o, "tjit_quot_%s(v%d, v%d, v%d)", d == JIT_F64 ? "f64" : "f32", in->a, in->b, in->c);
    close_round(w, d);
    fputs(";\n", o);
    return;
  case LP_MAG_BITS:
    if (in->in_dt == JIT_F64)
      fprintf(o, "uint64_t v%d = tjit_bits64(v%d) & UINT64_C(0x7fffffffffffffff);\n", id, in->a);
    else
      fprintf(o, "uint32_t v%d = tjit_bits(v%d) & 0x7fffffffu;\n", id, in->a);
    return;
  case LP_PREFETCH: /* a hint the C text leaves out (its address may lie past the buffer); not
                       live (mark_live), so not printed */
    fprintf(o, "/* a prefetch of b%d */\n", in->buf);
    return;
  default: fprintf(o, "/* ? */\n"); return;
  }
}

static void put_block(cw *w, int32_t block, int depth) {
  const lp_block *b = &w->lf->blocks[block];
  for (uint32_t i = 0; i < b->n; i++) put_ins(w, b->ins[i], depth);
}

/* Marks what a store, an accumulation or a loop needs; the rest would be unused variables. */
static void mark_live(const lp_func *lf, bool *live) {
  int32_t *stack = malloc((lf->n_ins ? lf->n_ins : 1) * 4 * sizeof *stack);
  uint32_t n = 0;
  if (!stack) {
    for (uint32_t i = 0; i < lf->n_ins; i++) live[i] = true;
    return;
  }
  for (uint32_t i = 0; i < lf->n_ins; i++) {
    lp_op op = lf->ins[i].op;
    if (op == LP_STORE || op == LP_ACC_ADD || op == LP_FOR) {
      live[i] = true;
      stack[n++] = (int32_t)i;
    }
  }
  while (n) {
    const lp_ins *in = &lf->ins[stack[--n]];
    int32_t ops[3] = {in->a, in->b, in->c};
    for (int k = 0; k < 3; k++) {
      int32_t x = ops[k];
      if (in->op == LP_FOR && k == 1) continue; /* its own variable */
      if (x >= 0 && !live[x]) {
        live[x] = true;
        stack[n++] = x;
      }
    }
  }
  free(stack);
}

jit_status lp_emit_c(const lp_func *lf, FILE *out) { return lp_emit_c_kernel(lf, false, out); }

jit_status lp_emit_c_kernel(const lp_func *lf, bool exported, FILE *out) {
  bool *live = calloc(lf->n_ins ? lf->n_ins : 1, sizeof *live);
  if (!live) return jit_error(JIT_ENOMEM, "codegen: out of memory");
  mark_live(lf, live);
  cw w = {lf, out, live, exported};
  fprintf(out, "%svoid %s(void *const *bufs, int64_t row_begin, int64_t row_end) {\n",
          exported ? "static " : "", lf->name);
  for (uint32_t i = 0; i < lf->n_bufs; i++) {
    bool rd = i < lf->n_reads;
    const char *t = stype(lf->buf_dt[i]);
    fprintf(out, "  %s%s *restrict b%u = (%s%s *)bufs[%u];\n", rd ? "const " : "", t, i,
            rd ? "const " : "", t, i);
  }
  for (uint32_t s = 0; s < lf->n_scratch; s++) /* row scratch (see lp_func) */
    fprintf(out, "  %s b%u[%lld];\n", stype(lf->scratch_dt[s]), lf->n_bufs + s,
            (long long)lf->scratch_len[s]);
  /* a read whose value folded away leaves its buffer unused */
  for (uint32_t i = 0; i < lf->n_reads; i++) {
    bool used = false;
    for (uint32_t k = 0; k < lf->n_ins && !used; k++)
      used = live[k] && lf->ins[k].op == LP_LOAD && lf->ins[k].buf == (int32_t)i;
    if (!used) fprintf(out, "  (void)b%u;\n", i);
  }
  put_block(&w, lf->entry, 1);
  fputs("  for (int64_t r = row_begin; r < row_end; r++) {\n", out);
  put_block(&w, lf->row, 2);
  fputs("  }\n}\n", out);
  free(live);
  if (ferror(out)) return jit_error(JIT_EIO, "codegen: writing C failed");
  return JIT_OK;
}
