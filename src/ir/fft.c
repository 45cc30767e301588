/* fft.c: FFT (lax.fft): its type rule and its evaluation, a plan of fft_engine.c made and run on
 * one thread (the interpreter's semantics; the runtime keeps the plan and splits its passes over
 * threads). See ir_fft in ir.h. */
#include <stdlib.h>

#include "ir/ir.h"
#include "runtime/error.h"

#define FAIL(s, ...) ir_type_fail(why, why_n, s, __VA_ARGS__)

const char *const ir_fft_type_name[4] = {"fft", "ifft", "rfft", "irfft"};

/* t's dims as the complex array it stands for: without the pair axis when pairs. */
static bool logical(const ir_type *t, bool cx, bool pairs, ir_type *out) {
  *out = *t;
  if (!cx || !pairs) return true;
  if (t->rank < 1 || t->dims[t->rank - 1] != 2) return false;
  out->rank--;
  out->dtype = ir_dtype_complex_of(t->dtype);
  return true;
}

static bool is_real_float(jit_dtype d) { return d == JIT_F32 || d == JIT_F64; }

jit_status ir_infer_fft(const ir_type *x, const ir_fft *a, ir_type *out, char *why, size_t why_n) {
  int nd = a->n_dims;
  if (a->type > IR_IRFFT_C2R || a->pairs > 1)
    return FAIL(JIT_EINVAL, "type %u pairs %u out of range", a->type, a->pairs);
  if (nd < 1 || nd > IR_FFT_MAX_DIMS)
    return FAIL(JIT_EINVAL, "n_dims %d: an FFT runs over the last 1 to %d dims", nd, IR_FFT_MAX_DIMS);
  for (int i = 0; i < nd; i++)
    if (a->lengths[i] < 1) return FAIL(JIT_EINVAL, "fft length %lld: lengths are >= 1", (long long)a->lengths[i]);
  bool real_in = a->type == IR_RFFT_R2C, real_out = a->type == IR_IRFFT_C2R;
  ir_type lx;
  if (!logical(x, !real_in, a->pairs, &lx))
    return FAIL(JIT_ESHAPE, "a pair array needs a last dim of 2, got rank %d", x->rank);
  /* the operand's dtype: real f32/f64 for RFFT, complex otherwise (pairs: their parts) */
  bool dt_ok = real_in || a->pairs ? is_real_float(x->dtype) : ir_dtype_is_complex(x->dtype);
  if (!dt_ok)
    return FAIL(JIT_EDTYPE, "%s needs a %s operand, got %s", ir_fft_type_name[a->type],
                real_in ? "f32 or f64" : a->pairs ? "f32 or f64 pair array" : "c64 or c128",
                jit_dtype_name(x->dtype));
  if (lx.rank < nd)
    return FAIL(JIT_ESHAPE, "an FFT over %d dims needs an operand of rank >= %d, got rank %d", nd, nd, lx.rank);
  int64_t n = a->lengths[nd - 1], last = real_out ? n / 2 + 1 : n;
  for (int i = 0; i < nd; i++) {
    int64_t want = i == nd - 1 ? last : a->lengths[i], got = lx.dims[lx.rank - nd + i];
    if (got != want)
      return FAIL(JIT_ESHAPE, "operand dim %d is %lld, the fft lengths need %lld%s", lx.rank - nd + i,
                  (long long)got, (long long)want, real_out && i == nd - 1 ? " (n / 2 + 1)" : "");
  }
  ir_type lo = lx;
  if (real_in) lo.dims[lo.rank - 1] = n / 2 + 1, lo.dtype = ir_dtype_complex_of(lx.dtype);
  if (real_out) lo.dims[lo.rank - 1] = n, lo.dtype = ir_dtype_complex_part(lx.dtype);
  *out = lo;
  if (a->pairs && !real_out) {
    out->dtype = ir_dtype_complex_part(lo.dtype);
    if (out->rank >= IR_MAX_RANK) return FAIL(JIT_ESHAPE, "the pair axis exceeds rank %d", IR_MAX_RANK);
    out->dims[out->rank++] = 2;
  }
  return JIT_OK;
}

jit_status ir_fft_eval(const ir_fft *a, const ir_type *xt, const void *x, const ir_type *ot, void *out) {
  ir_fft_plan *p = NULL;
  jit_status st = ir_fft_plan_new(a, xt, ot, &p);
  if (st != JIT_OK) return st;
  size_t tb = (ir_fft_plan_tmp_bytes(p) + 63) / 64 * 64;
  unsigned char *tmp = aligned_alloc(64, tb + ir_fft_plan_scratch_bytes(p));
  if (!tmp) st = jit_error(JIT_ENOMEM, "fft: out of memory");
  for (int k = 0; st == JIT_OK && k < ir_fft_plan_passes(p); k++) ir_fft_plan_run(p, k, x, out, tmp, tmp + tb, 0, 1);
  free(tmp);
  ir_fft_plan_free(p);
  return st;
}
