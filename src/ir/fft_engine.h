/* fft_engine.h: one-dimensional complex FFTs of any length on batches of lanes, the engine under
 * FFT (fft.c). Data are split (re[], im[]) arrays laid out [i][v]: element i of lane v at i*V + v,
 * so every butterfly's inner loop runs over S = stride * V contiguous values and vectorizes. */
#ifndef TJIT_IR_FFT_ENGINE_H
#define TJIT_IR_FFT_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

/* A plan for one length n in one precision (float or double): Stockham autosort stages of
   radix 4, 2 and small odd primes (generic butterflies), or Bluestein's chirp-z through a
   power-of-two plan when n has a prime factor above FFT_MAX_RADIX. Immutable once made: any
   number of threads may run one plan at once. */
typedef struct fft_len fft_len;
#define FFT_MAX_RADIX 31

fft_len *fft_len_new(int64_t n, bool dbl); /* NULL on OOM */
void fft_len_free(fft_len *p);
/* Elements per lane each of run's four buffers holds (n, or Bluestein's padded length). */
int64_t fft_len_work(const fft_len *p);
/* The unscaled DFT (inverse: exponent sign +) of V lanes in re/im ([n][V]); s0, s1 scratch. All
   four hold fft_len_work(p) * V elements of the plan's precision; V is a multiple of
   32 / sizeof(element) (whole 32-byte vectors). The result is in re/im. */
void fft_len_run(const fft_len *p, int64_t V, void *re, void *im, void *s0, void *s1, bool inverse);

#endif /* TJIT_IR_FFT_ENGINE_H */
