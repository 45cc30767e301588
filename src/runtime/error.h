/* error.h: the thread's last error message, set once where a failure happens.
 * Every layer reports through jit_error(); jit_last_error() (tjit.h) reads it back. */
#ifndef TJIT_ERROR_H
#define TJIT_ERROR_H

#include "tjit.h"

#if defined(__GNUC__)
#define JIT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define JIT_PRINTF(a, b)
#endif

/* Formats the message into this thread's last-error buffer and returns s (so that
   `return jit_error(JIT_ESHAPE, "...", ...);` reads naturally). */
jit_status jit_error(jit_status s, const char *fmt, ...) JIT_PRINTF(2, 3);
void jit_error_clear(void);

/* Propagate a failing status to the caller's `fail:` label. */
#define TRY(expr)                       \
  do {                                  \
    jit_status try_st_ = (expr);        \
    if (try_st_ != JIT_OK) {            \
      st = try_st_;                     \
      goto fail;                        \
    }                                   \
  } while (0)

#endif /* TJIT_ERROR_H */
