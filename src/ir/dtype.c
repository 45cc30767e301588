/* dtype.c: dtype properties (from tjit.h's JIT_DTYPE_DEF table), 16-bit float conversions,
 * and reading/writing one element of a host buffer of any dtype as a double or an int64. */
#include <math.h>
#include <string.h>

#include "ir/ir.h"

static const char *const dtype_names[] = {
#define DTYPE_NAME(name, text, bytes) text,
    JIT_DTYPE_DEF(DTYPE_NAME)
#undef DTYPE_NAME
};
static const size_t dtype_sizes[] = {
#define DTYPE_SIZE(name, text, bytes) bytes,
    JIT_DTYPE_DEF(DTYPE_SIZE)
#undef DTYPE_SIZE
};
enum { N_DTYPES = sizeof dtype_sizes / sizeof dtype_sizes[0] };

bool ir_dtype_valid(jit_dtype d) { return (unsigned)d < N_DTYPES; }

size_t jit_dtype_size(jit_dtype d) { return ir_dtype_valid(d) ? dtype_sizes[d] : 0; }

const char *jit_dtype_name(jit_dtype d) { return ir_dtype_valid(d) ? dtype_names[d] : "?"; }

bool ir_dtype_is_float(jit_dtype d) {
  return d == JIT_F16 || d == JIT_BF16 || d == JIT_F32 || d == JIT_F64;
}

bool ir_dtype_is_int(jit_dtype d) {
  return d == JIT_I8 || d == JIT_U8 || d == JIT_I32 || d == JIT_I64 || d == JIT_U32 ||
         d == JIT_U64;
}

bool ir_dtype_is_complex(jit_dtype d) { return d == JIT_C64 || d == JIT_C128; }

jit_dtype ir_dtype_complex_part(jit_dtype d) {
  return d == JIT_C64 ? JIT_F32 : d == JIT_C128 ? JIT_F64 : d;
}

jit_dtype ir_dtype_complex_of(jit_dtype f) { return f == JIT_F64 ? JIT_C128 : JIT_C64; }

bool ir_dtype_is_unsigned(jit_dtype d) { return d == JIT_U8 || d == JIT_U32 || d == JIT_U64; }

bool ir_dtype_parse(const char *s, size_t n, jit_dtype *out) {
  for (unsigned i = 0; i < N_DTYPES; i++) {
    if (strlen(dtype_names[i]) == n && memcmp(s, dtype_names[i], n) == 0) {
      *out = (jit_dtype)i;
      return true;
    }
  }
  return false;
}

/* ---- 16-bit floats ------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

float ir_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    /* zero or subnormal: m * 2^-24 is exact in f32 */
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, NaN (payload kept) */
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t ir_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {
    if (a == 0x7f800000u) return sign | 0x7c00;
    return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN stays a (quiet) NaN */
  }
  if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds past the largest f16 */
  if (a < 0x38800000u) {
    /* below 2^-14: an f16 subnormal in units of 2^-24, rounded to nearest even */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    if (e == 0 || shift > 24) return sign; /* < 2^-25 (or exactly 2^-25: ties to even 0) */
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t v = a - (112u << 23); /* rebias the exponent from 127 to 15 */
  uint32_t r = v >> 13, rem = v & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; /* a carry into the exponent is right */
  return (uint16_t)(sign | r);
}

uint16_t ir_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1); /* round to nearest even; overflows into inf correctly */
  return (uint16_t)(x >> 16);
}

/* ---- elements of host buffers ---------------------------------------------------------------- */

double ir_load_f64(jit_dtype d, const void *buf, int64_t i) {
  switch (d) {
  case JIT_BOOL: return ((const uint8_t *)buf)[i] != 0;
  case JIT_I8: return ((const int8_t *)buf)[i];
  case JIT_U8: return ((const uint8_t *)buf)[i];
  case JIT_I32: return ((const int32_t *)buf)[i];
  case JIT_I64: return (double)((const int64_t *)buf)[i];
  case JIT_U32: return ((const uint32_t *)buf)[i];
  case JIT_U64: return (double)((const uint64_t *)buf)[i];
  case JIT_F16: return ir_f16_to_f32(((const uint16_t *)buf)[i]);
  case JIT_BF16: return ir_bf16_to_f32(((const uint16_t *)buf)[i]);
  case JIT_F32: return ((const float *)buf)[i];
  case JIT_F64: return ((const double *)buf)[i];
  /* a complex element read as a real one is its real part (JAX's astype to a real dtype) */
  case JIT_C64: return ((const float *)buf)[2 * i];
  case JIT_C128: return ((const double *)buf)[2 * i];
  }
  return 0;
}

