/* ops_fft.c: jit_fft, lax.fft over the last 1 to 3 dims (the FFT op; its rule is in ir/fft.c). */
#include "trace/trace_internal.h"

jit_val jit_fft(jit_trace *t, jit_val x, jit_fft_type type, int n_dims, const int64_t *lengths) {
  op_ctx c;
  if (!op_begin(t, "fft", &c)) return (jit_val){0};
  ir_ref r = op_typed(&c, x, "operand");
  if (r == IR_NOREF) return (jit_val){0};
  if ((unsigned)type > JIT_IRFFT) {
    op_fail(&c, JIT_EINVAL, "type %d is none of JIT_FFT, JIT_IFFT, JIT_RFFT, JIT_IRFFT", (int)type);
    return (jit_val){0};
  }
  if (n_dims < 1 || n_dims > IR_FFT_MAX_DIMS || !lengths) {
    op_fail(&c, JIT_EINVAL, "n_dims %d: an fft runs over the last 1 to %d dims, with one length each",
            n_dims, IR_FFT_MAX_DIMS);
    return (jit_val){0};
  }
  ir_attr a = {0};
  a.fft.type = (uint8_t)type;
  a.fft.n_dims = (uint8_t)n_dims;
  for (int i = 0; i < n_dims; i++) a.fft.lengths[i] = lengths[i];
  return op_result(&c, op_emit(&c, IR_FFT, 1, &r, &a, NULL));
}
