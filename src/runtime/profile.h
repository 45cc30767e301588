/* profile.h: the profiler's recording side, included by every layer that has a span to report
 * (a base like error.h: it depends on nothing). Spans go to a buffer of the recording thread,
 * appended without locks; jit_profile_stop (profile.c) merges every thread's buffer into one
 * Chrome trace-event JSON file. When no profile runs, a site costs one relaxed load and a branch. */
#ifndef TJIT_PROFILE_H
#define TJIT_PROFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Nonzero while a profile records (jit_profile_start .. stop, or the whole process under
   $TJIT_PROFILE). Read through prof_begin; written only by profile.c. */
extern atomic_int prof_active;

/* The monotonic clock in nanoseconds (never 0). */
uint64_t prof_clock(void);

/* A span's start: its time when a profile records, else 0 (and prof_end then records nothing). */
static inline uint64_t prof_begin(void) {
  if (__builtin_expect(!atomic_load_explicit(&prof_active, memory_order_relaxed), 1)) return 0;
  return prof_clock();
}

/* One argument of an event: str when non-NULL (copied), else num. key must be a string literal. */
typedef struct prof_arg {
  const char *key;
  const char *str;
  int64_t num;
} prof_arg;

#define PROF_MAX_ARGS 4
/* Events kept per thread (later ones are counted as dropped): $TJIT_PROFILE_MAX_EVENTS when
   set to a number in 1..PROF_MAX_EVENTS, read when a profile starts, else PROF_MAX_EVENTS. */
#define PROF_MAX_EVENTS (1u << 20)

/* Records the span [t0, now) on this thread: cat must be a string literal, name is copied, at most
   PROF_MAX_ARGS args. Nothing when t0 is 0 (the span began while no profile ran). */
void prof_end(uint64_t t0, const char *cat, const char *name, int n_args, const prof_arg *args);

/* Names this thread in the trace as "role index" (role a string literal), unless it already has
   a name: the first role claimed wins, so the host thread that runs device 0 stays the host. */
void prof_name_thread(const char *role, int index);

/* The context count that drives $TJIT_PROFILE: the first context created starts the process's
   profile, the last destroyed writes it; a profile started on a context stops with it. */
void prof_ctx_created(const void *ctx);
void prof_ctx_destroyed(const void *ctx);

#endif /* TJIT_PROFILE_H */
