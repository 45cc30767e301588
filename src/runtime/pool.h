/* pool.h: a fork-join thread pool in the ggml style: workers start once, a job runs
 * fn(arg, ith, nth) on nth threads (the caller is thread 0), idle workers sleep. */
#ifndef TJIT_POOL_H
#define TJIT_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tjit.h"

#define POOL_MAX_THREADS 4096 /* sanity bound on n_threads (a job's nth is packed in 16 bits) */

/* A job body. ith is 0..nth-1; ith 0 runs on the thread that called pool_run. A job cannot fail:
   a body that can fail stores its first error in arg (e.g. with a compare-exchange). */
typedef void (*pool_fn)(void *arg, int ith, int nth);

/* Opaque. No global state: any number of pools may exist side by side. */
typedef struct pool pool;

/* Starts n_threads - 1 workers (the calling thread of pool_run is worker 0), so n_threads == 1
   starts none. JIT_EINVAL for n_threads outside 1..POOL_MAX_THREADS, JIT_ENOMEM when memory
   runs out, JIT_EINTERNAL when a thread or a mutex cannot be created; on failure nothing is left
   running and *out is NULL. */
jit_status pool_create(int n_threads, pool **out);

/* Joins the workers and frees the pool. No pool_run may be in progress. NULL is a no-op. */
void pool_destroy(pool *p);

/* The n_threads the pool was created with. */
int pool_n_threads(const pool *p);

/* Runs fn(arg, ith, nth) for ith = 0..nth-1, each on its own thread, and returns when all have
   returned (their writes are then visible to the caller). nth is clamped to 1..n_threads.
   nth == 1 calls fn(arg, 0, 1) inline, with no synchronisation at all.
   Concurrency: host threads calling pool_run on the same pool at once are serialised (one job
   slot, guarded by a mutex): each job still gets all its threads, one job after the other.
   A body that calls pool_run on the pool running it (a nested job) does not deadlock: the nested
   job runs all its ith in turn on the calling thread. A body must not wait for another ith of
   its own job (there is no barrier; bodies share work through pool_chunk_next instead). */
void pool_run(pool *p, pool_fn fn, void *arg, int nth);

/* ---- chunks: dynamic work sharing inside a job -------------------------------------------------
   Set up once before pool_run (by the caller), then every thread calls pool_chunk_next until it
   returns false; each index range [lo, hi) of [begin, end) is handed out exactly once, in
   ascending order of lo, in pieces of `chunk` indices (the last one may be shorter). */
typedef struct pool_chunks {
  _Atomic int64_t next; /* first index not handed out yet (may run past end by nth * chunk) */
  int64_t end;          /* one past the last index */
  int64_t chunk;        /* indices per piece, >= 1 */
} pool_chunks;

/* begin <= end and chunk >= 1 (a smaller chunk is taken as 1). end must stay below
   INT64_MAX - chunk * (threads taking chunks), which no array index comes near. */
void pool_chunks_init(pool_chunks *c, int64_t begin, int64_t end, int64_t chunk);
/* The next piece [*lo, *hi), or false when all are handed out. Lock-free; any thread. */
bool pool_chunk_next(pool_chunks *c, int64_t *lo, int64_t *hi);

#endif /* TJIT_POOL_H */
