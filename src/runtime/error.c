/* error.c: status names and the thread-local last-error message. */
#include "runtime/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[2048];

jit_status jit_error(jit_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return s;
}

void jit_error_clear(void) { last_error[0] = '\0'; }

const char *jit_last_error(void) { return last_error; }

const char *jit_status_str(jit_status s) {
  switch (s) {
#define STATUS_CASE(name, msg) \
  case name:                   \
    return msg;
    JIT_STATUS_DEF(STATUS_CASE)
#undef STATUS_CASE
  }
  return "unknown status";
}