/* Truncates toward zero, saturating at [lo, hi]; NaN -> 0. Avoids the undefined behaviour of
   casting an out-of-range double to an integer type. */
static int64_t saturate(double v, int64_t lo, int64_t hi) {
  if (isnan(v)) return 0;
  if (v <= (double)lo) return lo;
  if (v >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: anything below it casts fine */
  return (int64_t)v;
}

/* saturate's u64 twin (truncation toward zero, NaN -> 0), as the bits of an int64. */
static int64_t saturate_u64(double v) {
  if (!(v > 0)) return 0;
  if (v >= 0x1p64) return -1;
  uint64_t u = (uint64_t)v;
  return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)~u - 1;
}

int64_t ir_load_i64(jit_dtype d, const void *buf, int64_t i) {
  switch (d) {
  case JIT_BOOL: return ((const uint8_t *)buf)[i] != 0;
  case JIT_I8: return ((const int8_t *)buf)[i];
  case JIT_U8: return ((const uint8_t *)buf)[i];
  case JIT_I32: return ((const int32_t *)buf)[i];
  case JIT_I64: return ((const int64_t *)buf)[i];
  case JIT_U32: return ((const uint32_t *)buf)[i];
  case JIT_U64: {
    int64_t v;
    memcpy(&v, (const uint64_t *)buf + i, sizeof v);
    return v;
  }
  case JIT_F16:
  case JIT_BF16:
  case JIT_F32:
  case JIT_F64:
  case JIT_C64:
  case JIT_C128: return saturate(ir_load_f64(d, buf, i), INT64_MIN, INT64_MAX);
  }
  return 0;
}

void ir_store_f64(jit_dtype d, void *buf, int64_t i, double v) {
  switch (d) {
  case JIT_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
  case JIT_I8: ((int8_t *)buf)[i] = (int8_t)saturate(v, INT8_MIN, INT8_MAX); break;
  case JIT_U8: ((uint8_t *)buf)[i] = (uint8_t)saturate(v, 0, UINT8_MAX); break;
  case JIT_I32: ((int32_t *)buf)[i] = (int32_t)saturate(v, INT32_MIN, INT32_MAX); break;
  case JIT_I64: ((int64_t *)buf)[i] = saturate(v, INT64_MIN, INT64_MAX); break;
  case JIT_U32: ((uint32_t *)buf)[i] = (uint32_t)saturate(v, 0, UINT32_MAX); break;
  case JIT_U64: ((uint64_t *)buf)[i] = (uint64_t)saturate_u64(v); break;
  case JIT_F16: ((uint16_t *)buf)[i] = ir_f32_to_f16((float)v); break;
  case JIT_BF16: ((uint16_t *)buf)[i] = ir_f32_to_bf16((float)v); break;
  case JIT_F32: ((float *)buf)[i] = (float)v; break;
  case JIT_F64: ((double *)buf)[i] = v; break;
  /* a real value stored as a complex element is (v, 0) */
  case JIT_C64: ((float *)buf)[2 * i] = (float)v; ((float *)buf)[2 * i + 1] = 0; break;
  case JIT_C128: ((double *)buf)[2 * i] = v; ((double *)buf)[2 * i + 1] = 0; break;
  }
}

void ir_store_i64(jit_dtype d, void *buf, int64_t i, int64_t v) {
  switch (d) {
  case JIT_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
  /* wrap: through the unsigned type, then the narrowing GCC and Clang define as modular */
  case JIT_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
  case JIT_U8: ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)v; break;
  case JIT_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case JIT_I64: ((int64_t *)buf)[i] = v; break;
  case JIT_U32: ((uint32_t *)buf)[i] = (uint32_t)(uint64_t)v; break;
  case JIT_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  /* int64 -> float directly: one rounding, not two through double */
  case JIT_F16: ((uint16_t *)buf)[i] = ir_f32_to_f16((float)v); break;
  case JIT_BF16: ((uint16_t *)buf)[i] = ir_f32_to_bf16((float)v); break;
  case JIT_F32: ((float *)buf)[i] = (float)v; break;
  case JIT_F64: ((double *)buf)[i] = (double)v; break;
  case JIT_C64:
  case JIT_C128: ir_store_f64(d, buf, i, (double)v); break;
  }
}
