/* exec_fft.c: the compiled form of FFT: its plan (twiddles, four-step tables) made once when the
 * signature is built, and each call's passes split over the pool's threads (ir/fft_engine.c). */
#include "ir/ir.h"
#include "runtime/exec_internal.h"
#include "runtime/pool.h"

static size_t aligned(size_t n) { return (n + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN; }

jit_status exec_fft_plan(const ir_func *f, const ir_ins *in, int n_threads, ir_fft_plan **plan,
                         size_t *scratch_bytes) {
  jit_status st = ir_fft_plan_new(&in->attr.fft, ir_type_of(f, in->args[0]), &f->types[in->ty], plan);
  if (st != JIT_OK) return st;
  *scratch_bytes = aligned(ir_fft_plan_tmp_bytes(*plan)) +
                   (size_t)(n_threads > 0 ? n_threads : 1) * aligned(ir_fft_plan_scratch_bytes(*plan));
  return JIT_OK;
}

typedef struct fft_job {
  const estep *s;
  int pass;
  const void *x;
  void *out, *tmp;
  unsigned char *scratch; /* thread ith's block at ith * block */
  size_t block;
} fft_job;

static void run_share(void *arg, int ith, int nth) {
  const fft_job *j = arg;
  ir_fft_plan_run(j->s->fft, j->pass, j->x, j->out, j->tmp, j->scratch + (size_t)ith * j->block, ith, nth);
}

void exec_run_fft(const estep *s, void *const *bufs, struct pool *pl, int nth) {
  const ir_fft_plan *p = s->fft;
  unsigned char *sc = bufs[2];
  fft_job j = {s, 0, bufs[0], bufs[1], sc, sc + aligned(ir_fft_plan_tmp_bytes(p)),
               aligned(ir_fft_plan_scratch_bytes(p))};
  for (j.pass = 0; j.pass < ir_fft_plan_passes(p); j.pass++) {
    int64_t units = ir_fft_plan_units(p, j.pass);
    int n = units < nth ? (int)units : nth;
    if (pl && n > 1) pool_run(pl, run_share, &j, n);
    else run_share(&j, 0, 1);
  }
}
